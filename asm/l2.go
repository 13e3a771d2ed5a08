package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// --- l2 ---

func l2Routine(a isa) {
	routine("l2"+a.name, NOSPLIT, "func(q, k []float32) (qq, kk, kq float64)")
	Doc(fmt.Sprintf("l2%s is impl.l2 (l2Generic) in %s; see gdn_amd64.go.", a.name, a.name))
	q, k, n := GP64(), GP64(), GP64()
	Load(Param("q").Base(), q)
	Load(Param("k").Base(), k)
	Load(Param("q").Len(), n)
	var qq, kk, kq [2]VecVirtual
	for u := 0; u < 2; u++ {
		qq[u], kk[u], kq[u] = a.vec(), a.vec(), a.vec()
		a.zero(qq[u])
		a.zero(kk[u])
		a.zero(kq[u])
	}
	per := a.lanes / 2
	step := func(u int, off int, mask Register) {
		xq, xk := a.vec(), a.vec()
		cvt(a, Mem{Base: q, Disp: off}, xq, mask)
		cvt(a, Mem{Base: k, Disp: off}, xk, mask)
		VFMADD231PD(xq, xq, qq[u])
		VFMADD231PD(xk, xk, kk[u])
		VFMADD231PD(xq, xk, kq[u])
	}
	loop2, loop1, tail, reduce := label("l2x2"), label("l2x1"), label("l2tail"), label("l2reduce")
	Label(loop2)
	CMPQ(n, U32(2*per))
	JB(LabelRef(loop1))
	step(0, 0, nil)
	step(1, 4*per, nil)
	ADDQ(U32(8*per), q)
	ADDQ(U32(8*per), k)
	SUBQ(U32(2*per), n)
	JMP(LabelRef(loop2))
	Label(loop1)
	CMPQ(n, U32(per))
	JB(LabelRef(tail))
	step(0, 0, nil)
	ADDQ(U32(4*per), q)
	ADDQ(U32(4*per), k)
	SUBQ(U32(per), n)
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(reduce))
	if a.masks {
		tailMask(n, K1)
		step(1, 0, K1)
	} else {
		// Scalar tail into its own XMMs: a VEX scalar op on qq[1]… would clear their upper halves.
		sq, sk, skq := XMM(), XMM(), XMM()
		for _, r := range []VecVirtual{sq, sk, skq} {
			VXORPS(r, r, r)
		}
		scalar := label("l2scalar")
		Label(scalar)
		xq, xk := XMM(), XMM()
		VCVTSS2SD(Mem{Base: q}, xq, xq)
		VCVTSS2SD(Mem{Base: k}, xk, xk)
		VFMADD231SD(xq, xq, sq)
		VFMADD231SD(xk, xk, sk)
		VFMADD231SD(xq, xk, skq)
		ADDQ(U32(4), q)
		ADDQ(U32(4), k)
		DECQ(n)
		JNZ(LabelRef(scalar))
		VADDPD(sq.AsY(), qq[1], qq[1])
		VADDPD(sk.AsY(), kk[1], kk[1])
		VADDPD(skq.AsY(), kq[1], kq[1])
	}
	Label(reduce)
	for i, acc := range [][2]VecVirtual{qq, kk, kq} {
		VADDPD(acc[1], acc[0], acc[0])
		ret, err := ReturnIndex(i).Resolve()
		if err != nil {
			panic(err)
		}
		VMOVSD(hsumPD(a, acc[0]), ret.Addr) // VEX/EVEX: MOVSD cannot name X16–X31
	}
	VZEROUPPER()
	RET()
}

// --- scale ---

// scaleRoutine emits scale<ISA>(dst, src []float32, s float32): dst[i] = src[i]·s for
// i < len(src) (the Go wrapper checks len(dst) ≥ len(src)); one VMULPS per vector, so the bits
// are the Go loop's. The driver scales q and k by their l2 factors with it, and package bench's
// in-place floor is scale(x, x, s).
func scaleRoutine(a isa) {
	routine("scale"+a.name, NOSPLIT, "func(dst, src []float32, s float32)")
	Doc(fmt.Sprintf("scale%s sets dst[i] = src[i]·s for i < len(src) (%s; impl.scale, and a benchmark floor in place).", a.name, a.name))
	d, p, n := GP64(), GP64(), GP64()
	Load(Param("dst").Base(), d)
	Load(Param("src").Base(), p)
	Load(Param("src").Len(), n)
	s := a.vec()
	VBROADCASTSS(paramMem("s"), a.view(s))
	step := 4 * a.lanes
	loop4, loop1, tail, done := label("scale4"), label("scale1"), label("scaletail"), label("scaledone")
	Label(loop4)
	CMPQ(n, U32(4*a.lanes))
	JB(LabelRef(loop1))
	for i := range 4 {
		x := a.vec()
		VMULPS(Mem{Base: p, Disp: i * step}, a.view(s), a.view(x))
		VMOVUPS(a.view(x), Mem{Base: d, Disp: i * step})
	}
	ADDQ(U32(4*step), p)
	ADDQ(U32(4*step), d)
	SUBQ(U32(4*a.lanes), n)
	JMP(LabelRef(loop4))
	Label(loop1)
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(tail))
	x := a.vec()
	VMULPS(Mem{Base: p}, a.view(s), a.view(x))
	VMOVUPS(a.view(x), Mem{Base: d})
	ADDQ(U32(step), p)
	ADDQ(U32(step), d)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(loop1))
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(done))
	if a.masks {
		tailMask(n, K1)
		y := a.vec()
		VMULPS_Z(Mem{Base: p}, s, K1, y)
		VMOVUPS(y, K1, Mem{Base: d})
	} else {
		scalar := label("scalescalar")
		Label(scalar)
		y := XMM()
		VMULSS(Mem{Base: p}, s.AsX(), y)
		VMOVSS(y, Mem{Base: d})
		ADDQ(U8(4), p)
		ADDQ(U8(4), d)
		DECQ(n)
		JNZ(LabelRef(scalar))
	}
	Label(done)
	VZEROUPPER()
	RET()
}
