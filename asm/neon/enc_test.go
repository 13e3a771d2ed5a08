package main

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// encoder is one encoder at one arrangement: regs vector operands (the first of faddpD a scalar D),
// each tried at every register number.
type encoder struct {
	name string
	regs int
	enc  func(r []int) inst
	want string // arm64asm's text, with %d for the register numbers
}

func v3(f func(d, n, m Vec) inst, a arr) func([]int) inst {
	return func(r []int) inst { return f(Vec{Vreg(r[0]), a}, Vec{Vreg(r[1]), a}, Vec{Vreg(r[2]), a}) }
}

func v2(f func(d, n Vec) inst, da, na arr) func([]int) inst {
	return func(r []int) inst { return f(Vec{Vreg(r[0]), da}, Vec{Vreg(r[1]), na}) }
}

func encoders() []encoder {
	var es []encoder
	for _, c := range []struct {
		name string
		f    func(d, n, m Vec) inst
	}{{"FADD", fadd}, {"FSUB", fsub}, {"FMUL", fmul}, {"FDIV", fdiv}, {"FMAX", fmax}, {"FMIN", fmin}, {"FCMEQ", fcmeq}, {"FCMGT", fcmgt}, {"FCMGE", fcmge}, {"FADDP", faddp}} {
		es = append(es,
			encoder{c.name + ".4S", 3, v3(c.f, S4), c.name + " V%d.4S, V%d.4S, V%d.4S"},
			encoder{c.name + ".2D", 3, v3(c.f, D2), c.name + " V%d.2D, V%d.2D, V%d.2D"})
	}
	for _, c := range []struct {
		name string
		f    func(d, n Vec) inst
	}{{"FNEG", fneg}, {"FRINTM", frintm}, {"FCVTZS", fcvtzs}} {
		es = append(es,
			encoder{c.name + ".4S", 2, v2(c.f, S4, S4), c.name + " V%d.4S, V%d.4S"},
			encoder{c.name + ".2D", 2, v2(c.f, D2, D2), c.name + " V%d.2D, V%d.2D"})
	}
	return append(es,
		encoder{"FCVTL", 2, v2(fcvtl, D2, S2), "FCVTL V%d.2D, V%d.2S"},
		encoder{"FCVTL2", 2, v2(fcvtl2, D2, S4), "FCVTL2 V%d.2D, V%d.4S"},
		encoder{"FCVTN", 2, v2(fcvtn, S2, D2), "FCVTN V%d.2S, V%d.2D"},
		encoder{"XTN", 2, v2(xtn, H4, S4), "XTN V%d.4H, V%d.4S"},
		encoder{"FADDP", 2, func(r []int) inst { return faddpD(Freg(r[0]), Vreg(r[1]).D2()) }, "FADDP D%d, V%d.2D"})
}

func decode(w uint32) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	inst, err := arm64asm.Decode(b[:])
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return inst.String()
}

// TestEncoders encodes every instruction with every combination of register numbers 0–31 and
// checks that arm64asm decodes the word to the intended instruction, which is also the text the
// encoder returns (the WORD's comment).
func TestEncoders(t *testing.T) {
	for _, e := range encoders() {
		r := make([]int, e.regs)
		n, bad := 0, 0
		var rec func(i int)
		rec = func(i int) {
			if i < len(r) {
				for r[i] = 0; r[i] < 32; r[i]++ {
					rec(i + 1)
				}
				return
			}
			n++
			args := make([]any, len(r))
			for i, x := range r {
				args[i] = x
			}
			want := fmt.Sprintf(e.want, args...)
			in := e.enc(r)
			if got := decode(in.enc); got != want || in.asm != want {
				if bad++; bad <= 3 {
					t.Errorf("%s %v: word %#08x decodes to %q, text %q; want %q", e.name, r, in.enc, got, in.asm, want)
				}
			}
		}
		rec(0)
		if bad > 0 {
			t.Errorf("%s: %d of %d register combinations wrong", e.name, bad, n)
		}
	}
}

// TestEncodersPanic checks that each encoder refuses a register number outside 0–31 in each operand,
// and an arrangement the instruction does not have.
func TestEncodersPanic(t *testing.T) {
	panics := func(f func()) (p bool) {
		defer func() { p = recover() != nil }()
		f()
		return false
	}
	for _, e := range encoders() {
		for i := range e.regs {
			for _, bad := range []int{-1, 32, 33, 1 << 10} {
				r := make([]int, e.regs)
				r[i] = bad
				if !panics(func() { e.enc(r) }) {
					t.Errorf("%s: operand %d = %d did not panic", e.name, i, bad)
				}
			}
		}
	}
	for name, f := range map[string]func(){
		"FMUL .16B":        func() { fmul(Vreg(0).B16(), Vreg(1).B16(), Vreg(2).B16()) },
		"FMUL .2S":         func() { fmul(Vreg(0).S2(), Vreg(1).S2(), Vreg(2).S2()) },
		"FADD mixed":       func() { fadd(Vreg(0).S4(), Vreg(1).D2(), Vreg(2).S4()) },
		"FNEG mixed":       func() { fneg(Vreg(0).S4(), Vreg(1).D2()) },
		"FRINTM .4H":       func() { frintm(Vreg(0).H4(), Vreg(1).H4()) },
		"FCVTL .4S source": func() { fcvtl(Vreg(0).D2(), Vreg(1).S4()) },
		"FCVTL2 .2S":       func() { fcvtl2(Vreg(0).D2(), Vreg(1).S2()) },
		"FCVTN .4S dest":   func() { fcvtn(Vreg(0).S4(), Vreg(1).D2()) },
		"FCMGT .2S":        func() { fcmgt(Vreg(0).S2(), Vreg(1).S2(), Vreg(2).S2()) },
		"XTN .4S dest":     func() { xtn(Vreg(0).S4(), Vreg(1).S4()) },
		"FADDP .4S":        func() { faddpD(Freg(0), Vreg(1).S4()) },
		"FADDP vector .8H": func() { faddp(Vreg(0).H8(), Vreg(1).H8(), Vreg(2).H8()) },
	} {
		if !panics(f) {
			t.Errorf("%s did not panic", name)
		}
	}
}
