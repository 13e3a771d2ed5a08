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
// Its API is what gdn, fuzz and bench need, twelve identifiers:
//
//   - Kernel, Kernels, Lookup and AllNames: the kernels this CPU runs (best first), one by name,
//     and every name the package knows on any architecture (tests skip the others).
//   - Batch, Rows, Pool and Scratch: a serving call as the kernels see it, run over a range of its
//     work items by Kernel.RunBatch with a worker's Scratch.
//   - Step: one token per sequence over a dense batch of f32 [K][V] states (Kernel.Run).
//   - Format and Formats: the state formats (layout, storage); Kernel.Implements says which a
//     kernel runs.
//   - BF16RNE: the float32 → bf16 rounding every kernel stores with.
//
// Kernel.FloorScale and Kernel.FloorFMA are the benchmark floors of package bench.
package gdnsimd

import (
	"fmt"
	"math"
)

// Step is one decode step's data for a batch, in the layout of package gdn (row-major, flattened
// heads bh = b*VHeads + h). Kernel.Run checks the dimensions and every length it relies on before
// it starts, and panics if one is wrong (see Run).
type Step struct {
	KHeads, VHeads int     // q/k heads and value heads per sequence; VHeads % KHeads == 0
	K, V           int     // key dim (state rows) and value dim (state columns)
	RMSEps         float32 // gated RMSNorm epsilon (> 0 in practice)

	ALog, DtBias []float32 // [VHeads]
	NormWeight   []float32 // [V]

	Q, Key     []float32 // [B][KHeads][K], raw
	Val, Z     []float32 // [B][VHeads][V]
	Beta, Gate []float32 // [B][VHeads], raw b and a

	StateIn  []float32 // [B][VHeads][K][V]
	StateOut []float32 // same length; may be the very same slice as StateIn
	Out      []uint16  // [B][VHeads][V] bf16 bits, or nil
	OutF32   []float32 // [B][VHeads][V], or nil
}

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

// Run computes the flattened heads [lo, hi) of s with this kernel (every kernel implements the
// [K][V] f32 format Step uses): s.Batch() run by RunBatch. A Scratch must not be shared with a
// concurrent call. Heads are independent: the result of a head does not depend on lo, hi or on
// any other head's data.
//
// Run panics, before it reads or writes any element, unless k is a kernel from this package,
// K, V, KHeads and VHeads are ≥ 1 with VHeads a multiple of KHeads, 0 ≤ lo ≤ hi, scratch is not
// nil, and every slice is long enough (len, not cap) for heads [lo, hi): Val, Z, Out and OutF32
// (unless nil) hi·V, Beta and Gate hi, StateIn and StateOut hi·K·V, Q and Key up to the key head
// of head hi−1, ALog and DtBias VHeads, NormWeight V. These checks are O(1); the assembly checks
// nothing.
func (k Kernel) Run(s *Step, lo, hi int, scratch *Scratch) {
	s.check(k, lo, hi, scratch)
	b := s.Batch()
	b.N = max(b.N, (hi+s.VHeads-1)/s.VHeads) // the slices need reach only as far as head hi−1
	k.runBatch(&b, lo, hi, scratch, false)
}

// Batch is s as a Batch of one token per sequence: sequence b is token b, read from slot b of
// StateIn and written to slot b of StateOut (in place when it is the very same slice).
func (s *Step) Batch() Batch {
	HV := s.VHeads
	n := 0
	if HV > 0 {
		n = len(s.Beta) / HV
	}
	b := Batch{
		KHeads: s.KHeads, VHeads: HV, K: s.K, V: s.V, RMSEps: s.RMSEps,
		ALog: s.ALog, DtBias: s.DtBias, NormWeight: s.NormWeight,
		N:     n,
		Q:     Rows{F32: s.Q, Stride: s.KHeads * s.K},
		Key:   Rows{F32: s.Key, Stride: s.KHeads * s.K},
		Val:   Rows{F32: s.Val, Stride: HV * s.V},
		Z:     Rows{F32: s.Z, Stride: HV * s.V},
		Beta:  Rows{F32: s.Beta, Stride: HV},
		Gate:  Rows{F32: s.Gate, Stride: HV},
		State: Pool{F32: s.StateIn, SlotStride: HV * s.K * s.V},
		Out:   s.Out, OutF32: s.OutF32,
	}
	if len(s.StateOut) != len(s.StateIn) || len(s.StateOut) > 0 && &s.StateOut[0] != &s.StateIn[0] {
		b.StoreTo = Pool{F32: s.StateOut, SlotStride: b.State.SlotStride}
	}
	return b
}

