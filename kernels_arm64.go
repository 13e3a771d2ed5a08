//go:build !purego

package gdnsimd

import (
	"math"

	"golang.org/x/sys/cpu"
)

// init sets available, the assembly kernels usable on this CPU: "neon" when the CPU has ASIMD
// (every arm64 CPU Go runs on; GODEBUG=cpu.asimd=off removes it, -tags purego never builds it).
func init() {
	if cpu.ARM64.HasASIMD {
		available = append(available, &neonImpl)
	}
}

// neonImpl is the NEON kernel: the pieces and the four state routines over T tokens of
// gdn_arm64.s (gdn_arm64.go's table). A head with K above the slab's goes to the generic routine
// of its format (both storage types alike, whatever T: the equivalences between formats and calls
// hold). The routines issue no prefetches (the list is a hint) and take no work space.
var neonImpl = withRoutines(impl{name: "neon", state: single(stateKVf32NEON), gate: gateSplit(l2NEON, gateNEON4), l2: l2NEON,
	scale: scale, widen: widenNEON, gates: gatesChecked(gatesNEON),
	chans: chansChecked(chansNEON, neonLanes), conv: convChecked(convNEON, neonLanes)}, &neonRoutines)

// gateSplit is impl.gate of a kernel whose gate routine gate4 is the element loop, given r: the sum
// of squares is l2's (of o with itself), r = 1/sqrt(Σo²/V + eps) computed here exactly as
// gateGeneric does. The slices are cut to V = len(o) first (a short one panics).
func gateSplit(l2 func(q, k []float32) (qq, kk, kq float64), gate4 func(o, z, w []float32, r float32, out []uint16, outF []float32, sig bool)) func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool) {
	return func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool) {
		V := len(o)
		z, w = z[:V], w[:V]
		if out != nil {
			out = out[:V]
		}
		if outF != nil {
			outF = outF[:V]
		}
		ss, _, _ := l2(o, o)
		gate4(o, z, w, float32(1/math.Sqrt(ss/float64(V)+float64(eps))), out, outF, sig)
	}
}
