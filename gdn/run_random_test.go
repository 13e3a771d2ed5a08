package gdn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

// The kernels kerneltest runs the tests for.
func init() {
	kerneltest.Use(gdnsimd.AllNames, func(name string) bool { _, ok := gdnsimd.Lookup(name); return ok })
}

// Helpers that run an oracle.BatchCase through Layer.Run in a chosen form (state layout and
// storage, row buffers, slot stride, workers) and read the pools back in the oracle's terms.

// rowForm is how a call's per-token inputs are laid out.
type rowForm struct {
	name   string
	bf16   bool // bf16 row buffers (the case's inputs must be bf16 values)
	pad    int  // elements between one row's end and the next row (stride = width + pad)
	packed bool // Q, K, V in one buffer with one stride (conv output), B and A in another
}

var rowForms = []rowForm{
	{name: "dense"},
	{name: "strided", pad: 3},
	{name: "packed", packed: true},
	{name: "bf16", bf16: true},
	{name: "bf16-packed-strided", bf16: true, packed: true, pad: 5},
}

// runSetup is the form of one Run of a case.
type runSetup struct {
	format  gdnsimd.Format
	rows    rowForm
	workers int
	slotPad int // elements between slots (SlotStride = VHeads·K·V + slotPad), filled with guards
}

// Guards: NaN payloads no kernel produces, in the gaps of row buffers and pools.
const (
	guardF32  = 0x7fa5a5a5
	guardBF16 = 0x7fa5
)

// forEachFormat runs f for every state format, skipping visibly the ones the kernel lacks.
func forEachFormat(t *testing.T, kernel string, f func(t *testing.T, format gdnsimd.Format)) {
	k, ok := gdnsimd.Lookup(kernel)
	require.True(t, ok, kernel)
	for _, format := range gdnsimd.Formats() {
		t.Run("format="+format.String(), func(t *testing.T) {
			if !k.Implements(format) {
				t.Skipf("kernel %s does not implement the state format %v", kernel, format)
			}
			f(t, format)
		})
	}
}

// batchLayer makes a Layer for a case in a state format.
func batchLayer(t testing.TB, c *oracle.BatchCase, kernel string, format gdnsimd.Format, workers int) *gdn.Layer {
	t.Helper()
	cfg := gdn.Config{
		KHeads: c.Dims.HK, VHeads: c.Dims.HV, K: c.Dims.K, V: c.Dims.V,
		ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight, RMSEps: float32(c.RMSEps),
		Workers: workers, Kernel: kernel, StateLayout: stateLayout(format),
	}
	if format.Storage != gdnsimd.StorageF32 {
		cfg.StateDType = gdn.DTypeBF16
	}
	if c.Tiled {
		cfg.GQA = gdn.GQATiled
	}
	gateConfig(&cfg, c)
	if c.Conv != nil {
		cfg.ConvWidth, cfg.ConvWeight, cfg.ConvBias = c.Conv.W, c.Conv.Weight, c.Conv.Bias
	}
	l, err := gdn.New(cfg)
	require.NoError(t, err)
	require.Equal(t, kernel, l.Kernel())
	return l
}

// gateConfig sets the gate of the case in cfg (SPEC Part C), and its rate as GGUF's ssm_a when
// the case has one.
func gateConfig(cfg *gdn.Config, c *oracle.BatchCase) {
	if c.PerChannel {
		cfg.Gate = gdn.GatePerChannel
	}
	if c.LowerBound < 0 {
		cfg.GateForm, cfg.LowerBound = gdn.GateLowerBound, float32(c.LowerBound)
	}
	if c.Sigmoid {
		cfg.OutGate = gdn.ActSigmoid
	}
	if c.SsmA != nil {
		cfg.ALog, cfg.SsmA = nil, c.SsmA
	}
}

