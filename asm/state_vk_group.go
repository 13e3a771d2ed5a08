package main

// A [V][K] group's token loop: the dots, δ and o of the group's rows (finish), the update in
// either decay form (vkForm), the AVX2 pairs' fused loop (fusedTokens), and the set-up, stores,
// advance and carry that every [V][K] token loop shares (tokensStart … tokensCarry).

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// group emits the loop over groups of b.g rows (while at least b.g rows are left; a partial group
// while any is).
func (b *vkBody) group() {
	v, a, r := b.v, b.a, b.r
	b.rows = make([]vkRow, b.g)
	slot := 0
	inRegs, slots, stride := a.vkRowRegs(), r.slots, 0
	if a.vkPairs() && b.g == 2 { // the pair in work: row j's position i at work + 32·(16·j + i)
		inRegs, stride = vkPairRegs, vkMaxVecs
		pw := GP64()
		MOVQ(r.work, pw)
		slots = Mem{Base: pw}
	}
	for j := range b.rows {
		b.rows[j] = vkRow{reg: make([]VecVirtual, b.n), mem: make([]Mem, b.n)}
		for i := range b.n {
			// In registers: the first inRegs − 1 positions and the last one (the tail).
			if i >= inRegs-1 && i < b.n-1 {
				if stride > 0 {
					slot = stride*j + i
				}
				b.rows[j].mem[i] = slots.Offset(a.bytes() * slot)
				slot++
				continue
			}
			b.rows[j].reg[i] = a.vec()
		}
	}
	loop, done := label("group"), label("groupsdone")
	Label(loop)
	if b.partial() {
		if b.g >= a.lanes/2 {
			panic("vkBody.group: a partial group's v and o need K6")
		}
		CMPQ(r.rows, U8(0))
		JLE(LabelRef(done))
		// K6: the group's rows, min(rows left, g) of them.
		m, c := GP32(), GP32()
		MOVL(U32(1), m)
		for k := 2; k <= b.g; k++ {
			MOVL(U32(1<<k-1), c)
			CMPQ(r.rows, U8(k))
			CMOVLGE(c, m)
		}
		KMOVW(m, K6)
	} else {
		CMPQ(r.rows, U32(b.g))
		JB(LabelRef(done))
	}
	r.pf.group()
	Commentf("Load %d row(s) of %d…%d vectors.", b.g, b.lo, b.n)
	loadRows(r, v.st, "frombf16", "loaded", b.load)
	b.tokens()
	ADDQ(U32(b.g), r.j)
	SUBQ(U32(b.g), r.rows)
	JMP(LabelRef(loop))
	Label(done)
}

// tokens emits the token loop of a loaded group and the carry.
func (b *vkBody) tokens() {
	v, r := b.v, b.r
	tokensStart(r)
	if b.a.vkPairs() {
		b.fusedTokens()
		return
	}
	loop, nostore := label("token"), label("nostore")
	Label(loop)
	b.token()
	tokensEnd(r, v.st, loop, nostore, "nocarry", b.store)
}

// token emits one token of the group.
func (b *vkBody) token() {
	// The dots.
	accK, accQ := b.dotAccs(b.g)
	b.each(b.positions(), func(i int) {
		for r := range b.g {
			x := b.get(r, i)
			b.fma(b.kMem(b.r.pk, i), x, accK[r][i%b.acc], i, b.first(i))
			b.fma(b.kMem(b.r.pq, i), x, accQ[r][i%b.acc], i, b.first(i))
		}
	})
	d := b.finish(accK, accQ)
	b.updateRows(d, nil)
}

// dotAccs allocates the Sᵀk̂ and Sᵀq̂ accumulators of rows rows (b.acc each), those whose first
// position is guarded zeroed.
func (b *vkBody) dotAccs(rows int) (accK, accQ [][]VecVirtual) {
	accK, accQ = make([][]VecVirtual, rows), make([][]VecVirtual, rows)
	for r := range rows {
		for range b.acc {
			accK[r] = append(accK[r], b.a.vec())
			accQ[r] = append(accQ[r], b.a.vec())
		}
		b.zeroAccs(accK[r])
		b.zeroAccs(accQ[r])
	}
	return accK, accQ
}

// fma: acc += m·x (acc = m·x if first), under position i's mask.
func (b *vkBody) fma(m Op, x, acc VecVirtual, i int, first bool) {
	X, A := b.a.view(x), b.a.view(acc)
	mask := b.mask(i)
	switch {
	case first && mask != nil:
		VMULPS_Z(m, X, mask, A)
	case first:
		VMULPS(m, X, A)
	case mask != nil:
		VFMADD231PS(m, X, mask, A)
	default:
		VFMADD231PS(m, X, A)
	}
}

