package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"

	ec "github.com/gdnsimd/gdnsimd/asm/internal/exp32consts"
)

// --- gate ---

// gatePiece emits the gate for one piece at element offset 0 of the GP pointers:
// y = ((o·r)·w)·act(z), act silu or sigmoid (the sig argument), stored to outF if non-nil and as bf16 to out if non-nil.
type gateRegs struct {
	o, z, w, out, outF GPVirtual
	r                  VecVirtual // broadcast RMS factor
}

func gatePiece(a isa, g gateRegs, pc piece) { gatePieces(a, g, pc, 1) }

// gateGroups are the numbers of whole vectors gatePieces interleaves, in the order the main loop
// tries them (each in a loop while that many are left). Each Exp32 is a chain of about 30 dependent
// operations: one vector's chain after another filled the scheduler with waiting operations
// (AVX-512, V = 128: about 28 cycles a vector). BenchmarkGate, V = 128, medians of 8 alternating
// runs: AVX-512 88 → 63 ns, AVX2 164 → 119 (doc/notebook/2026-12-01-gate-exp32-chains.md). A vector takes 3 registers
// through Exp32 (x, n, p) besides r, a constant and one temporary: 8 fit in 32 ZMM, 4 in 16 YMM.
func (a isa) gateGroups() []int {
	if a.regs >= 32 {
		return []int{8, 4, 1}
	}
	return []int{4, 1}
}

// gatePieces emits the gate for k pieces like pc at element offsets 0, w, …, (k − 1)·w of the GP
// pointers (k > 1: whole vectors), their instructions interleaved: each lane's operations are
// those of gatePiece, in the same order, so the bits are the same.
func gatePieces(a isa, g gateRegs, pc piece, k int) {
	if k > 1 && (pc.mask != nil || pc.w != a.lanes) {
		panic("gatePieces: only whole vectors interleave")
	}
	v := func(r VecVirtual) Register {
		if pc.w == 1 {
			return r.AsX() // scalar pieces compute in all four lanes of an XMM: the others are 0
		}
		return pc.view(r)
	}
	at := func(base GPVirtual, j, es int) Mem { return Mem{Base: base, Disp: j * pc.w * es} }
	// silu(z) = z / (1 + Exp32(−z)); z is loaded again for the division, so that only Exp32's
	// registers are live through it.
	e := make([]VecVirtual, k)
	for j := range k {
		xz := a.vec()
		pc.load(at(g.z, j, 4), xz)
		e[j] = a.vec()
		if a.evex {
			withC(v(xz), VPXORD, VPXORD_BCST, cSign, v(xz), v(e[j]))
		} else {
			VXORPS(cSign, v(xz), v(e[j]))
		}
	}
	exp32(a, pc, e)
	for j := range k {
		withC(v(e[j]), VADDPS, VADDPS_BCST, cOne, v(e[j]), v(e[j]))
	}
	// The numerator: z for silu(z), 1 for sigmoid(z) = 1 / (1 + Exp32(−z)) (the sig argument).
	xz := make([]VecVirtual, k)
	sigmoid, divided := label("gsig"), label("gdiv")
	CMPB(paramMem("sig"), U8(0))
	JNE(LabelRef(sigmoid))
	for j := range k {
		xz[j] = a.vec()
		pc.load(at(g.z, j, 4), xz[j])
		VDIVPS(v(e[j]), v(xz[j]), v(xz[j])) // xz = z / e
	}
	JMP(LabelRef(divided))
	Label(sigmoid)
	for j := range k {
		VBROADCASTSS(cOne, v(xz[j]))
		VDIVPS(v(e[j]), v(xz[j]), v(xz[j])) // xz = 1 / e
	}
	Label(divided)
	xo := make([]VecVirtual, k)
	for j := range k {
		xo[j] = a.vec()
		pc.load(at(g.o, j, 4), xo[j])
		VMULPS(v(g.r), v(xo[j]), v(xo[j]))
		xw := a.vec()
		pc.load(at(g.w, j, 4), xw)
		VMULPS(v(xw), v(xo[j]), v(xo[j]))
		VMULPS(v(xz[j]), v(xo[j]), v(xo[j]))
	}

	skipF, skipB := label("nof32"), label("nobf16")
	TESTQ(g.outF, g.outF)
	JZ(LabelRef(skipF))
	for j := range k {
		pc.store(xo[j], at(g.outF, j, 4))
	}
	Label(skipF)
	TESTQ(g.out, g.out)
	JZ(LabelRef(skipB))
	for j := range k {
		bf16(a, pc, xo[j], at(g.out, j, 2))
	}
	Label(skipB)
}

