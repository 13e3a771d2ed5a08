//go:build (amd64 || arm64) && !purego

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

// The state routines over T tokens of every assembly kernel, in their flat signature (see
// tokens_generic.go), against the generic routine of the same format: T ∈ {1, 2, 5}, tails, the
// zero state, stores at some tokens only, bf16 stores and the f32 carry, v rows with a stride whose
// gap is poisoned, guard bands around every slice. A kernel's missing routine is a visible skip.

var tokenShapes = [][2]int{{1, 1}, {3, 5}, {16, 16}, {17, 33}, {31, 8}, {64, 64}, {96, 80}, {128, 128}, {5, 129}, {129, 7}, {200, 48}}

// tokCase is one call's inputs.
type tokCase struct {
	K, V, T, vs int
	kh, qh, v   []float32
	tok         []float32
	srcF        []float32 // the f32 state before the first token (or zeros)
	storeAt     []bool    // which tokens store
	noCarry     bool      // bf16: no f32 carry asked for (a decode's call)
	rawSrc32    bool      // bf16 from src32: srcF itself, not widened from its bf16 rounding (a NaN payload's low bits reach the routine)
}

func newTokCase(r *rand.Rand, K, V, T int, zero bool) tokCase {
	c := tokCase{K: K, V: V, T: T, vs: V + 3}
	c.kh, c.qh = make([]float32, T*K), make([]float32, T*K)
	fill(r, c.kh, 1/math.Sqrt(float64(K)))
	fill(r, c.qh, 1/float64(K))
	c.v = make([]float32, (T-1)*c.vs+V)
	for i := range c.v {
		if i%c.vs >= V {
			c.v[i] = float32(math.NaN()) // the gap between rows is never read
		} else {
			c.v[i] = float32(r.NormFloat64())
		}
	}
	c.tok = make([]float32, 4*T)
	for τ := range T {
		em1 := -0.02 * float32(τ+1)
		if τ%3 == 2 {
			em1 = -0.9 // a strong decay: the eg·S form
		}
		// eg is deliberately not 1 + em1 (by 2%): a routine taking the wrong form's parameter
		// differs visibly from the generic one.
		c.tok[4*τ], c.tok[4*τ+1] = em1, (1+em1)*1.02
		c.tok[4*τ+2], c.tok[4*τ+3] = float32(0.3+0.1*float64(τ)), float32(0.05*r.NormFloat64())
	}
	c.srcF = make([]float32, K*V)
	if !zero {
		fill(r, c.srcF, 0.3)
	}
	c.storeAt = make([]bool, T)
	for τ := range T {
		c.storeAt[τ] = τ == T-1 || τ%2 == 1
	}
	return c
}

func widenAll(b []uint16) []float32 {
	f := make([]float32, len(b))
	for i, x := range b {
		f[i] = math.Float32frombits(uint32(x) << 16)
	}
	return f
}

// tokResult is a call's outputs.
type tokResult struct {
	o      []float32
	stores [][]float32 // widened for bf16
	bf16   [][]uint16
	carry  []float32
}

// runTokens runs one routine (f32 if bf16 is false) of the layout on c, every slice between guard
// bands; src32 runs a bf16 routine from the f32 state.
func runTokens(t *testing.T, tk gdnsimd.Tokens, layout int, bf16, src32 bool, c tokCase, what string) tokResult {
	t.Helper()
	K, V, T := c.K, c.V, c.T
	hs := K * V
	var checks []func(string)
	g32 := func(src []float32, off int) []float32 {
		s, chk := kerneltest.Guarded[float32](t, len(src), off)
		copy(s, src)
		checks = append(checks, chk)
		return s
	}
	kh, qh, v, tok := g32(c.kh, 1), g32(c.qh, 2), g32(c.v, 3), g32(c.tok, 4)
	o, chk := kerneltest.Guarded[float32](t, T*V, 5)
	checks = append(checks, chk)
	res := tokResult{o: o, stores: make([][]float32, T), bf16: make([][]uint16, T)}
	stores := make([]unsafe.Pointer, T)
	if !bf16 {
		src := g32(c.srcF, 6)
		for τ := range T {
			if c.storeAt[τ] {
				s, chk := kerneltest.Guarded[float32](t, hs, 7+τ)
				checks = append(checks, chk)
				res.stores[τ], stores[τ] = s, unsafe.Pointer(&s[0])
			}
		}
		tk.F32[layout](K, V, src, stores, kh, qh, v, c.vs, o, tok, nil)
	} else {
		src16, chk := kerneltest.Guarded[uint16](t, hs, 6)
		checks = append(checks, chk)
		copy(src16, roundAll(c.srcF))
		var s32 []float32
		if src32 {
			if c.rawSrc32 {
				s32 = g32(c.srcF, 9)
			} else {
				s32 = g32(widenAll(roundAll(c.srcF)), 9)
			}
			for i := range src16 {
				src16[i] = 0x7fc1 // must not be read
			}
		}
		for τ := range T {
			if c.storeAt[τ] {
				s, chk := kerneltest.Guarded[uint16](t, hs, 7+τ)
				checks = append(checks, chk)
				res.bf16[τ], stores[τ] = s, unsafe.Pointer(&s[0])
			}
		}
		var carry []float32
		if !c.noCarry {
			var chk func(string)
			carry, chk = kerneltest.Guarded[float32](t, hs, 10)
			checks = append(checks, chk)
			res.carry = carry
		}
		tk.BF16[layout](K, V, src16, s32, stores, carry, kh, qh, v, c.vs, o, tok, nil)
		for τ := range T {
			if res.bf16[τ] != nil {
				res.stores[τ] = widenAll(res.bf16[τ])
			}
		}
	}
	for _, chk := range checks {
		chk(what)
	}
	kerneltest.EqualBits(t, what+" kh", kh, c.kh)
	kerneltest.EqualBits(t, what+" v", v, c.v)
	return res
}

