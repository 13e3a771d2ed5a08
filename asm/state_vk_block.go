package main

// The AVX-512 [V][K] row blocks: rows in an L1 work space, many of them in flight per token.
//
// Rows of K ≤ 16·vkBlockVecs elements go in blocks of nb·16 rows (nb = 2 sub-blocks while 32 rows
// are left, then 1 while 16 are; the rest take the register groups of state_vk.go). A block is
// copied into work once (bf16 widened), advanced through all T tokens there and copied out at
// every token with a store (and into the f32 carry). The first token's dots are a pass of their
// own (dotsAll); after that each token is one pass over the rows (fused), with this token's k̂ from
// memory and the next token's k̂ and q̂ in registers:
//
//	decay form branch:                δ and o of each sub-block as one vector (δ to work), from
//	                                  the totals of its dots
//	for each sub-block s of 16 rows:  S[j][i] ← decay(S[j][i]) + k̂_i·δ_j for its rows, and from
//	                                  each updated vector the next token's dots (2 accumulators
//	                                  per dot, i mod 2, added; the first level of the
//	                                  transpose-add done per pair of rows, pairSums), written to
//	                                  work; then the rest of the transpose-add of the 8 kv' and
//	                                  of the 8 qs' (each into one vector, row r's total permuted
//	                                  to lane r), written over the first two
//
// The last token's pass only updates (update). Fusing the dots into the update pass, with the
// first level of the reduction in registers, took the routine from 817 to 725 ns per head-token
// (BenchmarkVKRoutine, 128×128, T = 64, medians of 10 alternating runs; doc/notebook/2026-12-01-vk-prefill-fused-dots.md): the
// two passes were bound by their loads and stores in L1 (every vector of a row stored at every
// token) as much as by the FMAs.
//
// The rows of a sub-block are independent, so their update and dot chains overlap (out of order);
// the reduction of sub-block 0 overlaps the pass over sub-block 1. nb is a runtime count (a frame
// slot): one copy of the code serves both block sizes. The code is that of a shape (vkBody: the
// positions a row's K leaves dead are skipped by their guards, the masked ones read and write
// nothing), rows at a stride of n vectors. The arithmetic of a row is that of a register group
// (same products, same order: the groups of these shapes have 2 accumulators too), and it does not
// depend on T.

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// vkSub is the rows of a sub-block (one reduction into one ZMM); vkBlockVecs the most vectors per
// row a block takes (k̂ lives in vkBlockVecs ZMM); vkMaxSub the most sub-blocks of a block.
const (
	vkSub       = 16
	vkBlockVecs = 8
	vkMaxSub    = 2
)

// vkBlockWork is the work space the blocks need at most, in bytes (without the alignment): the
// rows, then per sub-block the 8 kv' and 8 qs' pair sums, then the δ vectors.
const vkBlockWork = vkMaxSub*vkSub*64*vkBlockVecs + vkMaxSub*vkSumsStride + vkMaxSub*64

type vkBlk struct {
	b    *vkBody
	rb   int          // row stride in work, bytes
	kreg []VecVirtual // k̂ of the token
	qreg []VecVirtual // q̂ of the token
}

// sums is the offset in work of sub-block 0's pair sums (pairSums: the first level of the
// transpose-add of rows 2p and 2p + 1): kv' of pair p at sums + 64·p, qs' at sums + 64·(8 + p);
// sub-block s's vkSumsStride·s further on. The totals of sub-block s (kv, qs) go over its first
// two once they are reduced.
func (k *vkBlk) sums() int { return vkMaxSub * vkSub * k.rb }

// vkSumsStride is the bytes of a sub-block's pair sums (vkSumsShift its log2).
const (
	vkSumsStride = vkSub * 64
	vkSumsShift  = 10
)

// deltas is the offset in work of sub-block 0's δ vector (sub-block s's 64·s further on).
func (k *vkBlk) deltas() int { return k.sums() + vkMaxSub*vkSumsStride }