// exp32 replaces each x of xs by Exp32(x), operation for operation as gdn_generic_gates.go computes it
// (no fused multiply-adds, so the result is the Go function's, bit for bit, on amd64), the
// vectors' operations interleaved. NaN stays NaN: the clamps take x as their second source
// operand, which VMINPS/VMAXPS return when either is NaN.
func exp32(a isa, pc piece, xs []VecVirtual) {
	v := func(r VecVirtual) Register {
		if pc.w == 1 {
			return r.AsX()
		}
		return pc.view(r)
	}
	each := func(f func(j int)) {
		for j := range xs {
			f(j)
		}
	}
	c := a.vec()
	VBROADCASTSS(cHi, v(c))
	each(func(j int) { VMINPS(v(xs[j]), v(c), v(xs[j])) }) // hi < x ? hi : x
	VBROADCASTSS(cLo, v(c))
	each(func(j int) { VMAXPS(v(xs[j]), v(c), v(xs[j])) }) // lo > x ? lo : x
	n, p := make([]VecVirtual, len(xs)), make([]VecVirtual, len(xs))
	each(func(j int) {
		n[j], p[j] = a.vec(), a.vec()
		withC(v(xs[j]), VMULPS, VMULPS_BCST, cLog2e, v(xs[j]), v(n[j]))
	})
	each(func(j int) { withC(v(n[j]), VADDPS, VADDPS_BCST, cHalf, v(n[j]), v(n[j])) })
	each(func(j int) {
		if a.evex {
			VRNDSCALEPS(U8(9), v(n[j]), v(n[j])) // floor, no precision exception
		} else {
			VROUNDPS(U8(9), v(n[j]), v(n[j]))
		}
	})
	// (t: one register for every vector, each product used at once; renaming makes the reuse free.)
	t := a.vec()
	each(func(j int) {
		withC(v(n[j]), VMULPS, VMULPS_BCST, cC1, v(n[j]), v(t))
		VSUBPS(v(t), v(xs[j]), v(xs[j])) // r = x − n·c1
	})
	each(func(j int) {
		withC(v(n[j]), VMULPS, VMULPS_BCST, cC2, v(n[j]), v(t))
		VSUBPS(v(t), v(xs[j]), v(xs[j])) // r = r − n·c2
	})
	each(func(j int) { withC(v(xs[j]), VMULPS, VMULPS_BCST, cP[0], v(xs[j]), v(p[j])) }) // p0·r
	for _, ci := range cP[1:] {
		each(func(j int) { withC(v(p[j]), VADDPS, VADDPS_BCST, ci, v(p[j]), v(p[j])) })
		each(func(j int) { VMULPS(v(xs[j]), v(p[j]), v(p[j])) })
	}
	// Now p = (…)·r; finish p·r·r + r + 1 as Go evaluates it: ((p·r)·r + r) + 1.
	// The loop multiplied by r after the last constant, so p holds p·r: multiply once more.
	each(func(j int) { VMULPS(v(xs[j]), v(p[j]), v(p[j])) })
	each(func(j int) { VADDPS(v(xs[j]), v(p[j]), v(p[j])) })
	each(func(j int) { withC(v(p[j]), VADDPS, VADDPS_BCST, cOne, v(p[j]), v(p[j])) })
	// 2^n: (n + 127) << 23.
	each(func(j int) { VCVTTPS2DQ(v(n[j]), v(n[j])) })
	each(func(j int) { withC(v(n[j]), VPADDD, VPADDD_BCST, cBias, v(n[j]), v(n[j])) })
	each(func(j int) { VPSLLD(U8(ec.Shift), v(n[j]), v(n[j])) })
	each(func(j int) { VMULPS(v(n[j]), v(p[j]), v(xs[j])) })
}

// bf16 stores BF16RNE(y) (see gdn_generic.go) for the piece's lanes at m; y is clobbered.
func bf16(a isa, pc piece, y VecVirtual, m Mem) { bf16Stored(a, pc, y, m, false, false) }