// finish emits, from the group's dot accumulators, the transpose-add of the sums, δ and o of the
// group's rows (o stored), and returns the vector holding δ of row r in lane r.
func (b *vkBody) finish(accK, accQ [][]VecVirtual) VecVirtual {
	a := b.a
	var ins []VecVirtual
	sum := func(acc []VecVirtual) VecVirtual {
		for len(acc) > 1 {
			var n []VecVirtual
			for p := 0; p+1 < len(acc); p += 2 {
				VADDPS(a.view(acc[p+1]), a.view(acc[p]), a.view(acc[p]))
				n = append(n, acc[p])
			}
			if len(acc)%2 == 1 {
				n = append(n, acc[len(acc)-1])
			}
			acc = n
		}
		return acc[0]
	}
	for r := range b.g {
		ins = append(ins, sum(accK[r]))
	}
	for r := range b.g {
		ins = append(ins, sum(accQ[r]))
	}
	red := vkReduce(a, ins)
	idx := a.vec()
	VMOVUPS(vkPerm[fmt.Sprintf("vkperm%s_%d", a.name, b.g)], a.view(idx))
	p := a.vec()
	VPERMPS(a.view(red), a.view(idx), a.view(p)) // kv_r at r, qs_r at lanes/2 + r
	vkForm(b, func(f form, c VecVirtual) { b.decay(f, c, p) })
	// δ and o for the group's rows at once (the low half of p: kv, the high half: qs).
	half := a.vkHalf
	hi := a.vec()
	a.vkExtractHigh(p, hi)
	vv := a.vec()
	switch {
	case b.g == 1:
		VMOVSS(Mem{Base: b.r.pv}, vv.AsX())
	case b.g == 2 && !a.masks:
		VMOVSD(Mem{Base: b.r.pv}, vv.AsX())
	case b.g == a.lanes/2:
		VMOVUPS(Mem{Base: b.r.pv}, half(vv))
	default:
		VMOVUPS_Z(Mem{Base: b.r.pv}, K6, half(vv))
	}
	VSUBPS(half(p), half(vv), half(vv)) // v − decay(kv')
	beta := a.vec()
	VBROADCASTSS(Mem{Base: b.r.pt, Disp: 8}, a.view(beta))
	d := a.vec()
	if b.loopD {
		a.zero(d)
	}
	VMULPS(half(beta), half(vv), half(d)) // δ
	kq := a.vec()
	VBROADCASTSS(Mem{Base: b.r.pt, Disp: 12}, a.view(kq))
	VFMADD231PS(half(kq), half(d), half(hi)) // o = decay(qs') + kq·δ
	switch {
	case b.g == 1:
		VMOVSS(hi.AsX(), Mem{Base: b.r.po})
	case b.g == 2 && !a.masks:
		VMOVSD(hi.AsX(), Mem{Base: b.r.po})
	case b.g == a.lanes/2:
		VMOVUPS(half(hi), Mem{Base: b.r.po})
	default:
		VMOVUPS(half(hi), K6, Mem{Base: b.r.po})
	}
	if b.v.st.finiteRound() && !a.evex {
		// For a token with a store only: a prefill's other tokens would pay for it (about 4 % of
		// an AVX2 pair's token). (AVX-512: storeRows does not use it.)
		none := label("nofin")
		q := GP64()
		MOVQ(Mem{Base: b.r.ps}, q)
		TESTQ(q, q)
		JZ(LabelRef(none))
		finiteDelta(a, half, d, 1<<b.g-1, b.r.fin)
		Label(none)
	}
	return d
}

// deltaBroadcasts returns δ of each row of the group (lane r of d) broadcast.
func (b *vkBody) deltaBroadcasts(d VecVirtual) []VecVirtual {
	a := b.a
	db := make([]VecVirtual, b.g)
	for r := range b.g {
		db[r] = a.vec()
		if r == 0 {
			VBROADCASTSS(d.AsX(), a.view(db[r]))
		} else {
			ix := a.vec()
			VMOVUPS(vkLane[r], a.view(ix))
			VPERMPS(a.view(d), a.view(ix), a.view(db[r]))
		}
	}
	return db
}

