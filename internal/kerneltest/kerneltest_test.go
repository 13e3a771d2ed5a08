package kerneltest

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// A registry of three kernels, "fast" not available on this "CPU".
func init() {
	Use(func() []string { return []string{"fast", "simd", "generic"} }, func(name string) bool { return name != "fast" })
}

// recorder is a testing.TB whose Fatalf only records (the helpers' failures are what is tested).
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatal(args ...any) { r.failed = append(r.failed, fmt.Sprint(args...)) }

// TestGuarded: at every offset (0 included) and length, a write one element before or one element
// after the slice is reported, and an untouched band is not; the slice is aligned as documented.
func TestGuarded(t *testing.T) {
	testGuarded[float32](t, 7)
	testGuarded[uint16](t, 0x1234)
	testGuarded[int32](t, 7)
}

func testGuarded[T Elem](t *testing.T, v T) {
	var zero T
	size := unsafe.Sizeof(zero)
	for off := range 17 {
		for _, n := range []int{0, 1, 2, 5, 16, 33} {
			name := fmt.Sprintf("%T n=%d off=%d", zero, n, off)
			r := &recorder{TB: t}
			s, check := Guarded[T](r, n, off)
			if len(s) != n || cap(s) != n {
				t.Fatalf("%s: len %d cap %d, want %d", name, len(s), cap(s), n)
			}
			if n > 0 && uintptr(unsafe.Pointer(&s[0]))%Align != uintptr(off)*size%Align {
				t.Fatalf("%s: slice at %#x, want offset %d from a %d-byte boundary", name, uintptr(unsafe.Pointer(&s[0])), off, Align)
			}
			for i := range s {
				s[i] = v
			}
			check(name)
			if len(r.failed) != 0 {
				t.Fatalf("%s: an untouched band reported: %v", name, r.failed)
			}
			if n == 0 {
				continue // an empty slice has no address to write next to
			}
			// The element before the slice and the one after it, through the slice's own pointer.
			wide := unsafe.Slice((*T)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), -int(size))), n+2)
			for _, i := range []int{0, n + 1} {
				old := wide[i]
				wide[i] = v
				check(name)
				if len(r.failed) != 1 || !strings.Contains(r.failed[0], fmt.Sprintf("slice index %d ", i-1)) {
					t.Fatalf("%s: a write at slice index %d: reported %q, want one report naming it", name, i-1, r.failed)
				}
				wide[i], r.failed = old, nil
			}
		}
	}
}

// TestDiffBits: equal bits (NaNs included) are equal; a difference names the tensor and index.
func TestDiffBits(t *testing.T) {
	nan := poison[float32]()
	if err := DiffBits("x", []float32{1, nan}, []float32{1, nan}); err != nil {
		t.Fatal(err)
	}
	err := DiffBits("Output.State", []float32{1, 2, 3}, []float32{1, 2, -3})
	if err == nil || !strings.HasPrefix(err.Error(), "Output.State[2] = 3 (0x40400000), want -3 (0xc0400000)") {
		t.Fatalf("DiffBits = %v", err)
	}
	if err := DiffBits("y", []uint16{1}, []uint16{1, 2}); err == nil || !strings.Contains(err.Error(), "length 1, want 2") {
		t.Fatalf("DiffBits of different lengths = %v", err)
	}
}

// TestRequire: GDN_REQUIRE_KERNEL with an available, an unavailable and an unknown name.
func TestRequire(t *testing.T) {
	unavailable := "fast"
	for _, tc := range []struct {
		env  string
		fail string // "" if Require must pass
	}{
		{"", ""},
		{"generic", ""},
		{" generic , simd", ""},
		{"generic,avx-512", `"avx-512", which is not a kernel`},
		{unavailable, "but this CPU/build has only"},
	} {
		if tc.env == "" && tc.fail != "" {
			continue // every known kernel is available here
		}
		t.Setenv(RequireEnv, tc.env)
		r := &recorder{TB: t}
		Require(r)
		switch {
		case tc.fail == "" && len(r.failed) != 0:
			t.Errorf("%s=%q: %v, want no failure", RequireEnv, tc.env, r.failed)
		case tc.fail != "" && (len(r.failed) != 1 || !strings.Contains(r.failed[0], tc.fail)):
			t.Errorf("%s=%q: %v, want one failure containing %q", RequireEnv, tc.env, r.failed, tc.fail)
		}
	}
}

// TestForEach: a subtest per known kernel, generic last; the unavailable ones skipped.
func TestForEach(t *testing.T) {
	t.Setenv(RequireEnv, "")
	var ran []string
	ForEach(t, func(t *testing.T, name string) {
		if want := "kernel=" + name; !strings.HasSuffix(t.Name(), "/"+want) {
			t.Errorf("subtest %q, want .../%s", t.Name(), want)
		}
		ran = append(ran, name)
	})
	if got, want := fmt.Sprint(ran), "[simd generic]"; got != want {
		t.Fatalf("ran %s, want the available kernels %s in the order of AllNames", got, want)
	}
}
