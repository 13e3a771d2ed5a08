package gdnsimd

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/gdnsimd/gdnsimd/internal/race"
	"github.com/stretchr/testify/require"
)

// The kernels internal/kerneltest runs the tests for (it imports nothing of the module).
func init() { kerneltest.Use(AllNames, Available) }

// Available says whether this CPU/build runs the kernel name.
func Available(name string) bool { _, ok := Lookup(name); return ok }

// The test files: kernel_test.go (the registry, the driver, the portable kernel, the gates),
// pieces_test.go (every kernel's pieces and routines against the portable ones), amd64_test.go,
// amd64_linux_test.go (guard pages), amd64_bench_test.go and arm64_test.go (what the assembly of
// one architecture needs beyond that). What follows gives the tests a kernel's pieces and
// routines as values (Pieces, Tokens).

// Pieces are the vector pieces of one kernel (see impl).
type Pieces struct {
	State func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)
	Gate  func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool)
	L2    func(q, k []float32) (qq, kk, kq float64)
	Scale func(dst, src []float32, f float32)
	Gates gatesFunc
	Chans func(kx, qx, pairs, em1, eg, kh, qh []float32)
}

// PiecesOf returns k's pieces; PiecesOf of the "generic" kernel is the reference.
func PiecesOf(k Kernel) Pieces {
	return Pieces{State: k.im.state, Gate: k.im.gate, L2: k.im.l2, Scale: k.im.scale, Gates: k.im.gates, Chans: k.im.chans}
}

// Tokens are a kernel's state routines over T tokens in the flat signature of the assembly
// (tokensF32, tokensBF16 in tokens_generic.go), by layout (KV, VK); nil where the kernel has none.
// The generic kernel's, wrapped around kvTokens and vkTokens, are the reference.
type Tokens struct {
	F32  [2]func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
	BF16 [2]func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
}

// TokensOf returns k's flat state routines: its cells behind the flat signatures.
func TokensOf(k Kernel) Tokens {
	var t Tokens
	for l := range 2 {
		if c := k.im.cells[0][l]; c != nil {
			t.F32[l] = flatF32(c)
		}
		if c := k.im.cells[1][l]; c != nil {
			t.BF16[l] = flatBF16(c)
		}
	}
	return t
}

// tokensF32 and tokensBF16 are the tests' flat view of a state routine over T = len(tok)/4
// tokens: the stateArgs fields as slices (src32 and carry nil: none; stores[τ] nil: not kept;
// for an f32 routine carry is dropped). The routines keep the state float32 between tokens.
type (
	tokensF32  func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
	tokensBF16 func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
)

// flatHead is the headCall of flat calls, with its own scratch, kept across calls of one shape (a
// flat closure allocates nothing per call then: the benchmarks use them; not for concurrent use).
type flatHead struct{ h headCall }

func (f *flatHead) head(K, V, T int, in stateRef, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) *headCall {
	h := &f.h
	if h.K != K || h.V != V || len(h.dst) != T {
		*h = headCall{K: K, V: V, dst: make([]stateRef, T), tmp: make([]float32, K*V), slab: make([]float32, K*genericBlock),
			stores: make([]unsafe.Pointer, T), zero32: make([]float32, K*V), zero16: make([]uint16, K*V)}
	}
	clear(h.dst)
	h.src, h.kh, h.qh, h.v, h.vs, h.o, h.tok, h.pf, h.nx = in, kh, qh, v, vs, o, tok, pf, stateRef{}
	if pf != nil {
		h.nx = testNx // the next call's state: with a list, as the driver gives both
	}
	return h
}

// testNx is the headCall.nx of the flat routines' calls with a prefetch list (TokensOf: none
// unless a test sets it).
var testNx stateRef

func flatF32(st stateFunc) tokensF32 {
	var f flatHead
	return func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
		h := f.head(K, V, len(tok)/4, stateRef{f32: src}, kh, qh, v, vs, o, tok, pf)
		for τ, p := range stores {
			if p != nil {
				h.dst[τ].f32 = unsafe.Slice((*float32)(p), K*V)
			}
		}
		st(h)
	}
}

func flatBF16(st stateFunc) tokensBF16 {
	var f flatHead
	return func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
		T := len(tok) / 4
		in := stateRef{bits: src, st: StorageBF16}
		if src32 != nil {
			in = stateRef{f32: src32}
		}
		h := f.head(K, V, T, in, kh, qh, v, vs, o, tok, pf)
		for τ, p := range stores {
			if p != nil {
				h.dst[τ].bits, h.dst[τ].st = unsafe.Slice((*uint16)(p), K*V), StorageBF16
			}
		}
		if carry != nil {
			h.dst[T-1].f32 = carry
		}
		st(h)
	}
}

// GatesBoundaryLanes returns the inputs of n lanes whose gates lie at float32 rounding boundaries
// (boundaryLanes, gates_test.go), one slice per input.
func GatesBoundaryLanes(seed uint64, n int) (b, a, alog, dtb []float32) {
	for _, l := range boundaryLanes(rand.New(rand.NewPCG(seed, seed)), n) {
		b, a, alog, dtb = append(b, l.in[0]), append(a, l.in[1]), append(alog, l.in[2]), append(dtb, l.in[3])
	}
	return b, a, alog, dtb
}

// Kernel.RunBatch is the root package's exported function that takes slices (BF16RNE takes a
// number; Kernels, Lookup, AllNames and Formats take nothing), so its lengths are tested here, in
// the dense form (Start, Read, Store nil) and with Start.

// runShape is the dense Batch of the length tests (one token per sequence, Start, Read and
// Store nil): B = 2 sequences, GQA 2 value heads per key head.
const (
	rB, rHK, rHV, rK, rV = 2, 1, 2, 5, 7
	rHeads               = rB * rHV
)

// runSlice is one slice of a dense Batch: its name in the panic message and its length.
type runSlice struct {
	name string
	n    int
	bf16 bool
}

