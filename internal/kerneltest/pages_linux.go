//go:build linux

package kerneltest

import (
	"syscall"
	"testing"
	"unsafe"
)

// Pages gives every slice its own mapping next to a PROT_NONE page, as Go's bytes/boundary_test.go
// does: with AtEnd the slice ends exactly where the protected page begins, otherwise it starts
// exactly where one ends. Reading or writing one element past the slice (or before it) faults and
// kills the test; guard bands only see what a routine writes, not a read whose lanes it ignores.
type Pages struct {
	tb    testing.TB
	AtEnd bool
	maps  [][]byte
}

// NewPages returns a placer whose mappings Free unmaps (at the latest when tb ends).
func NewPages(tb testing.TB, atEnd bool) *Pages {
	p := &Pages{tb: tb, AtEnd: atEnd}
	tb.Cleanup(p.Free)
	return p
}

// Mem returns bytes bytes (≥ 0) next to a protected page, in a mapping of their own.
func (p *Pages) Mem(bytes int) unsafe.Pointer {
	p.tb.Helper()
	page := syscall.Getpagesize()
	n := max((bytes+page-1)/page*page, page)
	m, err := syscall.Mmap(-1, 0, n+page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		p.tb.Fatal(err)
	}
	p.maps = append(p.maps, m)
	if p.AtEnd {
		if err := syscall.Mprotect(m[n:], syscall.PROT_NONE); err != nil {
			p.tb.Fatal(err)
		}
		return unsafe.Pointer(&m[n-bytes])
	}
	if err := syscall.Mprotect(m[:page], syscall.PROT_NONE); err != nil {
		p.tb.Fatal(err)
	}
	return unsafe.Pointer(&m[page])
}

// Free unmaps every mapping made so far.
func (p *Pages) Free() {
	for _, m := range p.maps {
		if err := syscall.Munmap(m); err != nil {
			p.tb.Errorf("munmap: %v", err)
		}
	}
	p.maps = nil
}

// PageSlice returns n elements of T next to a protected page (see Pages).
func PageSlice[T Elem](p *Pages, n int) []T {
	var zero T
	return unsafe.Slice((*T)(p.Mem(n*int(unsafe.Sizeof(zero)))), n)
}

// PageCopy returns a PageSlice holding a copy of x.
func PageCopy[T Elem](p *Pages, x []T) []T {
	s := PageSlice[T](p, len(x))
	copy(s, x)
	return s
}
