package main

import (
	"math"

	gc "github.com/gdnsimd/gdnsimd/asm/internal/gates64consts"
)

// gatesNEON: the float64 gates (gdn_generic_gates.go: gatesGeneric, exp64, log1p01, expm1Near), two lanes
// a vector of float64, every lane's operations gatesGeneric's in its order: each Go product or sum one
// instruction, each math.FMA one FMLA (FMLS for math.FMA(−k, c, x): FMLS computes x − k·c with one
// rounding, which is math.FMA(−k, c, x) exactly), Go's min and max as FMIN and FMAX (both return
// NaN when an operand is NaN, as Go's do; FMINNM/FMAXNM would not), the branches as selects of both
// sides under FCMGT/FCMGE masks (ordered: NaN takes the else side, as in Go).

// The constant table gates64c: 16 bytes (the value twice) per constant, read with FMOVQ off(R9).
// First the constants kept in V18–V31 for the whole routine, in register order, then the three
// polynomials.
var gatesResident = []struct {
	name string
	bits uint64
}{
	{"zero", 0}, {"ln2half", math.Float64bits(gc.Ln2Half)}, {"twenty", math.Float64bits(gc.Twenty)},
	{"two", math.Float64bits(2)}, {"one", math.Float64bits(1)}, {"bias", gc.Bias},
	{"half", math.Float64bits(gc.Half)}, {"ln2lo", math.Float64bits(gc.Ln2Lo)},
	{"ln2hi", math.Float64bits(gc.Ln2Hi)}, {"log2e", math.Float64bits(gc.Log2e)},
	{"magic", math.Float64bits(gc.Magic)}, {"hi", math.Float64bits(gc.Hi)},
	{"lo", math.Float64bits(gc.Lo)}, {"sign", 1 << 63},
}

// The resident constants' registers (gatesResident's order from V18).
const (
	gZero Vreg = 18 + iota
	gLn2Half
	gTwenty
	gTwo
	gOne
	gBias
	gHalf
	gLn2Lo
	gLn2Hi
	gLog2e
	gMagic
	gHi
	gLo
	gSign
)

// Offsets of the polynomials in gates64c.
var (
	gExpOff   = 16 * len(gatesResident)
	gLog1pOff = gExpOff + 16*len(gc.ExpP)
	gExpm1Off = gLog1pOff + 16*len(gc.Log1pP)
	gTinyOff  = gExpm1Off + 16*len(gc.Expm1P) // log1p01's threshold, after the polynomials
)

// gatesTab is the table's register.
const gatesTab = Reg(9)

func gatesTable(e *emitter) {
	var vals []uint64
	for _, c := range gatesResident {
		vals = append(vals, c.bits)
	}
	for _, p := range [][]float64{gc.ExpP[:], gc.Log1pP[:], gc.Expm1P[:], {gc.Tiny}} {
		for _, c := range p {
			vals = append(vals, math.Float64bits(c))
		}
	}
	e.doc("gatesNEON's constants, each float64 (or int64) twice, so that FMOVQ loads it into both lanes:",
		"the 14 kept in V18–V31, then exp64's, log1p01's and expm1Near's polynomials and log1p01's threshold",
		"(asm/neon/gates.go).")
	for i, v := range vals {
		e.raw("DATA ·gates64c+%d(SB)/8, $%#016x", 16*i, v)
		e.raw("DATA ·gates64c+%d(SB)/8, $%#016x", 16*i+8, v)
	}
	e.raw("GLOBL ·gates64c(SB), RODATA|NOPTR, $%d", 16*len(vals))
}

