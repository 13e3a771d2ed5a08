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
	"unsafe"

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

// TestWidenAMD64: every amd64 kernel's widen against widenGeneric, bit for bit, for lengths 0…70
// at offsets 0…3, with guard elements around dst that must stay untouched.
func TestWidenAMD64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, im := range available {
		for n := 0; n <= 70; n++ {
			for off := 0; off < 4; off++ {
				src := make([]uint16, n+off)
				for i := range src {
					src[i] = uint16(r.Uint32())
				}
				if n > 2 {
					src[off], src[off+1] = 0x7fc1, 0xff81 // NaN payloads
				}
				const guard = 20
				dst := make([]float32, n+off+2*guard)
				for i := range dst {
					dst[i] = math.Float32frombits(0x7fbadbad)
				}
				want := make([]float32, n)
				widenGeneric(want, src[off:])
				im.widen(dst[guard+off:guard+off+n], src[off:])
				for i, x := range dst {
					in := i >= guard+off && i < guard+off+n
					if in && math.Float32bits(x) != math.Float32bits(want[i-guard-off]) {
						t.Fatalf("%s: n=%d off=%d: dst[%d] = %#x, want %#x", im.name, n, off, i-guard-off, math.Float32bits(x), math.Float32bits(want[i-guard-off]))
					}
					if !in && math.Float32bits(x) != 0x7fbadbad {
						t.Fatalf("%s: n=%d off=%d: guard element %d written", im.name, n, off, i)
					}
				}
			}
		}
	}
}

// kvVia runs the tokens through a kernel's single-token routine (impl.state) in a float32 copy of the state (src32),
// storing f32 (src16 nil) or bf16 states at stores and the last one to carry when not nil.
func kvVia(one func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32), K, V int, src32 []float32, src16 []uint16, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32) {
	hs := K * V
	cur := make([]float32, hs)
	copy(cur, src32[:hs])
	for τ := range len(tok) / 4 {
		tk := tok[4*τ : 4*τ+4]
		one(cur, cur, kh[τ*K:(τ+1)*K:(τ+1)*K], qh[τ*K:(τ+1)*K:(τ+1)*K], v[τ*vs:τ*vs+V:τ*vs+V], o[τ*V:(τ+1)*V:(τ+1)*V], tk[0], tk[1], tk[2], tk[3])
		switch p := stores[τ]; {
		case p == nil:
		case src16 == nil:
			copy(unsafe.Slice((*float32)(p), hs), cur)
		default:
			d := unsafe.Slice((*uint16)(p), hs)
			for i, x := range cur {
				d[i] = BF16RNE(x)
			}
		}
	}
	if carry != nil {
		copy(carry[:hs], cur)
	}
}

