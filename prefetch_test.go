//go:build linux && amd64 && !purego

package gdnsimd_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// hostileList is a prefetch list (tokensF32's pf: entries of an address and a count of 64-byte
// lines, groups ended by an entry of zero lines) of groups addressing memory no routine may touch:
// an inaccessible page, the first page, the top of the address space, lines running into the
// inaccessible page; and ending in half an entry, the list's last word, which ends where an
// inaccessible page begins. A routine that loads where the list points, or reads the list past
// its whole entries, faults.
func hostileList(t *testing.T, groups int, keep *kerneltest.Pages) []uintptr {
	t.Helper()
	none := uintptr(keep.Mem(64)) + 64 // the inaccessible page after 64 bytes of a mapping
	var l []uintptr
	for g := range groups {
		l = append(l, none, uintptr(1+g%3), 0, 2, 8, 1, ^uintptr(0)&^63, 1, none-128, 4)
		if g%4 == 3 {
			l = append(l, none+4096, 0) // an entry of zero lines ends the group early
		}
		l = append(l, 0, 0)
	}
	l = append(l, none) // half an entry: never read as one
	s := unsafe.Slice((*uintptr)(keep.Mem(8*len(l))), len(l))
	copy(s, l)
	return s
}

// TestPrefetchListHarmless runs every amd64 state routine over T tokens (both layouts, f32 and
// bf16, T = 1, 2, 5 and 9, the Qwen3-Next shape, the odd 96×80 and two small ones) with a hostile
// prefetch list (hostileList), and holds the outputs and the stored states to the bits of the same
// call without one: the list is a hint that changes nothing and touches nothing.
func TestPrefetchListHarmless(t *testing.T) {
	forEachAmd64(t, func(t *testing.T, name string, k gdnsimd.Kernel) {
		tk := gdnsimd.TokensOf(k)
		keep := kerneltest.NewPages(t, true)
		r := rand.New(rand.NewPCG(41, 42))
		for _, sh := range [][2]int{{128, 128}, {96, 80}, {8, 3}, {17, 5}} {
			K, V := sh[0], sh[1]
			hs := K * V
			for _, T := range []int{1, 2, 5, 9} {
				src, kh, qh, v, tok := tokenCall(r, K, V, T)
				pf := hostileList(t, 3*T+4, keep)
				for l, layout := range []string{"kv", "vk"} {
					what := fmt.Sprintf("%s %s K=%d V=%d T=%d", name, layout, K, V, T)
					// f32, the last token stored (T = 1: the single-token path of the [K][V] wrapper).
					var o32, s32 [2][]float32
					for i, list := range [][]uintptr{nil, pf} {
						o32[i], s32[i] = make([]float32, T*V), make([]float32, hs)
						stores := make([]unsafe.Pointer, T)
						stores[T-1] = unsafe.Pointer(&s32[i][0])
						tk.F32[l](K, V, src, stores, kh, qh, v, V, o32[i], tok, list)
					}
					sameBits(t, what+" f32 o", o32[0], o32[1])
					sameBits(t, what+" f32 state", s32[0], s32[1])
					// bf16, every token stored and the carry.
					src16 := make([]uint16, hs)
					for i, x := range src {
						src16[i] = gdnsimd.BF16RNE(x)
					}
					var o16, carry [2][]float32
					var st [2][][]uint16
					for i, list := range [][]uintptr{nil, pf} {
						o16[i], carry[i] = make([]float32, T*V), make([]float32, hs)
						stores := make([]unsafe.Pointer, T)
						for τ := range T {
							s := make([]uint16, hs)
							st[i] = append(st[i], s)
							stores[τ] = unsafe.Pointer(&s[0])
						}
						tk.BF16[l](K, V, src16, nil, stores, carry[i], kh, qh, v, V, o16[i], tok, list)
					}
					sameBits(t, what+" bf16 o", o16[0], o16[1])
					sameBits(t, what+" bf16 carry", carry[0], carry[1])
					for τ := range T {
						for i := range st[0][τ] {
							if st[0][τ][i] != st[1][τ][i] {
								t.Fatalf("%s bf16 store %d [%d]: %#04x with the list, %#04x without", what, τ, i, st[1][τ][i], st[0][τ][i])
							}
						}
					}
				}
			}
		}
	})
}

func sameBits(t *testing.T, what string, want, got []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s [%d]: %v with the list, %v without", what, i, got[i], want[i])
		}
	}
}
