//go:build (amd64 || arm64) && !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// The vector pieces of every assembly kernel (AVX-512 and AVX2 on amd64, NEON on arm64), called
// directly (below the gdn API, which hides o and the scratch), against the portable ones, with
// guard bands around every slice, including o (PiecesOf, in kernel_test.go).

// generic is the reference the pieces are compared with.
var generic = pieces("generic")

func pieces(name string) Pieces {
	k, ok := Lookup(name)
	if !ok {
		panic(name + " not available")
	}
	return PiecesOf(k)
}

// forEachAsm runs f for every assembly kernel (kerneltest.ForEach: skipped where unavailable, a
// failure where GDN_REQUIRE_KERNEL names an unavailable one); generic, the reference, is skipped.
func forEachAsm(t *testing.T, f func(t *testing.T, p Pieces)) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		if name == "generic" {
			t.Skip("generic: the reference the pieces are compared with")
		}
		f(t, pieces(name))
	})
}

// guarded is kerneltest.Guarded for float32.
func guarded(t *testing.T, n, off int) ([]float32, func(what string)) {
	return kerneltest.Guarded[float32](t, n, off)
}

// guardedInputs returns k slices of n elements between guard bands (the j-th at offset c + 3j
// mod 16) and their checks.
func guardedInputs(t *testing.T, k, n, c int) ([][]float32, []func(string)) {
	in, checks := make([][]float32, k), make([]func(string), k)
	for j := range in {
		in[j], checks[j] = guarded(t, n, (c+3*j)%16)
	}
	return in, checks
}

func fill(r *rand.Rand, s []float32, sd float64) {
	for i := range s {
		s[i] = float32(sd * r.NormFloat64())
	}
}

// near fails unless got is within tol·scale of want elementwise (NaN only where want is NaN).
func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	scale := 0.0
	for _, w := range want {
		if !math.IsNaN(float64(w)) && !math.IsInf(float64(w), 0) {
			scale = max(scale, math.Abs(float64(w)))
		}
	}
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) != math.IsNaN(g) || (!math.IsNaN(w) && math.Abs(g-w) > tol*scale && g != w) {
			t.Fatalf("%s[%d] = %g, want %g (scale %g)", what, i, g, w, scale)
		}
	}
}

var pieceSizes = []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 127, 128, 129, 143, 200, 255, 256, 257}

// stateCall is a single-token call's slices between guard bands: sIn, sOut, k̂, q̂, v and o at
// offsets off, off + 3, …, off + 11 (mod 16), sIn, k̂, q̂ and v filled from r.
type stateCall struct {
	sIn, sOut, kh, qh, v, o []float32
	checks                  []func(string)
}

func newStateCall(t *testing.T, r *rand.Rand, K, V, off int) stateCall {
	var c stateCall
	for i, x := range []*[]float32{&c.sIn, &c.sOut, &c.kh, &c.qh, &c.v, &c.o} {
		n := []int{K * V, K * V, K, K, V, V}[i]
		s, chk := guarded(t, n, (off+[]int{0, 3, 5, 7, 9, 11}[i])%16)
		*x, c.checks = s, append(c.checks, chk)
	}
	fill(r, c.sIn, 0.3)
	fill(r, c.kh, 1/math.Sqrt(float64(K)))
	fill(r, c.qh, 1/float64(K))
	fill(r, c.v, 1)
	return c
}

// check fails the test if a guard element of any slice changed.
func (c stateCall) check(what string) {
	for _, chk := range c.checks {
		chk(what)
	}
}

func TestStatePiece(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for n, V := range pieceSizes {
			K := pieceSizes[(n*5+3)%len(pieceSizes)]
			off := n % 16
			c := newStateCall(t, r, K, V, off)
			sIn, sOut, kh, qh, v, o := c.sIn, c.sOut, c.kh, c.qh, c.v, c.o
			em1, eg, beta, kq := float32(-0.07), float32(0.93), float32(0.6), float32(0.05)
			orig := append([]float32(nil), sIn...)
			p.State(sIn, sOut, kh, qh, v, o, em1, eg, beta, kq)
			wantS, wantO := make([]float32, K*V), make([]float32, V)
			generic.State(orig, wantS, kh, qh, v, wantO, em1, eg, beta, kq)
			what := fmt.Sprintf("K=%d V=%d", K, V)
			near(t, what+" sOut", sOut, wantS, 1e-5)
			near(t, what+" o", o, wantO, 1e-5)
			for i := range orig {
				if math.Float32bits(orig[i]) != math.Float32bits(sIn[i]) {
					t.Fatalf("%s: sIn modified out of place", what)
				}
			}
			c.check(what)
			// In place: the same result.
			copy(sIn, orig)
			p.State(sIn, sIn, kh, qh, v, o, em1, eg, beta, kq)
			near(t, what+" in place", sIn, wantS, 1e-5)
			c.check(what + " in place")
		}
	})
}

func TestL2Piece(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for n := 0; n <= 70; n++ {
			q, cq := guarded(t, n, n%16)
			k, ck := guarded(t, n, (n*3)%16)
			fill(r, q, 1)
			fill(r, k, 1)
			a, b, c := p.L2(q, k)
			wa, wb, wc := generic.L2(q, k)
			for _, p := range [][2]float64{{a, wa}, {b, wb}, {c, wc}} {
				if math.Abs(p[0]-p[1]) > 1e-12*(1+math.Abs(p[1])) {
					t.Fatalf("n=%d: l2 = %v, want %v", n, [3]float64{a, b, c}, [3]float64{wa, wb, wc})
				}
			}
			cq(fmt.Sprint("q n=", n))
			ck(fmt.Sprint("k n=", n))
		}
		// float64 accumulation: float32 squares of 1e30 would overflow.
		big := []float32{1e30, -1e30, 3e30}
		if a, _, _ := p.L2(big, big); !(math.Abs(a-11e60)/11e60 < 1e-6) {
			t.Fatalf("l2 of huge values = %g, want 1.1e61", a)
		}
	})
}

// TestScalePiece holds scale to the Go loop bit for bit (one multiply per element), out of place
// and in place, over lengths that reach every loop and tail, with guard bands around dst and src:
// nothing past len(src) is read into dst or written.
func TestScalePiece(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for n := 0; n <= 140; n++ {
			f := float32(r.NormFloat64())
			src, cs := guarded(t, n, n%16)
			fill(r, src, 1)
			want := make([]float32, n)
			generic.Scale(want, src, f)
			dst, cd := guarded(t, n, (n*5)%16)
			p.Scale(dst, src, f)
			for i := range want {
				if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d: dst[%d] = %v, want %v", n, i, dst[i], want[i])
				}
			}
			cs(fmt.Sprint("src n=", n))
			cd(fmt.Sprint("dst n=", n))
			p.Scale(src, src, f)
			for i := range want {
				if math.Float32bits(src[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d in place: [%d] = %v, want %v", n, i, src[i], want[i])
				}
			}
			cs(fmt.Sprint("src in place n=", n))
		}
		defer func() {
			if recover() == nil {
				t.Fatal("scale with a short dst did not panic")
			}
		}()
		p.Scale(make([]float32, 3), make([]float32, 4), 1)
	})
}

