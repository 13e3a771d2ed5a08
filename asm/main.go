// Command asm writes ../gdn_amd64.s: the AVX-512 and AVX2 routines behind the "avx512" and "avx2"
// kernels of package gdnsimd. Run it from the repository root with
//
//	go generate ./...        (gen.go: go -C asm run . -out ../gdn_amd64.s)
//
// Each ISA gets the three vector pieces of the portable kernel (gdn_generic.go, type impl):
//
//	state  the fused state update of one head: one read pass, δ and o, one write pass
//	gate   the gated RMSNorm of o: Σo² in float64, r, silu(z) through a vectorised Exp32, bf16 RNE
//	l2     Σq², Σk², Σk·q in float64
//
// The scalar transcendentals of a head (beta, em1, eg, the l2 factors) stay in the Go driver.
//
// # The two decays
//
// decay(x) is x + em1·x (one VFMADD213) when em1 ≥ −0.5, else eg·x (one VMULPS), as in SPEC Part
// A. The prologue compares em1 with −0.5 once (a NaN em1 takes eg·x) and keeps the answer in a
// frame byte; every column block branches on it once after its read pass, into its δ, o and
// write pass emitted for either form (eachForm), so no loop carries an extra instruction; the
// price is that this code exists twice in every block.
//
// # Measured on the machine this was tuned on (AMD EPYC, Zen 4, 2 cores, L1d 32 KiB, L2 1 MiB)
//
// What bounds the step at B = 64 (128 MiB of state, far beyond the caches) is how fast one core
// streams memory: a read-only AVX-512 pass over the same 128 MiB takes 0.81–0.85× the time of
// copy() of it, and a one-pass in-place read-modify-write 0.86–0.93×. The step needs two passes
// per head (δ needs every row of a column before any row is written), and the write pass runs
// from L2 (0.78 µs per 128×128 head with the state in L2, against ≈ 2.5 µs for the head's read
// from memory): the state routine alone, head after head, took 1.09–1.14× (AVX-512) and
// 1.19–1.24× (AVX2) while memory idled during every write pass. prefetchNext keeps it streaming:
// PREFETCHT1 of one line in four of the next head, spread over the write pass, brought the
// AVX-512 routine alone to 1.00–1.13× (6.2–6.9 ms against 6.1–6.5 ms for copy(), medians of 8,
// back to back in one process, several runs) and AVX2 to 1.04–1.10×. What did not work (the same
// measurement; before it, 7.2–7.4 ms): prefetching every line of the next head (9.6 ms) or with
// T0/NTA (7.8–7.9 ms against 7.3 ms without); prefetching only the first 8–64 lines of the next
// head before the write pass (no change); non-temporal stores (slower); software prefetch of later
// rows in the read pass (no gain: the hardware prefetchers already follow it); and fusing each head's write pass with
// the next head's read pass, row by row (8.3 ms) or in chunks of 2–64 rows (7.9–12.6 ms) —
// loads that hit L2 interleaved with the read stream slow the stream (read-only 5.1 ms; with
// as many loads from an L2-resident buffer 8.2 ms, from an L1-resident row 4.8 ms); with the
// prefetch in place, a burst of 32 more lines at the end of the routine (no gain), VMOVNTPS in
// the write pass (9.0 ms against 6.8 ms) and, for AVX2, Sᵀq̂ accumulated in the read pass into o
// instead of in the write pass (7.06 against 6.81 ms; removing that accumulation altogether, as
// a bound, gave 6.15 ms, AVX-512's time).
//
// # Blocking of the state pass
//
// One head's state is K×V float32 with V contiguous: 64 KiB at 128×128. δ_j needs the whole
// column j of Sᵀk̂ before any S'[i][j] can be written, so every column is read twice: once to
// accumulate Sᵀk̂ and Sᵀq̂, once to write S' = decay(S) + k̂_i·δ_j. The columns are cut into
// blocks; for one block the read pass streams its K rows from memory into register accumulators,
// δ and o are formed in registers, and the write pass re-reads the same K×block slab, which must
// still be in the L1 (or at worst L2) cache, so that memory sees each state byte read once and
// written once.
//
//   - AVX-512: whole rows up to V = 256: blocks of 256 columns = 16 ZMM per row, and for
//     V mod 256 one block of 1–16 ZMM (8 unmasked ZMM at the hot shape V = 128). A 128-column row
//     costs 8 loads and 16 FMAs into 16 independent accumulators (8 for Sᵀk̂, 8 for Sᵀq̂; 8 chains
//     would already cover the 4-cycle FMA latency at two FMAs per cycle): 19 of the 32 ZMM. A
//     row of up to 14 ZMM keeps all 28 accumulators in registers; the 15th and 16th ZMM keep
//     theirs in 256 bytes of the frame (L1), a load and a store per FMA. The read pass is then
//     one contiguous stream over the head, and on into the next head, which the hardware
//     prefetchers follow undisturbed. The slab is the whole head (64 KiB at 128×128, 256 KiB at
//     256×256): more than the L1d (32 KiB on Zen 4, 48 KiB on current Intel cores), so the write
//     pass re-reads it from L2 (1–2 MiB), still far above memory speed. Blocks of 64 columns
//     (4 ZMM, 8 accumulators, a 32 KiB slab that stays in L1) were the first version, and 32
//     columns were tried: in interleaved runs at B = 64 they took 13.5 and 13.7 ms per step
//     against 8.6 ms for 128 (B = 1: 63 against 54 µs). Their read pass walks part of each
//     512-byte row at a 512-byte stride and keeps fewer misses in flight than a stream.
//     The same held for V > 128 with 128-column blocks (then 1–8 ZMM): ratio to copy() at
//     K = V = 256 (Workers 1, in place) 0.67 at B = 1 (8 MiB, in L3), 1.62–1.70 at B = 4 and
//     1.88–2.2 at B = 8 (DRAM); K = V = 192: 1.29–1.34 at B = 8. Software prefetch in the first
//     block's read pass (PREFETCHT0/T1 of the rest of each row, or of rows 8 and 16 ahead, kept
//     inside the head) left B = 8 at 1.8–1.9 at 256. Whole rows of 16 ZMM: 0.63, 0.83–0.86 and
//     1.08 at 256; 0.90 at B = 8 at 192 (go run ./bench -layers 16x32x256x256,16x32x192x192
//     -b 1,4,8 -kernels avx512 -workers 1 -reps 7, medians, two runs), with V = 128, 64 and
//     K = 96, V = 80 unchanged within noise. Beyond V = 256 the row is cut into 256-column blocks.
//   - AVX2: whole rows of 256 columns (32 YMM), then one block of 192, 128 or 64 (see
//     rowBlock), so that the read pass is the same contiguous stream for V = 64, 128, 192, 256
//     and multiples of 256. 16 YMM cannot hold a row's accumulators, and the frame of a NOSPLIT
//     routine cannot hold 2 KiB of them (the linker allows about 600 bytes here), so the read
//     pass accumulates only Sᵀk̂ (13 YMM in registers, the rest in the block's part of o, in
//     L1), δ replaces it in o, and Sᵀq̂ is accumulated by the write pass from the state it
//     re-reads (from L2), one sub-block of at most 128 columns at a time (11 YMM in registers,
//     the rest in 160 bytes of the frame); then o = decay(Sᵀq̂) + kq·δ. The products and their
//     order are those of a read-pass Sᵀq̂, so the results are the same bits. Before, the read pass
//     took whole-row chunks of 128 columns (Sᵀk̂ and Sᵀq̂ of 3 YMM in registers, the others in o
//     and 416 bytes of the frame): at V = 256 a strided walk over half of every row. Ratio to
//     copy() (in place, Workers 1; go run ./bench -kernels avx2 -workers 1 -reps 7, medians of
//     two interleaved runs each) at K = V = 256, B = 1, 4, 8: 0.89–0.91, 2.00–2.07, 1.98–2.01
//     before, 0.75–0.77, 1.17–1.21, 1.18 after; K = V = 192, B = 8: 1.19–1.20 before, 1.00–1.02
//     after; K = V = 128, B = 1 and 64: 0.85 and 1.16–1.17 before, 0.84 and 1.15–1.16 after;
//     K = V = 64, B = 1 and 64: 1.94–1.95 and 1.48–1.57 before, 1.67–1.69 and 1.21–1.35 after;
//     K = 96, V = 80: the same within noise (1.54–1.58 and 1.36–1.43 after). Register blocks of
//     32 columns (4 YMM, 8 accumulators, everything in registers) were the first version; their
//     read pass walks 128 of every 512 bytes per row and took 15.0 ms instead of 9.5 ms at
//     B = 64 (same at B = 1). They remain for the last V mod 64 columns.
//
// # Tails (any K, V ≥ 1; nothing outside a slice is ever read or written; prefetch hints aside)
//
//   - AVX-512: the last block has 1–16 ZMM, the last one under a K1 mask (zeroing masked loads,
//     masked stores); masked-out lanes are neither read nor written and cannot fault.
//   - AVX2: after the whole-row blocks, at most one 32-column register block, one of
//     1–3 YMM, then one of at most one XMM and up to three scalar columns (VMOVSS).
//
// The gate and l2 routines use the same scheme: masked loads/stores for AVX-512, narrower vectors
// then a scalar loop for AVX2.
//
// # Hygiene
//
// Constants are file-local RODATA (name<>(SB)); no routine uses R15 (go build -asmflags=-dynlink);
// every routine ends with VZEROUPPER; the AVX2 routines use only Y0–Y15/X0–X15 (the tests check
// the generated file); the AVX-512 ones need AVX512F and AVX512VL only.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"

	ec "github.com/gdnsimd/gdnsimd/asm/internal/exp32consts"
)

