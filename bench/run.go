package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
)

// Format is a state format of the serving call: a layout and a storage type.
type Format struct {
	Layout gdn.StateLayout
	DType  gdn.DType
}

// String is the benchmark-name form: "kv-f32", "vk-f32", "kv-bf16", "vk-bf16".
func (f Format) String() string {
	return strings.ToLower(f.Layout.String()) + "-" + f.DType.String()
}

// Formats are every state format, [K][V] f32 (Step's) first.
var Formats = []Format{{gdn.LayoutKV, gdn.DTypeF32}, {gdn.LayoutVK, gdn.DTypeF32}, {gdn.LayoutKV, gdn.DTypeBF16}, {gdn.LayoutVK, gdn.DTypeBF16}}

// parseFormats parses a comma-separated list of format names.
func parseFormats(s string) ([]Format, error) {
	var out []Format
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, f := range Formats {
			if f.String() == name {
				out = append(out, f)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("format %q: want one of kv-f32, vk-f32, kv-bf16, vk-bf16", name)
		}
	}
	return out, nil
}

// Serve is one serving-call case: B sequences of T tokens each. T = 1 is decode (in place); T > 1
// with Snapshots is speculative verification (the state after every token stored in a slot of its
// own); T > 1 without is a prefill continuing each sequence's state in place.
type Serve struct {
	Shape     Shape // B sequences of this layer
	T         int
	Snapshots bool
	KDA       bool // the per-channel gate with the sigmoid output gate (Kimi-Linear; SPEC Part C)
	Conv      bool // the conv front (width 4, no bias: Qwen3-Next's; SPEC Part D): pre-conv rows and conv pools
}

// String is the benchmark-name form, "T=4,snap,B=8,HK=16,HV=32,K=128,V=128", with ",gate=kda"
// for the per-channel gate.
func (c Serve) String() string {
	snap := ""
	if c.Snapshots {
		snap = ",snap"
	}
	if c.KDA {
		snap += ",gate=kda"
	}
	if c.Conv {
		snap += ",conv"
	}
	return fmt.Sprintf("T=%d%s,%v", c.T, snap, c.Shape)
}

// Tokens is the number of tokens of a call.
func (c Serve) Tokens() int { return c.Shape.B * c.T }

// ServeCases are the serving benchmarks on layer: decode at every B of bs (none given: B = 1, 8,
// 64), then a prefill of 512 tokens at B = 1 and the verification of 4 draft tokens at B = 8.
func ServeCases(layer Shape, bs ...int) []Serve {
	if len(bs) == 0 {
		bs = []int{1, 8, 64}
	}
	at := func(b int) Shape { s := layer; s.B = b; return s }
	var cs []Serve
	for _, b := range bs {
		cs = append(cs, Serve{Shape: at(b), T: 1})
	}
	return append(cs, Serve{Shape: at(1), T: 512}, Serve{Shape: at(8), T: 4, Snapshots: true})
}

// CurveCases are calls of T tokens at B = 8 in place (no snapshots), one per T of ts: short
// multi-token calls (speculative verification keeping only the final state), whose time over the
// single-token call and over one state pass plus T times the FMA bound is the curve of how the
// state's traffic and the arithmetic add up at small T.
func CurveCases(layer Shape, ts ...int) []Serve {
	s := layer
	s.B = 8
	var cs []Serve
	for _, t := range ts {
		cs = append(cs, Serve{Shape: s, T: t})
	}
	return cs
}

// KimiLinear is one Kimi-Linear KDA layer (32 q/k heads, 32 value heads, K = V = 128).
var KimiLinear = Shape{HK: 32, HV: 32, K: 128, V: 128}

// KDACases are ServeCases with the per-channel gate (decode at every B of bs, prefill, verify).
func KDACases(layer Shape, bs ...int) []Serve {
	cs := ServeCases(layer, bs...)
	for i := range cs {
		cs[i].KDA = true
	}
	return cs
}

// ConvCases are ServeCases with the conv front (decode at every B of bs, prefill, verify).
func ConvCases(layer Shape, bs ...int) []Serve {
	cs := ServeCases(layer, bs...)
	for i := range cs {
		cs[i].Conv = true
	}
	return cs
}

