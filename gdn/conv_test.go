package gdn_test

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/stretchr/testify/require"
)

// The conv front's validation: errConfig's shape with a conv of width 3 (C = 2·3 + 4 = 10
// channels, conv slots of 2·10 elements).
func errConvConfig(dt gdn.DType) gdn.Config {
	c := errConfig(dt)
	c.ConvWidth = 3
	c.ConvWeight = make([]float32, 3*10)
	for i := range c.ConvWeight {
		c.ConvWeight[i] = float32(i%5)*0.1 - 0.2
	}
	return c
}

const eConvSlot = 20 // (W−1)·C

// errConvBase is errBase with the conv front: X rows, a conv pool of 4 slots.
func errConvBase(dt gdn.DType) *gdn.Batch {
	return makeBatch(errConvConfig(dt), runSpec{lens: []int{2, 1, 3}, read: []int32{0, 1, 2}, slots: 4}, 1)
}

// TestConvConfigErrors: New refuses a bad conv front with ErrConfig.
func TestConvConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *gdn.Config)
		msg  string
	}{
		{"width 1", func(c *gdn.Config) { c.ConvWidth = 1; c.ConvWeight = c.ConvWeight[:10] }, "ConvWidth = 1"},
		{"width 9", func(c *gdn.Config) { c.ConvWidth = 9; c.ConvWeight = make([]float32, 90) }, "ConvWidth = 9"},
		{"width negative", func(c *gdn.Config) { c.ConvWidth = -3 }, "ConvWidth = -3"},
		{"weight short", func(c *gdn.Config) { c.ConvWeight = c.ConvWeight[:29] }, "Config.ConvWeight has length 29, want 30"},
		{"weight nil", func(c *gdn.Config) { c.ConvWeight = nil }, "Config.ConvWeight has length 0, want 30"},
		{"bias short", func(c *gdn.Config) { c.ConvBias = make([]float32, 9) }, "Config.ConvBias has length 9, want 10"},
		{"weight NaN", func(c *gdn.Config) { c.ConvWeight[7] = float32(math.NaN()) }, "Config.ConvWeight[7]"},
		{"bias Inf", func(c *gdn.Config) { c.ConvBias = make([]float32, 10); c.ConvBias[3] = float32(math.Inf(1)) }, "Config.ConvBias[3]"},
		{"weight without width", func(c *gdn.Config) { c.ConvWidth = 0 }, "ConvWidth is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := errConvConfig(gdn.DTypeF32)
			tc.mod(&c)
			_, err := gdn.New(c)
			require.ErrorIs(t, err, gdn.ErrConfig)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	c := errConvConfig(gdn.DTypeF32)
	l, err := gdn.New(c)
	require.NoError(t, err)
	c.ConvWeight[0] = 42 // the Layer holds its own copy
	require.NotEqual(t, float32(42), l.Config().ConvWeight[0])
	require.Equal(t, 3, l.Config().ConvWidth)
	err = l.Step(gdn.Input{}, gdn.Output{})
	require.ErrorIs(t, err, gdn.ErrUnsupported)
	require.Contains(t, err.Error(), "conv front")
}

// TestConvRunErrors: the rules of Run with the conv front (the rows, the conv pools: their sizes,
// slots and overlaps; the fields of a Layer without one): an error wrapping the sentinel, nothing
// written; and the valid boundary next to each.
func TestConvRunErrors(t *testing.T) {
	pool4 := 4 * eConvSlot
	cases := []runErrCase{
		{"valid", func(b *gdn.Batch) {}, nil, nil},
		{"X/bf16 valid", func(b *gdn.Batch) { b.X = toBF16Rows(b.X) }, nil, nil},
		{"X/one short", func(b *gdn.Batch) { b.X.F32 = b.X.F32[:5*10+9] }, gdn.ErrShape, []string{"Batch.X has 59 elements", "5·10 + 10"}},
		{"X/stride below C", func(b *gdn.Batch) { b.X.Stride = 9 }, gdn.ErrShape, []string{"Batch.X.Stride = 9", "width 10"}},
		{"X/missing", func(b *gdn.Batch) { b.X = gdn.Rows{} }, gdn.ErrShape, []string{"Batch.X: exactly one of F32 and BF16"}},
		{"Q/set with the conv front", func(b *gdn.Batch) { b.Q = gdn.Rows{F32: make([]float32, 18)} }, gdn.ErrUnsupported, []string{"Batch.Q is set", "conv front", "Batch.X"}},
		{"V/stride only", func(b *gdn.Batch) { b.V.Stride = 4 }, gdn.ErrUnsupported, []string{"Batch.V is set"}},
		{"ConvState/nil", func(b *gdn.Batch) { b.ConvState = gdn.Pool{} }, gdn.ErrShape, []string{"Batch.ConvState: exactly one of F32 and BF16"}},
		{"ConvState/both", func(b *gdn.Batch) { b.ConvState.BF16 = make([]gdn.BF16, pool4) }, gdn.ErrShape, []string{"Batch.ConvState: exactly one"}},
		{"ConvState/bf16 valid", func(b *gdn.Batch) { b.ConvState = gdn.Pool{BF16: make([]gdn.BF16, pool4)} }, nil, nil},
		{"ConvState/one short of a slot", func(b *gdn.Batch) { b.ConvState.F32 = b.ConvState.F32[:eConvSlot-1] }, gdn.ErrShape, []string{"Batch.ConvState has 19 elements", "(ConvWidth−1)·C = 20"}},
		{"ConvState/SlotStride slot-1", func(b *gdn.Batch) { b.ConvState.SlotStride = eConvSlot - 1 }, gdn.ErrShape, []string{"Batch.ConvState.SlotStride = 19"}},
		{"ConvState/3 slots: read slot 3", func(b *gdn.Batch) {
			b.ConvState.F32 = b.ConvState.F32[:3*eConvSlot]
			b.Read[1] = 3
		}, gdn.ErrSlot, []string{"Batch.Read[1] = 3", "[0, 3) of Batch.ConvState (Batch.State has 4)"}},
		{"ConvState/3 slots: store slot 3", func(b *gdn.Batch) {
			b.ConvState.F32 = b.ConvState.F32[:3*eConvSlot]
			b.Store = []int32{-1, 0, 3, -1, -1, 2}
		}, gdn.ErrSlot, []string{"Batch.Store[2] = 3", "[0, 3) of Batch.ConvState (Batch.State has 4)"}},
		{"ConvState/strided, 4 slots valid", func(b *gdn.Batch) {
			b.ConvState = gdn.Pool{F32: make([]float32, 3*23+eConvSlot), SlotStride: 23}
			b.Read[1] = 3
		}, nil, nil},
		{"ConvStoreTo/without StoreTo", func(b *gdn.Batch) { b.ConvStoreTo = &gdn.Pool{F32: make([]float32, pool4)} }, gdn.ErrUnsupported, []string{"Batch.StoreTo is nil and Batch.ConvStoreTo set"}},
		{"ConvStoreTo/missing with StoreTo", func(b *gdn.Batch) { b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)} }, gdn.ErrUnsupported, []string{"Batch.StoreTo is set and Batch.ConvStoreTo nil"}},
		{"ConvStoreTo/valid", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)}
			b.ConvStoreTo = &gdn.Pool{BF16: make([]gdn.BF16, pool4)}
		}, nil, nil},
		{"ConvStoreTo/2 slots: implied store to slot 2", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)}
			b.ConvStoreTo = &gdn.Pool{F32: make([]float32, 2*eConvSlot)}
		}, gdn.ErrSlot, []string{"Batch.Read[2] = 2", "implied store", "[0, 2) of Batch.ConvStoreTo (Batch.StoreTo has 4)"}},
		{"ConvStoreTo/same slice valid", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32}
			b.ConvStoreTo = &gdn.Pool{F32: b.ConvState.F32}
		}, nil, nil},
		{"ConvStoreTo/same slice, State out of place", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)}
			b.ConvStoreTo = &gdn.Pool{F32: b.ConvState.F32}
		}, gdn.ErrOverlap, []string{"both in place or both out of place"}},
		{"ConvStoreTo/same slice, other SlotStride", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32}
			b.ConvStoreTo = &gdn.Pool{F32: b.ConvState.F32, SlotStride: 21}
		}, gdn.ErrOverlap, []string{"SlotStride (21, not 0)"}},
		{"ConvStoreTo/partly over ConvState", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)}
			b.ConvStoreTo = &gdn.Pool{F32: b.ConvState.F32[1:]}
		}, gdn.ErrOverlap, []string{"Batch.ConvStoreTo overlaps Batch.ConvState"}},
		{"ConvState/over State", func(b *gdn.Batch) {
			buf := make([]float32, 4*eSlot+pool4-1)
			copy(buf, b.State.F32)
			b.State.F32, b.ConvState.F32 = buf[:4*eSlot], buf[4*eSlot-1:]
		}, gdn.ErrOverlap, []string{"Batch.ConvState overlaps Batch.State"}},
		{"ConvState/adjacent to State valid", func(b *gdn.Batch) {
			buf := make([]float32, 4*eSlot+pool4)
			copy(buf, b.State.F32)
			b.State.F32, b.ConvState.F32 = buf[:4*eSlot], buf[4*eSlot:]
		}, nil, nil},
		{"ConvState/over X", func(b *gdn.Batch) {
			buf := make([]float32, pool4+60)
			moveInto(&b.X, buf, pool4-1)
			b.ConvState.F32 = buf[:pool4]
		}, gdn.ErrOverlap, []string{"Batch.ConvState overlaps Batch.X.F32"}},
		{"ConvState/is OutF32", func(b *gdn.Batch) { b.OutF32 = b.ConvState.F32[:eOut] }, gdn.ErrOverlap, []string{"Batch.OutF32 overlaps Batch.ConvState"}},
		{"ConvStoreTo/over Out", func(b *gdn.Batch) {
			buf := make([]float32, pool4+eOut/2)
			b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)}
			b.ConvStoreTo = &gdn.Pool{F32: buf[:pool4]}
			b.Out = unsafe.Slice((*gdn.BF16)(unsafe.Pointer(&buf[pool4-1])), eOut)
		}, gdn.ErrOverlap, []string{"Batch.Out overlaps Batch.ConvStoreTo"}},
		{"ConvStoreTo/over StoreTo", func(b *gdn.Batch) {
			buf := make([]float32, 4*eSlot+pool4)
			b.StoreTo = &gdn.Pool{F32: buf[:4*eSlot]}
			b.ConvStoreTo = &gdn.Pool{F32: buf[4*eSlot-1:][:pool4]}
		}, gdn.ErrOverlap, []string{"Batch.ConvStoreTo overlaps Batch.StoreTo"}},
	}
	l, err := gdn.New(errConvConfig(gdn.DTypeF32))
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := errConvBase(gdn.DTypeF32)
			tc.mod(b)
			checkRunOutcome(t, l, b, tc.want, tc.msgs)
		})
	}
	// A Layer without the conv front refuses the conv front's fields.
	plain, err := gdn.New(errConfig(gdn.DTypeF32))
	require.NoError(t, err)
	for _, tc := range []runErrCase{
		{"X set", func(b *gdn.Batch) { b.X = gdn.Rows{F32: make([]float32, 60)} }, gdn.ErrUnsupported, []string{"Batch.X is set", "no conv front"}},
		{"ConvState set", func(b *gdn.Batch) { b.ConvState = gdn.Pool{F32: make([]float32, pool4)} }, gdn.ErrUnsupported, []string{"Batch.ConvState or ConvStoreTo is set"}},
		{"ConvStoreTo set", func(b *gdn.Batch) { b.ConvStoreTo = &gdn.Pool{} }, gdn.ErrUnsupported, []string{"no conv front"}},
	} {
		t.Run("no conv front/"+tc.name, func(t *testing.T) {
			b := errBase(gdn.DTypeF32)
			tc.mod(b)
			checkRunOutcome(t, plain, b, tc.want, tc.msgs)
		})
	}
}

