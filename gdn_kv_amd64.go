//go:build !purego

package gdnsimd

import (
	"sync"
	"unsafe"
)

// The [K][V] state routines over T tokens of gdn_amd64.s (asm/state_kv_tokens.go), in the flat
// signature of tokens_generic.go, and the widen pieces. Per token each computes what the
// single-token routine of its ISA (stateAVX512, stateAVX2) computes, product for product and in
// the same order, so that T calls of one token and one call of T tokens give the same bits and a
// bf16 store is BF16RNE of the f32 routine's state:
//
//	decay_τ(x) := x + em1_τ·x (fused) if em1_τ ≥ −0.5, else eg_τ·x (also for a NaN em1)
//	S := src (bf16 widened; src32 instead when it is not nil)
//	for τ := range T:
//		for j := range V:
//			kv, qs := Σ_i kh_τ[i]·S[i][j], Σ_i qh_τ[i]·S[i][j]     (FMAs from 0, i ascending)
//			d := (v_τ[j] − decay_τ(kv))·beta_τ;  o_τ[j] = decay_τ(qs) + d·kq_τ
//			for i := range K: S[i][j] = decay_τ(S[i][j]) + d·kh_τ[i]
//		if stores[τ] != nil: stores[τ] ← S (bf16: BF16RNE)
//	carry ← S (bf16 routines, when not nil)
//
// in column blocks of at most 64 (AVX-512) or 32 (AVX2) columns whose K rows stay in work (L1)
// for all T tokens: at least kvWork + 16 float32s (the routine aligns it to 64 bytes). K must be
// at most kvMaxK512 / kvMaxK2 (the wrappers below check).

//go:noescape
func stateKVf32AVX512(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)

// stateKVbf16AVX512's cvt: the CPU has AVX512_BF16 (avx512BF16), so that a row without NaN may be
// rounded two vectors at a time by VCVTNE2PS2BF16, a row with a ±0 stored word (a denormal input,
// which the instruction takes as zero, or a zero) stored again by the integer rounding: the same
// bits either way.
//
//go:noescape
func stateKVbf16AVX512(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr, cvt bool)

//go:noescape
func stateKVf32AVX2(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)

//go:noescape
func stateKVbf16AVX2(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)

// widenAVX512 is widenGeneric in AVX-512: 16 lanes at a time, then one masked vector.
//
//go:noescape
func widenAVX512(dst []float32, src []uint16)

// widenAVX2 is widenGeneric in AVX2: 8 lanes at a time, then 4, then one.
//
//go:noescape
func widenAVX2(dst []float32, src []uint16)

// The largest K whose column block of one vector fits the routines' frame (32 KiB).
const (
	kvMaxK512 = 512
	kvMaxK2   = 1024
)

// kvWork is the size of a column block's work space in float32s (32 KiB).
const kvWork = 8 << 10

// workPool holds the work spaces of the routines over T tokens (the flat signature has none; a
// 32 KiB frame would need the stack-check prologue, which -dynlink builds cannot link).
var workPool = sync.Pool{New: func() any { b := make([]float32, kvWork+16); return &b }}

// single is a single-token [K][V] f32 state routine (stateAVX512, stateAVX2: the T = 1 plan of the
// routine over T tokens).
type single func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)

// kvF32 is the f32 [K][V] routine over T tokens of a kernel: one token with a store goes to its
// T = 1 plan (whole rows: the read pass is one stream; any K, no work space); a K too large for
// the frame to kvVia; the rest to the routine over T tokens with a work space. All give the same
// bits.
func kvF32(one single, r func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr), maxK int) tokensF32 {
	return func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
		hs := K * V
		switch {
		case len(tok) == 4 && stores[0] != nil:
			one(src[:hs:hs], unsafe.Slice((*float32)(stores[0]), hs), kh[:K:K], qh[:K:K], v[:V:V], o[:V:V], tok[0], tok[1], tok[2], tok[3])
		case K > maxK:
			kvVia(one, K, V, src, nil, stores, nil, kh, qh, v, vs, o, tok)
		default:
			w := workPool.Get().(*[]float32)
			r(K, V, src, stores, kh, qh, v, vs, o, tok, *w, pf)
			workPool.Put(w)
		}
	}
}

// kvBF16 is the bf16 [K][V] routine over T tokens of a kernel (kvVia for a K too large).
func kvBF16(one single, r func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr), maxK int) tokensBF16 {
	return func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
		if K > maxK {
			if src32 == nil {
				src32 = make([]float32, K*V)
				widenGeneric(src32, src)
			}
			kvVia(one, K, V, src32, src, stores, carry, kh, qh, v, vs, o, tok)
			return
		}
		w := workPool.Get().(*[]float32)
		r(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok, *w, pf)
		workPool.Put(w)
	}
}

var (
	kvF32AVX512  = kvF32(stateAVX512, stateKVf32AVX512, kvMaxK512)
	kvBF16AVX512 = kvBF16(stateAVX512, kvBF16AVX512Cvt, kvMaxK512)
	kvF32AVX2    = kvF32(stateAVX2, stateKVf32AVX2, kvMaxK2)
	kvBF16AVX2   = kvBF16(stateAVX2, stateKVbf16AVX2, kvMaxK2)
)

// kvVia runs the tokens through the single-token routine in a float32 copy of the state (src32),
// storing f32 (src16 nil) or bf16 states at stores and the last one to carry when not nil.
func kvVia(one single, K, V int, src32 []float32, src16 []uint16, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32) {
	hs := K * V
	cur := make([]float32, hs)
	copy(cur, src32[:hs])
	for τ := range len(tok) / 4 {
		tk := tok[4*τ : 4*τ+4]
		one(cur, cur, kh[τ*K:(τ+1)*K:(τ+1)*K], qh[τ*K:(τ+1)*K:(τ+1)*K], v[τ*vs:τ*vs+V:τ*vs+V], o[τ*V:(τ+1)*V:(τ+1)*V], tk[0], tk[1], tk[2], tk[3])
		switch p := stores[τ]; {
		case p == nil:
		case src16 == nil:
			copy(unsafe.Slice((*float32)(p), hs), cur)
		default:
			d := unsafe.Slice((*uint16)(p), hs)
			for i, x := range cur {
				d[i] = BF16RNE(x)
			}
		}
	}
	if carry != nil {
		copy(carry[:hs], cur)
	}
}

// kvBF16AVX512Cvt is stateKVbf16AVX512 with cvt = avx512BF16 (read per call, so that a test may
// turn it off).
func kvBF16AVX512Cvt(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr) {
	stateKVbf16AVX512(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok, work, pf, avx512BF16)
}
