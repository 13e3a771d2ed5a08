package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// The driver runs the value heads of a GQA group together, sharing the k-head's prepared rows
// (and, over sequences longer than a chunk, at most a few heads at once, each with its own
// carry). These tests hold it to what an item is on its own: every (kernel, format, GQA order)
// on shapes whose groups have 1, 2, 5, 9 and 22 value heads (9, 5 and 22 more than the driver takes
// at once; 66 value heads: more than a chunk's 64 lanes of gates), sequences of 130 (three chunks), 70, 65, 64, 2, 1 and 0 tokens, Pad, Zero, in place
// and with snapshots.

// driverShape is one shape of the tests.
type driverShape struct{ HK, HV, K, V int }

// (The first two have the same K and V: the second's groups need more carries than the first's,
// from the same Scratch.)
var driverShapes = []driverShape{{4, 4, 12, 20}, {1, 9, 12, 20}, {2, 10, 16, 9}, {3, 6, 9, 16}, {3, 66, 4, 8}}

// driverLens are the tests' sequence lengths: two of 1 and two of 64 tokens one after the other
// (a cache of prepared rows keyed without the sequence would hand the second those of the first).
var driverLens = []int{130, 1, 1, 0, 64, 64, 65, 2, 70}

// kHead is the k-head value head h reads (SPEC Part A), written out here independently of the
// driver.
func kHead(h, HK, HV int, tiled bool) int {
	if tiled {
		return h % HK
	}
	return h / (HV / HK)
}

