//go:build amd64 && !purego

package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
)

// The amd64 bf16 routines over T tokens: in place, and with the gates and k̂ non-finite.

// TestTokensBF16InPlace: every amd64 kernel's bf16 routines, one token stored over its own src
// (the decode step in place), against the same call out of place and against BF16RNE of the f32
// routine, bit for bit: K 1…140, V odd and even, both forms, heads with a poisoned row/column
// in the middle (once's fallback mid-head, after pairs were already stored in place).
func TestTokensBF16InPlace(t *testing.T) {
	nan := func(b uint32) float32 { return math.Float32frombits(b) }
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		tk := gdnsimd.TokensOf(k)
		for _, layout := range []gdnsimd.Layout{gdnsimd.KV, gdnsimd.VK} {
			l := int(layout)
			f32, bf := tk.F32[l], tk.BF16[l]
			r := rand.New(rand.NewPCG(41, uint64(l)))
			for K := 1; K <= 140; K++ {
				for _, V := range []int{1, 2, 3, 7, 10, 33} {
					for _, em1 := range []float32{-0.03, -0.9} {
						for poison := range 4 {
							vec := func(n int, sd float64) []float32 {
								x := make([]float32, n)
								for i := range x {
									x[i] = float32(sd * r.NormFloat64())
								}
								return x
							}
							src := widenAll(roundAll(vec(K*V, 0.5)))
							kh, qh, v := vec(K, 1/math.Sqrt(float64(K))), vec(K, 1/math.Sqrt(float64(K))), vec(V, 1)
							j := V / 2 // a row (column) in the middle: not the first pair
							switch poison {
							case 1:
								v[j] = nan(0x7fc0ffff)
							case 2:
								src[stateIndex(layout, K, V, r.IntN(K), j)] = float32(math.Inf(1))
							case 3: // k̂_i = 0 where S is Inf: 0·Inf in the dot
								i := r.IntN(K)
								kh[i] = 0
								src[stateIndex(layout, K, V, i, j)] = float32(math.Inf(-1))
							}
							tok := []float32{em1, 1 + em1, 0.7, 0.2}
							want32 := make([]float32, K*V)
							f32(K, V, append([]float32(nil), src...), []unsafe.Pointer{unsafe.Pointer(&want32[0])}, kh, qh, v, V, make([]float32, V), tok, nil)
							want := roundAll(want32)
							src16 := roundAll(src)
							out := make([]uint16, K*V)
							bf(K, V, src16, nil, []unsafe.Pointer{unsafe.Pointer(&out[0])}, nil, kh, qh, v, V, make([]float32, V), tok, nil)
							in := append([]uint16(nil), src16...)
							bf(K, V, in, nil, []unsafe.Pointer{unsafe.Pointer(&in[0])}, nil, kh, qh, v, V, make([]float32, V), tok, nil)
							what := fmt.Sprintf("%s %v K=%d V=%d em1=%v poison=%d", name, layout, K, V, em1, poison)
							for i := range out {
								if out[i] != want[i] {
									t.Fatalf("%s: out of place [%d] = %#x, BF16RNE(f32) %#x", what, i, out[i], want[i])
								}
								if in[i] != want[i] {
									t.Fatalf("%s: in place [%d] = %#x, BF16RNE(f32) %#x", what, i, in[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestTokensBF16NonFiniteGates: TestTokensBF16NonFinite's comparison (bf16 routine = BF16RNE of
// the kernel's own f32 routine, bit for bit) on more shapes (K inside the AVX2 shapes, where
// positions are guarded), more tokens (the AVX-512 [V][K] blocks at T > 1), and poisons the
// finiteDelta argument has to cover: k̂ NaN, k̂_i = 0 under a state ±Inf, the gates NaN or ±Inf,
// em1 = 0 or eg = 0 under a state ±Inf, beta = 0 with v ±Inf, a NaN only at the last token.
func TestTokensBF16NonFiniteGates(t *testing.T) {
	shapes := [][2]int{{8, 9}, {9, 16}, {24, 17}, {33, 8}, {40, 31}, {72, 20}, {100, 17}, {120, 64}, {128, 80}, {64, 81}}
	poisons := []string{"k NaN", "k 0 under Inf", "em1 NaN", "eg NaN", "beta NaN", "beta 0, v Inf", "em1 0 under Inf", "eg 0 under Inf", "v NaN last token", "kq NaN", "eg Inf"}
	nan := func(b uint32) float32 { return math.Float32frombits(b) }
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		tk := gdnsimd.TokensOf(k)
		for _, layout := range []gdnsimd.Layout{gdnsimd.KV, gdnsimd.VK} {
			l := int(layout)
			r := rand.New(rand.NewPCG(43, uint64(l)))
			for _, T := range []int{1, 3, 6} {
				for _, sh := range shapes {
					K, V := sh[0], sh[1]
					for p := range poisons {
						for _, src32 := range []bool{false, true} {
							c := newTokCase(r, K, V, T, false)
							c.srcF = widenAll(roundAll(c.srcF))
							c.noCarry = !src32
							for τ := range T {
								c.storeAt[τ] = τ == T-1 || r.IntN(2) == 0
							}
							τ := r.IntN(T)
							j := r.IntN(V)
							i := r.IntN(K)
							switch p {
							case 0:
								c.kh[τ*K+i] = nan(0x7fc0ffff)
							case 1:
								c.kh[τ*K+i] = 0
								c.srcF[stateIndex(layout, K, V, i, j)] = float32(math.Inf(1))
							case 2:
								c.tok[4*τ] = nan(0x7fc0ffff)
								c.tok[4*τ+1] = nan(0x7fc0ffff)
							case 3:
								c.tok[4*τ] = -0.9 // far form
								c.tok[4*τ+1] = nan(0x7fc0ffff)
							case 4:
								c.tok[4*τ+2] = nan(0x7fc0ffff)
							case 5:
								c.tok[4*τ+2] = 0
								c.v[τ*c.vs+j] = float32(math.Inf(-1))
							case 6:
								for x := range T {
									c.tok[4*x], c.tok[4*x+1] = 0, 1
								}
								c.srcF[stateIndex(layout, K, V, i, j)] = float32(math.Inf(-1))
							case 7:
								for x := range T {
									c.tok[4*x], c.tok[4*x+1] = -1, 0
								}
								c.srcF[stateIndex(layout, K, V, i, j)] = float32(math.Inf(1))
							case 8:
								c.v[(T-1)*c.vs+j] = nan(0xffc08001)
							case 9:
								c.tok[4*τ+3] = nan(0x7fc0ffff)
							case 10:
								c.tok[4*τ] = -0.9
								c.tok[4*τ+1] = float32(math.Inf(1))
							}
							what := fmt.Sprintf("%s/%v/T=%d/K=%d,V=%d/%s/src32=%v", name, layout, T, K, V, poisons[p], src32)
							bf16AsF32(t, tk, l, src32, c, what)
						}
					}
				}
			}
		}
	})
}