// groupedBA lays b's B and A rows out as Qwen3-Next's in_proj_ba does: per token and k-head, the b
// of its G value heads, then their a (plus pad poisoned elements after each group pair), f32 or
// bf16; it returns B and A reading them in place.
func groupedBA(c gdn.Config, b *gdn.Batch, pad int, bf16 bool) (gdn.Rows, gdn.Rows) {
	T := int(b.Start[len(b.Read)])
	G := c.VHeads / c.KHeads
	gs := 2*G + pad
	stride := c.KHeads*gs + 1
	bs, as := denseF32(b.B, T, c.VHeads), denseF32(b.A, T, c.VHeads)
	buf := make([]float32, T*stride)
	for i := range buf {
		buf[i] = float32(math.NaN())
	}
	for t := range T {
		for h := range c.VHeads {
			at := t*stride + h/G*gs + h%G
			buf[at], buf[at+G] = bs[t*c.VHeads+h], as[t*c.VHeads+h]
		}
	}
	r := gdn.Rows{F32: buf, Stride: stride, Group: G, GroupStride: gs}
	if bf16 {
		r = toBF16Rows(r)
		r.Group, r.GroupStride = G, gs
	}
	a := r
	if bf16 {
		a.BF16 = r.BF16[G:]
	} else {
		a.F32 = r.F32[G:]
	}
	return r, a
}