// makePool lays out slots ([HV][K][V] each) in the format, slotPad guard elements after each.
func makePool(slots [][]float32, d oracle.BatchDims, f gdnsimd.Format, slotPad int) gdn.Pool {
	sl := d.SlotLen()
	stride := sl + slotPad
	p := gdn.Pool{SlotStride: stride}
	if slotPad == 0 && len(slots)%2 == 0 {
		p.SlotStride = 0 // dense
	}
	n := len(slots) * stride
	f32 := make([]float32, n)
	for i := range f32 {
		f32[i] = math.Float32frombits(guardF32)
	}
	for s, slot := range slots {
		if f.VK {
			slot = oracle.TransposeSlot(slot, d.HV, d.K, d.V)
		}
		copy(f32[s*stride:], slot)
	}
	if f.Storage == gdnsimd.StorageF32 {
		p.F32 = f32
		return p
	}
	p.BF16 = make([]gdn.BF16, n)
	for i, x := range f32 {
		p.BF16[i] = guardBF16
		if i%stride < sl {
			p.BF16[i] = gdn.BF16(oracle.BF16(float64(x)))
			if float64(p.BF16[i].Float32()) != float64(x) {
				panic(fmt.Sprintf("makePool: state value %g is not a bf16", x))
			}
		}
	}
	return p
}

// readPool returns the slots of p in the [K][V] order (bf16 widened) and checks the guards
// between them.
func readPool(t testing.TB, name string, p gdn.Pool, nslots int, d oracle.BatchDims, f gdnsimd.Format) [][]float32 {
	t.Helper()
	sl := d.SlotLen()
	stride := p.SlotStride
	if stride == 0 {
		stride = sl
	}
	slots := make([][]float32, nslots)
	for s := range slots {
		slot := make([]float32, sl)
		for i := range stride {
			e := s*stride + i
			if p.F32 != nil {
				if i >= sl {
					require.Equal(t, uint32(guardF32), math.Float32bits(p.F32[e]), "%s: guard after slot %d [%d] overwritten", name, s, i-sl)
					continue
				}
				slot[i] = p.F32[e]
			} else {
				if i >= sl {
					require.Equal(t, gdn.BF16(guardBF16), p.BF16[e], "%s: guard after slot %d [%d] overwritten", name, s, i-sl)
					continue
				}
				slot[i] = p.BF16[e].Float32()
			}
		}
		if f.VK {
			slot = oracle.TransposeSlot(slot, d.HV, d.V, d.K) // [V][K] back to [K][V]
		}
		slots[s] = slot
	}
	return slots
}

// rowsOf lays out the case's inputs in the row form (X, the pre-conv rows, with the conv front;
// else Q, K, V).
func rowsOf(c *oracle.BatchCase, rf rowForm) (q, k, v, z, b, a, x gdn.Rows) {
	d, T := c.Dims, c.Tokens()
	if T == 0 {
		return
	}
	wk, wv, wh := d.HK*d.K, d.HV*d.V, d.HV
	wa := wh // A's width
	if c.PerChannel {
		wa = d.HV * d.K
	}
	// field: data, width, buffer index, offset in the row.
	type field struct {
		data       []float32
		width, buf int
		off        int
	}
	fs := []field{{c.In.Q, wk, 0, 0}, {c.In.K, wk, 1, 0}, {c.In.V, wv, 2, 0}, {c.In.Z, wv, 3, 0}, {c.In.B, wh, 4, 0}, {c.In.A, wa, 5, 0}, {c.In.X, d.Channels(), 6, 0}}
	if c.Conv == nil {
		fs = fs[:6]
	} else {
		fs[0].width, fs[1].width, fs[2].width = 0, 0, 0 // no Q, K, V
	}
	if rf.packed {
		fs[1].buf, fs[1].off = 0, wk
		fs[2].buf, fs[2].off = 0, 2*wk
		fs[5].buf, fs[5].off = 4, wh
		if c.Conv != nil { // z after the pre-conv row, as one projection's output
			fs[3].buf, fs[3].off = 6, d.Channels()
		}
	}
	widths := map[int]int{}
	for _, f := range fs {
		widths[f.buf] = max(widths[f.buf], f.off+f.width)
	}
	bufs := map[int][]float32{}
	for i, w := range widths {
		buf := make([]float32, (T-1)*(w+rf.pad)+w) // exactly as long as the last row needs
		for j := range buf {
			buf[j] = math.Float32frombits(guardF32)
		}
		bufs[i] = buf
	}
	bf := map[int][]gdn.BF16{}
	if rf.bf16 {
		for i, buf := range bufs {
			bf[i] = toBF16(buf)
		}
	}
	var rows [7]gdn.Rows
	for i, f := range fs {
		if f.width == 0 {
			continue
		}
		stride := widths[f.buf] + rf.pad
		buf := bufs[f.buf]
		for t := range T {
			copy(buf[t*stride+f.off:], f.data[t*f.width:(t+1)*f.width])
		}
		if rf.bf16 {
			for t := range T {
				for j := range f.width {
					bf[f.buf][t*stride+f.off+j] = bf16Exact(f.data[t*f.width+j])
				}
			}
		}
		r := gdn.Rows{Stride: stride}
		if !rf.packed && rf.pad == 0 && i%2 == 0 {
			r.Stride = 0 // dense
		}
		if rf.bf16 {
			r.BF16 = bf[f.buf][f.off:]
		} else {
			r.F32 = buf[f.off:]
		}
		rows[i] = r
	}
	return rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6]
}

