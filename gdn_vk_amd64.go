//go:build !purego

package gdnsimd

import "unsafe"

// The [V][K] state routines over T tokens of the "avx512" and "avx2" kernels (asm/state_vk.go), in
// the flat signature of tokensF32 and tokensBF16 (tokens_generic.go). Per row j (K contiguous
// elements) and token τ, with tok[4τ:4τ+4] = em1, eg, beta, kq and decay(x) = x + em1·x (fused)
// when em1 ≥ −0.5, else eg·x (also for a NaN em1), chosen per token:
//
//	kv, qs := Σ_i kh[τK+i]·S[j][i], Σ_i qh[τK+i]·S[j][i]
//	d := beta·(v[τ·vs+j] − decay(kv));  o[τV+j] = decay(qs) + kq·d   (fused)
//	S[j][i] = decay(S[j][i]) + kh[τK+i]·d                            (fused)
//
// Groups of rows are loaded once, carried in registers through the T tokens and stored where
// stores[τ] is not nil (bf16: rounded to nearest even; then the f32 carry, if not nil). AVX-512,
// K ≤ 128: blocks of 32, then 16 rows are carried in work instead (a workPool space, at least
// 4640 + 16 float32s; the routine aligns it to 64 bytes), 16 or 32 rows in flight per token
// (asm/state_vk_block.go); the rows left, and every row when T = 1 (work may then be nil), take
// the register groups. AVX2: pairs of rows in work (a workPool space, 1 KiB used), each token's update and the next token's dots in one pass over them (fusedTokens);
// with one token and a store (bf16: without src32 and carry), the pairs from src to stores[0]
// (once): f32 leaves work unused, bf16 needs it, for the pairs through work take the rest of the
// head from the first pair whose δ is not finite.
// The assembly handles K ≤ 256 (AVX-512) and 8 ≤ K ≤ 128 (AVX2); outside that range these wrappers run
// the portable routine (vkTokens), which allocates its per-call bookkeeping. The AVX2 routines take
// the rows in pairs and leave an odd V's last row to the portable arithmetic (vkOddRow): no model
// has an odd V, and a one-row group per shape took 1,706 (f32) and 2,944 (bf16) lines.

func vkF32AVX512(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
	if K > 256 {
		vkPortableF32(K, V, src, stores, kh, qh, v, vs, o, tok)
		return
	}
	if len(tok) == 4 { // one token: the register groups, no work space
		stateVKf32AVX512(K, V, src, stores, kh, qh, v, vs, o, tok, nil, pf)
		return
	}
	w := workPool.Get().(*[]float32)
	stateVKf32AVX512(K, V, src, stores, kh, qh, v, vs, o, tok, *w, pf)
	workPool.Put(w)
}

func vkBF16AVX512(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
	if K > 256 {
		vkPortableBF16(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok)
		return
	}
	if len(tok) == 4 { // one token: the register groups, no work space
		stateVKbf16AVX512(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok, nil, pf, avx512BF16)
		return
	}
	w := workPool.Get().(*[]float32)
	stateVKbf16AVX512(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok, *w, pf, avx512BF16)
	workPool.Put(w)
}

func vkF32AVX2(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
	if K < 8 || K > 128 {
		vkPortableF32(K, V, src, stores, kh, qh, v, vs, o, tok)
		return
	}
	if len(tok) == 4 && stores[0] != nil { // one token with a store: the pairs from src (once), no work space
		stateVKf32AVX2(K, V, src, stores, kh, qh, v, vs, o, tok, nil, pf)
	} else {
		w := workPool.Get().(*[]float32) // the pairs of rows live in work
		stateVKf32AVX2(K, V, src, stores, kh, qh, v, vs, o, tok, *w, pf)
		workPool.Put(w)
	}
	if V%2 == 1 {
		vkOddRow(K, V, stateRef{f32: src}, stores, false, nil, kh, qh, v, vs, o, tok)
	}
}

func vkBF16AVX2(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
	if K < 8 || K > 128 {
		vkPortableBF16(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok)
		return
	}
	w := workPool.Get().(*[]float32) // the pairs of rows live in work (also once's fallback: always given)
	stateVKbf16AVX2(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok, *w, pf)
	workPool.Put(w)
	if V%2 == 1 {
		in := stateRef{bf16: src}
		if src32 != nil {
			in = stateRef{f32: src32}
		}
		vkOddRow(K, V, in, stores, true, carry, kh, qh, v, vs, o, tok)
	}
}

// vkOddRow runs the last row of a head through the portable routine's arithmetic (vkRow): from in,
// to stores (bf16 rounded if bf16) and the last token's state to carry when not nil. Its row is a
// workPool space: nothing is allocated.
func vkOddRow(K, V int, in stateRef, stores []unsafe.Pointer, bf16 bool, carry []float32, kh, qh, v []float32, vs int, o, tok []float32) {
	w := workPool.Get().(*[]float32)
	row := (*w)[:K:K]
	j, hs, last := V-1, K*V, len(tok)/4-1
	loadState(row, in, j*K)
	vkRow(row, j, V, kh, qh, v, vs, o, tok, func(τ int) stateRef {
		var d stateRef
		switch p := stores[τ]; {
		case p == nil:
		case bf16:
			d.bf16 = unsafe.Slice((*uint16)(p), hs)
		default:
			d.f32 = unsafe.Slice((*float32)(p), hs)
		}
		if τ == last && carry != nil {
			d.f32 = carry
		}
		return d
	})
	workPool.Put(w)
}

// vkPortableF32 and vkPortableBF16 are vkTokens behind the flat signatures.
func vkPortableF32(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32) {
	dst := make([]stateRef, len(tok)/4)
	for τ, p := range stores[:len(dst)] {
		if p != nil {
			dst[τ].f32 = unsafe.Slice((*float32)(p), K*V)
		}
	}
	vkTokens(&headCall{K: K, V: V, src: stateRef{f32: src}, dst: dst, kh: kh, qh: qh, v: v, vs: vs, o: o, tok: tok, slab: make([]float32, K)})
}

func vkPortableBF16(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32) {
	dst := make([]stateRef, len(tok)/4)
	for τ, p := range stores[:len(dst)] {
		if p != nil {
			dst[τ].bf16 = unsafe.Slice((*uint16)(p), K*V)
		}
	}
	if carry != nil {
		dst[len(dst)-1].f32 = carry
	}
	in := stateRef{bf16: src}
	if src32 != nil {
		in = stateRef{f32: src32}
	}
	vkTokens(&headCall{K: K, V: V, src: in, dst: dst, kh: kh, qh: qh, v: v, vs: vs, o: o, tok: tok, slab: make([]float32, K)})
}

// The assembly routines (K in range, see above; len(tok) = 4T, T ≥ 1; the contract of tokensF32
// and tokensBF16).

//go:noescape
func stateVKf32AVX512(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)

//go:noescape
func stateVKbf16AVX512(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr, cvt bool)

//go:noescape
func stateVKf32AVX2(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)

//go:noescape
func stateVKbf16AVX2(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr)

// Benchmark floors (asm/bench_floor.go), exported through BenchFloors.

func fmaLoopAVX512(n int)

func fmaLoopAVX2(n int)

func init() {
	floorScale["avx512"], floorFMA["avx512"], floorLanes["avx512"] = func(x []float32, s float32) { scaleAVX512(x, x, s) }, fmaLoopAVX512, 16
	floorScale["avx2"], floorFMA["avx2"], floorLanes["avx2"] = func(x []float32, s float32) { scaleAVX2(x, x, s) }, fmaLoopAVX2, 8
}
