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
