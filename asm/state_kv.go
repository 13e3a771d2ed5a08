package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// stateRegs are the GP registers of the state routine.
type stateRegs struct {
	sIn, sOut, kh, v, o GPVirtual // sIn, sOut, v, o advance block by block
	k, stride           GPVirtual // K, V·4
	next                Mem       // frame slot: where the write passes prefetch (see prefetchNext)
	wb                  Mem       // frame slot: a guarded span's row bytes (see prefetchSpan)
	// The per-channel gate (oneChannels): the read passes' k̂ and q̂ (rkb, rqb: ch's decayed
	// ones, else kh, qh), where the rows' decay pairs start (cmb) and their step (cinc: 8, or 0
	// with the token's pair for every row), the token's pair (cpair: the decay of Sᵀk̂ and Sᵀq̂),
	// and (AVX2) the address of its m as a vector (mvec) for the δ of rowRead, whose registers
	// are all taken.
	rkb, rqb, cmb, cinc, cpair, mvec Mem
	cpr                              Mem // AVX2's guarded spans: the row pairs' pointer (see rowPairs)
	near                             Mem // frame byte: 1 for the scalar gate with em1 ≥ nearOne (oneForms)
}

// pairPtr is where a write pass's row pairs are: a register, or a frame slot holding it.
type pairPtr struct {
	reg  GPVirtual
	slot Mem
}

// rowPairs returns the pointer to the write pass's first row pair (cmb): in a register, but for
// AVX2's guarded spans, which need every GP register but R15, in the frame (cpr).
func (r stateRegs) rowPairs(a isa, guarded bool) pairPtr {
	cp := GP64()
	MOVQ(r.cmb, cp)
	if a.regs < 32 && guarded {
		MOVQ(cp, r.cpr)
		return pairPtr{slot: r.cpr}
	}
	return pairPtr{reg: cp}
}

// rowPair broadcasts the row's pair into c and m and steps the pointer to the next row's.
func (r stateRegs) rowPair(a isa, pp pairPtr) (c, m VecVirtual) {
	p := pp.reg
	if p == nil {
		p = GP64()
		MOVQ(pp.slot, p)
	}
	c, m = a.vec(), a.vec()
	VBROADCASTSS(Mem{Base: p}, a.view(c))
	VBROADCASTSS(Mem{Base: p, Disp: 4}, a.view(m))
	ADDQ(r.cinc, p)
	if pp.reg == nil {
		MOVQ(p, pp.slot)
	}
	return c, m
}

// oneForms emits body twice behind a branch on the flag the prologue set (once per call): near,
// the scalar gate with em1 ≥ nearOne, whose decays are x + em1·x (one FMA, as before the
// per-channel gate); else the pair form (the scalar gate's eg·x, and the per-channel gate).
// The scalar gate's decode keeps its one FMA a decay where the pair's VAND would cost it 3–5 %
// (avx512, doc/design.md). Both paths continue after the last one.
func oneForms(r stateRegs, body func(d oneDecay)) {
	pair, join := label("pairform"), label("decayed")
	CMPB(r.near, U8(0))
	JE(LabelRef(pair))
	Commentf("The scalar gate, em1 ≥ %g: decay(x) = x + em1·x.", nearOne)
	body(oneDecay{near: true})
	JMP(LabelRef(join))
	Label(pair)
	Comment("Otherwise: decay(x) = c·x + (x & m), the token's pair or row i's (the per-channel gate).")
	body(oneDecay{})
	Label(join)
}

// oneDecay is how one of oneForms' bodies decays: the token's (δ, o) and the rows' (the write
// pass): near, x + em1·x with em1 in c; else the token's pair (c, m) and each row's (rowPair).
type oneDecay struct {
	near bool
	a    isa
	c    VecVirtual
	m    Op
	cp   pairPtr
}

// load loads the token's decay (em1, or its pair) for the pieces of a.
func (d *oneDecay) load(r stateRegs, a isa) {
	d.a, d.c = a, a.vec()
	if d.near {
		VBROADCASTSS(scalarMem("em1"), a.view(d.c))
		return
	}
	d.m = r.tokenPair(a, d.c)
}

// token replaces the piece x by the token's decay of x.
func (d *oneDecay) token(p piece, x VecVirtual) {
	if d.near {
		p.decay(nearForm, d.c, x)
		return
	}
	decayPair(d.a, p, d.c, d.m, x)
}

// rows readies the rows' decays before a write pass (the pointer to the first row's pair).
func (d *oneDecay) rows(r stateRegs, guarded bool) {
	if !d.near {
		d.cp = r.rowPairs(d.a, guarded)
	}
}

