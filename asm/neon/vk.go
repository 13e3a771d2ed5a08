package main

import "fmt"

// The [V][K] routine over T tokens: groups of rows (value columns of the maths, K contiguous),
// four at a time, then single rows.

// Registers of the [V][K] routine.
const (
	vkSrc, vkSlab, vkKh, vkQh, vkV, vkO, vkK, vkRows, vkN, vkForm = Reg(0), Reg(1), Reg(2), Reg(3), Reg(4), Reg(5), Reg(6), Reg(7), Reg(8), Reg(9)
	vkKp, vkQp, vkJ4, vkTau, vkTok, vkStores, vkI, vkOff, vkTmp   = Reg(14), Reg(15), Reg(19), Reg(20), Reg(21), Reg(22), Reg(23), Reg(24), Reg(25)
)

// vkRow is the slab pointer of row r of a group (R10–R13).
func vkRow(r int) Reg { return Reg(10 + r) }

// Vector registers: row data V0–V7 (row r: V2r, V2r+1), kh V8–V9, qh V10–V11, accK V16+r, accQ
// V24+r; then kv V12, qs V13 (lane r: row r), beta V10, kq V11, δ V1,
// δ_r broadcast V16+r; em1 V14, eg V15 for the whole token.
const (
	vkKhV, vkQhV, vkKv, vkQs, vkEm1, vkEg, vkBeta, vkKq = Vreg(8), Vreg(10), Vreg(12), Vreg(13), Vreg(14), Vreg(15), Vreg(10), Vreg(11)
	vkAccK, vkAccQ, vkDelta                             = 16, 24, 16
)

// vkGroups are the row-group sizes, largest first; the last must be 1.
var vkGroups = []int{4, 1}

// vkDot emits the dots of a group of g rows over the slab, in dot2's order (gdn_generic.go):
// per row and dot one accumulator whose lane l sums the elements i ≡ l mod 4 (4 or 8 floats a
// step, in index order), reduced to ((l0 + l1) + (l2 + l3)) by FADDP pairwise (two FADDPs for
// two rows, lane r of kv and qs = row r), then the last K mod 4 elements added one by one to
// each lane (a vector of the g rows' element times kh_i, qh_i broadcast).
func vkDot(e *emitter, g int, lab string) {
	for r := range g {
		for _, a := range []int{vkAccK, vkAccQ} {
			v := Vreg(a + r)
			e.op("VEOR", v.B16(), v.B16(), v.B16())
		}
	}
	e.op("MOVD", vkKh, vkKp)
	e.op("MOVD", vkQh, vkQp)
	e.op("MOVD", vkK, vkI)
	step := func(u int) { // u vectors per row
		if u == 2 {
			e.op("VLD1.P", post(32, vkKp), list(vkKhV.S4(), (vkKhV+1).S4()))
			e.op("VLD1.P", post(32, vkQp), list(vkQhV.S4(), (vkQhV+1).S4()))
		} else {
			e.op("VLD1.P", post(16, vkKp), list(vkKhV.S4()))
			e.op("VLD1.P", post(16, vkQp), list(vkQhV.S4()))
		}
		for r := range g {
			if u == 2 {
				e.op("VLD1.P", post(32, vkRow(r)), list(Vreg(2*r).S4(), Vreg(2*r+1).S4()))
			} else {
				e.op("VLD1.P", post(16, vkRow(r)), list(Vreg(2*r).S4()))
			}
		}
		for j := range u {
			for r := range g {
				x := Vreg(2*r + j)
				e.op("VFMLA", (vkKhV + Vreg(j)).S4(), x.S4(), Vreg(vkAccK+r).S4())
				e.op("VFMLA", (vkQhV + Vreg(j)).S4(), x.S4(), Vreg(vkAccQ+r).S4())
			}
		}
	}
	e.label(lab + "8")
	e.op("CMP", imm(8), vkI)
	e.op("BLT", lab+"4")
	step(2)
	e.op("SUB", imm(8), vkI, vkI)
	e.op("B", lab+"8")
	e.label(lab + "4")
	e.op("CMP", imm(4), vkI)
	e.op("BLT", lab+"sum")
	step(1)
	e.op("SUB", imm(4), vkI, vkI)

	e.label(lab + "sum")
	e.comment("kv, qs: lane r = row r's ((l0 + l1) + (l2 + l3))")
	for i, a := range []int{vkAccK, vkAccQ} {
		dst := []Vreg{vkKv, vkQs}[i]
		if g == 1 {
			e.word(faddp(Vreg(0).S4(), Vreg(a).S4(), Vreg(a).S4()))
			e.word(faddp(dst.S4(), Vreg(0).S4(), Vreg(0).S4()))
			continue
		}
		e.word(faddp(Vreg(0).S4(), Vreg(a).S4(), Vreg(a+1).S4()))
		e.word(faddp(Vreg(1).S4(), Vreg(a+2).S4(), Vreg(a+3).S4()))
		e.word(faddp(dst.S4(), Vreg(0).S4(), Vreg(1).S4()))
	}
	e.comment("the last K mod 4 elements, one at a time: lane r += row_r[i]·kh_i (qh_i)")
	e.label(lab + "1")
	e.op("CBZ", vkI, lab+"end")
	e.op("VLD1R.P", post(4, vkKp), list(vkKhV.S4()))
	e.op("VLD1R.P", post(4, vkQp), list(vkQhV.S4()))
	x := Vreg(0)
	for r := range g {
		if g == 1 {
			e.op("FMOVS.P", post(4, vkRow(r)), Freg(x))
		} else {
			e.op("VLD1.P", post(4, vkRow(r)), x.S(r))
		}
	}
	e.op("VFMLA", vkKhV.S4(), x.S4(), vkKv.S4())
	e.op("VFMLA", vkQhV.S4(), x.S4(), vkQs.S4())
	e.op("SUB", imm(1), vkI, vkI)
	e.op("B", lab+"1")
	e.label(lab + "end")
}