var runSlices = []runSlice{
	{"Q", rB * rHK * rK, false}, {"Key", rB * rHK * rK, false},
	{"Val", rHeads * rV, false}, {"Z", rHeads * rV, false},
	{"Beta", rHeads, false}, {"Gate", rHeads, false},
	{"ALog", rHV, false}, {"DtBias", rHV, false}, {"NormWeight", rV, false},
	{"State", rHeads * rK * rV, false}, {"StoreTo", rHeads * rK * rV, false},
	{"Out", rHeads * rV, true}, {"OutF32", rHeads * rV, false},
}

// runCall is a dense Batch whose every slice lies between guard bands, with extra elements of
// capacity past its length that hold the guard value too.
type runCall struct {
	b       Batch
	scratch *Scratch
	checks  []func(written bool)
}

// newRunCall builds the call with the slice named short one element short (none if "") and extra
// elements of capacity past every slice's length.
func newRunCall(t *testing.T, short string, extra int) *runCall {
	r := rand.New(rand.NewPCG(5, 5))
	c := &runCall{}
	b := &c.b
	f32 := map[string]*[]float32{
		"Q": &b.Q.F32, "Key": &b.Key.F32, "Val": &b.Val.F32, "Z": &b.Z.F32, "Beta": &b.Beta.F32, "Gate": &b.Gate.F32,
		"ALog": &b.ALog, "DtBias": &b.DtBias, "NormWeight": &b.NormWeight,
		"State": &b.State.F32, "StoreTo": &b.StoreTo.F32, "OutF32": &b.OutF32,
	}
	for i, s := range runSlices {
		n := s.n
		if s.name == short {
			n--
		}
		what := fmt.Sprintf("%s (len %d, cap %d)", s.name, n, n+extra)
		output := s.name == "StoreTo" || s.name == "Out" || s.name == "OutF32"
		if s.bf16 {
			buf, check := kerneltest.Guarded[uint16](t, n+extra, i)
			orig := append([]uint16(nil), buf...)
			b.Out = buf[:n]
			c.checks = append(c.checks, func(written bool) {
				check(what)
				if !written {
					kerneltest.EqualBits(t, what, buf, orig)
				}
				kerneltest.EqualBits(t, what+" past its length", buf[n:], orig[n:])
			})
			continue
		}
		buf, check := kerneltest.Guarded[float32](t, n+extra, i)
		if !output {
			for j := range buf[:n] {
				buf[j] = float32(r.NormFloat64())
			}
		}
		orig := append([]float32(nil), buf...)
		*f32[s.name] = buf[:n]
		c.checks = append(c.checks, func(written bool) {
			check(what)
			if !output || !written {
				kerneltest.EqualBits(t, what, buf, orig)
			}
			kerneltest.EqualBits(t, what+" past its length", buf[n:], orig[n:])
		})
	}
	b.KHeads, b.VHeads, b.K, b.V, b.RMSEps, b.N = rHK, rHV, rK, rV, 1e-6, rB
	b.Q.Stride, b.Key.Stride, b.Val.Stride, b.Z.Stride = rHK*rK, rHK*rK, rHV*rV, rHV*rV
	b.Beta.Stride, b.Gate.Stride = rHV, rHV
	b.State.SlotStride, b.StoreTo.SlotStride = rHV*rK*rV, rHV*rK*rV
	c.scratch = new(Scratch)
	return c
}

// check runs every check of the call; written: the outputs may have been written (within their
// lengths).
func (c *runCall) check(written bool) {
	for _, f := range c.checks {
		f(written)
	}
}

// mustPanic calls f and returns the message of the panic it must raise.
func mustPanic(t *testing.T, what string, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s: no panic", what)
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

// TestRunDenseChecksLengths: Kernel.RunBatch of a dense Batch (one token per sequence: Start, Read
// and Store nil) with any slice one element short panics, with the slice's length cut and with
// spare capacity past it (where slicing by capacity would let the assembly write); before it
// writes anything (the outputs keep their guard values) unless the short slice is a pool, whose
// slots are data; never touching a guard band or the spare capacity. With every length right it
// writes only inside its outputs.
func TestRunDenseChecksLengths(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		for _, extra := range []int{0, 3 * rV * rK} {
			c := newRunCall(t, "", extra)
			k.RunBatch(&c.b, 0, rHeads, c.scratch)
			c.check(true)
			for _, s := range runSlices {
				what := fmt.Sprintf("%s one short, %d spare", s.name, extra)
				c := newRunCall(t, s.name, extra)
				msg := mustPanic(t, what, func() { k.RunBatch(&c.b, 0, rHeads, c.scratch) })
				pool := s.name == "State" || s.name == "StoreTo"
				if !pool && !strings.Contains(msg, s.name) {
					t.Errorf("%s: panic %q does not name %s", what, msg, s.name)
				}
				c.check(pool)
			}
		}
		// Arguments no slice length can make right.
		for _, tc := range []struct {
			what   string
			mod    func(*Batch)
			lo, hi int
		}{
			{"lo < 0", nil, -1, rHeads},
			{"lo > hi", nil, 2, 1},
			{"hi > Items", nil, 0, rHeads + 1},
			{"K = 0", func(b *Batch) { b.K = 0 }, 0, rHeads},
			{"V < 0", func(b *Batch) { b.V = -1 }, 0, rHeads},
			{"VHeads % KHeads != 0", func(b *Batch) { b.KHeads, b.VHeads = 2, 3 }, 0, rHeads},
			{"K·V overflows", func(b *Batch) { b.K, b.V = math.MaxInt/2, 3 }, 0, rHeads},
			{"VHeads·K·V overflows", func(b *Batch) { b.K, b.V, b.VHeads = 1<<8, 1<<8, math.MaxInt/(1<<16)+1 }, 0, rHeads},
		} {
			c := newRunCall(t, "", 0)
			if tc.mod != nil {
				tc.mod(&c.b)
			}
			mustPanic(t, tc.what, func() { k.RunBatch(&c.b, tc.lo, tc.hi, c.scratch) })
			c.check(false)
		}
	})
	if n := (Kernel{}).Name(); n != "" {
		t.Errorf("the zero Kernel's name is %q, want \"\"", n)
	}
	mustPanic(t, "the zero Kernel", func() {
		c := newRunCall(t, "", 0)
		Kernel{}.RunBatch(&c.b, 0, rHeads, c.scratch)
	})
}

