// Command asm writes ../gdn_amd64.s: the AVX-512 and AVX2 routines behind the "avx512" and "avx2"
// kernels of package gdnsimd, and their Go side (gdn_amd64.go, gdn_args.go). Run it from the
// repository root with
//
//	go generate ./...        (gen.go: go -C asm run . -out ../gdn_amd64.s -args ../gdn_args.go -go ../gdn_amd64.go)
//
// Each ISA gets the vector pieces of the portable kernel (gdn_generic.go, type impl):
//
//	state  the fused state update of one head: one read pass, δ and o, one write pass
//	gate   the gated RMSNorm of o: Σo² in float64, r, silu(z) or sigmoid(z) through a vectorised
//	       Exp32, bf16 RNE
//	l2     Σq², Σk², Σk·q in float64
//	scale  dst = src·s (q̂ and k̂ from q, k and their l2 factors)
//	gates  the gates beta, em1, eg of many lanes, a head's or a channel's (gdn_generic_gates.go's
//	       gatesGeneric), in float64
//	chans  the per-channel gate's decay pairs and decayed k̂, q̂ of a head-token (chansGeneric)
//
// The l2 factors and k̂·q̂ stay in the Go driver.
//
// # The two decays
//
// decay(x) is x + em1·x (one VFMADD213) when em1 ≥ −0.5, else eg·x (one VMULPS), as in SPEC Part
// A. The [V][K] routines choose the form once per token and branch into δ, o and the update
// emitted for either form (vkForm). The [K][V] routines (over T tokens, and their T = 1 plan)
// write either form as a pair, decay(x) = c·x + (x & m) (a VAND and one FMA, the same bits:
// decayPair), so that one pass serves both forms and the per-channel gate, whose rows each have
// their own pair (state_kv_tokens.go, state_kv_rows.go, state_kv.go; the cost to the scalar gate: doc/design.md).
//
// # The generator's files
//
//	main.go             the routine table (table: every TEXT, its emitter and its line budget,
//	                    checked by TestLineBudget), the variant type (ISA × layout × storage, names
//	                    derived), routine and label (labels are scoped per routine)
//	isa.go              the two ISAs and their capabilities (ask a.masks, not lanes == 16)
//	plan.go             pieces: one vector (or scalar) of a row, and the blocks cut into them
//	decay.go            the two decay forms (above)
//	consts.go           the RODATA constants (Exp32's from asm/internal/exp32consts)
//	state_kv.go         [K][V] f32, the T = 1 plan (the decode step) of stateKVf32<ISA>
//	state_kv_tokens.go  [K][V] over T tokens, f32 and bf16: stateKV<storage><ISA>, its column
//	                    blocks (pass 0, the token loop), the per-channel gate's bases
//	state_kv_rows.go    a token's pass over a [K][V] block: δ and o, then per row the update, the
//	                    next token's dots, the store and the carry
//	state_kv_storage.go a [K][V] row's loads and stores: f32, bf16 widened and rounded (AVX2's
//	                    narrow tail; two pieces at a time: bf16Pair, cvtStores)
//	state_kv_span.go    spans: one [K][V] block serving a range of widths (guarded vectors, one masked)
//	state_vk.go         [V][K] over T tokens, f32 and bf16: stateVK<storage><ISA>, rows carried in
//	                    registers; row shapes serving ranges of K (vkShapes), their positions (vkBody)
//	state_vk_rows.go    a [V][K] group's rows: loaded (from src or src32), stored (bf16 rounded,
//	                    cvt2; AVX2 f32 snapshots non-temporal)
//	state_vk_group.go   a [V][K] group's token loop: the dots, δ and o (finish), the update, and
//	                    the set-up, stores and carry every [V][K] token loop shares
//	state_vk_reduce.go  the transpose-add of a group's dots (vkReduce) and the [V][K] constants
//	state_vk_decode.go  [V][K] one token with a store, from src to stores[0]: the AVX2 pairs
//	                    (once), AVX-512 f32 with k̂ and q̂ in registers (direct)
//	state_vk_block.go   the AVX-512 [V][K] row blocks in L1 (T > 1)
//	prefetch.go         the prefetch list of the routines over T tokens (the driver's next call's rows)
//	gate.go, l2.go, widen.go, bench_floor.go   the small pieces and the bench floors
//	gates.go            the float64 head gates (constants from asm/internal/gates64consts)
//	chans.go            the per-channel gate's pairs and dot vectors
//	conv.go             the conv front's causal conv1d and SiLU (convRoutine)
//	args.go             the state routines' one argument (asm/internal/stateargs: its fields and
//	                    offsets; -args writes its Go declaration, gdn_args.go)
//	gostubs.go          the Go side (-go: gdn_amd64.go): stubs, the routine tables, constants
//	                    with each routine's limits and snapshot rule (asm/internal/gofile)
//
// Tails are a few shapes, not a copy per width: a shape is emitted once for the widths of the
// models (K, V ∈ {64, 128, 192, 256}, and K = 96, V = 80 of the odd benchmark shape at the top of
// a shape) and serves the widths below it down to the previous shape, its vectors beyond the
// width skipped by branches that go the same way for a whole call, the last live one masked.
//
// The decisions are in comments at the code; the measurements behind them are doc/design.md and doc/notebook/.
//
// # Hygiene
//
// Constants are file-local RODATA (name<>(SB)); no routine uses R15 (go build -asmflags=-dynlink);
// every routine ends with VZEROUPPER; the AVX2 routines use only Y0–Y15/X0–X15 (the tests check
// the generated file); the AVX-512 ones need AVX512F, AVX512VL and AVX512BW only.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/gdnsimd/gdnsimd/asm/internal/stateargs"
	"github.com/mmcloughlin/avo/attr"
	. "github.com/mmcloughlin/avo/build"
)

