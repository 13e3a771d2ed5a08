//go:build amd64 && !purego

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

// forEachAmd64 runs f for each amd64 assembly kernel (avx512, avx2), a visible skip for the others.
func forEachAmd64(t *testing.T, f func(t *testing.T, name string, k gdnsimd.Kernel)) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		if name != "avx512" && name != "avx2" {
			t.Skip("not an amd64 assembly kernel")
		}
		k, _ := gdnsimd.Lookup(name)
		f(t, name, k)
	})
}

// tokenCall returns random inputs of a call of T tokens over a K×V head: the state, k̂, q̂ (rows of
// norm about 1), v and tok, the tokens alternating between the two decay forms (em1 −0.03, −0.9).
func tokenCall(r *rand.Rand, K, V, T int) (src, kh, qh, v, tok []float32) {
	src, kh, qh, v = make([]float32, K*V), make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
	fill(r, src, 0.5)
	fill(r, kh, 1/math.Sqrt(float64(K)))
	fill(r, qh, 1/math.Sqrt(float64(K)))
	fill(r, v, 1)
	tok = make([]float32, 4*T)
	for τ := range T {
		em1 := float32(-0.03)
		if τ%2 == 1 {
			em1 = -0.9
		}
		tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.7, 0.2
	}
	return
}

// TestSnapshotsNonTemporal holds the amd64 routines over T tokens of both layouts with a store at
// every token (verification snapshots, which [K][V] f32 writes with non-temporal stores when V is a
// multiple of the lanes and the stores are aligned to a vector, AVX-512 [V][K] f32 when K is whole
// ZMM and the stores are aligned to 64 bytes, and the AVX-512 bf16 routines the same way with half
// the alignment) to T calls of one token of the same kernel (the single-token routine's, the
// register groups' or a one-token pass's ordinary stores; bf16 chained through the f32 carry),
// bit for bit: K and V with and
// without whole vectors, stores aligned and 4, 16 and 32 bytes off, T = 2, 3 and 5, the stores at
// every token or at some only (the last token's after a token without a store is an ordinary one),
// nothing written around them.
func TestSnapshotsNonTemporal(t *testing.T) {
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		r := rand.New(rand.NewPCG(51, 52))
		for l, layout := range []string{"kv", "vk"} {
			f := gdnsimd.TokensOf(k).F32[l]
			for _, K := range []int{1, 8, 16, 17, 32, 48, 64, 80, 96, 128} { // [V][K] rows of whole vectors (some positions of the shape dead), and others
				for _, V := range []int{16, 32, 37, 48, 64, 80, 96, 112, 128, 144} { // [K][V] blocks of 1–4 ZMM, 2 and 4 YMM
					hs := K * V
					for _, T := range []int{2, 3, 5} {
						for _, off := range []int{0, 4, 16, 32} {
							for _, pattern := range []string{"every", "last two", "first and last"} {
								what := fmt.Sprintf("%s %s K=%d V=%d T=%d off=%d %s", name, layout, K, V, T, off, pattern)
								at := func(τ int) bool {
									switch pattern {
									case "last two":
										return τ >= T-2
									case "first and last":
										return τ == 0 || τ == T-1
									}
									return true
								}
								src, kh, qh, v, tok := tokenCall(r, K, V, T)
								stores := make([]unsafe.Pointer, T)
								got := make([][]float32, T)
								var checks []func(string)
								for τ := range T {
									if at(τ) {
										s, chk := kerneltest.Guarded[float32](t, hs, off/4)
										got[τ], stores[τ] = s, unsafe.Pointer(&s[0])
										checks = append(checks, chk)
									}
								}
								o := make([]float32, T*V)
								f(K, V, src, stores, kh, qh, v, V, o, tok, nil)
								for _, chk := range checks {
									chk(what + ": a store's guards")
								}
								// The reference: one call per token, from the state the last one stored.
								cur := append([]float32(nil), src...)
								for τ := range T {
									next := make([]float32, hs)
									o1 := make([]float32, V)
									f(K, V, cur, []unsafe.Pointer{unsafe.Pointer(&next[0])}, kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K], v[τ*V:(τ+1)*V], V, o1, tok[4*τ:4*τ+4], nil)
									for j := range o1 {
										if math.Float32bits(o1[j]) != math.Float32bits(o[τ*V+j]) {
											t.Fatalf("%s: o[%d][%d] = %v, one token at a time %v", what, τ, j, o[τ*V+j], o1[j])
										}
									}
									if got[τ] != nil {
										for i := range next {
											if math.Float32bits(next[i]) != math.Float32bits(got[τ][i]) {
												t.Fatalf("%s: store %d [%d] = %v, one token at a time %v", what, τ, i, got[τ][i], next[i])
											}
										}
									}
									cur = next
								}
								// bf16: the same call with bf16 stores and the f32 carry, against T calls
								// of one token chained through the carry (src32), which keeps the state
								// f32 between tokens as one call does.
								src16 := make([]uint16, hs)
								for i, x := range src {
									src16[i] = gdnsimd.BF16RNE(x)
								}
								fb := gdnsimd.TokensOf(k).BF16[l]
								stores16 := make([]unsafe.Pointer, T)
								var checks16 []func(string)
								got16 := make([][]uint16, T)
								for τ := range T {
									if at(τ) {
										b, chk := kerneltest.Guarded[uint16](t, hs, off/2)
										got16[τ], stores16[τ] = b, unsafe.Pointer(&b[0])
										checks16 = append(checks16, chk)
									}
								}
								o16, carry := make([]float32, T*V), make([]float32, hs)
								fb(K, V, src16, nil, stores16, carry, kh, qh, v, V, o16, tok, nil)
								for _, chk := range checks16 {
									chk(what + " bf16: a store's guards")
								}
								var cur32 []float32
								for τ := range T {
									next := make([]float32, hs)
									st := make([]uint16, hs)
									o1 := make([]float32, V)
									fb(K, V, src16, cur32, []unsafe.Pointer{unsafe.Pointer(&st[0])}, next, kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K], v[τ*V:(τ+1)*V], V, o1, tok[4*τ:4*τ+4], nil)
									for j := range o1 {
										if math.Float32bits(o1[j]) != math.Float32bits(o16[τ*V+j]) {
											t.Fatalf("%s bf16: o[%d][%d] = %v, one token at a time %v", what, τ, j, o16[τ*V+j], o1[j])
										}
									}
									if got16[τ] != nil {
										for i := range st {
											if st[i] != got16[τ][i] {
												t.Fatalf("%s bf16: store %d [%d] = %#04x, one token at a time %#04x", what, τ, i, got16[τ][i], st[i])
											}
										}
									}
									cur32 = next
								}
								for i := range carry {
									if math.Float32bits(carry[i]) != math.Float32bits(cur32[i]) {
										t.Fatalf("%s bf16: carry [%d] = %v, one token at a time %v", what, i, carry[i], cur32[i])
									}
								}
							}
						}
					}
				}
			}
		}
	})
}
