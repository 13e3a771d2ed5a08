package gdnsimd_test

import (
	"math"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// TestFloors: FloorScale scales exactly len(x) elements (guard bands at every length and offset)
// and FloorFMA takes any n (none run for n ≤ 0); kernels without floors report so.
func TestFloors(t *testing.T) {
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		for n := 0; n <= 70; n++ {
			x, check := kerneltest.Guarded[float32](t, n, n%16)
			for i := range x {
				x[i] = float32(i + 1)
			}
			if !gdnsimd.FloorScale(name, x, 2) {
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
			if l := gdnsimd.FloorFMA(name, n); l != 8 && l != 16 {
				t.Fatalf("%s: FloorFMA(%d) lanes %d", name, n, l)
			}
		}
	})
}
