package gdn

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
)

// StateLayout is the order of a head's K×V state in memory, fixed per Layer.
type StateLayout uint8

const (
	LayoutKV StateLayout = iota // [K][V], V contiguous: element (i, j) at i·V + j (the seed's; the default)
	LayoutVK                    // [V][K], K contiguous: element (i, j) at j·K + i (vLLM GPU, SGLang, FlashInfer, ggml)
)

// String returns "KV" or "VK".
func (l StateLayout) String() string {
	switch l {
	case LayoutKV:
		return "KV"
	case LayoutVK:
		return "VK"
	}
	return fmt.Sprintf("StateLayout(%d)", uint8(l))
}

// GQAOrder says which q/k head a value head reads, fixed per Layer. It follows the value heads'
// order in the weights, not the file format: Qwen3-Next GGUF files keep Hugging Face's order
// (GQAInterleaved); llama.cpp's converter reorders Qwen3.5's value heads into the tiled order
// (GQATiled). The wrong one gives plausible but wrong outputs.
type GQAOrder uint8

const (
	GQAInterleaved GQAOrder = iota // v-head h reads k-head h/(VHeads/KHeads): HF, fla, vLLM, Qwen3-Next GGUF files (the default)
	GQATiled                       // v-head h reads k-head h % KHeads: Qwen3.5 GGUF files (their converter reorders the value heads)
)

// DType is a storage type of the state pool, fixed per Layer.
type DType uint8

const (
	DTypeF32  DType = iota // float32 (the default)
	DTypeBF16              // bfloat16 storage, float32 maths: widened exactly on load, rounded to nearest even on store
)

