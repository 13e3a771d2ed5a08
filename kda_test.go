package gdnsimd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// Tests of the per-channel gate (SPEC Part C) at the kernel layer.

// TestChanDecayDirected: each key channel decays by its own gate, in the form its own em1 selects
// (x + em1·x from em1 ≥ −0.5, else eg·x), bit for bit, in every kernel and format. The gates put
// every channel's em1 within a few float32 ulps of −0.5 (some exactly there), on either side, so
// that the two forms round differently on many elements; k = 0 makes the update k̂ ⊗ δ zero, so
// the state after each token is exactly decay(state), which the test computes in float32 from the
// channels' em1 and eg (chanGates). A channel's decay applied to another row, or the other form,
// changes bits the test checks.
func TestChanDecayDirected(t *testing.T) {
	const K, V, T = 37, 19, 3
	r := rand.New(rand.NewPCG(3, 4))
	// The gate inputs: rate = exp(0) = 1, lg = −softplus(a + dt) = ln 0.5 + ε_i.
	a, dtb := make([]float32, T*K), make([]float32, K)
	for i := range K {
		dtb[i] = float32(0.25 * r.NormFloat64())
	}
	for τ := range T {
		for i := range K {
			eps := []float64{0, 1e-7, -1e-7, 3e-8, -3e-8, 1e-6, -1e-6}[(i+τ)%7]
			x := math.Log(math.Expm1(math.Ln2 - eps)) // softplus(x) = ln 2 − ε
			a[τ*K+i] = float32(x) - dtb[i]
		}
	}
	// The channels' gates, as every kernel computes them, and the forms they select.
	em1, eg := make([]float32, T*K), make([]float32, T*K)
	near := 0
	for τ := range T {
		chanGates(em1[τ*K:(τ+1)*K], eg[τ*K:(τ+1)*K], a[τ*K:(τ+1)*K], dtb, 1, 0)
		for i := range K {
			if em1[τ*K+i] >= nearOne {
				near++
			}
		}
	}
	if near == 0 || near == T*K {
		t.Fatalf("%d of %d lanes take the near form: the gates do not straddle em1 = −0.5", near, T*K)
	}
	// The initial state (bf16 values, so that every format starts from it) and its decays.
	s0 := make([]float32, K*V)
	for i := range s0 {
		s0[i] = math.Float32frombits(uint32(BF16RNE(float32(r.NormFloat64()))) << 16)
	}
	want := make([][]float32, T) // [τ][i·V + j], the f32 state after token τ
	differ := 0                  // elements where the other form gives other bits
	cur := append([]float32(nil), s0...)
	for τ := range T {
		for i := range K {
			m, e := em1[τ*K+i], eg[τ*K+i]
			for j := range V {
				x := cur[i*V+j]
				nearX, farX := x+m*x, e*x
				if nearX != farX {
					differ++
				}
				if m >= nearOne {
					cur[i*V+j] = nearX
				} else {
					cur[i*V+j] = farX
				}
			}
		}
		want[τ] = append([]float32(nil), cur...)
	}
	if differ < K*V/4 {
		t.Fatalf("the two forms differ on only %d of %d element-tokens: the test would not see a wrong form", differ, T*K*V)
	}
	kerneltest.ForEach(t, func(t *testing.T, name string) {
		k, _ := Lookup(name)
		for _, f := range Formats() {
			t.Run("format="+f.String(), func(t *testing.T) {
				idx := func(i, j int) int {
					if f.VK {
						return j*K + i
					}
					return i*V + j
				}
				b := Batch{KHeads: 1, VHeads: 1, K: K, V: V, RMSEps: 1e-6, ALog: []float32{0}, DtBias: dtb,
					NormWeight: ones(V), Format: f, PerChannel: true,
					N: 1, Start: []int32{0, T}, Read: []int32{0}, Store: []int32{1, 2, 3},
					Q: Rows{F32: randRow(r, T*K), Stride: K}, Key: Rows{F32: make([]float32, T*K), Stride: K},
					Val: Rows{F32: randRow(r, T*V), Stride: V}, Z: Rows{F32: randRow(r, T*V), Stride: V},
					Beta: Rows{F32: randRow(r, T), Stride: 1}, Gate: Rows{F32: a, Stride: K},
					OutF32: make([]float32, T*V)}
				sl := K * V
				var f32 []float32
				var bf []uint16
				if f.Storage != StorageF32 {
					bf = make([]uint16, 4*sl)
					b.State.BF16 = bf
				} else {
					f32 = make([]float32, 4*sl)
					b.State.F32 = f32
				}
				b.State.SlotStride = sl
				for i := range K {
					for j := range V {
						if f.Storage != StorageF32 {
							bf[idx(i, j)] = BF16RNE(s0[i*V+j])
						} else {
							f32[idx(i, j)] = s0[i*V+j]
						}
					}
				}
				k.RunBatch(&b, 0, 1, new(Scratch))
				for τ := range T {
					for i := range K {
						for j := range V {
							w, e := want[τ][i*V+j], (τ+1)*sl+idx(i, j)
							if f.Storage != StorageF32 {
								if g := bf[e]; g != BF16RNE(w) {
									t.Fatalf("token %d: S[%d][%d] = bf16 %#04x, want bf16(%g) = %#04x (em1 %g, eg %g)", τ, i, j, g, w, BF16RNE(w), em1[τ*K+i], eg[τ*K+i])
								}
							} else if g := f32[e]; math.Float32bits(g) != math.Float32bits(w) {
								t.Fatalf("token %d: S[%d][%d] = %g, want %g (em1 %g, eg %g)", τ, i, j, g, w, em1[τ*K+i], eg[τ*K+i])
							}
						}
					}
				}
			})
		}
	})
}

