package main

// The AVX-512 [V][K] row blocks: rows in an L1 work space, many of them in flight per token.
//
// Rows of K ≤ 16·vkBlockVecs elements go in blocks of nb·16 rows (nb = 2 sub-blocks while 32 rows
// are left, then 1 while 16 are; the rest take the register groups of state_vk.go). A block is
// copied into work once (bf16 widened), advanced through all T tokens there and copied out at
// every token with a store (and into the f32 carry). Per token, with k̂ and q̂ in registers:
//
//	for each sub-block s of 16 rows:  the dots of its rows (2 accumulators per dot, i mod 2,
//	                                  added), written to work; then one transpose-add of the 16
//	                                  kv' and one of the 16 qs' (each into one vector, row r's
//	                                  total permuted to lane r), written over the first two sums
//	decay form branch:                δ and o of each sub-block as one vector (δ to work); then
//	                                  S[j][i] ← decay(S[j][i]) + k̂_i·δ_j for the block's rows
//
// The rows of a sub-block are independent, so their dot and update chains overlap (out of order);
// the reduction of sub-block 0 overlaps the dots of sub-block 1. nb is a runtime count (a frame
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
// rows, then per sub-block the 16 kv' and 16 qs' sums, then the δ vectors.
const vkBlockWork = vkMaxSub*vkSub*64*vkBlockVecs + vkMaxSub*2*vkSub*64 + vkMaxSub*64

type vkBlk struct {
	b    *vkBody
	rb   int          // row stride in work, bytes
	kreg []VecVirtual // k̂ of the token
	qreg []VecVirtual // q̂ of the token
}

// sums is the offset in work of sub-block 0's sums: row r's kv' at sums + 64·r, qs' at
// sums + 64·(16 + r); sub-block s's 2048·s further on. The totals of sub-block s (kv, qs) go over
// its first two kv' sums once they are reduced.
func (k *vkBlk) sums() int { return vkMaxSub * vkSub * k.rb }

const vkSumsStride = 2 * vkSub * 64

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
	loadRows(r, v.bf16, "bfrombf16", "bloaded", k.load)
	k.tokens()
	c := k.rowCount()
	ADDQ(c, r.j)
	SUBQ(c, r.rows)
	JMP(LabelRef(loop))
	Label(done)
}

