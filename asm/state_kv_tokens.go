package main

// The [K][V] state routines over T tokens: stateKV<storage><ISA>, one stateArgs each
// (asm/internal/stateargs; the T = 1 plan when dst1 is set: state_kv.go).
//
// # Structure
//
// The columns are cut into blocks of at most kvBlockVecs vectors (64 columns for AVX-512, 32 for
// AVX2; fewer when K is large, so that K rows of a block fit kvWork bytes). AVX-512: the full
// block of 4 ZMM, then blocks of 1–3 ZMM, the last masked (each the full block of some K: ≤ 170,
// ≤ 256, ≤ 512; or a tail: the odd 96×80's is 1 ZMM), all fixed: a span would save nothing.
// AVX2: the full block of 4 YMM, a block of 16 columns (the odd shape's tail), both fixed, and one
// span (state_kv_span.go) for every other width: 2 full YMM guarded and a VMASKMOVPS one for the
// last w mod 8 (blocks of 24–31 columns are cut to 16), which replaced 1–3 YMM and 7 narrow
// shapes of an XMM and scalars. A guard never taken still cost 1–3 % in these loops (they are
// short: their per-row work is a few vectors), hence the fixed shapes where the models are. A
// block lives in the work (kvWork bytes, in L1) for all of the call's tokens:
//
//	pass 0:      load the block from src (widened for bf16; from src32 when it is given) into
//	             the work, accumulating token 0's Sᵀk̂ and Sᵀq̂ on the way
//	per token τ: δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ from the accumulators, then
//	             one pass over the work rows: S' = decay(S) + k̂_i·δ, written back, and accumulated
//	             into token τ+1's Sᵀk̂ and Sᵀq̂ (the read pass of the next token, fused); the row is
//	             also stored to stores[τ] (rounded for bf16) when that is not nil, and to the
//	             carry after the last token (bf16); the pass of the last token writes neither
//	             work nor the dots, its rows going from the registers to the store (but AVX2's
//	             guarded span: its 16 registers cannot hold the row's guarded pieces)
//
// Every product and sum is the single-token routine's (stateRoutine), in its order: Sᵀk̂_j and
// Sᵀq̂_j accumulate row after row from zero with one FMA each, decay(x) is VFMADD213 (x + em1·x)
// or VMUL (eg·x), δ = (v − decay(Sᵀk̂))·beta, o = decay(Sᵀq̂) + δ·kq, S' = decay(S) + δ·k̂_i (an
// FMA). So a call of T tokens gives the bits of T single-token calls, and a bf16 store is the
// rounding of the f32 routine's state. The decay form is chosen per token (em1 ≥ −0.5; NaN takes
// eg·x) as a pair (c, m), decay(x) = c·x + (x & m) (one VAND and one FMA: (em1, all ones) gives
// x + em1·x, (eg, the sign bit) eg·x, the same bits), and the per-channel gate (stateArgs.ch)
// gives each row its own pair: one pass for every form and gate.
//
// The block lives in work: kvWork bytes from the first 64-byte boundary of stateArgs.work, the
// [workFloats]float32 that asmCell (tokens_asm.go) allocates once per worker's Scratch. Not in the
// frame: a frame that large needs the stack-check prologue, whose TLS access -dynlink builds
// cannot link. K above a.kvMaxK() does not fit: the routine's maxK (gofile) sends such heads to the
// portable routine.

