//go:build !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestKVBF16Cvt: the AVX-512 [K][V] bf16 routine over T tokens, whose rows without NaN are rounded
// two vectors at a time by VCVTNE2PS2BF16 where the CPU has it (cvt; a row with a ±0 stored word
// is stored again by the integer rounding), stores BF16RNE of the f32 routine's states (and gives
// its o and carry), bit for bit, with cvt false and true. The states are ordinary values with one
// denormal that survives the call (k̂_i = 0 in its row, em1 = 0: decay(x) = x) placed in the first
// or the second vector of a pair, in a masked last vector or in an odd block's unpaired one, in
// the first, a middle or the last row, or rows of special values (±0, denormals, values that
// round to ±Inf, ±Inf; NaN, which takes the integer path); V from one vector to several blocks,
// whole and masked, K up to 200 (full blocks of 3 and 2 ZMM), T 1–3 with stores at some or all
// tokens, the stores aligned (non-temporal where the routine takes them so: cvt is not used
// there) or one word off, in place too; guard bands around every store.
func TestKVBF16Cvt(t *testing.T) {
	skipWithoutAVX512(t)
	r := rand.New(rand.NewPCG(71, 72))
	bits := math.Float32frombits
	work := make([]float32, kvWork+16)
	cases := 0
	for _, cvt := range []bool{false, true} {
		if cvt && !avx512BF16 {
			t.Log("no AVX512_BF16: cvt = true not run")
			continue
		}
		for _, K := range []int{1, 3, 64, 128, 150, 200} { // (full blocks of 4, 3 and 2 ZMM)
			for _, V := range []int{16, 17, 32, 48, 63, 64, 80, 96, 100, 128, 144, 200, 256} {
				for _, T := range []int{1, 2, 3} {
					for kind := range 6 {
						hs := K * V
						kh, qh, v := make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
						for i := range kh {
							kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
							qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
						}
						for i := range v {
							v[i] = float32(r.NormFloat64())
						}
						src := make([]uint16, hs)
						for e := range src {
							src[e] = BF16RNE(float32(r.NormFloat64() * 0.5))
						}
						// The denormal's row and column: kinds 0–3 a lone one (first vector of a pair,
						// second, the block's last column, the last column of V), 4 a row of specials,
						// 5 none.
						row := []int{0, K / 2, K - 1}[r.IntN(3)]
						col := 0
						switch kind {
						case 0:
							col = r.IntN(min(16, V))
						case 1:
							col = min(16+r.IntN(16), V-1)
						case 2:
							col = min(64*r.IntN((V+63)/64)+63, V-1)
						case 3:
							col = V - 1
						}
						tok := make([]float32, 4*T)
						for τ := range T {
							em1 := -0.03 * r.Float32()
							if kind < 4 {
								em1 = 0
								kh[τ*K+row] = 0
							}
							tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.7, 0.3
						}
						switch {
						case kind < 4:
							src[row*V+col] = BF16RNE(bits(uint32(0x10000+r.IntN(0x7f0000)) | uint32(r.IntN(2))<<31))
						case kind == 4:
							for j := range V {
								src[row*V+j] = BF16RNE([]float32{0, float32(math.Copysign(0, -1)), bits(0x00010000), bits(0x807f0000),
									bits(0x00800000), float32(math.Inf(1)), float32(math.Inf(-1)), bits(0x7f7fffff), bits(0xff7f8000),
									bits(0x00400000), 1.5, -3}[(j+row)%12])
							}
						}
						if kind == 4 && r.IntN(2) == 0 {
							src[r.IntN(hs)] = 0x7fc1 // a NaN: its column's δ too (the integer path)
						}
						src32 := make([]float32, hs)
						for e, x := range src {
							src32[e] = bits(uint32(x) << 16)
						}
						// The stores: at every token or some, aligned to 64 bytes or one word off.
						off := r.IntN(2)
						every := r.IntN(2) == 0
						st := make([]*kvBuf16, T)
						stores := make([]unsafe.Pointer, T)
						wantSt := make([][]float32, T)
						stores32 := make([]unsafe.Pointer, T)
						for τ := range T {
							if every || τ == T-1 || r.IntN(2) == 0 {
								st[τ] = newKVBuf16(hs, off)
								stores[τ] = unsafe.Pointer(&st[τ].s[0])
								wantSt[τ] = make([]float32, hs)
								stores32[τ] = unsafe.Pointer(&wantSt[τ][0])
							}
						}
						wo, gotO := make([]float32, T*V), make([]float32, T*V)
						stateKVf32AVX512(K, V, append([]float32(nil), src32...), stores32, kh, qh, v, V, wo, tok, work, nil)
						carry := make([]float32, hs)
						stateKVbf16AVX512(K, V, src, nil, stores, carry, kh, qh, v, V, gotO, tok, work, nil, cvt)
						check := func(what string, b *kvBuf16, want []float32) {
							t.Helper()
							b.check(t, fmt.Sprintf("cvt %v K %d V %d T %d kind %d off %d %s", cvt, K, V, T, kind, off, what))
							got := b.s
							for e := range want {
								if w := BF16RNE(want[e]); got[e] != w {
									t.Fatalf("cvt %v K %d V %d T %d kind %d (row %d col %d) off %d %s: state[%d][%d] = %#04x, want %#04x",
										cvt, K, V, T, kind, row, col, off, what, e/V, e%V, got[e], w)
								}
							}
						}
						for τ := range T {
							if st[τ] != nil {
								check("store", st[τ], wantSt[τ])
							}
						}
						for e := range carry {
							if math.Float32bits(carry[e]) != math.Float32bits(wantSt[T-1][e]) {
								t.Fatalf("cvt %v K %d V %d T %d kind %d: carry[%d] = %v, want %v", cvt, K, V, T, kind, e, carry[e], wantSt[T-1][e])
							}
						}
						for j := range wo {
							if math.Float32bits(gotO[j]) != math.Float32bits(wo[j]) {
								t.Fatalf("cvt %v K %d V %d T %d kind %d: o[%d] = %v, want %v", cvt, K, V, T, kind, j, gotO[j], wo[j])
							}
						}
						if T == 1 { // in place: the one store is src
							inPlace := newKVBuf16(hs, off)
							copy(inPlace.s, src)
							stateKVbf16AVX512(K, V, inPlace.s, nil, []unsafe.Pointer{unsafe.Pointer(&inPlace.s[0])}, nil, kh, qh, v, V, gotO, tok, work, nil, cvt)
							check("in place", inPlace, wantSt[0])
						}
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d cases", cases)
}