func main() {
	ConstraintExpr("!purego")
	constants()

	stateRoutine(avx512)
	gateRoutine(avx512)
	l2Routine(avx512)

	stateRoutine(avx2)
	gateRoutine(avx2)
	l2Routine(avx2)

	for _, a := range []isa{avx512, avx2} {
		stateKVTokens(kvVariant{a: a})
		stateKVTokens(kvVariant{a: a, bf16: true})
		widenRoutine(a)
	}
	vkRoutines()    // state_vk.go
	benchRoutines() // bench_floor.go

	Generate()
}

// isa describes one instruction set's vector register file.
type isa struct {
	name  string // routine name suffix: "AVX512" or "AVX2"
	lanes int    // float32 lanes of the widest register: 16 or 8
	// blockVecs is the number of full vectors per row in a state block (see the package comment).
	blockVecs int
	// regVecs is the number of vectors of a block whose accumulators stay in registers; those of
	// the others live in the frame (stateLocal).
	regVecs int
}

var (
	avx512 = isa{name: "AVX512", lanes: 16, blockVecs: 16, regVecs: 14}
	avx2   = isa{name: "AVX2", lanes: 8, blockVecs: 4, regVecs: 4}
)

// stateLocal is the frame of the AVX-512 state routine: Sᵀk̂ and Sᵀq̂ (later δ) of the vectors
// of a block beyond regVecs, 64-byte aligned.
const stateLocal = (16-14)*128 + 64

// vec allocates a virtual register of the ISA's widest kind.
func (a isa) vec() VecVirtual {
	if a.lanes == 16 {
		return ZMM()
	}
	return YMM()
}

// piece is one vector (or scalar) of a row of a state block, or one step of a gate/l2 loop.
type piece struct {
	w    int      // float32 lanes: 16 (ZMM), 8 (YMM), 4 (XMM) or 1 (scalar in an XMM)
	off  int      // byte offset from the start of the block
	mask Register // opmask for a partial ZMM, or nil
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
	case p.mask != nil:
		VMOVUPS_Z(m, p.mask, p.view(dst))
	default:
		VMOVUPS(m, p.view(dst))
	}
}

func (p piece) store(src VecVirtual, m Mem) {
	switch {
	case p.w == 1:
		VMOVSS(src.AsX(), m)
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

// zero clears r (the whole register).
func zero(a isa, r VecVirtual) {
	if a.lanes == 16 {
		// VXORPS on ZMM would need AVX512DQ, and avo takes VPXORD r, r, r for a read of r (which
		// would keep r live back to the routine's entry): broadcast a zero instead.
		VBROADCASTSS(cZero, r.AsZ())
	} else {
		VXORPS(r.AsY(), r.AsY(), r.AsY())
	}
}

var labels = map[string]int{}

// label returns a fresh label name with the given prefix.
func label(prefix string) string {
	labels[prefix]++
	return fmt.Sprintf("%s_%d", prefix, labels[prefix])
}

// --- constants ---

var (
	cIota, cAbs, cNaNMin, cLSB, cRound, cQuiet, cBias, cSign Mem
	cHi, cLo, cLog2e, cHalf, cC1, cC2, cOne                  Mem
	cP                                                       [6]Mem
	cOneF64, cZero, cNearOne                                 Mem
)

// splat declares a 64-byte constant holding v in each of its 16 dwords, so that it can be a m512,
// m256 or m128 operand, or a VBROADCASTSS source.
func splat(name string, v uint32) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(v))
	}
	return m
}

func splatF(name string, f float32) Mem { return splat(name, math.Float32bits(f)) }

