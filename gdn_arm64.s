//go:build !purego

// Hand-written NEON (ASIMD) pieces of the "neon" kernel; the Go stubs and their reference loops are
// in gdn_arm64.go. Avo cannot emit arm64, so this file is written by hand.
//
// The Go assembler has native forms for VFMLA/VFMLS (operands reversed: VFMLA Vm, Vn, Vd is
// Vd += Vn×Vm), VLD1/VST1 (multi-register, .P post-increment), VLD1R, VDUP, VEOR, VORR, VADD (integer),
// VSHL/VUSHR, VBIF and the scalar F* instructions. Every other instruction is a WORD whose trailing
// comment is the ARM mnemonic; asm/arm64_words_test.go decodes each WORD and checks the comment.
// R16, R17 (linker veneers), R18 (platform), R26-R29 are not touched.

#include "textflag.h"

// func stateNEON(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)
//
// Blocking: the state is processed in column strips. A strip is 32 columns (eight 4-float vectors)
// while at least 32 columns remain, then at most one strip of 16 columns, at most three of 4 columns
// (one vector) and at most three single columns. For each strip:
//
//	read pass  (rows i = 0..K-1): accK += kh_i·S[i][strip], accQ += qh_i·S[i][strip]; a 32-column
//	           strip keeps 16 independent accumulators (V16-V31), enough FMAs in flight to cover the
//	           4-cycle FMA latency on 2- and 4-pipe cores (8 in a 16-column strip, 2 in a 4-column one);
//	δ, o       δ = beta·(v − decay(accK)) (kept in V16-V23), o = decay(accQ) + kq·δ (stored);
//	write pass (rows i = 0..K-1): S'[i][strip] = decay(S[i][strip]) + kh_i·δ.
//
// decay(x) is x + em1·x (one FMLA, x its own accumulator) when em1 ≥ −0.5, else eg·x (SPEC Part A).
// The form is decided once, in the prologue (R9 = 1 for x + em1·x; a NaN em1 compares false: eg·x);
// each strip branches once to the δ, o and write pass of its form, so both write loops have the
// same instructions per element as a single-form loop.
//
// The K×32 slab of a strip (16 KiB at K = 128) is still in L1 when the write pass reads it again, so
// the state is read once from memory and written once. Rows are V·4 bytes apart; no load or store
// touches anything outside the head's K×V state, kh, qh, v or o.
//
// Registers: R0 sIn strip, R1 sOut strip, R2 kh, R3 qh, R4 v, R5 o, R6 K, R7 columns left,
// R8 row stride V·4, R15 stride−64, R9 form (1: x + em1·x), R10/R11 row pointers, R12/R13 kh/qh
// pointers, R14 row counter; V10 eg, V11 beta, V12 kq, V13 em1 (broadcast), V8/V9 kh_i/qh_i
// (broadcast), V0-V7 state data.
TEXT ·stateNEON(SB), NOSPLIT, $0-160
	MOVD  sIn_base+0(FP), R0
	MOVD  sOut_base+24(FP), R1
	MOVD  kh_base+48(FP), R2
	MOVD  kh_len+56(FP), R6
	MOVD  qh_base+72(FP), R3
	MOVD  v_base+96(FP), R4
	MOVD  v_len+104(FP), R7
	MOVD  o_base+120(FP), R5
	FMOVS em1+144(FP), F13
	FMOVS eg+148(FP), F10
	FMOVS beta+152(FP), F11
	FMOVS kq+156(FP), F12
	FMOVS $(-0.5), F14
	FCMPS F14, F13 // em1 vs −0.5: GE is false for NaN
	CSET  GE, R9
	VDUP  V10.S[0], V10.S4
	VDUP  V11.S[0], V11.S4
	VDUP  V12.S[0], V12.S4
	VDUP  V13.S[0], V13.S4
	LSL   $2, R7, R8
	SUB   $64, R8, R15

strip32:
	CMP  $32, R7
	BLT  strip16

	// read pass over the 32-column strip
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16
	VEOR V28.B16, V28.B16, V28.B16
	VEOR V29.B16, V29.B16, V29.B16
	VEOR V30.B16, V30.B16, V30.B16
	VEOR V31.B16, V31.B16, V31.B16
	MOVD R0, R10
	MOVD R2, R12
	MOVD R3, R13
	MOVD R6, R14
	CBZ  R14, delta32

