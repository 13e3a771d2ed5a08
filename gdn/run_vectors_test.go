package gdn_test

import (
	"math"
	"sync"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

var seqVectors = sync.OnceValues(func() ([]oracle.SeqCase, error) {
	seq, err := oracle.LoadSeqVectors("../testdata/seq")
	if err != nil {
		return nil, err
	}
	kda, err := oracle.LoadSeqVectors("../testdata/kda")
	return append(seq, kda...), err
})

// loadSeqVectors returns the multi-token vectors: vectors/seq's (Part B) and vectors/kda's KDA
// cases (Part C: the per-channel gate, its lower bound, the sigmoid output gate) and conv cases
// (Part D: the conv front).
func loadSeqVectors(t testing.TB) []oracle.SeqCase {
	t.Helper()
	cases, err := seqVectors()
	require.NoError(t, err)
	kda, conv := 0, 0
	for _, c := range cases {
		if c.PerChannel {
			kda++
		}
		if c.Conv != nil {
			conv++
		}
	}
	require.GreaterOrEqual(t, len(cases)-kda-conv, 6)
	require.Equal(t, 9, kda, "KDA vectors")
	require.Equal(t, 6, conv, "conv vectors")
	return cases
}

// TestRunSeqVectors runs every multi-token reference vector (independent float64 numpy) through
// Run with every kernel and every state format of the vector's storage type ([V][K]: the states
// transposed), within SPEC's bounds (y relative to the vector's y_cond): in place, each final state
// back to its slot (a 0-token sequence keeps its bits); snapshot vectors also out of place with
// the state after every token in its own slot of a second pool.
func TestRunSeqVectors(t *testing.T) {
	cases := loadSeqVectors(t)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		forEachFormat(t, kernel, func(t *testing.T, format gdnsimd.Format) {
			for _, sc := range cases {
				t.Run(sc.Name, func(t *testing.T) {
					if sc.BF16 != (format.Storage != gdnsimd.StorageF32) {
						t.Skipf("the vector's state is %s", map[bool]string{false: "f32", true: "bf16"}[sc.BF16])
					}
					modes := []bool{false}
					if sc.Snapshots {
						modes = append(modes, true)
					}
					for _, snap := range modes {
						c, want := sc.Batch(snap)
						workers := 1 + 2*(len(sc.Tokens)%2) // Workers 1 and 3 across the vectors
						got := runBatch(t, batchLayer(t, c, kernel, format, workers), c, runSetup{format: format, rows: rowForms[0], workers: workers})
						require.NoError(t, oracle.CheckBatch(c, &want, got), "snapshots=%v workers=%d", snap, workers)
					}
					if sc.BF16 {
						runTokenByToken(t, kernel, format, sc)
					}
				})
			}
		})
	})
}

