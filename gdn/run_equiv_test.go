package gdn_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/stretchr/testify/require"
)

// SPEC Part B's exact equivalences, bit for bit, per kernel × format, on one shape (K = 24,
// V = 20, 2 k-heads, 4 v-heads; the tiled GQA order for the [V][K] formats) and two batches: one
// with explicit stores (Zero, Pad, a 0-token sequence reading a slot another writes, forks of a
// slot nobody writes, snapshots every 16 tokens — one at token 63, the end of the driver's first
// 64-token chunk —, a sequence writing its own read slot, scoring with NoStore only) and one with
// Store nil (in-place decode and prefill). Both have sequences of 65 and 70 tokens.

func equivConfig(kernel string, rf runFormat, workers int) gdn.Config {
	r := rand.New(rand.NewPCG(5, 6))
	c := gdn.Config{
		KHeads: 2, VHeads: 4, K: 24, V: 20, Kernel: kernel, Workers: workers,
		StateLayout: rf.layout, StateDType: rf.dtype,
		ALog: make([]float32, 4), DtBias: make([]float32, 4), NormWeight: make([]float32, 20),
	}
	for i := range c.ALog {
		c.ALog[i], c.DtBias[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	for i := range c.NormWeight {
		c.NormWeight[i] = float32(1 + 0.2*r.NormFloat64())
	}
	if rf.layout == gdn.LayoutVK {
		c.GQA = gdn.GQATiled
	}
	if rf.conv {
		// The conv front: Qwen3-Next's width, a bias (the models have none; fla's ShortConvolution
		// can).
		C := 2*c.KHeads*c.K + c.VHeads*c.V
		c.ConvWidth, c.ConvWeight, c.ConvBias = 4, make([]float32, 4*C), make([]float32, C)
		for i := range c.ConvWeight {
			c.ConvWeight[i] = float32(0.4 * r.NormFloat64())
		}
		for i := range c.ConvBias {
			c.ConvBias[i] = float32(0.1 * r.NormFloat64())
		}
	}
	if rf.kda {
		// Kimi-Linear's gate: per channel, the lower-bound form, the sigmoid output gate.
		c.Gate, c.GateForm, c.LowerBound, c.OutGate = gdn.GatePerChannel, gdn.GateLowerBound, -5, gdn.ActSigmoid
		c.DtBias = make([]float32, 4*c.K)
		for i := range c.DtBias {
			c.DtBias[i] = float32(r.NormFloat64())
		}
	}
	return c
}

// gateW is the width of c's A rows: VHeads, VHeads·K with the per-channel gate.
func gateW(c gdn.Config) int {
	if c.Gate == gdn.GatePerChannel {
		return c.VHeads * c.K
	}
	return c.VHeads
}

type namedSpec struct {
	name string
	s    runSpec
}

func equivSpecs() []namedSpec {
	lens := []int{3, 0, 70, 1, 12, 5, 65, 2}
	var store []int32
	add := func(v ...int32) { store = append(store, v...) }
	none := func(n int) {
		for range n {
			add(gdn.NoStore)
		}
	}
	add(-1, 10, 0) // seq 0 reads 0: a snapshot in 10, then its own read slot
	// seq 1: 0 tokens, reads 10 (written by seq 0)
	for τ := range 70 { // seq 2: Zero, snapshots at 15, 31, 47, 63 and the last token
		switch {
		case τ%16 == 15:
			add(int32(11 + τ/16))
		case τ == 69:
			add(16)
		default:
			add(-1)
		}
	}
	none(1)    // seq 3: Pad
	none(5)    // seq 4: reads 1 (a fork), a snapshot at τ = 5 in 17
	add(17)    //
	none(6)    //
	none(4)    // seq 5: reads 1 too, its last state in 18
	add(18)    //
	none(63)   // seq 6: reads 2, the state after token 63 in 19, the last back to 2
	add(19, 2) //
	none(2)    // seq 7: scoring, no store
	return []namedSpec{
		{"stores", runSpec{lens: lens, read: []int32{0, 10, gdn.Zero, gdn.Pad, 1, 1, 2, 3}, store: store, slots: 20}},
		{"in-place", runSpec{lens: []int{3, 70, 1, 12, 0, 65, 2}, read: []int32{0, 5, gdn.Pad, 1, 7, 2, 3}, slots: 8}},
	}
}

// decodeSpec is a decode batch, 80 one-token sequences (slots 0–59 read in a shuffled order and
// stored back, every seventh a fresh prompt stored to a slot of its own from 60 on, every
// eleventh Pad): enough state for Workers to split it, so that the splits fall inside sequences
// (a one-token sequence's heads on two workers).
func decodeSpec() runSpec {
	s := runSpec{}
	slot, fresh := 0, 60
	for i := range 80 {
		s.lens = append(s.lens, 1)
		switch {
		case i%11 == 10:
			s.read, s.store = append(s.read, gdn.Pad), append(s.store, gdn.NoStore)
		case i%7 == 6 || slot == 60:
			s.read, s.store = append(s.read, gdn.Zero), append(s.store, int32(fresh))
			fresh++
		default:
			r := int32(slot * 37 % 60)
			s.read, s.store = append(s.read, r), append(s.store, r)
			slot++
		}
	}
	s.slots = fresh
	return s
}

// forEachEquiv runs f for every kernel × format × gate (the scalar one, Kimi-Linear's per-channel
// one, the scalar one with the conv front) × batch (equivSpecs, and extra).
func forEachEquiv(t *testing.T, f func(t *testing.T, kernel string, rf runFormat, s runSpec), extra ...namedSpec) {
	forEachKernelFormat(t, func(t *testing.T, kernel string, rf runFormat) {
		for _, g := range []string{"scalar", "kda", "scalar-conv"} {
			rf.kda, rf.conv = g == "kda", g == "scalar-conv"
			t.Run("gate="+g, func(t *testing.T) {
				for _, ns := range append(equivSpecs(), extra...) {
					t.Run("batch="+ns.name, func(t *testing.T) { f(t, kernel, rf, ns.s) })
				}
			})
		}
	})
}

// rowFields are b's row inputs and their widths: X (with the conv front) or Q, K, V; then Z, B, A.
func rowFields(c gdn.Config, b *gdn.Batch) ([]*gdn.Rows, []int) {
	hk, hv := c.KHeads*c.K, c.VHeads*c.V
	tail, tw := []*gdn.Rows{&b.Z, &b.B, &b.A}, []int{hv, c.VHeads, gateW(c)}
	if c.ConvWidth != 0 {
		return append([]*gdn.Rows{&b.X}, tail...), append([]int{2*hk + hv}, tw...)
	}
	return append([]*gdn.Rows{&b.Q, &b.K, &b.V}, tail...), append([]int{hk, hk, hv}, tw...)
}

func mustLayer(t testing.TB, c gdn.Config) *gdn.Layer {
	t.Helper()
	l, err := gdn.New(c)
	require.NoError(t, err)
	require.Equal(t, c.Kernel, l.Kernel())
	return l
}

// requireSameMem fails naming what and the first differing element (of size elem bytes).
func requireSameMem(t testing.TB, what string, want, got []byte, elem int) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	require.Equal(t, len(want), len(got), "%s: lengths", what)
	i := 0
	for want[i] == got[i] {
		i++
	}
	e := i / elem
	t.Fatalf("%s: element %d differs: %x vs %x", what, e, want[e*elem:(e+1)*elem], got[e*elem:(e+1)*elem])
}

func poolMem(p gdn.Pool) ([]byte, int) {
	if p.BF16 != nil {
		return memOf(p.BF16), 2
	}
	return memOf(p.F32), 4
}

// requireSameResults: the same outputs and the same State (and StoreTo) memory.
func requireSameResults(t testing.TB, what string, want, got *gdn.Batch) {
	t.Helper()
	requireSameMem(t, what+": Out", memOf(want.Out), memOf(got.Out), 2)
	requireSameMem(t, what+": OutF32", memOf(want.OutF32), memOf(got.OutF32), 4)
	w, e := poolMem(want.State)
	g, _ := poolMem(got.State)
	requireSameMem(t, what+": State", w, g, e)
	if want.StoreTo != nil {
		w, _ := poolMem(*want.StoreTo)
		g, _ := poolMem(*got.StoreTo)
		requireSameMem(t, what+": StoreTo", w, g, e)
	}
	w, e = poolMem(want.ConvState)
	g, _ = poolMem(got.ConvState)
	requireSameMem(t, what+": ConvState", w, g, e)
	if want.ConvStoreTo != nil {
		w, _ := poolMem(*want.ConvStoreTo)
		g, _ := poolMem(*got.ConvStoreTo)
		requireSameMem(t, what+": ConvStoreTo", w, g, e)
	}
}

func runOK(t testing.TB, l *gdn.Layer, b *gdn.Batch) {
	t.Helper()
	require.NoError(t, l.Run(b))
	checkPadOutputs(t, b) // every output written, +0 for padding
}

// TestRunWorkersEquivalent: Workers 1, 2, 3, 7 (GOMAXPROCS raised to 8: the batch's state traffic
// pays for 7 workers, so the ranges really are cut and run concurrently) give the same bits.
func TestRunWorkersEquivalent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(8, runtime.GOMAXPROCS(0))))
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		ref := makeBatch(equivConfig(kernel, rf, 1), s, 1)
		runOK(t, mustLayer(t, equivConfig(kernel, rf, 1)), ref)
		for _, w := range []int{2, 3, 7, 0} {
			l := mustLayer(t, equivConfig(kernel, rf, w))
			for rep := range 2 { // the scheduling differs from run to run
				b2 := makeBatch(equivConfig(kernel, rf, w), s, 1)
				runOK(t, l, b2)
				requireSameResults(t, fmt.Sprintf("Workers %d (run %d) vs 1", w, rep), ref, b2)
			}
		}
	}, namedSpec{"decode", decodeSpec()})
}

