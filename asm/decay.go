package main

import "github.com/gdnsimd/gdnsimd/asm/internal/gates64consts"

// nearOne is the em1 from which the state decays as x + em1·x rather than eg·x (SPEC Part A;
// the one value, tied to the library's by gates64consts' test).
const nearOne = gates64consts.NearOne

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