// updateRows emits the rows' update by this token's δ (lane r of d): S ← decay(S) + k̂·δ_r,
// position by position (one guard for the group's rows); then, if next is not nil, next(r, i, x)
// with the updated vector x of row r at position i.
func (b *vkBody) updateRows(d VecVirtual, next func(r, i int, x VecVirtual)) {
	vkForm(b, func(f form, c VecVirtual) {
		db := b.deltaBroadcasts(d)
		b.each(b.positions(), func(i int) {
			for r := range b.g {
				x := b.get(r, i)
				b.update(f, c, b.kMem(b.r.pk, i), db[r], x, i)
				b.put(r, i, x)
				if next != nil {
					next(r, i, x)
				}
			}
		})
	})
}

// update replaces x (position i) by decay(x) + m·db in form f (c: em1 or eg), under i's mask.
func (b *vkBody) update(f form, c VecVirtual, m Op, db, x VecVirtual, i int) {
	b.decay(f, c, x)
	if mask := b.mask(i); mask != nil {
		VFMADD231PS(m, b.a.view(db), mask, b.a.view(x))
	} else {
		VFMADD231PS(m, b.a.view(db), b.a.view(x))
	}
	if b.tail(i) {
		VANDPS(b.r.andMask, b.a.view(x), b.a.view(x))
	}
}

// decay replaces x by decay(x) in form f, c holding em1 or eg.
func (b *vkBody) decay(f form, c, x VecVirtual) {
	pc := piece{w: b.a.lanes}
	pc.decay(f, c, x)
}

// vkForm emits body for each decay form of the current token (pt), em1 compared with nearOne.
func vkForm(b *vkBody, body func(f form, c VecVirtual)) {
	far, join := label("far"), label("decayed")
	x := XMM()
	VMOVSS(Mem{Base: b.r.pt}, x)
	VUCOMISS(cNearOne, x) // CF: em1 < nearOne or unordered
	JCS(LabelRef(far))
	c := b.a.vec()
	VBROADCASTSS(Mem{Base: b.r.pt}, b.a.view(c))
	body(nearForm, c)
	JMP(LabelRef(join))
	Label(far)
	c = b.a.vec()
	VBROADCASTSS(Mem{Base: b.r.pt, Disp: 4}, b.a.view(c))
	body(farForm, c)
	Label(join)
}

// fusedTokens emits the token loop of a loaded AVX2 group (a pair in work, or an odd V's last
// row): the dots of token 0, then per token the transpose-add, δ and o, and the update, which
// takes the next token's dots from each vector it updates, so that a row is read once a token
// instead of twice. The last token's update takes no dots; nor does a bf16 token's with a store
// (its rounding's temporaries do not fit beside the accumulators): the next token's dots then
// follow the store in a pass of their own. The same products and sums, per accumulator in the
// same order, as token's: the same bits. (BenchmarkVKRoutine, T = 64, on a Zen 3, 3 alternating
// runs, medians, µs per head-token: f32 128×128 3.30 → 2.93, 96×80 1.59 → 1.52; bf16 3.28 →
// 2.76 and 1.64 → 1.61.)
func (b *vkBody) fusedTokens() {
	v, r := b.v, b.r
	b.loopD = true
	accK, accQ := b.dotAccs(b.g)
	dots := func() {
		b.each(b.positions(), func(i int) {
			for rr := range b.g {
				x := b.get(rr, i)
				b.fma(b.kMem(r.pk, i), x, accK[rr][i%b.acc], i, b.first(i))
				b.fma(b.kMem(r.pq, i), x, accQ[rr][i%b.acc], i, b.first(i))
			}
		})
	}
	zeroAccs := func() {
		for rr := range b.g {
			b.zeroAccs(accK[rr])
			b.zeroAccs(accQ[rr])
		}
	}
	dots()
	loop, last, stored, done := label("token"), label("lasttoken"), label("stored"), label("tokensdone")
	Label(loop)
	d := b.finish(accK, accQ)
	CMPQ(r.cnt, U8(1))
	JE(LabelRef(last))
	if v.st.narrow() {
		p := GP64()
		MOVQ(Mem{Base: r.ps}, p)
		TESTQ(p, p)
		JNZ(LabelRef(last))
	}
	zeroAccs()
	b.updateRows(d, func(rr, i int, x VecVirtual) {
		b.fma(b.nextKMem(r.pk, i), x, accK[rr][i%b.acc], i, b.first(i))
		b.fma(b.nextKMem(r.pq, i), x, accQ[rr][i%b.acc], i, b.first(i))
	})
	if v.st.narrow() {
		tokenNext(r)
		DECQ(r.cnt)
		JMP(LabelRef(loop))
	} else {
		JMP(LabelRef(stored))
	}
	Label(last)
	if !v.st.narrow() {
		// (The accumulators zeroed, a write, so that they are dead from the transpose-add on: the
		// last token's rows are stored with the fused pass's code, which they go through.)
		for rr := range b.g {
			for _, x := range append(append([]VecVirtual{}, accK[rr]...), accQ[rr]...) {
				b.a.zero(x)
			}
		}
	}
	b.updateRows(d, nil)
	Label(stored)
	tokenStore(r, v.st, label("nostore"), b.store)
	CMPQ(r.cnt, U8(1))
	JE(LabelRef(done))
	tokenNext(r)
	DECQ(r.cnt)
	if v.st.narrow() {
		zeroAccs()
		dots()
	}
	JMP(LabelRef(loop))
	Label(done)
	tokensCarry(r, v.st, "nocarry", b.store)
}

