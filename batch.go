package gdnsimd

import (
	"fmt"
	"math"
	"unsafe"
)

// stateLayout is the order of a head's K×V state in memory, an index of impl.cells.
type stateLayout uint8

const (
	layoutKV stateLayout = iota // [K][V]: element (i, j) at i·V + j (the seed's)
	layoutVK                    // [V][K]: element (i, j) at j·K + i (vLLM GPU, SGLang, FlashInfer, ggml)
)

// Format is a state format: a layout and a storage type.
type Format struct {
	VK   bool // [V][K]: element (i, j) of a head at j·K + i; false: [K][V], at i·V + j
	BF16 bool // bf16 storage (widened exactly on load, rounded to nearest even on store)
}

// Formats lists every state format: kv-f32, vk-f32, kv-bf16, vk-bf16.
func Formats() []Format {
	return []Format{{false, false}, {true, false}, {false, true}, {true, true}}
}

// layout is f's layout.
func (f Format) layout() stateLayout {
	if f.VK {
		return layoutVK
	}
	return layoutKV
}

// String is the format's key in test and benchmark names: "kv-f32", "vk-f32", "kv-bf16", "vk-bf16".
func (f Format) String() string {
	s := "kv"
	if f.layout() == layoutVK {
		s = "vk"
	}
	if f.BF16 {
		return s + "-bf16"
	}
	return s + "-f32"
}

// The slot values of Batch.Read and Batch.Store that are not slots (package gdn's Pad, Zero and
// NoStore).
const (
	readPad  int32 = -1 // Read: a padding sequence (outputs +0, no state read or written)
	readZero int32 = -2 // Read: the sequence starts from the zero state
	noStore  int32 = -1 // Store: this token's state is not kept
)

// Rows is a token-major input: token t's row starts at element t·Stride. Exactly one of F32 and
// BF16 holds the data (bf16 values as their bits).
type Rows struct {
	F32    []float32
	BF16   []uint16
	Stride int // elements from one token's row to the next; at least the row's extent
	// Group > 0: a grouped row (Beta and Gate of the scalar gate only): element i of a row at
	// (i/Group)·GroupStride + i%Group, GroupStride ≥ Group, the width a multiple of Group.
	Group, GroupStride int
}

// extent is the elements a row of width w spans: w, or up to the last group's end.
func (r *Rows) extent(w int) int {
	if r.Group <= 0 {
		return w
	}
	return (w/r.Group-1)*r.GroupStride + r.Group
}

// at is the offset of element i in a row.
func (r *Rows) at(i int) int {
	if r.Group <= 0 {
		return i
	}
	return i/r.Group*r.GroupStride + i%r.Group
}

// Pool is caller-owned state: slot s, head h starts at element s·SlotStride + h·K·V. Exactly one
// of F32 and BF16 holds it.
type Pool struct {
	F32        []float32
	BF16       []uint16
	SlotStride int // at least VHeads·K·V
}

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
	// VHeads·K and DtBias [VHeads][K] (else the head's scalar gate of Part A); LowerBound < 0 is
	// its bounded form lb·sigmoid(rate·(a + dt_bias)) (0: the softplus form); Sigmoid makes the
	// output gate sigmoid(z) instead of silu(z).
	PerChannel bool
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

// chunk is the most tokens the driver hands a state routine at once: the per-token rows of a
// chunk (k̂, q̂, v, o: 128 KiB at K = V = 128) stay in L2 while the routine sweeps the state.
const chunk = 64

// groupMax is the most value heads of one GQA group the driver advances together through a
// sequence longer than a chunk (each keeps its own K·V f32 carry between chunks, 64 KiB at
// K = V = 128); they share the k̂, q̂ and k̂·q̂ of each chunk, prepared once. Qwen3-Next groups 2
// value heads per k-head, Qwen3.5 3.
const groupMax = 4

// stateRef is one head's K·V state in a pool or in scratch: f32, bf16, or both (both are
// written; only one is ever read). The zero stateRef is "none" (a zero state when read).
type stateRef struct {
	f32  []float32
	bf16 []uint16
}

func (r stateRef) none() bool { return r.f32 == nil && r.bf16 == nil }

// chanAt is token τ's per-channel gate (headCall.ch), or nil.
func (h *headCall) chanAt(τ int) []float32 {
	if h.ch == nil {
		return nil
	}
	return h.ch[4*h.K*τ : 4*h.K*(τ+1)]
}

// headCall is one head's share of a call as a state routine sees it: T = len(tok)/4 tokens.
type headCall struct {
	K, V int
	src  stateRef   // the state before the first token (none: the zero state)
	dst  []stateRef // [T]: where the state after token τ goes (none: not kept)
	kh   []float32  // [T][K] k̂
	qh   []float32  // [T][K] q̂ (scaled by 1/√K)
	v    []float32  // token τ's v at τ·vs
	vs   int
	o    []float32 // [T][V] written
	tok  []float32 // [T][4] em1, eg, beta, kq
	// ch is the per-channel gate (Batch.PerChannel; nil: the scalar gate of tok), [T][4][K] per
	// token: k̂ and q̂ each decayed by its channel's decay (the read pass's vectors: the decay
	// moves into the dot products, so tok's em1 and eg are −1 and 1: decay(x) = 1·x) and the
	// channels' decays in pairs c_i, m_i (chanForm; m as float32 bits): row i ([K][V]) or element
	// i ([V][K]) of the state decays to c_i·x + (x & m_i).
	ch   []float32
	tmp  []float32 // K·V f32 scratch the routine may use
	slab []float32 // K·genericBlock f32 scratch the routine may use
	pf   []uintptr // the rows of the driver's next call, to prefetch (stateArgs.pf)
	nx   stateRef  // the state the driver's next call reads first, to prefetch (stateArgs.nx; none: nothing)

	stores []unsafe.Pointer     // [chunk] for the assembly adapters
	zero32 []float32            // K·V zeros (never written)
	zero16 []uint16             // K·V zeros (never written)
	work   *[workFloats]float32 // the assembly routines' work space (made on first use)
}

// stateFunc advances one head by the tokens of a headCall (SPEC Part A per token): for every τ,
// the state after token τ is written to dst[τ] unless it is none, and o[τ] is the token's output
// before the RMSNorm. The state stays float32 between tokens; bf16 is rounded only where stored.
type stateFunc func(h *headCall)

