package gdn_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/stretchr/testify/require"
)

// runFormat is one state format of a Layer (Config.StateLayout, Config.StateDType).
type runFormat struct {
	name   string
	layout gdn.StateLayout
	dtype  gdn.DType
	kda    bool // the equivalence tests' per-channel gate (equivConfig)
	conv   bool // the equivalence tests' conv front (equivConfig)
}

var runFormats = [...]runFormat{
	{"kv-f32", gdn.LayoutKV, gdn.DTypeF32, false, false}, {"vk-f32", gdn.LayoutVK, gdn.DTypeF32, false, false},
	{"kv-bf16", gdn.LayoutKV, gdn.DTypeBF16, false, false}, {"vk-bf16", gdn.LayoutVK, gdn.DTypeBF16, false, false},
}

func (f runFormat) implementedBy(kernel string) bool {
	k, ok := gdnsimd.Lookup(kernel)
	return ok && k.Implements(gdnsimd.Format{VK: f.layout == gdn.LayoutVK, Storage: f.dtype})
}

// forEachKernelFormat runs f as subtest kernel=K/format=F for every kernel × format, skipping
// (visibly) the cells a kernel does not implement. With -short (the race and the emulated legs of
// CI; the native legs run the whole matrix) only the formats' diagonal: kv-f32 and vk-bf16.
func forEachKernelFormat(t *testing.T, f func(t *testing.T, kernel string, rf runFormat)) {
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, rf := range runFormats {
			t.Run("format="+rf.name, func(t *testing.T) {
				if !rf.implementedBy(kernel) {
					t.Skipf("kernel %s does not implement format %s", kernel, rf.name)
				}
				if testing.Short() && (rf.layout == gdn.LayoutKV) != (rf.dtype == gdn.DTypeF32) {
					t.Skip("-short: the formats' diagonal (kv-f32, vk-bf16) only")
				}
				f(t, kernel, rf)
			})
		}
	})
}

// The NaN patterns outputs are pre-filled with (no kernel produces them).
const (
	runNaNF32  = 0x7fc0dead
	runNaNBF16 = 0x7fa1
)

// runSpec is the shape of a batch: tokens per sequence, read slots, stores (nil: Store nil) and
// the number of slots of the pool.
type runSpec struct {
	lens  []int
	read  []int32
	store []int32
	slots int
}

func (s runSpec) start() []int32 {
	st := make([]int32, len(s.lens)+1)
	for n, l := range s.lens {
		st[n+1] = st[n] + int32(l)
	}
	return st
}

// makeBatch builds a valid-shaped dense batch for c and s: random f32 rows, a random pool of c's
// storage type, both outputs pre-filled with the NaN pattern.
func makeBatch(c gdn.Config, s runSpec, seed uint64) *gdn.Batch {
	r := rand.New(rand.NewPCG(seed, 77))
	st := s.start()
	T := int(st[len(st)-1])
	b := &gdn.Batch{Start: st, Read: append([]int32(nil), s.read...)}
	if s.store != nil {
		b.Store = append([]int32{}, s.store...)
	}
	rows := func(w int, mean, sd float64) gdn.Rows {
		v := make([]float32, T*w)
		for i := range v {
			v[i] = float32(mean + sd*r.NormFloat64())
		}
		return gdn.Rows{F32: v}
	}
	hk, hv := c.KHeads*c.K, c.VHeads*c.V
	if c.ConvWidth != 0 {
		b.X, b.Z, b.B, b.A = rows(2*hk+hv, 0, 1), rows(hv, 0, 1), rows(c.VHeads, 0, 1), rows(gateW(c), -1, 1.5)
		b.ConvState = convPool(c, s.slots, 0, r)
	} else {
		b.Q, b.K, b.V, b.Z, b.B, b.A = rows(hk, 0, 1), rows(hk, 0, 1), rows(hv, 0, 1), rows(hv, 0, 1), rows(c.VHeads, 0, 1), rows(gateW(c), -1, 1.5)
	}
	b.State = errPool(c, s.slots, 0, r)
	b.Out, b.OutF32 = nanOutputs(T * hv)
	return b
}

// makePool is a pool of n slots (stride 0: dense) of c's storage type with values of a decode
// state's magnitude.
func errPool(c gdn.Config, n, stride int, r *rand.Rand) gdn.Pool {
	size := poolLen(n, stride, c.VHeads*c.K*c.V)
	v := make([]float32, size)
	for i := range v {
		v[i] = float32(0.3 * r.NormFloat64())
	}
	if c.StateDType == gdn.DTypeBF16 {
		p := gdn.Pool{BF16: make([]gdn.BF16, size), SlotStride: stride}
		for i, x := range v {
			p.BF16[i] = gdn.BF16FromFloat32(x)
		}
		return p
	}
	return gdn.Pool{F32: v, SlotStride: stride}
}

// poolLen is the length of a pool of n slots of slot elements, SlotStride stride (0: dense).
func poolLen(n, stride, slot int) int {
	if n == 0 {
		return 0
	}
	return (n-1)*cmp.Or(stride, slot) + slot
}