// toBF16 converts a buffer of guards (and bf16 values) to bf16, exactly.
func toBF16(x []float32) []gdn.BF16 {
	o := make([]gdn.BF16, len(x))
	for i, v := range x {
		if math.Float32bits(v) == guardF32 {
			o[i] = guardBF16
			continue
		}
		o[i] = bf16Exact(v)
	}
	return o
}

// bf16Exact is v as a bf16; v must be one.
func bf16Exact(v float32) gdn.BF16 {
	b := gdn.BF16(oracle.BF16(float64(v)))
	if b.Float32() != v {
		panic(fmt.Sprintf("%g is not a bf16", v))
	}
	return b
}

// runBatch runs the case through l in the setup's form and returns the results in the oracle's
// terms (outputs, both pools after the call).
func runBatch(t testing.TB, l *gdn.Layer, c *oracle.BatchCase, s runSetup) oracle.BatchGot {
	t.Helper()
	d := c.Dims
	b := caseBatch(c, s)
	require.NoError(t, l.Run(&b))
	g := oracle.BatchGot{Out: make([]uint16, len(b.Out)), OutF32: b.OutF32, State: readPool(t, "State", b.State, len(c.State), d, s.format)}
	for i, o := range b.Out {
		g.Out[i] = uint16(o)
	}
	if c.StoreTo != nil {
		g.StoreTo = readPool(t, "StoreTo", *b.StoreTo, len(c.StoreTo), d, s.format)
	}
	if c.Conv != nil {
		size := (c.Conv.W - 1) * d.Channels()
		g.ConvState = readConvPool(t, "ConvState", b.ConvState, len(c.Conv.State), size)
		if c.Conv.StoreTo != nil {
			g.ConvStoreTo = readConvPool(t, "ConvStoreTo", *b.ConvStoreTo, len(c.Conv.StoreTo), size)
		}
	}
	return g
}

// caseBatch lays out the case in the setup's form: its rows, pools and outputs (filled with
// values the call must overwrite).
func caseBatch(c *oracle.BatchCase, s runSetup) gdn.Batch {
	d, T := c.Dims, c.Tokens()
	b := gdn.Batch{Start: c.Start, Read: c.Read, Store: c.Store}
	b.Q, b.K, b.V, b.Z, b.B, b.A, b.X = rowsOf(c, s.rows)
	b.State = makePool(c.State, d, s.format, s.slotPad)
	if c.StoreTo != nil {
		p := makePool(c.StoreTo, d, s.format, s.slotPad)
		b.StoreTo = &p
	}
	if c.Conv != nil {
		b.ConvState = makeConvPool(c.Conv.State, c.Conv.BF16, s.slotPad)
		if c.Conv.StoreTo != nil {
			p := makeConvPool(c.Conv.StoreTo, c.Conv.BF16, s.slotPad)
			b.ConvStoreTo = &p
		}
	}
	n := T * d.HV * d.V
	b.Out, b.OutF32 = make([]gdn.BF16, n), make([]float32, n)
	for i := range n {
		b.Out[i], b.OutF32[i] = 0xffff, float32(math.NaN()) // padding must overwrite them with +0
	}
	return b
}

