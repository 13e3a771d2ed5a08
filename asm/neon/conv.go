package main

import (
	"fmt"
	"math"
	"strconv"

	c "github.com/gdnsimd/gdnsimd/asm/internal/exp32consts"
)

// convNEON: the conv front's causal conv1d over T tokens, silu through exp32.

// convGroup is the most vectors convNEON interleaves: four registers a vector through exp32 (x,
// n and the polynomial's two, the sum stored to u meanwhile), sixteen for four vectors.
const convGroup = 4

func convNEON(e *emitter) {
	e.doc("func convNEON(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int)",
		"",
		"convGeneric for the whole vectors (four lanes) of len(bias) channels (convChecked runs the rest,",
		"and checks W ≥ 1, T ≥ 1 and every length): per token τ and channel c",
		"",
		"\ta = bias[c] + p_0 + … + p_{W−1},  p_j = w[j·ws + c]·x[τ+j][c]   (FMUL, then FADD)",
		"\tu[τ·us + c] = a / (1 + exp32(−a))",
		"",
		"four vectors at a time, then one: the taps a loop over W (row τ+j's base from the table x, 24 bytes a",
		"slice header; w's VLD1.P post-incremented by its stride),",
		"then a stored to u, the vectors' exp32 interleaved (onePlusExp, the gate's operations, so Go's arm64 exp32",
		"bits: its fused multiply-adds where the compiler fuses), a loaded again and divided.",
		"",
		"Registers: R0 u's row, R1 the token's first row in x, R2 w, R3 bias, R4 us, R6 ws (bytes), R7 W,",
		"R8 tokens left, R9 the whole vectors' bytes, R10 bytes left, R11/R12 x, w of a tap, R13 taps left,",
		"R14 u, R15 the vectors' offset in a row (bytes), R19 w, R20 bias of the vectors, R5 the table's",
		"entry of a tap; V(i) the sum of vector i, V(4+i) its n, V(8+i), V(12+i)",
		"its polynomial; V16-V29 exp32's constants as gateNEON4's.")
	e.text("convNEON", 128)
	uRow, xRow, w, bias, us, xs, ws, W, tok := Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8)
	nb, left, xp, wp, j, up, xq, wq, bq, tmp := Reg(9), Reg(10), Reg(11), Reg(12), Reg(13), Reg(14), Reg(15), Reg(19), Reg(20), Reg(21)
	e.op("MOVD", arg("u_base", 0), uRow)
	e.op("MOVD", arg("us", 24), us)
	e.op("MOVD", arg("x_base", 32), xRow)
	e.op("MOVD", arg("w_base", 56), w)
	e.op("MOVD", arg("ws", 80), ws)
	e.op("MOVD", arg("bias_base", 88), bias)
	e.op("MOVD", arg("bias_len", 96), nb)
	e.op("MOVD", arg("W", 112), W)
	e.op("MOVD", arg("T", 120), tok)
	for _, r := range []Reg{us, ws} {
		e.op("LSL", imm(2), r, r)
	}
	e.opn("the whole vectors' channels, in bytes", "AND", "$~3", nb, nb)
	e.op("LSL", imm(2), nb, nb)
	splatF := func(v Vreg, name string, f float32) {
		e.opn(name+" = "+strconv.FormatFloat(float64(f), 'g', -1, 32), "MOVW", fmt.Sprintf("$%#08x", math.Float32bits(f)), tmp)
		e.op("VDUP", tmp, v.S4())
	}
	const hi, lo, log2e, half, c1, c2, p0, one, bias127 = Vreg(16), Vreg(17), Vreg(18), Vreg(19), Vreg(20), Vreg(21), Vreg(22), Vreg(28), Vreg(29)
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
	e.op("MOVW", imm(c.Bias), tmp)
	e.op("VDUP", tmp, bias127.S4())

	e.label("ctoken")
	e.op("MOVD", uRow, up)
	e.op("MOVD", ZR, xq)
	e.op("MOVD", w, wq)
	e.op("MOVD", bias, bq)
	e.op("MOVD", nb, left)
	for _, k := range []int{convGroup, 1} {
		loop, next, tap := fmt.Sprintf("cgroup%d", k), fmt.Sprintf("cgroupdone%d", k), fmt.Sprintf("ctap%d", k)
		regs := func(base int) string {
			vs := make([]Vec, k)
			for i := range vs {
				vs[i] = Vreg(base + i).S4()
			}
			return list(vs...)
		}
		e.label(loop)
		e.op("CMP", imm(16*k), left)
		e.op("BLT", next)
		e.op("VLD1.P", post(16*k, bq), regs(0))
		e.op("MOVD", xRow, xs)
		e.op("MOVD", wq, wp)
		e.op("MOVD", W, j)
		e.label(tap)
		e.op("MOVD.P", post(24, xs), xp)
		e.op("ADD", xq, xp, xp)
		e.op("VLD1", mem(xp), regs(4))
		e.op("VLD1.P", postReg(wp, ws), regs(8))
		for i := range k {
			e.word(fmul(Vreg(4+i).S4(), Vreg(8+i).S4(), Vreg(4+i).S4()))
		}
		for i := range k {
			e.word(fadd(Vreg(i).S4(), Vreg(i).S4(), Vreg(4+i).S4())) // a += (w·x rounded)
		}
		e.op("SUB", imm(1), j, j)
		e.op("CBNZ", j, tap)
		e.comment("a to u (the registers go to exp32), e = 1 + exp32(−a), then u = a / e")
		e.op("VST1", regs(0), mem(up))
		bodies := make([]func(e *emitter) Vreg, k)
		for i := range k {
			bodies[i] = func(e *emitter) Vreg {
				return onePlusExp(e, Vreg(i), Vreg(i), Vreg(4+i), [2]Vreg{Vreg(8 + i), Vreg(12 + i)})
			}
		}
		ex := zipN(e, bodies)
		e.op("VLD1", mem(up), regs(0))
		for i := range k {
			e.word(fdiv(Vreg(i).S4(), Vreg(i).S4(), ex[i].S4()))
		}
		e.op("VST1.P", regs(0), post(16*k, up))
		e.op("ADD", imm(16*k), xq, xq)
		e.op("ADD", imm(16*k), wq, wq)
		e.op("SUB", imm(16*k), left, left)
		e.op("B", loop)
		e.label(next)
	}
	e.op("ADD", us, uRow, uRow)
	e.op("ADD", imm(24), xRow, xRow)
	e.op("SUB", imm(1), tok, tok)
	e.op("CBNZ", tok, "ctoken")
	e.op("RET")
}