// TestKVTokensExact: the [K][V] routines over T tokens against the single-token routine of the
// same kernel run token by token (kvVia), bit for bit: o, every store, the carry; with and without
// a store at the last token, from src32 or the bf16 src.
func TestKVTokensExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, im := range available {
		one := im.state
		for _, sh := range [][2]int{{1, 1}, {3, 5}, {16, 16}, {17, 33}, {31, 8}, {64, 64}, {96, 80}, {128, 128}, {5, 129}, {129, 7}, {200, 48}, {300, 37}, {520, 24}} {
			for _, T := range []int{1, 2, 3, 7} {
				for pat := range 3 {
					K, V, vs := sh[0], sh[1], sh[1]+1
					if K > routinesOf(im)[0][0].maxK { // the generic routine's
						continue
					}
					hs := K * V
					kh, qh := make([]float32, T*K), make([]float32, T*K)
					for i := range kh {
						kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
						qh[i] = float32(r.NormFloat64() / float64(K))
					}
					v := make([]float32, (T-1)*vs+V)
					for i := range v {
						v[i] = float32(r.NormFloat64())
					}
					tok := make([]float32, 4*T)
					for τ := range T {
						em1 := float32(-0.6 * r.Float64())
						if τ == 2 {
							em1 = float32(math.NaN())
						}
						tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, float32(r.Float64()), float32(0.1*r.NormFloat64())
					}
					src := make([]float32, hs)
					for i := range src {
						src[i] = float32(0.3 * r.NormFloat64())
					}
					src16 := make([]uint16, hs)
					for i, x := range src {
						src16[i] = BF16RNE(x)
					}
					src32 := make([]float32, hs)
					widenGeneric(src32, src16)
					keep := func(τ int) bool { return pat == 0 || pat == 1 && τ%2 == 0 || pat == 2 && τ == T-1 }
					what := fmt.Sprintf("%s K=%d V=%d T=%d pattern %d", im.name, K, V, T, pat)
					for _, bf := range []bool{false, true} {
						run := func(via bool, from32 bool) ([]float32, [][]float32, [][]uint16, []float32) {
							o := make([]float32, T*V)
							st32, st16 := make([][]float32, T), make([][]uint16, T)
							stores := make([]unsafe.Pointer, T)
							for τ := range T {
								if keep(τ) {
									if bf {
										st16[τ] = make([]uint16, hs)
										stores[τ] = unsafe.Pointer(&st16[τ][0])
									} else {
										st32[τ] = make([]float32, hs)
										stores[τ] = unsafe.Pointer(&st32[τ][0])
									}
								}
							}
							var carry []float32
							switch {
							case !bf && via:
								kvVia(one, K, V, src32, nil, stores, nil, kh, qh, v, vs, o, tok)
							case !bf:
								flatF32(im.cells[0][0])(K, V, append([]float32(nil), src32...), stores, kh, qh, v, vs, o, tok, nil)
							default:
								carry = make([]float32, hs)
								var s32 []float32
								if from32 {
									s32 = append([]float32(nil), src32...)
								}
								if via {
									kvVia(one, K, V, src32, src16, stores, carry, kh, qh, v, vs, o, tok)
								} else {
									flatBF16(im.cells[1][0])(K, V, append([]uint16(nil), src16...), s32, stores, carry, kh, qh, v, vs, o, tok, nil)
								}
							}
							return o, st32, st16, carry
						}
						for _, from32 := range []bool{false, true} {
							if from32 && !bf {
								continue
							}
							o1, s1, b1, c1 := run(false, from32)
							o2, s2, b2, c2 := run(true, from32)
							w := fmt.Sprintf("%s bf16=%v src32=%v", what, bf, from32)
							eqBits(t, w+" o", o1, o2)
							eqBits(t, w+" carry", c1, c2)
							for τ := range T {
								eqBits(t, fmt.Sprintf("%s store %d", w, τ), s1[τ], s2[τ])
								for i := range b1[τ] {
									if b1[τ][i] != b2[τ][i] {
										t.Fatalf("%s bf16 store %d [%d] = %#x, token by token %#x", w, τ, i, b1[τ][i], b2[τ][i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

func eqBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s [%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// The tails of the [K][V] routines (asm/state_kv_span.go): every block shape and every guarded
// vector of the single-token routine and of the routines over T tokens, for every amd64 kernel.
//
// kvTailVs are the V of the sweeps: every V up to 160 (every mask width; every span of the
// single-token routine below 160: AVX-512 [0,3] for 1–64, the fixed block of 65–80, [5,15] from
// 81, V = 128; AVX2 rows of 64 and 128 then every tail 1–63: the 16-column block, the span of 1–23
// columns with its masked vector, 24–31 cut to 16 + 8–15; every block of the routines over T
// tokens: full, AVX-512 one masked vector or the span of 2–4, AVX2 16 columns or the span), then
// every span boundary up to 512 (16·n − 1, 16·n, 16·n + 1 around the AVX-512 spans' guarded
// vectors, the AVX2 rows of 192 and 256, blocks after a loop of 256) and the same tails after
// 256.
func kvTailVs() []int {
	var vs []int
	for V := 1; V <= 160; V++ {
		vs = append(vs, V)
	}
	for _, c := range []int{176, 192, 208, 224, 240, 256, 272, 320, 336, 384, 448, 512} {
		vs = append(vs, c-1, c, c+1)
	}
	return append(vs, 255+80, 256+100, 256+128+7, 511+24)
}

// kvTailKs are K for each block width of the routines over T tokens: AVX-512 blocks of 4, 2, 2, 1
// ZMM (K ≤ 128, ≤ 170, ≤ 256, ≤ 512; above: the single-token routine; a tail of 33–48 columns as
// 2 and 1), AVX2 of 4, 3, 2, 1 YMM (K ≤ 256, ≤ 341, ≤ 512, ≤ 1024).
var kvTailKs = []int{1, 3, 129, 171, 257, 342, 513}

// kvTailShapes pairs them: every V with a small K (cycling through 1, 2, 3, 5, 17), and the
// larger K with every V up to 70 and the boundaries above (with -short: V up to 70 and the
// boundaries with the small K, and every fourth of those with the larger K).
func kvTailShapes() [][2]int {
	var sh [][2]int
	small := []int{1, 2, 3, 5, 17}
	boundary := func(V int) bool { return V <= 70 || V%16 <= 1 || V%16 == 15 }
	for n, V := range kvTailVs() {
		if !testing.Short() || boundary(V) {
			sh = append(sh, [2]int{small[n%len(small)], V})
		}
	}
	for _, K := range kvTailKs[2:] {
		for n, V := range kvTailVs() {
			if boundary(V) && (!testing.Short() || n%4 == K%4) {
				sh = append(sh, [2]int{K, V})
			}
		}
	}
	return sh
}

// kvTailCall is one call of a [K][V] routine over T tokens on guarded slices.
type kvTailCall struct {
	K, V, T, vs    int
	src, src32, kh *decayBuf
	qh, v, o, tok  *decayBuf
	carry          *decayBuf
	src16          *kvBuf16
	st32           []*decayBuf
	st16           []*kvBuf16
	stores         []unsafe.Pointer
}

// newKVTailCall places the inputs (v with a NaN gap between the rows of its stride), a store at
// every token in keep, and a carry.
func newKVTailCall(K, V, T int, keep func(τ int) bool, bf16, from32 bool, s []float32, kh, qh, v, tok []float32, off int) *kvTailCall {
	c := &kvTailCall{K: K, V: V, T: T, vs: V + 3}
	buf := func(x []float32, o int) *decayBuf {
		b := newDecayBuf(len(x), (off+o)%16)
		copy(b.s, x)
		b.freeze()
		return b
	}
	c.kh, c.qh, c.tok = buf(kh, 1), buf(qh, 2), buf(tok, 3)
	vv := make([]float32, (T-1)*c.vs+V)
	for i := range vv {
		vv[i] = float32(math.NaN())
	}
	for τ := range T {
		copy(vv[τ*c.vs:], v[τ*V:(τ+1)*V])
	}
	c.v = buf(vv, 4)
	c.o = newDecayBuf(T*V, (off+5)%16)
	c.stores = make([]unsafe.Pointer, T)
	if !bf16 {
		c.src = buf(s, 6)
		c.st32 = make([]*decayBuf, T)
		for τ := range T {
			if keep(τ) {
				c.st32[τ] = newDecayBuf(K*V, (off+7+τ)%16)
				c.stores[τ] = unsafe.Pointer(&c.st32[τ].s[0])
			}
		}
		return c
	}
	c.src16 = newKVBuf16(K*V, (off+6)%16)
	for i, x := range s {
		c.src16.s[i] = BF16RNE(x)
	}
	if from32 {
		w := make([]float32, K*V)
		widenGeneric(w, c.src16.s)
		c.src32 = buf(w, 8)
		for i := range c.src16.s {
			c.src16.s[i] = 0x7fc1 // must not be read
		}
	}
	c.st16 = make([]*kvBuf16, T)
	for τ := range T {
		if keep(τ) {
			c.st16[τ] = newKVBuf16(K*V, (off+7+τ)%16)
			c.stores[τ] = unsafe.Pointer(&c.st16[τ].s[0])
		}
	}
	c.carry = newDecayBuf(K*V, (off+9)%16)
	return c
}

func (c *kvTailCall) run(t *testing.T, im *impl) {
	f32, bf16 := kvRaw(t, im, c.K)
	if c.src16 == nil {
		f32(c.K, c.V, c.src.s, c.stores, c.kh.s, c.qh.s, c.v.s, c.vs, c.o.s, c.tok.s, nil)
		return
	}
	var s32 []float32
	if c.src32 != nil {
		s32 = c.src32.s
	}
	bf16(c.K, c.V, c.src16.s, s32, c.stores, c.carry.s, c.kh.s, c.qh.s, c.v.s, c.vs, c.o.s, c.tok.s, nil)
}

// rawArgs is the stateArgs of a flat call with a work space: what a test gives an assembly routine
// itself (routine.fn), without asmCell's limits.
func rawArgs(K, V int, src unsafe.Pointer, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok, work []float32, pf []uintptr) stateArgs {
	var w *[workFloats]float32
	if work != nil {
		w = (*[workFloats]float32)(work)
	}
	a := stateArgs{K: K, V: V, T: len(tok) / 4, vs: vs, src: src, src32: unsafe.SliceData(src32), stores: unsafe.SliceData(stores),
		carry: unsafe.SliceData(carry), kh: unsafe.SliceData(kh), qh: unsafe.SliceData(qh), v: unsafe.SliceData(v), o: unsafe.SliceData(o),
		tok: unsafe.SliceData(tok), work: w, pf: unsafe.SliceData(pf), npf: len(pf)}
	if a.T == 1 && len(stores) > 0 && stores[0] != nil { // planOne (the other routines ignore dst1 and tok1)
		a.dst1, a.tok1 = stores[0], [4]float32(tok[:4])
	}
	return a
}

// routinesOf is the table of an amd64 kernel's state routines.
func routinesOf(im *impl) *[2][2]*routine {
	return map[string]*[2][2]*routine{"avx512": &avx512Routines, "avx2": &avx2Routines}[im.name]
}

// kvRaw returns the kernel's [K][V] routines over T tokens themselves (routine.fn: no limits, no
// split of a verification), with a work space between guard bands that must stay untouched; for
// a K above their limit, the cells (the generic routines).
func kvRaw(t *testing.T, im *impl, K int) (tokensF32, tokensBF16) {
	r32, r16 := routinesOf(im)[0][0], routinesOf(im)[1][0]
	if K > r32.maxK {
		return flatF32(im.cells[0][0]), flatBF16(im.cells[1][0])
	}
	work := newDecayBuf(workFloats, K%16)
	what := fmt.Sprintf("%s K=%d: work", im.name, K)
	return func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
			r32.call(rawArgs(K, V, unsafe.Pointer(unsafe.SliceData(src)), nil, stores, nil, kh, qh, v, vs, o, tok, work.s, pf))
			work.check(t, what)
		}, func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
			r16.call(rawArgs(K, V, unsafe.Pointer(unsafe.SliceData(src)), src32, stores, carry, kh, qh, v, vs, o, tok, work.s, pf))
			work.check(t, what)
		}
}

// check fails if a guard band or an input changed.
func (c *kvTailCall) check(t *testing.T, what string) {
	t.Helper()
	for _, b := range []*decayBuf{c.src, c.src32, c.kh, c.qh, c.v, c.o, c.tok, c.carry} {
		if b != nil {
			b.check(t, what)
		}
	}
	for _, b := range c.st32 {
		if b != nil {
			b.check(t, what+" store")
		}
	}
	for _, b := range c.st16 {
		if b != nil {
			b.check(t, what+" store")
		}
	}
	if c.src16 != nil {
		c.src16.check(t, what+" src")
	}
}

// dyadic fills x with multiples of step up to n·step in magnitude.
func dyadic(r *rand.Rand, x []float32, n int, step float32) {
	for i := range x {
		x[i] = float32(r.IntN(2*n+1)-n) * step
	}
}

// TestKVTailsExact: one token of every amd64 [K][V] routine (the single-token one, and over T
// tokens f32, bf16 from src and from src32) on dyadic heads (S in 1/16 steps up to 1, k̂ and q̂
// in 1/4 steps, v in 1/16 steps, beta 1/2, kq 1/4; both decay forms with dyadic em1 and eg), for
// which every product and sum is exact in float32 whatever the order or fusion: each must give
// stateGeneric's bits, o and state (bf16: BF16RNE of them), over kvTailShapes, in guard bands.
func TestKVTailsExact(t *testing.T) {
	forms := []struct{ em1, eg float32 }{{-0.25, 0.5}, {-0.75, 0.375}}
	decayKernels(t, func(t *testing.T, im *impl) {
		r := rand.New(rand.NewPCG(21, 22))
		for n, sh := range kvTailShapes() {
			K, V := sh[0], sh[1]
			f := forms[n%2]
			s, kh, qh, v := make([]float32, K*V), make([]float32, K), make([]float32, K), make([]float32, V)
			dyadic(r, s, 16, 1.0/16)
			dyadic(r, kh, 4, 0.25)
			dyadic(r, qh, 4, 0.25)
			dyadic(r, v, 64, 1.0/16)
			wantS, wantO := make([]float32, K*V), make([]float32, V)
			stateGeneric(s, wantS, kh, qh, v, wantO, f.em1, f.eg, 0.5, 0.25)
			what := fmt.Sprintf("%s K=%d V=%d em1=%g", im.name, K, V, f.em1)

			// The single-token routine, out of place.
			sIn, sOut := newDecayBuf(K*V, n%16), newDecayBuf(K*V, (n+3)%16)
			khb, qhb, vb, ob := newDecayBuf(K, (n+5)%16), newDecayBuf(K, (n+7)%16), newDecayBuf(V, (n+9)%16), newDecayBuf(V, (n+11)%16)
			copy(sIn.s, s)
			copy(khb.s, kh)
			copy(qhb.s, qh)
			copy(vb.s, v)
			for _, b := range []*decayBuf{sIn, khb, qhb, vb} {
				b.freeze()
			}
			im.state(sIn.s, sOut.s, khb.s, qhb.s, vb.s, ob.s, f.em1, f.eg, 0.5, 0.25)
			decayClose(t, what+" single-token sOut", sOut.s, wantS, 0)
			decayClose(t, what+" single-token o", ob.s, wantO, 0)
			for _, b := range []*decayBuf{sIn, sOut, khb, qhb, vb, ob} {
				b.check(t, what+" single-token")
			}

			tok := []float32{f.em1, f.eg, 0.5, 0.25}
			for _, bf := range []bool{false, true} {
				for _, from32 := range []bool{false, true} {
					if from32 && !bf {
						continue
					}
					w := fmt.Sprintf("%s tokens bf16=%v src32=%v", what, bf, from32)
					c := newKVTailCall(K, V, 1, func(int) bool { return true }, bf, from32, s, kh, qh, v, tok, n)
					c.run(t, im)
					c.check(t, w)
					decayClose(t, w+" o", c.o.s, wantO, 0)
					if !bf {
						decayClose(t, w+" state", c.st32[0].s, wantS, 0)
						continue
					}
					decayClose(t, w+" carry", c.carry.s, wantS, 0)
					for i, b := range c.st16[0].s {
						if b != BF16RNE(wantS[i]) {
							t.Fatalf("%s store [%d] = %#x, want %#x", w, i, b, BF16RNE(wantS[i]))
						}
					}
				}
			}
		}
	})
}

// TestKVTailsTokens: every amd64 routine over T = 3 tokens (random heads, a NaN em1 at the last)
// against the same kernel's single-token routine run token by token (kvVia), bit for bit: o,
// the stores (at the first and last token), the carry; over kvTailShapes, in guard bands.
func TestKVTailsTokens(t *testing.T) {
	const T = 3
	decayKernels(t, func(t *testing.T, im *impl) {
		one := im.state
		r := rand.New(rand.NewPCG(23, 24))
		for n, sh := range kvTailShapes() {
			K, V := sh[0], sh[1]
			if K > routinesOf(im)[0][0].maxK { // the generic routine's
				continue
			}
			s, kh, qh, v := make([]float32, K*V), make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
			for i := range s {
				s[i] = float32(0.3 * r.NormFloat64())
			}
			for i := range kh {
				kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
				qh[i] = float32(r.NormFloat64() / float64(K))
			}
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			tok := []float32{-0.05, 0.96, 0.7, 0.1, -0.7, 0.28, 0.4, -0.2, float32(math.NaN()), 0.9, 0.5, 0.3}
			keep := func(τ int) bool { return τ != 1 }
			for _, bf := range []bool{false, true} {
				for _, from32 := range []bool{false, true} {
					if from32 && !bf {
						continue
					}
					w := fmt.Sprintf("%s K=%d V=%d bf16=%v src32=%v", im.name, K, V, bf, from32)
					c := newKVTailCall(K, V, T, keep, bf, from32, s, kh, qh, v, tok, n)
					c.run(t, im)
					c.check(t, w)
					// Token by token, from the same (widened) state.
					src32 := slices.Clone(s)
					var src16 []uint16
					if bf {
						src16 = slices.Clone(c.src16.s)
						if from32 {
							copy(src32, c.src32.s)
						} else {
							widenGeneric(src32, src16)
						}
					}
					o := make([]float32, T*V)
					st32, st16 := make([][]float32, T), make([][]uint16, T)
					stores := make([]unsafe.Pointer, T)
					for τ := range T {
						if keep(τ) {
							st32[τ], st16[τ] = make([]float32, K*V), make([]uint16, K*V)
							stores[τ] = unsafe.Pointer(&st32[τ][0])
							if bf {
								stores[τ] = unsafe.Pointer(&st16[τ][0])
							}
						}
					}
					var carry []float32
					var s16 []uint16
					if bf {
						carry, s16 = make([]float32, K*V), src16
					}
					kvVia(one, K, V, src32, s16, stores, carry, c.kh.s, c.qh.s, c.v.s, c.vs, o, c.tok.s)
					decayClose(t, w+" o", c.o.s, o, 0)
					for τ := range T {
						switch {
						case !keep(τ):
						case !bf:
							decayClose(t, fmt.Sprintf("%s store %d", w, τ), c.st32[τ].s, st32[τ], 0)
						default:
							for i, b := range c.st16[τ].s {
								if b != st16[τ][i] {
									t.Fatalf("%s store %d [%d] = %#x, token by token %#x", w, τ, i, b, st16[τ][i])
								}
							}
						}
					}
					if bf {
						decayClose(t, w+" carry", c.carry.s, carry, 0)
					}
				}
			}
		}
	})
}

// TestKVBF16Cvt: the AVX-512 [K][V] bf16 routine over T tokens, whose rows without NaN are rounded
// two vectors at a time by VCVTNE2PS2BF16 where the CPU has it (cvt; a row with a ±0 stored word
// is stored again by the integer rounding), stores BF16RNE of the f32 routine's states (and gives
// its o and carry), bit for bit, with cvt false and true. The states are ordinary values with one
// denormal that survives the call (k̂_i = 0 in its row, em1 = 0: decay(x) = x) placed in the first
// or the second vector of a pair, in a masked last vector or in an odd block's unpaired one, in
// the first, a middle or the last row, or rows of special values (±0, denormals, values that
// round to ±Inf, ±Inf; NaN, which takes the integer path); V from one vector to several blocks,
// whole and masked, K up to 200 (full blocks of 3 and 2 ZMM), T 1–3 with stores at some or all
// tokens, the stores aligned (non-temporal where the routine takes them so: cvt is not used
// there) or one word off, in place too; guard bands around every store.
func TestKVBF16Cvt(t *testing.T) {
	skipWithoutAVX512(t)
	r := rand.New(rand.NewPCG(71, 72))
	bits := math.Float32frombits
	work := make([]float32, workFloats)
	cases := 0
	for _, cvt := range []bool{false, true} {
		if cvt && !avx512BF16 {
			t.Log("no AVX512_BF16: cvt = true not run")
			continue
		}
		for _, K := range []int{1, 3, 64, 128, 150, 200} { // (full blocks of 4, 3 and 2 ZMM)
			for _, V := range []int{16, 17, 32, 48, 63, 64, 80, 96, 100, 128, 144, 200, 256} {
				for _, T := range []int{1, 2, 3} {
					for kind := range 6 {
						hs := K * V
						kh, qh, v := make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
						for i := range kh {
							kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
							qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
						}
						for i := range v {
							v[i] = float32(r.NormFloat64())
						}
						src := make([]uint16, hs)
						for e := range src {
							src[e] = BF16RNE(float32(r.NormFloat64() * 0.5))
						}
						// The denormal's row and column: kinds 0–3 a lone one (first vector of a pair,
						// second, the block's last column, the last column of V), 4 a row of specials,
						// 5 none.
						row := []int{0, K / 2, K - 1}[r.IntN(3)]
						col := 0
						switch kind {
						case 0:
							col = r.IntN(min(16, V))
						case 1:
							col = min(16+r.IntN(16), V-1)
						case 2:
							col = min(64*r.IntN((V+63)/64)+63, V-1)
						case 3:
							col = V - 1
						}
						tok := make([]float32, 4*T)
						for τ := range T {
							em1 := -0.03 * r.Float32()
							if kind < 4 {
								em1 = 0
								kh[τ*K+row] = 0
							}
							tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.7, 0.3
						}
						switch {
						case kind < 4:
							src[row*V+col] = BF16RNE(bits(uint32(0x10000+r.IntN(0x7f0000)) | uint32(r.IntN(2))<<31))
						case kind == 4:
							for j := range V {
								src[row*V+j] = BF16RNE([]float32{0, float32(math.Copysign(0, -1)), bits(0x00010000), bits(0x807f0000),
									bits(0x00800000), float32(math.Inf(1)), float32(math.Inf(-1)), bits(0x7f7fffff), bits(0xff7f8000),
									bits(0x00400000), 1.5, -3}[(j+row)%12])
							}
						}
						if kind == 4 && r.IntN(2) == 0 {
							src[r.IntN(hs)] = 0x7fc1 // a NaN: its column's δ too (the integer path)
						}
						src32 := make([]float32, hs)
						for e, x := range src {
							src32[e] = bits(uint32(x) << 16)
						}
						// The stores: at every token or some, aligned to 64 bytes or one word off.
						off := r.IntN(2)
						every := r.IntN(2) == 0
						st := make([]*kvBuf16, T)
						stores := make([]unsafe.Pointer, T)
						wantSt := make([][]float32, T)
						stores32 := make([]unsafe.Pointer, T)
						for τ := range T {
							if every || τ == T-1 || r.IntN(2) == 0 {
								st[τ] = newKVBuf16(hs, off)
								stores[τ] = unsafe.Pointer(&st[τ].s[0])
								wantSt[τ] = make([]float32, hs)
								stores32[τ] = unsafe.Pointer(&wantSt[τ][0])
							}
						}
						wo, gotO := make([]float32, T*V), make([]float32, T*V)
						s32 := append([]float32(nil), src32...)
						stateKVf32AVX512(rawArgs(K, V, unsafe.Pointer(&s32[0]), nil, stores32, nil, kh, qh, v, V, wo, tok, work, nil))
						carry := make([]float32, hs)
						a := rawArgs(K, V, unsafe.Pointer(&src[0]), nil, stores, carry, kh, qh, v, V, gotO, tok, work, nil)
						a.cvt = cvt
						stateKVbf16AVX512(a)
						check := func(what string, b *kvBuf16, want []float32) {
							t.Helper()
							b.check(t, fmt.Sprintf("cvt %v K %d V %d T %d kind %d off %d %s", cvt, K, V, T, kind, off, what))
							got := b.s
							for e := range want {
								if w := BF16RNE(want[e]); got[e] != w {
									t.Fatalf("cvt %v K %d V %d T %d kind %d (row %d col %d) off %d %s: state[%d][%d] = %#04x, want %#04x",
										cvt, K, V, T, kind, row, col, off, what, e/V, e%V, got[e], w)
								}
							}
						}
						for τ := range T {
							if st[τ] != nil {
								check("store", st[τ], wantSt[τ])
							}
						}
						for e := range carry {
							if math.Float32bits(carry[e]) != math.Float32bits(wantSt[T-1][e]) {
								t.Fatalf("cvt %v K %d V %d T %d kind %d: carry[%d] = %v, want %v", cvt, K, V, T, kind, e, carry[e], wantSt[T-1][e])
							}
						}
						for j := range wo {
							if math.Float32bits(gotO[j]) != math.Float32bits(wo[j]) {
								t.Fatalf("cvt %v K %d V %d T %d kind %d: o[%d] = %v, want %v", cvt, K, V, T, kind, j, gotO[j], wo[j])
							}
						}
						if T == 1 { // in place: the one store is src
							inPlace := newKVBuf16(hs, off)
							copy(inPlace.s, src)
							a := rawArgs(K, V, unsafe.Pointer(&inPlace.s[0]), nil, []unsafe.Pointer{unsafe.Pointer(&inPlace.s[0])}, nil, kh, qh, v, V, gotO, tok, work, nil)
							a.cvt = cvt
							stateKVbf16AVX512(a)
							check("in place", inPlace, wantSt[0])
						}
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d cases", cases)
}

// TestVKBF16Cvt: the AVX-512 [V][K] bf16 routine's decode (one token with a store: the register
// groups, whose stores round two vectors at a time with VCVTNE2PS2BF16 where the CPU has it and K
// is whole ZMM) stores BF16RNE of the f32 routine's state from the widened state (and its o), bit
// for bit, with cvt false and true, out of place and in place, on states whose updated
// rows hold denormals (which the instruction flushes to zero: the routine then stores the group
// again with the integer rounding), ±0, NaN, ±Inf, values that round up to Inf, and ordinary ones;
// K whole ZMM and not, V from one row to several groups and a one-row tail.
func TestVKBF16Cvt(t *testing.T) {
	skipWithoutAVX512(t)
	r := rand.New(rand.NewPCG(61, 62))
	bits := math.Float32frombits
	for _, cvt := range []bool{false, true} {
		if cvt && !avx512BF16 {
			t.Log("no AVX512_BF16: cvt = true not run")
			continue
		}
		cases := 0
		for _, K := range []int{64, 96, 128, 100, 48} {
			for _, V := range []int{1, 2, 3, 4, 5, 7, 9, 33} {
				for _, beta := range []float32{0, 0.7} {
					for _, em1 := range []float32{-0.03, -0.9} {
						for _, pos := range []bool{false, true} { // pos: no negative value (and qh, kh ≥ 0)
							hs := K * V
							src := make([]uint16, hs)
							kh, qh, v := make([]float32, K), make([]float32, K), make([]float32, V)
							for i := range K {
								kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
								qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
								if pos {
									kh[i], qh[i] = float32(math.Abs(float64(kh[i]))), float32(math.Abs(float64(qh[i])))
								}
								if i%7 == 3 {
									kh[i] = 0 // S' = decay(S) there: a denormal stays one
								}
							}
							for j := range V {
								v[j] = float32(r.NormFloat64())
								for i := range K {
									x := float32(r.NormFloat64() * 0.5)
									switch kind := j / 2 % 4; { // (a group is two rows, or three)
									case kind == 1 && i%7 == 3: // a denormal among ordinary values
										x = bits(uint32(1+r.IntN(0x7fffff)) | uint32(r.IntN(2))<<31)
									case kind == 3 && j%2 == 0 && i == 0: // one denormal, in the first pair
										x = bits(uint32(0x8000 + r.IntN(0x7f8000)))
										if !pos {
											x = -x // (its bf16 is not −0)
										}
									case kind == 2: // all special
										x = []float32{0, float32(math.Copysign(0, -1)), bits(0x00000001), bits(0x807fffff),
											bits(0x00800000), float32(math.Inf(1)), float32(math.Inf(-1)), bits(0x7fc00001),
											bits(0xff812345), bits(0x7f7fffff), bits(0xff7f8000), bits(0x00400000)}[i%12]
									}
									if pos && !math.IsNaN(float64(x)) {
										x = float32(math.Abs(float64(x)))
									}
									src[j*K+i] = BF16RNE(x)
								}
							}
							if pos {
								for j := range v {
									v[j] = float32(math.Abs(float64(v[j]))) + 2 // δ = beta·(v − kv) > 0
								}
							}
							tok := []float32{em1, 1 + em1, beta, 0.3}
							want, got := make([]uint16, hs), make([]uint16, hs)
							wo, gotO := make([]float32, V), make([]float32, V)
							// The reference: the f32 routine from the widened state, each element rounded
							// by BF16RNE (a bf16 store is the rounding of the f32 routine's state).
							src32, dst32 := make([]float32, hs), make([]float32, hs)
							for e, x := range src {
								src32[e] = math.Float32frombits(uint32(x) << 16)
							}
							stateVKf32AVX512(rawArgs(K, V, unsafe.Pointer(&src32[0]), nil, []unsafe.Pointer{unsafe.Pointer(&dst32[0])}, nil, kh, qh, v, V, wo, tok, nil, nil))
							for e, x := range dst32 {
								want[e] = BF16RNE(x)
							}
							vkBF16AVX512Cvt(K, V, src, []unsafe.Pointer{unsafe.Pointer(&got[0])}, kh, qh, v, gotO, tok, cvt)
							for e := range want {
								if got[e] != want[e] {
									t.Fatalf("cvt %v K %d V %d beta %v em1 %v: state[%d][%d] = %#04x, want %#04x", cvt, K, V, beta, em1, e/K, e%K, got[e], want[e])
								}
							}
							for j := range wo {
								if math.Float32bits(gotO[j]) != math.Float32bits(wo[j]) {
									t.Fatalf("cvt %v K %d V %d: o[%d] = %v, want %v", cvt, K, V, j, gotO[j], wo[j])
								}
							}
							// In place too (src = the store).
							inPlace := append([]uint16(nil), src...)
							vkBF16AVX512Cvt(K, V, inPlace, []unsafe.Pointer{unsafe.Pointer(&inPlace[0])}, kh, qh, v, gotO, tok, cvt)
							for e := range want {
								if inPlace[e] != want[e] {
									t.Fatalf("cvt %v K %d V %d in place: state[%d][%d] = %#04x, want %#04x", cvt, K, V, e/K, e%K, inPlace[e], want[e])
								}
							}
							cases++
						}
					}
				}
			}
		}
		t.Logf("cvt %v: %d cases", cvt, cases)
	}
}

// TestVKBF16CvtLone: as TestVKBF16Cvt, for states of ordinary values but for one denormal that
// survives the update (k̂ = 0 there, beta = 0.7), at the second, the last but one and the last
// vector of a row, in the first and in the second row of a group, K 64 … 256 (whole ZMM: the pair
// stores), T = 1 and 2 (T = 2 takes the groups for K > 128 only), a store at every token: the test
// of the stored words must find a lone ±0 in any pair, either half.
func TestVKBF16CvtLone(t *testing.T) {
	skipWithoutAVX512(t)
	r := rand.New(rand.NewPCG(63, 64))
	const V = 7
	cases := 0
	for _, cvt := range []bool{false, true} {
		if cvt && !avx512BF16 {
			continue
		}
		for _, K := range []int{64, 96, 128, 192, 256} {
			n := K / 16
			for _, T := range []int{1, 2} {
				for _, pos := range []int{1, n - 2, n - 1} {
					for _, row := range []int{2, 3, 4} { // (K ≤ 64: groups of 3 rows; else 2, or 1)
						hs := K * V
						e := row*K + 16*pos + 5 // the denormal's element
						kh, qh, v := make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
						for i := range kh {
							kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
							qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
							if i%K == e%K {
								kh[i] = 0
							}
						}
						for j := range v {
							v[j] = float32(r.NormFloat64())
						}
						src := make([]uint16, hs)
						for i := range src {
							src[i] = BF16RNE(float32(r.NormFloat64() * 0.5))
						}
						src[e] = 0x0040 | uint16(r.IntN(2))<<15 // ±2⁻¹³³·64: a denormal
						tok := make([]float32, 4*T)
						for τ := range T {
							tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = -0.03, 0.97, 0.7, 0.3
						}
						src32 := make([]float32, hs)
						for i, x := range src {
							src32[i] = math.Float32frombits(uint32(x) << 16)
						}
						want32 := make([][]float32, T)
						got := make([][]uint16, T)
						st32, st16 := make([]unsafe.Pointer, T), make([]unsafe.Pointer, T)
						for τ := range T {
							want32[τ], got[τ] = make([]float32, hs), make([]uint16, hs)
							st32[τ], st16[τ] = unsafe.Pointer(&want32[τ][0]), unsafe.Pointer(&got[τ][0])
						}
						wo, gotO := make([]float32, T*V), make([]float32, T*V)
						flatF32(avx512Impl.cells[0][layoutVK])(K, V, src32, st32, kh, qh, v, V, wo, tok, nil)
						vkBF16AVX512Cvt(K, V, src, st16, kh, qh, v, gotO, tok, cvt)
						for τ := range T {
							for i, x := range want32[τ] {
								if got[τ][i] != BF16RNE(x) {
									t.Fatalf("cvt %v K %d T %d denormal at row %d, vector %d: token %d state[%d][%d] = %#04x, want %#04x", cvt, K, T, row, pos, τ, i/K, i%K, got[τ][i], BF16RNE(x))
								}
							}
						}
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d cases", cases)
}

// vkBF16AVX512Cvt is stateVKbf16AVX512 with cvt given (and a work space).
func vkBF16AVX512Cvt(K, V int, src []uint16, stores []unsafe.Pointer, kh, qh, v, o, tok []float32, cvt bool) {
	a := rawArgs(K, V, unsafe.Pointer(&src[0]), nil, stores, nil, kh, qh, v, V, o, tok, make([]float32, workFloats), nil)
	a.cvt = cvt
	stateVKbf16AVX512(a)
}

// skipWithoutAVX512 skips the test where the avx512 kernel is not available.
func skipWithoutAVX512(t *testing.T) {
	for _, im := range available {
		if im.name == "avx512" {
			return
		}
	}
	t.Skip("no AVX-512")
}

// TestVKBF16CvtFallbackNaN: the VCVTNE2PS2BF16 path's fallback to the integer rounding (a group
// with a ±0 word) on a group whose other row is NaN with low payload bits (a v NaN): the fallback
// must select the NaN lanes (finish does not test δ for that path; storeRows tells the integer
// rounding so). Each call follows a cvt-false call on a finite head at the same stack depth,
// which leaves a "finite" flag in the routine's frame slot for a stale read to find.
func TestVKBF16CvtFallbackNaN(t *testing.T) {
	skipWithoutAVX512(t)
	if !avx512BF16 {
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(63, 64))
	for _, K := range []int{64, 96, 128} {
		for _, V := range []int{2, 3, 8} {
			for j := range V {
				hs := K * V
				kh, qh, v := make([]float32, K), make([]float32, K), make([]float32, V)
				src := make([]uint16, hs)
				for i := range K {
					kh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
					qh[i] = float32(r.NormFloat64() / math.Sqrt(float64(K)))
				}
				kh[0] = 0 // S'[·][0] = decay(0) = 0: a ±0 word in every finite row
				for x := range V {
					v[x] = float32(r.NormFloat64())
					for i := 1; i < K; i++ {
						src[x*K+i] = BF16RNE(float32(r.NormFloat64() * 0.5))
					}
				}
				tok := []float32{-0.03, 0.97, 0.7, 0.2}
				finite := append([]uint16(nil), src...)
				out := make([]uint16, hs)
				vkBF16AVX512Cvt(K, V, finite, []unsafe.Pointer{unsafe.Pointer(&out[0])}, kh, qh, v, make([]float32, V), tok, false)
				v[j] = math.Float32frombits(0x7fc0ffff)
				want32 := make([]float32, hs)
				widened := make([]float32, hs)
				for i, b := range src {
					widened[i] = math.Float32frombits(uint32(b) << 16)
				}
				wantO := make([]float32, V)
				flatF32(avx512Impl.cells[0][layoutVK])(K, V, widened, []unsafe.Pointer{unsafe.Pointer(&want32[0])}, kh, qh, v, V, wantO, tok, nil)
				got, gotO := make([]uint16, hs), make([]float32, V)
				vkBF16AVX512Cvt(K, V, src, []unsafe.Pointer{unsafe.Pointer(&got[0])}, kh, qh, v, gotO, tok, true)
				for i := range got {
					if w := BF16RNE(want32[i]); got[i] != w {
						t.Fatalf("K=%d V=%d NaN row %d: [%d] = %#x, BF16RNE(f32) %#x", K, V, j, i, got[i], w)
					}
				}
				for i := range gotO {
					if math.Float32bits(gotO[i]) != math.Float32bits(wantO[i]) {
						t.Fatalf("K=%d V=%d NaN row %d: o[%d] = %#x, f32 %#x", K, V, j, i, math.Float32bits(gotO[i]), math.Float32bits(wantO[i]))
					}
				}
			}
		}
	}
}

// forEachAmd64 runs f for each amd64 assembly kernel (avx512, avx2), a visible skip for the others.
func forEachAmd64(t *testing.T, f func(t *testing.T, name string, k Kernel)) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		if name != "avx512" && name != "avx2" {
			t.Skip("not an amd64 assembly kernel")
		}
		k, _ := Lookup(name)
		f(t, name, k)
	})
}

// tokenCall returns random inputs of a call of T tokens over a K×V head: the state, k̂, q̂ (rows of
// norm about 1), v and tok, the tokens alternating between the two decay forms (em1 −0.03, −0.9).
func tokenCall(r *rand.Rand, K, V, T int) (src, kh, qh, v, tok []float32) {
	src, kh, qh, v = make([]float32, K*V), make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
	fill(r, src, 0.5)
	fill(r, kh, 1/math.Sqrt(float64(K)))
	fill(r, qh, 1/math.Sqrt(float64(K)))
	fill(r, v, 1)
	tok = make([]float32, 4*T)
	for τ := range T {
		em1 := float32(-0.03)
		if τ%2 == 1 {
			em1 = -0.9
		}
		tok[4*τ], tok[4*τ+1], tok[4*τ+2], tok[4*τ+3] = em1, 1+em1, 0.7, 0.2
	}
	return
}

// TestSnapshotsNonTemporal holds the amd64 routines over T tokens of both layouts with a store at
// every token (verification snapshots, which [K][V] f32 writes with non-temporal stores when V is a
// multiple of the lanes and the stores are aligned to a vector, AVX-512 [V][K] f32 when K is whole
// ZMM and the stores are aligned to 64 bytes, and the AVX-512 bf16 routines the same way with half
// the alignment) to T calls of one token of the same kernel (the single-token routine's, the
// register groups' or a one-token pass's ordinary stores; bf16 chained through the f32 carry),
// bit for bit: K and V with and
// without whole vectors, stores aligned and 4, 16 and 32 bytes off, T = 2, 3 and 5, the stores at
// every token or at some only (the last token's after a token without a store is an ordinary one),
// nothing written around them.
func TestSnapshotsNonTemporal(t *testing.T) {
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		r := rand.New(rand.NewPCG(51, 52))
		for l, layout := range []string{"kv", "vk"} {
			f := TokensOf(k).F32[l]
			for _, K := range []int{1, 8, 16, 17, 32, 48, 64, 80, 96, 128} { // [V][K] rows of whole vectors (some positions of the shape dead), and others
				for _, V := range []int{16, 32, 37, 48, 64, 80, 96, 112, 128, 144} { // [K][V] blocks of 1–4 ZMM, 2 and 4 YMM
					hs := K * V
					for _, T := range []int{2, 3, 5} {
						for _, off := range []int{0, 4, 16, 32} {
							for _, pattern := range []string{"every", "last two", "first and last"} {
								what := fmt.Sprintf("%s %s K=%d V=%d T=%d off=%d %s", name, layout, K, V, T, off, pattern)
								at := func(τ int) bool {
									switch pattern {
									case "last two":
										return τ >= T-2
									case "first and last":
										return τ == 0 || τ == T-1
									}
									return true
								}
								src, kh, qh, v, tok := tokenCall(r, K, V, T)
								stores := make([]unsafe.Pointer, T)
								got := make([][]float32, T)
								var checks []func(string)
								for τ := range T {
									if at(τ) {
										s, chk := kerneltest.Guarded[float32](t, hs, off/4)
										got[τ], stores[τ] = s, unsafe.Pointer(&s[0])
										checks = append(checks, chk)
									}
								}
								o := make([]float32, T*V)
								f(K, V, src, stores, kh, qh, v, V, o, tok, nil)
								for _, chk := range checks {
									chk(what + ": a store's guards")
								}
								// The reference: one call per token, from the state the last one stored.
								cur := append([]float32(nil), src...)
								for τ := range T {
									next := make([]float32, hs)
									o1 := make([]float32, V)
									f(K, V, cur, []unsafe.Pointer{unsafe.Pointer(&next[0])}, kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K], v[τ*V:(τ+1)*V], V, o1, tok[4*τ:4*τ+4], nil)
									for j := range o1 {
										if math.Float32bits(o1[j]) != math.Float32bits(o[τ*V+j]) {
											t.Fatalf("%s: o[%d][%d] = %v, one token at a time %v", what, τ, j, o[τ*V+j], o1[j])
										}
									}
									if got[τ] != nil {
										for i := range next {
											if math.Float32bits(next[i]) != math.Float32bits(got[τ][i]) {
												t.Fatalf("%s: store %d [%d] = %v, one token at a time %v", what, τ, i, got[τ][i], next[i])
											}
										}
									}
									cur = next
								}
								// bf16: the same call with bf16 stores and the f32 carry, against T calls
								// of one token chained through the carry (src32), which keeps the state
								// f32 between tokens as one call does.
								src16 := make([]uint16, hs)
								for i, x := range src {
									src16[i] = BF16RNE(x)
								}
								fb := TokensOf(k).BF16[l]
								stores16 := make([]unsafe.Pointer, T)
								var checks16 []func(string)
								got16 := make([][]uint16, T)
								for τ := range T {
									if at(τ) {
										b, chk := kerneltest.Guarded[uint16](t, hs, off/2)
										got16[τ], stores16[τ] = b, unsafe.Pointer(&b[0])
										checks16 = append(checks16, chk)
									}
								}
								o16, carry := make([]float32, T*V), make([]float32, hs)
								fb(K, V, src16, nil, stores16, carry, kh, qh, v, V, o16, tok, nil)
								for _, chk := range checks16 {
									chk(what + " bf16: a store's guards")
								}
								var cur32 []float32
								for τ := range T {
									next := make([]float32, hs)
									st := make([]uint16, hs)
									o1 := make([]float32, V)
									fb(K, V, src16, cur32, []unsafe.Pointer{unsafe.Pointer(&st[0])}, next, kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K], v[τ*V:(τ+1)*V], V, o1, tok[4*τ:4*τ+4], nil)
									for j := range o1 {
										if math.Float32bits(o1[j]) != math.Float32bits(o16[τ*V+j]) {
											t.Fatalf("%s bf16: o[%d][%d] = %v, one token at a time %v", what, τ, j, o16[τ*V+j], o1[j])
										}
									}
									if got16[τ] != nil {
										for i := range st {
											if st[i] != got16[τ][i] {
												t.Fatalf("%s bf16: store %d [%d] = %#04x, one token at a time %#04x", what, τ, i, got16[τ][i], st[i])
											}
										}
									}
									cur32 = next
								}
								for i := range carry {
									if math.Float32bits(carry[i]) != math.Float32bits(cur32[i]) {
										t.Fatalf("%s bf16: carry [%d] = %v, one token at a time %v", what, i, carry[i], cur32[i])
									}
								}
							}
						}
					}
				}
			}
		}
	})
}

// The amd64 bf16 routines over T tokens: in place, and with the gates and k̂ non-finite.

// TestTokensBF16InPlace: every amd64 kernel's bf16 routines, one token stored over its own src
// (the decode step in place), against the same call out of place and against BF16RNE of the f32
// routine, bit for bit: K 1…140, V odd and even, both forms, heads with a poisoned row/column
// in the middle (once's fallback mid-head, after pairs were already stored in place).
func TestTokensBF16InPlace(t *testing.T) {
	nan := func(b uint32) float32 { return math.Float32frombits(b) }
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		tk := TokensOf(k)
		for _, layout := range []stateLayout{layoutKV, layoutVK} {
			l := int(layout)
			f32, bf := tk.F32[l], tk.BF16[l]
			r := rand.New(rand.NewPCG(41, uint64(l)))
			for K := 1; K <= 140; K++ {
				for _, V := range []int{1, 2, 3, 7, 10, 33} {
					for _, em1 := range []float32{-0.03, -0.9} {
						for poison := range 4 {
							vec := func(n int, sd float64) []float32 {
								x := make([]float32, n)
								for i := range x {
									x[i] = float32(sd * r.NormFloat64())
								}
								return x
							}
							src := widenAll(roundAll(vec(K*V, 0.5)))
							kh, qh, v := vec(K, 1/math.Sqrt(float64(K))), vec(K, 1/math.Sqrt(float64(K))), vec(V, 1)
							j := V / 2 // a row (column) in the middle: not the first pair
							switch poison {
							case 1:
								v[j] = nan(0x7fc0ffff)
							case 2:
								src[stateIndex(layout, K, V, r.IntN(K), j)] = float32(math.Inf(1))
							case 3: // k̂_i = 0 where S is Inf: 0·Inf in the dot
								i := r.IntN(K)
								kh[i] = 0
								src[stateIndex(layout, K, V, i, j)] = float32(math.Inf(-1))
							}
							tok := []float32{em1, 1 + em1, 0.7, 0.2}
							want32 := make([]float32, K*V)
							f32(K, V, append([]float32(nil), src...), []unsafe.Pointer{unsafe.Pointer(&want32[0])}, kh, qh, v, V, make([]float32, V), tok, nil)
							want := roundAll(want32)
							src16 := roundAll(src)
							out := make([]uint16, K*V)
							bf(K, V, src16, nil, []unsafe.Pointer{unsafe.Pointer(&out[0])}, nil, kh, qh, v, V, make([]float32, V), tok, nil)
							in := append([]uint16(nil), src16...)
							bf(K, V, in, nil, []unsafe.Pointer{unsafe.Pointer(&in[0])}, nil, kh, qh, v, V, make([]float32, V), tok, nil)
							what := fmt.Sprintf("%s %v K=%d V=%d em1=%v poison=%d", name, layout, K, V, em1, poison)
							for i := range out {
								if out[i] != want[i] {
									t.Fatalf("%s: out of place [%d] = %#x, BF16RNE(f32) %#x", what, i, out[i], want[i])
								}
								if in[i] != want[i] {
									t.Fatalf("%s: in place [%d] = %#x, BF16RNE(f32) %#x", what, i, in[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestTokensBF16NonFiniteGates: TestTokensBF16NonFinite's comparison (bf16 routine = BF16RNE of
// the kernel's own f32 routine, bit for bit) on more shapes (K inside the AVX2 shapes, where
// positions are guarded), more tokens (the AVX-512 [V][K] blocks at T > 1), and poisons the
// finiteDelta argument has to cover: k̂ NaN, k̂_i = 0 under a state ±Inf, the gates NaN or ±Inf,
// em1 = 0 or eg = 0 under a state ±Inf, beta = 0 with v ±Inf, a NaN only at the last token.
func TestTokensBF16NonFiniteGates(t *testing.T) {
	shapes := [][2]int{{8, 9}, {9, 16}, {24, 17}, {33, 8}, {40, 31}, {72, 20}, {100, 17}, {120, 64}, {128, 80}, {64, 81}}
	poisons := []string{"k NaN", "k 0 under Inf", "em1 NaN", "eg NaN", "beta NaN", "beta 0, v Inf", "em1 0 under Inf", "eg 0 under Inf", "v NaN last token", "kq NaN", "eg Inf"}
	nan := func(b uint32) float32 { return math.Float32frombits(b) }
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		tk := TokensOf(k)
		for _, layout := range []stateLayout{layoutKV, layoutVK} {
			l := int(layout)
			r := rand.New(rand.NewPCG(43, uint64(l)))
			for _, T := range []int{1, 3, 6} {
				for _, sh := range shapes {
					K, V := sh[0], sh[1]
					for p := range poisons {
						for _, src32 := range []bool{false, true} {
							c := newTokCase(r, K, V, T, false)
							c.srcF = widenAll(roundAll(c.srcF))
							c.noCarry = !src32
							for τ := range T {
								c.storeAt[τ] = τ == T-1 || r.IntN(2) == 0
							}
							τ := r.IntN(T)
							j := r.IntN(V)
							i := r.IntN(K)
							switch p {
							case 0:
								c.kh[τ*K+i] = nan(0x7fc0ffff)
							case 1:
								c.kh[τ*K+i] = 0
								c.srcF[stateIndex(layout, K, V, i, j)] = float32(math.Inf(1))
							case 2:
								c.tok[4*τ] = nan(0x7fc0ffff)
								c.tok[4*τ+1] = nan(0x7fc0ffff)
							case 3:
								c.tok[4*τ] = -0.9 // far form
								c.tok[4*τ+1] = nan(0x7fc0ffff)
							case 4:
								c.tok[4*τ+2] = nan(0x7fc0ffff)
							case 5:
								c.tok[4*τ+2] = 0
								c.v[τ*c.vs+j] = float32(math.Inf(-1))
							case 6:
								for x := range T {
									c.tok[4*x], c.tok[4*x+1] = 0, 1
								}
								c.srcF[stateIndex(layout, K, V, i, j)] = float32(math.Inf(-1))
							case 7:
								for x := range T {
									c.tok[4*x], c.tok[4*x+1] = -1, 0
								}
								c.srcF[stateIndex(layout, K, V, i, j)] = float32(math.Inf(1))
							case 8:
								c.v[(T-1)*c.vs+j] = nan(0xffc08001)
							case 9:
								c.tok[4*τ+3] = nan(0x7fc0ffff)
							case 10:
								c.tok[4*τ] = -0.9
								c.tok[4*τ+1] = float32(math.Inf(1))
							}
							what := fmt.Sprintf("%s/%v/T=%d/K=%d,V=%d/%s/src32=%v", name, layout, T, K, V, poisons[p], src32)
							bf16AsF32(t, tk, l, src32, c, what)
						}
					}
				}
			}
		}
	})
}

// TestVKInPlace holds the amd64 [V][K] f32 routines, one token stored over its own src (the
// decode step in place), to the same call out of place, bit for bit: K from 1 to 140 (every row
// tail; AVX2's overlapping last vector, whose lanes the vector before it also writes, must be read
// before either is stored), V odd and even (pairs and the one-row group), both decay forms.
func TestVKInPlace(t *testing.T) {
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		f := TokensOf(k).F32[layoutVK]
		r := rand.New(rand.NewPCG(31, 32))
		for K := 1; K <= 140; K++ {
			for _, V := range []int{1, 2, 3, 7} {
				for _, em1 := range []float32{-0.03, -0.9} {
					vec := func(n int, sd float64) []float32 {
						x := make([]float32, n)
						for i := range x {
							x[i] = float32(sd * r.NormFloat64())
						}
						return x
					}
					src := vec(K*V, 0.5)
					kh, qh, v := vec(K, 1/math.Sqrt(float64(K))), vec(K, 1/math.Sqrt(float64(K))), vec(V, 1)
					tok := []float32{em1, 1 + em1, 0.7, 0.2}
					out := make([]float32, K*V)
					oOut, oIn := make([]float32, V), make([]float32, V)
					f(K, V, src, []unsafe.Pointer{unsafe.Pointer(&out[0])}, kh, qh, v, V, oOut, tok, nil)
					in := append([]float32(nil), src...)
					f(K, V, in, []unsafe.Pointer{unsafe.Pointer(&in[0])}, kh, qh, v, V, oIn, tok, nil)
					what := fmt.Sprintf("%s K=%d V=%d em1=%v", name, K, V, em1)
					for i := range out {
						if math.Float32bits(in[i]) != math.Float32bits(out[i]) {
							t.Fatalf("%s: in place [%d] = %v, out of place %v", what, i, in[i], out[i])
						}
					}
					for j := range oOut {
						if math.Float32bits(oIn[j]) != math.Float32bits(oOut[j]) {
							t.Fatalf("%s: o[%d] in place %v, out of place %v", what, j, oIn[j], oOut[j])
						}
					}
				}
			}
		}
	})
}

// TestVKTails runs the amd64 [V][K] routines at every K from 1 to 264 (so every row width of both
// ISAs, every shape boundary of asm/state_vk.go and every guarded vector's boundary on either
// side, and the widths beyond the assembly's range, which the wrappers give to the portable
// routine), every slice between guard bands (runTokens):
//
//   - f32, bf16 (with and without the f32 carry) and bf16 from an f32 src32 against the generic
//     routine, T = 1 and T = 3 (both decay forms), V = 2 (the one-row groups only), V = 1 (avx2: the
//     odd row alone, vkOddRow) and V = 53
//     (with T > 1 an AVX-512 block of 32 rows and one of 16, then a full group and the one-row
//     tail groups);
//   - the f32 routine's state after each token of the T = 3 call, bit for bit, against three
//     calls of T = 1 (those take the register groups; a row's arithmetic must not depend on T).
func TestVKTails(t *testing.T) {
	ref, _ := Lookup("generic")
	rt := TokensOf(ref)
	forEachAmd64(t, func(t *testing.T, name string, k Kernel) {
		tk := TokensOf(k)
		l := int(layoutVK)
		r := rand.New(rand.NewPCG(21, 22))
		for K := 1; K <= 264; K++ {
			Vs := []int{2, 53}
			if name == "avx2" {
				// V = 1: the odd row alone (vkOddRow, the portable arithmetic). Not for the
				// others: one row's max |o| is too small a scale for the relative tolerance.
				Vs = append(Vs, 1)
			}
			for _, V := range Vs {
				for _, T := range []int{1, 3} {
					c := newTokCase(r, K, V, T, false)
					for τ := range T {
						c.storeAt[τ] = true
					}
					for _, st := range []struct {
						bf16, src32, noCarry bool
					}{{false, false, false}, {true, false, false}, {true, true, false}, {true, false, true}} {
						c.noCarry = st.noCarry // (a decode's call: AVX2 takes the pairs' once)
						what := fmt.Sprintf("%s K=%d V=%d T=%d bf16=%v src32=%v carry=%v", name, K, V, T, st.bf16, st.src32, !st.noCarry)
						got := runTokens(t, tk, l, st.bf16, st.src32, c, what)
						want := runTokens(t, rt, l, st.bf16, st.src32, c, what+" (generic)")
						nearTokens(t, what, got, want, st.bf16, !st.noCarry, nil, false)
						if st.bf16 && !st.noCarry {
							kerneltest.EqualBits(t, what+" last store = BF16RNE(carry)", got.bf16[T-1], roundAll(got.carry))
						}
						if st.bf16 || T == 1 {
							continue
						}
						// Token by token, from the state the call started from.
						src := c.srcF
						for τ := range T {
							c1 := tokCase{K: K, V: V, T: 1, vs: c.vs, kh: c.kh[τ*K : (τ+1)*K], qh: c.qh[τ*K : (τ+1)*K],
								v: c.v[τ*c.vs : τ*c.vs+V], tok: c.tok[4*τ : 4*τ+4], srcF: src, storeAt: []bool{true}}
							one := runTokens(t, tk, l, false, false, c1, fmt.Sprintf("%s token %d alone", what, τ))
							kerneltest.EqualBits(t, fmt.Sprintf("%s: state after token %d, alone vs in the call", what, τ), one.stores[0], got.stores[τ])
							kerneltest.EqualBits(t, fmt.Sprintf("%s: o of token %d, alone vs in the call", what, τ), one.o, got.o[τ*V:(τ+1)*V])
							src = one.stores[0]
						}
					}
				}
			}
		}
	})
}
