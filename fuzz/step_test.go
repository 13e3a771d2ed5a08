package fuzz

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
)

// kernels are the kernels under test: every one this CPU has, generic last. The names in
// GDN_REQUIRE_KERNEL must be among them (a CI leg cannot silently test less).
func kernels(tb testing.TB) []string {
	names := gdn.Kernels()
	for _, want := range strings.Split(os.Getenv("GDN_REQUIRE_KERNEL"), ",") {
		if want = strings.TrimSpace(want); want != "" && !slices.Contains(names, want) {
			tb.Fatalf("GDN_REQUIRE_KERNEL names %q, but this CPU/build has only %v", want, names)
		}
	}
	if names[len(names)-1] != "generic" {
		tb.Fatalf("kernels %v: generic is not last", names)
	}
	return names
}

// Guard values around every slice: a write past a slice's end (or before its start) changes them.
const (
	guardBits = 0x7fa5a5a5 // a NaN payload no kernel produces
	guardBF16 = 0xa5a5
	guardLen  = 16
)

// guarded returns a copy of v at offset off inside a buffer of guard values, and the buffer.
func guarded(v []float32, off int) (s, buf []float32) {
	buf = make([]float32, off+len(v)+guardLen)
	for i := range buf {
		buf[i] = math.Float32frombits(guardBits)
	}
	s = buf[off : off+len(v) : off+len(v)]
	copy(s, v)
	return s, buf
}

func checkGuards(buf []float32, off, n int) error {
	for i, x := range buf {
		if (i < off || i >= off+n) && math.Float32bits(x) != guardBits {
			return fmt.Errorf("guard [%d] (slice at [%d:%d]) overwritten: 0x%08x", i, off, off+n, math.Float32bits(x))
		}
	}
	return nil
}

// run is one Step through the public API with guarded, offset slices; it checks the guards and
// that no input changed (the state only if out of place) and returns the results.
func (c *stepCase) run(kernel string, workers int, inPlace bool) (oracle.Got, error) {
	d := c.d
	l, err := gdn.New(gdn.Config{
		KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, ALog: c.in.ALog, DtBias: c.in.DtBias,
		NormWeight: c.in.NormWeight, RMSEps: c.eps, Workers: workers, Kernel: kernel,
	})
	if err != nil {
		return oracle.Got{}, err
	}
	srcs := [nTensors][]float32{c.in.Q, c.in.K, c.in.V, c.in.Z, c.in.B, c.in.A, c.in.State}
	var ins, bufs [nTensors][]float32
	for t, v := range srcs {
		ins[t], bufs[t] = guarded(v, c.offsets[t])
	}
	in := gdn.Input{Q: ins[tQ], K: ins[tK], V: ins[tV], Z: ins[tZ], B: ins[tB], A: ins[tA], State: ins[tState]}
	n := d.Heads() * d.V
	outState, outStateBuf, outStateOff := ins[tState], bufs[tState], c.offsets[tState]
	if !inPlace {
		outStateOff = c.offsets[nTensors]
		outState, outStateBuf = guarded(make([]float32, len(c.in.State)), outStateOff)
	}
	outF, outFBuf := guarded(make([]float32, n), c.offsets[nTensors+1])
	outBuf := make([]gdn.BF16, c.offsets[nTensors+2]+n+guardLen)
	for i := range outBuf {
		outBuf[i] = guardBF16
	}
	out := outBuf[c.offsets[nTensors+2]:][:n:n]
	if err := l.Step(in, gdn.Output{State: outState, Out: out, OutF32: outF}); err != nil {
		return oracle.Got{}, err
	}
	for t := range srcs {
		if t == tState && inPlace {
			continue
		}
		if !sameF32(ins[t], srcs[t]) {
			return oracle.Got{}, fmt.Errorf("input %d modified", t)
		}
		if err := checkGuards(bufs[t], c.offsets[t], len(srcs[t])); err != nil {
			return oracle.Got{}, fmt.Errorf("input %d: %w", t, err)
		}
	}
	if err := checkGuards(outStateBuf, outStateOff, len(outState)); err != nil {
		return oracle.Got{}, fmt.Errorf("Output.State: %w", err)
	}
	if err := checkGuards(outFBuf, c.offsets[nTensors+1], n); err != nil {
		return oracle.Got{}, fmt.Errorf("Output.OutF32: %w", err)
	}
	for i, x := range outBuf {
		if (i < c.offsets[nTensors+2] || i >= c.offsets[nTensors+2]+n) && x != guardBF16 {
			return oracle.Got{}, fmt.Errorf("Output.Out guard [%d] overwritten: 0x%04x", i, uint16(x))
		}
	}
	bits := unsafe.Slice((*uint16)(unsafe.SliceData(out)), len(out))
	return oracle.Got{State: outState, Out: slices.Clone(bits), OutF32: outF}, nil
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
	st := gdnsimd.Step{
		KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, RMSEps: eps,
		ALog: c.in.ALog, DtBias: c.in.DtBias, NormWeight: c.in.NormWeight,
		Q: c.in.Q, Key: c.in.K, Val: c.in.V, Z: c.in.Z, Beta: c.in.B, Gate: c.in.A,
		StateIn: c.in.State, StateOut: g.State, Out: g.Out, OutF32: g.OutF32,
	}
	bounds := []int{0, c.split[0], c.split[1], d.Heads()}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			k.Run(&st, lo, hi, new(gdnsimd.Scratch))
		}(bounds[i], bounds[i+1])
	}
	wg.Wait()
	return g, nil
}

// sameF32 reports whether a and b hold the same bits.
func sameF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i, x := range a {
		if math.Float32bits(x) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func f32bits(v []float32) []uint32 {
	b := make([]uint32, len(v))
	for i, x := range v {
		b[i] = math.Float32bits(x)
	}
	return b
}

func sameBits(a, b oracle.Got) error {
	if !sameF32(a.State, b.State) {
		return fmt.Errorf("state bits differ")
	}
	if !sameF32(a.OutF32, b.OutF32) {
		return fmt.Errorf("out_f32 bits differ")
	}
	if !slices.Equal(a.Out, b.Out) {
		return fmt.Errorf("out bits differ")
	}
	return nil
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
	ks := kernels(t)
	var want oracle.Expected
	var tols []headTol
	if d.B > 0 {
		want = oracle.Step(d, c.in)
		tols = tolerances(d, c.in, want)
	}
	skip := func(bh int) bool { return c.poison != 0 && c.poisoned(bh) }
	results := map[string]oracle.Got{}
	for _, k := range ks {
		first, err := c.run(k, 1, true)
		if err != nil {
			t.Fatalf("%s: %v: in place, Workers 1: %v", k, d, err)
		}
		for _, v := range []struct {
			name    string
			workers int
			inPlace bool
		}{{"out of place, Workers 1", 1, false}, {"in place, Workers 3", 3, true}} {
			got, err := c.run(k, v.workers, v.inPlace)
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
