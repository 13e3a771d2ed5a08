package main

import "fmt"

// Registers and the encoders of the instructions the Go assembler lacks. An operand prints in Go
// syntax (V16.S4, F16, R10) through String and in ARM syntax (V16.4S, D16) through arm; an encoder
// returns the instruction word with its ARM text, and panics on a register outside 0–31 or an
// arrangement the instruction does not have.

// Reg is a general-purpose register R0–R30.
type Reg int

func (r Reg) String() string { return fmt.Sprintf("R%d", int(r)) }

// ZR is the zero register (scalar FP moves take it as a source).
const ZR = "ZR"

// Freg is a scalar floating-point register: F0–F31 in Go syntax (S or D in ARM syntax).
type Freg int

func (f Freg) String() string { return fmt.Sprintf("F%d", int(f)) }

// Vreg is a NEON register V0–V31; its methods give the operands.
type Vreg int

// arr is a vector arrangement.
type arr int

const (
	B16 arr = iota + 1
	H4
	H8
	S2
	S4
	D2
)

// arrNames holds each arrangement's Go and ARM spelling.
var arrNames = map[arr][2]string{B16: {"B16", "16B"}, H4: {"H4", "4H"}, H8: {"H8", "8H"}, S2: {"S2", "2S"}, S4: {"S4", "4S"}, D2: {"D2", "2D"}}

// Vec is a vector operand: a register and its arrangement.
type Vec struct {
	R Vreg
	A arr
}

func (r Vreg) B16() Vec { return Vec{r, B16} }
func (r Vreg) H4() Vec  { return Vec{r, H4} }
func (r Vreg) H8() Vec  { return Vec{r, H8} }
func (r Vreg) S2() Vec  { return Vec{r, S2} }
func (r Vreg) S4() Vec  { return Vec{r, S4} }
func (r Vreg) D2() Vec  { return Vec{r, D2} }

// S and H are lane operands (V10.S[0]).
func (r Vreg) S(i int) string { return fmt.Sprintf("V%d.S[%d]", int(r), i) }
func (r Vreg) H(i int) string { return fmt.Sprintf("V%d.H[%d]", int(r), i) }

func (v Vec) String() string { return fmt.Sprintf("V%d.%s", int(v.R), arrNames[v.A][0]) }
func (v Vec) arm() string    { return fmt.Sprintf("V%d.%s", int(v.R), arrNames[v.A][1]) }

// inst is an instruction the assembler lacks: its word and its text as arm64asm prints it.
type inst struct {
	enc uint32
	asm string
}

// num is the 5-bit field of register r.
func num(r int) uint32 {
	if r < 0 || r > 31 {
		panic(fmt.Sprintf("register %d out of range 0-31", r))
	}
	return uint32(r)
}

// sz is bit 22 of the float forms: 0 for .4S, 1 for .2D; any other arrangement panics.
func sz(name string, a arr) uint32 {
	switch a {
	case S4:
		return 0
	case D2:
		return 1 << 22
	}
	panic(fmt.Sprintf("%s: arrangement %s not encoded", name, arrNames[a][0]))
}

func same(name string, vs ...Vec) {
	for _, v := range vs[1:] {
		if v.A != vs[0].A {
			panic(fmt.Sprintf("%s: mixed arrangements %v", name, vs))
		}
	}
}

// three is the "three registers, same type" float group: base | sz | Vm<<16 | Vn<<5 | Vd.
func three(name string, base uint32, d, n, m Vec) inst {
	same(name, d, n, m)
	return inst{base | sz(name, d.A) | num(int(m.R))<<16 | num(int(n.R))<<5 | num(int(d.R)),
		fmt.Sprintf("%s %s, %s, %s", name, d.arm(), n.arm(), m.arm())}
}

