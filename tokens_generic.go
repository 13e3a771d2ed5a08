package gdnsimd

import (
	"math"
	"unsafe"
)

// The portable state routines over T tokens, one per layout; the storage type is handled by
// loadState and storeState only. Each keeps the part of the state it works on in float32 scratch
// for all of a call's tokens — a column block of the [K][V] state, a row of the [V][K] one — and
// writes it to memory only where a token's state is stored. Per token they compute exactly what
// one single-token call does, so a call of T tokens gives the bits of T calls of one.

// kvTokens is the [K][V] routine: column blocks of genericBlock columns, each loaded into the
// K×n slab once, advanced through every token (kvBlock: a read and a write pass in L1) and
// stored at every token that keeps its state.
func kvTokens(h *headCall) {
	K, V, T := h.K, h.V, len(h.tok)/4
	for j0 := 0; j0 < V; j0 += genericBlock {
		n := min(genericBlock, V-j0)
		slab := h.slab[: K*n : K*n]
		for i := range K {
			loadState(slab[i*n:(i+1)*n], h.src, i*V+j0)
		}
		for τ := range T {
			tk := h.tok[4*τ : 4*τ+4]
			kvBlock(slab, slab, n, n, h.kh[τ*K:(τ+1)*K], h.qh[τ*K:(τ+1)*K],
				h.v[τ*h.vs+j0:τ*h.vs+j0+n], h.o[τ*V+j0:τ*V+j0+n], tk[0], tk[1], tk[2], tk[3])
			if d := h.dst[τ]; !d.none() {
				for i := range K {
					storeState(d, i*V+j0, slab[i*n:(i+1)*n])
				}
			}
		}
	}
}

// vkTokens is the [V][K] routine: row j (column j of the maths, K contiguous) is loaded once,
// advanced through every token and stored at every token that keeps its state.
func vkTokens(h *headCall) {
	K, V, T := h.K, h.V, len(h.tok)/4
	row := h.slab[:K:K]
	for j := range V {
		loadState(row, h.src, j*K)
		for τ := range T {
			tk := h.tok[4*τ : 4*τ+4]
			em1, eg, beta, kq := tk[0], tk[1], tk[2], tk[3]
			near := em1 >= nearOne
			kh, qh := h.kh[τ*K:(τ+1)*K], h.qh[τ*K:(τ+1)*K]
			kv, qs := dot2(row, kh, qh)
			d := beta * (h.v[τ*h.vs+j] - decay(kv, em1, eg, near))
			h.o[τ*V+j] = decay(qs, em1, eg, near) + kq*d
			if near {
				for i, x := range row {
					row[i] = x + em1*x + kh[i]*d
				}
			} else {
				for i, x := range row {
					row[i] = eg*x + kh[i]*d
				}
			}
			if d := h.dst[τ]; !d.none() {
				storeState(d, j*K, row)
			}
		}
	}
}

// dot2 returns Σ r_i·a_i and Σ r_i·b_i, each over four interleaved partial sums
// ((s0 + s1) + (s2 + s3)), then the tail.
func dot2(r, a, b []float32) (float32, float32) {
	n := len(r)
	a, b = a[:n], b[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		x0, x1, x2, x3 := r[i], r[i+1], r[i+2], r[i+3]
		a0 += x0 * a[i]
		a1 += x1 * a[i+1]
		a2 += x2 * a[i+2]
		a3 += x3 * a[i+3]
		b0 += x0 * b[i]
		b1 += x1 * b[i+1]
		b2 += x2 * b[i+2]
		b3 += x3 * b[i+3]
	}
	sa, sb := (a0+a1)+(a2+a3), (b0+b1)+(b2+b3)
	for ; i < n; i++ {
		sa += r[i] * a[i]
		sb += r[i] * b[i]
	}
	return sa, sb
}

