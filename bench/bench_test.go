package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// benchShapes: the Qwen3-Next layer at B = 1, 8, 64, then K = V = 64, K = V = 256 and an odd
// shape (K = 96, V = 80) with the same heads at B = 8.
var benchShapes = []Shape{
	{B: 1, HK: 16, HV: 32, K: 128, V: 128},
	{B: 8, HK: 16, HV: 32, K: 128, V: 128},
	{B: 64, HK: 16, HV: 32, K: 128, V: 128},
	{B: 8, HK: 16, HV: 32, K: 64, V: 64},
	{B: 8, HK: 16, HV: 32, K: 256, V: 256},
	{B: 8, HK: 16, HV: 32, K: 96, V: 80},
}

var benchWorkers = flag.String("workers", "1", "comma-separated Config.Workers for BenchmarkStep (go test -bench . ./bench -args -workers 1,2)")

// cache holds the benchmarks' data by key: allocating and filling a 128 MiB state once per
// process is enough.
type cache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

// get returns the data of k, made by mk the first time.
func (c *cache[K, V]) get(k K, mk func() V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[K]V{}
	}
	d, ok := c.m[k]
	if !ok {
		d = mk()
		c.m[k] = d
	}
	return d
}

var dataCache cache[Shape, *Data]

// data returns the (cached) data of s.
func data(s Shape) *Data { return dataCache.get(s, func() *Data { return NewData(s) }) }

// eachKernel runs f as the subtest "kernel=NAME" of every kernel, with the -workers counts.
func eachKernel(b *testing.B, f func(b *testing.B, k string, workers []int)) {
	workers, err := parseInts(*benchWorkers)
	if err != nil {
		b.Fatalf("-workers: %v", err)
	}
	for _, k := range gdn.Kernels() {
		b.Run("kernel="+k, func(b *testing.B) { f(b, k, workers) })
	}
}

// BenchmarkStep runs the in-place step of every kernel on every shape:
// BenchmarkStep/kernel=avx512/B=1,HK=16,HV=32,K=128,V=128 (",W=n" added when -workers is not 1).
// SetBytes is the state traffic (read + written); the metrics are GB/s of that traffic and xcopy,
// the step's time over the time of copy() of the same bytes (src and dst each the state's size),
// measured right after the steps in the same process (1.00 = memory speed).
func BenchmarkStep(b *testing.B) {
	eachKernel(b, func(b *testing.B, k string, workers []int) {
		for _, s := range benchShapes {
			for _, w := range workers {
				name := s.String()
				if len(workers) > 1 || w != 1 {
					name += fmt.Sprintf(",W=%d", w)
				}
				b.Run(name, func(b *testing.B) { benchStep(b, k, s, w) })
			}
		}
	})
}

func benchStep(b *testing.B, kernel string, s Shape, workers int) {
	d := data(s)
	l, err := d.Layer(kernel, workers)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.Steps(l, 1); err != nil { // warm up (and check the call is valid)
		b.Fatal(err)
	}
	b.SetBytes(s.Traffic())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := l.Step(d.In, d.Out); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := b.Elapsed()
	b.StopTimer()
	d.Copies(1) // absorbs the last step's dirty lines (see Measure in main.go)
	copies := d.Copies(b.N)
	reportRates(b, s, elapsed, copies)
}

var runCache cache[string, *RunData]

// runData returns the (cached) data of case c in format f.
func runData(c Serve, f Format) *RunData {
	return runCache.get(c.String()+"/"+f.String(), func() *RunData { return NewRunData(c, f) })
}

