//go:build (amd64 || arm64) && !purego

package gdnsimd

import "unsafe"

// snapOnce reports whether an f32 routine writes the stores of a call with a store at every token
// (verification) non-temporally, for a head of K×V and those stores, so that the call is one call
// of T tokens rather than T calls of one (perToken). nil: never.
type snapOnce func(K, V int, stores []unsafe.Pointer) bool

// withTokens fills the cells that im's flat routines implement and returns im; once holds the
// snapOnce of im's f32 routines by layout.
func withTokens(im impl, once [2]snapOnce) impl {
	for l := range 2 {
		if r := im.tokF32[l]; r != nil {
			im.cells[0][l] = asmTokensF32(r, once[l])
		}
		if r := im.tokBF16[l]; r != nil {
			im.cells[1][l] = asmTokensBF16(r)
		}
	}
	return im
}

// asmTokensF32 makes a stateFunc of an f32 routine: every dst is f32 (an f32 pool, or the carry
// the driver adds at a chunk's end).
func asmTokensF32(r tokensF32, once snapOnce) stateFunc {
	return func(h *headCall) {
		hs := h.K * h.V
		src := h.src.f32
		if src == nil {
			src = h.zero32
		}
		stores := h.stores[:len(h.dst)]
		every := len(stores) > 1
		for τ, d := range h.dst {
			stores[τ] = nil
			if d.f32 != nil {
				stores[τ] = unsafe.Pointer(unsafe.SliceData(d.f32[:hs]))
			} else {
				every = false
			}
		}
		if every && (once == nil || !once(h.K, h.V, stores)) {
			perToken(r, h, src[:hs:hs], stores)
		} else {
			r(h.K, h.V, src[:hs:hs], stores, h.kh, h.qh, h.v, h.vs, h.o, h.tok, h.pf)
		}
		clear(stores)
	}
}

// perToken (the routines and shapes without non-temporal snapshot stores: snapOnce) runs the
// tokens of h one call each, token τ from the state token τ − 1 stored (src for the first) into
// its own store: the calls of a snapshot after every token (speculative verification). One call of
// T tokens keeps column blocks or row groups in the cache across the tokens and writes each
// snapshot in pieces, a piece per block and token, hopping between the T snapshots; calls of one
// token write each snapshot as one sequential stream, which memory takes about twice as fast when
// the snapshots do not fit the caches (Qwen3-Next, B = 8, T = 4, avx512 before its non-temporal
// stores: 6.4–7.5 ms → 3.6–3.8 ms a call). The routines that write those snapshots non-temporally
// (snapOnce) need no such split: one call of T tokens, with neither the hops' cost nor the
// write-allocate reads, takes 2.2–2.3 ms. The bits are the same: the routines give T calls of one
// token the bits of one call of T tokens (the state stays float32 between tokens).
func perToken(r tokensF32, h *headCall, src []float32, stores []unsafe.Pointer) {
	K, V, hs := h.K, h.V, h.K*h.V
	for τ, p := range stores {
		r(K, V, src, stores[τ:τ+1], h.kh[τ*K:(τ+1)*K], h.qh[τ*K:(τ+1)*K], h.v[τ*h.vs:τ*h.vs+V], h.vs, h.o[τ*V:(τ+1)*V], h.tok[4*τ:4*τ+4], nil)
		src = unsafe.Slice((*float32)(p), hs)
	}
}

// asmTokensBF16 makes a stateFunc of a bf16 routine: every dst's bf16 part is a store, the f32
// part (the driver's carry, only ever at the last token) the carry.
func asmTokensBF16(r tokensBF16) stateFunc {
	return func(h *headCall) {
		hs := h.K * h.V
		src, src32 := h.src.bf16, h.src.f32 // src32: the previous chunk's carry
		if src == nil {
			src = h.zero16
		}
		if src32 != nil {
			src32 = src32[:hs:hs]
		}
		stores := h.stores[:len(h.dst)]
		var carry []float32
		for τ, d := range h.dst {
			stores[τ] = nil
			if d.bf16 != nil {
				stores[τ] = unsafe.Pointer(unsafe.SliceData(d.bf16[:hs]))
			}
			if d.f32 != nil {
				if τ != len(h.dst)-1 {
					panic("gdnsimd: an f32 store before the last token of a bf16 call")
				}
				carry = d.f32[:hs:hs]
			}
		}
		r(h.K, h.V, src[:hs:hs], src32, stores, carry, h.kh, h.qh, h.v, h.vs, h.o, h.tok, h.pf)
		clear(stores)
	}
}

// gatesChecked makes impl.gates of a gates routine that does not check its lengths: every slice
// is cut to len(b) first, so that a short one panics as gatesGeneric's indexing does instead of
// being read or written past.
func gatesChecked(f func(beta, em1, eg, b, a, alog, dtb []float32)) func(beta, em1, eg, b, a, alog, dtb []float32) {
	return func(beta, em1, eg, b, a, alog, dtb []float32) {
		n := len(b)
		f(beta[:n], em1[:n], eg[:n], b, a[:n], alog[:n], dtb[:n])
	}
}