func gatesNEON(e *emitter) {
	gatesTable(e)
	e.doc("func gatesNEON(beta, em1, eg, b, a, dtb []float32, rate []float64, form uint8, lb float64)",
		"",
		"gatesGeneric (gdn_generic_gates.go) for i < len(a), two lanes of float64 a vector: its operations in its",
		"order, each math.FMA one FMLA or FMLS, each other product one FMUL, the divisions FDIV, min",
		"and max FMIN and FMAX (NaN in, NaN out, as Go's), the selects x > 0, x > 20 and g ≥ ln 0.5 as",
		"FCMGT/FCMGE masks (false for NaN) selecting with VAND and VBIF/VBIT; 2^k from t = k + magic as",
		"(bits + 1023) << 52. Inputs widened with FCVTL/FCVTL2 (the rates are float64), outputs",
		"narrowed with FCVTN (to nearest even, as float32() does). beta only when len(b) > 0, the",
		"log-decay of the gate form (0 softplus, 1 bounded by lb): branches around whole bodies. Four lanes per iteration (two",
		"vectors, their instructions interleaved), then two (one vector), then a last odd lane through",
		"the same one-vector body in lane 0 (scalar loads: the other lane is 0; only lane 0 is stored).",
		"",
		"Constants: the table gates64c (R9), each value twice; V18 0, V19 ln 0.5, V20 20, V21 2, V22 1,",
		"V23 int 1023, V24 0.5, V25 ln2lo, V26 ln2hi, V27 log2e, V28 magic, V29 710, V30 −746, V31 the",
		"sign bit; the polynomial coefficients are loaded from the table at each use (FMOVQ into the",
		"Horner step's accumulator, off the dependency chain).",
		"",
		"Registers: R0 beta, R1 em1, R2 eg, R3 b, R4 a, R5 rate, R6 dtb, R7 lanes left, R8 1 in the odd",
		"lane, R10 len(b), R11 1 for the bounded form, R12 lb's address; V0–V8 one vector's lanes, V9–V17 the other's.")
	e.text("gatesNEON", 184)
	beta, em1, eg, pb, pa, prate, pdtb, n, inTail := Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8)
	nb, bounded, plb := Reg(10), Reg(11), Reg(12)
	for i, name := range []string{"beta", "em1", "eg", "b", "a", "dtb", "rate"} {
		e.op("MOVD", arg(name+"_base", 24*i), []Reg{beta, em1, eg, pb, pa, pdtb, prate}[i])
	}
	e.op("MOVD", arg("a_len", 104), n)
	e.op("MOVD", arg("b_len", 80), nb)
	e.op("MOVBU", arg("form", 168), bounded)
	e.op("CMP", imm(gc.FormBounded), bounded)
	e.opn("the bounded form", "CSET", "EQ", bounded)
	e.op("MOVD", "$"+arg("lb", 176), plb)
	e.op("MOVD", imm(0), inTail)
	e.op("MOVD", "$·gates64c(SB)", gatesTab)
	for i, c := range gatesResident {
		e.opn(c.name, "FMOVQ", post(16*i, gatesTab), Freg(gZero+Vreg(i)))
	}
	va, vb := gatesRegs(0), gatesRegs(9)
	both := func(f func(e *emitter, v gatesVec)) {
		zip(e, func(e *emitter) { f(e, va) }, func(e *emitter) { f(e, vb) })
	}

	e.label("gs4")
	e.op("CMP", imm(4), n)
	e.op("BLT", "gs2")
	e.comment("four lanes: lanes 0, 1 widened into the first vector, 2, 3 the second")
	e.op("CBZ", nb, "gs4decay")
	e.op("VLD1.P", post(16, pb), list(vb.in[0].S4()))
	e.word(fcvtl(va.in[0].D2(), vb.in[0].S2()))
	e.word(fcvtl2(vb.in[0].D2(), vb.in[0].S4()))
	both(gatesBeta)
	e.op("FMOVD.P", Freg(va.in[0]), post(8, beta))
	e.op("FMOVD.P", Freg(vb.in[0]), post(8, beta))
	e.label("gs4decay")
	for _, j := range []int{1, 3} {
		p := [4]Reg{1: pa, 3: pdtb}[j]
		e.op("VLD1.P", post(16, p), list(vb.in[j].S4()))
		e.word(fcvtl(va.in[j].D2(), vb.in[j].S2()))
		e.word(fcvtl2(vb.in[j].D2(), vb.in[j].S4()))
	}
	e.op("FMOVQ.P", post(16, prate), Freg(va.in[2]))
	e.op("FMOVQ.P", post(16, prate), Freg(vb.in[2]))
	gatesLogDecay(e, "gs4", bounded, plb, both)
	var oa, ob [2]Vreg
	zip(e, func(e *emitter) { oa = gatesDecay(e, va) }, func(e *emitter) { ob = gatesDecay(e, vb) })
	e.blank()
	for j, p := range []Reg{em1, eg} {
		e.op("FMOVD.P", Freg(oa[j]), post(8, p))
		e.op("FMOVD.P", Freg(ob[j]), post(8, p))
	}
	e.op("SUB", imm(4), n, n)
	e.op("B", "gs4")

	one := func(f func(e *emitter, v gatesVec)) { f(e, va) }
	e.label("gs2")
	e.op("CMP", imm(2), n)
	e.op("BLT", "gs1")
	// lanes loads the inputs of one vector: w float32 lanes of b (unless len(b) = 0), a and dt_bias,
	// the rates' float64s.
	lanes := func(w int, nob string) {
		ld := map[int]string{1: "FMOVS.P", 2: "FMOVD.P", 4: "FMOVQ.P"}
		e.op("CBZ", nb, nob)
		e.op(ld[w], post(4*w, pb), Freg(va.in[0]))
		e.label(nob)
		for _, j := range []int{1, 3} {
			e.op(ld[w], post(4*w, [4]Reg{1: pa, 3: pdtb}[j]), Freg(va.in[j]))
		}
		e.op(ld[2*w], post(8*w, prate), Freg(va.in[2]))
	}
	lanes(2, "gs2nob")
	e.op("B", "gsbody")

	e.label("gs1")
	e.op("CBZ", n, "gsdone")
	e.opn("the odd lane: lane 0, lane 1 is 0", "MOVD", imm(1), inTail)
	lanes(1, "gs1nob")

	e.label("gsbody")
	for _, j := range []int{0, 1, 3} {
		e.word(fcvtl(va.in[j].D2(), va.in[j].S2()))
	}
	e.op("CBZ", nb, "gsdecay")
	one(gatesBeta)
	e.op("CBNZ", inTail, "gsbeta1")
	e.op("FMOVD.P", Freg(va.in[0]), post(8, beta))
	e.op("B", "gsdecay")
	e.label("gsbeta1")
	e.op("FMOVS.P", Freg(va.in[0]), post(4, beta))
	e.label("gsdecay")
	gatesLogDecay(e, "gs", bounded, plb, one)
	o := gatesDecay(e, va)
	e.blank()
	e.op("CBNZ", inTail, "gsstore1")
	for j, p := range []Reg{em1, eg} {
		e.op("FMOVD.P", Freg(o[j]), post(8, p))
	}
	e.op("SUB", imm(2), n, n)
	e.op("B", "gs2")

	e.label("gsstore1")
	for j, p := range []Reg{em1, eg} {
		e.op("FMOVS.P", Freg(o[j]), post(4, p))
	}

	e.label("gsdone")
	e.op("RET")
}

