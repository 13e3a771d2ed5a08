//go:build linux

package gdn_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// pagePlacer is the placer of slices next to protected pages (kerneltest.Pages).
type pagePlacer struct{ *kerneltest.Pages }

func (p pagePlacer) f32(n int) []float32 { return kerneltest.PageSlice[float32](p.Pages, n) }

func (p pagePlacer) bf16(n int) []gdn.BF16 { return unsafe.Slice((*gdn.BF16)(p.Mem(2*n)), n) }

// guardShapes covers the tails of every kernel: V in 1..33 (every remainder mod 4, 8, 16 and 32)
// and the partial blocks above 33 (AVX-512 masked tails of 3 to 8 ZMM, AVX2's 32-column blocks
// plus 1–3 YMM and 1–7 columns), with K cycling through 1..20 (the l2 tails of every width).
func guardShapes() [][2]int {
	vs := []int{47, 63, 64, 65, 100, 127, 128, 129, 161, 255}
	for v := 33; v >= 1; v-- {
		vs = append(vs, v)
	}
	var kv [][2]int
	for i, v := range vs {
		kv = append(kv, [2]int{1 + i%20, v})
	}
	return kv
}

// TestGuardPages runs every kernel with every input and output slice ending exactly at a
// PROT_NONE page (and, in a second round, starting right after one), over guardShapes, in place
// and out of place, with both outputs, bf16 only and f32 only.
func TestGuardPages(t *testing.T) {
	cases := shapeCases(rand.New(rand.NewPCG(11, 12)), guardShapes(), 4)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, atEnd := range []bool{true, false} {
			var rc roundedCount
			for _, sc := range cases {
				t.Run(fmt.Sprintf("%s,atEnd=%v", sc.c.Name, atEnd), func(t *testing.T) {
					p := pagePlacer{kerneltest.NewPages(t, atEnd)}
					rc.add(placedStep(t, kernel, sc, p))
				})
			}
			rc.check(t)
		}
	})
}

// TestConvGuardPages runs every kernel with the conv front, every slice of the batch (the X rows,
// the other rows, both pools and both conv pools, the outputs) ending exactly at a PROT_NONE page
// (and, in a second round, starting right after one), for channel counts under one vector and
// with tails of 8 and 12 lanes, widths 2, 4 and 8, f32 and bf16 rows and pools, in place and out of place: the results
// must be those of the same batch on ordinary slices.
func TestConvGuardPages(t *testing.T) {
	type shape struct{ K, V, W int }
	// C = 4K + 4V channels: 8 (under one vector), 200 and 124 (a tail of 8 and of 12 lanes after
	// whole 16-lane vectors); W from 2 to 8.
	shapes := []shape{{1, 1, 2}, {17, 33, 4}, {16, 15, 8}}
	specs := equivSpecs() // out of place and in place: each shape × dtype runs one, in turn
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for i, sh := range shapes {
			for _, bf := range []bool{false, true} {
				c := errConfig(gdn.DTypeF32)
				if bf {
					c.StateDType = gdn.DTypeBF16
				}
				r := rand.New(rand.NewPCG(uint64(i), 3))
				c.KHeads, c.VHeads, c.K, c.V, c.Kernel = 2, 4, sh.K, sh.V, kernel
				c.ALog, c.DtBias, c.NormWeight = make([]float32, 4), make([]float32, 4), make([]float32, sh.V)
				for j := range c.NormWeight {
					c.NormWeight[j] = 1
				}
				C := 2*2*sh.K + 4*sh.V
				c.ConvWidth, c.ConvWeight, c.ConvBias = sh.W, make([]float32, C*sh.W), make([]float32, C)
				for j := range c.ConvWeight {
					c.ConvWeight[j] = float32(0.4 * r.NormFloat64())
				}
				l := mustLayer(t, c)
				for _, s := range specs[(i+boolInt(bf))%2 : (i+boolInt(bf))%2+1] {
					for _, atEnd := range []bool{true, false} {
						t.Run(fmt.Sprintf("K=%d,V=%d,W=%d,bf16=%v,batch=%s,atEnd=%v", sh.K, sh.V, sh.W, bf, s.name, atEnd), func(t *testing.T) {
							ref := makeBatch(c, s.s, uint64(i))
							if bf {
								ref.X = toBF16Rows(ref.X)
							}
							if s.s.store != nil { // out of place
								ref.StoreTo = stridedCopy(ref.State, s.s.slots, c.VHeads*c.K*c.V, c.VHeads*c.K*c.V)
								ref.ConvStoreTo = stridedCopy(ref.ConvState, s.s.slots, convSlot(c), convSlot(c))
							}
							p := pagePlacer{kerneltest.NewPages(t, atEnd)}
							got := placedBatch(ref, p)
							runOK(t, l, ref)
							runOK(t, l, got)
							requireSameResults(t, "on guarded pages", ref, got)
						})
					}
				}
			}
		}
	})
}

// placedBatch is a copy of b with every row, pool and output slice placed by p.
func placedBatch(b *gdn.Batch, p pagePlacer) *gdn.Batch {
	g := *b
	rows := func(r gdn.Rows) gdn.Rows {
		if r.F32 != nil {
			r.F32 = append(p.f32(len(r.F32))[:0], r.F32...)
		}
		if r.BF16 != nil {
			r.BF16 = append(p.bf16(len(r.BF16))[:0], r.BF16...)
		}
		return r
	}
	pool := func(q gdn.Pool) gdn.Pool {
		r := rows(gdn.Rows{F32: q.F32, BF16: q.BF16})
		return gdn.Pool{F32: r.F32, BF16: r.BF16, SlotStride: q.SlotStride}
	}
	g.Q, g.K, g.V, g.X, g.Z, g.B, g.A = rows(b.Q), rows(b.K), rows(b.V), rows(b.X), rows(b.Z), rows(b.B), rows(b.A)
	g.State, g.ConvState = pool(b.State), pool(b.ConvState)
	if b.StoreTo != nil {
		st, cs := pool(*b.StoreTo), pool(*b.ConvStoreTo)
		g.StoreTo, g.ConvStoreTo = &st, &cs
	}
	if b.Out != nil {
		g.Out = append(p.bf16(len(b.Out))[:0], b.Out...)
	}
	if b.OutF32 != nil {
		g.OutF32 = append(p.f32(len(b.OutF32))[:0], b.OutF32...)
	}
	return &g
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