// row returns the current row's decay, to apply to its pieces (at the row's start; the pair form
// steps to the next row's pair).
func (d *oneDecay) row(r stateRegs) func(p piece, x VecVirtual) {
	if d.near {
		return func(p piece, x VecVirtual) { p.decay(nearForm, d.c, x) }
	}
	rc, rm := r.rowPair(d.a, d.cp)
	return func(p piece, x VecVirtual) { decayPair(d.a, p, rc, rm, x) }
}

// rowsQInWrite reports whether the single-token routine takes whole rows of 256 columns with Sᵀq̂
// accumulated by the write pass (rowBlock): where the registers cannot hold a row's accumulators
// nor a NOSPLIT frame the rest of them (AVX2; see the package comment for what was measured).
func (a isa) rowsQInWrite() bool { return a.regs < 32 }

// oneFrame is the next offset of stateOne's frame slots (oneLocal): from offset 0 of the routine's
// frame, over the slots of its plan over T tokens (the two plans never run in one call), the
// frame grown where it needs more, so that it stays small enough for NOSPLIT (792 bytes with the
// ABI wrapper's 256).
var oneFrame int

// oneLocal is AllocLocal for stateOne.
func oneLocal(n int) Mem {
	end := AllocLocal(0).Disp
	if oneFrame+n > end {
		AllocLocal(oneFrame + n - end)
	}
	m := AllocLocal(0)
	m.Disp = oneFrame
	oneFrame += n
	return m
}

// scalarMem is the frame address of the token's scalar name (em1, eg, beta or kq) in the T = 1
// plan: stateArgs.tok1.
func scalarMem(name string) Mem {
	for i, n := range []string{"em1", "eg", "beta", "kq"} {
		if n == name {
			return argField("tok1").Offset(4 * i)
		}
	}
	panic("scalarMem: " + name)
}

// oneChannels sets the frame slots of the decays (stateRegs.rkb …) from tok1 and stateArgs.ch,
// once per call: the token's pair, (em1, all ones) where em1 ≥ nearOne, else (eg, the sign bit)
// (also for a NaN em1); with ch the read passes' k̂ and q̂ are ch's and the rows' pairs follow
// them, else they are kh, qh and every row takes the token's pair.
func oneChannels(a isa, r *stateRegs) {
	r.rkb, r.rqb, r.cmb, r.cinc, r.cpair, r.cpr, r.near = oneLocal(8), oneLocal(8), oneLocal(8), oneLocal(8), oneLocal(8), oneLocal(8), oneLocal(8)
	Commentf("The token's decay as a pair (c, m), decay(x) = c·x + (x & m): (em1, all ones) where em1 ≥ %g, else (eg, the sign bit) (also for a NaN em1).", nearOne)
	{
		c, m, sign, x := GP32(), GP32(), GP32(), XMM()
		MOVL(scalarMem("em1"), c)
		MOVL(U32(0xffffffff), m)
		MOVL(U32(0x80000000), sign)
		VMOVSS(scalarMem("em1"), x)
		VUCOMISS(cNearOne, x) // CF: em1 < nearOne or unordered
		SETCC(r.near)
		CMOVLCS(scalarMem("eg"), c)
		CMOVLCS(sign, m)
		MOVL(c, r.cpair)
		MOVL(m, r.cpair.Offset(4))
	}
	if a.rowsQInWrite() {
		r.mvec = oneLocal(8) // the address of the vector: 32 bytes aligned in vec
		vec := oneLocal(64)
		mv := GP64()
		LEAQ(vec, mv)
		ADDQ(U8(31), mv)
		ANDQ(I8(-32), mv)
		y := YMM()
		VBROADCASTSS(r.cpair.Offset(4), y)
		VMOVAPS(y, Mem{Base: mv})
		MOVQ(mv, r.mvec)
	}
	Comment("The read passes' k̂, q̂ and the rows' pairs: the per-channel gate's (ch), else kh, qh and the token's pair.")
	chanBases(r.rkb, r.rqb, r.cmb, r.cinc, func(_, _ GPVirtual) {
		MOVB(U8(0), r.near)
	}, func(_, x GPVirtual) {
		LEAQ(r.cpair, x)
		MOVQ(x, r.cmb)
	})
}

// tokenPair broadcasts c of the token's pair (cpair) into c and returns m as a memory operand
// (no register: δ and o of a block take them all): AVX-512 its scalar (embedded broadcast), AVX2
// the vector in the frame (mvec).
func (r stateRegs) tokenPair(a isa, c VecVirtual) (m Op) {
	VBROADCASTSS(r.cpair, a.view(c))
	if a.rowsQInWrite() {
		mv := GP64()
		MOVQ(r.mvec, mv)
		return Mem{Base: mv}
	}
	return r.cpair.Offset(4)
}

