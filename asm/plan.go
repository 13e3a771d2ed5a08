package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// piece is one vector (or scalar) of a row of a state block, or one step of a gate/l2 loop.
type piece struct {
	w    int      // float32 lanes: 16 (ZMM), 8 (YMM), 4 (XMM) or 1 (scalar in an XMM)
	off  int      // byte offset from the start of the block
	mask Register // opmask for a partial ZMM, or nil
	// idx, when not nil, holds the piece's first column as an element index from the start of
	// the block (a column known only at run time: the masked vector of a span), instead of off.
	idx GPVirtual
	// lane, when not nil, is the frame slot of an AVX2 lane mask (VMASKMOVPS: the lanes whose
	// top bit is set): a partial YMM whose masked-out lanes are neither read nor written.
	lane *Mem
}

// at is the address of the piece in a row at base whose elements have es bytes (4: float32,
// 2: bf16).
func (p piece) at(base GPVirtual, es int) Mem {
	if p.idx != nil {
		return Mem{Base: base, Index: p.idx, Scale: uint8(es)}
	}
	return Mem{Base: base, Disp: p.off * es / 4}
}

// laneMask loads the piece's VMASKMOVPS lane mask into a register.
func (p piece) laneMask() VecVirtual {
	k := YMM()
	VMOVUPS(*p.lane, k)
	return k
}

// view returns the part of r this piece works on.
func (p piece) view(r VecVirtual) Register {
	switch p.w {
	case 16:
		return r.AsZ()
	case 8:
		return r.AsY()
	default:
		return r.AsX()
	}
}

func (p piece) load(m Mem, dst VecVirtual) {
	switch {
	case p.w == 1:
		VMOVSS(m, dst.AsX())
	case p.lane != nil:
		maskedLoad(m, p.laneMask(), dst)
	case p.mask != nil:
		VMOVUPS_Z(m, p.mask, p.view(dst))
	default:
		VMOVUPS(m, p.view(dst))
	}
}

// maskedLoad loads the lanes of m under the prefix lane mask k into dst, the other lanes zero:
// VMASKMOVPS, unless the 32 bytes at m cross into the next 4 KiB page; then lane by lane
// (VINSERTPS of each lane k holds, in order). A CPU suppresses the faults of masked-out lanes
// (Intel SDM, AMD APM), but emulators need not: QEMU 7.2's TCG faults on a VMASKMOVPS load whose
// masked-out lanes lie in an unmapped page (the qemu Haswell leg's guard-page tests found it), and
// a Go program run under an emulator must not crash either. The check costs four integer µops
// per masked load, which only the last w mod 8 columns of a block take.
func maskedLoad(m Mem, k, dst VecVirtual) {
	a, slow, end, done := pageEnd(m, 32)
	VMASKMOVPS(Mem{Base: a}, k.AsY(), dst.AsY())
	JMP(LabelRef(done))
	Label(slow)
	bits := GP32()
	VMOVMSKPS(k.AsY(), bits)
	var lo, hi Register = dst.AsX(), k.AsX() // lanes 0–3 into dst, 4–6 into k (read above)
	VBROADCASTSS(cZero, dst.AsY())           // not VXORPS: avo reads a VXORPS r, r, r as a use of r
	VBROADCASTSS(cZero, hi)
	for i := range 7 { // a prefix mask of a partial vector: at most 7 lanes
		BTL(U8(i), bits)
		JCC(LabelRef(end))
		r := lo
		if i >= 4 {
			r = hi
		}
		VINSERTPS(U8((i%4)<<4), Mem{Base: a, Disp: 4 * i}, r, r)
	}
	Label(end)
	VINSERTF128(U8(1), hi, dst.AsY(), dst.AsY())
	Label(done)
}

// pageEnd emits the check of a masked load of n bytes at m: a holds m's address, and the code
// jumps to slow when those bytes cross into the next 4 KiB page (else it falls through); end and
// done are the loaders' other labels.
func pageEnd(m Mem, n int) (a GPVirtual, slow, end, done string) {
	a, t := GP64(), GP64()
	LEAQ(m, a)
	MOVQ(a, t)
	ANDQ(U32(4095), t)
	slow, end, done = label("mmslow"), label("mmend"), label("mmdone")
	CMPQ(t, U32(4096-n))
	JA(LabelRef(slow))
	return a, slow, end, done
}

// maskedLoadX is maskedLoad for VPMASKMOVD of an XMM (16 bytes, a prefix of at most 3 dwords
// under k): the lanes of m under k into dst's XMM, the other lanes zero.
func maskedLoadX(m Mem, k, dst VecVirtual) {
	a, slow, end, done := pageEnd(m, 16)
	VPMASKMOVD(Mem{Base: a}, k.AsX(), dst.AsX())
	JMP(LabelRef(done))
	Label(slow)
	bits := GP32()
	VMOVMSKPS(k.AsX(), bits)
	VBROADCASTSS(cZero, dst.AsX())
	for i := range 3 {
		BTL(U8(i), bits)
		JCC(LabelRef(end))
		VPINSRD(U8(i), Mem{Base: a, Disp: 4 * i}, dst.AsX(), dst.AsX())
	}
	Label(end)
	Label(done)
}