// TestTokensPiece: every assembly kernel's routines over T tokens against the generic ones.
func TestTokensPiece(t *testing.T) {
	ref := gdnsimd.TokensOf(gdnsimd.Default()) // replaced below: generic
	if k, ok := gdnsimd.Lookup("generic"); ok {
		ref = gdnsimd.TokensOf(k)
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		if name == "generic" {
			t.Skip("generic: the reference")
		}
		k, _ := gdnsimd.Lookup(name)
		tk := gdnsimd.TokensOf(k)
		for _, f := range gdnsimd.Formats() {
			l := int(f.Layout)
			t.Run("format="+f.String(), func(t *testing.T) {
				if !f.BF16 && tk.F32[l] == nil || f.BF16 && tk.BF16[l] == nil {
					t.Skipf("%s has no %v routine over T tokens", name, f)
				}
				r := rand.New(rand.NewPCG(11, uint64(l)))
				for _, T := range []int{1, 2, 5} {
					for si, sh := range tokenShapes {
						for _, src32 := range []bool{false, true} {
							if src32 && !f.BF16 {
								continue
							}
							c := newTokCase(r, sh[0], sh[1], T, si%4 == 0)
							c.noCarry = si%2 == 1
							what := fmt.Sprintf("%s/%v/T=%d/K=%d,V=%d/src32=%v/carry=%v", name, f, T, sh[0], sh[1], src32, !c.noCarry)
							got := runTokens(t, tk, l, f.BF16, src32, c, what)
							want := runTokens(t, ref, l, f.BF16, src32, c, what+" (generic)")
							near(t, what+" o", got.o, want.o, 1e-5)
							for τ := range T {
								if !c.storeAt[τ] {
									continue
								}
								if !f.BF16 {
									near(t, fmt.Sprintf("%s state after token %d", what, τ), got.stores[τ], want.stores[τ], 1e-5)
									continue
								}
								// bf16: within one bf16 step of the generic rounding of (almost) the same f32,
								// or (SPEC) within 1e-5 of the head max: an element that cancels to near 0
								// carries the f32 rounding of the head's magnitudes, many of its own bf16 steps.
								scale := 0.0
								for _, x := range want.stores[τ] {
									scale = max(scale, math.Abs(float64(x)))
								}
								for i, b := range got.bf16[τ] {
									diff := math.Abs(float64(got.stores[τ][i]) - float64(want.stores[τ][i]))
									if d := int(b) - int(want.bf16[τ][i]); (d > 1 || d < -1) && b&0x7fff != 0 && diff > 1e-5*scale {
										t.Fatalf("%s bf16 state after token %d [%d] = %#x, generic %#x", what, τ, i, b, want.bf16[τ][i])
									}
								}
							}
							if f.BF16 && !c.noCarry {
								near(t, what+" carry", got.carry, want.carry, 1e-5)
								// The last store is the carry rounded: the same bits, not just close.
								kerneltest.EqualBits(t, what+" last store = BF16RNE(carry)", got.bf16[T-1], roundAll(got.carry))
							}
						}
					}
				}
			})
		}
	})
}