// base is the case a KDA or conv case is measured against (its t/base column): the scalar gate,
// or the same call given the post-conv rows; false if c is neither.
func (c Serve) base() (Serve, bool) {
	b := c
	b.KDA, b.Conv = false, false
	return b, c.KDA || c.Conv
}

// RunData is one serving case's data: a pool of B slots (plus B·T snapshot slots), token rows
// with realistic values (as NewData) and outputs, for one format.
type RunData struct {
	Case   Serve
	Format Format
	Params gdn.Config
	Batch  gdn.Batch
	Dst    []float32 // the size of the B sequences' f32 state: copy() of it is the memory baseline
	Src    []float32
}

// NewRunData allocates and fills the data of case c in format f (deterministically).
func NewRunData(c Serve, f Format) *RunData {
	s := c.Shape
	r := rand.New(rand.NewPCG(uint64(s.K)<<32|uint64(s.V), uint64(s.B)<<32|uint64(c.T)))
	slot := s.HV * s.K * s.V
	slots := s.B
	if c.Snapshots {
		slots += s.B * c.T
	}
	T := c.Tokens()
	d := &RunData{Case: c, Format: f}
	d.Params = gdn.Config{
		KHeads: s.HK, VHeads: s.HV, K: s.K, V: s.V,
		ALog: vec(r, s.HV, 0, 0.5), DtBias: vec(r, s.HV, 0, 1), NormWeight: vec(r, s.V, 1, 0.2),
		StateLayout: f.Layout, StateDType: f.DType,
	}
	gw := s.HV // the width of a gate row
	if c.KDA {
		gw *= s.K
		d.Params.Gate, d.Params.OutGate, d.Params.DtBias = gdn.GatePerChannel, gdn.ActSigmoid, vec(r, gw, 0, 1)
	}
	rows := func(width int, mean, sd float64) gdn.Rows { return gdn.Rows{F32: vec(r, T*width, mean, sd)} }
	b := gdn.Batch{
		Start: make([]int32, s.B+1), Read: make([]int32, s.B),
		Q: rows(s.HK*s.K, 0, 1), K: rows(s.HK*s.K, 0, 1),
		V: rows(s.HV*s.V, 0, 1), Z: rows(s.HV*s.V, 0, 1),
		B: rows(s.HV, 0, 1), A: rows(gw, -1, 1.5),
		Out: make([]gdn.BF16, T*s.HV*s.V),
	}
	if c.Conv {
		C := 2*s.HK*s.K + s.HV*s.V
		d.Params.ConvWidth, d.Params.ConvWeight = 4, vec(r, 4*C, 0, 0.3)
		b.Q, b.K, b.V, b.X = gdn.Rows{}, gdn.Rows{}, gdn.Rows{}, rows(C, 0, 1)
		b.ConvState = gdn.Pool{F32: vec(r, slots*3*C, 0, 1)}
	}
	for n := range s.B {
		b.Start[n+1] = int32((n + 1) * c.T)
		b.Read[n] = int32(n)
	}
	if c.Snapshots {
		b.Store = make([]int32, T)
		for t := range b.Store {
			b.Store[t] = int32(s.B + t)
		}
	}
	state := vec(r, slots*slot, 0, 0.05)
	if f.DType == gdn.DTypeBF16 {
		b.State.BF16 = make([]gdn.BF16, len(state))
		for i, x := range state {
			b.State.BF16[i] = gdn.BF16FromFloat32(x)
		}
	} else {
		b.State.F32 = state
	}
	d.Batch = b
	d.Src, d.Dst = state[:s.B*slot], make([]float32, s.B*slot)
	copy(d.Dst, d.Src)
	return d
}

// Layer returns a gdn.Layer for the data's shape and format with the given kernel and workers.
func (d *RunData) Layer(kernel string, workers int) (*gdn.Layer, error) {
	c := d.Params
	c.Kernel, c.Workers = kernel, workers
	return gdn.New(c)
}