func (p piece) store(src VecVirtual, m Mem) {
	switch {
	case p.w == 1:
		VMOVSS(src.AsX(), m)
	case p.lane != nil:
		VMASKMOVPS(src.AsY(), p.laneMask(), m)
	case p.mask != nil:
		VMOVUPS(p.view(src), p.mask, m)
	default:
		VMOVUPS(p.view(src), m)
	}
}

// fma computes acc += a·b.
func (p piece) fma(a, b, acc VecVirtual) {
	if p.w == 1 {
		VFMADD231SS(a.AsX(), b.AsX(), acc.AsX())
		return
	}
	VFMADD231PS(p.view(a), p.view(b), p.view(acc))
}

// mul computes dst = a·b.
func (p piece) mul(a, b, dst VecVirtual) {
	if p.w == 1 {
		VMULSS(a.AsX(), b.AsX(), dst.AsX())
		return
	}
	VMULPS(p.view(a), p.view(b), p.view(dst))
}

// sub computes dst = a − b.
func (p piece) sub(a, b, dst VecVirtual) {
	if p.w == 1 {
		VSUBSS(b.AsX(), a.AsX(), dst.AsX())
		return
	}
	VSUBPS(p.view(b), p.view(a), p.view(dst))
}

// decay replaces x by decay(x) in form f (see form), c holding the form's broadcast constant: one
// instruction either way, VFMADD213 (x = c·x + x, one rounding) or VMUL.
func (p piece) decay(f form, c, x VecVirtual) {
	switch {
	case !f.near:
		p.mul(x, c, x)
	case p.w == 1:
		VFMADD213SS(x.AsX(), c.AsX(), x.AsX())
	default:
		VFMADD213PS(p.view(x), p.view(c), p.view(x))
	}
}

// decayPair replaces the piece y by decay(y) = c·y + (y & m), one rounding (chanForm: x + em1·x
// with m all ones, eg·x with m the sign bit); m is a vector register, or a memory operand: the
// vector (AVX2), or the scalar broadcast (AVX-512).
func decayPair(a isa, p piece, c VecVirtual, m Op, y VecVirtual) {
	t := a.vec()
	mv, reg := m.(VecVirtual)
	if reg {
		m = a.view(mv)
	}
	switch {
	case a.evex && !reg:
		VPANDD_BCST(m, a.view(y), a.view(t))
	case a.evex:
		VPANDD(m, a.view(y), a.view(t))
	default:
		VANDPS(m, a.view(y), a.view(t))
	}
	if p.w == 1 {
		VFMADD132SS(c.AsX(), t.AsX(), y.AsX())
	} else {
		VFMADD132PS(p.view(c), p.view(t), p.view(y))
	}
}

// --- state ---

// Plans: how the ISA cuts a block of columns into pieces (tested in plan_test.go).

// vecBlock is a block of nv unmasked vectors of the given number of float32 lanes.
func vecBlock(lanes, nv int) []piece {
	ps := make([]piece, nv)
	for i := range ps {
		ps[i] = piece{w: lanes, off: 4 * lanes * i}
	}
	return ps
}

// fullBlock is the main block: blockVecs unmasked vectors.
func fullBlock(a isa) []piece { return vecBlock(a.lanes, a.blockVecs) }

// maskedBlock is an AVX-512 block of nv vectors, the last one under K1 (a fixed block of the
// odd shape's width; any other width takes a span, state_kv_span.go).
func maskedBlock(nv int) []piece {
	ps := vecBlock(16, nv)
	ps[nv-1].mask = K1
	return ps
}

// ymmBlock is an AVX2 block of nv full YMM (the routines take vecBlock and spans since the tails
// became spans; TestPlans still checks it).
func ymmBlock(nv int) []piece { return vecBlock(8, nv) }

// narrowBlock is an AVX2 block of n < 8 columns: an XMM if n ≥ 4, then scalars (no routine takes
// it since the last w mod 8 columns became a VMASKMOVPS vector of a span; TestPlans still checks
// it).
func narrowBlock(n int) []piece {
	var ps []piece
	off := 0
	if n >= 4 {
		ps = append(ps, piece{w: 4})
		off, n = 16, n-4
	}
	for ; n > 0; n-- {
		ps = append(ps, piece{w: 1, off: off})
		off += 4
	}
	return ps
}

func width(ps []piece) int {
	n := 0
	for _, p := range ps {
		n += p.w
	}
	return n
}

// stateRegs are the GP registers of the state routine.