// gateCheck runs the piece and the generic gate on the same inputs, with both output gates (silu,
// sigmoid), and compares: y within 1 ulp (the operations are the same; only the summation order
// of Σo² may differ; a zero's sign must agree), bf16 out exactly BF16RNE of the piece's own y,
// and the bf16 of the generic within 1 bf16 step.
func gateCheck(t *testing.T, p Pieces, o, z, w []float32, eps float32, what string, wantOut, want32 bool) {
	t.Helper()
	for _, sig := range []bool{false, true} {
		gateCheck1(t, p, o, z, w, eps, fmt.Sprintf("%s sig=%v", what, sig), wantOut, want32, sig)
	}
}

func gateCheck1(t *testing.T, p Pieces, o, z, w []float32, eps float32, what string, wantOut, want32, sig bool) {
	t.Helper()
	V := len(o)
	var out, wantO []uint16
	var outF, wantF []float32
	var chk []func(string)
	if wantOut {
		var c func(string)
		out, c = kerneltest.Guarded[uint16](t, V, V%16)
		chk = append(chk, c)
		wantO = make([]uint16, V)
	}
	if want32 {
		var c func(string)
		outF, c = guarded(t, V, (V+5)%16)
		chk = append(chk, c)
		wantF = make([]float32, V)
	}
	p.Gate(o, z, w, eps, out, outF, sig)
	generic.Gate(o, z, w, eps, wantO, wantF, sig)
	for _, c := range chk {
		c(what)
	}
	for j := 0; j < V; j++ {
		if want32 {
			g, e := outF[j], wantF[j]
			// Bits, not ==: +0 and −0 differ (and ulps between values of opposite sign is huge).
			if math.IsNaN(float64(e)) != math.IsNaN(float64(g)) || (!math.IsNaN(float64(e)) && ulps(g, e) > 1) {
				t.Fatalf("%s: y[%d] = %g (%#x), want %g (%#x)", what, j, g, math.Float32bits(g), e, math.Float32bits(e))
			}
			if wantOut && out[j] != BF16RNE(g) {
				t.Fatalf("%s: out[%d] = %#x, want BF16RNE(%g) = %#x", what, j, out[j], g, BF16RNE(g))
			}
		}
		if wantOut && !(bf16NaN(out[j]) && bf16NaN(wantO[j])) { // which of two NaNs wins may differ
			if d := int(out[j]) - int(wantO[j]); d > 1 || d < -1 {
				t.Fatalf("%s: out[%d] = %#x, generic %#x", what, j, out[j], wantO[j])
			}
		}
	}
}

func bf16NaN(b uint16) bool { return b&0x7fff > 0x7f80 }

func ulps(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	return max(d, -d)
}

func TestGatePiece(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for n, V := range pieceSizes {
			o, co := guarded(t, V, n%16)
			z, cz := guarded(t, V, (n+1)%16)
			w, cw := guarded(t, V, (n+2)%16)
			fill(r, o, 1)
			fill(r, z, 2)
			fill(r, w, 1)
			what := fmt.Sprint("V=", V)
			gateCheck(t, p, o, z, w, 1e-6, what, true, true)
			gateCheck(t, p, o, z, w, 1e-5, what+" out only", true, false)
			gateCheck(t, p, o, z, w, 1e-6, what+" outF only", false, true)
			co(what)
			cz(what)
			cw(what)
		}
	})
}

// TestGateSpecialValues covers exp32's clamps and NaN propagation, infinities, huge o (Σo² in
// float64), bf16 ties, overflow to Inf and NaN payloads, in every lane position.
func TestGateSpecialValues(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1)) // the literal -0.0 is +0 in Go
	zs := []float32{0, negZero, 1, -1, 20, -20, 87, 88, 88.5, 89, 100, -87.3, -87.34, -88, -100, -103, -1e30, 1e30,
		inf, -inf, nan, -nan, 1e-40, -1e-40, 0.5, -0.5, 2.5, 10, -10, 15.9, -15.9, 3}
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for _, V := range []int{len(zs), 17, 5} {
			for shift := 0; shift < len(zs); shift += 7 {
				z := make([]float32, V)
				o := make([]float32, V)
				w := make([]float32, V)
				for j := range z {
					z[j] = zs[(j+shift)%len(zs)]
					o[j] = 1 + float32(j)/8
					w[j] = 1
				}
				what := fmt.Sprintf("V=%d shift=%d", V, shift)
				gateCheck(t, p, o, z, w, 1e-6, what, true, true)
				// Huge o: float32 Σo² would overflow, float64 does not.
				for j := range o {
					o[j] = 1e30 * (1 + float32(j%3))
				}
				gateCheck(t, p, o, z, w, 1e-6, what+" huge o", true, true)
				// A NaN or Inf in o spoils the head (r), like the generic kernel.
				o[V/2] = nan
				gateCheck(t, p, o, z, w, 1e-6, what+" NaN o", true, true)
				o[V/2] = -inf
				gateCheck(t, p, o, z, w, 1e-6, what+" Inf o", true, true)
			}
		}
		// bf16 rounding: y = o·r·w·silu(z) with r = 1 exactly (o = 1s, eps 0) and silu(256) = 256
		// exactly, so y = 256·w exactly: ties to even, carries into the exponent, overflow to Inf,
		// NaN payloads and denormals (TestGateBF16Ties checks the ties against known bits).
		ws := []float32{1, 1.00390625, 1.01171875, 1.0078125, 1.0000001, -1.00390625,
			math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x3f80ffff),
			math.Float32frombits(0x7f7fffff), -math.Float32frombits(0x7f7fffff), math.Float32frombits(0x7f7f8000),
			math.Float32frombits(0x00008000), math.Float32frombits(0x00018000), math.Float32frombits(0x7fc12345),
			math.Float32frombits(0xff812345), math.Float32frombits(0x7f800001), 0, negZero}
		for _, V := range []int{len(ws), 16, 8, 4, 3, 1} {
			o, z, w := make([]float32, V), make([]float32, V), make([]float32, V)
			for j := range o {
				o[j], z[j], w[j] = 1, 256, ws[j%len(ws)]
			}
			gateCheck(t, p, o, z, w, 0, fmt.Sprint("bf16 V=", V), true, true)
		}
	})
}