// Scratch is a worker's scratch space for RunBatch: grown on first use, reused after. The zero
// value is ready to use. A Scratch must not be used by two RunBatch calls at once.
type Scratch struct {
	kh, qh, o, v, z, tok []float32
	kq                   []float32 // [chunk] k̂·q̂
	ch                   []float32 // [chunk][4][K]: headCall.ch
	cg                   []float32 // [2][K]: one token's per-channel em1, eg
	rate                 []float64 // the gates' lanes' rates (gateLanes: at least K)
	rates                []float64 // the value heads' rates (rates), of
	rateOf               []uint32  // the bits of the A_log or ssm_a they were computed from,
	rateSsm              bool      // and which of the two
	gl                   []float32 // the gates' lanes (gateLanes)
	row                  []float32 // widened q, k rows of one token
	carry                []float32 // [g][K·V], g ≤ groupMax: a carry per head of a group (grown on first use)
	tmp                  []float32 // K·V
	slab                 []float32
	dst                  []stateRef
	stores               []unsafe.Pointer
	zero32               []float32
	zero16               []uint16
	hc                   headCall // the state routine's argument (a func value's argument escapes)
	b                    Batch    // a copy of the batch being run
	k, vd                int
	win                  []float32   // the conv front's bf16 input rows widened (convRows), grown on first use
	rows                 [][]float32 // the conv front's table of input rows (convRows), likewise
	u                    []float32   // a one-token sequence's conv outputs by channel (convToken), likewise
	sink                 uint32      // warm's loads go here
}

func (s *Scratch) ensure(K, V int) {
	if s.k == K && s.vd == V {
		return
	}
	s.k, s.vd = K, V
	s.kh, s.qh = make([]float32, chunk*K), make([]float32, chunk*K)
	s.o, s.v, s.z = make([]float32, chunk*V), make([]float32, chunk*V), make([]float32, V)
	s.tok, s.kq = make([]float32, 4*chunk), make([]float32, chunk)
	s.ch, s.cg = nil, make([]float32, 2*K) // ch: grown on the first per-channel call
	s.row = make([]float32, 2*K)
	s.carry, s.tmp = nil, make([]float32, K*V)
	s.slab = make([]float32, K*genericBlock)
	s.dst = make([]stateRef, chunk)
	s.stores = make([]unsafe.Pointer, chunk)
	s.zero32, s.zero16 = make([]float32, K*V), make([]uint16, K*V)
	pf := make([]uintptr, 0, 14*chunk)                                                                                                   // per token at most v, z, q, k, Out, OutF32 and the group's end
	s.hc = headCall{K: K, V: V, tmp: s.tmp, slab: s.slab, stores: s.stores, zero32: s.zero32, zero16: s.zero16, pf: pf, work: s.hc.work} // work: any K, V
}

// gateLanes makes s.gl hold the gates of n lanes: the inputs b, a, dt_bias and the outputs beta,
// em1, eg, n each (see lane), and s.rate the lanes' rates, at least K of them (channels).
func (s *Scratch) gateLanes(n, K int) {
	if len(s.gl) < 6*n {
		s.gl = make([]float32, 6*n)
	}
	if len(s.rate) < max(n, K) {
		s.rate = make([]float64, max(n, K))
	}
}

// lane is the i-th of the six gate arrays of s.gl (0–2 the inputs b, a, dt_bias; 3–5 the outputs
// beta, em1, eg), n elements.
func (s *Scratch) lane(i, n int) []float32 {
	w := len(s.gl) / 6
	return s.gl[i*w : i*w+n : i*w+n]
}

// RunBatch runs the work items [lo, hi) of b (see Items) with this kernel, which must implement
// b.Format (Implements). Items are independent: the result of an item does not depend on lo, hi or
// on any other item; an item writes only its own head's outputs and states.
//
// RunBatch panics before it writes anything unless the dimensions are ≥ 1 (VHeads a multiple of
// KHeads), 0 ≤ lo ≤ hi ≤ Items(), Start (unless nil) has N+1 entries, Read (unless nil) N, Store
// (unless nil) T = Start[N] (N without Start); ALog (SsmA if not nil) holds VHeads elements, DtBias
// VHeads (VHeads·K with PerChannel), NormWeight V;
// every row input has exactly one of F32 and BF16, a Stride of at least its width and
// (T−1)·Stride + width elements; Out and OutF32 (unless nil) T·VHeads·V; the pools exactly one of
// F32 and BF16 (StoreTo may have neither: the same pool as State) and a SlotStride of at least
// VHeads·K·V. These checks are O(1). What they cannot check in O(1) — a slot or a Start entry that
// reaches past a slice — is cut from b's slices with Go's bounds checks before any routine runs on
// it, so a malformed Batch panics, like an index out of range, instead of touching memory outside
// its slices (possibly after other items were written). Package gdn validates all of it first.
func (k Kernel) RunBatch(b *Batch, lo, hi int, s *Scratch) {
	k.runBatch(b, lo, hi, s, true)
}

// runBatch is RunBatch; check false skips the O(1) length checks, for Kernel.Run, which has made
// its own (the slices of a Step need reach only as far as its heads [lo, hi)).
func (k Kernel) runBatch(b *Batch, lo, hi int, s *Scratch, check bool) {
	if k.im == nil {
		panic("gdnsimd: RunBatch on the zero Kernel (use Kernels, Default or Lookup)")
	}
	if s == nil {
		panic("gdnsimd: RunBatch with a nil Scratch")
	}
	f := k.im.cell(b.Format)
	pf := k.im.prefetches
	if f == nil {
		panic(fmt.Sprintf("gdnsimd: kernel %s does not implement format %v", k.im.name, b.Format))
	}
	if b.KHeads <= 0 || b.VHeads <= 0 || b.VHeads%b.KHeads != 0 || b.K <= 0 || b.V <= 0 {
		panic(fmt.Sprintf("gdnsimd: bad batch heads/dims KHeads=%d VHeads=%d K=%d V=%d", b.KHeads, b.VHeads, b.K, b.V))
	}
	if check {
		b.check()
	}
	if lo < 0 || hi > b.Items() || lo > hi {
		panic(fmt.Sprintf("gdnsimd: items [%d, %d) out of range [0, %d)", lo, hi, b.Items()))
	}
	s.ensure(b.K, b.V)
	s.gateLanes(max(chunk, b.VHeads), b.K)
	s.b = *b // the routines are func values: what they are given escapes, so b must not be given
	d := driver{im: k.im, b: &s.b, s: s, state: f, w: b.NormWeight[:b.V:b.V], single: b.Format == Format{} && !b.PerChannel,
		prefetches: pf}
	if b.PerChannel && len(s.ch) < 4*chunk*b.K {
		s.ch = make([]float32, 4*chunk*b.K)
	}
	defer func() { // drop every reference to the caller's memory
		s.b = Batch{}
		clear(s.dst)
		s.hc.src, s.hc.dst, s.hc.v = stateRef{}, nil, nil
	}()
	for w := lo; w < hi; {
		n := w / b.VHeads
		end := min(hi, (n+1)*b.VHeads)
		d.sequence(n, w-n*b.VHeads, end-n*b.VHeads)
		w = end
	}
}

