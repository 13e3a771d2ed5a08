// Package gdnsimd is the engine room of the fused gated delta-rule (GDN) decode step: the raw
// per-head kernels over flat slices (portable Go, AVX-512, AVX2, NEON), the scalar driver they share,
// and the kernel-selection API. It does no validation, no allocation and starts no goroutine.
//
// Users import package github.com/gdnsimd/gdnsimd/gdn, which validates shapes, splits the batch
// over workers and picks a kernel from this package per Layer. The exact semantics are in that
// package's documentation.
package gdnsimd

// Step is one decode step's data for a batch, in the layout of package gdn (row-major, flattened
// heads bh = b*VHeads + h).
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
// Kernels, Default or Lookup.
type Kernel struct{ im *impl }

// Name is the kernel's name: "generic", "avx2", "avx512" or "neon".
func (k Kernel) Name() string { return k.im.name }

// Run computes the flattened heads [lo, hi) of s with this kernel (every kernel implements the
// [K][V] f32 format Step uses): s.Batch() run by RunBatch, with its guarantees. A Scratch must not
// be shared with a concurrent call. Heads are independent: the result of a head does not depend
// on lo, hi or on any other head's data.
func (k Kernel) Run(s *Step, lo, hi int, scratch *Scratch) {
	b := s.Batch()
	k.RunBatch(&b, lo, hi, scratch)
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
