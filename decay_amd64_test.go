//go:build amd64 && !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// The two decays of SPEC Part A in the assembly state pieces: decay(x) = x + em1·x when
// em1 ≥ −0.5, eg·x otherwise (NaN em1: eg·x), in the write pass, in δ and in o. The cases give
// em1 and eg that disagree (eg ≠ 1 + em1), so that the result shows which one a kernel used.

// decayCase is one (em1, eg) pair and the form stateGeneric takes for it.
type decayCase struct {
	name    string
	em1, eg float32
	near    bool // x + em1·x
}

var decayCases = []decayCase{
	{"em1=-0.25,eg=0.5", -0.25, 0.5, true},
	{"em1=-0.75,eg=0.1", -0.75, 0.1, false},
	{"em1=-0.5,eg=0.2", -0.5, 0.2, true}, // the threshold itself: x + em1·x
	{"em1=nextbelow(-0.5),eg=0.9", math.Nextafter32(-0.5, -1), 0.9, false},
	{"em1=-0.45,eg=0.3", -0.45, 0.3, true},
	{"em1=-0.55,eg=0.9", -0.55, 0.9, false},
	{"em1=-0,eg=0.6", float32(math.Copysign(0, -1)), 0.6, true},
	{"em1=NaN,eg=0.3", float32(math.NaN()), 0.3, false},
}

// decayKernels returns the assembly kernels to test by name: each present one, and for a missing
// one a subtest that skips visibly (or fails if GDN_REQUIRE_KERNEL names it).
func decayKernels(t *testing.T, f func(t *testing.T, im *impl)) {
	required := strings.Split(os.Getenv("GDN_REQUIRE_KERNEL"), ",")
	for _, name := range []string{"avx512", "avx2"} {
		t.Run(name, func(t *testing.T) {
			i := slices.IndexFunc(available, func(im *impl) bool { return im.name == name })
			if i < 0 {
				if slices.Contains(required, name) {
					t.Fatalf("GDN_REQUIRE_KERNEL names %s, which this CPU lacks", name)
				}
				t.Skipf("this CPU lacks the %s kernel", name)
			}
			f(t, available[i])
		})
	}
}

// guardedBuf is a slice s between kerneltest's guard bands and, after freeze, a copy of it that
// check compares it with.
type guardedBuf[T kerneltest.Elem] struct {
	s      []T
	guards func(testing.TB, string)
	before []T
}

type (
	decayBuf = guardedBuf[float32]
	kvBuf16  = guardedBuf[uint16]
)

// newDecayBuf and newKVBuf16 are n elements off elements past a 64-byte boundary.
func newDecayBuf(n, off int) *decayBuf { return newGuardedBuf[float32](n, off) }
func newKVBuf16(n, off int) *kvBuf16   { return newGuardedBuf[uint16](n, off) }

func newGuardedBuf[T kerneltest.Elem](n, off int) *guardedBuf[T] {
	s, g := kerneltest.NewGuarded[T](n, off)
	return &guardedBuf[T]{s: s, guards: g}
}

func (b *guardedBuf[T]) freeze() { b.before = slices.Clone(b.s) }

// check fails if a guard element changed or (after freeze) the slice itself.
func (b *guardedBuf[T]) check(t *testing.T, what string) {
	t.Helper()
	b.guards(t, what)
	if b.before != nil {
		if err := kerneltest.DiffBits(what+": input", b.s, b.before); err != nil {
			t.Fatal(err)
		}
	}
}

// decayClose fails unless got is within tol·max|want| of want elementwise; tol 0 means bit for
// bit.
func decayClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range want {
		g, w := got[i], want[i]
		ok := math.Float32bits(g) == math.Float32bits(w)
		if tol > 0 {
			ok = ok || math.Abs(float64(g)-float64(w)) <= tol*scale
		}
		if !ok {
			t.Fatalf("%s[%d] = %g (%#x), want %g (%#x); tolerance %g·%g", what, i, g, math.Float32bits(g), w, math.Float32bits(w), tol, scale)
		}
	}
}

// decayShape is one K×V head at a slice offset.
type decayShape struct{ K, V, off int }

// decayShapes: every V from 1 to 257 (every AVX-512 mask width and ZMM count, every AVX2 row
// block, register block, YMM, XMM and scalar tail) with K cycling through a list, the named
// sizes crossed with several K (K is only a loop count: no K tails), and two V > 512 (the
// 256-column block loops taken again after a block's two decay paths join).
func decayShapes() []decayShape {
	ks := []int{1, 2, 3, 7, 16, 17, 31, 64, 65, 128, 129}
	var ss []decayShape
	for V := 1; V <= 257; V++ {
		ss = append(ss, decayShape{K: ks[V%len(ks)], V: V, off: V % 16})
	}
	for n, V := range []int{16, 17, 32, 33, 64, 80, 96, 128, 129, 192, 200, 255, 256, 257} {
		for m, K := range []int{1, 5, 33, 129} {
			ss = append(ss, decayShape{K: K, V: V, off: (n + 3*m) % 16})
		}
	}
	return append(ss, decayShape{K: 3, V: 513, off: 5}, decayShape{K: 2, V: 600, off: 9})
}

// decayHead is the input of one head: the state (K×V), k̂, q̂ (K) and v (V).
type decayHead struct{ s, kh, qh, v []float32 }

func newDecayHead(sh decayShape) decayHead {
	return decayHead{make([]float32, sh.K*sh.V), make([]float32, sh.K), make([]float32, sh.K), make([]float32, sh.V)}
}