// convSlot is the size of a conv slot of c: (ConvWidth−1)·C.
func convSlot(c gdn.Config) int { return (c.ConvWidth - 1) * (2*c.KHeads*c.K + c.VHeads*c.V) }

// convPool is a conv pool of n slots (stride 0: dense) of pre-conv rows ~ N(0, 1), stored as c's
// state (bf16 with a bf16 state: the values are bf16 numbers).
func convPool(c gdn.Config, n, stride int, r *rand.Rand) gdn.Pool {
	size := poolLen(n, stride, convSlot(c))
	p := gdn.Pool{SlotStride: stride}
	if c.StateDType == gdn.DTypeBF16 {
		p.BF16 = make([]gdn.BF16, size)
		for i := range p.BF16 {
			p.BF16[i] = gdn.BF16FromFloat32(float32(r.NormFloat64()))
		}
		return p
	}
	p.F32 = make([]float32, size)
	for i := range p.F32 {
		p.F32[i] = float32(r.NormFloat64())
	}
	return p
}

func nanOutputs(n int) ([]gdn.BF16, []float32) {
	out, outF := make([]gdn.BF16, n), make([]float32, n)
	for i := range out {
		out[i], outF[i] = runNaNBF16, math.Float32frombits(runNaNF32)
	}
	return out, outF
}

// memOf is the memory of s as bytes.
func memOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// batchMem lists every slice of b by name (as bytes: aliased slices are listed once per name).
func batchMem(b *gdn.Batch) map[string][]byte {
	m := map[string][]byte{
		"Start": memOf(b.Start), "Read": memOf(b.Read), "Store": memOf(b.Store),
		"State.F32": memOf(b.State.F32), "State.BF16": memOf(b.State.BF16),
		"Out": memOf(b.Out), "OutF32": memOf(b.OutF32),
	}
	for _, f := range []struct {
		name string
		r    *gdn.Rows
	}{{"Q", &b.Q}, {"K", &b.K}, {"V", &b.V}, {"Z", &b.Z}, {"B", &b.B}, {"A", &b.A}, {"X", &b.X}} {
		m[f.name+".F32"], m[f.name+".BF16"] = memOf(f.r.F32), memOf(f.r.BF16)
	}
	if b.StoreTo != nil {
		m["StoreTo.F32"], m["StoreTo.BF16"] = memOf(b.StoreTo.F32), memOf(b.StoreTo.BF16)
	}
	m["ConvState.F32"], m["ConvState.BF16"] = memOf(b.ConvState.F32), memOf(b.ConvState.BF16)
	if b.ConvStoreTo != nil {
		m["ConvStoreTo.F32"], m["ConvStoreTo.BF16"] = memOf(b.ConvStoreTo.F32), memOf(b.ConvStoreTo.BF16)
	}
	return m
}

// snapshotBatch copies every slice of b.
func snapshotBatch(b *gdn.Batch) map[string][]byte {
	m := batchMem(b)
	for k, v := range m {
		m[k] = bytes.Clone(v)
	}
	return m
}

// requireUnchanged fails if any slice of b differs from the snapshot, naming it and the byte.
func requireUnchanged(t testing.TB, before map[string][]byte, b *gdn.Batch, what string) {
	t.Helper()
	for k, now := range batchMem(b) {
		if old := before[k]; !bytes.Equal(old, now) {
			i := 0
			for i < len(old) && i < len(now) && old[i] == now[i] {
				i++
			}
			t.Fatalf("%s: Batch.%s changed (first at byte %d of %d)", what, k, i, len(now))
		}
	}
}

// The small shape of the validation tests: widths 3 (q, k), 4 (v, z), 2 (b, a); slots of 12.
func errConfig(dt gdn.DType) gdn.Config {
	return gdn.Config{
		KHeads: 1, VHeads: 2, K: 3, V: 2, StateDType: dt,
		ALog: []float32{0.1, -0.3}, DtBias: []float32{0.5, 1}, NormWeight: []float32{1, 0.8},
	}
}

const (
	eSlot = 12 // VHeads·K·V
	eT    = 6  // tokens of the base batch
	eOut  = eT * 4
)

// errBase: 3 sequences of 2, 1, 3 tokens reading slots 0, 1, 2 of a 4-slot pool, Store nil.
func errBase(dt gdn.DType) *gdn.Batch {
	return makeBatch(errConfig(dt), runSpec{lens: []int{2, 1, 3}, read: []int32{0, 1, 2}, slots: 4}, 1)
}

// explicit sets an explicit Store.
func explicit(s ...int32) func(*gdn.Batch) {
	return func(b *gdn.Batch) { b.Store = s }
}

// moveInto makes field r share a buffer with a region covered by other slices: it copies r's data
// to buf[off:].
func moveInto(r *gdn.Rows, buf []float32, off int) {
	n := copy(buf[off:], r.F32)
	r.F32 = buf[off : off+n : off+n]
}

