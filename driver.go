package gdnsimd

import (
	"fmt"
	"unsafe"
)

// chunk is the most tokens the driver hands a state routine at once: the per-token rows of a
// chunk (k̂, q̂, v, o: 128 KiB at K = V = 128) stay in L2 while the routine sweeps the state.
const chunk = 64

// groupMax is the most value heads of one GQA group the driver advances together through a
// sequence longer than a chunk (each keeps its own K·V f32 carry between chunks, 64 KiB at
// K = V = 128); they share the k̂, q̂ and k̂·q̂ of each chunk, prepared once. Qwen3-Next groups 2
// value heads per k-head, Qwen3.5 3.
const groupMax = 4

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
	if k.im == nil {
		panic("gdnsimd: RunBatch on the zero Kernel (use Kernels or Lookup)")
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
	b.check()
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
}

// seq is the sequence being run (driver.sequence): its tokens, its Read slot, and what was
// computed once for all its value heads in range.
type seq struct {
	t0, t1 int
	read   int32
	// oneTok: one token; its gates for the value heads from hlo are in s.lane(3…5) (heads).
	oneTok bool
	hlo    int
	// convTok: one token, its conv outputs in s.u (convToken).
	convTok bool
}

// groupCall is the g value heads h0 + j·step, j < g, of k-head hk (g = 0: none).
type groupCall struct{ hk, h0, step, g int }

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
	sq := seq{t0: t0, t1: t1, read: read, oneTok: t1-t0 == 1, hlo: hlo}
	var runs [3][2]int // the conv channels the heads read (convRuns)
	conv := false
	if b.ConvW != 0 {
		runs, conv = d.convRuns(hlo, hhi)
	}
	if conv && read >= 0 {
		d.warmConv(read, runs)
	}
	if sq.oneTok {
		d.heads(t0, hlo, hhi)
	}
	if sq.oneTok && conv {
		d.convToken(&sq, runs)
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
	var prev groupCall
	for hk := range HK {
		base = hk * G
		if b.GQATiled {
			base = hk
		}
		jlo := min(G, (max(0, hlo-base)+step-1)/step)
		jhi := min(G, (max(0, hhi-base)+step-1)/step)
		for j := jlo; j < jhi; j += per {
			c := groupCall{hk, base + j*step, step, min(per, jhi-j)}
			if prev.g > 0 {
				d.group(&sq, prev, c)
			}
			prev = c
		}
	}
	if prev.g > 0 {
		d.group(&sq, prev, groupCall{})
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

// group runs the heads of gc over the tokens of sq: chunk by chunk, each chunk's k̂, q̂ and k̂·q̂
// prepared once and then every head's state advanced through it. Over more than one chunk
// (gc.g ≤ groupMax then) head j carries its state from one chunk to the next in carry j. next is
// the group run after it (for the prefetches; g = 0: none).
func (d *driver) group(sq *seq, gc, next groupCall) {
	b, s := d.b, d.s
	hs := b.K * b.V
	t0, t1 := sq.t0, sq.t1
	if t1-t0 == 1 && d.single {
		d.prepareQK(sq, t0, t1, gc.hk)
		for j := range gc.g {
			d.token(sq, gc.h0+j*gc.step)
		}
		return
	}
	var src [groupMax]stateRef // over more than one chunk: head j's state before the chunk
	if t1-t0 <= chunk {
		d.prepareQK(sq, t0, t1, gc.hk)
		for j := range gc.g {
			h := gc.h0 + j*gc.step
			var nx stateRef
			if j+1 < gc.g {
				nx = d.readRef(sq.read, h+gc.step)
			}
			d.aheadOf(sq, gc, next, j, t0, t1, nx)
			d.chunk(sq, h, t0, t1, d.readRef(sq.read, h), nil)
		}
		return
	}
	for j := range gc.g {
		src[j] = d.readRef(sq.read, gc.h0+j*gc.step)
	}
	if len(s.carry) < gc.g*hs {
		s.carry = make([]float32, min(groupMax, b.VHeads/b.KHeads)*hs) // the most any group of b needs
	}
	for c0 := t0; c0 < t1; c0 += chunk {
		c1 := min(t1, c0+chunk)
		d.prepareQK(sq, c0, c1, gc.hk)
		for j := range gc.g {
			var carry []float32
			if c1 < t1 {
				carry = s.carry[j*hs : (j+1)*hs : (j+1)*hs]
			}
			var nx stateRef
			if j+1 < gc.g {
				nx = src[j+1]
			}
			d.aheadOf(sq, gc, next, j, c0, c1, nx)
			src[j] = d.chunk(sq, gc.h0+j*gc.step, c0, c1, src[j], carry)
		}
	}
}

// aheadOf sets the prefetches of the call after head j's call over [c0, c1) in group: head j+1's
// over the same tokens (nx: the state it reads first), else head 0's over the next chunk (with
// its q and k), else the next group's first head over the first chunk (a carry, in the caches
// already, is not listed).
func (d *driver) aheadOf(sq *seq, gc, next groupCall, j, c0, c1 int, nx stateRef) {
	switch t0, t1 := sq.t0, sq.t1; {
	case j+1 < gc.g:
		d.ahead(gc.h0+(j+1)*gc.step, c0, c1, gc.hk, false, nx)
	case c1 < t1:
		d.ahead(gc.h0, c1, min(t1, c1+chunk), gc.hk, true, stateRef{})
	case next.g > 0:
		d.ahead(next.h0, t0, min(t1, t0+chunk), next.hk, true, d.readRef(sq.read, next.h0))
	default:
		d.s.hc.pf, d.s.hc.nx = d.s.hc.pf[:0], stateRef{}
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

// readRef is the state value head h of a sequence reading slot read starts from (none: Zero).
func (d *driver) readRef(read int32, h int) stateRef {
	if read == readZero {
		return stateRef{}
	}
	return poolRef(&d.b.State, int(read), h, d.b.K*d.b.V)
}

// chunk advances value head h through the tokens [c0, c1) of sq, from the state src, with the
// chunk's k̂, q̂ and k̂·q̂ prepared, and writes the tokens' outputs. It returns the state after
// c1−1 for the next chunk: where the chunk stored it in f32, else carry (not nil when c1 < t1).
func (d *driver) chunk(sq *seq, h, c0, c1 int, src stateRef, carry []float32) stateRef {
	b, s := d.b, d.s
	t1, read := sq.t1, sq.read
	K, V := b.K, b.V
	hs := K * V
	T := c1 - c0
	dstPool := &b.State
	if b.StoreTo.F32 != nil || b.StoreTo.BF16 != nil {
		dstPool = &b.StoreTo
	}
	beta, em1, eg := d.gates(sq, h, c0, c1)
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
		d.convRows(sq, v, c0, c1, 2*b.KHeads*K+h*V, V)
	} else if b.Val.F32 != nil {
		vs = b.Val.Stride
		v = cutF32(b.Val.F32, c0*vs+h*V, (T-1)*vs+V)
	} else {
		v = s.v[:T*V]
		for τ := range T {
			d.im.row(&b.Val, c0+τ, h*V, V, v[τ*V:])
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

// gate writes token t's outputs of v-head h: the gated RMSNorm of o with the token's z.
func (d *driver) gate(t, h int, o []float32) {
	b, s := d.b, d.s
	V, HV := b.V, b.VHeads
	z := d.im.row(&b.Z, t, h*V, V, s.z)
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
// head h, with the token's k̂, q̂ and k̂·q̂ prepared: the single-token state piece on the pool's
// memory directly, without the head call of the routines over T tokens. Every kernel's routine
// over T tokens computes each token as its single-token piece does, so the bits are the same
// either way (gdn's equivalence tests hold them to it).
func (d *driver) token(sq *seq, h int) {
	b, s := d.b, d.s
	K, V := b.K, b.V
	hs := K * V
	t, read := sq.t0, sq.read
	gb, gm, ge := d.gates(sq, h, t, t+1)
	beta, em1, eg := gb[0], gm[0], ge[0]
	var v []float32
	if b.ConvW != 0 {
		v = s.v[:V:V]
		d.convRows(sq, v, t, t+1, 2*b.KHeads*K+h*V, V)
	} else {
		v = d.im.row(&b.Val, t, h*V, V, s.v)
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
