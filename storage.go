package gdnsimd

import (
	"fmt"
)

// Storage is the element type of a state pool (Format.Storage): how a float32 state is kept
// between calls. The maths is float32 whatever the storage; a narrow storage is widened exactly on
// load and rounded at each store only. A storage is its constant, its name and its two
// conversions here (the portable kernel's), and the generators' conversions (asm/storage.go,
// asm/neon/storage.go), which emit the state routines of every storage they list.
type Storage uint8

const (
	StorageF32  Storage = 0 // float32, as is
	StorageBF16 Storage = 1 // bfloat16 bits: widened exactly, rounded to nearest even (BF16RNE)
	storages            = 2 // the number of storage types (impl.cells, the routine tables)
)

// String is the storage's key in format names: "f32", "bf16".
func (s Storage) String() string {
	if s < storages {
		return [storages]string{"f32", "bf16"}[s]
	}
	return fmt.Sprintf("Storage(%d)", uint8(s))
}

// widen sets dst[i] to the float32 of the stored element src[i] (exact; len(src) ≥ len(dst)).
func (s Storage) widen(dst []float32, src []uint16) {
	switch s {
	case StorageBF16:
		widenGeneric(dst, src)
	default:
		panic("gdnsimd: widen of " + s.String())
	}
}

// round sets dst[i] to src[i] rounded to s (len(dst) ≥ len(src)).
func (s Storage) round(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	switch s {
	case StorageBF16:
		for i, x := range src {
			dst[i] = BF16RNE(x)
		}
	default:
		panic("gdnsimd: round to " + s.String())
	}
}
