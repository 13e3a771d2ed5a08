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
// cannot link. K above kvMaxK(a) does not fit: the routine's maxK (gofile) sends such heads to the
// portable routine.

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// kvWork is the work space of a column block: K rows of at most kvBlockVecs vectors.
const kvWork = 32 << 10

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
	// pairs c_i, m_i), token 0's pairs and this token's, and the token's pair (c, m; see token).
	rkb, rqb, rstr, cinc, cmb, cmp, cpair, cpr Mem
}

// Non-temporal snapshot stores. Every routine over T tokens writes a token's rows to its store
// with non-temporal stores when they are whole aligned vectors (ntSpan; the flag's set-up in
// token; the snapshot rule of gdn_amd64.go's table, variant.snap in gostubs.go, says where): every store but the last token's after a token
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

// kvMaxK is the largest K whose rows of one vector fit kvWork.
func kvMaxK(a isa) int { return kvWork / (4 * a.lanes) }

// deltaInFrame reports whether a token's pass keeps δ in the frame (AVX2: its 16 registers hold
// the 2·5 accumulators of the next token, the decay constant, k̂_i, k̂_i+1, q̂_i+1 and the row's
// vector) rather than in registers.
func (v variant) deltaInFrame() bool { return v.a.regs < 32 }

// pairBF16 reports whether the span's bf16 rows go to a store two pieces at a time (bf16Pair):
// AVX2, an even number of whole YMMs one after another, no guard. BenchmarkKVRoutine, avx2 bf16
// decode, ns per head: see doc/notebook/2026-12-02-bf16-stores-nan-select.md.
func (g *kvGen) pairBF16(s span) bool {
	if !g.bf16 || g.a.evex || s.guarded() || len(s.ps)%2 != 0 {
		return false
	}
	for t, pc := range s.ps {
		if pc.w != g.a.lanes || pc.mask != nil || pc.lane != nil || pc.idx != nil || pc.off != t*4*g.a.lanes {
			return false
		}
	}
	return true
}

// narrowBF16 reports whether the last w mod lanes bf16 columns of a block take widenTail and
// storeTail (AVX2: VPMASKMOVD has dword granules) rather than the masked vector's own masked loads
// and stores (opmasks have word granules).
func (v variant) narrowBF16() bool { return v.bf16 && !v.a.masks }

