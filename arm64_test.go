//go:build arm64 && !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestDecayFormsNEON calls neonImpl.state (the T = 1 plan of stateKVf32NEON) directly with em1 and eg that do not belong together
// (eg ≠ 1 + em1), so the decay form it uses is visible in every output: x + em1·x when em1 ≥ −0.5,
// eg·x otherwise (NaN em1 included), in every strip width (V = 1…257 covers the 32-, 16-, 4- and
// 1-column strips and their mixtures), at every slice offset 0–15, out of place and in place,
// against stateGeneric, with NaN-payload guard bands before and after every slice.

// decaySizes are the K and V of the sweep.
var decaySizes = []int{1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 32, 33, 47, 64, 65, 80, 96, 127, 128, 129, 200, 255, 256, 257}

// decayCase is one (em1, eg) pair; near is the form SPEC Part A picks for em1 (x + em1·x if true).
type decayCase struct {
	name    string
	em1, eg float32
	near    bool
}

var decayCases = []decayCase{
	{"A em1=-0.25 eg=0.5", -0.25, 0.5, true},  // A decays by 0.75, B would by 0.5
	{"B em1=-0.75 eg=0.1", -0.75, 0.1, false}, // B decays by 0.1, A would by 0.25
	{"A em1=-0.5 eg=0.9", -0.5, 0.9, true},    // the threshold itself is form A
	{"B em1=-0.5⁻ eg=0.9", math.Nextafter32(-0.5, -1), 0.9, false},
	{"B em1=NaN eg=0.3", float32(math.NaN()), 0.3, false}, // NaN compares false: form B
	{"A em1=-0 eg=0.2", float32(math.Copysign(0, -1)), 0.2, true},
}

// decayNear fails unless got[i] is within tol·scale of want[i] for every i (NaN nowhere) and
// returns the largest |got − want| / scale.
func decayNear(t *testing.T, what string, got, want []float32, tol, scale float64) float64 {
	t.Helper()
	worst := 0.0
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) || math.IsInf(w, 0) {
			t.Fatalf("%s[%d]: reference is %g", what, i, w)
		}
		if !(math.Abs(g-w) <= tol*scale) {
			t.Fatalf("%s[%d] = %g, want %g (scale %g, tolerance %g)", what, i, g, w, scale, tol*scale)
		}
		worst = max(worst, math.Abs(g-w)/scale)
	}
	return worst
}

// decayScales returns the scales of the state and o comparisons: the head max of each, or the
// largest magnitude of the terms summed into an element if that is larger: o = decay(Sᵀq̂) + kq·δ
// cancels on some columns, and with few columns its head max can be far below the terms whose
// rounding (summation order differs) it carries. With |decay(x)| ≤ |x| and
// |δ_j| ≤ beta·(|v_j| + Σ_i |kh_i·S_ij|):
//
//	state: |S_ij| + |kh_i|·|δ_j|        o: Σ_i |qh_i·S_ij| + |kq|·|δ_j|
func decayScales(sIn, kh, qh, v, wantS, wantO []float32, beta, kq float32) (scaleS, scaleO float64) {
	K, V := len(kh), len(v)
	for _, w := range wantS {
		scaleS = max(scaleS, math.Abs(float64(w)))
	}
	for _, w := range wantO {
		scaleO = max(scaleO, math.Abs(float64(w)))
	}
	for j := range V {
		var sk, sq float64
		for i := range K {
			x := math.Abs(float64(sIn[i*V+j]))
			sk += math.Abs(float64(kh[i])) * x
			sq += math.Abs(float64(qh[i])) * x
		}
		d := math.Abs(float64(beta)) * (math.Abs(float64(v[j])) + sk)
		scaleO = max(scaleO, sq+math.Abs(float64(kq))*d)
		for i := range K {
			scaleS = max(scaleS, math.Abs(float64(sIn[i*V+j]))+math.Abs(float64(kh[i]))*d)
		}
	}
	return scaleS, scaleO
}

