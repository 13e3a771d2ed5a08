package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"

	gc "github.com/gdnsimd/gdnsimd/asm/internal/gates64consts"
)

// --- gates ---

// The float64 gates (gates.go): gates<ISA>(beta, em1, eg, b, a, dtb []float32, rate []float64, form
// uint8, lb float64), a lane per element of a, 8 lanes a ZMM (AVX-512) or 4 a YMM (AVX2) of float64. Every
// lane's operations are gatesGeneric's, in its order: each Go product or sum one instruction, each math.FMA one FMA, the Go
// code's branches as selects of both sides (compares are ordered: NaN takes the else side, as
// in Go), min and max ordered so that a NaN operand is the result, as Go's are. So the bits are
// gatesGeneric's. AVX-512: whole vectors, then one masked vector; AVX2: whole vectors, then a lane
// at a time in lane 0.

var (
	cg64Lo, cg64Hi, cg64Magic, cg64Log2e, cg64Ln2Hi, cg64Ln2Lo, cg64Half, cg64Bias Mem
	cg64One, cg64Two, cg64Twenty, cg64Ln2Half, cg64Sign, cg64Zero, cg64Tiny        Mem
	cg64Exp                                                                        [len(gc.ExpP)]Mem
	cg64Log1p                                                                      [len(gc.Log1pP)]Mem
	cg64Expm1                                                                      [len(gc.Expm1P)]Mem
)

// splat64 declares a 64-byte constant holding v in each of its 8 qwords: a m256 operand, or a m64
// broadcast source.
func splat64(name string, v uint64) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < 8; i++ {
		DATA(8*i, U64(v))
	}
	return m
}

func splatF64(name string, f float64) Mem { return splat64(name, math.Float64bits(f)) }

func gatesConstants() {
	cg64Lo, cg64Hi = splatF64("g64lo", gc.Lo), splatF64("g64hi", gc.Hi)
	cg64Magic, cg64Log2e = splatF64("g64magic", gc.Magic), splatF64("g64log2e", gc.Log2e)
	cg64Ln2Hi, cg64Ln2Lo = splatF64("g64ln2hi", gc.Ln2Hi), splatF64("g64ln2lo", gc.Ln2Lo)
	cg64Half, cg64Bias = splatF64("g64half", gc.Half), splat64("g64bias", gc.Bias)
	cg64One, cg64Two = splatF64("g64one", 1), splatF64("g64two", 2)
	cg64Twenty, cg64Ln2Half = splatF64("g64twenty", gc.Twenty), splatF64("g64ln2half", gc.Ln2Half)
	cg64Sign, cg64Zero = splat64("g64sign", 1<<63), splat64("g64zero", 0)
	cg64Tiny = splatF64("g64tiny", gc.Tiny)
	for i, c := range gc.ExpP {
		cg64Exp[i] = splatF64(fmt.Sprintf("g64exp%d", i), c)
	}
	for i, c := range gc.Log1pP {
		cg64Log1p[i] = splatF64(fmt.Sprintf("g64log1p%d", i), c)
	}
	for i, c := range gc.Expm1P {
		cg64Expm1[i] = splatF64(fmt.Sprintf("g64expm1%d", i), c)
	}
}

// g64 emits the float64 lanes of one vector of gates: a ZMM of 8 float64 (AVX-512) or a YMM of
// 4 (the isa's widest register, vec and view); lo and hi hold exp64's clamps, one holds 1 (set
// once per routine).
type g64 struct {
	isa
	lo, hi, one VecVirtual
}

// c emits an instruction whose first source is the splat constant m (withC: the broadcast form on
// ZMM) and whose other operands are ops (registers in the isa's view).
func (g g64) c(plain, bcst func(...Op), m Mem, ops ...Op) {
	withC(ops[0].(Register), plain, bcst, append([]Op{m}, ops...)...)
}

// splat sets r to the constant m in every lane.
func (g g64) splat(m Mem, r VecVirtual) { VBROADCASTSD(m, g.view(r)) }