// loadState sets dst to the len(dst) elements of r from off: f32 as is, bf16 widened exactly,
// zeros when r is none.
func loadState(dst []float32, r stateRef, off int) {
	switch {
	case r.f32 != nil:
		copy(dst, r.f32[off:off+len(dst)])
	case r.bf16 != nil:
		src := r.bf16[off : off+len(dst)]
		for i, b := range src {
			dst[i] = math.Float32frombits(uint32(b) << 16)
		}
	default:
		clear(dst)
	}
}

// storeState writes src to r from off: to its f32 storage as is and to its bf16 storage rounded to
// nearest even (BF16RNE).
func storeState(r stateRef, off int, src []float32) {
	if r.f32 != nil {
		copy(r.f32[off:off+len(src)], src)
	}
	if r.bf16 != nil {
		dst := r.bf16[off : off+len(src)]
		for i, x := range src {
			dst[i] = BF16RNE(x)
		}
	}
}

// widenGeneric sets dst[i] to the float32 of the bf16 bits src[i] (exact).
func widenGeneric(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

// tokenwise makes a [K][V] f32 state routine over T tokens out of a single-token piece: token τ
// reads the state the token before wrote (in place where it may) and writes it to dst[τ], or to
// the scratch tmp when that token's state is not kept.
func tokenwise(piece func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)) stateFunc {
	return func(h *headCall) {
		K, V, T := h.K, h.V, len(h.tok)/4
		cur := h.src.f32
		for τ := range T {
			out := h.dst[τ].f32
			if out == nil {
				out = h.tmp
			}
			if cur == nil { // the zero state
				clear(out)
				cur = out
			}
			tk := h.tok[4*τ : 4*τ+4]
			piece(cur, out, h.kh[τ*K:(τ+1)*K:(τ+1)*K], h.qh[τ*K:(τ+1)*K:(τ+1)*K],
				h.v[τ*h.vs:τ*h.vs+V:τ*h.vs+V], h.o[τ*V:(τ+1)*V:(τ+1)*V], tk[0], tk[1], tk[2], tk[3])
			cur = out
		}
	}
}

// The assembly state routines over T tokens have one flat, typed signature per storage type (so
// go vet's asmdecl checks every argument):
//
//	f32:  routine(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32)
//	bf16: routine(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32,
//	              kh, qh, v []float32, vs int, o, tok []float32)
//
// with E float32 or uint16 (bf16 bits), T = len(tok)/4 tokens, and, as the adapters below
// guarantee: len(src) = K·V (the state before the first token; the zero state is a buffer of
// zeros) — for a bf16 routine, unless src32 is not nil: then the state before the first token is
// the K·V float32s of src32 (the previous chunk's carry) and src is not read; stores[τ] nil or the start of K·V elements of E receiving the state after token τ
// (rounded to bf16 nearest even for uint16); carry (bf16 routines) nil or K·V float32s receiving
// the state after the last token unrounded; len(kh) = len(qh) = T·K; token τ's v at v[τ·vs : τ·vs+V]; len(o) =
// T·V (written); tok[4τ:4τ+4] = em1, eg, beta, kq. The routine keeps the state float32 between
// tokens and must not touch memory outside these.
type (
	tokensF32  func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32)
	tokensBF16 func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32)
)

// asmTokensF32 makes a stateFunc of an f32 routine: every dst is f32 (an f32 pool, or the carry
// the driver adds at a chunk's end).
func asmTokensF32(r tokensF32) stateFunc {
	return func(h *headCall) {
		hs := h.K * h.V
		src := h.src.f32
		if src == nil {
			src = h.zero32
		}
		stores := h.stores[:len(h.dst)]
		for τ, d := range h.dst {
			stores[τ] = nil
			if d.f32 != nil {
				stores[τ] = unsafe.Pointer(unsafe.SliceData(d.f32[:hs]))
			}
		}
		r(h.K, h.V, src[:hs:hs], stores, h.kh, h.qh, h.v, h.vs, h.o, h.tok)
		clear(stores)
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
		r(h.K, h.V, src[:hs:hs], src32, stores, carry, h.kh, h.qh, h.v, h.vs, h.o, h.tok)
		clear(stores)
	}
}
