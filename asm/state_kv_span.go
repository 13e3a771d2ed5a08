package main

// Spans: one emitted column block that serves a range of widths (DESIGN.md §4: a few shapes, not
// one copy per tail width).
//
// A span of f full vectors serves every block of n ∈ [fixed, f] full vectors (n known only at run
// time, constant for the block): vector t ≥ fixed is guarded, skipped by a branch that takes the
// same way for every row of the block (so it is predicted), when t ≥ n. After the full vectors
// comes the span's masked vector, at column lanes·n (an index register, not a displacement):
//
//   - AVX-512 (a.maskedLast): always there, with the block's last 1–16 columns under K1: n =
//     (w − 1) >> 4. A ZMM load or store under an all-ones K1 costs what an unmasked one does, so
//     a block whose width is a multiple of 16 loses nothing by it (and the routines before the
//     spans ended every block with such a vector).
//   - AVX2: only when w mod 8 ≠ 0: a YMM under a VMASKMOVPS lane mask (masked-out lanes are
//     neither read nor written and cannot fault), out of line (see each). A VMASKMOVPS store ran
//     1.35× the time of a VMOVUPS on the machine this was tuned on (a loop of 128 loads, adds and
//     stores of YMM in L1: 22.5 against 16.4 ns) and is far slower on older AMD cores: fine for
//     the last 1–7 columns, not for every block. It replaced an XMM and up to 3 scalar columns
//     per width (7 copies of every block); at 96×83 the routines run 7–13 % fewer instructions.
//
// The shapes are chosen so that the hot 128 and the odd 96×80 take no span at all (their blocks
// are fixed ones, the code of the routines before the spans): a guard never taken still cost 1–3
// % at 96×80 (measured with the single-token span [0, 4] and the tokens span [0, 2] against the
// fixed blocks, alternating in one process).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// maskedLast reports whether a span always ends with its masked vector, covering the block's
// last 1 to lanes columns (rather than only the last w mod lanes): true where a masked vector
// costs what a full one does (opmasks).
func (a isa) maskedLast() bool { return a.masks }

// span is one emitted block of columns: ps are its pieces, the full vectors first, then, for a
// span that serves a range of widths, the masked vector (idx = n).
type span struct {
	a     isa
	ps    []piece
	fixed int       // the full vectors always live: ps[:fixed]
	n     GPVirtual // lanes·(the block's full vectors): the masked vector's column; nil: no guards
	w     Op        // the block's width in columns (a frame slot), if the masked vector is guarded (w > n), else nil
}

// fixedSpan is a block of these pieces, all live (no guard, no run-time column).
func fixedSpan(a isa, ps []piece) span { return span{a: a, ps: ps, fixed: len(ps)} }

// guardedSpan is the span of full full vectors, the first fixed of them always live, and the
// masked vector (see the file comment): n as returned by splitWidth for the block's width, which
// the frame slot w holds (used where the masked vector is guarded); lane the frame slot of the
// AVX2 lane mask.
func guardedSpan(a isa, full, fixed int, n GPVirtual, w Mem, lane *Mem) span {
	ps := vecBlock(a.lanes, full+1)
	m := &ps[full]
	m.idx = n
	if a.masks {
		m.mask = K1
	} else {
		m.lane = lane
	}
	s := span{a: a, ps: ps, fixed: fixed, n: n}
	if !a.maskedLast() {
		s.w = w
	}
	return s
}

// guarded reports whether the span has run-time guards (then its width is not a constant).
func (s span) guarded() bool { return s.n != nil }

// each emits body for every piece of the span in order, a guarded piece behind its check, and
// returns what the caller must call after its loop's last instruction (after the JB to its
// top): the out-of-line code, if any. A dead full vector jumps to the masked vector (every later
// full vector is dead too), so the widest block of a span takes no branch. A guarded masked
// vector (AVX2) is out of line: the blocks without one (w mod 8 = 0: every model shape, and the
// odd 96×80) fall through its check; the others jump to it and back.
func (s span) each(body func(t int, pc piece)) (outOfLine func()) {
	var tail string
	outOfLine = func() {}
	for t, pc := range s.ps {
		switch {
		case pc.idx != nil:
			if tail != "" {
				Label(tail)
			}
			if s.w != nil {
				ool, back := label("spanmasked"), label("spanback")
				CMPQ(s.w, s.n)
				JA(LabelRef(ool))
				Label(back)
				outOfLine = func() {
					past := label("spanpast")
					JMP(LabelRef(past))
					Label(ool)
					body(t, pc)
					JMP(LabelRef(back))
					Label(past)
				}
				continue
			}
		case t >= s.fixed:
			if tail == "" {
				tail = label("spantail")
			}
			CMPQ(s.n, U32(s.a.lanes*t))
			JBE(LabelRef(tail))
		}
		body(t, pc)
	}
	return outOfLine
}

// narrowSpan is the number of full vectors of the AVX2 tail spans: 2. A block of 3·8 columns or
// more takes 16 columns (cutWidth), the rest another block; a block of exactly 16 (V = 80: the
// tail after 64) has a fixed block of its own: three checks per row, never taken, cost 0.5–3 %
// there (alternating in one process).
const narrowSpan = 2

// cutWidth caps the width wd of a block that goes to an AVX2 span of narrowSpan full vectors:
// wd ≥ lanes·(narrowSpan+1) becomes lanes·narrowSpan.
func cutWidth(a isa, wd GPVirtual) {
	x := GP64()
	MOVQ(U32(a.lanes*narrowSpan), x)
	CMPQ(wd, U32(a.lanes*(narrowSpan+1)))
	CMOVQCC(x, wd)
}

// splitWidth computes, for a block of w ≥ 1 columns (w in a register, kept), n = lanes·(its full
// vectors ahead of the masked one) into a new register and the masked vector's lanes: K1
// (AVX-512: n = (w − 1) &^ 15, the last 1–16 columns) or, for AVX2, the VMASKMOVPS lane mask of the
// w mod 8 last columns (n = w &^ 7) into the 32-byte frame slot lane.
func splitWidth(a isa, w GPVirtual, lane Mem) GPVirtual {
	n, r := GP64(), GP64()
	MOVQ(w, n)
	if a.maskedLast() {
		DECQ(n)
	}
	ANDQ(I32(-a.lanes), n)
	MOVQ(w, r)
	SUBQ(n, r)
	if a.masks {
		tailMask(r, K1)
		return n
	}
	// r = w mod 8 (0 when the masked vector is dead): lane i is masked in when r > i.
	x := YMM()
	VMOVD(r.As32(), x.AsX())
	VPBROADCASTD(x.AsX(), x)
	VPCMPGTD(cIota, x, x)
	VMOVUPS(x, lane)
	return n
}
