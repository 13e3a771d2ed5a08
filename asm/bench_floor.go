package main

// Benchmark floors (package bench measures them beside the kernels, see gdn_amd64.go):
//
//	scale<ISA>(x, x, s) (l2.go)                 x[i] *= s: one load–scale–store pass in place, the
//	                                            memory floor of a one-pass state update
//	fmaLoop<ISA>(n int)                         n iterations of 12 independent VFMADD231PS chains
//	                                            on registers: the FMA throughput of the core

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// fmaChains is the number of independent FMA chains of fmaLoop (≥ latency × throughput).
const fmaChains = 12

// fmaLoop emits fmaLoop<ISA>.
func fmaLoop(a isa) {
	routine("fmaLoop"+a.name, NOSPLIT, "func(n int)")
	Doc(fmt.Sprintf("fmaLoop%s runs n iterations of %d independent VFMADD231PS chains (%s; a benchmark floor).", a.name, fmaChains, a.name))
	n := GP64()
	Load(Param("n"), n)
	var acc [fmaChains]VecVirtual
	for i := range acc {
		acc[i] = a.vec()
		a.zero(acc[i])
	}
	x, y := a.vec(), a.vec()
	VBROADCASTSS(cOne, a.view(x))
	VBROADCASTSS(cHalf, a.view(y))
	loop, done := label("fma"), label("fmadone")
	Label(loop)
	TESTQ(n, n)
	JZ(LabelRef(done))
	for i := range acc {
		VFMADD231PS(a.view(x), a.view(y), a.view(acc[i]))
	}
	DECQ(n)
	JMP(LabelRef(loop))
	Label(done)
	// Keep the chains live: sum them into x (not returned; the loop is the measurement).
	for i := range acc {
		VADDPS(a.view(acc[i]), a.view(x), a.view(x))
	}
	VZEROUPPER()
	RET()
}
