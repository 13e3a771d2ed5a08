package main

// A [V][K] group's rows: their vectors in registers or frame slots, loaded from src or src32
// (bf16 widened) and stored at a token's store (bf16 rounded: the integer rounding, or cvt2 two
// vectors at a time; AVX2 f32 snapshots non-temporally).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// loadRows emits the load of the rows from row j on (load: from the element pointer it is given,
// widening a narrow storage st): for a narrow routine from src32 if that is not nil (the previous
// chunk's carry), else from src; the labels are made from fromLabel and loadedLabel here, in
// that order.
func loadRows(r vkRegs, st storage, fromLabel, loadedLabel string, load func(p GPVirtual, st storage)) {
	if st.narrow() {
		from16, loaded := label(fromLabel), label(loadedLabel)
		p := GP64()
		loadArg("src32", p)
		TESTQ(p, p)
		JZ(LabelRef(from16))
		off := GP64()
		MOVQ(r.j, off)
		IMULQ(r.k4, off)
		ADDQ(off, p)
		load(p, stF32)
		JMP(LabelRef(loaded))
		Label(from16)
		p = GP64()
		loadArg("src", p)
		off = GP64()
		MOVQ(r.j, off)
		IMULQ(r.ks, off)
		ADDQ(off, p)
		load(p, st)
		Label(loaded)
		return
	}
	p, off := GP64(), GP64()
	loadArg("src", p)
	MOVQ(r.j, off)
	IMULQ(r.k4, off)
	ADDQ(off, p)
	load(p, stF32)
}

// load loads the group's rows from row pointer p (clobbered), widened from st. A dead position
// is skipped and its register zeroed; so are the rows a partial group lacks (rowSkip).
func (b *vkBody) load(p GPVirtual, st storage) {
	es := st.es()
	idx := b.r.k4
	if st.narrow() {
		idx = b.r.ks
	}
	b.prefetch(p, b.g, es)
	absent := make([]string, b.g)
	for r := range b.g {
		if r > 0 {
			if b.partial() {
				absent[r] = label("norow")
				b.rowSkip(r, absent[r])
			}
			ADDQ(idx, p)
		}
		// (The registers of guarded positions are zeroed: the allocator needs them written on
		// every path to their uses, which are all behind the same guards. A dead position is not
		// loaded even under its empty mask: from memory such a load still waits for its line, the
		// next row's, at B = 64 a bf16 decode at K = 96 in the shape of 128 took 1.35× as long.)
		for i, x := range b.rows[r].reg {
			if x != nil && b.guarded(i) {
				b.a.zero(x)
			}
		}
		b.each(b.positions(), func(i int) {
			x := b.rows[r].reg[i]
			if x == nil {
				x = b.a.vec()
			}
			b.loadVec(b.vecMem(p, i, es, idx), i, st, b.a.view(x))
			b.put(r, i, x)
		})
	}
	if b.partial() {
		// The rows a partial group lacks are 0: δ and o of such a row are 0, and it is not stored.
		loaded := label("rowsloaded")
		JMP(LabelRef(loaded))
		for r := 1; r < b.g; r++ {
			Label(absent[r])
			for _, x := range b.rows[r].reg {
				b.a.zero(x)
			}
		}
		Label(loaded)
	}
}

// partial says whether the group also takes the last rows of a head when fewer than g are left
// (AVX-512: its v and o under K6, the rows it lacks neither loaded nor stored), so that no shape
// needs a one-row group after its multi-row one (about 300 lines a shape). A row's arithmetic in
// a group of g rows is that of a one-row group (the same products, accumulators and
// transpose-add pairs): the same bits.
func (b *vkBody) partial() bool { return b.a.masks && b.g > 1 }

// rowSkip emits, for a partial group, the jump to label to when the group lacks row r (rows left
// ≤ r).
func (b *vkBody) rowSkip(r int, to string) {
	if b.partial() && r > 0 {
		CMPQ(b.r.rows, U8(r))
		JLE(LabelRef(to))
	}
}

// get returns vector i of row r in a register (loaded from its frame slot if need be).
func (b *vkBody) get(r, i int) VecVirtual {
	if x := b.rows[r].reg[i]; x != nil {
		return x
	}
	t := b.a.vec()
	VMOVUPS(b.rows[r].mem[i], b.a.view(t))
	return t
}