// stateOne emits the T = 1 plan of a [K][V] f32 routine over T tokens (dst1 not nil: one token
// with a store, decode): whole rows streamed from src to dst1, as stateGeneric computes them, and
// the routine's return. Reference, with sIn = src, sOut = dst1 (which may be src), em1, eg, beta,
// kq = tok1:
//
//	decay(x) := x + em1·x (fused: one rounding)   if em1 ≥ −0.5
//	            eg·x                              otherwise (also for a NaN em1)
//	for j := range V:
//		kv, qs := Σ_i kh[i]·sIn[i*V+j], Σ_i qh[i]·sIn[i*V+j]
//		d := beta·(v[j] − decay(kv));  o[j] = decay(qs) + kq·d
//		for i := range K: sOut[i*V+j] = decay(sIn[i*V+j]) + kh[i]·d
//
// AVX-512: column blocks of 256 (whole rows up to V = 256), then one block of the rest: 8 ZMM at V
// mod 256 = 128, 4 at 64, else a span of 1–16 ZMM (state_kv_span.go), the last masked; each block
// with one read pass and one write pass over its slab. AVX2: whole rows of 256 columns (then of
// 128 and 64), Sᵀq̂ accumulated by the write pass, then blocks of 32 and 16 columns and a span.
// Every decay is the pair form of the routines over T tokens, decay(x) = c·x + (x & m) (one
// rounding; chanForm): the token's pair (c, m) for Sᵀk̂ and Sᵀq̂, and for row i the token's pair,
// or with ch (the per-channel gate: em1 = −1, eg = 1) the read passes' k̂, q̂ from ch and row i's
// own pair (oneChannels). Any K: nothing is kept in the work space.
func stateOne(a isa) {
	oneFrame = 0
	r := stateRegs{
		sIn: GP64(), sOut: GP64(), kh: GP64(), v: GP64(), o: GP64(), k: GP64(), stride: GP64(),
	}
	loadArg("src", r.sIn)
	loadArg("dst1", r.sOut)
	loadArg("kh", r.kh)
	loadArg("v", r.v)
	loadArg("o", r.o)
	loadArg("K", r.k)
	rem := GP64()
	loadArg("V", rem)
	done := label("done")
	TESTQ(r.k, r.k)
	JZ(LabelRef(done))
	TESTQ(rem, rem)
	JZ(LabelRef(done))
	MOVQ(rem, r.stride)
	SHLQ(U8(2), r.stride) // row stride in bytes
	// The columns left, in the frame: the write passes need every register but R15 (-dynlink).
	remMem := oneLocal(8)
	MOVQ(rem, remMem)
	Comment("Hint: the next head's v (the caller's v usually continues with it).")
	prefetchAfter(r.v, rem)
	r.next = oneLocal(8)
	{
		nx := GP64()
		MOVQ(r.k, nx)
		IMULQ(r.stride, nx)
		ADDQ(r.sIn, nx)
		MOVQ(nx, r.next) // the byte after the head: the next head, if the caller has one
	}
	oneChannels(a, &r)

	r.wb = oneLocal(8)
	if a.rowsQInWrite() {
		lane := oneLocal(32)
		// Whole rows of 256 columns, then of 128 and 64 (see rowBlocks), then spans of at most 32
		// columns for the last V mod 64.
		acc := GP64()
		LEAQ(oneLocal(rowLocal), acc)
		ADDQ(U8(31), acc)
		ANDQ(I8(-32), acc)
		rowBlocks(r, remMem, acc)
		Commentf("Then blocks of %d columns, of %d, and a span of less than %d columns (cutWidth).", a.lanes*a.blockVecs, a.lanes*narrowSpan, a.lanes*(narrowSpan+1))
		loop := label("spans")
		Label(loop)
		wd := GP64()
		MOVQ(remMem, wd)
		TESTQ(wd, wd)
		JZ(LabelRef(done))
		Commentf("A block of %d columns (V mod 64 ≥ 32): %d full vectors, no guard.", a.lanes*a.blockVecs, a.blockVecs)
		narrow := label("narrow")
		CMPQ(wd, U32(a.lanes*a.blockVecs))
		JB(LabelRef(narrow))
		stateBlock(r, fixedSpan(a, fullBlock(a)), Mem{})
		advance(r, a.bytes()*a.blockVecs)
		SUBQ(U32(a.lanes*a.blockVecs), remMem)
		JMP(LabelRef(loop))
		Label(narrow)
		cutWidth(a, wd)
		Commentf("A block of %d columns (V = 80: the 16 after 64): %d full vectors, no guard.", a.lanes*narrowSpan, narrowSpan)
		spans := label("span")
		CMPQ(wd, U32(a.lanes*narrowSpan))
		JNE(LabelRef(spans))
		stateBlock(r, fixedSpan(a, vecBlock(a.lanes, narrowSpan)), Mem{})
		advance(r, a.bytes()*narrowSpan)
		SUBQ(U32(a.lanes*narrowSpan), remMem)
		JMP(LabelRef(loop))
		Label(spans)
		n := splitWidth(a, wd, lane)
		wdMem := oneLocal(8)
		MOVQ(wd, wdMem)
		SHLQ(U8(2), wd)
		MOVQ(wd, r.wb)
		// The last block: what is left is below 24 columns and not 16.
		stateBlock(r, guardedSpan(a, narrowSpan, 0, n, wdMem, &lane), Mem{})
		JMP(LabelRef(done))
	} else {
		local := oneLocal(stateLocal)
		blockCols := a.lanes * a.blockVecs
		Commentf("Blocks of %d columns.", blockCols)
		loop, tail := label("full"), label("tail")
		Label(loop)
		CMPQ(remMem, U32(blockCols))
		JB(LabelRef(tail))
		stateBlock(r, fixedSpan(a, fullBlock(a)), local)
		advance(r, 4*blockCols)
		SUBQ(U32(blockCols), remMem)
		JMP(LabelRef(loop))

		Label(tail)
		rem = GP64()
		MOVQ(remMem, rem)
		TESTQ(rem, rem)
		JZ(LabelRef(done))
		// The model widths (V mod 256 = 64, 128): unmasked vectors, no guard.
		for _, nv := range modelVecs {
			next := label("notmodel")
			CMPQ(rem, U32(nv*a.lanes))
			JNE(LabelRef(next))
			stateBlock(r, fixedSpan(a, vecBlock(a.lanes, nv)), local)
			JMP(LabelRef(done))
			Label(next)
		}
		n := splitWidth(a, rem, Mem{})
		SHLQ(U8(2), rem)
		MOVQ(rem, r.wb)
		// The spans: full vectors [lo, hi] guarded from fixed on, then the masked one (1–16 columns).
		ranges := stateSpans(a)
		labs := make([]string, len(ranges))
		for k, rg := range ranges {
			labs[k] = label(fmt.Sprintf("span%d", a.lanes*(rg[1]+1)))
			if k < len(ranges)-1 {
				CMPQ(n, U32(a.lanes*(rg[1]+1)))
				JB(LabelRef(labs[k]))
			}
		}
		// The widest span first: the comparisons fall through to it.
		for k := len(ranges) - 1; k >= 0; k-- {
			rg := ranges[k]
			Label(labs[k])
			Commentf("Tail of %d to %d columns.", a.lanes*rg[0]+1, a.lanes*(rg[1]+1))
			stateBlock(r, guardedSpan(a, rg[1], rg[0], n, Mem{}, nil), local)
			JMP(LabelRef(done))
		}
	}

	Label(done)
	VZEROUPPER()
	RET()
}

