package main

import (
	"strings"
	"testing"
)

// TestVKLineBudget keeps the [V][K] routines under a line budget in gdn_amd64.s (the routine's
// comment, TEXT line and body), so that their growth is a decision: specialised per row width
// they took 41,476 lines; as shapes (state_vk.go) 11,671.
func TestVKLineBudget(t *testing.T) {
	budget := map[string]int{"vkf32AVX512": 3700, "vkbf16AVX512": 5500, "vkf32AVX2": 1100, "vkbf16AVX2": 1900}
	rs := routines(t)
	total := 0
	for name, max := range budget {
		body, ok := rs[name]
		if !ok {
			t.Fatalf("no routine %s", name)
		}
		n := strings.Count(body, "\n")
		total += n
		if n > max {
			t.Errorf("%s: %d lines, over its budget of %d", name, n, max)
		}
	}
	if total > 12000 {
		t.Errorf("the [V][K] routines: %d lines, over their budget of 12,000", total)
	}
}