// check panics, as RunBatch documents, unless b's lengths are consistent (O(1)).
func (b *Batch) check() {
	bad := func(format string, a ...any) { panic(fmt.Sprintf("gdnsimd: Batch."+format, a...)) }
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
		set := p.p.F32 != nil || p.p.BF16 != nil
		if p.p.F32 != nil && p.p.BF16 != nil || !set && !p.optional || set && p.p.SlotStride < slot {
			bad("%s: F32 set: %v, BF16 set: %v, SlotStride %d: want one of F32 and BF16 and SlotStride ≥ VHeads·K·V = %d",
				p.name, p.p.F32 != nil, p.p.BF16 != nil, p.p.SlotStride, slot)
		}
		if set && (p.p.BF16 != nil) != b.Format.BF16 {
			bad("%s: the storage type is not the Format's (%v)", p.name, b.Format)
		}
	}
}

// channels is the width C of an X row: q, k and v.
func (b *Batch) channels() int { return 2*b.KHeads*b.K + b.VHeads*b.V }

// checkConv panics, as RunBatch documents, unless the conv front's taps, bias and pools are
// consistent with the dimensions (O(1); ConvW ≠ 0).
func (b *Batch) checkConv() {
	if b.ConvW < 2 || b.ConvW > 8 || b.KHeads*b.K > math.MaxInt/32 || b.VHeads*b.V > math.MaxInt/32 {
		panic(fmt.Sprintf("gdnsimd: Batch.ConvW = %d, want 2..8 (C = 2·%d·%d + %d·%d)", b.ConvW, b.KHeads, b.K, b.VHeads, b.V))
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

// Implements reports whether the kernel has a state routine for format f.
func (k Kernel) Implements(f Format) bool { return k.im.cell(f) != nil }

// cell is im's state routine for format f, or nil.
func (im *impl) cell(f Format) stateFunc {
	st := 0
	if f.BF16 {
		st = 1
	}
	return im.cells[st][f.layout()]
}

// driver runs items of one batch on one worker.
type driver struct {
	im     *impl
	b      *Batch
	s      *Scratch
	state  stateFunc
	w      []float32
	single bool // one-token sequences take token (the [K][V] f32 format, the scalar gate)
	// prefetches: the state routine issues the prefetch list (impl.prefetches of the cell run).
	prefetches bool
	// oneTok: the sequence being run is one token; its gates for the value heads from hlo are
	// in s.lane(3…5) (computed once for all its heads: see heads).
	oneTok bool
	hlo    int
	// t0, read: the sequence being run's first token and Read slot (the conv front's history).
	t0   int
	read int32
	// convTok: the sequence being run is one token, its conv outputs in s.u (convToken).
	convTok bool
}

// sequence runs the items of sequence n for the value heads [hlo, hhi), one GQA group (the heads
// reading one k-head) at a time, so that the group's heads share the k-head's k̂, q̂ and k̂·q̂ of
// a chunk, prepared once for all of them. A range of items may start or end inside a group: only
// the group's heads in [hlo, hhi) are run.
func (d *driver) sequence(n, hlo, hhi int) {
	b := d.b
	t0, t1 := b.tokens(n)
	if t0 == t1 {
		return
	}
	read := b.read(n)
	if read == readPad {
		d.pad(t0, t1, hlo, hhi)
		return
	}
	d.t0, d.read = t0, read
	var runs [3][2]int // the conv channels the heads read (convRuns)
	conv := false
	if b.ConvW != 0 {
		runs, conv = d.convRuns(hlo, hhi)
	}
	if conv && read >= 0 {
		d.warmConv(read, runs)
	}
	d.oneTok, d.hlo = t1-t0 == 1, hlo
	if d.oneTok {
		d.heads(t0, hlo, hhi)
	}
	d.convTok = false
	if d.oneTok && conv {
		d.convToken(t0, runs)
	}
	HK := b.KHeads
	G := b.VHeads / HK
	per := G // heads per group call: all of a group, but at most groupMax when it needs carries
	if t1-t0 > chunk {
		per = min(G, groupMax)
	}
	// The group of k-head hk is the value heads base + j·step, j < G. Each group call is made
	// once the next is known: its first head and k-head are what ahead prefetches (−1: none).
	base, step := 0, 1
	if b.GQATiled {
		step = HK
	}
	type call struct{ hk, h0, g int }
	var prev call
	have := false
	for hk := range HK {
		base = hk * G
		if b.GQATiled {
			base = hk
		}
		jlo := min(G, (max(0, hlo-base)+step-1)/step)
		jhi := min(G, (max(0, hhi-base)+step-1)/step)
		for j := jlo; j < jhi; j += per {
			c := call{hk, base + j*step, min(per, jhi-j)}
			if have {
				d.group(prev.hk, prev.h0, step, prev.g, t0, t1, read, c.h0, c.hk)
			}
			prev, have = c, true
		}
	}
	if have {
		d.group(prev.hk, prev.h0, step, prev.g, t0, t1, read, -1, 0)
	}
}

// pad writes +0 to the outputs of the value heads [hlo, hhi) of a padding sequence's tokens.
func (d *driver) pad(t0, t1, hlo, hhi int) {
	b := d.b
	V, HV := b.V, b.VHeads
	for t := t0; t < t1; t++ {
		if b.Out != nil {
			clear(cutU16(b.Out, (t*HV+hlo)*V, (hhi-hlo)*V))
		}
		if b.OutF32 != nil {
			clear(cutF32(b.OutF32, (t*HV+hlo)*V, (hhi-hlo)*V))
		}
	}
}

// group runs the g value heads h0 + j·step, j < g, of k-head hk over the tokens [t0, t1) of a
// sequence reading slot read: chunk by chunk, each chunk's k̂, q̂ and k̂·q̂ prepared once and then
// every head's state advanced through it. Over more than one chunk (g ≤ groupMax then) head j
// carries its state from one chunk to the next in carry j.
func (d *driver) group(hk, h0, step, g, t0, t1 int, read int32, nh, nhk int) {
	b, s := d.b, d.s
	hs := b.K * b.V
	if t1-t0 == 1 && d.single {
		d.prepareQK(t0, t1, hk)
		for j := range g {
			d.token(h0+j*step, t0, read)
		}
		return
	}
	// ahead lists the rows of the call after head j's call over [c0, c1) of the chunk loop below:
	// head j+1's over the same tokens, else head 0's over the next chunk (with its q and k), else
	// the next group's first (nh, k-head nhk) over the first chunk; and the state it reads first
	// (src: head j+1's before the chunk; a carry, in the caches already, is not listed).
	one := t1-t0 <= chunk
	var src [groupMax]stateRef // over more than one chunk: head j's state before the chunk
	ahead := func(j, c0, c1 int) {
		switch {
		case j+1 < g && one:
			d.ahead(h0+(j+1)*step, c0, c1, hk, false, d.readRef(read, h0+(j+1)*step))
		case j+1 < g:
			d.ahead(h0+(j+1)*step, c0, c1, hk, false, src[j+1])
		case c1 < t1:
			d.ahead(h0, c1, min(t1, c1+chunk), hk, true, stateRef{})
		case nh >= 0:
			d.ahead(nh, t0, min(t1, t0+chunk), nhk, true, d.readRef(read, nh))
		default:
			s.hc.pf, s.hc.nx = s.hc.pf[:0], stateRef{}
		}
	}
	if one {
		d.prepareQK(t0, t1, hk)
		for j := range g {
			h := h0 + j*step
			ahead(j, t0, t1)
			d.chunk(h, t0, t1, t1, read, d.readRef(read, h), nil)
		}
		return
	}
	for j := range g {
		src[j] = d.readRef(read, h0+j*step)
	}
	if len(s.carry) < g*hs {
		s.carry = make([]float32, min(groupMax, b.VHeads/b.KHeads)*hs) // the most any group of b needs
	}
	for c0 := t0; c0 < t1; c0 += chunk {
		c1 := min(t1, c0+chunk)
		d.prepareQK(c0, c1, hk)
		for j := range g {
			var carry []float32
			if c1 < t1 {
				carry = s.carry[j*hs : (j+1)*hs : (j+1)*hs]
			}
			ahead(j, c0, c1)
			src[j] = d.chunk(h0+j*step, c0, c1, t1, read, src[j], carry)
		}
	}
}

// ahead sets the head call's prefetch list (headCall.pf, stateArgs.pf) to the rows the chunk call
// of value head h over the tokens [c0, c1) will read from memory, v and z, with q and k of k-head
// hk when qk (the call starts a chunk), and write (the outputs): a group per token. The state
// routine issues a group per token pass (asm/prefetch.go), so that these rows come while it
// computes instead of one after another at the start of that call: the prefill's activations are
// about 2 KiB per head-token, as much time from memory as a fifth of the routine's compute. It
// also sets headCall.nx to nx, the state that call reads first (none for a call of one token).
func (d *driver) ahead(h, c0, c1, hk int, qk bool, nx stateRef) {
	b, s := d.b, d.s
	K, V, HV := b.K, b.V, b.VHeads
	pf := s.hc.pf[:0]
	s.hc.nx = stateRef{}
	if c1-c0 < 2 || !d.prefetches {
		// Not for a call of one token (decode): its rows are 2 KiB against the state's 64 KiB
		// (Qwen3-Next), and building the list cost more than it saved (B = 1, from L2/L3: +1.5 to
		// +3.3 % a call). Nor for a kernel whose routines do not issue it.
		s.hc.pf = pf
		return
	}
	for t := c0; t < c1; t++ {
		if b.ConvW != 0 {
			// The conv reads the rows up to W−1 tokens back, already read for the tokens before.
			pf = rowLines(pf, &b.X, t, 2*b.KHeads*K+h*V, V)
			if qk {
				pf = rowLines(pf, &b.X, t, hk*K, K)
				pf = rowLines(pf, &b.X, t, (b.KHeads+hk)*K, K)
			}
		} else {
			pf = rowLines(pf, &b.Val, t, h*V, V)
			if qk {
				pf = rowLines(pf, &b.Q, t, hk*K, K)
				pf = rowLines(pf, &b.Key, t, hk*K, K)
			}
		}
		pf = rowLines(pf, &b.Z, t, h*V, V)
		if b.Out != nil {
			pf = lines(pf, unsafe.Pointer(unsafe.SliceData(cutU16(b.Out, (t*HV+h)*V, V))), 2*V)
		}
		if b.OutF32 != nil {
			pf = lines(pf, unsafe.Pointer(unsafe.SliceData(cutF32(b.OutF32, (t*HV+h)*V, V))), 4*V)
		}
		pf = append(pf, 0, 0) // the end of the token's group
	}
	s.hc.pf, s.hc.nx = pf, nx
}

// rowLines appends to pf the entry of token t's row of r, w elements from element off.
func rowLines(pf []uintptr, r *Rows, t, off, w int) []uintptr {
	if r.F32 != nil {
		return lines(pf, unsafe.Pointer(unsafe.SliceData(cutF32(r.F32, t*r.Stride+off, w))), 4*w)
	}
	return lines(pf, unsafe.Pointer(unsafe.SliceData(cutU16(r.BF16, t*r.Stride+off, w))), 2*w)
}

// lines appends to pf the entry of the bytes at p: its address and the 64-byte lines they touch.
func lines(pf []uintptr, p unsafe.Pointer, bytes int) []uintptr {
	a := uintptr(p)
	return append(pf, a, (a&63+uintptr(bytes)+63)>>6)
}

// readRef is the state value head h of a sequence reading slot read starts from (none: Zero).
func (d *driver) readRef(read int32, h int) stateRef {
	if read == readZero {
		return stateRef{}
	}
	return poolRef(&d.b.State, int(read), h, d.b.K*d.b.V)
}

// chunk advances value head h through the tokens [c0, c1) of a sequence ending at t1 and reading
// slot read, from the state src, with the chunk's k̂, q̂ and k̂·q̂ prepared, and writes the tokens'
// outputs. It returns the state after c1−1 for the next chunk: where the chunk stored it in f32,
// else carry (not nil when c1 < t1).
func (d *driver) chunk(h, c0, c1, t1 int, read int32, src stateRef, carry []float32) stateRef {
	b, s := d.b, d.s
	K, V := b.K, b.V
	hs := K * V
	T := c1 - c0
	dstPool := &b.State
	if b.StoreTo.F32 != nil || b.StoreTo.BF16 != nil {
		dstPool = &b.StoreTo
	}
	beta, em1, eg := d.gates(h, c0, c1)
	tok := s.tok[:4*T]
	var ch []float32
	if b.PerChannel {
		ch = d.channels(h, c0, c1)
		em1, eg = s.farOne(T)
	}
	for τ := range T {
		tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1[τ], eg[τ], beta[τ], s.kq[τ]
	}
	// v rows: the conv's outputs, in place for f32, widened into scratch for bf16.
	var v []float32
	vs := V
	if b.ConvW != 0 {
		v = s.v[:T*V]
		d.convRows(v, c0, c1, 2*b.KHeads*K+h*V, V)
	} else if b.Val.F32 != nil {
		vs = b.Val.Stride
		v = cutF32(b.Val.F32, c0*vs+h*V, (T-1)*vs+V)
	} else {
		v = s.v[:T*V]
		for τ := range T {
			d.im.widen(v[τ*V:(τ+1)*V], cutU16(b.Val.BF16, (c0+τ)*b.Val.Stride+h*V, V))
		}
	}
	dst := s.dst[:T]
	for τ := range T {
		dst[τ] = stateRef{}
		t := c0 + τ
		if b.Store != nil {
			if slot := b.Store[t]; slot >= 0 {
				dst[τ] = poolRef(dstPool, int(slot), h, hs)
			}
		} else if t == t1-1 {
			dst[τ] = poolRef(dstPool, int(read), h, hs)
		}
	}
	next := dst[T-1]
	if c1 < t1 && next.f32 == nil {
		// The state goes on to the next chunk in float32.
		dst[T-1].f32 = carry
		next = stateRef{f32: carry}
	}
	if b.Val.F32 != nil && b.ConvW == 0 {
		s.sink ^= warm(&b.Val, c0, c1, h*V, V)
	}
	s.sink ^= warm(&b.Z, c0, c1, h*V, V)
	hc := &s.hc // its scratch fields are set once by ensure
	hc.src, hc.dst = src, dst
	hc.kh, hc.qh, hc.v, hc.vs, hc.o, hc.tok, hc.ch = s.kh[:T*K], s.qh[:T*K], v, vs, s.o[:T*V], tok, ch
	d.state(&s.hc)
	for τ := range T {
		d.gate(c0+τ, h, s.o[τ*V:(τ+1)*V:(τ+1)*V])
	}
	return stateRef{f32: next.f32}
}

// warm reads an element of each cache line of the rows [t0, t1) of r, w elements from element
// off, and returns their bits xored (for Scratch.sink, so that the loads stay). The state routines
// need token τ's v before they can update the state with it, and the gate reads z a row at a time:
// rows a token apart are a page or more apart, so without this every token of a chunk would wait
// for its row from memory in turn; here the misses overlap (avx512, Qwen3-Next prefill at T = 512:
// the [K][V] routine 811 → 609 ns per head-token; the loads themselves cost about 5 ns).
func warm(r *Rows, t0, t1, off, w int) uint32 {
	var x uint32
	if r.F32 != nil {
		for t := t0; t < t1; t++ {
			row := cutF32(r.F32, t*r.Stride+off, w)
			for i := 0; i < w; i += 16 {
				x ^= math.Float32bits(row[i])
			}
			x ^= math.Float32bits(row[w-1])
		}
		return x
	}
	for t := t0; t < t1; t++ {
		row := cutU16(r.BF16, t*r.Stride+off, w)
		for i := 0; i < w; i += 32 {
			x ^= uint32(row[i])
		}
		x ^= uint32(row[w-1])
	}
	return x
}

// gate writes token t's outputs of v-head h: the gated RMSNorm of o with the token's z.
func (d *driver) gate(t, h int, o []float32) {
	b, s := d.b, d.s
	V, HV := b.V, b.VHeads
	var z []float32
	if b.Z.F32 != nil {
		z = cutF32(b.Z.F32, t*b.Z.Stride+h*V, V)
	} else {
		z = s.z[:V:V]
		d.im.widen(z, cutU16(b.Z.BF16, t*b.Z.Stride+h*V, V))
	}
	var out []uint16
	var outF []float32
	if b.Out != nil {
		out = cutU16(b.Out, (t*HV+h)*V, V)
	}
	if b.OutF32 != nil {
		outF = cutF32(b.OutF32, (t*HV+h)*V, V)
	}
	d.im.gate(o, z, d.w, b.RMSEps, out, outF, b.Sigmoid)
}

// token is the path of a sequence of one token in the [K][V] f32 format (decode, Step) for value
// head h, with token t's k̂, q̂ and k̂·q̂ prepared: the single-token state piece on the pool's
// memory directly, without the head call of the routines over T tokens. Every kernel's routine
// over T tokens computes each token as its single-token piece does, so the bits are the same
// either way (gdn's equivalence tests hold them to it).
func (d *driver) token(h, t int, read int32) {
	b, s := d.b, d.s
	K, V := b.K, b.V
	hs := K * V
	gb, gm, ge := d.gates(h, t, t+1)
	beta, em1, eg := gb[0], gm[0], ge[0]
	var v []float32
	if b.ConvW != 0 {
		v = s.v[:V:V]
		d.convRows(v, t, t+1, 2*b.KHeads*K+h*V, V)
	} else if b.Val.F32 != nil {
		v = cutF32(b.Val.F32, t*b.Val.Stride+h*V, V)
	} else {
		v = s.v[:V:V]
		d.im.widen(v, cutU16(b.Val.BF16, t*b.Val.Stride+h*V, V))
	}
	in := d.readRef(read, h).f32
	if in == nil {
		in = s.zero32[:hs:hs]
	}
	dstPool := &b.State
	if b.StoreTo.F32 != nil || b.StoreTo.BF16 != nil {
		dstPool = &b.StoreTo
	}
	var out []float32
	switch {
	case b.Store != nil && b.Store[t] >= 0:
		out = poolRef(dstPool, int(b.Store[t]), h, hs).f32
	case b.Store == nil:
		out = poolRef(dstPool, int(read), h, hs).f32
	default:
		out = s.tmp[:hs:hs] // not kept
	}
	o := s.o[:V:V]
	d.im.state(in, out, s.kh[:K:K], s.qh[:K:K], v, o, em1, eg, beta, s.kq[0])
	d.gate(t, h, o)
}

// heads computes the gates of token t for the value heads [hlo, hhi) into s.lane(3…5): one call of
// the kernel's gates piece for all of a one-token sequence's heads (a lane per head).
func (d *driver) heads(t, hlo, hhi int) {
	b, s := d.b, d.s
	n := hhi - hlo
	var gb, ga []float32
	if b.Beta.Group > 0 || b.Gate.Group > 0 {
		gb, ga = s.lane(0, n), s.lane(1, n)
		for i := range n {
			gb[i], ga[i] = rowAt(&b.Beta, t, hlo+i), rowAt(&b.Gate, t, hlo+i)
		}
		d.laneGates(n, gb, ga, func(i int) int { return hlo + i })
		return
	}
	if b.Beta.F32 != nil {
		gb = cutF32(b.Beta.F32, t*b.Beta.Stride+hlo, n)
	} else {
		gb = s.lane(0, n)
		d.im.widen(gb, cutU16(b.Beta.BF16, t*b.Beta.Stride+hlo, n))
	}
	if b.Gate.F32 != nil {
		ga = cutF32(b.Gate.F32, t*b.Gate.Stride+hlo, n)
	} else {
		ga = s.lane(1, n)
		d.im.widen(ga, cutU16(b.Gate.BF16, t*b.Gate.Stride+hlo, n))
	}
	d.laneGates(n, gb, ga, func(i int) int { return hlo + i })
}

// laneGates sets s.lane(3…5) to the gates beta, em1, eg of n lanes with the inputs gb, ga (b and
// a), lane i of value head head(i): the kernel's gates piece. With the per-channel gate only beta
// is used (the decays are the channels': see channels).
func (d *driver) laneGates(n int, gb, ga []float32, head func(i int) int) {
	b, s := d.b, d.s
	beta, em1, eg := s.lane(3, n), s.lane(4, n), s.lane(5, n)
	dt, rate := s.lane(2, n), s.rate[:n:n]
	if b.PerChannel {
		clear(dt)
		clear(rate)
		d.im.gates(beta, em1, eg, gb, dt, dt, rate, 0)
		return
	}
	rs := d.rates()
	for i := range n {
		h := head(i)
		rate[i], dt[i] = rs[h], b.DtBias[h]
	}
	d.im.gates(beta, em1, eg, gb, ga, dt, rate, 0)
}

// rates returns the value heads' decay rates, exp(A_log) (rate64) or −ssm_a: computed once for
// the values of the Batch's A_log or ssm_a (a Layer's are the same every call) and kept with them.
func (d *driver) rates() []float64 {
	b, s := d.b, d.s
	src, ssm := b.ALog, b.SsmA != nil
	if ssm {
		src = b.SsmA
	}
	same := s.rateSsm == ssm && len(s.rateOf) == len(src)
	for i := 0; same && i < len(src); i++ {
		same = s.rateOf[i] == math.Float32bits(src[i])
	}
	if same {
		return s.rates
	}
	s.rateOf, s.rates, s.rateSsm = s.rateOf[:0], s.rates[:0], ssm
	for _, x := range src {
		r := rate64(x)
		if ssm {
			r = -float64(x)
		}
		s.rateOf, s.rates = append(s.rateOf, math.Float32bits(x)), append(s.rates, r)
	}
	return s.rates
}

// channels makes the per-channel gate (headCall.ch) of value head h over the tokens [c0, c1),
// with their k̂ and q̂ prepared (s.kh, s.qh): per token the channels' em1 and eg (the gates piece), their
// forms c, m, and k̂, q̂ decayed by them.
func (d *driver) channels(h, c0, c1 int) []float32 {
	b, s := d.b, d.s
	K := b.K
	lb := float64(b.LowerBound)
	dtb := b.DtBias[h*K : (h+1)*K : (h+1)*K]
	em1, eg := s.cg[:K:K], s.cg[K:2*K:2*K]
	rate := s.rate[:K:K]
	r := d.rates()[h]
	for i := range rate {
		rate[i] = r
	}
	ch := s.ch[:4*K*(c1-c0)]
	for τ := range c1 - c0 {
		t := c0 + τ
		var g []float32
		if b.Gate.F32 != nil {
			g = cutF32(b.Gate.F32, t*b.Gate.Stride+h*K, K)
		} else {
			g = s.row[:K:K]
			d.im.widen(g, cutU16(b.Gate.BF16, t*b.Gate.Stride+h*K, K))
		}
		d.im.gates(nil, em1, eg, nil, g, dtb, rate, lb)
		c := ch[4*K*τ : 4*K*(τ+1) : 4*K*(τ+1)]
		d.im.chans(c[:K], c[K:2*K], c[2*K:], em1, eg, s.kh[τ*K:(τ+1)*K], s.qh[τ*K:(τ+1)*K])
	}
	return ch
}

// farOne returns T times −1 and T ones: the em1 and eg of tok with the per-channel gate (decay(x)
// = 1·x after the dot products, whose vectors are decayed).
func (s *Scratch) farOne(T int) (em1, eg []float32) {
	em1, eg = s.lane(4, T), s.lane(5, T)
	for τ := range T {
		em1[τ], eg[τ] = -1, 1
	}
	return em1, eg
}

// gates returns the gates beta, em1, eg of value head h over the tokens [c0, c1), one each: those
// heads computed when the sequence is one token, else computed here (a lane per token).
func (d *driver) gates(h, c0, c1 int) (beta, em1, eg []float32) {
	b, s := d.b, d.s
	if d.oneTok {
		i := h - d.hlo
		return s.lane(3, i+1)[i:], s.lane(4, i+1)[i:], s.lane(5, i+1)[i:]
	}
	T := c1 - c0
	gb, ga := s.lane(0, T), s.lane(1, T)
	for τ := range T {
		gb[τ], ga[τ] = rowAt(&b.Beta, c0+τ, h), 0
		if !b.PerChannel {
			ga[τ] = rowAt(&b.Gate, c0+τ, h)
		}
	}
	d.laneGates(T, gb, ga, func(int) int { return h })
	return s.lane(3, T), s.lane(4, T), s.lane(5, T)
}

// prepareQK writes k̂, q̂ and k̂·q̂ of tokens [c0, c1), k-head hk, into the scratch.
func (d *driver) prepareQK(c0, c1, hk int) {
	b, s := d.b, d.s
	K := b.K
	invSqrtK := 1 / math.Sqrt(float64(K))
	conv := b.ConvW != 0
	if conv {
		// q and k are the conv's outputs, normalised in place.
		T := c1 - c0
		d.convRows(s.qh[:T*K], c0, c1, hk*K, K)
		d.convRows(s.kh[:T*K], c0, c1, (b.KHeads+hk)*K, K)
	} else {
		s.sink ^= warm(&b.Q, c0, c1, hk*K, K) ^ warm(&b.Key, c0, c1, hk*K, K)
	}
	for τ := range c1 - c0 {
		t := c0 + τ
		q, k := s.qh[τ*K:(τ+1)*K:(τ+1)*K], s.kh[τ*K:(τ+1)*K:(τ+1)*K]
		switch {
		case conv:
		case b.Q.F32 != nil:
			q = cutF32(b.Q.F32, t*b.Q.Stride+hk*K, K)
		default:
			q = s.row[:K:K]
			d.im.widen(q, cutU16(b.Q.BF16, t*b.Q.Stride+hk*K, K))
		}
		switch {
		case conv:
		case b.Key.F32 != nil:
			k = cutF32(b.Key.F32, t*b.Key.Stride+hk*K, K)
		default:
			k = s.row[K : 2*K : 2*K]
			d.im.widen(k, cutU16(b.Key.BF16, t*b.Key.Stride+hk*K, K))
		}
		qq, kk, qk := d.im.l2(q, k)
		rq := 1 / math.Sqrt(qq+l2Eps) * invSqrtK
		rk := 1 / math.Sqrt(kk+l2Eps)
		d.im.scale(s.qh[τ*K:(τ+1)*K:(τ+1)*K], q, float32(rq))
		d.im.scale(s.kh[τ*K:(τ+1)*K:(τ+1)*K], k, float32(rk))
		s.kq[τ] = float32(qk * rq * rk)
	}
}

// convRows sets u[τ·n + c], τ < c1 − c0, c < n, to the conv front's output of channel off + c at
// token c0 + τ of the sequence being run: impl.conv over a table of the T + W − 1 input rows
// those tokens read, each where it is — an f32 X row, or for the tokens whose W rows reach back
// before the sequence's first token an f32 row of its Read slot's conv state, in place (no copy:
// at decode they were 5 % of a call); a bf16 row widened into the window; zeros for Zero.
func (d *driver) convRows(u []float32, c0, c1, off, n int) {
	b, s := d.b, d.s
	if d.convTok { // computed for the whole token (c1 = c0 + 1)
		copy(u[:n], cutF32(s.u, off, n))
		return
	}
	W := b.ConvW
	R := W - 1
	T := c1 - c0
	if len(s.rows) < T+R {
		s.rows = make([][]float32, max(T+R, chunk+7))
	}
	if need := (T + R) * n; len(s.win) < need {
		s.win = make([]float32, max(need, (chunk+7)*max(b.K, b.V)))
	}
	rows := s.rows[:T+R]
	for r := range rows {
		rows[r] = d.convRow(s.win[r*n:(r+1)*n:(r+1)*n], c0-R+r, off)
	}
	d.im.conv(u, n, rows, b.ConvTaps[off:], b.channels(), b.ConvBias[off:off+n:off+n], W, T)
	clear(rows) // the table holds no caller's memory once the call returns
}

// convToken computes the conv outputs of token t, the one token of the sequence being run, for
// the channels its value heads read (runs, from convRuns: their v channels and the q and k
// channels of the k-heads they read) into s.u by channel, three runs of the conv piece over
// contiguous channels instead of one a head (decode: a piece call of 128 channels took 72 ns, of
// many 47 a 128, and the rows stream from memory), and sets d.convTok, so that convRows copies
// them from there.
func (d *driver) convToken(t int, runs [3][2]int) {
	s := d.s
	if C := d.b.channels(); len(s.u) < C {
		s.u = make([]float32, C)
	}
	for _, r := range runs {
		d.convRows(cutF32(s.u, r[0], r[1]), t, t+1, r[0], r[1])
	}
	d.convTok = true
}

// convRuns returns the channels the value heads [hlo, hhi) read, as three runs (first channel,
// count): the q and the k channels of the k-heads they read (tiled GQA: a range covering them),
// and their v channels; false when they read none.
func (d *driver) convRuns(hlo, hhi int) ([3][2]int, bool) {
	b := d.b
	K, V, HK := b.K, b.V, b.KHeads
	lo, hi := HK, 0
	for h := hlo; h < hhi; h++ {
		hk := h / (b.VHeads / HK)
		if b.GQATiled {
			hk = h % HK
		}
		lo, hi = min(lo, hk), max(hi, hk+1)
	}
	return [3][2]int{{lo * K, (hi - lo) * K}, {(HK + lo) * K, (hi - lo) * K}, {2*HK*K + hlo*V, (hhi - hlo) * V}}, lo < hi
}

// convRow returns channels [off, off+len(win)) of the conv front's input row t of the sequence
// being run, as float32: an X row from its first token d.t0 on, before it row R + t − t0 of the
// conv state of its Read slot (zeros for Zero); f32 rows in place, bf16 ones widened into win.
func (d *driver) convRow(win []float32, t, off int) []float32 {
	b := d.b
	n := len(win)
	if t >= d.t0 {
		if b.X.F32 != nil {
			return cutF32(b.X.F32, t*b.X.Stride+off, n)
		}
		d.im.widen(win, cutU16(b.X.BF16, t*b.X.Stride+off, n))
		return win
	}
	if d.read == readZero {
		if n <= len(d.s.zero32) {
			return d.s.zero32[:n:n]
		}
		clear(win)
		return win
	}
	p := &b.ConvState
	at := int(d.read)*p.SlotStride + (b.ConvW-1+t-d.t0)*b.channels() + off
	if p.F32 != nil {
		return cutF32(p.F32, at, n)
	}
	d.im.widen(win, cutU16(p.BF16, at, n))
	return win
}

// warmConv reads an element of each cache line of the conv state of slot read in the channels
// runs (from convRuns: those the item's value heads read; warm's purpose): the conv reads it a
// head's channels at a time, rows C elements apart, and from memory each such read waited for its
// lines in turn (decode at B = 64: 14 % of the call). Only their channels: with Workers 2 at B = 1
// each goroutine warmed the whole slot, and read the other core's half of the lines the last
// call's StoreConv wrote.
func (d *driver) warmConv(read int32, runs [3][2]int) {
	b, s := d.b, d.s
	p := &b.ConvState
	C := b.channels()
	n := (b.ConvW - 1) * C
	r := Rows{Stride: C}
	if p.F32 != nil {
		r.F32 = cutF32(p.F32, int(read)*p.SlotStride, n)
	} else {
		r.BF16 = cutU16(p.BF16, int(read)*p.SlotStride, n)
	}
	for _, run := range runs {
		s.sink ^= warm(&r, 0, b.ConvW-1, run[0], run[1])
	}
}

// StoreConv writes the conv states of b's stores (SPEC Part D; nothing without the conv front):
// the conv state after token t, the last W−1 rows up to t, to the conv pool of every store of
// token t — Store's, or the implied store of a sequence's last token to its Read slot. It must run
// after every item of b (RunBatch reads the conv states it overwrites). Like RunBatch, it panics
// before writing on a malformed Batch, and cuts every slot from the slices with bounds checks.
func (b *Batch) StoreConv() {
	if b.ConvW == 0 {
		return
	}
	b.check()
	dst, inPlace := &b.ConvStoreTo, false
	if dst.F32 == nil && dst.BF16 == nil {
		dst, inPlace = &b.ConvState, true
	}
	for n := range b.N {
		t0, t1 := b.tokens(n)
		read := b.read(n)
		if read == readPad || t0 == t1 {
			continue
		}
		last := -1 // the store to the Read slot in place: the last, its old rows read first
		for t := t0; t < t1; t++ {
			slot := noStore
			if b.Store != nil {
				slot = b.Store[t]
			} else if t == t1-1 {
				slot = read
			}
			switch {
			case slot < 0:
			case inPlace && slot == read:
				last = t
			default:
				b.convStore(dst, slot, t, t0, read)
			}
		}
		if last >= 0 {
			b.convStore(dst, read, last, t0, read)
		}
	}
}

// convStore writes the conv state after token t of a sequence starting at token t0 and reading
// slot read to slot of dst: row i is input row t − (W−2) + i, an X row from t0 on, else row
// W − 1 + (that − t0) of the read slot's conv state. When dst is the read slot itself, row i reads
// a later row of it (i + 1 + t − t0), not yet written.
func (b *Batch) convStore(dst *Pool, slot int32, t, t0 int, read int32) {
	C, R := b.channels(), b.ConvW-1
	base := int(slot) * dst.SlotStride
	for i := range R {
		r := t - R + 1 + i
		at := base + i*C
		switch {
		case r >= t0:
			copyRow(dst, at, b.X.F32, b.X.BF16, r*b.X.Stride, C)
		case read == readZero:
			if dst.F32 != nil {
				clear(cutF32(dst.F32, at, C))
			} else {
				clear(cutU16(dst.BF16, at, C))
			}
		default:
			p := &b.ConvState
			copyRow(dst, at, p.F32, p.BF16, int(read)*p.SlotStride+(R+r-t0)*C, C)
		}
	}
}

// copyRow copies n elements from element off of src (f32, else the bf16 bits s16) to element at
// of dst, converting: bf16 to f32 exactly, f32 to bf16 rounded to nearest even.
func copyRow(dst *Pool, at int, s32 []float32, s16 []uint16, off, n int) {
	switch {
	case dst.F32 != nil && s32 != nil:
		copy(cutF32(dst.F32, at, n), cutF32(s32, off, n))
	case dst.F32 != nil:
		widenGeneric(cutF32(dst.F32, at, n), cutU16(s16, off, n))
	case s32 != nil:
		d := cutU16(dst.BF16, at, n)
		for i, x := range cutF32(s32, off, n) {
			d[i] = BF16RNE(x)
		}
	default:
		copy(cutU16(dst.BF16, at, n), cutU16(s16, off, n))
	}
}

// rowAt returns element h of token t's row of r, widened.
func rowAt(r *Rows, t, h int) float32 {
	i := t*r.Stride + r.at(h)
	if r.F32 != nil {
		return cutF32(r.F32, i, 1)[0]
	}
	return math.Float32frombits(uint32(cutU16(r.BF16, i, 1)[0]) << 16)
}

// poolRef is head h of slot s of p (hs = K·V elements).
func poolRef(p *Pool, s, h, hs int) stateRef {
	off := s*p.SlotStride + h*hs
	if p.F32 != nil {
		return stateRef{f32: cutF32(p.F32, off, hs)}
	}
	return stateRef{bf16: cutU16(p.BF16, off, hs)}
}

// cutF32 is x[off : off+n] with length and capacity n, bounds-checked against len(x), not its
// capacity (the capacity is cut to the length first); cutU16 the same for []uint16. Not generic,
// so that they inline.
func cutF32(x []float32, off, n int) []float32 { return x[:len(x):len(x)][off : off+n : off+n] }

func cutU16(x []uint16, off, n int) []uint16 { return x[:len(x):len(x)][off : off+n : off+n] }
