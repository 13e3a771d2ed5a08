package gdn_test

import (
	"math"
	"slices"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

// newLayer makes a Layer for a case.
func newLayer(t testing.TB, c oracle.Case, kernel string, workers int) *gdn.Layer {
	t.Helper()
	l, err := gdn.New(gdn.Config{
		KHeads: c.Dims.HK, VHeads: c.Dims.HV, K: c.Dims.K, V: c.Dims.V,
		ALog: c.In.ALog, DtBias: c.In.DtBias, NormWeight: c.In.NormWeight,
		RMSEps: float32(c.In.RMSEps), Workers: workers, Kernel: kernel,
	})
	require.NoError(t, err)
	require.Equal(t, kernel, l.Kernel())
	return l
}

// input returns the case's inputs as a gdn.Input with its own copy of the state.
func input(c oracle.Case) gdn.Input {
	return gdn.Input{Q: c.In.Q, K: c.In.K, V: c.In.V, Z: c.In.Z, B: c.In.B, A: c.In.A, State: slices.Clone(c.In.State)}
}

// step runs one case through the public API, in place or not, and returns the results.
func step(t testing.TB, l *gdn.Layer, c oracle.Case, inPlace bool) oracle.Got {
	t.Helper()
	in := input(c)
	n := c.Dims.Heads() * c.Dims.V
	out := gdn.Output{State: in.State, Out: make([]gdn.BF16, n), OutF32: make([]float32, n)}
	if !inPlace {
		out.State = make([]float32, len(in.State))
	}
	require.NoError(t, l.Step(in, out))
	if !inPlace {
		require.True(t, slices.Equal(f32bits(c.In.State), f32bits(in.State)), "out-of-place Step modified Input.State")
	}
	bits := make([]uint16, n)
	for i, b := range out.Out {
		bits[i] = uint16(b)
	}
	return oracle.Got{State: out.State, Out: bits, OutF32: out.OutF32}
}

func f32bits(v []float32) []uint32 {
	b := make([]uint32, len(v))
	for i, x := range v {
		b[i] = math.Float32bits(x)
	}
	return b
}

// unsafeBF16 views the first n bf16 of a float32 buffer's memory (to build aliasing cases).
func unsafeBF16(buf []float32, n int) []gdn.BF16 {
	return unsafe.Slice((*gdn.BF16)(unsafe.Pointer(&buf[0])), n)
}