// bf16Ties are values y whose low 16 bits are exactly 0x8000 (ties) or next to it, with their
// correctly rounded bf16 bits, written out (not computed by BF16RNE).
var bf16Ties = []struct {
	y    uint32
	want uint16
}{
	{0x43808000, 0x4380}, // tie, even upper half: stays
	{0x43818000, 0x4382}, // tie, odd upper half: rounds up
	{0xc3808000, 0xc380}, // negative ties
	{0xc3818000, 0xc382},
	{0x437f8000, 0x4380}, // tie, odd: the carry runs into the exponent
	{0x43807fff, 0x4380}, // just below and just above ties
	{0x43808001, 0x4381},
	{0x43817fff, 0x4381},
	{0x43818001, 0x4382},
	{0x7f7e8000, 0x7f7e}, // even tie at the top of the range
	{0x7f7f8000, 0x7f80}, // odd tie at the top: +Inf
	{0xff7f8000, 0xff80}, // and −Inf
	{0x7f7f7fff, 0x7f7f}, // just below it: the largest finite bf16
	{0x00808000, 0x0080}, // ties at the smallest normal exponent
	{0x00818000, 0x0082},
	{0x00008000, 0x0000}, // denormal ties: even stays (+0), odd rounds up
	{0x00018000, 0x0002},
	{0x80008000, 0x8000}, // −0
	{0x007f8000, 0x0080}, // the largest denormal tie rounds up into the normals
}

// TestGateExact holds every assembly gate to the generic one bit for bit where Σo² is exact in
// float64 whatever the order of its sum (o a multiple of 1/8 below 8 in magnitude), so that r is
// the same: y = o·r·w·silu(z) and its bf16 must then agree exactly in every lane, whichever group
// of interleaved vectors (gateGroups) or tail computes it, with both outputs and with each alone.
// z mixes exp32's clamps, NaN, ±Inf, ±0 and denormals (a random quarter of the lanes) with
// random values of every magnitude; guard bands around every slice.
func TestGateExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	specials := []float32{0, float32(math.Copysign(0, -1)), 88, 88.5, -87.33654, -87.34, -88, -103, 1e30, -1e30,
		inf, -inf, nan, 1e-40, -1e-40, 15.9, -15.9}
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for n, V := range pieceSizes {
			for _, sig := range []bool{false, true} { // the output gate: silu, sigmoid
				o, co := guarded(t, V, n%16)
				z, cz := guarded(t, V, (n+3)%16)
				w, cw := guarded(t, V, (n+5)%16)
				for j := range V {
					o[j] = float32(r.IntN(127)-63) / 8
					w[j] = float32(r.NormFloat64())
					switch r.IntN(4) {
					case 0:
						z[j] = specials[r.IntN(len(specials))]
					case 1:
						z[j] = float32(r.NormFloat64() * 30)
					default:
						z[j] = float32(r.NormFloat64() * 3)
					}
				}
				o[r.IntN(V)] = 1 // not all zero
				out, cOut := kerneltest.Guarded[uint16](t, V, (n+7)%16)
				outF, cF := guarded(t, V, (n+9)%16)
				wantO, wantF := make([]uint16, V), make([]float32, V)
				generic.Gate(o, z, w, 1e-6, wantO, wantF, sig)
				what := fmt.Sprint("V=", V, " sig=", sig)
				// Each output alone first (the other nil), then both.
				p.Gate(o, z, w, 1e-6, out, nil, sig)
				aloneO := append([]uint16(nil), out...)
				p.Gate(o, z, w, 1e-6, nil, outF, sig)
				aloneF := append([]float32(nil), outF...)
				clear(out)
				clear(outF)
				p.Gate(o, z, w, 1e-6, out, outF, sig)
				for _, c := range []func(string){co, cz, cw, cOut, cF} {
					c(what)
				}
				for j := range V {
					if aloneO[j] != out[j] || math.Float32bits(aloneF[j]) != math.Float32bits(outF[j]) {
						t.Fatalf("%s: lane %d: out alone %#x, y alone %#x; both %#x, %#x", what, j, aloneO[j],
							math.Float32bits(aloneF[j]), out[j], math.Float32bits(outF[j]))
					}
				}
				for j := range V {
					g, e := outF[j], wantF[j]
					if math.IsNaN(float64(g)) && math.IsNaN(float64(e)) {
						if !bf16NaN(out[j]) || !bf16NaN(wantO[j]) {
							t.Fatalf("%s: out[%d] = %#x, generic %#x (y NaN)", what, j, out[j], wantO[j])
						}
						continue
					}
					if math.Float32bits(g) != math.Float32bits(e) || out[j] != wantO[j] {
						t.Fatalf("%s: lane %d (z = %g, o = %g): y = %#x, out = %#x; generic %#x, %#x", what, j, z[j], o[j],
							math.Float32bits(g), out[j], math.Float32bits(e), wantO[j])
					}
				}
			}
		}
	})
}

// TestGateBF16Ties makes real rounding ties reach the gate's bf16 rounding of every kernel
// (generic included) in every lane position, and compares with the known bits: y = o·r·w·silu(z)
// with o = 1s and eps = 0 (r = 1 exactly), z = 256 (silu(256) = 256 exactly: exp32(−256) is
// clamped to 2^−126·…, and 1 + that is 1) and w = y/256 (exact), so y has the table's bits.
func TestGateBF16Ties(t *testing.T) {
	for _, c := range bf16Ties {
		y := math.Float32frombits(c.y)
		if w := y / 256; w*256 != y {
			t.Fatalf("%#x/256 is not exact", c.y)
		}
		if got := BF16RNE(y); got != c.want {
			t.Errorf("BF16RNE(%#x) = %#x, want %#x", c.y, got, c.want)
		}
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		p := pieces(name)
		n := len(bf16Ties)
		for _, V := range []int{n, 16, 17, 8, 5, 3, 1} {
			for shift := 0; shift < n; shift += 3 {
				o, z, w := make([]float32, V), make([]float32, V), make([]float32, V)
				for _, withF := range []bool{true, false} {
					// silu(256) = 256 exactly; with the sigmoid output gate (withF false)
					// sigmoid(256) = 1 exactly, so w = y.
					sig := !withF
					for j := range o {
						o[j], z[j] = 1, 256
						w[j] = math.Float32frombits(bf16Ties[(j+shift)%n].y) / 256
						if sig {
							w[j] *= 256
						}
					}
					what := fmt.Sprintf("V=%d shift=%d outF=%v sig=%v", V, shift, withF, sig)
					out, cOut := kerneltest.Guarded[uint16](t, V, V%16)
					var outF []float32
					cF := func(string) {}
					if withF {
						outF, cF = guarded(t, V, (V+5)%16)
					}
					p.Gate(o, z, w, 0, out, outF, sig)
					cOut(what + " out")
					cF(what + " outF")
					for j := range V {
						c := bf16Ties[(j+shift)%n]
						if withF && math.Float32bits(outF[j]) != c.y {
							t.Fatalf("%s: y[%d] = %#x, want %#x", what, j, math.Float32bits(outF[j]), c.y)
						}
						if out[j] != c.want {
							t.Fatalf("%s: out[%d] = %#x, want %#x (bf16 of y = %#x)", what, j, out[j], c.want, c.y)
						}
					}
				}
			}
		}
	})
}

