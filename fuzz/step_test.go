package fuzz

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
)

// The kernels kerneltest runs the tests for.
func init() {
	kerneltest.Use(gdnsimd.AllNames, func(name string) bool { _, ok := gdnsimd.Lookup(name); return ok })
}

// run is one Step through the public API with every slice between guard bands at its offset
// (kerneltest.Guarded); it fails tb if a band changed, checks that no input changed (the state
// only if out of place) and returns the results.
func (c *stepCase) run(tb testing.TB, kernel string, workers int, inPlace bool) (oracle.Got, error) {
	d := c.d
	l, err := gdn.New(gdn.Config{
		KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, ALog: c.in.ALog, DtBias: c.in.DtBias,
		NormWeight: c.in.NormWeight, RMSEps: c.eps, Workers: workers, Kernel: kernel,
	})
	if err != nil {
		return oracle.Got{}, err
	}
	what := fmt.Sprintf("%s: %v: Workers %d, in place %v", kernel, d, workers, inPlace)
	srcs := [nTensors][]float32{c.in.Q, c.in.K, c.in.V, c.in.Z, c.in.B, c.in.A, c.in.State}
	var ins [nTensors][]float32
	var checks [nTensors]func(string)
	for t, v := range srcs {
		ins[t], checks[t] = kerneltest.Guarded[float32](tb, len(v), c.offsets[t])
		copy(ins[t], v)
	}
	in := gdn.Input{Q: ins[tQ], K: ins[tK], V: ins[tV], Z: ins[tZ], B: ins[tB], A: ins[tA], State: ins[tState]}
	n := d.Heads() * d.V
	outState, checkState := ins[tState], checks[tState]
	if !inPlace {
		outState, checkState = kerneltest.Guarded[float32](tb, len(c.in.State), c.offsets[nTensors])
	}
	outF, checkF := kerneltest.Guarded[float32](tb, n, c.offsets[nTensors+1])
	outBits, checkOut := kerneltest.Guarded[uint16](tb, n, c.offsets[nTensors+2])
	out := unsafe.Slice((*gdn.BF16)(unsafe.Pointer(unsafe.SliceData(outBits))), n)
	if err := l.Step(in, gdn.Output{State: outState, Out: out, OutF32: outF}); err != nil {
		return oracle.Got{}, err
	}
	for t := range srcs {
		checks[t](fmt.Sprintf("%s: input %d", what, t))
		if t == tState && inPlace {
			continue
		}
		if err := kerneltest.DiffBits(fmt.Sprintf("input %d", t), ins[t], srcs[t]); err != nil {
			return oracle.Got{}, fmt.Errorf("input %d modified: %w", t, err)
		}
	}
	checkState(what + ": Output.State")
	checkF(what + ": Output.OutF32")
	checkOut(what + ": Output.Out")
	return oracle.Got{State: outState, Out: slices.Clone(outBits), OutF32: outF}, nil
}

// runSplit runs the kernel directly on three head ranges [0, s0), [s0, s1), [s1, heads),
// concurrently, each with its own scratch, out of place.
func (c *stepCase) runSplit(kernel string) (oracle.Got, error) {
	k, ok := gdnsimd.Lookup(kernel)
	if !ok {
		return oracle.Got{}, fmt.Errorf("kernel %q not found", kernel)
	}
	d := c.d
	n := d.Heads() * d.V
	eps := c.eps
	if eps == 0 {
		eps = gdn.DefaultRMSEps
	}
	g := oracle.Got{State: make([]float32, len(c.in.State)), Out: make([]uint16, n), OutF32: make([]float32, n)}
	slot := d.HV * d.K * d.V
	b := gdnsimd.Batch{ // dense: one token per sequence, sequence n reading and storing slot n
		KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, RMSEps: eps, N: d.Heads() / d.HV,
		ALog: c.in.ALog, DtBias: c.in.DtBias, NormWeight: c.in.NormWeight,
		Q: gdnsimd.Rows{F32: c.in.Q, Stride: d.HK * d.K}, Key: gdnsimd.Rows{F32: c.in.K, Stride: d.HK * d.K},
		Val: gdnsimd.Rows{F32: c.in.V, Stride: d.HV * d.V}, Z: gdnsimd.Rows{F32: c.in.Z, Stride: d.HV * d.V},
		Beta: gdnsimd.Rows{F32: c.in.B, Stride: d.HV}, Gate: gdnsimd.Rows{F32: c.in.A, Stride: d.HV},
		State: gdnsimd.Pool{F32: c.in.State, SlotStride: slot}, StoreTo: gdnsimd.Pool{F32: g.State, SlotStride: slot},
		Out: g.Out, OutF32: g.OutF32,
	}
	bounds := []int{0, c.split[0], c.split[1], d.Heads()}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			k.RunBatch(&b, lo, hi, new(gdnsimd.Scratch))
		}(bounds[i], bounds[i+1])
	}
	wg.Wait()
	return g, nil
}

