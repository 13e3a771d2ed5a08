package main

// l2NEON: Σq², Σk², Σk·q in float64.
func l2NEON(e *emitter) {
	e.doc("func l2NEON(q, k []float32) (qq, kk, kq float64)",
		"",
		"Four floats per iteration, widened to float64 (FCVTL/FCVTL2) and accumulated with FMLA .2D in six",
		"accumulators (the products of two float32s are exact in float64); the len mod 4 tail is scalar.")
	e.text("l2NEON", 72)
	q, k, n, groups := Reg(0), Reg(1), Reg(2), Reg(3)
	e.op("MOVD", arg("q_base", 0), q)
	e.op("MOVD", arg("q_len", 8), n)
	e.op("MOVD", arg("k_base", 24), k)
	// Accumulator pairs (low lanes, high lanes) from V16: qq, kk, kq.
	const qq, kk, kq = 16, 18, 20
	for i, name := range []string{"qq", "kk", "kq"} {
		for h, half := range []string{"lo", "hi"} {
			r := Vreg(qq + 2*i + h)
			e.opn(name+" "+half, "VEOR", r.B16(), r.B16(), r.B16())
		}
	}
	e.op("LSR", imm(2), n, groups)
	e.op("AND", imm(3), n, n)
	e.op("CBZ", groups, "l2reduce")

	e.label("l2loop4")
	e.op("VLD1.P", post(16, q), list(Vreg(0).S4()))
	e.op("VLD1.P", post(16, k), list(Vreg(1).S4()))
	// q widened into V2 (lo), V3 (hi); k into V4, V5.
	for i, src := range []Vreg{0, 1} {
		lo, hi := Vreg(2+2*i), Vreg(3+2*i)
		e.word(fcvtl(lo.D2(), src.S2()))
		e.word(fcvtl2(hi.D2(), src.S4()))
	}
	for _, p := range [][3]Vreg{{2, 2, qq}, {3, 3, qq + 1}, {4, 4, kk}, {5, 5, kk + 1}, {2, 4, kq}, {3, 5, kq + 1}} {
		e.op("VFMLA", p[0].D2(), p[1].D2(), p[2].D2())
	}
	e.op("SUBS", imm(1), groups, groups)
	e.op("BNE", "l2loop4")

	e.label("l2reduce")
	for _, r := range []Vreg{qq, kk, kq} {
		e.word(fadd(r.D2(), r.D2(), (r + 1).D2()))
	}
	for _, r := range []Vreg{qq, kk, kq} {
		e.word(faddpD(Freg(r), r.D2()))
	}
	e.op("CBZ", n, "l2done")

	e.label("l2tail")
	e.op("FMOVS.P", post(4, q), Freg(0))
	e.op("FMOVS.P", post(4, k), Freg(1))
	e.op("FCVTSD", Freg(0), Freg(0))
	e.op("FCVTSD", Freg(1), Freg(1))
	e.opn("qq += q·q", "FMADDD", Freg(0), Freg(qq), Freg(0), Freg(qq))
	e.opn("kk += k·k", "FMADDD", Freg(1), Freg(kk), Freg(1), Freg(kk))
	e.opn("kq += k·q", "FMADDD", Freg(0), Freg(kq), Freg(1), Freg(kq))
	e.op("SUBS", imm(1), n, n)
	e.op("BNE", "l2tail")

	e.label("l2done")
	e.op("FMOVD", Freg(qq), arg("qq", 48))
	e.op("FMOVD", Freg(kk), arg("kk", 56))
	e.op("FMOVD", Freg(kq), arg("kq", 64))
	e.op("RET")
}
