package gdn_test

import (
	"errors"
	"testing"

	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

func loadVectors(t testing.TB) []oracle.Case {
	t.Helper()
	cases, err := oracle.LoadVectors("../testdata/vectors")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(cases), 15)
	return cases
}

// TestVectors runs every reference vector (computed independently in float64) through the public
// API with every kernel, in place and not, Workers 1 and 3, within SPEC.md's bounds; the results of
// the four runs of a kernel must be bit-identical.
func TestVectors(t *testing.T) {
	cases := loadVectors(t)
	kerneltest.ForEach(t, func(t *testing.T, kernel string) {
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				var first oracle.Got
				for i, cfg := range []struct {
					workers int
					inPlace bool
				}{{1, true}, {1, false}, {3, true}, {3, false}} {
					got := step(t, newLayer(t, c, kernel, cfg.workers), c, cfg.inPlace)
					require.NoError(t, oracle.Check(c, got), "workers=%d inPlace=%v", cfg.workers, cfg.inPlace)
					if i == 0 {
						first = got
						continue
					}
					require.NoError(t, sameBits(got, first), "workers=%d inPlace=%v: bits differ from workers=1 in place", cfg.workers, cfg.inPlace)
				}
			})
		}
	})
}

// TestOracleAgreesWithVectors checks the test oracle itself against the independent vectors, so a
// wrong oracle cannot make the random-shape tests pass.
func TestOracleAgreesWithVectors(t *testing.T) {
	for _, c := range loadVectors(t) {
		got := oracle.Step(c.Dims, c.In)
		for i := range got.State {
			require.InDelta(t, c.Want.State[i], got.State[i], 1e-9*(1+abs(c.Want.State[i])), "%s state[%d]", c.Name, i)
		}
		for i := range got.Y {
			require.InDelta(t, c.Want.Y[i], got.Y[i], 1e-9*(1+abs(c.Want.Y[i])), "%s y[%d]", c.Name, i)
		}
		require.Equal(t, c.Want.OutBF16, got.OutBF16, "%s: oracle.BF16 disagrees with the vectors' bf16", c.Name)
	}
}

func abs(x float64) float64 { return max(x, -x) }

// sameBits is nil if a and b hold the same bits, else an error naming the tensor and the index.
func sameBits(a, b oracle.Got) error {
	return errors.Join(kerneltest.DiffBits("State", a.State, b.State), kerneltest.DiffBits("Out", a.Out, b.Out),
		kerneltest.DiffBits("OutF32", a.OutF32, b.OutF32))
}
