// Package gdnsimd is the kernel layer under package github.com/gdnsimd/gdnsimd/gdn, which is what
// users import.
//
// It holds the raw per-head kernels of the fused gated delta-rule (GDN) step over flat slices
// (portable Go, AVX-512, AVX2, NEON) for every state format, the driver they share, and the
// kernel-selection API. It checks only what keeps its calls within their slices (and panics when
// that fails), allocates only scratch that grows once, and starts no goroutine. Package gdn
// validates calls completely, splits them over workers and picks a kernel from this package per
// Layer; the exact semantics are in that package's documentation.
//
// Its API is what gdn, fuzz and bench need, eleven identifiers:
//
//   - Kernel, Kernels, Lookup and AllNames: the kernels this CPU runs (best first), one by name,
//     and every name the package knows on any architecture (tests skip the others).
//   - Batch, Rows, Pool and Scratch: a serving call as the kernels see it, run over a range of its
//     work items by Kernel.RunBatch with a worker's Scratch (one token per sequence over a dense
//     batch of states when Start, Read and Store are nil: gdn's Step).
//   - Format and Formats: the state formats (layout, storage); Kernel.Implements says which a
//     kernel runs.
//   - BF16RNE: the float32 → bf16 rounding every kernel stores with.
//
// Kernel.FloorScale and Kernel.FloorFMA are the benchmark floors of package bench.
package gdnsimd

// Kernel is one implementation of the fused step. The zero Kernel is not usable; get one from
// Kernels or Lookup.
type Kernel struct{ im *impl }

// Name is the kernel's name: "generic", "avx2", "avx512" or "neon".
// The zero Kernel's name is "".
func (k Kernel) Name() string {
	if k.im == nil {
		return ""
	}
	return k.im.name
}

// Kernels returns the kernels that can run on this CPU, best first; "generic" is always last.
func Kernels() []Kernel {
	ks := make([]Kernel, 0, len(available)+1)
	for _, im := range available {
		ks = append(ks, Kernel{im})
	}
	return append(ks, Kernel{&genericImpl})
}

// Lookup returns the kernel with the given name if it can run on this CPU.
func Lookup(name string) (Kernel, bool) {
	for _, k := range Kernels() {
		if k.Name() == name {
			return k, true
		}
	}
	return Kernel{}, false
}

// available lists the assembly kernels usable on this CPU, best first (set by the init of
// gdn_amd64.go or gdn_arm64.go; none under purego or on other architectures).
var available []*impl

// AllNames lists every kernel name this package knows on any architecture, available here or not.
func AllNames() []string { return []string{"avx512", "avx2", "neon", "generic"} }

// Benchmark floors, for package bench: plain vector passes of a kernel's ISA that bound what its
// state routines can reach. Kernels without them (generic, neon, purego builds) report false.

// floor is a kernel's benchmark floors, set by the generated init of its architecture
// (gdn_amd64.go): scale in place, and fma, n iterations of chains independent vector FMAs of lanes
// float32s each.
type floor struct {
	scale         func(x []float32, s float32)
	fma           func(n int)
	lanes, chains int
}

var floors = map[string]floor{}

// FloorScale sets x[i] = x[i]·s with the kernel's widest vectors (one load–scale–store pass in
// place: the memory floor of a one-pass state update). It reports whether the kernel has one.
func (k Kernel) FloorScale(x []float32, s float32) bool {
	f := floors[k.Name()]
	if f.scale != nil {
		f.scale(x, s)
	}
	return f.scale != nil
}

// FloorFMA runs n iterations of independent VFMADD231PS chains on registers with the kernel's
// widest vectors (the core's FMA throughput; n ≤ 0 runs none). It returns the float32 lanes of one
// FMA and the vector FMAs of one iteration, or 0, 0 if the kernel has no such loop.
func (k Kernel) FloorFMA(n int) (lanes, perIter int) {
	f := floors[k.Name()]
	if f.fma == nil {
		return 0, 0
	}
	if n > 0 {
		f.fma(n)
	}
	return f.lanes, f.chains
}

// stateLayout is the order of a head's K×V state in memory, an index of impl.cells.
type stateLayout uint8

// Format is a state format: a layout and a storage type.
type Format struct {
	VK      bool    // [V][K]: element (i, j) of a head at j·K + i; false: [K][V], at i·V + j
	Storage Storage // the pools' element type
}

// Formats lists every state format, by storage then layout: kv-f32, vk-f32, kv-bf16, vk-bf16.
func Formats() []Format {
	var fs []Format
	for s := range Storage(storages) {
		fs = append(fs, Format{false, s}, Format{true, s})
	}
	return fs
}

// layout is f's layout.
func (f Format) layout() stateLayout {
	if f.VK {
		return layoutVK
	}
	return layoutKV
}

// String is the format's key in test and benchmark names: "kv-f32", "vk-f32", "kv-bf16", "vk-bf16".
func (f Format) String() string {
	s := "kv"
	if f.layout() == layoutVK {
		s = "vk"
	}
	return s + "-" + f.Storage.String()
}

// Implements reports whether the kernel has a state routine for format f.
func (k Kernel) Implements(f Format) bool { return k.im.cell(f) != nil }

// cell is im's state routine for format f, or nil.
func (im *impl) cell(f Format) stateFunc {
	if f.Storage >= storages {
		return nil
	}
	return im.cells[f.Storage][f.layout()]
}
