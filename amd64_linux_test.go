//go:build linux && amd64 && !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// TestKVTailsGuardPages runs every amd64 [K][V] routine (the single-token one; over T = 1 and 2
// tokens f32, bf16 from src and from src32, with stores and the carry, called directly: kvRaw) with every slice ending at
// a PROT_NONE page, then starting right after one, over kvTailShapes (K < 300): a masked-out
// lane, a VMASKMOVPS or VPMASKMOVD lane or an AVX2 bf16 tail element read or written beyond its
// slice faults. The results must be those of the same call on ordinary slices.
func TestKVTailsGuardPages(t *testing.T) {
	decayKernels(t, func(t *testing.T, im *impl) {
		r := rand.New(rand.NewPCG(25, 26))
		for _, sh := range kvTailShapes() {
			K, V := sh[0], sh[1]
			if K > 300 {
				continue
			}
			for _, T := range []int{1, 2} {
				s, kh, qh, v := make([]float32, K*V), make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
				for _, x := range [][]float32{s, kh, qh, v} {
					for i := range x {
						x[i] = float32(0.3 * r.NormFloat64())
					}
				}
				s16 := make([]uint16, K*V)
				for i, x := range s {
					s16[i] = BF16RNE(x)
				}
				s32 := make([]float32, K*V)
				widenGeneric(s32, s16)
				tok := []float32{-0.05, 0.96, 0.7, 0.1, -0.7, 0.28, 0.4, -0.2}[:4*T]
				type result struct {
					o, carry []float32
					st       [][]float32
					st16     [][]uint16
				}
				// call runs one format (0 f32, 1 bf16, 2 bf16 from src32) on slices from alloc.
				call := func(format int, f32 func([]float32) []float32, u16 func([]uint16) []uint16) result {
					res := result{o: f32(make([]float32, T*V)), st: make([][]float32, T), st16: make([][]uint16, T)}
					stores := make([]unsafe.Pointer, T)
					for τ := range T {
						if format == 0 {
							res.st[τ] = f32(make([]float32, K*V))
							stores[τ] = unsafe.Pointer(&res.st[τ][0])
						} else {
							res.st16[τ] = u16(make([]uint16, K*V))
							stores[τ] = unsafe.Pointer(&res.st16[τ][0])
						}
					}
					khs, qhs, vs, toks := f32(kh), f32(qh), f32(v), f32(tok)
					rf32, rbf16 := kvRaw(t, im, K)
					switch format {
					case 0:
						rf32(K, V, f32(s), stores, khs, qhs, vs, V, res.o, toks, nil)
					default:
						var src32 []float32
						if format == 2 {
							src32 = f32(s32)
						}
						res.carry = f32(make([]float32, K*V))
						rbf16(K, V, u16(s16), src32, stores, res.carry, khs, qhs, vs, V, res.o, toks, nil)
					}
					return res
				}
				plain32 := func(x []float32) []float32 { return append([]float32(nil), x...) }
				plain16 := func(x []uint16) []uint16 { return append([]uint16(nil), x...) }
				for format := range 3 {
					want := call(format, plain32, plain16)
					for _, atEnd := range []bool{true, false} {
						what := fmt.Sprintf("%s K=%d V=%d T=%d format %d atEnd=%v", im.name, K, V, T, format, atEnd)
						p := kerneltest.NewPages(t, atEnd)
						got := call(format, func(x []float32) []float32 { return kerneltest.PageCopy(p, x) }, func(x []uint16) []uint16 { return kerneltest.PageCopy(p, x) })
						same := func(name string, a, b []float32) {
							for i := range a {
								if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
									t.Fatalf("%s: %s[%d] = %g, on ordinary slices %g", what, name, i, a[i], b[i])
								}
							}
						}
						same("o", got.o, want.o)
						same("carry", got.carry, want.carry)
						for τ := range T {
							same(fmt.Sprint("store ", τ), got.st[τ], want.st[τ])
							for i := range got.st16[τ] {
								if got.st16[τ][i] != want.st16[τ][i] {
									t.Fatalf("%s: bf16 store %d [%d] = %#x, on ordinary slices %#x", what, τ, i, got.st16[τ][i], want.st16[τ][i])
								}
							}
						}
						p.Free()
					}
				}
				// The single-token routine (T = 1, in place and out of place).
				if T == 1 {
					for _, atEnd := range []bool{true, false} {
						for _, inPlace := range []bool{false, true} {
							p := kerneltest.NewPages(t, atEnd)
							sIn := kerneltest.PageCopy(p, s)
							sOut := sIn
							if !inPlace {
								sOut = kerneltest.PageCopy(p, make([]float32, K*V))
							}
							o := kerneltest.PageCopy(p, make([]float32, V))
							im.state(sIn, sOut, kerneltest.PageCopy(p, kh), kerneltest.PageCopy(p, qh), kerneltest.PageCopy(p, v), o, tok[0], tok[1], tok[2], tok[3])
							wantS, wantO := make([]float32, K*V), make([]float32, V)
							im.state(s, wantS, kh, qh, v, wantO, tok[0], tok[1], tok[2], tok[3])
							for i := range wantS {
								if math.Float32bits(sOut[i]) != math.Float32bits(wantS[i]) {
									t.Fatalf("%s K=%d V=%d single-token atEnd=%v inPlace=%v: sOut[%d] differs", im.name, K, V, atEnd, inPlace, i)
								}
							}
							p.Free()
						}
					}
				}
			}
		}
	})
}

