package main

// The storage of a state element: a variant's storage type, its name and size, and the emitters
// of its conversions. Every load of a stored element that widens it to float32 and every store
// that rounds one goes through a method here, and every choice a routine makes by its storage
// asks one; a storage type is its constant, its entry in storages and these methods (with the
// library's Storage constant of the same name, storage.go).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// storage is the element type of a routine's state in memory.
type storage uint8

const (
	stF32  storage = iota // float32, as is
	stBF16                // bfloat16: widened exactly on load, rounded to nearest even on store
)

// storages is every storage a state routine is emitted for, in the library's Storage order.
var storages = []storage{stF32, stBF16}

// String is the storage's part of a routine's name: stateKV<storage><ISA>.
func (s storage) String() string { return [...]string{"f32", "bf16"}[s] }

// goName is the library's Storage constant of s (the routine tables' st and their keys).
func (s storage) goName() string { return [...]string{"StorageF32", "StorageBF16"}[s] }

// narrow reports whether s keeps 16-bit words: widened on load, rounded on store, with the f32
// state between a call's chunks in src32 and carry.
func (s storage) narrow() bool { return s != stF32 }

// es is the size of an element in bytes (offsets are in elements, scaled by es).
func (s storage) es() int {
	if s.narrow() {
		return 2
	}
	return 4
}

// widen loads the piece's narrow elements at m into x as float32 (masked lanes zero).
func (s storage) widen(pc piece, m Mem, x VecVirtual) { widenPiece(pc, m, x) }

// widenTo loads the narrow elements at m (a register: its low words) into X as float32, under
// mask (zeroing) if not nil.
func (s storage) widenTo(m Op, mask Op, X Register) {
	if mask != nil {
		VPMOVZXWD_Z(m, mask, X)
	} else {
		VPMOVZXWD(m, X)
	}
	VPSLLD(U8(16), X, X)
}

// round stores y rounded to s for the piece's lanes at m (non-temporal and whole when nt;
// finite: y holds no NaN, see finiteDelta); y is clobbered.
func (s storage) round(a isa, pc piece, y VecVirtual, m Mem, nt, finite bool) {
	bf16Stored(a, pc, y, m, nt, finite)
}

// roundPair stores the whole YMMs y0 and y1 (AVX2) rounded to s as one vector of words at m (see
// packPairs); both are clobbered.
func (s storage) roundPair(a isa, y0, y1 VecVirtual, m Mem, finite bool) {
	bf16Pair(a, y0, y1, m, finite)
}

// packPairs reports whether s's AVX2 rounding leaves dwords that two vectors pack into one store
// (roundPair).
func (s storage) packPairs() bool { return s == stBF16 }

// cvt2 reports whether the CPU's AVX512_BF16 rounds two vectors of s at once (cvt2, cvtStores).
func (s storage) cvt2() bool { return s == stBF16 }

// finiteRound reports whether s's rounding is cheaper for values known finite (finiteDelta: the
// routines keep a flag per token and row group for it).
func (s storage) finiteRound() bool { return s == stBF16 }
