package oracle

import (
	"math"
	"math/rand/v2"
	"testing"
)

func loadSeqT(t *testing.T) []SeqCase {
	t.Helper()
	cases, err := LoadSeqVectors("../../testdata/seq")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 6 {
		t.Fatalf("%d seq vectors, want at least 6", len(cases))
	}
	kda, err := LoadSeqVectors("../../testdata/kda")
	if err != nil {
		t.Fatal(err)
	}
	if len(kda) != 9 {
		t.Fatalf("%d KDA vectors, want 9", len(kda))
	}
	return append(cases, kda...)
}

func close64(t *testing.T, what string, got, want []float64) { closeTo(t, what, got, want, 1e-9) }

// closeTo requires |got − want| ≤ rel·(1 + |want|) element by element.
func closeTo(t *testing.T, what string, got, want []float64, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !(math.Abs(got[i]-want[i]) <= rel*(1+math.Abs(want[i]))) {
			t.Fatalf("%s[%d]: oracle %g, vector %g", what, i, got[i], want[i])
		}
	}
}

// TestRunBatchAgreesWithSeqVectors checks the batch oracle against the independent multi-token
// vectors: y, y_cond, the final states and every snapshot; bf16 cases also the bf16 rounding of
// the stored states and, one call per token with the state rounded in between, the token-by-token
// expectation bit for bit.
func TestRunBatchAgreesWithSeqVectors(t *testing.T) {
	for _, sc := range loadSeqT(t) {
		t.Run(sc.Name, func(t *testing.T) {
			modes := []bool{false}
			if sc.Snapshots {
				modes = append(modes, true)
			}
			for _, snap := range modes {
				c, vw := sc.Batch(snap)
				w, err := RunBatch(c)
				if err != nil {
					t.Fatal(err)
				}
				close64(t, "y", w.Y, vw.Y)
				closeTo(t, "y_cond", w.YCond, vw.YCond, 1e-6) // the vectors give y_cond to 8 digits
				for i, b := range w.OutBF16 {
					if b != vw.OutBF16[i] {
						t.Fatalf("out_bf16[%d]: oracle 0x%04x, vector 0x%04x", i, b, vw.OutBF16[i])
					}
				}
				if len(w.Stored) != len(vw.Stored) {
					t.Fatalf("snapshots=%v: oracle stores %d slots, vector %d", snap, len(w.Stored), len(vw.Stored))
				}
				sl := sc.Dims.SlotLen()
				for s, st := range vw.Stored {
					close64(t, "state", w.Stored[s], st)
					if !sc.BF16 {
						continue
					}
					all := sc.Want.StateBF16
					if snap {
						all = sc.Want.SnapshotsBF16
					}
					bits := all[int(s)*sl : (int(s)+1)*sl]
					for i, x := range w.Stored[s] {
						if BF16(x) != bits[i] {
							t.Fatalf("snapshots=%v slot %d [%d]: bf16(oracle state) 0x%04x, vector 0x%04x", snap, s, i, BF16(x), bits[i])
						}
					}
				}
				// 0-token sequences: the vector's final state is the initial one.
				for n, tn := range sc.Tokens {
					if tn == 0 {
						for i, x := range sc.State[n*sl : (n+1)*sl] {
							if float64(x) != sc.Want.State[n*sl+i] {
								t.Fatalf("0-token sequence %d: final state [%d] %g, initial %g", n, i, sc.Want.State[n*sl+i], x)
							}
						}
					}
				}
			}
			if sc.BF16 {
				tokenByToken(t, sc)
			}
		})
	}
}

// tokenByToken runs a bf16 case as one oracle call per token (the state read from bf16 and stored
// rounded every call) and compares with expected_token_by_token.
func tokenByToken(t *testing.T, sc SeqCase) {
	c, _ := sc.Batch(false)
	d := c.Dims
	T := c.Tokens()
	pool := make([][]float32, len(c.State))
	for s := range pool {
		pool[s] = append([]float32(nil), c.State[s]...)
	}
	for τ := 0; ; τ++ {
		// Call τ: token τ of every sequence that has one.
		one := &BatchCase{Dims: d, RMSEps: c.RMSEps, ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight, BF16: true, State: pool,
			PerChannel: c.PerChannel, LowerBound: c.LowerBound, Sigmoid: c.Sigmoid}
		one.Start = []int32{0}
		var rows []int
		for n, tn := range sc.Tokens {
			if τ < tn {
				one.Read = append(one.Read, int32(n))
				rows = append(rows, int(c.Start[n])+τ)
				one.Start = append(one.Start, int32(len(rows)))
			}
		}
		if len(rows) == 0 {
			break
		}
		one.In = c.In.Pick(d, rows)
		w, err := RunBatch(one)
		if err != nil {
			t.Fatal(err)
		}
		for r, row := range rows {
			n := d.HV * d.V
			close64(t, "token-by-token y", w.Y[r*n:(r+1)*n], sc.TokenByToken.Y[row*n:(row+1)*n])
		}
		for s, st := range w.Stored {
			for i, x := range st {
				pool[s][i] = math.Float32frombits(uint32(BF16(x)) << 16)
			}
		}
	}
	sl := d.SlotLen()
	for s := range pool {
		for i, x := range pool[s] {
			if b := uint16(math.Float32bits(x) >> 16); b != sc.TokenByToken.StateBF16[s*sl+i] {
				t.Fatalf("token-by-token state slot %d [%d]: oracle 0x%04x, vector 0x%04x", s, i, b, sc.TokenByToken.StateBF16[s*sl+i])
			}
		}
	}
	_ = T
}

