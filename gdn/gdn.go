package gdn

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/gdnsimd/gdnsimd"
)

// BF16 is a bfloat16 value, as its bits.
type BF16 uint16

// Float32 returns b as a float32 (exact).
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even. NaN stays a NaN (quiet, same
// sign); values beyond the bf16 range round to ±Inf.
func BF16FromFloat32(f float32) BF16 { return BF16(gdnsimd.BF16RNE(f)) }

// The sentinels every error of this package wraps.
var (
	ErrConfig   = errors.New("gdn: invalid config")             // from New; from Step and Run: a Layer not made by New
	ErrKernel   = errors.New("gdn: kernel not available")       // from New: unknown or unsupported kernel
	ErrShape    = errors.New("gdn: slice length mismatch")      // from Step and Run: a length, stride, Start or storage type disagrees with the shapes
	ErrNoOutput = errors.New("gdn: no output requested")        // from Step and Run: Out and OutF32 both nil
	ErrOverlap  = errors.New("gdn: output overlaps other data") // from Step and Run: forbidden aliasing
	// ErrUnsupported, from Step and Run: a field or call the Layer does not take (Q, K, V with the
	// conv front, X or conv pools without it, Step with it or with bf16 states, a Group on rows
	// that cannot be grouped, StoreTo without ConvStoreTo or the reverse).
	ErrUnsupported = errors.New("gdn: not supported by this Layer")
)

// DefaultRMSEps is the gated RMSNorm epsilon used when Config.RMSEps is 0 (Qwen3-Next/3.5's
// rms_norm_eps; fla's and vLLM's module default is 1e-5).
const DefaultRMSEps = 1e-6

// MaxDim bounds K, V, KHeads and VHeads, so that no size computation can overflow.
const MaxDim = 1 << 16

// Config describes one GDN layer.
type Config struct {
	KHeads, VHeads int       // q/k heads and value heads per sequence; VHeads % KHeads == 0
	K, V           int       // key dim (state rows), value dim (state columns), each >= 1
	ALog           []float32 // [VHeads] A_log (Hugging Face's A_log): the decay rate is exp(A_log); or nil with SsmA
	SsmA           []float32 // [VHeads] GGUF's ssm_a = −exp(A_log), as llama.cpp's converters store it; exactly one of ALog and SsmA
	DtBias         []float32 // [VHeads], or [VHeads][K] with GatePerChannel (dt_bias, GGUF's ssm_dt.bias)
	NormWeight     []float32 // [V]
	RMSEps         float32   // gated RMSNorm epsilon; 0 means 1e-6
	Workers        int       // 0: as many as pay off, up to GOMAXPROCS; 1: only the caller's goroutine; n: at most n (and GOMAXPROCS)
	Kernel         string    // "": the best kernel of this CPU for the state format; else a kernel name (error if unavailable or lacking the format)

	StateLayout StateLayout // LayoutKV (default) or LayoutVK
	StateDType  DType       // storage of the state pools: DTypeF32 (default) or DTypeBF16
	GQA         GQAOrder    // GQAInterleaved (default) or GQATiled

	// The gate (see Gate): GateScalar (default) or GatePerChannel; with the per-channel gate,
	// GateLowerBound selects the bounded form lb·sigmoid(exp(A_log)·(a + dt_bias)) with lb =
	// LowerBound (finite, < 0; fla's default and the models' is −5). OutGate is the output gate's
	// activation: ActSiLU (default) or ActSigmoid.
	Gate       Gate
	GateForm   GateForm
	LowerBound float32
	OutGate    Activation

	// The conv front (SPEC Part D): with ConvWidth W ≥ 2 (the models use 4; at most 8) a Batch
	// carries the projection's pre-conv rows in Batch.X instead of Q, K and V, and conv pools
	// beside the state pools. ConvWeight is [C][W], C = 2·KHeads·K + VHeads·V channels in the
	// order q | k | v, head-major (Hugging Face's conv1d.weight [C][1][W] squeezed, GGUF's
	// ssm_conv1d); weight W−1 multiplies the current row. ConvBias is [C], or nil for none.
	ConvWidth  int
	ConvWeight []float32
	ConvBias   []float32
}

// Gate is how a Layer decays its state (the package documentation has the formulas).
type Gate uint8

const (
	GateScalar     Gate = iota // a decay per value head (Qwen3-Next, Qwen3.5): Batch.A of width VHeads, DtBias [VHeads]
	GatePerChannel             // a decay per key channel (KDA: Kimi-Linear and kin): Batch.A of width VHeads·K, DtBias [VHeads][K]
)

// GateForm is the per-channel gate's form (the kernels' own type).
type GateForm = gdnsimd.GateForm

const (
	GateSoftplus   = gdnsimd.GateSoftplus // −exp(A_log)·softplus(a + dt_bias) (the default)
	GateLowerBound = gdnsimd.GateBounded  // LowerBound·sigmoid(exp(A_log)·(a + dt_bias)) (fla's lower_bound)
)

// Activation is the output gate's activation in the gated RMSNorm.
type Activation uint8

const (
	ActSiLU    Activation = iota // silu(z) (Qwen3-Next, Qwen3.5; the default)
	ActSigmoid                   // sigmoid(z) (Kimi-Linear)
)

// Input is one decode step's inputs for B sequences (B = len(B)/VHeads).
type Input struct {
	Q, K  []float32 // [B][KHeads][K], raw (not normalised, not scaled)
	V, Z  []float32 // [B][VHeads][V]
	B, A  []float32 // [B][VHeads], raw beta and gate inputs (A: [B][VHeads][K] with GatePerChannel)
	State []float32 // [B][VHeads][K][V]
}

// Output receives one decode step's results.
type Output struct {
	State  []float32 // [B][VHeads][K][V]; may be the very same slice as Input.State (in place)
	Out    []BF16    // [B][VHeads][V], optional
	OutF32 []float32 // [B][VHeads][V], optional; at least one of Out and OutF32
}

// Layer runs the decode step of one layer. It is immutable after New and safe for concurrent use.
type Layer struct {
	c        Config    // own copies of the parameter slices; RMSEps and Kernel resolved
	convTaps []float32 // [W][C]: ConvWeight transposed (tap-major), for the kernels
	convBias []float32 // [C]: ConvBias, or zeros
	kernel   gdnsimd.Kernel
	format   gdnsimd.Format
	scratch  freeList[gdnsimd.Scratch]
}

// freeList keeps what returned calls used for later calls: a call allocates nothing once as many
// calls have run at once as ever will, and it holds no more than that many. Not a sync.Pool: the
// GC empties one every other cycle, and a call after that would grow its scratch again (a few
// hundred KiB for a prefill, and the heads' rates recomputed).
type freeList[T any] struct {
	mu   sync.Mutex
	free []*T
}

// get returns a kept value, or a new one from alloc.
func (f *freeList[T]) get(alloc func() *T) *T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.free); n > 0 {
		x := f.free[n-1]
		f.free[n-1] = nil
		f.free = f.free[:n-1]
		return x
	}
	return alloc()
}