// finiteDelta sets flag (a frame slot) to 0 when the lanes keep (a bit a lane) of view(x), a
// token's δ, are finite, else to their non-finite lanes' bits. A stored state
// S' = decay(S) + k̂·δ of a finite δ holds no NaN, so its rounding may be bf16Stored's finite
// one: a finite δ = beta·(v − decay(Sᵀk̂)) needs decay(Sᵀk̂) finite, so Sᵀk̂ and the decay's
// constant finite (decay of ±Inf or NaN, and of anything by a non-finite constant, is ±Inf or
// NaN), so every product k̂_i·S_i of the dot finite (one ±Inf or NaN term makes the sum ±Inf or
// NaN), so every k̂_i and S_i finite (Inf·0 is NaN); a decay and an FMA of finite operands round
// to ±Inf at worst, never to NaN. ([K][V]: the same per column, Sᵀk̂_j summing column j.) An
// overflow of the sums makes δ non-finite too: the full rounding then, as for any NaN.
func finiteDelta(a isa, view func(VecVirtual) Register, x VecVirtual, keep uint32, flag Mem) {
	t := a.vec()
	VSUBPS(view(x), view(x), view(t)) // x − x: +0 finite, NaN else
	g := GP32()
	if a.evex {
		VCMPPS(U8(3), view(t), view(t), K7)
		KMOVW(K7, g)
	} else {
		VCMPPS(U8(3), view(t), view(t), view(t))
		VMOVMSKPS(view(t), g)
	}
	if keep != 1<<a.lanes-1 {
		ANDL(U32(keep), g)
	}
	MOVL(g, flag)
}

// bf16Stored is bf16, the store non-temporal (and whole) when nt. finite: y is known to hold no
// NaN (see finiteDelta), and the rounding is (u + 0x7fff + lsb) >> 16 alone, which is BF16RNE for
// every other u (±Inf and the values that round past the largest bf16 included), without the NaN
// lanes' test and select (3 of an AVX2 vector's 11 operations, 2 of an AVX-512 one's 8).
func bf16Stored(a isa, pc piece, y VecVirtual, m Mem, nt, finite bool) {
	v := func(r VecVirtual) Register {
		if pc.w == 1 {
			return r.AsX()
		}
		return pc.view(r)
	}
	hi, t := a.vec(), a.vec()
	VPSRLD(U8(16), v(y), v(hi)) // u >> 16
	if a.evex {
		if !finite {
			VCMPPS(U8(3), v(y), v(y), K2) // NaN (UNORD_Q): |u| > 0x7f800000
		}
		withC(v(hi), VPANDD, VPANDD_BCST, cLSB, v(hi), v(t))
		withC(v(y), VPADDD, VPADDD_BCST, cRound, v(y), v(y))
		VPADDD(v(t), v(y), v(y))
		VPSRLD(U8(16), v(y), v(y))
		if !finite {
			withC(v(hi), VPORD, VPORD_BCST, cQuiet, v(hi), K2, v(y)) // NaN lanes: (u >> 16) | 0x40
		}
		if nt {
			h := YMM()
			VPMOVDW(v(y), h)
			VMOVNTDQ(h, m)
			return
		}
		if pc.mask != nil {
			VPMOVDW(v(y), pc.mask, m)
		} else {
			VPMOVDW(v(y), m)
		}
		return
	}
	bf16RoundAVX2(a, v, y, hi, t, finite)
	bf16Narrow(pc, y, m, nt)
}

// bf16RoundAVX2 replaces each dword of v(y) by its BF16RNE (≤ 0xffff), hi holding u >> 16 (both
// clobbered, t a temporary); without the NaN test and select when finite.
func bf16RoundAVX2(a isa, v func(VecVirtual) Register, y, hi, t VecVirtual, finite bool) {
	var nan VecVirtual
	if !finite {
		nan = a.vec()
		VCMPPS(U8(3), v(y), v(y), v(nan)) // NaN (UNORD_Q): |u| > 0x7f800000
	}
	VPAND(cLSB, v(hi), v(t))
	VPADDD(cRound, v(y), v(y))
	VPADDD(v(t), v(y), v(y))
	VPSRLD(U8(16), v(y), v(y))
	if !finite {
		VPOR(cQuiet, v(hi), v(hi))
		VPBLENDVB(v(nan), v(hi), v(y), v(y)) // nan ? (u>>16)|0x40 : rounded
	}
}

