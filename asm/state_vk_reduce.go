package main

// The transpose-add of a [V][K] group's dots (vkReduce: the 2G sums of a group reduced
// together, simulated lane by lane to place each total, vkLanes) and the [V][K] routines' RODATA
// constants (vkConstants: the lane broadcasts, the permutations of the totals, the AVX2 tail's
// and-masks).

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// lab is one lane of the transpose-add simulation: partial sums of input in over the lanes in
// mask.
type lab struct {
	in   int
	mask uint32
}

// vkLevel is one level of the transpose-add: how a pair (x, y) is shuffled into two vectors whose
// sum halves the number of lanes per input.
type vkLevel struct {
	ins        string // VSHUFF32X4, VPERM2F128 or VSHUFPS
	imm1, imm2 uint8
}

func vkLevels(a isa) []vkLevel {
	in128 := []vkLevel{{"VSHUFPS", 0x44, 0xEE}, {"VSHUFPS", 0x88, 0xDD}}
	if a.bytes() == 64 { // four 128-bit quarters
		return append([]vkLevel{{"VSHUFF32X4", 0x44, 0xEE}, {"VSHUFF32X4", 0x88, 0xDD}}, in128...)
	}
	return append([]vkLevel{{"VPERM2F128", 0x20, 0x31}}, in128...) // two halves
}

// simShuffle is what l's instruction with imm does to (x = src1, y = src2).
func simShuffle(l vkLevel, imm uint8, x, y []lab) []lab {
	n := len(x)
	out := make([]lab, n)
	switch l.ins {
	case "VSHUFF32X4": // 128-bit chunks: two from x, two from y
		for c := range 4 {
			sel := int(imm>>(2*c)) & 3
			src := x
			if c >= 2 {
				src = y
			}
			copy(out[4*c:4*c+4], src[4*sel:4*sel+4])
		}
	case "VPERM2F128":
		for c := range 2 {
			sel := int(imm>>(4*c)) & 3
			src := x
			if sel >= 2 {
				src = y
			}
			copy(out[4*c:4*c+4], src[4*(sel&1):4*(sel&1)+4])
		}
	case "VSHUFPS": // per 128-bit lane: two from x, two from y
		for c := 0; c < n; c += 4 {
			for e := range 4 {
				sel := int(imm>>(2*e)) & 3
				src := x
				if e >= 2 {
					src = y
				}
				out[c+e] = src[c+sel]
			}
		}
	}
	return out
}

func simAdd(x, y []lab) []lab {
	out := make([]lab, len(x))
	for i := range x {
		if x[i].in != y[i].in || x[i].mask&y[i].mask != 0 {
			panic("vkReduce: lanes of different inputs or overlapping sums added")
		}
		out[i] = lab{x[i].in, x[i].mask | y[i].mask}
	}
	return out
}

// vkReduce emits the transpose-add of ins (at most lanes vectors) and returns the vector holding
// every input's total; vkLanes says which lane holds which.
func vkReduce(a isa, ins []VecVirtual) VecVirtual { return vkReduceLevels(a, ins, vkLevels(a)) }

// vkReduceLevels emits the given levels of the transpose-add of ins.
func vkReduceLevels(a isa, ins []VecVirtual, levels []vkLevel) VecVirtual {
	vs := ins
	for _, l := range levels {
		var nvs []VecVirtual
		for p := 0; p < len(vs); p += 2 {
			x, y := vs[p], vs[min(p+1, len(vs)-1)] // an odd one out pairs with itself
			t1, t2 := a.vec(), a.vec()
			vkShuffle(a, l.ins, l.imm1, x, y, t1)
			vkShuffle(a, l.ins, l.imm2, x, y, t2)
			VADDPS(a.view(t2), a.view(t1), a.view(t1))
			nvs = append(nvs, t1)
		}
		vs = nvs
	}
	if len(vs) != 1 {
		panic("vkReduce: more inputs than lanes")
	}
	return vs[0]
}