// check panics, as Run documents, unless Run can compute heads [lo, hi) of s with k within the
// slices' lengths.
func (s *Step) check(k Kernel, lo, hi int, scratch *Scratch) {
	if k.im == nil {
		panic("gdnsimd: Run on the zero Kernel (use Kernels or Lookup)")
	}
	if scratch == nil {
		panic("gdnsimd: Run with a nil Scratch")
	}
	K, V, HK, HV := s.K, s.V, s.KHeads, s.VHeads
	if K < 1 || V < 1 || HK < 1 || HV < 1 || HV%HK != 0 || K > math.MaxInt/V {
		panic(fmt.Sprintf("gdnsimd: Run with K = %d, V = %d, KHeads = %d, VHeads = %d: want each ≥ 1, VHeads a multiple of KHeads, K·V an int", K, V, HK, HV))
	}
	if lo < 0 || lo > hi {
		panic(fmt.Sprintf("gdnsimd: Run of heads [%d, %d)", lo, hi))
	}
	if lo == hi {
		return
	}
	last := hi - 1
	keyHeads := last/HV*HK + last%HV/(HV/HK) + 1 // key heads up to that of head hi−1
	for _, c := range [...]struct {
		name     string
		len, per int // need len ≥ count·per
		count    int
	}{
		{"Q", len(s.Q), K, keyHeads},
		{"Key", len(s.Key), K, keyHeads},
		{"Val", len(s.Val), V, hi},
		{"Z", len(s.Z), V, hi},
		{"Beta", len(s.Beta), 1, hi},
		{"Gate", len(s.Gate), 1, hi},
		{"ALog", len(s.ALog), 1, HV},
		{"DtBias", len(s.DtBias), 1, HV},
		{"NormWeight", len(s.NormWeight), V, 1},
		{"StateIn", len(s.StateIn), K * V, hi},
		{"StateOut", len(s.StateOut), K * V, hi},
		{"Out", len(s.Out), V, hi * boolInt(s.Out != nil)},
		{"OutF32", len(s.OutF32), V, hi * boolInt(s.OutF32 != nil)},
	} {
		if c.count > c.len/c.per { // c.len < c.count·per without overflow
			panic(fmt.Sprintf("gdnsimd: Run of heads [%d, %d): len(Step.%s) = %d, want ≥ %d·%d (K = %d, V = %d, KHeads = %d, VHeads = %d)",
				lo, hi, c.name, c.len, c.count, c.per, K, V, HK, HV))
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
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
	VK   bool // [V][K]: element (i, j) of a head at j·K + i; false: [K][V], at i·V + j
	BF16 bool // bf16 storage (widened exactly on load, rounded to nearest even on store)
}

// Formats lists every state format: kv-f32, vk-f32, kv-bf16, vk-bf16.
func Formats() []Format {
	return []Format{{false, false}, {true, false}, {false, true}, {true, true}}
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
	if f.BF16 {
		return s + "-bf16"
	}
	return s + "-f32"
}

// Implements reports whether the kernel has a state routine for format f.
func (k Kernel) Implements(f Format) bool { return k.im.cell(f) != nil }

// cell is im's state routine for format f, or nil.
func (im *impl) cell(f Format) stateFunc {
	st := 0
	if f.BF16 {
		st = 1
	}
	return im.cells[st][f.layout()]
}