// subBatch is sequences [lo, hi) of b as a batch of their own, sharing b's memory.
func subBatch(c gdn.Config, b *gdn.Batch, lo, hi int) *gdn.Batch {
	t0, t1 := int(b.Start[lo]), int(b.Start[hi])
	s := &gdn.Batch{Read: b.Read[lo:hi], State: b.State, StoreTo: b.StoreTo, ConvState: b.ConvState, ConvStoreTo: b.ConvStoreTo}
	for n := lo; n <= hi; n++ {
		s.Start = append(s.Start, b.Start[n]-int32(t0))
	}
	if b.Store != nil {
		s.Store = b.Store[t0:t1]
	}
	rows := func(r gdn.Rows, w int) gdn.Rows {
		if t1 == t0 {
			return gdn.Rows{}
		}
		st := r.Stride
		if st == 0 {
			st = w
		}
		if r.F32 != nil {
			return gdn.Rows{F32: r.F32[t0*st:], Stride: r.Stride}
		}
		return gdn.Rows{BF16: r.BF16[t0*st:], Stride: r.Stride}
	}
	hv := c.VHeads * c.V
	src, widths := rowFields(c, b)
	dst, _ := rowFields(c, s)
	for i, r := range src {
		*dst[i] = rows(*r, widths[i])
	}
	if b.Out != nil {
		s.Out = b.Out[t0*hv : t1*hv]
	}
	if b.OutF32 != nil {
		s.OutF32 = b.OutF32[t0*hv : t1*hv]
	}
	return s
}