type runErrCase struct {
	name string
	mod  func(b *gdn.Batch)
	want error // nil: valid
	msgs []string
}

func runErrCases() []runErrCase {
	pool4 := 4 * eSlot
	return []runErrCase{
		// Rule 1: Start.
		{"Start/too long", func(b *gdn.Batch) { b.Start = append(b.Start, 6) }, gdn.ErrShape, []string{"Batch.Start has length 5", "N+1 = 4"}},
		{"Start/too short", func(b *gdn.Batch) { b.Start = b.Start[:3] }, gdn.ErrShape, []string{"Batch.Start has length 3", "N+1 = 4"}},
		{"Start/nil", func(b *gdn.Batch) { b.Start = nil }, gdn.ErrShape, []string{"Batch.Start has length 0"}},
		{"Start/not from 0", func(b *gdn.Batch) { b.Start = []int32{1, 2, 3, 6} }, gdn.ErrShape, []string{"Batch.Start[0] = 1"}},
		{"Start/negative first", func(b *gdn.Batch) { b.Start = []int32{-1, 2, 3, 6} }, gdn.ErrShape, []string{"Batch.Start[0] = -1"}},
		{"Start/decreasing", func(b *gdn.Batch) { b.Start = []int32{0, 3, 2, 6} }, gdn.ErrShape, []string{"Batch.Start[2] = 2", "Batch.Start[1] = 3"}},
		{"Start/decreasing last", func(b *gdn.Batch) { b.Start = []int32{0, 2, 3, 2} }, gdn.ErrShape, []string{"Batch.Start[3] = 2"}},
		// More tokens than every row holds is Start's error, not the first row's.
		{"Start/a token more than the rows hold", func(b *gdn.Batch) { b.Start = []int32{0, 2, 3, 7} }, gdn.ErrShape, []string{"Batch.Start[3] = 7 tokens, more than any row input holds", "Batch.Z has room for 6"}},
		{"Start/a token more, Q longer", func(b *gdn.Batch) { b.Start = []int32{0, 2, 3, 7}; b.Q.F32 = append(b.Q.F32, 0, 0, 0) }, gdn.ErrShape, []string{"Batch.Z has 24 elements"}},
		{"Start/equal entries valid", func(b *gdn.Batch) {
			b.Start = []int32{0, 3, 3, 6} // sequence 1 has no tokens: it does nothing
		}, nil, nil},
		// Rule 1: Store length.
		{"Store/short", explicit(-1, -1, -1, -1, -1), gdn.ErrShape, []string{"Batch.Store has length 5", "T = Batch.Start[N] = 6"}},
		{"Store/long", explicit(-1, -1, -1, -1, -1, -1, -1), gdn.ErrShape, []string{"Batch.Store has length 7"}},
		{"Store/empty not nil", func(b *gdn.Batch) { b.Store = []int32{} }, gdn.ErrShape, []string{"Batch.Store has length 0"}},
		// Rule 1: rows.
		{"Q/one short dense", func(b *gdn.Batch) { b.Q.F32 = b.Q.F32[:5*3+3-1] }, gdn.ErrShape, []string{"Batch.Q has 17 elements", "5·3 + 3"}},
		{"K/one short stride=width", func(b *gdn.Batch) { b.K.Stride = 3; b.K.F32 = b.K.F32[:17] }, gdn.ErrShape, []string{"Batch.K has 17 elements"}},
		{"V/one short strided", func(b *gdn.Batch) { b.V = gdn.Rows{F32: make([]float32, 5*6+4-1), Stride: 6} }, gdn.ErrShape, []string{"Batch.V has 33 elements", "5·6 + 4"}},
		{"V/exact strided valid", func(b *gdn.Batch) { b.V = gdn.Rows{F32: make([]float32, 5*6+4), Stride: 6} }, nil, nil},
		{"Z/exact stride=width valid", func(b *gdn.Batch) { b.Z.Stride = 4 }, nil, nil},
		{"B/one short bf16", func(b *gdn.Batch) { b.B = gdn.Rows{BF16: make([]gdn.BF16, 11)} }, gdn.ErrShape, []string{"Batch.B has 11 elements"}},
		{"B/exact bf16 valid", func(b *gdn.Batch) { b.B = gdn.Rows{BF16: make([]gdn.BF16, 12)} }, nil, nil},
		{"A/stride width-1", func(b *gdn.Batch) { b.A.Stride = 1 }, gdn.ErrShape, []string{"Batch.A.Stride = 1", "at least the width 2"}},
		{"A/stride negative", func(b *gdn.Batch) { b.A.Stride = -2 }, gdn.ErrShape, []string{"Batch.A.Stride = -2"}},
		{"Q/stride huge", func(b *gdn.Batch) { b.Q.Stride = math.MaxInt }, gdn.ErrShape, []string{"Batch.Q has 18 elements"}},
		{"Z/both dtypes", func(b *gdn.Batch) { b.Z.BF16 = make([]gdn.BF16, 24) }, gdn.ErrShape, []string{"Batch.Z: exactly one of F32 and BF16"}},
		{"K/no data", func(b *gdn.Batch) { b.K = gdn.Rows{} }, gdn.ErrShape, []string{"Batch.K: exactly one of F32 and BF16"}},
		{"rows/none with T=0 valid", func(b *gdn.Batch) {
			b.Start, b.Q, b.K, b.V, b.Z, b.B, b.A, b.Out, b.OutF32 = []int32{0, 0, 0, 0}, gdn.Rows{}, gdn.Rows{}, gdn.Rows{}, gdn.Rows{}, gdn.Rows{}, gdn.Rows{}, nil, nil
		}, nil, nil},
		// Rule 1: outputs.
		{"Out/short", func(b *gdn.Batch) { b.Out = b.Out[:eOut-1] }, gdn.ErrShape, []string{"Batch.Out has length 23", "T·VHeads·V = 24"}},
		{"Out/empty not nil", func(b *gdn.Batch) { b.Out = b.Out[:0] }, gdn.ErrShape, []string{"Batch.Out has length 0"}},
		{"OutF32/long", func(b *gdn.Batch) { b.OutF32 = append(b.OutF32, 0) }, gdn.ErrShape, []string{"Batch.OutF32 has length 25"}},
		{"Out/nil valid", func(b *gdn.Batch) { b.Out = nil }, nil, nil},
		{"OutF32/nil valid", func(b *gdn.Batch) { b.OutF32 = nil }, nil, nil},
		{"no output", func(b *gdn.Batch) { b.Out, b.OutF32 = nil, nil }, gdn.ErrNoOutput, []string{"Batch.Out and Batch.OutF32"}},
		// Rule 2: read slots.
		{"Read/slot = slots", func(b *gdn.Batch) { b.Read[1] = 4 }, gdn.ErrSlot, []string{"Batch.Read[1] = 4", "[0, 4)"}},
		{"Read/last slot valid", func(b *gdn.Batch) { b.Read[1] = 3 }, nil, nil},
		{"Read/-3", func(b *gdn.Batch) { b.Read[2] = -3 }, gdn.ErrSlot, []string{"Batch.Read[2] = -3"}},
		{"Read/huge", func(b *gdn.Batch) { b.Read[0] = math.MaxInt32 }, gdn.ErrSlot, []string{fmt.Sprintf("Batch.Read[0] = %d", math.MaxInt32)}},
		{"Read/out of range with 0 tokens", func(b *gdn.Batch) { b.Start = []int32{0, 2, 2, 6}; b.Read[1] = 4 }, gdn.ErrSlot, []string{"Batch.Read[1] = 4"}},
		// Rule 2: store slots.
		{"Store/slot = slots", explicit(-1, 0, 4, -1, -1, 2), gdn.ErrSlot, []string{"Batch.Store[2] = 4", "Batch.State"}},
		{"Store/last slot valid", explicit(-1, 0, 3, -1, -1, 2), nil, nil},
		{"Store/-2", explicit(-1, 0, -1, -2, -1, 2), gdn.ErrSlot, []string{"Batch.Store[3] = -2"}},
		{"Store/slot of StoreTo = its slots", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 2*eSlot)}
			b.Store = []int32{-1, 0, 2, -1, -1, 1} // 2 < slots of State, but StoreTo has 2
		}, gdn.ErrSlot, []string{"Batch.Store[2] = 2", "Batch.StoreTo"}},
		{"Store/implied to StoreTo out of range", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 2*eSlot)} // sequence 2 stores slot 2 of it
		}, gdn.ErrSlot, []string{"Batch.Read[2] = 2", "Batch.StoreTo"}},
		// Rule 2: pools.
		{"State/SlotStride slot-1", func(b *gdn.Batch) { b.State.SlotStride = eSlot - 1 }, gdn.ErrShape, []string{"Batch.State.SlotStride = 11", "VHeads·K·V = 12"}},
		{"State/SlotStride negative", func(b *gdn.Batch) { b.State.SlotStride = -12 }, gdn.ErrShape, []string{"Batch.State.SlotStride = -12"}},
		{"State/SlotStride bigger valid", func(b *gdn.Batch) {
			b.State = gdn.Pool{F32: make([]float32, 3*17+eSlot), SlotStride: 17} // 4 slots
			b.Read[1] = 3
		}, nil, nil},
		{"State/SlotStride bigger, slot = slots", func(b *gdn.Batch) {
			b.State = gdn.Pool{F32: make([]float32, 3*17+eSlot-1), SlotStride: 17} // 3 slots: the 4th is one short
			b.Read[1] = 3
		}, gdn.ErrSlot, []string{"Batch.Read[1] = 3", "[0, 3)"}},
		{"State/one element short of a slot", func(b *gdn.Batch) { b.State.F32 = b.State.F32[:eSlot-1] }, gdn.ErrShape, []string{"Batch.State has 11 elements"}},
		{"State/exactly one slot valid", func(b *gdn.Batch) {
			b.State.F32 = b.State.F32[:eSlot]
			b.Read = []int32{0, gdn.Pad, gdn.Zero}
			b.Store = []int32{-1, 0, -1, -1, -1, -1}
		}, nil, nil},
		{"State/exactly one slot, slot 1", func(b *gdn.Batch) { b.State.F32 = b.State.F32[:eSlot] }, gdn.ErrSlot, []string{"Batch.Read[1] = 1", "[0, 1)"}},
		{"State/nil", func(b *gdn.Batch) { b.State = gdn.Pool{} }, gdn.ErrShape, []string{"Batch.State: exactly one of F32 and BF16"}},
		{"State/both", func(b *gdn.Batch) { b.State.BF16 = make([]gdn.BF16, pool4) }, gdn.ErrShape, []string{"Batch.State: exactly one of F32 and BF16"}},
		{"State/bf16 on an f32 layer", func(b *gdn.Batch) { b.State = gdn.Pool{BF16: make([]gdn.BF16, pool4)} }, gdn.ErrShape, []string{"Batch.State.BF16 is set", "f32"}},
		{"StoreTo/bf16 on an f32 layer", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{BF16: make([]gdn.BF16, pool4)} }, gdn.ErrShape, []string{"Batch.StoreTo.BF16 is set"}},
		{"StoreTo/SlotStride slot-1", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{F32: make([]float32, pool4), SlotStride: 11} }, gdn.ErrShape, []string{"Batch.StoreTo.SlotStride = 11"}},
		{"StoreTo/empty", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{} }, gdn.ErrShape, []string{"Batch.StoreTo: exactly one"}},
		// Rule 3: a slot written twice.
		{"written twice/two sequences", explicit(-1, 3, 3, -1, -1, -1), gdn.ErrSlot, []string{"slot 3 written twice", "after token 1", "after token 2"}},
		{"written twice/one sequence", explicit(3, 3, -1, -1, -1, -1), gdn.ErrSlot, []string{"slot 3 written twice", "after token 0", "after token 1"}},
		{"written twice/implied", func(b *gdn.Batch) { b.Read[2] = 0 }, gdn.ErrSlot, []string{"slot 0 written twice", "implied"}},
		{"written twice/implied into StoreTo", func(b *gdn.Batch) {
			b.Read[2] = 0
			b.StoreTo = &gdn.Pool{F32: make([]float32, pool4)}
		}, gdn.ErrSlot, []string{"slot 0 written twice"}},
		{"written twice/StoreTo explicit", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, pool4)}
			b.Store = []int32{-1, 1, -1, -1, 1, -1}
		}, gdn.ErrSlot, []string{"slot 1 written twice"}},
		// Rule 4: a slot written by one sequence and read by another.
		{"write/read by another", explicit(-1, 1, -1, -1, -1, -1), gdn.ErrSlot, []string{"Batch.Read[1] = 1", "sequence 0 writes slot 1", "after token 1"}},
		{"write/read by an earlier one", explicit(-1, -1, -1, -1, 0, -1), gdn.ErrSlot, []string{"Batch.Read[0] = 0", "sequence 2 writes slot 0", "after token 4"}},
		{"write/StoreTo same slice: rule 4", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32, SlotStride: eSlot}
			b.Store = []int32{-1, 1, -1, -1, -1, -1}
		}, gdn.ErrSlot, []string{"Batch.Read[1] = 1", "sequence 0 writes slot 1"}},
		{"write/read by a 0-token sequence valid", func(b *gdn.Batch) {
			b.Start = []int32{0, 3, 3, 6}
			b.Store = []int32{-1, -1, 1, -1, -1, -1}
		}, nil, nil},
		{"write/StoreTo distinct valid", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, pool4)}
			b.Store = []int32{-1, 1, 0, -1, -1, 2}
		}, nil, nil},
		{"write/several read a slot nobody writes valid", func(b *gdn.Batch) {
			b.Read = []int32{2, 2, 2}
			b.Store = []int32{0, -1, 1, -1, 3, -1}
		}, nil, nil},
		{"write/own read slot valid", func(b *gdn.Batch) { b.Store = []int32{0, -1, -1, -1, 2, 3} }, nil, nil},
		// Rule 5: padding and Zero.
		{"Pad/storing", func(b *gdn.Batch) { b.Read[2] = gdn.Pad; b.Store = []int32{-1, -1, -1, -1, 3, -1} }, gdn.ErrSlot, []string{"Batch.Store[4] = 3", "padding sequence 2"}},
		{"Pad/storing -2", func(b *gdn.Batch) { b.Read[0] = gdn.Pad; b.Store = []int32{-2, -1, -1, -1, -1, -1} }, gdn.ErrSlot, []string{"Batch.Store[0] = -2"}},
		{"Pad/Store nil valid", func(b *gdn.Batch) { b.Read[0] = gdn.Pad }, nil, nil},
		{"Pad/NoStore valid", func(b *gdn.Batch) { b.Read[0] = gdn.Pad; b.Store = []int32{-1, -1, 1, -1, -1, 2} }, nil, nil},
		{"Zero/Store nil", func(b *gdn.Batch) { b.Read[1] = gdn.Zero }, gdn.ErrSlot, []string{"Batch.Read[1] = Zero", "sequence 1"}},
		{"Zero/Store nil, 0 tokens valid", func(b *gdn.Batch) { b.Start = []int32{0, 2, 2, 6}; b.Read[1] = gdn.Zero }, nil, nil},
		{"Zero/explicit NoStores valid", func(b *gdn.Batch) { b.Read = []int32{gdn.Zero, gdn.Zero, 2}; b.Store = []int32{-1, -1, -1, -1, -1, -1} }, nil, nil},
		{"Zero/stored valid", func(b *gdn.Batch) { b.Read = []int32{gdn.Zero, gdn.Zero, 2}; b.Store = []int32{-1, 0, 1, 3, -1, 2} }, nil, nil},
		// Rule 6: overlaps.
		{"overlap/Out over OutF32", func(b *gdn.Batch) {
			b.Out = unsafe.Slice((*gdn.BF16)(unsafe.Pointer(&b.OutF32[eOut/2])), eOut)
		}, gdn.ErrOverlap, []string{"Batch.Out overlaps Batch.OutF32"}},
		{"overlap/OutF32 over Q by one element", func(b *gdn.Batch) {
			buf := make([]float32, 18+eOut-1)
			b.OutF32 = buf[17:]
			moveInto(&b.Q, buf, 0)
		}, gdn.ErrOverlap, []string{"Batch.OutF32 overlaps Batch.Q.F32"}},
		{"overlap/OutF32 adjacent to Q valid", func(b *gdn.Batch) {
			buf := make([]float32, 18+eOut)
			b.OutF32 = buf[18:]
			moveInto(&b.Q, buf, 0)
		}, nil, nil},
		{"overlap/Out over bf16 V", func(b *gdn.Batch) {
			buf := make([]gdn.BF16, 24+eOut)
			for i, x := range b.V.F32 {
				buf[i] = gdn.BF16FromFloat32(x)
			}
			b.V = gdn.Rows{BF16: buf[:24]}
			b.Out = buf[23 : 23+eOut]
		}, gdn.ErrOverlap, []string{"Batch.Out overlaps Batch.V.BF16"}},
		{"overlap/OutF32 is State", func(b *gdn.Batch) { b.OutF32 = b.State.F32[:eOut] }, gdn.ErrOverlap, []string{"Batch.OutF32 overlaps Batch.State"}},
		{"overlap/Out over StoreTo", func(b *gdn.Batch) {
			buf := make([]float32, pool4+eOut/2)
			b.StoreTo = &gdn.Pool{F32: buf[:pool4]}
			b.Out = unsafe.Slice((*gdn.BF16)(unsafe.Pointer(&buf[pool4-1])), eOut)
		}, gdn.ErrOverlap, []string{"Batch.Out overlaps Batch.StoreTo"}},
		{"overlap/OutF32 over Store", func(b *gdn.Batch) {
			buf := make([]float32, eOut+6)
			st := unsafe.Slice((*int32)(unsafe.Pointer(&buf[eOut])), 6)
			copy(st, []int32{-1, -1, -1, -1, -1, -1})
			b.Store = st
			b.OutF32 = buf[1 : eOut+1]
		}, gdn.ErrOverlap, []string{"Batch.OutF32 overlaps Batch.Store"}},
		{"overlap/StoreTo partially over State", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32[eSlot:]}
		}, gdn.ErrOverlap, []string{"Batch.StoreTo overlaps Batch.State"}},
		{"overlap/StoreTo same data, shorter", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32[:3*eSlot]}
		}, gdn.ErrOverlap, []string{"Batch.StoreTo overlaps Batch.State"}},
		{"overlap/StoreTo same slice, other SlotStride", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32, SlotStride: 13}
		}, gdn.ErrOverlap, []string{"Batch.StoreTo", "SlotStride (13, not 0)"}},
		{"overlap/StoreTo same slice valid", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{F32: b.State.F32, SlotStride: eSlot} }, nil, nil},
		{"overlap/StoreTo adjacent valid", func(b *gdn.Batch) {
			buf := make([]float32, 2*pool4)
			copy(buf, b.State.F32)
			b.State.F32, b.StoreTo = buf[:pool4], &gdn.Pool{F32: buf[pool4:]}
		}, nil, nil},
		{"overlap/State over V", func(b *gdn.Batch) {
			buf := make([]float32, pool4+23)
			copy(buf, b.State.F32)
			b.State.F32 = buf[:pool4]
			moveInto(&b.V, buf, pool4-1) // V's first element is the pool's last
		}, gdn.ErrOverlap, []string{"Batch.State overlaps Batch.V.F32"}},
		{"overlap/StoreTo over A", func(b *gdn.Batch) {
			buf := make([]float32, pool4+12)
			moveInto(&b.A, buf, 0)
			b.StoreTo = &gdn.Pool{F32: buf[11:][:pool4]}
		}, gdn.ErrOverlap, []string{"Batch.StoreTo overlaps Batch.A.F32"}},
		{"overlap/State over Read", func(b *gdn.Batch) {
			buf := make([]float32, pool4+3)
			copy(buf, b.State.F32)
			rd := unsafe.Slice((*int32)(unsafe.Pointer(&buf[pool4-1])), 3)
			copy(rd, []int32{0, 1, 2})
			b.State.F32, b.Read = buf[:pool4], rd
		}, gdn.ErrOverlap, []string{"Batch.State overlaps Batch.Read"}},
		{"overlap/StoreTo over Start", func(b *gdn.Batch) {
			buf := make([]float32, pool4+4)
			st := unsafe.Slice((*int32)(unsafe.Pointer(&buf[0])), 4)
			copy(st, b.Start)
			b.Start, b.StoreTo = st, &gdn.Pool{F32: buf[3:][:pool4]}
		}, gdn.ErrOverlap, []string{"Batch.StoreTo overlaps Batch.Start"}},
		{"overlap/rows overlapping each other valid", func(b *gdn.Batch) {
			buf := make([]float32, 60) // packed [q|k|b|a] rows of 10, k overlapping q, a overlapping b
			for i := range buf {
				buf[i] = float32(i%7) - 3
			}
			b.Q, b.K = gdn.Rows{F32: buf, Stride: 10}, gdn.Rows{F32: buf[2:], Stride: 10}
			b.B, b.A = gdn.Rows{F32: buf[6:], Stride: 10}, gdn.Rows{F32: buf[7:], Stride: 10}
			b.Z = b.V // z = v
		}, nil, nil},
	}
}

