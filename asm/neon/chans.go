package main

import (
	"fmt"
	"math"

	"github.com/gdnsimd/gdnsimd/asm/internal/gates64consts"
)

// chansNEON: the per-channel gate's forms and decayed dot vectors of one head-token.

// nearOne is the em1 from which a channel decays as x + em1·x (gates64consts.NearOne, the
// library's nearOne).
const nearOne = gates64consts.NearOne

func chansNEON(e *emitter) {
	e.doc("func chansNEON(kx, qx, pairs, em1, eg, kh, qh []float32)",
		"",
		"chansGeneric for the whole vectors of len(em1) channels (chansChecked runs the rest): per lane",
		"the mask em1 ≥ −0.5 (FCMGE: false for NaN), c = em1 there, else eg (VBIT), m = the mask | the",
		"sign bit; kx = c·kh + (kh & m) and qx likewise, the product rounded on its own (FMUL, then",
		"FADD); pairs = c and m interleaved (VZIP1/VZIP2).",
		"",
		"Registers: R0 kx, R1 qx, R2 pairs, R3 em1, R4 lanes left, R5 eg, R6 kh, R7 qh; V16 −0.5,",
		"V17 the sign bit.")
	e.text("chansNEON", 168)
	kx, qx, pairs, em1, n, eg, kh, qh, tmp := Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8)
	for i, p := range []struct {
		name string
		r    Reg
	}{{"kx", kx}, {"qx", qx}, {"pairs", pairs}, {"em1", em1}, {"eg", eg}, {"kh", kh}, {"qh", qh}} {
		e.op("MOVD", arg(p.name+"_base", 24*i), p.r)
	}
	e.op("MOVD", arg("em1_len", 80), n)
	near, sign := Vreg(16), Vreg(17)
	e.opn(fmt.Sprint("nearOne = ", nearOne), "MOVW", fmt.Sprintf("$%#08x", math.Float32bits(nearOne)), tmp)
	e.op("VDUP", tmp, near.S4())
	e.op("MOVW", "$0x80000000", tmp)
	e.op("VDUP", tmp, sign.S4())
	ve, vg, m, c := Vreg(0), Vreg(1), Vreg(2), Vreg(3)
	e.label("cloop")
	e.op("CMP", imm(4), n)
	e.op("BLT", "cdone")
	e.op("VLD1.P", post(16, em1), list(ve.S4()))
	e.op("VLD1.P", post(16, eg), list(vg.S4()))
	e.word(fcmge(m.S4(), ve.S4(), near.S4()))
	e.op("VORR", vg.B16(), vg.B16(), c.B16())
	e.op("VBIT", m.B16(), ve.B16(), c.B16())
	e.op("VORR", sign.B16(), m.B16(), m.B16())
	for _, s := range [][2]Reg{{kh, kx}, {qh, qx}} {
		x, t := Vreg(4), Vreg(5)
		e.op("VLD1.P", post(16, s[0]), list(x.S4()))
		e.word(fmul(t.S4(), c.S4(), x.S4()))
		e.op("VAND", m.B16(), x.B16(), x.B16())
		e.word(fadd(t.S4(), t.S4(), x.S4()))
		e.op("VST1.P", list(t.S4()), post(16, s[1]))
	}
	e.op("VZIP1", m.S4(), c.S4(), Vreg(6).S4())
	e.op("VZIP2", m.S4(), c.S4(), Vreg(7).S4())
	e.op("VST1.P", list(Vreg(6).S4(), Vreg(7).S4()), post(32, pairs))
	e.op("SUB", imm(4), n, n)
	e.op("B", "cloop")
	e.label("cdone")
	e.op("RET")
}