import (
	"fmt"

	"github.com/gdnsimd/gdnsimd/asm/internal/stateargs"
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// kvWork is the work space of a column block, K rows of at most kvBlockVecs vectors: the
// stateargs.WorkFloats the library allocates (gdn_args.go's workFloats), less its 64 bytes of
// alignment.
const kvWork = 4 * (stateargs.WorkFloats - 16)

// kvAhead is how many rows ahead of pass 0's row its prefetches go.
const kvAhead = 32

// kvBlockVecs is the most vectors per row of a column block.
const kvBlockVecs = 4

// kvGen is the state of one routine's generation: its labels are scoped by its name, so adding a
// routine renumbers no other.
type kvGen struct {
	variant

	// frame slots
	work                          Mem // aligned pointer to the block
	cols, j0, wcols, nvb, rb      Mem // V − j0 left, the block's first column, its width, vectors per full block, its row bytes in work
	tau, kp, knp, qnp, vp, op, tp Mem // per token: τ, k̂_τ, k̂_τ+1, q̂_τ+1, v_τ + j0, o_τ + j0, tok_τ
	dslots                        Mem // δ of the block's vectors (deltaInFrame), at dp: its first 32-byte boundary
	dp                            GPVirtual
	lane                          Mem // AVX2: the VMASKMOVPS lane mask of the block's last w mod 8 columns
	// AVX2 bf16: the last w mod 8 bf16 columns (see widenTail, storeTail): the mask of their
	// pairs (dwords), of the word of the last one, the VPSHUFB control that moves that word to
	// word 0, its index less the masked vector's, and 16 bytes for a rounded vector.
	pairs, last, shuf, lastOff, tmp Mem
	pf                              prefetchList // the driver's rows of its next call: a group per token pass
	nx                              nextState    // the driver's next call's state: lines per row of a token pass
	near                            bool         // emitting the near body (nearBody): decay(x) = x + em1·x, one FMA
	nt                              Mem          // 1 while this token's rows go to its store non-temporally (see ntSpan)
	fin                             Mem          // bf16: 0 when this token's δ of the block are finite (finiteDelta)
	// The read pass's vectors and the rows' decays (perChannel): the bases of token 0's k̂ and q̂
	// of the read pass (kh, qh, or ch's), their stride in bytes from one token to the next, the
	// row step of the decays' pointer in bytes (0: the token's pair for every row, or 8: ch's
	// pairs c_i, m_i), token 0's pairs and this token's, and the token's pair (c, m; see tokenPair).
	rkb, rqb, rstr, cinc, cmb, cmp, cpair, cpr Mem
}

// Non-temporal snapshot stores. Every routine over T tokens writes a token's rows to its store
// with non-temporal stores when they are whole aligned vectors (ntSpan; the flag's set-up in
// snapshotFlag; the snapshot rule of gdn_amd64.go's table, variant.snap in gostubs.go, says where): every store but the last token's after a token
// without one. Those are snapshots (speculative verification: one per token), which nothing reads
// soon, and with ordinary stores every line of theirs is first read from memory (the
// write-allocate), as much traffic again as the writes; the one store of a prefill or decode call
// (the last token's) is the state the next call reads, which stays in the caches.

// ntSpan reports whether every piece of s is a whole vector (one a mask may cut, AVX-512), so that
// the span's rows can go to a store with whole non-temporal vectors when V is a multiple of the
// lanes (the masks are then full).
func ntSpan(a isa, s span) bool {
	if s.guarded() {
		return false
	}
	for _, pc := range s.ps {
		if pc.w != a.lanes || pc.lane != nil || pc.idx != nil {
			return false
		}
	}
	return true
}

// kvVecs are the vectors per row of the column blocks' shapes: AVX-512 1, 2 and 4 (maskedLast),
// AVX2 1 … kvBlockVecs (the full block's width; its blocks are the 4-vector one, the 2-vector one
// and a span).
func kvVecs(a isa) []int {
	if a.maskedLast() {
		return []int{1, 2, kvBlockVecs}
	}
	var v []int
	for nv := 1; nv <= kvBlockVecs; nv++ {
		v = append(v, nv)
	}
	return v
}

// deltaInFrame reports whether a token's pass keeps δ in the frame (AVX2: its 16 registers hold
// the 2·5 accumulators of the next token, the decay constant, k̂_i, k̂_i+1, q̂_i+1 and the row's
// vector) rather than in registers.
func (v variant) deltaInFrame() bool { return v.a.regs < 32 }

// stateKVTokens emits the [K][V] routine of variant vr over T tokens (an f32 routine's T = 1
// plan first: stateOne), its columns block by block (maskedBlocks, spanBlocks; block).
func stateKVTokens(vr variant) {
	g := &kvGen{variant: vr}
	a := vr.a
	routine(g.name(), NOSPLIT, stateSig)
	Doc(fmt.Sprintf("%s is the [K][V] state routine over T tokens in %s; see gdn_amd64.go.", g.name(), a.name))
	g.frame()
	if !vr.st.narrow() {
		// One token with a store (decode, dst1 set): the T = 1 plan, whole rows, no work space (stateOne).
		tokens := label("tokens")
		CMPQ(argField("dst1"), U8(0))
		JE(LabelRef(tokens))
		stateOne(a)
		Label(tokens)
	}
	done := label("done")
	k, v, t := GP64(), GP64(), GP64()
	loadArg("K", k)
	loadArg("V", v)
	loadArg("T", t)
	TESTQ(k, k)
	JZ(LabelRef(done))
	TESTQ(v, v)
	JZ(LabelRef(done))
	TESTQ(t, t)
	JZ(LabelRef(done))
	MOVQ(v, g.cols)
	w := GP64()
	loadArg("work", w)
	ADDQ(U8(63), w)
	ANDQ(I8(-64), w)
	MOVQ(w, g.work)
	g.perChannel()
	g.pf = newPrefetchList()
	g.nx = newNextState()
	g.nt = AllocLocal(8)
	if vr.st.finiteRound() {
		g.fin = AllocLocal(8)
	}
	Commentf("K > %d does not fit work: the Go wrapper never calls with it.", a.kvMaxK())
	CMPQ(k, U32(a.kvMaxK()))
	JA(LabelRef(done))
	Commentf("Columns per full block: %d × the most vectors (%v) whose K rows fit %d bytes.", a.lanes, kvVecs(a), kvWork)
	{
		q, n := GP64(), GP64()
		MOVQ(U32(a.lanes), q)
		for _, nv := range kvVecs(a)[1:] {
			MOVQ(U32(a.lanes*nv), n)
			CMPQ(k, U32(kvWork/(4*a.lanes*nv)))
			CMOVQLS(n, q)
		}
		MOVQ(q, g.nvb)
	}
	XORQ(w, w)
	MOVQ(w, g.j0)

	Comment("Column blocks: min(V − j0, the full block's columns) each, one span for all.")
	blocks := label("blocks")
	Label(blocks)
	wd := GP64()
	MOVQ(g.cols, wd)
	TESTQ(wd, wd)
	JZ(LabelRef(done))
	{
		x := GP64()
		MOVQ(g.nvb, x)
		CMPQ(wd, x)
		CMOVQCC(x, wd)
	}
	next := label("blockdone")
	if a.maskedLast() {
		g.maskedBlocks(wd, next)
	} else {
		g.spanBlocks(wd, next)
	}
	Label(next)
	{
		x := GP64()
		MOVQ(g.wcols, x)
		ADDQ(x, g.j0)
		SUBQ(x, g.cols)
	}
	JMP(LabelRef(blocks))
	Label(done)
	SFENCE() // the non-temporal stores ordered before the caller's next stores
	VZEROUPPER()
	RET()
}

// frame allocates the routine's first frame slots (the rest: perChannel and stateKVTokens).
func (g *kvGen) frame() {
	g.work, g.cols, g.j0, g.wcols, g.nvb, g.rb = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.tau, g.kp, g.knp, g.qnp, g.vp, g.op, g.tp = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	if g.deltaInFrame() {
		g.dslots = AllocLocal(32*kvBlockVecs + 32)
	}
	if !g.a.masks {
		g.lane = AllocLocal(32)
	}
	if g.narrowBF16() {
		g.pairs, g.last, g.shuf, g.lastOff, g.tmp = AllocLocal(16), AllocLocal(16), AllocLocal(16), AllocLocal(8), AllocLocal(16)
	}
}

// maskedBlocks emits the column block of wd columns (at most the full block's) with masks
// (a.maskedLast, AVX-512), on to next after it.
func (g *kvGen) maskedBlocks(wd GPVirtual, next string) {
	a := g.a
	// 1, 2 or 4 ZMM, the last masked: the full blocks of every K (4: K ≤ 128, 2: ≤ 256, 1: ≤
	// 512) and every tail, one of 33–48 columns as 2 ZMM and then 1 (three ZMM, the full block
	// of K ≤ 170 only, took 480 lines of stateKVf32AVX512 and 1,140 of stateKVbf16AVX512).
	{
		x, c := GP64(), GP64()
		MOVQ(wd, x)
		SUBQ(U8(2*a.lanes+1), x)
		MOVQ(U32(2*a.lanes), c)
		CMPQ(x, U8(a.lanes-1))
		CMOVQLS(c, wd) // 33 ≤ wd ≤ 48: 32
	}
	MOVQ(wd, g.wcols)
	n := splitWidth(a, wd, g.lane)
	Commentf("%v ZMM, the last masked (every full block, every tail), no guard.", kvVecs(a))
	nvs := kvVecs(a)
	var labs []string
	for _, nv := range nvs {
		labs = append(labs, label(fmt.Sprintf("masked%d", nv)))
	}
	for t, nv := range nvs[:len(nvs)-1] {
		CMPQ(n, U32(a.lanes*(nv-1)))
		JE(LabelRef(labs[t]))
	}
	JMP(LabelRef(labs[len(nvs)-1]))
	for t, nv := range nvs {
		Label(labs[t])
		g.block(fixedSpan(a, maskedBlock(nv)))
		if t < len(nvs)-1 {
			JMP(LabelRef(next))
		}
	}
}

// spanBlocks emits the column block of wd columns (at most the full block's) without masks
// (AVX2): the fixed block of kvBlockVecs vectors, the fixed one of narrowSpan, and the span for
// every other width; on to next after the fixed ones, into next after the span.
func (g *kvGen) spanBlocks(wd GPVirtual, next string) {
	a := g.a
	MOVQ(wd, g.wcols)
	Commentf("A block of %d columns (the full one when K ≤ %d): %d full vectors.", a.lanes*kvBlockVecs, kvWork/(4*a.lanes*kvBlockVecs), kvBlockVecs)
	spanLab := label("span")
	CMPQ(wd, U32(a.lanes*kvBlockVecs))
	JNE(LabelRef(spanLab))
	g.block(fixedSpan(a, vecBlock(a.lanes, kvBlockVecs)))
	JMP(LabelRef(next))
	Label(spanLab)
	cutWidth(a, wd)
	MOVQ(wd, g.wcols)
	Commentf("A block of %d columns (V = 80: the 16 after 64): %d full vectors, no guard.", a.lanes*narrowSpan, narrowSpan)
	spanLab = label("span")
	CMPQ(wd, U32(a.lanes*narrowSpan))
	JNE(LabelRef(spanLab))
	g.block(fixedSpan(a, vecBlock(a.lanes, narrowSpan)))
	JMP(LabelRef(next))
	Label(spanLab)
	n := splitWidth(a, wd, g.lane)
	Commentf("Any other block (1–23 columns): %d full vectors guarded, then the masked one.", narrowSpan)
	{
		Commentf("Row bytes in work: whole vectors.")
		x := GP64()
		MOVQ(wd, x)
		ADDQ(U8(a.lanes-1), x)
		ANDQ(I8(-a.lanes), x)
		SHLQ(U8(2), x)
		MOVQ(x, g.rb)
	}
	if g.narrowBF16() {
		g.narrowMasks(wd, n)
	}
	g.block(guardedSpan(a, narrowSpan, 0, n, g.wcols, &g.lane))
}

// block emits one column block, the span s at column g.j0: pass 0, then every token.
func (g *kvGen) block(s span) {
	a, ps := g.a, s.ps
	Commentf("Block of up to %d columns (rows in work of whole vectors): pass 0 loads it, with token 0's read.", a.lanes*len(ps))
	accK, accQ := make([]VecVirtual, len(ps)), make([]VecVirtual, len(ps))
	for t := range ps {
		accK[t], accQ[t] = a.vec(), a.vec()
	}
	k := GP64()
	loadArg("K", k)
	j0 := GP64()
	MOVQ(g.j0, j0)
	g.loadBlock(s, accK, accQ, k, j0)

	Comment("The tokens.")
	g.tokenPointers(j0)
	tokens := label("token")
	Label(tokens)
	g.pf.group()
	g.nextReads()
	g.tokenPair()
	out := label("tokensout")
	g.token(s, accK, accQ, out)
	g.tokenAdvance(tokens)
	Label(out)
}

// loadBlock emits pass 0 of the block s at column j0 (in a register; k holds K): from src32 when
// a bf16 routine's call gives it, else from src.
func (g *kvGen) loadBlock(s span, accK, accQ []VecVirtual, k, j0 GPVirtual) {
	if g.st.narrow() {
		s32, after, from16 := GP64(), label("loaded"), label("from16")
		loadArg("src32", s32)
		TESTQ(s32, s32)
		JZ(LabelRef(from16))
		Comment("From src32 (f32).")
		st := GP64()
		loadArg("V", st)
		LEAQ(Mem{Base: s32, Index: j0, Scale: 4}, s32)
		SHLQ(U8(2), st)
		g.pass0(s, accK, accQ, k, true, s32, st)
		JMP(LabelRef(after))
		Label(from16)
		Comment("From src (bf16).")
		s16, st16 := GP64(), GP64()
		loadArg("src", s16)
		loadArg("V", st16)
		LEAQ(Mem{Base: s16, Index: j0, Scale: 2}, s16)
		SHLQ(U8(1), st16)
		g.pass0(s, accK, accQ, k, false, s16, st16)
		Label(after)
	} else {
		src, st := GP64(), GP64()
		loadArg("src", src)
		loadArg("V", st)
		LEAQ(Mem{Base: src, Index: j0, Scale: 4}, src)
		SHLQ(U8(2), st)
		g.pass0(s, accK, accQ, k, true, src, st)
	}
}

// pass0 emits the loop over the K rows that copies the block s from the rows at base (stride
// bytes apart, f32 or bf16 widened) into work, accumulating token 0's Sᵀk̂ and Sᵀq̂ into accK and
// accQ on the way.
func (g *kvGen) pass0(s span, accK, accQ []VecVirtual, k GPVirtual, f32 bool, base, stride GPVirtual) {
	a, ps := g.a, s.ps
	for t := range ps {
		a.zero(accK[t])
		a.zero(accQ[t])
	}
	kh, qh, w, i := GP64(), GP64(), GP64(), GP64()
	MOVQ(g.rkb, kh)
	MOVQ(g.rqb, qh)
	MOVQ(g.work, w)
	XORQ(i, i)
	// The block's lines kvAhead rows on (a hint; past the state it touches the next head
	// or nothing): from memory, as a decode step's state comes, rows a stride apart are not
	// prefetched by the hardware in time (bf16 decode, B = 64: see kvAhead). To L2 (T1):
	// T0 ties up L1's miss buffers (Zen 4, go run ./bench, 5 alternating runs, medians of
	// t/copy(), kv-bf16 decode B = 64: avx512 1.34 → 1.20, avx2 1.68 → 1.36).
	pf := GP64()
	IMUL3Q(U32(kvAhead), stride, pf)
	ADDQ(base, pf)
	esz := 4
	if !f32 {
		esz = 2
	}
	lines := (len(ps)*a.lanes*esz + 63) / 64
	loop := label("pass0")
	Label(loop)
	for m := range lines {
		PREFETCHT1(Mem{Base: pf, Disp: 64 * m})
	}
	bk, bq := a.vec(), a.vec()
	VBROADCASTSS(Mem{Base: kh, Index: i, Scale: 4}, bk)
	VBROADCASTSS(Mem{Base: qh, Index: i, Scale: 4}, bq)
	ool := s.each(func(t int, pc piece) {
		x := a.vec()
		g.loadState(pc, base, x, f32)
		unmasked(pc).store(x, pc.at(w, 4))
		pc.fma(x, bk, accK[t])
		pc.fma(x, bq, accQ[t])
	})
	ADDQ(stride, base)
	ADDQ(stride, pf)
	g.nextRow(s, w)
	INCQ(i)
	CMPQ(i, k)
	JB(LabelRef(loop))
	ool()
}

// tokenPointers sets the per-token frame slots for token 0 of the block at column j0.
func (g *kvGen) tokenPointers(j0 GPVirtual) {
	x := GP64()
	XORQ(x, x)
	MOVQ(x, g.tau)
	loadArg("kh", x)
	MOVQ(x, g.kp)
	MOVQ(g.cmb, x)
	MOVQ(x, g.cmp)
	loadArg("tok", x)
	MOVQ(x, g.tp)
	loadArg("v", x)
	LEAQ(Mem{Base: x, Index: j0, Scale: 4}, x)
	MOVQ(x, g.vp)
	loadArg("o", x)
	LEAQ(Mem{Base: x, Index: j0, Scale: 4}, x)
	MOVQ(x, g.op)
}

// nextReads sets knp and qnp: where the read pass of token τ + 1 (of τ at the last) finds k̂ and q̂.
func (g *kvGen) nextReads() {
	Comment("k̂ and q̂ of the next token (of this one at the last: accumulated, never used).")
	tau, kk, kn, qn, t := GP64(), GP64(), GP64(), GP64(), GP64()
	MOVQ(g.tau, tau)
	MOVQ(g.rstr, kk)
	INCQ(tau)
	loadArg("T", t)
	CMPQ(tau, t)
	notLast := label("notlast")
	JB(LabelRef(notLast))
	DECQ(tau)
	Label(notLast)
	IMULQ(kk, tau)
	MOVQ(g.rkb, kn)
	ADDQ(tau, kn)
	MOVQ(kn, g.knp)
	MOVQ(g.rqb, qn)
	ADDQ(tau, qn)
	MOVQ(qn, g.qnp)
}

// tokenPair sets cpair to the token's decay as a pair (c, m).
func (g *kvGen) tokenPair() {
	Commentf("The token's decay as a pair (c, m), decay(x) = c·x + (x & m): (em1, all ones) = x + em1·x where em1 ≥ %g, else (eg, the sign bit) = eg·x (also for a NaN em1).", nearOne)
	tp, c, m, sign, x := GP64(), GP32(), GP32(), GP32(), XMM()
	MOVQ(g.tp, tp)
	MOVL(Mem{Base: tp}, c)
	MOVL(U32(0xffffffff), m)
	MOVL(U32(0x80000000), sign)
	VMOVSS(Mem{Base: tp}, x)
	VUCOMISS(cNearOne, x) // CF: em1 < nearOne or unordered
	CMOVLCS(Mem{Base: tp, Disp: 4}, c)
	CMOVLCS(sign, m)
	MOVL(c, g.cpair)
	MOVL(m, g.cpair.Offset(4))
}

// tokenAdvance moves the per-token frame slots on to the next token and loops back to tokens
// while one is left.
func (g *kvGen) tokenAdvance(tokens string) {
	x, y := GP64(), GP64()
	loadArg("K", x)
	SHLQ(U8(2), x)
	ADDQ(x, g.kp)
	MOVQ(g.rstr, x)
	ADDQ(x, g.cmp)
	ADDQ(U8(16), g.tp)
	loadArg("vs", x)
	SHLQ(U8(2), x)
	ADDQ(x, g.vp)
	loadArg("V", x)
	SHLQ(U8(2), x)
	ADDQ(x, g.op)
	MOVQ(g.tau, y)
	INCQ(y)
	MOVQ(y, g.tau)
	loadArg("T", x)
	CMPQ(y, x)
	JB(LabelRef(tokens))
}

// perChannel sets the frame slots of the read pass's vectors and the rows' decays from
// stateArgs.ch (once per call): with ch, k̂ and q̂ of the read pass and the pairs c_i, m_i are ch's
// (a token's 4K floats: k̂, q̂, then the pairs), else kh and qh, and every row decays by the
// token's pair: the scalar gate is the per-channel gate's code with one pair for all rows.
func (g *kvGen) perChannel() {
	g.rkb, g.rqb, g.rstr, g.cinc = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.cmb, g.cmp, g.cpair, g.cpr = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	Comment("The read pass's k̂, q̂ and the rows' far-form decays: the per-channel gate's (ch), else kh, qh and eg.")
	chanBases(g.rkb, g.rqb, g.cmb, g.cinc, func(k4, _ GPVirtual) {
		SHLQ(U8(2), k4)
		MOVQ(k4, g.rstr)
	}, func(k4, _ GPVirtual) {
		MOVQ(k4, g.rstr)
		MOVQ(U32(0), g.cmb)
	})
}

// chanBases emits, once per call, where the read passes' k̂ and q̂ and the rows' pairs are:
// with stateArgs.ch (the per-channel gate: a token's 4K floats, k̂, q̂, then the pairs) rkb, rqb
// and cmb get ch, ch + 4K and ch + 8K, and cinc 8 (a pair a row); else rkb and rqb get kh and qh
// and cinc 0. withCh and scalar emit the rest of each branch, given K·4 and a free register.
func chanBases(rkb, rqb, cmb, cinc Mem, withCh, scalar func(k4, x GPVirtual)) {
	ch, x, k4 := GP64(), GP64(), GP64()
	loadArg("K", k4)
	SHLQ(U8(2), k4)
	loadArg("ch", ch)
	TESTQ(ch, ch)
	sc, set := label("scalargate"), label("gateset")
	JZ(LabelRef(sc))
	MOVQ(ch, rkb)
	ADDQ(k4, ch)
	MOVQ(ch, rqb)
	ADDQ(k4, ch)
	MOVQ(ch, cmb)
	withCh(k4, x)
	MOVQ(U32(8), cinc)
	JMP(LabelRef(set))
	Label(sc)
	loadArg("kh", x)
	MOVQ(x, rkb)
	loadArg("qh", x)
	MOVQ(x, rqb)
	scalar(k4, x)
	MOVQ(U32(0), cinc)
	Label(set)
}

// nextRow advances w to the next row of the block in work: whole vectors, g.rb bytes for a
// guarded span.
func (g *kvGen) nextRow(s span, w GPVirtual) {
	if s.guarded() {
		ADDQ(g.rb, w)
		return
	}
	last := s.ps[len(s.ps)-1]
	ADDQ(U32((last.off+4*g.a.lanes+31)&^31), w)
}
