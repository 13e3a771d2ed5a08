package gdn_test

import (
	"fmt"
	"math"
	"slices"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// A Kimi Delta Attention layer (Kimi-Linear: HK = HV = 32, K = V = 128; here 2 heads, K = 8,
// V = 4): a decay per key channel from the raw gate rows A of width VHeads·K, dt_bias of
// [VHeads][K], the bounded gate −5·sigmoid(exp(A_log)·(a + dt_bias)) and a sigmoid output gate. A
// prompt of 6 tokens is prefilled into slot 0, then decoded for 2 tokens in place; slot 1 gets the
// same 8 tokens in one call. One call of T tokens leaves the same bits as T calls of one token.
func ExampleLayer_Run_kimiLinear() {
	const hk, hv, dk, dv = 2, 2, 8, 4
	dtBias := make([]float32, hv*dk) // [VHeads][K]: the checkpoint's dt_bias, one per channel
	for i := range dtBias {
		dtBias[i] = float32(i%dk) * 0.1
	}
	l, err := gdn.New(gdn.Config{
		KHeads: hk, VHeads: hv, K: dk, V: dv,
		ALog: []float32{0.5, 1}, DtBias: dtBias, NormWeight: slices.Repeat([]float32{1}, dv),
		Gate: gdn.GatePerChannel, GateForm: gdn.GateLowerBound, LowerBound: -5, OutGate: gdn.ActSigmoid,
	})
	if err != nil {
		panic(err)
	}
	rows := func(T, width, seed int) gdn.Rows {
		r := make([]float32, T*width)
		for i := range r {
			r[i] = float32(math.Sin(float64(i*7+seed) * 0.37))
		}
		return gdn.Rows{F32: r}
	}
	const T = 8
	q, k, v, z := rows(T, hk*dk, 1), rows(T, hk*dk, 2), rows(T, hv*dv, 3), rows(T, hv*dv, 4)
	b, a := rows(T, hv, 5), rows(T, hv*dk, 6) // A: a raw gate per (value head, channel)
	slot := hv * dk * dv
	pool := gdn.Pool{F32: make([]float32, 2*slot)}
	// tokens [t0, t1) of the rows as one sequence reading read and storing its last state in store.
	run := func(t0, t1 int, read, store int32) {
		at := func(r gdn.Rows, width int) gdn.Rows { return gdn.Rows{F32: r.F32[t0*width : t1*width]} }
		st := slices.Repeat([]int32{gdn.NoStore}, t1-t0)
		st[len(st)-1] = store
		if err := l.Run(&gdn.Batch{
			Start: []int32{0, int32(t1 - t0)}, Read: []int32{read}, Store: st, State: pool,
			Q: at(q, hk*dk), K: at(k, hk*dk), V: at(v, hv*dv), Z: at(z, hv*dv), B: at(b, hv), A: at(a, hv*dk),
			Out: make([]gdn.BF16, (t1-t0)*hv*dv),
		}); err != nil {
			panic(err)
		}
	}
	run(0, 6, gdn.Zero, 0) // prefill
	run(6, 7, 0, 0)        // decode, in place
	run(7, 8, 0, 0)
	run(0, 8, gdn.Zero, 1) // the same tokens in one call
	fmt.Println("same state:", slices.Equal(pool.F32[:slot], pool.F32[slot:]))
	// Output:
	// same state: true
}
