package oracle

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
	conv := 0
	for _, c := range kda {
		if c.Conv != nil {
			conv++
		}
	}
	if len(kda)-conv != 9 || conv != 6 {
		t.Fatalf("%d KDA and %d conv vectors, want 9 and 6", len(kda)-conv, conv)
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
				if sc.Conv != nil { // first: a wrong conv shows as wrong q, k, v rather than y
					checkConvVector(t, sc, w, vw, snap)
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

// checkConvVector holds the oracle's conv outputs and stored conv states to a conv vector's: u
// within 1e-12 (and Hugging Face's float32 conv within 1e-6), the conv states exactly (also HF's,
// which copy inputs), and a 0-token sequence's final conv state its initial one.
func checkConvVector(t *testing.T, sc SeqCase, w, vw BatchWant, snap bool) {
	t.Helper()
	closeTo(t, "qkv", w.U, vw.U, 1e-12)
	if hf := sc.Conv.HF; hf.U != nil {
		f := make([]float64, len(hf.U))
		for i, x := range hf.U {
			f[i] = float64(x)
		}
		closeTo(t, "qkv (HF float32)", w.U, f, 1e-6)
		sameBits(t, "HF conv_state", hf.State, sc.Want.ConvState)
		sameBits(t, "HF conv_snapshots", hf.Snapshots, sc.Want.ConvSnapshots)
	}
	if len(w.ConvStored) != len(vw.ConvStored) {
		t.Fatalf("snapshots=%v: oracle stores %d conv slots, vector %d", snap, len(w.ConvStored), len(vw.ConvStored))
	}
	for s, want := range vw.ConvStored {
		sameBits(t, fmt.Sprintf("snapshots=%v conv slot %d", snap, s), w.ConvStored[s], want)
	}
	cs := (sc.Conv.W - 1) * sc.Dims.Channels()
	for n, tn := range sc.Tokens {
		if tn == 0 {
			sameBits(t, fmt.Sprintf("0-token sequence %d: final conv state", n), sc.Want.ConvState[n*cs:(n+1)*cs], sc.Conv.State[n*cs:(n+1)*cs])
		}
	}
}

// sameBits requires got and want to hold the same float32 bits.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i, x := range want {
		if math.Float32bits(got[i]) != math.Float32bits(x) {
			t.Fatalf("%s [%d]: got %g, want %g", what, i, got[i], x)
		}
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
		if c.Conv != nil { // the conv pool as it is: the calls store into it in place below
			cv := *c.Conv
			one.Conv = &cv
		}
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
		for s, st := range w.ConvStored {
			copy(c.Conv.State[s], st)
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

// TestCheckBatchCatchesConv: with a conv front (f32 and bf16 conv pools, in place and out of
// place; a bf16 pool's stores are bf16) the checker accepts the oracle's own result and refuses a stored conv slot off by one
// bit, a changed conv slot the call does not store, and a changed source conv pool.
func TestCheckBatchCatchesConv(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	d := BatchDims{HK: 1, HV: 2, K: 8, V: 5}
	for _, bf16 := range []bool{false, true} {
		for _, outOfPlace := range []bool{false, true} {
			c := &BatchCase{Dims: d, Random: true}
			RandomLayer(r, c)
			c.Start = []int32{0, 3, 5, 5} // 3 tokens from slot 0, 2 padding tokens, 0 tokens from slot 1
			c.Read = []int32{0, Pad, 1}
			c.In = RandomTokens(r, d, 5)
			c.State = WarmStates(r, c, 3, 4, false)
			stored, unstored := int32(0), int32(2) // a slot the call stores, one it does not
			if outOfPlace {
				c.Store = []int32{NoStore, 3, 1, NoStore, NoStore}
				c.StoreTo = WarmStates(r, c, 4, 0, false)
				stored, unstored = 3, 0
			}
			RandomConv(r, c, 4, true, bf16)
			w, err := RunBatch(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.ConvStored) != len(w.Stored) {
				t.Fatalf("%d conv slots stored, %d recurrent ones", len(w.ConvStored), len(w.Stored))
			}
			for s, st := range w.ConvStored { // X is not bf16: a bf16 conv pool stores it rounded
				if i := slices.IndexFunc(st, func(x float32) bool { return bf16 && math.Float32bits(x)&0xffff != 0 }); i >= 0 {
					t.Fatalf("bf16 conv pool slot %d [%d]: stores %g, not a bf16", s, i, st[i])
				}
			}
			good := func() BatchGot {
				g := BatchGot{Out: slices.Clone(w.OutBF16), OutF32: make([]float32, len(w.Y))}
				for i, y := range w.Y {
					g.OutF32[i] = float32(y)
				}
				pools := func(src [][]float32) (out [][]float32) {
					for _, st := range src {
						out = append(out, slices.Clone(st))
					}
					return out
				}
				g.State, g.StoreTo, g.ConvState, g.ConvStoreTo = pools(c.State), pools(c.StoreTo), pools(c.Conv.State), pools(c.Conv.StoreTo)
				dst, cdst := g.State, g.ConvState
				if outOfPlace {
					dst, cdst = g.StoreTo, g.ConvStoreTo
				}
				for s, st := range w.Stored {
					for i, x := range st {
						dst[s][i] = float32(x)
					}
					if c.BF16 {
						RoundBF16(dst[s])
					}
				}
				for s, st := range w.ConvStored {
					copy(cdst[s], st)
				}
				return g
			}
			if err := CheckBatch(c, &w, good()); err != nil {
				t.Fatalf("bf16 %v, out of place %v: the oracle's own result: %v", bf16, outOfPlace, err)
			}
			bit := uint32(1) // the last bit a pool holds
			if bf16 {
				bit = 1 << 16
			}
			flip := func(x *float32) { *x = math.Float32frombits(math.Float32bits(*x) ^ bit) }
			spoils := map[string]func(g *BatchGot){
				"stored conv slot, one bit": func(g *BatchGot) { flip(&g.ConvState[stored][d.Channels()+3]) },
				"unstored conv slot":        func(g *BatchGot) { flip(&g.ConvState[unstored][2*d.Channels()-1]) },
			}
			if outOfPlace {
				spoils["stored conv slot, one bit"] = func(g *BatchGot) { flip(&g.ConvStoreTo[stored][d.Channels()+3]) }
				spoils["unstored conv slot"] = func(g *BatchGot) { flip(&g.ConvStoreTo[unstored][0]) }
				spoils["source conv pool"] = func(g *BatchGot) { flip(&g.ConvState[0][5]) }
			}
			for name, spoil := range spoils {
				g := good()
				spoil(&g)
				if err := CheckBatch(c, &w, g); err == nil {
					t.Errorf("bf16 %v, out of place %v, %s: a spoilt result passes", bf16, outOfPlace, name)
				} else {
					t.Logf("bf16 %v, out of place %v, %s: %v", bf16, outOfPlace, name, err)
				}
			}
		}
	}
}

// TestRunBatchConvSplits: the conv carries exactly across calls (SPEC Part D). One out-of-place
// call storing after every token gives, bit for bit, the conv outputs and conv states of one call
// per token that reads the conv state the previous call stored: f32 and bf16 conv pools (bf16
// inputs), widths 2 to 8, a Zero read, sequences shorter than W−1, an empty and a padding one.
func TestRunBatchConvSplits(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	d := BatchDims{HK: 1, HV: 2, K: 4, V: 3}
	C := d.Channels()
	for _, W := range []int{2, 4, 8} {
		for _, bf16 := range []bool{false, true} {
			c := &BatchCase{Dims: d}
			RandomLayer(r, c)
			c.Start, c.Read = []int32{0, 9, 11, 11, 12, 14}, []int32{0, Zero, 1, 2, Pad}
			T := c.Tokens()
			c.In = RandomTokens(r, d, T)
			c.State, c.StoreTo = WarmStates(r, c, 3, 2, false), WarmStates(r, c, T, 0, false)
			c.Store = make([]int32, T)
			for t := range T {
				c.Store[t] = int32(t)
			}
			c.Store[12], c.Store[13] = NoStore, NoStore // the padding sequence's
			RandomConv(r, c, W, true, bf16)
			if bf16 {
				RoundBF16(c.In.X)
			}
			w, err := RunBatch(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.ConvStored) != 12 || slices.ContainsFunc(w.U[12*C:], func(u float64) bool { return u != 0 }) {
				t.Fatalf("W %d: %d conv slots stored, want 12; padding u %v", W, len(w.ConvStored), w.U[12*C:])
			}
			// The split: the case's slots, then T more; token t stores to slot S+t, read by the next
			// token of its sequence.
			S := int32(len(c.State))
			pool, cpool := slices.Clone(c.State), slices.Clone(c.Conv.State)
			for range T {
				pool, cpool = append(pool, make([]float32, d.SlotLen())), append(cpool, make([]float32, (W-1)*C))
			}
			for n, read := range c.Read[:4] {
				for tk := int(c.Start[n]); tk < int(c.Start[n+1]); tk++ {
					if tk > int(c.Start[n]) {
						read = S + int32(tk) - 1
					}
					one := &BatchCase{
						Dims: d, RMSEps: c.RMSEps, ALog: c.ALog, DtBias: c.DtBias, NormWeight: c.NormWeight,
						Start: []int32{0, 1}, Read: []int32{read}, Store: []int32{S + int32(tk)}, In: c.In.Pick(d, []int{tk}), State: pool,
					}
					cv := *c.Conv
					cv.State, cv.StoreTo = cpool, nil
					one.Conv = &cv
					w1, err := RunBatch(one)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(w1.U, w.U[tk*C:(tk+1)*C]) {
						t.Fatalf("W %d bf16 %v token %d: u of the split differs", W, bf16, tk)
					}
					sameBits(t, fmt.Sprintf("W %d bf16 %v token %d: conv state", W, bf16, tk), w1.ConvStored[S+int32(tk)], w.ConvStored[int32(tk)])
					for i, x := range w1.Stored[S+int32(tk)] {
						pool[S+int32(tk)][i] = float32(x)
					}
					cpool[S+int32(tk)] = w1.ConvStored[S+int32(tk)]
				}
			}
		}
	}
}
