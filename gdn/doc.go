// Package gdn runs the fused gated delta-rule (GDN) step of linear-attention LLMs (Qwen3-Next,
// Qwen3.5 and their kin) on CPUs: one call per layer advances the recurrent state of every
// (sequence, value head) through its tokens and writes the gated-RMSNorm output. Layer.Run is the
// serving call (many sequences, many tokens each, states in a caller-owned pool of slots);
// Layer.Step is its special case of one token per sequence over a dense batch of states.
//
// # Shapes
//
// B sequences, KHeads q/k heads and VHeads value heads per sequence (VHeads a multiple of
// KHeads), key dim K (state rows) and value dim V (state columns). Flattened heads are
// bh = b·VHeads + h: the value head cycles fastest. Every tensor is row-major; Step's are float32
// (Run's rows and pools may also be bf16):
//
//	Q, K       [B][KHeads][K]     after the conv1d and SiLU; not l2-normalised, not scaled
//	V          [B][VHeads][V]     after the conv1d and SiLU
//	Z          [B][VHeads][V]     the gate input of the gated RMSNorm, from the projection
//	B, A       [B][VHeads]        raw beta (pre-sigmoid) and the raw gate input a (the argument
//	                              of the gate's softplus or sigmoid; [B][VHeads][K] with the
//	                              per-channel gate: channel i of value head h at h·K + i)
//	ALog, DtBias [VHeads], NormWeight [V]   (Config)
//	State      [B][VHeads][K][V]  element (bh, i, j) at (bh·K + i)·V + j
//	Out        [B][VHeads][V]     bf16 (and/or OutF32)
//
// Without the conv front (below) q, k and v are the rows after the depthwise causal conv1d over
// the projected [q|k|v] channels and its SiLU, which the caller computes (and whose conv state the
// caller keeps); with it, the Layer takes the projection's rows and runs the conv itself. z, b and
// a come straight from the input projections.
// ALog, DtBias and NormWeight are the layer's A_log, dt_bias and norm.weight as stored in the
// checkpoint: NormWeight multiplies y as it is (no 1 + w).
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
//	S1   = S + em1·S  if em1 ≥ −0.5, else eg·S          decay first; em1 = expm1(g)
//	δ    = beta·(v − S1ᵀk̂)
//	S'   = S1 + k̂ ⊗ δ                                   S'[i][j] = S1[i][j] + k̂_i·δ_j
//	o    = S'ᵀq̂                                         read after the update
//	y_j  = o_j·rsqrt(Σo²/V + RMSEps)·NormWeight_j·silu(z_j)
//	Out  = bf16(y), rounded to nearest even;  OutF32 = y
//
// The decay's two forms keep a decay near 1 from drifting (eg rounded to float32 is off by up to
// 2⁻²⁵, the same sign every token) and a strong decay from losing its digits (1 + em1 for eg ≪ 1).
// The kernels read the state once and write it once per token, using kv = decay(Sᵀk̂),
// o = decay(Sᵀq̂) + (k̂·q̂)·δ.
// The scalars (l2 factors, k̂·q̂, beta, eg, the RMS factor) are computed in float64 and rounded once;
// the state and o are float32 (fused multiply-adds where the CPU has them). Nothing but Out is
// rounded to bf16.
//
// # The per-channel gate (Kimi Delta Attention)
//
// Config.Gate = GatePerChannel runs the KDA layers of Kimi-Linear and its kin: the same recurrence
// with a decay per key channel i (row i of [K][V]) instead of per head. Batch.A then holds a raw
// gate per (value head, channel), rows of width VHeads·K, and DtBias is [VHeads][K]:
//
//	g_i  = −exp(ALog[h])·softplus(a_i + DtBias[h][i])          GateSoftplus (the default)
//	g_i  = LowerBound·sigmoid(exp(ALog[h])·(a_i + DtBias[h][i])) GateLowerBound (the models' −5)
//	S1[i][j] = S[i][j] + em1_i·S[i][j] if em1_i ≥ −0.5, else eg_i·S[i][j]
//
// and the rest as above; OutGate = ActSigmoid gates y with sigmoid(z) instead of silu(z). Each
// channel's em1, eg are computed in float64 and rounded once, as the head's are. The kernels fold
// the decay into the dot vectors (kv = Σ_i (k̂_i·d_i)·S[i][j], o likewise with q̂), so the state is
// still read and written once per token. A per-channel gate whose channels are all equal gives the
// scalar gate's results (within the bounds under Accuracy).
//
// Kimi-Linear's config.json: linear_attn_config's num_heads → KHeads = VHeads, head_dim → K = V,
// short_conv_kernel_size → ConvWidth; rms_norm_eps → RMSEps (1e-5 there: set it, the default is
// Qwen's 1e-6). Its released modelling code computes the gate with fla's fused_kda_gate (A_log,
// dt_bias): GateSoftplus. GateLowerBound is fla's KDA gate with its lower_bound argument set (a
// model trained so, e.g. with lower_bound −5): LowerBound is that argument.
//
// GGUF files store the rate as ssm_a = −exp(A_log) (llama.cpp's converters): pass it as
// Config.SsmA in place of ALog, as it is; either gate takes either.
//
// # The conv front
//
// Config.ConvWidth = W (4 in every model of the family; 2 to 8) adds the depthwise causal conv1d
// and its SiLU in front of the recurrence, so that a call takes the projections as they come out
// of the matmul. A Batch then carries the pre-conv rows in X (width C = 2·KHeads·K + VHeads·V,
// channels q | k | v, head-major) instead of Q, K and V, and a conv pool beside each state pool:
// ConvState (and ConvStoreTo, exactly when StoreTo is set), slots of (W−1)·C elements holding a
// sequence's last W−1 pre-conv rows, the oldest first, f32 or bf16: a slot is [W−1][C], row r
// (r = 0 the oldest) channel c at element r·C + c. Hugging Face's cache ([C][W], one row more than
// the conv reads) and vLLM's ([C][W−1]) keep it channel-major: transpose a state moved between
// them and a conv pool. Per token,
//
//	u_t[c] = silu(Σ_j ConvWeight[c][j]·x_{t−W+1+j}[c] + ConvBias[c])   rows before the sequence's first token: its conv state
//
// and u_t split q | k | v is the token's q, k and v. The conv pools use the state pools' slots:
// Read[n] gives both states (Zero: both zero), every store (Store's or the implied one) writes
// both — the conv state after token t is rows t−W+2 … t —, padding touches neither, and a
// sequence of fewer than W−1 tokens keeps rows of its old conv state. So speculative rollback and
// forks work for both states with no extra step. The conv state holds inputs: it is exact in f32,
// and in bf16 when X is bf16. u is float32 (each product rounded, summed from the oldest tap),
// computed straight into the per-head scratch the recurrence reads. Both pools take the same slot
// numbers, so a conv pool with fewer slots than its state pool bounds the slots a Batch may use.
// Step has no conv states: a Layer with the conv front runs through Run.
//
// # From the checkpoints
//
// Hugging Face Qwen3-Next (linear_attn.*): A_log → ALog, dt_bias → DtBias, norm.weight →
// NormWeight, conv1d.weight [C][1][W] → ConvWeight (no bias), GQAInterleaved. Its in_proj_qkvz
// and in_proj_ba lay their outputs out per k-head ([q, k, v, z] and [b, a] groups, undone by
// fix_query_key_value_ordering): permute the projection's weight rows once at load time so that
// a token's row is q | k | v | z (X the first C elements, Z the rest, one buffer and stride) and
// b | a. Qwen3-Next GGUF files (llama.cpp) keep the per-k-head groups: ssm_in and ssm_ba are the
// two projections to permute so; ssm_conv1d is the conv weight [C][W], ssm_a = −exp(A_log) →
// SsmA, ssm_dt.bias → DtBias, ssm_norm → NormWeight; GQAInterleaved. Qwen3.5 projects q | k | v, z, b and a
// separately (no permutation); its GGUF files reorder the value heads (GQATiled). Kimi-Linear
// (Gate GatePerChannel, OutGate ActSigmoid, GateForm as its config says): q_proj, k_proj and
// v_proj concatenated give X, and q_conv1d, k_conv1d, v_conv1d's weights concatenated in that order
// ConvWeight; f_b_proj(f_a_proj(x)) gives A, b_proj B, g_b_proj(g_a_proj(x)) Z; A_log, dt_bias
// [VHeads·K] and o_norm.weight as above.
//
// # The serving call: Run
//
// A Batch holds N = len(Read) sequences with T = Start[N] tokens packed token-major: sequence n
// owns tokens Start[n] ≤ t < Start[n+1] (cu_seqlens; a sequence may have 0 tokens). Each input is a
// Rows: token t's row starts at element t·Stride (0: dense), f32 or bf16 (widened exactly), so
// packed projections are read in place (Rows of several fields may share one buffer):
//
//	Q, K   width KHeads·K        V, Z   width VHeads·V        B, A   width VHeads
//	Out, OutF32   [T][VHeads][V], at least one of them
//
// States live in a caller-owned Pool of slots (slot s at element s·SlotStride, head h of it
// h·K·V further, in the Layer's StateLayout and StateDType). For every non-padding sequence and
// value head:
//
//	S ← 0 if Read[n] == Zero, else the pool's slot Read[n] (bf16 widened exactly)
//	for each token t of the sequence: the step above; Out[t], OutF32[t] ← y
//	    if the token stores, slot Store[t] (of StoreTo if set, else of State) ← S
//
// With Store nil, a sequence's state after its last token goes back to its Read slot (of StoreTo
// if set). S stays float32 for the whole call, also with a bf16 pool: it is rounded to bf16 only
// where it is stored. A padding sequence (Read[n] == Pad) writes +0 to its outputs and touches no
// pool. This covers continuous-batching decode (one token per sequence, in place), prefill (many
// tokens from Zero or a cached prefix), speculative verification (the state after every draft
// token in a slot of its own; the next call reads the slot of the last accepted token: rollback
// without a copy), forks (several sequences read one slot nobody writes) and scoring without a
// state update (every token NoStore). The runnable examples of Run show each.
//
// One Batch has one State pool: every sequence reads from it. To continue from a state stored
// out of place (a snapshot pool written through StoreTo), pass the snapshot pool as State, the
// main pool as StoreTo, and an explicit Store naming the sequence's main slot at its last token.
// With Store nil the implied store would write the Read slot's index, a snapshot slot's number,
// in the main pool: another sequence's slot. Sequences whose states are in different pools go in
// different calls.
//
// A new prompt starts from Zero: Read[n] = Zero, and a Store of length T that names the slot the
// state goes to after the sequence's last token and holds NoStore at its other tokens (Zero with
// Store nil is refused: the state would be lost; a 0-token Zero sequence with Store nil is
// accepted and does nothing). Equally, clear the slot and read it with Store
// nil. The next call (decode) reads that slot, with Store nil.
//
// Run checks the whole Batch before it writes anything: Start starts at 0 and never decreases;
// row buffers hold (T−1)·stride + width elements; slots are in range of their pool; no slot is
// written twice; a slot written by one sequence is read by no other (unless StoreTo is a pool of
// its own); padding sequences store nothing; a Zero sequence of one or more tokens with Store nil
// (whose state would be lost) is refused; outputs overlap nothing, pools overlap no input, and StoreTo is State's very
// slice or disjoint from it. A kernel's results are bit-identical for any Workers, any batching
// and order of the sequences, and between one call of T tokens and T calls of one token (f32
// pools). Different kernels differ in FMA and summation order: their results agree within the
// bounds under Accuracy, not bit for bit.
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
// computes it). The result bits of a kernel do not depend on Config.Workers.
//
// Non-finite inputs are not refused and not reported (yet). A NaN in a token's k, v, b or a
// poisons the state of the value heads that read it for every later token, and whatever is
// stored from it, until the sequence starts again from Zero: k reaches every value head sharing
// its q/k head (GQA), v, b and a their own value head. A NaN in q spoils that token's output for
// those heads; with the conv front, a NaN in a pre-conv row reaches the next W tokens' q, k or v
// through the conv window (and stays in the conv state for W−1 tokens). Other heads and sequences
// are not affected.
//
// # Workers
//
// A call's work items are its (sequence, value head) pairs — a prefill of one sequence splits its
// heads. They are cut into about two ranges per worker of equal cost (head-tokens), and the
// workers (Config.Workers, at most GOMAXPROCS; 0 means as many as pay off, each with at least
// 128 KiB of state traffic) take ranges until none is left: the caller's goroutine and goroutines
// of a package-level pool. A worker the OS deschedules holds up one small range, not the call.
// The pool's goroutines are started on first use, are never more than the most extra workers a
// call has used, and live as long as the process: after a task each polls for the next one for
// 50 µs (so back-to-back calls do not pay the wake-up of a parked goroutine), then parks. Small
// calls run inline, and with Workers 1 no goroutine is ever started.
//
// # Errors and safety
//
// Every error wraps one of the exported sentinels (ErrConfig, ErrKernel, ErrShape, ErrNoOutput,
// ErrOverlap, ErrSlot, ErrUnsupported; use errors.Is) and names the offending field, its index or length and the
// expected value. When Run or Step returns an error it has written nothing. Output.State may be
// the very same slice as Input.State (in place); any other overlap between an output and an input
// or another output is an error, and so is a state (Input.State, a pool) overlapping an input:
// Step's call is checked as the Batch it is, by Run's rules. A Layer is immutable after New and safe for concurrent calls
// (Run, Step) on different data.
//
// A call allocates nothing once the Layer has run as many calls at once as it ever will (with
// Workers > 1, each of a call's goroutines counts): it keeps their scratch space (a few hundred
// KiB for a prefill at Qwen3-Next's shape, grown to the largest call) for its life, through
// garbage collections.
//
// Concurrent calls that write the same state (or outputs), or write what another reads, are the
// caller's bug. The race detector does not see inside the assembly kernels, so go test -race
// reports such a race only with the generic kernel: run it with -tags purego (or Config.Kernel
// "generic") as well.
//
// # Kernels
//
// The root package github.com/gdnsimd/gdnsimd holds the kernels; Kernels lists the ones this CPU
// can run, best first ("generic" is always there, also under -tags purego). A kernel implements
// some state formats (StateLayout × StateDType); Config.Kernel "" picks the best kernel of this
// CPU that implements the Layer's format, a named kernel that lacks it is ErrKernel, and
// Layer.Kernel tells which runs. Every kernel implements every format (the assembly ones with
// routines over T tokens per layout and storage type). There is no global switch.
//
// # Which state format
//
// LayoutKV (the default) with DTypeF32 suits most engines. In the repository's measurements
// (doc/performance.md; a Qwen3-Next layer on a Zen 5 at commit c86528a) LayoutKV prefills faster:
// avx512 25.6 against 28.6 µs per token at T = 512, avx2 40.7 against 53.8. Decode from memory
// (B = 64) is close between the f32 layouts and goes either way by CPU: [K][V] 5.86 and [V][K]
// 5.60 ms a call on that Zen 5, 1.11 and 1.20 times copy() on a Zen 4. DTypeBF16 halves the pool
// and, with LayoutVK, was the fastest decode on AVX-512 (4.89 ms); without AVX-512 bf16 costs
// time (avx2: 8.26 ms [V][K] and 10.9 [K][V] against 5.31 and 6.25 for f32). LayoutVK is also the
// order of vLLM's GPU kernels, SGLang, FlashInfer and ggml.
package gdn