// sameBits is nil if a and b hold the same bits, else an error naming the tensor and the index.
func sameBits(a, b oracle.Got) error {
	return errors.Join(kerneltest.DiffBits("state", a.State, b.State), kerneltest.DiffBits("out_f32", a.OutF32, b.OutF32),
		kerneltest.DiffBits("out", a.Out, b.Out))
}

func f32bits(v []float32) []uint32 {
	b := make([]uint32, len(v))
	for i, x := range v {
		b[i] = math.Float32bits(x)
	}
	return b
}

// stepStats counts, over a process, how the oracle comparisons went.
var stepStats struct {
	sync.Mutex
	cases, strict, conditioned, poisoned int
}

// checkStep is FuzzStep's property on one input.
func checkStep(t *testing.T, data []byte) {
	c := decodeStep(data)
	d := c.d
	ks := kerneltest.Names(t)
	var want oracle.Expected
	var tols []headTol
	if d.B > 0 {
		want = oracle.Step(d, c.in)
		tols = tolerances(d, c.in, want)
	}
	skip := func(bh int) bool { return c.poison != 0 && c.poisoned(bh) }
	results := map[string]oracle.Got{}
	for _, k := range ks {
		first, err := c.run(t, k, 1, true)
		if err != nil {
			t.Fatalf("%s: %v: in place, Workers 1: %v", k, d, err)
		}
		for _, v := range []struct {
			name    string
			workers int
			inPlace bool
		}{{"out of place, Workers 1", 1, false}, {"in place, Workers 3", 3, true}} {
			got, err := c.run(t, k, v.workers, v.inPlace)
			if err != nil {
				t.Fatalf("%s: %v: %s: %v", k, d, v.name, err)
			}
			if err := sameBits(first, got); err != nil {
				t.Fatalf("%s: %v: %s vs in place, Workers 1: %v", k, d, v.name, err)
			}
		}
		if d.B == 0 {
			continue
		}
		split, err := c.runSplit(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameBits(first, split); err != nil {
			t.Fatalf("%s: %v: heads split at %v vs one call: %v", k, d, c.split, err)
		}
		results[k] = first
		mode := "strict"
		if c.poison == 0 {
			err = oracle.Check(oracle.Case{Dims: d, In: c.in, Want: want}, first)
		}
		if c.poison != 0 || err != nil {
			mode = "conditioned"
			if c.poison != 0 {
				mode = "poisoned"
			}
			for bh, tol := range tols {
				if skip(bh) {
					continue
				}
				if err := checkHead(d, want, first, bh, tol); err != nil {
					t.Fatalf("%s: %v, eps %g, poison %d: against the float64 oracle: %v", k, d, c.eps, c.poison, err)
				}
			}
		} else {
			for bh := range tols {
				if err := checkHead(d, want, first, bh, tols[bh]); err != nil { // bf16(out_f32) == out
					t.Fatalf("%s: %v: %v", k, d, err)
				}
			}
		}
		stepStats.Lock()
		stepStats.cases++
		switch mode {
		case "strict":
			stepStats.strict++
		case "conditioned":
			stepStats.conditioned++
		default:
			stepStats.poisoned++
		}
		stepStats.Unlock()
	}
	if d.B == 0 {
		return
	}
	gen := results["generic"]
	for _, k := range ks[:len(ks)-1] {
		if err := near(d, results[k], gen, tols, skip); err != nil {
			t.Fatalf("%s vs generic: %v: %v", k, d, err)
		}
	}
}

// FuzzStep (seed corpus: testdata/fuzz/FuzzStep, written by TestWriteCorpus): every kernel against the float64 oracle and the generic kernel; in place vs out of
// place, Workers 1 vs 3 and split head ranges bit-identical; guards and inputs untouched.
func FuzzStep(f *testing.F) {
	f.Fuzz(checkStep)
}
