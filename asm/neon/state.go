package main

import "fmt"

// The T = 1 plan of stateKVf32NEON: the column strips of the state, one strip function for every
// width, the two decay forms from one function.

// The registers of the T = 1 plan (see the doc comment it emits).
const (
	rSIn, rSOut, rKh, rQh, rV, rO, rK, rCols, rStride = Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8)
	rForm, rRow, rRowOut, rKp, rQp, rI, rStride64     = Reg(9), Reg(10), Reg(11), Reg(12), Reg(13), Reg(14), Reg(15)
)

// Vector (or, in a scalar strip, F) register numbers: data 0–7, kh_i and qh_i broadcast, the four
// scalars broadcast, accK 16–23 (then δ), accQ 24–31 (then o).
const (
	nKh, nQh, nEg, nBeta, nKq, nEm1 = 8, 9, 10, 11, 12, 13
	nAccK, nAccQ                    = 16, 24
)

// strips are the strip widths in columns, widest first; the last must be 1.
var strips = []int{32, 16, 4, 1}

// shape is a strip of w columns: w/4 vectors of four floats per row, or one scalar when w = 1. Its
// methods emit one operation for lane set n (a vector register number or an F register number).
type shape struct{ w int }

func (s shape) scalar() bool { return s.w == 1 }

// vecs is the number of vectors (or scalars) per row.
func (s shape) vecs() int {
	if s.scalar() {
		return 1
	}
	if s.w%4 != 0 || s.w/4 > 8 {
		panic(fmt.Sprintf("strip of %d columns: want 1 or a multiple of 4 up to 32", s.w))
	}
	return s.w / 4
}

// groups splits the vectors of a row, from register first, into VLD1/VST1 lists of at most four.
func (s shape) groups(first int) [][]Vec {
	var gs [][]Vec
	for j := 0; j < s.vecs(); j += 4 {
		var g []Vec
		for r := j; r < min(j+4, s.vecs()); r++ {
			g = append(g, Vreg(first+r).S4())
		}
		gs = append(gs, g)
	}
	if len(gs) > 2 {
		panic("a row of more than two VLD1 lists needs another stride register")
	}
	return gs
}

// rowInc is the post-increment of the last list of a row: the stride, less the lists before it.
func (s shape) rowInc() Reg {
	if len(s.groups(0)) == 2 {
		return rStride64
	}
	return rStride
}

func (s shape) v(n int) Vec { return Vreg(n).S4() }

// zero sets n to 0.
func (s shape) zero(e *emitter, n int) {
	if s.scalar() {
		e.op("FMOVS", ZR, Freg(n))
		return
	}
	e.op("VEOR", Vreg(n).B16(), Vreg(n).B16(), Vreg(n).B16())
}

// fma is acc += x·y, fms acc −= x·y (one rounding).
func (s shape) fma(e *emitter, acc, x, y int) {
	if s.scalar() {
		e.opn(fmt.Sprintf("F%d += F%d·F%d", acc, x, y), "FMADDS", Freg(y), Freg(acc), Freg(x), Freg(acc))
		return
	}
	e.op("VFMLA", s.v(y), s.v(x), s.v(acc))
}

func (s shape) fms(e *emitter, acc, x, y int) {
	if s.scalar() {
		e.opn(fmt.Sprintf("F%d −= F%d·F%d", acc, x, y), "FMSUBS", Freg(y), Freg(acc), Freg(x), Freg(acc))
		return
	}
	e.op("VFMLS", s.v(y), s.v(x), s.v(acc))
}

// mul is d = x·y, sub d = x − y.
func (s shape) mul(e *emitter, d, x, y int) {
	if s.scalar() {
		e.op("FMULS", Freg(y), Freg(x), Freg(d))
		return
	}
	e.word(fmul(s.v(d), s.v(x), s.v(y)))
}

