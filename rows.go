package gdnsimd

import (
	"math"
	"unsafe"
)

// Rows is a token-major input: token t's row starts at element t·Stride. Exactly one of F32 and
// BF16 holds the data (bf16 values as their bits).
type Rows struct {
	F32    []float32
	BF16   []uint16
	Stride int // elements from one token's row to the next; at least the row's extent
	// Group > 0: a grouped row (Beta and Gate of the scalar gate only): element i of a row at
	// (i/Group)·GroupStride + i%Group, GroupStride ≥ Group, the width a multiple of Group.
	Group, GroupStride int
}

// extent is the elements a row of width w spans: w, or up to the last group's end.
func (r *Rows) extent(w int) int {
	if r.Group <= 0 {
		return w
	}
	return (w/r.Group-1)*r.GroupStride + r.Group
}

// at is the offset of element i in a row.
func (r *Rows) at(i int) int {
	if r.Group <= 0 {
		return i
	}
	return i/r.Group*r.GroupStride + i%r.Group
}

// Pool is caller-owned state: slot s, head h starts at element s·SlotStride + h·K·V. Exactly one
// of F32 and BF16 holds it.
type Pool struct {
	F32        []float32
	BF16       []uint16
	SlotStride int // at least VHeads·K·V
}

// stateRef is one head's K·V state in a pool or in scratch: f32, the bits of a narrow storage st,
// or both (both are written; only one is ever read). The zero stateRef is "none" (a zero state
// when read).
type stateRef struct {
	f32  []float32
	bits []uint16
	st   Storage // bits' storage
}

func (r stateRef) none() bool { return r.f32 == nil && r.bits == nil }

// rowLines appends to pf the entry of token t's row of r, w elements from element off.
func rowLines(pf []uintptr, r *Rows, t, off, w int) []uintptr {
	if r.F32 != nil {
		return lines(pf, unsafe.Pointer(unsafe.SliceData(cutF32(r.F32, t*r.Stride+off, w))), 4*w)
	}
	return lines(pf, unsafe.Pointer(unsafe.SliceData(cutU16(r.BF16, t*r.Stride+off, w))), 2*w)
}

// lines appends to pf the entry of the bytes at p: its address and the 64-byte lines they touch.
func lines(pf []uintptr, p unsafe.Pointer, bytes int) []uintptr {
	a := uintptr(p)
	return append(pf, a, (a&63+uintptr(bytes)+63)>>6)
}

// warm reads an element of each cache line of the rows [t0, t1) of r, w elements from element
// off, and returns their bits xored (for Scratch.sink, so that the loads stay). The state routines
// need token τ's v before they can update the state with it, and the gate reads z a row at a time:
// rows a token apart are a page or more apart, so without this every token of a chunk would wait
// for its row from memory in turn; here the misses overlap (avx512, Qwen3-Next prefill at T = 512:
// the [K][V] routine 811 → 609 ns per head-token; the loads themselves cost about 5 ns).
func warm(r *Rows, t0, t1, off, w int) uint32 {
	var x uint32
	if r.F32 != nil {
		for t := t0; t < t1; t++ {
			row := cutF32(r.F32, t*r.Stride+off, w)
			for i := 0; i < w; i += 16 {
				x ^= math.Float32bits(row[i])
			}
			x ^= math.Float32bits(row[w-1])
		}
		return x
	}
	for t := t0; t < t1; t++ {
		row := cutU16(r.BF16, t*r.Stride+off, w)
		for i := 0; i < w; i += 32 {
			x ^= uint32(row[i])
		}
		x ^= uint32(row[w-1])
	}
	return x
}

// f32At returns the n elements of s32 (else of the bf16 bits s16) from element at as float32:
// an f32 slice in place, a bf16 one widened into buf[:n] by the kernel's widen piece. Every row
// the driver reads goes through it (row; the conv state's rows).
func (im *impl) f32At(s32 []float32, s16 []uint16, at, n int, buf []float32) []float32 {
	if s32 != nil {
		return cutF32(s32, at, n)
	}
	buf = buf[:n:n]
	im.widen(buf, cutU16(s16, at, n))
	return buf
}

// row is f32At of the n elements of token t's row of r from element off.
func (im *impl) row(r *Rows, t, off, n int, buf []float32) []float32 {
	return im.f32At(r.F32, r.BF16, t*r.Stride+off, n, buf)
}

// rowAt returns element h of token t's row of r, widened.
func rowAt(r *Rows, t, h int) float32 {
	i := t*r.Stride + r.at(h)
	if r.F32 != nil {
		return cutF32(r.F32, i, 1)[0]
	}
	return math.Float32frombits(uint32(cutU16(r.BF16, i, 1)[0]) << 16)
}

// fields is the number of p's storage fields set and the storage of the first set (f32 if none):
// a Pool's fields are read here, in poolRef and in the conv front's rows (conv.go, store.go).
func (p *Pool) fields() (set int, st Storage) {
	if p.F32 != nil {
		set++
	}
	if p.BF16 != nil {
		set++
		if p.F32 == nil {
			st = StorageBF16
		}
	}
	return set, st
}

// poolRef is head h of slot s of p (hs = K·V elements).
func poolRef(p *Pool, s, h, hs int) stateRef {
	off := s*p.SlotStride + h*hs
	if p.F32 != nil {
		return stateRef{f32: cutF32(p.F32, off, hs)}
	}
	return stateRef{bits: cutU16(p.BF16, off, hs), st: StorageBF16}
}

// cutF32 is x[off : off+n] with length and capacity n, bounds-checked against len(x), not its
// capacity (the capacity is cut to the length first); cutU16 the same for []uint16. Not generic,
// so that they inline.
func cutF32(x []float32, off, n int) []float32 { return x[:len(x):len(x)][off : off+n : off+n] }

func cutU16(x []uint16, off, n int) []uint16 { return x[:len(x):len(x)][off : off+n : off+n] }
