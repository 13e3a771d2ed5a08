package main

import (
	"fmt"
	"math"
	"strconv"

	c "github.com/gdnsimd/gdnsimd/asm/internal/exp32consts"
)

// gateNEON4: y = o·r·w·silu(z), stored as float32 and as bf16.

func gateNEON4(e *emitter) {
	e.doc("func gateNEON4(o, z, w []float32, r float32, out []uint16, outF []float32, sig bool)",
		"",
		"y_j = o_j·r·w_j·act(z_j) for j < len(o), act silu or (sig) sigmoid, stored to outF and bf16RNE(y_j) to out unless their base",
		"pointer is nil. Four lanes per iteration; the len mod 4 tail runs the same vector body one element",
		"at a time (lane 0; the other lanes hold zeros and are not stored).",
		"",
		"silu(z) = z / (1 + exp32(−z)), sigmoid(z) = 1 / (1 + exp32(−z)) (the numerator 1 where V14, all ones",
		"if sig, selects it), exp32 mirroring Exp32: x clamped to [−87.33654, 88] with FMIN/FMAX",
		"(which keep NaN), n = floor(x·log2e + 0.5), r = x − n·c1 − n·c2, the same degree-5 polynomial,",
		"times 2^n built as (n + 127) << 23. bf16RNE with integer ops: (u + 0x7fff + (u>>16 & 1)) >> 16,",
		"and (u >> 16) | 0x40 for NaN (selected where FCMEQ y, y is false).",
		"",
		"Constants (Exp32's from asm/internal/exp32consts): V16 hi, V17 lo, V18 log2e, V19 0.5, V20 c1,",
		"V21 c2, V22-V27 the polynomial, V28 1.0, V29 int 127, V30 r, V31 int 0x7fff, V15 int 0x40.")
	e.text("gateNEON4", 129)
	o, z, w, out, outF, n, groups, tail, inTail, tmp := Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8), Reg(9)
	const (
		hi, lo, log2e, half, c1, c2, p0, one, bias, r, round, quiet, sel = Vreg(16), Vreg(17), Vreg(18), Vreg(19), Vreg(20), Vreg(21), Vreg(22), Vreg(28), Vreg(29), Vreg(30), Vreg(31), Vreg(15), Vreg(14)
	)
	e.op("MOVD", arg("o_base", 0), o)
	e.op("MOVD", arg("o_len", 8), n)
	e.op("MOVD", arg("z_base", 24), z)
	e.op("MOVD", arg("w_base", 48), w)
	e.op("FMOVS", arg("r", 72), Freg(r))
	e.op("MOVD", arg("out_base", 80), out)
	e.op("MOVD", arg("outF_base", 104), outF)
	e.op("VDUP", r.S(0), r.S4())
	e.opn("V14 all ones if sig (the numerator 1: sigmoid), else zeros (z: silu)", "MOVBU", arg("sig", 128), tmp)
	e.op("NEG", tmp, tmp)
	e.op("VDUP", tmp, sel.S4())
	splatF := func(v Vreg, name string, f float32) {
		e.opn(name+" = "+strconv.FormatFloat(float64(f), 'g', -1, 32), "MOVW", fmt.Sprintf("$%#08x", math.Float32bits(f)), tmp)
		e.op("VDUP", tmp, v.S4())
	}
	splatI := func(v Vreg, val string) {
		e.op("MOVW", val, tmp)
		e.op("VDUP", tmp, v.S4())
	}
	splatF(hi, "hi", c.Hi)
	splatF(lo, "lo", c.Lo)
	splatF(log2e, "log2e", c.Log2e)
	splatF(half, "half", c.Half)
	splatF(c1, "c1", c.C1)
	splatF(c2, "c2", c.C2)
	for i, p := range c.P {
		splatF(p0+Vreg(i), fmt.Sprintf("p%d", i), p)
	}
	splatF(one, "one", c.One)
	splatI(bias, imm(c.Bias))
	splatI(round, "$0x7fff")
	splatI(quiet, "$0x40")
	e.opn("groups of four", "LSR", imm(2), n, groups)
	e.opn("tail", "AND", imm(3), n, tail)
	e.opn("1 while running the tail", "MOVD", imm(0), inTail)

	// Two vectors at a time, their instructions interleaved (gateExp's chain is ~30 dependent
	// operations: two in flight together): A in V0–V6, B in V7–V13.
	e.label("gloop8")
	e.op("CMP", imm(2), groups)
	e.op("BLT", "gloop4")
	type vregs struct{ vz, x, vn, a0, a1, vo, vw Vreg }
	va, vb := vregs{0, 1, 2, 3, 4, 5, 6}, vregs{7, 8, 9, 10, 11, 12, 13}
	for _, v := range []vregs{va, vb} {
		e.op("VLD1.P", post(16, z), list(v.vz.S4()))
	}
	zip(e, func(e *emitter) { gateExp(e, va.vz, va.x, va.vn, [2]Vreg{va.a0, va.a1}) },
		func(e *emitter) { gateExp(e, vb.vz, vb.x, vb.vn, [2]Vreg{vb.a0, vb.a1}) })
	for _, v := range []vregs{va, vb} {
		e.op("VLD1.P", post(16, o), list(v.vo.S4()))
	}
	for _, v := range []vregs{va, vb} {
		e.op("VLD1.P", post(16, w), list(v.vw.S4()))
	}
	// The bf16 goes to vw (dead after its product), its temporaries to x and n.
	zip(e, func(e *emitter) { gateOut(e, va.vo, va.vw, va.vz, va.vw, va.x, va.vn, r, round, quiet) },
		func(e *emitter) { gateOut(e, vb.vo, vb.vw, vb.vz, vb.vw, vb.x, vb.vn, r, round, quiet) })
	e.blank()
	e.op("CBZ", outF, "gnof8")
	for _, v := range []vregs{va, vb} {
		e.op("VST1.P", list(v.vo.S4()), post(16, outF))
	}
	e.label("gnof8")
	e.op("CBZ", out, "gnob8")
	for _, v := range []vregs{va, vb} {
		e.word(xtn(v.vw.H4(), v.vw.S4()))
		e.op("VST1.P", list(v.vw.H4()), post(8, out))
	}
	e.label("gnob8")
	e.op("SUB", imm(2), groups, groups)
	e.op("B", "gloop8")

	e.label("gloop4")
	e.op("CBZ", groups, "gtail")
	for i, p := range []Reg{o, z, w} {
		e.op("VLD1.P", post(16, p), list(Vreg(i).S4()))
	}

	// V0 o, V1 z, V2 w; V3 x then r, V4 n, V6/V7 the polynomial; V5 the bf16, V3/V4 its temporaries.
	vo, vz, vw, y := Vreg(0), Vreg(1), Vreg(2), Vreg(5)
	e.label("gbody")
	gateExp(e, vz, Vreg(3), Vreg(4), [2]Vreg{6, 7})
	gateOut(e, vo, vw, vz, y, Vreg(3), Vreg(4), r, round, quiet)
	e.blank()
	e.op("CBNZ", inTail, "gstore1")
	e.op("CBZ", outF, "gnof4")
	e.op("VST1.P", list(vo.S4()), post(16, outF))
	e.label("gnof4")
	e.op("CBZ", out, "gnob4")
	e.word(xtn(y.H4(), y.S4()))
	e.op("VST1.P", list(y.H4()), post(8, out))
	e.label("gnob4")
	e.op("SUB", imm(1), groups, groups)
	e.op("B", "gloop4")

	e.label("gtail")
	e.op("CBZ", tail, "gdone")
	e.op("MOVD", imm(1), inTail)
	for i, p := range []Reg{o, z, w} {
		e.op("FMOVS.P", post(4, p), Freg(i))
	}
	e.op("B", "gbody")

	e.label("gstore1")
	e.op("CBZ", outF, "gnof1")
	e.op("FMOVS.P", Freg(vo), post(4, outF))
	e.label("gnof1")
	e.op("CBZ", out, "gnob1")
	e.op("VST1.P", y.H(0), post(2, out))
	e.label("gnob1")
	e.op("SUB", imm(1), tail, tail)
	e.op("B", "gtail")
	e.label("gdone")
	e.op("RET")
}