read32:
	VLD1.P  64(R10), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P  (R10)(R15), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1R.P 4(R12), [V8.S4]
	VLD1R.P 4(R13), [V9.S4]
	VFMLA   V8.S4, V0.S4, V16.S4
	VFMLA   V8.S4, V1.S4, V17.S4
	VFMLA   V8.S4, V2.S4, V18.S4
	VFMLA   V8.S4, V3.S4, V19.S4
	VFMLA   V8.S4, V4.S4, V20.S4
	VFMLA   V8.S4, V5.S4, V21.S4
	VFMLA   V8.S4, V6.S4, V22.S4
	VFMLA   V8.S4, V7.S4, V23.S4
	VFMLA   V9.S4, V0.S4, V24.S4
	VFMLA   V9.S4, V1.S4, V25.S4
	VFMLA   V9.S4, V2.S4, V26.S4
	VFMLA   V9.S4, V3.S4, V27.S4
	VFMLA   V9.S4, V4.S4, V28.S4
	VFMLA   V9.S4, V5.S4, V29.S4
	VFMLA   V9.S4, V6.S4, V30.S4
	VFMLA   V9.S4, V7.S4, V31.S4
	SUBS    $1, R14, R14
	BNE     read32

delta32:
	// the write pass's pointers, v into V0-V7, then δ (into V16-V23), o and the write pass of the form
	MOVD   R0, R10
	MOVD   R1, R11
	MOVD   R2, R12
	MOVD   R6, R14
	VLD1.P 64(R4), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R4), [V4.S4, V5.S4, V6.S4, V7.S4]
	CBNZ   R9, delta32a

	// eg·x: δ = beta·(v − eg·accK); o = eg·accQ + kq·δ
	VFMLS  V10.S4, V16.S4, V0.S4
	VFMLS  V10.S4, V17.S4, V1.S4
	VFMLS  V10.S4, V18.S4, V2.S4
	VFMLS  V10.S4, V19.S4, V3.S4
	VFMLS  V10.S4, V20.S4, V4.S4
	VFMLS  V10.S4, V21.S4, V5.S4
	VFMLS  V10.S4, V22.S4, V6.S4
	VFMLS  V10.S4, V23.S4, V7.S4
	WORD   $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S
	WORD   $0x6e2bdc31 // FMUL V17.4S, V1.4S, V11.4S
	WORD   $0x6e2bdc52 // FMUL V18.4S, V2.4S, V11.4S
	WORD   $0x6e2bdc73 // FMUL V19.4S, V3.4S, V11.4S
	WORD   $0x6e2bdc94 // FMUL V20.4S, V4.4S, V11.4S
	WORD   $0x6e2bdcb5 // FMUL V21.4S, V5.4S, V11.4S
	WORD   $0x6e2bdcd6 // FMUL V22.4S, V6.4S, V11.4S
	WORD   $0x6e2bdcf7 // FMUL V23.4S, V7.4S, V11.4S
	WORD   $0x6e2adf18 // FMUL V24.4S, V24.4S, V10.4S
	WORD   $0x6e2adf39 // FMUL V25.4S, V25.4S, V10.4S
	WORD   $0x6e2adf5a // FMUL V26.4S, V26.4S, V10.4S
	WORD   $0x6e2adf7b // FMUL V27.4S, V27.4S, V10.4S
	WORD   $0x6e2adf9c // FMUL V28.4S, V28.4S, V10.4S
	WORD   $0x6e2adfbd // FMUL V29.4S, V29.4S, V10.4S
	WORD   $0x6e2adfde // FMUL V30.4S, V30.4S, V10.4S
	WORD   $0x6e2adfff // FMUL V31.4S, V31.4S, V10.4S
	VFMLA  V12.S4, V16.S4, V24.S4
	VFMLA  V12.S4, V17.S4, V25.S4
	VFMLA  V12.S4, V18.S4, V26.S4
	VFMLA  V12.S4, V19.S4, V27.S4
	VFMLA  V12.S4, V20.S4, V28.S4
	VFMLA  V12.S4, V21.S4, V29.S4
	VFMLA  V12.S4, V22.S4, V30.S4
	VFMLA  V12.S4, V23.S4, V31.S4
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R5)
	VST1.P [V28.S4, V29.S4, V30.S4, V31.S4], 64(R5)
	CBZ    R14, next32

