//go:build !purego

package gdnsimd

import (
	"math"

	"golang.org/x/sys/cpu"
)

// available lists the assembly kernels usable on this CPU, best first: "neon" when the CPU has
// ASIMD (every arm64 CPU Go runs on; GODEBUG=cpu.asimd=off removes it, -tags purego never builds it).
var available = arm64Kernels()

func arm64Kernels() []*impl {
	if !cpu.ARM64.HasASIMD {
		return nil
	}
	return []*impl{&neonImpl}
}

// neonImpl is the NEON kernel: all three pieces in gdn_arm64.s (gate's sum of squares through l2NEON).
var neonImpl = impl{name: "neon", state: stateNEON, gate: gateNEON, l2: l2NEON, widen: widenGeneric,
	cells: [2][2]stateFunc{{tokenwise(stateNEON)}}}

// stateNEON is stateGeneric in NEON: the same column-blocked read pass (Sᵀk̂ and Sᵀq̂ together) and
// write pass S' = decay(S) + k̂⊗δ, in 32-column strips (then at most one of 16, three of 4 and three
// single columns). The decay form is chosen once per call from em1 (a NaN em1 gives eg·x).
// Reference:
//
//	near := em1 >= -0.5
//	decay := func(x) { if near { return x + em1·x } else { return eg·x } }   // x + em1·x fused
//	for j := range V:
//		kv, qs := Σ_i kh[i]·sIn[i*V+j], Σ_i qh[i]·sIn[i*V+j]
//		d := beta·(v[j] − decay(kv));  o[j] = decay(qs) + kq·d
//		for i := range K: sOut[i*V+j] = decay(sIn[i*V+j]) + kh[i]·d
//
// with K = len(kh) = len(qh), V = len(v) = len(o), len(sIn) = len(sOut) = K·V (not checked).
//
//go:noescape
func stateNEON(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)

// l2NEON is l2Generic in NEON: Σq², Σk², Σk·q over len(q) elements (len(k) ≥ len(q), not checked),
// accumulated in float64.
//
//go:noescape
func l2NEON(q, k []float32) (qq, kk, kq float64)

// gateNEON4 is the element loop of gateGeneric in NEON, for j < len(o) (z, w at least as long; out
// and outF nil or at least as long, not checked):
//
//	y := o[j]·r·w[j]·Silu32(z[j]);  outF[j] = y;  out[j] = BF16RNE(y)
//
// where a nil out or outF is skipped. Silu32 uses Exp32's polynomial and clamps, vectorised.
//
//go:noescape
func gateNEON4(o, z, w []float32, r float32, out []uint16, outF []float32)

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