// TestGatesExact holds every assembly kernel's gates piece to the generic one (gatesGeneric) bit
// for bit (NaN: any NaN) over every piece size, with guard bands around all seven slices: lanes of
// the models' range, wide random ones and special values (±0, ±Inf, NaN, denormals, the clamps
// and thresholds of exp64 and softplus) in a random quarter of the inputs. It checks that every
// select of gate1 was taken both ways: x = a + dt_bias above 20, in (0, 20] and ≤ 0; g on either
// side of ln 0.5 (eg ≥ 0.5 or not).
func TestGatesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, inf, -inf, nan, 20, 19.999998, 20.000002,
		709, 710, -745, -746, 746, 88.7, -88.7, 1e30, -1e30, math.MaxFloat32, -math.MaxFloat32}
	pick := func(sd float64) float32 {
		if r.IntN(4) == 0 {
			return specials[r.IntN(len(specials))]
		}
		return float32(sd * r.NormFloat64())
	}
	var sides [5]int // x > 20, 0 < x ≤ 20, x ≤ 0, eg ≥ 0.5, eg < 0.5
	ran := false
	forEachAsm(t, func(t *testing.T, p Pieces) {
		ran = true
		for c, n := range pieceSizes {
			in, checks := guardedInputs(t, 4, n, c)
			for i := range n {
				switch r.IntN(4) {
				case 3: // exp(−|x|) denormal (log1p01 takes y itself), g still a normal float32
					in[0][i], in[1][i] = pick(3), float32(-708-37*r.Float64())
					in[2][i], in[3][i] = float32(-float64(in[1][i])-40-20*r.Float64()), 0
				case 0: // the models' range
					in[0][i], in[1][i] = float32(2*r.NormFloat64()), float32(3*r.NormFloat64())
					in[2][i], in[3][i] = float32(4*r.Float64()-1), float32(2*r.NormFloat64())
				case 1: // around softplus's threshold and g's split
					in[0][i], in[1][i] = pick(30), float32(20+4*r.NormFloat64())
					in[2][i], in[3][i] = float32(r.NormFloat64()), float32(r.NormFloat64())
				default:
					in[0][i], in[1][i], in[2][i], in[3][i] = pick(100), pick(30), pick(5), pick(10)
				}
			}
			rate := Rates64(in[2])
			// The scalar gate's lanes (lb = 0, beta), the bounded form's with beta, and per-channel
			// lanes (no beta) of a bound from the models' −5 to extremes.
			lb := []float64{-5, -1e-3, -60, -math.SmallestNonzeroFloat64, -math.MaxFloat64}[c%5]
			for mode, m := range []struct {
				lb   float64
				beta bool
			}{{0, true}, {lb, true}, {lb, false}} {
				var out, want [3][]float32
				for j := range out {
					var ck func(string)
					out[j], ck = guarded(t, n, (c+5*j+1)%16)
					checks = append(checks, ck)
					want[j] = make([]float32, n)
				}
				b := in[0]
				if !m.beta {
					b = nil
				}
				before := slices.Clone(out[0])
				generic.Gates(want[0], want[1], want[2], b, in[1], in[3], rate, formOf(m.lb), m.lb)
				p.Gates(out[0], out[1], out[2], b, in[1], in[3], rate, formOf(m.lb), m.lb)
				what := fmt.Sprintf("n=%d lb=%g beta=%v", n, m.lb, m.beta)
				for _, ck := range checks {
					ck(what)
				}
				for j := range out {
					if j == 0 && !m.beta {
						for i := range n {
							if math.Float32bits(out[0][i]) != math.Float32bits(before[i]) {
								t.Fatalf("%s: beta[%d] written without b", what, i)
							}
						}
						continue
					}
					for i := range n {
						g, w := out[j][i], want[j][i]
						if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
							t.Fatalf("%s lane %d (b=%v a=%v A_log=%v dt_bias=%v): output %d = %v (%#x), generic %v (%#x)",
								what, i, in[0][i], in[1][i], in[2][i], in[3][i], j, g, math.Float32bits(g), w, math.Float32bits(w))
						}
					}
				}
				if mode > 0 {
					continue
				}
				for i := range n {
					x := float64(in[1][i]) + float64(in[3][i])
					switch {
					case x > 20:
						sides[0]++
					case x > 0:
						sides[1]++
					case x <= 0:
						sides[2]++
					}
					switch {
					case want[2][i] >= 0.5:
						sides[3]++
					case want[2][i] < 0.5:
						sides[4]++
					}
				}
			}
		}
	})
	// Lanes at float32 rounding boundaries (each has em1 or eg within a float64 ulp of one, but the
	// x = 20 ones: see boundaryLanes): a lane that computes a float64 ulp or more off generic, in
	// either direction, changes its float32 result about half the time.
	bb, ba, bal, bdt := GatesBoundaryLanes(13, 1000)
	forEachAsm(t, func(t *testing.T, p Pieces) {
		n := len(bb)
		var out, want [3][]float32
		for j := range out {
			out[j], want[j] = make([]float32, n), make([]float32, n)
		}
		generic.Gates(want[0], want[1], want[2], bb, ba, bdt, Rates64(bal), GateSoftplus, 0)
		p.Gates(out[0], out[1], out[2], bb, ba, bdt, Rates64(bal), GateSoftplus, 0)
		for j := range out {
			for i := range n {
				if g, w := out[j][i], want[j][i]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("boundary lane %d (b=%v a=%v A_log=%v dt_bias=%v): output %d = %v (%#x), generic %v (%#x)",
						i, bb[i], ba[i], bal[i], bdt[i], j, g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
		}
	})
	for i, c := range sides {
		if c == 0 && ran {
			t.Errorf("select side %d never taken: %v", i, sides)
		}
	}
}

// TestTokensBF16NonFinite: every kernel's bf16 routines over T tokens against its own f32 routines
// (SPEC: a bf16 pool stores bf16 of the state an f32 pool would store) bit for bit, NaN payloads
// included, on heads where some rows or columns go non-finite: a v of the token NaN, ±Inf, a
// state element ±Inf or NaN, values that overflow to Inf in the update or round past the largest
// bf16. The amd64 routines round without the NaN select where the token's δ are finite
// (finiteDelta in asm/): a row or column whose NaN that test missed stores the wrong bits here,
// but only if the NaN has low payload bits (0x7fc0ffff rounds to 0x7fc1 without the select,
// BF16RNE gives 0x7fc0). A NaN from a widened bf16 state, or made by arithmetic on ±Inf (the
// default NaN), has a zero low half, which both roundings give alike; so the payloads come from v
// (and, carried in the f32 state, reach later tokens) and from an f32 src32 (rawSrc32). The ±Inf
// and overflow cases hold the rounding without the select to BF16RNE on its other inputs.
func TestTokensBF16NonFinite(t *testing.T) {
	shapes := [][2]int{{128, 128}, {96, 80}, {64, 64}, {17, 33}, {8, 16}, {5, 129}, {200, 48}, {16, 7}}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		tk := TokensOf(k)
		for _, f := range Formats() {
			l := int(f.layout())
			if f.Storage == StorageF32 {
				continue
			}
			t.Run("format="+f.String(), func(t *testing.T) {
				if tk.F32[l] == nil || tk.BF16[l] == nil {
					t.Skipf("%s has no %v routines over T tokens", name, f)
				}
				r := rand.New(rand.NewPCG(23, uint64(l)))
				for _, T := range []int{1, 2, 4} {
					for _, sh := range shapes {
						for poison := range nonFiniteCases {
							for _, src32 := range []bool{false, true} {
								c := nonFiniteCase(r, f.layout(), sh[0], sh[1], T, poison, src32)
								c.noCarry = !src32 // a decode's call (the AVX2 [V][K] bf16 once), and a chunk's
								what := fmt.Sprintf("%s/%v/T=%d/K=%d,V=%d/%s/src32=%v", name, f, T, sh[0], sh[1], nonFiniteCases[poison], src32)
								bf16AsF32(t, tk, l, src32, c, what)
							}
						}
					}
				}
			})
		}
	})
}