func ones(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 1
	}
	return x
}

func randRow(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// chanGates sets em1[i], eg[i] to the per-channel gates of the raw gate a[i] with dt_bias dtb[i],
// the head's rate and bound lb (gatesGeneric's lanes, one per channel; lb < 0: the bounded form).
func chanGates(em1, eg, a, dtb []float32, rate, lb float64) {
	r := make([]float64, len(a))
	for i := range r {
		r[i] = rate
	}
	gatesGeneric(nil, em1, eg, nil, a, dtb, r, formOf(lb), lb)
}

// formOf is the gate form of the tests' bound lb: bounded when lb < 0, else softplus.
func formOf(lb float64) GateForm {
	if lb < 0 {
		return GateBounded
	}
	return GateSoftplus
}

// TestChanGatesMath: the per-channel gates (both forms, A_log and ssm_a rates) against package
// math's float64 functions: em1 and eg within 2 float32 ulps, and the form's switch where eg
// crosses 0.5.
func TestChanGatesMath(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const n = 4096
	a, dtb := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], dtb[i] = float32(3*r.NormFloat64()), float32(r.NormFloat64())
	}
	em1, eg := make([]float32, n), make([]float32, n)
	for _, c := range []struct {
		alog float32
		lb   float64
	}{{0, 0}, {-4, 0}, {1.5, 0}, {0, -5}, {-1, -3}, {2, -5}} {
		t.Run(fmt.Sprintf("alog=%g,lb=%g", c.alog, c.lb), func(t *testing.T) {
			rate := rate64(c.alog)
			chanGates(em1, eg, a, dtb, rate, c.lb)
			for i := range a {
				x := float64(a[i]) + float64(dtb[i])
				var lg float64
				if c.lb < 0 {
					lg = c.lb / (1 + math.Exp(-math.Exp(float64(c.alog))*x))
				} else {
					sp := x
					if x <= 20 {
						sp = math.Log1p(math.Exp(x))
					}
					lg = -math.Exp(float64(c.alog)) * sp
				}
				wm, we := float32(math.Expm1(lg)), float32(math.Exp(lg))
				if ulpDiff(em1[i], wm) > 2 || ulpDiff(eg[i], we) > 2 {
					t.Fatalf("lane %d (a %g, dt %g): em1 %g, eg %g; want %g, %g", i, a[i], dtb[i], em1[i], eg[i], wm, we)
				}
				if c.lb < 0 && !(lg >= c.lb && lg < 0) {
					t.Fatalf("lane %d: lg %g outside [lb, 0)", i, lg)
				}
			}
		})
	}
}