// runDecayCase runs im.state out of place and in place on a copy of in (in guarded slices) and
// compares state and o with stateGeneric's (tol as for decayClose).
func runDecayCase(t *testing.T, im *impl, sh decayShape, c decayCase, in decayHead, beta, kq float32, tol float64) {
	t.Helper()
	K, V, off := sh.K, sh.V, sh.off
	sIn, sOut := newDecayBuf(K*V, off), newDecayBuf(K*V, (off+3)%16)
	kh, qh := newDecayBuf(K, (off+5)%16), newDecayBuf(K, (off+7)%16)
	v, o := newDecayBuf(V, (off+9)%16), newDecayBuf(V, (off+11)%16)
	copy(sIn.s, in.s)
	copy(kh.s, in.kh)
	copy(qh.s, in.qh)
	copy(v.s, in.v)
	for _, b := range []*decayBuf{sIn, kh, qh, v} {
		b.freeze()
	}
	wantS, wantO := make([]float32, K*V), make([]float32, V)
	stateGeneric(sIn.s, wantS, kh.s, qh.s, v.s, wantO, c.em1, c.eg, beta, kq)
	what := fmt.Sprintf("K=%d V=%d off=%d %s", K, V, off, c.name)

	im.state(sIn.s, sOut.s, kh.s, qh.s, v.s, o.s, c.em1, c.eg, beta, kq)
	decayClose(t, what+": sOut", sOut.s, wantS, tol)
	decayClose(t, what+": o", o.s, wantO, tol)
	for _, b := range []*decayBuf{sIn, sOut, kh, qh, v, o} {
		b.check(t, what)
	}

	// In place.
	sIn.before = nil
	clear(o.s)
	im.state(sIn.s, sIn.s, kh.s, qh.s, v.s, o.s, c.em1, c.eg, beta, kq)
	decayClose(t, what+": in place sOut", sIn.s, wantS, tol)
	decayClose(t, what+": in place o", o.s, wantO, tol)
	sIn.check(t, what+" in place")
	o.check(t, what+" in place")
}

// TestStateDecayForms: random heads, every case; the assembly fuses x + em1·x (and the
// accumulations), the generic kernel on amd64 does not, hence a tolerance of 1e-5 of the head
// max. The wrong form is off by |eg − (1 + em1)|·|S| ≥ 0.1·|S|.
func TestStateDecayForms(t *testing.T) {
	// The generic kernel itself takes the forms the cases say (the premise of the comparison).
	for _, c := range decayCases {
		s, o := make([]float32, 1), make([]float32, 1)
		stateGeneric([]float32{1}, s, []float32{0}, []float32{0}, []float32{0}, o, c.em1, c.eg, 0, 0)
		want := c.eg
		if c.near {
			want = 1 + c.em1
		}
		if s[0] != want {
			t.Fatalf("%s: stateGeneric decays 1 to %g, want %g", c.name, s[0], want)
		}
	}
	decayKernels(t, func(t *testing.T, im *impl) {
		r := rand.New(rand.NewPCG(7, 7))
		for _, sh := range decayShapes() {
			in := newDecayHead(sh)
			for i := range in.s {
				in.s[i] = float32(0.3 * r.NormFloat64())
			}
			for i := range in.kh {
				in.kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(sh.K)))
				in.qh[i] = float32(r.NormFloat64() / float64(sh.K))
			}
			for i := range in.v {
				in.v[i] = float32(r.NormFloat64())
			}
			for _, c := range decayCases {
				runDecayCase(t, im, sh, c, in, 0.6, 0.05, 1e-5)
			}
		}
	})
}

// TestStateDecayFormsExact: heads of small dyadic values (S in 1/16 steps up to 1, k̂ and q̂ in
// 1/4 steps up to 1, v in 1/16 steps, beta 1/2, kq 1/4; em1 ∈ {−1/4, −1/2, −3/4, −0, NaN} and
// dyadic eg), for which every product and sum of the step is exact in float32 (at most 19
// significant bits at K = 257): fusion and summation order do not matter, so the assembly must
// give stateGeneric's bits. Any slip of form, constant or threshold shows up exactly.
func TestStateDecayFormsExact(t *testing.T) {
	cases := []decayCase{
		{"em1=-0.25,eg=0.5", -0.25, 0.5, true},
		{"em1=-0.75,eg=0.125", -0.75, 0.125, false},
		{"em1=-0.5,eg=0.25", -0.5, 0.25, true},
		{"em1=-0,eg=0.375", float32(math.Copysign(0, -1)), 0.375, true},
		{"em1=NaN,eg=0.375", float32(math.NaN()), 0.375, false},
	}
	decayKernels(t, func(t *testing.T, im *impl) {
		r := rand.New(rand.NewPCG(8, 8))
		dy := func(n int, step float32) float32 { return float32(r.IntN(2*n+1)-n) * step }
		for _, sh := range decayShapes() {
			in := newDecayHead(sh)
			for i := range in.s {
				in.s[i] = dy(16, 1.0/16)
			}
			for i := range in.kh {
				in.kh[i], in.qh[i] = dy(4, 0.25), dy(4, 0.25)
			}
			for i := range in.v {
				in.v[i] = dy(64, 1.0/16)
			}
			for _, c := range cases {
				runDecayCase(t, im, sh, c, in, 0.5, 0.25, 0)
			}
		}
	})
}