// TestRunDenseRange: items are independent — a RunBatch of items [lo, hi) of a dense Batch writes
// exactly those items' outputs and states, the bits of a call of every item.
func TestRunDenseRange(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		full := newRunCall(t, "", 0)
		k.RunBatch(&full.b, 0, rHeads, full.scratch)
		// Items [1, 3): sequence 0 head 1 and sequence 1 head 0, key heads 0 and 1.
		c := newRunCall(t, "", 0)
		const lo, hi = 1, 3
		b := c.b
		outs := [][]float32{slices.Clone(b.StoreTo.F32), slices.Clone(b.OutF32)}
		out16 := slices.Clone(b.Out)
		k.RunBatch(&b, lo, hi, c.scratch)
		for i, p := range [][2][]float32{{b.StoreTo.F32, full.b.StoreTo.F32}, {b.OutF32, full.b.OutF32}} {
			per := len(p[0]) / rHeads
			kerneltest.EqualBits(t, "items [1, 3)", p[0][lo*per:hi*per], p[1][lo*per:hi*per])
			kerneltest.EqualBits(t, "items before 1", p[0][:lo*per], outs[i][:lo*per])
			kerneltest.EqualBits(t, "items from 3", p[0][hi*per:], outs[i][hi*per:])
		}
		kerneltest.EqualBits(t, "Out, items [1, 3)", b.Out[lo*rV:hi*rV], full.b.Out[lo*rV:hi*rV])
		kerneltest.EqualBits(t, "Out, other items", append(b.Out[:lo*rV:lo*rV], b.Out[hi*rV:]...), append(out16[:lo*rV:lo*rV], out16[hi*rV:]...))
	})
}

// TestRunBatchChecksLengths: Kernel.RunBatch with any slice of a Batch one element short (with
// spare capacity past it holding guard values) panics, and never writes outside a slice. The
// slices RunBatch checks in O(1) (everything but the pools, whose slots are data) make it panic
// before it writes anything at all.

// placeField returns n elements between guard bands, spare more after them, filled from rnd if
// filled, and a check: the guards and the spare elements unchanged, and the n too unless the
// field is an output that was written.
func placeField[T kerneltest.Elem](t *testing.T, n, spare, off int, filled, output bool, label string, rnd func() T) ([]T, func(written bool)) {
	buf, check := kerneltest.Guarded[T](t, n+spare, off)
	if filled {
		for j := range buf[:n] {
			buf[j] = rnd()
		}
	}
	orig := append([]T(nil), buf...)
	return buf[:n], func(written bool) {
		check(label)
		kerneltest.EqualBits(t, label+" past its length", buf[n:], orig[n:])
		if !output || !written {
			kerneltest.EqualBits(t, label, buf[:n], orig[:n])
		}
	}
}

func TestRunBatchChecksLengths(t *testing.T) {
	const N, T, HK, HV, K, V = 2, 3, 1, 2, 5, 7
	const slot, slots, spare = HV * K * V, 3, 9
	type field struct {
		name   string
		n      int
		f32    *[]float32
		bf16   *[]uint16
		i32    *[]int32
		output bool // written by a successful call
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		for _, f := range Formats() {
			if !k.Implements(f) {
				continue
			}
			for _, short := range []string{"", "Start", "Read", "Store", "Q", "Key", "Val", "Z", "Beta", "Gate",
				"ALog", "DtBias", "NormWeight", "State", "Out", "OutF32"} {
				what := fmt.Sprintf("%v, %s one short", f, short)
				var b Batch
				var pool []float32
				var pool16 []uint16
				fields := []field{
					{name: "Start", n: N + 1, i32: &b.Start}, {name: "Read", n: N, i32: &b.Read}, {name: "Store", n: T, i32: &b.Store},
					{name: "Q", n: (T-1)*(2*HK*K+1) + HK*K, f32: &b.Q.F32}, {name: "Key", n: (T-1)*HK*K + HK*K, f32: &b.Key.F32},
					{name: "Val", n: T * HV * V, f32: &b.Val.F32}, {name: "Z", n: T * HV * V, f32: &b.Z.F32},
					{name: "Beta", n: T * HV, f32: &b.Beta.F32}, {name: "Gate", n: (T-1)*2*HV + HV, f32: &b.Gate.F32},
					{name: "ALog", n: HV, f32: &b.ALog}, {name: "DtBias", n: HV, f32: &b.DtBias}, {name: "NormWeight", n: V, f32: &b.NormWeight},
					{name: "Out", n: T * HV * V, bf16: &b.Out, output: true}, {name: "OutF32", n: T * HV * V, f32: &b.OutF32, output: true},
				}
				if f.Storage != StorageF32 {
					fields = append(fields, field{name: "State", n: slots * slot, bf16: &pool16, output: true})
				} else {
					fields = append(fields, field{name: "State", n: slots * slot, f32: &pool, output: true})
				}
				r := rand.New(rand.NewPCG(7, 7))
				var checks []func(written bool)
				for i, fl := range fields {
					n := fl.n
					if fl.name == short {
						n--
					}
					label := fmt.Sprintf("%s: %s", what, fl.name)
					switch {
					case fl.f32 != nil:
						var chk func(bool)
						*fl.f32, chk = placeField(t, n, spare, i%16, !fl.output, fl.output, label, func() float32 { return float32(r.NormFloat64()) })
						checks = append(checks, chk)
					case fl.bf16 != nil:
						var chk func(bool)
						*fl.bf16, chk = placeField(t, n, spare, i%16, !fl.output || fl.name == "State", fl.output, label, func() uint16 { return BF16RNE(float32(r.NormFloat64())) })
						checks = append(checks, chk)
					default:
						buf, check := kerneltest.Guarded[int32](t, n+spare, i%16)
						copy(buf, map[string][]int32{"Start": {0, 2, 3}, "Read": {0, readZero}, "Store": {noStore, 1, 2}}[fl.name])
						orig := append([]int32(nil), buf...)
						*fl.i32 = buf[:n]
						checks = append(checks, func(bool) {
							check(label)
							kerneltest.EqualBits(t, label, buf, orig)
						})
					}
				}
				b.KHeads, b.VHeads, b.K, b.V, b.RMSEps, b.Format, b.N = HK, HV, K, V, 1e-6, f, N
				b.Q.Stride, b.Key.Stride, b.Val.Stride, b.Z.Stride, b.Beta.Stride, b.Gate.Stride = 2*HK*K+1, HK*K, HV*V, HV*V, HV, 2*HV
				b.State = Pool{F32: pool, BF16: pool16, SlotStride: slot}
				run := func() { k.RunBatch(&b, 0, N*HV, new(Scratch)) }
				if short == "" {
					run()
					for _, c := range checks {
						c(true)
					}
					continue
				}
				msg := mustPanic(t, what, run)
				if short != "State" && !strings.Contains(msg, short) {
					t.Errorf("%s: panic %q does not name %s", what, msg, short)
				}
				for _, c := range checks {
					c(short == "State") // a pool's slots are data: items before the one out of range ran
				}
			}
		}
	})
}