// makeConvPool lays out conv slots ([W−1][C] each) as f32 or bf16, slotPad guard elements after
// each (the slots' values must be bf16 values for a bf16 pool).
func makeConvPool(slots [][]float32, bf16 bool, slotPad int) gdn.Pool {
	size := 0
	if len(slots) > 0 {
		size = len(slots[0])
	}
	stride := size + slotPad
	p := gdn.Pool{SlotStride: stride}
	if slotPad == 0 && len(slots)%2 == 1 {
		p.SlotStride = 0 // dense
	}
	f32 := make([]float32, len(slots)*stride)
	for i := range f32 {
		f32[i] = math.Float32frombits(guardF32)
	}
	for s, slot := range slots {
		copy(f32[s*stride:], slot)
	}
	if bf16 {
		p.BF16 = toBF16(f32)
	} else {
		p.F32 = f32
	}
	return p
}

// readConvPool returns the conv slots of p (bf16 widened) and checks the guards between them.
func readConvPool(t testing.TB, name string, p gdn.Pool, nslots, size int) [][]float32 {
	t.Helper()
	stride := p.SlotStride
	if stride == 0 {
		stride = size
	}
	slots := make([][]float32, nslots)
	for s := range slots {
		slots[s] = make([]float32, size)
		for i := range stride {
			e := s*stride + i
			var x float32
			if p.F32 != nil {
				x = p.F32[e]
			} else {
				x = p.BF16[e].Float32()
			}
			if i >= size {
				guard := uint32(guardF32)
				if p.BF16 != nil {
					guard = guardBF16 << 16
				}
				require.Equal(t, guard, math.Float32bits(x), "%s: guard after slot %d [%d] overwritten", name, s, i-size)
				continue
			}
			slots[s][i] = x
		}
	}
	return slots
}

// sameGot reports whether two results are bit-identical.
func sameGot(a, b oracle.BatchGot) bool {
	if !slices.Equal(a.Out, b.Out) || !slices.Equal(f32bits(a.OutF32), f32bits(b.OutF32)) {
		return false
	}
	for _, p := range [][2][][]float32{{a.State, b.State}, {a.StoreTo, b.StoreTo}} {
		if len(p[0]) != len(p[1]) {
			return false
		}
		for s := range p[0] {
			if !slices.Equal(f32bits(p[0][s]), f32bits(p[1][s])) {
				return false
			}
		}
	}
	return true
}

// A random batch scenario: the shape of a call (sequences, tokens, slots), filled with random
// realistic values by randomBatch.
type scenario struct {
	name string
	// build sets Start, Read, Store, the number of slots of State and StoreTo (0: none), given
	// the dims; warm says how many warm-up tokens make each initial state.
	build func(r *rand.Rand, c *oracle.BatchCase) (slots, storeTo int)
	small bool // keep K, V small (long sequences)
}

// starts returns the Start array of sequences of the given lengths.
func starts(lens ...int) []int32 {
	s := []int32{0}
	for _, n := range lens {
		s = append(s, s[len(s)-1]+int32(n))
	}
	return s
}

// noStores is a Store of T NoStores.
func noStores(T int) []int32 {
	s := make([]int32, T)
	for i := range s {
		s[i] = gdn.NoStore
	}
	return s
}

