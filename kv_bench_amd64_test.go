//go:build !purego

package gdnsimd

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// BenchmarkKVRoutine times the [K][V] routines alone, per kernel and shape (K×V: the hot 128×128,
// the odd 96×80, and tails off the vector sizes): decode (T = 1, in place, over 32 heads of one
// contiguous pool, so the state comes from L2/L3) through the single-token routine (f32, as the
// driver calls it) and the bf16 routine over T tokens, in ns per head; prefill (one head, T = 64
// tokens, one store after the last) through the routines over T tokens, in ns per head-token.
func BenchmarkKVRoutine(b *testing.B) {
	type kern struct {
		name string
		one  single
		f32  tokensF32
		bf16 tokensBF16
	}
	var ks []kern
	for _, im := range available {
		switch im.name {
		case "avx512":
			ks = append(ks, kern{"avx512", stateAVX512, kvF32AVX512, kvBF16AVX512})
		case "avx2":
			ks = append(ks, kern{"avx2", stateAVX2, kvF32AVX2, kvBF16AVX2})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int, s float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = s * (2*r.Float32() - 1)
		}
		return x
	}
	for _, k := range ks {
		for _, sh := range [][2]int{{128, 128}, {96, 80}, {96, 83}, {96, 100}, {128, 200}} {
			K, V := sh[0], sh[1]
			hs := K * V
			tokens := func(T int) (kh, qh, v, o, tok []float32) {
				kh, qh, v, o = rnd(T*K, 0.09), rnd(T*K, 0.09), rnd(T*V, 1), make([]float32, T*V)
				tok = make([]float32, 4*T)
				for τ := range T {
					em1 := -0.02 * r.Float32()
					tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.5, 0.3
				}
				return
			}
			for _, bf := range []bool{false, true} {
				st := "f32"
				if bf {
					st = "bf16"
				}
				name := fmt.Sprintf("kernel=%s/K=%d,V=%d/%s", k.name, K, V, st)
				b.Run(name+"/decode-32heads", func(b *testing.B) {
					const H = 32
					kh, qh, v, o, tok := tokens(1)
					pool := rnd(H*hs, 0.5)
					pool16 := make([]uint16, H*hs)
					for i, x := range pool {
						pool16[i] = BF16RNE(x)
					}
					stores := make([]unsafe.Pointer, 1)
					b.ResetTimer()
					for range b.N {
						for h := range H {
							if bf {
								s := pool16[h*hs : (h+1)*hs]
								stores[0] = unsafe.Pointer(&s[0])
								k.bf16(K, V, s, nil, stores, nil, kh, qh, v, V, o, tok, nil)
							} else {
								s := pool[h*hs : (h+1)*hs]
								k.one(s, s, kh, qh, v, o, tok[0], tok[1], tok[2], tok[3])
							}
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*H), "ns/head")
				})
				b.Run(name+"/prefill-T64", func(b *testing.B) {
					const T = 64
					kh, qh, v, o, tok := tokens(T)
					src := rnd(hs, 0.5)
					src16 := make([]uint16, hs)
					for i, x := range src {
						src16[i] = BF16RNE(x)
					}
					dst, dst16 := make([]float32, hs), make([]uint16, hs)
					stores := make([]unsafe.Pointer, T)
					b.ResetTimer()
					for range b.N {
						if bf {
							stores[T-1] = unsafe.Pointer(&dst16[0])
							k.bf16(K, V, src16, nil, stores, nil, kh, qh, v, V, o, tok, nil)
						} else {
							stores[T-1] = unsafe.Pointer(&dst[0])
							k.f32(K, V, src, stores, kh, qh, v, V, o, tok, nil)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/head-token")
				})
			}
		}
	}
}
