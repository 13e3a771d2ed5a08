package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/reg"
)

// isa describes one instruction set: its vector register file and what it can do. Routines ask
// the isa (its fields and methods), not "lanes == 16": a capability is named once, here.
type isa struct {
	name  string // routine name suffix: "AVX512" or "AVX2"
	lanes int    // float32 lanes of the widest register: 16 or 8
	regs  int    // vector registers: 32 (ZMM0–31) or 16 (YMM0–15)
	// masks: opmask registers (K1–K7): a tail is one masked vector (zeroing loads, masked
	// stores: masked-out lanes are neither read nor written); without them a tail is narrower
	// vectors and scalars, or an overlapping vector.
	masks bool
	// evex: the widest register is a ZMM, written with EVEX-only instructions where AVX2 has a
	// VEX one (VPXORD for VXORPS, VRNDSCALEPS for VROUNDPS, VEXTRACTF64X4, …).
	evex bool
	// blockVecs is the number of full vectors per row in a state block (see the package comment).
	blockVecs int
	// regVecs is the number of vectors of a block whose accumulators stay in registers; those of
	// the others live in the frame (stateLocal).
	regVecs int
}

var (
	avx512 = isa{name: "AVX512", lanes: 16, regs: 32, masks: true, evex: true, blockVecs: 16, regVecs: 14}
	avx2   = isa{name: "AVX2", lanes: 8, regs: 16, blockVecs: 4, regVecs: 4}
)

// stateLocal is the frame of the AVX-512 state routine: Sᵀk̂ and Sᵀq̂ (later δ) of the vectors
// of a block beyond regVecs, 64-byte aligned.
const stateLocal = (16-14)*128 + 64

// vec allocates a virtual register of the ISA's widest kind.
func (a isa) vec() VecVirtual {
	if a.masks {
		return ZMM()
	}
	return YMM()
}

// view is r as the ISA's widest register (ZMM or YMM).
func (a isa) view(r VecVirtual) Register {
	if a.masks {
		return r.AsZ()
	}
	return r.AsY()
}

// bytes is the size of the widest vector in bytes (64 or 32).
func (a isa) bytes() int { return 4 * a.lanes }

// shift is log2(lanes): an element count shifted right by it is a vector count.
func (a isa) shift() uint8 {
	if a.lanes == 16 {
		return 4
	}
	return 3
}

// zero clears r (the whole register).
func (a isa) zero(r VecVirtual) {
	if a.masks {
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