write32b:
	// S' = eg·S + kh_i·δ
	VLD1.P  64(R10), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P  (R10)(R15), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1R.P 4(R12), [V8.S4]
	WORD    $0x6e2adc00 // FMUL V0.4S, V0.4S, V10.4S
	WORD    $0x6e2adc21 // FMUL V1.4S, V1.4S, V10.4S
	WORD    $0x6e2adc42 // FMUL V2.4S, V2.4S, V10.4S
	WORD    $0x6e2adc63 // FMUL V3.4S, V3.4S, V10.4S
	WORD    $0x6e2adc84 // FMUL V4.4S, V4.4S, V10.4S
	WORD    $0x6e2adca5 // FMUL V5.4S, V5.4S, V10.4S
	WORD    $0x6e2adcc6 // FMUL V6.4S, V6.4S, V10.4S
	WORD    $0x6e2adce7 // FMUL V7.4S, V7.4S, V10.4S
	VFMLA   V8.S4, V16.S4, V0.S4
	VFMLA   V8.S4, V17.S4, V1.S4
	VFMLA   V8.S4, V18.S4, V2.S4
	VFMLA   V8.S4, V19.S4, V3.S4
	VFMLA   V8.S4, V20.S4, V4.S4
	VFMLA   V8.S4, V21.S4, V5.S4
	VFMLA   V8.S4, V22.S4, V6.S4
	VFMLA   V8.S4, V23.S4, V7.S4
	VST1.P  [V0.S4, V1.S4, V2.S4, V3.S4], 64(R11)
	VST1.P  [V4.S4, V5.S4, V6.S4, V7.S4], (R11)(R15)
	SUBS    $1, R14, R14
	BNE     write32b
	B       next32

delta32a:
	// x + em1·x: kv = accK + em1·accK; δ = beta·(v − kv); o = accQ + em1·accQ + kq·δ
	VFMLA  V13.S4, V16.S4, V16.S4
	VFMLA  V13.S4, V17.S4, V17.S4
	VFMLA  V13.S4, V18.S4, V18.S4
	VFMLA  V13.S4, V19.S4, V19.S4
	VFMLA  V13.S4, V20.S4, V20.S4
	VFMLA  V13.S4, V21.S4, V21.S4
	VFMLA  V13.S4, V22.S4, V22.S4
	VFMLA  V13.S4, V23.S4, V23.S4
	WORD   $0x4eb0d400 // FSUB V0.4S, V0.4S, V16.4S
	WORD   $0x4eb1d421 // FSUB V1.4S, V1.4S, V17.4S
	WORD   $0x4eb2d442 // FSUB V2.4S, V2.4S, V18.4S
	WORD   $0x4eb3d463 // FSUB V3.4S, V3.4S, V19.4S
	WORD   $0x4eb4d484 // FSUB V4.4S, V4.4S, V20.4S
	WORD   $0x4eb5d4a5 // FSUB V5.4S, V5.4S, V21.4S
	WORD   $0x4eb6d4c6 // FSUB V6.4S, V6.4S, V22.4S
	WORD   $0x4eb7d4e7 // FSUB V7.4S, V7.4S, V23.4S
	WORD   $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S
	WORD   $0x6e2bdc31 // FMUL V17.4S, V1.4S, V11.4S
	WORD   $0x6e2bdc52 // FMUL V18.4S, V2.4S, V11.4S
	WORD   $0x6e2bdc73 // FMUL V19.4S, V3.4S, V11.4S
	WORD   $0x6e2bdc94 // FMUL V20.4S, V4.4S, V11.4S
	WORD   $0x6e2bdcb5 // FMUL V21.4S, V5.4S, V11.4S
	WORD   $0x6e2bdcd6 // FMUL V22.4S, V6.4S, V11.4S
	WORD   $0x6e2bdcf7 // FMUL V23.4S, V7.4S, V11.4S
	VFMLA  V13.S4, V24.S4, V24.S4
	VFMLA  V13.S4, V25.S4, V25.S4
	VFMLA  V13.S4, V26.S4, V26.S4
	VFMLA  V13.S4, V27.S4, V27.S4
	VFMLA  V13.S4, V28.S4, V28.S4
	VFMLA  V13.S4, V29.S4, V29.S4
	VFMLA  V13.S4, V30.S4, V30.S4
	VFMLA  V13.S4, V31.S4, V31.S4
	VFMLA  V12.S4, V16.S4, V24.S4
	VFMLA  V12.S4, V17.S4, V25.S4
	VFMLA  V12.S4, V18.S4, V26.S4
	VFMLA  V12.S4, V19.S4, V27.S4
	VFMLA  V12.S4, V20.S4, V28.S4
	VFMLA  V12.S4, V21.S4, V29.S4
	VFMLA  V12.S4, V22.S4, V30.S4
	VFMLA  V12.S4, V23.S4, V31.S4
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R5)
	VST1.P [V28.S4, V29.S4, V30.S4, V31.S4], 64(R5)
	CBZ    R14, next32

