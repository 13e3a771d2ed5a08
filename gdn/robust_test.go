package gdn_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/gdnsimd/gdnsimd/internal/race"
	"github.com/stretchr/testify/require"
)

// TestNonFiniteIsolation: a NaN or Inf in one head's inputs leaves every other head's output and
// state bits unchanged (with every worker split).
func TestNonFiniteIsolation(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	d := oracle.Dims{B: 2, HK: 2, HV: 4, K: 33, V: 20}
	c := oracle.Random(r, d, 1)
	poisons := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	type target struct {
		field string
		idx   int   // element to poison
		heads []int // flattened v-heads allowed to change
	}
	var targets []target
	K, V := d.K, d.V
	targets = append(targets,
		target{"Q", 1*K + 3, []int{2, 3}},          // k-head 1 of sequence 0 feeds v-heads 2, 3
		target{"K", (2+0)*K + 0, []int{4, 5}},      // k-head 0 of sequence 1 feeds v-heads 4, 5
		target{"V", 5*V + 7, []int{5}},             // v-head 5
		target{"Z", 0*V + 19, []int{0}},            // v-head 0
		target{"B", 6, []int{6}},                   // beta of head 6
		target{"A", 3, []int{3}},                   // gate of head 3
		target{"State", 7*K*V + 5*V + 2, []int{7}}, // head 7
	)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, w := range []int{1, 3} {
			l := newLayer(t, c, kernel, w)
			clean := step(t, l, c, false)
			for _, tg := range targets {
				for _, p := range poisons {
					pc := c
					pc.In = poisonInputs(c.In, tg.field, tg.idx, p)
					got := step(t, l, pc, w == 1)
					for bh := 0; bh < d.Heads(); bh++ {
						if slices.Contains(tg.heads, bh) {
							continue
						}
						require.True(t, slices.Equal(f32bits(clean.State[bh*K*V:(bh+1)*K*V]), f32bits(got.State[bh*K*V:(bh+1)*K*V])), "%s=%v spoiled state of head %d", tg.field, p, bh)
						require.True(t, slices.Equal(clean.Out[bh*V:(bh+1)*V], got.Out[bh*V:(bh+1)*V]), "%s=%v spoiled out of head %d", tg.field, p, bh)
						require.True(t, slices.Equal(f32bits(clean.OutF32[bh*V:(bh+1)*V]), f32bits(got.OutF32[bh*V:(bh+1)*V])), "%s=%v spoiled out_f32 of head %d", tg.field, p, bh)
					}
				}
			}
		}
	})
}

func poisonInputs(in oracle.Inputs, field string, idx int, p float32) oracle.Inputs {
	out := in
	s := map[string]*[]float32{"Q": &out.Q, "K": &out.K, "V": &out.V, "Z": &out.Z, "B": &out.B, "A": &out.A, "State": &out.State}[field]
	*s = slices.Clone(*s)
	(*s)[idx] = p
	return out
}

// TestConcurrentSteps: one Layer, many goroutines stepping different data at once (run with
// -race), each result identical to the same call made alone.
func TestConcurrentSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	d := oracle.Dims{B: 2, HK: 2, HV: 4, K: 64, V: 48}
	var cases []oracle.Case
	for i := 0; i < 6; i++ {
		cases = append(cases, oracle.Random(r, d, 1))
	}
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		c0 := cases[0]
		for _, w := range []int{1, 2} {
			l := newLayer(t, c0, kernel, w)
			// Parameters (ALog etc.) differ per random case: use case 0's layer for all, and
			// compare each concurrent result with the same layer's sequential result.
			want := make([]oracle.Got, len(cases))
			for i, c := range cases {
				c.In.ALog, c.In.DtBias, c.In.NormWeight = c0.In.ALog, c0.In.DtBias, c0.In.NormWeight
				want[i] = step(t, l, c, true)
			}
			got := make([]oracle.Got, len(cases))
			var wg sync.WaitGroup
			for rep := 0; rep < 3; rep++ {
				for i, c := range cases {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c.In.ALog, c.In.DtBias, c.In.NormWeight = c0.In.ALog, c0.In.DtBias, c0.In.NormWeight
						in := input(c)
						n := d.Heads() * d.V
						out := gdn.Output{State: in.State, Out: make([]gdn.BF16, n), OutF32: make([]float32, n)}
						if err := l.Step(in, out); err != nil {
							t.Error(err)
							return
						}
						if rep == 0 {
							bits := make([]uint16, n)
							for j, b := range out.Out {
								bits[j] = uint16(b)
							}
							got[i] = oracle.Got{State: out.State, Out: bits, OutF32: out.OutF32}
						}
					}()
				}
			}
			wg.Wait()
			for i := range cases {
				require.NoError(t, sameBits(got[i], want[i]), "case %d workers %d", i, w)
			}
		}
	})
}

