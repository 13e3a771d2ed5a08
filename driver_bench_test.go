package gdnsimd_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd"
)

// BenchmarkDriver is Kernel.RunBatch alone (no validation, no workers) on the Qwen3-Next layer
// (HK = 16, HV = 32, K = V = 128), f32 rows, in place from slot n: a prefill of T = 512 tokens at
// B = 1 and a decode step at B = 64, every kernel, format and GQA order. It is the driver's share
// of BenchmarkRun without the single-token calls BenchmarkRun adds for its xstep metric, so that
// a CPU profile of it attributes the driver's parts (gather, l2, scalars, routine, gate) to the
// prefill alone: go test -run NONE -bench 'Driver/.*/T=512' -cpuprofile cpu.out .
func BenchmarkDriver(b *testing.B) {
	for _, k := range gdnsimd.Kernels() {
		for _, f := range gdnsimd.Formats() {
			if !k.Implements(f) {
				continue
			}
			for _, tiled := range []bool{false, true} {
				for _, c := range []struct{ B, T int }{{1, 512}, {64, 1}} {
					name := fmt.Sprintf("kernel=%s/format=%v/tiled=%v/T=%d,B=%d", k.Name(), f, tiled, c.T, c.B)
					b.Run(name, func(b *testing.B) {
						bt := benchBatch(f, tiled, c.B, c.T)
						s := new(gdnsimd.Scratch)
						k.RunBatch(bt, 0, bt.Items(), s)
						b.ReportAllocs()
						b.ResetTimer()
						for range b.N {
							k.RunBatch(bt, 0, bt.Items(), s)
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.B*c.T*bt.VHeads), "ns/head-token")
					})
				}
			}
		}
	}
}

// benchBatch is BenchmarkDriver's batch: B sequences of T tokens, sequence n in place in slot n,
// with the value distributions of package bench.
func benchBatch(f gdnsimd.Format, tiled bool, B, T int) *gdnsimd.Batch {
	const HK, HV, K, V = 16, 32, 128, 128
	r := rand.New(rand.NewPCG(uint64(B), uint64(T)))
	vec := func(n int, mean, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + sd*r.NormFloat64())
		}
		return x
	}
	rows := func(width int, mean, sd float64) gdnsimd.Rows {
		return gdnsimd.Rows{F32: vec(B*T*width, mean, sd), Stride: width}
	}
	bt := &gdnsimd.Batch{
		KHeads: HK, VHeads: HV, K: K, V: V, RMSEps: 1e-6,
		ALog: vec(HV, 0, 0.5), DtBias: vec(HV, 0, 1), NormWeight: vec(V, 1, 0.2),
		Format: f, GQATiled: tiled, N: B, Start: make([]int32, B+1),
		Q: rows(HK*K, 0, 1), Key: rows(HK*K, 0, 1), Val: rows(HV*V, 0, 1), Z: rows(HV*V, 0, 1),
		Beta: rows(HV, 0, 1), Gate: rows(HV, -1, 1.5),
		Out: make([]uint16, B*T*HV*V),
	}
	for n := range B {
		bt.Start[n+1] = int32((n + 1) * T)
	}
	state := vec(B*HV*K*V, 0, 0.05)
	bt.State.SlotStride = HV * K * V
	if f.BF16 {
		bt.State.BF16 = roundAll(state)
	} else {
		bt.State.F32 = state
	}
	return bt
}

// roundAll returns BF16RNE of every element.
func roundAll(x []float32) []uint16 {
	b := make([]uint16, len(x))
	for i, f := range x {
		b[i] = gdnsimd.BF16RNE(f)
	}
	return b
}