// kLoops emits the loop over K (counter vkI): step(2) while 8 floats remain, step(1) at most once,
// step(0) for each of the last 0–3.
func kLoops(e *emitter, lab string, step func(u int)) {
	e.label(lab + "8")
	e.op("CMP", imm(8), vkI)
	e.op("BLT", lab+"4")
	step(2)
	e.op("SUB", imm(8), vkI, vkI)
	e.op("B", lab+"8")
	e.label(lab + "4")
	e.op("CMP", imm(4), vkI)
	e.op("BLT", lab+"1")
	step(1)
	e.op("SUB", imm(4), vkI, vkI)
	e.label(lab + "1")
	e.op("CBZ", vkI, lab+"end")
	step(0)
	e.op("SUB", imm(1), vkI, vkI)
	e.op("B", lab+"1")
	e.label(lab + "end")
}

// vkAxpy emits δ, o of a group of g rows and the write pass row_r ← decay(row_r) + kh·δ_r over the
// slab, in form f.
func vkAxpy(e *emitter, g int, f decayForm, lab string) {
	v, d := Vreg(0), Vreg(1)
	scalars(e, vkTok, -1, -1, vkBeta, vkKq)
	if g == 1 {
		e.op("FMOVS", mem(vkV), Freg(v))
	} else {
		e.op("VLD1", mem(vkV), list(v.S4()))
	}
	f.deltaO(e, v, vkKv, vkQs, d, vkBeta, vkKq)
	if g == 1 {
		e.op("FMOVS", Freg(vkQs), mem(vkO))
	} else {
		e.op("VST1", list(vkQs.S4()), mem(vkO))
	}
	for r := range g {
		e.op("VDUP", d.S(r), Vreg(vkDelta+r).S4())
	}
	slabRows(e, g)
	e.op("MOVD", vkKh, vkKp)
	e.op("MOVD", vkK, vkI)
	step := func(u int) {
		switch u {
		case 2:
			e.op("VLD1.P", post(32, vkKp), list(vkKhV.S4(), (vkKhV+1).S4()))
		case 1:
			e.op("VLD1.P", post(16, vkKp), list(vkKhV.S4()))
		default:
			e.op("FMOVS.P", post(4, vkKp), Freg(vkKhV))
		}
		for r := range g {
			regs := []Vec{Vreg(2 * r).S4(), Vreg(2*r + 1).S4()}[:max(u, 1)]
			if u == 0 {
				e.op("FMOVS", mem(vkRow(r)), Freg(2*r))
			} else {
				e.op("VLD1", mem(vkRow(r)), list(regs...))
			}
			for j := range regs {
				x := Vreg(2*r + j)
				f.apply(e, x)
				e.op("VFMLA", Vreg(vkDelta+r).S4(), (vkKhV + Vreg(j)).S4(), x.S4())
			}
			if u == 0 {
				e.op("FMOVS.P", Freg(2*r), post(4, vkRow(r)))
			} else {
				e.op("VST1.P", list(regs...), post(16*u, vkRow(r)))
			}
		}
	}
	kLoops(e, lab, step)
}