// gate1 is one lane of the scalar gate with its A_log (the kernels take the rate exp64(A_log)):
// beta, em1, eg as gatesGeneric computes them.
func gate1(b, a, alog, dtb float32) (beta, em1, eg float32) {
	var o [3]float32
	gatesGeneric(o[0:1], o[1:2], o[2:3], []float32{b}, []float32{a}, []float32{dtb}, []float64{rate64(alog)}, GateSoftplus, 0)
	return o[0], o[1], o[2]
}

// gate64 is gate1 in float64, before the rounding to float32.
func gate64(b, a, alog, dtb float32) (beta, em1, eg float64) {
	em1, eg = decay64(logDecay64(a, dtb, rate64(alog), GateSoftplus, 0))
	return sigmoid64(b), em1, eg
}

// Rates64 returns the rates exp64(A_log) of the lanes (what the kernels' gates pieces take).
func Rates64(alog []float32) []float64 {
	r := make([]float64, len(alog))
	for i, x := range alog {
		r[i] = rate64(x)
	}
	return r
}

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
		rate := Rates64(in[2])
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
					im.gates(in[4], in[5], in[6], in[0], in[1], in[3], rate, GateSoftplus, 0)
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

// TestCellsFilled: every kernel this build has implements every state format — on amd64 and
// arm64 the assembly kernels too, so no format silently falls back to the portable kernel. A
// kernel listed by AllNames that this CPU lacks is checked where it runs (the CI legs).
func TestCellsFilled(t *testing.T) {
	for _, k := range Kernels() {
		for _, f := range Formats() {
			if !k.Implements(f) {
				t.Errorf("%s/%s: kernel %s does not implement format %v (an empty cell)", runtime.GOARCH, k.Name(), k.Name(), f)
			}
		}
	}
	if len(Formats()) != 4 {
		t.Fatalf("Formats() = %v, want the 4 layouts × storages", Formats())
	}
}

// TestFloors: FloorScale scales exactly len(x) elements (guard bands at every length and offset)
// and FloorFMA takes any n (none run for n ≤ 0); kernels without floors report so.
func TestFloors(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		for n := 0; n <= 70; n++ {
			x, check := kerneltest.Guarded[float32](t, n, n%16)
			for i := range x {
				x[i] = float32(i + 1)
			}
			if !k.FloorScale(x, 2) {
				if name != "generic" && name != "neon" {
					t.Fatalf("%s has no FloorScale", name)
				}
				return
			}
			check(name)
			for i, v := range x {
				if v != float32(2*(i+1)) {
					t.Fatalf("%s n=%d: x[%d] = %v, want %v", name, n, i, v, 2*(i+1))
				}
			}
		}
		for _, n := range []int{math.MinInt, -1, 0, 1, 3} {
			if l, c := k.FloorFMA(n); l != 8 && l != 16 || c < 8 {
				t.Fatalf("%s: FloorFMA(%d) lanes %d, chains %d", name, n, l, c)
			}
		}
	})
}

// ulpDiff is the distance in float32 ulps between two finite floats of the same sign.
func ulpDiff(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	return max(d, -d)
}

// TestExp32 holds exp32 within 2 ulp of the correctly rounded exp over its whole unclamped range,
// and checks the clamps and NaN.
func TestExp32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	worst := int64(0)
	for i := 0; i < 1_000_000; i++ {
		x := float32(-87.3 + r.Float64()*(88+87.3))
		if i%4 == 0 {
			x = float32(r.NormFloat64())
		}
		got, want := exp32(x), float32(math.Exp(float64(x)))
		d := ulpDiff(got, want)
		worst = max(worst, d)
		require.LessOrEqual(t, d, int64(2), "exp32(%g) = %g, want %g", x, got, want)
	}
	t.Logf("worst error %d ulp", worst)
	require.Equal(t, float32(1), exp32(0))
	require.Equal(t, exp32(88), exp32(1000))
	require.Equal(t, exp32(88), exp32(float32(math.Inf(1))))
	require.Equal(t, exp32(-87.33654), exp32(-1000))
	require.Greater(t, exp32(-1000), float32(0))
	require.False(t, math.IsInf(float64(exp32(88)), 0))
	require.True(t, math.IsNaN(float64(exp32(float32(math.NaN())))))
}

