package main

// The AVX-512 [V][K] row blocks: rows in an L1 work space, many of them in flight per token.
//
// Rows of K ≤ 16·vkBlockVecs elements go in blocks of nb·16 rows (nb = 2, then 1, while that many
// rows are left; the rest take the register groups of state_vk.go). A block is copied into work
// once (bf16 widened), advanced through all T tokens there and copied out at every token with a
// store (and into the f32 carry). Per token, with k̂ in registers:
//
//	for each sub-block s of 16 rows:  the dots of its rows (2 accumulators per dot, i mod 2,
//	                                  added), written to work; then one transpose-add of the 16
//	                                  kv' and one of the 16 qs' (each into one vector, row r's
//	                                  total permuted to lane r)
//	decay form branch:                δ and o of each sub-block as one vector (δ to work);
//	                                  S[j][i] ← decay(S[j][i]) + k̂_i·δ_j for its rows
//
// The rows of a sub-block are independent, so their dot and update chains overlap (out of order);
// the reduction of sub-block 0 overlaps the dots of sub-block 1 and its δ, update the reduction of
// sub-block 1. The arithmetic of a row is that of a register group (same products, same order:
// vkGroup gives 2 accumulators at K = 128), and it does not depend on T.

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// vkSub is the rows of a sub-block (one reduction into one ZMM); vkBlockVecs the most vectors per
// row a block takes (k̂ lives in vkBlockVecs ZMM).
const (
	vkSub       = 16
	vkBlockVecs = 8
)

// vkBlockWork is the work space the blocks need at most, in bytes (without the alignment).
const vkBlockWork = 2*vkSub*64*vkBlockVecs + 2*2*vkSub*64 + 2*64

type vkBlk struct {
	b    *vkBody
	nb   int          // sub-blocks
	rb   int          // row stride in work, bytes
	kreg []VecVirtual // k̂ of the token
	qreg []VecVirtual // q̂ of the token
}

func (k *vkBlk) rows() int { return k.nb * vkSub }

// dotOff is the offset in work of row r's kv' (which 0) or qs' (1) sum of sub-block s.
func (k *vkBlk) dotOff(s, which, r int) int {
	return k.rows()*k.rb + ((2*s+which)*vkSub+r)*64
}

// dOff is the offset in work of sub-block s's δ vector.
func (k *vkBlk) dOff(s int) int { return k.rows()*k.rb + 2*k.nb*vkSub*64 + s*64 }

func (k *vkBlk) workPtr(off int) GPVirtual {
	p := GP64()
	MOVQ(k.b.r.work, p)
	if off != 0 {
		ADDQ(U32(off), p)
	}
	return p
}

// emit emits the loop over blocks (while at least rows() rows are left).
func (k *vkBlk) emit() {
	b := k.b
	v, r := b.v, b.r
	if k.rows()*k.rb+2*k.nb*vkSub*64+k.nb*64 > vkBlockWork {
		panic("vkBlk: work too small")
	}
	loop, done := label("block"), label("blocksdone")
	Label(loop)
	CMPQ(r.rows, U32(k.rows()))
	JB(LabelRef(done))
	Commentf("A block of %d rows of %d vectors in work.", k.rows(), b.n)
	loadRows(r, v.bf16, "bfrombf16", "bloaded", k.load)
	k.tokens()
	ADDQ(U32(k.rows()), r.j)
	SUBQ(U32(k.rows()), r.rows)
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
	c := GP64()
	MOVQ(U32(k.rows()), c)
	l := label("bload")
	Label(l)
	for off := 0; off < b.n*16*es; off += 64 {
		PREFETCHT0(Mem{Base: p, Disp: vkAhead + off})
	}
	for i := range b.n {
		x := ZMM()
		m := Mem{Base: p, Disp: i * 16 * es}
		switch {
		case bf16 && b.masked(i):
			VPMOVZXWD_Z(m, K1, x)
		case bf16:
			VPMOVZXWD(m, x)
		case b.masked(i):
			VMOVUPS_Z(m, K1, x)
		default:
			VMOVUPS(m, x)
		}
		if bf16 {
			VPSLLD(U8(16), x, x)
		}
		VMOVUPS(x, Mem{Base: w, Disp: i * 64})
	}
	ADDQ(idx, p)
	ADDQ(U32(k.rb), w)
	DECQ(c)
	JNZ(LabelRef(l))
}