// TestRunBatchingEquivalent: one call with N sequences = N calls with one each = calls with
// groups of them.
func TestRunBatchingEquivalent(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		c := equivConfig(kernel, rf, 1)
		l := mustLayer(t, c)
		ref := makeBatch(c, s, 2)
		runOK(t, l, ref)
		N := len(s.read)
		one := makeBatch(c, s, 2)
		for n := N - 1; n >= 0; n-- { // in reverse order: the order of calls does not matter either
			runOK(t, l, subBatch(c, one, n, n+1))
		}
		requireSameResults(t, "N calls of one sequence", ref, one)
		groups := makeBatch(c, s, 2)
		for _, g := range [][2]int{{0, 3}, {3, 3}, {3, 5}, {5, N}} {
			runOK(t, l, subBatch(c, groups, g[0], g[1]))
		}
		requireSameResults(t, "calls of groups of sequences", ref, groups)
	})
}

// denseF32 returns T rows of width w of r as dense float32 (bf16 widened).
func denseF32(r gdn.Rows, T, w int) []float32 {
	st := r.Stride
	if st == 0 {
		st = w
	}
	out := make([]float32, 0, T*w)
	for t := range T {
		if r.F32 != nil {
			out = append(out, r.F32[t*st:t*st+w]...)
		} else {
			for _, x := range r.BF16[t*st : t*st+w] {
				out = append(out, x.Float32())
			}
		}
	}
	return out
}