// nonFiniteCases name the poisons of nonFiniteCase.
var nonFiniteCases = []string{"v NaN payloads", "v ±Inf", "state ±Inf and NaN", "overflow", "finite", "v NaN payloads, ±0 words"}

// nonFiniteCase is newTokCase with its state exact in bf16 (so that the f32 routine starts from
// the bf16 routine's widened state), poisoned as nonFiniteCases[poison] says in a few rows and
// columns (the first, the last, odd and even ones, so that every position of a group, pair or
// block piece is hit somewhere) at some tokens.
func nonFiniteCase(r *rand.Rand, layout stateLayout, K, V, T, poison int, src32 bool) tokCase {
	c := newTokCase(r, K, V, T, false)
	c.srcF = widenAll(roundAll(c.srcF))
	cols := []int{0, V - 1, V / 2, r.IntN(V)}
	nan := func(bits uint32) float32 { return math.Float32frombits(bits) }
	payloads := []float32{nan(0x7fc0ffff), nan(0xffc08001), nan(0x7f80ffff), nan(0x7fc08000)}
	switch poison {
	case 5: // as 0, with element i0 of every row (column) 0 in the state and in k̂ at every token,
		// so that every stored row holds a ±0 word: the AVX-512 [V][K] VCVTNE2PS2BF16 rounding then
		// stores every group again with the integer one, NaN rows included
		i0 := r.IntN(K)
		for j := range V {
			c.srcF[stateIndex(layout, K, V, i0, j)] = 0
		}
		for τ := range T {
			c.kh[τ*K+i0] = 0
		}
		fallthrough
	case 0, 1: // v of token τ at column (row) j: δ_j non-finite from that token on
		for n, j := range cols {
			τ := (n + r.IntN(2)) % T
			x := payloads[n]
			if poison == 1 {
				x = float32(math.Inf(1 - 2*(n%2)))
			}
			c.v[τ*c.vs+j] = x
		}
	case 2: // state element (i, j) ±Inf or NaN: from src32 with low payload bits, else widened (low half 0)
		for n, j := range cols {
			x := float32(math.Inf(1 - 2*(n%2)))
			if n == 2 {
				x = nan(0x7fc10000)
				if src32 {
					x, c.rawSrc32 = nan(0x7fc0ffff), true
				}
			}
			c.srcF[stateIndex(layout, K, V, r.IntN(K), j)] = x
		}
	case 3: // elements near the largest float32: the update overflows to ±Inf, or rounds past the largest bf16
		for n, j := range cols {
			x := math.Float32frombits(0x7f7f0000 | uint32(n%2)<<31) // the largest bf16, 3.39e38
			c.srcF[stateIndex(layout, K, V, r.IntN(K), j)] = x
		}
	}
	return c
}

// stateIndex is the index of element (i, j) of a K×V state in the layout (i < K, j < V).
func stateIndex(layout stateLayout, K, V, i, j int) int {
	if layout == layoutKV {
		return i*V + j
	}
	return j*K + i
}

// bf16AsF32 runs c through the bf16 routine of layout l (from src32 if asked) and the f32 one
// from the same state, and fails unless o, every store (rounded: BF16RNE) and the carry agree bit
// for bit.
func bf16AsF32(t *testing.T, tk Tokens, l int, src32 bool, c tokCase, what string) {
	t.Helper()
	got := runTokens(t, tk, l, true, src32, c, what)
	want := runTokens(t, tk, l, false, false, c, what+" (f32)")
	kerneltest.EqualBits(t, what+" o", got.o, want.o)
	for τ := range c.T {
		if c.storeAt[τ] {
			kerneltest.EqualBits(t, fmt.Sprintf("%s bf16 state after token %d", what, τ), got.bf16[τ], roundAll(want.stores[τ]))
		}
	}
	if !c.noCarry {
		kerneltest.EqualBits(t, what+" carry", got.carry, want.stores[c.T-1])
	}
}

// The state routines over T tokens of every assembly kernel, in their flat signature (see
// gdn_generic.go), against the generic routine of the same format: T ∈ {1, 2, 5}, tails, the
// zero state, stores at some tokens only, bf16 stores and the f32 carry, v rows with a stride whose
// gap is poisoned, guard bands around every slice. A kernel's missing routine is a visible skip.

var tokenShapes = [][2]int{{1, 1}, {3, 5}, {16, 16}, {17, 33}, {31, 8}, {64, 64}, {96, 80}, {128, 128}, {5, 129}, {129, 7}, {200, 48}}

// tokCase is one call's inputs.
type tokCase struct {
	K, V, T, vs int
	kh, qh, v   []float32
	tok         []float32
	srcF        []float32 // the f32 state before the first token (or zeros)
	storeAt     []bool    // which tokens store
	noCarry     bool      // bf16: no f32 carry asked for (a decode's call)
	rawSrc32    bool      // bf16 from src32: srcF itself, not widened from its bf16 rounding (a NaN payload's low bits reach the routine)
	inPlace     bool      // the last token's store is src itself (f32 src, bf16 src16)
}

func newTokCase(r *rand.Rand, K, V, T int, zero bool) tokCase {
	c := tokCase{K: K, V: V, T: T, vs: V + 3}
	c.kh, c.qh = make([]float32, T*K), make([]float32, T*K)
	fill(r, c.kh, 1/math.Sqrt(float64(K)))
	fill(r, c.qh, 1/float64(K))
	c.v = make([]float32, (T-1)*c.vs+V)
	for i := range c.v {
		if i%c.vs >= V {
			c.v[i] = float32(math.NaN()) // the gap between rows is never read
		} else {
			c.v[i] = float32(r.NormFloat64())
		}
	}
	c.tok = make([]float32, 4*T)
	for τ := range T {
		em1 := -0.02 * float32(τ+1)
		switch {
		case τ%3 == 2:
			em1 = -0.9 // a strong decay: the eg·S form
		case τ%7 == 5:
			em1 = -0.5 // the threshold itself: x + em1·x
		case τ%7 == 6:
			em1 = math.Nextafter32(-0.5, -1) // just beyond: eg·x
		case τ%11 == 10:
			em1 = 0 // no decay
		}
		// eg is deliberately not 1 + em1 (by 2%): a routine taking the wrong form's parameter
		// differs visibly from the generic one.
		c.tok[4*τ], c.tok[4*τ+1] = em1, (1+em1)*1.02
		c.tok[4*τ+2], c.tok[4*τ+3] = float32(0.3+0.1*float64(τ)), float32(0.05*r.NormFloat64())
	}
	c.srcF = make([]float32, K*V)
	if !zero {
		fill(r, c.srcF, 0.3)
	}
	c.storeAt = make([]bool, T)
	for τ := range T {
		c.storeAt[τ] = τ == T-1 || τ%2 == 1
	}
	return c
}