// BenchmarkRun runs Layer.Run for every kernel, every state format it implements and every
// serving case (ServeCases: decode at B = 1, 8, 64, prefill T = 512 at B = 1, verify T = 4 with
// per-token snapshots at B = 8; the same with the per-channel gate at the Kimi-Linear shape,
// KDACases; with the conv front, ConvCases): BenchmarkRun/kernel=avx512/format=vk-f32/T=512,B=1,HK=16,HV=32,K=128,V=128.
// Metrics: xcopy, the call's time over copy() of the B sequences' f32 state (read + written: the
// decode step's traffic in f32); for T > 1 also xstep, the time per token over a single-token
// call of the same kernel, format and B, both measured in the same benchmark.
func BenchmarkRun(b *testing.B) {
	eachKernel(b, func(b *testing.B, k string, workers []int) {
		for _, f := range Formats {
			b.Run("format="+f.String(), func(b *testing.B) {
				for _, c := range slices.Concat(ServeCases(Qwen3Next), KDACases(KimiLinear), ConvCases(Qwen3Next)) {
					for _, w := range workers {
						name := c.String()
						if len(workers) > 1 || w != 1 {
							name += fmt.Sprintf(",W=%d", w)
						}
						b.Run(name, func(b *testing.B) { benchRun(b, k, f, c, w) })
					}
				}
			})
		}
	})
}

func benchRun(b *testing.B, kernel string, f Format, c Serve, workers int) {
	d := runData(c, f)
	l, err := d.Layer(kernel, workers)
	if errors.Is(err, gdn.ErrKernel) {
		b.Skipf("%s does not implement %v", kernel, f)
	}
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.Runs(l, 1); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(c.Shape.Traffic())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := l.Run(&d.Batch); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := b.Elapsed()
	b.StopTimer()
	d.Copies(1)
	copies := d.Copies(b.N)
	b.ReportMetric(float64(elapsed)/float64(copies), "xcopy")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/float64(c.T)/1e3, "µs/token")
	if c.T > 1 {
		one := c
		one.T, one.Snapshots = 1, false
		d1 := runData(one, f)
		l1, err := d1.Layer(kernel, workers)
		if err != nil {
			b.Fatal(err)
		}
		d1.Runs(l1, 1)
		n := max(1, b.N*c.T)
		t1, err := d1.Runs(l1, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(elapsed)/float64(b.N*c.T)/(float64(t1)/float64(n)), "xstep")
	}
}

// BenchmarkCopy is copy() of each shape's state into a second buffer of the same size: the
// memory-speed twin of BenchmarkStep (same SetBytes).
func BenchmarkCopy(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(s.String(), func(b *testing.B) {
			d := data(s)
			d.Copies(1)
			b.SetBytes(s.Traffic())
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				copy(d.Dst, d.In.State)
			}
			b.ReportMetric(float64(s.Traffic())*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GB/s")
		})
	}
}

// BenchmarkFloor is the two memory floors of each shape (see printTable): floor=read is a
// read-only pass over the state (SetBytes: the state once), floor=inplace an in-place memmove of
// the state's size (SetBytes: read + written, as for BenchmarkStep).
func BenchmarkFloor(b *testing.B) {
	for _, s := range benchShapes {
		d := data(s)
		b.Run("floor=read/"+s.String(), func(b *testing.B) {
			d.Reads(1)
			b.SetBytes(s.StateBytes())
			b.ResetTimer()
			d.Reads(b.N)
		})
		b.Run("floor=inplace/"+s.String(), func(b *testing.B) {
			d.InPlace(1)
			b.SetBytes(s.Traffic())
			b.ResetTimer()
			d.InPlace(b.N)
		})
	}
}

func reportRates(b *testing.B, s Shape, step, copies time.Duration) {
	b.ReportMetric(float64(s.Traffic())*float64(b.N)/float64(step.Nanoseconds()), "GB/s")
	if copies > 0 {
		b.ReportMetric(float64(step)/float64(copies), "xcopy")
	}
}

