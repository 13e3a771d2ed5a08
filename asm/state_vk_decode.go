package main

// The [V][K] paths of one token with a store (a decode step: T = 1, stores[0] not nil), from src
// to stores[0] without the copies of the token loop: once (AVX2 pairs), direct (AVX-512 f32, k̂ and
// q̂ in registers).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// unlessOneStoredToken jumps to label to unless the call is one token with a store (T = 1,
// stores[0] not nil): the decode paths from src to the store (once, direct).
func unlessOneStoredToken(r vkRegs, to string) {
	CMPQ(r.t, U8(1))
	JNE(LabelRef(to))
	q := GP64()
	loadArg("stores", q)
	CMPQ(Mem{Base: q}, U8(0))
	JE(LabelRef(to))
}

// noF32 jumps to label to if a bf16 routine's call has src32 or carry (once reads src, writes
// stores[0] and nothing else).
func noF32(to string) {
	for _, p := range []string{"src32", "carry"} {
		q := GP64()
		loadArg(p, q)
		TESTQ(q, q)
		JNZ(LabelRef(to))
	}
}

// shared returns a k̂ or q̂ vector m that both rows of once's pair multiply, loaded once into a
// register (the same bytes as the memory operand: once is AVX2 only, unmasked). AVX2 [V][K] f32
// decode, BenchmarkVKRoutine, ns per head, 3 alternating runs: 128×128 1598 → 1335 from L2,
// 1678 → 1451 over 32 heads; 96×80 803 → 671. The same in the pairs' token loop (prefill, bf16
// decode): within 2 % either way, not done.
func (b *vkBody) shared(m Mem) Op {
	x := b.a.vec()
	VMOVUPS(m, b.a.view(x))
	return b.a.view(x)
}

// pairMem is position i of row rr (0 or 1) of a pair whose row 0 is at base (element size es,
// idx = K·es): row 1 follows row 0.
func (b *vkBody) pairMem(base GPVirtual, rr, i, es int, idx GPVirtual) Mem {
	m := b.vecMem(base, i, es, idx)
	if rr == 1 {
		m.Index, m.Scale = idx, 1
		if b.tail(i) {
			m.Scale = 2
		}
	}
	return m
}