func (k *vkBlk) workPtr(off int) GPVirtual {
	p := GP64()
	MOVQ(k.b.r.work, p)
	if off != 0 {
		ADDQ(U32(off), p)
	}
	return p
}

// rowCount returns a register holding the block's rows, 16·nb.
func (k *vkBlk) rowCount() GPVirtual {
	c := GP64()
	MOVQ(k.b.r.nb, c)
	SHLQ(U8(4), c)
	return c
}

// emit emits the loop over blocks (while at least 16 rows are left).
func (k *vkBlk) emit() {
	b := k.b
	v, r := b.v, b.r
	if k.deltas()+vkMaxSub*64 > vkBlockWork {
		panic("vkBlk: work too small")
	}
	if 1<<vkSumsShift != vkSumsStride {
		panic("vkBlk: vkSumsShift")
	}
	loop, done := label("block"), label("blocksdone")
	Label(loop)
	CMPQ(r.rows, U8(vkSub))
	JB(LabelRef(done))
	// nb = 2 if 32 rows are left, else 1.
	nb, two := GP64(), GP64()
	MOVQ(U32(1), nb)
	MOVQ(U32(2), two)
	CMPQ(r.rows, U8(2*vkSub))
	CMOVQCC(two, nb)
	MOVQ(nb, r.nb)
	Commentf("A block of 16·nb rows of %d…%d vectors in work.", b.lo, b.n)
	loadRows(r, v.st, "bfrombf16", "bloaded", k.load)
	k.tokens()
	c := k.rowCount()
	ADDQ(c, r.j)
	SUBQ(c, r.rows)
	JMP(LabelRef(loop))
	Label(done)
}

