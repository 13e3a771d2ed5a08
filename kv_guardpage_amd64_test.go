//go:build linux && !purego

package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// TestKVTailsGuardPages runs every amd64 [K][V] routine (the single-token one; over T = 1 and 2
// tokens f32, bf16 from src and from src32, with stores and the carry, called directly: kvRaw) with every slice ending at
// a PROT_NONE page, then starting right after one, over kvTailShapes (K < 300): a masked-out
// lane, a VMASKMOVPS or VPMASKMOVD lane or an AVX2 bf16 tail element read or written beyond its
// slice faults. The results must be those of the same call on ordinary slices.
func TestKVTailsGuardPages(t *testing.T) {
	decayKernels(t, func(t *testing.T, im *impl) {
		r := rand.New(rand.NewPCG(25, 26))
		for _, sh := range kvTailShapes() {
			K, V := sh[0], sh[1]
			if K > 300 {
				continue
			}
			for _, T := range []int{1, 2} {
				s, kh, qh, v := make([]float32, K*V), make([]float32, T*K), make([]float32, T*K), make([]float32, T*V)
				for _, x := range [][]float32{s, kh, qh, v} {
					for i := range x {
						x[i] = float32(0.3 * r.NormFloat64())
					}
				}
				s16 := make([]uint16, K*V)
				for i, x := range s {
					s16[i] = BF16RNE(x)
				}
				s32 := make([]float32, K*V)
				widenGeneric(s32, s16)
				tok := []float32{-0.05, 0.96, 0.7, 0.1, -0.7, 0.28, 0.4, -0.2}[:4*T]
				type result struct {
					o, carry []float32
					st       [][]float32
					st16     [][]uint16
				}
				// call runs one format (0 f32, 1 bf16, 2 bf16 from src32) on slices from alloc.
				call := func(format int, f32 func([]float32) []float32, u16 func([]uint16) []uint16) result {
					res := result{o: f32(make([]float32, T*V)), st: make([][]float32, T), st16: make([][]uint16, T)}
					stores := make([]unsafe.Pointer, T)
					for τ := range T {
						if format == 0 {
							res.st[τ] = f32(make([]float32, K*V))
							stores[τ] = unsafe.Pointer(&res.st[τ][0])
						} else {
							res.st16[τ] = u16(make([]uint16, K*V))
							stores[τ] = unsafe.Pointer(&res.st16[τ][0])
						}
					}
					khs, qhs, vs, toks := f32(kh), f32(qh), f32(v), f32(tok)
					rf32, rbf16 := kvRaw(t, im, K)
					switch format {
					case 0:
						rf32(K, V, f32(s), stores, khs, qhs, vs, V, res.o, toks, nil)
					default:
						var src32 []float32
						if format == 2 {
							src32 = f32(s32)
						}
						res.carry = f32(make([]float32, K*V))
						rbf16(K, V, u16(s16), src32, stores, res.carry, khs, qhs, vs, V, res.o, toks, nil)
					}
					return res
				}
				plain32 := func(x []float32) []float32 { return append([]float32(nil), x...) }
				plain16 := func(x []uint16) []uint16 { return append([]uint16(nil), x...) }
				for format := range 3 {
					want := call(format, plain32, plain16)
					for _, atEnd := range []bool{true, false} {
						what := fmt.Sprintf("%s K=%d V=%d T=%d format %d atEnd=%v", im.name, K, V, T, format, atEnd)
						p := kerneltest.NewPages(t, atEnd)
						got := call(format, func(x []float32) []float32 { return kerneltest.PageCopy(p, x) }, func(x []uint16) []uint16 { return kerneltest.PageCopy(p, x) })
						same := func(name string, a, b []float32) {
							for i := range a {
								if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
									t.Fatalf("%s: %s[%d] = %g, on ordinary slices %g", what, name, i, a[i], b[i])
								}
							}
						}
						same("o", got.o, want.o)
						same("carry", got.carry, want.carry)
						for τ := range T {
							same(fmt.Sprint("store ", τ), got.st[τ], want.st[τ])
							for i := range got.st16[τ] {
								if got.st16[τ][i] != want.st16[τ][i] {
									t.Fatalf("%s: bf16 store %d [%d] = %#x, on ordinary slices %#x", what, τ, i, got.st16[τ][i], want.st16[τ][i])
								}
							}
						}
						p.Free()
					}
				}
				// The single-token routine (T = 1, in place and out of place).
				if T == 1 {
					for _, atEnd := range []bool{true, false} {
						for _, inPlace := range []bool{false, true} {
							p := kerneltest.NewPages(t, atEnd)
							sIn := kerneltest.PageCopy(p, s)
							sOut := sIn
							if !inPlace {
								sOut = kerneltest.PageCopy(p, make([]float32, K*V))
							}
							o := kerneltest.PageCopy(p, make([]float32, V))
							im.state(sIn, sOut, kerneltest.PageCopy(p, kh), kerneltest.PageCopy(p, qh), kerneltest.PageCopy(p, v), o, tok[0], tok[1], tok[2], tok[3])
							wantS, wantO := make([]float32, K*V), make([]float32, V)
							im.state(s, wantS, kh, qh, v, wantO, tok[0], tok[1], tok[2], tok[3])
							for i := range wantS {
								if math.Float32bits(sOut[i]) != math.Float32bits(wantS[i]) {
									t.Fatalf("%s K=%d V=%d single-token atEnd=%v inPlace=%v: sOut[%d] differs", im.name, K, V, atEnd, inPlace, i)
								}
							}
							p.Free()
						}
					}
				}
			}
		}
	})
}