// put writes back x as vector i of row r if that lives in the frame.
func (b *vkBody) put(r, i int, x VecVirtual) {
	if b.rows[r].reg[i] == nil {
		VMOVUPS(b.a.view(x), b.rows[r].mem[i])
	}
}

// loadVec loads position i of a row from m into X: widened from st, masked, the tail and-masked.
func (b *vkBody) loadVec(m Mem, i int, st storage, X Register) {
	mask := b.mask(i)
	switch {
	case st.narrow():
		st.widenTo(m, mask, X)
	case mask != nil:
		VMOVUPS_Z(m, mask, X)
	default:
		VMOVUPS(m, X)
	}
	if b.tail(i) {
		VANDPS(b.r.andMask, X, X)
	}
}

// storeVec stores x as position i of a row at m, rounded to st (x is kept; finite: x holds no
// NaN, see finiteDelta).
func (b *vkBody) storeVec(x VecVirtual, m Mem, i int, st storage, finite bool) {
	mask := b.mask(i)
	switch {
	case st.narrow():
		y := b.a.vec()
		VMOVAPS(b.a.view(x), b.a.view(y))
		st.round(b.a, piece{w: b.a.lanes, mask: mask}, y, m, false, finite)
	case mask != nil:
		VMOVUPS(b.a.view(x), mask, m)
	default:
		VMOVUPS(b.a.view(x), m)
	}
}

