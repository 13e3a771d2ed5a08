package gdn_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/stretchr/testify/require"
)

func validConfig() gdn.Config {
	return gdn.Config{
		KHeads: 2, VHeads: 4, K: 5, V: 3,
		ALog: []float32{0.1, 0.2, 0.3, 0.4}, DtBias: []float32{0, 1, 2, 3}, NormWeight: []float32{1, 2, 3},
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*gdn.Config)
		want error
		msg  string
	}{
		{"KHeads 0", func(c *gdn.Config) { c.KHeads = 0 }, gdn.ErrConfig, "KHeads = 0"},
		{"VHeads negative", func(c *gdn.Config) { c.VHeads = -4 }, gdn.ErrConfig, "VHeads = -4"},
		{"K 0", func(c *gdn.Config) { c.K = 0 }, gdn.ErrConfig, "K = 0"},
		{"V huge", func(c *gdn.Config) { c.V = 1 << 30 }, gdn.ErrConfig, "V = "}, // over MaxDim; 1 << 30 is an int on 32-bit targets too
		{"GQA ratio", func(c *gdn.Config) { c.KHeads = 3 }, gdn.ErrConfig, "not a multiple"},
		{"ALog length", func(c *gdn.Config) { c.ALog = c.ALog[:3] }, gdn.ErrConfig, "Config.ALog has length 3, want 4"},
		{"DtBias nil", func(c *gdn.Config) { c.DtBias = nil }, gdn.ErrConfig, "Config.DtBias has length 0, want 4"},
		{"NormWeight length", func(c *gdn.Config) { c.NormWeight = []float32{1, 2, 3, 4} }, gdn.ErrConfig, "Config.NormWeight has length 4, want 3"},
		{"RMSEps negative", func(c *gdn.Config) { c.RMSEps = -1e-6 }, gdn.ErrConfig, "RMSEps"},
		{"RMSEps NaN", func(c *gdn.Config) { c.RMSEps = float32(math.NaN()) }, gdn.ErrConfig, "RMSEps"},
		{"RMSEps Inf", func(c *gdn.Config) { c.RMSEps = float32(math.Inf(1)) }, gdn.ErrConfig, "RMSEps"},
		{"ALog NaN", func(c *gdn.Config) { c.ALog[3] = float32(math.NaN()) }, gdn.ErrConfig, "Config.ALog[3] = NaN, want a finite value"},
		{"DtBias +Inf", func(c *gdn.Config) { c.DtBias[0] = float32(math.Inf(1)) }, gdn.ErrConfig, "Config.DtBias[0] = +Inf, want a finite value"},
		{"NormWeight -Inf", func(c *gdn.Config) { c.NormWeight[2] = float32(math.Inf(-1)) }, gdn.ErrConfig, "Config.NormWeight[2] = -Inf, want a finite value"},
		{"Workers negative", func(c *gdn.Config) { c.Workers = -1 }, gdn.ErrConfig, "Workers = -1"},
		{"unknown kernel", func(c *gdn.Config) { c.Kernel = "sse9" }, gdn.ErrKernel, `"sse9"`},
		// The gate (SPEC Part C) and the rate as GGUF stores it.
		{"ALog and SsmA", func(c *gdn.Config) { c.SsmA = []float32{-1, -1, -1, -1} }, gdn.ErrConfig, "exactly one of them"},
		{"neither ALog nor SsmA", func(c *gdn.Config) { c.ALog = nil }, gdn.ErrConfig, "exactly one of them"},
		{"SsmA length", func(c *gdn.Config) { c.ALog, c.SsmA = nil, []float32{-1, -1} }, gdn.ErrConfig, "Config.SsmA has length 2, want 4"},
		{"SsmA positive", func(c *gdn.Config) { c.ALog, c.SsmA = nil, []float32{-1, -1, 0.5, -1} }, gdn.ErrConfig, "Config.SsmA[2] = 0.5, want ≤ 0"},
		{"SsmA NaN", func(c *gdn.Config) { c.ALog, c.SsmA = nil, []float32{-1, float32(math.NaN()), -1, -1} }, gdn.ErrConfig, "Config.SsmA[1] = NaN, want a finite value"},
		{"SsmA -Inf", func(c *gdn.Config) { c.ALog, c.SsmA = nil, []float32{-1, -1, -1, float32(math.Inf(-1))} }, gdn.ErrConfig, "Config.SsmA[3] = -Inf, want a finite value"},
		{"per-channel DtBias [VHeads]", func(c *gdn.Config) { c.Gate = gdn.GatePerChannel }, gdn.ErrConfig, "Config.DtBias has length 4, want 20"},
		{"per-channel DtBias NaN", func(c *gdn.Config) {
			c.Gate, c.DtBias = gdn.GatePerChannel, make([]float32, 20)
			c.DtBias[13] = float32(math.NaN())
		}, gdn.ErrConfig, "Config.DtBias[13] = NaN, want a finite value"},
		{"scalar DtBias [VHeads][K]", func(c *gdn.Config) { c.DtBias = make([]float32, 20) }, gdn.ErrConfig, "Config.DtBias has length 20, want 4"},
		{"lower bound without the per-channel gate", func(c *gdn.Config) { c.GateForm, c.LowerBound = gdn.GateLowerBound, -5 }, gdn.ErrConfig, "needs Gate = GatePerChannel"},
		{"lower bound 0", func(c *gdn.Config) { kda(c); c.GateForm = gdn.GateLowerBound }, gdn.ErrConfig, "LowerBound = 0, want a finite negative bound"},
		{"lower bound positive", func(c *gdn.Config) { kda(c); c.GateForm, c.LowerBound = gdn.GateLowerBound, 5 }, gdn.ErrConfig, "LowerBound = 5, want a finite negative bound"},
		{"lower bound -Inf", func(c *gdn.Config) { kda(c); c.GateForm, c.LowerBound = gdn.GateLowerBound, float32(math.Inf(-1)) }, gdn.ErrConfig, "LowerBound = -Inf"},
		{"lower bound NaN", func(c *gdn.Config) { kda(c); c.GateForm, c.LowerBound = gdn.GateLowerBound, float32(math.NaN()) }, gdn.ErrConfig, "LowerBound = NaN"},
		{"lower bound without its form", func(c *gdn.Config) { kda(c); c.LowerBound = -5 }, gdn.ErrConfig, "GateForm is not GateLowerBound"},
		{"unknown gate", func(c *gdn.Config) { c.Gate = 2 }, gdn.ErrConfig, "Gate = 2"},
		{"unknown gate form", func(c *gdn.Config) { c.GateForm = 2 }, gdn.ErrConfig, "GateForm = 2"},
		{"unknown activation", func(c *gdn.Config) { c.OutGate = 2 }, gdn.ErrConfig, "OutGate = 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mod(&c)
			l, err := gdn.New(c)
			require.Nil(t, l)
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	l, err := gdn.New(validConfig())
	require.NoError(t, err)
	require.Equal(t, gdn.Kernels()[0], l.Kernel())
	require.Equal(t, float32(gdn.DefaultRMSEps), l.Config().RMSEps)
}

// kda makes c a per-channel gate's config (DtBias [VHeads][K]).
func kda(c *gdn.Config) {
	c.Gate, c.DtBias = gdn.GatePerChannel, make([]float32, c.VHeads*c.K)
}

// TestNewCopiesParameters: changing the caller's slices after New does not change the Layer.
func TestNewCopiesParameters(t *testing.T) {
	c := validConfig()
	l, in, out := newCall(t, c, 2)
	require.NoError(t, l.Step(in, out))
	want := slices.Clone(out.OutF32)
	c.ALog[0], c.DtBias[1], c.NormWeight[2] = 9, 9, 9
	in, out = validCall(c, 2)
	require.NoError(t, l.Step(in, out))
	require.Equal(t, want, out.OutF32)
}

// validCall builds a valid out-of-place call for B sequences, deterministic values.
// newCall returns a Layer of c and a valid call of it for B sequences.
func newCall(t *testing.T, c gdn.Config, B int) (*gdn.Layer, gdn.Input, gdn.Output) {
	t.Helper()
	l, err := gdn.New(c)
	require.NoError(t, err)
	in, out := validCall(c, B)
	return l, in, out
}

func validCall(c gdn.Config, B int) (gdn.Input, gdn.Output) {
	f := func(n int, seed float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(math.Sin(float64(seed + float32(i)*0.37)))
		}
		return s
	}
	kl, vl, h := B*c.KHeads*c.K, B*c.VHeads*c.V, B*c.VHeads
	in := gdn.Input{Q: f(kl, 1), K: f(kl, 2), V: f(vl, 3), Z: f(vl, 4), B: f(h, 5), A: f(h, 6), State: f(h*c.K*c.V, 7)}
	out := gdn.Output{State: make([]float32, h*c.K*c.V), Out: make([]gdn.BF16, vl), OutF32: make([]float32, vl)}
	return in, out
}