// horner sets p = (…(c[0]·x + c[1])·x + …)·x + c[n−1], an FMA each: math.FMA(p, x, c).
func (g g64) horner(cs []Mem, x, p VecVirtual) {
	g.splat(cs[0], p)
	for _, c := range cs[1:] {
		g.c(VFMADD213PD, VFMADD213PD_BCST, c, g.view(x), g.view(p))
	}
}

// pow2 turns t = k + Magic into 2^k in place: (bits + Bias) << 52.
func (g g64) pow2(t VecVirtual) {
	g.c(VPADDQ, VPADDQ_BCST, cg64Bias, g.view(t), g.view(t))
	VPSLLQ(U8(52), g.view(t), g.view(t))
}

// exp sets y = exp64(x) (x is kept).
func (g g64) exp(x, y VecVirtual) {
	v := g.view
	xc, t, k, p, t1, u := g.vec(), g.vec(), g.vec(), g.vec(), g.vec(), g.vec()
	// min(max(x, lo), hi): VMAXPD and VMINPD return their second source (Intel's order; avo's
	// first operand) when either is NaN, so a NaN x is the result, as with Go's min and max.
	VMAXPD(v(x), v(g.lo), v(xc))
	VMINPD(v(xc), v(g.hi), v(xc))
	g.splat(cg64Magic, t)
	g.c(VFMADD231PD, VFMADD231PD_BCST, cg64Log2e, v(xc), v(t))   // t = FMA(x, log2e, Magic)
	g.c(VSUBPD, VSUBPD_BCST, cg64Magic, v(t), v(k))              // k = t − Magic
	g.c(VFNMADD231PD, VFNMADD231PD_BCST, cg64Ln2Hi, v(k), v(xc)) // r = FMA(−k, ln2Hi, x)
	g.c(VFNMADD231PD, VFNMADD231PD_BCST, cg64Ln2Lo, v(k), v(xc)) // r = FMA(−k, ln2Lo, r)
	g.horner(cg64Exp[:], xc, p)
	g.splat(cg64Magic, t1)
	g.c(VFMADD231PD, VFMADD231PD_BCST, cg64Half, v(k), v(t1)) // t1 = FMA(k, 0.5, Magic)
	g.c(VSUBPD, VSUBPD_BCST, cg64Magic, v(t1), v(u))          // t1 − Magic
	VSUBPD(v(u), v(k), v(u))                                  // k − (t1 − Magic)
	g.c(VADDPD, VADDPD_BCST, cg64Magic, v(u), v(u))           // t2
	g.pow2(t1)
	g.pow2(u)
	VMULPD(v(t1), v(p), v(p))
	VMULPD(v(u), v(p), v(y))
}

// log1p sets l = log1p01(y) (y is kept).
func (g g64) log1p(y, l VecVirtual) {
	v := g.view
	s, w, p, s2 := g.vec(), g.vec(), g.vec(), g.vec()
	g.c(VADDPD, VADDPD_BCST, cg64Two, v(y), v(s)) // 2 + y
	VDIVPD(v(s), v(y), v(s))                      // s = y/(2 + y)
	VADDPD(v(s), v(s), v(s2))
	VMULPD(v(s), v(s), v(w))
	g.horner(cg64Log1p[:], w, p)
	VMULPD(v(w), v(s2), v(w))      // s2·w
	VFMADD213PD(v(s2), v(w), v(p)) // FMA(s2·w, p, s2)
	VMOVAPD(v(p), v(l))
	// y below Tiny: l = y (LT_OQ: false for NaN)
	if g.evex {
		VCMPPD_BCST(U8(0x11), cg64Tiny, v(y), K2)
		VMOVAPD(v(y), K2, v(l))
	} else {
		VCMPPD(U8(0x11), cg64Tiny, v(y), v(w))
		VBLENDVPD(v(w), v(y), v(l), v(l))
	}
}