write32a:
	// S' = S + em1·S + kh_i·δ
	VLD1.P  64(R10), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P  (R10)(R15), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1R.P 4(R12), [V8.S4]
	VFMLA   V13.S4, V0.S4, V0.S4
	VFMLA   V13.S4, V1.S4, V1.S4
	VFMLA   V13.S4, V2.S4, V2.S4
	VFMLA   V13.S4, V3.S4, V3.S4
	VFMLA   V13.S4, V4.S4, V4.S4
	VFMLA   V13.S4, V5.S4, V5.S4
	VFMLA   V13.S4, V6.S4, V6.S4
	VFMLA   V13.S4, V7.S4, V7.S4
	VFMLA   V8.S4, V16.S4, V0.S4
	VFMLA   V8.S4, V17.S4, V1.S4
	VFMLA   V8.S4, V18.S4, V2.S4
	VFMLA   V8.S4, V19.S4, V3.S4
	VFMLA   V8.S4, V20.S4, V4.S4
	VFMLA   V8.S4, V21.S4, V5.S4
	VFMLA   V8.S4, V22.S4, V6.S4
	VFMLA   V8.S4, V23.S4, V7.S4
	VST1.P  [V0.S4, V1.S4, V2.S4, V3.S4], 64(R11)
	VST1.P  [V4.S4, V5.S4, V6.S4, V7.S4], (R11)(R15)
	SUBS    $1, R14, R14
	BNE     write32a

next32:
	ADD $128, R0, R0
	ADD $128, R1, R1
	SUB $32, R7, R7
	B   strip32

strip16:
	// one 16-column strip when 16-31 columns remain: four vectors per row, 8 accumulators
	// (V16-V19 accK, V24-V27 accQ).
	CMP  $16, R7
	BLT  strip4
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16
	MOVD R0, R10
	MOVD R2, R12
	MOVD R3, R13
	MOVD R6, R14
	CBZ  R14, delta16

read16:
	VLD1.P  (R10)(R8), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1R.P 4(R12), [V8.S4]
	VLD1R.P 4(R13), [V9.S4]
	VFMLA   V8.S4, V0.S4, V16.S4
	VFMLA   V8.S4, V1.S4, V17.S4
	VFMLA   V8.S4, V2.S4, V18.S4
	VFMLA   V8.S4, V3.S4, V19.S4
	VFMLA   V9.S4, V0.S4, V24.S4
	VFMLA   V9.S4, V1.S4, V25.S4
	VFMLA   V9.S4, V2.S4, V26.S4
	VFMLA   V9.S4, V3.S4, V27.S4
	SUBS    $1, R14, R14
	BNE     read16

delta16:
	MOVD   R0, R10
	MOVD   R1, R11
	MOVD   R2, R12
	MOVD   R6, R14
	VLD1.P 64(R4), [V0.S4, V1.S4, V2.S4, V3.S4]
	CBNZ   R9, delta16a

	// eg·x
	VFMLS  V10.S4, V16.S4, V0.S4
	VFMLS  V10.S4, V17.S4, V1.S4
	VFMLS  V10.S4, V18.S4, V2.S4
	VFMLS  V10.S4, V19.S4, V3.S4
	WORD   $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S
	WORD   $0x6e2bdc31 // FMUL V17.4S, V1.4S, V11.4S
	WORD   $0x6e2bdc52 // FMUL V18.4S, V2.4S, V11.4S
	WORD   $0x6e2bdc73 // FMUL V19.4S, V3.4S, V11.4S
	WORD   $0x6e2adf18 // FMUL V24.4S, V24.4S, V10.4S
	WORD   $0x6e2adf39 // FMUL V25.4S, V25.4S, V10.4S
	WORD   $0x6e2adf5a // FMUL V26.4S, V26.4S, V10.4S
	WORD   $0x6e2adf7b // FMUL V27.4S, V27.4S, V10.4S
	VFMLA  V12.S4, V16.S4, V24.S4
	VFMLA  V12.S4, V17.S4, V25.S4
	VFMLA  V12.S4, V18.S4, V26.S4
	VFMLA  V12.S4, V19.S4, V27.S4
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R5)
	CBZ    R14, next16

write16b:
	VLD1.P  (R10)(R8), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1R.P 4(R12), [V8.S4]
	WORD    $0x6e2adc00 // FMUL V0.4S, V0.4S, V10.4S
	WORD    $0x6e2adc21 // FMUL V1.4S, V1.4S, V10.4S
	WORD    $0x6e2adc42 // FMUL V2.4S, V2.4S, V10.4S
	WORD    $0x6e2adc63 // FMUL V3.4S, V3.4S, V10.4S
	VFMLA   V8.S4, V16.S4, V0.S4
	VFMLA   V8.S4, V17.S4, V1.S4
	VFMLA   V8.S4, V18.S4, V2.S4
	VFMLA   V8.S4, V19.S4, V3.S4
	VST1.P  [V0.S4, V1.S4, V2.S4, V3.S4], (R11)(R8)
	SUBS    $1, R14, R14
	BNE     write16b
	B       next16

