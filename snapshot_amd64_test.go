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

// guardedAt16 is guardedAt for n uint16s (bf16 stores), with 32 of a sentinel on either side.
func guardedAt16(n, off int) ([]uint16, func() bool) {
	const g = 32
	buf := make([]uint16, n+2*g+64)
	base := (64 - int(uintptr(unsafe.Pointer(&buf[g]))%64)) % 64
	start := g + (base+off)/2
	for i := range buf {
		buf[i] = 0x7fa5
	}
	s := buf[start : start+n : start+n]
	for i := range s {
		s[i] = 0
	}
	return s, func() bool {
		for i, x := range buf {
			if (i < start || i >= start+n) && x != 0x7fa5 {
				return false
			}
		}
		return true
	}
}

// guardedAt returns n float32s starting off bytes past a 64-byte boundary, with 16 float32s of a
// sentinel on either side, and the check that the sentinels are intact.
func guardedAt(n, off int) ([]float32, func() bool) {
	const g = 16
	buf := make([]float32, n+2*g+32)
	base := (64 - int(uintptr(unsafe.Pointer(&buf[g]))%64)) % 64 // bytes to the boundary after buf[g]
	start := g + (base+off)/4
	for i := range buf {
		buf[i] = math.Float32frombits(0x7fa5a5a5)
	}
	s := buf[start : start+n : start+n]
	for i := range s {
		s[i] = 0
	}
	return s, func() bool {
		for i, x := range buf {
			if (i < start || i >= start+n) && math.Float32bits(x) != 0x7fa5a5a5 {
				return false
			}
		}
		return true
	}
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
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		if name != "avx512" && name != "avx2" {
			t.Skip("not an amd64 assembly kernel")
		}
		k, _ := gdnsimd.Lookup(name)
		r := rand.New(rand.NewPCG(51, 52))
		vec := func(n int, sd float64) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(sd * r.NormFloat64())
			}
			return x
		}
		for l, layout := range []string{"kv", "vk"} {
			f := gdnsimd.TokensOf(k).F32[l]
			for _, K := range []int{1, 8, 16, 17, 32, 64, 96, 128} { // every [V][K] shape of whole vectors, and others
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
								src := vec(hs, 0.5)
								kh, qh, v := vec(T*K, 1/math.Sqrt(float64(K))), vec(T*K, 1/math.Sqrt(float64(K))), vec(T*V, 1)
								tok := make([]float32, 4*T)
								for τ := range T {
									em1 := float32(-0.03)
									if τ%2 == 1 {
										em1 = -0.9
									}
									tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.7, 0.2
								}
								stores := make([]unsafe.Pointer, T)
								got := make([][]float32, T)
								var checks []func() bool
								for τ := range T {
									if at(τ) {
										s, ok := guardedAt(hs, off)
										got[τ], stores[τ] = s, unsafe.Pointer(&s[0])
										checks = append(checks, ok)
									}
								}
								o := make([]float32, T*V)
								f(K, V, src, stores, kh, qh, v, V, o, tok, nil)
								for _, ok := range checks {
									if !ok() {
										t.Fatalf("%s: written around a store", what)
									}
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
								var checks16 []func() bool
								got16 := make([][]uint16, T)
								for τ := range T {
									if at(τ) {
										b, ok := guardedAt16(hs, off)
										got16[τ], stores16[τ] = b, unsafe.Pointer(&b[0])
										checks16 = append(checks16, ok)
									}
								}
								o16, carry := make([]float32, T*V), make([]float32, hs)
								fb(K, V, src16, nil, stores16, carry, kh, qh, v, V, o16, tok, nil)
								for _, ok := range checks16 {
									if !ok() {
										t.Fatalf("%s bf16: written around a store", what)
									}
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
