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

	"github.com/mmcloughlin/avo/attr"
	. "github.com/mmcloughlin/avo/build"
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
// current is the routine being emitted, labels its label counters: labels are scoped per routine
// (name_prefix_n), so adding or changing a routine never renumbers another's.
var (
	current string
	labels  map[string]int
)

// routine starts the routine name (avo's TEXT) and its label scope.
func routine(name string, a attr.Attribute, signature string) {
	TEXT(name, a, signature)
	current, labels = name, map[string]int{}
}

// label returns a fresh label of the current routine: "<routine>_<prefix>_<n>".
func label(prefix string) string {
	labels[prefix]++
	return fmt.Sprintf("%s_%s_%d", current, prefix, labels[prefix])
}
