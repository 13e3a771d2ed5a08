package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gdnsimd/gdnsimd/asm/internal/gofile"
)

// The Go side of gdn_amd64.s (gdn_amd64.go, written with it: -go): the stubs with their
// reference loops, the CPU detection and the two kernels' tables. The limits of the tables are
// the generator's: the frame's column block (kvMaxK), the [V][K] shapes (vkMaxK), the pairs'
// range, the snapshot rules of the non-temporal stores (ntSpan, vkSnapshot).

// sigs records each routine's avo signature (routine), for its Go declaration.
var sigs = map[string]string{}

// kvMaxK is the largest K of a [K][V] routine over T tokens: a column block of one vector keeps
// its K rows in the 32 KiB work space.
func (a isa) kvMaxK() int { return kvWork / (4 * a.lanes) }

// vkMinK, vkMaxK are the K of the [V][K] shapes (vkShapes: the largest shape's vectors); the AVX2
// pairs need a whole vector.
func (a isa) vkMinK() int {
	if a.vkPairs() {
		return a.lanes
	}
	return 0
}

func (a isa) vkMaxK() int { return a.lanes * slices.Max(vkShapes(a)) }

// snap is the snapshot rule of a variant's f32 routine (its stores non-temporal, so one call of T
// tokens): [K][V], V a multiple of 16 (every block a fixed span of whole vectors: ntSpan) and the
// stores aligned to a vector; [V][K], K a multiple of the lanes up to the blocks' 128 (vkSnapshot)
// and, with the AVX-512 blocks, at least 16 rows.
func (v variant) snap() *gofile.Snap {
	if v.st.narrow() {
		return nil
	}
	if v.layout == layoutKV {
		return &gofile.Snap{VMod: 16, Align: v.a.bytes()}
	}
	s := &gofile.Snap{KMod: v.a.lanes, KMax: v.a.vkMaxK(), Align: v.a.bytes()}
	if v.a.vkBlocks() { // the blocks' rows, and a whole sub-block
		s.KMax, s.VMin = vkBlockVecs*v.a.lanes, vkSub
	}
	return s
}

// goRoutine is v's entry in its kernel's table.
func (v variant) goRoutine() *gofile.Routine {
	r := &gofile.Routine{Fn: v.name(), Storage: v.st.goName(), Snap: v.snap(), Work: true}
	if v.layout == layoutKV {
		r.MaxK, r.Chans = v.a.kvMaxK(), true
	} else {
		r.MinK, r.MaxK, r.OddRow = v.a.vkMinK(), v.a.vkMaxK(), v.a.vkPairs()
	}
	if v.st.cvt2() && v.a.evex {
		r.Cvt = "avx512BF16"
	}
	return r
}

