package main

// The [V][K] state routines over T tokens (one stateArgs each: asm/internal/stateargs).
//
// Row j of a [V][K] head (column j of the maths) is K contiguous elements, and it evolves on its
// own for the whole call (SPEC "Useful identities"). A group of G rows is loaded once, carried in
// registers (AVX2: a pair of rows, mostly in work; a last odd row, partly in the frame; see
// vkPairs) through all T tokens and stored at every token that has a store (and, bf16, into the
// f32 carry after the last token). f32 with one token and a store runs from src to stores[0]
// instead: the AVX2 pairs (once), the AVX-512 groups for K ≤ 128 with k̂ and q̂ in registers (direct).
// Per token and row:
//
//	kv' = Σ_i k̂_i·S[j][i]   qs' = Σ_i q̂_i·S[j][i]        (k̂, q̂ memory operands, A accumulators each)
//	δ_j = beta·(v_j − decay(kv'))   o_j = decay(qs') + kq·δ_j
//	S[j][i] ← decay(S[j][i]) + k̂_i·δ_j
//
// The 2G dot accumulators of a group are reduced together by a transpose-add (vkReduce), so the
// horizontal-sum shuffles are shared by the group; δ and o are then computed for the G rows in one
// vector. The decay form is chosen per token from em1 (two branches on the same compare).
//
// A row is L = ceil(K/lanes) vectors (K ≤ 16·16 for AVX-512, 8 ≤ K ≤ 8·16 for AVX2; outside that
// range asmCell, tokens_asm.go, runs the portable routine: the routine's minK and maxK). The code is not
// specialised per L but per shape (vkShapes): the code of a shape of n vectors serves L from the
// shape before's n + 1 to n, the positions a row's K leaves dead skipped by predictable branches and
// the last live one masked (AVX-512: a mask per position that can be last; AVX2: the lanes
// elements ending at K, and-masked); see vkBody. Each shape is a full unroll at a model's K.
//
// Specialised per L (1…16) the four routines took 41,476 lines; TestLineBudget holds them under
// their budgets and the caps.

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// vkAhead is how far ahead of a group's rows load prefetches.
const vkAhead = 8192

// vkDirectKRegs is the most vectors per row of the shapes direct serves, k̂ and q̂ in registers
// beside the dots' accumulators (K ≤ 128; the wider rows keep the groups).
const vkDirectKRegs = 8

// vkMaxVecs is the most vectors per row the routines carry (K ≤ 256 AVX-512, 128 AVX2).
const vkMaxVecs = 16

// vkShapes are the row shapes of an ISA's routine, in vectors per row: rows of L vectors take the
// first shape n ≥ L, whose code serves L = (the shape before) + 1 … n (vkBody), the positions
// beyond L dead. A full unroll sits at the K of the models, 128 (and 64, 256): AVX-512 4, 8, 12,
// 16 (a shape serves at most 4 positions that can be a row's last, one mask each: vkMasks); AVX2,
// without masks, 8 and 16. The odd K = 96 runs in the shape of 128, two (AVX2 four) positions
// dead: the guards cost integer-port µops only, and its snapshots, cvt2 rounding and stores are
// those of whole vectors (K a multiple of the lanes, vkSnapshot). Specialised for 96 too (AVX-512
// 6, AVX2 12) the four routines took 8,300 more lines.
func vkShapes(a isa) []int {
	if a.masks {
		return []int{4, 8, 12, vkMaxVecs}
	}
	return []int{8, vkMaxVecs}
}

// The strategies of the [V][K] routines that differ per ISA.

// With masks a group may carry several rows: its g v's are loaded and its g o's stored under a mask
// (K6). vkPairs says whether, without masks, rows go in pairs instead: the two rows' vectors live
// in work (but for vkPairRegs of each in registers), their two v's are loaded and o's stored as one
// 64-bit word, and per token their dot, reduction and update chains interleave. One row alone had
// its chain serial per token — the two dots, their horizontal sums, δ, then the update — about
// 70 cycles a row-token against 32 of FP work. A pair's arithmetic per row is exactly that of a
// one-row group: the same products into the same accumulators in the same order, the same
// transpose-add tree (the four sums reduced together put each row's partial sums in the same
// pairs), the same δ, o and update per lane; the results are bit-identical.
func (a isa) vkPairs() bool { return !a.masks }