// gatesVec is one vector's registers: in the inputs b, a, rate, dt_bias (widened), t the
// temporaries.
type gatesVec struct {
	in [4]Vreg
	t  [5]Vreg
}

func gatesRegs(base Vreg) gatesVec {
	var v gatesVec
	for i := range v.in {
		v.in[i] = base + Vreg(i)
	}
	for i := range v.t {
		v.t[i] = base + 4 + Vreg(i)
	}
	return v
}

// gatesBeta emits beta = 1/(1 + exp64(−b)) for v, narrowed to float32 in v.in[0] (b's register).
func gatesBeta(e *emitter, v gatesVec) {
	b, t := v.in[0], v.t
	e.comment("beta = 1/(1 + exp64(−b))")
	e.word(fneg(b.D2(), b.D2()))
	eb := gatesExp(e, b, [4]Vreg{t[0], t[1], t[2], t[3]})
	e.word(fadd(eb.D2(), gOne.D2(), eb.D2()))
	e.word(fdiv(b.D2(), gOne.D2(), eb.D2()))
	e.word(fcvtn(b.S2(), b.D2()))
}

// gatesLogDecay emits g, the log-decay, into v.in[3] (x = a + dt_bias first) for the vectors
// each gives: lb/(1 + exp64(−rate·x)) when the register bounded is not 0, else −rate·sp with sp
// softplus's (pre names the labels).
func gatesLogDecay(e *emitter, pre string, bounded, plb Reg, each func(func(e *emitter, v gatesVec))) {
	each(func(e *emitter, v gatesVec) {
		e.comment("x = a + dt_bias")
		e.word(fadd(v.in[3].D2(), v.in[1].D2(), v.in[3].D2()))
	})
	e.op("CBNZ", bounded, pre+"bounded")
	each(gatesSoftplus)
	e.op("B", pre+"g")
	e.label(pre + "bounded")
	each(func(e *emitter, v gatesVec) {
		a, rate, x, t := v.in[1], v.in[2], v.in[3], v.t
		e.comment("g = lb/(1 + exp64(−rate·x))")
		e.word(fmul(a.D2(), rate.D2(), x.D2()))
		e.word(fneg(a.D2(), a.D2()))
		d := gatesExp(e, a, [4]Vreg{t[0], t[1], t[2], t[3]})
		e.word(fadd(d.D2(), gOne.D2(), d.D2()))
		e.op("VLD1R", "("+plb.String()+")", list(t[4].D2()))
		e.word(fdiv(x.D2(), t[4].D2(), d.D2()))
	})
	e.label(pre + "g")
}