// put keeps x for a later call.
func (f *freeList[T]) put(x *T) {
	f.mu.Lock()
	f.free = append(f.free, x)
	f.mu.Unlock()
}

// Kernels returns the names of the kernels this CPU can run, best first ("generic" last).
func Kernels() []string {
	var names []string
	for _, k := range gdnsimd.Kernels() {
		names = append(names, k.Name())
	}
	return names
}

// New checks c and returns a Layer holding its own copies of the parameters.
func New(c Config) (*Layer, error) {
	for _, check := range [...]func(*Config) error{checkDims, checkGate, checkParams, checkConv, checkRun} {
		if err := check(&c); err != nil {
			return nil, err
		}
	}
	if c.RMSEps == 0 {
		c.RMSEps = DefaultRMSEps
	}
	f := gdnsimd.Format{VK: c.StateLayout == LayoutVK, Storage: c.StateDType}
	k, err := kernelFor(&c, f)
	if err != nil {
		return nil, err
	}
	c.Kernel = k.Name()
	c.ALog, c.SsmA = clone(c.ALog), clone(c.SsmA)
	c.DtBias = append([]float32(nil), c.DtBias...)
	c.NormWeight = append([]float32(nil), c.NormWeight...)
	c.ConvWeight, c.ConvBias = clone(c.ConvWeight), clone(c.ConvBias)
	l := &Layer{c: c, kernel: k, format: f}
	if W := c.ConvWidth; W != 0 {
		C := len(c.ConvWeight) / W
		l.convTaps, l.convBias = make([]float32, W*C), make([]float32, C)
		for ch := range C {
			for j := range W {
				l.convTaps[j*C+ch] = c.ConvWeight[ch*W+j]
			}
		}
		copy(l.convBias, c.ConvBias)
	}
	return l, nil
}