// vkLanes simulates vkReduce of m inputs lane by lane (checking that every addition adds
// disjoint partial sums of one input) and returns the lane holding each input's total.
func vkLanes(a isa, m int) []int {
	sim := make([][]lab, m)
	for k := range sim {
		sim[k] = make([]lab, a.lanes)
		for i := range sim[k] {
			sim[k][i] = lab{k, 1 << i}
		}
	}
	for _, l := range vkLevels(a) {
		var nsim [][]lab
		for p := 0; p < len(sim); p += 2 {
			x, y := sim[p], sim[min(p+1, len(sim)-1)]
			nsim = append(nsim, simAdd(simShuffle(l, l.imm1, x, y), simShuffle(l, l.imm2, x, y)))
		}
		sim = nsim
	}
	if len(sim) != 1 {
		panic("vkLanes: more inputs than lanes")
	}
	full := uint32(1)<<a.lanes - 1
	lane := make([]int, m)
	for k := range lane {
		lane[k] = -1
		for i, x := range sim[0] {
			if x.in == k && x.mask == full {
				lane[k] = i
				break
			}
		}
		if lane[k] < 0 {
			panic("vkLanes: an input's total is in no lane")
		}
	}
	return lane
}

func vkShuffle(a isa, ins string, imm uint8, x, y, dst VecVirtual) {
	X, Y, D := a.view(x), a.view(y), a.view(dst)
	switch ins {
	case "VSHUFF32X4":
		VSHUFF32X4(U8(imm), Y, X, D)
	case "VPERM2F128":
		VPERM2F128(U8(imm), Y, X, D)
	case "VSHUFPS":
		VSHUFPS(U8(imm), Y, X, D)
	}
}

// vkHalf is the low half of x (YMM of a ZMM, XMM of a YMM).
func (a isa) vkHalf(x VecVirtual) Register {
	if a.bytes() == 64 {
		return x.AsY()
	}
	return x.AsX()
}

// vkExtractHigh writes the high half of x to the low half of dst.
func (a isa) vkExtractHigh(x, dst VecVirtual) {
	if a.bytes() == 64 {
		VEXTRACTF64X4(U8(1), x.AsZ(), dst.AsY())
	} else {
		VEXTRACTF128(U8(1), x.AsY(), dst.AsX())
	}
}

// vkLane are the broadcast lane indices 1..7 (VPERMPS) and vkPerm the permutations of each
// (ISA, G) that bring kv of row r to lane r and qs to lane lanes/2 + r.
var (
	vkLane [8]Mem
	vkPerm = map[string]Mem{}
)

func vkConstants() {
	for r := 1; r < 8; r++ {
		vkLane[r] = splat(fmt.Sprintf("vklane%d", r), uint32(r))
	}
	for _, a := range []isa{avx512, avx2} {
		for g := 1; g <= a.lanes/2; g++ {
			vkPermFor(a, g, vkLanes(a, 2*g))
		}
	}
	// vkblockperm brings the total of input r of a 16-input AVX-512 reduction to lane r.
	vkBlockPerm = GLOBL("vkblockperm", RODATA|NOPTR)
	for r, l := range vkLanes(avx512, vkSub) {
		DATA(4*r, U32(uint32(l)))
	}
	// The and-masks of the AVX2 tail vector: vkand + 4·n is 8 dwords whose first 8 − n are 0.
	vkAnd = GLOBL("vkand", RODATA|NOPTR)
	for i := range 16 {
		v := uint32(0)
		if i >= 8 {
			v = 0xffffffff
		}
		DATA(4*i, U32(v))
	}
}

var vkAnd, vkBlockPerm Mem

// vkPermFor declares (once) the permutation constant of a reduction's lanes.
func vkPermFor(a isa, g int, lane []int) Mem {
	key := fmt.Sprintf("vkperm%s_%d", a.name, g)
	if m, ok := vkPerm[key]; ok {
		return m
	}
	m := GLOBL(key, RODATA|NOPTR)
	idx := make([]uint32, a.lanes)
	for r := range g {
		idx[r] = uint32(lane[r])
		idx[a.lanes/2+r] = uint32(lane[g+r])
	}
	for i, x := range idx {
		DATA(4*i, U32(x))
	}
	vkPerm[key] = m
	return m
}