func (s shape) sub(e *emitter, d, x, y int) {
	if s.scalar() {
		e.op("FSUBS", Freg(y), Freg(x), Freg(d))
		return
	}
	e.word(fsub(s.v(d), s.v(x), s.v(y)))
}

// loadRow loads a row of the strip at p into 0… and advances p by the row stride; storeRow stores
// 0… likewise.
func (s shape) loadRow(e *emitter, p Reg) {
	if s.scalar() {
		e.op("FMOVS", mem(p), Freg(0))
		e.op("ADD", rStride, p, p)
		return
	}
	gs := s.groups(0)
	for i, g := range gs {
		if i < len(gs)-1 {
			e.op("VLD1.P", post(16*len(g), p), list(g...))
		} else {
			e.op("VLD1.P", postReg(p, s.rowInc()), list(g...))
		}
	}
}

func (s shape) storeRow(e *emitter, p Reg) {
	if s.scalar() {
		e.op("FMOVS", Freg(0), mem(p))
		e.op("ADD", rStride, p, p)
		return
	}
	gs := s.groups(0)
	for i, g := range gs {
		if i < len(gs)-1 {
			e.op("VST1.P", list(g...), post(16*len(g), p))
		} else {
			e.op("VST1.P", list(g...), postReg(p, s.rowInc()))
		}
	}
}

// bcast loads the float at p into every lane of n and advances p by 4.
func (s shape) bcast(e *emitter, p Reg, n int) {
	if s.scalar() {
		e.op("FMOVS.P", post(4, p), Freg(n))
		return
	}
	e.op("VLD1R.P", post(4, p), list(s.v(n)))
}

// loadV loads the strip's v into 0…; storeO stores its o from accQ.
func (s shape) loadV(e *emitter) {
	if s.scalar() {
		e.op("FMOVS.P", post(4, rV), Freg(0))
		return
	}
	for _, g := range s.groups(0) {
		e.op("VLD1.P", post(16*len(g), rV), list(g...))
	}
}

func (s shape) storeO(e *emitter) {
	if s.scalar() {
		e.op("FMOVS.P", Freg(nAccQ), post(4, rO))
		return
	}
	for _, g := range s.groups(nAccQ) {
		e.op("VST1.P", list(g...), post(16*len(g), rO))
	}
}

// each emits f(j) for every vector j of the strip.
func (s shape) each(f func(j int)) {
	for j := range s.vecs() {
		f(j)
	}
}

// form is a decay form of SPEC Part A: decay(x) = x + em1·x (near, when em1 ≥ −0.5) or eg·x.
type form struct {
	near        bool
	suffix      string // of the write loop's label
	what, write string // comments
}

var forms = []form{
	{near: false, suffix: "b", what: "eg·x: δ = beta·(v − eg·accK); o = eg·accQ + kq·δ", write: "S' = eg·S + kh_i·δ"},
	{near: true, suffix: "a", what: "x + em1·x: kv = accK + em1·accK; δ = beta·(v − kv); o = accQ + em1·accQ + kq·δ",
		write: "S' = S + em1·S + kh_i·δ"},
}

// decay replaces n by decay(n).
func (f form) decay(e *emitter, s shape, n int) {
	if f.near {
		s.fma(e, n, n, nEm1)
	} else {
		s.mul(e, n, n, nEg)
	}
}