// checkDims checks c's heads and dimensions.
func checkDims(c *Config) error {
	for _, d := range []struct {
		name string
		v    int
	}{{"KHeads", c.KHeads}, {"VHeads", c.VHeads}, {"K", c.K}, {"V", c.V}} {
		if d.v < 1 || d.v > MaxDim {
			return fmt.Errorf("%w: %s = %d, want 1..%d", ErrConfig, d.name, d.v, MaxDim)
		}
	}
	if c.VHeads%c.KHeads != 0 {
		return fmt.Errorf("%w: VHeads = %d is not a multiple of KHeads = %d", ErrConfig, c.VHeads, c.KHeads)
	}
	return nil
}

// checkGate checks c's gate: its kind, form, bound and output activation, and that exactly one
// of ALog and SsmA is set.
func checkGate(c *Config) error {
	if c.Gate > GatePerChannel || c.GateForm > GateLowerBound || c.OutGate > ActSigmoid {
		return fmt.Errorf("%w: Gate = %d, GateForm = %d, OutGate = %d: unknown value", ErrConfig, c.Gate, c.GateForm, c.OutGate)
	}
	switch lb := float64(c.LowerBound); {
	case c.GateForm == GateLowerBound && c.Gate != GatePerChannel:
		return fmt.Errorf("%w: GateForm = GateLowerBound needs Gate = GatePerChannel", ErrConfig)
	case c.GateForm == GateLowerBound && !(lb < 0 && !math.IsInf(lb, 0)):
		return fmt.Errorf("%w: LowerBound = %v, want a finite negative bound with GateLowerBound", ErrConfig, c.LowerBound)
	case c.GateForm != GateLowerBound && lb != 0:
		return fmt.Errorf("%w: LowerBound = %v is set, but GateForm is not GateLowerBound", ErrConfig, c.LowerBound)
	}
	if (c.ALog == nil) == (c.SsmA == nil) {
		return fmt.Errorf("%w: Config.ALog has length %d and Config.SsmA %d: want exactly one of them set (A_log, or GGUF's ssm_a = −exp(A_log))", ErrConfig, len(c.ALog), len(c.SsmA))
	}
	return nil
}

// checkParams checks the lengths and values of c's parameter vectors (ALog or SsmA, DtBias,
// NormWeight).
func checkParams(c *Config) error {
	gw := 1 // lanes of a head's gate
	if c.Gate == GatePerChannel {
		gw = c.K
	}
	for _, p := range []struct {
		name string
		s    []float32
		want int
	}{{"ALog", c.ALog, c.VHeads}, {"SsmA", c.SsmA, c.VHeads}, {"DtBias", c.DtBias, c.VHeads * gw}, {"NormWeight", c.NormWeight, c.V}} {
		if len(p.s) != p.want && (p.s != nil || p.name != "ALog" && p.name != "SsmA") {
			return fmt.Errorf("%w: Config.%s has length %d, want %d", ErrConfig, p.name, len(p.s), p.want)
		}
		for i, x := range p.s {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%w: Config.%s[%d] = %v, want a finite value", ErrConfig, p.name, i, x)
			}
			if p.name == "SsmA" && x > 0 {
				return fmt.Errorf("%w: Config.SsmA[%d] = %v, want ≤ 0 (ssm_a is −exp(A_log))", ErrConfig, i, x)
			}
		}
	}
	return nil
}

