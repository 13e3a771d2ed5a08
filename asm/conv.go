package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// --- conv ---

// convGroups are the numbers of whole vectors convRoutine interleaves, in the order it tries them
// per token (each in a loop while that many are left), as gateGroups does for the gate: one
// vector's Exp32 chain after another leaves the core waiting. BenchmarkConv (n = 128, T = 64,
// W = 4), ns per call, the fastest of 5 runs on a shared 2-core AMD EPYC (Zen 4): AVX-512 {1}
// 3,443, {2, 1} 2,829, {4, 1} 2,397, {8, 1} 2,186; AVX2 {1} 6,284, {2, 1} 5,569, {4, 1} 4,807
// (the portable conv: about 93,000). Eight ZMM vectors (their sums stored to u and loaded again
// for the division: 4 registers a vector through Exp32 do not fit, as in AVX2's four) took 421
// lines against a budget of 300 for 9 % less time: four on both.
func (a isa) convGroups() []int { return []int{4, 1} }

// convRoutine emits impl.conv (convGeneric) for the whole vectors of n = len(bias) channels, and on
// AVX-512 also the n mod 16 after them with one masked vector (so its wrapper, convChecked, is
// given lanes 1; on AVX2 the wrapper runs the rest): per token τ < T and channel c,
//
//	a = bias[c] + p_0 + … + p_{W−1},  p_j = w[j·ws + c]·x[τ+j][c] (VMULPS, then VADDPS)
//	u[τ·us + c] = a / (1 + Exp32(−a))
//
// the taps a loop over W at run time, each loading its row's base from the table x (a slice
// header, 24 bytes, a row), the vectors of a group interleaved (convGroups), Exp32 operation for
// operation the Go function's (exp32). Strides are in elements; nothing is checked (W ≥ 1,
// T ≥ 1, every row long enough: convChecked).
func convRoutine(a isa) {
	name := "conv" + a.name
	routine(name, NOSPLIT, "func(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int)")
	Doc(fmt.Sprintf("%s is impl.conv (convGeneric) in %s; see gdn_amd64.go.", name, a.name))
	n, nb := GP64(), GP64()
	Load(Param("bias").Len(), n)
	MOVQ(n, nb)
	ANDQ(I32(-int32(a.lanes)), nb) // the whole vectors' channels
	SHLQ(U8(2), nb)                // … in bytes
	if a.masks {
		Comment("K1: the n mod 16 channels after the whole vectors (none: K1 empty).")
		ANDQ(U32(a.lanes-1), n)
		tailMask(n, K1)
	}
	Comment("Every pointer at the end of the whole vectors: c runs from −nb up to 0 (x's rows: their",
		"base − nb + c); xRow the token's first row in the table x.")
	uRow, wE, bE := GP64(), GP64(), GP64()
	for _, p := range []struct {
		s string
		r GPVirtual
	}{{"u", uRow}, {"w", wE}, {"bias", bE}} {
		Load(Param(p.s).Base(), p.r)
		ADDQ(nb, p.r)
	}
	xRow := GP64()
	Load(Param("x").Base(), xRow)
	us, ws, tok := GP64(), GP64(), GP64()
	for _, p := range []struct {
		s string
		r GPVirtual
	}{{"us", us}, {"ws", ws}} {
		Load(Param(p.s), p.r)
		SHLQ(U8(2), p.r)
	}
	Load(Param("T"), tok)
	NEGQ(nb)
	c := GP64()
	token := label("token")
	Label(token)
	MOVQ(nb, c)
	g := convRegs{a: a, uRow: uRow, xRow: xRow, w: wE, bias: bE, nb: nb, ws: ws, c: c}
	groups := a.convGroups()
	if a.masks && groups[len(groups)-1] == 1 {
		groups = groups[:len(groups)-1] // the masked loop below takes single vectors
	}
	for _, k := range groups {
		group, next := label("group"), label("groupdone")
		Label(group)
		CMPQ(c, I32(-k*a.bytes()))
		JG(LabelRef(next))
		g.body(k, piece{w: a.lanes})
		ADDQ(U32(k*a.bytes()), c)
		JMP(LabelRef(group))
		Label(next)
	}
	if a.masks {
		Comment("Single vectors under K2: all ones while whole vectors are left, then K1 once at c = 0",
			"(the last channels, if any).")
		one, last, do, done := label("one"), label("last"), label("do"), label("rowdone")
		Label(one)
		CMPQ(c, I32(-a.bytes()))
		JG(LabelRef(last))
		KXNORW(K2, K2, K2)
		JMP(LabelRef(do))
		Label(last)
		TESTQ(c, c)
		JNZ(LabelRef(done))
		KORTESTW(K1, K1)
		JZ(LabelRef(done))
		KMOVW(K1, K2)
		Label(do)
		g.body(1, piece{w: a.lanes, mask: K2})
		ADDQ(U32(a.bytes()), c)
		JMP(LabelRef(one))
		Label(done)
	}
	ADDQ(us, uRow)
	ADDQ(U8(24), xRow)
	DECQ(tok)
	JNZ(LabelRef(token))
	VZEROUPPER()
	RET()
}