func constants() {
	cIota = GLOBL("iota", RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(uint32(i)))
	}
	cAbs = splat("absmask", 0x7fffffff)
	cSign = splat("signmask", 0x80000000)
	cNaNMin = splat("infbits", 0x7f800000)
	cLSB = splat("one_i", 1)
	cRound = splat("round", 0x7fff)
	cQuiet = splat("quiet", 0x40)
	// Exp32's constants: the one table both generators use (asm/internal/exp32consts).
	cBias = splat("bias", ec.Bias)
	cOne = splatF("one", ec.One)
	cHalf = splatF("half", ec.Half)
	cHi = splatF("exphi", ec.Hi)
	cLo = splatF("explo", ec.Lo)
	cLog2e = splatF("log2e", ec.Log2e)
	cC1 = splatF("expc1", ec.C1)
	cC2 = splatF("expc2", ec.C2)
	for i, p := range ec.P {
		cP[i] = splatF(fmt.Sprintf("expp%d", i), p)
	}
	cZero = GLOBL("zero", RODATA|NOPTR)
	DATA(0, U32(0))
	cOneF64 = GLOBL("one_f64", RODATA|NOPTR)
	DATA(0, U64(math.Float64bits(1)))
	cNearOne = GLOBL("nearone", RODATA|NOPTR)
	DATA(0, U32(math.Float32bits(nearOne)))
}