// TestShapesAndFlags checks the command's parsing, the table and the SVG on a tiny run of every
// kernel (GB/s must be positive and finite, every kernel and the copy() line present).
func TestShapesAndFlags(t *testing.T) {
	c, err := parseConfig("qwen3next,4x8x17x33", "1,2", "", "1,2", 3, 100*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Layers[1], (Shape{HK: 4, HV: 8, K: 17, V: 33}); got != want {
		t.Fatalf("layer 2 = %+v, want %+v", got, want)
	}
	for _, bad := range [][5]string{
		{"16x30x128x128", "1", "", "1"}, {"16x32x128", "1", "", "1"}, {"qwen3next", "0", "", "1"},
		{"qwen3next", "1", "nosuchkernel", "1"}, {"qwen3next", "1", "", "x"},
	} {
		if _, err := parseConfig(bad[0], bad[1], bad[2], bad[3], 1, time.Millisecond); err == nil {
			t.Errorf("parseConfig%q: no error", bad)
		}
	}
	c.Layers = c.Layers[1:] // the small one only
	var log strings.Builder
	res, err := Measure(c, &log)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(c.Bs) * len(c.Kernels) * len(c.Workers); len(res) != want {
		t.Fatalf("%d results, want %d", len(res), want)
	}
	for _, r := range res {
		if g := r.GBps(); !(g > 0 && g < 1e6) || !(r.CopyGBps() > 0) {
			t.Errorf("%+v: GB/s %v, copy GB/s %v", r, g, r.CopyGBps())
		}
		if !(r.Generic > 0) {
			t.Errorf("%+v: generic not measured", r)
		}
		if !(r.Read > 0 && r.InPlace > 0) {
			t.Errorf("%+v: floors not measured", r)
		}
	}
	var tab strings.Builder
	printTable(&tab, res)
	svg := SVG(res)
	for _, k := range c.Kernels {
		if !strings.Contains(tab.String(), "| "+k+" |") || !strings.Contains(svg, k+", workers 2") {
			t.Errorf("kernel %s missing from the table or the chart:\n%s", k, tab.String())
		}
	}
	if !strings.Contains(tab.String(), "| floor: in-place memmove |") || !strings.Contains(tab.String(), "| floor: read-only pass |") {
		t.Errorf("floor lines missing:\n%s", tab.String())
	}
	if !strings.Contains(tab.String(), "| copy() |") || !strings.Contains(svg, "copy()") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Errorf("copy() line missing or SVG unterminated")
	}
}

// TestDefaults checks the quick defaults (the default kernel alone, Workers 1, B = 1, 64), -full
// (every kernel, Workers 1 and 2, B = 1, 8, 64) and that flags given explicitly override both.
func TestDefaults(t *testing.T) {
	all := gdn.Kernels()
	for _, c := range []struct {
		args        []string
		kernels     []string
		picked      bool
		bs, workers string
		reps        int
		batch       time.Duration
	}{
		{nil, all, true, "1,64", "1", 5, 5 * time.Millisecond},
		{[]string{"-full"}, all, false, "1,8,64", "1,2", 11, 5 * time.Millisecond},
		{[]string{"-b", "1,8,64", "-reps", "3"}, all, true, "1,8,64", "1", 3, 5 * time.Millisecond},
		{[]string{"-kernels", "generic"}, []string{"generic"}, false, "1,64", "1", 5, 5 * time.Millisecond},
		{[]string{"-full", "-kernels", "generic", "-workers", "2", "-batch", "1ms"}, []string{"generic"}, false, "1,8,64", "2", 11, time.Millisecond},
		{[]string{"-layers", "2x4x16x16", "-b", "1,2", "-workers", "1,2", "-reps", "3", "-batch", "1ms"}, all, true, "1,2", "1,2", 3, time.Millisecond},
	} {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		f := newFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got, err := f.config(fs)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !slices.Equal(got.Kernels, c.kernels) || got.Picked != c.picked || joinInts(got.Bs, ",") != c.bs ||
			joinInts(got.Workers, ",") != c.workers || got.Reps != c.reps || got.Batch != c.batch {
			t.Errorf("%q: %+v, want kernels %v (picked %v), B %s, workers %s, %d reps, batch %v",
				c.args, got, c.kernels, c.picked, c.bs, c.workers, c.reps, c.batch)
		}
	}
	// The quick run's serving table: three formats, no curve, KDA or conv cases; -full all of them.
	for _, full := range []bool{false, true} {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		f := newFlags(fs)
		args := []string{}
		if full {
			args = []string{"-full"}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := f.config(fs); err != nil {
			t.Fatal(err)
		}
		want := map[bool][4]string{false: {"kv-f32,vk-f32,vk-bf16", "", "", ""}, true: {"kv-f32,vk-f32,kv-bf16,vk-bf16", "2,3,4,8", "32x32x128x128", "16x32x128x128"}}[full]
		if got := [4]string{*f.formats, *f.curve, *f.kda, *f.conv}; got != want {
			t.Errorf("%q: -formats, -curve, -kda, -conv = %q, want %q", args, got, want)
		}
	}
	var h strings.Builder
	printHeader(&h, Config{Kernels: all[:1], Workers: []int{1}, Bs: []int{1}})
	if want := "Kernel " + all[0] + ", the default"; !strings.Contains(h.String(), want) {
		t.Errorf("header does not say %q:\n%s", want, h.String())
	}
	if got := ServeCases(Qwen3Next, 1, 64); len(got) != 4 || got[1].Shape.B != 64 || got[2].T != 512 || !got[3].Snapshots {
		t.Errorf("ServeCases(Qwen3Next, 1, 64) = %v", got)
	}
	if got := CurveCases(Qwen3Next, 2, 8); len(got) != 2 || got[0].Shape.B != 8 || got[0].T != 2 || got[1].T != 8 || got[1].Snapshots {
		t.Errorf("CurveCases(Qwen3Next, 2, 8) = %v", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.v, got, c.want)
		}
	}
}

