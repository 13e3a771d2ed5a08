//go:build amd64 && !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// BenchmarkGate times the gate routines alone (the gated RMSNorm of one head's o, bf16 out, every
// slice hot in L1) at V = 128 (Qwen3-Next) and V = 80 (the odd shape), ns per call.
func BenchmarkGate(b *testing.B) {
	gates := map[string]func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool){
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
					gate(o, z, w, 1e-6, out, nil, false)
				}
			})
		}
	}
}

// BenchmarkConv times impl.conv (the conv front's causal conv1d and silu) of the assembly kernels
// and the portable one at n = 128 channels, T = 64 tokens, W = 4 taps, dense strides, every slice
// hot in L1, ns per call.
func BenchmarkConv(b *testing.B) {
	const n, W = 128, 4
	for _, T := range []int{1, 64} {
		g := routineBench{rand.New(rand.NewPCG(1, 2))}
		x, w, bias, u := g.rnd((T+W-1)*n, 2), g.rnd(W*n, 0.5), g.rnd(n, 0.5), make([]float32, T*n)
		rows := make([][]float32, T+W-1)
		for i := range rows {
			rows[i] = x[i*n : (i+1)*n]
		}
		for _, im := range append(available[:len(available):len(available)], &genericImpl) {
			b.Run(fmt.Sprintf("kernel=%s/T=%d", im.name, T), func(b *testing.B) {
				for range b.N {
					im.conv(u, n, rows, w, n, bias, W, T)
				}
			})
		}
	}
}

// routineBench are the inputs and the two measurements of the routine benchmarks.
type routineBench struct{ r *rand.Rand }

func (g routineBench) rnd(n int, s float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = s * (2*g.r.Float32() - 1)
	}
	return x
}

// tokens are T tokens' k̂, q̂ (rows of norm about 1), v, o and tok (em1 near 0).
func (g routineBench) tokens(K, V, T int) (kh, qh, v, o, tok []float32) {
	kh, qh, v, o = g.rnd(T*K, 0.09), g.rnd(T*K, 0.09), g.rnd(T*V, 1), make([]float32, T*V)
	tok = make([]float32, 4*T)
	for τ := range T {
		em1 := -0.02 * g.r.Float32()
		tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.5, 0.3
	}
	return
}

// prefill times one head, T = 64 tokens, one store after the last, in ns per head-token.
func (g routineBench) prefill(b *testing.B, f32 tokensF32, bf16 tokensBF16, K, V int, bf bool) {
	const T = 64
	hs := K * V
	kh, qh, v, o, tok := g.tokens(K, V, T)
	src := g.rnd(hs, 0.5)
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
			bf16(K, V, src16, nil, stores, nil, kh, qh, v, V, o, tok, nil)
		} else {
			stores[T-1] = unsafe.Pointer(&dst[0])
			f32(K, V, src, stores, kh, qh, v, V, o, tok, nil)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/head-token")
}

// decode times T = 1, in place, over H heads of one contiguous pool, in ns per head.
func (g routineBench) decode(b *testing.B, f32 tokensF32, bf16 tokensBF16, K, V, H int, bf bool) {
	hs := K * V
	kh, qh, v, o, tok := g.tokens(K, V, 1)
	pool := g.rnd(H*hs, 0.5)
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
				bf16(K, V, s, nil, stores, nil, kh, qh, v, V, o, tok, nil)
			} else {
				s := pool[h*hs : (h+1)*hs]
				stores[0] = unsafe.Pointer(&s[0])
				f32(K, V, s, stores, kh, qh, v, V, o, tok, nil)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*H), "ns/head")
}

// amd64Routines are the amd64 kernels' routines over T tokens of a layout (0 [K][V], 1 [V][K]).
func amd64Routines(layout int) (names []string, f32 []tokensF32, bf16 []tokensBF16) {
	for _, im := range available {
		if im.name == "avx512" || im.name == "avx2" {
			names, f32, bf16 = append(names, im.name), append(f32, flatF32(im.cells[0][layout])), append(bf16, flatBF16(im.cells[1][layout]))
		}
	}
	return
}

// BenchmarkKVRoutine times the [K][V] routines alone, per kernel and shape (K×V: the hot 128×128,
// the odd 96×80, and tails off the vector sizes): decode (T = 1, in place, over 32 heads of one
// contiguous pool, so the state comes from L2/L3; f32 through the T = 1 plan, as the driver calls
// it), in ns per head; prefill (one head, T = 64 tokens, one store after the last), in ns per
// head-token.
func BenchmarkKVRoutine(b *testing.B) {
	g := routineBench{rand.New(rand.NewPCG(1, 2))}
	names, f32, bf16 := amd64Routines(0)
	for k, kname := range names {
		for _, sh := range [][2]int{{128, 128}, {96, 80}, {96, 83}, {96, 100}, {128, 200}} {
			K, V := sh[0], sh[1]
			for _, bf := range []bool{false, true} {
				st := "f32"
				if bf {
					st = "bf16"
				}
				name := fmt.Sprintf("kernel=%s/K=%d,V=%d/%s", kname, K, V, st)
				b.Run(name+"/decode-32heads", func(b *testing.B) { g.decode(b, f32[k], bf16[k], K, V, 32, bf) })
				b.Run(name+"/prefill-T64", func(b *testing.B) { g.prefill(b, f32[k], bf16[k], K, V, bf) })
			}
		}
	}
}

