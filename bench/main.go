// Command bench measures the fused GDN decode step against copy() of the same state bytes, and the
// serving call (Layer.Run: decode, prefill, verification) against copy(), its memory floor and the
// FMA bound, and prints markdown tables (and, with -svg, a chart of GB/s against B).
//
// With no flags it is the quick answer (one short table): the default kernel (the one gdn picks
// for each format), Workers 1, 5 repetitions (batches ≥ 5 ms) of the serving call on a Qwen3-Next
// layer in the f32 [K][V] and [V][K] formats and bf16 [V][K] — decode at B = 1 and 64 against
// copy() of the state, prefill T = 512 and verification T = 4 at B = 8 against the FMA bound.
// -full is the whole matrix: the step table (Layer.Step against copy()) and the wide serving table
// for every kernel this CPU has, every format, Workers 1 and 2, B = 1, 8, 64, 11 repetitions, with
// the multi-token curve, the per-channel gate (KDA) and the conv front. Flags given explicitly
// override either set of defaults:
//
//	go run ./bench                                   # quick: default kernel, Workers 1, B = 1, 64
//	go run ./bench -full                             # every kernel, Workers 1 and 2, B = 1, 8, 64
//	go run ./bench -full -kernels avx512,avx2 -b 1,64 -formats vk-f32,vk-bf16
//	go run ./bench -layers 16x32x128x128,16x32x64x64 -b 1,8 -kernels avx512,generic -workers 1 -reps 21
//	go run ./bench -full -svg gbps.svg
//
// A step reads the state once and writes it once, so its traffic is 2× the state bytes; copy()
// from the state into a second buffer of the same size moves the same bytes, and its time is the
// memory-speed baseline ("t/copy" = the step's time over copy()'s; 1.00 is memory speed). The
// measurements alternate: per repetition, every (kernel, workers) runs a batch of steps followed
// by a batch of copies, so a noisy machine slows both sides of each ratio alike; the table shows
// medians over the repetitions. copy() is always one goroutine.
//
// The package's benchmarks (go test -bench . ./bench) measure the same with the testing package.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// Config holds what Measure runs (the command's flags).
type Config struct {
	Layers  []Shape  // B unset
	Bs      []int    // batch sizes
	Kernels []string // kernel names, best first
	Workers []int
	Reps    int           // repetitions (medians are taken over them)
	Batch   time.Duration // minimum duration of one measured batch of steps or copies
	// Picked: MeasureServe measures, per format, only the first kernel of Kernels that implements
	// it (with Kernels = gdn.Kernels(): the one gdn picks for the format).
	Picked bool
	// Quick: MeasureServe measures the call and copy() only (not the single-token call nor the
	// floors, which only the full table shows).
	Quick bool
}

// Result is the measurement of one (shape, kernel, workers).
type Result struct {
	Shape   Shape
	Kernel  string
	Workers int
	Step    float64 // median seconds per step
	Copy    float64 // median seconds per copy() of the state, interleaved with this config's steps
	Read    float64 // median seconds per read-only pass over the state (Data.Reads), same for the shape
	InPlace float64 // median seconds per in-place memmove of the state's size (Data.InPlace), same
	Generic float64 // median seconds per step of the generic kernel, same shape and workers (0: not measured)
}

// GBps is the step's state traffic in GB/s.
func (r Result) GBps() float64 { return float64(r.Shape.Traffic()) / r.Step / 1e9 }

// CopyGBps is copy()'s traffic (the same bytes) in GB/s.
func (r Result) CopyGBps() float64 { return float64(r.Shape.Traffic()) / r.Copy / 1e9 }