// TestRunErrors: every validation rule of SPEC Part B (1–7): an error wrapping the right
// sentinel, naming the field, position and value, and nothing written (pools, outputs pre-filled
// with a NaN pattern, inputs); and the valid boundary next to each rule.
func TestRunErrors(t *testing.T) {
	l, err := gdn.New(errConfig(gdn.DTypeF32))
	require.NoError(t, err)
	for _, tc := range runErrCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := errBase(gdn.DTypeF32)
			tc.mod(b)
			checkRunOutcome(t, l, b, tc.want, tc.msgs)
		})
	}
}

// checkRunOutcome runs b and holds the outcome to want: an error wrapping want with msgs in its
// text and nothing written, or (want nil) success.
func checkRunOutcome(t *testing.T, l *gdn.Layer, b *gdn.Batch, want error, msgs []string) {
	t.Helper()
	before := snapshotBatch(b)
	err := runNoPanic(l, b)
	if want == nil {
		require.NoError(t, err)
		checkPadOutputs(t, b)
		return
	}
	require.Error(t, err)
	require.True(t, errors.Is(err, want), "got %v, want %v", err, want)
	for _, m := range msgs {
		require.Contains(t, err.Error(), m)
	}
	requireUnchanged(t, before, b, fmt.Sprintf("Run returned %q", err))
}

