package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// --- chans ---

// chansRoutine emits impl.chans (chansGeneric) for the whole vectors of n = len(em1) channels
// (the Go wrapper, chansChecked, runs the rest): per channel i, its decay form c, m (chanForm:
// em1 and all ones where em1 ≥ nearOne, else eg and the sign bit, a NaN em1 far), k̂ and q̂
// decayed by it without a fused multiply-add, as chansGeneric rounds them,
//
//	kx[i] = float32(c·kh[i]) + (kh[i] & m),  qx[i] likewise,  pairs[2i], pairs[2i+1] = c, m
//
// the pairs interleaved by unpacks and lane shuffles.
func chansRoutine(a isa) {
	name := "chans" + a.name
	routine(name, NOSPLIT, "func(kx, qx, pairs, em1, eg, kh, qh []float32)")
	Doc(fmt.Sprintf("%s is impl.chans (chansGeneric) in %s for whole vectors; see gdn_amd64.go.", name, a.name))
	names := []string{"kx", "qx", "pairs", "em1", "eg", "kh", "qh"}
	p := map[string]GPVirtual{}
	for _, n := range names {
		p[n] = GP64()
		Load(Param(n).Base(), p[n])
	}
	n, i := GP64(), GP64()
	Load(Param("em1").Len(), n)
	XORQ(i, i)
	at := func(s string) Mem { return Mem{Base: p[s], Index: i, Scale: 1} }
	v := func(r VecVirtual) Register {
		if a.evex {
			return r.AsZ()
		}
		return r.AsY()
	}
	near := a.vec()
	VBROADCASTSS(cNearOne, v(near))
	loop, done := label("loop"), label("done")
	Label(loop)
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(done))
	e, g, c, m := a.vec(), a.vec(), a.vec(), a.vec()
	VMOVUPS(at("em1"), v(e))
	VMOVUPS(at("eg"), v(g))
	Comment("c = em1 where em1 ≥ nearOne (ordered: NaN far), else eg; m = all ones there, else the sign bit.")
	if a.evex {
		VCMPPS(U8(0x1d), v(near), v(e), K1) // GE_OQ
		VBLENDMPS(v(e), v(g), K1, v(c))
		VMOVUPS(cSign, v(m))
		VPTERNLOGD(U8(0xff), v(m), v(m), K1, v(m))
	} else {
		VCMPPS(U8(0x1d), v(near), v(e), v(m)) // GE_OQ
		VBLENDVPS(v(m), v(e), v(g), v(c))
		VORPS(cSign, v(m), v(m))
	}
	Comment("kx = c·kh (rounded) + (kh & m), qx likewise.")
	for _, s := range [][2]string{{"kh", "kx"}, {"qh", "qx"}} {
		x, t := a.vec(), a.vec()
		VMOVUPS(at(s[0]), v(x))
		VMULPS(v(c), v(x), v(t))
		if a.evex {
			VPANDD(v(m), v(x), v(x)) // (VANDPS on a ZMM is AVX512DQ)
		} else {
			VANDPS(v(m), v(x), v(x))
		}
		VADDPS(v(x), v(t), v(t))
		VMOVUPS(v(t), at(s[1]))
	}
	Comment("pairs: c and m interleaved.")
	lo, hi := a.vec(), a.vec()
	VUNPCKLPS(v(m), v(c), v(lo)) // c0 m0 c1 m1 | c4 m4 c5 m5 | …
	VUNPCKHPS(v(m), v(c), v(hi)) // c2 m2 c3 m3 | c6 m6 c7 m7 | …
	out := Mem{Base: p["pairs"], Index: i, Scale: 2}
	if a.evex {
		VSHUFF32X4(U8(0x44), v(hi), v(lo), v(c)) // lo0 lo1 hi0 hi1
		VSHUFF32X4(U8(0xd8), v(c), v(c), v(c))   // lo0 hi0 lo1 hi1
		VSHUFF32X4(U8(0xee), v(hi), v(lo), v(m)) // lo2 lo3 hi2 hi3
		VSHUFF32X4(U8(0xd8), v(m), v(m), v(m))   // lo2 hi2 lo3 hi3
	} else {
		VPERM2F128(U8(0x20), v(hi), v(lo), v(c)) // lo.lo hi.lo
		VPERM2F128(U8(0x31), v(hi), v(lo), v(m)) // lo.hi hi.hi
	}
	VMOVUPS(v(c), out)
	VMOVUPS(v(m), out.Offset(a.bytes()))
	ADDQ(U32(a.bytes()), i)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()
}
