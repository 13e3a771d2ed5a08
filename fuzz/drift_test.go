package fuzz

import (
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
)

var long = flag.Bool("long", false, "TestDrift: 100k tokens instead of 5k (also GDN_LONG=1)")

// TestDrift carries the state of small heads through many tokens with every kernel (in place,
// float32) and with a float64 recurrence from the same inputs, and requires the state's relative
// error (per head: max-abs error / max-abs value) to stay ≤ 1e-4 at every token.
//
// The float64 recurrence uses the oracle, whose state input is float32: the state is carried as
// hi + lo (hi = float32(S), lo = float32(S − hi)), and since the state update is affine in (S, v),
// S' = oracle(hi, v) + oracle(lo, v = 0), which keeps about 48 bits.
//
// Half the value heads have A_log ≈ −4 (eg ≈ 0.98–0.99: long memory, where rounding errors live
// longest); the others A_log ~ N(0, 1) as in oracle.Random. q, k, v, z, b ~ N(0, 1), a ~ N(−1, 1.5).
func TestDrift(t *testing.T) {
	tokens := 5000
	if *long || os.Getenv("GDN_LONG") == "1" {
		tokens = 100000
	}
	d := oracle.Dims{B: 1, HK: 2, HV: 4, K: 16, V: 16}
	r := rand.New(rand.NewPCG(16, 16))
	aLog, dtBias, norm := make([]float32, d.HV), make([]float32, d.HV), make([]float32, d.V)
	for h := range aLog {
		aLog[h] = float32(r.NormFloat64())
		if h%2 == 0 {
			aLog[h] = float32(-4 + 0.3*r.NormFloat64())
		}
		dtBias[h] = float32(r.NormFloat64())
	}
	for j := range norm {
		norm[j] = float32(1 + 0.2*r.NormFloat64())
	}
	ks := kerneltest.Names(t)
	layers := make([]*gdn.Layer, len(ks))
	states := make([][]float32, len(ks))
	worst := make([]float64, len(ks))
	worstAt := make([]int, len(ks))
	n := d.Heads() * d.K * d.V
	for i, k := range ks {
		l, err := gdn.New(gdn.Config{KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, ALog: aLog, DtBias: dtBias, NormWeight: norm, Workers: 1, Kernel: k})
		if err != nil {
			t.Fatal(err)
		}
		layers[i], states[i] = l, make([]float32, n)
	}
	hi, lo := make([]float32, n), make([]float32, n)
	s64 := make([]float64, n)
	out := make([]gdn.BF16, d.Heads()*d.V)
	zeroV := make([]float32, d.Heads()*d.V)
	vec := func(m int, mean, sd float64) []float32 { return normVec(r, m, mean, sd) }
	for tok := range tokens {
		in := oracle.Inputs{
			Q: vec(d.B*d.HK*d.K, 0, 1), K: vec(d.B*d.HK*d.K, 0, 1), V: vec(d.Heads()*d.V, 0, 1), Z: vec(d.Heads()*d.V, 0, 1),
			B: vec(d.Heads(), 0, 1), A: vec(d.Heads(), -1, 1.5), ALog: aLog, DtBias: dtBias, NormWeight: norm, RMSEps: 1e-6,
		}
		v := in.V
		stepHiLo(d, in, hi, lo, zeroV, s64)
		for ki, l := range layers {
			gin := gdn.Input{Q: in.Q, K: in.K, V: v, Z: in.Z, B: in.B, A: in.A, State: states[ki]}
			if err := l.Step(gin, gdn.Output{State: states[ki], Out: out}); err != nil {
				t.Fatal(err)
			}
			for bh := range d.Heads() {
				var maxErr, maxVal float64
				for i := bh * d.K * d.V; i < (bh+1)*d.K*d.V; i++ {
					maxErr = max(maxErr, math.Abs(float64(states[ki][i])-s64[i]))
					maxVal = max(maxVal, math.Abs(s64[i]))
				}
				if e := maxErr / maxVal; !(e <= worst[ki]) {
					worst[ki], worstAt[ki] = e, tok
				}
			}
			if !(worst[ki] <= 1e-4) {
				t.Fatalf("%s: token %d: the state's relative error %.3g > 1e-4", ks[ki], tok, worst[ki])
			}
		}
	}
	for ki, k := range ks {
		t.Logf("%s: worst relative state error over %d tokens: %.3g (token %d)", k, tokens, worst[ki], worstAt[ki])
	}
}