// snapshot is a deep copy of every slice of a call, to check that a failed call wrote nothing.
func snapshot(in gdn.Input, out gdn.Output) string {
	return fmt.Sprint(f32bits(in.Q), f32bits(in.K), f32bits(in.V), f32bits(in.Z), f32bits(in.B), f32bits(in.A),
		f32bits(in.State), f32bits(out.State), out.Out, f32bits(out.OutF32))
}

// TestStepErrors: every malformed call returns an error wrapping the right sentinel, naming the
// field and lengths, does not panic, and leaves every output (and input) untouched.
func TestStepErrors(t *testing.T) {
	c := validConfig()
	const B = 2
	for _, tc := range []struct {
		name string
		mod  func(*gdn.Input, *gdn.Output)
		want error
		msg  string
	}{
		{"B not a multiple of VHeads", func(in *gdn.Input, o *gdn.Output) { in.B = in.B[:7] }, gdn.ErrShape, "Input.B has length 7, want a multiple of VHeads = 4"},
		{"Q short", func(in *gdn.Input, o *gdn.Output) { in.Q = in.Q[:19] }, gdn.ErrShape, "Input.Q has length 19, want 20"},
		{"K long", func(in *gdn.Input, o *gdn.Output) { in.K = append(in.K, 1) }, gdn.ErrShape, "Input.K has length 21, want 20"},
		{"V nil", func(in *gdn.Input, o *gdn.Output) { in.V = nil }, gdn.ErrShape, "Input.V has length 0, want 24"},
		{"Z short", func(in *gdn.Input, o *gdn.Output) { in.Z = in.Z[:23] }, gdn.ErrShape, "Input.Z has length 23, want 24"},
		{"A short", func(in *gdn.Input, o *gdn.Output) { in.A = in.A[:4] }, gdn.ErrShape, "Input.A has length 4, want 8"},
		{"State short", func(in *gdn.Input, o *gdn.Output) { in.State = in.State[:119] }, gdn.ErrShape, "Input.State has length 119, want 120"},
		{"out State nil", func(in *gdn.Input, o *gdn.Output) { o.State = nil }, gdn.ErrShape, "Output.State has length 0, want 120"},
		{"Out short", func(in *gdn.Input, o *gdn.Output) { o.Out = o.Out[:1] }, gdn.ErrShape, "Output.Out has length 1, want 24"},
		{"Out empty not nil", func(in *gdn.Input, o *gdn.Output) { o.Out = o.Out[:0] }, gdn.ErrShape, "Output.Out has length 0, want 24"},
		{"OutF32 long", func(in *gdn.Input, o *gdn.Output) { o.OutF32 = make([]float32, 25) }, gdn.ErrShape, "Output.OutF32 has length 25, want 24"},
		{"no output", func(in *gdn.Input, o *gdn.Output) { o.Out, o.OutF32 = nil, nil }, gdn.ErrNoOutput, "both nil"},
		{"state shifted", func(in *gdn.Input, o *gdn.Output) {
			buf := make([]float32, 121)
			copy(buf, in.State)
			in.State, o.State = buf[:120], buf[1:121]
		}, gdn.ErrOverlap, "Output.State overlaps Input.State"},
		{"out state over Q", func(in *gdn.Input, o *gdn.Output) {
			buf := make([]float32, 140)
			copy(buf, in.Q)
			in.Q, o.State = buf[:20], buf[19:139]
		}, gdn.ErrOverlap, "Output.State overlaps Input.Q"},
		{"OutF32 is Z", func(in *gdn.Input, o *gdn.Output) { o.OutF32 = in.Z }, gdn.ErrOverlap, "Output.OutF32 overlaps Input.Z"},
		{"OutF32 in State", func(in *gdn.Input, o *gdn.Output) { o.OutF32 = o.State[:24] }, gdn.ErrOverlap, "Output.OutF32 overlaps Output.State"},
		{"in state over Q (Run's rule: pools overlap no input)", func(in *gdn.Input, o *gdn.Output) {
			buf := make([]float32, 140)
			copy(buf, in.Q)
			copy(buf[19:], in.State)
			in.Q, in.State = buf[:20], buf[19:139]
		}, gdn.ErrOverlap, "Input.State overlaps Input.Q"},
		{"Out over V", func(in *gdn.Input, o *gdn.Output) {
			buf := make([]float32, 24)
			copy(buf, in.V)
			in.V = buf
			o.Out = unsafeBF16(buf[12:], 24)
		}, gdn.ErrOverlap, "Output.Out overlaps Input.V"},
		{"Out over OutF32", func(in *gdn.Input, o *gdn.Output) { o.Out = unsafeBF16(o.OutF32, 24) }, gdn.ErrOverlap, "Output.Out overlaps Output.OutF32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, in, out := newCall(t, c, B)
			tc.mod(&in, &out)
			before := snapshot(in, out)
			err := l.Step(in, out)
			require.Error(t, err)
			require.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
			require.Contains(t, err.Error(), tc.msg)
			require.Equal(t, before, snapshot(in, out), "a failed Step wrote something")
		})
	}
}

