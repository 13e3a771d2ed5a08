package gdn_test

import (
	"fmt"
	"math"
	"slices"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// The examples of Run share a small layer: 2 k-heads, 4 v-heads, K = 8, V = 4.
const exHK, exHV, exK, exV = 2, 4, 8, 4

// exSlot is the size of one slot of the state pool (all v-heads of one sequence).
const exSlot = exHV * exK * exV

func exLayer(c gdn.Config) *gdn.Layer {
	c.KHeads, c.VHeads, c.K, c.V = exHK, exHV, exK, exV
	c.ALog = []float32{-1, -0.5, 0, 0.5}
	c.DtBias = []float32{1, 1, 1, 1}
	c.NormWeight = []float32{1, 1, 1, 1}
	l, err := gdn.New(c)
	if err != nil {
		panic(err)
	}
	return l
}

// exRows returns dense f32 rows of T tokens of the given width, made-up activations.
func exRows(T, width, seed int) gdn.Rows {
	r := make([]float32, T*width)
	for i := range r {
		r[i] = float32(math.Sin(float64(i*7+seed) * 0.37))
	}
	return gdn.Rows{F32: r}
}

// exBatch is a batch of the given token offsets and read slots with made-up activations.
func exBatch(start, read []int32, seed int) *gdn.Batch {
	T := int(start[len(start)-1])
	return &gdn.Batch{
		Start: start, Read: read,
		Q: exRows(T, exHK*exK, seed), K: exRows(T, exHK*exK, seed+1),
		V: exRows(T, exHV*exV, seed+2), Z: exRows(T, exHV*exV, seed+3),
		B: exRows(T, exHV, seed+4), A: exRows(T, exHV, seed+5),
		Out: make([]gdn.BF16, T*exHV*exV),
	}
}

// Continuous-batching decode over a pool: the live sequences sit in slots 5, 0 and 2 of an
// 8-slot pool, one more entry of the batch is padding (a batch padded to a fixed size). One token
// per sequence; with Store nil each state goes back to its slot, in place.
func ExampleLayer_Run_decode() {
	l := exLayer(gdn.Config{})
	pool := gdn.Pool{F32: make([]float32, 8*exSlot)}
	for step := 0; step < 3; step++ {
		b := exBatch([]int32{0, 1, 2, 3, 4}, []int32{5, 0, gdn.Pad, 2}, step)
		b.State = pool
		if err := l.Run(b); err != nil {
			panic(err)
		}
		if step == 2 {
			pad := b.Out[2*exHV*exV : 3*exHV*exV] // token 2 is the padding entry's
			fmt.Println("padding output all +0:", !slices.ContainsFunc(pad, func(x gdn.BF16) bool { return x != 0 }))
		}
	}
	touched := []int{}
	for s := range 8 {
		if slices.ContainsFunc(pool.F32[s*exSlot:(s+1)*exSlot], func(x float32) bool { return x != 0 }) {
			touched = append(touched, s)
		}
	}
	fmt.Println("slots with state:", touched)
	// Output:
	// padding output all +0: true
	// slots with state: [0 2 5]
}

// A prefill: two prompts of 5 and 3 tokens start from the zero state (Zero) and leave their final
// states in slots 1 and 3 (Store names the slot after each sequence's last token; NoStore
// elsewhere).
func ExampleLayer_Run_prefill() {
	l := exLayer(gdn.Config{})
	pool := gdn.Pool{F32: make([]float32, 4*exSlot)}
	b := exBatch([]int32{0, 5, 8}, []int32{gdn.Zero, gdn.Zero}, 0)
	b.State = pool
	b.Store = []int32{gdn.NoStore, gdn.NoStore, gdn.NoStore, gdn.NoStore, 1, gdn.NoStore, gdn.NoStore, 3}
	if err := l.Run(b); err != nil {
		panic(err)
	}
	nonzero := func(s int) bool {
		return slices.ContainsFunc(pool.F32[s*exSlot:(s+1)*exSlot], func(x float32) bool { return x != 0 })
	}
	fmt.Println("state in slots 0..3:", nonzero(0), nonzero(1), nonzero(2), nonzero(3))
	fmt.Println("outputs:", len(b.Out)/(exHV*exV), "tokens")
	// Output:
	// state in slots 0..3: false true false true
	// outputs: 8 tokens
}

// Speculative verification with rollback by slot choice: the state before the draft is in slot 0;
// the target model verifies 3 draft tokens and stores the state after each in its own slot (1, 2,
// 3). Two tokens are accepted: the next call reads slot 2, with no copy and no replay. The state
// after the accepted tokens is bit for bit the state a call of those 2 tokens alone would leave.
func ExampleLayer_Run_speculative() {
	l := exLayer(gdn.Config{})
	pool := gdn.Pool{F32: make([]float32, 4*exSlot)}
	prefix := exBatch([]int32{0, 4}, []int32{gdn.Zero}, 9)
	prefix.State = pool
	prefix.Store = []int32{gdn.NoStore, gdn.NoStore, gdn.NoStore, 0}
	if err := l.Run(prefix); err != nil {
		panic(err)
	}
	before := slices.Clone(pool.F32[:exSlot])

	verify := exBatch([]int32{0, 3}, []int32{0}, 20)
	verify.State = pool
	verify.Store = []int32{1, 2, 3}
	if err := l.Run(verify); err != nil {
		panic(err)
	}
	accepted := 2    // the verifier accepted the first two draft tokens
	next := accepted // the slot that holds the state after them

	// The same two tokens alone, from the state before the draft, in a pool of their own.
	alone := exBatch([]int32{0, 2}, []int32{0}, 20) // the same activations: rows of tokens 0 and 1
	alone.State = gdn.Pool{F32: before}
	if err := l.Run(alone); err != nil { // in place: before now holds the 2-token state
		panic(err)
	}
	fmt.Println("the next call reads slot", next)
	fmt.Println("rolled back state == 2-token state:", slices.Equal(pool.F32[next*exSlot:(next+1)*exSlot], before))
	// Output:
	// the next call reads slot 2
	// rolled back state == 2-token state: true
}

// A fork: a shared prompt's state in slot 0 is read by three sequences (different continuations,
// e.g. parallel sampling); each writes its own slot and nobody writes slot 0, so the prefix stays.
func ExampleLayer_Run_fork() {
	l := exLayer(gdn.Config{})
	pool := gdn.Pool{F32: make([]float32, 4*exSlot)}
	prompt := exBatch([]int32{0, 6}, []int32{gdn.Zero}, 3)
	prompt.State = pool
	prompt.Store = []int32{-1, -1, -1, -1, -1, 0}
	if err := l.Run(prompt); err != nil {
		panic(err)
	}
	prefix := slices.Clone(pool.F32[:exSlot])

	fork := exBatch([]int32{0, 1, 2, 3}, []int32{0, 0, 0}, 7)
	fork.State = pool
	fork.Store = []int32{1, 2, 3}
	if err := l.Run(fork); err != nil {
		panic(err)
	}
	fmt.Println("prefix unchanged:", slices.Equal(pool.F32[:exSlot], prefix))
	fmt.Println("continuations differ:", !slices.Equal(pool.F32[exSlot:2*exSlot], pool.F32[2*exSlot:3*exSlot]))

	// Two sequences writing one slot, or one writing a slot another reads, is refused.
	fork.Store = []int32{1, 1, 3}
	fmt.Println(l.Run(fork))
	// Output:
	// prefix unchanged: true
	// continuations differ: true
	// gdn: invalid slot: slot 1 written twice: after token 0 (sequence 0) and after token 1 (sequence 1, Batch.Store)
}

// bf16 activations read in place from a packed projection: one bf16 buffer per token holds
// [q | k | v | z] and another [b | a], so every field is a Rows with the packed row's stride and an
// offset into the buffer. The state is a bf16 pool in the [V][K] layout (vLLM, SGLang); the maths
// stays float32 (bf16 values are widened exactly, the state is rounded only where stored).
func ExampleLayer_Run_packedBF16() {
	l := exLayer(gdn.Config{StateLayout: gdn.LayoutVK, StateDType: gdn.DTypeBF16})
	const T = 3
	const qw, vw = exHK * exK, exHV * exV
	const stride = 2*qw + 2*vw // q, k, v, z of one token
	qkvz := make([]gdn.BF16, T*stride)
	ba := make([]gdn.BF16, T*2*exHV)
	for i := range qkvz {
		qkvz[i] = gdn.BF16FromFloat32(float32(math.Cos(float64(i) * 0.3)))
	}
	for i := range ba {
		ba[i] = gdn.BF16FromFloat32(float32(math.Sin(float64(i))))
	}
	rows := func(buf []gdn.BF16, off, stride int) gdn.Rows { return gdn.Rows{BF16: buf[off:], Stride: stride} }
	b := &gdn.Batch{
		Start: []int32{0, T}, Read: []int32{gdn.Zero}, Store: []int32{gdn.NoStore, gdn.NoStore, 0},
		Q: rows(qkvz, 0, stride), K: rows(qkvz, qw, stride),
		V: rows(qkvz, 2*qw, stride), Z: rows(qkvz, 2*qw+vw, stride),
		B: rows(ba, 0, 2*exHV), A: rows(ba, exHV, 2*exHV),
		State:  gdn.Pool{BF16: make([]gdn.BF16, exSlot)},
		OutF32: make([]float32, T*exHV*exV),
	}
	if err := l.Run(b); err != nil {
		panic(err)
	}
	fmt.Println("format:", l.Config().StateLayout, l.Config().StateDType)
	fmt.Println("state stored:", slices.ContainsFunc(b.State.BF16, func(x gdn.BF16) bool { return x != 0 }))
	// Output:
	// format: VK bf16
	// state stored: true
}