// TestSilu32 checks the gate function against float64 silu.
func TestSilu32(t *testing.T) {
	for z := float32(-120); z <= 120; z += 0.0137 {
		want := float64(z) / (1 + math.Exp(-float64(z)))
		got := float64(silu32(z))
		require.InDelta(t, want, got, 4e-7*math.Abs(want)+1e-33, "silu(%g)", z)
	}
	require.True(t, math.IsNaN(float64(silu32(float32(math.NaN())))))
}

// TestBF16RNE compares the float32 → bf16 rounding with oracle.BF16's rounding of the same value
// (an independent float64 implementation) on every class of input, ties included.
func TestBF16RNE(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	check := func(u uint32) {
		f := math.Float32frombits(u)
		got := BF16RNE(f)
		if math.IsNaN(float64(f)) {
			require.Equal(t, uint16(0x7f80), got&0x7f80, "NaN %08x → %04x", u, got)
			require.NotZero(t, got&0x7f, "NaN %08x → %04x is not a NaN", u, got)
			require.Equal(t, uint16(u>>16)&0x8000, got&0x8000, "NaN sign")
			return
		}
		require.Equal(t, oracle.BF16(float64(f)), got, "BF16RNE(%g = %08x)", f, u)
	}
	for i := 0; i < 2_000_000; i++ {
		check(r.Uint32())
	}
	for _, u := range []uint32{0, 0x80000000, 0x00000001, 0x00008000, 0x00018000, 0x00028000, 0x3f808000,
		0x3f818000, 0x3f80ffff, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7fffff, 0x7f800000, 0xff800000,
		0x7fc00000, 0x7f800001, 0xffffffff, 0x007fffff, 0x00800000} {
		check(u)
	}
	for hi := uint32(0); hi < 1<<16; hi++ { // every tie and its neighbours
		for _, lo := range []uint32{0x7fff, 0x8000, 0x8001} {
			check(hi<<16 | lo)
		}
	}
}

// TestAPI holds the package's exported identifiers (types, functions, constants and variables at
// package level, in every non-test file whatever its build tags) to the eleven of the package
// documentation, and their exported methods to those package gdn and bench call: anything else
// the kernel layer needs stays unexported or goes into internal/.
func TestAPI(t *testing.T) {
	ents, err := os.ReadDir(".")
	require.NoError(t, err)
	var got, methods []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					got = append(got, d.Name.Name)
				}
				if d.Recv != nil && d.Name.IsExported() {
					recv := d.Recv.List[0].Type
					if st, ok := recv.(*ast.StarExpr); ok {
						recv = st.X
					}
					methods = append(methods, fmt.Sprint(recv)+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						if sp.Name.IsExported() {
							got = append(got, sp.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if n.IsExported() {
								got = append(got, n.Name)
							}
						}
					}
				}
			}
		}
	}
	require.ElementsMatch(t, []string{"Kernel", "Kernels", "Lookup", "AllNames", "Batch", "Rows", "Pool", "Scratch", "Format", "Formats", "BF16RNE",
		"Storage", "StorageF32", "StorageBF16", "GateForm", "GateSoftplus", "GateBounded"}, got)
	// Their methods: each one what gdn or bench calls (no test-only API).
	require.ElementsMatch(t, []string{"Kernel.Name", "Kernel.RunBatch", "Kernel.Implements", "Kernel.FloorScale", "Kernel.FloorFMA",
		"Batch.Items", "Batch.Cost", "Batch.StoreConv", "Format.String", "Storage.String"}, methods)
}

// TestLayout holds the repository root to the house rules: the design card's names, LICENSE,
// CHANGELOG.md, go.sum, gen.go, Go files (the kernel layer's rooms, the generated stubs and
// tables), at most 8 test files, and the directories doc, internal and testdata; README.md at
// most 120 lines, CHANGELOG.md 80, doc/performance.md 200. The size of each room is TestSizes'.
func TestLayout(t *testing.T) {
	ents, err := os.ReadDir(".")
	require.NoError(t, err)
	allowed := map[string]bool{
		"go.mod": true, "asm": true, "gdn": true, "gdn_amd64.s": true, "gdn_arm64.s": true, "gdn_generic.go": true, "fuzz": true, "bench": true, "README.md": true, // the design card
		"LICENSE": true, "CHANGELOG.md": true, "go.sum": true, "gen.go": true, "doc": true, "internal": true, "testdata": true,
	}
	var tests []string
	for _, e := range ents {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, "."), allowed[n]:
		case strings.HasSuffix(n, "_test.go"):
			tests = append(tests, n)
		case strings.HasSuffix(n, ".go"):
		default:
			t.Errorf("%s does not belong at the root", n)
		}
	}
	require.LessOrEqual(t, len(tests), 8, "test files at the root: %v", tests)
	// The docs a user reads first stay short.
	for name, most := range map[string]int{"README.md": 120, "CHANGELOG.md": 80, "doc/performance.md": 200} {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		require.LessOrEqual(t, strings.Count(string(b), "\n"), most, "%s: lines", name)
	}
}