// vkPairRegs is the vectors of each row of a pair kept in registers (the first vkPairRegs − 1
// positions and the tail); the others live in work. The dots' 8 accumulators, a loaded vector and
// the update's δ's, decay constant and temporaries take the rest of the 16 YMM.
const vkPairRegs = 2

// vkNeedsWork says whether the routine takes a work space: the AVX-512 blocks, the AVX2 pairs.
func (a isa) vkNeedsWork() bool { return a.vkBlocks() || a.vkPairs() }

// vkBlocks says whether rows of at most vkBlockVecs vectors go in L1 blocks when T > 1
// (state_vk_block.go): k̂ and q̂ of a token live in 2·vkBlockVecs registers beside the dots, and
// a sub-block's 16 rows reduce into one vector: 32 ZMM.
func (a isa) vkBlocks() bool { return a.masks && a.regs >= 32 }

// vkRowRegs is the number of a row's vectors kept in registers; the others live in frame slots.
// With 16 registers, 9: the accumulators, δ and the temporaries take the other 7.
func (a isa) vkRowRegs() int {
	if a.regs >= 32 {
		return vkMaxVecs
	}
	return 9
}

// vkGroup returns the rows per group and the accumulators per dot for rows of n vectors: the most
// rows (≤ lanes/2) whose state, 2·G·A accumulators (≥ 8 chains in all, to cover the FMA latency) and
// five temporaries fit the registers (32 ZMM), the last group of a head partial (vkBody.partial);
// without masks (AVX2): a pair of rows in work (vkPairs), two accumulators, an odd V's last row
// left to the Go wrapper.
//
// AVX-512 rows that the blocks of state_vk_block.go also take (n ≤ vkBlockVecs) use the blocks'
// accumulators, min(n, 2), in every group: a row's arithmetic must not depend on whether a call's
// T sends it to a block or to a group (T = 1 does).
func vkGroup(a isa, n int) (g, acc int) {
	if a.vkPairs() {
		return 2, min(2, n)
	}
	for g = a.lanes / 2; g > 1; g-- { // (δ and o of the group's rows: one half vector each)
		acc = min(n, (4+g-1)/g)
		if n <= vkBlockVecs {
			acc = min(n, 2)
		}
		if g*n+2*g*acc+5 <= a.regs {
			return g, acc
		}
	}
	return 1, min(n, 4)
}

// vkRegs are the routine's GP registers and frame slots.
type vkRegs struct {
	pk, pq, pt, ps, pv, po, cnt, k4, ks GPVirtual
	j, rows, t, v4, vs4                 Mem          // frame: row index, rows left, T, V·4, vs·4
	work, nb                            Mem          // vkBlocks: the work space (aligned to 64 bytes), a block's sub-blocks
	andMask                             Mem          // no masks: the tail vector's and-mask
	slots                               Mem          // the vectors of a row beyond vkRowRegs
	fin                                 Mem          // bf16: 0 when this token's δ of the group's rows are finite (finiteDelta)
	pf                                  prefetchList // a group per row group (vkBlk: per block token)
}

// vkRow is the state of one row of a group: its vectors in registers, or frame slots.
type vkRow struct {
	reg []VecVirtual
	mem []Mem
}

// vkBody is the code of one shape: rows of n vector positions that serve rows of L = lo…n vectors
// (L = ceil(K/lanes)), in groups of g rows (or, vkBlk, in blocks) with acc accumulators per dot.
//
// With masks, position i holds elements lanes·i … lanes·i + lanes − 1 and is live when
// K > lanes·i; each position that can be a row's last (i ≥ lo − 1) is under its own mask
// (vkMasks: all lanes while the row goes on, the tail lanes at the last, none beyond), so a dead
// position reads and writes nothing. Without masks the last position is the tail: the lanes
// elements ending at K, those the vector before holds zeroed by an and-mask (so they add nothing to
// the dots and stay 0), stored before the others so that their values win; the others are
// elements lanes·i …, live when K > lanes·(i + 1), that is while they are not the last.
//
// A position that is dead for some K of the shape is guarded: a compare of K (k4) with a
// constant and a branch skip it in the dots, the update and the stores (without masks also in the
// load), as they skip the prefetches of the lines beyond K (run). The branch goes the same way for
// the whole call, so it predicts; it costs integer-port µops only. An accumulator whose first
// position is guarded is zeroed rather than set by that position's product, so a row's
// arithmetic is that of its live positions in order, whatever the shape.
type vkBody struct {
	v     variant
	a     isa
	n, lo int // vector positions per row, the fewest live ones the shape serves
	g     int // rows in the group
	acc   int
	r     vkRegs
	rows  []vkRow
	loopD bool // δ is written whole before its half (fusedTokens: else it is live around the loop)
}

