package gdnsimd

import (
	"math/rand/v2"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// The kernels internal/kerneltest runs the tests for (it imports nothing of the module).
func init() { kerneltest.Use(AllNames, Available) }

// Available says whether this CPU/build runs the kernel name.
func Available(name string) bool { _, ok := Lookup(name); return ok }

// Exported for the external test package gdnsimd_test, whose piece tests (piece_test.go) iterate
// the kernels with internal/kerneltest.

// Pieces are the vector pieces of one kernel (see impl).
type Pieces struct {
	State func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)
	Gate  func(o, z, w []float32, eps float32, out []uint16, outF []float32)
	L2    func(q, k []float32) (qq, kk, kq float64)
	Scale func(dst, src []float32, f float32)
	Gates func(beta, em1, eg, b, a, alog, dtb []float32)
}

// PiecesOf returns k's pieces; PiecesOf of the "generic" kernel is the reference.
func PiecesOf(k Kernel) Pieces {
	return Pieces{State: k.im.state, Gate: k.im.gate, L2: k.im.l2, Scale: k.im.scale, Gates: k.im.gates}
}

// Tokens are a kernel's state routines over T tokens in the flat signature of the assembly
// (tokensF32, tokensBF16 in tokens_generic.go), by layout (KV, VK); nil where the kernel has none.
// The generic kernel's, wrapped around kvTokens and vkTokens, are the reference.
type Tokens struct {
	F32  [2]func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
	BF16 [2]func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr)
}

// TokensOf returns k's flat state routines.
func TokensOf(k Kernel) Tokens {
	var t Tokens
	if k.im == &genericImpl {
		for l, st := range [2]stateFunc{kvTokens, vkTokens} {
			t.F32[l] = flatF32(st)
			t.BF16[l] = flatBF16(st)
		}
		return t
	}
	for l := range 2 {
		t.F32[l] = k.im.tokF32[l]
		t.BF16[l] = k.im.tokBF16[l]
	}
	return t
}

func flatF32(st stateFunc) func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
	return func(K, V int, src []float32, stores []unsafe.Pointer, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
		dst := make([]stateRef, len(tok)/4)
		for τ, p := range stores {
			if p != nil {
				dst[τ].f32 = unsafe.Slice((*float32)(p), K*V)
			}
		}
		st(&headCall{K: K, V: V, src: stateRef{f32: src}, dst: dst, kh: kh, qh: qh, v: v, vs: vs, o: o, tok: tok,
			tmp: make([]float32, K*V), slab: make([]float32, K*genericBlock)})
	}
}

func flatBF16(st stateFunc) func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
	return func(K, V int, src []uint16, src32 []float32, stores []unsafe.Pointer, carry []float32, kh, qh, v []float32, vs int, o, tok []float32, pf []uintptr) {
		T := len(tok) / 4
		dst := make([]stateRef, T)
		for τ, p := range stores {
			if p != nil {
				dst[τ].bf16 = unsafe.Slice((*uint16)(p), K*V)
			}
		}
		if carry != nil {
			dst[T-1].f32 = carry
		}
		in := stateRef{bf16: src}
		if src32 != nil {
			in = stateRef{f32: src32}
		}
		st(&headCall{K: K, V: V, src: in, dst: dst, kh: kh, qh: qh, v: v, vs: vs, o: o, tok: tok,
			tmp: make([]float32, K*V), slab: make([]float32, K*genericBlock)})
	}
}

// GatesBoundaryLanes returns the inputs of n lanes whose gates lie at float32 rounding boundaries
// (boundaryLanes, gates_test.go), one slice per input.
func GatesBoundaryLanes(seed uint64, n int) (b, a, alog, dtb []float32) {
	for _, l := range boundaryLanes(rand.New(rand.NewPCG(seed, seed)), n) {
		b, a, alog, dtb = append(b, l.in[0]), append(a, l.in[1]), append(alog, l.in[2]), append(dtb, l.in[3])
	}
	return b, a, alog, dtb
}