// TestSizes holds the hand-written code to the sizes that keep its rooms livable (doc/design.md):
// library files at the root and in gdn/ at most 600 lines and their functions 80; the generators'
// files (asm/) 900 and their functions 150; bench/ and internal/ functions 120. Tests and generated
// files are not counted; a function's lines run from its func keyword to its closing brace.
func TestSizes(t *testing.T) {
	rules := []struct {
		dir       string
		sub       bool // the directory's subdirectories too
		file, fun int  // 0: no cap
	}{{".", false, 600, 80}, {"gdn", false, 600, 80}, {"asm", true, 900, 150}, {"bench", true, 0, 120}, {"internal", true, 0, 120}}
	for _, r := range rules {
		files := 0
		err := filepath.WalkDir(r.dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				if err == nil && path != r.dir && !r.sub {
					return filepath.SkipDir
				}
				return err
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil || strings.HasPrefix(string(src), "// Code generated ") {
				return err
			}
			files++
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
			if err != nil {
				return err
			}
			if n := fset.Position(f.End()).Line; r.file > 0 && n > r.file {
				t.Errorf("%s: %d lines (at most %d)", path, n, r.file)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > r.fun {
					t.Errorf("%s:%d: func %s is %d lines (at most %d)", path, fset.Position(fd.Pos()).Line, fd.Name.Name, n, r.fun)
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.NotZero(t, files, "no hand-written Go files under %s", r.dir)
	}
}

// TestStateArgs holds the compiler's layout of stateArgs to the offsets the generators gave the
// assembly (stateArgsOffsets, stateArgsSize: gdn_args.go).
func TestStateArgs(t *testing.T) {
	ty := reflect.TypeFor[stateArgs]()
	named := 0
	for i := range ty.NumField() {
		f := ty.Field(i)
		if f.Name == "_" {
			continue
		}
		named++
		off, ok := stateArgsOffsets[f.Name]
		require.True(t, ok, "field %s has no offset", f.Name)
		require.Equal(t, off, f.Offset, "field %s", f.Name)
	}
	require.Equal(t, len(stateArgsOffsets), named)
	require.Equal(t, uintptr(stateArgsSize), ty.Size())
}

// TestRegistry: generic is always present and last, Lookup agrees.
func TestRegistry(t *testing.T) {
	var names []string
	for _, k := range Kernels() {
		names = append(names, k.Name())
	}
	require.NotEmpty(t, names)
	require.Equal(t, "generic", names[len(names)-1])
	for _, n := range names {
		k, ok := Lookup(n)
		require.True(t, ok)
		require.Equal(t, n, k.Name())
		require.Contains(t, AllNames(), n)
	}
	_, ok := Lookup("nope")
	require.False(t, ok)
}

// The driver runs the value heads of a GQA group together, sharing the k-head's prepared rows
// (and, over sequences longer than a chunk, at most a few heads at once, each with its own
// carry). These tests hold it to what an item is on its own: every (kernel, format, GQA order)
// on shapes whose groups have 1, 2, 5, 9 and 22 value heads (9, 5 and 22 more than the driver takes
// at once; 66 value heads: more than a chunk's 64 lanes of gates), sequences of 130 (three chunks), 70, 65, 64, 2, 1 and 0 tokens, Pad, Zero, in place
// and with snapshots.

// driverShape is one shape of the tests.
type driverShape struct{ HK, HV, K, V int }

// (The first two have the same K and V: the second's groups need more carries than the first's,
// from the same Scratch.)
var driverShapes = []driverShape{{4, 4, 12, 20}, {1, 9, 12, 20}, {2, 10, 16, 9}, {3, 6, 9, 16}, {3, 66, 4, 8}}

// driverLens are the tests' sequence lengths: two of 1 and two of 64 tokens one after the other
// (a cache of prepared rows keyed without the sequence would hand the second those of the first).
var driverLens = []int{130, 1, 1, 0, 64, 64, 65, 2, 70}

// kHead is the k-head value head h reads (SPEC Part A), written out here independently of the
// driver.
func kHead(h, HK, HV int, tiled bool) int {
	if tiled {
		return h % HK
	}
	return h / (HV / HK)
}

// driverBatch returns a batch of shape d: in place (Store nil; one sequence padding) or, with
// stores, sequences reading Zero, shared slots and their own chain of snapshot slots (after token
// 5, after token 63 — the end of the first chunk — and after the last token; the end of the
// second chunk, token 127, is not stored). Rows are f32, or bf16 with bf16Rows; Beta and Gate have
// strides of VHeads + 1 and VHeads + 3 (NaN between the rows). It also returns the same batch with
// the q/k rows expanded (KHeads = VHeads, v-head h's copy of its k-head's row at h) and Beta and
// Gate packed (Stride VHeads), whose items compute the same bits without any GQA group.
func driverBatch(r *rand.Rand, d driverShape, f Format, tiled, stores, bf16Rows bool) (b, expanded Batch) {
	N := len(driverLens)
	start := make([]int32, N+1)
	for n, l := range driverLens {
		start[n+1] = start[n] + int32(l)
	}
	T := int(start[N])
	var read, store []int32
	slots := N
	if stores {
		read = []int32{readZero, 0, 1, 1, readZero, 2, 1, readPad, 2}
		store = make([]int32, T)
		slots = 3
		for n, l := range driverLens {
			for τ := range l {
				t := int(start[n]) + τ
				store[t] = noStore
				if read[n] != readPad && (τ == 5 || τ == 63 || τ == l-1) {
					store[t] = int32(slots)
					slots++
				}
			}
		}
	} else {
		read = []int32{0, 1, 2, 3, 4, 5, 6, readPad, 7}
	}
	vec := func(n int, mean, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + sd*r.NormFloat64())
		}
		return x
	}
	rows := func(x []float32, width int) Rows {
		if !bf16Rows {
			return Rows{F32: x, Stride: width}
		}
		y := make([]uint16, len(x))
		for i, v := range x {
			y[i] = BF16RNE(v)
		}
		return Rows{BF16: y, Stride: width}
	}
	q, k := vec(T*d.HK*d.K, 0, 1), vec(T*d.HK*d.K, 0, 1)
	b = Batch{
		KHeads: d.HK, VHeads: d.HV, K: d.K, V: d.V, RMSEps: 1e-6,
		ALog: vec(d.HV, 0, 0.5), DtBias: vec(d.HV, 0, 1), NormWeight: vec(d.V, 1, 0.2),
		Format: f, GQATiled: tiled, N: N, Start: start, Read: read, Store: store,
		Out: make([]uint16, T*d.HV*d.V), OutF32: make([]float32, T*d.HV*d.V),
	}
	b.Q, b.Key = rows(q, d.HK*d.K), rows(k, d.HK*d.K)
	b.Val, b.Z = rows(vec(T*d.HV*d.V, 0, 1), d.HV*d.V), rows(vec(T*d.HV*d.V, 0, 1), d.HV*d.V)
	beta, gate := vec(T*d.HV, 0, 1), vec(T*d.HV, -1, 1.5)
	spread := func(x []float32, stride int) Rows { // x's rows stride apart, NaN between
		y := make([]float32, T*stride)
		for t := range T {
			copy(y[t*stride:], x[t*d.HV:(t+1)*d.HV])
			for i := d.HV; i < stride; i++ {
				y[t*stride+i] = float32(math.NaN())
			}
		}
		return rows(y, stride)
	}
	b.Beta, b.Gate = spread(beta, d.HV+1), spread(gate, d.HV+3)
	for i := range b.Out {
		b.Out[i], b.OutF32[i] = kerneltest.Poison16, math.Float32frombits(kerneltest.Poison32)
	}
	slot := d.HV * d.K * d.V
	b.State.SlotStride = slot
	state := vec(slots*slot, 0, 0.3)
	if f.Storage != StorageF32 {
		b.State.BF16 = roundAll(state)
	} else {
		b.State.F32 = state
	}
	expanded = b
	expanded.KHeads = d.HV
	eq, ek := make([]float32, T*d.HV*d.K), make([]float32, T*d.HV*d.K)
	for t := range T {
		for h := range d.HV {
			hk := kHead(h, d.HK, d.HV, tiled)
			copy(eq[(t*d.HV+h)*d.K:][:d.K], q[(t*d.HK+hk)*d.K:][:d.K])
			copy(ek[(t*d.HV+h)*d.K:][:d.K], k[(t*d.HK+hk)*d.K:][:d.K])
		}
	}
	expanded.Q, expanded.Key = rows(eq, d.HV*d.K), rows(ek, d.HV*d.K)
	expanded.Beta, expanded.Gate = rows(beta, d.HV), rows(gate, d.HV)
	return b, expanded
}

// outputs is a copy of b with its own pool and outputs (the inputs shared).
func outputs(b Batch) Batch {
	b.State.F32 = clone(b.State.F32)
	b.State.BF16 = clone(b.State.BF16)
	b.Out, b.OutF32 = clone(b.Out), clone(b.OutF32)
	return b
}

func clone[E any](x []E) []E {
	if x == nil {
		return nil
	}
	return append([]E(nil), x...)
}

// itemRegions calls f with the offset and length of every region item w of b writes: its output
// rows (in Out and OutF32) and its head in the slots it stores to (in State).
func itemRegions(b *Batch, w int, out, pool func(off, n int)) {
	n, h := w/b.VHeads, w%b.VHeads
	t0, t1 := int(b.Start[n]), int(b.Start[n+1])
	for t := t0; t < t1; t++ {
		out((t*b.VHeads+h)*b.V, b.V)
	}
	hs := b.K * b.V
	switch {
	case b.Read[n] == readPad || t0 == t1:
	case b.Store == nil:
		pool(int(b.Read[n])*b.State.SlotStride+h*hs, hs)
	default:
		for t := t0; t < t1; t++ {
			if s := b.Store[t]; s >= 0 {
				pool(int(s)*b.State.SlotStride+h*hs, hs)
			}
		}
	}
}

// equalOutputs fails t unless got's pool and outputs have want's bits.
func equalOutputs(t *testing.T, what string, got, want *Batch) {
	t.Helper()
	kerneltest.EqualBits(t, what+": State.F32", got.State.F32, want.State.F32)
	kerneltest.EqualBits(t, what+": State.BF16", got.State.BF16, want.State.BF16)
	kerneltest.EqualBits(t, what+": OutF32", got.OutF32, want.OutF32)
	kerneltest.EqualBits(t, what+": Out", got.Out, want.Out)
}

// TestDriverGroups: for every kernel and format, both GQA orders, in place and with snapshots,
// f32 and bf16 rows, a batch gives the bits of its GQA-expanded twin run one item at a time with
// a fresh Scratch; run whole, and as ranges of items that start and end anywhere (inside a group
// too): a range writes exactly its items' outputs and states, nothing of any other item. One
// Scratch serves all of a kernel's calls, over shapes and batches.
func TestDriverGroups(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		s := new(Scratch)
		for _, f := range Formats() {
			if !k.Implements(f) {
				continue
			}
			for i, d := range driverShapes {
				for _, tiled := range []bool{false, true} {
					for _, stores := range []bool{false, true} {
						what := fmt.Sprintf("%v/HK=%d,HV=%d,K=%d,V=%d/tiled=%v/stores=%v/bf16rows=%v", f, d.HK, d.HV, d.K, d.V, tiled, stores, i%2 == 1)
						r := rand.New(rand.NewPCG(uint64(i), uint64(boolInt(tiled)<<1|boolInt(stores))))
						b, expanded := driverBatch(r, d, f, tiled, stores, i%2 == 1)
						items := b.Items()
						want := outputs(expanded)
						for w := range items {
							k.RunBatch(&want, w, w+1, new(Scratch))
						}
						got := outputs(b)
						k.RunBatch(&got, 0, items, s)
						equalOutputs(t, what+": whole", &got, &want)
						for range 6 {
							lo := r.IntN(items)
							hi := lo + 1 + r.IntN(min(items-lo, 2*d.HV))
							got := outputs(b)
							k.RunBatch(&got, lo, hi, s)
							part := outputs(b) // the initial values, and want's in items [lo, hi)
							for w := lo; w < hi; w++ {
								itemRegions(&b, w, func(off, n int) {
									copy(part.Out[off:off+n], want.Out[off:off+n])
									copy(part.OutF32[off:off+n], want.OutF32[off:off+n])
								}, func(off, n int) {
									if f.Storage != StorageF32 {
										copy(part.State.BF16[off:off+n], want.State.BF16[off:off+n])
									} else {
										copy(part.State.F32[off:off+n], want.State.F32[off:off+n])
									}
								})
							}
							equalOutputs(t, fmt.Sprintf("%s: items [%d, %d)", what, lo, hi), &got, &part)
						}
					}
				}
			}
		}
	})
}

