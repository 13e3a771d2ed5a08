package main

// A token's pass over a [K][V] column block (state_kv_tokens.go): δ and o from the accumulators
// (deltas), the bases of the token's store and carry, then the loop over the rows in work (rows):
// each row decayed by its pair (rowDecays) and updated, stored back with the next token's
// accumulation, and stored to the token's store (bf16 rounded) and the carry where asked.

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// token emits one token over the block: δ and o from the accumulators, decayed by the token's
// pair (cpair), then the pass over the rows in work (update, stores, the next token's
// accumulation), each row decayed by its pair (rowDecays).
func (g *kvGen) token(s span, accK, accQ []VecVirtual, out string) {
	a, ps := g.a, s.ps
	d := g.deltas(s, accK, accQ)
	for t := range ps {
		a.zero(accK[t])
		a.zero(accQ[t])
	}
	Comment("S' = decay(S) + k̂_i·δ, stored where asked; the next token's Sᵀk̂, Sᵀq̂ from it.")
	r := &kvRows{s: s, d: d, accK: accK, accQ: accQ}
	r.w, r.i, r.k, r.kp, r.kn, r.qn = GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	MOVQ(g.work, r.w)
	XORQ(r.i, r.i)
	loadArg("K", r.k)
	MOVQ(g.kp, r.kp)
	MOVQ(g.knp, r.kn)
	MOVQ(g.qnp, r.qn)
	j0 := GP64()
	MOVQ(g.j0, j0)
	r.dst, r.dstStride = g.storeBase(s, j0)
	if g.st.narrow() {
		r.carry, r.cStride = g.carryBase(j0)
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
		g.rows(r, false)
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
		g.rows(r, false)
		g.near = false
		JMP(LabelRef(done))
		Label(pair)
	}
	g.rows(r, false)
	JMP(LabelRef(done))
	Label(last)
	g.rows(r, true)
	JMP(LabelRef(out))
	Label(done)
}

// kvRows are the registers of a token's pass over the block's rows (token sets them up, rows
// emits the pass).
type kvRows struct {
	s              span
	d              []VecVirtual // δ of the block's pieces in registers, or nil: in the frame (deltaInFrame)
	accK, accQ     []VecVirtual // the next token's Sᵀk̂ and Sᵀq̂
	w, i, k        GPVirtual    // the row in work, its index, K
	kp, kn, qn     GPVirtual    // k̂ of this token, k̂ and q̂ of the next
	dst, dstStride GPVirtual    // the row in the token's store (0: none), the store's row stride
	carry, cStride GPVirtual    // bf16: the row in the carry (0: none), the carry's row stride
}

// kvPass is one emission of a token's pass (rows): its registers, whether it is the last
// token's, the row's updated vectors that the last token's keeps in registers (ys), and the
// out-of-line code of the pieces' guards (ool), emitted after the loop.
type kvPass struct {
	kvRows
	a    isa
	last bool
	ys   []VecVirtual
	ool  []func()
}