// Runs runs n calls of l and returns the elapsed time.
func (d *RunData) Runs(l *gdn.Layer, n int) (time.Duration, error) {
	t0 := time.Now()
	for range n {
		if err := l.Run(&d.Batch); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// Copies runs n copy() of the B sequences' f32 state and returns the elapsed time.
func (d *RunData) Copies(n int) time.Duration {
	t0 := time.Now()
	for range n {
		copy(d.Dst, d.Src)
	}
	return time.Since(t0)
}

// ServeResult is the measurement of one (serving case, format, kernel, workers).
type ServeResult struct {
	Case    Serve
	Format  Format
	Kernel  string
	Workers int
	Call    float64 // median seconds per call
	Copy    float64 // median seconds per copy() of the B sequences' f32 state, interleaved
	Single  float64 // median seconds per single-token call (T = 1, same B), interleaved (T > 1 only)
	Base    float64 // median seconds per call of the case's base (Serve.base: the scalar gate, the post-conv rows), interleaved (KDA and conv cases only)
	Floor   float64 // median seconds per in-place scale pass over the B sequences' f32 state (Kernel.FloorScale, the kernel's ISA; 0: none)
	FMA     float64 // the call's 4·B·T·HV·K·V FMAs at the FMA throughput measured with Kernel.FloorFMA (0: none)
}

// Floors runs n floors of the call and returns the elapsed time, or 0 if the kernel has none:
// for a case without snapshots an in-place scale pass over Dst with the kernel's vectors
// (Kernel.FloorScale; s = 1 keeps the data), the memory traffic of an in-place step; with
// snapshots the snapshot floor, SnapshotCopies: the call writes every token's state to a fresh
// slot, and that traffic (from caches the call leaves as it finds them) is its lower bound.
func (d *RunData) Floors(kernel string, n int) time.Duration {
	k, _ := gdnsimd.Lookup(kernel)
	if d.Case.Snapshots {
		if !k.FloorScale(nil, 1) { // the same kernels as the in-place floor
			return 0
		}
		return d.SnapshotCopies(n)
	}
	t0 := time.Now()
	for range n {
		if !k.FloorScale(d.Dst, 1) {
			return 0
		}
	}
	return time.Since(t0)
}

// SnapshotCopies runs n times copy() of each sequence's state (its Read slot, in the pool's
// dtype) into the Store slot of each of its tokens, and returns the elapsed time: the bytes a
// call with per-token snapshots must read and write, moved by the runtime's memmove
// (non-temporal stores for copies this large).
func (d *RunData) SnapshotCopies(n int) time.Duration {
	s, b := d.Case.Shape, &d.Batch
	slot := s.HV * s.K * s.V
	t0 := time.Now()
	for range n {
		for q := range s.B {
			src := int(b.Read[q]) * slot
			for t := b.Start[q]; t < b.Start[q+1]; t++ {
				dst := int(b.Store[t]) * slot
				if p := b.State.F32; p != nil {
					copy(p[dst:dst+slot], p[src:src+slot])
				} else {
					p := b.State.BF16
					copy(p[dst:dst+slot], p[src:src+slot])
				}
			}
		}
	}
	return time.Since(t0)
}

// fmaRate returns the kernel's vector FMAs per second (Kernel.FloorFMA: the best of 5 runs of
// ≈ 1 ms, measured once per process) and their lanes, or 0.
func fmaRate(kernel string) (float64, int) {
	if r, ok := fmaRates[kernel]; ok {
		return r.rate, r.lanes
	}
	const n = 1 << 19
	k, _ := gdnsimd.Lookup(kernel)
	best := 0.0
	lanes, chains := k.FloorFMA(1000)
	for range 5 {
		if lanes == 0 {
			break
		}
		t0 := time.Now()
		k.FloorFMA(n)
		best = max(best, float64(n*chains)/time.Since(t0).Seconds())
	}
	fmaRates[kernel] = struct {
		rate  float64
		lanes int
	}{best, lanes}
	return best, lanes
}

var fmaRates = map[string]struct {
	rate  float64
	lanes int
}{}

// MeasureServe measures every case × format × kernel (that implements the format; with c.Picked
// only the first that does) × workers of c, alternating as Measure does: per repetition a batch of calls, of copies and, for T > 1, of
// single-token calls, each after one untimed operation of its kind.
func MeasureServe(c Config, formats []Format, cases []Serve, log io.Writer) ([]ServeResult, error) {
	var res []ServeResult
	for _, sc := range cases {
		for _, f := range formats {
			fmt.Fprintf(log, "measuring Run %v %v ...\n", sc, f)
			d := NewRunData(sc, f)
			var d1, ds *RunData
			if sc.T > 1 && !c.Quick {
				one := sc
				one.T, one.Snapshots = 1, false
				d1 = NewRunData(one, f)
			}
			if base, ok := sc.base(); ok {
				ds = NewRunData(base, f)
			}
			for _, k := range c.Kernels {
				measured := false
				for _, w := range c.Workers {
					l, err := d.Layer(k, w)
					if errors.Is(err, gdn.ErrKernel) {
						continue // k does not implement f
					}
					if err != nil {
						return nil, err
					}
					r, err := measureServe(c, d, d1, ds, l, k, w)
					if err != nil {
						return nil, err
					}
					res = append(res, r)
					measured = true
				}
				if measured && c.Picked {
					break
				}
			}
			runtime.GC()
		}
	}
	return res, nil
}

// measureServe measures one case (d) with l, interleaving copy(), the single-token call (d1, T > 1)
// and the base case's call (ds, KDA and conv cases: Serve.base).
func measureServe(c Config, d, d1, ds *RunData, l *gdn.Layer, kernel string, workers int) (ServeResult, error) {
	r := ServeResult{Case: d.Case, Format: d.Format, Kernel: kernel, Workers: workers}
	if _, err := d.Runs(l, 2); err != nil {
		return r, err
	}
	t, _ := d.Runs(l, 1)
	n := batchLen(t, c.Batch)
	d.Copies(1)
	nc := batchLen(d.Copies(1), c.Batch)
	// warm makes the Layer of a case measured beside d (nil: none) and its batch length.
	warm := func(x *RunData) (*gdn.Layer, int, error) {
		if x == nil {
			return nil, 0, nil
		}
		lx, err := x.Layer(kernel, workers)
		if err != nil {
			return nil, 0, err
		}
		x.Runs(lx, 2)
		tx, _ := x.Runs(lx, 1)
		return lx, batchLen(tx, c.Batch), nil
	}
	l1, n1, err := warm(d1)
	if err != nil {
		return r, err
	}
	ls, ns, err := warm(ds)
	if err != nil {
		return r, err
	}
	nf := 0
	if t := d.Floors(kernel, 1); t > 0 && !c.Quick {
		nf = batchLen(d.Floors(kernel, 1), c.Batch)
	}
	if rate, lanes := fmaRate(kernel); rate > 0 {
		s := d.Case.Shape
		r.FMA = 4 * float64(s.B*d.Case.T*s.HV*s.K*s.V) / float64(lanes) / rate
	}
	var calls, copies, singles, floors, bases []float64
	for range c.Reps {
		d.Runs(l, 1)
		t, err := d.Runs(l, n)
		if err != nil {
			return r, err
		}
		calls = append(calls, t.Seconds()/float64(n))
		d.Copies(1)
		copies = append(copies, d.Copies(nc).Seconds()/float64(nc))
		if l1 != nil {
			d1.Runs(l1, 1)
			t1, err := d1.Runs(l1, n1)
			if err != nil {
				return r, err
			}
			singles = append(singles, t1.Seconds()/float64(n1))
		}
		if ls != nil {
			ds.Runs(ls, 1)
			ts, err := ds.Runs(ls, ns)
			if err != nil {
				return r, err
			}
			bases = append(bases, ts.Seconds()/float64(ns))
		}
		if nf > 0 {
			d.Floors(kernel, 1)
			floors = append(floors, d.Floors(kernel, nf).Seconds()/float64(nf))
		}
	}
	r.Call, r.Copy, r.Single, r.Floor, r.Base = median(calls), median(copies), median(singles), median(floors), median(bases)
	return r, nil
}

// printServe writes the serving results as a markdown table: per call and per token, the ratio
// to copy() of the B sequences' f32 state, for T > 1 the time per token over a single-token call
// (same kernel, format, B and workers); then the call over its floor (RunData.Floors: the in-place
// floor, a load–scale–store pass of the kernel's ISA over the f32 state's bytes; with snapshots
// the snapshot floor, copy() of the states into the snapshot slots) and over the FMA bound (the call's
// 4·B·T·HV·K·V FMAs at the measured FMA throughput, also shown per head-token); t/base, for the
// per-channel gate (gate=kda) the call over the same call with the scalar gate, for the conv front
// (conv) over the same call given the post-conv rows. For T > 1, the call over the single-token
// call (with snapshots: over the single-token call plus the snapshot floor), and in place over one
// state pass (the in-place floor) plus the FMA bound.
func printServe(w io.Writer, res []ServeResult) {
	kda := false
	for _, r := range res {
		_, b := r.Case.base()
		kda = kda || b
	}
	extra, sep := "", ""
	if kda {
		extra, sep = " t/base |", "---:|"
	}
	fmt.Fprintln(w, "| kernel | format | case | workers | µs/call | µs/token | t/copy() | per token / single-token call | call / single-token call (+ snapshot floor) | call / (state pass + FMA bound) | t/floor | t/FMA bound | FMA bound µs/head-token |"+extra)
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"+sep)
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, r := range res {
		per, whole, pass := "—", "—", "—"
		if r.Single > 0 {
			per = fmt.Sprintf("%.2f", r.Call/float64(r.Case.T)/r.Single)
			single := r.Single
			if r.Case.Snapshots {
				single += r.Floor
			}
			whole = ratio(r.Call, single)
		}
		if r.Case.T > 1 && !r.Case.Snapshots && r.Floor > 0 && r.FMA > 0 {
			pass = ratio(r.Call, r.Floor+r.FMA)
		}
		fb := "—"
		if r.FMA > 0 {
			fb = fmt.Sprintf("%.3f", r.FMA*1e6/float64(r.Case.Shape.B*r.Case.T*r.Case.Shape.HV))
		}
		col := ""
		if kda {
			col = " " + ratio(r.Call, r.Base) + " |"
		}
		fmt.Fprintf(w, "| %s | %v | %v | %d | %s | %s | %.2f | %s | %s | %s | %s | %s | %s |%s\n", r.Kernel, r.Format, r.Case, r.Workers,
			micros(r.Call), micros(r.Call/float64(r.Case.T)), r.Call/r.Copy, per, whole, pass, ratio(r.Call, r.Floor), ratio(r.Call, r.FMA), fb, col)
	}
}

// printServeQuick writes the quick run's serving table: per call and per token, and the call over
// what bounds it: copy() of the B sequences' f32 state (decode reads and writes each state once)
// and the FMA bound (the call's 4·B·T·HV·K·V FMAs at the measured FMA throughput: a prefill's or
// verification's arithmetic).
func printServeQuick(w io.Writer, res []ServeResult) {
	fmt.Fprintln(w, "| format | call | kernel | µs/call | µs/token | t/copy() | t/FMA bound |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|")
	for _, r := range res {
		fb := "—"
		if r.FMA > 0 {
			fb = fmt.Sprintf("%.2f", r.Call/r.FMA)
		}
		fmt.Fprintf(w, "| %v | %s | %s | %s | %s | %.2f | %s |\n", r.Format, r.Case.Name(), r.Kernel,
			micros(r.Call), micros(r.Call/float64(r.Case.T)), r.Call/r.Copy, fb)
	}
}

// Name is the case as a reader says it: "decode B = 64", "prefill T = 512", "verify T = 4, B = 8".
func (c Serve) Name() string {
	switch {
	case c.T == 1:
		return fmt.Sprintf("decode B = %d", c.Shape.B)
	case c.Snapshots:
		return fmt.Sprintf("verify T = %d, B = %d", c.T, c.Shape.B)
	case c.Shape.B == 1:
		return fmt.Sprintf("prefill T = %d", c.T)
	}
	return fmt.Sprintf("T = %d, B = %d", c.T, c.Shape.B)
}