// TestDriverZeroAllocs: once a Scratch has grown, RunBatch allocates nothing, with groups larger
// than the driver takes at once over several chunks, in every format and GQA order.
func TestDriverZeroAllocs(t *testing.T) {
	if testing.CoverMode() != "" || race.Enabled {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		for _, f := range Formats() {
			if !k.Implements(f) {
				continue
			}
			for _, d := range driverShapes[1:3] {
				for _, tiled := range []bool{false, true} {
					b, _ := driverBatch(rand.New(rand.NewPCG(1, 2)), d, f, tiled, true, false)
					s := new(Scratch)
					if n := testing.AllocsPerRun(5, func() { k.RunBatch(&b, 0, b.Items(), s) }); n != 0 {
						t.Errorf("%v/HK=%d,HV=%d/tiled=%v: %v allocations per call", f, d.HK, d.HV, tiled, n)
					}
				}
			}
		}
	})
}

// BenchmarkDriver is Kernel.RunBatch alone (no validation, no workers) on the Qwen3-Next layer
// (HK = 16, HV = 32, K = V = 128), f32 rows, in place from slot n: a prefill of T = 512 tokens at
// B = 1 and a decode step at B = 64, every kernel, format and GQA order. It is the driver's share
// of BenchmarkRun without the single-token calls BenchmarkRun adds for its xstep metric, so that
// a CPU profile of it attributes the driver's parts (gather, l2, scalars, routine, gate) to the
// prefill alone: go test -run NONE -bench 'Driver/.*/T=512' -cpuprofile cpu.out .
func BenchmarkDriver(b *testing.B) {
	for _, k := range Kernels() {
		for _, f := range Formats() {
			if !k.Implements(f) {
				continue
			}
			for _, tiled := range []bool{false, true} {
				for _, c := range []struct{ B, T int }{{1, 512}, {64, 1}} {
					name := fmt.Sprintf("kernel=%s/format=%v/tiled=%v/T=%d,B=%d", k.Name(), f, tiled, c.T, c.B)
					b.Run(name, func(b *testing.B) {
						bt := benchBatch(f, tiled, c.B, c.T)
						s := new(Scratch)
						k.RunBatch(bt, 0, bt.Items(), s)
						b.ReportAllocs()
						b.ResetTimer()
						for range b.N {
							k.RunBatch(bt, 0, bt.Items(), s)
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.B*c.T*bt.VHeads), "ns/head-token")
					})
				}
			}
		}
	}
}