// lanes emits gatesGeneric for one vector of lanes: ld(i, r) sets r to input i (0–2: b, a, dt_bias)
// widened to float64, or (3) to the float64 rates; st(i, r) stores output i (0–2: beta, em1, eg)
// from float64. beta only when b is not empty, the log-decay of the gate form (GateForm: 0
// softplus, 1 bounded by lb): branches on the arguments, the same way for every vector.
func (g g64) lanes(ld func(int, VecVirtual), st func(int, VecVirtual)) {
	v := g.view
	// beta = 1/(1 + exp64(−b)), unless len(b) = 0
	noBeta := label("nobeta")
	bl, err := Param("b").Len().Resolve()
	if err != nil {
		panic(err)
	}
	CMPQ(bl.Addr, U8(0))
	JE(LabelRef(noBeta))
	b, nb, e := g.vec(), g.vec(), g.vec()
	ld(0, b)
	g.c(VXORPD, VPXORQ_BCST, cg64Sign, v(b), v(nb))
	g.exp(nb, e)
	VADDPD(v(g.one), v(e), v(e))
	VDIVPD(v(e), v(g.one), v(e))
	st(0, e)
	Label(noBeta)
	// x = a + dt
	a, dt, x, rate, gg := g.vec(), g.vec(), g.vec(), g.vec(), g.vec()
	ld(1, a)
	ld(2, dt)
	VADDPD(v(dt), v(a), v(x))
	ld(3, rate)
	softplus, decayed := label("softplus"), label("logdecay")
	CMPB(paramMem("form"), U8(gc.FormBounded))
	JNE(LabelRef(softplus))
	{
		// g = lb/(1 + exp64(−rate·x))
		y, e, lbv := g.vec(), g.vec(), g.vec()
		VMULPD(v(x), v(rate), v(y))
		g.c(VXORPD, VPXORQ_BCST, cg64Sign, v(y), v(y))
		g.exp(y, e)
		VADDPD(v(g.one), v(e), v(e))
		VBROADCASTSD(paramMem("lb"), v(lbv))
		VDIVPD(v(e), v(lbv), v(gg))
		JMP(LabelRef(decayed))
	}
	Label(softplus)
	// sp = max(x, 0) + log1p01(exp64(−|x|)), or x where x > 20
	nax, y, l, sp := g.vec(), g.vec(), g.vec(), g.vec()
	g.c(VORPD, VPORQ_BCST, cg64Sign, v(x), v(nax))
	g.exp(nax, y)
	g.log1p(y, l)
	if g.evex {
		VCMPPD_BCST(U8(0x1e), cg64Zero, v(x), K2) // x > 0 (GT_OQ: false for NaN)
		VMOVAPD_Z(v(x), K2, v(sp))
		VADDPD(v(l), v(sp), v(sp))
		VCMPPD_BCST(U8(0x1e), cg64Twenty, v(x), K2) // x > 20
		VMOVAPD(v(x), K2, v(sp))
	} else {
		m := g.vec()
		VXORPD(v(m), v(m), v(m))
		VCMPPD(U8(0x1e), v(m), v(x), v(m)) // x > 0
		VANDPD(v(x), v(m), v(sp))
		VADDPD(v(l), v(sp), v(sp))
		VCMPPD(U8(0x1e), cg64Twenty, v(x), v(m)) // x > 20
		VBLENDVPD(v(m), v(x), v(sp), v(sp))
	}
	// g = −rate·sp
	g.c(VXORPD, VPXORQ_BCST, cg64Sign, v(rate), v(rate))
	VMULPD(v(sp), v(rate), v(gg))
	Label(decayed)
	// g ≥ ln 0.5: em1 = expm1Near(g), eg = 1 + em1; else eg = exp64(g), em1 = eg − 1
	em1, eg1, eg2, em2 := g.vec(), g.vec(), g.vec(), g.vec()
	g.horner(cg64Expm1[:], gg, em1)
	VMULPD(v(em1), v(gg), v(em1))
	VADDPD(v(g.one), v(em1), v(eg1))
	g.exp(gg, eg2)
	VSUBPD(v(g.one), v(eg2), v(em2))
	if g.evex {
		VCMPPD_BCST(U8(0x1d), cg64Ln2Half, v(gg), K3) // g ≥ ln 0.5 (GE_OQ)
		VMOVAPD(v(em1), K3, v(em2))
		VMOVAPD(v(eg1), K3, v(eg2))
	} else {
		m := g.vec()
		VCMPPD(U8(0x1d), cg64Ln2Half, v(gg), v(m))
		VBLENDVPD(v(m), v(em1), v(em2), v(em2))
		VBLENDVPD(v(m), v(eg1), v(eg2), v(eg2))
	}
	st(1, em2)
	st(2, eg2)
}