// nextKMem is vector i of the next token's [K] f32 row (k̂ or q̂) after the one at base.
func (b *vkBody) nextKMem(base GPVirtual, i int) Mem {
	if b.tail(i) {
		return Mem{Base: base, Index: b.r.k4, Scale: 2, Disp: -b.a.lanes * 4}
	}
	return Mem{Base: base, Index: b.r.k4, Scale: 1, Disp: i * b.a.lanes * 4}
}

// tokensStart emits the set-up of a [V][K] token loop: the k̂, q̂, tok and stores pointers, v and
// o advanced to the first row (column) j, the token count.
func tokensStart(r vkRegs) {
	loadArg("kh", r.pk)
	loadArg("qh", r.pq)
	loadArg("tok", r.pt)
	loadArg("stores", r.ps)
	loadArg("v", r.pv)
	loadArg("o", r.po)
	j4 := GP64()
	MOVQ(r.j, j4)
	SHLQ(U8(2), j4)
	ADDQ(j4, r.pv)
	ADDQ(j4, r.po)
	MOVQ(r.t, r.cnt)
}

// tokensEnd emits the end of a [V][K] token iteration: the rows stored (store, rounded to its
// storage for a narrow routine) where the token has a store, every pointer on to the next token, the loop
// back to loop and, after the last token of a narrow routine, the f32 carry if asked for (its label
// made from carryLabel here, so that labels keep their order in the output).
func tokensEnd(r vkRegs, st storage, loop, nostore, carryLabel string, store func(d GPVirtual, st storage)) {
	tokenStore(r, st, nostore, store)
	tokenNext(r)
	DECQ(r.cnt)
	JNZ(LabelRef(loop))
	tokensCarry(r, st, carryLabel, store)
}

// tokenStore emits the rows' store (store, rounded for a narrow routine) if the token has
// one, on to nostore if not.
func tokenStore(r vkRegs, st storage, nostore string, store func(d GPVirtual, st storage)) {
	Comment("The state after this token, if stored.")
	d := GP64()
	MOVQ(Mem{Base: r.ps}, d)
	TESTQ(d, d)
	JZ(LabelRef(nostore))
	off := GP64()
	MOVQ(r.j, off)
	if st.narrow() {
		IMULQ(r.ks, off)
	} else {
		IMULQ(r.k4, off)
	}
	ADDQ(off, d)
	store(d, st)
	Label(nostore)
}

// tokenNext moves every token pointer on to the next token.
func tokenNext(r vkRegs) {
	ADDQ(r.k4, r.pk)
	ADDQ(r.k4, r.pq)
	ADDQ(U8(16), r.pt)
	ADDQ(U8(8), r.ps)
	ADDQ(r.vs4, r.pv)
	ADDQ(r.v4, r.po)
}

// tokensCarry emits, after the last token of a narrow routine, the f32 carry if asked for (its label
// made from carryLabel).
func tokensCarry(r vkRegs, st storage, carryLabel string, store func(d GPVirtual, st storage)) {
	if !st.narrow() {
		return
	}
	Comment("The f32 carry after the last token, if asked for.")
	nocarry := label(carryLabel)
	d := GP64()
	loadArg("carry", d)
	TESTQ(d, d)
	JZ(LabelRef(nocarry))
	off := GP64()
	MOVQ(r.j, off)
	IMULQ(r.k4, off)
	ADDQ(off, d)
	store(d, stF32)
	Label(nocarry)
}
