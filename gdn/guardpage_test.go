//go:build linux

package gdn_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// pagePlacer is the placer of slices next to protected pages (kerneltest.Pages).
type pagePlacer struct{ *kerneltest.Pages }

func (p pagePlacer) f32(n int) []float32 { return kerneltest.PageSlice[float32](p.Pages, n) }

func (p pagePlacer) bf16(n int) []gdn.BF16 { return unsafe.Slice((*gdn.BF16)(p.Mem(2*n)), n) }

// guardShapes covers the tails of every kernel: V in 1..33 (every remainder mod 4, 8, 16 and 32)
// and the partial blocks above 33 (AVX-512 masked tails of 3 to 8 ZMM, AVX2's 32-column blocks
// plus 1–3 YMM and 1–7 columns), with K cycling through 1..20 (the l2 tails of every width).
func guardShapes() [][2]int {
	vs := []int{47, 63, 64, 65, 100, 127, 128, 129, 161, 255}
	for v := 33; v >= 1; v-- {
		vs = append(vs, v)
	}
	var kv [][2]int
	for i, v := range vs {
		kv = append(kv, [2]int{1 + i%20, v})
	}
	return kv
}

// TestGuardPages runs every kernel with every input and output slice ending exactly at a
// PROT_NONE page (and, in a second round, starting right after one), over guardShapes, in place
// and out of place, with both outputs, bf16 only and f32 only.
func TestGuardPages(t *testing.T) {
	cases := shapeCases(rand.New(rand.NewPCG(11, 12)), guardShapes(), 4)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, atEnd := range []bool{true, false} {
			var rc roundedCount
			for _, sc := range cases {
				t.Run(fmt.Sprintf("%s,atEnd=%v", sc.c.Name, atEnd), func(t *testing.T) {
					p := pagePlacer{kerneltest.NewPages(t, atEnd)}
					rc.add(placedStep(t, kernel, sc, p))
				})
			}
			rc.check(t)
		}
	})
}
