package gdn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

// TestRandomShapes runs random shapes (odd K and V, GQA ratios 1–6, B up to 5, both RMSNorm
// epsilons) with realistic states through every kernel against the float64 oracle.
func TestRandomShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var cases []oracle.Case
	n := 40
	if testing.Short() {
		n = 12
	}
	for i := 0; i < n; i++ {
		d := oracle.Dims{B: 1 + r.IntN(5), HK: 1 + r.IntN(3), K: 1 + r.IntN(150), V: 1 + r.IntN(150)}
		d.HV = d.HK * (1 + r.IntN(6))
		c := oracle.Random(r, d, 1+r.IntN(4))
		if i%2 == 1 {
			c.In.RMSEps = 1e-5
			c.Want = oracle.Step(c.Dims, c.In)
		}
		cases = append(cases, c)
	}
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, c := range cases {
			got := step(t, newLayer(t, c, kernel, 1), c, c.Dims.K%2 == 0)
			require.NoError(t, oracle.Check(c, got), "%s eps=%g", c.Name, c.In.RMSEps)
		}
	})
}

// TestWorkersBitIdentical: any worker count gives the same bits as one worker, on a batch large
// enough to be split.
func TestWorkersBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := oracle.Random(r, oracle.Dims{B: 3, HK: 2, HV: 6, K: 64, V: 96}, 2)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		ref := step(t, newLayer(t, c, kernel, 1), c, true)
		require.NoError(t, oracle.Check(c, ref))
		for _, w := range []int{0, 2, 3, 5, 7, 18, 64} {
			got := step(t, newLayer(t, c, kernel, w), c, w%2 == 0)
			require.NoError(t, sameBits(got, ref), "workers=%d", w)
		}
	})
}
