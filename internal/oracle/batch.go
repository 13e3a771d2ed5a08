package oracle

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
)

// This file extends the oracle to SPEC Part B's serving call: N sequences of T_n ≥ 0 tokens,
// states read from and stored to slots of pools, Pad and Zero, per-token stores, a second pool,
// bf16 storage. Written from SPEC.md alone (no kernel code): every (sequence, value head) carries
// its state in float64 through the sequence's tokens; a stored state is rounded to bf16 once (bf16
// pools) where it is stored, the running state is never rounded.

// BatchDims are the shapes of a Layer.
type BatchDims struct {
	HK, HV, K, V int
}

// SlotLen is the elements of one slot, HV·K·V.
func (d BatchDims) SlotLen() int { return d.HV * d.K * d.V }

// Channels is the width C = 2·HK·K + HV·V of a pre-conv row (SPEC Part D): q | k | v.
func (d BatchDims) Channels() int { return 2*d.HK*d.K + d.HV*d.V }

// TokenRows are a call's per-token inputs, dense and token-major: Q, K [T][HK][K]; V, Z [T][HV][V];
// B, A [T][HV] (A [T][HV][K] with the per-channel gate). (How they are laid out for the call — strides, packing, bf16 — is the test's
// business; the oracle reads the values.)
type TokenRows struct {
	Q, K, V, Z, B, A []float32
	X                []float32 // [T][C] pre-conv rows, with BatchCase.Conv (Q, K, V then nil)
}

// Pick returns the given token rows of in, densely.
func (in TokenRows) Pick(d BatchDims, rows []int) TokenRows {
	var o TokenRows
	aw := d.HV // A's width
	if len(in.B) > 0 {
		aw = len(in.A) / (len(in.B) / d.HV)
	}
	for _, t := range rows {
		if in.Q != nil {
			o.Q = append(o.Q, in.Q[t*d.HK*d.K:(t+1)*d.HK*d.K]...)
			o.K = append(o.K, in.K[t*d.HK*d.K:(t+1)*d.HK*d.K]...)
			o.V = append(o.V, in.V[t*d.HV*d.V:(t+1)*d.HV*d.V]...)
		}
		o.Z = append(o.Z, in.Z[t*d.HV*d.V:(t+1)*d.HV*d.V]...)
		o.B = append(o.B, in.B[t*d.HV:(t+1)*d.HV]...)
		o.A = append(o.A, in.A[t*aw:(t+1)*aw]...)
		if in.X != nil {
			C := d.Channels()
			o.X = append(o.X, in.X[t*C:(t+1)*C]...)
		}
	}
	return o
}

// BatchCase is one serving call in the oracle's terms. Pools are lists of slots, each [HV][K][V]
// in the [K][V] order (element (h, i, j) at (h·K + i)·V + j), holding the values the call reads
// (for bf16 pools: the widened bf16 values).
type BatchCase struct {
	Name                     string
	Dims                     BatchDims
	Tiled                    bool // GQA: v-head h reads k-head h mod HK (else h / (HV/HK))
	RMSEps                   float64
	ALog, DtBias, NormWeight []float32 // DtBias [HV], or [HV][K] with PerChannel
	SsmA                     []float32 // [HV] or nil: the decay rate is −SsmA[h] instead of exp(ALog[h]) (GGUF)

	// SPEC Part C: PerChannel is the decay per key channel (In.A [T][HV][K]); LowerBound < 0 its
	// bounded form (0: softplus); Sigmoid the output gate sigmoid(z) (else silu(z)).
	PerChannel bool
	LowerBound float64
	Sigmoid    bool

	Start []int32 // [N+1]
	Read  []int32 // [N]: slot, Pad (-1) or Zero (-2)
	Store []int32 // [T] slot or NoStore (-1), or nil: the state after the last token goes to the Read slot
	In    TokenRows

	State   [][]float32 // the pool read from (and written to, unless StoreTo is set)
	StoreTo [][]float32 // nil, or a second pool receiving the stores (out of place)
	BF16    bool        // the pools store bf16: a stored state is rounded to bf16 nearest-even

	Conv *Conv // SPEC Part D's conv front, or nil

	Random bool // random realistic inputs: SPEC's ≥ 99 % correctly rounded out rule applies
}

// Conv is SPEC Part D's causal conv1d in front of the recurrence.
type Conv struct {
	W       int         // taps, 2..8
	Weight  []float32   // [C][W] (HF's conv1d weight squeezed): tap W−1 multiplies the current row
	Bias    []float32   // [C], or nil (no bias)
	State   [][]float32 // the conv pool read from (and written unless StoreTo): slots of [W−1][C], oldest row first
	StoreTo [][]float32 // nil, or the second conv pool (set exactly when BatchCase.StoreTo is set); receives the conv stores
	BF16    bool        // the conv pools store bf16: a stored row element is rounded to bf16 nearest even (RoundBF16); State holds bf16 values
}

// The special slot values (SPEC Part B).
const (
	Pad     int32 = -1
	Zero    int32 = -2
	NoStore int32 = -1
)

// Tokens is T = Start[N].
func (c *BatchCase) Tokens() int { return int(c.Start[len(c.Start)-1]) }

// BatchWant is the float64 result of a call.
type BatchWant struct {
	Y       []float64 // [T][HV][V]
	OutBF16 []uint16  // [T][HV][V], bf16 of Y (nearest even); +0 for padding tokens
	YCond   []float64 // [T][HV]: max_j Σ_i |q̂_i||S'[i][j]| / max_j |o_j| (SPEC's y_cond)
	Pad     []bool    // [T]: the token belongs to a padding sequence (its outputs are +0)
	// Stored maps a destination slot to the float64 state stored there, [HV][K][V] in the [K][V]
	// order (unrounded: the checker applies SPEC's bf16 rule). Slots not in it keep their bits.
	Stored map[int32][]float64

	U          []float64           // [T][C] conv outputs after SiLU; nil without Conv; padding tokens' rows are 0
	ConvStored map[int32][]float32 // destination conv slot → the [W−1][C] conv state stored there, exact (bf16-rounded with Conv.BF16); slots not in it keep their bits
}

