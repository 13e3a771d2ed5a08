package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// gdn_generic.go, SPEC Part A).
const nearOne = -0.5

// form is one of the two decays of SPEC Part A: decay(x) = x + em1·x, fused into one rounding,
// when em1 ≥ nearOne (a decay near 1 keeps its digits), else eg·x (a strong decay keeps its
// relative accuracy). param is the scalar parameter the form multiplies by.
type form struct {
	near  bool
	param string
}

var (
	nearForm = form{near: true, param: "em1"}
	farForm  = form{near: false, param: "eg"}
)

// of returns decay(x) as text, for comments.
func (f form) of(x string) string {
	if f.near {
		return x + " + em1·" + x
	}
	return "eg·" + x
}

// eachForm emits body once per form behind a branch on the flag the prologue set (once per
// call): the form is chosen per column block, outside every loop, so a loop body is the same
// length in either form. Both paths continue after the last one.
func eachForm(r stateRegs, body func(f form)) {
	far, join := label("far"), label("decayed")
	CMPB(r.near, U8(0))
	JE(LabelRef(far))
	Commentf("em1 ≥ %g: decay(x) = %s.", nearOne, nearForm.of("x"))
	body(nearForm)
	JMP(LabelRef(join))
	Label(far)
	Commentf("em1 < %g or NaN: decay(x) = %s.", nearOne, farForm.of("x"))
	body(farForm)
	Label(join)
}