// vkMasks are the masks of positions lo − 1 … n − 1 (K2 is the bf16 rounding's, K6 the group's).
var vkMasks = []Register{K1, K3, K4, K5}

// kMin is the smallest K the shape serves.
func (b *vkBody) kMin() int {
	k := b.a.lanes*(b.lo-1) + 1
	if !b.a.masks {
		k = max(k, b.a.lanes) // (the tail needs K ≥ lanes)
	}
	return k
}

// need is the smallest K for which position i is live.
func (b *vkBody) need(i int) int {
	switch {
	case b.tail(i):
		return 0
	case b.a.masks:
		return b.a.lanes*i + 1
	default:
		return b.a.lanes*(i+1) + 1
	}
}

// guarded says whether position i is dead for some K of the shape.
func (b *vkBody) guarded(i int) bool { return b.need(i) > b.kMin() }

// run emits body(j) for j = 0 … count − 1, need(j) being the smallest K for which j is live:
// those live for every K of the shape as they are, the others (need not decreasing among them)
// each behind a compare of K and a branch that, where j is dead, skips it and the rest of the
// run's guarded ones (dead too): one taken branch per run.
func (b *vkBody) run(count int, need func(j int) int, body func(j int)) {
	end, last := "", 0
	for j := range count {
		n := need(j)
		if n <= b.kMin() {
			if end != "" {
				Label(end)
				end = ""
			}
			body(j)
			continue
		}
		if n < last {
			panic("vkBody.run: guarded items out of order")
		}
		if end == "" {
			end = label("dead")
		}
		CMPQ(b.r.k4, U32(4*(n-1)))
		JBE(LabelRef(end))
		body(j)
		last = n
	}
	if end != "" {
		Label(end)
	}
}

// each emits body(i) for the positions in order, the guarded ones behind their guards (run).
func (b *vkBody) each(order []int, body func(i int)) {
	b.run(len(order), func(j int) int { return b.need(order[j]) }, func(j int) { body(order[j]) })
}

// positions are 0 … n − 1.
func (b *vkBody) positions() []int {
	p := make([]int, b.n)
	for i := range p {
		p[i] = i
	}
	return p
}

// prefetch emits the prefetches of rows rows at p (each K·es bytes) vkAhead bytes on (a hint:
// past the head it touches the next one or nothing): the lines the shape's smallest K needs, and
// behind guards those a larger one does. PREFETCHT1 (to L2), as the [K][V] routines': a T0
// prefetch holds one of L1's few miss buffers until its line arrives, so from memory the rows
// came at L1's miss rate, not at the rate the L2's streams reach (Zen 4, go run ./bench, 5
// alternating runs, medians of t/copy(), decode B = 64: avx512 vk-f32 1.74 → 1.14, avx2 vk-f32
// 1.44 → 1.20, avx512 vk-bf16 0.85 → 0.87; B = 1 and prefill unchanged).
func (b *vkBody) prefetch(p GPVirtual, rows, es int) {
	lines := (rows*b.n*b.a.lanes*es + 63) / 64
	b.run(lines, func(m int) int { return 64*m/(rows*es) + 1 }, func(m int) {
		PREFETCHT1(Mem{Base: p, Disp: vkAhead + 64*m})
	})
}

// first says whether position i's product sets its accumulator (else it is added to it; the
// accumulators whose first position is guarded start at 0, zeroAccs).
func (b *vkBody) first(i int) bool { return i < b.acc && !b.guarded(i) }

// zeroAccs zeroes the accumulators (acc of them, in order) whose first position is guarded.
func (b *vkBody) zeroAccs(accs []VecVirtual) {
	for i, x := range accs {
		if b.guarded(i) {
			b.a.zero(x)
		}
	}
}