// steadyALog returns an A_log near log(−log(eg)/log 2) (with a = dt_bias = 0, so softplus = log 2
// and g = −exp(A_log)·log 2 every token) at which float32(eg) is off by at least 0.95 of its half
// ulp: the worst case for a kernel that decays by the rounded eg (SPEC Part A: the drift of up to
// 2⁻²⁵/(1 − eg) that the 1 + em1 form avoids).
func steadyALog(t testing.TB, eg float64) float32 {
	x := float32(math.Log(-math.Log(eg) / math.Ln2))
	for range 1 << 16 {
		e := math.Exp(-math.Exp(float64(x)) * math.Ln2)
		if math.Abs(float64(float32(e))-e) >= 0.95*0x1p-25 {
			return x
		}
		x = math.Nextafter32(x, float32(math.Inf(1)))
	}
	t.Fatalf("no A_log near eg = %g with a rounding error near half an ulp", eg)
	return 0
}

// driftLayer is one way of running a drift test: a kernel through Step (one token per call,
// [K][V]) or through Run (blocks of tokens in one call, one sequence) in an f32 format.
type driftLayer struct {
	name   string
	l      *gdn.Layer
	run    bool
	layout gdn.StateLayout
	state  []float32
	worst  float64
	at     int
	first  int // the first token over the bound, or −1
}

