//go:build !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// The tails of the [K][V] routines (asm/state_kv_span.go): every block shape and every guarded
// vector of the single-token routine and of the routines over T tokens, for every amd64 kernel.
//
// kvTailVs are the V of the sweeps: every V up to 160 (every mask width; every span of the
// single-token routine below 160: AVX-512 [0,3] for 1–64, the fixed block of 65–80, [5,15] from
// 81, V = 128; AVX2 rows of 64 and 128 then every tail 1–63: the 16-column block, the span of 1–23
// columns with its masked vector, 24–31 cut to 16 + 8–15; every block of the routines over T
// tokens: full, AVX-512 one masked vector or the span of 2–4, AVX2 16 columns or the span), then
// every span boundary up to 512 (16·n − 1, 16·n, 16·n + 1 around the AVX-512 spans' guarded
// vectors, the AVX2 rows of 192 and 256, blocks after a loop of 256) and the same tails after
// 256.
func kvTailVs() []int {
	var vs []int
	for V := 1; V <= 160; V++ {
		vs = append(vs, V)
	}
	for _, c := range []int{176, 192, 208, 224, 240, 256, 272, 320, 336, 384, 448, 512} {
		vs = append(vs, c-1, c, c+1)
	}
	return append(vs, 255+80, 256+100, 256+128+7, 511+24)
}

// kvTailKs are K for each block width of the routines over T tokens: AVX-512 blocks of 4, 2, 2, 1
// ZMM (K ≤ 128, ≤ 170, ≤ 256, ≤ 512; above: the single-token routine; a tail of 33–48 columns as
// 2 and 1), AVX2 of 4, 3, 2, 1 YMM (K ≤ 256, ≤ 341, ≤ 512, ≤ 1024).
var kvTailKs = []int{1, 3, 129, 171, 257, 342, 513}

// kvTailShapes pairs them: every V with a small K (cycling through 1, 2, 3, 5, 17), and the
// larger K with every V up to 70 and the boundaries above (with -short: V up to 70 and the
// boundaries with the small K, and every fourth of those with the larger K).
func kvTailShapes() [][2]int {
	var sh [][2]int
	small := []int{1, 2, 3, 5, 17}
	boundary := func(V int) bool { return V <= 70 || V%16 <= 1 || V%16 == 15 }
	for n, V := range kvTailVs() {
		if !testing.Short() || boundary(V) {
			sh = append(sh, [2]int{small[n%len(small)], V})
		}
	}
	for _, K := range kvTailKs[2:] {
		for n, V := range kvTailVs() {
			if boundary(V) && (!testing.Short() || n%4 == K%4) {
				sh = append(sh, [2]int{K, V})
			}
		}
	}
	return sh
}

// kvTailCall is one call of a [K][V] routine over T tokens on guarded slices.
type kvTailCall struct {
	K, V, T, vs    int
	src, src32, kh *decayBuf
	qh, v, o, tok  *decayBuf
	carry          *decayBuf
	src16          *kvBuf16
	st32           []*decayBuf
	st16           []*kvBuf16
	stores         []unsafe.Pointer
}

// newKVTailCall places the inputs (v with a NaN gap between the rows of its stride), a store at
// every token in keep, and a carry.
func newKVTailCall(K, V, T int, keep func(τ int) bool, bf16, from32 bool, s []float32, kh, qh, v, tok []float32, off int) *kvTailCall {
	c := &kvTailCall{K: K, V: V, T: T, vs: V + 3}
	buf := func(x []float32, o int) *decayBuf {
		b := newDecayBuf(len(x), (off+o)%16)
		copy(b.s, x)
		b.freeze()
		return b
	}
	c.kh, c.qh, c.tok = buf(kh, 1), buf(qh, 2), buf(tok, 3)
	vv := make([]float32, (T-1)*c.vs+V)
	for i := range vv {
		vv[i] = float32(math.NaN())
	}
	for τ := range T {
		copy(vv[τ*c.vs:], v[τ*V:(τ+1)*V])
	}
	c.v = buf(vv, 4)
	c.o = newDecayBuf(T*V, (off+5)%16)
	c.stores = make([]unsafe.Pointer, T)
	if !bf16 {
		c.src = buf(s, 6)
		c.st32 = make([]*decayBuf, T)
		for τ := range T {
			if keep(τ) {
				c.st32[τ] = newDecayBuf(K*V, (off+7+τ)%16)
				c.stores[τ] = unsafe.Pointer(&c.st32[τ].s[0])
			}
		}
		return c
	}
	c.src16 = newKVBuf16(K*V, (off+6)%16)
	for i, x := range s {
		c.src16.s[i] = BF16RNE(x)
	}
	if from32 {
		w := make([]float32, K*V)
		widenGeneric(w, c.src16.s)
		c.src32 = buf(w, 8)
		for i := range c.src16.s {
			c.src16.s[i] = 0x7fc1 // must not be read
		}
	}
	c.st16 = make([]*kvBuf16, T)
	for τ := range T {
		if keep(τ) {
			c.st16[τ] = newKVBuf16(K*V, (off+7+τ)%16)
			c.stores[τ] = unsafe.Pointer(&c.st16[τ].s[0])
		}
	}
	c.carry = newDecayBuf(K*V, (off+9)%16)
	return c
}

