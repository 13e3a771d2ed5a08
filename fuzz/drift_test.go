package fuzz

import (
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"testing"

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
	vec := func(m int, mean, sd float64) []float32 {
		v := make([]float32, m)
		for i := range v {
			v[i] = float32(mean + sd*r.NormFloat64())
		}
		return v
	}
	for tok := range tokens {
		in := oracle.Inputs{
			Q: vec(d.B*d.HK*d.K, 0, 1), K: vec(d.B*d.HK*d.K, 0, 1), V: vec(d.Heads()*d.V, 0, 1), Z: vec(d.Heads()*d.V, 0, 1),
			B: vec(d.Heads(), 0, 1), A: vec(d.Heads(), -1, 1.5), ALog: aLog, DtBias: dtBias, NormWeight: norm, RMSEps: 1e-6,
		}
		v := in.V
		in.State = hi
		sHi := oracle.Step(d, in).State
		in.State, in.V = lo, zeroV
		sLo := oracle.Step(d, in).State
		for i := range s64 {
			s64[i] = sHi[i] + sLo[i]
			hi[i] = float32(s64[i])
			lo[i] = float32(s64[i] - float64(hi[i]))
		}
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
