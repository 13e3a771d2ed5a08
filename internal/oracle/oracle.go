// Package oracle is the test side of gdnsimd: a float64 evaluation of the GDN decode step written
// straight from the formulas (no shared code with the kernels), the reference vectors, random
// realistic cases, and SPEC.md's accuracy bounds as a checker. Tests in every package use it.
package oracle

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
)

// Dims are the shapes of one step.
type Dims struct {
	B, HK, HV, K, V int
}

// Heads is the number of flattened heads, B·HV.
func (d Dims) Heads() int { return d.B * d.HV }

// Inputs are one step's inputs (float32, as the kernels take them).
type Inputs struct {
	Q, K, V, Z, B, A         []float32
	ALog, DtBias, NormWeight []float32
	State                    []float32
	RMSEps                   float64
}

// Expected are one step's results in float64, and the correctly rounded bf16 of Y.
type Expected struct {
	Y       []float64 // [B][HV][V]
	OutBF16 []uint16  // [B][HV][V]
	State   []float64 // [B][HV][K][V]
}

// Case is one reference case.
type Case struct {
	Name   string
	Note   string
	Dims   Dims
	In     Inputs
	Want   Expected
	Random bool // a random (r*) vector: the ≥ 99 % correctly-rounded bf16 rule applies
}

// Step evaluates the decode step in float64, formula by formula as SPEC.md writes it (decay
// first, the update, then o read through the updated state, then the gated RMSNorm).
func Step(d Dims, in Inputs) Expected {
	K, V := d.K, d.V
	e := Expected{Y: make([]float64, d.Heads()*V), OutBF16: make([]uint16, d.Heads()*V), State: make([]float64, d.Heads()*K*V)}
	qh, kh := make([]float64, K), make([]float64, K)
	kv, delta, o := make([]float64, V), make([]float64, V), make([]float64, V)
	for bh := 0; bh < d.Heads(); bh++ {
		beta, eg := HeadScalars(d, in, bh, qh, kh)
		S := e.State[bh*K*V : (bh+1)*K*V]
		for i := range S {
			S[i] = eg * float64(in.State[bh*K*V+i])
		}
		for j := 0; j < V; j++ {
			kv[j] = 0
			for i := 0; i < K; i++ {
				kv[j] += kh[i] * S[i*V+j]
			}
			delta[j] = beta * (float64(in.V[bh*V+j]) - kv[j])
		}
		for i := 0; i < K; i++ {
			for j := 0; j < V; j++ {
				S[i*V+j] += kh[i] * delta[j]
			}
		}
		var ss float64
		for j := 0; j < V; j++ {
			o[j] = 0
			for i := 0; i < K; i++ {
				o[j] += qh[i] * S[i*V+j]
			}
			ss += o[j] * o[j]
		}
		r := 1 / math.Sqrt(ss/float64(V)+in.RMSEps)
		for j := 0; j < V; j++ {
			z := float64(in.Z[bh*V+j])
			y := o[j] * r * float64(in.NormWeight[j]) * (z / (1 + math.Exp(-z)))
			e.Y[bh*V+j] = y
			e.OutBF16[bh*V+j] = BF16(y)
		}
	}
	return e
}

// HeadScalars evaluates flattened head bh's scalars in float64: it writes q̂ (l2-normalised and
// scaled by 1/√K) and k̂ (l2-normalised) into qh and kh (len K) and returns beta = sigmoid(b) and
// eg = exp(g), g = −exp(A_log)·softplus(a + dt_bias).
func HeadScalars(d Dims, in Inputs, bh int, qh, kh []float64) (beta, eg float64) {
	K := d.K
	b, h := bh/d.HV, bh%d.HV
	kIdx := b*d.HK + h/(d.HV/d.HK)
	var nq, nk float64
	for i := 0; i < K; i++ {
		nq += sq(float64(in.Q[kIdx*K+i]))
		nk += sq(float64(in.K[kIdx*K+i]))
	}
	for i := 0; i < K; i++ {
		qh[i] = float64(in.Q[kIdx*K+i]) / math.Sqrt(nq+1e-6) / math.Sqrt(float64(K))
		kh[i] = float64(in.K[kIdx*K+i]) / math.Sqrt(nk+1e-6)
	}
	beta = 1 / (1 + math.Exp(-float64(in.B[bh])))
	x := float64(in.A[bh]) + float64(in.DtBias[h])
	sp := x
	if x <= 20 {
		sp = math.Log1p(math.Exp(x))
	}
	return beta, math.Exp(-math.Exp(float64(in.ALog[h])) * sp)
}

func sq(x float64) float64 { return x * x }