// convRegs are conv's pointers and strides: the token's row of u, w and bias at the end of the
// whole vectors, the token's first row in the table x (xRow), nb the whole vectors' bytes
// negated, c the (negative) byte offset of the vector, ws in bytes.
type convRegs struct {
	a                       isa
	uRow, xRow, w, bias, nb GPVirtual
	ws, c                   GPVirtual
}

// body emits k vectors like pc (k > 1: whole ones) at c, c + the vector's bytes, …: the sums over
// the taps, then u = a / (1 + Exp32(−a)), each vector's operations in convGeneric's order. With
// more vectors than the registers hold through Exp32 (4 a vector), the sums are stored to u and
// loaded again for the division.
func (g convRegs) body(k int, pc piece) {
	a := g.a
	v := pc.view
	at := func(base GPVirtual, i int) Mem { return Mem{Base: base, Index: g.c, Scale: 1, Disp: i * a.bytes()} }
	acc := make([]VecVirtual, k)
	for i := range acc {
		acc[i] = a.vec()
		pc.load(at(g.bias, i), acc[i])
	}
	tp, xp, wp, j := GP64(), GP64(), GP64(), GP64()
	MOVQ(g.xRow, tp)
	LEAQ(at(g.w, 0), wp)
	Load(Param("W"), j)
	tap := label("tap")
	Label(tap)
	MOVQ(Mem{Base: tp}, xp) // row τ+j's base
	SUBQ(g.nb, xp)
	ADDQ(g.c, xp)
	for i := range acc {
		t := a.vec()
		pc.load(Mem{Base: xp, Disp: i * a.bytes()}, t)
		m := Mem{Base: wp, Disp: i * a.bytes()}
		if pc.mask != nil {
			VMULPS_Z(m, v(t), pc.mask, v(t))
		} else {
			VMULPS(m, v(t), v(t))
		}
		VADDPS(v(t), v(acc[i]), v(acc[i])) // a += (w·x rounded)
	}
	ADDQ(U8(24), tp)
	ADDQ(g.ws, wp)
	DECQ(j)
	JNZ(LabelRef(tap))
	spill := 4*k+2 > a.regs
	e := make([]VecVirtual, k)
	for i := range acc {
		if spill {
			pc.store(acc[i], at(g.uRow, i))
			e[i] = acc[i]
		} else {
			e[i] = a.vec()
		}
		if a.evex {
			withC(v(acc[i]), VPXORD, VPXORD_BCST, cSign, v(acc[i]), v(e[i]))
		} else {
			VXORPS(cSign, v(acc[i]), v(e[i]))
		}
	}
	exp32(a, pc, e)
	for i := range acc {
		withC(v(e[i]), VADDPS, VADDPS_BCST, cOne, v(e[i]), v(e[i]))
		if spill {
			acc[i] = a.vec()
			pc.load(at(g.uRow, i), acc[i])
		}
		VDIVPS(v(e[i]), v(acc[i]), v(acc[i])) // a / (1 + Exp32(−a))
		pc.store(acc[i], at(g.uRow, i))
	}
}
