package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"

	ec "github.com/gdnsimd/gdnsimd/asm/internal/exp32consts"
)

// --- constants ---

var (
	cIota, cLSB, cRound, cQuiet, cBias, cSign Mem
	cMag16                                    Mem // 0x7fff in every word: a bf16's magnitude bits
	cHi, cLo, cLog2e, cHalf, cC1, cC2, cOne   Mem
	cP                                        [6]Mem
	cOneF64, cZero, cNearOne                  Mem
)

// withC emits an instruction whose first source is a splat constant, its other operands ops[1:]
// on the register view r: with r a ZMM as the broadcast form (an m32 {1to16} operand), else as
// the plain one (an m256 or m128 of the constant). The linker aligns data to 32 bytes at most, so
// a 64-byte load of a splat splits a cache line in every binary whose constants land at 32 mod 64
// (on Zen 5 that made the [V][K] bf16 decode, five constants per rounded vector, 20 % slower in
// such a binary: 2.36 against 2.85 µs per head, the same machine code otherwise).
func withC(r Register, plain, bcst func(...Op), ops ...Op) {
	if r.Size() == 64 {
		bcst(ops...)
		return
	}
	plain(ops...)
}

// splat declares a 64-byte constant holding v in each of its 16 dwords, so that it can be a m512,
// m256 or m128 operand, or a VBROADCASTSS source.
func splat(name string, v uint32) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(v))
	}
	return m
}

func splatF(name string, f float32) Mem { return splat(name, math.Float32bits(f)) }

func constants() {
	cIota = GLOBL("iota", RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(uint32(i)))
	}
	cSign = splat("signmask", 0x80000000)
	cLSB = splat("one_i", 1)
	cRound = splat("round", 0x7fff)
	cQuiet = splat("quiet", 0x40)
	cMag16 = splat("mag16", 0x7fff7fff)
	// Exp32's constants: the one table both generators use (asm/internal/exp32consts).
	cBias = splat("bias", ec.Bias)
	cOne = splatF("one", ec.One)
	cHalf = splatF("half", ec.Half)
	cHi = splatF("exphi", ec.Hi)
	cLo = splatF("explo", ec.Lo)
	cLog2e = splatF("log2e", ec.Log2e)
	cC1 = splatF("expc1", ec.C1)
	cC2 = splatF("expc2", ec.C2)
	for i, p := range ec.P {
		cP[i] = splatF(fmt.Sprintf("expp%d", i), p)
	}
	cZero = GLOBL("zero", RODATA|NOPTR)
	DATA(0, U32(0))
	cOneF64 = GLOBL("one_f64", RODATA|NOPTR)
	DATA(0, U64(math.Float64bits(1)))
	cNearOne = GLOBL("nearone", RODATA|NOPTR)
	DATA(0, U32(math.Float32bits(nearOne)))
}
