package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// The hand-written NEON file ../gdn_arm64.s encodes the instructions the Go assembler lacks as
// `WORD $0x… // MNEMONIC operands`. TestArm64Words decodes every such WORD with arm64asm and fails
// when the trailing comment is not the instruction the word encodes.

const arm64File = "../gdn_arm64.s"

// wordLine matches a WORD directive and captures the value and everything after it.
var wordLine = regexp.MustCompile(`^\s*WORD\s+\$([0-9A-Za-zxX]+)\s*(.*)$`)

// word is one WORD directive of an assembly file.
type word struct {
	line    int
	value   uint32
	comment string // trailing comment without "//", "" if none
}

// parseWords returns every WORD directive in src. A value that does not parse is an error.
func parseWords(src string) ([]word, error) {
	var words []word
	sc := bufio.NewScanner(strings.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		m := wordLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[1], 0, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d: WORD value %q: %v", n, m[1], err)
		}
		w := word{line: n, value: uint32(v)}
		rest := strings.TrimSpace(m[2])
		if after, ok := strings.CutPrefix(rest, "//"); ok {
			w.comment = strings.TrimSpace(after)
		} else if rest != "" {
			return nil, fmt.Errorf("line %d: unexpected text after WORD: %q", n, rest)
		}
		words = append(words, w)
	}
	return words, sc.Err()
}

// normalize makes an instruction text comparable: upper case, single spaces, no spaces around
// commas and brackets, "#imm" and "imm" alike.
func normalize(s string) string {
	s = strings.ToUpper(strings.Join(strings.Fields(s), " "))
	for _, p := range []string{",", "[", "]", "{", "}"} {
		s = strings.ReplaceAll(s, " "+p, p)
		s = strings.ReplaceAll(s, p+" ", p)
	}
	return strings.ReplaceAll(s, "#", "")
}

// checkWord returns nil when w's comment is the instruction its value encodes.
func checkWord(w word) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w.value)
	inst, err := arm64asm.Decode(b[:])
	if err != nil {
		return fmt.Errorf("line %d: WORD $%#08x does not decode: %v", w.line, w.value, err)
	}
	if w.comment == "" {
		return fmt.Errorf("line %d: WORD $%#08x (%v) has no trailing // comment with its mnemonic", w.line, w.value, inst)
	}
	if normalize(w.comment) != normalize(inst.String()) {
		return fmt.Errorf("line %d: WORD $%#08x encodes %q, but the comment says %q", w.line, w.value, inst.String(), w.comment)
	}
	return nil
}

func TestArm64Words(t *testing.T) {
	src, err := os.ReadFile(arm64File)
	if err != nil {
		t.Fatal(err)
	}
	words, err := parseWords(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(words) == 0 {
		t.Fatalf("no WORD directives found in %s", arm64File)
	}
	for _, w := range words {
		if err := checkWord(w); err != nil {
			t.Error(err)
		}
	}
	if !t.Failed() {
		t.Logf("%d WORDs in %s match their comments", len(words), arm64File)
	}
}

// TestArm64WordsCheck shows the check rejects what it must: each line is fed through the same
// parser and checker as the real file.
func TestArm64WordsCheck(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"\tWORD $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S", true},
		{"WORD $0x6e2bdc10 //fmul v16.4s,v0.4s,  v11.4s", true},         // case and spacing are free
		{"\tWORD $0x7e70da10 // FADDP D16, V16.2D", true},               // scalar pairwise
		{"\tWORD $0x6e2bdc10 // FADD V16.4S, V0.4S, V11.4S", false},     // wrong operation
		{"\tWORD $0x6e2bdc10 // FMUL V17.4S, V0.4S, V11.4S", false},     // wrong destination
		{"\tWORD $0x6e2bdc10 // FMUL V16.4S, V11.4S, V0.4S", false},     // operands swapped
		{"\tWORD $0x6e2bdc10 // FMUL V16.2D, V0.2D, V11.2D", false},     // wrong arrangement
		{"\tWORD $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S, V1", false}, // extra operand
		{"\tWORD $0x6e2bdc10", false},                                   // no comment
		{"\tWORD $0x6e2bdc10 // ", false},                               // empty comment
		{"\tWORD $0x00000000 // UDF", false},                            // does not decode as this
	} {
		words, err := parseWords(c.line)
		if err != nil || len(words) != 1 {
			t.Fatalf("%q: parsed %d words, err %v", c.line, len(words), err)
		}
		err = checkWord(words[0])
		if (err == nil) != c.ok {
			t.Errorf("%q: ok = %v, want %v (err: %v)", c.line, err == nil, c.ok, err)
		}
	}
	if _, err := parseWords("\tWORD $0xzz // FMUL V0.4S, V0.4S, V0.4S"); err == nil {
		t.Error("a WORD value that does not parse was accepted")
	}
}