// TestZeroAllocs: a Step allocates nothing, with one worker and with two (a parallel call: the
// state, 256 KiB, is enough to split, and GOMAXPROCS is raised to 2 if it is lower; hence not
// testing.AllocsPerRun, which runs f with GOMAXPROCS 1); and neither does a Step nor a Run of a
// sequence over more than a chunk after garbage collections (the Layer's scratch and the
// validators are kept in free lists, not in a sync.Pool, which the GC empties).
func TestZeroAllocs(t *testing.T) {
	if testing.CoverMode() != "" || race.Enabled {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	r := rand.New(rand.NewPCG(9, 10))
	c := oracle.Random(r, oracle.Dims{B: 4, HK: 2, HV: 4, K: 64, V: 64}, 0)
	long := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == "long-inplace" })
	require.GreaterOrEqual(t, long, 0)
	bc, _, rf := randomCase(t, long, false, -1, false)
	f32 := gdnsimd.Formats()[0]
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, w := range []int{1, 2} {
			l := newLayer(t, c, kernel, w)
			in := input(c)
			n := c.Dims.Heads() * c.Dims.V
			out := gdn.Output{State: in.State, Out: make([]gdn.BF16, n), OutF32: make([]float32, n)}
			step := func() {
				if err := l.Step(in, out); err != nil {
					t.Fatal(err)
				}
			}
			require.Zero(t, leastMallocs(50, step), "workers %d", w)
			lr := batchLayer(t, bc, kernel, f32, w)
			b := caseBatch(bc, runSetup{format: f32, rows: rf, workers: w})
			afterGC := func() {
				runtime.GC() // twice: a sync.Pool keeps its values through one collection
				runtime.GC()
				step()
				if err := lr.Run(&b); err != nil {
					t.Fatal(err)
				}
			}
			require.Zero(t, leastMallocs(3, afterGC), "after GC, workers %d", w)
		}
	})
}

// TestRunZeroAllocs: a Layer.Run allocates nothing once warm, with Workers 1 and 2, in every
// state format: varlen batches with padding, Zero and per-token stores in place and out of place,
// sequences longer than a chunk, with the scalar gate, the per-channel gate and the conv front.
func TestRunZeroAllocs(t *testing.T) {
	if testing.CoverMode() != "" || race.Enabled {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	type prepared struct {
		c  *oracle.BatchCase
		rf rowForm
	}
	var cases []prepared
	for i := range scenarios {
		gate, conv := []int{-1, 2, -1}[i%3], i%3 == 2
		c, _, rf := randomCase(t, 300+i, i%2 == 1, gate, conv)
		cases = append(cases, prepared{c, rf})
	}
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		forEachFormat(t, kernel, func(t *testing.T, format gdnsimd.Format) {
			for _, p := range cases {
				if p.c.BF16 != (format.Storage != gdnsimd.StorageF32) {
					continue
				}
				for _, w := range []int{1, 2} {
					l := batchLayer(t, p.c, kernel, format, w)
					b := caseBatch(p.c, runSetup{format: format, rows: p.rf, workers: w})
					run := func() {
						if err := l.Run(&b); err != nil {
							t.Fatal(err)
						}
					}
					require.Zero(t, leastMallocs(20, run), "%s workers %d", p.c.Name, w)
				}
			}
		})
	})
}

// leastMallocs is the least of a few tries of mallocsPerRun(n, f): with Workers 2 a call takes a
// second scratch the first time a pool goroutine runs a range of it, which on a loaded machine
// (go test ./... runs packages at once) the first calls may not do.
func leastMallocs(n int, f func()) uint64 {
	allocs := mallocsPerRun(n, f)
	for try := 1; try < 5 && allocs != 0; try++ {
		allocs = min(allocs, mallocsPerRun(n, f))
	}
	return allocs
}

// mallocsPerRun is the process's heap allocations per call of f over n calls after one, rounded
// down as testing.AllocsPerRun does, but at the current GOMAXPROCS.
func mallocsPerRun(n int, f func()) uint64 {
	f()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		f()
	}
	runtime.ReadMemStats(&b)
	return (b.Mallocs - a.Mallocs) / uint64(n)
}