func stateKVTokens(vr variant) {
	g := &kvGen{variant: vr}
	a := vr.a
	routine(g.name(), NOSPLIT, stateSig)
	Doc(fmt.Sprintf("%s is the [K][V] state routine over T tokens in %s; see gdn_amd64.go.", g.name(), a.name))
	g.work, g.cols, g.j0, g.wcols, g.nvb, g.rb = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.tau, g.kp, g.knp, g.qnp, g.vp, g.op, g.tp = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	if vr.deltaInFrame() {
		g.dslots = AllocLocal(32*kvBlockVecs + 32)
	}
	if !a.masks {
		g.lane = AllocLocal(32)
	}
	if vr.narrowBF16() {
		g.pairs, g.last, g.shuf, g.lastOff, g.tmp = AllocLocal(16), AllocLocal(16), AllocLocal(16), AllocLocal(8), AllocLocal(16)
	}
	if !vr.bf16 {
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
	if vr.bf16 {
		g.fin = AllocLocal(8)
	}
	Commentf("K > %d does not fit work: the Go wrapper never calls with it.", kvMaxK(a))
	CMPQ(k, U32(kvMaxK(a)))
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
	} else {
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
		if vr.narrowBF16() {
			g.narrowMasks(wd, n)
		}
		g.block(guardedSpan(a, narrowSpan, 0, n, g.wcols, &g.lane))
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

// unmasked is the piece as it is loaded from and stored to work: the whole vector.
func unmasked(p piece) piece { p.mask, p.lane = nil, nil; return p }

// loadState loads the piece's state elements from its column of the row at base (widened for
// bf16).
func (g *kvGen) loadState(pc piece, base GPVirtual, x VecVirtual, f32 bool) {
	switch {
	case f32 || !g.bf16:
		pc.load(pc.at(base, 4), x)
	case pc.lane != nil:
		g.widenTail(pc, base, x)
	default:
		widenPiece(pc, pc.at(base, 2), x)
	}
}

// storeState stores the piece's lanes of y to its column of the row at base (rounded to bf16 for
// bf16 storage, finite: y holds no NaN, see finiteDelta; y may be clobbered).
func (g *kvGen) storeState(pc piece, y VecVirtual, base GPVirtual, finite bool) {
	switch {
	case !g.bf16:
		pc.store(y, pc.at(base, 4))
	case pc.lane != nil:
		g.storeTail(pc, y, base)
	default:
		bf16Stored(g.a, pc, y, pc.at(base, 2), false, finite)
	}
}

// narrowMasks sets the frame slots of widenTail and storeTail for a block of wd columns of which
// the masked vector's p = wd − n (0–7; 0: the vector is skipped).
func (g *kvGen) narrowMasks(wd, n GPVirtual) {
	Comment("The last wd mod 8 bf16 columns: pairs (dwords), the word of the last one, a VPSHUFB control to word 0.")
	p := GP64()
	MOVQ(wd, p)
	SUBQ(n, p)
	x, y := XMM(), XMM()
	h := GP64()
	MOVQ(p, h)
	SHRQ(U8(1), h)
	VMOVD(h.As32(), x)
	VPBROADCASTD(x, x)
	VPCMPGTD(cIota, x, x) // dword j: p/2 > j
	VMOVDQU(x, g.pairs)
	DECQ(p)
	MOVQ(p, g.lastOff)
	VMOVDQU(cIota, y)
	VPACKUSDW(cIota.Offset(16), y, y) // words 0…7
	VMOVD(p.As32(), x)
	VPBROADCASTW(x, x)
	VPCMPEQW(y, x, x) // word j: j = p − 1
	VMOVDQU(x, g.last)
	ADDQ(p, p) // the bytes 2(p − 1), 2(p − 1) + 1 in every word
	MOVQ(p, h)
	INCQ(h)
	SHLQ(U8(8), h)
	ORQ(h, p)
	VMOVD(p.As32(), x)
	VPBROADCASTW(x, x)
	VMOVDQU(x, g.shuf)
}

// widenTail loads the masked piece's last wd mod 8 bf16 elements (AVX2) from the row at base,
// widened to float32 into x, the other lanes zero, reading nothing else: their pairs through a
// VPMASKMOVD of dwords, then the last one (again, when their count is even) through a 16-bit load
// blended into its word.
func (g *kvGen) widenTail(pc piece, base GPVirtual, x VecVirtual) {
	m := XMM()
	VMOVDQU(g.pairs, m)
	maskedLoadX(pc.at(base, 2), m, x) // VPMASKMOVD unless at a page end
	t := GP64()
	MOVQ(g.lastOff, t)
	ADDQ(pc.idx, t)
	r := GP32()
	MOVWLZX(Mem{Base: base, Index: t, Scale: 2}, r)
	y, sel := XMM(), XMM()
	VMOVD(r, y)
	VPBROADCASTW(y, y)
	VMOVDQU(g.last, sel)
	VPBLENDVB(sel, y, x.AsX(), x.AsX())
	VPMOVZXWD(x.AsX(), x.AsY())
	VPSLLD(U8(16), x.AsY(), x.AsY())
}

// storeTail stores BF16RNE of the masked piece's last wd mod 8 lanes of y (AVX2) to the row at
// base, writing nothing else: rounded into the frame, then their pairs through a VPMASKMOVD of
// dwords, then the last one (again, when their count is even) through VPEXTRW. y is clobbered.
func (g *kvGen) storeTail(pc piece, y VecVirtual, base GPVirtual) {
	bf16(g.a, piece{w: 8}, y, g.tmp)
	x, m := XMM(), XMM()
	VMOVDQU(g.tmp, x)
	VMOVDQU(g.pairs, m)
	VPMASKMOVD(x, m, pc.at(base, 2))
	VPSHUFB(g.shuf, x, x)
	t := GP64()
	MOVQ(g.lastOff, t)
	ADDQ(pc.idx, t)
	VPEXTRW(U8(0), x, Mem{Base: base, Index: t, Scale: 2})
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
	pass0 := func(f32 bool, base GPVirtual, stride GPVirtual) {
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
	if g.bf16 {
		s32, after, from16 := GP64(), label("loaded"), label("from16")
		loadArg("src32", s32)
		TESTQ(s32, s32)
		JZ(LabelRef(from16))
		Comment("From src32 (f32).")
		st := GP64()
		loadArg("V", st)
		LEAQ(Mem{Base: s32, Index: j0, Scale: 4}, s32)
		SHLQ(U8(2), st)
		pass0(true, s32, st)
		JMP(LabelRef(after))
		Label(from16)
		Comment("From src (bf16).")
		s16, st16 := GP64(), GP64()
		loadArg("src", s16)
		loadArg("V", st16)
		LEAQ(Mem{Base: s16, Index: j0, Scale: 2}, s16)
		SHLQ(U8(1), st16)
		pass0(false, s16, st16)
		Label(after)
	} else {
		s, st := GP64(), GP64()
		loadArg("src", s)
		loadArg("V", st)
		LEAQ(Mem{Base: s, Index: j0, Scale: 4}, s)
		SHLQ(U8(2), st)
		pass0(true, s, st)
	}

	Comment("The tokens.")
	{
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
	tokens := label("token")
	Label(tokens)
	g.pf.group()
	{
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
	{
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
	out := label("tokensout")
	g.token(s, accK, accQ, out)
	{
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
	Label(out)
}

// token emits one token over the block: δ and o from the accumulators, decayed by the token's
// pair (cpair), then the pass over the rows in work (update, stores, the next token's
// accumulation), each row decayed by its pair (rowDecays).
func (g *kvGen) token(s span, accK, accQ []VecVirtual, out string) {
	a, ps := g.a, s.ps
	Comment("δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ.")
	c, m := a.vec(), a.vec()
	d := make([]VecVirtual, len(ps)) // δ in registers, or nil: in the frame (deltaInFrame)
	g.alignDelta()
	{
		beta, kq := a.vec(), a.vec()
		tp, vp, op := GP64(), GP64(), GP64()
		MOVQ(g.tp, tp)
		VBROADCASTSS(g.cpair, c)
		VBROADCASTSS(g.cpair.Offset(4), m)
		VBROADCASTSS(Mem{Base: tp, Disp: 8}, beta)
		VBROADCASTSS(Mem{Base: tp, Disp: 12}, kq)
		MOVQ(g.vp, vp)
		MOVQ(g.op, op)
		var nf VecVirtual // bf16: the OR of δ − δ over the pieces (finiteDelta)
		if g.bf16 {
			nf = a.vec()
			a.zero(nf)
		}
		s.each(func(t int, pc piece) {
			vt := a.vec()
			pc.load(pc.at(vp, 4), vt)
			g.decayCM(pc, c, m, accK[t])
			pc.sub(vt, accK[t], vt)
			pc.mul(vt, beta, vt)
			g.decayCM(pc, c, m, accQ[t])
			pc.fma(vt, kq, accQ[t])
			pc.store(accQ[t], pc.at(op, 4))
			if g.bf16 {
				// (A narrower piece's other lanes are 0: VEX zeroes the upper ones.)
				z := a.vec()
				VSUBPS(a.view(vt), a.view(vt), a.view(z))
				if a.evex {
					VPORD(a.view(z), a.view(nf), a.view(nf)) // (VORPS of a ZMM needs AVX512DQ)
				} else {
					VORPS(a.view(z), a.view(nf), a.view(nf))
				}
			}
			if g.deltaInFrame() {
				unmasked(pc).store(vt, g.dslot(t))
			} else {
				d[t] = vt
			}
		})()
		if g.bf16 {
			finiteDelta(a, a.view, nf, 1<<a.lanes-1, g.fin)
		}
	}
	for t := range ps {
		a.zero(accK[t])
		a.zero(accQ[t])
	}
	Comment("S' = decay(S) + k̂_i·δ, stored where asked; the next token's Sᵀk̂, Sᵀq̂ from it.")
	w, i, k, kp, kn, qn := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	MOVQ(g.work, w)
	XORQ(i, i)
	loadArg("K", k)
	MOVQ(g.kp, kp)
	MOVQ(g.knp, kn)
	MOVQ(g.qnp, qn)
	j0 := GP64()
	MOVQ(g.j0, j0)
	dst, dstStride := GP64(), GP64()
	{
		tau := GP64()
		MOVQ(g.tau, tau)
		loadArg("stores", dst)
		MOVQ(Mem{Base: dst, Index: tau, Scale: 8}, dst)
		none := label("nostore")
		TESTQ(dst, dst)
		JZ(LabelRef(none))
		LEAQ(Mem{Base: dst, Index: j0, Scale: uint8(g.es())}, dst)
		Label(none)
		loadArg("V", dstStride)
		SHLQ(U8(map[int]uint8{2: 1, 4: 2}[g.es()]), dstStride)
		if ntSpan(a, s) {
			Comment("Non-temporal stores for this token's rows: a store but the last token's after a token without one, the rows aligned whole vectors.")
			no, yes := label("temporal"), label("snapshot")
			MOVQ(U32(0), g.nt)
			TESTQ(dst, dst)
			JZ(LabelRef(no))
			g.cmpLast()
			JNE(LabelRef(yes))
			{
				tau, p := GP64(), GP64()
				MOVQ(g.tau, tau)
				TESTQ(tau, tau)
				JZ(LabelRef(no))
				loadArg("stores", p)
				CMPQ(Mem{Base: p, Index: tau, Scale: 8, Disp: -8}, U8(0))
				JE(LabelRef(no))
			}
			Label(yes)
			TESTQ(U32(a.lanes*g.es()-1), dst)
			JNZ(LabelRef(no))
			TESTQ(U32(a.lanes*g.es()-1), dstStride)
			JNZ(LabelRef(no))
			MOVQ(U32(1), g.nt)
			Label(no)
		}
	}
	var carry, cStride GPVirtual
	if g.bf16 {
		carry, cStride = GP64(), GP64()
		XORQ(carry, carry)
		none := label("nocarry")
		g.cmpLast()
		JNE(LabelRef(none))
		loadArg("carry", carry)
		TESTQ(carry, carry)
		JZ(LabelRef(none))
		LEAQ(Mem{Base: carry, Index: j0, Scale: 4}, carry)
		Label(none)
		loadArg("V", cStride)
		SHLQ(U8(2), cStride)
	}
	g.alignDelta() // again: not live across the setup of the stores
	// The last token's pass neither writes work nor accumulates dots (no token follows; the next
	// block's pass 0 loads work anew): its rows go from the registers to the store and the carry.
	// At T = 1 (a bf16 decode step) that is 4 of the token pass's 18 or so µops per vector.
	// Its code leaves the token loop (to out) instead of joining the other tokens' path, so the
	// accumulators are dead in it: AVX2's 16 registers then hold the row (4 YMM), but not a
	// guarded span's pieces across their guards. BenchmarkKVRoutine, avx2 bf16 decode, 128×128,
	// ns per head, medians of 6 alternating runs: 3,894 → 3,078; 96×80 2,114 → 1,739.
	if a.regs < 32 && s.guarded() {
		g.rows(s, d, accK, accQ, w, i, k, kp, kn, qn, dst, dstStride, carry, cStride, false)
		return
	}
	last, done := label("lastrows"), label("rowsdone")
	g.cmpLast()
	JE(LabelRef(last))
	if g.nearBody(s) {
		Commentf("The scalar gate with em1 ≥ %g: the near body, x + em1·x (one FMA, no VPANDD).", nearOne)
		pair := label("pairrows")
		CMPL(g.cpair.Offset(4), I8(-1))
		JNE(LabelRef(pair))
		CMPQ(g.cinc, U8(0))
		JNE(LabelRef(pair))
		g.near = true
		g.rows(s, d, accK, accQ, w, i, k, kp, kn, qn, dst, dstStride, carry, cStride, false)
		g.near = false
		JMP(LabelRef(done))
		Label(pair)
	}
	g.rows(s, d, accK, accQ, w, i, k, kp, kn, qn, dst, dstStride, carry, cStride, false)
	JMP(LabelRef(done))
	Label(last)
	g.rows(s, d, accK, accQ, w, i, k, kp, kn, qn, dst, dstStride, carry, cStride, true)
	JMP(LabelRef(out))
	Label(done)
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

// rowDecays returns where this token's first row decay is (c_0, m_0; cp steps by cinc bytes a
// row): ch's pairs, or the token's pair (cpair) for every row.
func (g *kvGen) rowDecays() (cp GPVirtual) {
	cp = GP64()
	MOVQ(g.cmp, cp)
	set := label("decaysset")
	CMPQ(g.cinc, U8(0))
	JNE(LabelRef(set))
	LEAQ(g.cpair, cp)
	Label(set)
	return cp
}

// decayCM replaces the piece y by decay(y) = c·y + (y & m), one rounding (chanForm: x + em1·x
// with m all ones, eg·x with m the sign bit).
func (g *kvGen) decayCM(p piece, c, m, y VecVirtual) { decayPair(g.a, p, c, m, y) }

// cmpLast compares τ + 1 with the call's token count (equal: τ is the last token), for a JE/JNE.
func (g *kvGen) cmpLast() {
	tau, t := GP64(), GP64()
	MOVQ(g.tau, tau)
	INCQ(tau)
	loadArg("T", t)
	CMPQ(tau, t)
}

// rows emits a token's pass over the block's rows in work (see token); last: the call's last
// token, whose pass stores and carries its rows from the registers and does nothing else.
func (g *kvGen) rows(s span, d []VecVirtual, accK, accQ []VecVirtual, w, i, k, kp, kn, qn, dst, dstStride, carry, cStride GPVirtual, last bool) {
	a := g.a
	if g.cvtPairs(s) && s.ps[len(s.ps)-1].mask != nil && len(s.ps)%2 == 0 {
		// cvtStores' word mask of the masked pair (K3: words 0–15 all, 16–31 as the last
		// piece's lanes) and its complement (K4), once per block.
		KXNORW(K4, K4, K4)
		KUNPCKWD(K4, s.ps[len(s.ps)-1].mask, K3)
		KNOTD(K3, K4)
	}
	var cp GPVirtual
	var nc VecVirtual // the near body's em1, for every row
	if g.near {
		nc = a.vec()
		VBROADCASTSS(g.cpair, nc)
	} else {
		cp = g.rowDecays()
	}
	// AVX2's guarded spans need every GP register but R15 (storeTail's): their row decays'
	// pointer stays in the frame.
	inFrame := a.regs < 32 && s.guarded()
	if inFrame {
		MOVQ(cp, g.cpr)
	}
	var nx GPVirtual
	if !inFrame {
		// (Not in AVX2's guarded spans, which need every GP register: no model has their widths.)
		nx = g.nx.load()
	}
	loop := label("rows")
	Label(loop)
	if nx != nil {
		g.nx.step(nx, kvNextLines)
	}
	bk := a.vec()
	VBROADCASTSS(Mem{Base: kp, Index: i, Scale: 4}, bk)
	rc, rm := nc, a.vec()
	if !g.near {
		rc = a.vec()
		p := cp
		if inFrame {
			p = GP64()
			MOVQ(g.cpr, p)
		}
		VBROADCASTSS(Mem{Base: p}, rc)
		VBROADCASTSS(Mem{Base: p, Disp: 4}, rm)
		ADDQ(g.cinc, p)
		if inFrame {
			MOVQ(p, g.cpr)
		}
	}
	var bkn, bqn VecVirtual
	if !last {
		bkn, bqn = a.vec(), a.vec()
		VBROADCASTSS(Mem{Base: kn, Index: i, Scale: 4}, bkn)
		VBROADCASTSS(Mem{Base: qn, Index: i, Scale: 4}, bqn)
	}
	ys := make([]VecVirtual, len(s.ps))
	ool := []func(){s.each(func(t int, pc piece) {
		u := unmasked(pc)
		y := a.vec()
		u.load(u.at(w, 4), y)
		if g.near {
			VFMADD132PS(u.view(rc), u.view(y), u.view(y)) // y·em1 + y: decayCM's bits with m all ones
		} else {
			g.decayCM(u, rc, rm, y)
		}
		if d[t] != nil {
			u.fma(d[t], bk, y)
		} else {
			fmaMem(u, g.dslot(t), bk, y)
		}
		if last {
			ys[t] = y
			return
		}
		u.store(y, u.at(w, 4))
		u.fma(y, bkn, accK[t])
		u.fma(y, bqn, accQ[t])
	})}
	// The row's vectors for the store and the carry: reloaded from work, or (last) the registers,
	// which each guarded piece of a span has only inside its guard: a span's last token stores
	// them inside it too.
	get := func(t int, pc piece) VecVirtual {
		if last && ys[t] != nil {
			return ys[t]
		}
		y := a.vec()
		u := unmasked(pc)
		u.load(u.at(w, 4), y)
		return y
	}
	skip := label("nostorerow")
	TESTQ(dst, dst)
	JZ(LabelRef(skip))
	nt := ntSpan(a, s)
	stores := func(finite bool) {
		var stored string
		if nt {
			temporal := label("temporalrow")
			stored = label("storedrow")
			CMPB(g.nt, U8(0))
			JE(LabelRef(temporal))
			for t, pc := range s.ps {
				y := get(t, unmasked(pc))
				if !g.bf16 {
					VMOVNTPS(a.view(y), pc.at(dst, 4))
					continue
				}
				if last {
					// rounded in place: keep the register for the carry.
					z := a.vec()
					VMOVAPS(a.view(y), a.view(z))
					y = z
				}
				bf16Stored(a, piece{w: a.lanes}, y, pc.at(dst, 2), true, finite)
			}
			JMP(LabelRef(stored))
			Label(temporal)
		}
		keep := func(y VecVirtual) VecVirtual {
			if !g.bf16 || !last {
				return y
			}
			// the rounding is in place for bf16: keep the register for the carry.
			z := a.vec()
			VMOVAPS(a.view(y), a.view(z))
			return z
		}
		if g.pairBF16(s) {
			for t := 0; t < len(s.ps); t += 2 {
				bf16Pair(a, keep(get(t, s.ps[t])), keep(get(t+1, s.ps[t+1])), s.ps[t].at(dst, 2), finite)
			}
		} else {
			ool = append(ool, s.each(func(t int, pc piece) { g.storeState(pc, keep(get(t, pc)), dst, finite) }))
		}
		if nt {
			Label(stored)
		}
	}
	if g.bf16 {
		// The rounding without its NaN select when this token's δ are finite (finiteDelta).
		nan, done := label("rownan"), label("rowstored")
		CMPL(g.fin, U8(0))
		JNE(LabelRef(nan))
		if g.cvtPairs(s) {
			// Finite, the CPU with AVX512_BF16, temporal stores: two vectors at a time rounded by
			// one VCVTNE2PS2BF16 (cvtStores); a ±0 stored word (a denormal input, which cvt2 takes
			// as zero, or a zero) sends the row to the integer rounding, which stores it again.
			ints := label("rowints")
			CMPB(argField("cvt"), U8(0))
			JE(LabelRef(ints))
			if nt {
				CMPB(g.nt, U8(0))
				JNE(LabelRef(ints))
			}
			g.cvtStores(s, get, dst)
			JCS(LabelRef(done)) // CF: no stored word ±0
			JMP(LabelRef(nan))
			Label(ints)
		}
		stores(true)
		JMP(LabelRef(done))
		Label(nan)
		stores(false)
		Label(done)
	} else {
		stores(false)
	}
	ADDQ(dstStride, dst)
	Label(skip)
	if g.bf16 {
		skip := label("nocarryrow")
		TESTQ(carry, carry)
		JZ(LabelRef(skip))
		ool = append(ool, s.each(func(t int, pc piece) {
			pc.store(get(t, pc), pc.at(carry, 4))
		}))
		ADDQ(cStride, carry)
		Label(skip)
	}
	g.nextRow(s, w)
	INCQ(i)
	CMPQ(i, k)
	JB(LabelRef(loop))
	if nx != nil {
		MOVQ(nx, g.nx.next)
	}
	for _, f := range ool {
		f()
	}
}

// nearBody reports whether a token pass of the span has a second body for the scalar gate's near
// form (em1 ≥ nearOne: x + em1·x, one FMA, the token's em1 broadcast once), besides the pair body
// (c·x + (x & m), every form and gate): AVX-512 f32, the 4-ZMM block (K ≤ 128: every block of
// 49–64 columns, its rows in work whole vectors), the token passes but the last. Where the VPANDD shares the
// FMA ports (Intel's two 512-bit FMA units take the logic ops too) it is a fifth of the pass's
// vector operations.
func (g *kvGen) nearBody(s span) bool {
	if g.bf16 || !g.a.evex || len(s.ps) != kvBlockVecs || s.guarded() {
		return false
	}
	for _, pc := range s.ps {
		if pc.w != g.a.lanes {
			return false
		}
	}
	return true
}

// cvtPairs reports whether the span's bf16 rows may go to a store two pieces at a time through
// VCVTNE2PS2BF16 (cvtStores): AVX-512 bf16, whole vectors at consecutive offsets (the last one
// may be masked: its word mask is K1's), no guard.
func (g *kvGen) cvtPairs(s span) bool {
	if !g.bf16 || !g.a.evex || s.guarded() || len(s.ps) < 2 {
		return false
	}
	for t, pc := range s.ps {
		if pc.w != g.a.lanes || pc.lane != nil || pc.idx != nil || pc.off != t*4*g.a.lanes || (pc.mask != nil && t != len(s.ps)-1) {
			return false
		}
	}
	return true
}

// cvtStores stores BF16RNE of the row's pieces (get) at dst for a row without NaN: pairs of
// vectors through one VCVTNE2PS2BF16 (cvt2) and one 64-byte store (a last masked piece's pair
// under the word mask of its lanes, K3, which rows sets once per block), an odd last piece by the
// integer rounding. cvt2 takes a
// denormal input as zero, so it leaves CF set (KORTESTD) only when no stored word of a pair is ±0:
// else the caller stores the row again with the integer rounding. K6 holds the AND of "magnitude
// not zero" over the stored words (one VPTESTMW a pair under K6 itself; the masked pair's words
// outside K3 count as not zero).
func (g *kvGen) cvtStores(s span, get func(int, piece) VecVirtual, dst GPVirtual) {
	a := g.a
	mag := ZMM()
	VPBROADCASTD(cMag16, mag)
	KXNORD(K6, K6, K6)
	n := len(s.ps)
	for t := 0; t+1 < n; t += 2 {
		p0, p1 := s.ps[t], s.ps[t+1]
		y := ZMM()
		cvt2(get(t, p0), get(t+1, p1), y)
		m := p0.at(dst, 2)
		if p1.mask == nil {
			VMOVDQU32(y, m)
			VPTESTMW(mag, y, K6, K6)
			continue
		}
		VMOVDQU16(y, K3, m) // K3, K4: the pair's word mask and its complement (rows)
		VPTESTMW(mag, y, K3, K5)
		KORD(K4, K5, K5)
		KANDD(K5, K6, K6)
	}
	if n%2 != 0 {
		pc := s.ps[n-1]
		y := a.vec()
		VMOVAPS(a.view(get(n-1, pc)), a.view(y)) // bf16Stored rounds in place: keep the register
		bf16Stored(a, pc, y, pc.at(dst, 2), false, true)
	}
	KORTESTD(K6, K6)
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

// fmaMem computes acc += m·b, m in memory.
func fmaMem(p piece, m Mem, b, acc VecVirtual) {
	if p.w == 1 {
		VFMADD231SS(m, b.AsX(), acc.AsX())
		return
	}
	VFMADD231PS(m, p.view(b), p.view(acc))
}

// alignDelta points dp at the first 32-byte boundary of dslots (deltaInFrame): a 32-byte
// operand that straddles a cache line costs a second access. With the slots at whatever SP
// offset the frame gave them (8 mod 32 after a slot was added) the AVX2 bf16 routine ran
// 0.6–1.3 % slower at T = 1 than with them 32 bytes from SP, by the caller's SP; aligned, the
// same or 2 % faster (A/B in one process).
func (g *kvGen) alignDelta() {
	if !g.deltaInFrame() {
		return
	}
	g.dp = GP64()
	LEAQ(g.dslots, g.dp)
	ADDQ(U8(31), g.dp)
	ANDQ(I8(-32), g.dp)
}

func (g *kvGen) dslot(t int) Mem { return Mem{Base: g.dp, Disp: 32 * t} }