// goDocs are the doc comments of the Go declarations, by routine name (%[1]s the ISA's name).
var goDocs = map[string]string{
	"gate": `gate%[1]s is gateGeneric in %[1]s: for V = len(o) (z, w at least as long; out and outF nil or
at least as long, not checked)

	r := float32(1 / math.Sqrt(Σ_j float64(o[j])² / V + float64(eps)))    (Σ in float64)
	y := o[j]·r·w[j]·act(z[j]);  outF[j] = y;  out[j] = BF16RNE(y)

act is silu32, or sigmoid32 if sig; a nil out or outF is skipped. act and BF16RNE are computed as
the Go functions do, operation for operation (exp32's constants and clamps, NaN propagating).`,
	"l2": `l2%[1]s is l2Generic in %[1]s: Σq², Σk², Σk·q over len(q) elements (len(k) ≥ len(q), not
checked), accumulated in float64.`,
	"scale": `scale%[1]s sets dst[i] = src[i]·s for i < len(src) (len(dst) ≥ len(src), not checked: see
scaleChecked), one multiply per element, so the bits are scale's; in place, the memory floor of
package bench.`,
	"widen": `widen%[1]s is widenGeneric in %[1]s (len(src) ≥ len(dst), not checked).`,
	"gates": `gates%[1]s is gatesGeneric in %[1]s (asm/gates.go): lanes of float64, each lane's operations
gatesGeneric's in its order, so the bits are the same. It takes len(a) lanes; every other slice
holds at least len(a) elements, or b is empty (not checked: see gatesChecked).`,
	"chans": `chans%[1]s is chansGeneric in %[1]s (asm/chans.go) for the whole vectors of len(em1) channels
(the others are not written; every slice holds at least len(em1) elements, pairs 2·len(em1): not
checked, see chansChecked): c·kh and c·qh rounded on their own, then added, as chanDecay does.`,
	"conv": `conv%[1]s is convGeneric in %[1]s (asm/conv.go) for the whole vectors of len(bias) channels
(AVX-512: and the channels after them, one masked vector; AVX2: the others are not written): per
token, the taps a loop over W, each product rounded on its own, then added (VMULPS, VADDPS), and
silu through Exp32, so the bits are convGeneric's. Row τ+j of token τ's tap j is x[τ+j]; strides
in elements; W ≥ 1, T ≥ 1 and the lengths (x's and its rows') are not checked: see convChecked.`,
	"fmaLoop": `fmaLoop%[1]s runs n iterations of floor.chains independent VFMADD231PS chains on registers
(the core's FMA throughput: a benchmark floor of package bench).`,
	"stateKV": `state%[2]s is the [K][V] state routine over T tokens in %[1]s (asm/state_kv_tokens.go). Per
token it computes what its T = 1 plan computes (whole rows, any K: impl.state), product for
product and in the same order, so that T calls of one token and one call of T tokens give the
same bits and a bf16 store is BF16RNE of the f32 routine's state:

	decay_τ(x) := x + em1_τ·x (fused) if em1_τ ≥ −0.5, else eg_τ·x (also for a NaN em1)
	S := src (bf16 widened; src32 instead when it is not nil)
	for τ := range T:
		for j := range V:
			kv, qs := Σ_i rk_τ[i]·S[i][j], Σ_i rq_τ[i]·S[i][j]     (FMAs from 0, i ascending)
			d := (v_τ[j] − decay_τ(kv))·beta_τ;  o_τ[j] = decay_τ(qs) + d·kq_τ
			for i := range K: S[i][j] = decay_τi(S[i][j]) + d·kh_τ[i]
		if stores[τ] != nil: stores[τ] ← S (bf16: BF16RNE)
	carry ← S (bf16 routines, when not nil)

in column blocks whose K rows stay in work (L1) for all T tokens. Without ch, rk, rq are kh, qh
and decay_τi is decay_τ; with ch (the per-channel gate: em1_τ = −1, eg_τ = 1) rk_τ, rq_τ are
ch[4Kτ:], ch[4Kτ+K:] and decay_τi(x) = c·x + (x & m) (fused) with c, m = ch[4Kτ+2K+2i],
ch[4Kτ+2K+2i+1] (chanForm). Every decay is computed as that pair form, the same bits.`,
	"stateVK": `state%[2]s is the [V][K] state routine over T tokens in %[1]s (asm/state_vk.go). Per row j
(K contiguous elements) and token τ, with tok[4τ:4τ+4] = em1, eg, beta, kq and decay(x) = x +
em1·x (fused) when em1 ≥ −0.5, else eg·x (also for a NaN em1), chosen per token:

	kv, qs := Σ_i kh[τK+i]·S[j][i], Σ_i qh[τK+i]·S[j][i]
	d := beta·(v[τ·vs+j] − decay(kv));  o[τV+j] = decay(qs) + kq·d   (fused)
	S[j][i] = decay(S[j][i]) + kh[τK+i]·d                            (fused)

Groups of rows are loaded once, carried in registers through the T tokens and stored where
stores[τ] is not nil (bf16: rounded to nearest even; then the f32 carry, if not nil).
AVX-512: for T > 1 and K ≤ 128, blocks of 32, then 16 rows in work (asm/state_vk_block.go); the
rows left, and every row when T = 1, take the register groups. AVX2: pairs of rows in work, each
token's update and the next token's dots in one pass over them; with one token and a store
(bf16: without src32 and carry), the pairs from src to stores[0]. An odd V's last row is the
adapter's (vkOddRow): a one-row group per shape took 1,706 (f32) and 2,944 (bf16) lines.`,
}

// convLanes is the lanes convChecked is given for conv: 1 where the routine takes every channel
// (the masked vector of AVX-512), else the vector's.
func (a isa) convLanes() int {
	if a.masks {
		return 1
	}
	return a.lanes
}

// goDoc is the doc comment of routine name.
func goDoc(name string) string {
	for _, a := range []isa{avx512, avx2} {
		if !strings.HasSuffix(name, a.name) {
			continue
		}
		base := strings.TrimSuffix(name, a.name)
		for _, p := range []string{"stateKV", "stateVK"} {
			if strings.HasPrefix(base, p) {
				return fmt.Sprintf(goDocs[p], a.name, strings.TrimPrefix(base, "state")+a.name)
			}
		}
		return fmt.Sprintf(goDocs[base], a.name)
	}
	panic("goDoc: " + name)
}

// goFile is gdn_amd64.go: the constants kernels_amd64.go's impl literals and benchmark floors
// take, the routine tables and the stubs.
func goFile() gofile.File {
	f := gofile.File{
		Generator: "go -C asm run . (asm/gostubs.go)",
		Build:     "!purego",
		Consts: []gofile.Const{
			{Name: "avx512Lanes", Value: avx512.lanes, Doc: "avx512Lanes, avx2Lanes are the float32 lanes of a vector: chansChecked's and the FMA floor's."},
			{Name: "avx2Lanes", Value: avx2.lanes},
			{Name: "avx512ConvLanes", Value: avx512.convLanes(), Doc: "avx512ConvLanes, avx2ConvLanes are the channels convChecked hands the conv routine a multiple of\n(1: AVX-512 masks the tail)."},
			{Name: "avx2ConvLanes", Value: avx2.convLanes()},
			{Name: "fmaChains", Value: fmaChains, Doc: "fmaChains is the number of independent FMA chains of fmaLoopAVX512 and fmaLoopAVX2."},
		},
	}
	for _, a := range []isa{avx512, avx2} {
		k := gofile.Kernel{Name: strings.ToLower(a.name), Routines: make([][2]*gofile.Routine, len(storages))}
		for _, l := range []layout{layoutKV, layoutVK} {
			for _, v := range variants(l) {
				if v.a == a {
					k.Routines[v.st][l] = v.goRoutine()
				}
			}
		}
		f.Kernels = append(f.Kernels, k)
	}
	for _, s := range table() {
		sig := sigs[s.name]
		params := strings.TrimPrefix(sig, "func")
		if sig == stateSig {
			params = "(a stateArgs)"
		}
		f.Funcs = append(f.Funcs, gofile.Func{Name: s.name, Params: params, Doc: goDoc(s.name)})
	}
	return f
}