// TestRunGroupedGateRows: B and A read in place from grouped [b…, a…] rows per k-head give the bits
// of dense B and A rows (f32 and bf16, groups packed or padded), every kernel × format, the scalar
// gate with and without the conv front; and the grouping's validation.
func TestRunGroupedGateRows(t *testing.T) {
	// The driver reads B and A the same way for every format: each kernel runs one format (the
	// first it implements), with and without the conv front, f32 rows packed and bf16 rows padded.
	s := equivSpecs()[0].s
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, rf := range runFormats {
			if !rf.implementedBy(kernel) {
				continue
			}
			for _, conv := range []bool{false, true} {
				rf.conv = conv
				c := equivConfig(kernel, rf, 1)
				l := mustLayer(t, c)
				for _, bf := range []bool{false, true} {
					pad := map[bool]int{false: 0, true: 3}[bf]
					dense := makeBatch(c, s, 9)
					if bf {
						dense.B, dense.A = toBF16Rows(dense.B), toBF16Rows(dense.A)
					}
					g := makeBatch(c, s, 9)
					g.B, g.A = groupedBA(c, dense, pad, bf)
					runOK(t, l, dense)
					runOK(t, l, g)
					requireSameResults(t, fmt.Sprintf("format %s, conv %v, bf16 %v, pad %d: grouped vs dense", rf.name, conv, bf, pad), dense, g)
				}
			}
			break
		}
	})
	l, err := gdn.New(errConfig(gdn.DTypeF32)) // VHeads 2, KHeads 1: one group of 2
	require.NoError(t, err)
	grouped := func(b *gdn.Batch) {
		b.B, b.A = groupedBA(errConfig(gdn.DTypeF32), b, 0, false)
	}
	for _, tc := range []runErrCase{
		{"valid", grouped, nil, nil},
		{"stride below the extent", func(b *gdn.Batch) { grouped(b); b.B.Stride = 1 }, gdn.ErrShape, []string{"Batch.B.Stride = 1", "extent of the row's groups 2"}},
		{"one short", func(b *gdn.Batch) { grouped(b); b.A.F32 = b.A.F32[:5*5+1] }, gdn.ErrShape, []string{"Batch.A has 26 elements", "5·5 + 2"}},
		{"group not dividing", func(b *gdn.Batch) { grouped(b); b.B.Group, b.B.GroupStride = 3, 4 }, gdn.ErrShape, []string{"Batch.B.Group = 3"}},
		{"group stride below group", func(b *gdn.Batch) { grouped(b); b.A.GroupStride = 1 }, gdn.ErrShape, []string{"Batch.A.Group = 2, GroupStride = 1"}},
		{"group negative", func(b *gdn.Batch) { b.B.Group, b.B.GroupStride = -1, 2 }, gdn.ErrShape, []string{"Batch.B.Group = -1"}},
		{"group stride alone", func(b *gdn.Batch) { b.B.GroupStride = 2 }, gdn.ErrShape, []string{"Batch.B.Group = 0, GroupStride = 2"}},
		{"group on Q", func(b *gdn.Batch) { b.Q.Group, b.Q.GroupStride = 1, 1 }, gdn.ErrUnsupported, []string{"Batch.Q.Group = 1", "only B and the scalar gate's A"}},
	} {
		t.Run("errors/"+tc.name, func(t *testing.T) {
			b := errBase(gdn.DTypeF32)
			tc.mod(b)
			checkRunOutcome(t, l, b, tc.want, tc.msgs)
		})
	}
	// The per-channel gate's A ([VHeads][K] per token) takes no Group; B still does.
	kc := errConfig(gdn.DTypeF32)
	kc.Gate, kc.DtBias = gdn.GatePerChannel, []float32{0.5, 1, -0.2, 0.3, 0.1, 0}
	kl, err := gdn.New(kc)
	require.NoError(t, err)
	for _, tc := range []runErrCase{
		{"per-channel: B grouped", func(b *gdn.Batch) { g, _ := groupedBA(errConfig(gdn.DTypeF32), b, 0, false); b.B = g }, nil, nil},
		{"per-channel: A grouped", func(b *gdn.Batch) { b.A.Group, b.A.GroupStride = 3, 3 }, gdn.ErrUnsupported, []string{"Batch.A.Group = 3", "only B and the scalar gate's A"}},
	} {
		t.Run("errors/"+tc.name, func(t *testing.T) {
			b := makeBatch(kc, runSpec{lens: []int{2, 1, 3}, read: []int32{0, 1, 2}, slots: 4}, 1)
			checkRunOutcome(t, kl, b, nil, nil)
			tc.mod(b)
			checkRunOutcome(t, kl, b, tc.want, tc.msgs)
		})
	}
}