// slabRows points R10… at the slab rows of a group of g rows (K·4 bytes apart).
func slabRows(e *emitter, g int) {
	e.op("MOVD", vkSlab, vkRow(0))
	if g > 1 {
		e.op("LSL", imm(2), vkK, vkTmp)
	}
	for r := 1; r < g; r++ {
		e.op("ADD", vkTmp, vkRow(r-1), vkRow(r))
	}
}

func stateVK(e *emitter, st storage) {
	name := routineName("VK", st)
	f, size := st.args()
	fr := frame(f)
	e.doc(st.signature(name),
		"",
		"The [V][K] state over T = len(tok)/4 tokens (gdn_generic.go's contract). Rows (value columns",
		"of the maths, K contiguous) go in groups of four while four remain, then one by one; a group's",
		"g·K floats are copied (widened) into the slab on the stack once and, for each token:",
		"",
		"\tdots   row_r·kh and row_r·qh in dot2's order: one accumulator per row and dot (lane l: the",
		"\t       elements i ≡ l mod 4), 8 floats a step, then 4; three FADDPs give lane r = row r's",
		"\t       ((l0 + l1) + (l2 + l3)); the last K mod 4 elements are added one at a time (FMLA);",
		"\tδ, o   for the four rows in one vector: δ = beta·(v − decay(kv)), o = decay(qs) + kq·δ;",
		"\taxpy   row_r ← decay(row_r) + kh·δ_r over the slab;",
		"\tstore  the group's g·K floats to stores[τ] (rounded to nearest even for bf16) where it is not nil.",
		"",
		"After the last token the slab goes to carry (bf16 routine, when not nil). decay(x) is x + em1·x",
		"(one FMLA) when em1 ≥ −0.5, else eg·x, decided per token (NaN: eg·x). A row's arithmetic depends",
		"on K only (not on T, the group or the storage type). Needs 4·K ≤ 4096 for groups of four (else",
		"single rows) and K ≤ 4096 (the adapter's guard).",
		"",
		"Registers: R0 src group, R1 slab, R2/R3 token's kh/qh, R4/R5 token's v/o at the group, R6 K,",
		"R7 rows left, R8 copy count, R9 form, R10-R13 slab rows, R14/R15 kh/qh pointers, R19 group's row",
		"index·4, R20 tokens left, R21 tok, R22 stores, R23 K counter, R24 group's offset in elements, R25",
		"scratch.")
	e.textFrame(name, slabBytes, size)
	e.op("MOVD", fr.word("K"), vkK)
	e.op("MOVD", fr.word("V"), vkRows)
	e.op("MOVD", fr.base("src"), vkSrc)
	e.op("MOVD", fmt.Sprintf("$slab-%d(SP)", slabBytes), vkSlab)
	e.op("MOVD", imm(0), vkJ4)
	e.op("MOVD", imm(0), vkOff)
	e.op("MOVD", fr.word("T"), vkTmp)
	e.op("CBZ", vkTmp, "done")
	e.op("CBZ", vkK, "done")
	for gi, g := range vkGroups {
		l := fmt.Sprintf("g%d", g)
		next := "done"
		if gi+1 < len(vkGroups) {
			next = fmt.Sprintf("g%d", vkGroups[gi+1])
		}
		e.label(l)
		e.comment("groups of %d rows", g)
		if g > 1 {
			e.op("CMP", imm(slabFloats/g), vkK)
			e.op("BGT", next)
		}
		e.op("CMP", imm(g), vkRows)
		e.op("BLT", next)
		// Copy the group into the slab.
		e.op("MOVD", vkSlab, vkRow(1))
		e.op("LSL", imm(log2(g)), vkK, vkN)
		if st.narrow() {
			e.op("MOVD", fr.base("src32"), vkRow(0))
			e.op("CBZ", vkRow(0), l+"in16")
			e.op("ADD", fmt.Sprintf("%v<<2", vkOff), vkRow(0), vkRow(0))
			copyConsts(e, f32f32, vkTmp)
			copyN(e, f32f32, l+"in32", vkRow(0), vkRow(1), vkN, vkTmp)
			e.op("B", l+"tok0")
			e.label(l + "in16")
		}
		e.op("MOVD", vkSrc, vkRow(0))
		in := st.load()
		copyConsts(e, in, vkTmp)
		copyN(e, in, l+"in", vkRow(0), vkRow(1), vkN, vkTmp)

		e.label(l + "tok0")
		e.op("MOVD", fr.word("T"), vkTau)
		e.op("MOVD", fr.base("tok"), vkTok)
		e.op("MOVD", fr.base("kh"), vkKh)
		e.op("MOVD", fr.base("qh"), vkQh)
		e.op("MOVD", fr.base("v"), vkV)
		e.op("ADD", vkJ4, vkV, vkV)
		e.op("MOVD", fr.base("o"), vkO)
		e.op("ADD", vkJ4, vkO, vkO)
		e.op("MOVD", fr.base("stores"), vkStores)

		e.label(l + "tok")
		scalars(e, vkTok, vkEm1, vkEg)
		formFlag(e, vkEm1, vkForm, Vreg(0))
		slabRows(e, g)
		vkDot(e, g, l+"dot")
		e.op("CBNZ", vkForm, l+"near")
		for fi, fm := range []decayForm{{false, vkEg, "eg"}, {true, vkEm1, "near"}} {
			if fi == 1 {
				e.label(l + "near")
			}
			e.comment("decay %s", map[bool]string{false: "eg·x", true: "x + em1·x"}[fm.near])
			vkAxpy(e, g, fm, l+fm.suffix)
			if fi == 0 {
				e.op("B", l+"store")
			}
		}
		e.label(l + "store")
		e.op("MOVD", mem(vkStores), vkRow(1))
		e.op("CBZ", vkRow(1), l+"next")
		e.op("ADD", fmt.Sprintf("%v<<%d", vkOff, st.shift()), vkRow(1), vkRow(1))
		e.op("MOVD", vkSlab, vkRow(0))
		e.op("LSL", imm(log2(g)), vkK, vkN)
		out := st.store()
		copyConsts(e, out, vkTmp)
		copyN(e, out, l+"st", vkRow(0), vkRow(1), vkN, vkTmp)

		e.label(l + "next")
		e.op("LSL", imm(2), vkK, vkTmp)
		e.op("ADD", vkTmp, vkKh, vkKh)
		e.op("ADD", vkTmp, vkQh, vkQh)
		loadScaled(e, fr, "vs", 2, vkTmp)
		e.op("ADD", vkTmp, vkV, vkV)
		loadScaled(e, fr, "V", 2, vkTmp)
		e.op("ADD", vkTmp, vkO, vkO)
		e.op("ADD", imm(16), vkTok, vkTok)
		e.op("ADD", imm(8), vkStores, vkStores)
		e.op("SUBS", imm(1), vkTau, vkTau)
		e.op("BNE", l+"tok")

		if st.narrow() {
			e.comment("the f32 state after the last token to carry")
			e.op("MOVD", fr.base("carry"), vkRow(1))
			e.op("CBZ", vkRow(1), l+"adv")
			e.op("ADD", fmt.Sprintf("%v<<2", vkOff), vkRow(1), vkRow(1))
			e.op("MOVD", vkSlab, vkRow(0))
			e.op("LSL", imm(log2(g)), vkK, vkN)
			copyN(e, f32f32, l+"cy", vkRow(0), vkRow(1), vkN, vkTmp)
		}
		e.label(l + "adv")
		e.op("LSL", imm(log2(g)), vkK, vkTmp)
		e.op("ADD", fmt.Sprintf("%v<<%d", vkTmp, st.shift()), vkSrc, vkSrc)
		e.op("ADD", vkTmp, vkOff, vkOff)
		e.op("ADD", imm(4*g), vkJ4, vkJ4)
		e.op("SUB", imm(g), vkRows, vkRows)
		e.op("B", l)
	}
	e.label("done")
	e.op("RET")
}

func log2(n int) int {
	for i := 0; ; i++ {
		if 1<<i == n {
			return i
		}
		if 1<<i > n {
			panic(fmt.Sprintf("%d is not a power of two", n))
		}
	}
}