// gatesSoftplus emits g = −rate·sp into v.in[3], x there, sp = max(x, 0) + log1p01(exp64(−|x|)),
// or x where x > 20.
func gatesSoftplus(e *emitter, v gatesVec) {
	a, rate, x := v.in[1], v.in[2], v.in[3]
	t := v.t
	tmp := [4]Vreg{t[0], t[1], t[2], t[3]}
	e.comment("y = exp64(−|x|)")
	e.op("VORR", gSign.B16(), x.B16(), a.B16())
	y := gatesExp(e, a, tmp)
	l := gatesLog1p(e, y, others(y, t[0], t[1], t[2], t[3], t[4])) // y is one of t

	e.comment("sp = (x > 0 ? x : 0) + log1p01(y); sp = x where x > 20")
	px, m := t[0], t[1]
	e.word(fcmgt(px.D2(), x.D2(), gZero.D2()))
	e.op("VAND", px.B16(), x.B16(), px.B16())
	e.word(fadd(px.D2(), px.D2(), l.D2()))
	e.word(fcmgt(m.D2(), x.D2(), gTwenty.D2()))
	e.op("VBIF", m.B16(), px.B16(), x.B16()) // x keeps x where x > 20, takes sp elsewhere
	e.comment("g = −rate·sp")
	e.word(fneg(rate.D2(), rate.D2()))
	e.word(fmul(x.D2(), rate.D2(), x.D2()))
}

// gatesDecay emits em1 and eg of the log-decay g in v.in[3] and returns the registers that hold
// them narrowed to float32 (the low 64 bits).
func gatesDecay(e *emitter, v gatesVec) [2]Vreg {
	a, al, g := v.in[1], v.in[2], v.in[3]
	t := v.t
	tmp := [4]Vreg{t[0], t[1], t[2], t[3]}
	e.comment("g ≥ ln 0.5: em1 = expm1Near(g) (g·its polynomial), eg = 1 + em1")
	p := gatesHorner(e, gExpm1Off, len(gc.Expm1P), g, [2]Vreg{a, al})
	em1a := p
	e.word(fmul(em1a.D2(), g.D2(), p.D2()))
	eg1 := a
	if eg1 == em1a {
		eg1 = al
	}
	e.word(fadd(eg1.D2(), gOne.D2(), em1a.D2()))

	e.comment("else: eg = exp64(g), em1 = eg − 1")
	r := t[4]
	e.op("VORR", g.B16(), g.B16(), r.B16())
	eg2 := gatesExp(e, r, tmp)
	em2 := r
	if em2 == eg2 {
		panic("gatesDecay: exp's result in its input")
	}
	e.word(fsub(em2.D2(), eg2.D2(), gOne.D2()))

	e.comment("select where g ≥ ln 0.5; narrow")
	mask := g
	e.word(fcmge(mask.D2(), g.D2(), gLn2Half.D2()))
	e.op("VBIT", mask.B16(), em1a.B16(), em2.B16())
	e.op("VBIT", mask.B16(), eg1.B16(), eg2.B16())
	e.word(fcvtn(em2.S2(), em2.D2()))
	e.word(fcvtn(eg2.S2(), eg2.D2()))
	return [2]Vreg{em2, eg2}
}

