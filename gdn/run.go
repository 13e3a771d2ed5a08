package gdn

import (
	"cmp"
	"errors"
	"fmt"
	"math"
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

// Pool is caller-owned state, used in place: slot s starts at element s·SlotStride. A state pool
// (Batch.State, StoreTo) has slots of VHeads·K·V elements in the Layer's layout, head h of slot s
// at s·SlotStride + h·K·V, stored as Config.StateDType says. A conv pool (Batch.ConvState,
// ConvStoreTo) has slots of (ConvWidth−1)·C elements: a sequence's last ConvWidth−1 pre-conv rows,
// the oldest first, stored as F32 or BF16, whichever is set (bf16 stores round to nearest even:
// exact when the rows are bf16).
type Pool struct {
	F32        []float32 // exactly one of F32 and BF16
	BF16       []BF16    // bf16 storage, fp32 maths
	SlotStride int       // elements from one slot to the next; 0 means the slot's size
}

// Rows is a token-major input: token t's row starts at element t·Stride; its width is implied by
// the field it fills. Rows of different fields may share one buffer (packed projections).
//
// B and A of the scalar gate may be grouped, as Qwen3-Next's in_proj_ba (GGUF ssm_ba) lays
// them out: per k-head the b of its G = VHeads/KHeads value heads, then their a. With Group > 0,
// element i of a row is at (i/Group)·GroupStride + i%Group; for that projection, rows ba of
// 2·VHeads elements: B = Rows{F32: ba, Stride: 2·VHeads, Group: G, GroupStride: 2·G} and A the
// same from ba[G:].
type Rows struct {
	F32    []float32 // exactly one of F32 and BF16 (when the batch has tokens)
	BF16   []BF16    // widened exactly: the same results as their float32 copies
	Stride int       // 0 means dense (the width, or with Group the extent of a row's groups)

	Group       int // 0: not grouped; else the elements per group (the width a multiple of it)
	GroupStride int // with Group: elements from one group's start to the next, at least Group
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

	// With the conv front (Config.ConvWidth), and only then: X holds the pre-conv rows, width C
	// = 2·KHeads·K + VHeads·V (q | k | v, head-major), in place of Q, K and V (left empty); the
	// conv pools are addressed by the same slots as State and StoreTo: a sequence's Read slot
	// gives both states, Zero zeroes both, every store writes both, padding touches neither.
	X           Rows
	ConvState   Pool  // read from; also written unless ConvStoreTo is set
	ConvStoreTo *Pool // set exactly when StoreTo is: the conv states of the stores go here
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
	v := validators.get(newValidator)
	kb, err := v.check(l, b)
	validators.put(v)
	if err != nil {
		return err
	}
	l.run(&kb)
	return nil
}

// validator holds the scratch of one validation (kept in a free list: no allocation per call in
// steady state).
type validator struct {
	writes map[int32]write
}

// write is who writes a slot: a sequence and the token after which it stores.
type write struct{ seq, tok int32 }

var validators freeList[validator]

func newValidator() *validator { return &validator{writes: map[int32]write{}} }

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
	conv := c.ConvWidth != 0
	fields := [...]rowsField{
		{"Batch.Z", &b.Z, c.VHeads * c.V}, {"Batch.B", &b.B, c.VHeads}, {"Batch.A", &b.A, l.gateWidth()},
		{"Batch.Q", &b.Q, c.KHeads * c.K}, {"Batch.K", &b.K, c.KHeads * c.K}, {"Batch.V", &b.V, c.VHeads * c.V},
		{"Batch.X", &b.X, 2*c.KHeads*c.K + c.VHeads*c.V},
	}
	use := fields[:6] // without the conv front: X empty
	for _, f := range fields[3:] {
		if (f.name == "Batch.X") != conv && (f.r.F32 != nil || f.r.BF16 != nil || f.r.Stride != 0) {
			if conv {
				return kb, fmt.Errorf("%w: %s is set, but the Layer has a conv front (Config.ConvWidth %d): its pre-conv rows go in Batch.X", ErrShape, f.name, c.ConvWidth)
			}
			return kb, fmt.Errorf("%w: Batch.X is set, but the Layer has no conv front (Config.ConvWidth 0): q, k and v go in Batch.Q, K, V", ErrShape)
		}
	}
	if conv {
		// z, b, a and x, in an array of the call's own: an append to fields[:3:3] allocated on
		// every call.
		with := [...]rowsField{fields[0], fields[1], fields[2], fields[6]}
		use = with[:]
	}
	for _, f := range fields {
		if f.r.Group == 0 && f.r.GroupStride == 0 {
			continue
		}
		switch {
		case f.name != "Batch.B" && f.name != "Batch.A" || f.name == "Batch.A" && c.Gate == GatePerChannel:
			return kb, fmt.Errorf("%w: %s.Group = %d, GroupStride = %d: only B and the scalar gate's A may be grouped", ErrShape, f.name, f.r.Group, f.r.GroupStride)
		case f.r.Group < 1 || f.width%f.r.Group != 0 || f.r.GroupStride < f.r.Group:
			return kb, fmt.Errorf("%w: %s.Group = %d, GroupStride = %d: want a Group dividing the width %d and a GroupStride of at least Group", ErrShape, f.name, f.r.Group, f.r.GroupStride, f.width)
		}
	}
	if T > 0 {
		var rows [len(fields)]gdnsimd.Rows
		for i, f := range use {
			var err error
			if rows[i], err = checkRows(f, T); err != nil {
				return kb, err
			}
		}
		kb.Z, kb.Beta, kb.Gate = rows[0], rows[1], rows[2]
		if conv {
			kb.X = rows[3]
		} else {
			kb.Q, kb.Key, kb.Val = rows[3], rows[4], rows[5]
		}
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
	if conv {
		if slots, dstSlots, err = l.checkConvPools(b, &kb, slots, dstSlots, samePool); err != nil {
			return kb, err
		}
	} else if b.ConvState.F32 != nil || b.ConvState.BF16 != nil || b.ConvStoreTo != nil {
		return kb, fmt.Errorf("%w: Batch.ConvState or ConvStoreTo is set, but the Layer has no conv front (Config.ConvWidth 0)", ErrShape)
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
	if err := checkBatchOverlap(b, conv); err != nil {
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

// checkRows checks one row input of a batch of T > 0 tokens (its grouping checked before) and
// returns the kernel's view.
func checkRows(f rowsField, T int) (gdnsimd.Rows, error) {
	r := f.r
	if (r.F32 == nil) == (r.BF16 == nil) {
		return gdnsimd.Rows{}, fmt.Errorf("%w: %s: exactly one of F32 and BF16 must be set (F32 has %d elements, BF16 %d)", ErrShape, f.name, len(r.F32), len(r.BF16))
	}
	width, what := f.width, "width"
	if r.Group > 0 {
		if f.width/r.Group > math.MaxInt/r.GroupStride {
			return gdnsimd.Rows{}, fmt.Errorf("%w: %s.GroupStride = %d: the row's extent overflows", ErrShape, f.name, r.GroupStride)
		}
		width, what = (f.width/r.Group-1)*r.GroupStride+r.Group, "extent of the row's groups"
	}
	stride := r.Stride
	if stride == 0 {
		stride = width
	}
	if stride < width {
		return gdnsimd.Rows{}, fmt.Errorf("%w: %s.Stride = %d, want 0 (dense) or at least the %s %d", ErrShape, f.name, r.Stride, what, width)
	}
	n := len(r.F32) + len(r.BF16)
	// (T−1)·stride + width ≤ n, without overflow.
	if T-1 > (n-width)/stride || n < width {
		return gdnsimd.Rows{}, fmt.Errorf("%w: %s has %d elements, want at least (T−1)·stride + %s = %d·%d + %d for T = %d tokens",
			ErrShape, f.name, n, what, T-1, stride, width, T)
	}
	out := gdnsimd.Rows{F32: r.F32, Stride: stride, Group: r.Group, GroupStride: r.GroupStride}
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

// poolSpan is the span of p's storage.
func poolSpan(name string, p *Pool) span {
	if p.BF16 != nil {
		return spanOf(name, p.BF16)
	}
	return spanOf(name, p.F32)
}

// checkConvPools checks the conv pools of a Layer with the conv front (their storage, sizes and
// whether ConvStoreTo is ConvState's very slice, as StoreTo is State's or not), sets the kernel's
// view and returns the slots of the pools' pairs: slots, the read range, the least of State's and
// ConvState's; dstSlots, the store range, the least of the store pools'.
func (l *Layer) checkConvPools(b *Batch, kb *gdnsimd.Batch, slots, dstSlots int, samePool bool) (int, int, error) {
	c := &l.c
	size := (c.ConvWidth - 1) * (2*c.KHeads*c.K + c.VHeads*c.V)
	n, err := convPool("Batch.ConvState", &b.ConvState, size, &kb.ConvState)
	if err != nil {
		return 0, 0, err
	}
	slots = min(slots, n)
	if (b.ConvStoreTo != nil) != (b.StoreTo != nil) {
		return 0, 0, fmt.Errorf("%w: Batch.StoreTo is %s and Batch.ConvStoreTo %s: set both (out of place) or neither", ErrShape, setOrNil(b.StoreTo != nil), setOrNil(b.ConvStoreTo != nil))
	}
	if b.ConvStoreTo == nil {
		return slots, min(dstSlots, n), nil
	}
	if same := sameSlice(b.ConvState, *b.ConvStoreTo); same != samePool {
		return 0, 0, fmt.Errorf("%w: Batch.StoreTo is Batch.State's very slice: %v, Batch.ConvStoreTo Batch.ConvState's: %v (both in place or both out of place)", ErrOverlap, samePool, same)
	} else if eff := func(s int) int { return cmp.Or(s, size) }; same && eff(b.ConvStoreTo.SlotStride) != eff(b.ConvState.SlotStride) {
		return 0, 0, fmt.Errorf("%w: Batch.ConvStoreTo is Batch.ConvState's slice with another SlotStride (%d, not %d)", ErrOverlap, b.ConvStoreTo.SlotStride, b.ConvState.SlotStride)
	} else if same {
		return slots, min(dstSlots, n), nil
	}
	m, err := convPool("Batch.ConvStoreTo", b.ConvStoreTo, size, &kb.ConvStoreTo)
	return slots, min(dstSlots, m), err
}

func setOrNil(set bool) string {
	if set {
		return "set"
	}
	return "nil"
}

// convPool checks a conv pool of slots of size elements, sets the kernel's view and returns the
// number of slots.
func convPool(name string, p *Pool, size int, out *gdnsimd.Pool) (int, error) {
	if (p.F32 == nil) == (p.BF16 == nil) {
		return 0, fmt.Errorf("%w: %s: exactly one of F32 and BF16 must be set (F32 has %d elements, BF16 %d)", ErrShape, name, len(p.F32), len(p.BF16))
	}
	stride := p.SlotStride
	if stride == 0 {
		stride = size
	}
	if stride < size {
		return 0, fmt.Errorf("%w: %s.SlotStride = %d, want 0 or at least (ConvWidth−1)·C = %d", ErrShape, name, p.SlotStride, size)
	}
	n := len(p.F32) + len(p.BF16)
	if n < size {
		return 0, fmt.Errorf("%w: %s has %d elements: it holds no slot of (ConvWidth−1)·C = %d", ErrShape, name, n, size)
	}
	*out = gdnsimd.Pool{F32: p.F32, SlotStride: stride}
	if p.BF16 != nil {
		out.BF16 = unsafe.Slice((*uint16)(unsafe.SliceData(p.BF16)), len(p.BF16))
	}
	return (n-size)/stride + 1, nil
}

// sameSlice reports whether two pools are the very same slice.
func sameSlice(a, b Pool) bool {
	return spanOf("", a.F32) == spanOf("", b.F32) && spanOf("", a.BF16) == spanOf("", b.BF16)
}

// checkBatchOverlap enforces rule 6: outputs overlap nothing; StoreTo is State's very slice or
// disjoint from it, ConvStoreTo ConvState's; pools overlap no input (rows, Start, Read, Store) and
// no other pool.
func checkBatchOverlap(b *Batch, conv bool) error {
	ins := [...]span{
		spanOf("Batch.Q.F32", b.Q.F32), spanOf("Batch.Q.BF16", b.Q.BF16),
		spanOf("Batch.K.F32", b.K.F32), spanOf("Batch.K.BF16", b.K.BF16),
		spanOf("Batch.V.F32", b.V.F32), spanOf("Batch.V.BF16", b.V.BF16),
		spanOf("Batch.Z.F32", b.Z.F32), spanOf("Batch.Z.BF16", b.Z.BF16),
		spanOf("Batch.B.F32", b.B.F32), spanOf("Batch.B.BF16", b.B.BF16),
		spanOf("Batch.A.F32", b.A.F32), spanOf("Batch.A.BF16", b.A.BF16),
		spanOf("Batch.X.F32", b.X.F32), spanOf("Batch.X.BF16", b.X.BF16),
		spanOf("Batch.Start", b.Start), spanOf("Batch.Read", b.Read), spanOf("Batch.Store", b.Store),
	}
	var pools [4]span // State, StoreTo, ConvState, ConvStoreTo
	pools[0] = poolSpan("Batch.State", &b.State)
	if b.StoreTo != nil {
		pools[1] = poolSpan("Batch.StoreTo", b.StoreTo)
	}
	if conv {
		pools[2] = poolSpan("Batch.ConvState", &b.ConvState)
		if b.ConvStoreTo != nil {
			pools[3] = poolSpan("Batch.ConvStoreTo", b.ConvStoreTo)
		}
	}
	// A store pool may be its source pool's very slice (the same memory as the same type: a bf16
	// view of an f32 conv pool is another pool over the same bytes).
	typed := [2]bool{b.StoreTo != nil, conv && b.ConvStoreTo != nil && sameSlice(b.ConvState, *b.ConvStoreTo)}
	for i := range pools {
		for j := i + 1; j < len(pools); j++ {
			x, y := pools[i], pools[j]
			if same := x.lo == y.lo && x.hi == y.hi && typed[i/2]; x.overlaps(y) && !(same && j == i+1 && i%2 == 0) {
				return fmt.Errorf("%w: %s overlaps %s (a store pool must be its source pool's very slice or disjoint from it; other pools disjoint)", ErrOverlap, y.name, x.name)
			}
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
