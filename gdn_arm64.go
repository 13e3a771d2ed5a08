//go:build !purego

package gdnsimd

import (
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// init sets available, the assembly kernels usable on this CPU, best first: "neon" when the CPU has
// ASIMD (every arm64 CPU Go runs on; GODEBUG=cpu.asimd=off removes it, -tags purego never builds it).
func init() { available = arm64Kernels() }

func arm64Kernels() []*impl {
	if !cpu.ARM64.HasASIMD {
		return nil
	}
	return []*impl{&neonImpl}
}

// neonImpl is the NEON kernel: the pieces and the four state routines over T tokens in
// gdn_arm64.s (gate's sum of squares through l2NEON). The routines keep their part of the state in
// a 16 KiB slab on the stack, so a head with K > neonMaxK goes to the generic routine of its format
// (both storage types alike, whatever T: the equivalences between formats and calls hold).
var neonImpl = neonLimits(withTokens(impl{name: "neon", state: stateNEON, gate: gateNEON, l2: l2NEON, scale: scale, widen: widenNEON, gates: gatesChecked(gatesNEON),
	tokF32:  [2]tokensF32{noPrefetchF32(stateKVf32NEON), noPrefetchF32(stateVKf32NEON)},
	tokBF16: [2]tokensBF16{noPrefetchBF16(stateKVbf16NEON), noPrefetchBF16(stateVKbf16NEON)},
}, [2]snapOnce{}))

// noPrefetchF32 and noPrefetchBF16 adapt a NEON routine, which takes no prefetch list, to the flat
// signatures (the list is a hint; the NEON routines do not issue it).
func noPrefetchF32(r func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32)) tokensF32 {
	return func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, _ []uintptr) {
		r(K, V, src, stores, kh, qh, v, vs, o, tok)
	}
}

func noPrefetchBF16(r func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32)) tokensBF16 {
	return func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, _ []uintptr) {
		r(K, V, src, src32, stores, carry, kh, qh, v, vs, o, tok)
	}
}

// neonMaxK is the largest K the routines over T tokens take: one column (a [K][V] strip) or one
// row ([V][K]) in the 4096-float slab.
const neonMaxK = 4096

// neonLimits sends the heads the routines cannot take to the generic ones.
func neonLimits(im impl) impl {
	for b := range 2 {
		for l, c := range im.cells[b] {
			if c == nil {
				continue
			}
			generic := genericImpl.cells[b][l]
			im.cells[b][l] = func(h *headCall) {
				if h.K > neonMaxK {
					generic(h)
					return
				}
				c(h)
			}
		}
	}
	return im
}

// The state routines over T tokens (tokens_generic.go: the flat signature and its contract), for
// K ≤ neonMaxK. Per token they compute stateNEON's arithmetic ([K][V]: each column's sums in row
// order, the same δ, o and write pass) or, for [V][K], per row j (K contiguous):
//
//	kv, qs := dot2(S[j], kh, qh)               // dot2's order: four partial sums (i mod 4),
//	                                           // ((s0 + s1) + (s2 + s3)), then the tail one by one
//	δ := beta·(v[j] − decay(kv));  o[j] = decay(qs) + kq·δ
//	S[j][i] = decay(S[j][i]) + kh[i]·δ
//
// with decay per token from em1 (≥ −0.5: x + em1·x fused; else, or NaN, eg·x). The f32 and bf16
// routine of a layout do the same arithmetic: bf16 is widened exactly on load and rounded to
// nearest even (BF16RNE) at each store only.
//
//go:noescape
func stateKVf32NEON(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32)

//go:noescape
func stateVKf32NEON(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32)

//go:noescape
func stateKVbf16NEON(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32)

//go:noescape
func stateVKbf16NEON(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32)

// widenNEON is widenGeneric in NEON: dst[i] = the float32 of the bf16 bits src[i] for i < len(dst)
// (len(src) ≥ len(dst), not checked).
//
//go:noescape
func widenNEON(dst []float32, src []uint16)

// stateNEON is stateGeneric in NEON (impl.state): the T = 1 plan of stateKVf32NEON (one token,
// stores[0] = sOut), the column-blocked read pass (Sᵀk̂ and Sᵀq̂ together) and write pass S' =
// decay(S) + k̂⊗δ in 32-column strips (then at most one of 16, three of 4 and three single
// columns), any K. The decay form is chosen once per call from em1 (a NaN em1 gives eg·x). K =
// len(kh) = len(qh), V = len(v) = len(o), len(sIn) = len(sOut) = K·V (not checked).
func stateNEON(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32) {
	tok := [4]float32{em1, eg, beta, kq}
	stores := [1]unsafe.Pointer{unsafe.Pointer(unsafe.SliceData(sOut))}
	stateKVf32NEON(len(kh), len(v), sIn, stores[:], kh, qh, v, len(v), o, tok[:])
}

// l2NEON is l2Generic in NEON: Σq², Σk², Σk·q over len(q) elements (len(k) ≥ len(q), not checked),
// accumulated in float64.
//
//go:noescape
func l2NEON(q, k []float32) (qq, kk, kq float64)

// gateNEON4 is the element loop of gateGeneric in NEON, for j < len(o) (z, w at least as long; out
// and outF nil or at least as long, not checked):
//
//	y := o[j]·r·w[j]·silu32(z[j]);  outF[j] = y;  out[j] = BF16RNE(y)
//
// where a nil out or outF is skipped. silu32 uses exp32's polynomial and clamps, vectorised.
//
//go:noescape
func gateNEON4(o, z, w []float32, r float32, out []uint16, outF []float32)

// gatesNEON is gatesGeneric in NEON, two lanes of float64 a vector (four per iteration, then two,
// then one alone in lane 0): every lane's operations are gate1's, in its order, so the bits are
// gatesGeneric's. It takes len(b) lanes and does not check the other lengths (gatesChecked does).
//
//go:noescape
func gatesNEON(beta, em1, eg, b, a, alog, dtb []float32)

// gateNEON is gateGeneric with the sum of squares (l2NEON of o with itself) and the element loop
// (gateNEON4) in NEON; only r = 1/sqrt(Σo²/V + eps) is computed here, exactly as gateGeneric does.
func gateNEON(o, z, w []float32, eps float32, out []uint16, outF []float32) {
	V := len(o)
	z, w = z[:V], w[:V]
	if out != nil {
		out = out[:V]
	}
	if outF != nil {
		outF = outF[:V]
	}
	ss, _, _ := l2NEON(o, o)
	r := float32(1 / math.Sqrt(ss/float64(V)+float64(eps)))
	gateNEON4(o, z, w, r, out, outF)
}