// bf16Pair stores BF16RNE of the whole YMMs y0 and y1 (AVX2) as 16 words at m, y0's then y1's,
// with one 32-byte store: each rounded as bf16Stored does, then narrowed together by VPACKUSDW
// (per 128-bit lane: y0's four words, then y1's) and VPERMQ 0xD8 (into their order), where
// narrowing each alone takes an extract and a pack. y0 and y1 are clobbered.
func bf16Pair(a isa, y0, y1 VecVirtual, m Mem, finite bool) {
	v := func(r VecVirtual) Register { return r.AsY() }
	for _, y := range []VecVirtual{y0, y1} {
		hi, t := a.vec(), a.vec()
		VPSRLD(U8(16), v(y), v(hi))
		bf16RoundAVX2(a, v, y, hi, t, finite)
	}
	VPACKUSDW(y1.AsY(), y0.AsY(), y0.AsY()) // values ≤ 0xffff: no saturation
	VPERMQ(U8(0xd8), y0.AsY(), y0.AsY())
	VMOVDQU(y0.AsY(), m)
}

// bf16Narrow stores the piece's words of y, each dword ≤ 0xffff (AVX2).
func bf16Narrow(pc piece, y VecVirtual, m Mem, nt bool) {
	switch pc.w {
	case 8:
		h := XMM()
		VEXTRACTI128(U8(1), y.AsY(), h)
		VPACKUSDW(h, y.AsX(), h) // values ≤ 0xffff: no saturation
		if nt {
			VMOVNTDQ(h, m)
			return
		}
		VMOVDQU(h, m)
	case 4:
		VPACKUSDW(y.AsX(), y.AsX(), y.AsX())
		VMOVQ(y.AsX(), m)
	case 1:
		VPEXTRW(U8(0), y.AsX(), m)
	}
}

// sumSquares returns Σ p[i]² over n float32s in float64 (the whole register's lanes summed into
// the low lane of the returned XMM). p and n are clobbered.
func sumSquares(a isa, p, n GPVirtual) VecVirtual {
	acc := [4]VecVirtual{a.vec(), a.vec(), a.vec(), a.vec()}
	for _, r := range acc {
		a.zero(r)
	}
	per := a.lanes / 2 // doubles per register = floats per VCVTPS2PD
	loop4, loop1, tail, reduce := label("ss4"), label("ss1"), label("sstail"), label("ssreduce")
	Label(loop4)
	CMPQ(n, U32(4*per))
	JB(LabelRef(loop1))
	for t := range acc {
		x := a.vec()
		cvt(a, Mem{Base: p, Disp: 4 * per * t}, x, nil)
		VFMADD231PD(x, x, acc[t])
	}
	ADDQ(U32(16*per), p)
	SUBQ(U32(4*per), n)
	JMP(LabelRef(loop4))
	Label(loop1)
	CMPQ(n, U32(per))
	JB(LabelRef(tail))
	x := a.vec()
	cvt(a, Mem{Base: p}, x, nil)
	VFMADD231PD(x, x, acc[0])
	ADDQ(U32(4*per), p)
	SUBQ(U32(per), n)
	JMP(LabelRef(loop1))
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(reduce))
	if a.masks {
		tailMask(n, K1)
		x := a.vec()
		cvt(a, Mem{Base: p}, x, K1)
		VFMADD231PD(x, x, acc[1])
	} else {
		// Scalar tail into its own XMM: a VEX scalar op on acc[1] would clear its upper half.
		st := XMM()
		VXORPS(st, st, st)
		stail := label("ssscalar")
		Label(stail)
		x := XMM()
		VCVTSS2SD(Mem{Base: p}, x, x)
		VFMADD231SD(x, x, st)
		ADDQ(U32(4), p)
		DECQ(n)
		JNZ(LabelRef(stail))
		VADDPD(st.AsY(), acc[1], acc[1])
	}
	Label(reduce)
	VADDPD(acc[1], acc[0], acc[0])
	VADDPD(acc[3], acc[2], acc[2])
	VADDPD(acc[2], acc[0], acc[0])
	return hsumPD(a, acc[0])
}

// cvt loads 8 (AVX-512) or 4 (AVX2) float32s from m as float64s into x, under k if non-nil.
func cvt(a isa, m Mem, x VecVirtual, k Register) {
	switch {
	case k != nil:
		VCVTPS2PD_Z(m, k, x.AsZ())
	case a.evex:
		VCVTPS2PD(m, x.AsZ())
	default:
		VCVTPS2PD(m, x.AsY())
	}
}

