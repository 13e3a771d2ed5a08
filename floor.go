package gdnsimd

// Benchmark floors, for package bench: plain vector passes of a kernel's ISA that bound what its
// state routines can reach. Kernels without them (generic, neon, purego builds) report false.

var (
	floorScale = map[string]func(x []float32, s float32){}
	floorFMA   = map[string]func(n int){}
	floorLanes = map[string]int{}
)

// FloorFMAChains is the number of independent vector FMA chains of one FloorFMA iteration.
const FloorFMAChains = 12

// FloorScale sets x[i] = x[i]·s with the named kernel's widest vectors (one load–scale–store pass
// in place: the memory floor of a one-pass state update). It reports whether the kernel has one.
func FloorScale(kernel string, x []float32, s float32) bool {
	f := floorScale[kernel]
	if f != nil {
		f(x, s)
	}
	return f != nil
}

// FloorFMA runs n iterations of FloorFMAChains independent VFMADD231PS chains on registers with
// the named kernel's widest vectors (the core's FMA throughput; n ≤ 0 runs none) and returns the
// float32 lanes of one FMA, or 0 if the kernel has no such loop.
func FloorFMA(kernel string, n int) int {
	f := floorFMA[kernel]
	if f == nil {
		return 0
	}
	if n > 0 {
		f(n)
	}
	return floorLanes[kernel]
}