// frameAcc reports whether a block keeps the accumulators of its vectors from regVecs on in the
// frame (AVX-512: 16-ZMM blocks); otherwise all are in registers (AVX2: a span of 5 YMM, 10
// accumulators).
func (a isa) frameAcc() bool { return a.regVecs < a.blockVecs }

// modelVecs are the AVX-512 tails of the model widths (V mod 256 = 64, 128), fixed blocks of
// unmasked vectors (full unrolls where the models are). Through the spans, whose guards they
// would pass without a branch taken, they ran 3–4 % slower (64 and 192; A/B in one process).
// Every other width takes a span: V = 192's block took 400 lines, the odd V = 80's 210 (for 1–2 %
// of its decode).
var modelVecs = []int{8, 4}

// stateSpans are the AVX-512 tail spans of the single-token routine: [fixed, full] full vectors
// (then the masked one), in ascending order, together covering 0 to blockVecs − 1.
func stateSpans(a isa) [][2]int { return [][2]int{{0, 4}, {5, 15}} }

// advance moves the block pointers by n bytes.
func advance(r stateRegs, n int) {
	ADDQ(U32(n), r.sIn)
	ADDQ(U32(n), r.sOut)
	ADDQ(U32(n), r.v)
	ADDQ(U32(n), r.o)
}

// rowRegsK and rowRegsQ are the numbers of YMM accumulators of rowBlock that stay in registers:
// 13 of Sᵀk̂ in the read pass (beside k̂_i and a temporary; δ needs em1 or c, beta and v beside
// them, the pair form's m from the frame), 11 of Sᵀq̂ in the write pass (beside em1, k̂_i, q̂_i,
// the state vector and a temporary; 10 in the pair form, whose row pair takes two).
// rowLocal is the frame for the other Sᵀq̂ of a 16-YMM sub-block, 32-byte aligned
// (small enough for NOSPLIT, which keeps the routine free of the stack-check prologue and its TLS
// access, which -dynlink executables cannot link).
const (
	rowRegsK = 13
	rowRegsQ = 11
	rowLocal = (16-rowRegsQ+1)*32 + 32
)

