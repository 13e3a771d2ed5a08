package gdnsimd

import (
	"fmt"
	"math"
)

const (
	layoutKV stateLayout = iota // [K][V]: element (i, j) at i·V + j (the seed's)
	layoutVK                    // [V][K]: element (i, j) at j·K + i (vLLM GPU, SGLang, FlashInfer, ggml)
)

// The slot values of Batch.Read and Batch.Store that are not slots (package gdn's Pad, Zero and
// NoStore).
const (
	readPad  int32 = -1 // Read: a padding sequence (outputs +0, no state read or written)
	readZero int32 = -2 // Read: the sequence starts from the zero state
	noStore  int32 = -1 // Store: this token's state is not kept
)

// Batch is one serving call as the kernels see it: N sequences, sequence n owning the packed
// tokens Start[n] ≤ t < Start[n+1]. Package gdn validates a Batch (the slot rules of its
// documentation) before running it; RunBatch itself only refuses, by panicking before any write,
// an item that would address memory outside the slices.
type Batch struct {
	KHeads, VHeads, K, V int
	RMSEps               float32
	ALog                 []float32 // [VHeads]: the decay rate is exp(ALog[h]) …
	SsmA                 []float32 // … or, when not nil ([VHeads]), −SsmA[h] (GGUF's ssm_a = −exp(A_log))
	DtBias               []float32 // [VHeads], or [VHeads][K] with PerChannel
	NormWeight           []float32 // [V]
	Format               Format    // the layout and storage of State and StoreTo
	GQATiled             bool      // v-head h reads k-head h % KHeads (else h / (VHeads/KHeads))

	// The gate (SPEC Part C): PerChannel is a decay per key channel, from Gate rows of width
	// VHeads·K and DtBias [VHeads][K] (else the head's scalar gate of Part A); GateForm is its
	// form, LowerBound the bounded form's lb (finite, < 0; 0 with the softplus form); Sigmoid
	// makes the output gate sigmoid(z) instead of silu(z).
	PerChannel bool
	GateForm   GateForm
	LowerBound float32
	Sigmoid    bool

	N     int     // sequences
	Start []int32 // [N+1] token offsets; nil: one token per sequence (token n is sequence n's)
	Read  []int32 // [N] slot, −1 (padding) or −2 (the zero state); nil: sequence n reads slot n
	Store []int32 // [T] slot or −1 (not kept); nil: a sequence's state after its last token goes to its Read slot

	Q, Key     Rows // width KHeads·K
	Val, Z     Rows // width VHeads·V
	Beta, Gate Rows // width VHeads (Gate: VHeads·K with PerChannel)

	State   Pool // read from, and written unless StoreTo has data
	StoreTo Pool // the pool Store (or the implied stores) index, if it has data

	// The conv front (SPEC Part D), when ConvW ≥ 2: the rows X of width C = 2·KHeads·K +
	// VHeads·V (channels q | k | v, head-major) replace Q, Key and Val, which are not read; a
	// token's q, k and v are the conv's outputs u over its W = ConvW rows (the sequence's first
	// W−1 tokens reach back into the conv state of its Read slot, zeros for Zero). RunBatch reads
	// the conv states; StoreConv writes them (each of Store's stores, or the implied ones, also
	// stores the conv state after its token: the last W−1 rows). A conv pool's slot s holds
	// (W−1)·C elements from s·SlotStride, the oldest row first; either storage type, each pool
	// its own (bf16 stores round to nearest even, exact for bf16 inputs).
	ConvW                  int
	ConvTaps               []float32 // [W][C]: ConvTaps[j·C + c] is tap j's weight of channel c (tap W−1: the current row)
	ConvBias               []float32 // [C] (zeros: no bias)
	X                      Rows
	ConvState, ConvStoreTo Pool // ConvStoreTo has data exactly when StoreTo has

	Out    []uint16  // [T][VHeads][V] bf16 bits, or nil
	OutF32 []float32 // [T][VHeads][V], or nil
}

// Items is the number of work items of b: one per (sequence, value head), item w = n·VHeads + h.
func (b *Batch) Items() int { return b.N * b.VHeads }