// TestDriftSteadyDecay carries heads with a steady decay of eg ≈ 0.9999 (value heads 0, 1) and ≈
// 0.99999 (2, 3) through 20k tokens (100k with GDN_LONG=1 or -long) with every kernel, through
// Step token by token and through Run in calls of 1000 tokens (every f32 state format; the state
// after every 100th token stored to its own slot), and requires the state's relative error (per
// head: max-abs error / max-abs value, against a float64 run) to stay ≤ 1e-4. The gate input a
// is fixed (a = dt_bias = 0) and A_log chosen so that float32(eg) is off by almost half an ulp
// (steadyALog): a kernel decaying by eg·S drifts by up to 2⁻²⁵/(1 − eg) (3e-4 at 0.9999, 3e-3 at
// 0.99999), one decaying by S + em1·S does not. b ~ N(−8, 1) (beta ≈ 3e-4): a long-memory head,
// whose state the delta rule does not overwrite within a few tokens (with beta ≈ 0.5 and K = 16
// a head forgets within ~30 tokens whatever eg is, and no drift could show). q, k, v, z ~ N(0, 1).
func TestDriftSteadyDecay(t *testing.T) {
	tokens := 20000
	if *long || os.Getenv("GDN_LONG") == "1" {
		tokens = 100000
	}
	const block, every = 1000, 100
	d := oracle.Dims{B: 1, HK: 1, HV: 4, K: 16, V: 16}
	r := rand.New(rand.NewPCG(17, 17))
	aLog, dtBias, norm := make([]float32, d.HV), make([]float32, d.HV), make([]float32, d.V)
	for h := range d.HV {
		aLog[h] = steadyALog(t, []float64{0.9999, 0.99999}[h/2])
	}
	for j := range norm {
		norm[j] = float32(1 + 0.2*r.NormFloat64())
	}
	n := d.Heads() * d.K * d.V
	var layers []*driftLayer
	for _, k := range kerneltest.Names(t) {
		kk, _ := gdnsimd.Lookup(k)
		for _, f := range []gdnsimd.Format{{}, {}, {VK: true}} {
			run := len(layers) > 0 && layers[len(layers)-1].name == k+"/step"
			if !kk.Implements(f) {
				t.Logf("%s: no %v format: skipped", k, f)
				continue
			}
			l, err := gdn.New(gdn.Config{KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, ALog: aLog, DtBias: dtBias, NormWeight: norm,
				Workers: 1, Kernel: k, StateLayout: stateLayout(f)})
			if err != nil {
				t.Fatal(err)
			}
			name := k + "/step"
			if run || f.VK {
				name, run = k+"/run/"+f.String(), true
			}
			// Run: slot 0 is the state, slots 1..block/every−1 the snapshots.
			layers = append(layers, &driftLayer{name: name, l: l, run: run, layout: stateLayout(f), state: make([]float32, n*block/every), first: -1})
		}
	}
	hi, lo := make([]float32, n), make([]float32, n)
	s64 := make([]float64, n)
	snaps := make([][]float64, block/every) // the float64 state after every 100th token of a block
	zeroV := make([]float32, d.Heads()*d.V)
	vec := func(m int, mean, sd float64) []float32 { return normVec(r, m, mean, sd) }
	relErr := func(got func(i int) float32, want []float64) float64 {
		worst := 0.0
		for bh := range d.Heads() {
			var maxErr, maxVal float64
			for i := bh * d.K * d.V; i < (bh+1)*d.K*d.V; i++ {
				maxErr = max(maxErr, math.Abs(float64(got(i))-want[i]))
				maxVal = max(maxVal, math.Abs(want[i]))
			}
			worst = max(worst, maxErr/maxVal)
		}
		return worst
	}
	check := func(dl *driftLayer, e float64, tok int) {
		if !(e <= dl.worst) {
			dl.worst, dl.at = e, tok
		}
		if !(e <= 1e-4) && dl.first < 0 {
			dl.first = tok
			t.Errorf("%s: token %d: the state's relative error %.4g > 1e-4", dl.name, tok, e)
		}
	}
	out := make([]gdn.BF16, block*d.Heads()*d.V)
	for b0 := 0; b0 < tokens; b0 += block {
		var rows oracle.TokenRows
		for τ := range block {
			in := oracle.Inputs{
				Q: vec(d.HK*d.K, 0, 1), K: vec(d.HK*d.K, 0, 1), V: vec(d.Heads()*d.V, 0, 1), Z: vec(d.Heads()*d.V, 0, 1),
				B: vec(d.Heads(), -8, 1), A: make([]float32, d.HV), ALog: aLog, DtBias: dtBias, NormWeight: norm, RMSEps: 1e-6,
			}
			v := in.V
			rows.Q, rows.K, rows.V = append(rows.Q, in.Q...), append(rows.K, in.K...), append(rows.V, v...)
			rows.Z, rows.B, rows.A = append(rows.Z, in.Z...), append(rows.B, in.B...), append(rows.A, in.A...)
			stepHiLo(d, in, hi, lo, zeroV, s64)
			if τ%every == every-1 {
				snaps[τ/every] = append(snaps[τ/every][:0], s64...)
			}
			for _, dl := range layers {
				if dl.run {
					continue
				}
				gin := gdn.Input{Q: in.Q, K: in.K, V: v, Z: in.Z, B: in.B, A: in.A, State: dl.state[:n]}
				if err := dl.l.Step(gin, gdn.Output{State: dl.state[:n], Out: out[:d.Heads()*d.V]}); err != nil {
					t.Fatal(err)
				}
				check(dl, relErr(func(i int) float32 { return dl.state[i] }, s64), b0+τ)
			}
		}
		// The Run layers: the block in one call, in place, the snapshots in slots 1.. of the pool.
		store := make([]int32, block)
		for τ := range store {
			store[τ] = gdn.NoStore
			if τ%every == every-1 {
				store[τ] = int32((τ/every + 1) % (block / every))
			}
		}
		for _, dl := range layers {
			if !dl.run {
				continue
			}
			b := gdn.Batch{
				Start: []int32{0, block}, Read: []int32{0}, Store: store,
				Q: gdn.Rows{F32: rows.Q}, K: gdn.Rows{F32: rows.K}, V: gdn.Rows{F32: rows.V}, Z: gdn.Rows{F32: rows.Z},
				B: gdn.Rows{F32: rows.B}, A: gdn.Rows{F32: rows.A}, State: gdn.Pool{F32: dl.state}, Out: out,
			}
			if err := dl.l.Run(&b); err != nil {
				t.Fatal(err)
			}
			for k, want := range snaps {
				slot := (k + 1) % len(snaps) // the last snapshot is the state, in slot 0
				st := dl.state[slot*n : (slot+1)*n]
				got := func(i int) float32 { return st[i] }
				if dl.layout == gdn.LayoutVK {
					got = func(i int) float32 { // i = (bh·K + r)·V + c in [K][V]
						bh, r, c := i/(d.K*d.V), i/d.V%d.K, i%d.V
						return st[(bh*d.V+c)*d.K+r]
					}
				}
				check(dl, relErr(got, want), b0+k*every+every-1)
			}
		}
	}
	for _, dl := range layers {
		t.Logf("%s: worst relative state error over %d tokens: %.3g (token %d)", dl.name, tokens, dl.worst, dl.at)
	}
}

