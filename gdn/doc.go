// Package gdn runs the fused gated delta-rule (GDN) decode step of linear-attention LLMs
// (Qwen3-Next, Qwen3.5 and their kin) on CPUs: one call per layer and token advances the recurrent
// state of every (sequence, value head) by one token and writes the gated-RMSNorm output.
//
// # Shapes
//
// B sequences, KHeads q/k heads and VHeads value heads per sequence (VHeads a multiple of
// KHeads), key dim K (state rows) and value dim V (state columns). Flattened heads are
// bh = b·VHeads + h: the value head cycles fastest. Every tensor is row-major float32:
//
//	Q, K       [B][KHeads][K]     raw (not l2-normalised, not scaled)
//	V, Z       [B][VHeads][V]     Z is the gate input of the gated RMSNorm
//	B, A       [B][VHeads]        raw beta (pre-sigmoid) and raw gate input (pre-softplus)
//	ALog, DtBias [VHeads], NormWeight [V]   (Config)
//	State      [B][VHeads][K][V]  element (bh, i, j) at (bh·K + i)·V + j
//	Out        [B][VHeads][V]     bf16 (and/or OutF32)
//
// GQA by index: value head h reads q/k head h / (VHeads/KHeads), so consecutive value heads share a
// key head (repeat_interleave in the Hugging Face, fla and vLLM code). KHeads == VHeads is the
// "GQA-expanded" layout.
//
// # Semantics, per flattened head
//
//	beta = sigmoid(b)
//	g    = −exp(ALog[h])·softplus(a + DtBias[h])       softplus(x) = x if x > 20 else log1p(exp(x))
//	eg   = exp(g)                                       (0 < eg ≤ 1)
//	q̂    = q·rsqrt(Σq² + 1e-6)·(1/√K)                   k̂ = k·rsqrt(Σk² + 1e-6)
//	S1   = eg·S                                         decay first
//	δ    = beta·(v − S1ᵀk̂)
//	S'   = S1 + k̂ ⊗ δ                                   S'[i][j] = S1[i][j] + k̂_i·δ_j
//	o    = S'ᵀq̂                                         read after the update
//	y_j  = o_j·rsqrt(Σo²/V + RMSEps)·NormWeight_j·silu(z_j)
//	Out  = bf16(y), rounded to nearest even;  OutF32 = y
//
// The kernels read the state once and write it once, using kv = eg·Sᵀk̂, o = eg·Sᵀq̂ + (k̂·q̂)·δ.
// The scalars (l2 factors, k̂·q̂, beta, eg, the RMS factor) are computed in float64 and rounded once;
// the state and o are float32 (fused multiply-adds where the CPU has them). Nothing but Out is
// rounded to bf16.
//
// # Accuracy
//
// Against a float64 evaluation of the formulas, every kernel keeps State and OutF32 within 1e-5 of
// the head's largest magnitude, and every Out element within max(1 bf16 ulp of y, 1e-5·the head's
// max |y|) (the reference vectors, random realistic heads and the fuzzers check this). No float32
// evaluation can promise that on an ill-conditioned head — one whose update or output cancels
// almost completely (beta ≈ 1 with k̂ aligned to the state, o_j far smaller than its terms under a
// large RMSNorm gain) or underflows below the float32 normal range — and there the error is
// bounded by the float32 forward-error bound of the same formulas instead (fuzz/check_test.go
// computes it). A NaN or Inf in one head's inputs can spoil that head's outputs only. The result bits
// of a kernel do not depend on Config.Workers.
//
// # Workers
//
// A Step splits the flattened heads into contiguous ranges, one per worker (Config.Workers, at most
// GOMAXPROCS; 0 means as many as pay off, each with at least 128 KiB of state), runs the first
// range on the caller's goroutine and hands the others to a package-level pool. The pool's
// goroutines are started on first use, are never more than the most extra workers a Step has
// used, and live as long as the process: after a task each polls for the next one for 50 µs (so
// back-to-back Steps do not pay the wake-up of a parked goroutine), then parks. Ranges no pool
// goroutine has picked up by the time the caller's own range is done are run by the caller. Small
// batches run inline, and with Workers 1 no goroutine is ever started.
//
// # Errors and safety
//
// Every error wraps one of the exported sentinels (ErrConfig, ErrKernel, ErrShape, ErrNoOutput,
// ErrOverlap; use errors.Is) and names the offending field, its length and the expected length.
// When Step returns an error it has written nothing. Output.State may be the very same slice as
// Input.State (in place); any other overlap between an output and an input or another output is
// an error. A Layer is immutable after New and safe for concurrent Steps on different data.
//
// Concurrent Steps that write the same state (or outputs), or write what another reads, are the
// caller's bug. The race detector does not see inside the assembly kernels, so go test -race
// reports such a race only with the generic kernel: run it with -tags purego (or Config.Kernel
// "generic") as well.
//
// # Kernels
//
// The root package github.com/gdnsimd/gdnsimd holds the kernels; Kernels lists the ones this CPU
// can run, best first ("generic" is always there, also under -tags purego). Config.Kernel picks one
// per Layer; there is no global switch.
package gdn