func widenAll(b []uint16) []float32 {
	f := make([]float32, len(b))
	for i, x := range b {
		f[i] = math.Float32frombits(uint32(x) << 16)
	}
	return f
}

// tokResult is a call's outputs.
type tokResult struct {
	o      []float32
	stores [][]float32 // widened for bf16
	bf16   [][]uint16
	carry  []float32
}

// placeStores sets stores[τ] for the tokens of c that store: the state src itself for the last
// one in place, else a slice between guard bands (its check appended to checks); it returns the
// stores as slices (nil where a token does not store).
func placeStores[E kerneltest.Elem](t *testing.T, c tokCase, src []E, stores []unsafe.Pointer, checks *[]func(string)) [][]E {
	res := make([][]E, c.T)
	for τ := range c.T {
		switch {
		case c.inPlace && τ == c.T-1:
			res[τ] = src
		case c.storeAt[τ]:
			s, chk := kerneltest.Guarded[E](t, len(src), 7+τ)
			*checks = append(*checks, chk)
			res[τ] = s
		default:
			continue
		}
		stores[τ] = unsafe.Pointer(&res[τ][0])
	}
	return res
}

// runTokens runs one routine (f32 if bf16 is false) of the layout on c, every slice between guard
// bands; src32 runs a bf16 routine from the f32 state.
// nearTokens holds the call got to the generic one want: o, the f32 states after the tokens in
// stored (nil: every token) within 1e-5, bf16 states within one bf16 step of the generic rounding
// of (almost) the same f32 or (SPEC) within 1e-5 of the head max: an element that cancels to near 0
// carries the f32 rounding of the head's magnitudes, many of its own bf16 steps (with zeroOK a ±0
// word may differ more); with carry, the f32 carry within 1e-5.
func nearTokens(t *testing.T, what string, got, want tokResult, bf16, carry bool, stored []bool, zeroOK bool) {
	t.Helper()
	near(t, what+" o", got.o, want.o, 1e-5)
	for τ := range got.stores {
		if stored != nil && !stored[τ] {
			continue
		}
		if !bf16 {
			near(t, fmt.Sprintf("%s state after token %d", what, τ), got.stores[τ], want.stores[τ], 1e-5)
			continue
		}
		scale := 0.0
		for _, x := range want.stores[τ] {
			scale = max(scale, math.Abs(float64(x)))
		}
		for i, b := range got.bf16[τ] {
			diff := math.Abs(float64(got.stores[τ][i]) - float64(want.stores[τ][i]))
			if d := int(b) - int(want.bf16[τ][i]); (d > 1 || d < -1) && (!zeroOK || b&0x7fff != 0) && diff > 1e-5*scale {
				t.Fatalf("%s: bf16 state after token %d [%d] = %#x, generic %#x", what, τ, i, b, want.bf16[τ][i])
			}
		}
	}
	if bf16 && carry {
		near(t, what+" carry", got.carry, want.carry, 1e-5)
	}
}

func runTokens(t *testing.T, tk Tokens, layout int, bf16, src32 bool, c tokCase, what string) tokResult {
	t.Helper()
	K, V, T := c.K, c.V, c.T
	hs := K * V
	var checks []func(string)
	g32 := func(src []float32, off int) []float32 {
		s, chk := kerneltest.Guarded[float32](t, len(src), off)
		copy(s, src)
		checks = append(checks, chk)
		return s
	}
	kh, qh, v, tok := g32(c.kh, 1), g32(c.qh, 2), g32(c.v, 3), g32(c.tok, 4)
	o, chk := kerneltest.Guarded[float32](t, T*V, 5)
	checks = append(checks, chk)
	res := tokResult{o: o, stores: make([][]float32, T), bf16: make([][]uint16, T)}
	stores := make([]unsafe.Pointer, T)
	if !bf16 {
		src := g32(c.srcF, 6)
		res.stores = placeStores(t, c, src, stores, &checks)
		tk.F32[layout](K, V, src, stores, kh, qh, v, c.vs, o, tok, nil)
	} else {
		src16, chk := kerneltest.Guarded[uint16](t, hs, 6)
		checks = append(checks, chk)
		copy(src16, roundAll(c.srcF))
		var s32 []float32
		if src32 {
			if c.rawSrc32 {
				s32 = g32(c.srcF, 9)
			} else {
				s32 = g32(widenAll(roundAll(c.srcF)), 9)
			}
			for i := range src16 {
				src16[i] = 0x7fc1 // must not be read
			}
		}
		res.bf16 = placeStores(t, c, src16, stores, &checks)
		var carry []float32
		if !c.noCarry {
			var chk func(string)
			carry, chk = kerneltest.Guarded[float32](t, hs, 10)
			checks = append(checks, chk)
			res.carry = carry
		}
		tk.BF16[layout](K, V, src16, s32, stores, carry, kh, qh, v, c.vs, o, tok, nil)
		for τ := range T {
			if res.bf16[τ] != nil {
				res.stores[τ] = widenAll(res.bf16[τ])
			}
		}
	}
	for _, chk := range checks {
		chk(what)
	}
	kerneltest.EqualBits(t, what+" kh", kh, c.kh)
	kerneltest.EqualBits(t, what+" v", v, c.v)
	return res
}