// runNoPanic is l.Run(b), a panic turned into an error that wraps no sentinel.
func runNoPanic(l *gdn.Layer, b *gdn.Batch) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("Run panicked: %v", p)
		}
	}()
	return l.Run(b)
}

// checkPadOutputs: after a successful Run the outputs of padding tokens are +0 and every other
// output was written (no NaN pattern left).
func checkPadOutputs(t testing.TB, b *gdn.Batch) {
	t.Helper()
	N := len(b.Read)
	if N == 0 {
		return
	}
	T := int(b.Start[N])
	if T == 0 {
		return
	}
	w := max(len(b.Out), len(b.OutF32)) / T
	for n := range N {
		for tk := int(b.Start[n]); tk < int(b.Start[n+1]); tk++ {
			for i := tk * w; i < (tk+1)*w; i++ {
				if b.Out != nil {
					if b.Read[n] == gdn.Pad {
						require.Equal(t, gdn.BF16(0), b.Out[i], "Out[%d] of padding token %d", i, tk)
					} else {
						require.NotEqual(t, gdn.BF16(runNaNBF16), b.Out[i], "Out[%d] of token %d not written", i, tk)
					}
				}
				if b.OutF32 != nil {
					if b.Read[n] == gdn.Pad {
						require.Equal(t, uint32(0), math.Float32bits(b.OutF32[i]), "OutF32[%d] of padding token %d", i, tk)
					} else {
						require.NotEqual(t, uint32(runNaNF32), math.Float32bits(b.OutF32[i]), "OutF32[%d] of token %d not written", i, tk)
					}
				}
			}
		}
	}
}

