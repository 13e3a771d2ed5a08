package fuzz

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gdnsimd/gdnsimd/internal/oracle"
)

// namedSeed is one seed corpus entry.
type namedSeed struct {
	name string
	data []byte
}

// seedSteps are FuzzStep's seeds: the vectors' shapes with realistic values, a K = V sweep of
// vector-width edges, every value class in every tensor, every epsilon, NaN/±Inf in every tensor,
// B = 0 and very large |a| and |b|.
func seedSteps() []namedSeed {
	ordinary := [9]byte{cOrdinary, cOrdinary, cOrdinary, cOrdinary, cOrdinary, cOrdinary, cSmall, cOrdinary, cOrdinary}
	var s []namedSeed
	add := func(name string, b []byte) { s = append(s, namedSeed{name, b}) }
	vectors := []struct {
		name string
		d    oracle.Dims
		eps  byte
	}{
		{"c1_c2_c5_c6", oracle.Dims{B: 1, HK: 1, HV: 1, K: 2, V: 2}, 1},
		{"c3", oracle.Dims{B: 1, HK: 1, HV: 1, K: 2, V: 3}, 1},
		{"c4", oracle.Dims{B: 2, HK: 2, HV: 2, K: 2, V: 2}, 1},
		{"c5b", oracle.Dims{B: 1, HK: 1, HV: 1, K: 2, V: 2}, 2},
		{"c7_c8", oracle.Dims{B: 1, HK: 1, HV: 2, K: 2, V: 2}, 1},
		{"r_K128_V64", oracle.Dims{B: 1, HK: 2, HV: 4, K: 128, V: 64}, 1},
		{"r_K1_V1", oracle.Dims{B: 3, HK: 1, HV: 1, K: 1, V: 1}, 1},
		{"r_K64_V200", oracle.Dims{B: 1, HK: 1, HV: 2, K: 64, V: 200}, 1},
		{"r_expanded_B2", oracle.Dims{B: 2, HK: 2, HV: 2, K: 128, V: 128}, 1},
		{"r_qwen3next_gqa", oracle.Dims{B: 1, HK: 2, HV: 4, K: 128, V: 128}, 1},
		{"r_tails_K17_V33", oracle.Dims{B: 2, HK: 1, HV: 3, K: 17, V: 33}, 1},
	}
	for _, v := range vectors {
		add("vec_"+v.name, encodeStep(v.d, ordinary, v.eps, 0, 0, 0))
	}
	for _, n := range []int{1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 200, 256, 300} {
		add(fmt.Sprintf("sweep_K%d_V%d", n, n), encodeStep(oracle.Dims{B: 1, HK: 1, HV: 1, K: n, V: n}, ordinary, 1, 0, 0, 0))
		add(fmt.Sprintf("sweep_K%d_V%d", n, 301-n), encodeStep(oracle.Dims{B: 1, HK: 1, HV: 1, K: n, V: 301 - n}, ordinary, 1, 0, 0, 0))
	}
	add("gqa_HK16_HV32", encodeStep(oracle.Dims{B: 1, HK: 16, HV: 32, K: 16, V: 16}, ordinary, 1, 0, 0, 0))
	add("gqa_ratio6_B5", encodeStep(oracle.Dims{B: 5, HK: 4, HV: 24, K: 5, V: 9}, ordinary, 1, 0, 0, 0))
	add("empty_B0", encodeStep(oracle.Dims{B: 0, HK: 2, HV: 4, K: 8, V: 8}, ordinary, 1, 0, 0, 0))

	edge := oracle.Dims{B: 2, HK: 2, HV: 4, K: 17, V: 33}
	tensors := []string{"q", "k", "v", "z", "b", "a", "state", "params", "norm"}
	classNames := []string{"ordinary", "tiny", "huge", "zero", "denormal", "mixed", "constant", "small"}
	for t, tn := range tensors {
		for cl := cTiny; cl < nClasses; cl++ {
			for _, e := range []byte{0, 31} { // the smallest and the largest exponent
				if e != 0 && cl != cTiny && cl != cHuge {
					continue
				}
				c := ordinary
				c[t] = byte(cl) + 8*e
				add(fmt.Sprintf("class_%s_%s_e%d", tn, classNames[cl], e), encodeStep(edge, c, 1, 0, 0, 0, byte(t), byte(cl)))
			}
		}
	}
	for _, t := range []int{tB, tA} { // beta → 0 or 1, eg → 0 or 1: up to ±MaxFloat32
		c := ordinary
		c[t] = cHuge + 8*31
		add("huge_"+tensors[t]+"_maxfloat", encodeStep(edge, c, 1, 0, 0, 0, 1))
	}
	all := [9]byte{cMixed, cMixed, cMixed, cMixed, cMixed, cMixed, cMixed, cMixed, cMixed}
	add("all_mixed", encodeStep(edge, all, 1, 0, 0, 0))
	add("all_mixed_K1_V1", encodeStep(oracle.Dims{B: 5, HK: 1, HV: 6, K: 1, V: 1}, all, 1, 0, 0, 0))
	for e := range epsilons {
		add(fmt.Sprintf("eps_%d", e), encodeStep(edge, ordinary, byte(e), 0, 0, 0))
	}
	for t := range nTensors {
		for v, vn := range []string{"nan", "+inf", "-inf"} {
			add(fmt.Sprintf("poison_%s_%s", tensors[t], vn), encodeStep(oracle.Dims{B: 3, HK: 2, HV: 4, K: 9, V: 13}, ordinary, 1, 0xC0+byte(t), byte(v), byte(37*t+v)))
		}
	}
	return s
}