// TestStrongDecay guards the other decay form: with eg ≈ 4.5e-5 (A_log, a fixed), S + em1·S would
// keep eg only to 2⁻²⁵/eg ≈ 7e-4 relative, so the decay must be eg·S. Value head 0 has beta ≈ 0
// (b = −30): its state and output after each token are just the decayed state, and the wrong
// form's error shows in full against SPEC's 1e-5; head 1 has b ~ N(0, 1). Warm realistic states,
// 3 tokens with the state after each stored out of place, every kernel and f32 format, against
// the batch oracle (oracle.CheckBatch: state within 1e-5 of the head max, y within its bound).
func TestStrongDecay(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 18))
	d := oracle.BatchDims{HK: 1, HV: 2, K: 16, V: 24}
	c := &oracle.BatchCase{Name: "strong-decay", Dims: d}
	oracle.RandomLayer(r, c)
	// g = −exp(A_log)·log 2 = log(4.5e-5) with a = dt_bias = 0.
	for h := range d.HV {
		c.ALog[h], c.DtBias[h] = float32(math.Log(-math.Log(4.5e-5)/math.Ln2)), 0
	}
	const T = 3
	c.Start, c.Read, c.Store = []int32{0, T}, []int32{0}, []int32{0, 1, 2}
	c.In = oracle.RandomTokens(r, d, T)
	for τ := range T {
		c.In.A[τ*d.HV], c.In.A[τ*d.HV+1] = 0, 0
		c.In.B[τ*d.HV] = -30
	}
	c.State = oracle.WarmStates(r, c, 1, 6, false)
	c.StoreTo = oracle.WarmStates(r, c, T, 0, false)
	want, err := oracle.RunBatch(c)
	if err != nil {
		t.Fatal(err)
	}
	eachF32Format(t, func(t *testing.T, k string, f gdnsimd.Format) {
		l, err := gdn.New(gdn.Config{KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight,
			Workers: 1, Kernel: k, StateLayout: stateLayout(f)})
		if err != nil {
			t.Fatal(err)
		}
		layout := func(s []float32, back bool) []float32 {
			if !f.VK {
				return slices.Clone(s)
			}
			if back {
				return oracle.TransposeSlot(s, d.HV, d.V, d.K)
			}
			return oracle.TransposeSlot(s, d.HV, d.K, d.V)
		}
		state, dst := layout(c.State[0], false), make([]float32, T*d.SlotLen())
		b := gdn.Batch{
			Start: c.Start, Read: c.Read, Store: c.Store,
			Q: gdn.Rows{F32: c.In.Q}, K: gdn.Rows{F32: c.In.K}, V: gdn.Rows{F32: c.In.V}, Z: gdn.Rows{F32: c.In.Z},
			B: gdn.Rows{F32: c.In.B}, A: gdn.Rows{F32: c.In.A},
			State: gdn.Pool{F32: state}, StoreTo: &gdn.Pool{F32: dst},
			Out: make([]gdn.BF16, T*d.HV*d.V), OutF32: make([]float32, T*d.HV*d.V),
		}
		if err := l.Run(&b); err != nil {
			t.Fatal(err)
		}
		g := oracle.BatchGot{OutF32: b.OutF32, State: [][]float32{layout(state, true)}}
		for _, o := range b.Out {
			g.Out = append(g.Out, uint16(o))
		}
		for s := range T {
			g.StoreTo = append(g.StoreTo, layout(dst[s*d.SlotLen():(s+1)*d.SlotLen()], true))
		}
		if err := oracle.CheckBatch(c, &want, g); err != nil {
			t.Fatal(err)
		}
	})
}