// load copies the block's rows from p (clobbered) into work, bf16 widened.
func (k *vkBlk) load(p GPVirtual, bf16 bool) {
	b := k.b
	es, idx := 4, b.r.k4
	if bf16 {
		es, idx = 2, b.r.ks
	}
	w := k.workPtr(0)
	c := k.rowCount()
	l := label("bload")
	Label(l)
	b.prefetch(p, 1, es)
	for i := range b.n { // (a dead position's mask is empty: 0 in work)
		x := ZMM()
		b.loadVec(Mem{Base: p, Disp: i * 16 * es}, i, bf16, x)
		VMOVUPS(x, Mem{Base: w, Disp: i * 64})
	}
	ADDQ(idx, p)
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// store copies the block's rows from work to d (clobbered), bf16-rounded if bf16. An f32
// routine's token store goes with non-temporal stores (storeNT) when K is the shape's whole
// vectors, d is aligned to 64 bytes and the store is a snapshot: any but the last token's, and
// the last token's after a token with one (as the [K][V] routines: see ntSpan).
func (k *vkBlk) store(d GPVirtual, bf16 bool) {
	b := k.b
	if bf16 || !b.v.bf16 { // a token's store, not a bf16 routine's f32 carry
		temporal, done := label("btemporal"), label("bstored")
		vkSnapshot(b.r, b.a, b.n, es(bf16), d, temporal, label("bsnapshot"))
		k.storeNT(d, bf16)
		JMP(LabelRef(done))
		Label(temporal)
		k.storeRows(d, bf16)
		Label(done)
		return
	}
	k.storeRows(d, bf16)
}

// es is the bytes of a stored element.
func es(bf16 bool) int {
	if bf16 {
		return 2
	}
	return 4
}

// storeNT copies the block's rows from work to d (clobbered) with non-temporal stores, rounded to
// bf16 if bf16: every position whole (K = 16·n).
func (k *vkBlk) storeNT(d GPVirtual, bf16 bool) {
	b := k.b
	w := k.workPtr(0)
	c := k.rowCount()
	l := label("bstorent")
	Label(l)
	for i := range b.n {
		x := ZMM()
		VMOVUPS(Mem{Base: w, Disp: i * 64}, x)
		if bf16 {
			bf16NT(b.a, x, Mem{Base: d, Disp: i * 32})
		} else {
			VMOVNTPS(x, Mem{Base: d, Disp: i * 64})
		}
	}
	if bf16 {
		ADDQ(b.r.ks, d)
	} else {
		ADDQ(b.r.k4, d)
	}
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// storeRows copies the block's rows from work to d (clobbered), bf16-rounded if bf16.
func (k *vkBlk) storeRows(d GPVirtual, bf16 bool) {
	b := k.b
	es, idx := 4, b.r.k4
	if bf16 {
		es, idx = 2, b.r.ks
	}
	w := k.workPtr(0)
	c := k.rowCount()
	l := label("bstore")
	Label(l)
	b.each(b.positions(), func(i int) {
		x := ZMM()
		VMOVUPS(Mem{Base: w, Disp: i * 64}, x)
		m := Mem{Base: d, Disp: i * 16 * es}
		if bf16 {
			bf16Store(b.a, piece{w: 16, mask: b.mask(i)}, x, m)
		} else {
			b.storeVec(x, m, i, false)
		}
	})
	ADDQ(idx, d)
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// tokens emits the token loop of a block in work, its stores and the carry.
func (k *vkBlk) tokens() {
	b := k.b
	v, r := b.v, b.r
	tokensStart(r)
	loop, nostore := label("btoken"), label("bnostore")
	Label(loop)
	r.pf.group()
	k.kreg = make([]VecVirtual, b.n)
	for i := range b.n {
		k.kreg[i] = ZMM()
		b.loadVec(b.kMem(r.pk, i), i, false, k.kreg[i])
	}
	k.qreg = make([]VecVirtual, b.n)
	for i := range b.n {
		k.qreg[i] = ZMM()
		b.loadVec(b.kMem(r.pq, i), i, false, k.qreg[i])
	}
	// The dots and their totals, sub-block by sub-block.
	s := GP64()
	XORQ(s, s)
	sub := label("bsub")
	Label(sub)
	pr := GP64()
	MOVQ(s, pr)
	IMUL3Q(U32(vkSub*k.rb), pr, pr)
	ADDQ(r.work, pr)
	pd := GP64()
	MOVQ(s, pd)
	SHLQ(U8(11), pd) // vkSumsStride
	ADDQ(r.work, pd)
	ADDQ(U32(k.sums()), pd)
	k.dots(pr, pd)
	SUBQ(U32(vkSub*64), pd) // back to the sub-block's first sum
	kv, qs := k.reduce(pd, 0), k.reduce(pd, 1)
	VMOVUPS(kv, Mem{Base: pd})
	VMOVUPS(qs, Mem{Base: pd, Disp: 64})
	INCQ(s)
	CMPQ(s, r.nb)
	JB(LabelRef(sub))
	vkForm(b, func(f form, c VecVirtual) {
		k.deltas1(f, c)
		k.update(f, c)
	})
	tokensEnd(r, v.bf16, loop, nostore, "bnocarry", k.store)
}

// dots writes the kv' and qs' sums (vectors) of the sub-block's rows at pr (clobbered) to pd
// (clobbered: it ends 16 sums on), two rows per iteration.
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
	var ak, aq [2][]VecVirtual
	for rr := range 2 {
		for range na {
			ak[rr], aq[rr] = append(ak[rr], ZMM()), append(aq[rr], ZMM())
		}
		b.zeroAccs(ak[rr])
		b.zeroAccs(aq[rr])
	}
	b.each(b.positions(), func(i int) {
		for rr := range 2 {
			x := ZMM()
			VMOVUPS(Mem{Base: pr, Disp: rr*k.rb + i*64}, x)
			b.fma(k.kreg[i], x, ak[rr][i%na], i, b.first(i))
			b.fma(k.qreg[i], x, aq[rr][i%na], i, b.first(i))
		}
	})
	for rr := range 2 {
		if na == 2 {
			VADDPS(ak[rr][1], ak[rr][0], ak[rr][0])
			VADDPS(aq[rr][1], aq[rr][0], aq[rr][0])
		}
		VMOVUPS(ak[rr][0], Mem{Base: pd, Disp: rr * 64})
		VMOVUPS(aq[rr][0], Mem{Base: pd, Disp: vkSub*64 + rr*64})
	}
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(128), pd)
	DECQ(c)
	JNZ(LabelRef(l))
}

// reduce returns the 16 totals of the kv' (which 0) or qs' (1) sums at w, row r in lane r.
func (k *vkBlk) reduce(w GPVirtual, which int) VecVirtual {
	a := k.b.a
	levels := vkLevels(a)
	l := levels[0]
	var vs []VecVirtual
	for p := 0; p < vkSub; p += 2 {
		x, y := ZMM(), ZMM()
		VMOVUPS(Mem{Base: w, Disp: (which*vkSub + p) * 64}, x)
		VMOVUPS(Mem{Base: w, Disp: (which*vkSub + p + 1) * 64}, y)
		t1, t2 := ZMM(), ZMM()
		vkShuffle(a, l.ins, l.imm1, x, y, t1)
		vkShuffle(a, l.ins, l.imm2, x, y, t2)
		VADDPS(t2, t1, t1)
		vs = append(vs, t1)
	}
	red := vkReduceLevels(a, vs, levels[1:])
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
	SHLQ(U8(11), pd) // vkSumsStride
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

// update advances the block's rows in work: S ← decay(S) + k̂·δ_r, two rows per iteration.
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
			b.update(f, c, k.kreg[i], db[rr], y, i)
			VMOVUPS(y, m)
		}
	})
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(8), pd)
	DECQ(cnt)
	JNZ(LabelRef(l))
}