// gateExp replaces vz by silu(z) = z / (1 + exp32(−z)), or by sigmoid(z) = 1 / (1 + exp32(−z)) in
// the lanes where V14 is all ones (x, vn and acc clobbered), exp32 mirroring Exp32 operation for
// operation.
func gateExp(e *emitter, vz, x, vn Vreg, acc [2]Vreg) {
	const one = Vreg(28)
	ex := onePlusExp(e, vz, x, vn, acc)
	e.comment("silu(z) = z / (1 + exp32(−z)), sigmoid(z) = 1 / (1 + exp32(−z))")
	e.op("VBIT", Vreg(14).B16(), one.B16(), vz.B16())
	e.word(fdiv(vz.S4(), vz.S4(), ex.S4()))
}

// gateOut sets vo = o·r·w·silu(z) (vw, vz: w and silu(z)) and y to its bf16 RNE in the low half of
// each lane (NaN → (u>>16)|0x40); u16 and lsb are clobbered; y may be vw.
func gateOut(e *emitter, vo, vw, vz, y, u16, lsb, r, round, quiet Vreg) {
	e.comment("y = o·r·w·silu(z)")
	for _, m := range []Vreg{r, vw, vz} {
		e.word(fmul(vo.S4(), vo.S4(), m.S4()))
	}

	e.comment("bf16 RNE into the low half of each lane of y; NaN → (u>>16)|0x40")
	e.op("VUSHR", imm(16), vo.S4(), u16.S4())
	e.op("VSHL", imm(15), vo.S4(), lsb.S4())
	e.op("VUSHR", imm(31), lsb.S4(), lsb.S4())
	e.op("VADD", round.S4(), vo.S4(), y.S4())
	e.op("VADD", lsb.S4(), y.S4(), y.S4())
	e.op("VUSHR", imm(16), y.S4(), y.S4())
	e.op("VORR", quiet.B16(), u16.B16(), u16.B16())
	e.word(fcmeq(lsb.S4(), vo.S4(), vo.S4()))
	e.op("VBIF", lsb.B16(), u16.B16(), y.B16())
}

// zip emits a and b interleaved instruction by instruction (the two emit the same sequence of
// lines, with other registers): a's comments, then each of a's instructions followed by b's.
func zip(e *emitter, a, b func(e *emitter)) {
	var ea, eb emitter
	a(&ea)
	b(&eb)
	if len(ea.lines) != len(eb.lines) {
		panic("zip: the two bodies differ in length")
	}
	for i, l := range ea.lines {
		if l.kind != eb.lines[i].kind {
			panic("zip: the two bodies differ")
		}
		switch l.kind {
		case kOp:
			e.add(l)
			e.add(eb.lines[i])
		case kComment:
			e.comment("%s", l.text)
		}
	}
}
