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

// vkHalf is the low half of x (YMM of a ZMM, XMM of a YMM).
func (a isa) vkHalf(x VecVirtual) Register {
	if a.bytes() == 64 {
		return x.AsY()
	}
	return x.AsX()
}

// vkExtractHigh writes the high half of x to the low half of dst.
func (a isa) vkExtractHigh(x, dst VecVirtual) {
	if a.bytes() == 64 {
		VEXTRACTF64X4(U8(1), x.AsZ(), dst.AsY())
	} else {
		VEXTRACTF128(U8(1), x.AsY(), dst.AsX())
	}
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

// lab is one lane of the transpose-add simulation: partial sums of input in over the lanes in
// mask.
type lab struct {
	in   int
	mask uint32
}

// vkLevel is one level of the transpose-add: how a pair (x, y) is shuffled into two vectors whose
// sum halves the number of lanes per input.
type vkLevel struct {
	ins        string // VSHUFF32X4, VPERM2F128 or VSHUFPS
	imm1, imm2 uint8
}

func vkLevels(a isa) []vkLevel {
	in128 := []vkLevel{{"VSHUFPS", 0x44, 0xEE}, {"VSHUFPS", 0x88, 0xDD}}
	if a.bytes() == 64 { // four 128-bit quarters
		return append([]vkLevel{{"VSHUFF32X4", 0x44, 0xEE}, {"VSHUFF32X4", 0x88, 0xDD}}, in128...)
	}
	return append([]vkLevel{{"VPERM2F128", 0x20, 0x31}}, in128...) // two halves
}

// simShuffle is what l's instruction with imm does to (x = src1, y = src2).
func simShuffle(l vkLevel, imm uint8, x, y []lab) []lab {
	n := len(x)
	out := make([]lab, n)
	switch l.ins {
	case "VSHUFF32X4": // 128-bit chunks: two from x, two from y
		for c := range 4 {
			sel := int(imm>>(2*c)) & 3
			src := x
			if c >= 2 {
				src = y
			}
			copy(out[4*c:4*c+4], src[4*sel:4*sel+4])
		}
	case "VPERM2F128":
		for c := range 2 {
			sel := int(imm>>(4*c)) & 3
			src := x
			if sel >= 2 {
				src = y
			}
			copy(out[4*c:4*c+4], src[4*(sel&1):4*(sel&1)+4])
		}
	case "VSHUFPS": // per 128-bit lane: two from x, two from y
		for c := 0; c < n; c += 4 {
			for e := range 4 {
				sel := int(imm>>(2*e)) & 3
				src := x
				if e >= 2 {
					src = y
				}
				out[c+e] = src[c+sel]
			}
		}
	}
	return out
}

func simAdd(x, y []lab) []lab {
	out := make([]lab, len(x))
	for i := range x {
		if x[i].in != y[i].in || x[i].mask&y[i].mask != 0 {
			panic("vkReduce: lanes of different inputs or overlapping sums added")
		}
		out[i] = lab{x[i].in, x[i].mask | y[i].mask}
	}
	return out
}

// vkReduce emits the transpose-add of ins (at most lanes vectors) and returns the vector holding
// every input's total; vkLanes says which lane holds which.
func vkReduce(a isa, ins []VecVirtual) VecVirtual { return vkReduceLevels(a, ins, vkLevels(a)) }

// vkReduceLevels emits the given levels of the transpose-add of ins.
func vkReduceLevels(a isa, ins []VecVirtual, levels []vkLevel) VecVirtual {
	vs := ins
	for _, l := range levels {
		var nvs []VecVirtual
		for p := 0; p < len(vs); p += 2 {
			x, y := vs[p], vs[min(p+1, len(vs)-1)] // an odd one out pairs with itself
			t1, t2 := a.vec(), a.vec()
			vkShuffle(a, l.ins, l.imm1, x, y, t1)
			vkShuffle(a, l.ins, l.imm2, x, y, t2)
			VADDPS(a.view(t2), a.view(t1), a.view(t1))
			nvs = append(nvs, t1)
		}
		vs = nvs
	}
	if len(vs) != 1 {
		panic("vkReduce: more inputs than lanes")
	}
	return vs[0]
}

// vkLanes simulates vkReduce of m inputs lane by lane (checking that every addition adds
// disjoint partial sums of one input) and returns the lane holding each input's total.
func vkLanes(a isa, m int) []int {
	sim := make([][]lab, m)
	for k := range sim {
		sim[k] = make([]lab, a.lanes)
		for i := range sim[k] {
			sim[k][i] = lab{k, 1 << i}
		}
	}
	for _, l := range vkLevels(a) {
		var nsim [][]lab
		for p := 0; p < len(sim); p += 2 {
			x, y := sim[p], sim[min(p+1, len(sim)-1)]
			nsim = append(nsim, simAdd(simShuffle(l, l.imm1, x, y), simShuffle(l, l.imm2, x, y)))
		}
		sim = nsim
	}
	if len(sim) != 1 {
		panic("vkLanes: more inputs than lanes")
	}
	full := uint32(1)<<a.lanes - 1
	lane := make([]int, m)
	for k := range lane {
		lane[k] = -1
		for i, x := range sim[0] {
			if x.in == k && x.mask == full {
				lane[k] = i
				break
			}
		}
		if lane[k] < 0 {
			panic("vkLanes: an input's total is in no lane")
		}
	}
	return lane
}

func vkShuffle(a isa, ins string, imm uint8, x, y, dst VecVirtual) {
	X, Y, D := a.view(x), a.view(y), a.view(dst)
	switch ins {
	case "VSHUFF32X4":
		VSHUFF32X4(U8(imm), Y, X, D)
	case "VPERM2F128":
		VPERM2F128(U8(imm), Y, X, D)
	case "VSHUFPS":
		VSHUFPS(U8(imm), Y, X, D)
	}
}

// vkLane are the broadcast lane indices 1..7 (VPERMPS) and vkPerm the permutations of each
// (ISA, G) that bring kv of row r to lane r and qs to lane lanes/2 + r.
var (
	vkLane [8]Mem
	vkPerm = map[string]Mem{}
)

func vkConstants() {
	for r := 1; r < 8; r++ {
		vkLane[r] = splat(fmt.Sprintf("vklane%d", r), uint32(r))
	}
	for _, a := range []isa{avx512, avx2} {
		for g := 1; g <= a.lanes/2; g++ {
			vkPermFor(a, g, vkLanes(a, 2*g))
		}
	}
	// vkblockperm brings the total of input r of a 16-input AVX-512 reduction to lane r.
	vkBlockPerm = GLOBL("vkblockperm", RODATA|NOPTR)
	for r, l := range vkLanes(avx512, vkSub) {
		DATA(4*r, U32(uint32(l)))
	}
	// The and-masks of the AVX2 tail vector: vkand + 4·n is 8 dwords whose first 8 − n are 0.
	vkAnd = GLOBL("vkand", RODATA|NOPTR)
	for i := range 16 {
		v := uint32(0)
		if i >= 8 {
			v = 0xffffffff
		}
		DATA(4*i, U32(v))
	}
}

var vkAnd, vkBlockPerm Mem

// vkPermFor declares (once) the permutation constant of a reduction's lanes.
func vkPermFor(a isa, g int, lane []int) Mem {
	key := fmt.Sprintf("vkperm%s_%d", a.name, g)
	if m, ok := vkPerm[key]; ok {
		return m
	}
	m := GLOBL(key, RODATA|NOPTR)
	idx := make([]uint32, a.lanes)
	for r := range g {
		idx[r] = uint32(lane[r])
		idx[a.lanes/2+r] = uint32(lane[g+r])
	}
	for i, x := range idx {
		DATA(4*i, U32(x))
	}
	vkPerm[key] = m
	return m
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

// loadVec loads position i of a row from m into X: bf16 widened, masked, the tail and-masked.
func (b *vkBody) loadVec(m Mem, i int, bf16 bool, X Register) {
	mask := b.mask(i)
	switch {
	case bf16 && mask != nil:
		VPMOVZXWD_Z(m, mask, X)
	case bf16:
		VPMOVZXWD(m, X)
	case mask != nil:
		VMOVUPS_Z(m, mask, X)
	default:
		VMOVUPS(m, X)
	}
	if bf16 {
		VPSLLD(U8(16), X, X)
	}
	if b.tail(i) {
		VANDPS(b.r.andMask, X, X)
	}
}

// storeVec stores x as position i of a row at m, bf16-rounded if bf16 (x is kept; finite: x
// holds no NaN, see finiteDelta).
func (b *vkBody) storeVec(x VecVirtual, m Mem, i int, bf16, finite bool) {
	mask := b.mask(i)
	switch {
	case bf16:
		y := b.a.vec()
		VMOVAPS(b.a.view(x), b.a.view(y))
		bf16Stored(b.a, piece{w: b.a.lanes, mask: mask}, y, m, false, finite)
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

// load loads the group's rows from row pointer p (clobbered): bf16 widened, else f32. A dead
// position is skipped and its register zeroed; so are the rows a partial group lacks (rowSkip).
func (b *vkBody) load(p GPVirtual, bf16 bool) {
	es := 4
	idx := b.r.k4
	if bf16 {
		es, idx = 2, b.r.ks
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
			b.loadVec(b.vecMem(p, i, es, idx), i, bf16, b.a.view(x))
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

// store writes the group's rows to row pointer p (clobbered), bf16-rounded if bf16.
func (b *vkBody) store(p GPVirtual, bf16 bool) {
	// (Not bf16: its non-temporal rows cost 1,770 lines of stateVKbf16AVX2, for 20 % of an AVX2 bf16
	// verification, 4.42 → 3.55 ms. Its pairs prefetch their snapshot lines instead: storeRows.)
	if b.a.vkPairs() && !b.v.bf16 {
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
		b.storeRows(p, bf16)
		Label(done)
		return
	}
	b.storeRows(p, bf16)
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

// storeRows stores the group's rows to row pointer p (clobbered), bf16-rounded if bf16.
func (b *vkBody) storeRows(p GPVirtual, bf16 bool) {
	es := 4
	idx := b.r.k4
	if bf16 {
		es, idx = 2, b.r.ks
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
			b.each(b.storeOrder(), func(i int) { b.storeVec(b.get(r, i), b.vecMem(p, i, es, idx), i, bf16, finite) })
		}
		if end != "" {
			Label(end)
		}
	}
	one := func() {
		if !bf16 || b.a.evex {
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
	if !bf16 || !b.a.evex || b.n%2 != 0 {
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

// nextKMem is vector i of the next token's [K] f32 row (k̂ or q̂) after the one at base.
func (b *vkBody) nextKMem(base GPVirtual, i int) Mem {
	if b.tail(i) {
		return Mem{Base: base, Index: b.r.k4, Scale: 2, Disp: -b.a.lanes * 4}
	}
	return Mem{Base: base, Index: b.r.k4, Scale: 1, Disp: i * b.a.lanes * 4}
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
	if v.bf16 {
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
	if v.bf16 {
		tokenNext(r)
		DECQ(r.cnt)
		JMP(LabelRef(loop))
	} else {
		JMP(LabelRef(stored))
	}
	Label(last)
	if !v.bf16 {
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
	tokenStore(r, v.bf16, label("nostore"), b.store)
	CMPQ(r.cnt, U8(1))
	JE(LabelRef(done))
	tokenNext(r)
	DECQ(r.cnt)
	if v.bf16 {
		zeroAccs()
		dots()
	}
	JMP(LabelRef(loop))
	Label(done)
	tokensCarry(r, v.bf16, "nocarry", b.store)
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
	if b.v.bf16 && !a.evex {
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
	if v.bf16 {
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
			b.loadVec(b.pairMem(p, rr, i, es, idx), i, v.bf16, a.view(x))
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
		if v.bf16 {
			VPMOVZXWD(m, a.view(tl[rr]))
			VPSLLD(U8(16), a.view(tl[rr]), a.view(tl[rr]))
		} else {
			VMOVUPS(m, a.view(tl[rr]))
		}
	}
	if v.bf16 {
		// Only when both rows' δ are finite (finiteDelta): the rounding without its NaN select.
		// Else the pairs through work take this pair and the rest (nothing is stored yet; they
		// store its o again, the same bits).
		CMPL(r.fin, U8(0))
		JNE(LabelRef(nonFinite))
	}
	store := func(x VecVirtual, i, rr int) {
		if v.bf16 {
			// (x is not used again; no NaN select: δ is finite here)
			bf16Stored(a, piece{w: a.lanes}, x, b.pairMem(dst, rr, i, es, idx), false, true)
			return
		}
		VMOVUPS(a.view(x), b.pairMem(dst, rr, i, es, idx))
	}
	vkForm(b, func(f form, c VecVirtual) {
		db := b.deltaBroadcasts(d)
		rest := b.positions()[:b.n-1]
		if v.bf16 {
			// The positions no K of the shape leaves dead, two at a time: a pair's two
			// vectors of a row rounded and narrowed together (bf16Pair, one 32-byte store).
			for len(rest) >= 2 && !b.guarded(rest[1]) {
				i := rest[0]
				km := [2]Op{b.shared(b.kMem(r.pk, i)), b.shared(b.kMem(r.pk, i+1))}
				for rr := range 2 {
					var x [2]VecVirtual
					for h := range 2 {
						x[h] = a.vec()
						b.loadVec(b.pairMem(p, rr, i+h, es, idx), i+h, true, a.view(x[h]))
						b.update(f, c, km[h], db[rr], x[h], i+h)
					}
					bf16Pair(a, x[0], x[1], b.pairMem(dst, rr, i, es, idx), true)
				}
				rest = rest[2:]
			}
		}
		b.each(rest, func(i int) {
			km := b.shared(b.kMem(r.pk, i))
			for rr := range 2 {
				x := a.vec()
				b.loadVec(b.pairMem(p, rr, i, es, idx), i, v.bf16, a.view(x))
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
	if v.bf16 || !a.masks || b.g > 3 || b.n > vkDirectKRegs {
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
		b.loadVec(b.kMem(r.pk, i), i, false, a.view(kh[i]))
		b.loadVec(b.kMem(r.pq, i), i, false, a.view(qh[i]))
	}

	// The dots of the group at p into accK, accQ (zeroed where guarded).
	accK, accQ := b.dotAccs(b.g)
	dots := func(p GPVirtual, rr, i int) {
		x := a.vec()
		b.loadVec(rowMem(p, rr, i), i, false, a.view(x))
		b.fma(a.view(kh[i]), x, accK[rr][i%b.acc], i, b.first(i))
		b.fma(a.view(qh[i]), x, accQ[rr][i%b.acc], i, b.first(i))
	}
	// The update of row rr's position i, from src to dst.
	update := func(f form, c VecVirtual, db []VecVirtual, rr, i int) {
		x := a.vec()
		b.loadVec(rowMem(src, rr, i), i, false, a.view(x))
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
	loadRows(r, v.bf16, "frombf16", "loaded", b.load)
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
	tokensEnd(r, v.bf16, loop, nostore, "nocarry", b.store)
}

// loadRows emits the load of the rows from row j on (load: from the element pointer it is given,
// widening bf16): for a bf16 routine from src32 if that is not nil (the previous chunk's carry),
// else from src; the labels are made from fromLabel and loadedLabel here, in that order.
func loadRows(r vkRegs, bf16 bool, fromLabel, loadedLabel string, load func(p GPVirtual, bf16 bool)) {
	if bf16 {
		from16, loaded := label(fromLabel), label(loadedLabel)
		p := GP64()
		loadArg("src32", p)
		TESTQ(p, p)
		JZ(LabelRef(from16))
		off := GP64()
		MOVQ(r.j, off)
		IMULQ(r.k4, off)
		ADDQ(off, p)
		load(p, false)
		JMP(LabelRef(loaded))
		Label(from16)
		p = GP64()
		loadArg("src", p)
		off = GP64()
		MOVQ(r.j, off)
		IMULQ(r.ks, off)
		ADDQ(off, p)
		load(p, true)
		Label(loaded)
		return
	}
	p, off := GP64(), GP64()
	loadArg("src", p)
	MOVQ(r.j, off)
	IMULQ(r.k4, off)
	ADDQ(off, p)
	load(p, false)
}

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

// tokensEnd emits the end of a [V][K] token iteration: the rows stored (store, rounded to bf16
// for a bf16 routine) where the token has a store, every pointer on to the next token, the loop
// back to loop and, after the last token of a bf16 routine, the f32 carry if asked for (its label
// made from carryLabel here, so that labels keep their order in the output).
func tokensEnd(r vkRegs, bf16 bool, loop, nostore, carryLabel string, store func(d GPVirtual, bf16 bool)) {
	tokenStore(r, bf16, nostore, store)
	tokenNext(r)
	DECQ(r.cnt)
	JNZ(LabelRef(loop))
	tokensCarry(r, bf16, carryLabel, store)
}

// tokenStore emits the rows' store (store, rounded to bf16 for a bf16 routine) if the token has
// one, on to nostore if not.
func tokenStore(r vkRegs, bf16 bool, nostore string, store func(d GPVirtual, bf16 bool)) {
	Comment("The state after this token, if stored.")
	d := GP64()
	MOVQ(Mem{Base: r.ps}, d)
	TESTQ(d, d)
	JZ(LabelRef(nostore))
	off := GP64()
	MOVQ(r.j, off)
	if bf16 {
		IMULQ(r.ks, off)
	} else {
		IMULQ(r.k4, off)
	}
	ADDQ(off, d)
	store(d, bf16)
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

// tokensCarry emits, after the last token of a bf16 routine, the f32 carry if asked for (its label
// made from carryLabel).
func tokensCarry(r vkRegs, bf16 bool, carryLabel string, store func(d GPVirtual, bf16 bool)) {
	if !bf16 {
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
	store(d, false)
	Label(nocarry)
}

func bf16Store(a isa, pc piece, y VecVirtual, m Mem) { bf16(a, pc, y, m) }

// stateVK emits the routine of variant v.
func stateVK(v variant) {
	a := v.a
	routine(v.name(), NOSPLIT, stateSig)
	Doc(fmt.Sprintf("%s is the [V][K] %s state routine over T tokens in %s; see vk%s%s in gdn_amd64.go.", v.name(), v.storage(), a.name, strings.ToUpper(v.storage()), a.name))
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
	if v.bf16 && !a.evex {
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
		if a.vkPairs() && (!v.bf16 || n == vkMaxVecs) {
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
			if v.bf16 {
				noF32(pairs)
			}
			(&vkBody{v: v, a: a, n: n, lo: lo, g: g, acc: acc, r: r}).once(pairs)
			JMP(LabelRef(tail))
			Label(pairs)
			(&vkBody{v: v, a: a, n: n, lo: lo, g: g, acc: acc, r: r}).group()
			Label(tail)
		} else {
			if a.vkBlocks() && !v.bf16 && n <= vkDirectKRegs {
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
	if a.vkBlocks() || a.vkPairs() && !v.bf16 {
		SFENCE() // the non-temporal stores (vkBlk.store) ordered before the caller's next stores
	}
	VZEROUPPER()
	RET()
}
