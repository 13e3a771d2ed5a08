package gdn

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
)

// check validates a Step call completely (before anything is written) and returns the kernel's
// view of it.
func (l *Layer) check(in Input, out Output) (gdnsimd.Step, error) {
	c := &l.c
	if len(in.B)%c.VHeads != 0 {
		return gdnsimd.Step{}, fmt.Errorf("%w: Input.B has length %d, want a multiple of VHeads = %d", ErrShape, len(in.B), c.VHeads)
	}
	heads := len(in.B) // B·VHeads
	B := heads / c.VHeads
	if heads > math.MaxInt/(c.K*c.V) {
		return gdnsimd.Step{}, fmt.Errorf("%w: Input.B has length %d: the state would not be addressable", ErrShape, heads)
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
			return gdnsimd.Step{}, fmt.Errorf("%w: %s has length %d, want %d (B = %d, KHeads = %d, VHeads = %d, K = %d, V = %d)",
				ErrShape, f.name, f.got, f.want, B, c.KHeads, c.VHeads, c.K, c.V)
		}
	}
	if B > 0 && out.Out == nil && out.OutF32 == nil {
		return gdnsimd.Step{}, fmt.Errorf("%w: Output.Out and Output.OutF32 are both nil", ErrNoOutput)
	}
	if err := checkOverlap(in, out); err != nil {
		return gdnsimd.Step{}, err
	}
	st := gdnsimd.Step{
		KHeads: c.KHeads, VHeads: c.VHeads, K: c.K, V: c.V, RMSEps: c.RMSEps,
		ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight,
		Q: in.Q, Key: in.K, Val: in.V, Z: in.Z, Beta: in.B, Gate: in.A,
		StateIn: in.State, StateOut: out.State, OutF32: out.OutF32,
	}
	if out.Out != nil {
		st.Out = unsafe.Slice((*uint16)(unsafe.SliceData(out.Out)), len(out.Out))
	}
	return st, nil
}

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

// checkOverlap allows Output.State to be the very same slice as Input.State and refuses every other
// overlap between an output and an input or another output.
func checkOverlap(in Input, out Output) error {
	outs := [...]span{spanOf("Output.State", out.State), spanOf("Output.Out", out.Out), spanOf("Output.OutF32", out.OutF32)}
	ins := [...]span{
		spanOf("Input.State", in.State), spanOf("Input.Q", in.Q), spanOf("Input.K", in.K), spanOf("Input.V", in.V),
		spanOf("Input.Z", in.Z), spanOf("Input.B", in.B), spanOf("Input.A", in.A),
	}
	for i, o := range outs {
		for _, x := range outs[i+1:] {
			if o.overlaps(x) {
				return fmt.Errorf("%w: %s overlaps %s", ErrOverlap, o.name, x.name)
			}
		}
		for j, x := range ins {
			if i == 0 && j == 0 && o == (span{o.name, x.lo, x.hi}) {
				continue // in place: the very same slice
			}
			if o.overlaps(x) {
				return fmt.Errorf("%w: %s overlaps %s (only Output.State may be the very same slice as Input.State)", ErrOverlap, o.name, x.name)
			}
		}
	}
	return nil
}