// tailMask sets k to the first n lanes (1 ≤ n ≤ 16, n in a GP register, clobbered as 32 bits).
func tailMask(n GPVirtual, k Register) {
	t := ZMM()
	VPBROADCASTD(n.As32(), t)
	VPCMPGTD(cIota, t, k) // k_i = n > i
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

// zmmBlock is an AVX-512 block of nv unmasked ZMM.
func zmmBlock(nv int) []piece { return vecBlock(16, nv) }

// maskedBlock is an AVX-512 tail block of nv vectors, the last one under K1.
func maskedBlock(nv int) []piece {
	ps := vecBlock(16, nv)
	ps[nv-1].mask = K1
	return ps
}

// ymmBlock is an AVX2 tail block of nv full YMM.
func ymmBlock(nv int) []piece { return vecBlock(8, nv) }

// narrowBlock is the AVX2 tail block of n < 8 columns: an XMM if n ≥ 4, then scalars.
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
type stateRegs struct {
	sIn, sOut, kh, qh, v, o GPVirtual // sIn, sOut, v, o advance block by block
	k, stride               GPVirtual // K, V·4
	next                    Mem       // frame slot: where the write passes prefetch (see prefetchNext)
	near                    Mem       // frame byte: 1 if em1 ≥ nearOne (form near), else 0 (see eachForm)
}

// nearOne is the em1 from which the state decays as x + em1·x rather than eg·x (nearOne in
// gdn_generic.go, SPEC Part A).
const nearOne = -0.5

// form is one of the two decays of SPEC Part A: decay(x) = x + em1·x, fused into one rounding,
// when em1 ≥ nearOne (a decay near 1 keeps its digits), else eg·x (a strong decay keeps its
// relative accuracy). param is the scalar parameter the form multiplies by.
type form struct {
	near  bool
	param string
}

var (
	nearForm = form{near: true, param: "em1"}
	farForm  = form{near: false, param: "eg"}
)

// of returns decay(x) as text, for comments.
func (f form) of(x string) string {
	if f.near {
		return x + " + em1·" + x
	}
	return "eg·" + x
}

// eachForm emits body once per form behind a branch on the flag the prologue set (once per
// call): the form is chosen per column block, outside every loop, so a loop body is the same
// length in either form. Both paths continue after the last one.
func eachForm(r stateRegs, body func(f form)) {
	far, join := label("far"), label("decayed")
	CMPB(r.near, U8(0))
	JE(LabelRef(far))
	Commentf("em1 ≥ %g: decay(x) = %s.", nearOne, nearForm.of("x"))
	body(nearForm)
	JMP(LabelRef(join))
	Label(far)
	Commentf("em1 < %g or NaN: decay(x) = %s.", nearOne, farForm.of("x"))
	body(farForm)
	Label(join)
}

func stateRoutine(a isa) {
	TEXT("state"+a.name, NOSPLIT, "func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)")
	Doc(fmt.Sprintf("state%s is impl.state (stateGeneric) for one head, in %s; see gdn_amd64.go.", a.name, a.name))
	r := stateRegs{
		sIn: GP64(), sOut: GP64(), kh: GP64(), qh: GP64(), v: GP64(), o: GP64(), k: GP64(), stride: GP64(),
	}
	Load(Param("sIn").Base(), r.sIn)
	Load(Param("sOut").Base(), r.sOut)
	Load(Param("kh").Base(), r.kh)
	Load(Param("qh").Base(), r.qh)
	Load(Param("v").Base(), r.v)
	Load(Param("o").Base(), r.o)
	Load(Param("kh").Len(), r.k)
	rem := GP64()
	Load(Param("v").Len(), rem)
	done := label("state" + a.name + "_done")
	TESTQ(r.k, r.k)
	JZ(LabelRef(done))
	TESTQ(rem, rem)
	JZ(LabelRef(done))
	MOVQ(rem, r.stride)
	SHLQ(U8(2), r.stride) // row stride in bytes
	// The columns left, in the frame: the write passes need every register but R15 (-dynlink).
	remMem := AllocLocal(8)
	MOVQ(rem, remMem)
	Comment("Hint: the next head's v (the caller's v usually continues with it).")
	prefetchAfter(r.v, rem)
	r.next = AllocLocal(8)
	{
		nx := GP64()
		MOVQ(r.k, nx)
		IMULQ(r.stride, nx)
		ADDQ(r.sIn, nx)
		MOVQ(nx, r.next) // the byte after the head: the next head, if the caller has one
	}
	Commentf("The decay form, once per call: near = em1 ≥ %g (false for a NaN em1).", nearOne)
	r.near = AllocLocal(8)
	{
		x := XMM()
		VMOVSS(paramMem("em1"), x)
		VUCOMISS(cNearOne, x) // CF = em1 < nearOne or unordered
		SETCC(r.near)
	}

	if a.lanes == 8 {
		// Whole rows of 256 columns, then of 192, 128 or 64 (see rowBlock), then the register
		// blocks for the last V mod 64 columns.
		acc := GP64()
		LEAQ(AllocLocal(rowLocal), acc)
		ADDQ(U8(31), acc)
		ANDQ(I8(-32), acc)
		for _, subs := range [][]int{{16, 16}, {16, 8}, {16}, {8}} {
			n := 0
			for _, m := range subs {
				n += m
			}
			loop, next := label(fmt.Sprintf("rows%d", 8*n)), label("rowsdone")
			Label(loop)
			CMPQ(remMem, U32(8*n))
			JB(LabelRef(next))
			rowBlock(r, subs, acc)
			advance(r, 32*n)
			SUBQ(U32(8*n), remMem)
			if n == 32 {
				JMP(LabelRef(loop))
			}
			Label(next)
		}
	}

	var local Mem
	if a.regVecs < a.blockVecs {
		local = AllocLocal(stateLocal)
	}
	blockCols := a.lanes * a.blockVecs
	Commentf("Blocks of %d columns.", blockCols)
	loop, tail := label("full"), label("tail")
	Label(loop)
	CMPQ(remMem, U32(blockCols))
	JB(LabelRef(tail))
	stateBlock(a, r, fullBlock(a), local)
	advance(r, 4*blockCols)
	SUBQ(U32(blockCols), remMem)
	JMP(LabelRef(loop))

	Label(tail)
	rem = GP64()
	MOVQ(remMem, rem)
	TESTQ(rem, rem)
	JZ(LabelRef(done))
	if a.lanes == 16 {
		// V = 128, the hot shape: 8 unmasked ZMM.
		masked := label("maskedtail")
		CMPQ(rem, U32(128))
		JNE(LabelRef(masked))
		stateBlock(a, r, zmmBlock(8), local)
		JMP(LabelRef(done))
		Label(masked)
		// rem in 1..16·blockVecs−1: nv = ceil(rem/16) vectors, the last with rem − 16(nv−1) lanes.
		Commentf("Tail: 1 to %d ZMM, the last one masked.", a.blockVecs)
		nvm1 := GP64()
		MOVQ(rem, nvm1)
		DECQ(nvm1)
		SHRQ(U8(4), nvm1) // nv − 1
		lanes := GP64()
		MOVQ(nvm1, lanes)
		SHLQ(U8(4), lanes)
		NEGQ(lanes)
		ADDQ(rem, lanes) // rem − 16(nv−1)
		tailMask(lanes, K1)
		var targets []string
		for nv := 1; nv <= a.blockVecs; nv++ {
			targets = append(targets, label(fmt.Sprintf("masked%d", nv)))
		}
		for nv := 1; nv < a.blockVecs; nv++ {
			CMPQ(nvm1, U32(nv-1))
			JE(LabelRef(targets[nv-1]))
		}
		JMP(LabelRef(targets[a.blockVecs-1]))
		for nv := 1; nv <= a.blockVecs; nv++ {
			Label(targets[nv-1])
			stateBlock(a, r, maskedBlock(nv), local)
			JMP(LabelRef(done))
		}
	} else {
		// rem in 1..31: first 0..3 YMM, then 0..7 columns as XMM and scalars.
		Comment("Tail: 1 to 3 YMM, then up to 7 columns as an XMM and scalars.")
		nv := GP64()
		MOVQ(rem, nv)
		SHRQ(U8(3), nv)
		narrow := label("narrow")
		var ytargets []string
		for n := 1; n < a.blockVecs; n++ {
			ytargets = append(ytargets, label(fmt.Sprintf("ymm%d", n)))
		}
		for n := 1; n < a.blockVecs; n++ {
			CMPQ(nv, U32(n))
			JE(LabelRef(ytargets[n-1]))
		}
		JMP(LabelRef(narrow))
		for n := 1; n < a.blockVecs; n++ {
			Label(ytargets[n-1])
			stateBlock(a, r, ymmBlock(n), local)
			advance(r, 32*n)
			JMP(LabelRef(narrow))
		}
		Label(narrow)
		ANDQ(U32(7), rem)
		var ntargets []string
		for n := 1; n < 8; n++ {
			ntargets = append(ntargets, label(fmt.Sprintf("cols%d", n)))
		}
		for n := 1; n < 8; n++ {
			CMPQ(rem, U32(n))
			JE(LabelRef(ntargets[n-1]))
		}
		JMP(LabelRef(done))
		for n := 1; n < 8; n++ {
			Label(ntargets[n-1])
			stateBlock(a, r, narrowBlock(n), local)
			JMP(LabelRef(done))
		}
	}

	Label(done)
	VZEROUPPER()
	RET()
}

// advance moves the block pointers by n bytes.
func advance(r stateRegs, n int) {
	ADDQ(U32(n), r.sIn)
	ADDQ(U32(n), r.sOut)
	ADDQ(U32(n), r.v)
	ADDQ(U32(n), r.o)
}

// paramMem is the frame address of a scalar parameter.
func paramMem(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// rowRegsK and rowRegsQ are the numbers of YMM accumulators of rowBlock that stay in registers:
// 13 of Sᵀk̂ in the read pass (beside k̂_i and a temporary; δ needs em1 or eg, beta and v beside
// them), 11 of Sᵀq̂ in the write pass (beside em1 or eg, k̂_i, q̂_i, the state vector and a
// temporary). rowLocal is the frame for the other Sᵀq̂ of a 16-YMM sub-block, 32-byte aligned
// (small enough for NOSPLIT, which keeps the routine free of the stack-check prologue and its TLS
// access, which -dynlink executables cannot link).
const (
	rowRegsK = 13
	rowRegsQ = 11
	rowLocal = (16-rowRegsQ)*32 + 32
)

// rowBlock is the AVX2 state block of whole rows of 8·Σsubs columns (at most 32 YMM): the read
// pass accumulates only Sᵀk̂, over whole rows, 13 YMM in registers and the rest in the block's
// part of o; δ replaces Sᵀk̂ in o; then each sub-block of subs[c] YMM (at most 16) has a write
// pass that also accumulates Sᵀq̂ from the state it re-reads (the same products, in the same
// order, as a read-pass accumulation), 11 YMM in registers and the rest in acc, and ends with
// o = decay(Sᵀq̂) + kq·δ over δ. δ and each sub-block's write pass and o are emitted for both
// decay forms (eachForm).
func rowBlock(r stateRegs, subs []int, acc GPVirtual) {
	n := 0
	for _, m := range subs {
		n += m
	}
	Commentf("Rows of %d columns: read pass, Sᵀk̂ of YMM ≥ %d in o.", 8*n, rowRegsK)
	slotO := func(t int) Mem { return Mem{Base: r.o, Disp: 32 * t} }
	nk := min(n, rowRegsK)
	if n > nk {
		zy := YMM()
		VXORPS(zy, zy, zy)
		for t := nk; t < n; t++ {
			VMOVUPS(zy, slotO(t))
		}
	}
	accK := make([]VecVirtual, nk)
	for t := range accK {
		accK[t] = YMM()
		VXORPS(accK[t], accK[t], accK[t])
	}
	ymm := piece{w: 8}
	p, i := GP64(), GP64()
	MOVQ(r.sIn, p)
	XORQ(i, i)
	read := label("rread")
	Label(read)
	bk := YMM()
	VBROADCASTSS(Mem{Base: r.kh, Index: i, Scale: 4}, bk)
	for t := 0; t < n; t++ {
		if t < nk {
			VFMADD231PS(Mem{Base: p, Disp: 32 * t}, bk, accK[t])
			continue
		}
		m := YMM()
		VMOVUPS(slotO(t), m)
		VFMADD231PS(Mem{Base: p, Disp: 32 * t}, bk, m)
		VMOVUPS(m, slotO(t))
	}
	ADDQ(r.stride, p)
	INCQ(i)
	CMPQ(i, r.k)
	JB(LabelRef(read))

	eachForm(r, func(f form) {
		Comment("δ = beta·(v − decay(Sᵀk̂)), in o.")
		c, beta := YMM(), YMM()
		VBROADCASTSS(paramMem(f.param), c)
		VBROADCASTSS(paramMem("beta"), beta)
		for t := 0; t < n; t++ {
			ak := YMM()
			if t < nk {
				ak = accK[t]
			} else {
				VMOVUPS(slotO(t), ak)
			}
			vt := YMM()
			VMOVUPS(Mem{Base: r.v, Disp: 32 * t}, vt)
			ymm.decay(f, c, ak)
			VSUBPS(ak, vt, ak)
			VMULPS(ak, beta, ak)
			VMOVUPS(ak, slotO(t))
		}
	})

	t0 := 0
	for _, m := range subs {
		Commentf("Write pass over YMM %d–%d, Sᵀq̂ of YMM ≥ %d in the frame.", t0, t0+m-1, t0+rowRegsQ)
		nq := min(m, rowRegsQ)
		slotQ := func(t int) Mem { return Mem{Base: acc, Disp: 32 * (t - t0 - nq)} }
		if m > nq {
			zy := YMM()
			VXORPS(zy, zy, zy)
			for t := t0 + nq; t < t0+m; t++ {
				VMOVAPS(zy, slotQ(t))
			}
		}
		accQ := make([]VecVirtual, nq)
		for t := range accQ {
			accQ[t] = YMM()
			VXORPS(accQ[t], accQ[t], accQ[t])
		}
		eachForm(r, func(f form) {
			Commentf("S' = %s + k̂_i·δ.", f.of("S"))
			c := YMM()
			VBROADCASTSS(paramMem(f.param), c)
			q := GP64()
			MOVQ(r.sIn, p)
			MOVQ(r.sOut, q)
			XORQ(i, i)
			write := label("rwrite")
			Label(write)
			prefetchNext(r, 32*m)
			bk2, bq := YMM(), YMM()
			VBROADCASTSS(Mem{Base: r.kh, Index: i, Scale: 4}, bk2)
			VBROADCASTSS(Mem{Base: r.qh, Index: i, Scale: 4}, bq)
			for t := t0; t < t0+m; t++ {
				y := YMM()
				VMOVUPS(Mem{Base: p, Disp: 32 * t}, y)
				if t-t0 < nq {
					VFMADD231PS(y, bq, accQ[t-t0])
				} else {
					a := YMM()
					VMOVAPS(slotQ(t), a)
					VFMADD231PS(y, bq, a)
					VMOVAPS(a, slotQ(t))
				}
				ymm.decay(f, c, y)
				VFMADD231PS(slotO(t), bk2, y)
				VMOVUPS(y, Mem{Base: q, Disp: 32 * t})
			}
			ADDQ(r.stride, p)
			ADDQ(r.stride, q)
			INCQ(i)
			CMPQ(i, r.k)
			JB(LabelRef(write))

			Comment("o = decay(Sᵀq̂) + kq·δ over δ.")
			kq := YMM()
			VBROADCASTSS(paramMem("kq"), kq)
			for t := t0; t < t0+m; t++ {
				ot := YMM()
				if t-t0 < nq {
					ot = accQ[t-t0]
				} else {
					VMOVAPS(slotQ(t), ot)
				}
				ymm.decay(f, c, ot)
				VFMADD231PS(slotO(t), kq, ot)
				VMOVUPS(ot, slotO(t))
			}
		})
		t0 += m
	}
}

// prefetchNext emits, in a row of a write pass that writes n bytes, PREFETCHT1 of the lines at
// r.next, r.next + 256, ... below r.next + n, and advances r.next by n: over the write passes of a
// head it walks the K·V·4 bytes after the head in order, one line in four, so that memory keeps
// streaming the next head while the write pass runs from L2 (see the package comment for what
// was measured). The caller's state usually has the next head right there; past the end of the
// state these are hints about memory that may not be ours, which never fault or change anything.
func prefetchNext(r stateRegs, n int) {
	nx := GP64()
	MOVQ(r.next, nx)
	for o := 0; o < n; o += 256 {
		PREFETCHT1(Mem{Base: nx, Disp: o})
	}
	ADDQ(U32(n), r.next)
}

// prefetchAfter emits PREFETCHT1 of the 512 bytes after the n float32s at p: the next head's
// vector of a [B][HV][V] input (z, v), read by the next call after this head's ≈ 3 µs of state
// traffic. Those 512 bytes came from memory when the call needed them, stalling it (the gate was
// 5 % of a B = 64 step); past the end of the input they are hints that never fault.
func prefetchAfter(p, n GPVirtual) {
	t := GP64()
	LEAQ(Mem{Base: p, Index: n, Scale: 4}, t)
	for l := 0; l < 8; l++ {
		PREFETCHT1(Mem{Base: t, Disp: 64 * l})
	}
}

// stateBlock emits one column block: the read pass, then, once per decay form (eachForm), δ and
// o and the write pass. The accumulators of pieces from a.regVecs on live in local (Sᵀk̂, then
// Sᵀq̂ and later δ, 64 bytes each per piece).
func stateBlock(a isa, r stateRegs, ps []piece, local Mem) {
	nreg := min(len(ps), a.regVecs)
	Commentf("Block of %d columns: read pass (Sᵀk̂, Sᵀq̂ of %d vectors in registers).", width(ps), nreg)
	accK := make([]VecVirtual, nreg)
	accQ := make([]VecVirtual, nreg)
	for t := range accK {
		accK[t], accQ[t] = a.vec(), a.vec()
		zero(a, accK[t])
		zero(a, accQ[t])
	}
	var slot GPVirtual
	slotK := func(t int) Mem { return Mem{Base: slot, Disp: 128 * (t - nreg)} }
	slotQ := func(t int) Mem { return Mem{Base: slot, Disp: 128*(t-nreg) + 64} }
	if nreg < len(ps) {
		slot = GP64()
		LEAQ(local, slot)
		ADDQ(U8(63), slot)
		ANDQ(I8(-64), slot)
		z := a.vec()
		zero(a, z)
		for t := nreg; t < len(ps); t++ {
			VMOVAPS(z.AsZ(), slotK(t))
			VMOVAPS(z.AsZ(), slotQ(t))
		}
	}
	p, i := GP64(), GP64()
	MOVQ(r.sIn, p)
	XORQ(i, i)
	read := label("read")
	Label(read)
	bk, bq := a.vec(), a.vec()
	VBROADCASTSS(Mem{Base: r.kh, Index: i, Scale: 4}, bk)
	VBROADCASTSS(Mem{Base: r.qh, Index: i, Scale: 4}, bq)
	x := a.vec()
	for t, pc := range ps {
		pc.load(Mem{Base: p, Disp: pc.off}, x)
		if t < nreg {
			pc.fma(x, bk, accK[t])
			pc.fma(x, bq, accQ[t])
			continue
		}
		// Whole ZMM in the frame: the masked-out lanes of x are zero.
		m := a.vec()
		VMOVAPS(slotK(t), m.AsZ())
		VFMADD231PS(x.AsZ(), bk.AsZ(), m.AsZ())
		VMOVAPS(m.AsZ(), slotK(t))
		VMOVAPS(slotQ(t), m.AsZ())
		VFMADD231PS(x.AsZ(), bq.AsZ(), m.AsZ())
		VMOVAPS(m.AsZ(), slotQ(t))
	}
	ADDQ(r.stride, p)
	INCQ(i)
	CMPQ(i, r.k)
	JB(LabelRef(read))

	// One path per form from here: δ and o, then the write pass.
	eachForm(r, func(f form) { stateBlockWrite(a, r, ps, f, accK, accQ, slotK, slotQ, p, i) })
}

// stateBlockWrite emits the rest of a column block after its read pass, in form f: δ and o from
// the accumulators, then the write pass.
func stateBlockWrite(a isa, r stateRegs, ps []piece, f form, accK, accQ []VecVirtual, slotK, slotQ func(int) Mem, p, i GPVirtual) {
	nreg := len(accK)
	Comment("δ = beta·(v − decay(Sᵀk̂)), o = decay(Sᵀq̂) + kq·δ.")
	c, beta, kq := a.vec(), a.vec(), a.vec()
	VBROADCASTSS(paramMem(f.param), c)
	VBROADCASTSS(paramMem("beta"), beta)
	VBROADCASTSS(paramMem("kq"), kq)
	// In place: δ replaces Sᵀk̂ in its registers (or its Sᵀq̂ slot), o is formed in Sᵀq̂'s.
	d := accK
	for t, pc := range ps {
		ak, aq := a.vec(), a.vec()
		if t < nreg {
			ak, aq = accK[t], accQ[t]
		} else {
			VMOVAPS(slotK(t), ak.AsZ())
			VMOVAPS(slotQ(t), aq.AsZ())
		}
		vt := a.vec()
		pc.load(Mem{Base: r.v, Disp: pc.off}, vt)
		pc.decay(f, c, ak)
		pc.sub(vt, ak, ak)
		pc.mul(ak, beta, ak)
		pc.decay(f, c, aq)
		pc.fma(ak, kq, aq)
		pc.store(aq, Mem{Base: r.o, Disp: pc.off})
		if t >= nreg {
			VMOVAPS(ak.AsZ(), slotQ(t))
		}
	}

	Commentf("Write pass: S' = %s + k̂_i·δ over the same slab.", f.of("S"))
	q := GP64()
	MOVQ(r.sIn, p)
	MOVQ(r.sOut, q)
	XORQ(i, i)
	write := label("write")
	Label(write)
	prefetchNext(r, 4*width(ps))
	bk2, y := a.vec(), a.vec()
	VBROADCASTSS(Mem{Base: r.kh, Index: i, Scale: 4}, bk2)
	for t, pc := range ps {
		pc.load(Mem{Base: p, Disp: pc.off}, y)
		pc.decay(f, c, y)
		if t < nreg {
			pc.fma(d[t], bk2, y)
		} else {
			VFMADD231PS(slotQ(t), bk2.AsZ(), y.AsZ())
		}
		pc.store(y, Mem{Base: q, Disp: pc.off})
	}
	ADDQ(r.stride, p)
	ADDQ(r.stride, q)
	INCQ(i)
	CMPQ(i, r.k)
	JB(LabelRef(write))
}

// --- gate ---

// gatePiece emits the gate for one piece at element offset 0 of the GP pointers:
// y = ((o·r)·w)·silu(z), stored to outF if non-nil and as bf16 to out if non-nil.
type gateRegs struct {
	o, z, w, out, outF GPVirtual
	r                  VecVirtual // broadcast RMS factor
}

func gatePiece(a isa, g gateRegs, pc piece) {
	xo, xz, xw := a.vec(), a.vec(), a.vec()
	pc.load(Mem{Base: g.o}, xo)
	pc.load(Mem{Base: g.z}, xz)
	pc.load(Mem{Base: g.w}, xw)
	v := func(r VecVirtual) Register {
		if pc.w == 1 {
			return r.AsX() // scalar pieces compute in all four lanes of an XMM: the others are 0
		}
		return pc.view(r)
	}
	// silu(z) = z / (1 + Exp32(−z))
	e := a.vec()
	if a.lanes == 16 {
		VPXORD(cSign, v(xz), v(e))
	} else {
		VXORPS(cSign, v(xz), v(e))
	}
	exp32(a, pc, e)
	VADDPS(cOne, v(e), v(e))
	VDIVPS(v(e), v(xz), v(xz)) // xz = z / e
	VMULPS(v(g.r), v(xo), v(xo))
	VMULPS(v(xw), v(xo), v(xo))
	VMULPS(v(xz), v(xo), v(xo))

	skipF, skipB := label("nof32"), label("nobf16")
	TESTQ(g.outF, g.outF)
	JZ(LabelRef(skipF))
	pc.store(xo, Mem{Base: g.outF})
	Label(skipF)
	TESTQ(g.out, g.out)
	JZ(LabelRef(skipB))
	bf16(a, pc, xo, Mem{Base: g.out})
	Label(skipB)
}

// exp32 replaces x by Exp32(x), operation for operation as gdn_generic.go computes it (no fused
// multiply-adds, so the result is the Go function's, bit for bit, on amd64). NaN stays NaN: the
// clamps take x as their second source operand, which VMINPS/VMAXPS return when either is NaN.
func exp32(a isa, pc piece, x VecVirtual) {
	v := func(r VecVirtual) Register {
		if pc.w == 1 {
			return r.AsX()
		}
		return pc.view(r)
	}
	c := a.vec()
	VBROADCASTSS(cHi, v(c))
	VMINPS(v(x), v(c), v(x)) // hi < x ? hi : x
	VBROADCASTSS(cLo, v(c))
	VMAXPS(v(x), v(c), v(x)) // lo > x ? lo : x
	n := a.vec()
	VMULPS(cLog2e, v(x), v(n))
	VADDPS(cHalf, v(n), v(n))
	if a.lanes == 16 {
		VRNDSCALEPS(U8(9), v(n), v(n)) // floor, no precision exception
	} else {
		VROUNDPS(U8(9), v(n), v(n))
	}
	t := a.vec()
	VMULPS(cC1, v(n), v(t))
	VSUBPS(v(t), v(x), v(x)) // r = x − n·c1
	VMULPS(cC2, v(n), v(t))
	VSUBPS(v(t), v(x), v(x)) // r = r − n·c2
	p := a.vec()
	VMULPS(cP[0], v(x), v(p)) // p0·r
	for _, ci := range cP[1:] {
		VADDPS(ci, v(p), v(p))
		VMULPS(v(x), v(p), v(p))
	}
	// Now p = (…)·r; finish p·r·r + r + 1 as Go evaluates it: ((p·r)·r + r) + 1.
	// The loop multiplied by r after the last constant, so p holds p·r: multiply once more.
	VMULPS(v(x), v(p), v(p))
	VADDPS(v(x), v(p), v(p))
	VADDPS(cOne, v(p), v(p))
	// 2^n: (n + 127) << 23.
	VCVTTPS2DQ(v(n), v(n))
	VPADDD(cBias, v(n), v(n))
	VPSLLD(U8(ec.Shift), v(n), v(n))
	VMULPS(v(n), v(p), v(x))
}

// bf16 stores BF16RNE(y) (see gdn_generic.go) for the piece's lanes at m; y is clobbered.
func bf16(a isa, pc piece, y VecVirtual, m Mem) {
	v := func(r VecVirtual) Register {
		if pc.w == 1 {
			return r.AsX()
		}
		return pc.view(r)
	}
	hi, t := a.vec(), a.vec()
	VPSRLD(U8(16), v(y), v(hi)) // u >> 16
	if a.lanes == 16 {
		VPANDD(cAbs, v(y), v(t))
		VPCMPGTD(cNaNMin, v(t), K2) // NaN: |u| > 0x7f800000
		VPANDD(cLSB, v(hi), v(t))
		VPADDD(cRound, v(y), v(y))
		VPADDD(v(t), v(y), v(y))
		VPSRLD(U8(16), v(y), v(y))
		VPORD(cQuiet, v(hi), K2, v(y)) // NaN lanes: (u >> 16) | 0x40
		if pc.mask != nil {
			VPMOVDW(v(y), pc.mask, m)
		} else {
			VPMOVDW(v(y), m)
		}
		return
	}
	nan := a.vec()
	VPAND(cAbs, v(y), v(t))
	VPCMPGTD(cNaNMin, v(t), v(nan))
	VPAND(cLSB, v(hi), v(t))
	VPADDD(cRound, v(y), v(y))
	VPADDD(v(t), v(y), v(y))
	VPSRLD(U8(16), v(y), v(y))
	VPOR(cQuiet, v(hi), v(hi))
	VPBLENDVB(v(nan), v(hi), v(y), v(y)) // nan ? (u>>16)|0x40 : rounded
	switch pc.w {
	case 8:
		h := XMM()
		VEXTRACTI128(U8(1), y.AsY(), h)
		VPACKUSDW(h, y.AsX(), h) // values ≤ 0xffff: no saturation
		VMOVDQU(h, m)
	case 4:
		VPACKUSDW(y.AsX(), y.AsX(), y.AsX())
		VMOVQ(y.AsX(), m)
	case 1:
		VPEXTRW(U8(0), y.AsX(), m)
	}
}

// sumSquares returns Σ p[i]² over n float32s in float64 (the whole register's lanes summed into
// the low lane of the returned XMM). p and n are clobbered.
func sumSquares(a isa, p, n GPVirtual) VecVirtual {
	acc := [4]VecVirtual{a.vec(), a.vec(), a.vec(), a.vec()}
	for _, r := range acc {
		zero(a, r)
	}
	per := a.lanes / 2 // doubles per register = floats per VCVTPS2PD
	loop4, loop1, tail, reduce := label("ss4"), label("ss1"), label("sstail"), label("ssreduce")
	Label(loop4)
	CMPQ(n, U32(4*per))
	JB(LabelRef(loop1))
	for t := range acc {
		x := a.vec()
		cvt(a, Mem{Base: p, Disp: 4 * per * t}, x, nil)
		VFMADD231PD(x, x, acc[t])
	}
	ADDQ(U32(16*per), p)
	SUBQ(U32(4*per), n)
	JMP(LabelRef(loop4))
	Label(loop1)
	CMPQ(n, U32(per))
	JB(LabelRef(tail))
	x := a.vec()
	cvt(a, Mem{Base: p}, x, nil)
	VFMADD231PD(x, x, acc[0])
	ADDQ(U32(4*per), p)
	SUBQ(U32(per), n)
	JMP(LabelRef(loop1))
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(reduce))
	if a.lanes == 16 {
		tailMask(n, K1)
		x := a.vec()
		cvt(a, Mem{Base: p}, x, K1)
		VFMADD231PD(x, x, acc[1])
	} else {
		// Scalar tail into its own XMM: a VEX scalar op on acc[1] would clear its upper half.
		st := XMM()
		VXORPS(st, st, st)
		stail := label("ssscalar")
		Label(stail)
		x := XMM()
		VCVTSS2SD(Mem{Base: p}, x, x)
		VFMADD231SD(x, x, st)
		ADDQ(U32(4), p)
		DECQ(n)
		JNZ(LabelRef(stail))
		VADDPD(st.AsY(), acc[1], acc[1])
	}
	Label(reduce)
	VADDPD(acc[1], acc[0], acc[0])
	VADDPD(acc[3], acc[2], acc[2])
	VADDPD(acc[2], acc[0], acc[0])
	return hsumPD(a, acc[0])
}

// cvt loads 8 (AVX-512) or 4 (AVX2) float32s from m as float64s into x, under k if non-nil.
func cvt(a isa, m Mem, x VecVirtual, k Register) {
	switch {
	case k != nil:
		VCVTPS2PD_Z(m, k, x.AsZ())
	case a.lanes == 16:
		VCVTPS2PD(m, x.AsZ())
	default:
		VCVTPS2PD(m, x.AsY())
	}
}

// hsumPD sums the float64 lanes of r into the low lane of the returned register.
func hsumPD(a isa, r VecVirtual) VecVirtual {
	if a.lanes == 16 {
		h := YMM()
		VEXTRACTF64X4(U8(1), r.AsZ(), h)
		VADDPD(h, r.AsY(), h)
		h2 := XMM()
		VEXTRACTF32X4(U8(1), h, h2)
		VADDPD(h2, h.AsX(), h2)
		h3 := XMM()
		VPERMILPD(U8(1), h2, h3)
		VADDSD(h3, h2, h2)
		return h2
	}
	h := XMM()
	VEXTRACTF128(U8(1), r.AsY(), h)
	VADDPD(h, r.AsX(), h)
	h3 := XMM()
	VPERMILPD(U8(1), h, h3)
	VADDSD(h3, h, h)
	return h
}

func gateRoutine(a isa) {
	TEXT("gate"+a.name, NOSPLIT, "func(o, z, w []float32, eps float32, out []uint16, outF []float32)")
	Doc(fmt.Sprintf("gate%s is impl.gate (gateGeneric) in %s; see gdn_amd64.go.", a.name, a.name))
	g := gateRegs{o: GP64(), z: GP64(), w: GP64(), out: GP64(), outF: GP64()}
	n := GP64()
	Load(Param("o").Len(), n)
	done := label("gate" + a.name + "_done")
	TESTQ(n, n)
	JZ(LabelRef(done))
	Load(Param("o").Base(), g.o)
	{
		Comment("Hint: the next head's z (the caller's z usually continues with it).")
		z := GP64()
		Load(Param("z").Base(), z)
		prefetchAfter(z, n)
	}

	Comment("r = 1/sqrt(Σo²/V + eps), Σo² in float64.")
	p, cnt := GP64(), GP64()
	MOVQ(g.o, p)
	MOVQ(n, cnt)
	ss := sumSquares(a, p, cnt)
	fv := XMM()
	VCVTSI2SDQ(n, fv, fv)
	VDIVSD(fv, ss.AsX(), ss.AsX())
	VCVTSS2SD(paramMem("eps"), fv, fv)
	VADDSD(fv, ss.AsX(), ss.AsX())
	VSQRTSD(ss.AsX(), ss.AsX(), ss.AsX())
	one := XMM()
	VMOVSD(cOneF64, one)
	VDIVSD(ss.AsX(), one, one)
	VCVTSD2SS(one, one, one)
	g.r = a.vec()
	VBROADCASTSS(one, g.r)

	Load(Param("z").Base(), g.z)
	Load(Param("w").Base(), g.w)
	Load(Param("out").Base(), g.out)
	Load(Param("outF").Base(), g.outF)

	Comment("y = o·r·w·silu(z).")
	loop, narrow := label("gloop"), label("gnarrow")
	Label(loop)
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(narrow))
	gatePiece(a, g, piece{w: a.lanes})
	gateAdvance(g, 4*a.lanes, 2*a.lanes)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(loop))
	Label(narrow)
	TESTQ(n, n)
	JZ(LabelRef(done))
	if a.lanes == 16 {
		tailMask(n, K1)
		gatePiece(a, g, piece{w: 16, mask: K1})
	} else {
		scalar := label("gscalar")
		CMPQ(n, U32(4))
		JB(LabelRef(scalar))
		gatePiece(a, g, piece{w: 4})
		gateAdvance(g, 16, 8)
		SUBQ(U32(4), n)
		JZ(LabelRef(done))
		Label(scalar)
		gatePiece(a, g, piece{w: 1})
		gateAdvance(g, 4, 2)
		DECQ(n)
		JNZ(LabelRef(scalar))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

// gateAdvance moves the gate pointers by f bytes (float32 slices) and h bytes (out); a nil out or
// outF stays nil.
func gateAdvance(g gateRegs, f, h int) {
	ADDQ(U32(f), g.o)
	ADDQ(U32(f), g.z)
	ADDQ(U32(f), g.w)
	for _, pr := range []struct {
		r GPVirtual
		n int
	}{{g.outF, f}, {g.out, h}} {
		skip := label("nil")
		TESTQ(pr.r, pr.r)
		JZ(LabelRef(skip))
		ADDQ(U32(pr.n), pr.r)
		Label(skip)
	}
}

// --- l2 ---

func l2Routine(a isa) {
	TEXT("l2"+a.name, NOSPLIT, "func(q, k []float32) (qq, kk, kq float64)")
	Doc(fmt.Sprintf("l2%s is impl.l2 (l2Generic) in %s; see gdn_amd64.go.", a.name, a.name))
	q, k, n := GP64(), GP64(), GP64()
	Load(Param("q").Base(), q)
	Load(Param("k").Base(), k)
	Load(Param("q").Len(), n)
	var qq, kk, kq [2]VecVirtual
	for u := 0; u < 2; u++ {
		qq[u], kk[u], kq[u] = a.vec(), a.vec(), a.vec()
		zero(a, qq[u])
		zero(a, kk[u])
		zero(a, kq[u])
	}
	per := a.lanes / 2
	step := func(u int, off int, mask Register) {
		xq, xk := a.vec(), a.vec()
		cvt(a, Mem{Base: q, Disp: off}, xq, mask)
		cvt(a, Mem{Base: k, Disp: off}, xk, mask)
		VFMADD231PD(xq, xq, qq[u])
		VFMADD231PD(xk, xk, kk[u])
		VFMADD231PD(xq, xk, kq[u])
	}
	loop2, loop1, tail, reduce := label("l2x2"), label("l2x1"), label("l2tail"), label("l2reduce")
	Label(loop2)
	CMPQ(n, U32(2*per))
	JB(LabelRef(loop1))
	step(0, 0, nil)
	step(1, 4*per, nil)
	ADDQ(U32(8*per), q)
	ADDQ(U32(8*per), k)
	SUBQ(U32(2*per), n)
	JMP(LabelRef(loop2))
	Label(loop1)
	CMPQ(n, U32(per))
	JB(LabelRef(tail))
	step(0, 0, nil)
	ADDQ(U32(4*per), q)
	ADDQ(U32(4*per), k)
	SUBQ(U32(per), n)
	Label(tail)
	TESTQ(n, n)
	JZ(LabelRef(reduce))
	if a.lanes == 16 {
		tailMask(n, K1)
		step(1, 0, K1)
	} else {
		// Scalar tail into its own XMMs: a VEX scalar op on qq[1]… would clear their upper halves.
		sq, sk, skq := XMM(), XMM(), XMM()
		for _, r := range []VecVirtual{sq, sk, skq} {
			VXORPS(r, r, r)
		}
		scalar := label("l2scalar")
		Label(scalar)
		xq, xk := XMM(), XMM()
		VCVTSS2SD(Mem{Base: q}, xq, xq)
		VCVTSS2SD(Mem{Base: k}, xk, xk)
		VFMADD231SD(xq, xq, sq)
		VFMADD231SD(xk, xk, sk)
		VFMADD231SD(xq, xk, skq)
		ADDQ(U32(4), q)
		ADDQ(U32(4), k)
		DECQ(n)
		JNZ(LabelRef(scalar))
		VADDPD(sq.AsY(), qq[1], qq[1])
		VADDPD(sk.AsY(), kk[1], kk[1])
		VADDPD(skq.AsY(), kq[1], kq[1])
	}
	Label(reduce)
	for i, acc := range [][2]VecVirtual{qq, kk, kq} {
		VADDPD(acc[1], acc[0], acc[0])
		ret, err := ReturnIndex(i).Resolve()
		if err != nil {
			panic(err)
		}
		VMOVSD(hsumPD(a, acc[0]), ret.Addr) // VEX/EVEX: MOVSD cannot name X16–X31
	}
	VZEROUPPER()
	RET()
}