// TestTokensPiece: every assembly kernel's routines over T tokens against the generic ones, the
// matrix kernel × format × T (T = 1, 2, 5, 64; subtests kernel=…/format=…/T=…), each over shapes
// around the vector and block sizes: slices between guard bands, v's rows with NaN between them,
// stores at some tokens or at every one, in place or not (the last store over src), from a zero
// state or not, bf16 from src or src32 and with or without the f32 carry, tokens in both decay
// forms, at em1 = −0.5 and just below it, and without decay (T = 64).
func TestTokensPiece(t *testing.T) {
	ref := TokensOf(Kernels()[0]) // replaced below: generic
	if k, ok := Lookup("generic"); ok {
		ref = TokensOf(k)
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		if name == "generic" {
			t.Skip("generic: the reference")
		}
		k, _ := Lookup(name)
		tk := TokensOf(k)
		for _, f := range Formats() {
			l := int(f.layout())
			t.Run("format="+f.String(), func(t *testing.T) {
				if f.Storage == StorageF32 && tk.F32[l] == nil || f.Storage != StorageF32 && tk.BF16[l] == nil {
					t.Skipf("%s has no %v routine over T tokens", name, f)
				}
				r := rand.New(rand.NewPCG(11, uint64(l)))
				for _, T := range []int{1, 2, 5, 64} {
					t.Run(fmt.Sprintf("T=%d", T), func(t *testing.T) {
						for si, sh := range tokenShapes {
							for _, src32 := range []bool{false, true} {
								if src32 && f.Storage == StorageF32 {
									continue
								}
								c := newTokCase(r, sh[0], sh[1], T, si%4 == 0)
								c.noCarry = si%2 == 1
								c.inPlace = si%3 == 1
								if si%5 == 2 {
									for τ := range c.storeAt {
										c.storeAt[τ] = true
									}
								}
								what := fmt.Sprintf("%s/%v/T=%d/K=%d,V=%d/src32=%v/carry=%v", name, f, T, sh[0], sh[1], src32, !c.noCarry)
								got := runTokens(t, tk, l, f.Storage != StorageF32, src32, c, what)
								want := runTokens(t, ref, l, f.Storage != StorageF32, src32, c, what+" (generic)")
								nearTokens(t, what, got, want, f.Storage != StorageF32, !c.noCarry, c.storeAt, true)
								if f.Storage != StorageF32 && !c.noCarry {
									// The last store is the carry rounded: the same bits, not just close.
									kerneltest.EqualBits(t, what+" last store = BF16RNE(carry)", got.bf16[T-1], roundAll(got.carry))
								}
							}
						}
					})
				}
			})
		}
	})
}

// TestChansExact holds every assembly kernel's chans piece to chansGeneric bit for bit, and both
// to the forms written out: em1 at and around −0.5 (the split), NaN (far), ±0, ±Inf and denormal
// k̂, q̂ (x & m keeps a far zero's sign), in every lane position and tail, with guard bands.
func TestChansExact(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	nan := float32(math.NaN())
	half := float32(-0.5)
	below, above := math.Nextafter32(half, -1), math.Nextafter32(half, 0)
	em1s := []float32{half, below, above, nan, -1, 0, -0.9, -0.01, float32(math.Copysign(0, -1))}
	xs := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)), nan, 1e30, -3}
	// The forms written out: near (em1 ≥ −0.5) c = em1, m all ones; far (below, NaN) c = eg, m
	// the sign bit.
	for _, e := range em1s {
		c, m := chanForm(e, 0.25)
		near := e >= -0.5
		if near && (c != e || m != 0xffffffff) || !near && (c != 0.25 || m != 0x80000000) {
			t.Fatalf("chanForm(%v, 0.25) = %v, %#x", e, c, m)
		}
	}
	forEachAsm(t, func(t *testing.T, p Pieces) {
		for c, n := range pieceSizes {
			in, checks := guardedInputs(t, 4, n, c) // em1, eg, kh, qh
			for i := range n {
				e := float32(-r.Float64())
				if r.IntN(3) == 0 {
					e = em1s[r.IntN(len(em1s))]
				}
				in[0][i], in[1][i] = e, float32(1+float64(e))
				for j := 2; j < 4; j++ {
					in[j][i] = float32(r.NormFloat64())
					if r.IntN(4) == 0 {
						in[j][i] = xs[r.IntN(len(xs))]
					}
				}
			}
			var out, want [3][]float32 // kx, qx, pairs
			for j := range out {
				w := n
				if j == 2 {
					w = 2 * n
				}
				var ck func(string)
				out[j], ck = guarded(t, w, (c+5*j+1)%16)
				checks = append(checks, ck)
				want[j] = make([]float32, w)
			}
			generic.Chans(want[0], want[1], want[2], in[0], in[1], in[2], in[3])
			p.Chans(out[0], out[1], out[2], in[0], in[1], in[2], in[3])
			what := fmt.Sprint("n=", n)
			for _, ck := range checks {
				ck(what)
			}
			for j := range out {
				for i := range out[j] {
					g, w := out[j][i], want[j][i]
					if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
						ch := i
						if j == 2 {
							ch = i / 2
						}
						t.Fatalf("%s: output %d[%d] (em1 %v, eg %v, kh %v, qh %v) = %v (%#x), generic %v (%#x)", what, j, i,
							in[0][ch], in[1][ch], in[2][ch], in[3][ch], g, math.Float32bits(g), w, math.Float32bits(w))
					}
				}
			}
			// chansGeneric against the forms: kx = c·kh rounded + (kh & m).
			for i := range n {
				cc, m := chanForm(in[0][i], in[1][i])
				if math.Float32bits(want[2][2*i]) != math.Float32bits(cc) || math.Float32bits(want[2][2*i+1]) != m {
					t.Fatalf("%s: pair %d = %v, %#x, want %v, %#x", what, i, want[2][2*i], math.Float32bits(want[2][2*i+1]), cc, m)
				}
				x := in[2][i]
				k := float32(float64(cc)*float64(x)) + math.Float32frombits(math.Float32bits(x)&m)
				if g := want[0][i]; math.Float32bits(g) != math.Float32bits(k) && !(g != g && k != k) {
					t.Fatalf("%s: kx[%d] = %v, want %v", what, i, g, k)
				}
			}
		}
	})
}

// convOf is the kernel name's impl.conv.
func convOf(name string) func(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int) {
	k, ok := Lookup(name)
	if !ok {
		panic(name + " not available")
	}
	return k.im.conv
}

// convInputs fills x, w and bias for a conv case: mode 0 random; mode 1 random with special
// values sprinkled (zeros of both signs, NaN, products and biases past Exp32's clamps, sums near
// ±1e-30); mode 2 exact ties (products of half an ulp, sums whose order decides the rounding);
// mode 3 every sum a signed zero (bias ±0, products ±0).
func convInputs(r *rand.Rand, mode int, x, w, bias []float32) {
	nan, negz := float32(math.NaN()), float32(math.Copysign(0, -1))
	xsp := []float32{0, negz, nan, 1e30, -1e30, 100, -100, 1e-30, -1e-30, 1e-40, float32(math.Inf(1))}
	wsp := []float32{0, negz, 1, -1, 2}
	bsp := []float32{0, negz, 90, -90, 88.5, -88.5, 1e-30, -1e-30, 3e38}
	pick := func(s []float32) float32 { return s[r.IntN(len(s))] }
	const tie = 1 + 1.0/4096 // tie·tie = 1 + 2^-11 + 2^-24: half an ulp past a float32
	for i := range x {
		switch mode {
		case 0:
			x[i] = float32(2 * r.NormFloat64())
		case 1:
			x[i] = float32(2 * r.NormFloat64())
			if r.IntN(5) == 0 {
				x[i] = pick(xsp)
			}
		case 2:
			x[i] = []float32{tie, 1.0 / 4096, -tie, 1}[r.IntN(4)]
		case 3:
			x[i] = pick([]float32{0, negz})
		}
	}
	for i := range w {
		switch mode {
		case 0:
			w[i] = float32(0.7 * r.NormFloat64())
		case 1:
			w[i] = float32(0.7 * r.NormFloat64())
			if r.IntN(5) == 0 {
				w[i] = pick(wsp)
			}
		case 2:
			w[i] = []float32{tie, 1.0 / 4096, -1.0 / 4096, 1}[r.IntN(4)]
		case 3:
			w[i] = pick([]float32{1, -1, 0, negz})
		}
	}
	for i := range bias {
		switch mode {
		case 0:
			bias[i] = float32(0.5 * r.NormFloat64())
		case 1:
			bias[i] = float32(0.5 * r.NormFloat64())
			if r.IntN(4) == 0 {
				bias[i] = pick(bsp)
			}
		case 2:
			bias[i] = []float32{1, -1, 2, 0.5}[r.IntN(4)]
		case 3:
			bias[i] = pick([]float32{0, negz})
		}
	}
}

