package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// Kernel.Run and Kernel.RunBatch are the root package's exported functions that take slices
// (Exp32, Silu32 and BF16RNE take numbers; Kernels, Names, Default, Lookup, AllNames and Formats
// take nothing), so they are the ones whose lengths are tested here.

// runShape is the Step of the length tests: B = 2 sequences, GQA 2 value heads per key head.
const (
	rB, rHK, rHV, rK, rV = 2, 1, 2, 5, 7
	rHeads               = rB * rHV
)

// runSlice is one slice of a Run call: its name in the panic message and its length.
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
	{"StateIn", rHeads * rK * rV, false}, {"StateOut", rHeads * rK * rV, false},
	{"Out", rHeads * rV, true}, {"OutF32", rHeads * rV, false},
}

// runCall is a Run call whose every slice lies between guard bands, with extra elements of
// capacity past its length that hold the guard value too.
type runCall struct {
	st      gdnsimd.Step
	scratch *gdnsimd.Scratch
	checks  []func(written bool)
}

// newRunCall builds the call with the slice named short one element short (none if "") and extra
// elements of capacity past every slice's length.
func newRunCall(t *testing.T, short string, extra int) *runCall {
	r := rand.New(rand.NewPCG(5, 5))
	c := &runCall{}
	f32 := map[string]*[]float32{
		"Q": &c.st.Q, "Key": &c.st.Key, "Val": &c.st.Val, "Z": &c.st.Z, "Beta": &c.st.Beta, "Gate": &c.st.Gate,
		"ALog": &c.st.ALog, "DtBias": &c.st.DtBias, "NormWeight": &c.st.NormWeight,
		"StateIn": &c.st.StateIn, "StateOut": &c.st.StateOut, "OutF32": &c.st.OutF32,
	}
	for i, s := range runSlices {
		n := s.n
		if s.name == short {
			n--
		}
		what := fmt.Sprintf("%s (len %d, cap %d)", s.name, n, n+extra)
		output := s.name == "StateOut" || s.name == "Out" || s.name == "OutF32"
		if s.bf16 {
			buf, check := kerneltest.Guarded[uint16](t, n+extra, i)
			orig := append([]uint16(nil), buf...)
			c.st.Out = buf[:n]
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
	c.st.KHeads, c.st.VHeads, c.st.K, c.st.V, c.st.RMSEps = rHK, rHV, rK, rV, 1e-6
	c.scratch = new(gdnsimd.Scratch)
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

// TestRunChecksLengths: Kernel.Run with any slice one element short panics before it writes
// anything (the outputs keep their guard values, no guard band or spare capacity is touched),
// with the slice's length cut and with spare capacity past it (where slicing by capacity would
// let the assembly write). With every length right it writes only inside its outputs.
func TestRunChecksLengths(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := gdnsimd.Lookup(name)
		for _, extra := range []int{0, 3 * rV * rK} {
			c := newRunCall(t, "", extra)
			k.Run(&c.st, 0, rHeads, c.scratch)
			c.check(true)
			for _, s := range runSlices {
				what := fmt.Sprintf("%s one short, %d spare", s.name, extra)
				c := newRunCall(t, s.name, extra)
				msg := mustPanic(t, what, func() { k.Run(&c.st, 0, rHeads, c.scratch) })
				if !strings.Contains(msg, s.name) {
					t.Errorf("%s: panic %q does not name %s", what, msg, s.name)
				}
				c.check(false)
			}
		}
		// Arguments no slice length can make right.
		for _, tc := range []struct {
			what   string
			mod    func(*gdnsimd.Step)
			lo, hi int
		}{
			{"lo < 0", nil, -1, rHeads},
			{"lo > hi", nil, 2, 1},
			{"K = 0", func(s *gdnsimd.Step) { s.K = 0 }, 0, rHeads},
			{"V < 0", func(s *gdnsimd.Step) { s.V = -1 }, 0, rHeads},
			{"VHeads % KHeads != 0", func(s *gdnsimd.Step) { s.KHeads, s.VHeads = 2, 3 }, 0, rHeads},
			{"K·V overflows", func(s *gdnsimd.Step) { s.K, s.V = math.MaxInt/2, 3 }, 0, rHeads},
			{"hi·K·V overflows", func(s *gdnsimd.Step) { s.K, s.V = 1<<8, 1<<8 }, 0, math.MaxInt/(1<<16) + 1},
		} {
			c := newRunCall(t, "", 0)
			if tc.mod != nil {
				tc.mod(&c.st)
			}
			mustPanic(t, tc.what, func() { k.Run(&c.st, tc.lo, tc.hi, c.scratch) })
			c.check(false)
		}
	})
	if n := (gdnsimd.Kernel{}).Name(); n != "" {
		t.Errorf("the zero Kernel's name is %q, want \"\"", n)
	}
	mustPanic(t, "the zero Kernel", func() {
		c := newRunCall(t, "", 0)
		gdnsimd.Kernel{}.Run(&c.st, 0, rHeads, c.scratch)
	})
}

// TestRunRange: a Run of heads [lo, hi) needs the slices only as far as those heads reach.
func TestRunRange(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := gdnsimd.Lookup(name)
		full := newRunCall(t, "", 0)
		k.Run(&full.st, 0, rHeads, full.scratch)
		// Heads [1, 3): sequence 0 head 1 and sequence 1 head 0, key heads 0 and 1.
		c := newRunCall(t, "", 0)
		const lo, hi = 1, 3
		st := c.st
		st.Q, st.Key = st.Q[:2*rK], st.Key[:2*rK]
		st.Val, st.Z, st.Out, st.OutF32 = st.Val[:hi*rV], st.Z[:hi*rV], st.Out[:hi*rV], st.OutF32[:hi*rV]
		st.Beta, st.Gate = st.Beta[:hi], st.Gate[:hi]
		st.StateIn, st.StateOut = st.StateIn[:hi*rK*rV], st.StateOut[:hi*rK*rV]
		k.Run(&st, lo, hi, c.scratch)
		kerneltest.EqualBits(t, "StateOut", st.StateOut[lo*rK*rV:], full.st.StateOut[lo*rK*rV:hi*rK*rV])
		kerneltest.EqualBits(t, "OutF32", st.OutF32[lo*rV:], full.st.OutF32[lo*rV:hi*rV])
		kerneltest.EqualBits(t, "Out", st.Out[lo*rV:], full.st.Out[lo*rV:hi*rV])
		st.Q = st.Q[:2*rK-1]
		msg := mustPanic(t, "heads [1, 3) with Q one short of key head 1", func() { k.Run(&st, lo, hi, c.scratch) })
		if !strings.Contains(msg, "Q") {
			t.Errorf("panic %q does not name Q", msg)
		}
	})
}