// storeOrder is the order positions are stored in: the tail first.
func (b *vkBody) storeOrder() []int {
	var order []int
	for i := range b.n {
		if b.tail(i) {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	return order
}

// store writes the group's rows to row pointer p (clobbered), rounded to st.
func (b *vkBody) store(p GPVirtual, st storage) {
	// (Not bf16: its non-temporal rows cost 1,770 lines of stateVKbf16AVX2, for 20 % of an AVX2 bf16
	// verification, 4.42 → 3.55 ms. Its pairs prefetch their snapshot lines instead: storeRows.)
	if b.a.vkPairs() && !b.v.st.narrow() {
		// AVX2 f32 (pairs and the one-row group): a token's store goes non-temporally when K is
		// the shape's whole vectors, p is aligned to 32 bytes and the store is a snapshot (the
		// rule of the [K][V] routines: see ntSpan).
		r := b.r
		temporal, done := label("temporal"), label("stored")
		vkSnapshot(r, b.a, 4, p, temporal, label("snapshot"))
		for row := range b.g {
			if row > 0 {
				ADDQ(r.k4, p)
			}
			// (K a multiple of the lanes: the tail is the vector after the last live one.)
			b.each(b.storeOrder(), func(i int) { VMOVNTPS(b.a.view(b.get(row, i)), b.vecMem(p, i, 4, r.k4)) })
		}
		JMP(LabelRef(done))
		Label(temporal)
		b.storeRows(p, st)
		Label(done)
		return
	}
	b.storeRows(p, st)
}

// vkSnapshot emits the test of a [V][K] token store at row pointer p for non-temporal stores:
// on to temporal unless K is a multiple of the lanes (every live position a whole vector, the
// dead ones skipped by the stores' guards), p is aligned to a vector of elements of es bytes and
// the store is a snapshot (any but the last token's, or the last token's after a token with one:
// see ntSpan); else on to the code after it, at label nt.
func vkSnapshot(r vkRegs, a isa, es int, p GPVirtual, temporal, nt string) {
	TESTQ(U32(4*a.lanes-1), r.k4)
	JNZ(LabelRef(temporal))
	TESTQ(U32(es*a.lanes-1), p)
	JNZ(LabelRef(temporal))
	CMPQ(r.cnt, U8(1))
	JNE(LabelRef(nt))
	CMPQ(r.t, U8(1))
	JE(LabelRef(temporal))
	CMPQ(Mem{Base: r.ps, Disp: -8}, U8(0))
	JE(LabelRef(temporal))
	Label(nt)
}

// storeRows stores the group's rows to row pointer p (clobbered), rounded to st.
func (b *vkBody) storeRows(p GPVirtual, st storage) {
	es := st.es()
	idx := b.r.k4
	if st.narrow() {
		idx = b.r.ks
	}
	rows := func(p GPVirtual, finite bool) {
		end := ""
		if b.partial() {
			end = label("rowsstored")
		}
		for r := range b.g {
			if r > 0 {
				b.rowSkip(r, end)
				ADDQ(idx, p)
			}
			b.each(b.storeOrder(), func(i int) { b.storeVec(b.get(r, i), b.vecMem(p, i, es, idx), i, st, finite) })
		}
		if end != "" {
			Label(end)
		}
	}
	one := func() {
		if !st.finiteRound() || b.a.evex {
			// (AVX-512 rounds with cvt2 where the CPU has it; the integer rounding, a fallback,
			// always selects NaN lanes: its finite form took 330 lines of stateVKbf16AVX512.)
			rows(p, false)
			return
		}
		if b.a.vkPairs() && b.g == 2 {
			// The destination lines of the pair after next (a hint: past the head, the next
			// head's or nothing), so that a verification's stores to cold snapshot lines do not
			// wait for each line in turn (on a Zen 3, go run ./bench, 6 alternating runs, medians:
			// a vk-bf16 verification, T = 4 at B = 8, 3034 → 1988 µs per token; 2254 with the next
			// pair's; prefill unchanged).
			ahead := GP64()
			LEAQ(Mem{Base: p, Index: idx, Scale: 4}, ahead)
			for m := range 2 * b.n * b.a.lanes * es / 64 {
				PREFETCHT1(Mem{Base: ahead, Disp: 64 * m})
			}
		}
		// The rounding without its NaN select when this token's δ of the group's rows are finite
		// (finiteDelta), which they are but for NaN or ±Inf in the state, v, k̂ or the gates.
		nan, done := label("bfnan"), label("bfdone")
		CMPL(b.r.fin, U8(0))
		JNE(LabelRef(nan))
		q := GP64()
		MOVQ(p, q)
		rows(q, true)
		JMP(LabelRef(done))
		Label(nan)
		rows(p, false)
		Label(done)
	}
	if !st.cvt2() || !b.a.evex || b.n%2 != 0 {
		one()
		return
	}
	// AVX-512 bf16, K a multiple of two vectors, the CPU with AVX512_BF16 (cvt): two vectors at a
	// time rounded by one VCVTNE2PS2BF16 (see cvt2) and stored as one 64-byte vector, the dead
	// pairs skipped; else the integer rounding, vector by vector.
	ints, done := label("bfints"), label("bfstored")
	TESTQ(U32(8*b.a.lanes-1), b.r.k4)
	JNZ(LabelRef(ints))
	CMPB(argField("cvt"), U8(0))
	JE(LabelRef(ints))
	// cvt2 takes a denormal input as zero, so if a stored word is ±0 (that, or a zero) the integer
	// rounding stores the group again: K7 is the AND of "magnitude not zero" over the stored words
	// (one VPTESTMW a pair, under K7 itself), tested after the stores. A VFPCLASSPS denormal test
	// of every vector and a KORW each cost 40 % of a 128×128 head (1.77 against 1.05 µs without
	// any test); this one 0.5 k-register operation a vector.
	mag := b.a.vec()
	VMOVDQU32(cMag16, mag.AsZ())
	KXNORD(K7, K7, K7)
	q := GP64()
	MOVQ(p, q)
	stored := ""
	if b.partial() {
		stored = label("pairsstored")
	}
	for r := range b.g {
		if r > 0 {
			b.rowSkip(r, stored)
			ADDQ(idx, q)
		}
		b.run(b.n/2, func(h int) int { return b.need(2*h + 1) }, func(h int) {
			i, t := 2*h, b.a.vec()
			cvt2(b.get(r, i), b.get(r, i+1), t)
			VMOVDQU32(t.AsZ(), b.vecMem(q, i, es, idx))
			VPTESTMW(mag.AsZ(), t.AsZ(), K7, K7)
		})
	}
	if stored != "" {
		Label(stored)
	}
	KORTESTD(K7, K7)
	JCS(LabelRef(done)) // CF: every word of every pair not ±0
	Label(ints)
	one()
	Label(done)
}

// cvt2 emits VCVTNE2PS2BF16 (AVX512_BF16): dst's 32 words are BF16RNE of lo's 16 floats, then
// of hi's, but for denormal inputs, which it takes as zero (storeRows tests for ±0 words).
// Neither avo nor Go's assembler has the instruction: it is emitted as VPACKSSDW lo, hi, dst
// (the same operands: two sources, a destination) after the comment cvt2Mark, and the two lines
// are replaced by its bytes in the output (cvt2Fixup, main.go).
func cvt2(lo, hi, dst VecVirtual) {
	Comment(cvt2Mark)
	VPACKSSDW(lo.AsZ(), hi.AsZ(), dst.AsZ())
}
