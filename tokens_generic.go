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
	K := h.K
	row := h.slab[:K:K]
	for j := range h.V {
		loadState(row, h.src, j*K)
		vkRow(row, j, h.V, h.kh, h.qh, h.v, h.vs, h.o, h.tok, func(τ int) stateRef { return h.dst[τ] })
	}
}

// vkRow advances row j of a [V][K] head (row: its K elements, loaded) through the tokens of tok:
// it writes o[τ·V+j], and the row after token τ to dst(τ) from element j·K unless that is none.
func vkRow(row []float32, j, V int, kh, qh, v []float32, vs int, o, tok []float32, dst func(τ int) stateRef) {
	K := len(row)
	for τ := range len(tok) / 4 {
		tk := tok[4*τ : 4*τ+4]
		em1, eg, beta, kq := tk[0], tk[1], tk[2], tk[3]
		near := em1 >= nearOne
		kh, qh := kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K]
		kv, qs := dot2(row, kh, qh)
		d := beta * (v[τ*vs+j] - decay(kv, em1, eg, near))
		o[τ*V+j] = decay(qs, em1, eg, near) + kq*d
		if near {
			for i, x := range row {
				row[i] = x + em1*x + kh[i]*d
			}
		} else {
			for i, x := range row {
				row[i] = eg*x + kh[i]*d
			}
		}
		if d := dst(τ); !d.none() {
			storeState(d, j*K, row)
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

// The assembly state routines over T tokens have one flat, typed signature per storage type (so
// go vet's asmdecl checks every argument):
//
//	f32:  routine(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
//	bf16: routine(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32,
//	              kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
//
// with E float32 or uint16 (bf16 bits), T = len(tok)/4 tokens, and, as the adapters below
// guarantee: len(src) = K·V (the state before the first token; the zero state is a buffer of
// zeros) — for a bf16 routine, unless src32 is not nil: then the state before the first token is
// the K·V float32s of src32 (the previous chunk's carry) and src is not read; stores[τ] nil or the start of K·V elements of E receiving the state after token τ
// (rounded to bf16 nearest even for uint16); carry (bf16 routines) nil or K·V float32s receiving
// the state after the last token unrounded; len(kh) = len(qh) = T·K; token τ's v at v[τ·vs : τ·vs+V]; len(o) =
// T·V (written); tok[4τ:4τ+4] = em1, eg, beta, kq; pf a prefetch list (headCall.pf, the driver's
// ahead: the rows of its next call), a hint that an assembly routine issues as prefetches over its
// token passes and any routine may ignore. The routine keeps the state float32 between tokens and
// must not touch memory outside these (a prefetch touches nothing).
type (
	tokensF32  func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
	tokensBF16 func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
)
