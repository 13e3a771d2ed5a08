package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// headGatesMath is the gates as package math computes them (the code gatesGeneric replaced):
// the reference TestGatesMath holds gate1 to.
func headGatesMath(b, a, alog, dtb float32) (beta, em1, eg float32) {
	beta = float32(1 / (1 + math.Exp(-float64(b))))
	x := float64(a) + float64(dtb)
	sp := x
	if !(x > 20) {
		sp = math.Log1p(math.Exp(x))
	}
	g := -math.Exp(float64(alog)) * sp
	if g >= ln2Half {
		em1d := math.Expm1(g)
		return beta, float32(em1d), float32(1 + em1d)
	}
	egd := math.Exp(g)
	return beta, float32(egd - 1), float32(egd)
}

// ulps64 is the distance of x from want in float64 ulps of want (0 for equal, both NaN included).
func ulps64(x, want float64) float64 {
	if x == want || math.IsNaN(x) && math.IsNaN(want) {
		return 0
	}
	if math.IsInf(want, 0) || math.IsNaN(x) || math.IsNaN(want) {
		return math.Inf(1)
	}
	u := math.Nextafter(math.Abs(want), math.Inf(1)) - math.Abs(want)
	return math.Abs(x-want) / u
}

// TestGates64Accuracy holds exp64, log1p01 and expm1Near to package math's functions over their
// domains (math's are within 1 ulp of the exact value): at most 3 ulp apart, and the special values.
func TestGates64Accuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var worst [3]float64
	for range 300000 {
		// math's range (denormals below −708.4), but for its last 0.78: amd64's math.Exp gives
		// +Inf from e^709.44 (exp64(709.7) is checked below).
		x := -745 + (709+745)*r.Float64()
		if r.IntN(2) == 0 {
			x = 40 * (r.Float64() - 0.5)
		}
		worst[0] = max(worst[0], ulps64(exp64(x), math.Exp(x)))
		y := r.Float64()
		if r.IntN(2) == 0 {
			y = math.Ldexp(1, -r.IntN(1075)) * r.Float64() // down to the denormals
		}
		worst[1] = max(worst[1], ulps64(log1p01(y), math.Log1p(y)))
		g := ln2Half * r.Float64()
		if r.IntN(2) == 0 {
			g = -math.Ldexp(1, -1-r.IntN(1000)) * r.Float64() // in [−0.5, 0]
		}
		worst[2] = max(worst[2], ulps64(expm1Near(g), math.Expm1(g)))
	}
	t.Logf("worst ulps against math: exp64 %.2f, log1p01 %.2f, expm1Near %.2f", worst[0], worst[1], worst[2])
	for i, name := range []string{"exp64", "log1p01", "expm1Near"} {
		if worst[i] > 3 {
			t.Errorf("%s: %.2f ulp from package math's", name, worst[i])
		}
	}
	for _, c := range []struct {
		name    string
		got, at float64
		want    float64
	}{
		{"exp64(0)", exp64(0), 0, 1}, {"exp64(+Inf)", exp64(math.Inf(1)), 0, math.Inf(1)},
		{"exp64(-Inf)", exp64(math.Inf(-1)), 0, 0}, {"exp64(709.8)", exp64(709.8), 0, math.Inf(1)},
		{"exp64(-745.2)", exp64(-745.2), 0, 0}, {"exp64(-745.1)", exp64(-745.1), 0, 5e-324}, {"log1p01(0)", log1p01(0), 0, 0},
		{"log1p01(1)", log1p01(1), 0, math.Ln2}, {"expm1Near(0)", expm1Near(0), 0, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if x, want := exp64(709.7), math.Exp(708.7)*math.E; ulps64(x, want) > 3 {
		t.Errorf("exp64(709.7) = %v, want %v", x, want)
	}
	for range 1000 { // log(1 + y) rounds to y there (as math.Log1p gives)
		if y := math.Ldexp(r.Float64(), -1021-r.IntN(54)); log1p01(y) != y {
			t.Fatalf("log1p01(%v) = %v, want %v", y, log1p01(y), y)
		}
	}
	if x := expm1Near(math.Copysign(0, -1)); x != 0 || !math.Signbit(x) {
		t.Errorf("expm1Near(−0) = %v, want −0", x)
	}
	for _, f := range []func(float64) float64{exp64, log1p01, expm1Near} {
		if x := f(math.NaN()); !math.IsNaN(x) {
			t.Errorf("NaN gave %v", x)
		}
	}
}

// TestGatesMath holds gate1 to headGatesMath (package math's functions): the float32 gates equal,
// but for a few lanes whose float64 value is within a few ulp of a float32 rounding boundary,
// which differ by one float32 ulp; over realistic lanes and over the special values.
func TestGatesMath(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 20, -20, 19.999998, 20.000002, 88, -88,
		700, -700, 710, -710, 1e30, -1e30, math.MaxFloat32, -math.MaxFloat32, 1e-40, -1e-40,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0.6931472, -0.6931472}
	pick := func(sd float64) float32 {
		if r.IntN(8) == 0 {
			return specials[r.IntN(len(specials))]
		}
		return float32(sd * r.NormFloat64())
	}
	const n = 400000
	diff := 0
	for i := range n {
		b, a, alog, dtb := pick(3), pick(4), pick(1.5), pick(2)
		if i%3 == 0 { // the models' range: A_log in about [−1, 3], a + dt_bias within ±10
			alog, dtb = float32(4*r.Float64()-1), float32(2*r.NormFloat64())
		}
		g := [3]float32{}
		w := [3]float32{}
		g[0], g[1], g[2] = gate1(b, a, alog, dtb)
		w[0], w[1], w[2] = headGatesMath(b, a, alog, dtb)
		for j := range g {
			if math.Float32bits(g[j]) == math.Float32bits(w[j]) || g[j] != g[j] && w[j] != w[j] {
				continue
			}
			diff++
			if d := math.Abs(float64(g[j]) - float64(w[j])); math.Float32bits(g[j])>>31 != math.Float32bits(w[j])>>31 && d != 0 ||
				d > float64(math.Nextafter32(float32(math.Abs(float64(w[j]))), float32(math.Inf(1)))-float32(math.Abs(float64(w[j])))) {
				t.Fatalf("b=%v a=%v A_log=%v dt_bias=%v: gate %d = %v (%#x), package math gives %v (%#x)",
					b, a, alog, dtb, j, g[j], math.Float32bits(g[j]), w[j], math.Float32bits(w[j]))
			}
		}
	}
	t.Logf("%d of %d gates one float32 ulp from package math's", diff, 3*n)
	if diff > 3*n/100000 {
		t.Errorf("%d of %d gates differ from package math's: more than 1 in 100000", diff, 3*n)
	}
}