// stepHiLo advances the float64 reference state s64, held as hi + lo (float32 each, the oracle's
// state type), by one token of in: the step is linear in (state, v), so it is the oracle's step of
// hi with in plus its step of lo with v = 0 (zeroV).
func stepHiLo(d oracle.Dims, in oracle.Inputs, hi, lo, zeroV []float32, s64 []float64) {
	in.State = hi
	sHi := oracle.Step(d, in).State
	in.State, in.V = lo, zeroV
	sLo := oracle.Step(d, in).State
	for i := range s64 {
		s64[i] = sHi[i] + sLo[i]
		hi[i] = float32(s64[i])
		lo[i] = float32(s64[i] - float64(hi[i]))
	}
}

// steadyGate returns a raw gate x near softplus⁻¹(−log eg) (rate 1, dt_bias 0: the channel's
// log-decay is −softplus(x) every token) at which float32(eg) is off by at least 0.95 of its half
// ulp, as steadyALog does for the head's gate.
func steadyGate(t testing.TB, eg float64) float32 {
	x := float32(math.Log(math.Expm1(-math.Log(eg))))
	for range 1 << 16 {
		e := math.Exp(-math.Log1p(math.Exp(float64(x))))
		if math.Abs(float64(float32(e))-e) >= 0.95*0x1p-25 {
			return x
		}
		x = math.Nextafter32(x, float32(math.Inf(1)))
	}
	t.Fatalf("no gate near eg = %g with a rounding error near half an ulp", eg)
	return 0
}