// TestZeroLayer: Step on a Layer that New did not make (the zero value, or nil) is an error
// wrapping ErrConfig, not a panic, and writes nothing.
func TestZeroLayer(t *testing.T) {
	c := validConfig()
	for _, l := range []*gdn.Layer{new(gdn.Layer), nil} {
		in, out := validCall(c, 2)
		before := snapshot(in, out)
		err := l.Step(in, out)
		require.ErrorIs(t, err, gdn.ErrConfig)
		require.Contains(t, err.Error(), "New")
		require.Equal(t, before, snapshot(in, out), "a failed Step wrote something")
		require.ErrorIs(t, l.Step(gdn.Input{}, gdn.Output{}), gdn.ErrConfig)
	}
}

// TestStepBF16Layer: Step takes float32 states only; on a Layer storing bf16 it refuses with
// ErrUnsupported (not a length error) and writes nothing.
func TestStepBF16Layer(t *testing.T) {
	c := validConfig()
	c.StateDType = gdn.DTypeBF16
	l, in, out := newCall(t, c, 2)
	before := snapshot(in, out)
	err := l.Step(in, out)
	require.ErrorIs(t, err, gdn.ErrUnsupported)
	require.NotErrorIs(t, err, gdn.ErrShape)
	require.Contains(t, err.Error(), "use Run")
	require.Equal(t, before, snapshot(in, out), "a failed Step wrote something")
}