// RunBatch evaluates the call in float64 (SPEC Part B over Parts A, C and D). It refuses what SPEC's
// validation refuses only as far as the evaluation needs (a Zero sequence with Store nil, slots
// out of range, a slot written twice).
func RunBatch(c *BatchCase) (BatchWant, error) {
	d := c.Dims
	HV, V := d.HV, d.V
	N := len(c.Read)
	if len(c.Start) != N+1 || c.Start[0] != 0 {
		return BatchWant{}, fmt.Errorf("oracle: Start has %d entries for %d sequences", len(c.Start), N)
	}
	T := c.Tokens()
	if c.Store != nil && len(c.Store) != T {
		return BatchWant{}, fmt.Errorf("oracle: Store has %d entries, want T = %d", len(c.Store), T)
	}
	r := newBatchRun(c)
	r.w = BatchWant{
		Y: make([]float64, T*HV*V), OutBF16: make([]uint16, T*HV*V), YCond: make([]float64, T*HV),
		Pad: make([]bool, T), Stored: map[int32][]float64{},
	}
	if c.Conv != nil {
		if err := c.validConv(); err != nil {
			return BatchWant{}, err
		}
		r.w.U, r.w.ConvStored = make([]float64, T*d.Channels()), map[int32][]float32{}
	}
	for n := range N {
		if err := r.sequence(n); err != nil {
			return BatchWant{}, err
		}
	}
	return r.w, nil
}

// batchRun is RunBatch's state: the case, the result being built, the pool the stores go to, and
// the float64 state and scratch vectors of the (sequence, value head) being evaluated.
type batchRun struct {
	c   *BatchCase
	w   BatchWant
	dst [][]float32 // c.StoreTo, or c.State when the call is in place

	S                 []float64 // [K][V]: the running state
	qh, kh, egs, q, k []float64 // [K]
	vv, kv, o, A      []float64 // [V]
}

// newBatchRun returns a batchRun for c with its state and scratch allocated (w still empty).
func newBatchRun(c *BatchCase) *batchRun {
	K, V := c.Dims.K, c.Dims.V
	r := &batchRun{c: c, dst: c.State}
	if c.StoreTo != nil {
		r.dst = c.StoreTo
	}
	r.S = make([]float64, K*V)
	r.qh, r.kh, r.egs = make([]float64, K), make([]float64, K), make([]float64, K)
	r.q, r.k, r.vv = make([]float64, K), make([]float64, K), make([]float64, V)
	r.kv, r.o, r.A = make([]float64, V), make([]float64, V), make([]float64, V)
	return r
}

// sequence evaluates sequence n: marks a padding sequence's tokens, refuses a bad read, runs the
// conv front, then carries every value head's state through the sequence's tokens.
func (r *batchRun) sequence(n int) error {
	c := r.c
	t0, t1 := int(c.Start[n]), int(c.Start[n+1])
	if t1 < t0 {
		return fmt.Errorf("oracle: Start decreases at %d", n)
	}
	rd := c.Read[n]
	if rd == Pad {
		for t := t0; t < t1; t++ {
			r.w.Pad[t] = true
		}
		return nil
	}
	if t0 == t1 {
		return nil
	}
	if rd == Zero && c.Store == nil {
		return fmt.Errorf("oracle: sequence %d reads Zero with Store nil", n)
	}
	if rd != Zero && (rd < 0 || int(rd) >= len(c.State)) {
		return fmt.Errorf("oracle: sequence %d reads slot %d of a pool of %d", n, rd, len(c.State))
	}
	if c.Conv != nil {
		if err := c.conv(&r.w, n, t0, t1, rd); err != nil {
			return err
		}
	}
	for h := range c.Dims.HV {
		if err := r.head(h, t0, t1, rd); err != nil {
			return err
		}
	}
	return nil
}