func main() {
	ConstraintExpr("!purego")
	constants()
	vkConstants()
	gatesConstants()
	for _, r := range table() {
		r.emit()
		if current != r.name {
			panic(fmt.Sprintf("the table's %s emitted %s", r.name, current))
		}
	}
	Generate()
	if f := flag.Lookup("out"); f != nil && f.Value.String() != "" {
		if err := cvt2Fixup(f.Value.String()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *goOut != "" {
		src, err := goFile().Source()
		if err == nil {
			err = os.WriteFile(*goOut, src, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *argsOut != "" {
		if err := os.WriteFile(*argsOut, stateargs.GoSource(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// goOut is where the Go side of gdn_amd64.s goes (gdn_amd64.go: gostubs.go).
var goOut = flag.String("go", "", "also write the Go declarations and kernel tables of the routines to this file")

// argsOut is where the Go side of the state routines' argument struct goes (gdn_args.go).
var argsOut = flag.String("args", "", "also write the Go declaration of the state routines' argument struct to this file")

// stateSigLine is avo's header comment of a state routine, stateArgOp an operand of its argument
// (a_3+24(FP): word 3, byte 24); fixups names the Go type and the fields in them.
var (
	stateSigLine = regexp.MustCompile(`(?m)^(// func state\w+\(a )\[\d+\]uint64\)$`)
	stateArgOp   = regexp.MustCompile(`\ba_(\d+)\+(\d+)\(FP\)`)
)

// cvt2Mark is the comment before cvt2's stand-in; cvt2Line is the two lines in avo's output (the
// comment, after the blank line avo puts before one, then VPACKSSDW Zlo, Zhi, Zdst), so that no
// other VPACKSSDW is rewritten.
const cvt2Mark = "cvt2: VCVTNE2PS2BF16 (bytes below)"

var cvt2Line = regexp.MustCompile(`\n+\t// ` + regexp.QuoteMeta(cvt2Mark) + `\n\tVPACKSSDW\s+Z(\d+), Z(\d+), Z(\d+)\n`)

// textLine is a routine's TEXT line: a PCALIGN $64 follows it (cvt2Fixup), which makes the linker
// place the routine at a 64-byte boundary. Without it the routines moved with the Go code linked
// before them (32-byte aligned): a change of the driver's Go code shifted every routine by 544
// bytes, and [V][K] bf16 decode at B = 64 took 5.0–5.4 ms against 4.7–4.8 on a Zen 5.
var textLine = regexp.MustCompile(`(?m)^TEXT [^\n]*\n`)

// cvt2Fixup replaces every cvt2 stand-in in the file by the bytes of VCVTNE2PS2BF16 (cvt2Bytes).
// gdn_amd64.s has no VPACKSSDW left (TestNoPackSSDW).
func cvt2Fixup(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out := cvt2Line.ReplaceAllFunc(b, func(m []byte) []byte {
		g := cvt2Line.FindSubmatch(m)
		lo, _ := strconv.Atoi(string(g[1]))
		hi, _ := strconv.Atoi(string(g[2]))
		dst, _ := strconv.Atoi(string(g[3]))
		var w strings.Builder
		w.WriteString("\n\t")
		for i, x := range cvt2Bytes(dst, hi, lo) {
			if i > 0 {
				w.WriteString("; ")
			}
			fmt.Fprintf(&w, "BYTE $0x%02x", x)
		}
		fmt.Fprintf(&w, " // VCVTNE2PS2BF16 Z%d, Z%d, Z%d\n", lo, hi, dst)
		return []byte(w.String())
	})
	out = stateSigLine.ReplaceAll(out, []byte("${1}stateArgs)"))
	out = textLine.ReplaceAll(out, []byte("$0\tPCALIGN $$64 // the routine 64-byte aligned: its loops' alignment is the same in every build\n"))
	out = stateArgOp.ReplaceAllFunc(out, func(m []byte) []byte {
		g := stateArgOp.FindSubmatch(m)
		off, _ := strconv.Atoi(string(g[2]))
		f, e := stateargs.At(off)
		if e >= 0 { // an array's element: go vet names it a_tok1_2
			return []byte(fmt.Sprintf("a_%s_%d+%d(FP)", f.Name, e, off))
		}
		return []byte(fmt.Sprintf("a_%s+%d(FP)", f.Name, off))
	})
	return os.WriteFile(path, out, 0o644)
}

// cvt2Bytes is the EVEX encoding of VCVTNE2PS2BF16 zmm(dst), zmm(src1), zmm(src2) (Intel operand
// order: dst's low 16 words from src2, its high 16 from src1): EVEX.512.F2.0F38.W0 72 /r.
func cvt2Bytes(dst, src1, src2 int) []byte {
	inv := func(x, bit int) byte { return byte(^x>>bit) & 1 }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0x2 // R X B R' 00 mm=0F38
	p1 := byte(^src1&15)<<3 | 0x4 | 0x3                                             // W=0 vvvv 1 pp=F2
	p2 := byte(0x40) | inv(src1, 4)<<3                                              // z=0 L'L=512 b=0 V' aaa=0
	return []byte{0x62, p0, p1, p2, 0x72, 0xc0 | byte(dst&7)<<3 | byte(src2&7)}
}

// layout is a head's state layout: [K][V] (row i holds S[i][0..V)) or [V][K] (row j holds
// S[0..K)[j], the transpose).
type layout int

const (
	layoutKV layout = iota
	layoutVK
)

func (l layout) String() string { return [...]string{"KV", "VK"}[l] }

// variant is one state routine over T tokens: ISA × layout × storage. Its name and everything
// that depends on the storage (the element size) are derived from it here, once.
type variant struct {
	a      isa
	layout layout
	st     storage
}

// variants is every state routine over T tokens, in output order: [K][V] (state_kv_tokens.go)
// then [V][K] (state_vk.go), by storage (storages), AVX-512 then AVX2.
func variants(l layout) []variant {
	var vs []variant
	for _, a := range []isa{avx512, avx2} {
		for _, st := range storages {
			vs = append(vs, variant{a, l, st})
		}
	}
	return vs
}

// name is the routine's name, state<Layout><storage><ISA>: stateVKbf16AVX2.
func (v variant) name() string { return "state" + v.layout.String() + v.st.String() + v.a.name }

// es is the size of a state element in bytes (offsets are in elements, scaled by es).
func (v variant) es() int { return v.st.es() }

// spec is one routine of the output: its name, what emits it, and its budget: the most lines its
// TEXT block may have in gdn_amd64.s (TestLineBudget), so that growth — a new specialisation, a
// tail copied per width — is a decision made here and not a side effect.
type spec struct {
	name   string
	emit   func()
	budget int
}

// table is every routine of gdn_amd64.s, in output order.
func table() []spec {
	var t []spec
	for _, a := range []isa{avx512, avx2} {
		t = append(t,
			spec{"gate" + a.name, func() { gateRoutine(a) }, 950}, // silu or sigmoid: the division of each group twice
			spec{"l2" + a.name, func() { l2Routine(a) }, 100},
			spec{"scale" + a.name, func() { scaleRoutine(a) }, 60})
	}
	kvBudget := map[string]int{"stateKVf32AVX512": 3400, "stateKVbf16AVX512": 3050, "stateKVf32AVX2": 3700, "stateKVbf16AVX2": 3350}
	for _, v := range variants(layoutKV) {
		t = append(t, spec{v.name(), func() { stateKVTokens(v) }, kvBudget[v.name()]})
		if v.st == storages[len(storages)-1] { // after an ISA's last
			t = append(t, spec{"widen" + v.a.name, func() { widenRoutine(v.a) }, 60})
		}
	}
	vkBudget := map[string]int{"stateVKf32AVX512": 5000, "stateVKbf16AVX512": 5000, "stateVKf32AVX2": 3150, "stateVKbf16AVX2": 5000}
	for _, v := range variants(layoutVK) {
		t = append(t, spec{v.name(), func() { stateVK(v) }, vkBudget[v.name()]})
	}
	for _, a := range []isa{avx512, avx2} {
		t = append(t, spec{"gates" + a.name, func() { gatesRoutine(a) }, 500},
			spec{"chans" + a.name, func() { chansRoutine(a) }, 60},
			spec{"conv" + a.name, func() { convRoutine(a) }, 300})
	}
	for _, a := range []isa{avx512, avx2} {
		t = append(t,
			spec{"fmaLoop" + a.name, func() { fmaLoop(a) }, 60})
	}
	return t
}

// current is the routine being emitted, labels its label counters: labels are scoped per routine
// (name_prefix_n), so adding or changing a routine never renumbers another's.
var (
	current string
	labels  map[string]int
)

// routine starts the routine name (avo's TEXT) and its label scope.
func routine(name string, a attr.Attribute, signature string) {
	TEXT(name, a, signature)
	current, labels = name, map[string]int{}
	sigs[name] = signature
}

// label returns a fresh label of the current routine: "<routine>_<prefix>_<n>".
func label(prefix string) string {
	labels[prefix]++
	return fmt.Sprintf("%s_%s_%d", current, prefix, labels[prefix])
}