// rowSubs are the AVX2 blocks of whole rows (rowBlocks): 256 columns (in a loop), then 128 and 64
// (V mod 256 = 192 takes both: its own block took 276 lines), as sub-blocks of YMM.
var rowSubs = [][]int{{16, 16}, {16}, {8}}

// rowBlocks emits the AVX2 blocks of whole rows of 8·Σsubs columns (at most 32 YMM) for every
// entry of rowSubs, taken while the columns left (remMem) allow: the read pass accumulates only
// Sᵀk̂, over whole rows, 13 YMM in registers and the rest in the block's part of o; δ replaces
// Sᵀk̂ in o (rowRead); then each sub-block of subs[c] YMM (16 or 8) has a write pass that also
// accumulates Sᵀq̂ from the state it re-reads (the same products, in the same order, as a
// read-pass accumulation), 11 YMM in registers (10 in the pair form) and the rest in acc, and
// ends with o = decay(Sᵀq̂) + kq·δ over δ (rowWrite). δ and each sub-block's write pass and o are
// emitted for both bodies (oneForms). The write pass of a width is emitted once, after the blocks, for
// all of them: a block jumps to it with its continuation's number in a frame slot, and it
// jumps back by that number (a few compares, once per sub-block).
func rowBlocks(r stateRegs, remMem Mem, acc GPVirtual) {
	ret := oneLocal(8)
	type call struct {
		id   int
		back string
	}
	calls := map[int][]call{} // by sub-block width
	entry := map[int]string{16: label("rwrite16"), 8: label("rwrite8")}
	id := 0
	for _, subs := range rowSubs {
		n := 0
		for _, m := range subs {
			n += m
		}
		loop, next := label(fmt.Sprintf("rows%d", 8*n)), label("rowsdone")
		Label(loop)
		CMPQ(remMem, U32(8*n))
		JB(LabelRef(next))
		rowRead(r, n)
		for _, m := range subs {
			id++
			c := call{id, label("rback")}
			calls[m] = append(calls[m], c)
			Commentf("Write pass over %d YMM (rowWrite), back to %s.", m, c.back)
			MOVQ(U32(id), ret)
			JMP(LabelRef(entry[m]))
			Label(c.back)
		}
		// rowWrite advanced sIn, sOut and o.
		ADDQ(U32(32*n), r.v)
		SUBQ(U32(8*n), remMem)
		if n == 32 {
			JMP(LabelRef(loop))
		}
		Label(next)
	}
	after := label("rowsend")
	JMP(LabelRef(after))
	for _, m := range []int{16, 8} {
		Label(entry[m])
		rowWrite(r, m, acc)
		x := GP64()
		MOVQ(ret, x)
		cs := calls[m]
		for _, c := range cs[:len(cs)-1] {
			CMPQ(x, U32(c.id))
			JE(LabelRef(c.back))
		}
		JMP(LabelRef(cs[len(cs)-1].back))
	}
	Label(after)
}

// rowRead emits the read pass of a block of whole rows of n YMM and δ (see rowBlocks).
func rowRead(r stateRegs, n int) {
	Commentf("Rows of %d columns: read pass, Sᵀk̂ of YMM ≥ %d in o.", 8*n, rowRegsK)
	slotO := func(t int) Mem { return Mem{Base: r.o, Disp: 32 * t} }
	nk := min(n, rowRegsK)
	if n > nk {
		Commentf("Zero the Sᵀk̂ of YMM %d–%d in o (a loop: once per block).", nk, n-1)
		zy, po, c := YMM(), GP64(), GP64()
		VXORPS(zy, zy, zy)
		LEAQ(slotO(nk), po)
		MOVQ(U32(n-nk), c)
		zl := label("rzero")
		Label(zl)
		VMOVUPS(zy, Mem{Base: po})
		ADDQ(U8(32), po)
		DECQ(c)
		JNZ(LabelRef(zl))
	}
	accK := make([]VecVirtual, nk)
	for t := range accK {
		accK[t] = YMM()
		VXORPS(accK[t], accK[t], accK[t])
	}
	ymm := piece{w: 8}
	p, i, rk := GP64(), GP64(), GP64()
	MOVQ(r.sIn, p)
	XORQ(i, i)
	MOVQ(r.rkb, rk)
	read := label("rread")
	Label(read)
	bk := YMM()
	VBROADCASTSS(Mem{Base: rk, Index: i, Scale: 4}, bk)
	for t := 0; t < n; t++ {
		if t < nk {
			VFMADD231PS(Mem{Base: p, Disp: 32 * t}, bk, accK[t])
			continue
		}
		m := YMM()
		VMOVUPS(slotO(t), m)
		VFMADD231PS(Mem{Base: p, Disp: 32 * t}, bk, m)
		VMOVUPS(m, slotO(t))
	}
	ADDQ(r.stride, p)
	INCQ(i)
	CMPQ(i, r.k)
	JB(LabelRef(read))

	oneForms(r, func(dk oneDecay) {
		Comment("δ = beta·(v − decay(Sᵀk̂)), in o (the pair form's m from the frame).")
		beta := YMM()
		dk.load(r, avx2)
		VBROADCASTSS(scalarMem("beta"), beta)
		delta := func(ak VecVirtual, vm, om Mem) {
			dk.token(ymm, ak)
			vt := YMM()
			VMOVUPS(vm, vt)
			VSUBPS(ak, vt, ak)
			VMULPS(ak, beta, ak)
			VMOVUPS(ak, om)
		}
		for t := 0; t < nk; t++ {
			delta(accK[t], Mem{Base: r.v, Disp: 32 * t}, slotO(t))
		}
		if n > nk {
			Commentf("YMM %d–%d from o (a loop: once per block).", nk, n-1)
			po, pv, k := GP64(), GP64(), GP64()
			LEAQ(slotO(nk), po)
			LEAQ(Mem{Base: r.v, Disp: 32 * nk}, pv)
			MOVQ(U32(n-nk), k)
			dl := label("rdelta")
			Label(dl)
			ak := YMM()
			VMOVUPS(Mem{Base: po}, ak)
			delta(ak, Mem{Base: pv}, Mem{Base: po})
			ADDQ(U8(32), po)
			ADDQ(U8(32), pv)
			DECQ(k)
			JNZ(LabelRef(dl))
		}
	})
}

