package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestCvt2Bytes: cvt2Bytes against GNU as (binutils 2.40: `vcvtne2ps2bf16 %zmm<src2>, %zmm<src1>,
// %zmm<dst>`, objdump -d), every register field with and without its high bits.
func TestCvt2Bytes(t *testing.T) {
	for _, c := range []struct {
		dst, src1, src2 int
		want            string
	}{
		{1, 2, 3, "62 f2 6f 48 72 cb"},
		{9, 17, 31, "62 12 77 40 72 cf"},
		{0, 0, 0, "62 f2 7f 48 72 c0"},
		{16, 24, 8, "62 c2 3f 40 72 c0"},
		{31, 31, 31, "62 02 07 40 72 ff"},
		{14, 3, 0, "62 72 67 48 72 f0"},
		{23, 8, 19, "62 a2 3f 48 72 fb"},
		{7, 15, 16, "62 b2 07 48 72 f8"},
		{24, 1, 9, "62 42 77 48 72 c1"},
	} {
		got := strings.TrimSpace(fmt.Sprintf("% x", cvt2Bytes(c.dst, c.src1, c.src2)))
		if got != c.want {
			t.Errorf("cvt2Bytes(%d, %d, %d) = %s, want %s", c.dst, c.src1, c.src2, got, c.want)
		}
	}
}

// TestNoPackSSDW: gdn_amd64.s has no VPACKSSDW left (cvt2's stand-in, replaced by cvt2Fixup; the
// routines use no real one), and its VCVTNE2PS2BF16 bytes are cvt2Bytes of the registers their
// comments name.
func TestNoPackSSDW(t *testing.T) {
	b, err := os.ReadFile("../gdn_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "VPACKSSDW") {
			t.Errorf("a VPACKSSDW in gdn_amd64.s: %q", l)
		}
		i := strings.Index(l, "// VCVTNE2PS2BF16 ")
		if i < 0 {
			continue
		}
		n++
		var lo, hi, dst int
		if _, err := fmt.Sscanf(l[i:], "// VCVTNE2PS2BF16 Z%d, Z%d, Z%d", &lo, &hi, &dst); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		var w []string
		for _, x := range cvt2Bytes(dst, hi, lo) {
			w = append(w, fmt.Sprintf("BYTE $0x%02x", x))
		}
		if want := "\t" + strings.Join(w, "; ") + " "; !strings.HasPrefix(l, want) {
			t.Errorf("%q: want the bytes %q", l, want)
		}
	}
	if n == 0 {
		t.Error("no VCVTNE2PS2BF16 in gdn_amd64.s")
	}
}
