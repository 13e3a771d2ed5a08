package main

// Benchmark floors (package bench measures them beside the kernels, see gdn_vk_amd64.go):
//
//	scaleInPlace<ISA>(x []float32, s float32)   x[i] *= s: one load–scale–store pass in place, the
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

// scaleInPlace emits scaleInPlace<ISA>.
func scaleInPlace(a isa) {
	routine("scaleInPlace"+a.name, NOSPLIT, "func(x []float32, s float32)")
	Doc(fmt.Sprintf("scaleInPlace%s sets x[i] = x[i]·s (%s; a benchmark floor).", a.name, a.name))
	p, n := GP64(), GP64()
	Load(Param("x").Base(), p)
	Load(Param("x").Len(), n)
	s := a.vec()
	VBROADCASTSS(paramMem("s"), a.view(s))
	step := 4 * a.lanes
	loop, tail, scalar, done := label("scale"), label("scaletail"), label("scalescalar"), label("scaledone")
	Label(loop)
	CMPQ(n, U32(4*a.lanes))
	JB(LabelRef(tail))
	for i := range 4 {
		x := a.vec()
		VMULPS(Mem{Base: p, Disp: i * step}, a.view(s), a.view(x))
		VMOVUPS(a.view(x), Mem{Base: p, Disp: i * step})
	}
	ADDQ(U32(4*step), p)
	SUBQ(U32(4*a.lanes), n)
	JMP(LabelRef(loop))
	Label(tail)
	Label(scalar)
	TESTQ(n, n)
	JZ(LabelRef(done))
	x := XMM()
	VMULSS(Mem{Base: p}, s.AsX(), x)
	VMOVSS(x, Mem{Base: p})
	ADDQ(U8(4), p)
	DECQ(n)
	JMP(LabelRef(scalar))
	Label(done)
	VZEROUPPER()
	RET()
}

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
