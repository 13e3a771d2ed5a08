package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gdnsimd/gdnsimd/asm/internal/stateargs"
)

// TestPlans checks that the pieces of every state block tile its columns exactly: contiguous,
// in order, as wide as intended.
func TestPlans(t *testing.T) {
	check := func(name string, ps []piece, cols int) {
		t.Helper()
		off := 0
		for i, p := range ps {
			if p.off != off {
				t.Fatalf("%s: piece %d at byte %d, want %d", name, i, p.off, off)
			}
			off += 4 * p.w
		}
		if width(ps) != cols {
			t.Fatalf("%s: %d columns, want %d", name, width(ps), cols)
		}
	}
	check("avx512 full", fullBlock(avx512), 16*avx512.blockVecs)
	check("avx2 full", fullBlock(avx2), 8*avx2.blockVecs)
	for nv := 1; nv <= avx512.blockVecs; nv++ {
		ps := maskedBlock(nv)
		check("masked", ps, 16*nv)
		for i, p := range ps {
			if (p.mask != nil) != (i == nv-1) {
				t.Fatalf("maskedBlock(%d): piece %d mask %v", nv, i, p.mask)
			}
		}
	}
	for nv := 1; nv < avx2.blockVecs; nv++ {
		check("ymm", ymmBlock(nv), 8*nv)
	}
	for n := 1; n < 8; n++ {
		ps := narrowBlock(n)
		check("narrow", ps, n)
		if len(ps) > 4 {
			t.Fatalf("narrowBlock(%d) has %d pieces: too many registers", n, len(ps))
		}
	}
}

// TestGeneratedFileIsCurrent regenerates the assembly into a temporary file and compares it with
// ../gdn_amd64.s byte for byte, but for the header line that names the output path (.ci/run checks
// the whole file with go generate and git diff).
func TestGeneratedFileIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	out := filepath.Join(t.TempDir(), "gdn_amd64.s")
	cmd := exec.Command("go", "run", ".", "-out", out)
	cmd.Env = append(os.Environ(), "GOARCH=", "GOOS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run . -out: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../gdn_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	// The first line names the -out path.
	_, got, _ = bytes.Cut(got, []byte("\n"))
	_, want, _ = bytes.Cut(want, []byte("\n"))
	if !bytes.Equal(got, want) {
		t.Fatal("../gdn_amd64.s is not what the generator writes: run go generate ./... in the repository root")
	}
}

