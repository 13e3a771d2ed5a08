//go:build arm64 && !purego

package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd"
)

// TestTokensDecayFormsNEON runs the neon routines over T tokens with an em1 and an eg that do not
// belong together (eg ≠ 1 + em1), a different pair at every token, so the decay form each token
// uses shows in its o and its stored state: x + em1·x when em1 ≥ −0.5 (the threshold and −0
// included), eg·x otherwise and for a NaN em1. Against the generic routine of the same format,
// every token stored, shapes that reach every strip width, row group and tail.
func TestTokensDecayFormsNEON(t *testing.T) {
	k, ok := gdnsimd.Lookup("neon")
	if !ok {
		t.Skip("no neon kernel")
	}
	g, _ := gdnsimd.Lookup("generic")
	tk, ref := gdnsimd.TokensOf(k), gdnsimd.TokensOf(g)
	pairs := [][2]float32{
		{-0.25, 0.5}, {-0.75, 0.1}, {-0.5, 0.9}, {math.Nextafter32(-0.5, -1), 0.9},
		{float32(math.NaN()), 0.3}, {float32(math.Copysign(0, -1)), 0.2}, {-0.1, 0.6},
	}
	r := rand.New(rand.NewPCG(12, 4))
	for _, f := range gdnsimd.Formats() {
		l := int(f.Layout)
		for _, sh := range [][2]int{{1, 1}, {5, 7}, {17, 33}, {128, 53}, {33, 129}, {9, 6}} {
			c := newTokCase(r, sh[0], sh[1], len(pairs), false)
			for τ, p := range pairs {
				c.tok[4*τ], c.tok[4*τ+1] = p[0], p[1]
				c.storeAt[τ] = true
			}
			what := fmt.Sprintf("neon/%v/K=%d,V=%d", f, sh[0], sh[1])
			got := runTokens(t, tk, l, f.BF16, false, c, what)
			want := runTokens(t, ref, l, f.BF16, false, c, what+" (generic)")
			tol := 1e-5
			if f.BF16 {
				tol = 1e-2 // a bf16 step, against a wrong form's 0.2 and more
			}
			near(t, what+" o", got.o, want.o, tol)
			for τ := range pairs {
				near(t, fmt.Sprintf("%s state after token %d (em1 %g, eg %g)", what, τ, pairs[τ][0], pairs[τ][1]),
					got.stores[τ], want.stores[τ], tol)
			}
		}
	}
}
