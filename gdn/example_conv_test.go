package gdn_test

import (
	"fmt"
	"math"
	"slices"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// One Qwen3-Next GDN layer as an engine runs it (here 2 k-heads, 4 value heads, K = 8, V = 4):
// the input projection's rows go in as they are — per token [q|k|v|z] (X is the first C
// channels, Z the rest of the same row) and [b|a] — and the Layer runs the causal conv1d, its
// conv state and the recurrence. Both states live in pools addressed by the same slots. A prompt
// of 5 tokens is prefilled into slot 0 and one token decoded in place; then a speculative round
// verifies 3 draft tokens, storing the states after each in slots 1–3, and the engine accepts 2 of
// them: the next call reads slot 2, which rolls back both states with no copy. The result equals
// running only the accepted tokens.
func ExampleLayer_Run_convFront() {
	const hk, hv, dk, dv, w = 2, 4, 8, 4, 4
	const C = 2*hk*dk + hv*dv // conv channels: q | k | v
	weight := make([]float32, C*w)
	for i := range weight {
		weight[i] = float32(math.Cos(float64(i))) * 0.5
	}
	l, err := gdn.New(gdn.Config{
		KHeads: hk, VHeads: hv, K: dk, V: dv,
		ALog: []float32{0.5, 1, 0, -1}, DtBias: []float32{0.1, 0.2, 0.3, 0.4}, NormWeight: slices.Repeat([]float32{1}, dv),
		ConvWidth: w, ConvWeight: weight, // Hugging Face's conv1d.weight [C][1][W], squeezed
	})
	if err != nil {
		panic(err)
	}
	// The projections of 9 tokens: [q|k|v|z] rows of C + hv·dv, [b|a] rows of 2·hv.
	const T, qkvz, ba = 9, C + hv*dv, 2 * hv
	proj, gates := make([]float32, T*qkvz), make([]float32, T*ba)
	for i := range proj {
		proj[i] = float32(math.Sin(float64(i) * 0.37))
	}
	for i := range gates {
		gates[i] = float32(math.Sin(float64(i)*0.61)) - 0.5
	}
	type pools struct{ state, conv gdn.Pool }
	newPools := func(slots int) pools {
		return pools{gdn.Pool{F32: make([]float32, slots*hv*dk*dv)}, gdn.Pool{F32: make([]float32, slots*(w-1)*C)}}
	}
	// call runs tokens toks (indices into the projections) as one sequence reading slot read with
	// the stores store (nil: back to read), and returns the outputs.
	call := func(p pools, toks []int, read int32, store []int32) []float32 {
		x, g := make([]float32, 0, len(toks)*qkvz), make([]float32, 0, len(toks)*ba)
		for _, t := range toks {
			x, g = append(x, proj[t*qkvz:(t+1)*qkvz]...), append(g, gates[t*ba:(t+1)*ba]...)
		}
		out := make([]float32, len(toks)*hv*dv)
		if err := l.Run(&gdn.Batch{
			Start: []int32{0, int32(len(toks))}, Read: []int32{read}, Store: store,
			X: gdn.Rows{F32: x, Stride: qkvz}, Z: gdn.Rows{F32: x[C:], Stride: qkvz},
			B: gdn.Rows{F32: g, Stride: ba}, A: gdn.Rows{F32: g[hv:], Stride: ba},
			State: p.state, ConvState: p.conv, OutF32: out,
		}); err != nil {
			panic(err)
		}
		return out
	}
	spec := newPools(4)
	var outs []float32
	outs = append(outs, call(spec, []int{0, 1, 2, 3, 4}, gdn.Zero, []int32{-1, -1, -1, -1, 0})...) // prefill into slot 0
	outs = append(outs, call(spec, []int{5}, 0, nil)...)                                           // decode, in place
	draft := call(spec, []int{6, 7, 8}, 0, []int32{1, 2, 3})                                       // verify 3 drafts
	outs = append(outs, draft[:2*hv*dv]...)                                                        // accept 2: slot 2 holds both states now
	outs = append(outs, call(spec, []int{8}, 2, nil)...)                                           // the next token, from slot 2

	plain := newPools(1) // the accepted tokens 0–7 and then token 8 again, without speculation
	ref := call(plain, []int{0, 1, 2, 3, 4, 5, 6, 7}, gdn.Zero, []int32{-1, -1, -1, -1, -1, -1, -1, 0})
	ref = append(ref, call(plain, []int{8}, 0, nil)...)
	slot := func(p gdn.Pool, s, n int) []float32 { return p.F32[s*n : (s+1)*n] }
	fmt.Println("same outputs:", slices.Equal(outs, ref))
	fmt.Println("same state:", slices.Equal(slot(spec.state, 2, hv*dk*dv), slot(plain.state, 0, hv*dk*dv)))
	fmt.Println("same conv state:", slices.Equal(slot(spec.conv, 2, (w-1)*C), slot(plain.conv, 0, (w-1)*C)))
	// Output:
	// same outputs: true
	// same state: true
	// same conv state: true
}

// A Kimi-Linear KDA layer with its conv front (here 2 heads, K = V = 4): its q, k and v
// projections, concatenated, give the X rows (and q_conv1d, k_conv1d, v_conv1d's weights,
// concatenated in that order, ConvWeight), the per-channel gate rows A of width VHeads·K, the
// sigmoid output gate. A prompt of 4 tokens is prefilled, then 3 draft tokens are verified with
// their states kept in slots 1–3; with 1 accepted, slot 1 is the sequence's state (both of them).
func ExampleLayer_Run_kimiLinearConv() {
	const h, dk, dv, w = 2, 4, 4, 4
	const C = 2*h*dk + h*dv
	weight := make([]float32, C*w)
	dtBias := make([]float32, h*dk) // [VHeads][K]
	for i := range weight {
		weight[i] = float32(math.Cos(float64(i)*1.3)) * 0.5
	}
	for i := range dtBias {
		dtBias[i] = float32(i%dk) * 0.1
	}
	l, err := gdn.New(gdn.Config{
		KHeads: h, VHeads: h, K: dk, V: dv,
		ALog: []float32{0.5, 1}, DtBias: dtBias, NormWeight: slices.Repeat([]float32{1}, dv),
		Gate: gdn.GatePerChannel, GateForm: gdn.GateLowerBound, LowerBound: -5, OutGate: gdn.ActSigmoid,
		ConvWidth: w, ConvWeight: weight,
	})
	if err != nil {
		panic(err)
	}
	rows := func(T, width int, seed float64) []float32 {
		r := make([]float32, T*width)
		for i := range r {
			r[i] = float32(math.Sin(float64(i)*0.37 + seed))
		}
		return r
	}
	const T = 7
	x, z, b, a := rows(T, C, 1), rows(T, h*dv, 2), rows(T, h, 3), rows(T, h*dk, 4)
	run := func(state, conv gdn.Pool, t0, t1 int, read int32, store []int32) {
		if err := l.Run(&gdn.Batch{
			Start: []int32{0, int32(t1 - t0)}, Read: []int32{read}, Store: store,
			X: gdn.Rows{F32: x[t0*C : t1*C]}, Z: gdn.Rows{F32: z[t0*h*dv : t1*h*dv]},
			B: gdn.Rows{F32: b[t0*h : t1*h]}, A: gdn.Rows{F32: a[t0*h*dk : t1*h*dk]},
			State: state, ConvState: conv, Out: make([]gdn.BF16, (t1-t0)*h*dv),
		}); err != nil {
			panic(err)
		}
	}
	slot, cslot := h*dk*dv, (w-1)*C
	state, conv := gdn.Pool{F32: make([]float32, 4*slot)}, gdn.Pool{F32: make([]float32, 4*cslot)}
	run(state, conv, 0, 4, gdn.Zero, []int32{-1, -1, -1, 0}) // prefill into slot 0
	run(state, conv, 4, 7, 0, []int32{1, 2, 3})              // verify 3 drafts; accept 1: slot 1
	plainS, plainC := gdn.Pool{F32: make([]float32, slot)}, gdn.Pool{F32: make([]float32, cslot)}
	run(plainS, plainC, 0, 5, gdn.Zero, []int32{-1, -1, -1, -1, 0}) // the accepted tokens alone
	fmt.Println("same state:", slices.Equal(state.F32[slot:2*slot], plainS.F32))
	fmt.Println("same conv state:", slices.Equal(conv.F32[cslot:2*cslot], plainC.F32))
	// Output:
	// same state: true
	// same conv state: true
}
