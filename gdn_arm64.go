//go:build !purego

package gdnsimd

import (
	"math"

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
// (both storage types alike, whatever T: the equivalences between formats and calls hold). They
// issue no prefetches (the list is a hint) and use no work space.
var neonImpl = withRoutines(impl{name: "neon", state: single(stateKVf32NEON), gate: gateNEON, l2: l2NEON, scale: scale, widen: widenNEON, gates: gatesChecked(gatesNEON)},
	[2][2]*routine{
		{{fn: stateKVf32NEON, maxK: neonMaxK}, {fn: stateVKf32NEON, maxK: neonMaxK}},
		{{fn: stateKVbf16NEON, bf16: true, maxK: neonMaxK}, {fn: stateVKbf16NEON, bf16: true, maxK: neonMaxK}},
	})

// neonMaxK is the largest K the routines over T tokens take: one column (a [K][V] strip) or one
// row ([V][K]) in the 4096-float slab.
const neonMaxK = 4096

// The state routines over T tokens (a stateArgs each, gdn_args.go), for K ≤ neonMaxK. Per token they compute stateGeneric's arithmetic ([K][V]: each column's sums in row
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
func stateKVf32NEON(a stateArgs)

//go:noescape
func stateVKf32NEON(a stateArgs)

//go:noescape
func stateKVbf16NEON(a stateArgs)

//go:noescape
func stateVKbf16NEON(a stateArgs)

// widenNEON is widenGeneric in NEON: dst[i] = the float32 of the bf16 bits src[i] for i < len(dst)
// (len(src) ≥ len(dst), not checked).
//
//go:noescape
func widenNEON(dst []float32, src []uint16)

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