// checkRun checks RMSEps, Workers and the state's layout, storage and GQA order.
func checkRun(c *Config) error {
	eps := float64(c.RMSEps)
	if eps < 0 || math.IsNaN(eps) || math.IsInf(eps, 0) {
		return fmt.Errorf("%w: RMSEps = %v, want a finite value >= 0", ErrConfig, c.RMSEps)
	}
	if c.Workers < 0 {
		return fmt.Errorf("%w: Workers = %d, want >= 0", ErrConfig, c.Workers)
	}
	if c.StateLayout > LayoutVK || c.StateDType >= dtypes || c.GQA > GQATiled {
		return fmt.Errorf("%w: StateLayout = %d, StateDType = %d, GQA = %d: unknown value", ErrConfig, c.StateLayout, c.StateDType, c.GQA)
	}
	return nil
}

// kernelFor is the kernel c names, or with none the first of this CPU's (the fastest first) that
// implements the state format f.
func kernelFor(c *Config, f gdnsimd.Format) (gdnsimd.Kernel, error) {
	if c.Kernel == "" {
		for _, k := range gdnsimd.Kernels() {
			if k.Implements(f) {
				return k, nil
			}
		}
	}
	k, ok := gdnsimd.Lookup(c.Kernel)
	if !ok {
		return k, fmt.Errorf("%w: %q (this CPU has %v)", ErrKernel, c.Kernel, Kernels())
	}
	if !k.Implements(f) {
		return k, fmt.Errorf("%w: %q does not implement the state format %v (StateLayout %v, StateDType %v)", ErrKernel, c.Kernel, f, c.StateLayout, c.StateDType)
	}
	return k, nil
}

// Kernel returns the name of the kernel in use.
func (l *Layer) Kernel() string { return l.c.Kernel }

// Config returns the layer's configuration with defaults resolved (RMSEps, Kernel); the slices
// are copies.
func (l *Layer) Config() Config {
	c := l.c
	c.ALog, c.SsmA = clone(c.ALog), clone(c.SsmA)
	c.DtBias = append([]float32(nil), c.DtBias...)
	c.NormWeight = append([]float32(nil), c.NormWeight...)
	c.ConvWeight, c.ConvBias = clone(c.ConvWeight), clone(c.ConvBias)
	return c
}

// MaxConvWidth is the widest conv front (Config.ConvWidth).
const MaxConvWidth = 8

// checkConv checks the conv front's fields of c.
func checkConv(c *Config) error {
	W := c.ConvWidth
	if W == 0 {
		if c.ConvWeight != nil || c.ConvBias != nil {
			return fmt.Errorf("%w: Config.ConvWeight or ConvBias is set, but ConvWidth is 0 (no conv front)", ErrConfig)
		}
		return nil
	}
	if W < 2 || W > MaxConvWidth {
		return fmt.Errorf("%w: ConvWidth = %d, want 0 (no conv front) or 2..%d", ErrConfig, W, MaxConvWidth)
	}
	C := 2*c.KHeads*c.K + c.VHeads*c.V
	for _, p := range []struct {
		name string
		s    []float32
		want int
	}{{"ConvWeight", c.ConvWeight, C * W}, {"ConvBias", c.ConvBias, C}} {
		if len(p.s) != p.want && (p.s != nil || p.name != "ConvBias") {
			return fmt.Errorf("%w: Config.%s has length %d, want %d (C = 2·KHeads·K + VHeads·V = %d channels, W = %d)", ErrConfig, p.name, len(p.s), p.want, C, W)
		}
		for i, x := range p.s {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%w: Config.%s[%d] = %v, want a finite value", ErrConfig, p.name, i, x)
			}
		}
	}
	return nil
}

