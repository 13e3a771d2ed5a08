package main

// The storage of a [K][V] block's rows: a piece's loads from and stores to src, the stores and
// the carry (f32, or bf16 widened and rounded), AVX2's narrow bf16 tail (widenTail, storeTail),
// and the bf16 rows' stores two pieces at a time (bf16Pair, cvtStores).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// pairBF16 reports whether the span's bf16 rows go to a store two pieces at a time (bf16Pair):
// AVX2, an even number of whole YMMs one after another, no guard. BenchmarkKVRoutine, avx2 bf16
// decode, ns per head: see doc/notebook/2026-12-02-bf16-stores-nan-select.md.
func (g *kvGen) pairBF16(s span) bool {
	if !g.st.packPairs() || g.a.evex || s.guarded() || len(s.ps)%2 != 0 {
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
func (v variant) narrowBF16() bool { return v.st.narrow() && !v.a.masks }

// unmasked is the piece as it is loaded from and stored to work: the whole vector.
func unmasked(p piece) piece { p.mask, p.lane = nil, nil; return p }

// loadState loads the piece's state elements from its column of the row at base (widened for
// bf16).
func (g *kvGen) loadState(pc piece, base GPVirtual, x VecVirtual, f32 bool) {
	switch {
	case f32 || !g.st.narrow():
		pc.load(pc.at(base, 4), x)
	case pc.lane != nil:
		g.widenTail(pc, base, x)
	default:
		g.st.widen(pc, pc.at(base, 2), x)
	}
}

// storeState stores the piece's lanes of y to its column of the row at base (rounded to bf16 for
// bf16 storage, finite: y holds no NaN, see finiteDelta; y may be clobbered).
func (g *kvGen) storeState(pc piece, y VecVirtual, base GPVirtual, finite bool) {
	switch {
	case !g.st.narrow():
		pc.store(y, pc.at(base, 4))
	case pc.lane != nil:
		g.storeTail(pc, y, base)
	default:
		g.st.round(g.a, pc, y, pc.at(base, 2), false, finite)
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
	g.st.widenTo(x.AsX(), nil, x.AsY())
}

// storeTail stores BF16RNE of the masked piece's last wd mod 8 lanes of y (AVX2) to the row at
// base, writing nothing else: rounded into the frame, then their pairs through a VPMASKMOVD of
// dwords, then the last one (again, when their count is even) through VPEXTRW. y is clobbered.
func (g *kvGen) storeTail(pc piece, y VecVirtual, base GPVirtual) {
	g.st.round(g.a, piece{w: 8}, y, g.tmp, false, false)
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

// cvtPairs reports whether the span's bf16 rows may go to a store two pieces at a time through
// VCVTNE2PS2BF16 (cvtStores): AVX-512 bf16, whole vectors at consecutive offsets (the last one
// may be masked: its word mask is K1's), no guard.
func (g *kvGen) cvtPairs(s span) bool {
	if !g.st.cvt2() || !g.a.evex || s.guarded() || len(s.ps) < 2 {
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
// under the word mask of its lanes, K3, which cvtMasks sets once per block), an odd last piece by the
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
		VMOVDQU16(y, K3, m) // K3, K4: the pair's word mask and its complement (cvtMasks)
		VPTESTMW(mag, y, K3, K5)
		KORD(K4, K5, K5)
		KANDD(K5, K6, K6)
	}
	if n%2 != 0 {
		pc := s.ps[n-1]
		y := a.vec()
		VMOVAPS(a.view(get(n-1, pc)), a.view(y)) // bf16Stored rounds in place: keep the register
		g.st.round(a, pc, y, pc.at(dst, 2), false, true)
	}
	KORTESTD(K6, K6)
}