// BenchmarkVKRoutine times the [V][K] routines alone on 128×128 heads and on the odd shape K = 96,
// V = 80: prefill (one head, T = 64 tokens, one store after the last) in ns per head-token, and
// decode (T = 1, in place, over H heads of one contiguous pool of at least 2 MiB (f32), so the
// state comes from L2/L3) in ns per head.
func BenchmarkVKRoutine(b *testing.B) {
	g := routineBench{rand.New(rand.NewPCG(1, 2))}
	names, f32, bf16 := amd64Routines(1)
	for k, kname := range names {
		for _, bf := range []bool{false, true} {
			st := "f32"
			if bf {
				st = "bf16"
			}
			for _, sh := range [][2]int{{128, 128}, {96, 80}} {
				K, V := sh[0], sh[1]
				name := fmt.Sprintf("%s/%s/K=%d,V=%d", kname, st, K, V)
				b.Run(name+"/prefill-T64", func(b *testing.B) { g.prefill(b, f32[k], bf16[k], K, V, bf) })
				H := (1<<19 + K*V - 1) / (K * V) // 32 heads of 128×128
				b.Run(fmt.Sprintf("%s/decode-%dheads", name, H), func(b *testing.B) { g.decode(b, f32[k], bf16[k], K, V, H, bf) })
			}
		}
	}
}

// TestVKChunksAMD64: the amd64 [V][K] routines give the same bits for one call of T tokens and T
// calls of one (T = 1 takes the register groups, T > 1 the AVX-512 blocks for K ≤ 128), and the
// bf16 routine stores BF16RNE of the f32 routine's state, for K and V around the vector, group and
// block sizes.
func TestVKChunksAMD64(t *testing.T) {
	type rt struct {
		name string
		f32  tokensF32
		bf16 tokensBF16
	}
	var rs []rt
	for _, im := range available {
		if im.name == "avx512" || im.name == "avx2" {
			rs = append(rs, rt{im.name, flatF32(im.cells[0][layoutVK]), flatBF16(im.cells[1][layoutVK])})
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	rnd := func(n int, s float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = s * (2*r.Float32() - 1)
		}
		return x
	}
	const T = 4
	for _, rr := range rs {
		for _, K := range []int{1, 5, 16, 17, 32, 40, 64, 100, 127, 128, 129, 200} {
			for _, V := range []int{1, 3, 15, 16, 17, 31, 32, 33, 47, 48, 50, 64, 65, 97, 128} {
				hs, vs := K*V, V+2
				kh, qh, v := rnd(T*K, 0.3), rnd(T*K, 0.1), rnd((T-1)*vs+V, 1)
				tok := make([]float32, 4*T)
				for τ := range T {
					em1 := -0.03 * float32(τ+1)
					if τ == 2 {
						em1 = -0.8
					}
					tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1.02*(1+em1), 0.4+0.1*float32(τ), 0.2
				}
				src := rnd(hs, 1)
				what := fmt.Sprintf("%s K=%d V=%d", rr.name, K, V)
				// One call of T tokens, a store at every token.
				all, o := make([]float32, T*hs), make([]float32, T*V)
				stores := make([]unsafe.Pointer, T)
				for τ := range T {
					stores[τ] = unsafe.Pointer(&all[τ*hs])
				}
				rr.f32(K, V, src, stores, kh, qh, v, vs, o, tok, nil)
				// T calls of one token.
				cur, o1 := append([]float32(nil), src...), make([]float32, T*V)
				for τ := range T {
					next := make([]float32, hs)
					rr.f32(K, V, cur, []unsafe.Pointer{unsafe.Pointer(&next[0])}, kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K], v[τ*vs:τ*vs+V], vs, o1[τ*V:(τ+1)*V], tok[4*τ:4*τ+4], nil)
					for i := range next {
						if math.Float32bits(next[i]) != math.Float32bits(all[τ*hs+i]) {
							t.Fatalf("%s: state after token %d [%d]: %g one by one, %g in one call", what, τ, i, next[i], all[τ*hs+i])
						}
					}
					cur = next
				}
				for i := range o {
					if math.Float32bits(o[i]) != math.Float32bits(o1[i]) {
						t.Fatalf("%s: o[%d]: %g in one call, %g one by one", what, i, o[i], o1[i])
					}
				}
				// bf16 from the same (bf16-exact) state: stores are BF16RNE of the f32 routine's.
				src16 := make([]uint16, hs)
				srcR := make([]float32, hs)
				for i, x := range src {
					src16[i] = BF16RNE(x)
					srcR[i] = math.Float32frombits(uint32(src16[i]) << 16)
				}
				rr.f32(K, V, srcR, stores, kh, qh, v, vs, o, tok, nil)
				all16, o16, carry := make([]uint16, T*hs), make([]float32, T*V), make([]float32, hs)
				for τ := range T {
					stores[τ] = unsafe.Pointer(&all16[τ*hs])
				}
				rr.bf16(K, V, src16, nil, stores, carry, kh, qh, v, vs, o16, tok, nil)
				for i := range all16 {
					if all16[i] != BF16RNE(all[i]) {
						t.Fatalf("%s: bf16 state %d: %#x, BF16RNE(f32 routine) %#x", what, i, all16[i], BF16RNE(all[i]))
					}
				}
				for i := range o {
					if math.Float32bits(o[i]) != math.Float32bits(o16[i]) {
						t.Fatalf("%s: bf16 o[%d]: %g, f32 routine %g", what, i, o16[i], o[i])
					}
				}
				for i := range carry {
					if math.Float32bits(carry[i]) != math.Float32bits(all[(T-1)*hs+i]) {
						t.Fatalf("%s: carry[%d]: %g, f32 routine %g", what, i, carry[i], all[(T-1)*hs+i])
					}
				}
			}
		}
	}
}