// gatesHorner emits p = (…(c[0]·x + c[1])·x + …)·x + c[n−1] for the n coefficients at off in
// the table, an FMLA each (math.FMA(p, x, c)): each coefficient is loaded into the step's
// accumulator, the two of acc in turn. It returns the register holding p.
func gatesHorner(e *emitter, off, n int, x Vreg, acc [2]Vreg) Vreg {
	e.op("FMOVQ", post(off, gatesTab), Freg(acc[0]))
	prev := acc[0]
	for i := 1; i < n; i++ {
		d := acc[i%2]
		e.op("FMOVQ", post(off+16*i, gatesTab), Freg(d))
		e.op("VFMLA", prev.D2(), x.D2(), d.D2())
		prev = d
	}
	return prev
}

// gatesExp emits exp64 of x (clobbered) with the temporaries t and returns the register that
// holds the result (one of t).
func gatesExp(e *emitter, x Vreg, t [4]Vreg) Vreg {
	k, t1 := t[0], t[3]
	e.word(fmax(x.D2(), x.D2(), gLo.D2()))
	e.word(fmin(x.D2(), x.D2(), gHi.D2()))
	e.op("VORR", gMagic.B16(), gMagic.B16(), k.B16())
	e.opn("t = FMA(x, log2e, magic)", "VFMLA", gLog2e.D2(), x.D2(), k.D2())
	e.word(fsub(k.D2(), k.D2(), gMagic.D2()))
	e.opn("r = FMA(−k, ln2hi, x)", "VFMLS", gLn2Hi.D2(), k.D2(), x.D2())
	e.opn("r = FMA(−k, ln2lo, r)", "VFMLS", gLn2Lo.D2(), k.D2(), x.D2())
	p := gatesHorner(e, gExpOff, len(gc.ExpP), x, [2]Vreg{t[1], t[2]})
	e.op("VORR", gMagic.B16(), gMagic.B16(), t1.B16())
	e.opn("t1 = FMA(k, 0.5, magic)", "VFMLA", gHalf.D2(), k.D2(), t1.D2())
	u := x // r is dead: t2 = (k − (t1 − magic)) + magic
	e.word(fsub(u.D2(), t1.D2(), gMagic.D2()))
	e.word(fsub(u.D2(), k.D2(), u.D2()))
	e.word(fadd(u.D2(), u.D2(), gMagic.D2()))
	for _, r := range []Vreg{t1, u} {
		e.op("VADD", gBias.D2(), r.D2(), r.D2())
		e.op("VSHL", imm(52), r.D2(), r.D2())
	}
	e.word(fmul(p.D2(), p.D2(), t1.D2()))
	e.word(fmul(p.D2(), p.D2(), u.D2()))
	return p
}

// gatesLog1p emits log1p01 of y (its register then holds the result, which it returns) with the
// temporaries t.
func gatesLog1p(e *emitter, y Vreg, t [4]Vreg) Vreg {
	s, w := t[0], t[1]
	e.word(fadd(s.D2(), gTwo.D2(), y.D2()))
	e.word(fdiv(s.D2(), y.D2(), s.D2()))
	e.word(fmul(w.D2(), s.D2(), s.D2()))
	s2 := s // s + s, over s (y is needed below)
	e.word(fadd(s2.D2(), s.D2(), s.D2()))
	p := gatesHorner(e, gLog1pOff, len(gc.Log1pP), w, [2]Vreg{t[2], t[3]})
	e.word(fmul(w.D2(), s2.D2(), w.D2()))
	e.opn("FMA(s2·w, p, s2)", "VFMLA", p.D2(), w.D2(), s2.D2())
	e.opn("tiny", "FMOVQ", post(gTinyOff, gatesTab), Freg(p))
	e.word(fcmgt(w.D2(), p.D2(), y.D2()))    // y < tiny (false for NaN)
	e.op("VBIT", w.B16(), y.B16(), s2.B16()) // there: y itself
	e.op("VORR", s2.B16(), s2.B16(), y.B16())
	return y
}

// others returns the first four of rs that are not x.
func others(x Vreg, rs ...Vreg) [4]Vreg {
	var t [4]Vreg
	k := 0
	for _, r := range rs {
		if r != x && k < len(t) {
			t[k] = r
			k++
		}
	}
	if k < len(t) {
		panic("others: too few registers")
	}
	return t
}