// runTokenByToken runs a bf16 vector as one Run per token (in place: the state is read from and
// rounded to bf16 every call). Each call is held to SPEC's bounds against the batch oracle started
// from the pool the kernel left; at the end the pool must be the vector's expected_token_by_token
// state (every element within 1 bf16 ulp, ≥ 99.9 % exact) and the outputs its y and out_bf16.
func runTokenByToken(t *testing.T, kernel string, format gdnsimd.Format, sc oracle.SeqCase) {
	c, _ := sc.Batch(false)
	d := c.Dims
	l := batchLayer(t, c, kernel, format, 1)
	pool := c.State
	nv := d.HV * d.V
	y := make([]float32, len(sc.TokenByToken.Y))
	out := make([]uint16, len(sc.TokenByToken.OutBF16))
	ycond := make([]float64, len(sc.Want.YCond))
	for τ := 0; ; τ++ {
		one := *c
		one.Start, one.Read, one.State = []int32{0}, nil, pool
		if c.Conv != nil {
			cv := *c.Conv
			one.Conv = &cv
		}
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
		want, err := oracle.RunBatch(&one)
		require.NoError(t, err)
		got := runBatch(t, l, &one, runSetup{format: format, rows: rowForms[0], workers: 1})
		require.NoError(t, oracle.CheckBatch(&one, &want, got), "token-by-token call %d", τ)
		for r, row := range rows {
			copy(y[row*nv:(row+1)*nv], got.OutF32[r*nv:(r+1)*nv])
			copy(out[row*nv:(row+1)*nv], got.Out[r*nv:(r+1)*nv])
			copy(ycond[row*d.HV:(row+1)*d.HV], want.YCond[r*d.HV:(r+1)*d.HV])
		}
		pool = got.State
		if c.Conv != nil {
			c.Conv.State = got.ConvState
		}
	}
	// Against the vector's trajectory. Each call above is held to SPEC's bounds; across calls the
	// float32 evaluation's last bits may round a bf16 state element to the other side of the
	// vector's (1 ulp), and such a flip persists in later states (decay and the delta rule do not
	// amplify it). So: every final element within max(1 bf16 ulp, 1e-5 · head max) (SPEC's bf16
	// bound), ≥ 99.9 % exact; y within (1e-5 + 2⁻⁸·y_cond) · head max, the most a state whose
	// elements each differ by one bf16 ulp (≤ 2⁻⁸ relative) moves o = Σ q̂_i S[i][j]; out within
	// max(1 bf16 ulp of y, that bound).
	sl := d.SlotLen()
	nh := d.K * d.V
	exact, total := 0, 0
	for s, slot := range pool {
		for h := range d.HV {
			want := make([]float64, nh)
			for i := range nh {
				want[i] = float64(math.Float32frombits(uint32(sc.TokenByToken.StateBF16[s*sl+h*nh+i]) << 16))
			}
			hm := oracle.MaxAbs(want)
			for i, w := range want {
				x := slot[h*nh+i]
				total++
				if float64(x) == w {
					exact++
				}
				require.LessOrEqual(t, math.Abs(float64(x)-w), max(oracle.BF16ULP(w), oracle.RelTol*hm), "token-by-token final state slot %d head %d [%d]", s, h, i)
			}
		}
	}
	require.GreaterOrEqual(t, float64(exact)/float64(total), oracle.MinExactBF16State, "token-by-token final state: exactly the vector's bf16")
	for r := range c.Tokens() {
		for h := range d.HV {
			at := (r*d.HV + h) * d.V
			w := sc.TokenByToken.Y[at : at+d.V]
			hm := oracle.MaxAbs(w)
			tol := (oracle.RelTol + 0x1p-8*ycond[r*d.HV+h]) * hm
			for j, x := range w {
				require.LessOrEqual(t, math.Abs(float64(y[at+j])-x), tol, "token-by-token y token %d head %d [%d]", r, h, j)
				o := float64(math.Float32frombits(uint32(out[at+j]) << 16))
				require.LessOrEqual(t, math.Abs(o-x), max(oracle.BF16ULP(x), tol), "token-by-token out token %d head %d [%d]", r, h, j)
			}
		}
	}
}

// TestRunVectors runs the single-token reference vectors through Run (a Batch of one token per
// sequence, sequence b reading and writing back slot b) with every kernel and f32 state format
// ([V][K]: transposed), within oracle.Check's bounds. (bf16 pools: the vectors' states are not
// bf16 values.)
func TestRunVectors(t *testing.T) {
	cases := loadVectors(t)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		forEachFormat(t, kernel, func(t *testing.T, format gdnsimd.Format) {
			if format.Storage != gdnsimd.StorageF32 {
				t.Skip("the single-token vectors' states are not bf16 values")
			}
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					d := oracle.BatchDims{HK: c.Dims.HK, HV: c.Dims.HV, K: c.Dims.K, V: c.Dims.V}
					bc := &oracle.BatchCase{
						Dims: d, RMSEps: c.In.RMSEps, ALog: c.In.ALog, DtBias: c.In.DtBias, NormWeight: c.In.NormWeight,
						Start: make([]int32, c.Dims.B+1), Read: make([]int32, c.Dims.B),
						In: oracle.TokenRows{Q: c.In.Q, K: c.In.K, V: c.In.V, Z: c.In.Z, B: c.In.B, A: c.In.A},
					}
					sl := d.SlotLen()
					for b := range c.Dims.B {
						bc.Start[b+1], bc.Read[b] = int32(b+1), int32(b)
						bc.State = append(bc.State, c.In.State[b*sl:(b+1)*sl])
					}
					got := runBatch(t, batchLayer(t, bc, kernel, format, 1), bc, runSetup{format: format, rows: rowForms[0], workers: 1})
					g := oracle.Got{Out: got.Out, OutF32: got.OutF32}
					for _, s := range got.State {
						g.State = append(g.State, s...)
					}
					require.NoError(t, oracle.Check(c, g))
				})
			}
		})
	})
}