// TestRunErrorsBF16Layer: the pool storage type must match Config.StateDType, for State and
// StoreTo; a valid bf16 pool runs (every format's default kernel).
func TestRunErrorsBF16Layer(t *testing.T) {
	l, err := gdn.New(errConfig(gdn.DTypeBF16))
	require.NoError(t, err)
	for _, tc := range []runErrCase{
		{"valid", func(b *gdn.Batch) {}, nil, nil},
		{"State f32", func(b *gdn.Batch) { b.State = gdn.Pool{F32: make([]float32, 4*eSlot)} }, gdn.ErrShape, []string{"Batch.State.F32 is set", "bf16"}},
		{"StoreTo f32", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)} }, gdn.ErrShape, []string{"Batch.StoreTo.F32 is set", "bf16"}},
		{"StoreTo bf16 valid", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{BF16: make([]gdn.BF16, 4*eSlot)} }, nil, nil},
		{"Out over State", func(b *gdn.Batch) { b.Out = b.State.BF16[eSlot : eSlot+eOut] }, gdn.ErrOverlap, []string{"Batch.Out overlaps Batch.State"}},
		{"StoreTo shifted by one", func(b *gdn.Batch) {
			buf := make([]gdn.BF16, 4*eSlot+1)
			copy(buf, b.State.BF16)
			b.State.BF16, b.StoreTo = buf[:4*eSlot], &gdn.Pool{BF16: buf[1:]}
		}, gdn.ErrOverlap, []string{"Batch.StoreTo overlaps Batch.State"}},
		{"Q rows bf16 over the pool", func(b *gdn.Batch) {
			b.Q = gdn.Rows{BF16: b.State.BF16[4*eSlot-18:]}
		}, gdn.ErrOverlap, []string{"Batch.State overlaps Batch.Q.BF16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := errBase(gdn.DTypeBF16)
			tc.mod(b)
			checkRunOutcome(t, l, b, tc.want, tc.msgs)
		})
	}
}

