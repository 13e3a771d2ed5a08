//go:build amd64 && !purego

package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// TestVKTails runs the amd64 [V][K] routines at every K from 1 to 264 (so every row width of both
// ISAs, every shape boundary of asm/state_vk.go and every guarded vector's boundary on either
// side, and the widths beyond the assembly's range, which the wrappers give to the portable
// routine), every slice between guard bands (runTokens):
//
//   - f32, bf16 (with and without the f32 carry) and bf16 from an f32 src32 against the generic
//     routine, T = 1 and T = 3 (both decay forms), V = 2 (the one-row groups only), V = 1 (avx2: the
//     odd row alone, vkOddRow) and V = 53
//     (with T > 1 an AVX-512 block of 32 rows and one of 16, then a full group and the one-row
//     tail groups);
//   - the f32 routine's state after each token of the T = 3 call, bit for bit, against three
//     calls of T = 1 (those take the register groups; a row's arithmetic must not depend on T).
func TestVKTails(t *testing.T) {
	ref, _ := gdnsimd.Lookup("generic")
	rt := gdnsimd.TokensOf(ref)
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		tk := gdnsimd.TokensOf(k)
		l := int(gdnsimd.VK)
		r := rand.New(rand.NewPCG(21, 22))
		for K := 1; K <= 264; K++ {
			Vs := []int{2, 53}
			if name == "avx2" {
				// V = 1: the odd row alone (vkOddRow, the portable arithmetic). Not for the
				// others: one row's max |o| is too small a scale for the relative tolerance.
				Vs = append(Vs, 1)
			}
			for _, V := range Vs {
				for _, T := range []int{1, 3} {
					c := newTokCase(r, K, V, T, false)
					for τ := range T {
						c.storeAt[τ] = true
					}
					for _, st := range []struct {
						bf16, src32, noCarry bool
					}{{false, false, false}, {true, false, false}, {true, true, false}, {true, false, true}} {
						c.noCarry = st.noCarry // (a decode's call: AVX2 takes the pairs' once)
						what := fmt.Sprintf("%s K=%d V=%d T=%d bf16=%v src32=%v carry=%v", name, K, V, T, st.bf16, st.src32, !st.noCarry)
						got := runTokens(t, tk, l, st.bf16, st.src32, c, what)
						want := runTokens(t, rt, l, st.bf16, st.src32, c, what+" (generic)")
						near(t, what+" o", got.o, want.o, 1e-5)
						for τ := range T {
							if !st.bf16 {
								near(t, fmt.Sprintf("%s state after token %d", what, τ), got.stores[τ], want.stores[τ], 1e-5)
								continue
							}
							scale := 0.0
							for _, x := range want.stores[τ] {
								scale = max(scale, math.Abs(float64(x)))
							}
							for i, b := range got.bf16[τ] {
								diff := math.Abs(float64(got.stores[τ][i]) - float64(want.stores[τ][i]))
								if d := int(b) - int(want.bf16[τ][i]); (d > 1 || d < -1) && diff > 1e-5*scale {
									t.Fatalf("%s: bf16 state after token %d [%d] = %#x, generic %#x", what, τ, i, b, want.bf16[τ][i])
								}
							}
						}
						if st.bf16 && !st.noCarry {
							near(t, what+" carry", got.carry, want.carry, 1e-5)
							kerneltest.EqualBits(t, what+" last store = BF16RNE(carry)", got.bf16[T-1], roundAll(got.carry))
						}
						if st.bf16 || T == 1 {
							continue
						}
						// Token by token, from the state the call started from.
						src := c.srcF
						for τ := range T {
							c1 := tokCase{K: K, V: V, T: 1, vs: c.vs, kh: c.kh[τ*K : (τ+1)*K], qh: c.qh[τ*K : (τ+1)*K],
								v: c.v[τ*c.vs : τ*c.vs+V], tok: c.tok[4*τ : 4*τ+4], srcF: src, storeAt: []bool{true}}
							one := runTokens(t, tk, l, false, false, c1, fmt.Sprintf("%s token %d alone", what, τ))
							kerneltest.EqualBits(t, fmt.Sprintf("%s: state after token %d, alone vs in the call", what, τ), one.stores[0], got.stores[τ])
							kerneltest.EqualBits(t, fmt.Sprintf("%s: o of token %d, alone vs in the call", what, τ), one.o, got.o[τ*V:(τ+1)*V])
							src = one.stores[0]
						}
					}
				}
			}
		}
	})
}