// rowWrite emits the write pass of a sub-block of m YMM at sIn, sOut and o (see rowBlocks), and
// advances the three by its width.
func rowWrite(r stateRegs, m int, acc GPVirtual) {
	slotO := func(t int) Mem { return Mem{Base: r.o, Disp: 32 * t} }
	ymm := piece{w: 8}
	oneForms(r, func(dk oneDecay) {
		// The pair form's row pair takes one more register: one more Sᵀq̂ in the frame.
		nq := min(m, rowRegsQ)
		if !dk.near {
			nq = min(m, rowRegsQ-1)
		}
		Commentf("Write pass over %d YMM, Sᵀq̂ of YMM ≥ %d in the frame.", m, nq)
		slotQ := func(t int) Mem { return Mem{Base: acc, Disp: 32 * (t - nq)} }
		if m > nq {
			zy := YMM()
			VXORPS(zy, zy, zy)
			for t := nq; t < m; t++ {
				VMOVAPS(zy, slotQ(t))
			}
		}
		accQ := make([]VecVirtual, nq)
		for t := range accQ {
			accQ[t] = YMM()
			VXORPS(accQ[t], accQ[t], accQ[t])
		}
		p, i := GP64(), GP64()
		Comment("S' = decay_i(S) + k̂_i·δ.")
		dk.a = avx2
		if dk.near {
			dk.load(r, avx2)
		}
		q := GP64()
		MOVQ(r.sIn, p)
		MOVQ(r.sOut, q)
		XORQ(i, i)
		dk.rows(r, false)
		write := label("rwrite")
		Label(write)
		prefetchNext(r, 32*m)
		bk2, bq := YMM(), YMM()
		VBROADCASTSS(Mem{Base: r.kh, Index: i, Scale: 4}, bk2)
		rq := GP64() // q̂'s base, from the frame every row (every other GP register is taken)
		MOVQ(r.rqb, rq)
		VBROADCASTSS(Mem{Base: rq, Index: i, Scale: 4}, bq)
		decay := dk.row(r)
		for t := 0; t < m; t++ {
			y := YMM()
			VMOVUPS(Mem{Base: p, Disp: 32 * t}, y)
			if t < nq {
				VFMADD231PS(y, bq, accQ[t])
			} else {
				a := YMM()
				VMOVAPS(slotQ(t), a)
				VFMADD231PS(y, bq, a)
				VMOVAPS(a, slotQ(t))
			}
			decay(ymm, y)
			VFMADD231PS(slotO(t), bk2, y)
			VMOVUPS(y, Mem{Base: q, Disp: 32 * t})
		}
		ADDQ(r.stride, p)
		ADDQ(r.stride, q)
		INCQ(i)
		CMPQ(i, r.k)
		JB(LabelRef(write))

		Comment("o = decay(Sᵀq̂) + kq·δ over δ.")
		kq := YMM()
		if !dk.near {
			dk.load(r, avx2)
		}
		VBROADCASTSS(scalarMem("kq"), kq)
		for t := 0; t < m; t++ {
			ot := YMM()
			if t < nq {
				ot = accQ[t]
			} else {
				VMOVAPS(slotQ(t), ot)
			}
			dk.token(ymm, ot)
			VFMADD231PS(slotO(t), kq, ot)
			VMOVUPS(ot, slotO(t))
		}
	})
	ADDQ(U32(32*m), r.sIn)
	ADDQ(U32(32*m), r.sOut)
	ADDQ(U32(32*m), r.o)
}