delta16a:
	// x + em1·x
	VFMLA  V13.S4, V16.S4, V16.S4
	VFMLA  V13.S4, V17.S4, V17.S4
	VFMLA  V13.S4, V18.S4, V18.S4
	VFMLA  V13.S4, V19.S4, V19.S4
	WORD   $0x4eb0d400 // FSUB V0.4S, V0.4S, V16.4S
	WORD   $0x4eb1d421 // FSUB V1.4S, V1.4S, V17.4S
	WORD   $0x4eb2d442 // FSUB V2.4S, V2.4S, V18.4S
	WORD   $0x4eb3d463 // FSUB V3.4S, V3.4S, V19.4S
	WORD   $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S
	WORD   $0x6e2bdc31 // FMUL V17.4S, V1.4S, V11.4S
	WORD   $0x6e2bdc52 // FMUL V18.4S, V2.4S, V11.4S
	WORD   $0x6e2bdc73 // FMUL V19.4S, V3.4S, V11.4S
	VFMLA  V13.S4, V24.S4, V24.S4
	VFMLA  V13.S4, V25.S4, V25.S4
	VFMLA  V13.S4, V26.S4, V26.S4
	VFMLA  V13.S4, V27.S4, V27.S4
	VFMLA  V12.S4, V16.S4, V24.S4
	VFMLA  V12.S4, V17.S4, V25.S4
	VFMLA  V12.S4, V18.S4, V26.S4
	VFMLA  V12.S4, V19.S4, V27.S4
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R5)
	CBZ    R14, next16

write16a:
	VLD1.P  (R10)(R8), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1R.P 4(R12), [V8.S4]
	VFMLA   V13.S4, V0.S4, V0.S4
	VFMLA   V13.S4, V1.S4, V1.S4
	VFMLA   V13.S4, V2.S4, V2.S4
	VFMLA   V13.S4, V3.S4, V3.S4
	VFMLA   V8.S4, V16.S4, V0.S4
	VFMLA   V8.S4, V17.S4, V1.S4
	VFMLA   V8.S4, V18.S4, V2.S4
	VFMLA   V8.S4, V19.S4, V3.S4
	VST1.P  [V0.S4, V1.S4, V2.S4, V3.S4], (R11)(R8)
	SUBS    $1, R14, R14
	BNE     write16a

next16:
	ADD $64, R0, R0
	ADD $64, R1, R1
	SUB $16, R7, R7

strip4:
	// 4-column strips (at most three): one vector per row, two accumulators (V16 accK, V24 accQ).
	CMP  $4, R7
	BLT  strip1
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V24.B16, V24.B16, V24.B16
	MOVD R0, R10
	MOVD R2, R12
	MOVD R3, R13
	MOVD R6, R14
	CBZ  R14, delta4

read4:
	VLD1.P  (R10)(R8), [V0.S4]
	VLD1R.P 4(R12), [V8.S4]
	VLD1R.P 4(R13), [V9.S4]
	VFMLA   V8.S4, V0.S4, V16.S4
	VFMLA   V9.S4, V0.S4, V24.S4
	SUBS    $1, R14, R14
	BNE     read4

delta4:
	MOVD   R0, R10
	MOVD   R1, R11
	MOVD   R2, R12
	MOVD   R6, R14
	VLD1.P 16(R4), [V0.S4]
	CBNZ   R9, delta4a

	// eg·x
	VFMLS  V10.S4, V16.S4, V0.S4
	WORD   $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S
	WORD   $0x6e2adf18 // FMUL V24.4S, V24.4S, V10.4S
	VFMLA  V12.S4, V16.S4, V24.S4
	VST1.P [V24.S4], 16(R5)
	CBZ    R14, next4

write4b:
	VLD1.P  (R10)(R8), [V0.S4]
	VLD1R.P 4(R12), [V8.S4]
	WORD    $0x6e2adc00 // FMUL V0.4S, V0.4S, V10.4S
	VFMLA   V8.S4, V16.S4, V0.S4
	VST1.P  [V0.S4], (R11)(R8)
	SUBS    $1, R14, R14
	BNE     write4b
	B       next4

delta4a:
	// x + em1·x
	VFMLA  V13.S4, V16.S4, V16.S4
	WORD   $0x4eb0d400 // FSUB V0.4S, V0.4S, V16.4S
	WORD   $0x6e2bdc10 // FMUL V16.4S, V0.4S, V11.4S
	VFMLA  V13.S4, V24.S4, V24.S4
	VFMLA  V12.S4, V16.S4, V24.S4
	VST1.P [V24.S4], 16(R5)
	CBZ    R14, next4