// head carries value head h's state, read from slot rd (or Zero), through tokens [t0, t1): every
// token's outputs, and the state after each token that stores.
func (r *batchRun) head(h, t0, t1 int, rd int32) error {
	c, S := r.c, r.S
	HK, HV, K, V := c.Dims.HK, c.Dims.HV, c.Dims.K, c.Dims.V
	hk := h / (HV / HK)
	if c.Tiled {
		hk = h % HK
	}
	if rd == Zero {
		clear(S)
	} else {
		for i, x := range c.State[rd][h*K*V : (h+1)*K*V] {
			S[i] = float64(x)
		}
	}
	rate := 0.0
	if c.SsmA != nil {
		rate = -float64(c.SsmA[h])
	} else {
		rate = math.Exp(float64(c.ALog[h]))
	}
	for t := t0; t < t1; t++ {
		r.update(t, h, hk, rate)
		r.output(t, h)
		slot := NoStore
		if c.Store != nil {
			slot = c.Store[t]
		} else if t == t1-1 {
			slot = rd
		}
		if slot != NoStore {
			if err := r.store(slot, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// update advances the state S of value head h (k-head hk, decay rate rate) through token t: q̂ and
// k̂ (kept in qh, kh for the output), the decay, the delta rule.
func (r *batchRun) update(t, h, hk int, rate float64) {
	c, S := r.c, r.S
	HV, K, V := c.Dims.HV, c.Dims.K, c.Dims.V
	q, k, qh, kh, egs, kv := r.q, r.k, r.qh, r.kh, r.egs, r.kv
	c.qkv(&r.w, t, h, hk, q, k, r.vv)
	var nq, nk float64
	for i := range K {
		nq += sq(q[i])
		nk += sq(k[i])
	}
	for i := range K {
		qh[i] = q[i] / math.Sqrt(nq+1e-6) / math.Sqrt(float64(K))
		kh[i] = k[i] / math.Sqrt(nk+1e-6)
	}
	beta := 1 / (1 + math.Exp(-float64(c.In.B[t*HV+h])))
	// Decay (per head, or per key channel: row i by its own), then the delta rule.
	if c.PerChannel {
		for i := range K {
			egs[i] = LogDecay(c.In.A[(t*HV+h)*K+i], c.DtBias[h*K+i], rate, c.LowerBound)
		}
	} else {
		lg := LogDecay(c.In.A[t*HV+h], c.DtBias[h], rate, 0)
		for i := range K {
			egs[i] = lg
		}
	}
	for i := range K {
		eg := math.Exp(egs[i])
		for j := range V {
			S[i*V+j] *= eg
		}
	}
	v := r.vv
	for j := range V {
		kv[j] = 0
		for i := range K {
			kv[j] += kh[i] * S[i*V+j]
		}
	}
	for i := range K {
		for j := range V {
			S[i*V+j] += kh[i] * (beta * (v[j] - kv[j]))
		}
	}
}

// output writes token t's outputs for value head h from the updated state S and q̂ (qh): y, its
// bf16 and y_cond.
func (r *batchRun) output(t, h int) {
	c, w, S := r.c, &r.w, r.S
	HV, K, V := c.Dims.HV, c.Dims.K, c.Dims.V
	qh, o, A := r.qh, r.o, r.A
	// o through the updated state, y_cond's numerator, the gated RMSNorm.
	var ss, maxA, maxO float64
	for j := range V {
		o[j], A[j] = 0, 0
		for i := range K {
			o[j] += qh[i] * S[i*V+j]
			A[j] += math.Abs(qh[i]) * math.Abs(S[i*V+j])
		}
		ss += o[j] * o[j]
		maxA, maxO = max(maxA, A[j]), max(maxO, math.Abs(o[j]))
	}
	w.YCond[t*HV+h] = maxA / maxO // NaN (0/0) on a head whose o is all zero
	rms := 1 / math.Sqrt(ss/float64(V)+c.RMSEps)
	z := c.In.Z[(t*HV+h)*V : (t*HV+h+1)*V]
	for j := range V {
		zj := float64(z[j])
		act := zj / (1 + math.Exp(-zj))
		if c.Sigmoid {
			act = 1 / (1 + math.Exp(-zj))
		}
		y := o[j] * rms * float64(c.NormWeight[j]) * act
		w.Y[(t*HV+h)*V+j] = y
		w.OutBF16[(t*HV+h)*V+j] = BF16(y)
	}
}

// store records the state S of value head h as stored to slot of the destination pool, refusing a
// slot out of range or a (slot, head) stored twice.
func (r *batchRun) store(slot int32, h int) error {
	d, dst, w := r.c.Dims, r.dst, &r.w
	K, V := d.K, d.V
	if slot < 0 || int(slot) >= len(dst) {
		return fmt.Errorf("oracle: store to slot %d of a pool of %d", slot, len(dst))
	}
	st := w.Stored[slot]
	if st == nil {
		st = make([]float64, d.SlotLen())
		for i := range st {
			st[i] = math.NaN()
		}
		w.Stored[slot] = st
	} else if !math.IsNaN(st[h*K*V]) {
		return fmt.Errorf("oracle: slot %d head %d stored twice", slot, h)
	}
	copy(st[h*K*V:(h+1)*K*V], r.S)
	return nil
}

// qkv sets q, k (k-head hk) and v (value head h) of token t: the conv's outputs (w.U) with the
// conv front, else the case's rows.
func (c *BatchCase) qkv(w *BatchWant, t, h, hk int, q, k, v []float64) {
	d := c.Dims
	K, V := d.K, d.V
	if c.Conv != nil {
		u := w.U[t*d.Channels() : (t+1)*d.Channels()]
		copy(q, u[hk*K:(hk+1)*K])
		copy(k, u[(d.HK+hk)*K:(d.HK+hk+1)*K])
		copy(v, u[2*d.HK*K+h*V:2*d.HK*K+(h+1)*V])
		return
	}
	for i := range K {
		q[i], k[i] = float64(c.In.Q[(t*d.HK+hk)*K+i]), float64(c.In.K[(t*d.HK+hk)*K+i])
	}
	for j := range V {
		v[j] = float64(c.In.V[(t*d.HV+h)*V+j])
	}
}

// conv computes SPEC Part D for sequence n (tokens [t0, t1), reading slot r): the conv's outputs
// into w.U and, for every store of the sequence, the conv state after its token into
// w.ConvStored.
func (c *BatchCase) conv(w *BatchWant, n, t0, t1 int, r int32) error {
	cv, C := c.Conv, c.Dims.Channels()
	W := cv.W
	if r != Zero && int(r) >= len(cv.State) {
		return fmt.Errorf("oracle: sequence %d reads conv slot %d of a pool of %d", n, r, len(cv.State))
	}
	// x(t, ch) is input row t of the sequence: X from t0 on, before it the conv state.
	x := func(t, ch int) float64 {
		if t >= t0 {
			return float64(c.In.X[t*C+ch])
		}
		if r == Zero {
			return 0
		}
		return float64(cv.State[r][(W-1+t-t0)*C+ch])
	}
	for t := t0; t < t1; t++ {
		for ch := range C {
			a := 0.0
			if cv.Bias != nil {
				a = float64(cv.Bias[ch])
			}
			for j := range W {
				a += float64(cv.Weight[ch*W+j]) * x(t-W+1+j, ch)
			}
			w.U[t*C+ch] = a / (1 + math.Exp(-a))
		}
	}
	dst := cv.State
	if cv.StoreTo != nil {
		dst = cv.StoreTo
	}
	for t := t0; t < t1; t++ {
		slot := NoStore
		if c.Store != nil {
			slot = c.Store[t]
		} else if t == t1-1 {
			slot = r
		}
		if slot == NoStore {
			continue
		}
		if slot < 0 || int(slot) >= len(dst) {
			return fmt.Errorf("oracle: conv store to slot %d of a pool of %d", slot, len(dst))
		}
		if _, ok := w.ConvStored[slot]; ok {
			return fmt.Errorf("oracle: conv slot %d stored twice", slot)
		}
		st := make([]float32, (W-1)*C)
		for i := range W - 1 {
			for ch := range C {
				st[i*C+ch] = float32(x(t-W+2+i, ch))
			}
		}
		if cv.BF16 {
			RoundBF16(st)
		}
		w.ConvStored[slot] = st
	}
	return nil
}

// validConv refuses a conv front whose shapes do not fit the call: W outside 2..8, weights, bias
// or pre-conv rows of the wrong length, a conv slot not of (W−1)·C elements, a second conv pool
// without a second pool or the other way round.
func (c *BatchCase) validConv() error {
	cv, C := c.Conv, c.Dims.Channels()
	W := cv.W
	if W < 2 || W > 8 || len(cv.Weight) != C*W || cv.Bias != nil && len(cv.Bias) != C {
		return fmt.Errorf("oracle: conv of width %d with %d weights and %d biases for C = %d", W, len(cv.Weight), len(cv.Bias), C)
	}
	if len(c.In.X) != c.Tokens()*C {
		return fmt.Errorf("oracle: %d pre-conv values for %d tokens of C = %d", len(c.In.X), c.Tokens(), C)
	}
	if (cv.StoreTo != nil) != (c.StoreTo != nil) {
		return fmt.Errorf("oracle: second conv pool set: %v, second pool set: %v", cv.StoreTo != nil, c.StoreTo != nil)
	}
	for _, p := range [][][]float32{cv.State, cv.StoreTo} {
		for s, st := range p {
			if len(st) != (W-1)*C {
				return fmt.Errorf("oracle: conv slot %d has %d values, want (W−1)·C = %d", s, len(st), (W-1)*C)
			}
		}
	}
	return nil
}

// LogDecay is a lane's log-decay in float64 (SPEC Parts A and C) from its raw gate a, its dt_bias
// and the head's rate exp(A_log): −rate·softplus(a + dt_bias) (softplus's threshold 20), or
// lb·sigmoid(rate·(a + dt_bias)) when lb < 0.
func LogDecay(a, dtBias float32, rate, lb float64) float64 {
	x := float64(a) + float64(dtBias)
	if lb < 0 {
		return lb / (1 + math.Exp(-rate*x))
	}
	sp := x
	if !(x > 20) {
		sp = math.Log1p(math.Exp(x))
	}
	return -rate * sp
}

// BatchGot is what a call produced: the outputs (either may be nil) and the pools after the call,
// as slots in the [K][V] order (bf16 pools widened).
type BatchGot struct {
	Out     []uint16
	OutF32  []float32
	State   [][]float32
	StoreTo [][]float32 // the second pool, when the case has one

	ConvState, ConvStoreTo [][]float32 // the conv pools (bf16 widened), slots of [W−1][C]; ConvStoreTo when the case has one
}

// Bounds of SPEC Part B.
const (
	CondTol             = 0x1p-19 // y: (RelTol + CondTol·y_cond)·head max
	MinExactBF16State   = 0.999   // bf16 pools: fraction of stored elements exactly bf16(float64 state)
	yCondNaNReplacement = 0       // a head with o ≡ 0 has no cancellation measure: RelTol alone
)

// CheckBatch holds got against want with SPEC Part B's bounds: per (token, head) y (OutF32)
// within (1e-5 + 2⁻¹⁹·y_cond)·head max, Out within max(1 bf16 ulp of y, that bound), padding
// outputs +0 exactly; on random cases ≥ 99 % of Out the correctly rounded bf16 of y. Every stored
// head state (f32) within 1e-5·head max; (bf16) within max(1 bf16 ulp, 1e-5·head max) and ≥ 99.9 %
// exactly bf16(float64 state). Every slot not stored keeps its bits, and the source pool keeps
// all of its bits when the stores go to a second pool. With a conv front the conv pools likewise,
// bit for bit (SPEC Part D: a conv state holds inputs). It returns the first violation, or nil.
func CheckBatch(c *BatchCase, w *BatchWant, g BatchGot) error {
	d := c.Dims
	HV, K, V := d.HV, d.K, d.V
	T := c.Tokens()
	same, total := 0, 0
	for t := range T {
		for h := range HV {
			y := w.Y[(t*HV+h)*V : (t*HV+h+1)*V]
			at := func(j int) string { return fmt.Sprintf("token %d head %d [%d]", t, h, j) }
			if w.Pad[t] {
				for j := range V {
					if g.OutF32 != nil && math.Float32bits(g.OutF32[(t*HV+h)*V+j]) != 0 {
						return fmt.Errorf("out_f32 %s: padding token: got %g, want +0", at(j), g.OutF32[(t*HV+h)*V+j])
					}
					if g.Out != nil && g.Out[(t*HV+h)*V+j] != 0 {
						return fmt.Errorf("out %s: padding token: got 0x%04x, want +0", at(j), g.Out[(t*HV+h)*V+j])
					}
				}
				continue
			}
			cond := w.YCond[t*HV+h]
			if math.IsNaN(cond) {
				cond = yCondNaNReplacement
			}
			hm := MaxAbs(y)
			tol := (RelTol + CondTol*cond) * hm
			for j, yj := range y {
				i := (t*HV+h)*V + j
				if g.OutF32 != nil {
					if e := math.Abs(float64(g.OutF32[i]) - yj); !(e <= tol) {
						return fmt.Errorf("y %s: got %g, want %g: error %g > (1e-5 + 2^-19·y_cond %.3g)·head max %g = %g",
							at(j), g.OutF32[i], yj, e, cond, hm, tol)
					}
				}
				if g.Out != nil {
					got := float64(math.Float32frombits(uint32(g.Out[i]) << 16))
					if e := math.Abs(got - yj); !(e <= max(BF16ULP(yj), tol)) {
						return fmt.Errorf("out %s: got %g (0x%04x), want %g (0x%04x): error %g > max(ulp %g, %g)",
							at(j), got, g.Out[i], yj, w.OutBF16[i], e, BF16ULP(yj), tol)
					}
					total++
					if g.Out[i] == w.OutBF16[i] {
						same++
					}
				}
			}
		}
	}
	if c.Random && total > 0 {
		if frac := float64(same) / float64(total); frac < MinCorrectBF16 {
			return fmt.Errorf("out: only %.4f of %d values are correctly rounded, want >= %.2f", frac, total, MinCorrectBF16)
		}
	}
	dst, gotDst, dstName := c.State, g.State, "State"
	if c.StoreTo != nil {
		dst, gotDst, dstName = c.StoreTo, g.StoreTo, "StoreTo"
		if err := sameSlots("State (the source of an out-of-place call)", c.State, g.State, nil); err != nil {
			return err
		}
	}
	if err := sameSlots(dstName, dst, gotDst, w.Stored); err != nil {
		return err
	}
	if c.Conv != nil {
		if err := checkConv(c, w, g); err != nil {
			return err
		}
	}
	exact, stored := 0, 0
	for slot, want := range w.Stored {
		got := gotDst[slot]
		for h := range HV {
			ws, gs := want[h*K*V:(h+1)*K*V], got[h*K*V:(h+1)*K*V]
			hm := MaxAbs(ws)
			tol := RelTol * hm
			for i, x := range ws {
				e := math.Abs(float64(gs[i]) - x)
				if c.BF16 {
					stored++
					if uint16(math.Float32bits(gs[i])>>16) == BF16(x) {
						exact++
					}
					if b := max(BF16ULP(x), tol); !(e <= b) {
						return fmt.Errorf("state (bf16) %s slot %d head %d [%d]: got %g, want %g (bf16 %g): error %g > max(1 bf16 ulp, 1e-5·head max %g) = %g",
							dstName, slot, h, i, gs[i], x, math.Float32frombits(uint32(BF16(x))<<16), e, hm, b)
					}
				} else if !(e <= tol) {
					return fmt.Errorf("state %s slot %d head %d [%d]: got %g, want %g: error %g > 1e-5·head max %g = %g",
						dstName, slot, h, i, gs[i], x, e, hm, tol)
				}
			}
		}
	}
	// A fraction: one element whose float64 state lies within the float32 evaluation's error of a
	// bf16 rounding boundary is allowed in a call of fewer than 1/(1 − MinExactBF16State) stores.
	if stored > 0 && stored-exact > 1 {
		if frac := float64(exact) / float64(stored); frac < MinExactBF16State {
			return fmt.Errorf("state (bf16): only %.5f of %d stored values are bf16(the float64 state), want >= %.3f", frac, stored, MinExactBF16State)
		}
	}
	return nil
}

// checkConv holds the conv pools to SPEC Part D bit for bit: every stored conv slot the expected
// rows, every other slot of the destination pool (and the whole source pool of an out-of-place
// call) the case's.
func checkConv(c *BatchCase, w *BatchWant, g BatchGot) error {
	C := c.Dims.Channels()
	same := func(name string, pool, got [][]float32, stored map[int32][]float32) error {
		if len(got) != len(pool) {
			return fmt.Errorf("conv pool %s: %d slots after the call, want %d", name, len(got), len(pool))
		}
		for s := range pool {
			want, what := pool[s], "not stored by the call, but changed"
			if st, ok := stored[int32(s)]; ok {
				want, what = st, "stored"
			}
			if len(got[s]) != len(want) {
				return fmt.Errorf("conv pool %s slot %d: %d values, want %d", name, s, len(got[s]), len(want))
			}
			for i, x := range want {
				if math.Float32bits(got[s][i]) != math.Float32bits(x) {
					return fmt.Errorf("conv pool %s slot %d row %d channel %d: %s: got %g, want %g", name, s, i/C, i%C, what, got[s][i], x)
				}
			}
		}
		return nil
	}
	if c.Conv.StoreTo == nil {
		return same("ConvState", c.Conv.State, g.ConvState, w.ConvStored)
	}
	if err := same("ConvState (the source of an out-of-place call)", c.Conv.State, g.ConvState, nil); err != nil {
		return err
	}
	return same("ConvStoreTo", c.Conv.StoreTo, g.ConvStoreTo, w.ConvStored)
}

// sameSlots requires every slot of got not in except to hold the bits of want.
func sameSlots(name string, want, got [][]float32, except map[int32][]float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("pool %s: %d slots after the call, want %d", name, len(got), len(want))
	}
	for s := range want {
		if _, ok := except[int32(s)]; ok {
			continue
		}
		for i, x := range want[s] {
			if math.Float32bits(got[s][i]) != math.Float32bits(x) {
				return fmt.Errorf("pool %s slot %d [%d]: not stored by the call, but changed from %g to %g", name, s, i, x, got[s][i])
			}
		}
	}
	return nil
}

// RoundBF16 rounds every value of x to bf16 (nearest even) in place: inputs a bf16 buffer can
// hold exactly.
func RoundBF16(x []float32) {
	for i, v := range x {
		x[i] = math.Float32frombits(uint32(BF16(float64(v))) << 16)
	}
}

// RandomTokens makes T tokens of realistic inputs (q, k, v, z, b ~ N(0, 1), a ~ N(−1, 1.5), as
// Random does).
func RandomTokens(r *rand.Rand, d BatchDims, T int) TokenRows {
	return TokenRows{
		Q: vec(r, T*d.HK*d.K, 0, 1), K: vec(r, T*d.HK*d.K, 0, 1),
		V: vec(r, T*d.HV*d.V, 0, 1), Z: vec(r, T*d.HV*d.V, 0, 1),
		B: vec(r, T*d.HV, 0, 1), A: vec(r, T*d.HV, -1, 1.5),
	}
}

// RandomGate gives the case the per-channel gate (SPEC Part C) of the given kind: 0 the softplus
// form with silu, 1 the softplus form with sigmoid, 2 the lower-bound form (−5) with sigmoid, 3
// the lower-bound form (−3) with silu and the rate as GGUF's ssm_a; 4 is the scalar gate (Part A)
// with the rate as ssm_a. The per-channel kinds make DtBias [HV][K] ~ N(0, 1) (with A_log's mix of
// slow and fast heads, every head has channels near 1 and strong ones). Call it after RandomLayer.
func RandomGate(r *rand.Rand, c *BatchCase, kind int) {
	d := c.Dims
	c.PerChannel, c.Sigmoid, c.LowerBound, c.SsmA = kind < 4, kind == 1 || kind == 2, 0, nil
	if c.PerChannel {
		c.DtBias = vec(r, d.HV*d.K, 0, 1)
	}
	switch kind {
	case 2:
		c.LowerBound = -5
	case 3, 4:
		c.LowerBound = -3
		if kind == 4 {
			c.LowerBound = 0
		}
		c.SsmA = make([]float32, d.HV)
		for h, a := range c.ALog {
			c.SsmA[h] = float32(-math.Exp(float64(a)))
		}
		c.ALog = nil
	}
}

// RandomTokensOf is RandomTokens for the case's gate: A [T][HV][K] ~ N(−1, 1.5) with the
// per-channel gate.
func RandomTokensOf(r *rand.Rand, c *BatchCase, T int) TokenRows {
	in := RandomTokens(r, c.Dims, T)
	if c.PerChannel {
		in.A = vec(r, T*c.Dims.HV*c.Dims.K, -1, 1.5)
	}
	return in
}

// RandomConv gives the case a conv front (SPEC Part D) of width W: weights ~ N(0, 0.5), a bias
// ~ N(0, 0.1) when bias is set, a conv pool of slots rows ~ N(0, 1) (and, when the case stores to
// a second pool, a second conv pool of as many slots, each filled with its index + 1), bf16
// pools (their values bf16) when bf16 is set; and pre-conv rows X ~ N(0, 1) in place of Q, K and
// V. Call it after the case's tokens, slots and states are made.
func RandomConv(r *rand.Rand, c *BatchCase, W int, bias, bf16 bool) {
	d := c.Dims
	C, T := d.Channels(), c.Tokens()
	cv := &Conv{W: W, Weight: vec(r, C*W, 0, 0.5), BF16: bf16}
	if bias {
		cv.Bias = vec(r, C, 0, 0.1)
	}
	for range c.State {
		st := vec(r, (W-1)*C, 0, 1)
		if bf16 {
			RoundBF16(st)
		}
		cv.State = append(cv.State, st)
	}
	for s := range c.StoreTo {
		st := make([]float32, (W-1)*C)
		for i := range st {
			st[i] = float32(s + 1)
		}
		cv.StoreTo = append(cv.StoreTo, st)
	}
	c.Conv = cv
	c.In.Q, c.In.K, c.In.V, c.In.X = nil, nil, nil, vec(r, T*C, 0, 1)
}

// RandomLayer sets the case's parameters to realistic values: norm_weight ~ N(1, 0.2), dt_bias ~
// N(0, 1), A_log ~ N(0, 1) on odd heads and ≈ −4 on even heads (eg ≈ 0.98–0.99, the long memory
// of real layers, where the near-1 decay form matters).
func RandomLayer(r *rand.Rand, c *BatchCase) {
	d := c.Dims
	c.ALog, c.DtBias, c.NormWeight = vec(r, d.HV, 0, 1), vec(r, d.HV, 0, 1), vec(r, d.V, 1, 0.2)
	for h := 0; h < d.HV; h += 2 {
		c.ALog[h] = float32(-4 + 0.3*r.NormFloat64())
	}
	if c.RMSEps == 0 {
		c.RMSEps = 1e-6
	}
}

// WarmStates returns n realistic slots: each the float64 state after warm random tokens from the
// zero state (the case's parameters), rounded to float32, or to bf16 when bf16 is set.
func WarmStates(r *rand.Rand, c *BatchCase, n, warm int, bf16 bool) [][]float32 {
	d := c.Dims
	slots := make([][]float32, n)
	if warm == 0 {
		for s := range slots {
			slots[s] = make([]float32, d.SlotLen())
		}
		return slots
	}
	wc := &BatchCase{
		Dims: d, Tiled: c.Tiled, RMSEps: c.RMSEps, ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight,
		SsmA: c.SsmA, PerChannel: c.PerChannel, LowerBound: c.LowerBound, Sigmoid: c.Sigmoid,
		Start: make([]int32, n+1), Read: make([]int32, n), Store: make([]int32, n*warm),
		In: RandomTokensOf(r, c, n*warm), State: [][]float32{make([]float32, d.SlotLen())},
		StoreTo: make([][]float32, n),
	}
	for s := range n {
		wc.Start[s+1] = int32((s + 1) * warm)
		wc.Read[s] = Zero
		wc.StoreTo[s] = make([]float32, d.SlotLen())
		for t := s * warm; t < (s+1)*warm; t++ {
			wc.Store[t] = NoStore
		}
		wc.Store[(s+1)*warm-1] = int32(s)
	}
	w, err := RunBatch(wc)
	if err != nil {
		panic(err)
	}
	for s := range slots {
		slots[s] = make([]float32, d.SlotLen())
		for i, x := range w.Stored[int32(s)] {
			slots[s][i] = float32(x)
		}
		if bf16 {
			RoundBF16(slots[s])
		}
	}
	return slots
}

// SeqCase is one multi-token reference vector (vectors/seq, FORMAT.md).
type SeqCase struct {
	Name, Note string
	Dims       BatchDims
	Tokens     []int // per sequence
	RMSEps     float64
	BF16       bool // state_dtype "bf16"
	Snapshots  bool
	In         TokenRows
	ALog       []float32
	DtBias     []float32
	NormWeight []float32
	State      []float32 // [B][HV][K][V] initial states (bf16 values in bf16 cases)

	// KDA cases (vectors/kda, kind "kda"): the per-channel gate (In.A holds g [T][HV][K],
	// DtBias [HV][K]), its lower bound (gate "kda_lower_bound"; 0: "kda_softplus") and the
	// sigmoid output gate (out_gate "sigmoid").
	PerChannel bool
	LowerBound float64
	Sigmoid    bool

	// Conv cases (vectors/kda, kind "conv"): the conv front; In.X holds qkv_pre.
	Conv *SeqConv

	Want struct {
		Y             []float64
		OutBF16       []uint16
		YCond         []float64
		State         []float64 // [B][HV][K][V] final, float64
		Snapshots     []float64 // [T][HV][K][V]
		StateBF16     []uint16
		SnapshotsBF16 []uint16

		// Conv cases: qkv [T][C] (the conv outputs), conv_state [B][W−1][C] (final) and
		// conv_snapshots [T][W−1][C] (snapshot cases: the conv state after every token).
		U             []float64
		ConvState     []float32
		ConvSnapshots []float32
	}
	TokenByToken struct { // bf16 cases: one call per token
		Y         []float64
		OutBF16   []uint16
		StateBF16 []uint16
	}
}

// SeqConv is a conv case's conv front (FORMAT.md): its weights and initial conv states, and Hugging
// Face's float32 conv (expected_hf_conv, f32 cases; else nil) as a second opinion.
type SeqConv struct {
	W            int
	Weight, Bias []float32 // [C][W], [C] or nil
	State        []float32 // [B][W−1][C], oldest row first
	HF           struct {
		U                []float32 // qkv [T][C]
		State, Snapshots []float32 // conv_state [B][W−1][C], conv_snapshots [T][W−1][C] (snapshot cases)
	}
}

// LoadSeqVectors reads every *.json.gz multi-token case in dir, sorted by name: vectors/seq's, and
// vectors/kda's KDA (k_*) and conv (c_*) cases.
func LoadSeqVectors(dir string) ([]SeqCase, error) { return loadDir(dir, loadSeq) }

func loadSeq(path string) (SeqCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return SeqCase{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return SeqCase{}, err
	}
	type out struct {
		Y             []float64
		OutBF16       []uint16  `json:"out_bf16"`
		YCond         []float64 `json:"y_cond"`
		State         []float64
		Snapshots     []float64
		StateBF16     []uint16 `json:"state_bf16"`
		SnapshotsBF16 []uint16 `json:"snapshots_bf16"`
	}
	var v struct {
		Name, Note string
		Dims       struct {
			KHeads int `json:"k_heads"`
			VHeads int `json:"v_heads"`
			K      int `json:"k"`
			V      int `json:"v"`
			ConvW  int `json:"conv_width"`
			ConvC  int `json:"conv_channels"`
		}
		Tokens      []int
		Kind        string
		Gate        string
		LowerBound  float64 `json:"gate_lower_bound"`
		OutGate     string  `json:"out_gate"`
		RMSEps      float64 `json:"rms_eps"`
		StateDType  string  `json:"state_dtype"`
		StateLayout string  `json:"state_layout"`
		Snapshots   bool
		Inputs      struct {
			Q, K, V, Z, B, A, G, State []float32
			StateBF16                  []uint16  `json:"state_bf16"`
			ALog                       []float32 `json:"a_log"`
			DtBias                     []float32 `json:"dt_bias"`
			NormWeight                 []float32 `json:"norm_weight"`
			QKVPre                     []float32 `json:"qkv_pre"`
			ConvWeight                 []float32 `json:"conv_weight"`
			ConvBias                   []float32 `json:"conv_bias"`
			ConvState                  []float32 `json:"conv_state"`
		}
		Expected struct {
			out
			QKV           []float64
			ConvState     []float32 `json:"conv_state"`
			ConvSnapshots []float32 `json:"conv_snapshots"`
		}
		HFConv struct {
			QKV           []float32
			ConvState     []float32 `json:"conv_state"`
			ConvSnapshots []float32 `json:"conv_snapshots"`
		} `json:"expected_hf_conv"`
		TokenByToken out `json:"expected_token_by_token"`
	}
	if err := json.NewDecoder(zr).Decode(&v); err != nil {
		return SeqCase{}, err
	}
	if v.StateLayout != "KV" || (v.StateDType != "f32" && v.StateDType != "bf16") {
		return SeqCase{}, fmt.Errorf("state_layout %q, state_dtype %q: unknown", v.StateLayout, v.StateDType)
	}
	kda := false
	switch {
	case v.Kind == "" && v.Gate == "":
	case v.Kind == "kda" && (v.Gate == "kda_softplus" || v.Gate == "kda_lower_bound") && (v.OutGate == "silu" || v.OutGate == "sigmoid"):
		kda = true
		if (v.Gate == "kda_lower_bound") != (v.LowerBound < 0) || v.Inputs.A != nil {
			return SeqCase{}, fmt.Errorf("gate %q with gate_lower_bound %v, inputs a set: %v", v.Gate, v.LowerBound, v.Inputs.A != nil)
		}
		v.Inputs.A = v.Inputs.G
	case v.Kind == "conv" && v.Gate == "gdn" && v.OutGate == "silu":
		if v.Dims.ConvC != 2*v.Dims.KHeads*v.Dims.K+v.Dims.VHeads*v.Dims.V || v.Inputs.Q != nil || v.Inputs.K != nil || v.Inputs.V != nil {
			return SeqCase{}, fmt.Errorf("conv_channels %d for dims %+v, inputs q, k or v set: %v", v.Dims.ConvC, v.Dims, v.Inputs.Q != nil || v.Inputs.K != nil || v.Inputs.V != nil)
		}
		if v.StateDType == "bf16" {
			for i, x := range slices.Concat(v.Inputs.QKVPre, v.Inputs.ConvState) {
				if math.Float32bits(x)&0xffff != 0 {
					return SeqCase{}, fmt.Errorf("bf16 conv case: qkv_pre or conv_state value %d (%g) is not a bf16", i, x)
				}
			}
		}
	default:
		return SeqCase{}, fmt.Errorf("kind %q, gate %q, out_gate %q: not a case this loader knows", v.Kind, v.Gate, v.OutGate)
	}
	for i, b := range v.Inputs.StateBF16 {
		if i >= len(v.Inputs.State) || math.Float32bits(v.Inputs.State[i]) != uint32(b)<<16 {
			return SeqCase{}, fmt.Errorf("inputs state_bf16[%d] is not inputs state's value", i)
		}
	}
	c := SeqCase{
		Name: v.Name, Note: v.Note,
		Dims:   BatchDims{HK: v.Dims.KHeads, HV: v.Dims.VHeads, K: v.Dims.K, V: v.Dims.V},
		Tokens: v.Tokens, RMSEps: v.RMSEps, BF16: v.StateDType == "bf16", Snapshots: v.Snapshots,
		In:   TokenRows{Q: v.Inputs.Q, K: v.Inputs.K, V: v.Inputs.V, Z: v.Inputs.Z, B: v.Inputs.B, A: v.Inputs.A},
		ALog: v.Inputs.ALog, DtBias: v.Inputs.DtBias, NormWeight: v.Inputs.NormWeight, State: v.Inputs.State,
		PerChannel: kda, Sigmoid: v.OutGate == "sigmoid",
	}
	if kda {
		c.LowerBound = v.LowerBound
	}
	if v.Kind == "conv" {
		c.In.X = v.Inputs.QKVPre
		c.Conv = &SeqConv{W: v.Dims.ConvW, Weight: v.Inputs.ConvWeight, Bias: v.Inputs.ConvBias, State: v.Inputs.ConvState}
		c.Conv.HF.U, c.Conv.HF.State, c.Conv.HF.Snapshots = v.HFConv.QKV, v.HFConv.ConvState, v.HFConv.ConvSnapshots
		c.Want.U, c.Want.ConvState, c.Want.ConvSnapshots = v.Expected.QKV, v.Expected.ConvState, v.Expected.ConvSnapshots
	}
	e := v.Expected.out
	c.Want.Y, c.Want.OutBF16, c.Want.YCond, c.Want.State = e.Y, e.OutBF16, e.YCond, e.State
	c.Want.Snapshots, c.Want.StateBF16, c.Want.SnapshotsBF16 = e.Snapshots, e.StateBF16, e.SnapshotsBF16
	c.TokenByToken.Y, c.TokenByToken.OutBF16, c.TokenByToken.StateBF16 = v.TokenByToken.Y, v.TokenByToken.OutBF16, v.TokenByToken.StateBF16
	return c, c.validate()
}

func (c SeqCase) validate() error {
	d := c.Dims
	if d.HK < 1 || d.HV < 1 || d.K < 1 || d.V < 1 || d.HV%d.HK != 0 || len(c.Tokens) == 0 {
		return fmt.Errorf("bad dims %+v, tokens %v", d, c.Tokens)
	}
	T := 0
	for _, n := range c.Tokens {
		if n < 0 {
			return fmt.Errorf("tokens %v", c.Tokens)
		}
		T += n
	}
	B, sl := len(c.Tokens), d.SlotLen()
	gw := 1 // lanes of a head's gate
	if c.PerChannel {
		gw = d.K
	}
	type check struct {
		name      string
		got, want int
	}
	qkv := []check{{"q", len(c.In.Q), T * d.HK * d.K}, {"k", len(c.In.K), T * d.HK * d.K}, {"v", len(c.In.V), T * d.HV * d.V}}
	if cv := c.Conv; cv != nil {
		C, R := d.Channels(), cv.W-1
		qkv = []check{{"qkv_pre", len(c.In.X), T * C}, {"conv_weight", len(cv.Weight), C * cv.W}, {"conv_state", len(cv.State), B * R * C},
			{"expected qkv", len(c.Want.U), T * C}, {"expected conv_state", len(c.Want.ConvState), B * R * C}}
		if cv.Bias != nil {
			qkv = append(qkv, check{"conv_bias", len(cv.Bias), C})
		}
		if cv.HF.U != nil {
			qkv = append(qkv, check{"expected_hf_conv qkv", len(cv.HF.U), T * C}, check{"expected_hf_conv conv_state", len(cv.HF.State), B * R * C})
		}
		if c.Snapshots {
			qkv = append(qkv, check{"expected conv_snapshots", len(c.Want.ConvSnapshots), T * R * C})
			if cv.HF.U != nil {
				qkv = append(qkv, check{"expected_hf_conv conv_snapshots", len(cv.HF.Snapshots), T * R * C})
			}
		}
		if cv.W < 2 || cv.W > 8 {
			return fmt.Errorf("conv_width %d", cv.W)
		}
	}
	checks := []struct {
		name      string
		got, want int
	}{
		{"z", len(c.In.Z), T * d.HV * d.V},
		{"b", len(c.In.B), T * d.HV}, {"a (g)", len(c.In.A), T * d.HV * gw},
		{"a_log", len(c.ALog), d.HV}, {"dt_bias", len(c.DtBias), d.HV * gw}, {"norm_weight", len(c.NormWeight), d.V},
		{"state", len(c.State), B * sl}, {"y", len(c.Want.Y), T * d.HV * d.V}, {"out_bf16", len(c.Want.OutBF16), T * d.HV * d.V},
		{"y_cond", len(c.Want.YCond), T * d.HV}, {"expected state", len(c.Want.State), B * sl},
	}
	if c.Snapshots {
		checks = append(checks, struct {
			name      string
			got, want int
		}{"snapshots", len(c.Want.Snapshots), T * sl})
	}
	if c.BF16 {
		checks = append(checks, []struct {
			name      string
			got, want int
		}{
			{"state_bf16", len(c.Want.StateBF16), B * sl},
			{"token_by_token y", len(c.TokenByToken.Y), T * d.HV * d.V},
			{"token_by_token out_bf16", len(c.TokenByToken.OutBF16), T * d.HV * d.V},
			{"token_by_token state_bf16", len(c.TokenByToken.StateBF16), B * sl},
		}...)
		if c.Snapshots {
			checks = append(checks, struct {
				name      string
				got, want int
			}{"snapshots_bf16", len(c.Want.SnapshotsBF16), T * sl})
		}
	}
	for _, x := range checks {
		if x.got != x.want {
			return fmt.Errorf("%s has %d values, want %d", x.name, x.got, x.want)
		}
	}
	for _, x := range qkv {
		if x.got != x.want {
			return fmt.Errorf("%s has %d values, want %d", x.name, x.got, x.want)
		}
	}
	return nil
}

// Batch returns the vector as a call and its expectation from the vector (not from RunBatch).
// Slot n of State is sequence n's initial state, read by sequence n. Without snapshots the call is
// in place (Store nil: each final state goes back to its slot; a 0-token sequence keeps its
// state). With snapshots, token t stores to slot t of a second pool (StoreTo, T zero slots): the
// expectation is the state after every token, and State keeps its bits. A conv case's conv pools
// follow the recurrent ones (slot n of Conv.State is sequence n's conv state; with snapshots a
// second conv pool of T zero slots), with U and ConvStored from the vector's expected values.
func (c SeqCase) Batch(snapshots bool) (*BatchCase, BatchWant) {
	d := c.Dims
	B, sl := len(c.Tokens), d.SlotLen()
	bc := &BatchCase{
		Name: c.Name, Dims: d, RMSEps: c.RMSEps, ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight,
		PerChannel: c.PerChannel, LowerBound: c.LowerBound, Sigmoid: c.Sigmoid,
		Start: make([]int32, B+1), Read: make([]int32, B), In: c.In, BF16: c.BF16,
		State: make([][]float32, B),
	}
	for n, tn := range c.Tokens {
		bc.Start[n+1] = bc.Start[n] + int32(tn)
		bc.Read[n] = int32(n)
		bc.State[n] = c.State[n*sl : (n+1)*sl]
	}
	T := bc.Tokens()
	w := BatchWant{Y: c.Want.Y, OutBF16: c.Want.OutBF16, YCond: c.Want.YCond, Pad: make([]bool, T), Stored: map[int32][]float64{}}
	var cs int // a conv slot's size
	if cv := c.Conv; cv != nil {
		cs = (cv.W - 1) * d.Channels()
		bc.Conv = &Conv{W: cv.W, Weight: cv.Weight, Bias: cv.Bias}
		for n := range B {
			bc.Conv.State = append(bc.Conv.State, slices.Clone(cv.State[n*cs:(n+1)*cs])) // calls may store into it
		}
		w.U, w.ConvStored = c.Want.U, map[int32][]float32{}
	}
	if snapshots {
		bc.Store = make([]int32, T)
		bc.StoreTo = make([][]float32, T)
		for t := range T {
			bc.Store[t] = int32(t)
			bc.StoreTo[t] = make([]float32, sl)
			w.Stored[int32(t)] = c.Want.Snapshots[t*sl : (t+1)*sl]
			if c.Conv != nil {
				bc.Conv.StoreTo = append(bc.Conv.StoreTo, make([]float32, cs))
				w.ConvStored[int32(t)] = c.Want.ConvSnapshots[t*cs : (t+1)*cs]
			}
		}
		return bc, w
	}
	for n, tn := range c.Tokens {
		if tn > 0 {
			w.Stored[int32(n)] = c.Want.State[n*sl : (n+1)*sl]
			if c.Conv != nil {
				w.ConvStored[int32(n)] = c.Want.ConvState[n*cs : (n+1)*cs]
			}
		}
	}
	return bc, w
}

// TransposeSlot returns an [HV][K][V] slot in the [V][K] order (element (h, i, j) at
// (h·V + j)·K + i), or back with k and v swapped.
func TransposeSlot[E any](s []E, hv, k, v int) []E {
	t := make([]E, len(s))
	for h := range hv {
		for i := range k {
			for j := range v {
				t[(h*v+j)*k+i] = s[(h*k+i)*v+j]
			}
		}
	}
	return t
}
