package main

import (
	"fmt"

	"github.com/gdnsimd/gdnsimd/asm/internal/gofile"
)

// The Go side of gdn_arm64.s (gdn_arm64.go, written with it: -go): the stubs with their reference
// loops and the kernel's table. The routines keep their part of the state in the slab, so the
// largest K is one column (a [K][V] strip) or one row ([V][K]) of it: maxK.

// maxK is the largest K the state routines take (slabBytes of float32s).
const maxK = slabBytes / 4

// goFuncs are the routines' Go declarations, in gdn_arm64.s's order.
var goFuncs = []gofile.Func{
	{Name: "l2NEON", Params: "(q, k []float32) (qq, kk, kq float64)",
		Doc: "l2NEON is l2Generic in NEON: Σq², Σk², Σk·q over len(q) elements (len(k) ≥ len(q), not checked),\naccumulated in float64."},
	{Name: "gateNEON4", Params: "(o, z, w []float32, r float32, out []uint16, outF []float32, sig bool)",
		Doc: `gateNEON4 is the element loop of gateGeneric in NEON, for j < len(o) (z, w at least as long; out
and outF nil or at least as long, not checked):

	y := o[j]·r·w[j]·act(z[j]);  outF[j] = y;  out[j] = BF16RNE(y)

act is silu32, or sigmoid32 if sig; a nil out or outF is skipped. act uses exp32's polynomial and
clamps, vectorised. The
kernel's gate is gateSplit(l2NEON, gateNEON4): r from l2NEON's Σo², as gateGeneric computes it.`},
	{Name: "gatesNEON", Params: "(beta, em1, eg, b, a, dtb []float32, rate []float64, lb float64)",
		Doc: `gatesNEON is gatesGeneric in NEON, two lanes of float64 a vector (four per iteration, then two,
then one alone in lane 0): every lane's operations are gatesGeneric's, in its order, so the bits
are the same. It takes len(a) lanes and does not check the other lengths (gatesChecked does).`},
	{Name: "chansNEON", Params: "(kx, qx, pairs, em1, eg, kh, qh []float32)",
		Doc: `chansNEON is chansGeneric in NEON for the whole vectors (four lanes) of len(em1) channels (the
others are not written; every slice holds at least len(em1) elements, pairs 2·len(em1): not
checked, see chansChecked): c·kh and c·qh rounded on their own, then added, as chanDecay does.`},
	{Name: "convNEON", Params: "(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int)",
		Doc: `convNEON is convGeneric in NEON (asm/neon/conv.go) for the whole vectors (four lanes) of len(bias)
channels (the others are not written; strides in elements; W ≥ 1, T ≥ 1 and the lengths are not
checked: see convChecked): per token, the taps a loop over W, each product rounded on its own,
then added (FMUL, FADD), and silu through exp32's vector form, so the bits are convGeneric's.`},
	{Name: "widenNEON", Params: "(dst []float32, src []uint16)",
		Doc: "widenNEON is widenGeneric in NEON: dst[i] = the float32 of the bf16 bits src[i] for i < len(dst)\n(len(src) ≥ len(dst), not checked)."},
	{Name: "stateKVf32NEON", Params: "(a stateArgs)", Doc: fmt.Sprintf(`The state routines over T tokens, for K ≤ %d. Per token they compute stateGeneric's arithmetic
([K][V]: each column's sums in row order, the same δ, o and write pass; with dst1, the T = 1 plan)
or, for [V][K], per row j (K contiguous):

	kv, qs := dot2(S[j], kh, qh)               // dot2's order: four partial sums (i mod 4),
	                                           // ((s0 + s1) + (s2 + s3)), then the tail one by one
	δ := beta·(v[j] − decay(kv));  o[j] = decay(qs) + kq·δ
	S[j][i] = decay(S[j][i]) + kh[i]·δ

with decay per token from em1 (≥ −0.5: x + em1·x fused; else, or NaN, eg·x). The f32 and bf16
routine of a layout do the same arithmetic: bf16 is widened exactly on load and rounded to
nearest even (BF16RNE) at each store only.`, maxK)},
	{Name: "stateVKf32NEON", Params: "(a stateArgs)"},
	{Name: "stateKVbf16NEON", Params: "(a stateArgs)"},
	{Name: "stateVKbf16NEON", Params: "(a stateArgs)"},
}

// goFile is gdn_arm64.go.
func goFile() gofile.File {
	k := gofile.Kernel{Var: "neonImpl", Name: "neon",
		Doc: `neonImpl is the NEON kernel: the pieces and the four state routines over T tokens of
gdn_arm64.s. A head with K above the slab's goes to the generic routine of its format (both
storage types alike, whatever T: the equivalences between formats and calls hold). The routines
issue no prefetches (the list is a hint) and take no work space.`,
		Fields: "state: single(stateKVf32NEON), gate: gateSplit(l2NEON, gateNEON4), l2: l2NEON, scale: scale, widen: widenNEON, gates: gatesChecked(gatesNEON), chans: chansChecked(chansNEON, 4), conv: convChecked(convNEON, 4)",
	}
	for b, st := range []string{"f32", "bf16"} {
		for l, lay := range []string{"KV", "VK"} {
			k.Routines[b][l] = &gofile.Routine{Fn: "state" + lay + st + "NEON", BF16: b == 1, MaxK: maxK}
		}
	}
	return gofile.File{
		Generator: "go -C asm run ./neon (asm/neon/gostubs.go)",
		Build:     "!purego",
		Imports:   []string{"math", "", "golang.org/x/sys/cpu"},
		Pre: `// init sets available, the assembly kernels usable on this CPU: "neon" when the CPU has ASIMD
// (every arm64 CPU Go runs on; GODEBUG=cpu.asimd=off removes it, -tags purego never builds it).
func init() {
	if cpu.ARM64.HasASIMD {
		available = append(available, &neonImpl)
	}
}

// gateSplit is impl.gate of a kernel whose gate routine gate4 is the element loop, given r: the sum
// of squares is l2's (of o with itself), r = 1/sqrt(Σo²/V + eps) computed here exactly as
// gateGeneric does. The slices are cut to V = len(o) first (a short one panics).
func gateSplit(l2 func(q, k []float32) (qq, kk, kq float64), gate4 func(o, z, w []float32, r float32, out []uint16, outF []float32, sig bool)) func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool) {
	return func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool) {
		V := len(o)
		z, w = z[:V], w[:V]
		if out != nil {
			out = out[:V]
		}
		if outF != nil {
			outF = outF[:V]
		}
		ss, _, _ := l2(o, o)
		gate4(o, z, w, float32(1/math.Sqrt(ss/float64(V)+float64(eps))), out, outF, sig)
	}
}`,
		Kernels: []gofile.Kernel{k},
		Funcs:   goFuncs,
	}
}