// permuted is b with its sequences in the order perm (new sequence i is old sequence perm[i], with
// its tokens) and its slots renamed by slot (old slot s is new slot slot[s]), dense f32 rows. It
// returns the batch and tokMap (new token index → old).
func permuted(c gdn.Config, b *gdn.Batch, perm, slot []int) (*gdn.Batch, []int) {
	N := len(b.Read)
	T := int(b.Start[N])
	hv := c.VHeads * c.V
	fields, widths := rowFields(c, b)
	rows := make([][]float32, len(fields))
	for f, r := range fields {
		rows[f] = denseF32(*r, T, widths[f])
	}
	nr := make([][]float32, len(fields))
	p := &gdn.Batch{Start: []int32{0}}
	mapSlot := func(s int32) int32 {
		if s < 0 {
			return s
		}
		return int32(slot[s])
	}
	var tokMap []int
	for _, o := range perm {
		t0, t1 := int(b.Start[o]), int(b.Start[o+1])
		p.Start = append(p.Start, p.Start[len(p.Start)-1]+int32(t1-t0))
		p.Read = append(p.Read, mapSlot(b.Read[o]))
		for t := t0; t < t1; t++ {
			tokMap = append(tokMap, t)
			if b.Store != nil {
				p.Store = append(p.Store, mapSlot(b.Store[t]))
			}
			for f := range nr {
				nr[f] = append(nr[f], rows[f][t*widths[f]:(t+1)*widths[f]]...)
			}
		}
	}
	if b.Store != nil && p.Store == nil {
		p.Store = []int32{}
	}
	pf, _ := rowFields(c, p)
	for f, r := range pf {
		*r = gdn.Rows{F32: nr[f]}
	}
	p.Out, p.OutF32 = nanOutputs(T * hv)
	p.State = permutedPool(b.State, slot, c.VHeads*c.K*c.V)
	if c.ConvWidth != 0 {
		p.ConvState = permutedPool(b.ConvState, slot, convSlot(c))
	}
	return p, tokMap
}

// permutedPool is the dense pool p (slots of slotLen) with old slot s at slot[s].
func permutedPool(p gdn.Pool, slot []int, slotLen int) gdn.Pool {
	var q gdn.Pool
	if p.BF16 != nil {
		q.BF16 = make([]gdn.BF16, len(p.BF16))
		for s := range len(slot) {
			copy(q.BF16[slot[s]*slotLen:], p.BF16[s*slotLen:(s+1)*slotLen])
		}
		return q
	}
	q.F32 = make([]float32, len(p.F32))
	for s := range len(slot) {
		copy(q.F32[slot[s]*slotLen:], p.F32[s*slotLen:(s+1)*slotLen])
	}
	return q
}