func TestDecayFormsNEON(t *testing.T) {
	neon := false
	for _, im := range available {
		neon = neon || im == &neonImpl
	}
	if !neon {
		if slices.Contains(strings.Split(os.Getenv("GDN_REQUIRE_KERNEL"), ","), "neon") {
			t.Fatal("GDN_REQUIRE_KERNEL names neon, but the neon kernel is not available")
		}
		t.Skip("SKIPPED: the neon kernel is not available on this CPU (GODEBUG=cpu.asimd=off?)")
	}
	const tol = 1e-5 // relative to the head max; fused and unfused x + em1·x differ by ~1 ulp
	for ci, c := range decayCases {
		if near := c.em1 >= nearOne; near != c.near {
			t.Fatalf("%s: case table says near=%v, stateGeneric picks near=%v", c.name, c.near, near)
		}
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(4, uint64(ci))) // per case: one failing case does not shift the others' data
			n, worstS, worstO := 0, 0.0, 0.0
			for _, V := range decaySizes {
				for _, K := range decaySizes {
					n++
					off := n % 16
					sc := newStateCall(t, r, K, V, off)
					sIn, sOut, kh, qh, v, o := sc.sIn, sc.sOut, sc.kh, sc.qh, sc.v, sc.o
					beta, kq := float32(0.6), float32(0.05)
					orig := append([]float32(nil), sIn...)
					inputs := func() []float32 { return append(append(append(append([]float32(nil), sIn...), kh...), qh...), v...) }
					before := inputs()

					neonImpl.state(sIn, sOut, kh, qh, v, o, c.em1, c.eg, beta, kq)
					wantS, wantO := make([]float32, K*V), make([]float32, V)
					stateGeneric(orig, wantS, kh, qh, v, wantO, c.em1, c.eg, beta, kq)
					what := fmt.Sprintf("K=%d V=%d off=%d", K, V, off)
					scaleS, scaleO := decayScales(orig, kh, qh, v, wantS, wantO, beta, kq)
					worstS = max(worstS, decayNear(t, what+" sOut", sOut, wantS, tol, scaleS))
					worstO = max(worstO, decayNear(t, what+" o", o, wantO, tol, scaleO))
					for i, x := range inputs() {
						if math.Float32bits(x) != math.Float32bits(before[i]) {
							t.Fatalf("%s: input element %d (sIn, kh, qh, v) modified: %g, was %g", what, i, x, before[i])
						}
					}
					sc.check(what)

					// In place (sOut = sIn): the same result.
					clear(o)
					neonImpl.state(sIn, sIn, kh, qh, v, o, c.em1, c.eg, beta, kq)
					decayNear(t, what+" in place sOut", sIn, wantS, tol, scaleS)
					decayNear(t, what+" in place o", o, wantO, tol, scaleO)
					sc.check(what + " in place")
				}
			}
			t.Logf("%d shapes; worst difference from stateGeneric / scale: state %.2g, o %.2g", n, worstS, worstO)
		})
	}
}

// TestTokensDecayFormsNEON runs the neon routines over T tokens with an em1 and an eg that do not
// belong together (eg ≠ 1 + em1), a different pair at every token, so the decay form each token
// uses shows in its o and its stored state: x + em1·x when em1 ≥ −0.5 (the threshold and −0
// included), eg·x otherwise and for a NaN em1. Against the generic routine of the same format,
// every token stored, shapes that reach every strip width, row group and tail.
func TestTokensDecayFormsNEON(t *testing.T) {
	k, ok := Lookup("neon")
	if !ok {
		t.Skip("no neon kernel")
	}
	g, _ := Lookup("generic")
	tk, ref := TokensOf(k), TokensOf(g)
	pairs := [][2]float32{
		{-0.25, 0.5}, {-0.75, 0.1}, {-0.5, 0.9}, {math.Nextafter32(-0.5, -1), 0.9},
		{float32(math.NaN()), 0.3}, {float32(math.Copysign(0, -1)), 0.2}, {-0.1, 0.6},
	}
	r := rand.New(rand.NewPCG(12, 4))
	for _, f := range Formats() {
		l := int(f.layout())
		for _, sh := range [][2]int{{1, 1}, {5, 7}, {17, 33}, {128, 53}, {33, 129}, {9, 6}} {
			c := newTokCase(r, sh[0], sh[1], len(pairs), false)
			for τ, p := range pairs {
				c.tok[4*τ], c.tok[4*τ+1] = p[0], p[1]
				c.storeAt[τ] = true
			}
			what := fmt.Sprintf("neon/%v/K=%d,V=%d", f, sh[0], sh[1])
			got := runTokens(t, tk, l, f.Storage != StorageF32, false, c, what)
			want := runTokens(t, ref, l, f.Storage != StorageF32, false, c, what+" (generic)")
			tol := 1e-5
			if f.Storage != StorageF32 {
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