// prefetchNext emits, in a row of a write pass that writes n bytes, PREFETCHT1 of the lines at
// r.next, r.next + 256, ... below r.next + n, and advances r.next by n: over the write passes of a
// head it walks the K·V·4 bytes after the head in order, one line in four, so that memory keeps
// streaming the next head while the write pass runs from L2 (see the package comment for what
// was measured). The caller's state usually has the next head right there; past the end of the
// state these are hints about memory that may not be ours, which never fault or change anything.
func prefetchNext(r stateRegs, n int) {
	nx := GP64()
	MOVQ(r.next, nx)
	for o := 0; o < n; o += 256 {
		PREFETCHT1(Mem{Base: nx, Disp: o})
	}
	ADDQ(U32(n), r.next)
}

// prefetchAfter emits PREFETCHT1 of the 512 bytes after the n float32s at p: the next head's
// vector of a [B][HV][V] input (z, v), read by the next call after this head's ≈ 3 µs of state
// traffic. Those 512 bytes came from memory when the call needed them, stalling it (the gate was
// 5 % of a B = 64 step); past the end of the input they are hints that never fault.
func prefetchAfter(p, n GPVirtual) {
	t := GP64()
	LEAQ(Mem{Base: p, Index: n, Scale: 4}, t)
	for l := 0; l < 8; l++ {
		PREFETCHT1(Mem{Base: t, Disp: 64 * l})
	}
}

// stateBlock emits one column block: the read pass, then, once per body (oneForms), δ and o and
// the write pass. The accumulators of pieces from a.regVecs on live in local (Sᵀk̂, then
// Sᵀq̂ and later δ, 64 bytes each per piece).
func stateBlock(r stateRegs, s span, local Mem) {
	a, ps := s.a, s.ps
	nreg := len(ps)
	if a.frameAcc() {
		nreg = min(nreg, a.regVecs)
	}
	if s.guarded() {
		Commentf("Block of %d–%d columns: read pass (Sᵀk̂, Sᵀq̂ of %d vectors in registers).", a.lanes*s.fixed+1, a.lanes*len(ps), nreg)
	} else {
		Commentf("Block of %d columns: read pass (Sᵀk̂, Sᵀq̂ of %d vectors in registers).", width(ps), nreg)
	}
	// accK[t], accQ[t]: the accumulators of piece t, nil for one in the frame (slotK, slotQ): the
	// pieces from nreg on, but a guarded span keeps its masked vector (always live) in registers
	// and one more full vector in the frame (live only in the widest of its blocks).
	inFrame := func(t int) bool { return t >= nreg }
	if s.guarded() && nreg < len(ps) {
		inFrame = func(t int) bool { return t >= nreg-1 && t < len(ps)-1 }
	}
	accK := make([]VecVirtual, len(ps))
	accQ := make([]VecVirtual, len(ps))
	var frame []int // the pieces in the frame, in slot order
	for t := range ps {
		if inFrame(t) {
			frame = append(frame, t)
			continue
		}
		accK[t], accQ[t] = a.vec(), a.vec()
		a.zero(accK[t])
		a.zero(accQ[t])
	}
	var slot GPVirtual
	slotOf := func(t int) int { return t - frame[0] }
	slotK := func(t int) Mem { return Mem{Base: slot, Disp: 128 * slotOf(t)} }
	slotQ := func(t int) Mem { return Mem{Base: slot, Disp: 128*slotOf(t) + 64} }
	if len(frame) > 0 {
		slot = GP64()
		LEAQ(local, slot)
		ADDQ(U8(63), slot)
		ANDQ(I8(-64), slot)
		z := a.vec()
		a.zero(z)
		for _, t := range frame {
			VMOVAPS(z.AsZ(), slotK(t))
			VMOVAPS(z.AsZ(), slotQ(t))
		}
	}
	p, i := GP64(), GP64()
	MOVQ(r.sIn, p)
	XORQ(i, i)
	// k̂ and q̂ of the read pass from their frame slots: AVX2 reloads their bases every row (its
	// guarded spans need every GP register but R15), AVX-512 keeps them in registers.
	var rk, rq GPVirtual
	if a.regs >= 32 {
		rk, rq = GP64(), GP64()
		MOVQ(r.rkb, rk)
		MOVQ(r.rqb, rq)
	}
	read := label("read")
	Label(read)
	bk, bq := a.vec(), a.vec()
	for _, b := range []struct {
		base GPVirtual
		slot Mem
		dst  VecVirtual
	}{{rk, r.rkb, bk}, {rq, r.rqb, bq}} {
		base := b.base
		if base == nil {
			base = GP64()
			MOVQ(b.slot, base)
		}
		VBROADCASTSS(Mem{Base: base, Index: i, Scale: 4}, b.dst)
	}
	x := a.vec()
	ool := s.each(func(t int, pc piece) {
		pc.load(pc.at(p, 4), x)
		if accK[t] != nil {
			pc.fma(x, bk, accK[t])
			pc.fma(x, bq, accQ[t])
			return
		}
		// Whole ZMM in the frame: the masked-out lanes of x are zero.
		m := a.vec()
		VMOVAPS(slotK(t), m.AsZ())
		VFMADD231PS(x.AsZ(), bk.AsZ(), m.AsZ())
		VMOVAPS(m.AsZ(), slotK(t))
		VMOVAPS(slotQ(t), m.AsZ())
		VFMADD231PS(x.AsZ(), bq.AsZ(), m.AsZ())
		VMOVAPS(m.AsZ(), slotQ(t))
	})
	ADDQ(r.stride, p)
	INCQ(i)
	CMPQ(i, r.k)
	JB(LabelRef(read))
	ool()

	oneForms(r, func(dk oneDecay) { stateBlockWrite(r, s, dk, accK, accQ, slotK, slotQ, p, i) })
}