// once emits the loop over pairs of rows (while two are left) for one token (T = 1, stores[0]
// not nil; bf16: src32 and carry nil): the dots read the pair from src, the update reads it again
// (from L1; bf16 widened again) and writes stores[0], with no copy through work. bf16 takes it
// while the pair's δ are finite, rounding without the NaN select (bf16Stored's finite form); from
// the first pair with a non-finite δ on, the pairs through work (at nonFinite) take the rest,
// their rounding selecting NaN lanes. The arithmetic is the pair's (and the one-row group's); only
// the tail differs in how it is written: it is loaded without its and-mask before any store and
// updated in full, its lanes before the vector ahead of it then holding the values that vector
// gets (the same operands), and stored last. So src may be stores[0] (in place).
func (b *vkBody) once(nonFinite string) {
	v, a, r := b.v, b.a, b.r
	es, idx := 4, r.k4
	if v.st.narrow() {
		es, idx = 2, r.ks
	}
	loop, done := label("once"), label("oncedone")
	Label(loop)
	CMPQ(r.rows, U8(2))
	JB(LabelRef(done))
	Commentf("A pair of rows of %d…%d vectors, one token.", b.lo, b.n)
	p, off := GP64(), GP64()
	loadArg("src", p)
	MOVQ(r.j, off)
	IMULQ(idx, off)
	ADDQ(off, p)
	tokensStart(r)
	b.prefetch(p, 2, es)
	accK, accQ := b.dotAccs(2)
	b.each(b.positions(), func(i int) {
		km, qm := b.shared(b.kMem(r.pk, i)), b.shared(b.kMem(r.pq, i))
		for rr := range 2 {
			x := a.vec()
			b.loadVec(b.pairMem(p, rr, i, es, idx), i, v.st, a.view(x))
			b.fma(km, x, accK[rr][i%b.acc], i, b.first(i))
			b.fma(qm, x, accQ[rr][i%b.acc], i, b.first(i))
		}
	})
	d := b.finish(accK, accQ)
	dst := GP64()
	MOVQ(Mem{Base: r.ps}, dst)
	off = GP64()
	MOVQ(r.j, off)
	IMULQ(idx, off)
	ADDQ(off, dst)
	var tl [2]VecVirtual // the tails, in full
	for rr := range 2 {
		tl[rr] = a.vec()
		m := b.pairMem(p, rr, b.n-1, es, idx)
		if v.st.narrow() {
			v.st.widenTo(m, nil, a.view(tl[rr]))
		} else {
			VMOVUPS(m, a.view(tl[rr]))
		}
	}
	if v.st.finiteRound() {
		// Only when both rows' δ are finite (finiteDelta): the rounding without its NaN select.
		// Else the pairs through work take this pair and the rest (nothing is stored yet; they
		// store its o again, the same bits).
		CMPL(r.fin, U8(0))
		JNE(LabelRef(nonFinite))
	}
	store := func(x VecVirtual, i, rr int) {
		if v.st.narrow() {
			// (x is not used again; no NaN select: δ is finite here)
			v.st.round(a, piece{w: a.lanes}, x, b.pairMem(dst, rr, i, es, idx), false, true)
			return
		}
		VMOVUPS(a.view(x), b.pairMem(dst, rr, i, es, idx))
	}
	vkForm(b, func(f form, c VecVirtual) {
		db := b.deltaBroadcasts(d)
		rest := b.positions()[:b.n-1]
		if v.st.packPairs() {
			// The positions no K of the shape leaves dead, two at a time: a pair's two
			// vectors of a row rounded and narrowed together (roundPair, one 32-byte store).
			for len(rest) >= 2 && !b.guarded(rest[1]) {
				i := rest[0]
				km := [2]Op{b.shared(b.kMem(r.pk, i)), b.shared(b.kMem(r.pk, i+1))}
				for rr := range 2 {
					var x [2]VecVirtual
					for h := range 2 {
						x[h] = a.vec()
						b.loadVec(b.pairMem(p, rr, i+h, es, idx), i+h, v.st, a.view(x[h]))
						b.update(f, c, km[h], db[rr], x[h], i+h)
					}
					v.st.roundPair(a, x[0], x[1], b.pairMem(dst, rr, i, es, idx), true)
				}
				rest = rest[2:]
			}
		}
		b.each(rest, func(i int) {
			km := b.shared(b.kMem(r.pk, i))
			for rr := range 2 {
				x := a.vec()
				b.loadVec(b.pairMem(p, rr, i, es, idx), i, v.st, a.view(x))
				b.update(f, c, km, db[rr], x, i)
				store(x, i, rr)
			}
		})
		for rr := range 2 {
			x := tl[rr] // (each form's branch has its own copy of the code)
			b.decay(f, c, x)
			VFMADD231PS(b.kMem(r.pk, b.n-1), a.view(db[rr]), a.view(x))
			store(x, b.n-1, rr)
		}
	})
	ADDQ(U32(2), r.j)
	SUBQ(U32(2), r.rows)
	JMP(LabelRef(loop))
	Label(done)
}