// quickDefaults are the flags' defaults (the quick run); fullDefaults replace them with -full,
// for the flags not given explicitly. -kernels, unset, is the default kernel alone in the quick run
// and every kernel with -full.
var (
	quickDefaults = map[string]string{"b": "1,64", "workers": "1", "reps": "5", "batch": "5ms",
		"formats": "kv-f32,vk-f32,vk-bf16", "curve": "", "kda": "", "conv": ""}
	fullDefaults = map[string]string{"b": "1,8,64", "workers": "1,2", "reps": "11", "batch": "5ms",
		"formats": "kv-f32,vk-f32,kv-bf16,vk-bf16", "curve": "2,3,4,8", "kda": "32x32x128x128", "conv": "16x32x128x128"}
)

// flags are the command's flags.
type flags struct {
	full                         *bool
	layers, bs, kernels, workers *string
	reps                         *int
	batch                        *time.Duration
	svg, formats                 *string
	serve, steps                 *bool
	kda, conv, curve             *string
}

// newFlags defines the command's flags on fs.
func newFlags(fs *flag.FlagSet) *flags {
	batch, _ := time.ParseDuration(quickDefaults["batch"])
	reps, _ := strconv.Atoi(quickDefaults["reps"])
	return &flags{
		full: fs.Bool("full", false, "the full matrix: every kernel, -workers "+fullDefaults["workers"]+", -b "+fullDefaults["b"]+
			", -reps "+fullDefaults["reps"]+", -batch "+fullDefaults["batch"]+" (flags given explicitly still override)"),
		layers: fs.String("layers", "16x32x128x128", "comma-separated layers HKxHVxKxV (qwen3next = 16x32x128x128)"),
		bs: fs.String("b", quickDefaults["b"], "comma-separated batch sizes B of the step table and of the serving table's decode (-full: "+
			fullDefaults["b"]+")"),
		kernels: fs.String("kernels", "", "comma-separated kernels (default: the default kernel alone, the first of those this CPU has: "+
			strings.Join(gdn.Kernels(), ",")+"; -full: every one)"),
		workers: fs.String("workers", quickDefaults["workers"], "comma-separated worker counts (Config.Workers) (-full: "+fullDefaults["workers"]+")"),
		reps:    fs.Int("reps", reps, "repetitions; the tables show medians (-full: "+fullDefaults["reps"]+")"),
		batch:   fs.Duration("batch", batch, "minimum duration of one measured batch of steps or of copies (-full: "+fullDefaults["batch"]+")"),
		svg:     fs.String("svg", "", "also write a chart of GB/s against B (SVG) to this file"),
		serve: fs.Bool("serve", true, "also measure the serving call (Layer.Run: decode at every -b; prefill T = 512 at B = 1; "+
			"verify T = 4 at B = 8) on the first layer"),
		formats: fs.String("formats", quickDefaults["formats"], "comma-separated state formats of the serving table (-full: "+fullDefaults["formats"]+")"),
		kda: fs.String("kda", "", "also measure the serving call with the per-channel gate (gate=kda, sigmoid output gate) on this "+
			"layer HKxHVxKxV (Kimi-Linear's), each call over the same call with the scalar gate (-full: "+fullDefaults["kda"]+")"),
		curve: fs.String("curve", "", "also measure calls of these T tokens at B = 8 in place (the multi-token curve: each over the "+
			"single-token call and over one state pass plus T times the FMA bound) on the first layer (-full: "+fullDefaults["curve"]+")"),
		conv: fs.String("conv", "", "also measure the serving call with the conv front (conv: pre-conv rows, width 4) on this "+
			"layer HKxHVxKxV (Qwen3-Next's), each call over the same call given the post-conv rows (-full: "+fullDefaults["conv"]+")"),
		steps: fs.Bool("steps", false, "also measure the step table (Layer.Step against copy(); -full and -svg: always)"),
	}
}

// config applies -full to the flags of fs not given explicitly (fs parsed) and returns the Config.
func (f *flags) config(fs *flag.FlagSet) (Config, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if *f.full {
		for name, v := range fullDefaults {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return Config{}, err
				}
			}
		}
	} else if !set["kernels"] {
		// The default kernel: the step table runs the first kernel (gdn's pick for the [K][V] f32
		// state of Layer.Step), the serving table gdn's pick for each format.
		c, err := parseConfig(*f.layers, *f.bs, "", *f.workers, *f.reps, *f.batch)
		c.Picked = true
		return c, err
	}
	return parseConfig(*f.layers, *f.bs, *f.kernels, *f.workers, *f.reps, *f.batch)
}