// TestDriftChannels is TestDriftSteadyDecay for the per-channel gate (SPEC Part C): every value
// head has channels with a steady decay of eg ≈ 0.9999 and ≈ 0.99999 (float32(eg) off by almost
// half an ulp), and others of 0.9, 0.5 and 0.2 (the other form). Every kernel and f32 format runs
// 20k tokens (100k with GDN_LONG=1 or -long) in calls of 1000 in place, the state after every
// 100th token stored to its own slot, against one float64 oracle call over all the tokens; the
// state's relative error (per head) must stay ≤ 1e-4. A kernel that decayed a near-1 channel by
// eg·S would drift by up to 2⁻²⁵/(1 − eg).
func TestDriftChannels(t *testing.T) {
	tokens := 20000
	if *long || os.Getenv("GDN_LONG") == "1" {
		tokens = 100000
	}
	const block, every = 1000, 100
	d := oracle.BatchDims{HK: 1, HV: 2, K: 16, V: 16}
	r := rand.New(rand.NewPCG(19, 19))
	c := &oracle.BatchCase{Name: "drift-channels", Dims: d, RMSEps: 1e-6, PerChannel: true, Sigmoid: true,
		ALog: make([]float32, d.HV), DtBias: make([]float32, d.HV*d.K), NormWeight: make([]float32, d.V)}
	for j := range c.NormWeight {
		c.NormWeight[j] = float32(1 + 0.2*r.NormFloat64())
	}
	gate := make([]float32, d.HV*d.K) // the same raw gate row every token
	egs := []float64{0.9999, 0.99999, 0.9999, 0.99999, 0.9, 0.5, 0.2}
	for i := range gate {
		eg := egs[i%len(egs)]
		gate[i] = float32(math.Log(math.Expm1(-math.Log(eg))))
		if eg > 0.99 {
			gate[i] = steadyGate(t, eg)
		}
	}
	c.Start, c.Read = []int32{0, int32(tokens)}, []int32{0}
	c.Store = make([]int32, tokens)
	for τ := range tokens {
		c.Store[τ] = oracle.NoStore
		if τ%every == every-1 {
			c.Store[τ] = int32(τ / every)
		}
	}
	vec := func(m int, mean, sd float64) []float32 { return normVec(r, m, mean, sd) }
	T := tokens
	c.In = oracle.TokenRows{Q: vec(T*d.HK*d.K, 0, 1), K: vec(T*d.HK*d.K, 0, 1), V: vec(T*d.HV*d.V, 0, 1), Z: vec(T*d.HV*d.V, 0, 1),
		B: vec(T*d.HV, -8, 1)}
	for range T {
		c.In.A = append(c.In.A, gate...)
	}
	c.State = [][]float32{make([]float32, d.SlotLen())}
	c.StoreTo = make([][]float32, tokens/every)
	want, err := oracle.RunBatch(c)
	if err != nil {
		t.Fatal(err)
	}
	n := d.SlotLen()
	eachF32Format(t, func(t *testing.T, k string, f gdnsimd.Format) {
		l, err := gdn.New(gdn.Config{KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight,
			Workers: 1, Kernel: k, StateLayout: stateLayout(f), Gate: gdn.GatePerChannel, OutGate: gdn.ActSigmoid})
		if err != nil {
			t.Fatal(err)
		}
		pool := make([]float32, n*block/every) // slot 0: the state; 1..: the snapshots
		out := make([]gdn.BF16, block*d.HV*d.V)
		store := make([]int32, block)
		for τ := range store {
			store[τ] = gdn.NoStore
			if τ%every == every-1 {
				store[τ] = int32((τ/every + 1) % (block / every))
			}
		}
		worst, at := 0.0, 0
		for b0 := 0; b0 < tokens; b0 += block {
			rows := func(x []float32, w int) gdn.Rows { return gdn.Rows{F32: x[b0*w : (b0+block)*w]} }
			b := gdn.Batch{Start: []int32{0, block}, Read: []int32{0}, Store: store,
				Q: rows(c.In.Q, d.HK*d.K), K: rows(c.In.K, d.HK*d.K), V: rows(c.In.V, d.HV*d.V), Z: rows(c.In.Z, d.HV*d.V),
				B: rows(c.In.B, d.HV), A: rows(c.In.A, d.HV*d.K), State: gdn.Pool{F32: pool}, Out: out}
			if err := l.Run(&b); err != nil {
				t.Fatal(err)
			}
			for k := range block / every {
				tok := b0 + k*every + every - 1
				s64 := want.Stored[int32(tok/every)]
				st := pool[(k+1)%(block/every)*n:][:n]
				for h := range d.HV {
					var maxErr, maxVal float64
					for i := range d.K {
						for j := range d.V {
							e := h*d.K*d.V + i*d.V + j
							g := st[e]
							if f.VK {
								g = st[(h*d.V+j)*d.K+i]
							}
							maxErr = max(maxErr, math.Abs(float64(g)-s64[e]))
							maxVal = max(maxVal, math.Abs(s64[e]))
						}
					}
					if e := maxErr / maxVal; !(e <= worst) {
						worst, at = e, tok
					}
				}
			}
			if !(worst <= 1e-4) {
				t.Fatalf("token %d: the state's relative error %.4g > 1e-4", at, worst)
			}
		}
		t.Logf("worst relative state error over %d tokens: %.3g (token %d)", tokens, worst, at)
	})
}

// eachF32Format runs fn as the subtest kernel=K/format=F for every kernel and f32 format ([K][V],
// [V][K]), skipping visibly the formats a kernel does not implement.
func eachF32Format(t *testing.T, fn func(t *testing.T, k string, f gdnsimd.Format)) {
	for _, k := range kerneltest.Names(t) {
		kk, _ := gdnsimd.Lookup(k)
		for _, f := range []gdnsimd.Format{{}, {VK: true}} {
			t.Run("kernel="+k+"/format="+f.String(), func(t *testing.T) {
				if !kk.Implements(f) {
					t.Skipf("kernel %s does not implement the state format %v", k, f)
				}
				fn(t, k, f)
			})
		}
	}
}

// normVec is m values ~ N(mean, sd²) from r.
func normVec(r *rand.Rand, m int, mean, sd float64) []float32 {
	v := make([]float32, m)
	for i := range v {
		v[i] = float32(mean + sd*r.NormFloat64())
	}
	return v
}