// TestRunBatchAgreesWithStep: a batch of one token per sequence, in place, is the single-token
// oracle's step (independent code paths within this package).
func TestRunBatchAgreesWithStep(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, d := range []Dims{{B: 3, HK: 2, HV: 6, K: 17, V: 33}, {B: 1, HK: 1, HV: 1, K: 1, V: 1}, {B: 2, HK: 4, HV: 4, K: 64, V: 8}} {
		c := Random(r, d, 3)
		bd := BatchDims{HK: d.HK, HV: d.HV, K: d.K, V: d.V}
		bc := &BatchCase{
			Dims: bd, RMSEps: c.In.RMSEps, ALog: c.In.ALog, DtBias: c.In.DtBias, NormWeight: c.In.NormWeight,
			Start: make([]int32, d.B+1), Read: make([]int32, d.B),
			In: TokenRows{Q: c.In.Q, K: c.In.K, V: c.In.V, Z: c.In.Z, B: c.In.B, A: c.In.A},
		}
		sl := bd.SlotLen()
		for b := range d.B {
			bc.Start[b+1], bc.Read[b] = int32(b+1), int32(b)
			bc.State = append(bc.State, c.In.State[b*sl:(b+1)*sl])
		}
		w, err := RunBatch(bc)
		if err != nil {
			t.Fatal(err)
		}
		close64(t, "y", w.Y, c.Want.Y)
		for b := range d.B {
			close64(t, "state", w.Stored[int32(b)], c.Want.State[b*sl:(b+1)*sl])
		}
	}
}

// TestCheckBatchCatches: the checker refuses a perturbed state, y and out, a changed unstored
// slot, and a nonzero padding output; it accepts the oracle's own result rounded to float32.
func TestCheckBatchCatches(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	d := BatchDims{HK: 1, HV: 2, K: 8, V: 5}
	c := &BatchCase{Dims: d, Random: true}
	RandomLayer(r, c)
	c.Start = []int32{0, 3, 5, 5}
	c.Read = []int32{0, Pad, 1}
	c.In = RandomTokens(r, d, 5)
	c.State = WarmStates(r, c, 3, 4, false)
	w, err := RunBatch(c)
	if err != nil {
		t.Fatal(err)
	}
	good := func() BatchGot {
		g := BatchGot{Out: append([]uint16(nil), w.OutBF16...), OutF32: make([]float32, len(w.Y))}
		for i, y := range w.Y {
			g.OutF32[i] = float32(y)
		}
		for s := range c.State {
			st := append([]float32(nil), c.State[s]...)
			if ws, ok := w.Stored[int32(s)]; ok {
				for i, x := range ws {
					st[i] = float32(x)
				}
			}
			g.State = append(g.State, st)
		}
		return g
	}
	if err := CheckBatch(c, &w, good()); err != nil {
		t.Fatalf("the oracle's own result: %v", err)
	}
	for name, spoil := range map[string]func(g *BatchGot){
		"state":          func(g *BatchGot) { g.State[0][7] *= 1.001 },
		"unstored slot":  func(g *BatchGot) { g.State[2][0] = math.Nextafter32(g.State[2][0], 1) },
		"y":              func(g *BatchGot) { g.OutF32[3] *= 1.001 },
		"out":            func(g *BatchGot) { g.Out[3] += 2 },
		"padding out":    func(g *BatchGot) { g.Out[3*d.HV*d.V] = 0x8000 },
		"padding outf32": func(g *BatchGot) { g.OutF32[4*d.HV*d.V+1] = float32(math.Copysign(0, -1)) },
	} {
		g := good()
		spoil(&g)
		if CheckBatch(c, &w, g) == nil {
			t.Errorf("%s: a spoilt result passes", name)
		}
	}
}