var scenarios = []scenario{
	{name: "varlen-inplace", build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// Sequences of 0..9 tokens, reading (and writing back to) permuted slots; slot 6 unused.
		c.Start = starts(3, 0, 1, 9, 2, 5)
		perm := r.Perm(7)
		c.Read = []int32{int32(perm[0]), int32(perm[1]), int32(perm[2]), int32(perm[3]), int32(perm[4]), int32(perm[5])}
		return 7, 0
	}},
	{name: "decode-pad", build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// Continuous-batching decode: one token per sequence, in place, one padding row.
		c.Start = starts(1, 1, 1, 1, 1, 1, 1)
		c.Read = []int32{4, 0, gdn.Pad, 2, 1, 5, 3}
		return 6, 0
	}},
	{name: "pad-zero-stores", build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// Pad with tokens, Zero (a fresh prompt) storing after tokens 1 and 3, an empty padding
		// sequence, a cached prefix writing back to its own slot, an empty Zero sequence.
		c.Start = starts(2, 4, 0, 3, 0)
		c.Read = []int32{gdn.Pad, gdn.Zero, gdn.Pad, 0, gdn.Zero}
		c.Store = noStores(9)
		c.Store[3], c.Store[5] = 2, 1 // Zero's tokens 1 and 3
		c.Store[8] = 0                // the prefix's last token, back to its read slot
		return 4, 0
	}},
	{name: "snapshots-out-of-place", build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// Speculative verification: every token's state to its own slot of a second pool (permuted),
		// one token not kept; two sequences fork from slot 1, which nobody writes.
		c.Start = starts(4, 1, 6, 2)
		c.Read = []int32{1, 0, 1, gdn.Zero}
		T := 13
		perm := r.Perm(T + 2)
		c.Store = make([]int32, T)
		for t := range T {
			c.Store[t] = int32(perm[t])
		}
		c.Store[6] = gdn.NoStore
		return 3, T + 2
	}},
	{name: "snapshots-in-place", build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// Per-token stores in the same pool: to fresh slots, and the last token of sequence 1 to
		// its own read slot.
		c.Start = starts(3, 5)
		c.Read = []int32{0, 1}
		c.Store = []int32{2, 3, 4, 5, 6, gdn.NoStore, 7, 1}
		return 9, 0
	}},
	{name: "early-own-store", build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// A sequence storing to its own read slot after its first token, then snapshots after
		// the next ones (whose conv states still hold rows of the slot's old conv state).
		c.Start = starts(3, 2)
		c.Read = []int32{0, 1}
		c.Store = []int32{0, 2, 3, gdn.NoStore, 4}
		return 5, 0
	}},
	{name: "long-inplace", small: true, build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// More tokens than one chunk (64): the state is carried across chunk boundaries.
		c.Start = starts(130, 65, 2)
		c.Read = []int32{1, 2, 0}
		return 3, 0
	}},
	{name: "long-snapshots", small: true, build: func(r *rand.Rand, c *oracle.BatchCase) (int, int) {
		// Stores around the chunk boundaries (tokens 63, 64, 127, 128) and none at others.
		c.Start = starts(140, 70)
		c.Read = []int32{0, gdn.Zero}
		c.Store = noStores(210)
		for i, t := range []int{0, 62, 63, 64, 65, 127, 128, 139, 140 + 63, 140 + 69} {
			c.Store[t] = int32(i)
		}
		return 1, 10
	}},
}

// sizes are the K and V the random batches draw from (odd ones and the vector widths' tails).
var sizes = []int{1, 3, 17, 33, 64, 80, 128}

// randomBatch makes scenario i's case with realistic values (bf16 states for bf16 pools; bf16
// inputs for the bf16 row forms) and its float64 expectation.
func randomBatch(t testing.TB, i int, bf16State bool) (*oracle.BatchCase, oracle.BatchWant, rowForm) {
	return randomGateBatch(t, i, bf16State, -1)
}

// randomGateBatch is randomBatch with the per-channel gate of oracle.RandomGate's kind gate (< 0:
// the scalar gate).
func randomGateBatch(t testing.TB, i int, bf16State bool, gate int) (*oracle.BatchCase, oracle.BatchWant, rowForm) {
	return randomCase(t, i, bf16State, gate, false)
}

// randomCase is randomGateBatch, with the conv front (SPEC Part D: widths 2 to 4, with and
// without a bias, f32 and bf16 conv pools) when conv is set.
func randomCase(t testing.TB, i int, bf16State bool, gate int, conv bool) (*oracle.BatchCase, oracle.BatchWant, rowForm) {
	sc := scenarios[i%len(scenarios)]
	r := rand.New(rand.NewPCG(uint64(i), 77))
	d := oracle.BatchDims{HK: 1 + r.IntN(3), K: sizes[r.IntN(len(sizes))], V: sizes[r.IntN(len(sizes))]}
	d.HV = d.HK * (1 + r.IntN(3))
	if sc.small {
		d = oracle.BatchDims{HK: 2, HV: 4, K: sizes[1+r.IntN(3)], V: sizes[1+r.IntN(3)]}
	}
	c := &oracle.BatchCase{Name: fmt.Sprintf("%s/K=%d,V=%d,HK=%d,HV=%d", sc.name, d.K, d.V, d.HK, d.HV), Dims: d, Tiled: i%2 == 1, BF16: bf16State, Random: true}
	if i%3 == 2 {
		c.RMSEps = 1e-5
	}
	oracle.RandomLayer(r, c)
	if gate >= 0 {
		oracle.RandomGate(r, c, gate)
		c.Name += []string{"/gate=kda", "/gate=kda-sigmoid", "/gate=kda-lb5-sigmoid", "/gate=kda-lb3-ssma", "/gate=ssma"}[gate]
	}
	slots, storeTo := sc.build(r, c)
	c.In = oracle.RandomTokensOf(r, c, c.Tokens())
	rf := rowForms[i%len(rowForms)]
	if rf.bf16 {
		for _, x := range [][]float32{c.In.Q, c.In.K, c.In.V, c.In.Z, c.In.B, c.In.A} {
			oracle.RoundBF16(x)
		}
	}
	c.State = oracle.WarmStates(r, c, slots, 3+r.IntN(5), bf16State)
	if storeTo > 0 {
		c.StoreTo = oracle.WarmStates(r, c, storeTo, 0, bf16State) // zero slots
		for s := range c.StoreTo {
			for j := range c.StoreTo[s] {
				c.StoreTo[s][j] = float32(s + 1) // distinct from every state, easy to spot
			}
		}
	}
	if conv {
		W := []int{2, 4, 3, 4}[i%4]
		oracle.RandomConv(r, c, W, i%2 == 0, i%4 >= 2)
		if rf.bf16 {
			oracle.RoundBF16(c.In.X)
		}
		c.Name += fmt.Sprintf("/conv=W%d,bias=%v,bf16=%v", W, i%2 == 0, i%4 >= 2)
	}
	want, err := oracle.RunBatch(c)
	require.NoError(t, err)
	c.Name += "/rows=" + rf.name
	if c.Tiled {
		c.Name += "/gqa=tiled"
	}
	return c, want, rf
}

