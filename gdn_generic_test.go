package gdnsimd_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/internal/oracle"
	"github.com/stretchr/testify/require"
)

// ulpDiff is the distance in float32 ulps between two finite floats of the same sign.
func ulpDiff(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	return max(d, -d)
}

// TestExp32 holds Exp32 within 2 ulp of the correctly rounded exp over its whole unclamped range,
// and checks the clamps and NaN.
func TestExp32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	worst := int64(0)
	for i := 0; i < 1_000_000; i++ {
		x := float32(-87.3 + r.Float64()*(88+87.3))
		if i%4 == 0 {
			x = float32(r.NormFloat64())
		}
		got, want := gdnsimd.Exp32(x), float32(math.Exp(float64(x)))
		d := ulpDiff(got, want)
		worst = max(worst, d)
		require.LessOrEqual(t, d, int64(2), "Exp32(%g) = %g, want %g", x, got, want)
	}
	t.Logf("worst error %d ulp", worst)
	require.Equal(t, float32(1), gdnsimd.Exp32(0))
	require.Equal(t, gdnsimd.Exp32(88), gdnsimd.Exp32(1000))
	require.Equal(t, gdnsimd.Exp32(88), gdnsimd.Exp32(float32(math.Inf(1))))
	require.Equal(t, gdnsimd.Exp32(-87.33654), gdnsimd.Exp32(-1000))
	require.Greater(t, gdnsimd.Exp32(-1000), float32(0))
	require.False(t, math.IsInf(float64(gdnsimd.Exp32(88)), 0))
	require.True(t, math.IsNaN(float64(gdnsimd.Exp32(float32(math.NaN())))))
}

// TestSilu32 checks the gate function against float64 silu.
func TestSilu32(t *testing.T) {
	for z := float32(-120); z <= 120; z += 0.0137 {
		want := float64(z) / (1 + math.Exp(-float64(z)))
		got := float64(gdnsimd.Silu32(z))
		require.InDelta(t, want, got, 4e-7*math.Abs(want)+1e-33, "silu(%g)", z)
	}
	require.True(t, math.IsNaN(float64(gdnsimd.Silu32(float32(math.NaN())))))
}

// TestBF16RNE compares the float32 → bf16 rounding with oracle.BF16's rounding of the same value
// (an independent float64 implementation) on every class of input, ties included.
func TestBF16RNE(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	check := func(u uint32) {
		f := math.Float32frombits(u)
		got := gdnsimd.BF16RNE(f)
		if math.IsNaN(float64(f)) {
			require.Equal(t, uint16(0x7f80), got&0x7f80, "NaN %08x → %04x", u, got)
			require.NotZero(t, got&0x7f, "NaN %08x → %04x is not a NaN", u, got)
			require.Equal(t, uint16(u>>16)&0x8000, got&0x8000, "NaN sign")
			return
		}
		require.Equal(t, oracle.BF16(float64(f)), got, "BF16RNE(%g = %08x)", f, u)
	}
	for i := 0; i < 2_000_000; i++ {
		check(r.Uint32())
	}
	for _, u := range []uint32{0, 0x80000000, 0x00000001, 0x00008000, 0x00018000, 0x00028000, 0x3f808000,
		0x3f818000, 0x3f80ffff, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7fffff, 0x7f800000, 0xff800000,
		0x7fc00000, 0x7f800001, 0xffffffff, 0x007fffff, 0x00800000} {
		check(u)
	}
	for hi := uint32(0); hi < 1<<16; hi++ { // every tie and its neighbours
		for _, lo := range []uint32{0x7fff, 0x8000, 0x8001} {
			check(hi<<16 | lo)
		}
	}
}

// TestRegistry: generic is always present and last, the default is the first, Lookup agrees.
func TestRegistry(t *testing.T) {
	names := gdnsimd.Names()
	require.NotEmpty(t, names)
	require.Equal(t, "generic", names[len(names)-1])
	require.Equal(t, names[0], gdnsimd.Default().Name())
	for _, n := range names {
		k, ok := gdnsimd.Lookup(n)
		require.True(t, ok)
		require.Equal(t, n, k.Name())
		require.Contains(t, gdnsimd.AllNames(), n)
	}
	_, ok := gdnsimd.Lookup("nope")
	require.False(t, ok)
}
