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
	{Name: "gatesNEON", Params: "(beta, em1, eg, b, a, dtb []float32, rate []float64, form uint8, lb float64)",
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

// neonLanes is the float32 lanes of a NEON vector: the chans and conv routines take whole
// vectors of them (chansChecked, convChecked do the rest).
const neonLanes = 4

// goFile is gdn_arm64.go: the constant kernels_arm64.go's impl literal takes, the routine table
// and the stubs.
func goFile() gofile.File {
	k := gofile.Kernel{Name: "neon"}
	for _, st := range storages {
		var row [2]*gofile.Routine
		for l, lay := range []string{"KV", "VK"} {
			row[l] = &gofile.Routine{Fn: "state" + lay + st.String() + "NEON", Storage: st.goName(), MaxK: maxK}
		}
		k.Routines = append(k.Routines, row)
	}
	return gofile.File{
		Generator: "go -C asm run ./neon (asm/neon/gostubs.go)",
		Build:     "!purego",
		Consts: []gofile.Const{{Name: "neonLanes", Value: neonLanes,
			Doc: "neonLanes is the float32 lanes of a NEON vector: chansNEON and convNEON take whole vectors of them."}},
		Kernels: []gofile.Kernel{k},
		Funcs:   goFuncs,
	}
}
