package main

import (
	"fmt"

	"github.com/gdnsimd/gdnsimd/asm/internal/stateargs"
)

// The state routines over T tokens (one stateArgs each: asm/internal/stateargs), one generator per
// layout, each parameterised by the storage type: the f32 and the bf16 routine of a layout are the
// same instructions but for the loads of the state before the first token and the stores after a
// token, so a bf16 pool's states are the f32 pool's rounded (SPEC's exact equivalence).
//
// Both layouts keep the part of the state they work on — a column strip of [K][V], a group of rows
// of [V][K] — in float32 in a slab on the stack for all of a call's tokens: it is loaded (widened)
// once, advanced through every token in L1 and stored (rounded) where a token's state is kept.

// slabBytes is the local frame of the routines over T tokens: the slab (16 KiB: a 128×32 strip).
const slabBytes = 16384

// slabFloats is the slab in floats; the adapters in gdn_arm64.go call these routines only for
// K ≤ slabFloats (a [K][V] strip of one column, a [V][K] row).
const slabFloats = slabBytes / 4

// args returns the frame offset of each field of the routines' argument (the stateargs struct,
// passed by value) and its size.
func (st storage) args() (map[string]int, int) {
	off := map[string]int{}
	for _, f := range stateargs.Fields {
		off[f.Name] = stateargs.Offset(f.Name)
	}
	return off, stateargs.Size()
}

// signature is the Go declaration the routine implements (for its doc comment).
func (st storage) signature(name string) string { return "func " + name + "(a stateArgs)" }

// frame is a routine's argument accessor.
type frame map[string]int

// base and word are the operands of a field: a pointer, an int (a_K+0(FP): go vet's asmdecl
// checks them against the Go declaration).
func (f frame) base(n string) string { return arg("a_"+n, f[n]) }
func (f frame) word(n string) string { return arg("a_"+n, f[n]) }

// elem is the operand of float32 element i of an array field (a_tok1_2+144(FP)).
func (f frame) elem(n string, i int) string { return arg(fmt.Sprintf("a_%s_%d", n, i), f[n]+4*i) }

// widenNEON: the widen piece.
func widenNEON(e *emitter) {
	e.doc("func widenNEON(dst []float32, src []uint16)",
		"",
		"dst[i] = the float32 of the bf16 bits src[i] for i < len(dst): eight per iteration (VLD1 of eight",
		"halfwords, VZIP1/VZIP2 with zeros below them), then four, then one at a time.")
	e.text("widenNEON", 48)
	dst, src, n, tmp := Reg(11), Reg(10), Reg(8), Reg(9)
	e.op("MOVD", arg("dst_base", 0), dst)
	e.op("MOVD", arg("dst_len", 8), n)
	e.op("MOVD", arg("src_base", 24), src)
	copyConsts(e, bf16f32, tmp)
	copyN(e, bf16f32, "w", src, dst, n, tmp)
	e.op("RET")
}

// decayForm is the decay of one token: x + em1·x (near) or eg·x.
type decayForm struct {
	near   bool
	em1    Vreg // broadcast em1 (near) or eg
	suffix string
}

// apply replaces x by decay(x): x + em1·x in one FMLA, or eg·x.
func (f decayForm) apply(e *emitter, x Vreg) {
	if f.near {
		e.op("VFMLA", f.em1.S4(), x.S4(), x.S4())
		return
	}
	e.word(fmul(x.S4(), x.S4(), f.em1.S4()))
}

// deltaO computes, lane by lane, δ = beta·(v − decay(kv)) into d and o = decay(qs) + kq·δ into qs
// (v is overwritten), as the T = 1 plan does: x + em1·x fused, v − eg·kv in one FMLS.
func (f decayForm) deltaO(e *emitter, v, kv, qs, d, beta, kq Vreg) {
	if f.near {
		f.apply(e, kv)
		e.word(fsub(v.S4(), v.S4(), kv.S4()))
	} else {
		e.op("VFMLS", f.em1.S4(), kv.S4(), v.S4())
	}
	e.word(fmul(d.S4(), v.S4(), beta.S4()))
	f.apply(e, qs)
	e.op("VFMLA", kq.S4(), d.S4(), qs.S4())
}

// scalars loads the floats at tok+4·i into F-register regs[i] (i: 0 em1, 1 eg, 2 beta, 3 kq; a
// negative register skips one) and broadcasts each.
func scalars(e *emitter, tok Reg, regs ...Vreg) {
	for i, r := range regs {
		if r >= 0 {
			e.op("FMOVS", post(4*i, tok), Freg(r))
		}
	}
	for _, r := range regs {
		if r >= 0 {
			e.op("VDUP", r.S(0), r.S4())
		}
	}
}

// formFlag sets form to 1 for x + em1·x (em1 ≥ −0.5; false for NaN), else 0; tmp is scratch.
func formFlag(e *emitter, em1 Vreg, form Reg, tmp Vreg) {
	e.op("FMOVS", "$(-0.5)", Freg(tmp))
	e.opn("em1 vs −0.5: GE is false for NaN", "FCMPS", Freg(tmp), Freg(em1))
	e.op("CSET", "GE", form)
}

// loadScaled sets dst to the argument word (an element count) times 1<<sh.
func loadScaled(e *emitter, f frame, name string, sh int, dst Reg) {
	e.op("MOVD", f.word(name), dst)
	if sh > 0 {
		e.op("LSL", imm(sh), dst, dst)
	}
}

func routineName(layout string, st storage) string { return fmt.Sprintf("state%s%sNEON", layout, st) }