// TestConvStoreToOtherType: a ConvStoreTo over ConvState's very bytes as the other storage type is
// not the same pool (stores would overwrite rows other stores still read): ErrOverlap, nothing
// written. ConvState's slice with SlotStride 0 and the slot size spelled out is the same pool.
func TestConvStoreToOtherType(t *testing.T) {
	l, err := gdn.New(errConvConfig(gdn.DTypeF32))
	require.NoError(t, err)
	for _, tc := range []runErrCase{
		{"bf16 view of the f32 conv pool", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: make([]float32, 4*eSlot)}
			f := b.ConvState.F32
			b.ConvStoreTo = &gdn.Pool{BF16: unsafe.Slice((*gdn.BF16)(unsafe.Pointer(&f[0])), 2*len(f))}
			b.Store = []int32{-1, 2, -1, -1, -1, 3}
		}, gdn.ErrOverlap, []string{"Batch.ConvStoreTo overlaps Batch.ConvState"}},
		{"same slice, SlotStride 0 and the slot size valid", func(b *gdn.Batch) {
			b.StoreTo = &gdn.Pool{F32: b.State.F32}
			b.ConvStoreTo = &gdn.Pool{F32: b.ConvState.F32, SlotStride: eConvSlot}
		}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := errConvBase(gdn.DTypeF32)
			tc.mod(b)
			checkRunOutcome(t, l, b, tc.want, tc.msgs)
		})
	}
}

