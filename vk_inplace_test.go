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

// TestVKInPlace holds the amd64 [V][K] f32 routines, one token stored over its own src (the
// decode step in place), to the same call out of place, bit for bit: K from 1 to 140 (every row
// tail; AVX2's overlapping last vector, whose lanes the vector before it also writes, must be read
// before either is stored), V odd and even (pairs and the one-row group), both decay forms.
func TestVKInPlace(t *testing.T) {
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		f := gdnsimd.TokensOf(k).F32[gdnsimd.VK]
		r := rand.New(rand.NewPCG(31, 32))
		for K := 1; K <= 140; K++ {
			for _, V := range []int{1, 2, 3, 7} {
				for _, em1 := range []float32{-0.03, -0.9} {
					vec := func(n int, sd float64) []float32 {
						x := make([]float32, n)
						for i := range x {
							x[i] = float32(sd * r.NormFloat64())
						}
						return x
					}
					src := vec(K*V, 0.5)
					kh, qh, v := vec(K, 1/math.Sqrt(float64(K))), vec(K, 1/math.Sqrt(float64(K))), vec(V, 1)
					tok := []float32{em1, 1 + em1, 0.7, 0.2}
					out := make([]float32, K*V)
					oOut, oIn := make([]float32, V), make([]float32, V)
					f(K, V, src, []unsafe.Pointer{unsafe.Pointer(&out[0])}, kh, qh, v, V, oOut, tok, nil)
					in := append([]float32(nil), src...)
					f(K, V, in, []unsafe.Pointer{unsafe.Pointer(&in[0])}, kh, qh, v, V, oIn, tok, nil)
					what := fmt.Sprintf("%s K=%d V=%d em1=%v", name, K, V, em1)
					for i := range out {
						if math.Float32bits(in[i]) != math.Float32bits(out[i]) {
							t.Fatalf("%s: in place [%d] = %v, out of place %v", what, i, in[i], out[i])
						}
					}
					for j := range oOut {
						if math.Float32bits(oIn[j]) != math.Float32bits(oOut[j]) {
							t.Fatalf("%s: o[%d] in place %v, out of place %v", what, j, oIn[j], oOut[j])
						}
					}
				}
			}
		}
	})
}