write4a:
	VLD1.P  (R10)(R8), [V0.S4]
	VLD1R.P 4(R12), [V8.S4]
	VFMLA   V13.S4, V0.S4, V0.S4
	VFMLA   V8.S4, V16.S4, V0.S4
	VST1.P  [V0.S4], (R11)(R8)
	SUBS    $1, R14, R14
	BNE     write4a

next4:
	ADD $16, R0, R0
	ADD $16, R1, R1
	SUB $4, R7, R7
	B   strip4

strip1:
	// single columns (V mod 4 of them), scalar: F16 = accK, F24 = accQ.
	CBZ   R7, done
	FMOVS ZR, F16
	FMOVS ZR, F24
	MOVD  R0, R10
	MOVD  R2, R12
	MOVD  R3, R13
	MOVD  R6, R14
	CBZ   R14, delta1

read1:
	FMOVS   (R10), F0
	ADD     R8, R10, R10
	FMOVS.P 4(R12), F8
	FMOVS.P 4(R13), F9
	FMADDS  F8, F16, F0, F16 // F16 += F0·F8
	FMADDS  F9, F24, F0, F24 // F24 += F0·F9
	SUBS    $1, R14, R14
	BNE     read1

delta1:
	MOVD    R0, R10
	MOVD    R1, R11
	MOVD    R2, R12
	MOVD    R6, R14
	FMOVS.P 4(R4), F0
	CBNZ    R9, delta1a

	// eg·x
	FMSUBS  F10, F0, F16, F0   // F0 = v − accK·eg
	FMULS   F11, F0, F16       // δ = beta·F0
	FMULS   F10, F24, F24      // eg·accQ
	FMADDS  F12, F24, F16, F24 // o = eg·accQ + δ·kq
	FMOVS.P F24, 4(R5)
	CBZ     R14, next1

write1b:
	FMOVS   (R10), F0
	ADD     R8, R10, R10
	FMOVS.P 4(R12), F8
	FMULS   F10, F0, F0     // eg·S
	FMADDS  F8, F0, F16, F0 // + δ·kh_i
	FMOVS   F0, (R11)
	ADD     R8, R11, R11
	SUBS    $1, R14, R14
	BNE     write1b
	B       next1

delta1a:
	// x + em1·x
	FMADDS  F13, F16, F16, F16 // kv = accK + accK·em1
	FSUBS   F16, F0, F0        // F0 = v − kv
	FMULS   F11, F0, F16       // δ = beta·F0
	FMADDS  F13, F24, F24, F24 // accQ + accQ·em1
	FMADDS  F12, F24, F16, F24 // o = … + δ·kq
	FMOVS.P F24, 4(R5)
	CBZ     R14, next1

write1a:
	FMOVS   (R10), F0
	ADD     R8, R10, R10
	FMOVS.P 4(R12), F8
	FMADDS  F13, F0, F0, F0 // S + S·em1
	FMADDS  F8, F0, F16, F0 // + δ·kh_i
	FMOVS   F0, (R11)
	ADD     R8, R11, R11
	SUBS    $1, R14, R14
	BNE     write1a

next1:
	ADD $4, R0, R0
	ADD $4, R1, R1
	SUB $1, R7, R7
	B   strip1

done:
	RET

// func l2NEON(q, k []float32) (qq, kk, kq float64)
//
// Four floats per iteration, widened to float64 (FCVTL/FCVTL2) and accumulated with FMLA .2D in six
// accumulators (the products of two float32s are exact in float64); the len mod 4 tail is scalar.
TEXT ·l2NEON(SB), NOSPLIT, $0-72
	MOVD q_base+0(FP), R0
	MOVD q_len+8(FP), R2
	MOVD k_base+24(FP), R1
	VEOR V16.B16, V16.B16, V16.B16 // qq lo
	VEOR V17.B16, V17.B16, V17.B16 // qq hi
	VEOR V18.B16, V18.B16, V18.B16 // kk lo
	VEOR V19.B16, V19.B16, V19.B16 // kk hi
	VEOR V20.B16, V20.B16, V20.B16 // kq lo
	VEOR V21.B16, V21.B16, V21.B16 // kq hi
	LSR  $2, R2, R3
	AND  $3, R2, R2
	CBZ  R3, l2reduce

