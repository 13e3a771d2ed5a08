package gdn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

// sweepSizes are the K and V of the shape sweeps: every tail of every kernel's blocking (16/128
// lanes for AVX-512, 32/8/4/1 for AVX2 and NEON) around the common sizes.
var sweepSizes = []int{1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 256}

// sweepShapes pairs the sizes: the full cross product of the sizes up to 65, each size above 65
// with a spread of the small ones on the other axis (both ways), and the large sizes with each
// other along two diagonals. That is every tail on each axis against every tail on the other,
// without running every 256×256-scale product.
func sweepShapes(short bool) [][2]int {
	var small, large []int
	for _, s := range sweepSizes {
		if s <= 65 {
			small = append(small, s)
		} else {
			large = append(large, s)
		}
	}
	var kv [][2]int
	for _, k := range small {
		for _, v := range small {
			if !short || k == v || k == 1 || v == 1 || k == 17 || v == 17 {
				kv = append(kv, [2]int{k, v})
			}
		}
	}
	spread := []int{1, 3, 16, 17, 33, 64, 65}
	if short {
		spread = []int{1, 17, 64}
	}
	for _, x := range large {
		for _, s := range spread {
			kv = append(kv, [2]int{x, s}, [2]int{s, x})
		}
	}
	for i, x := range large {
		kv = append(kv, [2]int{x, x}, [2]int{x, large[len(large)-1-i]})
	}
	return kv
}

// placer provides the memory of every slice of a Step call and decides what is around it.
type placer interface {
	f32(n int) []float32
	bf16(n int) []gdn.BF16
}

// stepCase is one call of a sweep: the case, where its slices live, and what is asked for.
type stepCase struct {
	c               oracle.Case
	inPlace         bool
	wantOut, want32 bool
}

// placedStep copies the case's inputs into slices from p, runs Step with the kernel and checks
// the result against the float64 oracle and that no input was modified (the state only in place).
// Every element must be within SPEC.md's bounds; the "99 % of bf16 outputs correctly rounded" rule
// is statistical and is left to the caller, over many cases: placedStep returns how many bf16
// outputs it checked and how many were the correctly rounded bf16 of the float64 y.
func placedStep(t *testing.T, kernel string, sc stepCase, p placer) (same, total int) {
	t.Helper()
	c := sc.c
	l := newLayer(t, c, kernel, 1)
	place := func(src []float32) []float32 {
		s := p.f32(len(src))
		copy(s, src)
		return s
	}
	in := gdn.Input{
		Q: place(c.In.Q), K: place(c.In.K), V: place(c.In.V), Z: place(c.In.Z),
		B: place(c.In.B), A: place(c.In.A), State: place(c.In.State),
	}
	n := c.Dims.Heads() * c.Dims.V
	out := gdn.Output{State: in.State}
	if !sc.inPlace {
		out.State = p.f32(len(c.In.State))
		for i := range out.State {
			out.State[i] = float32(math.NaN())
		}
	}
	if sc.wantOut {
		out.Out = p.bf16(n)
	}
	if sc.want32 {
		out.OutF32 = p.f32(n)
	}
	require.NoError(t, l.Step(in, out))

	for _, x := range []struct {
		name      string
		got, want []float32
	}{
		{"Q", in.Q, c.In.Q}, {"K", in.K, c.In.K}, {"V", in.V, c.In.V}, {"Z", in.Z, c.In.Z},
		{"B", in.B, c.In.B}, {"A", in.A, c.In.A},
	} {
		require.True(t, slices.Equal(f32bits(x.got), f32bits(x.want)), "Input.%s modified", x.name)
	}
	if !sc.inPlace {
		require.True(t, slices.Equal(f32bits(in.State), f32bits(c.In.State)), "out-of-place Step modified Input.State")
	}
	got := oracle.Got{State: out.State, OutF32: out.OutF32}
	if out.Out != nil {
		got.Out = make([]uint16, n)
		for i, b := range out.Out {
			got.Out[i] = uint16(b)
			if got.Out[i] == c.Want.OutBF16[i] {
				same++
			}
		}
		total = n
	}
	c.Random = false // per element bounds only
	require.NoError(t, oracle.Check(c, got))
	return same, total
}

// roundedCount accumulates placedStep's bf16 counts and checks SPEC.md's 99 % rule on the total.
type roundedCount struct{ same, total int }