// direct emits, for one token (T = 1) with a store (stores[0] not nil), f32, with masks (AVX-512),
// the loop over groups of b.g rows (while b.g are left) from src to stores[0] directly, with k̂ and
// q̂ in registers: per group the dots read the rows from src, the update reads them again (from
// L1) and writes them to stores[0]. The groups' loop (group) carries the rows in registers, so k̂
// and q̂ are memory operands of every FMA: 64 loads a group of two 128-element rows, against 32
// here (16 for the dots' rows, 16 for the update's). BenchmarkDriver, avx512 [V][K] f32 decode,
// Qwen3-Next, ns per head, medians of 6–8 alternating runs: with k̂ in registers B = 1
// 1442 → 1164, B = 64 2748 → 2654; q̂ too, 1210 → 1146 and 2664 → 2556.
//
// The loop is software-pipelined: the first group's dots before it, then per group its δ
// (finish), and its update position by position beside the next group's dots, so that the
// update's operations, which wait for the δ, never stand in the window ahead of the next dots
// (the last group's update alone). Zen 4, in one process, alternating, medians (minima):
// BenchmarkVKRoutine decode, ns per head, 8 runs, 128×128 2686 (2479) → 2068 (1886), 96×80
// 1195 (1067) → 1035 (992); go run ./bench, t/copy(), 6 runs, B = 1 0.80 (0.77) → 0.71 (0.70),
// B = 64 1.15 → 1.16 (from memory: the prefetch's rate, not the order, sets it). With L1-bound
// prefetches (PREFETCHT0, see prefetch) the same order was 16 % slower at B = 64, which is why
// an earlier interleaving measured worse. A row's arithmetic is the group's: the same products
// into the same accumulators in the same order, the same transpose-add and δ, the same decay and
// update per element; only where the operands are read from and when differ. In place (src =
// stores[0]) is safe: a group's update reads each vector before it writes it, masked to the
// row's K, and the next group's dots read rows that no store has reached yet.
func (b *vkBody) direct() {
	v, a, r := b.v, b.a, b.r
	if v.st.narrow() || !a.masks || b.g > 3 || b.n > vkDirectKRegs {
		panic("vkBody.direct: f32 with masks, at most 3 rows a group, k̂ and q̂ in registers")
	}
	idx := r.k4
	loop, skip := label("direct"), label("directdone")
	CMPQ(r.rows, U32(b.g))
	JB(LabelRef(skip))
	Commentf("Groups of %d rows of %d…%d vectors, one token, from src to stores[0].", b.g, b.lo, b.n)
	if b.g > 1 {
		m := GP32()
		MOVL(U32(1<<b.g-1), m)
		KMOVW(m, K6)
	}
	tokensStart(r)
	src, dst, step := GP64(), GP64(), GP64()
	loadArg("src", src)
	MOVQ(r.j, step)
	IMULQ(idx, step)
	ADDQ(step, src)
	MOVQ(Mem{Base: r.ps}, dst)
	ADDQ(step, dst)
	MOVQ(idx, step) // a group's rows in bytes
	for range b.g - 1 {
		ADDQ(idx, step)
	}
	// rowMem is position i of row rr of the group at p.
	rowMem := func(p GPVirtual, rr, i int) Mem {
		m := Mem{Base: p, Disp: i * a.bytes()}
		if rr > 0 {
			m.Index, m.Scale = idx, uint8(rr)
		}
		return m
	}
	// k̂ and q̂, a masked load per position (a dead position's registers are 0).
	kh, qh := make([]VecVirtual, b.n), make([]VecVirtual, b.n)
	for i := range kh {
		kh[i], qh[i] = a.vec(), a.vec()
		b.loadVec(b.kMem(r.pk, i), i, stF32, a.view(kh[i]))
		b.loadVec(b.kMem(r.pq, i), i, stF32, a.view(qh[i]))
	}

	// The dots of the group at p into accK, accQ (zeroed where guarded).
	accK, accQ := b.dotAccs(b.g)
	dots := func(p GPVirtual, rr, i int) {
		x := a.vec()
		b.loadVec(rowMem(p, rr, i), i, stF32, a.view(x))
		b.fma(a.view(kh[i]), x, accK[rr][i%b.acc], i, b.first(i))
		b.fma(a.view(qh[i]), x, accQ[rr][i%b.acc], i, b.first(i))
	}
	// The update of row rr's position i, from src to dst.
	update := func(f form, c VecVirtual, db []VecVirtual, rr, i int) {
		x := a.vec()
		b.loadVec(rowMem(src, rr, i), i, stF32, a.view(x))
		b.update(f, c, a.view(kh[i]), db[rr], x, i)
		if mask := b.mask(i); mask != nil {
			VMOVUPS(a.view(x), mask, rowMem(dst, rr, i))
		} else {
			VMOVUPS(a.view(x), rowMem(dst, rr, i))
		}
	}
	// The group's update from δ d, position by position, each beside the group at p's dots if p
	// is not nil.
	updates := func(d VecVirtual, p GPVirtual) {
		vkForm(b, func(f form, c VecVirtual) {
			db := b.deltaBroadcasts(d)
			b.each(b.positions(), func(i int) {
				for rr := range b.g {
					update(f, c, db, rr, i)
					if p != nil {
						dots(p, rr, i)
					}
				}
			})
		})
	}
	r.pf.group()
	b.prefetch(src, b.g, 4)
	b.each(b.positions(), func(i int) {
		for rr := range b.g {
			dots(src, rr, i)
		}
	})
	last := label("directlast")
	next := GP64()
	Label(loop)
	d := b.finish(accK, accQ)
	CMPQ(r.rows, U32(2*b.g))
	JB(LabelRef(last))
	// The next group's dots beside this group's update, position by position: the update's
	// operations, which wait for this group's δ, do not fill the window ahead of the next dots.
	MOVQ(src, next)
	ADDQ(step, next)
	r.pf.group()
	b.prefetch(next, b.g, 4)
	for rr := range b.g {
		b.zeroAccs(accK[rr])
		b.zeroAccs(accQ[rr])
	}
	updates(d, next)
	ADDQ(step, src)
	ADDQ(step, dst)
	ADDQ(U32(4*b.g), r.pv)
	ADDQ(U32(4*b.g), r.po)
	ADDQ(U32(b.g), r.j)
	SUBQ(U32(b.g), r.rows)
	JMP(LabelRef(loop))
	Label(last)
	updates(d, nil)
	// The rows done (the pointers are set again from j by the loop that takes the rest).
	ADDQ(U32(b.g), r.j)
	SUBQ(U32(b.g), r.rows)
	Label(skip)
}