// benchBatch is BenchmarkDriver's batch: B sequences of T tokens, sequence n in place in slot n,
// with the value distributions of package bench.
func benchBatch(f Format, tiled bool, B, T int) *Batch {
	const HK, HV, K, V = 16, 32, 128, 128
	r := rand.New(rand.NewPCG(uint64(B), uint64(T)))
	vec := func(n int, mean, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + sd*r.NormFloat64())
		}
		return x
	}
	rows := func(width int, mean, sd float64) Rows {
		return Rows{F32: vec(B*T*width, mean, sd), Stride: width}
	}
	bt := &Batch{
		KHeads: HK, VHeads: HV, K: K, V: V, RMSEps: 1e-6,
		ALog: vec(HV, 0, 0.5), DtBias: vec(HV, 0, 1), NormWeight: vec(V, 1, 0.2),
		Format: f, GQATiled: tiled, N: B, Start: make([]int32, B+1),
		Q: rows(HK*K, 0, 1), Key: rows(HK*K, 0, 1), Val: rows(HV*V, 0, 1), Z: rows(HV*V, 0, 1),
		Beta: rows(HV, 0, 1), Gate: rows(HV, -1, 1.5),
		Out: make([]uint16, B*T*HV*V),
	}
	for n := range B {
		bt.Start[n+1] = int32((n + 1) * T)
	}
	state := vec(B*HV*K*V, 0, 0.05)
	bt.State.SlotStride = HV * K * V
	if f.Storage != StorageF32 {
		bt.State.BF16 = roundAll(state)
	} else {
		bt.State.F32 = state
	}
	return bt
}

// roundAll returns BF16RNE of every element.
func roundAll(x []float32) []uint16 {
	b := make([]uint16, len(x))
	for i, f := range x {
		b[i] = BF16RNE(f)
	}
	return b
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestConvWidthLimit ties the driver's conv width limit (maxConvW) to gdn.MaxConvWidth, the one a
// Config may ask for (read from gdn/gdn.go: package gdn imports this one, not the reverse), and
// holds RunBatch to it: a Batch of ConvW maxConvW + 1 panics.
func TestConvWidthLimit(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "gdn/gdn.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && vs.Names[0].Name == "MaxConvWidth" {
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Value != fmt.Sprint(maxConvW) {
				t.Errorf("gdn.MaxConvWidth = %v, the driver's maxConvW = %d", vs.Values[0], maxConvW)
			}
			found = true
		}
		return true
	})
	if !found {
		t.Fatal("gdn/gdn.go declares no MaxConvWidth")
	}
	b := Batch{KHeads: 1, VHeads: 1, K: 1, V: 1, ConvW: maxConvW + 1}
	msg := mustPanic(t, "ConvW past maxConvW", func() { b.checkConv() })
	if !strings.Contains(msg, fmt.Sprintf("want 2..%d", maxConvW)) {
		t.Errorf("panic %q", msg)
	}
}