// TestRunBatchChecksLengths: Kernel.RunBatch with any slice of a Batch one element short (with
// spare capacity past it holding guard values) panics, and never writes outside a slice. The
// slices RunBatch checks in O(1) (everything but the pools, whose slots are data) make it panic
// before it writes anything at all.
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
		k, _ := gdnsimd.Lookup(name)
		for _, f := range gdnsimd.Formats() {
			if !k.Implements(f) {
				continue
			}
			for _, short := range []string{"", "Start", "Read", "Store", "Q", "Key", "Val", "Z", "Beta", "Gate",
				"ALog", "DtBias", "NormWeight", "State", "Out", "OutF32"} {
				what := fmt.Sprintf("%v, %s one short", f, short)
				var b gdnsimd.Batch
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
				if f.BF16 {
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
						buf, check := kerneltest.Guarded[float32](t, n+spare, i%16)
						if !fl.output {
							for j := range buf[:n] {
								buf[j] = float32(r.NormFloat64())
							}
						}
						orig := append([]float32(nil), buf...)
						*fl.f32 = buf[:n]
						out := fl.output
						checks = append(checks, func(written bool) {
							check(label)
							kerneltest.EqualBits(t, label+" past its length", buf[n:], orig[n:])
							if !out || !written {
								kerneltest.EqualBits(t, label, buf[:n], orig[:n])
							}
						})
					case fl.bf16 != nil:
						buf, check := kerneltest.Guarded[uint16](t, n+spare, i%16)
						if !fl.output || fl.name == "State" {
							for j := range buf[:n] {
								buf[j] = gdnsimd.BF16RNE(float32(r.NormFloat64()))
							}
						}
						orig := append([]uint16(nil), buf...)
						*fl.bf16 = buf[:n]
						out := fl.output
						checks = append(checks, func(written bool) {
							check(label)
							kerneltest.EqualBits(t, label+" past its length", buf[n:], orig[n:])
							if !out || !written {
								kerneltest.EqualBits(t, label, buf[:n], orig[:n])
							}
						})
					default:
						buf, check := kerneltest.Guarded[int32](t, n+spare, i%16)
						copy(buf, map[string][]int32{"Start": {0, 2, 3}, "Read": {0, gdnsimd.Zero}, "Store": {gdnsimd.NoStore, 1, 2}}[fl.name])
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
				b.State = gdnsimd.Pool{F32: pool, BF16: pool16, SlotStride: slot}
				run := func() { k.RunBatch(&b, 0, N*HV, new(gdnsimd.Scratch)) }
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