// BF16 rounds a float64 to bfloat16 bits once, to nearest even (no double rounding through
// float32). NaN becomes the quiet NaN 0x7fc0 with y's sign.
func BF16(y float64) uint16 {
	if math.IsNaN(y) {
		if math.Signbit(y) {
			return 0xffc0
		}
		return 0x7fc0
	}
	sign := uint16(0)
	if math.Signbit(y) {
		sign, y = 0x8000, -y
	}
	if math.IsInf(y, 0) || y == 0 {
		return sign | uint16(math.Float32bits(float32(y))>>16)
	}
	_, exp := math.Frexp(y) // y = m·2^exp, m in [0.5, 1)
	ulp := math.Ldexp(1, max(exp-8, -133))
	lo := math.Floor(y/ulp) * ulp
	pick := lo
	if diff := y - lo; diff > ulp/2 || (diff == ulp/2 && math.Mod(lo/ulp, 2) == 1) {
		pick = lo + ulp
	}
	if pick >= math.Ldexp(1, 128) {
		return sign | 0x7f80
	}
	return sign | uint16(math.Float32bits(float32(pick))>>16)
}

// BF16ULP is the spacing of bf16 values at |y| (the bf16 ulp of y).
func BF16ULP(y float64) float64 {
	if y == 0 || math.IsInf(y, 0) || math.IsNaN(y) {
		return math.Ldexp(1, -133)
	}
	_, exp := math.Frexp(math.Abs(y))
	return math.Ldexp(1, max(exp-8, -133))
}

// LoadVectors reads every *.json.gz case in dir, sorted by name.
func LoadVectors(dir string) ([]Case, error) { return loadDir(dir, loadVector) }