// driverBatch returns a batch of shape d: in place (Store nil; one sequence padding) or, with
// stores, sequences reading Zero, shared slots and their own chain of snapshot slots (after token
// 5, after token 63 — the end of the first chunk — and after the last token; the end of the
// second chunk, token 127, is not stored). Rows are f32, or bf16 with bf16Rows; Beta and Gate have
// strides of VHeads + 1 and VHeads + 3 (NaN between the rows). It also returns the same batch with
// the q/k rows expanded (KHeads = VHeads, v-head h's copy of its k-head's row at h) and Beta and
// Gate packed (Stride VHeads), whose items compute the same bits without any GQA group.
func driverBatch(r *rand.Rand, d driverShape, f gdnsimd.Format, tiled, stores, bf16Rows bool) (b, expanded gdnsimd.Batch) {
	N := len(driverLens)
	start := make([]int32, N+1)
	for n, l := range driverLens {
		start[n+1] = start[n] + int32(l)
	}
	T := int(start[N])
	var read, store []int32
	slots := N
	if stores {
		read = []int32{gdnsimd.Zero, 0, 1, 1, gdnsimd.Zero, 2, 1, gdnsimd.Pad, 2}
		store = make([]int32, T)
		slots = 3
		for n, l := range driverLens {
			for τ := range l {
				t := int(start[n]) + τ
				store[t] = gdnsimd.NoStore
				if read[n] != gdnsimd.Pad && (τ == 5 || τ == 63 || τ == l-1) {
					store[t] = int32(slots)
					slots++
				}
			}
		}
	} else {
		read = []int32{0, 1, 2, 3, 4, 5, 6, gdnsimd.Pad, 7}
	}
	vec := func(n int, mean, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + sd*r.NormFloat64())
		}
		return x
	}
	rows := func(x []float32, width int) gdnsimd.Rows {
		if !bf16Rows {
			return gdnsimd.Rows{F32: x, Stride: width}
		}
		y := make([]uint16, len(x))
		for i, v := range x {
			y[i] = gdnsimd.BF16RNE(v)
		}
		return gdnsimd.Rows{BF16: y, Stride: width}
	}
	q, k := vec(T*d.HK*d.K, 0, 1), vec(T*d.HK*d.K, 0, 1)
	b = gdnsimd.Batch{
		KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, RMSEps: 1e-6,
		ALog: vec(d.HV, 0, 0.5), DtBias: vec(d.HV, 0, 1), NormWeight: vec(d.V, 1, 0.2),
		Format: f, GQATiled: tiled, N: N, Start: start, Read: read, Store: store,
		Out: make([]uint16, T*d.HV*d.V), OutF32: make([]float32, T*d.HV*d.V),
	}
	b.Q, b.Key = rows(q, d.HK*d.K), rows(k, d.HK*d.K)
	b.Val, b.Z = rows(vec(T*d.HV*d.V, 0, 1), d.HV*d.V), rows(vec(T*d.HV*d.V, 0, 1), d.HV*d.V)
	beta, gate := vec(T*d.HV, 0, 1), vec(T*d.HV, -1, 1.5)
	spread := func(x []float32, stride int) gdnsimd.Rows { // x's rows stride apart, NaN between
		y := make([]float32, T*stride)
		for t := range T {
			copy(y[t*stride:], x[t*d.HV:(t+1)*d.HV])
			for i := d.HV; i < stride; i++ {
				y[t*stride+i] = float32(math.NaN())
			}
		}
		return rows(y, stride)
	}
	b.Beta, b.Gate = spread(beta, d.HV+1), spread(gate, d.HV+3)
	for i := range b.Out {
		b.Out[i], b.OutF32[i] = kerneltest.Poison16, math.Float32frombits(kerneltest.Poison32)
	}
	slot := d.HV * d.K * d.V
	b.State.SlotStride = slot
	state := vec(slots*slot, 0, 0.3)
	if f.BF16 {
		b.State.BF16 = roundAll(state)
	} else {
		b.State.F32 = state
	}
	expanded = b
	expanded.KHeads = d.HV
	eq, ek := make([]float32, T*d.HV*d.K), make([]float32, T*d.HV*d.K)
	for t := range T {
		for h := range d.HV {
			hk := kHead(h, d.HK, d.HV, tiled)
			copy(eq[(t*d.HV+h)*d.K:][:d.K], q[(t*d.HK+hk)*d.K:][:d.K])
			copy(ek[(t*d.HV+h)*d.K:][:d.K], k[(t*d.HK+hk)*d.K:][:d.K])
		}
	}
	expanded.Q, expanded.Key = rows(eq, d.HV*d.K), rows(ek, d.HV*d.K)
	expanded.Beta, expanded.Gate = rows(beta, d.HV), rows(gate, d.HV)
	return b, expanded
}

// outputs is a copy of b with its own pool and outputs (the inputs shared).
func outputs(b gdnsimd.Batch) gdnsimd.Batch {
	b.State.F32 = clone(b.State.F32)
	b.State.BF16 = clone(b.State.BF16)
	b.Out, b.OutF32 = clone(b.Out), clone(b.OutF32)
	return b
}

func clone[E any](x []E) []E {
	if x == nil {
		return nil
	}
	return append([]E(nil), x...)
}

// itemRegions calls f with the offset and length of every region item w of b writes: its output
// rows (in Out and OutF32) and its head in the slots it stores to (in State).
func itemRegions(b *gdnsimd.Batch, w int, out, pool func(off, n int)) {
	n, h := w/b.VHeads, w%b.VHeads
	t0, t1 := int(b.Start[n]), int(b.Start[n+1])
	for t := t0; t < t1; t++ {
		out((t*b.VHeads+h)*b.V, b.V)
	}
	hs := b.K * b.V
	switch {
	case b.Read[n] == gdnsimd.Pad || t0 == t1:
	case b.Store == nil:
		pool(int(b.Read[n])*b.State.SlotStride+h*hs, hs)
	default:
		for t := t0; t < t1; t++ {
			if s := b.Store[t]; s >= 0 {
				pool(int(s)*b.State.SlotStride+h*hs, hs)
			}
		}
	}
}