// body emits δ and o of the strip (v in 0…, accK and accQ read), the store of o and the write pass.
func (f form) body(e *emitter, s shape, next string) {
	e.comment("%s", f.what)
	if f.near { // v − decay(accK), decay in place
		s.each(func(j int) { f.decay(e, s, nAccK+j) })
		s.each(func(j int) { s.sub(e, j, j, nAccK+j) })
	} else { // v − eg·accK in one FMLS
		s.each(func(j int) { s.fms(e, j, nAccK+j, nEg) })
	}
	s.each(func(j int) { s.mul(e, nAccK+j, j, nBeta) }) // δ
	s.each(func(j int) { f.decay(e, s, nAccQ+j) })
	s.each(func(j int) { s.fma(e, nAccQ+j, nAccK+j, nKq) }) // o
	s.storeO(e)
	e.op("CBZ", rI, next)

	write := fmt.Sprintf("write%d%s", s.w, f.suffix)
	e.label(write)
	e.comment("%s", f.write)
	s.loadRow(e, rRow)
	s.bcast(e, rKp, nKh)
	s.each(func(j int) { f.decay(e, s, j) })
	s.each(func(j int) { s.fma(e, j, nAccK+j, nKh) })
	s.storeRow(e, rRowOut)
	e.op("SUBS", imm(1), rI, rI)
	e.op("BNE", write)
}

// strip emits the strips of width s.w: skip to after when fewer columns remain; at most times
// strips (0: as many as fit), looping back unless that is one.
func strip(e *emitter, s shape, after string, times int) {
	name := func(p string) string { return fmt.Sprintf("%s%d", p, s.w) }
	e.label(name("strip"))
	count := "while they fit"
	if times > 0 {
		count = fmt.Sprintf("at most %d", times)
	}
	switch n := s.vecs(); {
	case s.scalar():
		e.comment("single columns (%s), scalar: F%d accK, F%d accQ", count, nAccK, nAccQ)
		e.op("CBZ", rCols, after)
	case n == 1:
		e.comment("%d columns (%s): one vector per row, V%d accK, V%d accQ", s.w, count, nAccK, nAccQ)
	default:
		e.comment("%d columns (%s): %d vectors per row, V%d-V%d accK, V%d-V%d accQ", s.w, count, n, nAccK, nAccK+n-1, nAccQ, nAccQ+n-1)
	}
	if !s.scalar() {
		e.op("CMP", imm(s.w), rCols)
		e.op("BLT", after)
	}
	s.each(func(j int) { s.zero(e, nAccK+j) })
	s.each(func(j int) { s.zero(e, nAccQ+j) })
	e.op("MOVD", rSIn, rRow)
	e.op("MOVD", rKh, rKp)
	e.op("MOVD", rQh, rQp)
	e.op("MOVD", rK, rI)
	e.op("CBZ", rI, name("delta"))

	e.label(name("read"))
	s.loadRow(e, rRow)
	s.bcast(e, rKp, nKh)
	s.bcast(e, rQp, nQh)
	s.each(func(j int) { s.fma(e, nAccK+j, j, nKh) })
	s.each(func(j int) { s.fma(e, nAccQ+j, j, nQh) })
	e.op("SUBS", imm(1), rI, rI)
	e.op("BNE", name("read"))

	e.label(name("delta"))
	e.op("MOVD", rSIn, rRow)
	e.op("MOVD", rSOut, rRowOut)
	e.op("MOVD", rKh, rKp)
	e.op("MOVD", rK, rI)
	s.loadV(e)
	e.op("CBNZ", rForm, name("delta")+forms[1].suffix)
	forms[0].body(e, s, name("next"))
	e.op("B", name("next"))
	e.label(name("delta") + forms[1].suffix)
	forms[1].body(e, s, name("next"))

	e.label(name("next"))
	e.op("ADD", imm(4*s.w), rSIn, rSIn)
	e.op("ADD", imm(4*s.w), rSOut, rSOut)
	e.op("SUB", imm(s.w), rCols, rCols)
	if times != 1 {
		e.op("B", name("strip"))
	}
}

