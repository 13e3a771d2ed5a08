package main

import (
	"testing"

	. "github.com/mmcloughlin/avo/operand"
)

// TestSpans checks the plans of the spans: full vectors contiguous from column 0, the masked one
// last at a run-time column under the ISA's mask, and that the single-token spans (with the fixed
// block of the odd shape) and the tokens routines' blocks cover every block width exactly once.
func TestSpans(t *testing.T) {
	for _, a := range []isa{avx512, avx2} {
		for full := 0; full <= 15; full++ {
			s := guardedSpan(a, full, 0, nil, Mem{}, &Mem{})
			if len(s.ps) != full+1 {
				t.Fatalf("%s span of %d: %d pieces", a.name, full, len(s.ps))
			}
			for i, p := range s.ps[:full] {
				if p.w != a.lanes || p.off != a.bytes()*i || p.mask != nil || p.lane != nil || p.idx != nil {
					t.Fatalf("%s span of %d: full piece %d = %+v", a.name, full, i, p)
				}
			}
			m := s.ps[full]
			if m.w != a.lanes || a.masks != (m.mask != nil) || a.masks == (m.lane != nil) {
				t.Fatalf("%s span of %d: masked piece %+v", a.name, full, m)
			}
		}
	}

	// Single-token AVX-512 tail (1 ≤ V mod 256 ≤ 255): n = 16·((V − 1) >> 4) selects V = 128's or
	// 64's fixed block, or the span with fixed ≤ n/16 ≤ full.
	ranges := stateSpans(avx512)
	for V := 1; V < 256; V++ {
		nfull := (V - 1) >> 4
		hits := 0
		if V == 128 || V == 64 {
			continue
		}
		for _, rg := range ranges {
			if rg[0] <= nfull && nfull <= rg[1] {
				hits++
			}
		}
		if hits != 1 {
			t.Fatalf("single-token V = %d (%d full ZMM): %d blocks serve it", V, nfull, hits)
		}
	}
	for k := 1; k < len(ranges); k++ {
		if ranges[k][0] <= ranges[k-1][1] {
			t.Fatalf("stateSpans %v: not ascending", ranges)
		}
	}
	if ranges[len(ranges)-1][1] != avx512.blockVecs-1 {
		t.Fatalf("stateSpans %v: the widest does not reach %d full vectors", ranges, avx512.blockVecs-1)
	}

	// AVX2 tails (single-token after the rows, tokens after the full blocks): a block of wd < 32
	// columns (cut to 16 from 24 on) is the 16-column block or a span of narrowSpan full vectors.
	for wd := 1; wd < 32; wd++ {
		w := wd
		if w >= 8*(narrowSpan+1) {
			w = 8 * narrowSpan
		}
		if w != 8*narrowSpan && w>>3 > narrowSpan {
			t.Fatalf("AVX2 block of %d columns: %d full YMM, the span has %d", w, w>>3, narrowSpan)
		}
	}

	// Single-token AVX-512: the model widths are fixed blocks within a block's width.
	for _, nv := range modelVecs {
		if nv > avx512.blockVecs {
			t.Fatalf("modelVecs %v: %d", modelVecs, nv)
		}
	}
}