// BenchmarkGates times the gates of n lanes (32: a one-token sequence's value heads, Qwen3-Next;
// 64: a chunk's tokens of one head) with every kernel's gates piece, and with package math's
// functions a lane at a time (headGatesMath: the code the piece replaced), ns per lane.
func BenchmarkGates(b *testing.B) {
	for _, n := range []int{32, 64} {
		in := make([][]float32, 7)
		for j := range in {
			in[j] = make([]float32, n)
		}
		for i := range n {
			in[0][i], in[1][i] = float32(i%7)-3, float32(i%11)*0.7-4
			in[2][i], in[3][i] = float32(i%5)*0.5-1, float32(i%3)-1
		}
		lanes := func(b *testing.B) { b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lane") }
		b.Run(fmt.Sprintf("kernel=math/n=%d", n), func(b *testing.B) {
			for range b.N {
				for i := range n {
					in[4][i], in[5][i], in[6][i] = headGatesMath(in[0][i], in[1][i], in[2][i], in[3][i])
				}
			}
			lanes(b)
		})
		for _, im := range append([]*impl{&genericImpl}, available...) {
			b.Run(fmt.Sprintf("kernel=%s/n=%d", im.name, n), func(b *testing.B) {
				for range b.N {
					im.gates(in[4], in[5], in[6], in[0], in[1], in[2], in[3])
				}
				lanes(b)
			})
		}
	}
}

// boundaryLane is a lane (b, a, A_log, dt_bias) and how near one of its gates is to a float32
// rounding boundary, in float64 ulps (see boundaryLanes).
type boundaryLane struct {
	in  [4]float32
	tol float64
}

// boundaryLanes returns n lanes each of which has one of its gates, in float64 (gate64), within
// one float64 ulp of a float32 rounding boundary (the midpoint of two neighbouring float32s), so
// that a change of a float64 ulp or more anywhere in the lane's computation changes its float32
// result with probability about one half: em1 and eg in turn, in the expm1 branch (x = a ≤ 0) and
// in the exp branch (x in (0.1, 6.1]). Such a lane reaches its boundary through A_log = c·2⁻⁵²
// (|c| < 2²³): exp64 of it is 1 + c·2⁻⁵², which scales g by c float64 ulps. Every fifth lane has
// x = 20 exactly (where softplus is log1p(exp(x)), not x: the threshold's side) with a random
// A_log in [0, 1.6], its eg within 2²² float64 ulps of a boundary: taking softplus as x there moves
// eg by more than 2²⁴. b is random (beta is not on a boundary).
func boundaryLanes(r *rand.Rand, n int) []boundaryLane {
	var lanes []boundaryLane
	for tries := 0; len(lanes) < n; tries++ {
		if tries > 1000*n {
			panic("boundaryLanes: no lanes found")
		}
		which := len(lanes) % 5
		a := float32(-8 * r.Float64())
		if which == 2 || which == 3 {
			a = float32(0.1 + 6*r.Float64())
		}
		out := func(alog float32) float64 {
			_, em1, eg := gate64(0, a, alog, 0)
			if which%2 == 0 && which != 4 {
				return em1
			}
			return eg
		}
		ulp := func(m float64) float64 { return math.Nextafter(math.Abs(m), math.Inf(1)) - math.Abs(m) }
		mid := func(v float64) float64 { // the float32 boundary nearest v
			f := float32(v)
			m := float64(f) + (float64(math.Nextafter32(f, float32(math.Inf(1))))-float64(f))/2
			if m2 := float64(f) + (float64(math.Nextafter32(f, float32(math.Inf(-1))))-float64(f))/2; math.Abs(m2-v) < math.Abs(m-v) {
				m = m2
			}
			return m
		}
		b := float32(2 * r.NormFloat64())
		if which == 4 {
			a = 20
			alog := float32(1.6 * r.Float64())
			v := out(alog)
			if m := mid(v); math.Abs(v-m) <= 1<<22*ulp(m) {
				lanes = append(lanes, boundaryLane{[4]float32{b, a, alog, 0}, 1 << 22})
			}
			continue
		}
		v0 := out(0)
		m := mid(v0)
		s := (out(0x1p-32) - v0) / (1 << 20)
		if s == 0 || math.IsNaN(s) {
			continue
		}
		c0 := math.Round((m - v0) / s)
		if math.Abs(c0) > 1<<23-8 {
			continue
		}
		best, bestD := 0, math.Inf(1)
		for c := int(c0) - 6; c <= int(c0)+6; c++ {
			if d := math.Abs(out(float32(c)*0x1p-52) - m); d < bestD {
				best, bestD = c, d
			}
		}
		if bestD <= ulp(m) {
			lanes = append(lanes, boundaryLane{[4]float32{b, a, float32(best) * 0x1p-52, 0}, 1})
		}
	}
	return lanes
}

// TestBoundaryLanes checks boundaryLanes' claim on its lanes: one gate within tol float64 ulps of
// a float32 rounding boundary.
func TestBoundaryLanes(t *testing.T) {
	for i, l := range boundaryLanes(rand.New(rand.NewPCG(5, 6)), 200) {
		_, em1, eg := gate64(l.in[0], l.in[1], l.in[2], l.in[3])
		near := false
		for _, v := range []float64{em1, eg} {
			f := float32(v)
			for _, nb := range []float32{math.Nextafter32(f, float32(math.Inf(1))), math.Nextafter32(f, float32(math.Inf(-1)))} {
				m := float64(f) + (float64(nb)-float64(f))/2
				near = near || math.Abs(v-m) <= l.tol*(math.Nextafter(math.Abs(m), math.Inf(1))-math.Abs(m))
			}
		}
		if !near {
			t.Fatalf("lane %d %v: em1 %v, eg %v: neither within %v ulp of a float32 boundary", i, l.in, em1, eg, l.tol)
		}
	}
}