func (c *kvTailCall) run(t *testing.T, im *impl) {
	f32, bf16 := kvRaw(t, im, c.K)
	if c.src16 == nil {
		f32(c.K, c.V, c.src.s, c.stores, c.kh.s, c.qh.s, c.v.s, c.vs, c.o.s, c.tok.s, nil)
		return
	}
	var s32 []float32
	if c.src32 != nil {
		s32 = c.src32.s
	}
	bf16(c.K, c.V, c.src16.s, s32, c.stores, c.carry.s, c.kh.s, c.qh.s, c.v.s, c.vs, c.o.s, c.tok.s, nil)
}

// kvRaw returns the kernel's [K][V] routines over T tokens themselves (the wrappers kvF32 and
// kvBF16 send T = 1 with a store to the single-token routine), with a work space of the size the
// wrappers pass, between guard bands that must stay untouched; for a K above their limit, the
// wrappers (kvVia).
func kvRaw(t *testing.T, im *impl, K int) (tokensF32, tokensBF16) {
	type raw struct {
		f32  func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)
		bf16 func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)
		maxK int
	}
	rs := map[string]raw{
		"avx512": {stateKVf32AVX512, kvBF16AVX512Cvt, kvMaxK512},
		"avx2":   {stateKVf32AVX2, stateKVbf16AVX2, kvMaxK2},
	}
	r := rs[im.name]
	if K > r.maxK {
		return im.tokF32[0], im.tokBF16[0]
	}
	work := newDecayBuf(kvWork+16, K%16)
	what := fmt.Sprintf("%s K=%d: work", im.name, K)
	return func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
			r.f32(K, V, src, stores, kh, qh, v, vs, o, tok, work.s, pf)
			work.check(t, what)
		}, func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
			r.bf16(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok, work.s, pf)
			work.check(t, what)
		}
}

// check fails if a guard band or an input changed.
func (c *kvTailCall) check(t *testing.T, what string) {
	t.Helper()
	for _, b := range []*decayBuf{c.src, c.src32, c.kh, c.qh, c.v, c.o, c.tok, c.carry} {
		if b != nil {
			b.check(t, what)
		}
	}
	for _, b := range c.st32 {
		if b != nil {
			b.check(t, what+" store")
		}
	}
	for _, b := range c.st16 {
		if b != nil {
			b.check(t, what+" store")
		}
	}
	if c.src16 != nil {
		c.src16.check(t, what+" src")
	}
}

// dyadic fills x with multiples of step up to n·step in magnitude.
func dyadic(r *rand.Rand, x []float32, n int, step float32) {
	for i := range x {
		x[i] = float32(r.IntN(2*n+1)-n) * step
	}
}

// TestKVTailsExact: one token of every amd64 [K][V] routine (the single-token one, and over T
// tokens f32, bf16 from src and from src32) on dyadic heads (S in 1/16 steps up to 1, k̂ and q̂
// in 1/4 steps, v in 1/16 steps, beta 1/2, kq 1/4; both decay forms with dyadic em1 and eg), for
// which every product and sum is exact in float32 whatever the order or fusion: each must give
// stateGeneric's bits, o and state (bf16: BF16RNE of them), over kvTailShapes, in guard bands.
func TestKVTailsExact(t *testing.T) {
	forms := []struct{ em1, eg float32 }{{-0.25, 0.5}, {-0.75, 0.375}}
	decayKernels(t, func(t *testing.T, im *impl) {
		r := rand.New(rand.NewPCG(21, 22))
		for n, sh := range kvTailShapes() {
			K, V := sh[0], sh[1]
			f := forms[n%2]
			s, kh, qh, v := make([]float32, K*V), make([]float32, K), make([]float32, K), make([]float32, V)
			dyadic(r, s, 16, 1.0/16)
			dyadic(r, kh, 4, 0.25)
			dyadic(r, qh, 4, 0.25)
			dyadic(r, v, 64, 1.0/16)
			wantS, wantO := make([]float32, K*V), make([]float32, V)
			stateGeneric(s, wantS, kh, qh, v, wantO, f.em1, f.eg, 0.5, 0.25)
			what := fmt.Sprintf("%s K=%d V=%d em1=%g", im.name, K, V, f.em1)

			// The single-token routine, out of place.
			sIn, sOut := newDecayBuf(K*V, n%16), newDecayBuf(K*V, (n+3)%16)
			khb, qhb, vb, ob := newDecayBuf(K, (n+5)%16), newDecayBuf(K, (n+7)%16), newDecayBuf(V, (n+9)%16), newDecayBuf(V, (n+11)%16)
			copy(sIn.s, s)
			copy(khb.s, kh)
			copy(qhb.s, qh)
			copy(vb.s, v)
			for _, b := range []*decayBuf{sIn, khb, qhb, vb} {
				b.freeze()
			}
			im.state(sIn.s, sOut.s, khb.s, qhb.s, vb.s, ob.s, f.em1, f.eg, 0.5, 0.25)
			decayClose(t, what+" single-token sOut", sOut.s, wantS, 0)
			decayClose(t, what+" single-token o", ob.s, wantO, 0)
			for _, b := range []*decayBuf{sIn, sOut, khb, qhb, vb, ob} {
				b.check(t, what+" single-token")
			}

			tok := []float32{f.em1, f.eg, 0.5, 0.25}
			for _, bf := range []bool{false, true} {
				for _, from32 := range []bool{false, true} {
					if from32 && !bf {
						continue
					}
					w := fmt.Sprintf("%s tokens bf16=%v src32=%v", what, bf, from32)
					c := newKVTailCall(K, V, 1, func(int) bool { return true }, bf, from32, s, kh, qh, v, tok, n)
					c.run(t, im)
					c.check(t, w)
					decayClose(t, w+" o", c.o.s, wantO, 0)
					if !bf {
						decayClose(t, w+" state", c.st32[0].s, wantS, 0)
						continue
					}
					decayClose(t, w+" carry", c.carry.s, wantS, 0)
					for i, b := range c.st16[0].s {
						if b != BF16RNE(wantS[i]) {
							t.Fatalf("%s store [%d] = %#x, want %#x", w, i, b, BF16RNE(wantS[i]))
						}
					}
				}
			}
		}
	})
}

