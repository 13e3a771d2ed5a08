package main

// The [K][V] state routines over T tokens (issue 11): stateKV<storage><ISA>, with the flat
// signature of tokens_generic.go.
//
// # Structure
//
// The columns are cut into blocks of at most kvBlockVecs vectors (64 columns for AVX-512, 32 for
// AVX2; fewer when K is large, so that K rows of a block fit kvWork bytes). A block lives in the
// work (kvWork bytes, in L1) for all of the call's tokens:
//
//	pass 0:      load the block from src (widened for bf16; from src32 when it is given) into
//	             the work, accumulating token 0's Sᵀk̂ and Sᵀq̂ on the way
//	per token τ: δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ from the accumulators, then
//	             one pass over the work rows: S' = decay(S) + k̂_i·δ, written back, and accumulated
//	             into token τ+1's Sᵀk̂ and Sᵀq̂ (the read pass of the next token, fused); the row is
//	             also stored to stores[τ] (rounded for bf16) when that is not nil, and to the
//	             carry after the last token (bf16)
//
// Every product and sum is the single-token routine's (stateRoutine), in its order: Sᵀk̂_j and
// Sᵀq̂_j accumulate row after row from zero with one FMA each, decay(x) is VFMADD213 (x + em1·x)
// or VMUL (eg·x), δ = (v − decay(Sᵀk̂))·beta, o = decay(Sᵀq̂) + δ·kq, S' = decay(S) + δ·k̂_i (an
// FMA). So a call of T tokens gives the bits of T single-token calls, and a bf16 store is the
// rounding of the f32 routine's state. The decay form is chosen per token (em1 ≥ −0.5; NaN takes
// eg·x), each token's pass emitted for both forms.
//
// The block lives in work (kvWork bytes from its first 64-byte boundary: the Go wrapper passes
// kvWork + 64 bytes from a pool). Not in the frame: a frame that large needs the stack-check
// prologue, whose TLS access -dynlink builds cannot link. K above kvMaxK(a) does not fit; the Go
// wrapper then takes another path.

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// kvWork is the work space of a column block: K rows of at most kvBlockVecs vectors.
const kvWork = 32 << 10

// kvBlockVecs is the most vectors per row of a column block.
const kvBlockVecs = 4

// kvVariant is one [K][V] routine over T tokens: the ISA × the storage type.
type kvVariant struct {
	a    isa
	bf16 bool
}

func (v kvVariant) name() string {
	s := "f32"
	if v.bf16 {
		s = "bf16"
	}
	return "stateKV" + s + v.a.name
}

// es is the size of a state element in bytes.
func (v kvVariant) es() int {
	if v.bf16 {
		return 2
	}
	return 4
}

// kvGen is the state of one routine's generation: its labels are scoped by its name, so adding a
// routine renumbers no other.
type kvGen struct {
	kvVariant

	// frame slots
	work                          Mem // aligned pointer to the block
	cols, j0, wcols, nvb          Mem // V − j0 left, the block's first column, its width, vectors per full block
	tau, kp, knp, qnp, vp, op, tp Mem // per token: τ, k̂_τ, k̂_τ+1, q̂_τ+1, v_τ + j0, o_τ + j0, tok_τ
	dslots                        Mem // AVX2: δ of the block's vectors
}

// kvMaxK is the largest K whose rows of one vector fit kvWork.
func kvMaxK(a isa) int { return kvWork / (4 * a.lanes) }