// String returns "f32" or "bf16".
func (d DType) String() string {
	switch d {
	case DTypeF32:
		return "f32"
	case DTypeBF16:
		return "bf16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Pool is caller-owned state: slots of VHeads·K·V elements in the Layer's layout, used in place.
// Slot s starts at element s·SlotStride; head h of it at s·SlotStride + h·K·V.
type Pool struct {
	F32        []float32 // exactly one of F32 and BF16, as Config.StateDType says
	BF16       []BF16    // bf16 storage, fp32 maths
	SlotStride int       // elements from one slot to the next; 0 means VHeads·K·V
}

// Rows is a token-major input: token t's row starts at element t·Stride; its width is implied by
// the field it fills. Rows of different fields may share one buffer (packed projections).
type Rows struct {
	F32    []float32 // exactly one of F32 and BF16 (when the batch has tokens)
	BF16   []BF16    // widened exactly: the same results as their float32 copies
	Stride int       // 0 means dense (the width)
}

// The special slot values of Batch.Read and Batch.Store.
const (
	Pad     int32 = -1 // Read: a padding sequence: nothing read or written, its outputs are +0
	Zero    int32 = -2 // Read: the sequence starts from the zero state
	NoStore int32 = -1 // Store: this token's state is not kept
)

// Batch is one call of Run: N = len(Read) sequences, T = Start[N] tokens, packed token-major.
type Batch struct {
	Start []int32 // [N+1] token offsets (cu_seqlens): sequence n owns tokens Start[n] ≤ t < Start[n+1]
	Read  []int32 // [N] slot holding sequence n's state before its first token, or Pad, or Zero
	Store []int32 // [T] or nil: the slot receiving the state after token t, or NoStore; nil: each
	//               sequence's state after its last token goes back to its Read slot
	Q, K    Rows      // width KHeads·K, raw (not normalised, not scaled)
	V, Z    Rows      // width VHeads·V
	B, A    Rows      // width VHeads, raw beta and gate inputs (A: VHeads·K with GatePerChannel)
	State   Pool      // read from; also written unless StoreTo is set
	StoreTo *Pool     // optional: Store slots (and the implied stores) index this pool (out of place, snapshot buffers)
	Out     []BF16    // [T][VHeads][V], optional
	OutF32  []float32 // [T][VHeads][V], optional; at least one of Out and OutF32 when T > 0
}

// ErrSlot is wrapped by the errors of Run about slots: out of range, written twice, written by one
// sequence and read by another, stored by a padding sequence, or a Zero sequence whose state would
// be lost.
var ErrSlot = errors.New("gdn: invalid slot")

// Run advances every non-padding sequence of b through its tokens (see the package
// documentation) and writes the outputs and the requested states. It validates b completely
// first: on error nothing is written.
func (l *Layer) Run(b *Batch) error {
	if err := l.usable(); err != nil {
		return err
	}
	if b == nil {
		return fmt.Errorf("%w: Run(nil)", ErrShape)
	}
	v := validators.Get().(*validator)
	kb, err := v.check(l, b)
	validators.Put(v)
	if err != nil {
		return err
	}
	l.run(&kb)
	return nil
}

// validator holds the scratch of one validation (pooled: no allocation per call in steady state).
type validator struct {
	writes map[int32]write
}

// write is who writes a slot: a sequence and the token after which it stores.
type write struct{ seq, tok int32 }

var validators = sync.Pool{New: func() any { return &validator{writes: map[int32]write{}} }}

// rowsField is one of a Batch's row inputs, as validated.
type rowsField struct {
	name  string
	r     *Rows
	width int
}

// check validates b against SPEC Part B's rules and returns the kernel's view of it.
func (v *validator) check(l *Layer, b *Batch) (gdnsimd.Batch, error) {
	clear(v.writes)
	defer clear(v.writes)
	c := &l.c
	N := len(b.Read)
	kb := gdnsimd.Batch{
		KHeads: c.KHeads, VHeads: c.VHeads, K: c.K, V: c.V, RMSEps: c.RMSEps, NormWeight: c.NormWeight,
		N: N, Start: b.Start, Read: b.Read, Store: b.Store,
	}
	l.setBatch(&kb)
	// Rule 1: Start, Store and the lengths of rows and outputs.
	if len(b.Start) != N+1 {
		return kb, fmt.Errorf("%w: Batch.Start has length %d, want N+1 = %d (N = len(Batch.Read))", ErrShape, len(b.Start), N+1)
	}
	if b.Start[0] != 0 {
		return kb, fmt.Errorf("%w: Batch.Start[0] = %d, want 0", ErrShape, b.Start[0])
	}
	for n := 1; n <= N; n++ {
		if b.Start[n] < b.Start[n-1] {
			return kb, fmt.Errorf("%w: Batch.Start[%d] = %d is below Batch.Start[%d] = %d", ErrShape, n, b.Start[n], n-1, b.Start[n-1])
		}
	}
	T := int(b.Start[N])
	if b.Store != nil && len(b.Store) != T {
		return kb, fmt.Errorf("%w: Batch.Store has length %d, want T = Batch.Start[N] = %d (or nil)", ErrShape, len(b.Store), T)
	}
	if T > math.MaxInt/c.VHeads/c.V {
		return kb, fmt.Errorf("%w: T = %d tokens: the outputs would not be addressable", ErrShape, T)
	}
	fields := [...]rowsField{
		{"Batch.Q", &b.Q, c.KHeads * c.K}, {"Batch.K", &b.K, c.KHeads * c.K},
		{"Batch.V", &b.V, c.VHeads * c.V}, {"Batch.Z", &b.Z, c.VHeads * c.V},
		{"Batch.B", &b.B, c.VHeads}, {"Batch.A", &b.A, l.gateWidth()},
	}
	if T > 0 {
		var rows [len(fields)]gdnsimd.Rows
		for i, f := range fields {
			var err error
			if rows[i], err = checkRows(f, T); err != nil {
				return kb, err
			}
		}
		kb.Q, kb.Key, kb.Val, kb.Z, kb.Beta, kb.Gate = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
	}
	outLen := T * c.VHeads * c.V
	if b.Out != nil && len(b.Out) != outLen {
		return kb, fmt.Errorf("%w: Batch.Out has length %d, want T·VHeads·V = %d", ErrShape, len(b.Out), outLen)
	}
	if b.OutF32 != nil && len(b.OutF32) != outLen {
		return kb, fmt.Errorf("%w: Batch.OutF32 has length %d, want T·VHeads·V = %d", ErrShape, len(b.OutF32), outLen)
	}
	if T > 0 && b.Out == nil && b.OutF32 == nil {
		return kb, fmt.Errorf("%w: Batch.Out and Batch.OutF32 are both nil", ErrNoOutput)
	}
	if b.Out != nil {
		kb.Out = unsafe.Slice((*uint16)(unsafe.SliceData(b.Out)), len(b.Out))
	}
	kb.OutF32 = b.OutF32
	// Rule 2: pools.
	slots, err := l.checkPool("Batch.State", &b.State, &kb.State)
	if err != nil {
		return kb, err
	}
	dstSlots, samePool := slots, true
	if b.StoreTo != nil {
		if dstSlots, err = l.checkPool("Batch.StoreTo", b.StoreTo, &kb.StoreTo); err != nil {
			return kb, err
		}
		samePool = false
		if sameSlice(b.State, *b.StoreTo) {
			if kb.StoreTo.SlotStride != kb.State.SlotStride {
				return kb, fmt.Errorf("%w: Batch.StoreTo is Batch.State's slice with another SlotStride (%d, not %d)", ErrOverlap, b.StoreTo.SlotStride, b.State.SlotStride)
			}
			samePool = true
			kb.StoreTo = gdnsimd.Pool{} // the same pool: in place
		}
	}
	// Rules 3–5: slots.
	for n := range N {
		t0, t1 := int(b.Start[n]), int(b.Start[n+1])
		r := b.Read[n]
		switch {
		case r == Pad:
			if b.Store != nil {
				for t := t0; t < t1; t++ {
					if b.Store[t] != NoStore {
						return kb, fmt.Errorf("%w: Batch.Store[%d] = %d, but token %d belongs to padding sequence %d (Batch.Read[%d] = Pad)", ErrSlot, t, b.Store[t], t, n, n)
					}
				}
			}
			continue
		case r == Zero:
			if b.Store == nil && t1 > t0 {
				return kb, fmt.Errorf("%w: Batch.Read[%d] = Zero with Batch.Store nil: the state of sequence %d would be lost (store it, or say NoStore per token)", ErrSlot, n, n)
			}
		case r < 0 || int64(r) >= int64(slots):
			return kb, fmt.Errorf("%w: Batch.Read[%d] = %d, want a slot in [0, %d) of Batch.State, Pad (-1) or Zero (-2)", ErrSlot, n, r, slots)
		}
		if b.Store == nil {
			if t1 > t0 && r >= 0 {
				if int64(r) >= int64(dstSlots) {
					return kb, fmt.Errorf("%w: Batch.Read[%d] = %d with Batch.Store nil: the implied store wants a slot in [0, %d) of Batch.StoreTo", ErrSlot, n, r, dstSlots)
				}
				if err := v.addWrite(r, int32(n), int32(t1-1), "the implied store of Batch.Read"); err != nil {
					return kb, err
				}
			}
			continue
		}
		for t := t0; t < t1; t++ {
			s := b.Store[t]
			if s == NoStore {
				continue
			}
			if s < 0 || int64(s) >= int64(dstSlots) {
				return kb, fmt.Errorf("%w: Batch.Store[%d] = %d, want a slot in [0, %d) of %s or NoStore (-1)", ErrSlot, t, s, dstSlots, poolName(b))
			}
			if err := v.addWrite(s, int32(n), int32(t), "Batch.Store"); err != nil {
				return kb, err
			}
		}
	}
	if samePool {
		// Rule 4: a slot written by one sequence is read by no other.
		for n := range N {
			r := b.Read[n]
			if r < 0 || b.Start[n+1] == b.Start[n] {
				continue
			}
			if w, ok := v.writes[r]; ok && int(w.seq) != n {
				return kb, fmt.Errorf("%w: Batch.Read[%d] = %d, but sequence %d writes slot %d (after token %d): the order would be undefined", ErrSlot, n, r, w.seq, r, w.tok)
			}
		}
	}
	// Rule 6: overlaps.
	if err := checkBatchOverlap(b); err != nil {
		return kb, err
	}
	return kb, nil
}

// addWrite records that sequence seq writes slot s after token tok, refusing a second writer.
func (v *validator) addWrite(s, seq, tok int32, what string) error {
	if w, ok := v.writes[s]; ok {
		return fmt.Errorf("%w: slot %d written twice: after token %d (sequence %d) and after token %d (sequence %d, %s)", ErrSlot, s, w.tok, w.seq, tok, seq, what)
	}
	v.writes[s] = write{seq, tok}
	return nil
}

func poolName(b *Batch) string {
	if b.StoreTo != nil {
		return "Batch.StoreTo"
	}
	return "Batch.State"
}

// checkRows checks one row input of a batch of T > 0 tokens and returns the kernel's view.
func checkRows(f rowsField, T int) (gdnsimd.Rows, error) {
	r := f.r
	if (r.F32 == nil) == (r.BF16 == nil) {
		return gdnsimd.Rows{}, fmt.Errorf("%w: %s: exactly one of F32 and BF16 must be set (F32 has %d elements, BF16 %d)", ErrShape, f.name, len(r.F32), len(r.BF16))
	}
	stride := r.Stride
	if stride == 0 {
		stride = f.width
	}
	if stride < f.width {
		return gdnsimd.Rows{}, fmt.Errorf("%w: %s.Stride = %d, want 0 (dense) or at least the width %d", ErrShape, f.name, r.Stride, f.width)
	}
	n := len(r.F32) + len(r.BF16)
	// (T−1)·stride + width ≤ n, without overflow.
	if T-1 > (n-f.width)/stride || n < f.width {
		return gdnsimd.Rows{}, fmt.Errorf("%w: %s has %d elements, want at least (T−1)·stride + width = %d·%d + %d for T = %d tokens",
			ErrShape, f.name, n, T-1, stride, f.width, T)
	}
	out := gdnsimd.Rows{F32: r.F32, Stride: stride}
	if r.BF16 != nil {
		out.BF16 = unsafe.Slice((*uint16)(unsafe.SliceData(r.BF16)), len(r.BF16))
	}
	return out, nil
}

// checkPool checks a pool against the Layer's storage type and shape, sets the kernel's view and
// returns the number of slots.
func (l *Layer) checkPool(name string, p *Pool, out *gdnsimd.Pool) (int, error) {
	c := &l.c
	if (p.F32 == nil) == (p.BF16 == nil) {
		return 0, fmt.Errorf("%w: %s: exactly one of F32 and BF16 must be set (F32 has %d elements, BF16 %d)", ErrShape, name, len(p.F32), len(p.BF16))
	}
	if (p.BF16 != nil) != (c.StateDType == DTypeBF16) {
		have := "F32"
		if p.BF16 != nil {
			have = "BF16"
		}
		return 0, fmt.Errorf("%w: %s.%s is set, but the Layer stores its state as %v (Config.StateDType)", ErrShape, name, have, c.StateDType)
	}
	slot := c.VHeads * c.K * c.V
	stride := p.SlotStride
	if stride == 0 {
		stride = slot
	}
	if stride < slot {
		return 0, fmt.Errorf("%w: %s.SlotStride = %d, want 0 or at least VHeads·K·V = %d", ErrShape, name, p.SlotStride, slot)
	}
	n := len(p.F32) + len(p.BF16)
	if n < slot {
		return 0, fmt.Errorf("%w: %s has %d elements: it holds no slot of VHeads·K·V = %d", ErrShape, name, n, slot)
	}
	slots := (n-slot)/stride + 1
	*out = gdnsimd.Pool{F32: p.F32, SlotStride: stride}
	if p.BF16 != nil {
		out.BF16 = unsafe.Slice((*uint16)(unsafe.SliceData(p.BF16)), len(p.BF16))
	}
	return slots, nil
}

// sameSlice reports whether two pools are the very same slice.
func sameSlice(a, b Pool) bool {
	return spanOf("", a.F32) == spanOf("", b.F32) && spanOf("", a.BF16) == spanOf("", b.BF16)
}

// checkBatchOverlap enforces rule 6: outputs overlap nothing; StoreTo is State's very slice or
// disjoint from it; pools overlap no input (rows, Start, Read, Store).
func checkBatchOverlap(b *Batch) error {
	ins := [...]span{
		spanOf("Batch.Q.F32", b.Q.F32), spanOf("Batch.Q.BF16", b.Q.BF16),
		spanOf("Batch.K.F32", b.K.F32), spanOf("Batch.K.BF16", b.K.BF16),
		spanOf("Batch.V.F32", b.V.F32), spanOf("Batch.V.BF16", b.V.BF16),
		spanOf("Batch.Z.F32", b.Z.F32), spanOf("Batch.Z.BF16", b.Z.BF16),
		spanOf("Batch.B.F32", b.B.F32), spanOf("Batch.B.BF16", b.B.BF16),
		spanOf("Batch.A.F32", b.A.F32), spanOf("Batch.A.BF16", b.A.BF16),
		spanOf("Batch.Start", b.Start), spanOf("Batch.Read", b.Read), spanOf("Batch.Store", b.Store),
	}
	var pools [2]span
	pools[0] = spanOf("Batch.State", b.State.F32)
	if b.State.BF16 != nil {
		pools[0] = spanOf("Batch.State", b.State.BF16)
	}
	if b.StoreTo != nil {
		pools[1] = spanOf("Batch.StoreTo", b.StoreTo.F32)
		if b.StoreTo.BF16 != nil {
			pools[1] = spanOf("Batch.StoreTo", b.StoreTo.BF16)
		}
		if same := pools[0].lo == pools[1].lo && pools[0].hi == pools[1].hi; !same && pools[0].overlaps(pools[1]) {
			return fmt.Errorf("%w: Batch.StoreTo overlaps Batch.State (it must be the very same slice or disjoint)", ErrOverlap)
		}
	}
	outs := [...]span{spanOf("Batch.Out", b.Out), spanOf("Batch.OutF32", b.OutF32)}
	if outs[0].overlaps(outs[1]) {
		return fmt.Errorf("%w: Batch.Out overlaps Batch.OutF32", ErrOverlap)
	}
	for _, o := range outs {
		for _, x := range pools {
			if o.overlaps(x) {
				return fmt.Errorf("%w: %s overlaps %s", ErrOverlap, o.name, x.name)
			}
		}
		for _, x := range ins {
			if o.overlaps(x) {
				return fmt.Errorf("%w: %s overlaps %s", ErrOverlap, o.name, x.name)
			}
		}
	}
	for _, p := range pools {
		for _, x := range ins {
			if p.overlaps(x) {
				return fmt.Errorf("%w: %s overlaps %s (pools may not overlap an input)", ErrOverlap, p.name, x.name)
			}
		}
	}
	return nil
}