// TestConvZeroRowsAfterWidened: a one-token fresh prompt (Zero) whose conv runs over more channels
// than a head's state has elements (K = V = 1, C = 8) reads zeros for its conv state, even right
// after a call that widened bf16 rows into the same scratch: its results are those of the same
// call on a fresh Layer.
func TestConvZeroRowsAfterWidened(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		c := equivConfig(kernel, runFormat{"kv-f32", gdn.LayoutKV, gdn.DTypeF32, false, true}, 1)
		c.K, c.V, c.KHeads, c.VHeads = 1, 1, 2, 4
		c.NormWeight = c.NormWeight[:1]
		C := 2*c.KHeads*c.K + c.VHeads*c.V
		c.ConvWeight, c.ConvBias = c.ConvWeight[:4*C], c.ConvBias[:C]
		used, fresh := mustLayer(t, c), mustLayer(t, c)
		a := makeBatch(c, runSpec{lens: []int{6}, read: []int32{0}, slots: 1}, 3)
		a.X = toBF16Rows(a.X)
		runOK(t, used, a)
		z := makeBatch(c, runSpec{lens: []int{1}, read: []int32{gdn.Zero}, store: []int32{1}, slots: 2}, 4)
		z2 := makeBatch(c, runSpec{lens: []int{1}, read: []int32{gdn.Zero}, store: []int32{1}, slots: 2}, 4)
		runOK(t, used, z)
		runOK(t, fresh, z2)
		requireSameResults(t, "after a bf16 call vs on a fresh Layer", z2, z)
	})
}