// TestRunPermutationEquivalent: permuting the sequences (with their tokens) and renaming the
// slots permutes the outputs and the pool's slots in the same way.
func TestRunPermutationEquivalent(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		c := equivConfig(kernel, rf, 1)
		l := mustLayer(t, c)
		r := rand.New(rand.NewPCG(9, 10))
		for rep := range 2 {
			ref := makeBatch(c, s, 3)
			perm, slot := r.Perm(len(s.read)), r.Perm(s.slots)
			p, tokMap := permuted(c, ref, perm, slot)
			runOK(t, l, ref)
			runOK(t, l, p)
			hv := c.VHeads * c.V
			for nt, ot := range tokMap {
				requireSameMem(t, fmt.Sprintf("rep %d: Out of token %d (now %d)", rep, ot, nt), memOf(ref.Out[ot*hv:(ot+1)*hv]), memOf(p.Out[nt*hv:(nt+1)*hv]), 2)
				requireSameMem(t, fmt.Sprintf("rep %d: OutF32 of token %d (now %d)", rep, ot, nt), memOf(ref.OutF32[ot*hv:(ot+1)*hv]), memOf(p.OutF32[nt*hv:(nt+1)*hv]), 4)
			}
			pools := [][3]any{{ref.State, p.State, c.VHeads * c.K * c.V}}
			if c.ConvWidth != 0 {
				pools = append(pools, [3]any{ref.ConvState, p.ConvState, convSlot(c)})
			}
			for pi, pp := range pools {
				slotLen := pp[2].(int)
				rm, e := poolMem(pp[0].(gdn.Pool))
				pm, _ := poolMem(pp[1].(gdn.Pool))
				for os, ns := range slot {
					b := slotLen * e
					requireSameMem(t, fmt.Sprintf("rep %d: pool %d slot %d (now %d)", rep, pi, os, ns), rm[os*b:(os+1)*b], pm[ns*b:(ns+1)*b], e)
				}
			}
		}
	})
}

// tokenByToken runs b (in place, StoreTo nil, f32 pool) as one call per token index τ: every
// sequence with a τ-th token has that one token in call τ, reading the slot its previous token
// stored to (or its Read slot, τ = 0) and storing to its own store slot, or to a carry slot of its
// own (appended to the pool) when its original token keeps no state but a later one needs it. It
// returns the outputs and the pool's original slots.
func tokenByToken(t testing.TB, l *gdn.Layer, c gdn.Config, b *gdn.Batch, slots int) ([]gdn.BF16, []float32, []float32, []float32) {
	t.Helper()
	N := len(b.Read)
	T := int(b.Start[N])
	hv := c.VHeads * c.V
	slotLen := c.VHeads * c.K * c.V
	fields, widths := rowFields(c, b)
	rows := make([][]float32, len(fields))
	for f, r := range fields {
		rows[f] = denseF32(*r, T, widths[f])
	}
	pool := make([]float32, (slots+N)*slotLen)
	copy(pool, b.State.F32[:slots*slotLen])
	var convs []float32 // the conv pool, with carry slots too
	if c.ConvWidth != 0 {
		convs = make([]float32, (slots+N)*convSlot(c))
		copy(convs, b.ConvState.F32[:slots*convSlot(c)])
	}
	out, outF := nanOutputs(T * hv)
	prev := slices.Clone(b.Read)
	maxT := 0
	for n := range N {
		maxT = max(maxT, int(b.Start[n+1]-b.Start[n]))
	}
	for τ := range maxT {
		s := &gdn.Batch{Start: []int32{0}, State: gdn.Pool{F32: pool}}
		if convs != nil {
			s.ConvState = gdn.Pool{F32: convs}
		}
		nr := make([][]float32, len(fields))
		var toks []int
		for n := range N {
			t0, t1 := int(b.Start[n]), int(b.Start[n+1])
			if τ >= t1-t0 {
				s.Read = append(s.Read, gdn.Pad)
				s.Start = append(s.Start, s.Start[len(s.Start)-1])
				continue
			}
			tk := t0 + τ
			toks = append(toks, tk)
			s.Start = append(s.Start, s.Start[len(s.Start)-1]+1)
			s.Read = append(s.Read, prev[n])
			st := gdn.NoStore
			switch {
			case b.Read[n] == gdn.Pad:
			case b.Store != nil && b.Store[tk] >= 0:
				st = b.Store[tk]
			case b.Store == nil && tk == t1-1:
				st = b.Read[n]
			case tk < t1-1:
				st = int32(slots + n)
			}
			s.Store = append(s.Store, st)
			if st >= 0 {
				prev[n] = st
			}
			for f := range nr {
				nr[f] = append(nr[f], rows[f][tk*widths[f]:(tk+1)*widths[f]]...)
			}
		}
		sf, _ := rowFields(c, s)
		for f, r := range sf {
			*r = gdn.Rows{F32: nr[f]}
		}
		s.Out, s.OutF32 = nanOutputs(len(toks) * hv)
		require.NoError(t, l.Run(s), "token-by-token call %d", τ)
		for i, tk := range toks {
			copy(out[tk*hv:(tk+1)*hv], s.Out[i*hv:(i+1)*hv])
			copy(outF[tk*hv:(tk+1)*hv], s.OutF32[i*hv:(i+1)*hv])
		}
	}
	if convs != nil {
		convs = convs[:slots*convSlot(c)]
	}
	return out, outF, pool[:slots*slotLen], convs
}

