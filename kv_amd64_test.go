//go:build !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestWidenAMD64: every amd64 kernel's widen against widenGeneric, bit for bit, for lengths 0…70
// at offsets 0…3, with guard elements around dst that must stay untouched.
func TestWidenAMD64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, im := range available {
		for n := 0; n <= 70; n++ {
			for off := 0; off < 4; off++ {
				src := make([]uint16, n+off)
				for i := range src {
					src[i] = uint16(r.Uint32())
				}
				if n > 2 {
					src[off], src[off+1] = 0x7fc1, 0xff81 // NaN payloads
				}
				const guard = 20
				dst := make([]float32, n+off+2*guard)
				for i := range dst {
					dst[i] = math.Float32frombits(0x7fbadbad)
				}
				want := make([]float32, n)
				widenGeneric(want, src[off:])
				im.widen(dst[guard+off:guard+off+n], src[off:])
				for i, x := range dst {
					in := i >= guard+off && i < guard+off+n
					if in && math.Float32bits(x) != math.Float32bits(want[i-guard-off]) {
						t.Fatalf("%s: n=%d off=%d: dst[%d] = %#x, want %#x", im.name, n, off, i-guard-off, math.Float32bits(x), math.Float32bits(want[i-guard-off]))
					}
					if !in && math.Float32bits(x) != 0x7fbadbad {
						t.Fatalf("%s: n=%d off=%d: guard element %d written", im.name, n, off, i)
					}
				}
			}
		}
	}
}

// TestKVTokensExact: the [K][V] routines over T tokens against the single-token routine of the
// same kernel run token by token (kvVia), bit for bit: o, every store, the carry; with and without
// a store at the last token, from src32 or the bf16 src.
func TestKVTokensExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ones := map[string]single{"avx512": stateAVX512, "avx2": stateAVX2}
	for _, im := range available {
		one := ones[im.name]
		for _, sh := range [][2]int{{1, 1}, {3, 5}, {16, 16}, {17, 33}, {31, 8}, {64, 64}, {96, 80}, {128, 128}, {5, 129}, {129, 7}, {200, 48}, {300, 37}, {520, 24}} {
			for _, T := range []int{1, 2, 3, 7} {
				for pat := range 3 {
					K, V, vs := sh[0], sh[1], sh[1]+1
					hs := K * V
					kh, qh := make([]float32, T*K), make([]float32, T*K)
					for i := range kh {
						kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
						qh[i] = float32(r.NormFloat64() / float64(K))
					}
					v := make([]float32, (T-1)*vs+V)
					for i := range v {
						v[i] = float32(r.NormFloat64())
					}
					tok := make([]float32, 4*T)
					for τ := range T {
						em1 := float32(-0.6 * r.Float64())
						if τ == 2 {
							em1 = float32(math.NaN())
						}
						tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, float32(r.Float64()), float32(0.1*r.NormFloat64())
					}
					src := make([]float32, hs)
					for i := range src {
						src[i] = float32(0.3 * r.NormFloat64())
					}
					src16 := make([]uint16, hs)
					for i, x := range src {
						src16[i] = BF16RNE(x)
					}
					src32 := make([]float32, hs)
					widenGeneric(src32, src16)
					keep := func(τ int) bool { return pat == 0 || pat == 1 && τ%2 == 0 || pat == 2 && τ == T-1 }
					what := fmt.Sprintf("%s K=%d V=%d T=%d pattern %d", im.name, K, V, T, pat)
					for _, bf := range []bool{false, true} {
						run := func(via bool, from32 bool) ([]float32, [][]float32, [][]uint16, []float32) {
							o := make([]float32, T*V)
							st32, st16 := make([][]float32, T), make([][]uint16, T)
							stores := make([]unsafe.Pointer, T)
							for τ := range T {
								if keep(τ) {
									if bf {
										st16[τ] = make([]uint16, hs)
										stores[τ] = unsafe.Pointer(&st16[τ][0])
									} else {
										st32[τ] = make([]float32, hs)
										stores[τ] = unsafe.Pointer(&st32[τ][0])
									}
								}
							}
							var carry []float32
							switch {
							case !bf && via:
								kvVia(one, K, V, src32, nil, stores, nil, kh, qh, v, vs, o, tok)
							case !bf:
								im.tokF32[0](K, V, append([]float32(nil), src32...), stores, kh, qh, v, vs, o, tok, nil)
							default:
								carry = make([]float32, hs)
								var s32 []float32
								if from32 {
									s32 = append([]float32(nil), src32...)
								}
								if via {
									kvVia(one, K, V, src32, src16, stores, carry, kh, qh, v, vs, o, tok)
								} else {
									im.tokBF16[0](K, V, append([]uint16(nil), src16...), s32, stores, carry, kh, qh, v, vs, o, tok, nil)
								}
							}
							return o, st32, st16, carry
						}
						for _, from32 := range []bool{false, true} {
							if from32 && !bf {
								continue
							}
							o1, s1, b1, c1 := run(false, from32)
							o2, s2, b2, c2 := run(true, from32)
							w := fmt.Sprintf("%s bf16=%v src32=%v", what, bf, from32)
							eqBits(t, w+" o", o1, o2)
							eqBits(t, w+" carry", c1, c2)
							for τ := range T {
								eqBits(t, fmt.Sprintf("%s store %d", w, τ), s1[τ], s2[τ])
								for i := range b1[τ] {
									if b1[τ][i] != b2[τ][i] {
										t.Fatalf("%s bf16 store %d [%d] = %#x, token by token %#x", w, τ, i, b1[τ][i], b2[τ][i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

func eqBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s [%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}