// TestRunRandom runs random batches of every scenario (varlen with empty sequences, Pad, Zero,
// per-token snapshots in place and out of place, forks, sequences longer than a chunk), each also
// with the per-channel gate (every form, sigmoid and silu, A_log and ssm_a) or the scalar gate from
// ssm_a, and with the conv front (widths 2–4, with and without a bias, f32 and bf16 conv pools),
// in random shapes (K, V in 1..128 with odd sizes, HK ≠ HV, both GQA orders, both RMSNorm epsilons) and row
// forms (dense, strided, packed, bf16) through every kernel and state format, Workers 1 and 3,
// against the float64 batch oracle with SPEC's bounds; both worker counts must give the same bits.
func TestRunRandom(t *testing.T) {
	n := 2 * len(scenarios)
	if testing.Short() {
		n = len(scenarios)
	}
	type prepared struct {
		c    *oracle.BatchCase
		want oracle.BatchWant
		rf   rowForm
	}
	cases := map[bool][]prepared{}
	for _, bf := range []bool{false, true} {
		for i := range n {
			c, w, rf := randomBatch(t, i, bf)
			cases[bf] = append(cases[bf], prepared{c, w, rf})
		}
		// The per-channel gate (SPEC Part C) in every scenario, its four kinds and the scalar gate
		// from ssm_a in turn.
		for i := range len(scenarios) {
			c, w, rf := randomGateBatch(t, 100+i, bf, i%5)
			cases[bf] = append(cases[bf], prepared{c, w, rf})
		}
		// The conv front (SPEC Part D) in every scenario, with the scalar gate and with the
		// per-channel gate in turn.
		for i := range len(scenarios) {
			c, w, rf := randomCase(t, 200+i, bf, []int{-1, 2}[i%2], true)
			cases[bf] = append(cases[bf], prepared{c, w, rf})
		}
	}
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		forEachFormat(t, kernel, func(t *testing.T, format gdnsimd.Format) {
			for i, p := range cases[format.Storage != gdnsimd.StorageF32] {
				t.Run(p.c.Name, func(t *testing.T) {
					var first oracle.BatchGot
					for j, workers := range []int{1, 3} {
						s := runSetup{format: format, rows: p.rf, workers: workers, slotPad: (i % 3) * 7}
						got := runBatch(t, batchLayer(t, p.c, kernel, format, workers), p.c, s)
						require.NoError(t, oracle.CheckBatch(p.c, &p.want, got), "workers=%d", workers)
						if j == 0 {
							first = got
						} else {
							require.True(t, sameGot(first, got), "workers=%d: bits differ from workers=1", workers)
						}
					}
				})
			}
		})
	})
}