l2loop4:
	VLD1.P 16(R0), [V0.S4]
	VLD1.P 16(R1), [V1.S4]
	WORD   $0x0e617802 // FCVTL V2.2D, V0.2S
	WORD   $0x4e617803 // FCVTL2 V3.2D, V0.4S
	WORD   $0x0e617824 // FCVTL V4.2D, V1.2S
	WORD   $0x4e617825 // FCVTL2 V5.2D, V1.4S
	VFMLA  V2.D2, V2.D2, V16.D2
	VFMLA  V3.D2, V3.D2, V17.D2
	VFMLA  V4.D2, V4.D2, V18.D2
	VFMLA  V5.D2, V5.D2, V19.D2
	VFMLA  V2.D2, V4.D2, V20.D2
	VFMLA  V3.D2, V5.D2, V21.D2
	SUBS   $1, R3, R3
	BNE    l2loop4

l2reduce:
	WORD $0x4e71d610 // FADD V16.2D, V16.2D, V17.2D
	WORD $0x4e73d652 // FADD V18.2D, V18.2D, V19.2D
	WORD $0x4e75d694 // FADD V20.2D, V20.2D, V21.2D
	WORD $0x7e70da10 // FADDP D16, V16.2D
	WORD $0x7e70da52 // FADDP D18, V18.2D
	WORD $0x7e70da94 // FADDP D20, V20.2D
	CBZ  R2, l2done

l2tail:
	FMOVS.P 4(R0), F0
	FMOVS.P 4(R1), F1
	FCVTSD  F0, F0
	FCVTSD  F1, F1
	FMADDD  F0, F16, F0, F16 // qq += q·q
	FMADDD  F1, F18, F1, F18 // kk += k·k
	FMADDD  F0, F20, F1, F20 // kq += k·q
	SUBS    $1, R2, R2
	BNE     l2tail

l2done:
	FMOVD F16, qq+48(FP)
	FMOVD F18, kk+56(FP)
	FMOVD F20, kq+64(FP)
	RET

// func gateNEON4(o, z, w []float32, r float32, out []uint16, outF []float32)
//
// y_j = o_j·r·w_j·silu(z_j) for j < len(o), stored to outF and bf16RNE(y_j) to out unless their base
// pointer is nil. Four lanes per iteration; the len mod 4 tail runs the same vector body one element
// at a time (lane 0; the other lanes hold zeros and are not stored).
//
// silu(z) = z / (1 + exp32(−z)), exp32 mirroring Exp32: x clamped to [−87.33654, 88] with FMIN/FMAX
// (which keep NaN), n = floor(x·log2e + 0.5), r = x − n·c1 − n·c2, the same degree-5 polynomial,
// times 2^n built as (n + 127) << 23. bf16RNE with integer ops: (u + 0x7fff + (u>>16 & 1)) >> 16,
// and (u >> 16) | 0x40 for NaN (selected where FCMEQ y, y is false).
//
// Constants: V16 88, V17 −87.33654, V18 log2e, V19 0.5, V20 c1, V21 c2, V22-V27 the polynomial,
// V28 1.0, V29 int 127, V30 r, V31 int 0x7fff, V15 int 0x40.
TEXT ·gateNEON4(SB), NOSPLIT, $0-128
	MOVD  o_base+0(FP), R0
	MOVD  o_len+8(FP), R5
	MOVD  z_base+24(FP), R1
	MOVD  w_base+48(FP), R2
	FMOVS r+72(FP), F30
	MOVD  out_base+80(FP), R3
	MOVD  outF_base+104(FP), R4
	VDUP  V30.S[0], V30.S4
	MOVW  $0x42b00000, R9 // 88
	VDUP  R9, V16.S4
	MOVW  $0xc2aeac4f, R9 // -87.33654
	VDUP  R9, V17.S4
	MOVW  $0x3fb8aa3b, R9 // log2e
	VDUP  R9, V18.S4
	MOVW  $0x3f000000, R9 // 0.5
	VDUP  R9, V19.S4
	MOVW  $0x3f318000, R9 // c1 = 0.693359375
	VDUP  R9, V20.S4
	MOVW  $0xb95e8083, R9 // c2 = -2.12194440e-4
	VDUP  R9, V21.S4
	MOVW  $0x39506967, R9 // 1.9875691500e-4
	VDUP  R9, V22.S4
	MOVW  $0x3ab743ce, R9 // 1.3981999507e-3
	VDUP  R9, V23.S4
	MOVW  $0x3c088908, R9 // 8.3334519073e-3
	VDUP  R9, V24.S4
	MOVW  $0x3d2aa9c1, R9 // 4.1665795894e-2
	VDUP  R9, V25.S4
	MOVW  $0x3e2aaaaa, R9 // 1.6666665459e-1
	VDUP  R9, V26.S4
	MOVW  $0x3f000000, R9 // 5.0000001201e-1 (rounds to 0.5 in float32)
	VDUP  R9, V27.S4
	MOVW  $0x3f800000, R9 // 1.0
	VDUP  R9, V28.S4
	MOVW  $127, R9
	VDUP  R9, V29.S4
	MOVW  $0x7fff, R9
	VDUP  R9, V31.S4
	MOVW  $0x40, R9
	VDUP  R9, V15.S4
	LSR   $2, R5, R6 // groups of four
	AND   $3, R5, R7 // tail
	MOVD  $0, R8     // 1 while running the tail

