package gdn

import (
	"errors"
	"fmt"
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

// DType is a storage type of the state pool, fixed per Layer (the kernels' own type: its String
// is "f32" or "bf16").
type DType = gdnsimd.Storage

const (
	DTypeF32  = gdnsimd.StorageF32  // float32 (the default)
	DTypeBF16 = gdnsimd.StorageBF16 // bfloat16 storage, float32 maths: widened exactly on load, rounded to nearest even on store
	dtypes    = 2                   // the number of storage types
)

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

// A Pool's storage fields are read here only: a storage type is its field and a case in each of
// these.

// poolFields names the fields, for errors.
const poolFields = "F32 and BF16"

// fields is the number of p's storage fields set and their element count.
func (p *Pool) fields() (set, n int) {
	return btoi(p.F32 != nil) + btoi(p.BF16 != nil), len(p.F32) + len(p.BF16)
}

// lens describes the fields' lengths, for errors.
func (p *Pool) lens() string {
	return fmt.Sprintf("F32 has %d elements, BF16 %d", len(p.F32), len(p.BF16))
}

// dtype is the storage of p's field (the first set; DTypeF32 if none) and its name.
func (p *Pool) dtype() (DType, string) {
	if p.F32 == nil && p.BF16 != nil {
		return DTypeBF16, "BF16"
	}
	return DTypeF32, "F32"
}

// view is the kernel's view of p (one field set) with slots stride elements apart.
func (p *Pool) view(stride int) gdnsimd.Pool {
	out := gdnsimd.Pool{F32: p.F32, SlotStride: stride}
	if p.BF16 != nil {
		out.BF16 = unsafe.Slice((*uint16)(unsafe.SliceData(p.BF16)), len(p.BF16))
	}
	return out
}

// span is the memory of p's storage (its first field set).
func (p *Pool) span(name string) span {
	if p.F32 == nil && p.BF16 != nil {
		return spanOf(name, p.BF16)
	}
	return spanOf(name, p.F32)
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Rows is a token-major input: token t's row starts at element t·Stride; its width is implied by
// the field it fills. Rows of different fields may share one buffer (packed projections).
//
// B and A of the scalar gate may be grouped, as Qwen3-Next's in_proj_ba (GGUF ssm_ba) lays
// them out: per k-head the b of its G = VHeads/KHeads value heads, then their a. With Group > 0,
// element i of a row is at (i/Group)·GroupStride + i%Group; for that projection, rows ba of
// 2·VHeads elements: B = Rows{F32: ba, Stride: 2·VHeads, Group: G, GroupStride: 2·G} and A the
// same from ba[G:].
//
// A wrong Stride or Group cannot be detected: any row buffer long enough for them is accepted. A forgotten
// Stride on a shared [q|k|v|z] buffer (0 where the row is wider than the field) reads the other
// fields' elements as this one's, and grouped [b|a] rows without Group read a k-head's b and a as
// one run: plausible but wrong outputs, and states.
type Rows struct {
	F32    []float32 // exactly one of F32 and BF16 (when the batch has tokens)
	BF16   []BF16    // widened exactly: the same results as their float32 copies
	Stride int       // 0 means dense (the width, or with Group the extent of a row's groups); see Rows

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
	B, A    Rows      // width VHeads, raw beta and gate inputs (A with GatePerChannel: [VHeads][K], channel i of head h at h·K + i)
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