// onePlusExp sets the returned register, one of acc, to 1 + exp32(−a) of a in src (x, vn and acc
// clobbered; src may be x), exp32 mirroring Exp32 operation for operation: the conv's silu and
// the gate's.
func onePlusExp(e *emitter, src, x, vn Vreg, acc [2]Vreg) Vreg {
	const hi, lo, log2e, half, c1, c2, p0, one, bias = Vreg(16), Vreg(17), Vreg(18), Vreg(19), Vreg(20), Vreg(21), Vreg(22), Vreg(28), Vreg(29)
	e.comment("x = clamp(−a); n = floor(x·log2e + 0.5); r = x − n·c1 − n·c2")
	e.word(fneg(x.S4(), src.S4()))
	e.word(fmin(x.S4(), x.S4(), hi.S4()))
	e.word(fmax(x.S4(), x.S4(), lo.S4()))
	e.op("VORR", half.B16(), half.B16(), vn.B16())
	e.op("VFMLA", log2e.S4(), x.S4(), vn.S4())
	e.word(frintm(vn.S4(), vn.S4()))
	e.op("VFMLS", c1.S4(), vn.S4(), x.S4())
	e.op("VFMLS", c2.S4(), vn.S4(), x.S4())

	e.comment("p = ((((p0·r + p1)·r + p2)·r + p3)·r + p4)·r + p5; e = p·r·r + r + 1")
	prev := p0
	for i := 1; i < len(c.P); i++ {
		d := acc[(i-1)%2]
		e.op("VORR", (p0 + Vreg(i)).B16(), (p0 + Vreg(i)).B16(), d.B16())
		e.op("VFMLA", prev.S4(), x.S4(), d.S4())
		prev = d
	}
	ex := acc[0] // the register not holding p
	if prev == ex {
		ex = acc[1]
	}
	e.word(fmul(prev.S4(), prev.S4(), x.S4()))
	e.op("VORR", x.B16(), x.B16(), ex.B16())
	e.op("VFMLA", prev.S4(), x.S4(), ex.S4())
	e.word(fadd(ex.S4(), ex.S4(), one.S4()))

	e.comment("1 + exp32(−a) = 1 + e·2^n")
	e.word(fcvtzs(vn.S4(), vn.S4()))
	e.op("VADD", bias.S4(), vn.S4(), vn.S4())
	e.op("VSHL", imm(c.Shift), vn.S4(), vn.S4())
	e.word(fmul(ex.S4(), ex.S4(), vn.S4()))
	e.word(fadd(ex.S4(), ex.S4(), one.S4()))
	return ex
}

// zipN emits the bodies interleaved instruction by instruction (they emit the same sequence of
// lines, with other registers): the first's comments, then each instruction of every body in
// turn. It returns what each body returns.
func zipN(e *emitter, bodies []func(e *emitter) Vreg) []Vreg {
	es, out := make([]emitter, len(bodies)), make([]Vreg, len(bodies))
	for i, b := range bodies {
		out[i] = b(&es[i])
		if len(es[i].lines) != len(es[0].lines) {
			panic("zipN: the bodies differ in length")
		}
	}
	for n, l := range es[0].lines {
		switch l.kind {
		case kOp:
			for i := range es {
				e.add(es[i].lines[n])
			}
		case kComment:
			e.comment("%s", l.text)
		}
	}
	return out
}