// TestRunNotFromNew: a zero-value Layer and a nil *Layer return ErrConfig (no panic); Run(nil)
// returns ErrShape.
func TestRunNotFromNew(t *testing.T) {
	b := errBase(gdn.DTypeF32)
	before := snapshotBatch(b)
	var zero gdn.Layer
	err := zero.Run(b)
	require.ErrorIs(t, err, gdn.ErrConfig)
	require.Contains(t, err.Error(), "not made by New")
	var nilLayer *gdn.Layer
	require.ErrorIs(t, nilLayer.Run(b), gdn.ErrConfig)
	require.ErrorIs(t, nilLayer.Run(nil), gdn.ErrConfig)
	requireUnchanged(t, before, b, "Run on a Layer not made by New")
	l, err := gdn.New(errConfig(gdn.DTypeF32))
	require.NoError(t, err)
	err = l.Run(nil)
	require.ErrorIs(t, err, gdn.ErrShape)
	require.Contains(t, err.Error(), "Run(nil)")
	require.NoError(t, l.Run(&gdn.Batch{Start: []int32{0}, State: gdn.Pool{F32: make([]float32, eSlot)}}), "N = 0")
	require.ErrorIs(t, l.Run(&gdn.Batch{Start: []int32{0}}), gdn.ErrShape, "N = 0 still needs a pool")
}