// deltas emits δ = beta·(v − decay(Sᵀk̂)) and o = decay(Sᵀq̂) + kq·δ of the block's pieces from
// the accumulators (o stored; bf16: fin set, finiteDelta) and returns δ of each piece in a
// register, or nil where it is in the frame (deltaInFrame, at dslot).
func (g *kvGen) deltas(s span, accK, accQ []VecVirtual) []VecVirtual {
	a, ps := g.a, s.ps
	Comment("δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ.")
	c, m := a.vec(), a.vec()
	d := make([]VecVirtual, len(ps)) // δ in registers, or nil: in the frame (deltaInFrame)
	g.alignDelta()
	beta, kq := a.vec(), a.vec()
	tp, vp, op := GP64(), GP64(), GP64()
	MOVQ(g.tp, tp)
	VBROADCASTSS(g.cpair, c)
	VBROADCASTSS(g.cpair.Offset(4), m)
	VBROADCASTSS(Mem{Base: tp, Disp: 8}, beta)
	VBROADCASTSS(Mem{Base: tp, Disp: 12}, kq)
	MOVQ(g.vp, vp)
	MOVQ(g.op, op)
	var nf VecVirtual // finiteRound: the OR of δ − δ over the pieces (finiteDelta)
	if g.st.finiteRound() {
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
		if g.st.finiteRound() {
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
	if g.st.finiteRound() {
		finiteDelta(a, a.view, nf, 1<<a.lanes-1, g.fin)
	}
	return d
}

// storeBase returns the block's first row in the token's store (stores[τ] at column j0, or 0:
// none) and the store's row stride in bytes; for a span whose rows can go non-temporally (ntSpan)
// it also sets the token's flag (nt).
func (g *kvGen) storeBase(s span, j0 GPVirtual) (dst, dstStride GPVirtual) {
	dst, dstStride = GP64(), GP64()
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
	if ntSpan(g.a, s) {
		g.snapshotFlag(dst, dstStride)
	}
	return dst, dstStride
}

// snapshotFlag sets nt to 1 when this token's rows go to its store (dst, stride dstStride)
// non-temporally: a store but the last token's after a token without one, the rows aligned whole
// vectors; else to 0.
func (g *kvGen) snapshotFlag(dst, dstStride GPVirtual) {
	a := g.a
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

// carryBase returns, for a bf16 routine, the block's first row in the f32 carry (at column j0)
// after the last token, 0 before it or without a carry, and the carry's row stride in bytes.
func (g *kvGen) carryBase(j0 GPVirtual) (carry, cStride GPVirtual) {
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
	return carry, cStride
}

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
func (g *kvGen) rows(r *kvRows, last bool) {
	a, s := g.a, r.s
	p := &kvPass{kvRows: *r, a: a, last: last, ys: make([]VecVirtual, len(s.ps))}
	g.cvtMasks(s)
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
	VBROADCASTSS(Mem{Base: r.kp, Index: r.i, Scale: 4}, bk)
	rc, rm := g.rowDecay(cp, nc, inFrame)
	g.rowUpdate(p, bk, rc, rm)
	g.rowStore(p)
	if g.st.narrow() {
		g.rowCarry(p)
	}
	g.nextRow(s, r.w)
	INCQ(r.i)
	CMPQ(r.i, r.k)
	JB(LabelRef(loop))
	if nx != nil {
		MOVQ(nx, g.nx.next)
	}
	for _, f := range p.ool {
		f()
	}
}

// cvtMasks sets, for a span whose pairs end with a masked one (cvtPairs), cvtStores' word mask
// of that pair (K3) and its complement (K4), once per block.
func (g *kvGen) cvtMasks(s span) {
	if g.cvtPairs(s) && s.ps[len(s.ps)-1].mask != nil && len(s.ps)%2 == 0 {
		// cvtStores' word mask of the masked pair (K3: words 0–15 all, 16–31 as the last
		// piece's lanes) and its complement (K4), once per block.
		KXNORW(K4, K4, K4)
		KUNPCKWD(K4, s.ps[len(s.ps)-1].mask, K3)
		KNOTD(K3, K4)
	}
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

// rowDecay returns the row's decay pair (rc, rm): the near body's em1 (nc; rm unused) or the pair
// at cp (in the frame's cpr if inFrame), cp stepped on to the next row's.
func (g *kvGen) rowDecay(cp GPVirtual, nc VecVirtual, inFrame bool) (rc, rm VecVirtual) {
	a := g.a
	rc, rm = nc, a.vec()
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
	return rc, rm
}

// decayCM replaces the piece y by decay(y) = c·y + (y & m), one rounding (chanForm: x + em1·x
// with m all ones, eg·x with m the sign bit).
func (g *kvGen) decayCM(p piece, c, m, y VecVirtual) { decayPair(g.a, p, c, m, y) }

// rowUpdate emits the row's update in work, S' = decay(S) + k̂_i·δ (bk: k̂_i broadcast, (rc, rm)
// the row's decay), and but for the last token its store back to work and the next token's
// accumulation; the last token's keeps the updated vectors in p.ys.
func (g *kvGen) rowUpdate(p *kvPass, bk, rc, rm VecVirtual) {
	a, s, last := g.a, p.s, p.last
	var bkn, bqn VecVirtual
	if !last {
		bkn, bqn = a.vec(), a.vec()
		VBROADCASTSS(Mem{Base: p.kn, Index: p.i, Scale: 4}, bkn)
		VBROADCASTSS(Mem{Base: p.qn, Index: p.i, Scale: 4}, bqn)
	}
	p.ool = append(p.ool, s.each(func(t int, pc piece) {
		u := unmasked(pc)
		y := a.vec()
		u.load(u.at(p.w, 4), y)
		if g.near {
			VFMADD132PS(u.view(rc), u.view(y), u.view(y)) // y·em1 + y: decayCM's bits with m all ones
		} else {
			g.decayCM(u, rc, rm, y)
		}
		if p.d[t] != nil {
			u.fma(p.d[t], bk, y)
		} else {
			fmaMem(u, g.dslot(t), bk, y)
		}
		if last {
			p.ys[t] = y
			return
		}
		u.store(y, u.at(p.w, 4))
		u.fma(y, bkn, p.accK[t])
		u.fma(y, bqn, p.accQ[t])
	}))
}

// get returns the row's vector of piece t for the store and the carry: reloaded from work, or
// (last) the register, which each guarded piece of a span has only inside its guard: a span's
// last token stores them inside it too.
func (p *kvPass) get(t int, pc piece) VecVirtual {
	if p.last && p.ys[t] != nil {
		return p.ys[t]
	}
	y := p.a.vec()
	u := unmasked(pc)
	u.load(u.at(p.w, 4), y)
	return y
}

// rowStore emits the row's store where the token has one (dst not 0), dst then stepped to the
// next row: bf16 rounded without the NaN select while this token's δ are finite (finiteDelta),
// two vectors at a time through cvtStores where it can.
func (g *kvGen) rowStore(p *kvPass) {
	s := p.s
	skip := label("nostorerow")
	TESTQ(p.dst, p.dst)
	JZ(LabelRef(skip))
	nt := ntSpan(g.a, s)
	if g.st.finiteRound() {
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
			g.cvtStores(s, p.get, p.dst)
			JCS(LabelRef(done)) // CF: no stored word ±0
			JMP(LabelRef(nan))
			Label(ints)
		}
		g.rowStores(p, nt, true)
		JMP(LabelRef(done))
		Label(nan)
		g.rowStores(p, nt, false)
		Label(done)
	} else {
		g.rowStores(p, nt, false)
	}
	ADDQ(p.dstStride, p.dst)
	Label(skip)
}

// rowStores emits the row's store to dst: non-temporally when the token's flag says so (nt: the
// span may, ntSpan), else with ordinary stores (bf16 pairs through bf16Pair where pairBF16 says);
// finite: the row holds no NaN (finiteDelta).
func (g *kvGen) rowStores(p *kvPass, nt, finite bool) {
	a, s, last, dst := g.a, p.s, p.last, p.dst
	var stored string
	if nt {
		temporal := label("temporalrow")
		stored = label("storedrow")
		CMPB(g.nt, U8(0))
		JE(LabelRef(temporal))
		for t, pc := range s.ps {
			y := p.get(t, unmasked(pc))
			if !g.st.narrow() {
				VMOVNTPS(a.view(y), pc.at(dst, 4))
				continue
			}
			if last {
				// rounded in place: keep the register for the carry.
				z := a.vec()
				VMOVAPS(a.view(y), a.view(z))
				y = z
			}
			g.st.round(a, piece{w: a.lanes}, y, pc.at(dst, 2), true, finite)
		}
		JMP(LabelRef(stored))
		Label(temporal)
	}
	keep := func(y VecVirtual) VecVirtual {
		if !g.st.narrow() || !last {
			return y
		}
		// the rounding is in place for bf16: keep the register for the carry.
		z := a.vec()
		VMOVAPS(a.view(y), a.view(z))
		return z
	}
	if g.pairBF16(s) {
		for t := 0; t < len(s.ps); t += 2 {
			g.st.roundPair(a, keep(p.get(t, s.ps[t])), keep(p.get(t+1, s.ps[t+1])), s.ps[t].at(dst, 2), finite)
		}
	} else {
		p.ool = append(p.ool, s.each(func(t int, pc piece) { g.storeState(pc, keep(p.get(t, pc)), dst, finite) }))
	}
	if nt {
		Label(stored)
	}
}

// rowCarry emits (bf16) the row's f32 store to the carry where the token has one (carry not 0),
// carry then stepped to the next row.
func (g *kvGen) rowCarry(p *kvPass) {
	skip := label("nocarryrow")
	TESTQ(p.carry, p.carry)
	JZ(LabelRef(skip))
	p.ool = append(p.ool, p.s.each(func(t int, pc piece) {
		pc.store(p.get(t, pc), pc.at(p.carry, 4))
	}))
	ADDQ(p.cStride, p.carry)
	Label(skip)
}

// nearBody reports whether a token pass of the span has a second body for the scalar gate's near
// form (em1 ≥ nearOne: x + em1·x, one FMA, the token's em1 broadcast once), besides the pair body
// (c·x + (x & m), every form and gate): AVX-512 f32, the 4-ZMM block (K ≤ 128: every block of
// 49–64 columns, its rows in work whole vectors), the token passes but the last. Where the VPANDD shares the
// FMA ports (Intel's two 512-bit FMA units take the logic ops too) it is a fifth of the pass's
// vector operations.
func (g *kvGen) nearBody(s span) bool {
	if g.st.narrow() || !g.a.evex || len(s.ps) != kvBlockVecs || s.guarded() {
		return false
	}
	for _, pc := range s.ps {
		if pc.w != g.a.lanes {
			return false
		}
	}
	return true
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

// dslot is δ of the block's piece t in the frame (deltaInFrame), at dp (alignDelta).
func (g *kvGen) dslot(t int) Mem { return Mem{Base: g.dp, Disp: 32 * t} }