// TestRunTokenByToken: one call with T tokens per sequence = T calls of one token each (f32
// pools; sequences of 65 and 70 tokens cross the driver's 64-token chunk boundary).
func TestRunTokenByToken(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		if rf.dtype != gdn.DTypeF32 {
			t.Skip("token by token holds for f32 pools; bf16: TestRunBF16PoolIsRoundedF32Pool")
		}
		c := equivConfig(kernel, rf, 1)
		l := mustLayer(t, c)
		b := makeBatch(c, s, 4)
		out, outF, pool, convs := tokenByToken(t, l, c, b, s.slots)
		runOK(t, l, b)
		requireSameMem(t, "Out", memOf(b.Out), memOf(out), 2)
		requireSameMem(t, "OutF32", memOf(b.OutF32), memOf(outF), 4)
		requireSameMem(t, "State", memOf(b.State.F32), memOf(pool), 4)
		requireSameMem(t, "ConvState", memOf(b.ConvState.F32), memOf(convs), 4)
	})
}

// widened is b with its bf16 pool widened to an f32 one (everything else shared but the outputs).
func widened(b *gdn.Batch) *gdn.Batch {
	w := *b
	w.State = gdn.Pool{F32: make([]float32, len(b.State.BF16)), SlotStride: b.State.SlotStride}
	for i, x := range b.State.BF16 {
		w.State.F32[i] = x.Float32()
	}
	w.Out, w.OutF32 = nanOutputs(len(b.Out))
	w.ConvState, _ = clonePool(b.ConvState)
	return &w
}

// TestRunBF16PoolIsRoundedF32Pool: with a bf16 pool every stored state is bf16(the state an f32
// pool stores) from the widened initial state, and the outputs are the f32 pool's bits (the state
// stays f32 between tokens).
func TestRunBF16PoolIsRoundedF32Pool(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		if rf.dtype != gdn.DTypeBF16 {
			t.Skip("needs a bf16 pool")
		}
		f32 := rf
		f32.dtype = gdn.DTypeF32
		if !f32.implementedBy(kernel) {
			t.Skipf("kernel %s lacks %v with f32 storage", kernel, rf.layout)
		}
		c := equivConfig(kernel, rf, 1)
		b := makeBatch(c, s, 5)
		w := widened(b)
		runOK(t, mustLayer(t, c), b)
		runOK(t, mustLayer(t, equivConfig(kernel, f32, 1)), w)
		requireSameMem(t, "Out", memOf(w.Out), memOf(b.Out), 2)
		requireSameMem(t, "OutF32", memOf(w.OutF32), memOf(b.OutF32), 4)
		for i, x := range w.State.F32 {
			if want := gdn.BF16FromFloat32(x); b.State.BF16[i] != want {
				t.Fatalf("State[%d] (slot %d): 0x%04x, want bf16(%g) = 0x%04x", i, i/(c.VHeads*c.K*c.V), b.State.BF16[i], x, want)
			}
		}
	})
}

func toBF16Rows(r gdn.Rows) gdn.Rows {
	out := gdn.Rows{BF16: make([]gdn.BF16, len(r.F32)), Stride: r.Stride}
	for i, x := range r.F32 {
		out.BF16[i] = gdn.BF16FromFloat32(x)
	}
	return out
}