// tokens returns sequence n's token range.
func (b *Batch) tokens(n int) (t0, t1 int) {
	if b.Start == nil {
		return n, n + 1
	}
	return int(b.Start[n]), int(b.Start[n+1])
}

// read returns sequence n's read slot (or Pad or Zero).
func (b *Batch) read(n int) int32 {
	if b.Read == nil {
		return int32(n)
	}
	return b.Read[n]
}

// Cost is the work of items [lo, hi) in head-tokens (what a worker range should balance).
func (b *Batch) Cost(lo, hi int) int {
	c := 0
	for w := lo; w < hi; {
		n := w / b.VHeads
		end := min(hi, (n+1)*b.VHeads)
		if b.read(n) != readPad {
			t0, t1 := b.tokens(n)
			c += (end - w) * (t1 - t0)
		}
		w = end
	}
	return c
}

// check panics, as RunBatch documents, unless b's lengths are consistent (O(1)).
func (b *Batch) check() {
	if b.N < 0 || b.K > math.MaxInt/b.V || b.VHeads > math.MaxInt/(b.K*b.V) {
		bad("N = %d, VHeads·K·V = %d·%d·%d: out of range", b.N, b.VHeads, b.K, b.V)
	}
	gw := b.VHeads // the width of a Gate row, and DtBias's length
	if b.PerChannel {
		gw *= b.K
	}
	rates := len(b.ALog)
	if b.SsmA != nil {
		rates = len(b.SsmA)
	}
	if b.GateForm >= gateForms {
		bad("GateForm = %d: unknown form", b.GateForm)
	}
	if rates < b.VHeads || len(b.DtBias) < gw || len(b.NormWeight) < b.V {
		bad("ALog (or SsmA), DtBias, NormWeight have %d, %d, %d elements, want %d, %d, %d",
			rates, len(b.DtBias), len(b.NormWeight), b.VHeads, gw, b.V)
	}
	T := b.N
	if b.Start != nil {
		if len(b.Start) != b.N+1 {
			bad("Start has %d entries, want N+1 = %d", len(b.Start), b.N+1)
		}
		T = int(b.Start[b.N])
	}
	if b.Read != nil && len(b.Read) != b.N {
		bad("Read has %d entries, want N = %d", len(b.Read), b.N)
	}
	if b.Store != nil && len(b.Store) != T {
		bad("Store has %d entries, want T = %d", len(b.Store), T)
	}
	if T < 0 || T > 0 && T > math.MaxInt/(b.VHeads*b.V) {
		bad("T = %d tokens: out of range", T)
	}
	if b.ConvW != 0 {
		b.checkConv()
	}
	if T > 0 {
		b.checkRows(T, gw)
	}
	b.checkOutputs(T)
}

// bad panics with RunBatch's message about a malformed Batch.
func bad(format string, a ...any) { panic(fmt.Sprintf("gdnsimd: Batch."+format, a...)) }

// checkRows panics unless the row inputs hold T > 0 tokens (gw: the width of a Gate row).
func (b *Batch) checkRows(T, gw int) {
	type rowsIn struct {
		name  string
		r     Rows
		width int
	}
	rows := []rowsIn{{"Z", b.Z, b.VHeads * b.V}, {"Beta", b.Beta, b.VHeads}, {"Gate", b.Gate, gw},
		{"Q", b.Q, b.KHeads * b.K}, {"Key", b.Key, b.KHeads * b.K}, {"Val", b.Val, b.VHeads * b.V}}
	if b.ConvW != 0 {
		rows = append(rows[:3], rowsIn{"X", b.X, b.channels()})
	}
	for _, r := range rows {
		if g := r.r.Group; g != 0 && (g < 0 || r.r.GroupStride < g || r.width%g != 0 || r.name != "Beta" && (r.name != "Gate" || b.PerChannel) ||
			r.width/g > math.MaxInt/max(1, r.r.GroupStride)) {
			bad("%s: Group %d, GroupStride %d: want a group of the width %d and a GroupStride of at least it (Beta and the scalar gate's Gate only)", r.name, g, r.r.GroupStride, r.width)
		}
		r.width = r.r.extent(r.width)
		n := len(r.r.F32) + len(r.r.BF16)
		if (r.r.F32 == nil) == (r.r.BF16 == nil) || r.r.Stride < r.width || n < r.width || (n-r.width)/r.r.Stride < T-1 {
			bad("%s: %d elements (F32 set: %v, BF16 set: %v), Stride %d: want one of F32 and BF16 with (T−1)·Stride + width = %d·%d + %d elements, Stride ≥ width",
				r.name, n, r.r.F32 != nil, r.r.BF16 != nil, r.r.Stride, T-1, r.r.Stride, r.width)
		}
	}
}

