//go:build linux

package kerneltest

import (
	"runtime/debug"
	"testing"
	"unsafe"
)

// TestPages: a slice from Pages can be read and written whole; one element past its end (AtEnd) or
// before its start faults.
func TestPages(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, atEnd := range []bool{true, false} {
		p := NewPages(t, atEnd)
		for _, n := range []int{0, 1, 7, 1024, 1025} {
			s := PageCopy(p, make([]float32, n))
			for i := range s {
				s[i]++
			}
			if n == 0 {
				continue
			}
			beyond := unsafe.Pointer(uintptr(unsafe.Pointer(&s[n-1])) + 4)
			if !atEnd {
				beyond = unsafe.Pointer(uintptr(unsafe.Pointer(&s[0])) - 4)
			}
			if !faults(beyond) {
				t.Fatalf("atEnd=%v n=%d: the element past the slice can be read", atEnd, n)
			}
		}
		p.Free()
	}
}

// faults says whether reading the float32 at q faults.
func faults(q unsafe.Pointer) (faulted bool) {
	defer func() { faulted = recover() != nil }()
	_ = *(*float32)(q)
	return false
}
