package main

import (
	"encoding/binary"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// reserved are the registers gdn_arm64.s must not name: R18 (the platform register), R27 (the
// assembler's temporary), R28 = g, R29 = the frame pointer, R30 = LR (RET returns through it; the
// routines keep no frame), R16/R17 (linker veneers) and R26 (the closure context), as its header
// promises.
var reserved = regexp.MustCompile(`\b(R1[678]|R2[6-9]|R30|g|LR)\b`)

// reservedARM is the same set in ARM syntax, for the instructions the WORDs encode.
var reservedARM = regexp.MustCompile(`\b[XW](1[678]|2[6-9]|30)\b`)

var textLine = regexp.MustCompile(`^TEXT ·\w+\(SB\), (\w+), \$(\d+)-\d+$`)

// TestHygiene reads ../../gdn_arm64.s: the generated-file header and build tag, no reserved
// register named by an instruction or encoded in a WORD, every routine NOSPLIT with no local frame
// (or, for the routines over T tokens, the slab as a frame without NOSPLIT) and ending in RET.
func TestHygiene(t *testing.T) {
	src, err := os.ReadFile(arm64File)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	if !regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`).MatchString(lines[0]) {
		t.Errorf("line 1 %q is not a Code generated … DO NOT EDIT. header", lines[0])
	}
	if !strings.Contains(string(src), "\n//go:build !purego\n") {
		t.Error("no //go:build !purego line")
	}
	routine, last, routines := "", "", 0
	end := func(n int) {
		if routine != "" && last != "RET" {
			t.Errorf("line %d: %s ends in %q, not RET", n, routine, last)
		}
	}
	for i, l := range lines {
		n := i + 1
		code, _, _ := strings.Cut(l, "//")
		code = strings.TrimSpace(code)
		if code == "" {
			continue
		}
		if f := strings.Fields(code); f[0] == "DATA" || f[0] == "GLOBL" {
			// A routine's constant table, laid out before its TEXT: not an instruction.
			if !strings.HasPrefix(f[1], "·") {
				t.Errorf("line %d: %q: a table not of this package", n, code)
			}
			continue
		}
		if strings.HasPrefix(code, "TEXT") {
			end(n)
			m := textLine.FindStringSubmatch(code)
			switch {
			case m == nil:
				t.Errorf("line %d: %q: not TEXT ·name(SB), FLAGS, $frame-args", n, code)
			case m[1] == "NOSPLIT" && m[2] == "0":
			case m[1] == "0" && m[2] == strconv.Itoa(slabBytes):
				// A routine over T tokens: the slab is its frame; not NOSPLIT, so the prologue
				// grows the stack.
			default:
				t.Errorf("line %d: %q: want NOSPLIT and a $0 frame, or the %d-byte slab", n, code, slabBytes)
			}
			routine, routines = code, routines+1
			continue
		}
		if r := reserved.FindString(code); r != "" {
			t.Errorf("line %d: %q uses %s", n, code, r)
		}
		if f := strings.Fields(code); len(f) == 2 && f[0] == "WORD" {
			v, err := strconv.ParseUint(strings.TrimPrefix(f[1], "$"), 0, 32)
			if err != nil {
				t.Errorf("line %d: %q: %v", n, code, err)
				continue
			}
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(v))
			if inst, err := arm64asm.Decode(b[:]); err == nil {
				if r := reservedARM.FindString(inst.String()); r != "" {
					t.Errorf("line %d: %q (%v) uses %s", n, code, inst, r)
				}
			}
		}
		if !strings.HasSuffix(code, ":") {
			last = code
		}
	}
	end(len(lines))
	if routines == 0 {
		t.Error("no TEXT routine")
	}
}
