package gdn

import (
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// stepShape checks the lengths of a Step call (exact: B = len(in.B)/VHeads sequences) and that it
// has an output, and returns B.
func (l *Layer) stepShape(in Input, out Output) (int, error) {
	c := &l.c
	if len(in.B)%c.VHeads != 0 {
		return 0, fmt.Errorf("%w: Input.B has length %d, want a multiple of VHeads = %d", ErrShape, len(in.B), c.VHeads)
	}
	heads := len(in.B) // B·VHeads
	B := heads / c.VHeads
	if heads > math.MaxInt/(c.K*c.V) || B > math.MaxInt32-1 {
		return 0, fmt.Errorf("%w: Input.B has length %d: the state would not be addressable", ErrShape, heads)
	}
	kLen, vLen, sLen := B*c.KHeads*c.K, heads*c.V, heads*c.K*c.V
	lengths := [...]struct {
		name      string
		got, want int
		optional  bool // nil is allowed
	}{
		{"Input.Q", len(in.Q), kLen, false},
		{"Input.K", len(in.K), kLen, false},
		{"Input.V", len(in.V), vLen, false},
		{"Input.Z", len(in.Z), vLen, false},
		{"Input.A", len(in.A), B * l.gateWidth(), false},
		{"Input.State", len(in.State), sLen, false},
		{"Output.State", len(out.State), sLen, false},
		{"Output.Out", len(out.Out), vLen, out.Out == nil},
		{"Output.OutF32", len(out.OutF32), vLen, out.OutF32 == nil},
	}
	for _, f := range lengths {
		if f.got != f.want && !f.optional {
			return 0, fmt.Errorf("%w: %s has length %d, want %d (B = %d, KHeads = %d, VHeads = %d, K = %d, V = %d)",
				ErrShape, f.name, f.got, f.want, B, c.KHeads, c.VHeads, c.K, c.V)
		}
	}
	if B > 0 && out.Out == nil && out.OutF32 == nil {
		return 0, fmt.Errorf("%w: Output.Out and Output.OutF32 are both nil", ErrNoOutput)
	}
	return B, nil
}

// stepBatch sets v.step to a Step call of B sequences as the Batch it is: one token per sequence,
// sequence n reading slot n of in.State and storing to slot n of out.State (Start and Read in v's
// scratch, Store nil).
func (v *validator) stepBatch(in Input, out Output, B int) *Batch {
	if cap(v.start) < B+1 {
		v.start, v.read = make([]int32, B+1), make([]int32, B)
	}
	v.start, v.read = v.start[:B+1], v.read[:B]
	for n := range B {
		v.start[n], v.read[n] = int32(n), int32(n)
	}
	v.start[B] = int32(B)
	v.out = Pool{F32: out.State}
	v.step = Batch{
		Start: v.start, Read: v.read,
		Q: Rows{F32: in.Q}, K: Rows{F32: in.K}, V: Rows{F32: in.V}, Z: Rows{F32: in.Z}, B: Rows{F32: in.B}, A: Rows{F32: in.A},
		State: Pool{F32: in.State}, StoreTo: &v.out, Out: out.Out, OutF32: out.OutF32,
	}
	return &v.step
}

// stepNames turns the Batch fields Run's checks name into the Step fields they came from.
var stepNames = strings.NewReplacer(
	"Batch.Q.F32", "Input.Q", "Batch.K.F32", "Input.K", "Batch.V.F32", "Input.V", "Batch.Z.F32", "Input.Z",
	"Batch.B.F32", "Input.B", "Batch.A.F32", "Input.A", "Batch.StoreTo", "Output.State", "Batch.State", "Input.State",
	"Batch.OutF32", "Output.OutF32", "Batch.Out", "Output.Out",
)

// stepError is an error of Run's checks on a Step's Batch, in the Step's field names; it wraps
// what err wraps.
type stepError struct{ err error }

func (e stepError) Error() string { return stepNames.Replace(e.err.Error()) }
func (e stepError) Unwrap() error { return e.err }

// span is the memory a slice covers, [lo, hi).
type span struct {
	name   string
	lo, hi uintptr
}

func spanOf[T any](name string, s []T) span {
	if len(s) == 0 {
		return span{name: name}
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return span{name, lo, lo + uintptr(len(s))*unsafe.Sizeof(s[0])}
}

func (a span) overlaps(b span) bool { return a.lo < b.hi && b.lo < a.hi }
