// Package kerneltest is the one test helper of the root package's tests, gdn/ and fuzz/: it runs
// a test for every kernel name the registry knows, fails a run in which GDN_REQUIRE_KERNEL names a
// kernel this CPU or build lacks (as the standard library's crypto/internal/cryptotest does for
// its implementations), puts slices between guard bands and compares bits.
//
// It imports nothing of the module: the kernels come from a Registry the test package hands it
// (Use), so the root package's internal tests can use it as well as gdn's and fuzz's.
package kerneltest

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// Registry is what kerneltest needs of the kernels: every name the module knows, generic last,
// and whether this CPU/build runs one (gdnsimd.AllNames, gdnsimd.Lookup).
type Registry interface {
	AllNames() []string
	Available(name string) bool
}

var reg Registry

// Use sets the registry of the test binary (from a test file's init) from its two functions.
func Use(all func() []string, available func(name string) bool) { reg = funcs{all, available} }

type funcs struct {
	all       func() []string
	available func(name string) bool
}

func (f funcs) AllNames() []string         { return f.all() }
func (f funcs) Available(name string) bool { return f.available(name) }

// registry is the registry set by Use (the test fails without one).
func registry(tb testing.TB) Registry {
	tb.Helper()
	if reg == nil {
		tb.Fatal("kerneltest: no registry (call kerneltest.Use from the test package's init)")
	}
	return reg
}

// available is, in the order of AllNames, the kernels r says this CPU/build runs.
func available(r Registry) []string {
	var a []string
	for _, n := range r.AllNames() {
		if r.Available(n) {
			a = append(a, n)
		}
	}
	return a
}

// RequireEnv is the environment variable naming (comma-separated) the kernels a run must test:
// a CI leg that sets it cannot silently test less.
const RequireEnv = "GDN_REQUIRE_KERNEL"

// Require fails tb if RequireEnv names a kernel that is unknown or that this CPU/build cannot run.
func Require(tb testing.TB) {
	tb.Helper()
	r := registry(tb)
	for _, want := range strings.Split(os.Getenv(RequireEnv), ",") {
		want = strings.TrimSpace(want)
		switch {
		case want == "":
		case !slices.Contains(r.AllNames(), want):
			tb.Fatalf("%s names %q, which is not a kernel (known: %v)", RequireEnv, want, r.AllNames())
		case !r.Available(want):
			tb.Fatalf("%s names %q, but this CPU/build has only %v", RequireEnv, want, available(r))
		}
	}
}

// ForEach runs f as the subtest "kernel=NAME" for every name of the registry, "generic" last,
// after Require. A kernel this CPU/build cannot run is a skipped subtest that says so, so
// `go test -v` shows "--- SKIP: Test/kernel=NAME" for it and "--- PASS" only for kernels that ran.
func ForEach(t *testing.T, f func(t *testing.T, name string)) {
	t.Helper()
	Require(t)
	r := registry(t)
	for _, name := range r.AllNames() {
		t.Run("kernel="+name, func(t *testing.T) {
			if !r.Available(name) {
				t.Skipf("%s: not available on this CPU/build (it has %v)", name, available(r))
			}
			f(t, name)
		})
	}
}

// Names is, after Require, the kernels this CPU/build can run, best first, "generic" last: for the
// tests that cannot make a subtest per kernel (a fuzz target's body, kernels stepped in lockstep).
func Names(tb testing.TB) []string {
	tb.Helper()
	Require(tb)
	names := available(registry(tb))
	if len(names) == 0 || names[len(names)-1] != "generic" {
		tb.Fatalf("kernels %v: generic is not last", names)
	}
	return names
}

// Band is the number of guard elements Guarded puts before and after a slice.
const Band = 32

// Align is the boundary, in bytes, Guarded counts its offsets from.
const Align = 64

// The guard values: NaN payloads that no kernel produces (a computed NaN is quiet: 0x7fc…).
const (
	Poison32 = 0x7fa5a5a5 // float32 and int32
	Poison16 = 0x7fa5     // bf16 bits
)

// Elem is the element type of the slices the kernels read and write.
type Elem interface{ float32 | uint16 | int32 }

// Guarded returns a slice of n elements (len == cap == n) that starts off elements past an Align
// boundary, with Band guard elements directly before and after it at every offset, 0 included,
// and a function that fails the test (naming what, the slice index and the value) if a guard
// element changed. The slice holds the guard value too: fill it before use.
func Guarded[T Elem](tb testing.TB, n, off int) ([]T, func(what string)) {
	tb.Helper()
	if n < 0 || off < 0 {
		tb.Fatalf("kerneltest.Guarded(n = %d, off = %d): want n, off >= 0", n, off)
	}
	s, check := NewGuarded[T](n, off)
	return s, func(what string) {
		tb.Helper()
		check(tb, what)
	}
}

// NewGuarded is Guarded for a caller that builds its slices before it has a test at hand: the
// check takes the test (n, off ≥ 0, else it panics).
func NewGuarded[T Elem](n, off int) ([]T, func(tb testing.TB, what string)) {
	if n < 0 || off < 0 {
		panic(fmt.Sprintf("kerneltest.NewGuarded(n = %d, off = %d): want n, off >= 0", n, off))
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	buf := make([]T, Band+Align/size+off+n+Band)
	p := poison[T]()
	for i := range buf {
		buf[i] = p
	}
	lo := Band
	for uintptr(unsafe.Pointer(&buf[lo]))%Align != 0 {
		lo++
	}
	lo += off
	hi := lo + n
	return buf[lo:hi:hi], func(tb testing.TB, what string) {
		tb.Helper()
		for i, x := range buf {
			if (i < lo || i >= hi) && bits(x) != bits(p) {
				tb.Fatalf("%s: guard element at slice index %d (len %d, offset %d) overwritten with %#x", what, i-lo, n, off, bits(x))
			}
		}
	}
}

// poison is the guard value of T.
func poison[T Elem]() T {
	var p T
	switch q := any(&p).(type) {
	case *float32:
		*q = math.Float32frombits(Poison32)
	case *int32:
		*q = Poison32
	case *uint16:
		*q = Poison16
	}
	return p
}

// bits is x's bit pattern (so that NaNs compare).
func bits[T Elem](x T) uint32 {
	switch v := any(x).(type) {
	case float32:
		return math.Float32bits(v)
	case int32:
		return uint32(v)
	case uint16:
		return uint32(v)
	}
	panic("unreachable")
}

// DiffBits is nil if got and want have the same length and bits, else an error naming the tensor
// what, the first index that differs and both values.
func DiffBits[T Elem](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if bits(got[i]) != bits(want[i]) {
			return fmt.Errorf("%s[%d] = %v (%#x), want %v (%#x)", what, i, got[i], bits(got[i]), want[i], bits(want[i]))
		}
	}
	return nil
}

// EqualBits fails tb unless got and want have the same length and bits (see DiffBits).
func EqualBits[T Elem](tb testing.TB, what string, got, want []T) {
	tb.Helper()
	if err := DiffBits(what, got, want); err != nil {
		tb.Fatal(err)
	}
}
