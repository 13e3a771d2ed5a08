//go:build (amd64 || arm64) && !purego

package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// TestTokensBF16NonFinite: every kernel's bf16 routines over T tokens against its own f32 routines
// (SPEC: a bf16 pool stores bf16 of the state an f32 pool would store) bit for bit, NaN payloads
// included, on heads where some rows or columns go non-finite: a v of the token NaN, ±Inf, a
// state element ±Inf or NaN, values that overflow to Inf in the update or round past the largest
// bf16. The amd64 routines round without the NaN select where the token's δ are finite
// (finiteDelta in asm/): a row or column whose NaN that test missed stores the wrong bits here,
// but only if the NaN has low payload bits (0x7fc0ffff rounds to 0x7fc1 without the select,
// BF16RNE gives 0x7fc0). A NaN from a widened bf16 state, or made by arithmetic on ±Inf (the
// default NaN), has a zero low half, which both roundings give alike; so the payloads come from v
// (and, carried in the f32 state, reach later tokens) and from an f32 src32 (rawSrc32). The ±Inf
// and overflow cases hold the rounding without the select to BF16RNE on its other inputs.
func TestTokensBF16NonFinite(t *testing.T) {
	shapes := [][2]int{{128, 128}, {96, 80}, {64, 64}, {17, 33}, {8, 16}, {5, 129}, {200, 48}, {16, 7}}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := gdnsimd.Lookup(name)
		tk := gdnsimd.TokensOf(k)
		for _, f := range gdnsimd.Formats() {
			l := int(f.Layout)
			if !f.BF16 {
				continue
			}
			t.Run("format="+f.String(), func(t *testing.T) {
				if tk.F32[l] == nil || tk.BF16[l] == nil {
					t.Skipf("%s has no %v routines over T tokens", name, f)
				}
				r := rand.New(rand.NewPCG(23, uint64(l)))
				for _, T := range []int{1, 2, 4} {
					for _, sh := range shapes {
						for poison := range nonFiniteCases {
							for _, src32 := range []bool{false, true} {
								c := nonFiniteCase(r, f.Layout, sh[0], sh[1], T, poison, src32)
								c.noCarry = !src32 // a decode's call (the AVX2 [V][K] bf16 once), and a chunk's
								what := fmt.Sprintf("%s/%v/T=%d/K=%d,V=%d/%s/src32=%v", name, f, T, sh[0], sh[1], nonFiniteCases[poison], src32)
								bf16AsF32(t, tk, l, src32, c, what)
							}
						}
					}
				}
			})
		}
	})
}

// nonFiniteCases name the poisons of nonFiniteCase.
var nonFiniteCases = []string{"v NaN payloads", "v ±Inf", "state ±Inf and NaN", "overflow", "finite", "v NaN payloads, ±0 words"}

// nonFiniteCase is newTokCase with its state exact in bf16 (so that the f32 routine starts from
// the bf16 routine's widened state), poisoned as nonFiniteCases[poison] says in a few rows and
// columns (the first, the last, odd and even ones, so that every position of a group, pair or
// block piece is hit somewhere) at some tokens.
func nonFiniteCase(r *rand.Rand, layout gdnsimd.Layout, K, V, T, poison int, src32 bool) tokCase {
	c := newTokCase(r, K, V, T, false)
	c.srcF = widenAll(roundAll(c.srcF))
	cols := []int{0, V - 1, V / 2, r.IntN(V)}
	nan := func(bits uint32) float32 { return math.Float32frombits(bits) }
	payloads := []float32{nan(0x7fc0ffff), nan(0xffc08001), nan(0x7f80ffff), nan(0x7fc08000)}
	switch poison {
	case 5: // as 0, with element i0 of every row (column) 0 in the state and in k̂ at every token,
		// so that every stored row holds a ±0 word: the AVX-512 [V][K] VCVTNE2PS2BF16 rounding then
		// stores every group again with the integer one, NaN rows included
		i0 := r.IntN(K)
		for j := range V {
			c.srcF[stateIndex(layout, K, V, i0, j)] = 0
		}
		for τ := range T {
			c.kh[τ*K+i0] = 0
		}
		fallthrough
	case 0, 1: // v of token τ at column (row) j: δ_j non-finite from that token on
		for n, j := range cols {
			τ := (n + r.IntN(2)) % T
			x := payloads[n]
			if poison == 1 {
				x = float32(math.Inf(1 - 2*(n%2)))
			}
			c.v[τ*c.vs+j] = x
		}
	case 2: // state element (i, j) ±Inf or NaN: from src32 with low payload bits, else widened (low half 0)
		for n, j := range cols {
			x := float32(math.Inf(1 - 2*(n%2)))
			if n == 2 {
				x = nan(0x7fc10000)
				if src32 {
					x, c.rawSrc32 = nan(0x7fc0ffff), true
				}
			}
			c.srcF[stateIndex(layout, K, V, r.IntN(K), j)] = x
		}
	case 3: // elements near the largest float32: the update overflows to ±Inf, or rounds past the largest bf16
		for n, j := range cols {
			x := math.Float32frombits(0x7f7f0000 | uint32(n%2)<<31) // the largest bf16, 3.39e38
			c.srcF[stateIndex(layout, K, V, r.IntN(K), j)] = x
		}
	}
	return c
}

// stateIndex is the index of element (i, j) of a K×V state in the layout (i < K, j < V).
func stateIndex(layout gdnsimd.Layout, K, V, i, j int) int {
	if layout == gdnsimd.KV {
		return i*V + j
	}
	return j*K + i
}

// bf16AsF32 runs c through the bf16 routine of layout l (from src32 if asked) and the f32 one
// from the same state, and fails unless o, every store (rounded: BF16RNE) and the carry agree bit
// for bit.
func bf16AsF32(t *testing.T, tk gdnsimd.Tokens, l int, src32 bool, c tokCase, what string) {
	t.Helper()
	got := runTokens(t, tk, l, true, src32, c, what)
	want := runTokens(t, tk, l, false, false, c, what+" (f32)")
	kerneltest.EqualBits(t, what+" o", got.o, want.o)
	for τ := range c.T {
		if c.storeAt[τ] {
			kerneltest.EqualBits(t, fmt.Sprintf("%s bf16 state after token %d", what, τ), got.bf16[τ], roundAll(want.stores[τ]))
		}
	}
	if !c.noCarry {
		kerneltest.EqualBits(t, what+" carry", got.carry, want.stores[c.T-1])
	}
}