// hostileList is a prefetch list (tokensF32's pf: entries of an address and a count of 64-byte
// lines, groups ended by an entry of zero lines) of groups addressing memory no routine may touch:
// an inaccessible page, the first page, the top of the address space, lines running into the
// inaccessible page; and ending in half an entry, the list's last word, which ends where an
// inaccessible page begins. A routine that loads where the list points, or reads the list past
// its whole entries, faults.
func hostileList(t *testing.T, groups int, keep *kerneltest.Pages) []uintptr {
	t.Helper()
	none := uintptr(keep.Mem(64)) + 64 // the inaccessible page after 64 bytes of a mapping
	var l []uintptr
	for g := range groups {
		l = append(l, none, uintptr(1+g%3), 0, 2, 8, 1, ^uintptr(0)&^63, 1, none-128, 4)
		if g%4 == 3 {
			l = append(l, none+4096, 0) // an entry of zero lines ends the group early
		}
		l = append(l, 0, 0)
	}
	l = append(l, none) // half an entry: never read as one
	s := unsafe.Slice((*uintptr)(keep.Mem(8*len(l))), len(l))
	copy(s, l)
	return s
}

// TestPrefetchListHarmless runs every amd64 state routine over T tokens (both layouts, f32 and
// bf16, T = 1, 2, 5 and 9, the Qwen3-Next shape, the odd 96×80 and two small ones) with a hostile
// prefetch list (hostileList) and a hostile next state (stateArgs.nx: 64 bytes before an
// inaccessible page, 1 MiB long), and holds the outputs and the stored states to the bits of the
// same call without them: they are hints that change nothing and touch nothing.
func TestPrefetchListHarmless(t *testing.T) {
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		tk := TokensOf(k)
		keep := kerneltest.NewPages(t, true)
		testNx = stateRef{f32: unsafe.Slice((*float32)(keep.Mem(64)), 1<<18)}
		defer func() { testNx = stateRef{} }()
		r := rand.New(rand.NewPCG(41, 42))
		for _, sh := range [][2]int{{128, 128}, {96, 80}, {8, 3}, {17, 5}} {
			K, V := sh[0], sh[1]
			hs := K * V
			for _, T := range []int{1, 2, 5, 9} {
				src, kh, qh, v, tok := tokenCall(r, K, V, T)
				pf := hostileList(t, 3*T+4, keep)
				for l, layout := range []string{"kv", "vk"} {
					what := fmt.Sprintf("%s %s K=%d V=%d T=%d", name, layout, K, V, T)
					// f32, the last token stored (T = 1: the single-token path of the [K][V] wrapper).
					var o32, s32 [2][]float32
					for i, list := range [][]uintptr{nil, pf} {
						o32[i], s32[i] = make([]float32, T*V), make([]float32, hs)
						stores := make([]unsafe.Pointer, T)
						stores[T-1] = unsafe.Pointer(&s32[i][0])
						tk.F32[l](K, V, src, stores, kh, qh, v, V, o32[i], tok, list)
					}
					sameBits(t, what+" f32 o", o32[0], o32[1])
					sameBits(t, what+" f32 state", s32[0], s32[1])
					// bf16, every token stored and the carry.
					src16 := make([]uint16, hs)
					for i, x := range src {
						src16[i] = BF16RNE(x)
					}
					var o16, carry [2][]float32
					var st [2][][]uint16
					for i, list := range [][]uintptr{nil, pf} {
						o16[i], carry[i] = make([]float32, T*V), make([]float32, hs)
						stores := make([]unsafe.Pointer, T)
						for τ := range T {
							s := make([]uint16, hs)
							st[i] = append(st[i], s)
							stores[τ] = unsafe.Pointer(&s[0])
						}
						tk.BF16[l](K, V, src16, nil, stores, carry[i], kh, qh, v, V, o16[i], tok, list)
					}
					sameBits(t, what+" bf16 o", o16[0], o16[1])
					sameBits(t, what+" bf16 carry", carry[0], carry[1])
					for τ := range T {
						for i := range st[0][τ] {
							if st[0][τ][i] != st[1][τ][i] {
								t.Fatalf("%s bf16 store %d [%d]: %#04x with the list, %#04x without", what, τ, i, st[1][τ][i], st[0][τ][i])
							}
						}
					}
				}
			}
		}
	})
}

func sameBits(t *testing.T, what string, want, got []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s [%d]: %v with the list, %v without", what, i, got[i], want[i])
		}
	}
}

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
	ref, _ := Lookup("generic")
	rt := TokensOf(ref)
	l := int(layoutVK)
	for _, name := range []string{"avx512", "avx2"} {
		k, ok := Lookup(name)
		if !ok {
			t.Logf("%s: not available", name)
			continue
		}
		tk := TokensOf(k)
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
	l := int(layoutVK)
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		tk := TokensOf(k)
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