// routines splits the generated file into its TEXT blocks: name → body (with the comment lines
// just above the TEXT line).
func routines(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile("../gdn_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	parts := regexp.MustCompile(`(?m)^// func `).Split(string(src), -1)
	m := map[string]string{}
	name := regexp.MustCompile(`TEXT ·(\w+)\(SB\)`)
	for _, p := range parts[1:] {
		n := name.FindStringSubmatch(p)
		if n == nil {
			t.Fatalf("no TEXT in %.80q", p)
		}
		m[n[1]] = p
	}
	return m
}

// TestHygiene checks the generated routines: the expected set; every one ends in VZEROUPPER; RET
// and uses no R15 (go build -asmflags=-dynlink); the AVX2 ones name no register an AVX2-only CPU
// lacks (Z, K, X16–X31, Y16–Y31); the AVX-512 ones need no more than AVX512F, VL and BW (cvt2's
// bytes, AVX512_BF16, which avo does not see, run only where stateVKbf16AVX512's cvt is true).
func TestHygiene(t *testing.T) {
	rs := routines(t)
	var want []string
	for _, r := range table() {
		want = append(want, r.name)
	}
	if len(rs) != len(want) {
		t.Fatalf("routines %v, want %v", keys(rs), want)
	}
	evex := regexp.MustCompile(`\b(Z\d+|K[0-7]|[XY](1[6-9]|2\d|3[01]))\b`)
	requires := regexp.MustCompile(`// Requires: (.*)`)
	for _, name := range want {
		body, ok := rs[name]
		if !ok {
			t.Fatalf("no routine %s", name)
		}
		if regexp.MustCompile(`\bR15\b`).MatchString(body) {
			t.Errorf("%s uses R15", name)
		}
		if n := strings.Count(body, "\tRET"); n != strings.Count(body, "\tVZEROUPPER\n\tRET") || n == 0 {
			t.Errorf("%s: %d RETs, not all after VZEROUPPER", name, n)
		}
		req := requires.FindStringSubmatch(body)
		if req == nil {
			t.Fatalf("%s: no Requires line", name)
		}
		for _, f := range strings.Split(req[1], ", ") {
			// MMX+: PREFETCHT1 (SSE), CMOV: part of every amd64 CPU.
			allowed := map[string]bool{"AVX": true, "AVX2": true, "FMA3": true, "MMX+": true, "CMOV": true}
			if strings.HasSuffix(name, "AVX512") {
				allowed["AVX512F"], allowed["AVX512VL"] = true, true
				// VPMOVZXWD into a ZMM (bf16) is AVX512BW, which avo does not list; checked.
				allowed["AVX512BW"] = true
			}

			if !allowed[f] {
				t.Errorf("%s requires %s (dispatch in gdn_amd64.go does not check it)", name, f)
			}
		}
		if strings.HasSuffix(name, "AVX2") {
			if m := evex.FindString(body); m != "" {
				t.Errorf("%s names %s: EVEX only, not on AVX2 CPUs", name, m)
			}
		}
	}
}

// The hard caps on generated code, for their own sake (a routine a reader can hold; an output a
// review can read): no routine over capRoutine lines, gdn_amd64.s and gdn_arm64.s within theirs.
// They are not raised to fit a routine: the routine changes.
const (
	capRoutine = 5000
	capAMD64   = 35000
	capARM64   = 8000
)

// TestLineBudget keeps every routine of gdn_amd64.s within the line budget the table gives it
// (main.go) and under capRoutine, and the generated files under their caps: a new
// specialisation or a tail copied per width shows up here first.
func TestLineBudget(t *testing.T) {
	rs := routines(t)
	for _, r := range table() {
		n := strings.Count(rs[r.name], "\n")
		if n > r.budget {
			t.Errorf("%s: %d lines, over its budget of %d (main.go, table)", r.name, n, r.budget)
		}
		if r.budget > capRoutine {
			t.Errorf("%s: a budget of %d lines, over the cap of %d", r.name, r.budget, capRoutine)
		}
		t.Logf("%-20s %6d lines (budget %d)", r.name, n, r.budget)
	}
	for _, f := range []struct {
		name string
		cap  int
	}{{"../gdn_amd64.s", capAMD64}, {"../gdn_arm64.s", capARM64}} {
		src, err := os.ReadFile(f.name)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(src), "\n")
		if n > f.cap {
			t.Errorf("%s: %d lines, over the cap of %d", f.name, n, f.cap)
		}
		t.Logf("%-20s %6d lines (cap %d)", f.name, n, f.cap)
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestWorkSpace holds what the routines keep in the work space to its generated size
// (stateargs.WorkFloats, less the 64 bytes of alignment): a [K][V] column block of one vector at
// the table's largest K, the AVX-512 [V][K] blocks, the AVX2 pairs.
func TestWorkSpace(t *testing.T) {
	room := 4 * (stateargs.WorkFloats - 16)
	for _, a := range []isa{avx512, avx2} {
		if n := 4 * a.lanes * a.kvMaxK(); n > room {
			t.Errorf("%s [K][V]: a column block at K = %d takes %d bytes, the work space has %d", a.name, a.kvMaxK(), n, room)
		}
	}
	if vkBlockWork > room {
		t.Errorf("the [V][K] blocks take %d bytes, the work space has %d", vkBlockWork, room)
	}
	if n := 2 * 32 * vkMaxVecs; n > room { // a pair: two rows of vkMaxVecs YMM
		t.Errorf("the [V][K] pairs take %d bytes, the work space has %d", n, room)
	}
}

// TestRoutinesAligned: every routine of gdn_amd64.s starts with PCALIGN $64, so that the linker
// places it at a 64-byte boundary and its loops sit at the same alignment whatever Go code is
// linked before it.
func TestRoutinesAligned(t *testing.T) {
	b, err := os.ReadFile("../gdn_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	n := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "TEXT ") {
			n++
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "\tPCALIGN $64") {
				t.Errorf("%s: not followed by PCALIGN $64", l)
			}
		}
	}
	if n == 0 {
		t.Fatal("no TEXT line")
	}
}