// writeCorpus writes seeds to testdata/fuzz/<target>/ in the go test fuzz v1 format.
func writeCorpus(t *testing.T, target string, seeds []namedSeed) {
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
		if err := os.WriteFile(filepath.Join(dir, "seed_"+s.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriteCorpus regenerates the committed seed corpus (GDN_WRITE_CORPUS=1 go test -run
// TestWriteCorpus ./fuzz); without the variable it checks that the committed seeds are current.
func TestWriteCorpus(t *testing.T) {
	targets := map[string][]namedSeed{"FuzzStep": seedSteps(), "FuzzAPI": seedAPIs()}
	if os.Getenv("GDN_WRITE_CORPUS") == "1" {
		for target, seeds := range targets {
			writeCorpus(t, target, seeds)
		}
		return
	}
	for target, seeds := range targets {
		for _, s := range seeds {
			b, err := os.ReadFile(filepath.Join("testdata", "fuzz", target, "seed_"+s.name))
			if err != nil {
				t.Fatalf("%v (regenerate with GDN_WRITE_CORPUS=1 go test -run TestWriteCorpus ./fuzz)", err)
			}
			if want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data); string(b) != want {
				t.Fatalf("%s/seed_%s is stale (regenerate with GDN_WRITE_CORPUS=1 go test -run TestWriteCorpus ./fuzz)", target, s.name)
			}
		}
	}
}

// seedAPIs are FuzzAPI's seeds (see checkAPI for the byte layout): valid calls in place and out of
// place, every slot nil, of a wrong length, overlapping or shifted, no output, B = 0, len(B) not a
// multiple of VHeads, and every kind of invalid config and kernel name.
func seedAPIs() []namedSeed {
	// config: rng, KHeads, VHeads, K, V, ratio, len(ALog), len(DtBias), len(NormWeight), eps,
	// workers, kernel, conv (ConvWidth; with a conv front two more bytes: ConvWeight, ConvBias),
	// steps-1; step: B, heads, 10 slots (Q K V Z B A State OutState Out OutF32).
	cfg := func(mod func(b []byte)) []byte {
		b := []byte{7, 1, 3, 2, 4, 1, 0, 0, 0, 1, 0, 0, 0, 0}
		if mod != nil {
			mod(b)
		}
		return b
	}
	step := func(mod func(b []byte)) []byte {
		b := []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0}
		if mod != nil {
			mod(b)
		}
		return b
	}
	var s []namedSeed
	add := func(name string, b ...[]byte) {
		var all []byte
		for _, x := range b {
			all = append(all, x...)
		}
		s = append(s, namedSeed{name, all})
	}
	add("valid_in_place", cfg(nil), step(nil))
	add("valid_out_of_place", cfg(nil), step(func(b []byte) { b[9] = 0 }))
	add("valid_two_steps_workers3", cfg(func(b []byte) { b[10], b[13] = 3, 1 }), step(nil), step(func(b []byte) { b[0] = 3 }))
	add("valid_B0_no_output", cfg(nil), step(func(b []byte) { b[0], b[10], b[11] = 0, 0xB0, 0xB0 }))
	add("no_output", cfg(nil), step(func(b []byte) { b[10], b[11] = 0xB0, 0xB0 }))
	add("heads_not_multiple", cfg(nil), step(func(b []byte) { b[1] = 0xE1 }))
	slots := []string{"Q", "K", "V", "Z", "B", "A", "State", "OutState", "Out", "OutF32"}
	for i, name := range slots {
		for _, m := range []struct {
			name string
			x    byte
		}{{"nil", 0xB0}, {"short", 0xC2}, {"long", 0xC4}, {"empty", 0xC3}, {"overlap", 0xD0}, {"overlap_odd", 0xD5}} {
			add("slot_"+name+"_"+m.name, cfg(nil), step(func(b []byte) { b[2+i] = m.x }))
		}
	}
	add("state_shifted", cfg(nil), step(func(b []byte) { b[9] = 0xF8 }))
	add("state_shifted_2", cfg(nil), step(func(b []byte) { b[9] = 0xF9 }))
	add("out_odd_offset", cfg(nil), step(func(b []byte) { b[10] = 0x04 }))
	for i, name := range []string{"KHeads", "VHeads", "K", "V"} {
		for _, m := range []struct {
			name string
			x    byte
		}{{"zero", 0xA0}, {"negative", 0xA5}, {"maxdim", 0xC2}, {"over_maxdim", 0xC3}, {"32", 0xFF}} {
			add("config_"+name+"_"+m.name, cfg(func(b []byte) { b[1+i] = m.x }), step(nil))
		}
	}
	add("config_not_multiple", cfg(func(b []byte) { b[1], b[2], b[5] = 2, 3, 0xC0 }), step(nil))
	for i, name := range []string{"ALog", "DtBias", "NormWeight"} {
		add("config_"+name+"_short", cfg(func(b []byte) { b[6+i] = 0xF1 }), step(nil))
		add("config_"+name+"_nil", cfg(func(b []byte) { b[6+i] = 0xF8 }), step(nil))
	}
	for e := range 8 {
		add(fmt.Sprintf("config_eps_%d", e), cfg(func(b []byte) { b[9] = byte(e) }), step(nil))
	}
	for w := range 8 {
		add(fmt.Sprintf("config_workers_%d", w), cfg(func(b []byte) { b[10] = byte(w) }), step(nil))
	}
	for k := range 11 {
		add(fmt.Sprintf("config_kernel_%d", k), cfg(func(b []byte) { b[11] = byte(k) }), step(nil))
	}
	// The conv front (KHeads 2, VHeads 4, K 3, V 5: C = 32 channels): conv byte, weight byte, bias byte.
	conv := func(x, w, bias byte) []byte {
		b := cfg(nil)
		return append(b[:12:12], x, w, bias, b[13])
	}
	for _, m := range []struct {
		name       string
		x, w, bias byte
	}{
		{"W2", 4, 0, 0}, {"W4_bias", 5, 0, 0x80}, {"W8", 6, 0, 0}, // valid: Step refuses the conv front (ErrUnsupported)
		{"W1", 7, 0, 0}, {"W9", 7 | 1<<3, 0, 0}, {"W_negative", 7 | 2<<3, 0, 0}, {"W0_weight", 7 | 3<<3, 0, 0},
		{"W0_weight_nil_bias", 7 | 3<<3, 0xF0, 0x80}, {"W0_nothing", 7 | 3<<3, 0xF0, 0},
		{"weight_short", 5, 0xE1, 0}, {"weight_long", 5, 0xE3, 0}, {"weight_nil", 5, 0xF0, 0},
		{"weight_nan", 5, 0xD0, 0}, {"weight_inf", 5, 0xD1, 0}, {"weight_zero_poke", 5, 0xD3, 0},
		{"bias_short", 5, 0, 0xD1}, {"bias_long", 5, 0, 0xD3}, {"bias_nan", 5, 0, 0xE0}, {"bias_neg_inf", 5, 0, 0xE2},
	} {
		add("config_conv_"+m.name, conv(m.x, m.w, m.bias), step(nil))
	}
	return s
}