// checkOutputs panics unless the outputs hold T tokens and the pools are well-formed.
func (b *Batch) checkOutputs(T int) {
	for _, o := range [...]struct {
		name string
		n    int
		set  bool
	}{{"Out", len(b.Out), b.Out != nil}, {"OutF32", len(b.OutF32), b.OutF32 != nil}} {
		if o.set && o.n < T*b.VHeads*b.V {
			bad("%s has %d elements, want T·VHeads·V = %d", o.name, o.n, T*b.VHeads*b.V)
		}
	}
	slot := b.VHeads * b.K * b.V
	for _, p := range [...]struct {
		name     string
		p        Pool
		optional bool
	}{{"State", b.State, false}, {"StoreTo", b.StoreTo, true}} {
		set, st := p.p.fields()
		if set > 1 || set == 0 && !p.optional || set == 1 && p.p.SlotStride < slot {
			bad("%s: %d storage fields set, SlotStride %d: want one and SlotStride ≥ VHeads·K·V = %d",
				p.name, set, p.p.SlotStride, slot)
		}
		if set == 1 && st != b.Format.Storage {
			bad("%s: the storage type is not the Format's (%v)", p.name, b.Format)
		}
	}
}

// channels is the width C of an X row: q, k and v.
func (b *Batch) channels() int { return 2*b.KHeads*b.K + b.VHeads*b.V }

// checkConv panics, as RunBatch documents, unless the conv front's taps, bias and pools are
// consistent with the dimensions (O(1); ConvW ≠ 0).
func (b *Batch) checkConv() {
	if b.ConvW < 2 || b.ConvW > maxConvW || b.KHeads*b.K > math.MaxInt/32 || b.VHeads*b.V > math.MaxInt/32 {
		panic(fmt.Sprintf("gdnsimd: Batch.ConvW = %d, want 2..%d (C = 2·%d·%d + %d·%d)", b.ConvW, maxConvW, b.KHeads, b.K, b.VHeads, b.V))
	}
	C := b.channels()
	if len(b.ConvTaps) < b.ConvW*C || len(b.ConvBias) < C {
		panic(fmt.Sprintf("gdnsimd: Batch.ConvTaps, ConvBias have %d, %d elements, want W·C = %d, C = %d", len(b.ConvTaps), len(b.ConvBias), b.ConvW*C, C))
	}
	for _, p := range [...]struct {
		name     string
		p        Pool
		optional bool
	}{{"ConvState", b.ConvState, false}, {"ConvStoreTo", b.ConvStoreTo, b.StoreTo.F32 == nil && b.StoreTo.BF16 == nil}} {
		set := p.p.F32 != nil || p.p.BF16 != nil
		if p.p.F32 != nil && p.p.BF16 != nil || set == p.optional && p.name == "ConvStoreTo" || !set && p.name == "ConvState" || set && p.p.SlotStride < (b.ConvW-1)*C {
			panic(fmt.Sprintf("gdnsimd: Batch.%s: F32 set: %v, BF16 set: %v, SlotStride %d: want one of F32 and BF16 (ConvStoreTo exactly when StoreTo) and SlotStride ≥ (W−1)·C = %d",
				p.name, p.p.F32 != nil, p.p.BF16 != nil, p.p.SlotStride, (b.ConvW-1)*C))
		}
	}
}