// two is the "two-register miscellaneous" float group: base | sz | Vn<<5 | Vd.
func two(name string, base uint32, d, n Vec) inst {
	same(name, d, n)
	return inst{base | sz(name, d.A) | num(int(n.R))<<5 | num(int(d.R)),
		fmt.Sprintf("%s %s, %s", name, d.arm(), n.arm())}
}

// fixed is an instruction with one arrangement for each operand: base | Vn<<5 | Vd.
func fixed(name string, base uint32, d, n Vec, da, na arr) inst {
	if d.A != da || n.A != na {
		panic(fmt.Sprintf("%s %v, %v: want .%s, .%s", name, d, n, arrNames[da][0], arrNames[na][0]))
	}
	return inst{base | num(int(n.R))<<5 | num(int(d.R)), fmt.Sprintf("%s %s, %s", name, d.arm(), n.arm())}
}

// Vd = Vn op Vm, lane by lane (.4S or .2D).
func fadd(d, n, m Vec) inst  { return three("FADD", 0x4e20d400, d, n, m) }
func fsub(d, n, m Vec) inst  { return three("FSUB", 0x4ea0d400, d, n, m) }
func fmul(d, n, m Vec) inst  { return three("FMUL", 0x6e20dc00, d, n, m) }
func fdiv(d, n, m Vec) inst  { return three("FDIV", 0x6e20fc00, d, n, m) }
func fmax(d, n, m Vec) inst  { return three("FMAX", 0x4e20f400, d, n, m) }
func fmin(d, n, m Vec) inst  { return three("FMIN", 0x4ea0f400, d, n, m) }
func fcmeq(d, n, m Vec) inst { return three("FCMEQ", 0x4e20e400, d, n, m) }

// Vd = all ones where Vn > Vm (fcmgt) or Vn ≥ Vm (fcmge), else 0: ordered, false where either is NaN.
func fcmgt(d, n, m Vec) inst { return three("FCMGT", 0x6ea0e400, d, n, m) }
func fcmge(d, n, m Vec) inst { return three("FCMGE", 0x6e20e400, d, n, m) }

// faddp is the pairwise sum: Vd = [n0+n1, n2+n3, m0+m1, m2+m3] (.4S; .2D: [n0+n1, m0+m1]).
func faddp(d, n, m Vec) inst { return three("FADDP", 0x6e20d400, d, n, m) }

// Vd = op(Vn), lane by lane (.4S or .2D); FCVTZS to integers of the same width, FRINTM towards −∞.
func fneg(d, n Vec) inst   { return two("FNEG", 0x6ea0f800, d, n) }
func frintm(d, n Vec) inst { return two("FRINTM", 0x4e219800, d, n) }
func fcvtzs(d, n Vec) inst { return two("FCVTZS", 0x4ea1b800, d, n) }

// fcvtl widens Vn.2S (the low half) and fcvtl2 Vn.4S's high half to Vd.2D.
func fcvtl(d, n Vec) inst  { return fixed("FCVTL", 0x0e617800, d, n, D2, S2) }
func fcvtl2(d, n Vec) inst { return fixed("FCVTL2", 0x4e617800, d, n, D2, S4) }

// fcvtn narrows Vn.2D to Vd.2S (the low half; the high half is zeroed), rounding to nearest even
// as Go's float32() does.
func fcvtn(d, n Vec) inst { return fixed("FCVTN", 0x0e616800, d, n, S2, D2) }

// xtn narrows each 32-bit lane of Vn.4S to its low 16 bits in Vd.4H.
func xtn(d, n Vec) inst { return fixed("XTN", 0x0e612800, d, n, H4, S4) }

// faddpD sets the scalar Dd to the sum of Vn.2D's two lanes.
func faddpD(d Freg, n Vec) inst {
	if n.A != D2 {
		panic(fmt.Sprintf("FADDP D%d, %v: want .D2", int(d), n))
	}
	return inst{0x7e70d800 | num(int(n.R))<<5 | num(int(d)), fmt.Sprintf("FADDP D%d, %s", int(d), n.arm())}
}