// load copies the block's rows from p (clobbered) into work, widened from st.
func (k *vkBlk) load(p GPVirtual, st storage) {
	b := k.b
	es, idx := st.es(), b.r.k4
	if st.narrow() {
		idx = b.r.ks
	}
	w := k.workPtr(0)
	c := k.rowCount()
	l := label("bload")
	Label(l)
	b.prefetch(p, 1, es)
	b.each(b.positions(), func(i int) { // (a dead position's vector in work is never read)
		x := ZMM()
		b.loadVec(Mem{Base: p, Disp: i * 16 * es}, i, st, x)
		VMOVUPS(x, Mem{Base: w, Disp: i * 64})
	})
	ADDQ(idx, p)
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// store copies the block's rows from work to d (clobbered), rounded to st. An f32
// routine's token store goes with non-temporal stores (storeNT) when K is a multiple of 16, d is
// aligned to 64 bytes and the store is a snapshot: any but the last token's, and the last token's
// after a token with one (as the [K][V] routines: see ntSpan).
func (k *vkBlk) store(d GPVirtual, st storage) {
	b := k.b
	if st == b.v.st { // a token's store, not a narrow routine's f32 carry
		temporal, done := label("btemporal"), label("bstored")
		vkSnapshot(b.r, b.a, st.es(), d, temporal, label("bsnapshot"))
		k.storeNT(d, st)
		JMP(LabelRef(done))
		Label(temporal)
		k.storeRows(d, st)
		Label(done)
		return
	}
	k.storeRows(d, st)
}

// storeNT copies the block's rows from work to d (clobbered) with non-temporal stores, rounded to
// st: every live position whole (K a multiple of 16), the dead ones skipped.
func (k *vkBlk) storeNT(d GPVirtual, st storage) {
	b := k.b
	w := k.workPtr(0)
	c := k.rowCount()
	l := label("bstorent")
	Label(l)
	b.each(b.positions(), func(i int) {
		x := ZMM()
		VMOVUPS(Mem{Base: w, Disp: i * 64}, x)
		if st.narrow() {
			st.round(b.a, piece{w: b.a.lanes}, x, Mem{Base: d, Disp: i * 32}, true, false)
		} else {
			VMOVNTPS(x, Mem{Base: d, Disp: i * 64})
		}
	})
	if st.narrow() {
		ADDQ(b.r.ks, d)
	} else {
		ADDQ(b.r.k4, d)
	}
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// storeRows copies the block's rows from work to d (clobbered), rounded to st.
func (k *vkBlk) storeRows(d GPVirtual, st storage) {
	b := k.b
	es, idx := st.es(), b.r.k4
	if st.narrow() {
		idx = b.r.ks
	}
	w := k.workPtr(0)
	c := k.rowCount()
	l := label("bstore")
	Label(l)
	b.each(b.positions(), func(i int) {
		x := ZMM()
		VMOVUPS(Mem{Base: w, Disp: i * 64}, x)
		m := Mem{Base: d, Disp: i * 16 * es}
		if st.narrow() {
			st.round(b.a, piece{w: 16, mask: b.mask(i)}, x, m, false, false)
		} else {
			b.storeVec(x, m, i, stF32, false)
		}
	})
	ADDQ(idx, d)
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// tokens emits the token loop of a block in work, its stores and the carry. The first token's
// dots are a pass of their own; every later token's are accumulated by the update pass of the
// token before (fused), so that a token but the last is one pass over the rows in work.
func (k *vkBlk) tokens() {
	b := k.b
	v, r := b.v, b.r
	tokensStart(r)
	Comment("The first token's dots and their totals.")
	k.loadKQ(r.pk, r.pq)
	k.dotsAll()
	loop, nostore := label("btoken"), label("bnostore")
	Label(loop)
	r.pf.group()
	vkForm(b, func(f form, c VecVirtual) {
		k.deltas1(f, c)
		last, done := label("blast"), label("bupdated")
		CMPQ(r.cnt, U8(1))
		JE(LabelRef(last))
		k.fused(f, c)
		JMP(LabelRef(done))
		Label(last)
		k.update(f, c)
		Label(done)
	})
	tokensEnd(r, v.st, loop, nostore, "bnocarry", k.store)
}

// loadKQ loads k̂ and q̂ of a token (rows at pk, pq) into k.kreg and k.qreg.
func (k *vkBlk) loadKQ(pk, pq GPVirtual) {
	b := k.b
	k.kreg, k.qreg = make([]VecVirtual, b.n), make([]VecVirtual, b.n)
	for i := range b.n {
		k.kreg[i] = ZMM()
		b.loadVec(b.kMem(pk, i), i, stF32, k.kreg[i])
	}
	for i := range b.n {
		k.qreg[i] = ZMM()
		b.loadVec(b.kMem(pq, i), i, stF32, k.qreg[i])
	}
}

// subPtrs returns the pointers of sub-block s (a GP register): its first row in work, its first
// sum.
func (k *vkBlk) subPtrs(s GPVirtual) (pr, pd GPVirtual) {
	r := k.b.r
	pr = GP64()
	MOVQ(s, pr)
	IMUL3Q(U32(vkSub*k.rb), pr, pr)
	ADDQ(r.work, pr)
	pd = GP64()
	MOVQ(s, pd)
	SHLQ(U8(vkSumsShift), pd)
	ADDQ(r.work, pd)
	ADDQ(U32(k.sums()), pd)
	return pr, pd
}

// dotsAll writes, sub-block by sub-block, the dots of the rows in work with k.kreg and k.qreg and
// their totals.
func (k *vkBlk) dotsAll() {
	r := k.b.r
	s := GP64()
	XORQ(s, s)
	sub := label("bsub")
	Label(sub)
	pr, pd := k.subPtrs(s)
	k.dots(pr, pd)
	SUBQ(U32(vkSub/2*64), pd) // back to the sub-block's first sum
	k.totals(pd)
	INCQ(s)
	CMPQ(s, r.nb)
	JB(LabelRef(sub))
}

// totals reduces the sub-block's sums at pd and writes its totals (kv, qs) over the first two.
func (k *vkBlk) totals(pd GPVirtual) {
	kv, qs := k.reduce(pd, 0), k.reduce(pd, 1)
	VMOVUPS(kv, Mem{Base: pd})
	VMOVUPS(qs, Mem{Base: pd, Disp: 64})
}

// fused advances the block's rows in work by this token, S ← decay(S) + k̂·δ_r (k̂ from memory),
// and accumulates the next token's dots (its k̂ and q̂ in registers) from each updated vector: the
// same products into the same accumulators in the same order as dots reading the row after the
// update, so the bits are those of the two passes. Sub-block by sub-block, two rows per
// iteration, each sub-block's totals reduced after its rows (overlapping the next one's).
func (k *vkBlk) fused(f form, c VecVirtual) {
	b := k.b
	r := b.r
	pk1, pq1 := GP64(), GP64()
	MOVQ(r.pk, pk1)
	ADDQ(r.k4, pk1)
	MOVQ(r.pq, pq1)
	ADDQ(r.k4, pq1)
	k.loadKQ(pk1, pq1)
	// The rows, pair sums and δ's of the sub-blocks follow each other: one count of row pairs
	// runs over the block, the totals reduced at every 8th.
	pr := k.workPtr(0)
	pd := k.workPtr(k.sums())
	pδ := k.workPtr(k.deltas())
	cnt := GP64()
	MOVQ(r.nb, cnt)
	SHLQ(U8(3), cnt) // 16·nb/2
	l := label("bfused")
	Label(l)
	var db [2]VecVirtual
	for rr := range 2 {
		db[rr] = ZMM()
		VBROADCASTSS(Mem{Base: pδ, Disp: 4 * rr}, db[rr])
	}
	na := b.acc
	ak, aq := b.dotAccs(2)
	b.each(b.positions(), func(i int) {
		for rr := range 2 {
			y := ZMM()
			m := Mem{Base: pr, Disp: rr*k.rb + i*64}
			VMOVUPS(m, y)
			b.update(f, c, b.kMem(r.pk, i), db[rr], y, i)
			VMOVUPS(y, m)
			b.fma(k.kreg[i], y, ak[rr][i%na], i, b.first(i))
			b.fma(k.qreg[i], y, aq[rr][i%na], i, b.first(i))
		}
	})
	k.pairSums(ak, aq, pd)
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(64), pd)
	ADDQ(U8(8), pδ)
	DECQ(cnt)
	TESTQ(U32(vkSub/2-1), cnt)
	JNZ(LabelRef(l))
	SUBQ(U32(vkSub/2*64), pd) // the sub-block's first pair sum
	k.totals(pd)
	ADDQ(U32(vkSumsStride), pd) // the next sub-block's
	TESTQ(cnt, cnt)
	JNZ(LabelRef(l))
}

// dots writes the kv' and qs' pair sums of the sub-block's rows at pr (clobbered) to pd
// (clobbered: it ends 8 pairs on), two rows per iteration.
func (k *vkBlk) dots(pr, pd GPVirtual) {
	b := k.b
	c := GP64()
	MOVQ(U32(vkSub/2), c)
	l := label("bdots")
	Label(l)
	na := b.acc
	if na != min(b.n, 2) {
		panic("vkBlk: the groups' accumulators are min(n, 2)")
	}
	ak, aq := b.dotAccs(2)
	b.each(b.positions(), func(i int) {
		for rr := range 2 {
			x := ZMM()
			VMOVUPS(Mem{Base: pr, Disp: rr*k.rb + i*64}, x)
			b.fma(k.kreg[i], x, ak[rr][i%na], i, b.first(i))
			b.fma(k.qreg[i], x, aq[rr][i%na], i, b.first(i))
		}
	})
	k.pairSums(ak, aq, pd)
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(64), pd)
	DECQ(c)
	JNZ(LabelRef(l))
}

// pairSums adds each row's two partial sums (if two) and writes the first level of the
// transpose-add of the pair's kv' (and of its qs'), the level reduce would apply to these two
// rows, to pd (kv) and pd + 512 (qs): the same additions as reduce's, one store per pair and dot.
func (k *vkBlk) pairSums(ak, aq [][]VecVirtual, pd GPVirtual) {
	a := k.b.a
	l := vkLevels(a)[0]
	for which, acc := range [2][][]VecVirtual{ak, aq} {
		if len(acc[0]) == 2 {
			VADDPS(acc[0][1], acc[0][0], acc[0][0])
			VADDPS(acc[1][1], acc[1][0], acc[1][0])
		}
		t1, t2 := ZMM(), ZMM()
		vkShuffle(a, l.ins, l.imm1, acc[0][0], acc[1][0], t1)
		vkShuffle(a, l.ins, l.imm2, acc[0][0], acc[1][0], t2)
		VADDPS(t2, t1, t1)
		VMOVUPS(t1, Mem{Base: pd, Disp: which * vkSub / 2 * 64})
	}
}

// reduce returns the 16 totals of the kv' (which 0) or qs' (1) sums at w (the first level of
// their transpose-add, pairSums), row r in lane r.
func (k *vkBlk) reduce(w GPVirtual, which int) VecVirtual {
	a := k.b.a
	var vs []VecVirtual
	for p := range vkSub / 2 {
		x := ZMM()
		VMOVUPS(Mem{Base: w, Disp: (which*vkSub/2 + p) * 64}, x)
		vs = append(vs, x)
	}
	red := vkReduceLevels(a, vs, vkLevels(a)[1:])
	idx, out := ZMM(), ZMM()
	VMOVUPS(vkBlockPerm, idx)
	VPERMPS(red, idx, out)
	return out
}

// deltas1 computes, sub-block by sub-block, δ (to work) and o of its 16 rows from their totals.
func (k *vkBlk) deltas1(f form, c VecVirtual) {
	b := k.b
	r := b.r
	s := GP64()
	XORQ(s, s)
	l := label("bdelta")
	Label(l)
	pd := GP64()
	MOVQ(s, pd)
	SHLQ(U8(vkSumsShift), pd)
	ADDQ(r.work, pd)
	kv, qs := ZMM(), ZMM()
	VMOVUPS(Mem{Base: pd, Disp: k.sums()}, kv)
	VMOVUPS(Mem{Base: pd, Disp: k.sums() + 64}, qs)
	b.decay(f, c, kv)
	b.decay(f, c, qs)
	s64 := GP64()
	MOVQ(s, s64)
	SHLQ(U8(6), s64)
	vv := ZMM()
	VMOVUPS(Mem{Base: r.pv, Index: s64, Scale: 1}, vv)
	VSUBPS(kv, vv, vv) // v − decay(kv')
	beta, d := ZMM(), ZMM()
	VBROADCASTSS(Mem{Base: r.pt, Disp: 8}, beta)
	VMULPS(beta, vv, d) // δ
	w := k.workPtr(k.deltas())
	VMOVUPS(d, Mem{Base: w, Index: s64, Scale: 1})
	kq := ZMM()
	VBROADCASTSS(Mem{Base: r.pt, Disp: 12}, kq)
	VFMADD231PS(kq, d, qs) // o = decay(qs') + kq·δ
	VMOVUPS(qs, Mem{Base: r.po, Index: s64, Scale: 1})
	INCQ(s)
	CMPQ(s, r.nb)
	JB(LabelRef(l))
}

// update advances the block's rows in work by the call's last token: S ← decay(S) + k̂·δ_r (k̂
// from memory), two rows per iteration.
func (k *vkBlk) update(f form, c VecVirtual) {
	b := k.b
	pr, pd := k.workPtr(0), k.workPtr(k.deltas())
	cnt := GP64()
	MOVQ(b.r.nb, cnt)
	SHLQ(U8(3), cnt) // 16·nb/2
	l := label("bupdate")
	Label(l)
	var db [2]VecVirtual
	for rr := range 2 {
		db[rr] = ZMM()
		VBROADCASTSS(Mem{Base: pd, Disp: 4 * rr}, db[rr])
	}
	b.each(b.positions(), func(i int) {
		for rr := range 2 {
			y := ZMM()
			m := Mem{Base: pr, Disp: rr*k.rb + i*64}
			VMOVUPS(m, y)
			b.update(f, c, b.kMem(b.r.pk, i), db[rr], y, i)
			VMOVUPS(y, m)
		}
	})
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(8), pd)
	DECQ(cnt)
	JNZ(LabelRef(l))
}
