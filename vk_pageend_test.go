//go:build linux && amd64 && !purego

package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// pageEndF32 and pageEndU16 copy x to a slice that ends where an inaccessible page begins (nil
// for an empty f32 x): an access even one element past its end faults (guard bands only see what a
// routine writes or what a value it reads changes, not a read whose lanes it then ignores).
func pageEndF32(p *kerneltest.Pages, x []float32) []float32 {
	if len(x) == 0 {
		return nil
	}
	return kerneltest.PageCopy(p, x)
}

func pageEndU16(p *kerneltest.Pages, x []uint16) []uint16 { return kerneltest.PageCopy(p, x) }

// TestVKPageEnd runs the amd64 [V][K] routines with every slice they read or write (the state in
// and out, the carry, k̂, q̂, v, o, tok) ending at an inaccessible page, at every K from 1 to 264
// and V = 2 and 33, T = 1 and 3 (TestVKTails has the same shapes; this adds that nothing past a
// slice is touched, not even read), and compares the results with the generic routine's.
func TestVKPageEnd(t *testing.T) {
	ref, _ := gdnsimd.Lookup("generic")
	rt := gdnsimd.TokensOf(ref)
	l := int(gdnsimd.VK)
	for _, name := range []string{"avx512", "avx2"} {
		k, ok := gdnsimd.Lookup(name)
		if !ok {
			t.Logf("%s: not available", name)
			continue
		}
		tk := gdnsimd.TokensOf(k)
		r := rand.New(rand.NewPCG(31, 32))
		for K := 1; K <= 264; K++ {
			for _, V := range []int{2, 33} {
				for _, T := range []int{1, 3} {
					c := newTokCase(r, K, V, T, false)
					c.vs = V // v rows without a gap: v ends with the last token's row
					c.v = c.v[:0]
					for range T * V {
						c.v = append(c.v, float32(r.NormFloat64()))
					}
					for _, bf16 := range []bool{false, true} {
						what := fmt.Sprintf("%s K=%d V=%d T=%d bf16=%v", name, K, V, T, bf16)
						keep := kerneltest.NewPages(t, true)
						kh, qh := pageEndF32(keep, c.kh), pageEndF32(keep, c.qh)
						v, tok := pageEndF32(keep, c.v), pageEndF32(keep, c.tok)
						o := pageEndF32(keep, make([]float32, T*V))
						hs := K * V
						stores := make([]unsafe.Pointer, T)
						var got [][]float32
						var got16 [][]uint16
						var carry []float32
						if !bf16 {
							src := pageEndF32(keep, c.srcF)
							for τ := range T {
								s := pageEndF32(keep, make([]float32, hs))
								got, stores[τ] = append(got, s), unsafe.Pointer(&s[0])
							}
							tk.F32[l](K, V, src, stores, kh, qh, v, c.vs, o, tok, nil)
						} else {
							src := pageEndU16(keep, roundAll(c.srcF))
							for τ := range T {
								s := pageEndU16(keep, make([]uint16, hs))
								got16, stores[τ] = append(got16, s), unsafe.Pointer(&s[0])
							}
							carry = pageEndF32(keep, make([]float32, hs))
							tk.BF16[l](K, V, src, nil, stores, carry, kh, qh, v, c.vs, o, tok, nil)
						}
						// The generic routine on ordinary slices.
						wo := make([]float32, T*V)
						wstores := make([]unsafe.Pointer, T)
						var want [][]float32
						var want16 [][]uint16
						if !bf16 {
							for τ := range T {
								s := make([]float32, hs)
								want, wstores[τ] = append(want, s), unsafe.Pointer(&s[0])
							}
							rt.F32[l](K, V, c.srcF, wstores, c.kh, c.qh, c.v, c.vs, wo, c.tok, nil)
						} else {
							for τ := range T {
								s := make([]uint16, hs)
								want16, wstores[τ] = append(want16, s), unsafe.Pointer(&s[0])
							}
							rt.BF16[l](K, V, roundAll(c.srcF), nil, wstores, make([]float32, hs), c.kh, c.qh, c.v, c.vs, wo, c.tok, nil)
						}
						near(t, what+" o", o, wo, 1e-5)
						for τ := range T {
							if !bf16 {
								near(t, fmt.Sprintf("%s state after token %d", what, τ), got[τ], want[τ], 1e-5)
								continue
							}
							g, w := widenAll(got16[τ]), widenAll(want16[τ])
							for i := range g {
								if math.Abs(float64(g[i])-float64(w[i])) > 1e-2*math.Max(1, math.Abs(float64(w[i]))) {
									t.Fatalf("%s: bf16 state after token %d [%d] = %g, generic %g", what, τ, i, g[i], w[i])
								}
							}
						}
						keep.Free()
					}
				}
			}
		}
	}
}

// TestVKPageEndNoCarry: TestVKPageEnd's bf16 calls without the carry (T = 1: the AVX2
// once path, which TestVKPageEnd never takes since it always passes a carry), every slice ending
// at an inaccessible page, compared bit for bit with BF16RNE of the kernel's f32 routine, v NaN
// in one row (once's fallback) or not.
func TestVKPageEndNoCarry(t *testing.T) {
	l := int(gdnsimd.VK)
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		tk := gdnsimd.TokensOf(k)
		r := rand.New(rand.NewPCG(33, 34))
		for K := 1; K <= 140; K++ {
			for _, V := range []int{2, 3, 33} {
				for _, poison := range []bool{false, true} {
					c := newTokCase(r, K, V, 1, false)
					c.vs = V
					c.v = c.v[:V]
					c.srcF = widenAll(roundAll(c.srcF))
					if poison {
						c.v[V/2] = math.Float32frombits(0x7fc0ffff)
					}
					keep := kerneltest.NewPages(t, true)
					kh, qh := pageEndF32(keep, c.kh), pageEndF32(keep, c.qh)
					v, tok := pageEndF32(keep, c.v), pageEndF32(keep, c.tok)
					o := pageEndF32(keep, make([]float32, V))
					src := pageEndU16(keep, roundAll(c.srcF))
					dst := pageEndU16(keep, make([]uint16, K*V))
					tk.BF16[l](K, V, src, nil, []unsafe.Pointer{unsafe.Pointer(&dst[0])}, nil, kh, qh, v, c.vs, o, tok, nil)
					want := make([]float32, K*V)
					wo := make([]float32, V)
					tk.F32[l](K, V, c.srcF, []unsafe.Pointer{unsafe.Pointer(&want[0])}, c.kh, c.qh, c.v, c.vs, wo, c.tok, nil)
					what := fmt.Sprintf("%s K=%d V=%d poison=%v", name, K, V, poison)
					kerneltest.EqualBits(t, what+" o", o, wo)
					kerneltest.EqualBits(t, what+" state", dst, roundAll(want))
					keep.Free()
				}
			}
		}
	})
}