// store copies the block's rows from work to d (clobbered), bf16-rounded if bf16.
func (k *vkBlk) store(d GPVirtual, bf16 bool) {
	b := k.b
	es, idx := 4, b.r.k4
	if bf16 {
		es, idx = 2, b.r.ks
	}
	w := k.workPtr(0)
	c := GP64()
	MOVQ(U32(k.rows()), c)
	l := label("bstore")
	Label(l)
	for i := range b.n {
		x := ZMM()
		VMOVUPS(Mem{Base: w, Disp: i * 64}, x)
		m := Mem{Base: d, Disp: i * 16 * es}
		var mask Register
		if b.masked(i) {
			mask = K1
		}
		switch {
		case bf16:
			bf16Store(b.a, piece{w: 16, mask: mask}, x, m)
		case mask != nil:
			VMOVUPS(x, mask, m)
		default:
			VMOVUPS(x, m)
		}
	}
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
	k.kreg = make([]VecVirtual, b.n)
	for i := range b.n {
		k.kreg[i] = ZMM()
		if b.masked(i) {
			VMOVUPS_Z(b.kMem(r.pk, i), K1, k.kreg[i])
		} else {
			VMOVUPS(b.kMem(r.pk, i), k.kreg[i])
		}
	}
	k.qreg = make([]VecVirtual, b.n)
	for i := range b.n {
		k.qreg[i] = ZMM()
		if b.masked(i) {
			VMOVUPS_Z(b.kMem(r.pq, i), K1, k.qreg[i])
		} else {
			VMOVUPS(b.kMem(r.pq, i), k.qreg[i])
		}
	}
	kv, qs := make([]VecVirtual, k.nb), make([]VecVirtual, k.nb)
	for s := range k.nb {
		k.dots(s)
		kv[s], qs[s] = k.reduce(s, 0), k.reduce(s, 1)
	}
	vkForm(b, func(f form, c VecVirtual) {
		for s := range k.nb {
			k.delta(s, f, c, kv[s], qs[s])
		}
		for s := range k.nb {
			k.update(s, f, c)
		}
	})
	tokensEnd(r, v.bf16, loop, nostore, "bnocarry", k.store)
}

// dots writes the kv' and qs' sums (vectors) of sub-block s's rows to work, two rows per
// iteration.
func (k *vkBlk) dots(s int) {
	b := k.b
	pr, pd := k.workPtr(s*vkSub*k.rb), k.workPtr(k.dotOff(s, 0, 0))
	c := GP64()
	MOVQ(U32(vkSub/2), c)
	l := label("bdots")
	Label(l)
	na := min(b.n, 2)
	for rr := range 2 {
		var ak, aq []VecVirtual
		for range na {
			ak, aq = append(ak, ZMM()), append(aq, ZMM())
		}
		for i := range b.n {
			x := ZMM()
			VMOVUPS(Mem{Base: pr, Disp: rr*k.rb + i*64}, x)
			b.fma(k.kreg[i], x, ak[i%na], i, i < na)
			b.fma(k.qreg[i], x, aq[i%na], i, i < na)
		}
		if na == 2 {
			VADDPS(ak[1], ak[0], ak[0])
			VADDPS(aq[1], aq[0], aq[0])
		}
		VMOVUPS(ak[0], Mem{Base: pd, Disp: rr * 64})
		VMOVUPS(aq[0], Mem{Base: pd, Disp: vkSub*64 + rr*64})
	}
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(128), pd)
	DECQ(c)
	JNZ(LabelRef(l))
}

// reduce returns the 16 totals of sub-block s's kv' (which 0) or qs' (1) sums, row r in lane r.
func (k *vkBlk) reduce(s, which int) VecVirtual {
	a := k.b.a
	w := k.workPtr(k.dotOff(s, which, 0))
	levels := vkLevels(a)
	l := levels[0]
	var vs []VecVirtual
	for p := 0; p < vkSub; p += 2 {
		x, y := ZMM(), ZMM()
		VMOVUPS(Mem{Base: w, Disp: p * 64}, x)
		VMOVUPS(Mem{Base: w, Disp: (p + 1) * 64}, y)
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

// delta computes δ (to work) and o of sub-block s's 16 rows.
func (k *vkBlk) delta(s int, f form, c, kv, qs VecVirtual) {
	b := k.b
	r := b.r
	b.decay(f, c, kv)
	b.decay(f, c, qs)
	vv := ZMM()
	VMOVUPS(Mem{Base: r.pv, Disp: s * 64}, vv)
	VSUBPS(kv, vv, vv) // v − decay(kv')
	beta, d := ZMM(), ZMM()
	VBROADCASTSS(Mem{Base: r.pt, Disp: 8}, beta)
	VMULPS(beta, vv, d) // δ
	w := k.workPtr(k.dOff(s))
	VMOVUPS(d, Mem{Base: w})
	kq := ZMM()
	VBROADCASTSS(Mem{Base: r.pt, Disp: 12}, kq)
	VFMADD231PS(kq, d, qs) // o = decay(qs') + kq·δ
	VMOVUPS(qs, Mem{Base: r.po, Disp: s * 64})
}

// update advances sub-block s's rows in work: S ← decay(S) + k̂·δ_r, two rows per iteration.
func (k *vkBlk) update(s int, f form, c VecVirtual) {
	b := k.b
	pr, pd := k.workPtr(s*vkSub*k.rb), k.workPtr(k.dOff(s))
	cnt := GP64()
	MOVQ(U32(vkSub/2), cnt)
	l := label("bupdate")
	Label(l)
	for rr := range 2 {
		db := ZMM()
		VBROADCASTSS(Mem{Base: pd, Disp: 4 * rr}, db)
		for i := range b.n {
			y := ZMM()
			m := Mem{Base: pr, Disp: rr*k.rb + i*64}
			VMOVUPS(m, y)
			b.decay(f, c, y)
			if b.masked(i) {
				VFMADD231PS(k.kreg[i], db, K1, y)
			} else {
				VFMADD231PS(k.kreg[i], db, y)
			}
			VMOVUPS(y, m)
		}
	}
	ADDQ(U32(2*k.rb), pr)
	ADDQ(U8(8), pd)
	DECQ(cnt)
	JNZ(LabelRef(l))
}