func stateKVTokens(vr kvVariant) {
	g := &kvGen{kvVariant: vr}
	a := vr.a
	if vr.bf16 {
		routine(g.name(), NOSPLIT, "func(K, V int, src []uint16, src32 []float32, stores []uintptr, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32)")
	} else {
		routine(g.name(), NOSPLIT, "func(K, V int, src []float32, stores []uintptr, kh, qh, v []float32, vs int, o, tok, work []float32)")
	}
	Doc(fmt.Sprintf("%s is the [K][V] state routine over T tokens in %s; see gdn_kv_amd64.go.", g.name(), a.name))
	g.work, g.cols, g.j0, g.wcols, g.nvb = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.tau, g.kp, g.knp, g.qnp, g.vp, g.op, g.tp = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	if a.lanes == 8 {
		g.dslots = AllocLocal(32 * kvBlockVecs)
	}
	done := label("done")
	k, v, t := GP64(), GP64(), GP64()
	Load(Param("K"), k)
	Load(Param("V"), v)
	Load(Param("tok").Len(), t)
	SHRQ(U8(2), t)
	TESTQ(k, k)
	JZ(LabelRef(done))
	TESTQ(v, v)
	JZ(LabelRef(done))
	TESTQ(t, t)
	JZ(LabelRef(done))
	MOVQ(v, g.cols)
	w := GP64()
	Load(Param("work").Base(), w)
	ADDQ(U8(63), w)
	ANDQ(I8(-64), w)
	MOVQ(w, g.work)
	Commentf("K > %d does not fit work: the Go wrapper never calls with it.", kvMaxK(a))
	CMPQ(k, U32(kvMaxK(a)))
	JA(LabelRef(done))
	Commentf("Vectors per full block: the most (≤ %d) whose K rows fit %d bytes.", kvBlockVecs, kvWork)
	{
		q, n := GP64(), GP64()
		MOVQ(U32(1), q)
		for nv := 2; nv <= kvBlockVecs; nv++ {
			MOVQ(U32(nv), n)
			CMPQ(k, U32(kvWork/(4*a.lanes*nv)))
			CMOVQLS(n, q)
		}
		MOVQ(q, g.nvb)
	}
	XORQ(w, w)
	MOVQ(w, g.j0)

	Comment("Column blocks.")
	blocks := label("blocks")
	Label(blocks)
	rem := GP64()
	MOVQ(g.cols, rem)
	TESTQ(rem, rem)
	JZ(LabelRef(done))
	var shapes []struct {
		lab string
		ps  []piece
	}
	add := func(ps []piece) string {
		l := label("shape")
		shapes = append(shapes, struct {
			lab string
			ps  []piece
		}{l, ps})
		return l
	}
	nvb := GP64()
	MOVQ(g.nvb, nvb)
	if a.lanes == 16 {
		// width = min(16·nvb, rem); nv = ceil(width/16), the last ZMM under K1.
		wd := GP64()
		MOVQ(nvb, wd)
		SHLQ(U8(4), wd)
		CMPQ(rem, wd)
		CMOVQCS(rem, wd)
		MOVQ(wd, g.wcols)
		nvm1 := GP64()
		MOVQ(wd, nvm1)
		DECQ(nvm1)
		SHRQ(U8(4), nvm1)
		lanes := GP64()
		MOVQ(nvm1, lanes)
		SHLQ(U8(4), lanes)
		NEGQ(lanes)
		ADDQ(wd, lanes)
		tailMask(lanes, K1)
		var labs []string
		for nv := 1; nv <= kvBlockVecs; nv++ {
			labs = append(labs, add(maskedBlock(nv)))
		}
		for nv := 1; nv < kvBlockVecs; nv++ {
			CMPQ(nvm1, U32(nv-1))
			JE(LabelRef(labs[nv-1]))
		}
		JMP(LabelRef(labs[kvBlockVecs-1]))
	} else {
		// Full blocks of nvb YMM, then 1–3 YMM, then 1–7 columns (an XMM and scalars).
		full := GP64()
		MOVQ(nvb, full)
		SHLQ(U8(3), full)
		var labs []string
		for nv := 1; nv <= kvBlockVecs; nv++ {
			labs = append(labs, add(ymmBlock(nv)))
		}
		notFull := label("notfull")
		CMPQ(rem, full)
		JB(LabelRef(notFull))
		MOVQ(full, g.wcols)
		for nv := 1; nv < kvBlockVecs; nv++ {
			CMPQ(nvb, U32(nv))
			JE(LabelRef(labs[nv-1]))
		}
		JMP(LabelRef(labs[kvBlockVecs-1]))
		Label(notFull)
		ny := GP64()
		MOVQ(rem, ny)
		SHRQ(U8(3), ny)
		narrow := label("narrow")
		JZ(LabelRef(narrow))
		SHLQ(U8(3), ny)
		MOVQ(ny, g.wcols)
		SHRQ(U8(3), ny)
		for nv := 1; nv < kvBlockVecs; nv++ {
			CMPQ(ny, U32(nv))
			JE(LabelRef(labs[nv-1]))
		}
		JMP(LabelRef(labs[kvBlockVecs-1])) // not reached: rem < 8·nvb ≤ 32
		Label(narrow)
		MOVQ(rem, g.wcols)
		var nlabs []string
		for n := 1; n < 8; n++ {
			nlabs = append(nlabs, add(narrowBlock(n)))
		}
		for n := 1; n < 7; n++ {
			CMPQ(rem, U32(n))
			JE(LabelRef(nlabs[n-1]))
		}
		JMP(LabelRef(nlabs[6]))
	}
	for _, s := range shapes {
		Label(s.lab)
		g.block(s.ps)
		x := GP64()
		MOVQ(g.wcols, x)
		ADDQ(x, g.j0)
		SUBQ(x, g.cols)
		JMP(LabelRef(blocks))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

// rowBytes is the row stride in work of a block of these pieces: whole vectors.
func (g *kvGen) rowBytes(ps []piece) int {
	last := ps[len(ps)-1]
	n := last.off + 4*last.w
	if last.mask != nil {
		n = last.off + 64
	}
	return (n + 31) &^ 31
}

// unmasked is the piece as it is loaded from and stored to work: the whole vector.
func unmasked(p piece) piece { p.mask = nil; return p }

// loadState loads the piece's state elements at element offset pc.off/4 of m (widened for bf16).
func (g *kvGen) loadState(pc piece, base GPVirtual, x VecVirtual, f32 bool) {
	if f32 || !g.bf16 {
		pc.load(Mem{Base: base, Disp: pc.off}, x)
		return
	}
	widenPiece(pc, Mem{Base: base, Disp: pc.off / 2}, x)
}

// storeState stores the piece's lanes of y to base (rounded to bf16 for bf16 storage; y may
// be clobbered).
func (g *kvGen) storeState(pc piece, y VecVirtual, base GPVirtual, f32 bool) {
	if f32 || !g.bf16 {
		pc.store(y, Mem{Base: base, Disp: pc.off})
		return
	}
	bf16(g.a, pc, y, Mem{Base: base, Disp: pc.off / 2})
}

// block emits one column block of the pieces ps at column g.j0: pass 0, then every token.
func (g *kvGen) block(ps []piece) {
	a := g.a
	rb := g.rowBytes(ps)
	Commentf("Block of %d columns (rows in work of %d bytes): pass 0 loads it, with token 0's read.", width(ps), rb)
	accK, accQ := make([]VecVirtual, len(ps)), make([]VecVirtual, len(ps))
	for t := range ps {
		accK[t], accQ[t] = a.vec(), a.vec()
	}
	k := GP64()
	Load(Param("K"), k)
	j0 := GP64()
	MOVQ(g.j0, j0)
	pass0 := func(f32 bool, base GPVirtual, stride GPVirtual) {
		for t := range ps {
			a.zero(accK[t])
			a.zero(accQ[t])
		}
		kh, qh, w, i := GP64(), GP64(), GP64(), GP64()
		Load(Param("kh").Base(), kh)
		Load(Param("qh").Base(), qh)
		MOVQ(g.work, w)
		XORQ(i, i)
		loop := label("pass0")
		Label(loop)
		bk, bq := a.vec(), a.vec()
		VBROADCASTSS(Mem{Base: kh, Index: i, Scale: 4}, bk)
		VBROADCASTSS(Mem{Base: qh, Index: i, Scale: 4}, bq)
		for t, pc := range ps {
			x := a.vec()
			g.loadState(pc, base, x, f32)
			unmasked(pc).store(x, Mem{Base: w, Disp: pc.off})
			pc.fma(x, bk, accK[t])
			pc.fma(x, bq, accQ[t])
		}
		ADDQ(stride, base)
		ADDQ(U32(rb), w)
		INCQ(i)
		CMPQ(i, k)
		JB(LabelRef(loop))
	}
	if g.bf16 {
		s32, after, from16 := GP64(), label("loaded"), label("from16")
		Load(Param("src32").Base(), s32)
		TESTQ(s32, s32)
		JZ(LabelRef(from16))
		Comment("From src32 (f32).")
		st := GP64()
		Load(Param("V"), st)
		LEAQ(Mem{Base: s32, Index: j0, Scale: 4}, s32)
		SHLQ(U8(2), st)
		pass0(true, s32, st)
		JMP(LabelRef(after))
		Label(from16)
		Comment("From src (bf16).")
		s16, st16 := GP64(), GP64()
		Load(Param("src").Base(), s16)
		Load(Param("V"), st16)
		LEAQ(Mem{Base: s16, Index: j0, Scale: 2}, s16)
		SHLQ(U8(1), st16)
		pass0(false, s16, st16)
		Label(after)
	} else {
		s, st := GP64(), GP64()
		Load(Param("src").Base(), s)
		Load(Param("V"), st)
		LEAQ(Mem{Base: s, Index: j0, Scale: 4}, s)
		SHLQ(U8(2), st)
		pass0(true, s, st)
	}

	Comment("The tokens.")
	{
		x := GP64()
		XORQ(x, x)
		MOVQ(x, g.tau)
		Load(Param("kh").Base(), x)
		MOVQ(x, g.kp)
		Load(Param("tok").Base(), x)
		MOVQ(x, g.tp)
		Load(Param("v").Base(), x)
		LEAQ(Mem{Base: x, Index: j0, Scale: 4}, x)
		MOVQ(x, g.vp)
		Load(Param("o").Base(), x)
		LEAQ(Mem{Base: x, Index: j0, Scale: 4}, x)
		MOVQ(x, g.op)
	}
	tokens, far, next := label("token"), label("far"), label("tokdone")
	Label(tokens)
	{
		Comment("k̂ and q̂ of the next token (of this one at the last: accumulated, never used).")
		tau, kk, kn, qn, t := GP64(), GP64(), GP64(), GP64(), GP64()
		MOVQ(g.tau, tau)
		Load(Param("K"), kk)
		INCQ(tau)
		Load(Param("tok").Len(), t)
		SHRQ(U8(2), t)
		CMPQ(tau, t)
		notLast := label("notlast")
		JB(LabelRef(notLast))
		DECQ(tau)
		Label(notLast)
		IMULQ(kk, tau)
		Load(Param("kh").Base(), kn)
		LEAQ(Mem{Base: kn, Index: tau, Scale: 4}, kn)
		MOVQ(kn, g.knp)
		Load(Param("qh").Base(), qn)
		LEAQ(Mem{Base: qn, Index: tau, Scale: 4}, qn)
		MOVQ(qn, g.qnp)
	}
	{
		tp, x := GP64(), XMM()
		MOVQ(g.tp, tp)
		VMOVSS(Mem{Base: tp}, x)
		VUCOMISS(cNearOne, x) // CF: em1 < nearOne or unordered
		JCS(LabelRef(far))
	}
	Commentf("em1 ≥ %g: decay(x) = %s.", nearOne, nearForm.of("x"))
	g.token(ps, nearForm, accK, accQ, 0, rb)
	JMP(LabelRef(next))
	Label(far)
	Commentf("em1 < %g or NaN: decay(x) = %s.", nearOne, farForm.of("x"))
	g.token(ps, farForm, accK, accQ, 4, rb)
	Label(next)
	{
		x, y := GP64(), GP64()
		MOVQ(g.knp, x)
		MOVQ(x, g.kp)
		ADDQ(U8(16), g.tp)
		Load(Param("vs"), x)
		SHLQ(U8(2), x)
		ADDQ(x, g.vp)
		Load(Param("V"), x)
		SHLQ(U8(2), x)
		ADDQ(x, g.op)
		MOVQ(g.tau, y)
		INCQ(y)
		MOVQ(y, g.tau)
		Load(Param("tok").Len(), x)
		SHRQ(U8(2), x)
		CMPQ(y, x)
		JB(LabelRef(tokens))
	}
}

// token emits one token over the block in form f: δ and o from the accumulators, then the pass
// over the rows in work (update, stores, the next token's accumulation). cOff is the byte offset of
// the form's parameter in the token's four floats.
func (g *kvGen) token(ps []piece, f form, accK, accQ []VecVirtual, cOff int, rb int) {
	a := g.a
	Comment("δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ.")
	c := a.vec()
	d := make([]VecVirtual, len(ps)) // δ in registers (AVX-512); AVX2: in the frame
	{
		beta, kq := a.vec(), a.vec()
		tp, vp, op := GP64(), GP64(), GP64()
		MOVQ(g.tp, tp)
		VBROADCASTSS(Mem{Base: tp, Disp: cOff}, c)
		VBROADCASTSS(Mem{Base: tp, Disp: 8}, beta)
		VBROADCASTSS(Mem{Base: tp, Disp: 12}, kq)
		MOVQ(g.vp, vp)
		MOVQ(g.op, op)
		for t, pc := range ps {
			vt := a.vec()
			pc.load(Mem{Base: vp, Disp: pc.off}, vt)
			pc.decay(f, c, accK[t])
			pc.sub(vt, accK[t], vt)
			pc.mul(vt, beta, vt)
			pc.decay(f, c, accQ[t])
			pc.fma(vt, kq, accQ[t])
			pc.store(accQ[t], Mem{Base: op, Disp: pc.off})
			if g.a.lanes == 8 {
				unmasked(pc).store(vt, g.dslot(t))
			} else {
				d[t] = vt
			}
		}
	}
	for t := range ps {
		a.zero(accK[t])
		a.zero(accQ[t])
	}
	Commentf("S' = %s + k̂_i·δ, stored where asked; the next token's Sᵀk̂, Sᵀq̂ from it.", f.of("S"))
	w, i, k, kp, kn, qn := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	MOVQ(g.work, w)
	XORQ(i, i)
	Load(Param("K"), k)
	MOVQ(g.kp, kp)
	MOVQ(g.knp, kn)
	MOVQ(g.qnp, qn)
	j0 := GP64()
	MOVQ(g.j0, j0)
	dst, dstStride := GP64(), GP64()
	{
		tau := GP64()
		MOVQ(g.tau, tau)
		Load(Param("stores").Base(), dst)
		MOVQ(Mem{Base: dst, Index: tau, Scale: 8}, dst)
		none := label("nostore")
		TESTQ(dst, dst)
		JZ(LabelRef(none))
		LEAQ(Mem{Base: dst, Index: j0, Scale: uint8(g.es())}, dst)
		Label(none)
		Load(Param("V"), dstStride)
		SHLQ(U8(map[int]uint8{2: 1, 4: 2}[g.es()]), dstStride)
	}
	var carry, cStride GPVirtual
	if g.bf16 {
		carry, cStride = GP64(), GP64()
		tau, t := GP64(), GP64()
		MOVQ(g.tau, tau)
		INCQ(tau)
		Load(Param("tok").Len(), t)
		SHRQ(U8(2), t)
		XORQ(carry, carry)
		none := label("nocarry")
		CMPQ(tau, t)
		JNE(LabelRef(none))
		Load(Param("carry").Base(), carry)
		TESTQ(carry, carry)
		JZ(LabelRef(none))
		LEAQ(Mem{Base: carry, Index: j0, Scale: 4}, carry)
		Label(none)
		Load(Param("V"), cStride)
		SHLQ(U8(2), cStride)
	}
	loop := label("rows")
	Label(loop)
	bk, bkn, bqn := a.vec(), a.vec(), a.vec()
	VBROADCASTSS(Mem{Base: kp, Index: i, Scale: 4}, bk)
	VBROADCASTSS(Mem{Base: kn, Index: i, Scale: 4}, bkn)
	VBROADCASTSS(Mem{Base: qn, Index: i, Scale: 4}, bqn)
	for t, pc := range ps {
		u := unmasked(pc)
		y := a.vec()
		u.load(Mem{Base: w, Disp: pc.off}, y)
		u.decay(f, c, y)
		if d[t] != nil {
			u.fma(d[t], bk, y)
		} else {
			fmaMem(u, g.dslot(t), bk, y)
		}
		u.store(y, Mem{Base: w, Disp: pc.off})
		u.fma(y, bkn, accK[t])
		u.fma(y, bqn, accQ[t])
	}
	skip := label("nostorerow")
	TESTQ(dst, dst)
	JZ(LabelRef(skip))
	for _, pc := range ps {
		y := a.vec()
		unmasked(pc).load(Mem{Base: w, Disp: pc.off}, y)
		g.storeState(pc, y, dst, false)
	}
	ADDQ(dstStride, dst)
	Label(skip)
	if g.bf16 {
		skip := label("nocarryrow")
		TESTQ(carry, carry)
		JZ(LabelRef(skip))
		for _, pc := range ps {
			y := a.vec()
			unmasked(pc).load(Mem{Base: w, Disp: pc.off}, y)
			pc.store(y, Mem{Base: carry, Disp: pc.off})
		}
		ADDQ(cStride, carry)
		Label(skip)
	}
	ADDQ(U32(rb), w)
	INCQ(i)
	CMPQ(i, k)
	JB(LabelRef(loop))
}

// fmaMem computes acc += m·b, m in memory.
func fmaMem(p piece, m Mem, b, acc VecVirtual) {
	if p.w == 1 {
		VFMADD231SS(m, b.AsX(), acc.AsX())
		return
	}
	VFMADD231PS(m, p.view(b), p.view(acc))
}

func (g *kvGen) dslot(t int) Mem {
	m := g.dslots
	m.Disp += 32 * t
	return m
}
