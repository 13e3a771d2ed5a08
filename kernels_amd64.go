//go:build !purego

package gdnsimd

import "golang.org/x/sys/cpu"

// init sets available, the assembly kernels usable on this CPU, best first:
//
//   - "avx512" needs AVX512F and AVX512VL (EVEX forms of 256/128-bit instructions in the
//     reductions), AVX512BW (VPMOVZXWD of bf16 into a ZMM: every CPU with VL has it), and AVX2
//     and FMA, which it also uses;
//   - "avx2" needs AVX2 and FMA.
//
// x/sys/cpu honours GODEBUG=cpu.avx512f=off (and the like) flag by flag without cascading, so the
// conditions are chained here: turning off a feature turns off every kernel that uses it. It also
// sets the benchmark floors of both (package bench).
func init() {
	x := &cpu.X86
	hasAVX2 := x.HasAVX && x.HasAVX2 && x.HasFMA
	if hasAVX2 && x.HasAVX512F && x.HasAVX512VL && x.HasAVX512BW {
		available = append(available, &avx512Impl)
	}
	if hasAVX2 {
		available = append(available, &avx2Impl)
	}
	floors["avx512"] = floor{scale: func(x []float32, s float32) { scaleAVX512(x, x, s) }, fma: fmaLoopAVX512, lanes: avx512Lanes, chains: fmaChains}
	floors["avx2"] = floor{scale: func(x []float32, s float32) { scaleAVX2(x, x, s) }, fma: fmaLoopAVX2, lanes: avx2Lanes, chains: fmaChains}
}

// avx512BF16 says whether the AVX-512 bf16 routines may round with VCVTNE2PS2BF16 (AVX512_BF16):
// their stateArgs.cvt. Off with GODEBUG=cpu.avx512bf16=off (the integer rounding, the same bits).
var avx512BF16 = cpu.X86.HasAVX512BF16

// scaleChecked makes impl.scale of a scale routine that does not check its lengths: dst is cut to
// len(src) first, so that a short dst panics as scale's does instead of being written past.
func scaleChecked(f func(dst, src []float32, s float32)) func(dst, src []float32, s float32) {
	return func(dst, src []float32, s float32) { f(dst[:len(src)], src, s) }
}

// avx512Impl and avx2Impl are the kernels of gdn_amd64.s: the pieces, and the state routines
// [bf16][layout] with their limits (gdn_amd64.go's tables).
var (
	avx512Impl = withRoutines(impl{name: "avx512", state: single(stateKVf32AVX512), gate: gateAVX512, l2: l2AVX512,
		scale: scaleChecked(scaleAVX512), widen: widenAVX512, gates: gatesChecked(gatesAVX512),
		chans: chansChecked(chansAVX512, avx512Lanes), conv: convChecked(convAVX512, avx512ConvLanes), prefetches: true}, &avx512Routines)
	avx2Impl = withRoutines(impl{name: "avx2", state: single(stateKVf32AVX2), gate: gateAVX2, l2: l2AVX2,
		scale: scaleChecked(scaleAVX2), widen: widenAVX2, gates: gatesChecked(gatesAVX2),
		chans: chansChecked(chansAVX2, avx2Lanes), conv: convChecked(convAVX2, avx2ConvLanes), prefetches: true}, &avx2Routines)
)