// Step advances the state of every (sequence, value head) by one token. B = len(in.B)/VHeads and
// every length must agree with it; B = 0 (all slices empty) is a no-op. On error nothing is written.
// Step is Run with one token per sequence, sequence b reading slot b of in.State and storing to
// slot b of out.State, with Run's checks (and its rules on overlaps: Output.State is Input.State's
// very slice or disjoint from it, and overlaps no other input); it needs a Layer with float32
// state.
func (l *Layer) Step(in Input, out Output) error {
	if err := l.usable(); err != nil {
		return err
	}
	if l.c.StateDType != DTypeF32 {
		return fmt.Errorf("%w: Step takes float32 states, the Layer stores %v: use Run", ErrUnsupported, l.c.StateDType)
	}
	if l.c.ConvWidth != 0 {
		return fmt.Errorf("%w: Step has no conv states, the Layer has a conv front (ConvWidth %d): use Run", ErrUnsupported, l.c.ConvWidth)
	}
	B, err := l.stepShape(in, out)
	if err != nil || B == 0 {
		return err
	}
	v := validators.get(newValidator)
	kb, err := v.check(l, v.stepBatch(in, out, B))
	v.step, v.out = Batch{}, Pool{} // keep no caller's slices
	validators.put(v)
	if err != nil {
		return stepError{err}
	}
	kb.Start, kb.Read = nil, nil // the same call in the dense form (v's Start and Read go back with v)
	l.run(&kb)
	return nil
}

// gateWidth is the width of a token's raw gate row: VHeads, VHeads·K with the per-channel gate.
func (l *Layer) gateWidth() int {
	if l.c.Gate == GatePerChannel {
		return l.c.VHeads * l.c.K
	}
	return l.c.VHeads
}

// setBatch sets the fields of a kernel batch that come from the Layer: the format, the GQA order
// and the gate.
func (l *Layer) setBatch(b *gdnsimd.Batch) {
	c := &l.c
	b.Format, b.GQATiled = l.format, c.GQA == GQATiled
	b.ALog, b.SsmA, b.DtBias = c.ALog, c.SsmA, c.DtBias
	b.PerChannel, b.Sigmoid = c.Gate == GatePerChannel, c.OutGate == ActSigmoid
	b.ConvW, b.ConvTaps, b.ConvBias = c.ConvWidth, l.convTaps, l.convBias
	b.GateForm, b.LowerBound = c.GateForm, c.LowerBound // (New checked: LowerBound is 0 but with GateLowerBound)
}

// clone is a copy of x (nil for nil).
func clone(x []float32) []float32 {
	if x == nil {
		return nil
	}
	return append([]float32{}, x...)
}

// usable refuses a Layer that did not come from New.
func (l *Layer) usable() error {
	if l == nil || l.c.VHeads == 0 {
		return fmt.Errorf("%w: a Layer not made by New (the zero value or nil)", ErrConfig)
	}
	return nil
}

// run runs a validated batch on the caller's goroutine and, when it pays, on the pool's.
func (l *Layer) run(b *gdnsimd.Batch) {
	items := b.Items()
	if items == 0 {
		return
	}
	if w := l.workers(b); w > 1 {
		l.parallel(b, w)
	} else {
		l.runRange(b, 0, items)
	}
	b.StoreConv() // after every item: they read the conv states it overwrites
}

func newScratch() *gdnsimd.Scratch { return new(gdnsimd.Scratch) }

func (l *Layer) runRange(b *gdnsimd.Batch, lo, hi int) {
	sp := l.scratch.get(newScratch)
	l.kernel.RunBatch(b, lo, hi, sp)
	l.scratch.put(sp)
}

// minWorkBytes is the least state (bytes read) a worker should get: below it, handing a range to
// the pool and waiting for it costs more than it saves.
const minWorkBytes = 128 << 10

// workers is the number of goroutines (the caller's included) a call uses: Config.Workers
// (GOMAXPROCS when 0), but no more than GOMAXPROCS, the items and than pays off (minWorkBytes of
// state traffic per worker, a head-token counting its K·V·4 bytes).
func (l *Layer) workers(b *gdnsimd.Batch) int {
	w := min(l.c.Workers, runtime.GOMAXPROCS(0)) // more workers than Ps cannot run at once
	if w == 0 {
		w = runtime.GOMAXPROCS(0)
	}
	if w <= 1 {
		return 1
	}
	headBytes := l.c.K * l.c.V * 4
	cost := b.Cost(0, b.Items())
	payoff := max(1, min(cost, math.MaxInt/headBytes)*headBytes/minWorkBytes)
	return max(1, min(w, b.Items(), payoff))
}
