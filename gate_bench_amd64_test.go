//go:build !purego

package gdnsimd

import (
	"fmt"
	"testing"
)

// BenchmarkGate times the gate routines alone (the gated RMSNorm of one head's o, bf16 out, every
// slice hot in L1) at V = 128 (Qwen3-Next) and V = 80 (the odd shape), ns per call.
func BenchmarkGate(b *testing.B) {
	gates := map[string]func(o, z, w []float32, eps float32, out []uint16, outF []float32){
		"avx512": gateAVX512, "avx2": gateAVX2,
	}
	for _, im := range available {
		gate, ok := gates[im.name]
		if !ok {
			continue
		}
		for _, V := range []int{128, 80} {
			o, z, w := make([]float32, V), make([]float32, V), make([]float32, V)
			for i := range o {
				o[i], z[i], w[i] = float32(i)*0.01-0.5, float32(i)*0.03-2, 1+float32(i)*0.001
			}
			out := make([]uint16, V)
			b.Run(fmt.Sprintf("%s/V=%d", im.name, V), func(b *testing.B) {
				for range b.N {
					gate(o, z, w, 1e-6, out, nil)
				}
			})
		}
	}
}
