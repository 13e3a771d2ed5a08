package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/reg"
)

type isa struct {
	name  string // routine name suffix: "AVX512" or "AVX2"
	lanes int    // float32 lanes of the widest register: 16 or 8
	// blockVecs is the number of full vectors per row in a state block (see the package comment).
	blockVecs int
	// regVecs is the number of vectors of a block whose accumulators stay in registers; those of
	// the others live in the frame (stateLocal).
	regVecs int
}

var (
	avx512 = isa{name: "AVX512", lanes: 16, blockVecs: 16, regVecs: 14}
	avx2   = isa{name: "AVX2", lanes: 8, blockVecs: 4, regVecs: 4}
)

// stateLocal is the frame of the AVX-512 state routine: Sᵀk̂ and Sᵀq̂ (later δ) of the vectors
// of a block beyond regVecs, 64-byte aligned.
const stateLocal = (16-14)*128 + 64

// vec allocates a virtual register of the ISA's widest kind.
func (a isa) vec() VecVirtual {
	if a.lanes == 16 {
		return ZMM()
	}
	return YMM()
}

// zero clears r (the whole register).
func zero(a isa, r VecVirtual) {
	if a.lanes == 16 {
		// VXORPS on ZMM would need AVX512DQ, and avo takes VPXORD r, r, r for a read of r (which
		// would keep r live back to the routine's entry): broadcast a zero instead.
		VBROADCASTSS(cZero, r.AsZ())
	} else {
		VXORPS(r.AsY(), r.AsY(), r.AsY())
	}
}

// tailMask sets k to the first n lanes (1 ≤ n ≤ 16, n in a GP register, clobbered as 32 bits).
func tailMask(n GPVirtual, k Register) {
	t := ZMM()
	VPBROADCASTD(n.As32(), t)
	VPCMPGTD(cIota, t, k) // k_i = n > i
}