// loadDir reads every *.json.gz file in dir, sorted by name, with load.
func loadDir[C any](dir string, load func(path string) (C, error)) ([]C, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("oracle: no *.json.gz vectors in %s", dir)
	}
	sort.Strings(files)
	var cases []C
	for _, f := range files {
		c, err := load(f)
		if err != nil {
			return nil, fmt.Errorf("oracle: %s: %w", f, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func loadVector(path string) (Case, error) {
	f, err := os.Open(path)
	if err != nil {
		return Case{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return Case{}, err
	}
	var v struct {
		Name, Note string
		Dims       struct {
			Batch  int `json:"batch"`
			KHeads int `json:"k_heads"`
			VHeads int `json:"v_heads"`
			K      int `json:"k"`
			V      int `json:"v"`
		}
		RMSEps float64 `json:"rms_eps"`
		Inputs struct {
			Q, K, V, Z, B, A, State []float32
			ALog                    []float32 `json:"a_log"`
			DtBias                  []float32 `json:"dt_bias"`
			NormWeight              []float32 `json:"norm_weight"`
		}
		Expected struct {
			Y       []float64
			OutBF16 []uint16 `json:"out_bf16"`
			State   []float64
		}
	}
	if err := json.NewDecoder(zr).Decode(&v); err != nil {
		return Case{}, err
	}
	d := Dims{B: v.Dims.Batch, HK: v.Dims.KHeads, HV: v.Dims.VHeads, K: v.Dims.K, V: v.Dims.V}
	c := Case{
		Name: v.Name, Note: v.Note, Dims: d,
		In: Inputs{
			Q: v.Inputs.Q, K: v.Inputs.K, V: v.Inputs.V, Z: v.Inputs.Z, B: v.Inputs.B, A: v.Inputs.A,
			ALog: v.Inputs.ALog, DtBias: v.Inputs.DtBias, NormWeight: v.Inputs.NormWeight,
			State: v.Inputs.State, RMSEps: v.RMSEps,
		},
		Want:   Expected{Y: v.Expected.Y, OutBF16: v.Expected.OutBF16, State: v.Expected.State},
		Random: len(v.Name) > 1 && v.Name[:2] == "r_",
	}
	return c, c.validate()
}

func (c Case) validate() error {
	d := c.Dims
	if d.B < 1 || d.HK < 1 || d.HV < 1 || d.K < 1 || d.V < 1 || d.HV%d.HK != 0 {
		return fmt.Errorf("bad dims %+v", d)
	}
	kl, vl, hl, sl := d.B*d.HK*d.K, d.Heads()*d.V, d.Heads(), d.Heads()*d.K*d.V
	for _, x := range []struct {
		name      string
		got, want int
	}{
		{"q", len(c.In.Q), kl}, {"k", len(c.In.K), kl}, {"v", len(c.In.V), vl}, {"z", len(c.In.Z), vl},
		{"b", len(c.In.B), hl}, {"a", len(c.In.A), hl}, {"a_log", len(c.In.ALog), d.HV},
		{"dt_bias", len(c.In.DtBias), d.HV}, {"norm_weight", len(c.In.NormWeight), d.V},
		{"state", len(c.In.State), sl}, {"y", len(c.Want.Y), vl}, {"out_bf16", len(c.Want.OutBF16), vl},
		{"expected state", len(c.Want.State), sl},
	} {
		if x.got != x.want {
			return fmt.Errorf("%s has %d values, want %d", x.name, x.got, x.want)
		}
	}
	return nil
}

// Random makes a case with realistic values: q, k, v, z ~ N(0,1)-ish, parameters in the models'
// ranges, and a state built by running the float64 recurrence over warm earlier tokens (so it has
// the structure and magnitudes of a real decode state). Want is filled by Step.
func Random(r *rand.Rand, d Dims, warm int) Case {
	in := Inputs{
		ALog: vec(r, d.HV, 0, 1), DtBias: vec(r, d.HV, 0, 1), NormWeight: vec(r, d.V, 1, 0.2),
		State: make([]float32, d.Heads()*d.K*d.V), RMSEps: 1e-6,
	}
	for t := 0; t <= warm; t++ {
		in.Q, in.K = vec(r, d.B*d.HK*d.K, 0, 1), vec(r, d.B*d.HK*d.K, 0, 1)
		in.V, in.Z = vec(r, d.Heads()*d.V, 0, 1), vec(r, d.Heads()*d.V, 0, 1)
		in.B, in.A = vec(r, d.Heads(), 0, 1), vec(r, d.Heads(), -1, 1.5)
		if t < warm {
			want := Step(d, in)
			for i, x := range want.State {
				in.State[i] = float32(x)
			}
		}
	}
	return Case{Name: fmt.Sprintf("random%+v", d), Dims: d, In: in, Want: Step(d, in), Random: true}
}

func vec(r *rand.Rand, n int, mean, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + sd*r.NormFloat64())
	}
	return v
}

// Got is what a kernel produced for a case; Out or OutF32 may be nil.
type Got struct {
	State  []float32
	Out    []uint16
	OutF32 []float32
}

// Tolerances of SPEC.md.
const (
	RelTol         = 1e-5 // of the head's largest magnitude
	MinCorrectBF16 = 0.99 // fraction of correctly rounded bf16 outputs on random cases
)

// Check holds got against the case's float64 expectation with SPEC.md's bounds, per head: State
// and OutF32 within RelTol of the head's max |value|; every Out element within max(1 bf16 ulp of
// y, RelTol·the head's max |y|) of y; on random cases at least 99 % of Out exactly the correctly
// rounded bf16 of y. It returns a description of the first violation, or nil.
func Check(c Case, g Got) error {
	d, w := c.Dims, c.Want
	K, V := d.K, d.V
	for bh := 0; bh < d.Heads(); bh++ {
		if err := within("state", bh, g.State[bh*K*V:(bh+1)*K*V], w.State[bh*K*V:(bh+1)*K*V]); err != nil {
			return err
		}
		y := w.Y[bh*V : (bh+1)*V]
		if g.OutF32 != nil {
			if err := within("out_f32", bh, g.OutF32[bh*V:(bh+1)*V], y); err != nil {
				return err
			}
		}
		if g.Out != nil {
			tol := RelTol * MaxAbs(y)
			for j, yj := range y {
				got := float64(math.Float32frombits(uint32(g.Out[bh*V+j]) << 16))
				if err := math.Abs(got - yj); !(err <= max(BF16ULP(yj), tol)) {
					return fmt.Errorf("out (bf16) head %d [%d]: got %g (0x%04x), want %g (0x%04x): error %g > max(ulp %g, %g)",
						bh, j, got, g.Out[bh*V+j], yj, w.OutBF16[bh*V+j], err, BF16ULP(yj), tol)
				}
			}
		}
	}
	if g.Out != nil && c.Random {
		same := 0
		for i, o := range g.Out {
			if o == w.OutBF16[i] {
				same++
			}
		}
		if frac := float64(same) / float64(len(g.Out)); frac < MinCorrectBF16 {
			return fmt.Errorf("out (bf16): only %.4f of %d values are correctly rounded, want >= %.2f", frac, len(g.Out), MinCorrectBF16)
		}
	}
	return nil
}

func within(what string, bh int, got []float32, want []float64) error {
	tol := RelTol * MaxAbs(want)
	for i, wv := range want {
		if err := math.Abs(float64(got[i]) - wv); !(err <= tol) {
			return fmt.Errorf("%s head %d [%d]: got %g, want %g: error %g > %g (1e-5 of the head's max %g)",
				what, bh, i, got[i], wv, err, tol, MaxAbs(want))
		}
	}
	return nil
}

// MaxAbs is the largest magnitude in v (a head max).
func MaxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(x))
	}
	return m
}