// TestConvExact runs every kernel's impl.conv against convGeneric, bit for bit (a NaN must be
// the same NaN), with guard bands around every slice and the elements of u between its rows (us
// > n) left alone, over widths, tap counts, token counts, dense or padded strides and tables of
// rows in a shuffled memory order; and checks
// convGeneric itself, in float64, where the sum is moderate: silu of bias plus the taps, tap j on
// row τ + j (tap W−1 on the current row), within 2 ulp.
func TestConvExact(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		conv := convOf(name)
		r := rand.New(rand.NewPCG(15, 16))
		checked, cases := 0, 0
		for _, n := range []int{1, 3, 8, 15, 16, 17, 33, 64, 128} {
			for _, W := range []int{2, 3, 4, 8} {
				for _, T := range []int{1, 2, 5, 64} {
					for pad := range 2 {
						us, xs, ws := n, n, n
						if pad == 1 {
							us, xs, ws = n+3, n+5, n+7
						}
						mode := cases % 4
						cases++
						off := cases % 16
						x, cx := guarded(t, (T+W-2)*xs+n, off)
						w, cw := guarded(t, (W-1)*ws+n, (off+3)%16)
						bias, cb := guarded(t, n, (off+6)%16)
						u, cu := guarded(t, (T-1)*us+n, (off+9)%16)
						convInputs(r, mode, x, w, bias)
						in := [][]float32{slices.Clone(x), slices.Clone(w), slices.Clone(bias)}
						// The table's rows are x's, in a shuffled order (the routines must read
						// each row where the table says).
						rows := make([][]float32, T+W-1)
						for i, p := range r.Perm(len(rows)) {
							rows[i] = x[p*xs : p*xs+n]
						}
						want := slices.Clone(u) // the guard value between the rows too
						convGeneric(want, us, rows, w, ws, bias, W, T)
						conv(u, us, rows, w, ws, bias, W, T)
						what := fmt.Sprintf("n=%d W=%d T=%d us=%d xs=%d ws=%d mode=%d", n, W, T, us, xs, ws, mode)
						for _, ck := range []func(string){cx, cw, cb, cu} {
							ck(what)
						}
						kerneltest.EqualBits(t, what+" x", x, in[0])
						kerneltest.EqualBits(t, what+" w", w, in[1])
						kerneltest.EqualBits(t, what+" bias", bias, in[2])
						for i := range u {
							if math.Float32bits(u[i]) != math.Float32bits(want[i]) {
								τ, c := i/us, i%us
								t.Fatalf("%s: u[%d] (token %d, channel %d) = %v (%#x), generic %v (%#x)", what, i, τ, c,
									u[i], math.Float32bits(u[i]), want[i], math.Float32bits(want[i]))
							}
						}
						if mode != 0 {
							continue
						}
						for range 3 {
							τ, c := r.IntN(T), r.IntN(n)
							a := bias[c]
							for j := range W {
								a += float32(float64(w[j*ws+c]) * float64(rows[τ+j][c]))
							}
							s := float32(float64(a) / (1 + math.Exp(-float64(a))))
							if d := ulps(want[τ*us+c], s); d > 2 {
								t.Fatalf("%s: convGeneric u[%d][%d] = %v, float64 silu of the taps' sum %v: %d ulp", what, τ, c, want[τ*us+c], s, d)
							}
							checked++
						}
					}
				}
			}
		}
		if checked == 0 {
			t.Fatal("no float64 check ran")
		}
	})
}

// TestConvChecked: an assembly kernel's conv (convChecked) panics, before writing anything, for
// every short slice (u, w, the row table, any one of its rows), negative stride or W < 1, and does
// nothing for T = 0; convGeneric likewise for the short slices and W < 1.
func TestConvChecked(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		conv := convOf(name)
		const n, W, T, us, ws = 19, 4, 3, 21, 23
		for _, c := range []struct {
			what             string
			du, dx, dw, drow int
			us, ws, w, tok   int
			panics           bool
		}{
			{"exact", 0, 0, 0, 0, us, ws, W, T, false},
			{"short u", -1, 0, 0, 0, us, ws, W, T, true},
			{"short table", 0, -1, 0, 0, us, ws, W, T, true},
			{"a short row", 0, 0, 0, -1, us, ws, W, T, true},
			{"short w", 0, 0, -1, 0, us, ws, W, T, true},
			{"negative us", 0, 0, 0, 0, -1, ws, W, T, true},
			{"negative ws", 0, 0, 0, 0, us, -1, W, T, true},
			{"W = 0", 0, 0, 0, 0, us, ws, 0, T, true},
			{"T = 0", -1000, -1000, -1000, 0, us, ws, W, 0, false},
		} {
			if name == "generic" && (c.us < 0 || c.ws < 0) {
				continue // convGeneric indexes with them as they are: convChecked's own check
			}
			lu, lw := max((T-1)*us+n+c.du, 0), max((W-1)*ws+n+c.dw, 0)
			u, w, bias := make([]float32, lu), make([]float32, lw), make([]float32, n)
			x := make([][]float32, max(T+W-1+c.dx, 0))
			for i := range x {
				x[i] = make([]float32, n)
				for j := range x[i] {
					x[i][j] = 1
				}
			}
			if c.drow != 0 {
				x[len(x)-1] = x[len(x)-1][:n+c.drow] // the current row of the last token
			}
			for i := range u {
				u[i] = 7
			}
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				conv(u, c.us, x, w, c.ws, bias, c.w, c.tok)
				return false
			}()
			if panicked != c.panics {
				t.Errorf("%s: panicked %v, want %v", c.what, panicked, c.panics)
			}
			if c.panics || c.tok == 0 {
				for i, v := range u {
					if v != 7 {
						t.Fatalf("%s: u[%d] written (%v)", c.what, i, v)
					}
				}
			}
		}
	})
}
