//go:build !purego

package gdnsimd

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func BenchmarkZZKVOne(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int, s float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = s * (2*r.Float32() - 1)
		}
		return x
	}
	type kern struct {
		name string
		one  single
		f32  tokensF32
	}
	ks := []kern{{"avx512", stateAVX512, kvF32AVX512}, {"avx2", stateAVX2, kvF32AVX2}}
	for _, sh := range [][2]int{{128, 128}, {96, 80}} {
		K, V := sh[0], sh[1]
		hs := K * V
		for _, heads := range []int{32, 2048} {
			kh, qh, v, o := rnd(K, 0.09), rnd(K, 0.09), rnd(V, 1), make([]float32, V)
			tok := []float32{-0.01, 0.99, 0.5, 0.3}
			pool := rnd(heads*hs, 0.5)
			stores := make([]unsafe.Pointer, 1)
			for _, k := range ks {
				for _, via := range []string{"single", "tokens"} {
					b.Run(fmt.Sprintf("%s/%dx%d/H%d/%s", k.name, K, V, heads, via), func(b *testing.B) {
						for range b.N {
							for h := range heads {
								s := pool[h*hs : (h+1)*hs]
								if via == "single" {
									k.one(s, s, kh, qh, v, o, tok[0], tok[1], tok[2], tok[3])
								} else {
									stores[0] = unsafe.Pointer(&s[0])
									k.f32(K, V, s, stores, kh, qh, v, V, o, tok, nil)
								}
							}
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*heads), "ns/head")
					})
				}
			}
		}
	}
}