// TestRunBF16StoreTies: a bf16 pool stores the state rounded to nearest even at exact ties. The
// state after one token from Zero with k = (2^20, 0, …) (k̂ = e₀ exactly, in float32 and float64)
// and b = 50 (beta = 1 exactly) is S[0][j] = v_j exactly, S[i>0][j] = 0; v_j are float32 values
// halfway between two bf16 with an even lower neighbour, so round-half-up would store the upper
// one. Every format with bf16 storage, against the batch oracle (which must find them all exact).
func TestRunBF16StoreTies(t *testing.T) {
	d := oracle.BatchDims{HK: 1, HV: 2, K: 2, V: 64}
	r := rand.New(rand.NewPCG(5, 5))
	c := &oracle.BatchCase{Name: "ties", Dims: d, BF16: true}
	oracle.RandomLayer(r, c)
	c.Start, c.Read, c.Store = []int32{0, 1}, []int32{gdn.Zero}, []int32{0}
	c.In = oracle.RandomTokens(r, d, 1)
	c.In.K[0], c.In.K[1] = 1<<20, 0
	for h := range d.HV {
		c.In.B[h] = 50
	}
	for j := range c.In.V {
		bits := uint32(0x3f00+2*r.IntN(0x100))<<16 | 0x8000 // even bf16 mantissa, then exactly half an ulp
		if j%2 == 1 {
			bits |= 1 << 31
		}
		c.In.V[j] = math.Float32frombits(bits)
	}
	c.State = oracle.WarmStates(r, c, 1, 0, true)
	want, err := oracle.RunBatch(c)
	require.NoError(t, err)
	for h := range d.HV {
		for j := range d.V {
			require.Equal(t, float64(c.In.V[h*d.V+j]), want.Stored[0][h*d.K*d.V+j], "the float64 state is v exactly")
		}
	}
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		forEachFormat(t, kernel, func(t *testing.T, format gdnsimd.Format) {
			if format.Storage == gdnsimd.StorageF32 {
				t.Skip("f32 storage: no rounding")
			}
			got := runBatch(t, batchLayer(t, c, kernel, format, 1), c, runSetup{format: format, rows: rowForms[0], workers: 1})
			for h := range d.HV {
				for j := range d.V {
					v := c.In.V[h*d.V+j]
					require.Equal(t, oracle.BF16(float64(v)), uint16(math.Float32bits(got.State[0][h*d.K*d.V+j])>>16),
						"head %d column %d: v = %g (0x%08x) stored", h, j, v, math.Float32bits(v))
				}
			}
			require.NoError(t, oracle.CheckBatch(c, &want, got))
		})
	})
}

// stateLayout is f's layout as a gdn.Config names it.
func stateLayout(f gdnsimd.Format) gdn.StateLayout {
	if f.VK {
		return gdn.LayoutVK
	}
	return gdn.LayoutKV
}

// TestPerChannelScalarGate: a per-channel gate whose channels all carry their head's gate (g[t][h][i]
// = a[t][h], dt_bias[h][i] = dt_bias[h]) gives Part A's results: every kernel and format, random
// batches of every scenario, held to SPEC's bounds against the scalar gate's float64 oracle.
func TestPerChannelScalarGate(t *testing.T) {
	type prepared struct {
		c, pc *oracle.BatchCase
		want  oracle.BatchWant
		rf    rowForm
	}
	cases := map[bool][]prepared{}
	for _, bf := range []bool{false, true} {
		for i := range scenarios {
			c, w, rf := randomBatch(t, 200+i, bf)
			pc := *c
			d := c.Dims
			pc.PerChannel, pc.DtBias, pc.In.A = true, nil, nil
			for h := range d.HV {
				for range d.K {
					pc.DtBias = append(pc.DtBias, c.DtBias[h])
				}
			}
			for _, a := range c.In.A {
				for range d.K {
					pc.In.A = append(pc.In.A, a)
				}
			}
			cases[bf] = append(cases[bf], prepared{c, &pc, w, rf})
		}
	}
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		forEachFormat(t, kernel, func(t *testing.T, format gdnsimd.Format) {
			for _, p := range cases[format.Storage != gdnsimd.StorageF32] {
				t.Run(p.c.Name, func(t *testing.T) {
					s := runSetup{format: format, rows: p.rf, workers: 1}
					got := runBatch(t, batchLayer(t, p.pc, kernel, format, 1), p.pc, s)
					require.NoError(t, oracle.CheckBatch(p.c, &p.want, got))
				})
			}
		})
	})
}