func widenRows(r gdn.Rows) gdn.Rows {
	out := gdn.Rows{F32: make([]float32, len(r.BF16)), Stride: r.Stride}
	for i, x := range r.BF16 {
		out.F32[i] = x.Float32()
	}
	return out
}

// TestRunBF16RowsAreWidened: bf16 activation rows give the bits of their widened f32 copies
// (every row bf16, and a mix).
func TestRunBF16RowsAreWidened(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		c := equivConfig(kernel, rf, 1)
		l := mustLayer(t, c)
		for _, mix := range []string{"all", "k,z,a"} {
			bf := makeBatch(c, s, 6)
			fields := map[string]*gdn.Rows{"q": &bf.Q, "k": &bf.K, "v": &bf.V, "z": &bf.Z, "b": &bf.B, "a": &bf.A}
			if c.ConvWidth != 0 {
				fields = map[string]*gdn.Rows{"k": &bf.X, "z": &bf.Z, "b": &bf.B, "a": &bf.A}
			}
			for name, r := range fields {
				if mix == "all" || bytes.Contains([]byte(mix), []byte(name)) {
					*r = toBF16Rows(*r)
				}
			}
			f := makeBatch(c, s, 6)
			f.Q, f.K, f.V, f.X, f.Z, f.B, f.A = bf.Q, bf.K, bf.V, bf.X, bf.Z, bf.B, bf.A
			for _, r := range []*gdn.Rows{&f.Q, &f.K, &f.V, &f.X, &f.Z, &f.B, &f.A} {
				if r.BF16 != nil {
					*r = widenRows(*r)
				}
			}
			runOK(t, l, bf)
			runOK(t, l, f)
			requireSameResults(t, "bf16 rows "+mix+" vs widened", f, bf)
		}
	})
}

// TestRunInPlaceEqualsOutOfPlace: stores into a StoreTo copy of the pool (another SlotStride) give
// the in-place pool's slots and leave State alone; StoreTo = State's very slice is in place.
func TestRunInPlaceEqualsOutOfPlace(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		c := equivConfig(kernel, rf, 1)
		l := mustLayer(t, c)
		slotLen := c.VHeads * c.K * c.V
		in := makeBatch(c, s, 7)
		runOK(t, l, in)

		same := makeBatch(c, s, 7)
		same.StoreTo = &gdn.Pool{F32: same.State.F32, BF16: same.State.BF16, SlotStride: slotLen}
		if c.ConvWidth != 0 {
			same.ConvStoreTo = &gdn.Pool{F32: same.ConvState.F32, BF16: same.ConvState.BF16}
		}
		runOK(t, l, same)
		requireSameResults(t, "StoreTo = State", in, same)

		out := makeBatch(c, s, 7)
		type pair struct {
			name      string
			src, dst  *gdn.Pool
			orig      []byte
			slotLen   int
			inPlaceTo gdn.Pool
		}
		pools := []*pair{{name: "State", src: &out.State, slotLen: slotLen, inPlaceTo: in.State}}
		if c.ConvWidth != 0 {
			pools = append(pools, &pair{name: "ConvState", src: &out.ConvState, slotLen: convSlot(c), inPlaceTo: in.ConvState})
		}
		for _, p := range pools {
			p.orig, _ = poolMem(*p.src)
			p.orig = bytes.Clone(p.orig)
			p.dst = stridedCopy(*p.src, s.slots, p.slotLen, p.slotLen+5)
		}
		out.StoreTo = pools[0].dst
		if len(pools) > 1 {
			out.ConvStoreTo = pools[1].dst
		}
		runOK(t, l, out)
		requireSameMem(t, "Out", memOf(in.Out), memOf(out.Out), 2)
		requireSameMem(t, "OutF32", memOf(in.OutF32), memOf(out.OutF32), 4)
		for _, p := range pools {
			now, e := poolMem(*p.src)
			requireSameMem(t, p.name+" of the out-of-place call", p.orig, now, e)
			im, _ := poolMem(p.inPlaceTo)
			dm, _ := poolMem(*p.dst)
			stride := p.slotLen + 5
			for sl := range s.slots {
				requireSameMem(t, fmt.Sprintf("%s slot %d", p.name, sl), im[sl*p.slotLen*e:(sl+1)*p.slotLen*e], dm[sl*stride*e:(sl*stride+p.slotLen)*e], e)
			}
		}
	})
}