// TestRunErrorsEveryFormat: a sample of the rules, in every format with its default kernel (the
// validation is the Layer's, whatever its format).
func TestRunErrorsEveryFormat(t *testing.T) {
	for _, rf := range runFormats {
		t.Run("format="+rf.name, func(t *testing.T) {
			c := errConfig(rf.dtype)
			c.StateLayout = rf.layout
			l, err := gdn.New(c)
			require.NoError(t, err)
			for _, tc := range []runErrCase{
				{"valid", func(b *gdn.Batch) {}, nil, nil},
				{"Read = slots", func(b *gdn.Batch) { b.Read[1] = 4 }, gdn.ErrSlot, []string{"Batch.Read[1] = 4"}},
				{"written twice", explicit(-1, 3, 3, -1, -1, -1), gdn.ErrSlot, []string{"slot 3 written twice"}},
				{"rule 4", explicit(-1, 1, -1, -1, -1, -1), gdn.ErrSlot, []string{"Batch.Read[1] = 1"}},
				{"Pad storing", func(b *gdn.Batch) { b.Read[2] = gdn.Pad; b.Store = []int32{-1, -1, -1, -1, 3, -1} }, gdn.ErrSlot, []string{"Batch.Store[4] = 3"}},
				{"Zero lost", func(b *gdn.Batch) { b.Read[1] = gdn.Zero }, gdn.ErrSlot, []string{"Batch.Read[1] = Zero"}},
				{"Q short", func(b *gdn.Batch) { b.Q.F32 = b.Q.F32[:17] }, gdn.ErrShape, []string{"Batch.Q has 17"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					b := errBase(rf.dtype)
					tc.mod(b)
					checkRunOutcome(t, l, b, tc.want, tc.msgs)
				})
			}
		})
	}
}
