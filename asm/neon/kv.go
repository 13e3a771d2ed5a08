package main

import "fmt"

// The [K][V] routine over T tokens: column strips of the state (widths of the T = 1 plan's strips, as
// wide as the slab allows), each copied into the slab once and advanced through every token by
// the T = 1 plan's read pass, δ and o, and write pass.

// Registers of the [K][V] routine. The vector registers are the T = 1 plan's: data V0–V7, kh_i V8, qh_i
// V9, eg V10, beta V11, kq V12, em1 V13, accK V16–V23 (then δ), accQ V24–V31 (then o).
const (
	kvSrc, kvSlab, kvKh, kvQh, kvV, kvO, kvK, kvCols, kvN, kvForm = Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8), Reg(9)
	kvIn, kvOut, kvKp, kvQp, kvI, kvStride                        = Reg(10), Reg(11), Reg(12), Reg(13), Reg(14), Reg(15)
	kvOff, kvTau, kvTok, kvStores, kvRowP, kvTmp, kvTmp2          = Reg(19), Reg(20), Reg(21), Reg(22), Reg(23), Reg(24), Reg(25)
)

// slabRow loads (store false) or stores row data V0… of a strip of shape s at p, advancing p by the
// strip's w floats (slab rows are contiguous).
func slabRow(e *emitter, s shape, p Reg, store bool) {
	if s.scalar() {
		if store {
			e.op("FMOVS.P", Freg(0), post(4, p))
		} else {
			e.op("FMOVS.P", post(4, p), Freg(0))
		}
		return
	}
	for _, g := range s.groups(0) {
		if store {
			e.op("VST1.P", list(g...), post(16*len(g), p))
		} else {
			e.op("VLD1.P", post(16*len(g), p), list(g...))
		}
	}
}

// kvRows emits a loop over the K rows of the strip: each row copied with copyN of w elements from
// (to) the state at kvRowP, which advances by stride, and to (from) the slab at slab.
func kvRows(e *emitter, c conv, lab string, w int, toSlab bool, stride Reg) {
	copyConsts(e, c, kvTmp2)
	e.op("MOVD", kvSlab, kvIn)
	e.op("MOVD", kvK, kvI)
	e.label(lab)
	e.op("MOVD", imm(w), kvN)
	if toSlab {
		e.op("MOVD", kvRowP, kvOut)
		copyN(e, c, lab+"c", kvOut, kvIn, kvN, kvTmp2)
	} else {
		e.op("MOVD", kvRowP, kvOut)
		copyN(e, c, lab+"c", kvIn, kvOut, kvN, kvTmp2)
	}
	e.op("ADD", stride, kvRowP, kvRowP)
	e.op("SUBS", imm(1), kvI, kvI)
	e.op("BNE", lab)
}

// kvBody emits δ and o of the strip (accK, accQ read; v from the token's v) and the write pass
// over the slab in form f, the T = 1 plan's instructions.
func kvBody(e *emitter, s shape, f form, lab string) {
	e.comment("%s", f.what)
	e.op("MOVD", kvV, kvTmp)
	if s.scalar() {
		e.op("FMOVS", mem(kvTmp), Freg(0))
	} else {
		for _, g := range s.groups(0) {
			e.op("VLD1.P", post(16*len(g), kvTmp), list(g...))
		}
	}
	if f.near {
		s.each(func(j int) { f.decay(e, s, nAccK+j) })
		s.each(func(j int) { s.sub(e, j, j, nAccK+j) })
	} else {
		s.each(func(j int) { s.fms(e, j, nAccK+j, nEg) })
	}
	s.each(func(j int) { s.mul(e, nAccK+j, j, nBeta) }) // δ
	s.each(func(j int) { f.decay(e, s, nAccQ+j) })
	s.each(func(j int) { s.fma(e, nAccQ+j, nAccK+j, nKq) }) // o
	e.op("MOVD", kvO, kvTmp)
	if s.scalar() {
		e.op("FMOVS", Freg(nAccQ), mem(kvTmp))
	} else {
		for _, g := range s.groups(nAccQ) {
			e.op("VST1.P", list(g...), post(16*len(g), kvTmp))
		}
	}
	e.op("MOVD", kvSlab, kvIn)
	e.op("MOVD", kvSlab, kvOut)
	e.op("MOVD", kvKh, kvKp)
	e.op("MOVD", kvK, kvI)
	e.label(lab)
	e.comment("%s", f.write)
	slabRow(e, s, kvIn, false)
	s.bcast(e, kvKp, nKh)
	s.each(func(j int) { f.decay(e, s, j) })
	s.each(func(j int) { s.fma(e, j, nAccK+j, nKh) })
	slabRow(e, s, kvOut, true)
	e.op("SUBS", imm(1), kvI, kvI)
	e.op("BNE", lab)
}

