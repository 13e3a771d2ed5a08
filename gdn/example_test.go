package gdn_test

import (
	"fmt"
	"math"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// One decode step of a small layer (2 k-heads, 4 v-heads, K = 8, V = 4) for 2 sequences, the state
// updated in place.
func Example() {
	const B, HK, HV, K, V = 2, 2, 4, 8, 4
	fill := func(n int, f func(i int) float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = f(i)
		}
		return s
	}
	layer, err := gdn.New(gdn.Config{
		KHeads: HK, VHeads: HV, K: K, V: V,
		ALog:       fill(HV, func(i int) float32 { return float32(i) / 4 }),
		DtBias:     fill(HV, func(int) float32 { return 1 }),
		NormWeight: fill(V, func(int) float32 { return 1 }),
	})
	if err != nil {
		panic(err)
	}
	state := make([]float32, B*HV*K*V) // a new sequence starts from a zero state
	out := make([]gdn.BF16, B*HV*V)
	for token := 0; token < 3; token++ {
		wave := func(i int) float32 { return float32(math.Sin(float64(i+token) * 0.7)) }
		in := gdn.Input{
			Q: fill(B*HK*K, wave), K: fill(B*HK*K, wave),
			V: fill(B*HV*V, wave), Z: fill(B*HV*V, wave),
			B: fill(B*HV, wave), A: fill(B*HV, wave),
			State: state,
		}
		if err := layer.Step(in, gdn.Output{State: state, Out: out}); err != nil {
			panic(err)
		}
	}
	fmt.Printf("kernel chosen: %v\n", layer.Kernel() != "")
	fmt.Printf("head 0 out: %.1f %.1f %.1f %.1f\n", out[0].Float32(), out[1].Float32(), out[2].Float32(), out[3].Float32())

	// A malformed call is an error wrapping a sentinel, and writes nothing.
	err = layer.Step(gdn.Input{B: make([]float32, 3)}, gdn.Output{Out: out})
	fmt.Println(err)
	// Output:
	// kernel chosen: true
	// head 0 out: 1.0 0.8 0.1 0.1
	// gdn: slice length mismatch: Input.B has length 3, want a multiple of VHeads = 4
}
