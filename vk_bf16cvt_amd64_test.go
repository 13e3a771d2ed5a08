//go:build !purego

package gdnsimd

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestVKBF16Cvt: the AVX-512 [V][K] bf16 routine's decode (one token with a store: the register
// groups, whose stores round two vectors at a time with VCVTNE2PS2BF16 where the CPU has it and K
// is whole ZMM) stores BF16RNE of the f32 routine's state from the widened state (and its o), bit
// for bit, with cvt false and true, out of place and in place, on states whose updated
// rows hold denormals (which the instruction flushes to zero: the routine then stores the group
// again with the integer rounding), ±0, NaN, ±Inf, values that round up to Inf, and ordinary ones;
// K whole ZMM and not, V from one row to several groups and a one-row tail.
func TestVKBF16Cvt(t *testing.T) {
	skipWithoutAVX512(t)
	r := rand.New(rand.NewPCG(61, 62))
	bits := math.Float32frombits
	for _, cvt := range []bool{false, true} {
		if cvt && !avx512BF16 {
			t.Log("no AVX512_BF16: cvt = true not run")
			continue
		}
		cases := 0
		for _, K := range []int{64, 96, 128, 100, 48} {
			for _, V := range []int{1, 2, 3, 4, 5, 7, 9, 33} {
				for _, beta := range []float32{0, 0.7} {
					for _, em1 := range []float32{-0.03, -0.9} {
						for _, pos := range []bool{false, true} { // pos: no negative value (and qh, kh ≥ 0)
							hs := K * V
							src := make([]uint16, hs)
							kh, qh, v := make([]float32, K), make([]float32, K), make([]float32, V)
							for i := range K {
								kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
								qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
								if pos {
									kh[i], qh[i] = float32(math.Abs(float64(kh[i]))), float32(math.Abs(float64(qh[i])))
								}
								if i%7 == 3 {
									kh[i] = 0 // S' = decay(S) there: a denormal stays one
								}
							}
							for j := range V {
								v[j] = float32(r.NormFloat64())
								for i := range K {
									x := float32(r.NormFloat64() * 0.5)
									switch kind := j / 2 % 4; { // (a group is two rows, or three)
									case kind == 1 && i%7 == 3: // a denormal among ordinary values
										x = bits(uint32(1+r.IntN(0x7fffff)) | uint32(r.IntN(2))<<31)
									case kind == 3 && j%2 == 0 && i == 0: // one denormal, in the first pair
										x = bits(uint32(0x8000 + r.IntN(0x7f8000)))
										if !pos {
											x = -x // (its bf16 is not −0)
										}
									case kind == 2: // all special
										x = []float32{0, float32(math.Copysign(0, -1)), bits(0x00000001), bits(0x807fffff),
											bits(0x00800000), float32(math.Inf(1)), float32(math.Inf(-1)), bits(0x7fc00001),
											bits(0xff812345), bits(0x7f7fffff), bits(0xff7f8000), bits(0x00400000)}[i%12]
									}
									if pos && !math.IsNaN(float64(x)) {
										x = float32(math.Abs(float64(x)))
									}
									src[j*K+i] = BF16RNE(x)
								}
							}
							if pos {
								for j := range v {
									v[j] = float32(math.Abs(float64(v[j]))) + 2 // δ = beta·(v − kv) > 0
								}
							}
							tok := []float32{em1, 1 + em1, beta, 0.3}
							want, got := make([]uint16, hs), make([]uint16, hs)
							wo, gotO := make([]float32, V), make([]float32, V)
							// The reference: the f32 routine from the widened state, each element rounded
							// by BF16RNE (a bf16 store is the rounding of the f32 routine's state).
							src32, dst32 := make([]float32, hs), make([]float32, hs)
							for e, x := range src {
								src32[e] = math.Float32frombits(uint32(x) << 16)
							}
							stateVKf32AVX512(K, V, src32, []unsafe.Pointer{unsafe.Pointer(&dst32[0])}, kh, qh, v, V, wo, tok, nil, nil)
							for e, x := range dst32 {
								want[e] = BF16RNE(x)
							}
							vkBF16AVX512Cvt(K, V, src, []unsafe.Pointer{unsafe.Pointer(&got[0])}, kh, qh, v, gotO, tok, cvt)
							for e := range want {
								if got[e] != want[e] {
									t.Fatalf("cvt %v K %d V %d beta %v em1 %v: state[%d][%d] = %#04x, want %#04x", cvt, K, V, beta, em1, e/K, e%K, got[e], want[e])
								}
							}
							for j := range wo {
								if math.Float32bits(gotO[j]) != math.Float32bits(wo[j]) {
									t.Fatalf("cvt %v K %d V %d: o[%d] = %v, want %v", cvt, K, V, j, gotO[j], wo[j])
								}
							}
							// In place too (src = the store).
							inPlace := append([]uint16(nil), src...)
							vkBF16AVX512Cvt(K, V, inPlace, []unsafe.Pointer{unsafe.Pointer(&inPlace[0])}, kh, qh, v, gotO, tok, cvt)
							for e := range want {
								if inPlace[e] != want[e] {
									t.Fatalf("cvt %v K %d V %d in place: state[%d][%d] = %#04x, want %#04x", cvt, K, V, e/K, e%K, inPlace[e], want[e])
								}
							}
							cases++
						}
					}
				}
			}
		}
		t.Logf("cvt %v: %d cases", cvt, cases)
	}
}

