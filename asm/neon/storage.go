package main

// The storage of a state element: a routine's storage type, its name and size, and the
// conversions copyN emits between it and float32. Every load of a stored element that widens it
// and every store that rounds one is a copyN of a conv here; a storage type is its constant, its
// entry in storages, its convs and their cases in copyN (with the library's Storage constant of
// the same name, storage.go).

// storage is the element type of a routine's state in memory.
type storage uint8

const (
	stF32  storage = iota // float32, as is
	stBF16                // bfloat16: widened exactly on load, rounded to nearest even on store
)

// storages is every storage a state routine is emitted for, in the library's Storage order.
var storages = []storage{stF32, stBF16}

// String is the storage's part of a routine's name: stateKV<storage>NEON.
func (st storage) String() string { return [...]string{"f32", "bf16"}[st] }

// goName is the library's Storage constant of st (the routine table's st and its keys).
func (st storage) goName() string { return [...]string{"StorageF32", "StorageBF16"}[st] }

// narrow reports whether st keeps 16-bit words: widened on load, rounded on store, with the f32
// state between a call's chunks in src32 and carry.
func (st storage) narrow() bool { return st != stF32 }

// shift is log2 of the element size.
func (st storage) shift() int {
	if st.narrow() {
		return 1
	}
	return 2
}

// load is the conversion (copyN) that loads st's elements into float32; store the one that
// stores float32 into st's.
func (st storage) load() conv  { return [...]conv{f32f32, bf16f32}[st] }
func (st storage) store() conv { return [...]conv{f32f32, f32bf16}[st] }

// conv is what copyN does with each element.
type conv int

const (
	f32f32  conv = iota // copy
	bf16f32             // widen: u << 16
	f32bf16             // round to nearest even (BF16RNE)
)

// Registers of copyN: V0, V1 data, V2–V5 temporaries, V6 zero (widen) or int 0x7fff (round), V7
// int 0x00400000 (round: the quiet bit of a NaN, in the high half).
const (
	cZero, cRound, cQuiet = Vreg(6), Vreg(6), Vreg(7)
)

// copyConsts sets the constants copyN of c needs; tmp is a scratch register.
func copyConsts(e *emitter, c conv, tmp Reg) {
	switch c {
	case bf16f32:
		e.op("VEOR", cZero.B16(), cZero.B16(), cZero.B16())
	case f32bf16:
		e.op("MOVW", "$0x7fff", tmp)
		e.op("VDUP", tmp, cRound.S4())
		e.op("MOVW", "$0x00400000", tmp)
		e.op("VDUP", tmp, cQuiet.S4())
	}
}

// round sets out to BF16RNE of each lane of x in the high half of the lane: u + 0x7fff + (u>>16 & 1),
// or u | 0x00400000 where x is NaN (FCMEQ x, x false). Temporaries V2, V4.
func round(e *emitter, x, out Vreg) {
	t, m := Vreg(2), Vreg(4)
	e.op("VSHL", imm(15), x.S4(), t.S4())
	e.op("VUSHR", imm(31), t.S4(), t.S4())
	e.op("VADD", cRound.S4(), t.S4(), t.S4())
	e.op("VADD", t.S4(), x.S4(), out.S4())
	e.op("VORR", cQuiet.B16(), x.B16(), t.B16())
	e.word(fcmeq(m.S4(), x.S4(), x.S4()))
	e.op("VBIF", m.B16(), t.B16(), out.B16())
}

// copyN converts n elements from src to dst (both advanced past them, n ends 0): eight per
// iteration, then at most one group of four, then one at a time. tmp is a scratch register;
// copyConsts(c) must have run.
func copyN(e *emitter, c conv, lab string, src, dst, n, tmp Reg) {
	load := func(w int) {
		switch {
		case c == bf16f32 && w == 8:
			e.op("VLD1.P", post(16, src), list(Vreg(5).H8()))
			e.op("VZIP1", Vreg(5).H8(), cZero.H8(), Vreg(0).H8())
			e.op("VZIP2", Vreg(5).H8(), cZero.H8(), Vreg(1).H8())
		case c == bf16f32 && w == 4:
			e.op("VLD1.P", post(8, src), list(Vreg(5).H4()))
			e.op("VZIP1", Vreg(5).H8(), cZero.H8(), Vreg(0).H8())
		case c == bf16f32:
			e.op("MOVHU.P", post(2, src), tmp)
			e.op("LSLW", imm(16), tmp, tmp)
			e.op("FMOVS", tmp, Freg(0))
		case w == 8:
			e.op("VLD1.P", post(32, src), list(Vreg(0).S4(), Vreg(1).S4()))
		case w == 4:
			e.op("VLD1.P", post(16, src), list(Vreg(0).S4()))
		default:
			e.op("FMOVS.P", post(4, src), Freg(0))
		}
	}
	store := func(w int) {
		if c != f32bf16 {
			switch w {
			case 8:
				e.op("VST1.P", list(Vreg(0).S4(), Vreg(1).S4()), post(32, dst))
			case 4:
				e.op("VST1.P", list(Vreg(0).S4()), post(16, dst))
			default:
				e.op("FMOVS.P", Freg(0), post(4, dst))
			}
			return
		}
		out := Vreg(3)
		round(e, 0, out)
		switch w {
		case 8:
			round(e, 1, 5)
			e.op("VUZP2", Vreg(5).H8(), out.H8(), out.H8())
			e.op("VST1.P", list(out.H8()), post(16, dst))
		case 4:
			e.op("VUZP2", out.H8(), out.H8(), out.H8())
			e.op("VST1.P", list(out.H4()), post(8, dst))
		default:
			e.op("VUZP2", out.H8(), out.H8(), out.H8())
			e.op("VST1.P", out.H(0), post(2, dst))
		}
	}
	e.label(lab + "x8")
	e.op("CMP", imm(8), n)
	e.op("BLT", lab+"x4")
	load(8)
	store(8)
	e.op("SUB", imm(8), n, n)
	e.op("B", lab+"x8")
	e.label(lab + "x4")
	e.op("CMP", imm(4), n)
	e.op("BLT", lab+"x1")
	load(4)
	store(4)
	e.op("SUB", imm(4), n, n)
	e.label(lab + "x1")
	e.op("CBZ", n, lab+"end")
	load(1)
	store(1)
	e.op("SUB", imm(1), n, n)
	e.op("B", lab+"x1")
	e.label(lab + "end")
}