// stateOne emits the T = 1 plan of the [K][V] f32 routine over T tokens (dst1 set: one token with a
// store; stateGeneric's arithmetic, whole columns strips from src to dst1) from its arguments (fr),
// its labels prefixed with "one" (the routine's own are in the same TEXT), and its return.
func stateOne(e *emitter, fr frame) {
	first := len(e.lines)
	e.op("MOVD", fr.base("src"), rSIn)
	e.op("MOVD", fr.base("dst1"), rSOut)
	e.op("MOVD", fr.base("kh"), rKh)
	e.op("MOVD", fr.word("K"), rK)
	e.op("MOVD", fr.base("qh"), rQh)
	e.op("MOVD", fr.base("v"), rV)
	e.op("MOVD", fr.word("V"), rCols)
	e.op("MOVD", fr.base("o"), rO)
	for i, n := range []Vreg{nEm1, nEg, nBeta, nKq} { // tok1
		e.op("FMOVS", fr.elem("tok1", i), Freg(n))
	}
	stateBody(e)
	e.prefixLabels(first, "one")
}

// stateBody's arithmetic (the T = 1 plan of stateKVf32NEON; stateGeneric's). Blocking: the state
// is processed in column strips. A strip is 32 columns (eight 4-float vectors) while at least 32
// columns remain, then at most one strip of 16 columns, at most three of 4 columns
// (one vector) and at most three single columns. For each strip:
//
//	read pass  (rows i = 0..K-1): accK += kh_i·S[i][strip], accQ += qh_i·S[i][strip]; a 32-column
//	           strip keeps 16 independent accumulators (V16-V31), enough FMAs in flight to cover the
//	           4-cycle FMA latency on 2- and 4-pipe cores (8 in a 16-column strip, 2 in a 4-column one);
//	δ, o       δ = beta·(v − decay(accK)) (kept in V16-V23), o = decay(accQ) + kq·δ (stored);
//	write pass (rows i = 0..K-1): S'[i][strip] = decay(S[i][strip]) + kh_i·δ.
//
// decay(x) is x + em1·x (one FMLA, x its own accumulator) when em1 ≥ −0.5, else eg·x (SPEC Part A).
// The form is decided once, in the prologue (R9 = 1 for x + em1·x; a NaN em1 compares false: eg·x);
// each strip branches once to the δ, o and write pass of its form, so both write loops have the
// same instructions per element as a single-form loop.
//
// The K×32 slab of a strip (16 KiB at K = 128) is still in L1 when the write pass reads it again, so
// the state is read once from memory and written once. Rows are V·4 bytes apart; no load or store
// touches anything outside the head's K×V state, kh, qh, v or o.
//
// Registers: R0 sIn strip, R1 sOut strip, R2 kh, R3 qh, R4 v, R5 o, R6 K, R7 columns left,
// R8 row stride V·4, R15 stride−64, R9 form (1: x + em1·x), R10/R11 row pointers, R12/R13 kh/qh
// pointers, R14 row counter; V10 eg, V11 beta, V12 kq, V13 em1 (broadcast), V8/V9 kh_i/qh_i
// (broadcast), V0-V7 state data.
//
// stateBody emits that arithmetic and the return, its arguments in rSIn, rSOut, rKh, rK, rQh,
// rV, rCols, rO and em1, eg, beta, kq in S13, S10, S11, S12.
func stateBody(e *emitter) {
	e.op("FMOVS", "$(-0.5)", Freg(14))
	e.opn("em1 vs −0.5: GE is false for NaN", "FCMPS", Freg(14), Freg(nEm1))
	e.op("CSET", "GE", rForm)
	for _, n := range []Vreg{nEg, nBeta, nKq, nEm1} {
		e.op("VDUP", n.S(0), n.S4())
	}
	e.op("LSL", imm(2), rCols, rStride)
	if (shape{strips[0]}).rowInc() == rStride64 {
		e.op("SUB", imm(64), rStride, rStride64)
	}
	for i, w := range strips {
		after := "done"
		if i+1 < len(strips) {
			after = fmt.Sprintf("strip%d", strips[i+1])
		}
		times := 0 // the widest strip: as many as fit
		if i > 0 {
			times = (strips[i-1] - 1) / w // fewer than strips[i-1] columns are left
		}
		strip(e, shape{w}, after, times)
	}
	e.label("done")
	e.op("RET")
}