// TestVKBF16CvtLone: as TestVKBF16Cvt, for states of ordinary values but for one denormal that
// survives the update (k̂ = 0 there, beta = 0.7), at the second, the last but one and the last
// vector of a row, in the first and in the second row of a group, K 64 … 256 (whole ZMM: the pair
// stores), T = 1 and 2 (T = 2 takes the groups for K > 128 only), a store at every token: the test
// of the stored words must find a lone ±0 in any pair, either half.
func TestVKBF16CvtLone(t *testing.T) {
	skipWithoutAVX512(t)
	r := rand.New(rand.NewPCG(63, 64))
	const V = 7
	cases := 0
	for _, cvt := range []bool{false, true} {
		if cvt && !avx512BF16 {
			continue
		}
		for _, K := range []int{64, 96, 128, 192, 256} {
			n := K / 16
			for _, T := range []int{1, 2} {
				for _, pos := range []int{1, n - 2, n - 1} {
					for _, row := range []int{2, 3, 4} { // (K ≤ 64: groups of 3 rows; else 2, or 1)
						hs := K * V
						e := row*K + 16*pos + 5 // the denormal's element
						kh, qh, v := make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
						for i := range kh {
							kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
							qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
							if i%K == e%K {
								kh[i] = 0
							}
						}
						for j := range v {
							v[j] = float32(r.NormFloat64())
						}
						src := make([]uint16, hs)
						for i := range src {
							src[i] = BF16RNE(float32(r.NormFloat64() * 0.5))
						}
						src[e] = 0x0040 | uint16(r.IntN(2))<<15 // ±2⁻¹³³·64: a denormal
						tok := make([]float32, 4*T)
						for τ := range T {
							tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = -0.03, 0.97, 0.7, 0.3
						}
						src32 := make([]float32, hs)
						for i, x := range src {
							src32[i] = math.Float32frombits(uint32(x) << 16)
						}
						want32 := make([][]float32, T)
						got := make([][]uint16, T)
						st32, st16 := make([]unsafe.Pointer, T), make([]unsafe.Pointer, T)
						for τ := range T {
							want32[τ], got[τ] = make([]float32, hs), make([]uint16, hs)
							st32[τ], st16[τ] = unsafe.Pointer(&want32[τ][0]), unsafe.Pointer(&got[τ][0])
						}
						wo, gotO := make([]float32, T*V), make([]float32, T*V)
						vkF32AVX512(K, V, src32, st32, kh, qh, v, V, wo, tok, nil)
						vkBF16AVX512Cvt(K, V, src, st16, kh, qh, v, gotO, tok, cvt)
						for τ := range T {
							for i, x := range want32[τ] {
								if got[τ][i] != BF16RNE(x) {
									t.Fatalf("cvt %v K %d T %d denormal at row %d, vector %d: token %d state[%d][%d] = %#04x, want %#04x", cvt, K, T, row, pos, τ, i/K, i%K, got[τ][i], BF16RNE(x))
								}
							}
						}
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d cases", cases)
}

// vkBF16AVX512Cvt is vkBF16AVX512 with cvt given (the work space from the pool for T > 1).
func vkBF16AVX512Cvt(K, V int, src []uint16, stores []unsafe.Pointer, kh, qh, v, o, tok []float32, cvt bool) {
	if len(tok) == 4 {
		stateVKbf16AVX512(K, V, src, nil, stores, nil, kh, qh, v, V, o, tok, nil, nil, cvt)
		return
	}
	w := workPool.Get().(*[]float32)
	stateVKbf16AVX512(K, V, src, nil, stores, nil, kh, qh, v, V, o, tok, *w, nil, cvt)
	workPool.Put(w)
}

// skipWithoutAVX512 skips the test where the avx512 kernel is not available.
func skipWithoutAVX512(t *testing.T) {
	for _, im := range available {
		if im.name == "avx512" {
			return
		}
	}
	t.Skip("no AVX-512")
}

// TestVKBF16CvtFallbackNaN: the VCVTNE2PS2BF16 path's fallback to the integer rounding (a group
// with a ±0 word) on a group whose other row is NaN with low payload bits (a v NaN): the fallback
// must select the NaN lanes (finish does not test δ for that path; storeRows tells the integer
// rounding so). Each call follows a cvt-false call on a finite head at the same stack depth,
// which leaves a "finite" flag in the routine's frame slot for a stale read to find.
func TestVKBF16CvtFallbackNaN(t *testing.T) {
	skipWithoutAVX512(t)
	if !avx512BF16 {
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(63, 64))
	for _, K := range []int{64, 96, 128} {
		for _, V := range []int{2, 3, 8} {
			for j := range V {
				hs := K * V
				kh, qh, v := make([]float32, K), make([]float32, K), make([]float32, V)
				src := make([]uint16, hs)
				for i := range K {
					kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
					qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
				}
				kh[0] = 0 // S'[·][0] = decay(0) = 0: a ±0 word in every finite row
				for x := range V {
					v[x] = float32(r.NormFloat64())
					for i := 1; i < K; i++ {
						src[x*K+i] = BF16RNE(float32(r.NormFloat64() * 0.5))
					}
				}
				tok := []float32{-0.03, 0.97, 0.7, 0.2}
				finite := append([]uint16(nil), src...)
				out := make([]uint16, hs)
				vkBF16AVX512Cvt(K, V, finite, []unsafe.Pointer{unsafe.Pointer(&out[0])}, kh, qh, v, make([]float32, V), tok, false)
				v[j] = math.Float32frombits(0x7fc0ffff)
				want32 := make([]float32, hs)
				widened := make([]float32, hs)
				for i, b := range src {
					widened[i] = math.Float32frombits(uint32(b) << 16)
				}
				wantO := make([]float32, V)
				vkF32AVX512(K, V, widened, []unsafe.Pointer{unsafe.Pointer(&want32[0])}, kh, qh, v, V, wantO, tok, nil)
				got, gotO := make([]uint16, hs), make([]float32, V)
				vkBF16AVX512Cvt(K, V, src, []unsafe.Pointer{unsafe.Pointer(&got[0])}, kh, qh, v, gotO, tok, true)
				for i := range got {
					if w := BF16RNE(want32[i]); got[i] != w {
						t.Fatalf("K=%d V=%d NaN row %d: [%d] = %#x, BF16RNE(f32) %#x", K, V, j, i, got[i], w)
					}
				}
				for i := range gotO {
					if math.Float32bits(gotO[i]) != math.Float32bits(wantO[i]) {
						t.Fatalf("K=%d V=%d NaN row %d: o[%d] = %#x, f32 %#x", K, V, j, i, math.Float32bits(gotO[i]), math.Float32bits(wantO[i]))
					}
				}
			}
		}
	}
}