// TestStepEmptyBatch: B = 0 with every slice empty is a no-op, nil or not.
func TestStepEmptyBatch(t *testing.T) {
	l, err := gdn.New(validConfig())
	require.NoError(t, err)
	require.NoError(t, l.Step(gdn.Input{}, gdn.Output{}))
	require.NoError(t, l.Step(gdn.Input{Q: []float32{}, B: []float32{}}, gdn.Output{Out: []gdn.BF16{}}))
	require.ErrorIs(t, l.Step(gdn.Input{State: make([]float32, 1)}, gdn.Output{}), gdn.ErrShape)
}

// TestInPlaceOnlyOutF32 covers the optional outputs: only OutF32, only Out, both; in place.
func TestOptionalOutputs(t *testing.T) {
	c := validConfig()
	l, in, out := newCall(t, c, 3)
	require.NoError(t, l.Step(in, out))
	for _, keep := range []string{"out", "f32"} {
		in2, o2 := validCall(c, 3)
		o2.State = in2.State // in place
		if keep == "out" {
			o2.OutF32 = nil
			require.NoError(t, l.Step(in2, o2))
			require.Equal(t, out.Out, o2.Out)
		} else {
			o2.Out = nil
			require.NoError(t, l.Step(in2, o2))
			require.Equal(t, out.OutF32, o2.OutF32)
		}
		require.Equal(t, out.State, o2.State)
	}
	for i, b := range out.Out {
		require.Equal(t, gdn.BF16FromFloat32(out.OutF32[i]), b)
	}
}