// mask is position i's mask, or nil.
func (b *vkBody) mask(i int) Register {
	if !b.a.masks || i < b.lo-1 {
		return nil
	}
	return vkMasks[i-(b.lo-1)]
}

// tail says whether position i of a row is the overlapping last vector of an ISA without masks.
func (b *vkBody) tail(i int) bool { return !b.a.masks && i == b.n-1 }

// vecMem returns the memory operand of position i of a row at base (element size es): the tail
// ends at element K (index register idx = K·es).
func (b *vkBody) vecMem(base GPVirtual, i, es int, idx GPVirtual) Mem {
	if b.tail(i) {
		return Mem{Base: base, Index: idx, Scale: 1, Disp: -b.a.lanes * es}
	}
	return Mem{Base: base, Disp: i * b.a.lanes * es}
}

// kMem is vector i of a [K] f32 row (k̂ or q̂) at base.
func (b *vkBody) kMem(base GPVirtual, i int) Mem { return b.vecMem(base, i, 4, b.r.k4) }

// setMasks emits the shape's masks (with masks) for this K.
func (b *vkBody) setMasks() {
	if !b.a.masks {
		return
	}
	if b.n-b.lo+1 > len(vkMasks) {
		panic("vkBody: more masked positions than masks")
	}
	for i := b.lo - 1; i < b.n; i++ {
		t := GP64()
		MOVQ(b.r.k4, t)
		SHRQ(U8(2), t)
		if i > 0 {
			SUBQ(U32(b.a.lanes*i), t) // elements from position i on: ≤ 0 dead, ≥ lanes full
		}
		tailMask(t, b.mask(i)) // (a signed compare: t ≤ 0 sets no lane, t ≥ lanes every lane)
	}
}