// stateBlockWrite emits the rest of a column block after its read pass: δ and o from the
// accumulators (the token's pair), then the write pass (each row's pair).
func stateBlockWrite(r stateRegs, s span, dk oneDecay, accK, accQ []VecVirtual, slotK, slotQ func(int) Mem, p, i GPVirtual) {
	a := s.a
	Comment("δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ.")
	beta, kq := a.vec(), a.vec()
	dk.load(r, a)
	VBROADCASTSS(scalarMem("beta"), beta)
	VBROADCASTSS(scalarMem("kq"), kq)
	// In place: δ replaces Sᵀk̂ in its registers (or its Sᵀq̂ slot), o is formed in Sᵀq̂'s.
	d := accK
	s.each(func(t int, pc piece) {
		ak, aq := a.vec(), a.vec()
		if accK[t] != nil {
			ak, aq = accK[t], accQ[t]
		} else {
			VMOVAPS(slotK(t), ak.AsZ())
			VMOVAPS(slotQ(t), aq.AsZ())
		}
		dk.token(pc, ak)
		vt := a.vec()
		pc.load(pc.at(r.v, 4), vt)
		pc.sub(vt, ak, ak)
		pc.mul(ak, beta, ak)
		dk.token(pc, aq)
		pc.fma(ak, kq, aq)
		pc.store(aq, pc.at(r.o, 4))
		if accK[t] == nil {
			VMOVAPS(ak.AsZ(), slotQ(t))
		}
	})()

	Comment("Write pass: S' = c_i·S + (S & m_i) + k̂_i·δ over the same slab, (c_i, m_i) row i's pair.")
	q := GP64()
	MOVQ(r.sIn, p)
	MOVQ(r.sOut, q)
	XORQ(i, i)
	dk.rows(r, s.guarded())
	write := label("write")
	Label(write)
	if s.guarded() {
		prefetchSpan(r, 4*a.lanes*len(s.ps))
	} else {
		prefetchNext(r, 4*width(s.ps))
	}
	bk2, y := a.vec(), a.vec()
	VBROADCASTSS(Mem{Base: r.kh, Index: i, Scale: 4}, bk2)
	decay := dk.row(r)
	ool := s.each(func(t int, pc piece) {
		pc.load(pc.at(p, 4), y)
		decay(pc, y)
		if d[t] != nil {
			pc.fma(d[t], bk2, y)
		} else {
			VFMADD231PS(slotQ(t), bk2.AsZ(), y.AsZ())
		}
		pc.store(y, pc.at(q, 4))
	})
	ADDQ(r.stride, p)
	ADDQ(r.stride, q)
	INCQ(i)
	CMPQ(i, r.k)
	JB(LabelRef(write))
	ool()
}

// prefetchSpan is prefetchNext for a guarded span, whose row is at most max bytes: the lines at
// r.next, r.next + 256, ... below r.next + max, and r.next advances by the block's row bytes
// (r.wb), so that the walk over the next head is the same as for a block of that width.
func prefetchSpan(r stateRegs, max int) {
	nx := GP64()
	MOVQ(r.next, nx)
	for o := 0; o < max; o += 256 {
		PREFETCHT1(Mem{Base: nx, Disp: o})
	}
	ADDQ(r.wb, nx)
	MOVQ(nx, r.next)
}