// TestKVTailsTokens: every amd64 routine over T = 3 tokens (random heads, a NaN em1 at the last)
// against the same kernel's single-token routine run token by token (kvVia), bit for bit: o,
// the stores (at the first and last token), the carry; over kvTailShapes, in guard bands.
func TestKVTailsTokens(t *testing.T) {
	const T = 3
	ones := map[string]single{"avx512": stateAVX512, "avx2": stateAVX2}
	decayKernels(t, func(t *testing.T, im *impl) {
		one := ones[im.name]
		r := rand.New(rand.NewPCG(23, 24))
		for n, sh := range kvTailShapes() {
			K, V := sh[0], sh[1]
			s, kh, qh, v := make([]float32, K*V), make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
			for i := range s {
				s[i] = float32(0.3 * r.NormFloat64())
			}
			for i := range kh {
				kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
				qh[i] = float32(r.NormFloat64() / float64(K))
			}
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			tok := []float32{-0.05, 0.96, 0.7, 0.1, -0.7, 0.28, 0.4, -0.2, float32(math.NaN()), 0.9, 0.5, 0.3}
			keep := func(τ int) bool { return τ != 1 }
			for _, bf := range []bool{false, true} {
				for _, from32 := range []bool{false, true} {
					if from32 && !bf {
						continue
					}
					w := fmt.Sprintf("%s K=%d V=%d bf16=%v src32=%v", im.name, K, V, bf, from32)
					c := newKVTailCall(K, V, T, keep, bf, from32, s, kh, qh, v, tok, n)
					c.run(t, im)
					c.check(t, w)
					// Token by token, from the same (widened) state.
					src32 := slices.Clone(s)
					var src16 []uint16
					if bf {
						src16 = slices.Clone(c.src16.s)
						if from32 {
							copy(src32, c.src32.s)
						} else {
							widenGeneric(src32, src16)
						}
					}
					o := make([]float32, T*V)
					st32, st16 := make([][]float32, T), make([][]uint16, T)
					stores := make([]unsafe.Pointer, T)
					for τ := range T {
						if keep(τ) {
							st32[τ], st16[τ] = make([]float32, K*V), make([]uint16, K*V)
							stores[τ] = unsafe.Pointer(&st32[τ][0])
							if bf {
								stores[τ] = unsafe.Pointer(&st16[τ][0])
							}
						}
					}
					var carry []float32
					var s16 []uint16
					if bf {
						carry, s16 = make([]float32, K*V), src16
					}
					kvVia(one, K, V, src32, s16, stores, carry, c.kh.s, c.qh.s, c.v.s, c.vs, o, c.tok.s)
					decayClose(t, w+" o", c.o.s, o, 0)
					for τ := range T {
						switch {
						case !keep(τ):
						case !bf:
							decayClose(t, fmt.Sprintf("%s store %d", w, τ), c.st32[τ].s, st32[τ], 0)
						default:
							for i, b := range c.st16[τ].s {
								if b != st16[τ][i] {
									t.Fatalf("%s store %d [%d] = %#x, token by token %#x", w, τ, i, b, st16[τ][i])
								}
							}
						}
					}
					if bf {
						decayClose(t, w+" carry", c.carry.s, carry, 0)
					}
				}
			}
		}
	})
}