func (r *roundedCount) add(same, total int) { r.same += same; r.total += total }

func (r *roundedCount) check(t *testing.T) {
	t.Helper()
	if r.total == 0 {
		return
	}
	frac := float64(r.same) / float64(r.total)
	require.GreaterOrEqual(t, frac, oracle.MinCorrectBF16, "%d of %d bf16 outputs correctly rounded", r.same, r.total)
}

// bandPlacer puts every slice at a chosen offset (0–15 elements) from a 64-byte boundary, between
// NaN guard bands (kerneltest.Guarded), and checks afterwards that no band was touched.
type bandPlacer struct {
	t       *testing.T
	offsets []int // cycled through, one per slice
	next    int
	checks  []func(what string)
}

func (p *bandPlacer) offset() int {
	o := p.offsets[p.next%len(p.offsets)]
	p.next++
	return o
}

func (p *bandPlacer) f32(n int) []float32 {
	s, check := kerneltest.Guarded[float32](p.t, n, p.offset())
	p.checks = append(p.checks, check)
	return s
}

func (p *bandPlacer) bf16(n int) []gdn.BF16 {
	s, check := kerneltest.Guarded[uint16](p.t, n, p.offset()) // 0–15 bf16: every 2-byte alignment
	p.checks = append(p.checks, check)
	return unsafe.Slice((*gdn.BF16)(unsafe.Pointer(unsafe.SliceData(s))), n)
}

// check fails the test if any guard band changed.
func (p *bandPlacer) check() {
	p.t.Helper()
	for i, c := range p.checks {
		c(fmt.Sprintf("slice %d (in the order placed)", i))
	}
}

// sweepCases makes the sweep's cases: realistic random states, every fifth shape with two
// sequences and two value heads per key head, alternating in place / out of place and the
// requested outputs (both, bf16 only, f32 only).
func sweepCases(short bool) []stepCase {
	return shapeCases(rand.New(rand.NewPCG(7, 8)), sweepShapes(short), 5)
}

// shapeCases makes one random case per (K, V) shape — B = 2 with HV = 2 for every bth shape, else
// one head — rotating in place / out of place and the requested outputs (both, bf16, f32 only).
func shapeCases(r *rand.Rand, shapes [][2]int, every int) []stepCase {
	var cs []stepCase
	for i, kv := range shapes {
		d := oracle.Dims{B: 1, HK: 1, HV: 1, K: kv[0], V: kv[1]}
		if i%every == every-1 {
			d.B, d.HV = 2, 2
		}
		c := oracle.Random(r, d, 1)
		c.Name = fmt.Sprintf("K=%d,V=%d,B=%d,HV=%d", d.K, d.V, d.B, d.HV)
		cs = append(cs, stepCase{c: c, inPlace: i%2 == 0, wantOut: i%3 != 2, want32: i%3 != 1})
	}
	return cs
}

// TestShapeSweep runs every kernel over K, V ∈ sweepSizes (paired, see sweepShapes) with every
// slice at an offset of 0–15 floats from a 64-byte boundary and NaN guard bands around it:
// results within SPEC.md's bounds, guard bands and inputs untouched.
func TestShapeSweep(t *testing.T) {
	cases := sweepCases(testing.Short())
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		var rc roundedCount
		for i, sc := range cases {
			var offs []int
			for s := 0; s < 11; s++ {
				offs = append(offs, (i*7+s*5)%16)
			}
			t.Run(sc.c.Name, func(t *testing.T) {
				p := &bandPlacer{t: t, offsets: offs}
				rc.add(placedStep(t, kernel, sc, p))
				p.check()
			})
		}
		rc.check(t)
	})
}

// TestOffsetSweep runs one odd shape with every slice at each offset 0–15 in turn.
func TestOffsetSweep(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	c := oracle.Random(r, oracle.Dims{B: 2, HK: 1, HV: 2, K: 19, V: 37}, 1)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		var rc roundedCount
		for off := 0; off < 16; off++ {
			p := &bandPlacer{t: t, offsets: []int{off}}
			rc.add(placedStep(t, kernel, stepCase{c: c, inPlace: off%2 == 0, wantOut: true, want32: true}, p))
			p.check()
		}
		rc.check(t)
	})
}
