package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// widenRoutine emits widen<ISA>, impl.widen (widenGeneric): dst[i] = the float32 of the bf16
// bits src[i] for i < len(dst), a zero extension and a shift by 16 per lane; full vectors, then
// AVX-512: one masked vector; AVX2: an XMM of 4, then scalars.
func widenRoutine(a isa) {
	name := "widen" + a.name
	lab := func(p string) string { return fmt.Sprintf("%s_%s", name, p) }
	routine(name, NOSPLIT, "func(dst []float32, src []uint16)")
	Doc(fmt.Sprintf("%s is impl.widen (widenGeneric) in %s; see gdn_amd64.go.", name, a.name))
	d, s, n := GP64(), GP64(), GP64()
	Load(Param("dst").Base(), d)
	Load(Param("src").Base(), s)
	Load(Param("dst").Len(), n)
	loop, tail, done := lab("loop"), lab("tail"), lab("done")
	full := piece{w: a.lanes}
	Label(loop)
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(tail))
	x := a.vec()
	widenPiece(full, Mem{Base: s}, x)
	full.store(x, Mem{Base: d})
	ADDQ(U32(2*a.lanes), s)
	ADDQ(U32(4*a.lanes), d)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(loop))
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(done))
	if a.masks {
		tailMask(n, K1)
		m := piece{w: 16, mask: K1}
		x := a.vec()
		widenPiece(m, Mem{Base: s}, x)
		m.store(x, Mem{Base: d})
	} else {
		scalar := lab("scalar")
		CMPQ(n, U32(4))
		JB(LabelRef(scalar))
		x4 := piece{w: 4}
		x := a.vec()
		widenPiece(x4, Mem{Base: s}, x)
		x4.store(x, Mem{Base: d})
		ADDQ(U32(8), s)
		ADDQ(U32(16), d)
		SUBQ(U32(4), n)
		JZ(LabelRef(done))
		Label(scalar)
		r := GP32()
		MOVWLZX(Mem{Base: s}, r)
		SHLL(U8(16), r)
		MOVL(r, Mem{Base: d})
		ADDQ(U32(2), s)
		ADDQ(U32(4), d)
		DECQ(n)
		JNZ(LabelRef(scalar))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

// widenPiece loads the piece's bf16 elements at m into x as float32 (masked lanes zero).
func widenPiece(pc piece, m Mem, x VecVirtual) {
	switch {
	case pc.w == 16 && pc.mask != nil:
		VPMOVZXWD_Z(m, pc.mask, x.AsZ())
	case pc.w == 16:
		VPMOVZXWD(m, x.AsZ())
	case pc.w == 8:
		VPMOVZXWD(m, x.AsY())
	case pc.w == 4:
		VPMOVZXWD(m, x.AsX())
	default:
		r := GP32()
		MOVWLZX(m, r)
		VMOVD(r, x.AsX())
	}
	VPSLLD(U8(16), pc.view(x), pc.view(x))
}