// TestServe runs the serving table on a tiny layer: every kernel × format it implements × case
// measured (generic in every format), positive finite times, the rows in the table.
func TestServe(t *testing.T) {
	c, err := parseConfig("4x8x17x33", "1", "", "1,2", 2, 50*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseFormats("kv-f32,nope"); err == nil {
		t.Fatal("parseFormats accepted a bad format")
	}
	cases := ServeCases(c.Layers[0])
	cases[3].T = 70 // the prefill, short (but past a 64-token chunk)
	res, err := MeasureServe(c, Formats, cases, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	generic := 0
	for _, r := range res {
		if !(r.Call > 0 && r.Copy > 0) || (r.Case.T > 1) != (r.Single > 0) {
			t.Errorf("%+v: not measured", r)
		}
		if r.Kernel == "generic" {
			generic++
		}
	}
	if want := len(cases) * len(Formats) * len(c.Workers); generic != want {
		t.Errorf("%d generic results, want %d", generic, want)
	}
	var tab strings.Builder
	printServe(&tab, res)
	if !strings.Contains(tab.String(), "| generic | vk-bf16 | T=70,B=1,") || !strings.Contains(tab.String(), "| generic | kv-f32 | T=4,snap,B=8,") {
		t.Errorf("rows missing:\n%s", tab.String())
	}
	tab.Reset()
	printServeQuick(&tab, res)
	if n := strings.Count(tab.String(), "\n"); n != len(res)+2 || !strings.Contains(tab.String(), "| vk-bf16 | prefill T = 70 | generic |") ||
		!strings.Contains(tab.String(), "| kv-f32 | verify T = 4, B = 8 | generic |") || !strings.Contains(tab.String(), "| vk-f32 | decode B = 1 | generic |") {
		t.Errorf("quick table: %d lines for %d results, or rows missing:\n%s", n, len(res), tab.String())
	}

	// Quick: the call and copy() only.
	c.Quick = true
	res, err = MeasureServe(c, Formats[:1], cases[3:4], io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !(r.Call > 0 && r.Copy > 0) || r.Single != 0 || r.Floor != 0 {
			t.Errorf("Quick: %+v: want the call and copy() only", r)
		}
	}
	c.Quick = false

	// Picked: per case and format, only the kernel gdn picks (the first that implements it).
	c.Picked, c.Workers = true, []int{1}
	res, err = MeasureServe(c, Formats, cases[:1], io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(Formats) {
		t.Fatalf("Picked: %d results, want one per format (%d)", len(res), len(Formats))
	}
	for _, r := range res {
		l, err := NewRunData(r.Case, r.Format).Layer("", 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := l.Kernel(); r.Kernel != want {
			t.Errorf("Picked, %v: kernel %s, gdn picks %s", r.Format, r.Kernel, want)
		}
	}
}