gloop4:
	CBZ    R6, gtail
	VLD1.P 16(R0), [V0.S4]
	VLD1.P 16(R1), [V1.S4]
	VLD1.P 16(R2), [V2.S4]

gbody:
	// x = clamp(−z); n = floor(x·log2e + 0.5); r = x − n·c1 − n·c2
	WORD  $0x6ea0f823 // FNEG V3.4S, V1.4S
	WORD  $0x4eb0f463 // FMIN V3.4S, V3.4S, V16.4S
	WORD  $0x4e31f463 // FMAX V3.4S, V3.4S, V17.4S
	VORR  V19.B16, V19.B16, V4.B16
	VFMLA V18.S4, V3.S4, V4.S4
	WORD  $0x4e219884 // FRINTM V4.4S, V4.4S
	VFMLS V20.S4, V4.S4, V3.S4
	VFMLS V21.S4, V4.S4, V3.S4

	// p = ((((p0·r + p1)·r + p2)·r + p3)·r + p4)·r + p5; e = p·r·r + r + 1
	VORR  V23.B16, V23.B16, V6.B16
	VFMLA V22.S4, V3.S4, V6.S4
	VORR  V24.B16, V24.B16, V7.B16
	VFMLA V6.S4, V3.S4, V7.S4
	VORR  V25.B16, V25.B16, V6.B16
	VFMLA V7.S4, V3.S4, V6.S4
	VORR  V26.B16, V26.B16, V7.B16
	VFMLA V6.S4, V3.S4, V7.S4
	VORR  V27.B16, V27.B16, V6.B16
	VFMLA V7.S4, V3.S4, V6.S4
	WORD  $0x6e23dcc6 // FMUL V6.4S, V6.4S, V3.4S
	VORR  V3.B16, V3.B16, V7.B16
	VFMLA V6.S4, V3.S4, V7.S4
	WORD  $0x4e3cd4e7 // FADD V7.4S, V7.4S, V28.4S

	// exp32(x) = e·2^n; silu(z) = z / (1 + exp32(−z))
	WORD  $0x4ea1b884 // FCVTZS V4.4S, V4.4S
	VADD  V29.S4, V4.S4, V4.S4
	VSHL  $23, V4.S4, V4.S4
	WORD  $0x6e24dce7 // FMUL V7.4S, V7.4S, V4.4S
	WORD  $0x4e3cd4e7 // FADD V7.4S, V7.4S, V28.4S
	WORD  $0x6e27fc21 // FDIV V1.4S, V1.4S, V7.4S

	// y = o·r·w·silu(z)
	WORD $0x6e3edc00 // FMUL V0.4S, V0.4S, V30.4S
	WORD $0x6e22dc00 // FMUL V0.4S, V0.4S, V2.4S
	WORD $0x6e21dc00 // FMUL V0.4S, V0.4S, V1.4S

	// bf16 RNE into the low half of each lane of V5; NaN → (u>>16)|0x40
	VUSHR $16, V0.S4, V3.S4
	VSHL  $15, V0.S4, V4.S4
	VUSHR $31, V4.S4, V4.S4
	VADD  V31.S4, V0.S4, V5.S4
	VADD  V4.S4, V5.S4, V5.S4
	VUSHR $16, V5.S4, V5.S4
	VORR  V15.B16, V3.B16, V3.B16
	WORD  $0x4e20e404 // FCMEQ V4.4S, V0.4S, V0.4S
	VBIF  V4.B16, V3.B16, V5.B16

	CBNZ R8, gstore1
	CBZ  R4, gnof4
	VST1.P [V0.S4], 16(R4)

gnof4:
	CBZ    R3, gnob4
	WORD   $0x0e6128a5 // XTN V5.4H, V5.4S
	VST1.P [V5.H4], 8(R3)

gnob4:
	SUB $1, R6, R6
	B   gloop4

gtail:
	CBZ     R7, gdone
	MOVD    $1, R8
	FMOVS.P 4(R0), F0
	FMOVS.P 4(R1), F1
	FMOVS.P 4(R2), F2
	B       gbody

gstore1:
	CBZ     R4, gnof1
	FMOVS.P F0, 4(R4)

gnof1:
	CBZ    R3, gnob1
	VST1.P V5.H[0], 2(R3)

gnob1:
	SUB $1, R7, R7
	B   gtail

gdone:
	RET