func stateKV(e *emitter, st storage) {
	name := routineName("KV", st)
	f, size := st.args()
	fr := frame(f)
	e.doc(st.signature(name),
		"",
		"The [K][V] state over T = len(tok)/4 tokens (gdn_generic.go's contract), in column strips of",
		"the T = 1 plan's widths (32 while they fit, then 16, 4, 1 columns) no wider than the slab on the",
		"stack holds (K·w ≤ 4096 floats: 32 columns up to K = 128, 16 up to 256). A strip's K rows are",
		"copied (widened) into the slab once; for each token the T = 1 plan's passes run over the slab:",
		"",
		"\tread pass  accK += kh_i·S[i][strip], accQ += qh_i·S[i][strip] (rows i = 0..K-1 in order);",
		"\tδ, o       δ = beta·(v − decay(accK)), o = decay(accQ) + kq·δ;",
		"\twrite pass S[i][strip] ← decay(S[i][strip]) + kh_i·δ;",
		"\tstore      the strip's rows to stores[τ] (rounded to nearest even for bf16) where not nil;",
		"",
		"after the last token the strip goes to carry (bf16 routine, when not nil). A column's arithmetic",
		"is the T = 1 plan's for every strip width, T and storage type; decay(x) is x + em1·x (one FMLA) when",
		"em1 ≥ −0.5, else eg·x, decided per token (NaN: eg·x). K ≤ 4096 (the adapter's guard).",
		"",
		"Registers: R0 src strip, R1 slab, R2/R3 token's kh/qh, R4/R5 token's v/o at the strip, R6 K,",
		"R7 columns left, R8 copy count, R9 form, R10/R11 slab/row pointers, R12/R13 kh/qh pointers, R14",
		"row counter, R15 state row stride V·es, R19 strip's first column, R20 tokens left, R21 tok, R22",
		"stores, R23 row start, R24/R25 scratch.")
	e.textFrame(name, slabBytes, size)
	if !st.narrow() {
		e.comment("one token with a store (decode, dst1 set): the T = 1 plan, whole column strips (stateOne)")
		e.op("MOVD", fr.base("dst1"), kvTmp)
		e.op("CBZ", kvTmp, "tokens")
		stateOne(e, fr)
		e.label("tokens")
	}
	e.op("MOVD", fr.word("K"), kvK)
	e.op("MOVD", fr.word("V"), kvCols)
	e.op("MOVD", fr.base("src"), kvSrc)
	e.op("MOVD", fmt.Sprintf("$slab-%d(SP)", slabBytes), kvSlab)
	e.op("LSL", imm(st.shift()), kvCols, kvStride)
	e.op("MOVD", imm(0), kvOff)
	e.op("MOVD", fr.word("T"), kvTmp)
	e.op("CBZ", kvTmp, "done")
	e.op("CBZ", kvK, "done")
	for si, w := range strips {
		s := shape{w}
		l := fmt.Sprintf("s%d", w)
		next := "done"
		if si+1 < len(strips) {
			next = fmt.Sprintf("s%d", strips[si+1])
		}
		e.label(l)
		e.comment("strips of %d columns while they fit (K·%d ≤ %d)", w, w, slabFloats)
		e.op("MOVD", imm(slabFloats/w), kvTmp)
		e.op("CMP", kvTmp, kvK)
		e.op("BGT", next)
		e.op("CMP", imm(w), kvCols)
		e.op("BLT", next)

		in := st.load()
		if st.narrow() {
			e.op("MOVD", fr.base("src32"), kvRowP)
			e.op("CBZ", kvRowP, l+"in16")
			e.op("ADD", fmt.Sprintf("%v<<2", kvOff), kvRowP, kvRowP)
			loadScaled(e, fr, "V", 2, kvTmp)
			kvRows(e, f32f32, l+"in32", w, true, kvTmp)
			e.op("B", l+"tok0")
			e.label(l + "in16")
		}
		e.op("MOVD", kvSrc, kvRowP)
		kvRows(e, in, l+"in", w, true, kvStride)

		e.label(l + "tok0")
		e.op("MOVD", fr.word("T"), kvTau)
		e.op("MOVD", fr.base("tok"), kvTok)
		e.op("MOVD", fr.base("kh"), kvKh)
		e.op("MOVD", fr.base("qh"), kvQh)
		e.op("MOVD", fr.base("v"), kvV)
		e.op("ADD", fmt.Sprintf("%v<<2", kvOff), kvV, kvV)
		e.op("MOVD", fr.base("o"), kvO)
		e.op("ADD", fmt.Sprintf("%v<<2", kvOff), kvO, kvO)
		e.op("MOVD", fr.base("stores"), kvStores)

		e.label(l + "tok")
		scalars(e, kvTok, nEm1, nEg, nBeta, nKq)
		formFlag(e, nEm1, kvForm, Vreg(14))
		s.each(func(j int) { s.zero(e, nAccK+j) })
		s.each(func(j int) { s.zero(e, nAccQ+j) })
		e.op("MOVD", kvSlab, kvIn)
		e.op("MOVD", kvKh, kvKp)
		e.op("MOVD", kvQh, kvQp)
		e.op("MOVD", kvK, kvI)
		e.label(l + "read")
		slabRow(e, s, kvIn, false)
		s.bcast(e, kvKp, nKh)
		s.bcast(e, kvQp, nQh)
		s.each(func(j int) { s.fma(e, nAccK+j, j, nKh) })
		s.each(func(j int) { s.fma(e, nAccQ+j, j, nQh) })
		e.op("SUBS", imm(1), kvI, kvI)
		e.op("BNE", l+"read")

		e.op("CBNZ", kvForm, l+"near")
		kvBody(e, s, forms[0], l+"wb")
		e.op("B", l+"store")
		e.label(l + "near")
		kvBody(e, s, forms[1], l+"wa")

		e.label(l + "store")
		e.op("MOVD", mem(kvStores), kvRowP)
		e.op("CBZ", kvRowP, l+"next")
		e.op("ADD", fmt.Sprintf("%v<<%d", kvOff, st.shift()), kvRowP, kvRowP)
		out := st.store()
		kvRows(e, out, l+"st", w, false, kvStride)

		e.label(l + "next")
		e.op("LSL", imm(2), kvK, kvTmp)
		e.op("ADD", kvTmp, kvKh, kvKh)
		e.op("ADD", kvTmp, kvQh, kvQh)
		loadScaled(e, fr, "vs", 2, kvTmp)
		e.op("ADD", kvTmp, kvV, kvV)
		loadScaled(e, fr, "V", 2, kvTmp)
		e.op("ADD", kvTmp, kvO, kvO)
		e.op("ADD", imm(16), kvTok, kvTok)
		e.op("ADD", imm(8), kvStores, kvStores)
		e.op("SUBS", imm(1), kvTau, kvTau)
		e.op("BNE", l+"tok")

		if st.narrow() {
			e.comment("the f32 strip after the last token to carry")
			e.op("MOVD", fr.base("carry"), kvRowP)
			e.op("CBZ", kvRowP, l+"adv")
			e.op("ADD", fmt.Sprintf("%v<<2", kvOff), kvRowP, kvRowP)
			loadScaled(e, fr, "V", 2, kvTmp)
			kvRows(e, f32f32, l+"cy", w, false, kvTmp)
		}
		e.label(l + "adv")
		e.op("ADD", imm(w<<st.shift()), kvSrc, kvSrc)
		e.op("ADD", imm(w), kvOff, kvOff)
		e.op("SUB", imm(w), kvCols, kvCols)
		e.op("B", l)
	}
	e.label("done")
	e.op("RET")
}