// gatesRoutine emits gates<ISA>, impl.gates (gatesGeneric): whole vectors of lanes, then AVX-512
// one masked vector, AVX2 a lane at a time (lane 0 of a vector, the others 0).
func gatesRoutine(a isa) {
	name := "gates" + a.name
	routine(name, NOSPLIT, "func(beta, em1, eg, b, a, dtb []float32, rate []float64, form uint8, lb float64)")
	Doc(fmt.Sprintf("%s is impl.gates (gatesGeneric) in %s; see gdn_amd64.go.", name, a.name))
	var p [7]GPVirtual
	for i, n := range []string{"b", "a", "dtb", "rate", "beta", "em1", "eg"} {
		p[i] = GP64()
		Load(Param(n).Base(), p[i])
	}
	n, i := GP64(), GP64()
	Load(Param("a").Len(), n)
	XORQ(i, i)
	g := g64{isa: a}
	g.lo, g.hi, g.one = g.vec(), g.vec(), g.vec()
	g.splat(cg64Lo, g.lo)
	g.splat(cg64Hi, g.hi)
	g.splat(cg64One, g.one)
	L := a.lanes / 2 // float64 lanes
	at := func(j int) Mem { return Mem{Base: p[j], Index: i, Scale: 1} }
	rateAt := Mem{Base: p[3], Index: i, Scale: 2} // i counts float32 bytes
	// narrow rounds r's float64 lanes to float32 in its low half (a.vkHalf(r)).
	narrow := func(r VecVirtual) {
		if a.evex {
			VCVTPD2PS(r.AsZ(), r.AsY())
		} else {
			VCVTPD2PSY(r.AsY(), r.AsX())
		}
	}
	full := func() {
		g.lanes(func(j int, r VecVirtual) {
			if j == 3 {
				VMOVUPD(rateAt, g.view(r))
				return
			}
			cvt(a, at(j), r, nil)
		},
			func(j int, r VecVirtual) {
				narrow(r)
				VMOVUPS(a.vkHalf(r), at(4+j))
			})
	}
	loop, tail, done := label("loop"), label("tail"), label("done")
	Label(loop)
	CMPQ(n, U32(L))
	JB(LabelRef(tail))
	full()
	ADDQ(U32(4*L), i)
	SUBQ(U32(L), n)
	JMP(LabelRef(loop))
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(done))
	if a.evex {
		tailMask(n, K1)
		g.lanes(func(j int, r VecVirtual) {
			if j == 3 {
				VMOVUPD_Z(rateAt, K1, r.AsZ())
				return
			}
			cvt(a, at(j), r, K1)
		},
			func(j int, r VecVirtual) {
				narrow(r)
				VMOVUPS(r.AsY(), K1, at(4+j))
			})
	} else {
		one := label("one")
		Label(one)
		g.lanes(func(j int, r VecVirtual) {
			if j == 3 {
				VMOVSD(rateAt, r.AsX())
				return
			}
			VMOVSS(at(j), r.AsX())
			VCVTPS2PD(r.AsX(), r.AsY())
		}, func(j int, r VecVirtual) {
			narrow(r)
			VMOVSS(r.AsX(), at(4+j))
		})
		ADDQ(U32(4), i)
		DECQ(n)
		JNZ(LabelRef(one))
	}
	Label(done)
	VZEROUPPER()
	RET()
}