// equalOutputs fails t unless got's pool and outputs have want's bits.
func equalOutputs(t *testing.T, what string, got, want *gdnsimd.Batch) {
	t.Helper()
	kerneltest.EqualBits(t, what+": State.F32", got.State.F32, want.State.F32)
	kerneltest.EqualBits(t, what+": State.BF16", got.State.BF16, want.State.BF16)
	kerneltest.EqualBits(t, what+": OutF32", got.OutF32, want.OutF32)
	kerneltest.EqualBits(t, what+": Out", got.Out, want.Out)
}

// TestDriverGroups: for every kernel and format, both GQA orders, in place and with snapshots,
// f32 and bf16 rows, a batch gives the bits of its GQA-expanded twin run one item at a time with
// a fresh Scratch; run whole, and as ranges of items that start and end anywhere (inside a group
// too): a range writes exactly its items' outputs and states, nothing of any other item. One
// Scratch serves all of a kernel's calls, over shapes and batches.
func TestDriverGroups(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := gdnsimd.Lookup(name)
		s := new(gdnsimd.Scratch)
		for _, f := range gdnsimd.Formats() {
			if !k.Implements(f) {
				continue
			}
			for i, d := range driverShapes {
				for _, tiled := range []bool{false, true} {
					for _, stores := range []bool{false, true} {
						what := fmt.Sprintf("%v/HK=%d,HV=%d,K=%d,V=%d/tiled=%v/stores=%v/bf16rows=%v", f, d.HK, d.HV, d.K, d.V, tiled, stores, i%2 == 1)
						r := rand.New(rand.NewPCG(uint64(i), uint64(boolInt(tiled)<<1|boolInt(stores))))
						b, expanded := driverBatch(r, d, f, tiled, stores, i%2 == 1)
						items := b.Items()
						want := outputs(expanded)
						for w := range items {
							k.RunBatch(&want, w, w+1, new(gdnsimd.Scratch))
						}
						got := outputs(b)
						k.RunBatch(&got, 0, items, s)
						equalOutputs(t, what+": whole", &got, &want)
						for range 6 {
							lo := r.IntN(items)
							hi := lo + 1 + r.IntN(min(items-lo, 2*d.HV))
							got := outputs(b)
							k.RunBatch(&got, lo, hi, s)
							part := outputs(b) // the initial values, and want's in items [lo, hi)
							for w := lo; w < hi; w++ {
								itemRegions(&b, w, func(off, n int) {
									copy(part.Out[off:off+n], want.Out[off:off+n])
									copy(part.OutF32[off:off+n], want.OutF32[off:off+n])
								}, func(off, n int) {
									if f.BF16 {
										copy(part.State.BF16[off:off+n], want.State.BF16[off:off+n])
									} else {
										copy(part.State.F32[off:off+n], want.State.F32[off:off+n])
									}
								})
							}
							equalOutputs(t, fmt.Sprintf("%s: items [%d, %d)", what, lo, hi), &got, &part)
						}
					}
				}
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDriverZeroAllocs: once a Scratch has grown, RunBatch allocates nothing, with groups larger
// than the driver takes at once over several chunks, in every format and GQA order.
func TestDriverZeroAllocs(t *testing.T) {
	if testing.CoverMode() != "" || driverRace {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := gdnsimd.Lookup(name)
		for _, f := range gdnsimd.Formats() {
			if !k.Implements(f) {
				continue
			}
			for _, d := range driverShapes[1:3] {
				for _, tiled := range []bool{false, true} {
					b, _ := driverBatch(rand.New(rand.NewPCG(1, 2)), d, f, tiled, true, false)
					s := new(gdnsimd.Scratch)
					if n := testing.AllocsPerRun(5, func() { k.RunBatch(&b, 0, b.Items(), s) }); n != 0 {
						t.Errorf("%v/HK=%d,HV=%d/tiled=%v: %v allocations per call", f, d.HK, d.HV, tiled, n)
					}
				}
			}
		}
	})
}