// hsumPD sums the float64 lanes of r into the low lane of the returned register.
func hsumPD(a isa, r VecVirtual) VecVirtual {
	if a.evex {
		h := YMM()
		VEXTRACTF64X4(U8(1), r.AsZ(), h)
		VADDPD(h, r.AsY(), h)
		h2 := XMM()
		VEXTRACTF32X4(U8(1), h, h2)
		VADDPD(h2, h.AsX(), h2)
		h3 := XMM()
		VPERMILPD(U8(1), h2, h3)
		VADDSD(h3, h2, h2)
		return h2
	}
	h := XMM()
	VEXTRACTF128(U8(1), r.AsY(), h)
	VADDPD(h, r.AsX(), h)
	h3 := XMM()
	VPERMILPD(U8(1), h, h3)
	VADDSD(h3, h, h)
	return h
}

func gateRoutine(a isa) {
	routine("gate"+a.name, NOSPLIT, "func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool)")
	Doc(fmt.Sprintf("gate%s is impl.gate (gateGeneric) in %s; see gdn_amd64.go.", a.name, a.name))
	g := gateRegs{o: GP64(), z: GP64(), w: GP64(), out: GP64(), outF: GP64()}
	n := GP64()
	Load(Param("o").Len(), n)
	done := label("done")
	TESTQ(n, n)
	JZ(LabelRef(done))
	Load(Param("o").Base(), g.o)
	{
		Comment("Hint: the next head's z (the caller's z usually continues with it).")
		z := GP64()
		Load(Param("z").Base(), z)
		prefetchAfter(z, n)
	}

	Comment("r = 1/sqrt(Σo²/V + eps), Σo² in float64.")
	p, cnt := GP64(), GP64()
	MOVQ(g.o, p)
	MOVQ(n, cnt)
	ss := sumSquares(a, p, cnt)
	fv := XMM()
	VCVTSI2SDQ(n, fv, fv)
	VDIVSD(fv, ss.AsX(), ss.AsX())
	VCVTSS2SD(paramMem("eps"), fv, fv)
	VADDSD(fv, ss.AsX(), ss.AsX())
	VSQRTSD(ss.AsX(), ss.AsX(), ss.AsX())
	one := XMM()
	VMOVSD(cOneF64, one)
	VDIVSD(ss.AsX(), one, one)
	VCVTSD2SS(one, one, one)
	g.r = a.vec()
	VBROADCASTSS(one, g.r)

	Load(Param("z").Base(), g.z)
	Load(Param("w").Base(), g.w)
	Load(Param("out").Base(), g.out)
	Load(Param("outF").Base(), g.outF)

	Comment("y = o·r·w·silu(z), vectors interleaved in groups (gateGroups), then the tail.")
	for _, k := range a.gateGroups()[:len(a.gateGroups())-1] {
		group, next := label("ggroup"), label("ggroupdone")
		Label(group)
		CMPQ(n, U32(k*a.lanes))
		JB(LabelRef(next))
		gatePieces(a, g, piece{w: a.lanes}, k)
		gateAdvance(g, 4*k*a.lanes, 2*k*a.lanes)
		SUBQ(U32(k*a.lanes), n)
		JMP(LabelRef(group))
		Label(next)
	}
	loop, narrow := label("gloop"), label("gnarrow")
	Label(loop)
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(narrow))
	gatePiece(a, g, piece{w: a.lanes})
	gateAdvance(g, 4*a.lanes, 2*a.lanes)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(loop))
	Label(narrow)
	TESTQ(n, n)
	JZ(LabelRef(done))
	if a.masks {
		tailMask(n, K1)
		gatePiece(a, g, piece{w: 16, mask: K1})
	} else {
		scalar := label("gscalar")
		CMPQ(n, U32(4))
		JB(LabelRef(scalar))
		gatePiece(a, g, piece{w: 4})
		gateAdvance(g, 16, 8)
		SUBQ(U32(4), n)
		JZ(LabelRef(done))
		Label(scalar)
		gatePiece(a, g, piece{w: 1})
		gateAdvance(g, 4, 2)
		DECQ(n)
		JNZ(LabelRef(scalar))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

// gateAdvance moves the gate pointers by f bytes (float32 slices) and h bytes (out); a nil out or
// outF stays nil.
func gateAdvance(g gateRegs, f, h int) {
	ADDQ(U32(f), g.o)
	ADDQ(U32(f), g.z)
	ADDQ(U32(f), g.w)
	for _, pr := range []struct {
		r GPVirtual
		n int
	}{{g.outF, f}, {g.out, h}} {
		skip := label("nil")
		TESTQ(pr.r, pr.r)
		JZ(LabelRef(skip))
		ADDQ(U32(pr.n), pr.r)
		Label(skip)
	}
}