// TestPerChannelCalls: with the per-channel gate a token's A row is VHeads·K wide, in Step and in
// Run; a row of the scalar gate's width is an error naming the field, and nothing is written.
// Step (one token per sequence, in place or out of place) gives the bits of the same Run.
func TestPerChannelCalls(t *testing.T) {
	c := validConfig()
	kda(&c)
	for i := range c.DtBias {
		c.DtBias[i] = float32(math.Cos(float64(i)))
	}
	c.GateForm, c.LowerBound, c.OutGate = gdn.GateLowerBound, -5, gdn.ActSigmoid
	const B = 3
	for _, k := range gdn.Kernels() {
		c.Kernel = k
		t.Run("kernel="+k, func(t *testing.T) {
			l, in, out := newCall(t, c, B)
			before := snapshot(in, out)
			err := l.Step(in, out) // A of B·VHeads: the scalar gate's width
			require.ErrorIs(t, err, gdn.ErrShape)
			require.Contains(t, err.Error(), "Input.A has length 12, want 60")
			require.Equal(t, before, snapshot(in, out), "a failed Step wrote")
			in.A = make([]float32, B*c.VHeads*c.K)
			for i := range in.A {
				in.A[i] = float32(math.Sin(float64(i) * 0.7))
			}
			require.NoError(t, l.Step(in, out))
			// The same as a Run of one token per sequence, out of place.
			hs := c.VHeads * c.K * c.V
			b := gdn.Batch{Start: []int32{0, 1, 2, 3}, Read: []int32{0, 1, 2}, Store: []int32{0, 1, 2},
				Q: gdn.Rows{F32: in.Q}, K: gdn.Rows{F32: in.K}, V: gdn.Rows{F32: in.V}, Z: gdn.Rows{F32: in.Z},
				B: gdn.Rows{F32: in.B}, A: gdn.Rows{F32: in.A[:B*c.VHeads]},
				State: gdn.Pool{F32: slices.Clone(in.State)}, StoreTo: &gdn.Pool{F32: make([]float32, B*hs)},
				Out: make([]gdn.BF16, len(out.Out)), OutF32: make([]float32, len(out.OutF32))}
			err = l.Run(&b)
			require.ErrorIs(t, err, gdn.ErrShape)
			require.Contains(t, err.Error(), "Batch.A has 12 elements, want at least (T−1)·stride + width = 2·20 + 20")
			b.A.F32 = in.A
			require.NoError(t, l.Run(&b))
			require.Equal(t, f32bits(out.State), f32bits(b.StoreTo.F32))
			require.Equal(t, out.Out, b.Out)
			require.Equal(t, f32bits(out.OutF32), f32bits(b.OutF32))
		})
	}
}
