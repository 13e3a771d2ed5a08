package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// Shape is one benchmark shape: B sequences of a layer with HK q/k heads, HV value heads, key dim
// K and value dim V.
type Shape struct{ B, HK, HV, K, V int }

// String is the benchmark-name form, "B=1,HK=16,HV=32,K=128,V=128" (benchstat pivots on the keys).
func (s Shape) String() string {
	return fmt.Sprintf("B=%d,HK=%d,HV=%d,K=%d,V=%d", s.B, s.HK, s.HV, s.K, s.V)
}

// Layer is the shape without B, "HK=16,HV=32,K=128,V=128".
func (s Shape) Layer() string { return fmt.Sprintf("HK=%d,HV=%d,K=%d,V=%d", s.HK, s.HV, s.K, s.V) }

// StateBytes is the size of the state in bytes.
func (s Shape) StateBytes() int64 { return int64(s.B) * int64(s.HV) * int64(s.K) * int64(s.V) * 4 }

// Traffic is the state bytes one step reads and writes: the state once in, once out.
func (s Shape) Traffic() int64 { return 2 * s.StateBytes() }

// Qwen3Next is one Qwen3-Next GDN layer (16 q/k heads, 32 value heads, K = V = 128).
var Qwen3Next = Shape{HK: 16, HV: 32, K: 128, V: 128}

// parseLayer parses "HKxHVxKxV", e.g. "16x32x128x128" (or "qwen3next").
func parseLayer(s string) (Shape, error) {
	if strings.EqualFold(s, "qwen3next") {
		return Qwen3Next, nil
	}
	f := strings.Split(s, "x")
	if len(f) != 4 {
		return Shape{}, fmt.Errorf("layer %q: want HKxHVxKxV, e.g. 16x32x128x128", s)
	}
	var d [4]int
	for i, x := range f {
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 {
			return Shape{}, fmt.Errorf("layer %q: %q is not a positive integer", s, x)
		}
		d[i] = n
	}
	if d[1]%d[0] != 0 {
		return Shape{}, fmt.Errorf("layer %q: HV = %d is not a multiple of HK = %d", s, d[1], d[0])
	}
	return Shape{HK: d[0], HV: d[1], K: d[2], V: d[3]}, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Data is one shape's inputs, state and outputs with realistic values (q, k, v, z, b ~ N(0, 1),
// a ~ N(−1, 1.5), A_log ~ N(0, 0.5), dt_bias ~ N(0, 1), state ~ N(0, 0.05)), and a second
// buffer of the state's size as the destination of the copy() baseline. The step runs in place.
type Data struct {
	Shape  Shape
	Params gdn.Config // ALog, DtBias, NormWeight and the dims; Kernel and Workers unset
	In     gdn.Input
	Out    gdn.Output
	Dst    []float32 // copy(Dst, In.State) is the memory-speed baseline
}

// NewData allocates and fills the data for s (deterministically).
func NewData(s Shape) *Data {
	r := rand.New(rand.NewPCG(uint64(s.K)<<32|uint64(s.V), uint64(s.B)<<32|uint64(s.HV)))
	heads := s.B * s.HV
	state := vec(r, heads*s.K*s.V, 0, 0.05)
	d := &Data{
		Shape: s,
		Params: gdn.Config{
			KHeads: s.HK, VHeads: s.HV, K: s.K, V: s.V,
			ALog: vec(r, s.HV, 0, 0.5), DtBias: vec(r, s.HV, 0, 1), NormWeight: vec(r, s.V, 1, 0.2),
		},
		In: gdn.Input{
			Q: vec(r, s.B*s.HK*s.K, 0, 1), K: vec(r, s.B*s.HK*s.K, 0, 1),
			V: vec(r, heads*s.V, 0, 1), Z: vec(r, heads*s.V, 0, 1),
			B: vec(r, heads, 0, 1), A: vec(r, heads, -1, 1.5),
			State: state,
		},
		Out: gdn.Output{State: state, Out: make([]gdn.BF16, heads*s.V)},
		Dst: make([]float32, len(state)),
	}
	copy(d.Dst, state) // touch every page of Dst before any measurement
	return d
}

func vec(r *rand.Rand, n int, mean, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + sd*r.NormFloat64())
	}
	return v
}

// Layer returns a gdn.Layer for d's shape with the given kernel and worker count.
func (d *Data) Layer(kernel string, workers int) (*gdn.Layer, error) {
	c := d.Params
	c.Kernel, c.Workers = kernel, workers
	return gdn.New(c)
}

// Steps runs n in-place steps of l and returns the elapsed time.
func (d *Data) Steps(l *gdn.Layer, n int) (time.Duration, error) {
	t0 := time.Now()
	for range n {
		if err := l.Step(d.In, d.Out); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// Copies runs n copy(Dst, State) and returns the elapsed time.
func (d *Data) Copies(n int) time.Duration {
	t0 := time.Now()
	for range n {
		copy(d.Dst, d.In.State)
	}
	return time.Since(t0)
}

// Reads runs n read-only passes over the state's bytes (bytes.Count, Go's vectorised byte count:
// every byte read once, nothing written) and returns the elapsed time. It is the floor of any
// step, which must read the whole state.
func (d *Data) Reads(n int) time.Duration {
	b := floatBytes(d.In.State)
	t0 := time.Now()
	count := 0
	for range n {
		count += bytes.Count(b, []byte{0x55})
	}
	elapsed := time.Since(t0)
	runtime.KeepAlive(count) // the counts are the work done
	return elapsed
}

// InPlace runs n copy(Dst[16:], Dst[:len-16]) and returns the elapsed time: memmove reading and
// writing the same lines of a buffer of the state's size (overlapping, so without non-temporal
// stores), the floor of a one-pass in-place update, which an exact step cannot be (δ needs a
// whole column of Sᵀk̂ before a row is written: two passes per head).
func (d *Data) InPlace(n int) time.Duration {
	m := len(d.Dst)
	t0 := time.Now()
	for range n {
		copy(d.Dst[min(16, m):], d.Dst[:max(0, m-16)])
	}
	return time.Since(t0)
}

// floatBytes is the memory of f as bytes.
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// median returns the median of v (the mean of the middle two for even lengths); v is not modified.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
