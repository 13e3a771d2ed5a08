// Package gdnsimd is the kernel layer under package github.com/gdnsimd/gdnsimd/gdn, which is what
// users import.
//
// It holds the raw per-head kernels of the fused gated delta-rule (GDN) decode step over flat
// slices (portable Go, AVX-512, AVX2, NEON), the scalar driver they share, and the kernel-selection
// API. It does no validation, no allocation and starts no goroutine: the caller guarantees every
// length. Package gdn validates shapes, splits the batch over workers and picks a kernel from this
// package per Layer; the exact semantics are in that package's documentation.
package gdnsimd

// Step is one decode step's data for a batch, in the layout of package gdn (row-major, flattened
// heads bh = b*VHeads + h). The caller guarantees every length: Kernel.Run does not check them.
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

// ScratchLen is the number of float32s of scratch Kernel.Run needs for key dim k and value dim v.
func ScratchLen(k, v int) int { return 2*k + v + scratchPad }

// scratchPad leaves room so that assembly may align its scratch vectors to 64 bytes.
const scratchPad = 48

// Kernel is one implementation of the fused step. The zero Kernel is not usable; get one from
// Kernels, Default or Lookup.
type Kernel struct{ im *impl }

// Name is the kernel's name: "generic", "avx2", "avx512" or "neon".
func (k Kernel) Name() string { return k.im.name }

// Run computes the flattened heads [lo, hi) of s with this kernel. scratch must hold at least
// ScratchLen(s.K, s.V) float32s and must not be shared with a concurrent Run. Heads are
// independent: the result of a head does not depend on lo, hi or on any other head's data.
func (k Kernel) Run(s *Step, lo, hi int, scratch []float32) { run(k.im, s, lo, hi, scratch) }

// Kernels returns the kernels that can run on this CPU, best first; "generic" is always last.
func Kernels() []Kernel {
	ks := make([]Kernel, 0, len(available)+1)
	for _, im := range available {
		ks = append(ks, Kernel{im})
	}
	return append(ks, Kernel{&genericImpl})
}

// Names returns the names of Kernels(), best first.
func Names() []string {
	ks := Kernels()
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.Name()
	}
	return names
}

// Default returns the best kernel for this CPU.
func Default() Kernel { return Kernels()[0] }

// Lookup returns the kernel with the given name if it can run on this CPU.
func Lookup(name string) (Kernel, bool) {
	for _, k := range Kernels() {
		if k.Name() == name {
			return k, true
		}
	}
	return Kernel{}, false
}

// AllNames lists every kernel name this package knows on any architecture, available here or not.
func AllNames() []string { return []string{"avx512", "avx2", "neon", "generic"} }