func main() {
	f := newFlags(flag.CommandLine)
	flag.Parse()

	c, err := f.config(flag.CommandLine)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	var fs []Format
	if *f.serve {
		if fs, err = parseFormats(*f.formats); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -formats:", err)
			os.Exit(2)
		}
	}
	steps := c
	if c.Picked {
		steps.Kernels = c.Kernels[:1]
	}
	var res []Result
	if *f.full || *f.steps || *f.svg != "" || !*f.serve {
		if res, err = Measure(steps, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	printHeader(os.Stdout, steps)
	if res != nil {
		printTable(os.Stdout, res)
		fmt.Println()
	}
	if *f.serve {
		cases := ServeCases(c.Layers[0], c.Bs...)
		if *f.curve != "" {
			ts, err := parseInts(*f.curve)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -curve:", err)
				os.Exit(2)
			}
			cases = append(cases, CurveCases(c.Layers[0], ts...)...)
		}
		if *f.kda != "" {
			kl, err := parseLayer(*f.kda)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -kda:", err)
				os.Exit(2)
			}
			cases = append(cases, KDACases(kl, c.Bs...)...)
		}
		if *f.conv != "" {
			cl, err := parseLayer(*f.conv)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -conv:", err)
				os.Exit(2)
			}
			cases = append(cases, ConvCases(cl, c.Bs...)...)
		}
		log := io.Writer(os.Stderr)
		if c.Quick = !*f.full; c.Quick {
			fmt.Fprintf(os.Stderr, "measuring %d serving calls × %d formats ...\n", len(cases), len(fs))
			log = io.Discard
		}
		sres, err := MeasureServe(c, fs, cases, log)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if c.Quick {
			printServeQuick(os.Stdout, sres)
		} else {
			printServe(os.Stdout, sres)
		}
	}
	if *f.svg != "" {
		if err := os.WriteFile(*f.svg, []byte(SVG(res)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if !*f.full {
		fmt.Printf("\nThe full matrix (the step table; every kernel and format, Workers %s, B = %s, %s repetitions; the curve, KDA, the conv front): `go run ./bench -full`.\n",
			strings.ReplaceAll(fullDefaults["workers"], ",", " and "), strings.ReplaceAll(fullDefaults["b"], ",", ", "), fullDefaults["reps"])
	}
}

func parseConfig(layers, bs, kernels, workers string, reps int, batch time.Duration) (Config, error) {
	var c Config
	for _, l := range strings.Split(layers, ",") {
		s, err := parseLayer(strings.TrimSpace(l))
		if err != nil {
			return c, fmt.Errorf("-layers: %w", err)
		}
		c.Layers = append(c.Layers, s)
	}
	var err error
	if c.Bs, err = parseInts(bs); err != nil {
		return c, fmt.Errorf("-b: %w", err)
	}
	if c.Workers, err = parseInts(workers); err != nil {
		return c, fmt.Errorf("-workers: %w", err)
	}
	have := gdn.Kernels()
	if kernels == "" {
		c.Kernels = have
	} else {
		for _, k := range strings.Split(kernels, ",") {
			k = strings.TrimSpace(k)
			if !slices.Contains(have, k) {
				return c, fmt.Errorf("-kernels: %q is not available here (this CPU has %v)", k, have)
			}
			c.Kernels = append(c.Kernels, k)
		}
	}
	if reps < 1 {
		return c, fmt.Errorf("-reps = %d, want >= 1", reps)
	}
	c.Reps, c.Batch = reps, batch
	return c, nil
}

// Measure runs every configuration of c and returns the results in table order (layer, B,
// kernel, workers). Progress goes to log.
func Measure(c Config, log io.Writer) ([]Result, error) {
	var all []Result
	for _, layer := range c.Layers {
		for _, b := range c.Bs {
			s := layer
			s.B = b
			fmt.Fprintf(log, "measuring %v (state %.1f MiB) ...\n", s, float64(s.StateBytes())/(1<<20))
			res, err := measureShape(c, s)
			if err != nil {
				return nil, err
			}
			all = append(all, res...)
			runtime.GC() // release this shape's buffers before the next one
		}
	}
	return all, nil
}

func measureShape(c Config, s Shape) ([]Result, error) {
	d := NewData(s)
	type config struct {
		kernel      string
		workers     int
		l           *gdn.Layer
		n, nc       int // steps and copies per batch
		steps, cops []float64
	}
	var cs []*config
	for _, k := range c.Kernels {
		for _, w := range c.Workers {
			l, err := d.Layer(k, w)
			if err != nil {
				return nil, err
			}
			cs = append(cs, &config{kernel: k, workers: w, l: l})
		}
	}
	// Calibrate: warm up, then size the batches so that each lasts at least c.Batch.
	for _, x := range cs {
		if _, err := d.Steps(x.l, 2); err != nil {
			return nil, err
		}
		t, _ := d.Steps(x.l, 1)
		x.n = batchLen(t, c.Batch)
		d.Copies(1)
		x.nc = batchLen(d.Copies(1), c.Batch)
	}
	// Every timed batch follows one untimed operation of its own kind. An in-place step leaves up
	// to an L3's worth of dirty state lines (32 MiB here) that reach memory during whatever runs
	// next, while copy() (non-temporal stores) leaves none: timed straight after a copy, a step
	// would have part of its write-back done for it by the copies after it, which would pay for
	// it. Back to back, as inference runs them, each step pays for the one before. (Without the
	// warm-ups, B = 64 read 1.01–1.05× here against 1.22–1.23× for go test -bench, whose steps
	// run back to back.)
	// The floors (Data.Reads, Data.InPlace) are timed once per repetition, the same way.
	nr := batchLen(d.Reads(1), c.Batch)
	d.InPlace(1)
	ni := batchLen(d.InPlace(1), c.Batch)
	var reads, inplace []float64
	for rep := range c.Reps {
		d.Reads(1)
		reads = append(reads, d.Reads(nr).Seconds()/float64(nr))
		d.InPlace(1)
		inplace = append(inplace, d.InPlace(ni).Seconds()/float64(ni))
		for i := range cs {
			x := cs[(i+rep)%len(cs)] // rotate the order so that no config always follows another
			if _, err := d.Steps(x.l, 1); err != nil {
				return nil, err
			}
			t, err := d.Steps(x.l, x.n)
			if err != nil {
				return nil, err
			}
			x.steps = append(x.steps, t.Seconds()/float64(x.n))
			d.Copies(1)
			x.cops = append(x.cops, d.Copies(x.nc).Seconds()/float64(x.nc))
		}
	}
	var res []Result
	for _, x := range cs {
		r := Result{Shape: s, Kernel: x.kernel, Workers: x.workers, Step: median(x.steps), Copy: median(x.cops),
			Read: median(reads), InPlace: median(inplace)}
		for _, g := range cs {
			if g.kernel == "generic" && g.workers == x.workers {
				r.Generic = median(g.steps)
			}
		}
		res = append(res, r)
	}
	return res, nil
}

// batchLen is how many operations of duration one fill a batch of at least min.
func batchLen(one, min time.Duration) int {
	if one <= 0 {
		return 1000
	}
	return max(1, int((min+one-1)/one))
}

func printHeader(w io.Writer, c Config) {
	fmt.Fprintf(w, "`%s`  \n", strings.Join(append([]string{"go run ./bench"}, os.Args[1:]...), " "))
	fmt.Fprintf(w, "%s, %s, %s/%s, GOMAXPROCS %d, %s; %d repetitions, batches ≥ %v; medians.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), cpuModel(), runtime.GOOS, runtime.GOARCH,
		runtime.GOMAXPROCS(0), runtime.Version(), c.Reps, c.Batch)
	fmt.Fprintf(w, "%s; Workers %s; B = %s.\n\n", kernelsLine(c.Kernels), joinInts(c.Workers, ", "), joinInts(c.Bs, ", "))
}

// kernelsLine names the kernels measured and which one is the default (the one gdn picks, the
// first of gdn.Kernels()).
func kernelsLine(kernels []string) string {
	have := gdn.Kernels()
	def := have[0]
	if len(kernels) == 1 && kernels[0] == def {
		return fmt.Sprintf("Kernel %s, the default (gdn picks the first of the kernels this CPU has that implements the state format: %s)",
			def, strings.Join(have, ", "))
	}
	var names []string
	for _, k := range kernels {
		if k == def {
			k += " (the default)"
		}
		names = append(names, k)
	}
	s := "Kernels " + strings.Join(names, ", ")
	if !slices.Contains(kernels, def) {
		s += fmt.Sprintf(" (the default, %s, not measured)", def)
	}
	return s
}

// joinInts formats v with sep between the numbers.
func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

// printTable writes the results as a markdown table: per shape, every kernel and worker count,
// then copy() of the same bytes (the median over all its interleaved batches for that shape), then
// the two floors: an in-place memmove of as many bytes (GB/s of its read + write) and a read-only
// pass over the state (GB/s of what it reads).
func printTable(w io.Writer, res []Result) {
	fmt.Fprintln(w, "| kernel | shape | workers | µs/step | GB/s | t/copy() | × generic |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	for i := 0; i < len(res); {
		j := i
		var copies []float64
		for ; j < len(res) && res[j].Shape == res[i].Shape; j++ {
			r := res[j]
			gen := "—"
			if r.Generic > 0 {
				gen = fmt.Sprintf("%.2f", r.Generic/r.Step)
			}
			fmt.Fprintf(w, "| %s | %v | %d | %s | %.1f | %.2f | %s |\n",
				r.Kernel, r.Shape, r.Workers, micros(r.Step), r.GBps(), r.Step/r.Copy, gen)
			copies = append(copies, r.Copy)
		}
		c := median(copies)
		s := res[i].Shape
		fmt.Fprintf(w, "| copy() | %v | 1 | %s | %.1f | 1.00 | |\n", s, micros(c), float64(s.Traffic())/c/1e9)
		if r := res[i]; r.Read > 0 && r.InPlace > 0 {
			fmt.Fprintf(w, "| floor: in-place memmove | %v | 1 | %s | %.1f | %.2f | |\n", s, micros(r.InPlace), float64(s.Traffic())/r.InPlace/1e9, r.InPlace/c)
			fmt.Fprintf(w, "| floor: read-only pass | %v | 1 | %s | %.1f | %.2f | |\n", s, micros(r.Read), float64(s.Traffic())/2/r.Read/1e9, r.Read/c)
		}
		i = j
	}
}

// micros formats seconds as µs with at least 3 significant digits and no exponent.
func micros(sec float64) string {
	us := sec * 1e6
	switch {
	case us >= 1000:
		return fmt.Sprintf("%.0f", us)
	case us >= 100:
		return fmt.Sprintf("%.1f", us)
	case us >= 10:
		return fmt.Sprintf("%.2f", us)
	}
	return fmt.Sprintf("%.3f", us)
}

// cpuModel is the CPU's model name, family and model from /proc/cpuinfo (and whether it runs under
// a hypervisor), or GOARCH.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	f := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			break // the first CPU only
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			f[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	name := f["model name"]
	if name == "" {
		return runtime.GOARCH
	}
	if f["cpu family"] != "" {
		name += fmt.Sprintf(" (family %s, model %s)", f["cpu family"], f["model"])
	}
	if slices.Contains(strings.Fields(f["flags"]), "hypervisor") {
		name += " under a hypervisor"
	}
	return name
}