// stridedCopy is a copy of the n slots (slotLen each) of the dense pool p with SlotStride stride.
func stridedCopy(p gdn.Pool, n, slotLen, stride int) *gdn.Pool {
	dst := &gdn.Pool{SlotStride: stride}
	size := (n-1)*stride + slotLen
	if p.BF16 != nil {
		dst.BF16 = make([]gdn.BF16, size)
		for sl := range n {
			copy(dst.BF16[sl*stride:], p.BF16[sl*slotLen:(sl+1)*slotLen])
		}
		return dst
	}
	dst.F32 = make([]float32, size)
	for sl := range n {
		copy(dst.F32[sl*stride:], p.F32[sl*slotLen:(sl+1)*slotLen])
	}
	return dst
}

// packRows lays the six row inputs of b into two packed buffers, [q|k|v|gap 3] and [z|b|a|gap 1]
// per token (f32 or bf16), the gaps poisoned with NaN, and returns the repacked batch.
func packRows(c gdn.Config, b *gdn.Batch, bf16 bool) *gdn.Batch {
	N := len(b.Read)
	T := int(b.Start[N])
	hk, hv := c.KHeads*c.K, c.VHeads*c.V
	p := *b
	p.Out, p.OutF32 = nanOutputs(len(b.Out))
	pack := func(fields []*gdn.Rows, widths []int, gap int) {
		stride := gap
		for _, w := range widths {
			stride += w
		}
		buf := make([]float32, T*stride)
		for i := range buf {
			buf[i] = float32(math.NaN())
		}
		off := 0
		for f, r := range fields {
			src := denseF32(*r, T, widths[f])
			for t := range T {
				copy(buf[t*stride+off:], src[t*widths[f]:(t+1)*widths[f]])
			}
			*r = gdn.Rows{F32: buf[off:], Stride: stride}
			off += widths[f]
		}
		if bf16 {
			bb := toBF16Rows(gdn.Rows{F32: buf})
			off = 0
			for f, r := range fields {
				*r = gdn.Rows{BF16: bb.BF16[off:], Stride: stride}
				off += widths[f]
			}
		}
	}
	if c.ConvWidth != 0 {
		pack([]*gdn.Rows{&p.X}, []int{2*hk + hv}, 3)
	} else {
		pack([]*gdn.Rows{&p.Q, &p.K, &p.V}, []int{hk, hk, hv}, 3)
	}
	pack([]*gdn.Rows{&p.Z, &p.B, &p.A}, []int{hv, c.VHeads, gateW(c)}, 1)
	return &p
}

// TestRunStridedRowsEqualDense: rows read in place from packed, strided buffers (NaN in the gaps)
// give the bits of dense rows, f32 and bf16.
func TestRunStridedRowsEqualDense(t *testing.T) {
	forEachEquiv(t, func(t *testing.T, kernel string, rf runFormat, s runSpec) {
		c := equivConfig(kernel, rf, 1)
		l := mustLayer(t, c)
		for _, bf := range []bool{false, true} {
			dense := makeBatch(c, s, 8)
			if bf { // dense bf16 rows: the values packed below are their bits
				fields, _ := rowFields(c, dense)
				for _, r := range fields {
					*r = toBF16Rows(*r)
				}
			}
			packed := packRows(c, dense, bf)
			packed.State, _ = clonePool(dense.State)
			packed.ConvState, _ = clonePool(dense.ConvState)
			runOK(t, l, dense)
			runOK(t, l, packed)
			requireSameResults(t, fmt.Sprintf("packed rows (bf16 %v) vs dense", bf), dense, packed)
		}
	})
}

func clonePool(p gdn.Pool) (gdn.Pool, bool) {
	return gdn.Pool{F32: slices.Clone(p.F32), BF16: slices.Clone(p.BF16), SlotStride: p.SlotStride}, true
}