// stateVK emits the routine of variant v.
func stateVK(v variant) {
	a := v.a
	routine(v.name(), NOSPLIT, stateSig)
	Doc(fmt.Sprintf("%s is the [V][K] %s state routine over T tokens in %s; see vk%s%s in gdn_amd64.go.", v.name(), v.st.String(), a.name, strings.ToUpper(v.st.String()), a.name))
	r := vkRegs{pk: GP64(), pq: GP64(), pt: GP64(), ps: GP64(), pv: GP64(), po: GP64(), cnt: GP64(), k4: GP64(), ks: GP64()}
	r.j, r.rows, r.t, r.v4, r.vs4 = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	if a.vkBlocks() {
		r.work, r.nb = AllocLocal(8), AllocLocal(8)
	} else if a.vkNeedsWork() {
		r.work = AllocLocal(8)
	}
	if !a.masks {
		r.andMask = AllocLocal(a.bytes())
	}
	if v.st.finiteRound() && !a.evex {
		r.fin = AllocLocal(8)
	}
	if a.vkRowRegs() < vkMaxVecs {
		r.slots = AllocLocal(a.bytes() * (vkMaxVecs - a.vkRowRegs()))
	}
	done := label("done")
	k, n, t := GP64(), GP64(), GP64()
	loadArg("K", k)
	loadArg("V", n)
	loadArg("T", t)
	TESTQ(k, k)
	JZ(LabelRef(done))
	TESTQ(n, n)
	JZ(LabelRef(done))
	TESTQ(t, t)
	JZ(LabelRef(done))
	MOVQ(n, r.rows)
	MOVQ(t, r.t)
	r.pf = newPrefetchList()
	if a.vkNeedsWork() {
		w := GP64()
		loadArg("work", w)
		ADDQ(U8(63), w)
		ANDQ(I8(-64), w)
		MOVQ(w, r.work)
	}
	MOVQ(U32(0), r.j)
	SHLQ(U8(2), n)
	MOVQ(n, r.v4)
	vs := GP64()
	loadArg("vs", vs)
	SHLQ(U8(2), vs)
	MOVQ(vs, r.vs4)
	MOVQ(k, r.k4)
	SHLQ(U8(2), r.k4)
	MOVQ(k, r.ks)
	SHLQ(U8(1), r.ks)
	if !a.masks {
		// The and-mask of the tail: vkand + 4·t, whose first lanes − t dwords are 0, t = the
		// elements beyond the vector before the tail, (K − 1) mod lanes + 1.
		t := GP64()
		MOVQ(k, t)
		DECQ(t)
		ANDQ(U8(a.lanes-1), t)
		INCQ(t)
		SHLQ(U8(2), t)
		q := GP64()
		LEAQ(vkAnd, q)
		ADDQ(t, q)
		y := a.vec()
		VMOVUPS(Mem{Base: q}, a.view(y))
		VMOVUPS(a.view(y), r.andMask)
	}
	shapes := vkShapes(a)
	Commentf("Dispatch on the vectors per row, L = ceil(K/%d), to the shapes %v.", a.lanes, shapes)
	nm1 := GP64()
	MOVQ(k, nm1)
	DECQ(nm1)
	SHRQ(U8(a.shift()), nm1)
	var targets []string
	for _, n := range shapes {
		targets = append(targets, label(fmt.Sprintf("n%d", n)))
	}
	for s, n := range shapes {
		CMPQ(nm1, U32(n-1))
		JBE(LabelRef(targets[s]))
	}
	JMP(LabelRef(done)) // K beyond the routine's range: the Go wrapper does not call it
	lo := 1
	for s, n := range shapes {
		Label(targets[s])
		Commentf("Rows of %d…%d vectors.", lo, n)
		(&vkBody{v: v, a: a, n: n, lo: lo, r: r}).setMasks()
		if a.vkBlocks() && n <= vkBlockVecs {
			// One token (decode): the copies into and out of work cost more than the groups lose.
			groups := label("groups")
			CMPQ(r.t, U8(1))
			JE(LabelRef(groups))
			(&vkBlk{b: &vkBody{v: v, a: a, n: n, lo: lo, acc: min(n, 2), r: r}, rb: a.bytes() * n}).emit()
			Label(groups)
		}
		g, acc := vkGroup(a, n)
		if a.vkPairs() && (!v.st.narrow() || n == vkMaxVecs) {
			// One token (decode) with a store: the pairs from src to stores[0] (once), not
			// through work, whose copies cost more than the overlap wins. BenchmarkVKRoutine, avx2
			// decode K=128, ns per head: f32 one row 2,200, pairs through work 2,250, once 1,735.
			// bf16 (src32 and carry nil) once was slower than the pairs through work while its
			// rounding selected NaN lanes (3,890 vs 3,560; 4,464 vs 4,141); without the select
			// (finite δ) it is faster: 4,340 → 3,890 (medians of 8 alternating runs, the pairs
			// without the select too), stateVKbf16AVX2 6,630 → 9,578 lines. bf16 only at the
			// model's K = 128 (and 96): at K ≤ 64 it took 666 lines.
			pairs, tail := label("pairs"), label("pairtail")
			unlessOneStoredToken(r, pairs)
			if v.st.narrow() {
				noF32(pairs)
			}
			(&vkBody{v: v, a: a, n: n, lo: lo, g: g, acc: acc, r: r}).once(pairs)
			JMP(LabelRef(tail))
			Label(pairs)
			(&vkBody{v: v, a: a, n: n, lo: lo, g: g, acc: acc, r: r}).group()
			Label(tail)
		} else {
			if a.vkBlocks() && !v.st.narrow() && n <= vkDirectKRegs {
				// One token (decode) with a store, f32: the groups from src to stores[0], k̂ and
				// q̂ in registers (direct), then the one-row group for the rest.
				groups := label("groups")
				unlessOneStoredToken(r, groups)
				(&vkBody{v: v, a: a, n: n, lo: lo, g: g, acc: acc, r: r}).direct()
				Label(groups)
			}
			(&vkBody{v: v, a: a, n: n, lo: lo, g: g, acc: acc, r: r}).group()
		}
		// (No one-row group after the multi-row one: AVX-512 groups are partial at a head's end,
		// the AVX2 pairs leave an odd V's last row to the Go wrapper.)
		JMP(LabelRef(done))
		lo = n + 1
	}
	Label(done)
	if a.vkBlocks() || a.vkPairs() && !v.st.narrow() {
		SFENCE() // the non-temporal stores (vkBlk.store) ordered before the caller's next stores
	}
	VZEROUPPER()
	RET()
}
