package fuzz

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
	"github.com/gdnsimd/gdnsimd/gdn"
	"github.com/gdnsimd/gdnsimd/internal/kerneltest"
)

// FuzzRun (seed corpus: testdata/fuzz/FuzzRun): Batches decoded from the bytes, valid and not —
// shapes, format, GQA order, the gate (scalar, per channel in both forms, ssm_a, silu/sigmoid), tokens per sequence, Read/Store slots (Pad, Zero, NoStore, out of
// range), StoreTo, slot strides, row strides, bf16/f32 rows, grouped B/A rows, outputs,
// deliberate aliasing, and the conv front (SPEC Part D: X rows in place of Q, K, V; the conv pools
// ConvState and ConvStoreTo beside State and StoreTo, and their misuse). Run
// must never panic; it must fail exactly when the reference predicate below (SPEC Part B's rules
// as simple loops, not the package's validator) says the batch is invalid, with a sentinel of a
// violated rule, and then write nothing; a valid batch must give, on every kernel that
// implements the format, the bits of the same kernel run one token per call (with f32 pools, the
// conv state carried like the state: the stored states of a bf16 pool are the bf16 rounding of
// those), write nothing else, and
// agree with the generic kernel within the float32 forward-error bound.
func FuzzRun(f *testing.F) {
	for _, s := range seedRuns() {
		f.Add(s.data)
	}
	f.Fuzz(checkRun)
}

var fuzzFormats = [...]gdnsimd.Format{{}, {VK: true}, {Storage: gdnsimd.StorageBF16}, {VK: true, Storage: gdnsimd.StorageBF16}}

// runCase is a decoded batch: the config and the batch (its slices are the fuzz case's memory).
type runCase struct {
	c      gdn.Config
	format gdnsimd.Format
	b      gdn.Batch
}

func normal(rng *rand.Rand, n int, mean, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + sd*rng.NormFloat64())
	}
	return v
}

// place is n elements of type T at byte offset off of arena (4-byte aligned).
func place[T any](arena []float32, off, n int) []T {
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(uintptr(unsafe.Pointer(&arena[0]))+uintptr(off))), n)
}

func byteLen[T any](s []T) int {
	var z T
	return len(s) * int(unsafe.Sizeof(z))
}

// overlapped returns copies of a and b in one buffer, b starting 4 bytes before a ends.
func overlapped[A, B any](a []A, b []B) ([]A, []B) { return placedAfter(a, b, false) }

// placedAfter returns copies of a and b in one buffer, b starting 4 bytes before a ends
// (overlapping) or right after it (adjacent: disjoint).
func placedAfter[A, B any](a []A, b []B, adjacent bool) ([]A, []B) {
	la, lb := byteLen(a), byteLen(b)
	if la < 4 || lb == 0 {
		return a, b
	}
	arena := make([]float32, (la+lb)/4+3)
	na := place[A](arena, 0, len(a))
	copy(na, a)
	off := (la - 4) &^ 3
	if adjacent {
		off = (la + 3) &^ 3
	}
	nb := place[B](arena, off, len(b))
	copy(nb, b)
	return na, nb
}

// poolOver moves pool p and x into one buffer, x overlapping p's end (or adjacent to it).
func poolOver[B any](p *gdn.Pool, x []B, adjacent bool) []B {
	if p.F32 != nil {
		p.F32, x = placedAfter(p.F32, x, adjacent)
	} else if p.BF16 != nil {
		p.BF16, x = placedAfter(p.BF16, x, adjacent)
	}
	return x
}

// poolsOver moves pools p and q into one buffer, q overlapping p's end (or adjacent to it).
func poolsOver(p, q *gdn.Pool, adjacent bool) {
	if q.F32 != nil {
		q.F32 = poolOver(p, q.F32, adjacent)
	} else if q.BF16 != nil {
		q.BF16 = poolOver(p, q.BF16, adjacent)
	}
}

// rowsOver moves pool p and the rows' data into one buffer, overlapping.
func rowsOver(p *gdn.Pool, r *gdn.Rows) {
	if r.F32 != nil {
		r.F32 = poolOver(p, r.F32, false)
	} else if r.BF16 != nil {
		r.BF16 = poolOver(p, r.BF16, false)
	}
}

// sameSlice reports whether two pools are the very same slices (the same type, start and length).
func sameSlice(a, b *gdn.Pool) bool {
	return spanOfSlice(a.F32) == spanOfSlice(b.F32) && spanOfSlice(a.BF16) == spanOfSlice(b.BF16)
}

// mkConvPool is a conv pool of n slots of size elements decoded from x: f32 or bf16 (values
// N(0, 1), bf16 values when bf16), SlotStride 0, the size, wider or one short of it, sometimes a
// tail that is not a slot, the last slot one short, no data or both types.
func mkConvPool(rng *rand.Rand, n, size int, x byte) *gdn.Pool {
	stride, m := poolLayout(n, size, x, x>>6 == 3)
	vals := normal(rng, max(m, 0), 0, 1)
	p := &gdn.Pool{F32: vals, SlotStride: stride}
	if x>>5&1 == 1 {
		p = bf16Pool(vals, stride)
	}
	switch x {
	case 0xFF:
		p = &gdn.Pool{SlotStride: stride} // no data
	case 0xFE:
		p.F32 = vals // both
	}
	return p
}

// poolLayout decodes from x the SlotStride of a pool of n slots of slot elements (0, the slot,
// wider, or one short of it when x%4 == 3 and x>>2%4 == 0) and its length: sometimes (x>>4&1) a
// tail that is not a slot, one short when short.
func poolLayout(n, slot int, x byte, short bool) (stride, size int) {
	stride = [...]int{0, slot, slot + 1 + int(x>>2%3), 0}[x%4]
	if x%4 == 3 && x>>2%4 == 0 {
		stride = slot - 1 // invalid
	}
	st := stride
	if st <= 0 {
		st = slot
	}
	size = (n-1)*st + slot
	if x>>4&1 == 1 {
		size += slot / 2 // a tail that is not a slot
	}
	if short {
		size-- // the last slot one short
	}
	return stride, size
}

// bf16Pool is a bf16 pool of vals rounded to bf16.
func bf16Pool(vals []float32, stride int) *gdn.Pool {
	p := &gdn.Pool{BF16: make([]gdn.BF16, len(vals)), SlotStride: stride}
	for i, v := range vals {
		p.BF16[i] = gdn.BF16FromFloat32(v)
	}
	return p
}

// decodeConv decodes the conv front (6 bytes: width, bias and misuse; X; ConvState's form; its
// slot count and overlaps; ConvStoreTo's mode; its form). W is 0 (none) half the time; then the
// bytes sometimes set the conv fields anyway.
func decodeConv(r *reader, rng *rand.Rand, rc *runCase, T, slots, toSlots int) {
	c, b := &rc.c, &rc.b
	hk, hv := c.KHeads*c.K, c.VHeads*c.V
	C := 2*hk + hv
	var by [6]byte
	for i := range by {
		by[i] = r.next()
	}
	cv, xr, cs, cn, ct, cf := by[0], by[1], by[2], by[3], by[4], by[5]
	W := [...]int{0, 0, 0, 0, 2, 3, 4, 8}[cv&7]
	misuse := cv >> 4
	if W == 0 {
		switch misuse {
		case 0xF: // X without the conv front
			b.X = mkRows(rng, xr, T, C, 0, 1)
		case 0xE:
			b.X = gdn.Rows{Stride: C}
		case 0xD:
			b.ConvState = *mkConvPool(rng, slots, 3*C, cs)
		case 0xC:
			b.ConvStoreTo = &gdn.Pool{}
		}
		return
	}
	c.ConvWidth, c.ConvWeight = W, normal(rng, C*W, 0, 0.5)
	if cv>>3&1 == 1 {
		c.ConvBias = normal(rng, C, 0, 0.5)
	}
	b.X = mkRows(rng, xr, T, C, 0, 1)
	switch misuse {
	case 0xF: // Q, K, V kept: Q set beside X
	case 0xE: // V's stride only
		b.Q, b.K, b.V = gdn.Rows{}, gdn.Rows{}, gdn.Rows{Stride: hv}
	default:
		b.Q, b.K, b.V = gdn.Rows{}, gdn.Rows{}, gdn.Rows{}
	}
	size := (W - 1) * C
	n := slots
	switch cn & 3 {
	case 2:
		n = slots - 1 // too few slots
	case 3:
		n = slots + 1
	}
	b.ConvState = *mkConvPool(rng, n, size, cs)
	sameState := b.StoreTo != nil && poolSpan(&b.State) == poolSpan(b.StoreTo)
	same := func(stride int) *gdn.Pool {
		return &gdn.Pool{F32: b.ConvState.F32, BF16: b.ConvState.BF16, SlotStride: stride}
	}
	switch ct & 7 {
	case 1: // ConvState's slice, the same stride or another (or the same in another form)
		b.ConvStoreTo = same([...]int{b.ConvState.SlotStride, 0, size, size + 1}[ct>>3&3])
	case 2: // a pool of its own
		b.ConvStoreTo = mkConvPool(rng, toSlots, size, cf)
	case 3: // nil
	case 4: // overlapping ConvState
		if p := b.ConvState; len(p.F32) > 1 {
			b.ConvStoreTo = &gdn.Pool{F32: p.F32[1+int(cf)%(len(p.F32)-1):]}
		} else if len(p.BF16) > 1 {
			b.ConvStoreTo = &gdn.Pool{BF16: p.BF16[1+int(cf)%(len(p.BF16)-1):]}
		}
	case 5: // ConvState's bytes as the other type
		if p := b.ConvState; p.F32 != nil && p.BF16 == nil {
			b.ConvStoreTo = &gdn.Pool{BF16: unsafe.Slice((*gdn.BF16)(unsafe.Pointer(unsafe.SliceData(p.F32))), 2*len(p.F32))}
		} else if p.BF16 != nil && p.F32 == nil && len(p.BF16) >= 2 {
			b.ConvStoreTo = &gdn.Pool{F32: unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(p.BF16))), len(p.BF16)/2)}
		}
	default: // as StoreTo: nil, ConvState's slice (in place), or a pool of its own
		switch {
		case b.StoreTo == nil:
		case sameState:
			b.ConvStoreTo = same(b.ConvState.SlotStride)
		default:
			b.ConvStoreTo = mkConvPool(rng, toSlots, size, cf)
		}
	}

	// Overlaps of the conv pools (keeping a store pool that is its source's slice so).
	convSame := b.ConvStoreTo != nil && sameSlice(&b.ConvState, b.ConvStoreTo)
	switch cn >> 2 & 7 {
	case 3: // ConvState right after State (valid)
		if b.StoreTo == nil {
			poolsOver(&b.State, &b.ConvState, true)
		}
	case 4: // ConvState over X
		rowsOver(&b.ConvState, &b.X)
	case 5: // an output over ConvState
		if b.OutF32 != nil {
			b.OutF32 = poolOver(&b.ConvState, b.OutF32, false)
		} else {
			b.Out = poolOver(&b.ConvState, b.Out, false)
		}
	case 6: // ConvState over State
		if b.StoreTo == nil {
			poolsOver(&b.State, &b.ConvState, false)
		}
	case 7: // ConvStoreTo over StoreTo, else ConvState over Read
		if b.ConvStoreTo != nil && b.StoreTo != nil && !convSame && !sameState {
			poolsOver(b.StoreTo, b.ConvStoreTo, false)
		} else {
			b.Read = poolOver(&b.ConvState, b.Read, false)
		}
	}
	if convSame {
		b.ConvStoreTo.F32, b.ConvStoreTo.BF16 = b.ConvState.F32, b.ConvState.BF16
	}
}

// decodeGroups decodes grouped B and A rows (2 bytes): B or A grouped (of any Group dividing the
// width and GroupStride ≥ Group), both read from one buffer laid out as in_proj_ba, or a bad
// grouping.
func decodeGroups(r *reader, rng *rand.Rand, rc *runCase, T int) {
	c, b := &rc.c, &rc.b
	g, h := r.next(), r.next()
	HV := c.VHeads
	var divs []int
	for d := 1; d <= HV; d++ {
		if HV%d == 0 {
			divs = append(divs, d)
		}
	}
	switch g & 7 {
	case 4, 5: // B or A grouped
		f, w, mean, sd := &b.B, HV, 0.0, 1.0
		if g&7 == 5 {
			f, w, mean, sd = &b.A, gateWidth(*c), -1, 1.5
		}
		G := divs[int(g>>3)%len(divs)]
		*f = mkGrouped(rng, h, T, w, G, G+int(g>>5%3), mean, sd)
	case 6: // B and A in one buffer, per k-head [b of its G value heads, their a, pad]
		G := HV / c.KHeads
		gs := 2*G + int(g>>3%3)
		stride := c.KHeads*gs + int(g>>5%2)
		n := G
		if T > 0 {
			n = T * stride
		}
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = float32(math.NaN())
		}
		for t := range T {
			for hh := range HV {
				at := t*stride + hh/G*gs + hh%G
				buf[at], buf[at+G] = float32(rng.NormFloat64()), float32(-1+1.5*rng.NormFloat64())
			}
		}
		b.B = gdn.Rows{F32: buf, Stride: stride, Group: G, GroupStride: gs}
		b.A = gdn.Rows{F32: buf[G:], Stride: stride, Group: G, GroupStride: gs}
		if h&1 == 1 {
			bf := make([]gdn.BF16, len(buf))
			for i, v := range buf {
				bf[i] = gdn.BF16FromFloat32(v)
			}
			b.B.F32, b.B.BF16 = nil, bf
			b.A.F32, b.A.BF16 = nil, bf[G:]
		}
	case 7: // a bad grouping (some valid)
		switch g >> 3 & 7 {
		case 0: // on Q, or on X with the conv front
			if c.ConvWidth != 0 {
				b.X.Group, b.X.GroupStride = 1, 1
			} else {
				b.Q.Group, b.Q.GroupStride = 1, 1
			}
		case 1: // not dividing the width
			b.B.Group, b.B.GroupStride = HV+1, HV+1
		case 2: // GroupStride < Group
			b.B.Group, b.B.GroupStride = HV, HV-1
		case 3:
			b.B.Group, b.B.GroupStride = -1, 2
		case 4: // GroupStride alone
			b.B.GroupStride = 2
		case 5:
			b.Z.Group, b.Z.GroupStride = 1, 1
		case 6: // the extent overflows (valid with one group)
			b.A.Group, b.A.GroupStride = 1, math.MaxInt
		case 7: // one group, as dense (valid for the scalar gate)
			b.A.Group, b.A.GroupStride = HV, HV+int(g>>6&1)
		}
	}
}

// mkGrouped is grouped rows of T tokens of width w (Group G dividing it, GroupStride gs ≥ G),
// decoded from h: f32 or bf16, a stride (dense: the extent of the groups, or wider), sometimes
// one short; the gaps are poison.
func mkGrouped(rng *rand.Rand, h byte, T, w, G, gs int, mean, sd float64) gdn.Rows {
	extent := (w/G-1)*gs + G
	stride := [...]int{0, extent, extent + 1, extent + 2}[h>>1&3]
	st := stride
	if st == 0 {
		st = extent
	}
	n := 0
	if T > 0 {
		n = (T-1)*st + extent
	}
	if h>>3 == 0x1F {
		n-- // one short
	}
	vals := make([]float32, max(n, 0))
	for i := range vals {
		vals[i] = float32(math.NaN())
	}
	for t := range T {
		for i := range w {
			if at := t*st + i/G*gs + i%G; at < len(vals) {
				vals[at] = float32(mean + sd*rng.NormFloat64())
			}
		}
	}
	r := gdn.Rows{F32: vals, Stride: stride, Group: G, GroupStride: gs}
	if h&1 == 1 {
		r.F32, r.BF16 = nil, make([]gdn.BF16, len(vals))
		for i, v := range vals {
			r.BF16[i] = gdn.BF16FromFloat32(v)
		}
	}
	return r
}

// mkRows is the rows of T tokens of width w decoded from y: f32 or bf16 values N(mean, sd), a
// stride (dense, the width, wider with poisoned gaps, or too narrow), sometimes one element
// short, no data, or both F32 and BF16.
func mkRows(rng *rand.Rand, y byte, T, w int, mean, sd float64) gdn.Rows {
	stride := 0
	switch y >> 1 & 3 {
	case 1:
		stride = w
	case 2:
		stride = w + 1 + int(y>>4%3)
	case 3:
		if y>>4 == 0xF {
			stride = [...]int{-1, 0, 0, 0}[y>>3&1] + w - 1 // width − 1 (invalid) or width-2
		}
	}
	st := stride
	if st <= 0 {
		st = w
	}
	n := 0
	if T > 0 {
		n = (T-1)*st + w
	}
	if y>>3&0x1F == 0x1F {
		n-- // one short
	}
	vals := normal(rng, max(n, 0), mean, sd)
	for i := range vals { // the gaps between rows are poison
		if stride > w && i%stride >= w {
			vals[i] = float32(math.NaN())
		}
	}
	var rr gdn.Rows
	if y&1 == 1 {
		rr = gdn.Rows{BF16: make([]gdn.BF16, len(vals)), Stride: stride}
		for i, v := range vals {
			rr.BF16[i] = gdn.BF16FromFloat32(v)
		}
	} else {
		rr = gdn.Rows{F32: vals, Stride: stride}
	}
	if T > 0 && y == 0xF6 {
		rr = gdn.Rows{Stride: stride} // no data
	}
	if T > 0 && y == 0xF7 {
		rr.BF16 = make([]gdn.BF16, len(vals)) // both
		rr.F32 = vals
	}
	return rr
}

// decodeRun decodes a batch from the fuzz bytes.
func decodeRun(data []byte) *runCase {
	r := &reader{b: data}
	rng := rand.New(rand.NewPCG(uint64(len(data)), uint64(r.next())))
	rc := &runCase{}
	c := &rc.c
	c.K, c.V = 1+int(r.next()%10), 1+int(r.next()%10)
	x := r.next()
	c.KHeads = 1 + int(x%2)
	c.VHeads = c.KHeads * (1 + int(x/2%3))
	x = r.next()
	rc.format = fuzzFormats[x%4]
	c.StateLayout, c.StateDType = stateLayout(rc.format), gdn.DTypeF32
	if rc.format.Storage != gdnsimd.StorageF32 {
		c.StateDType = gdn.DTypeBF16
	}
	c.GQA = gdn.GQAOrder(x >> 2 & 1)
	c.Workers = [...]int{1, 2, 3, 0}[x>>3&3]
	if x>>5&1 == 1 {
		c.RMSEps = 1e-5
	}
	c.ALog, c.DtBias, c.NormWeight = normal(rng, c.VHeads, 0, 1), normal(rng, c.VHeads, 0, 1), normal(rng, c.V, 1, 0.2)
	switch x >> 6 { // the gate (SPEC Part C)
	case 1: // per channel, softplus
		c.Gate, c.DtBias = gdn.GatePerChannel, normal(rng, c.VHeads*c.K, 0, 1)
	case 2: // per channel, lower bound, sigmoid (Kimi-Linear)
		c.Gate, c.DtBias = gdn.GatePerChannel, normal(rng, c.VHeads*c.K, 0, 1)
		c.GateForm, c.LowerBound, c.OutGate = gdn.GateLowerBound, -5, gdn.ActSigmoid
	case 3: // the scalar gate from GGUF's ssm_a, sigmoid
		c.SsmA, c.ALog, c.OutGate = make([]float32, c.VHeads), nil, gdn.ActSigmoid
		for h := range c.SsmA {
			c.SsmA[h] = -float32(math.Exp(rng.NormFloat64()))
		}
	}
	b := &rc.b
	slot := c.VHeads * c.K * c.V
	HV, hk, hv := c.VHeads, c.KHeads*c.K, c.VHeads*c.V
	ga := gateWidth(*c)

	// Sequences, slots, stores.
	x = r.next()
	N := int(x&7) % 5
	slots := 1 + int(x>>3%5)
	b.Start = []int32{0}
	b.Read = make([]int32, N)
	for n := range N {
		y := r.next()
		l := int(y % 5)
		if y >= 0xF8 {
			l = 62 + int(y&7) // across the 64-token chunk
		}
		b.Start = append(b.Start, b.Start[n]+int32(l))
		y = r.next()
		switch y % 8 {
		case 0, 1, 2, 3:
			b.Read[n] = int32(int(y>>3) % (slots + 1)) // sometimes = slots: out of range
		case 4:
			b.Read[n] = gdn.Pad
		case 5:
			b.Read[n] = gdn.Zero
		case 6:
			b.Read[n] = int32(n % slots)
		default:
			b.Read[n] = [...]int32{-3, math.MaxInt32, int32(slots), math.MinInt32}[y>>3&3]
		}
	}
	T := int(b.Start[N])
	x = r.next()
	toSlots := slots
	storeToMode := x >> 4 % 8 // 0–3: nil; 4: its own pool; 5: State's slice; 6: State's slice, another stride; 7: overlapping
	if storeToMode == 4 {
		toSlots = 1 + int(x%5)
	}
	if x&1 == 1 { // explicit stores
		b.Store = make([]int32, T)
		fresh := 0
		for t := range T {
			y := r.next()
			switch {
			case y < 0x90:
				b.Store[t] = gdn.NoStore
			case y < 0xD0:
				b.Store[t] = int32(fresh % (toSlots + 1))
				fresh++
			case y < 0xFC:
				b.Store[t] = int32(int(y) % (toSlots + 1))
			default:
				b.Store[t] = [...]int32{-2, -3, math.MaxInt32, 1 << 20}[y&3]
			}
		}
	}

	// Rows.
	scales := [...]float64{1, 1, 1, 1.0 / 64, 64, 1, 1e-3, 1}
	fields := []struct {
		r          *gdn.Rows
		w          int
		mean, sd   float64
		scaleShift int
	}{{&b.Q, hk, 0, 1, 0}, {&b.K, hk, 0, 1, 3}, {&b.V, hv, 0, 1, 0}, {&b.Z, hv, 0, 1, 3}, {&b.B, HV, 0, 1, 6}, {&b.A, ga, -1, 1.5, 6}}
	sx := r.next()
	for _, f := range fields {
		*f.r = mkRows(rng, r.next(), T, f.w, f.mean, f.sd*scales[(int(sx)>>f.scaleShift)&7])
	}

	// Pools.
	x = r.next()
	mkPool := func(n int, x byte, bf16 bool) *gdn.Pool {
		stride, size := poolLayout(n, slot, x, x>>5 == 7)
		vals := normal(rng, max(size, 0), 0, 0.3)
		if bf16 {
			return bf16Pool(vals, stride)
		}
		return &gdn.Pool{F32: vals, SlotStride: stride}
	}
	dtBF16 := rc.format.Storage != gdnsimd.StorageF32
	if x == 0xFF {
		dtBF16 = !dtBF16 // the wrong storage type
	}
	b.State = *mkPool(slots, x, dtBF16)
	y := r.next()
	switch storeToMode {
	case 4:
		b.StoreTo = mkPool(toSlots, y, rc.format.Storage != gdnsimd.StorageF32 != (y == 0xFF))
	case 5:
		b.StoreTo = &gdn.Pool{F32: b.State.F32, BF16: b.State.BF16, SlotStride: [...]int{b.State.SlotStride, 0, slot, b.State.SlotStride}[y%4]}
	case 6:
		b.StoreTo = &gdn.Pool{F32: b.State.F32, BF16: b.State.BF16, SlotStride: slot + 1 + int(y%3)}
	case 7:
		if len(b.State.F32) > 0 {
			b.StoreTo = &gdn.Pool{F32: b.State.F32[1+int(y)%len(b.State.F32):]}
		} else if len(b.State.BF16) > 1 {
			b.StoreTo = &gdn.Pool{BF16: b.State.BF16[1+int(y)%(len(b.State.BF16)-1):]}
		}
	}

	// Outputs.
	x = r.next()
	b.Out, b.OutF32 = make([]gdn.BF16, T*hv), make([]float32, T*hv)
	for i := range b.Out {
		b.Out[i], b.OutF32[i] = 0x7fa1, math.Float32frombits(0x7fc0dead)
	}
	switch x % 8 {
	case 0:
		b.Out = nil
	case 1:
		b.OutF32 = nil
	case 2:
		b.Out, b.OutF32 = nil, nil
	case 3:
		b.Out = b.Out[:max(0, len(b.Out)-1)]
	}

	// Start and Store corruption, deliberate aliasing.
	x = r.next()
	if x >= 0xF0 && N > 0 {
		switch x & 3 {
		case 0:
			b.Start[0] = 1
		case 1:
			b.Start[N] = b.Start[N-1] - 1
		case 2:
			b.Start = append(b.Start, b.Start[N])
		case 3:
			b.Start = b.Start[:N]
		}
	} else if x >= 0xE8 && b.Store != nil && len(b.Store) > 0 {
		b.Store = b.Store[:len(b.Store)-1]
	}
	x = r.next()
	if x >= 0xE0 {
		switch x & 7 {
		case 0: // OutF32 over Q
			if b.Q.F32 != nil {
				b.Q.F32, b.OutF32 = overlapped(b.Q.F32, b.OutF32)
			}
		case 1: // the pool over V
			if b.V.F32 != nil && b.State.F32 != nil {
				b.State.F32, b.V.F32 = overlapped(b.State.F32, b.V.F32)
			}
		case 2: // Out over OutF32
			b.OutF32, b.Out = overlapped(b.OutF32, b.Out)
		case 3: // OutF32 over the pool
			if b.State.F32 != nil && b.StoreTo == nil {
				b.State.F32, b.OutF32 = overlapped(b.State.F32, b.OutF32)
			}
		case 4: // rows sharing memory (valid)
			b.K, b.A = b.Q, b.B
		case 5: // StoreTo over Read
			if b.StoreTo != nil && storeToMode == 4 && b.StoreTo.F32 != nil {
				b.StoreTo.F32, b.Read = overlapped(b.StoreTo.F32, b.Read)
			}
		case 6: // the pool over Store
			if b.State.F32 != nil && b.StoreTo == nil {
				b.State.F32, b.Store = overlapped(b.State.F32, b.Store)
			}
		case 7: // Out over Start
			b.Start, b.Out = overlapped(b.Start, b.Out)
		}
	}

	// The conv front and grouped gate rows: bytes after all the others, so that an input that ends
	// before them (every seed written before the conv front) has neither.
	decodeConv(r, rng, rc, T, slots, toSlots)
	decodeGroups(r, rng, rc, T)
	return rc
}

// span is the memory of a slice, in bytes.
type memSpan struct{ lo, hi uintptr }

func spanOfSlice[T any](s []T) memSpan {
	if len(s) == 0 {
		return memSpan{}
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return memSpan{lo, lo + uintptr(byteLen(s))}
}

func (a memSpan) overlaps(b memSpan) bool { return a.lo < b.hi && b.lo < a.hi }

func poolSpan(p *gdn.Pool) memSpan {
	if p.BF16 != nil {
		return spanOfSlice(p.BF16)
	}
	return spanOfSlice(p.F32)
}

// expectRun is the reference validity predicate, SPEC Part B's rules 1–6 written out (with Part
// D's conv front and the grouped rows): it returns the sentinels of every rule the batch violates
// (none: valid).
func expectRun(c gdn.Config, b *gdn.Batch) []error {
	var errs []error
	add := func(e error) {
		if !slices.Contains(errs, e) {
			errs = append(errs, e)
		}
	}
	N := len(b.Read)
	// Rule 1.
	if len(b.Start) != N+1 || b.Start[0] != 0 {
		return []error{gdn.ErrShape}
	}
	for n := range N {
		if b.Start[n+1] < b.Start[n] {
			return []error{gdn.ErrShape}
		}
	}
	T := int64(b.Start[N])
	storeOK := b.Store == nil || int64(len(b.Store)) == T
	if !storeOK {
		add(gdn.ErrShape)
	}
	conv := c.ConvWidth != 0
	hk, hv := c.KHeads*c.K, c.VHeads*c.V
	C := 2*hk + hv
	rows := []struct {
		name string
		r    *gdn.Rows
		w    int
		used bool // the rows this Layer reads: Q, K, V without the conv front, X with it
	}{
		{"Q", &b.Q, hk, !conv}, {"K", &b.K, hk, !conv}, {"V", &b.V, hv, !conv}, {"Z", &b.Z, hv, true},
		{"B", &b.B, c.VHeads, true}, {"A", &b.A, gateWidth(c), true}, {"X", &b.X, C, conv},
	}
	for _, f := range rows {
		// The rows the Layer does not read are empty: no data, no stride.
		if !f.used && (f.r.F32 != nil || f.r.BF16 != nil || f.r.Stride != 0) {
			add(gdn.ErrUnsupported)
		}
		// Only B and the scalar gate's A may be grouped: a Group dividing the width, a
		// GroupStride of at least Group.
		grouped := f.r.Group != 0 || f.r.GroupStride != 0
		groupOK := true
		if grouped {
			mayGroup := f.name == "B" || f.name == "A" && c.Gate != gdn.GatePerChannel
			switch {
			case !mayGroup:
				add(gdn.ErrUnsupported)
				groupOK = false
			case f.r.Group < 1 || f.w%f.r.Group != 0 || f.r.GroupStride < f.r.Group:
				add(gdn.ErrShape)
				groupOK = false
			}
		}
		if T == 0 || !f.used || !groupOK {
			continue
		}
		if (f.r.F32 != nil) == (f.r.BF16 != nil) {
			add(gdn.ErrShape)
			continue
		}
		// A row spans its width, or grouped the extent of its groups: (w/G − 1)·GroupStride + G.
		width := big.NewInt(int64(f.w))
		if f.r.Group > 0 {
			width.Mul(big.NewInt(int64(f.w/f.r.Group-1)), big.NewInt(int64(f.r.GroupStride)))
			width.Add(width, big.NewInt(int64(f.r.Group)))
		}
		st := new(big.Int).Set(width)
		if f.r.Stride != 0 {
			st.SetInt64(int64(f.r.Stride))
		}
		if st.Cmp(width) < 0 {
			add(gdn.ErrShape)
			continue
		}
		need := new(big.Int).Mul(big.NewInt(T-1), st)
		need.Add(need, width)
		if need.Cmp(big.NewInt(int64(len(f.r.F32)+len(f.r.BF16)))) > 0 {
			add(gdn.ErrShape)
		}
	}
	outLen := T * int64(c.VHeads*c.V)
	if b.Out != nil && int64(len(b.Out)) != outLen || b.OutF32 != nil && int64(len(b.OutF32)) != outLen {
		add(gdn.ErrShape)
	}
	if T > 0 && b.Out == nil && b.OutF32 == nil {
		add(gdn.ErrNoOutput)
	}
	// Rule 2: pools. readLimits and storeLimits are the slot counts of the valid pools read from
	// and stored to (a slot must be below all of them).
	slot := c.VHeads * c.K * c.V
	pool := func(p *gdn.Pool, size int, typed bool) (slots, stride int, ok bool) {
		if (p.F32 != nil) == (p.BF16 != nil) || typed && (p.BF16 != nil) != (c.StateDType == gdn.DTypeBF16) {
			return 0, 0, false
		}
		stride = p.SlotStride
		if stride == 0 {
			stride = size
		}
		n := len(p.F32) + len(p.BF16)
		if stride < size || n < size {
			return 0, 0, false
		}
		for s := 0; s*stride+size <= n; s++ {
			slots = s + 1
		}
		return slots, stride, true
	}
	var readLimits, storeLimits []int
	srcSlots, srcStride, srcOK := pool(&b.State, slot, true)
	if srcOK {
		readLimits = append(readLimits, srcSlots)
	} else {
		add(gdn.ErrShape)
	}
	samePool := true
	if b.StoreTo != nil {
		dstSlots, dstStride, dstOK := pool(b.StoreTo, slot, true)
		if dstOK {
			storeLimits = append(storeLimits, dstSlots)
		} else {
			add(gdn.ErrShape)
		}
		if sameSlice(&b.State, b.StoreTo) {
			if srcOK && dstOK && srcStride != dstStride {
				add(gdn.ErrOverlap)
			}
		} else {
			samePool = false
		}
	} else if srcOK {
		storeLimits = append(storeLimits, srcSlots)
	}
	poolSpans := []memSpan{poolSpan(&b.State), {}, {}, {}} // State, StoreTo, ConvState, ConvStoreTo
	if b.StoreTo != nil {
		poolSpans[1] = poolSpan(b.StoreTo)
	}
	sameAsSource := [2]bool{b.StoreTo != nil && sameSlice(&b.State, b.StoreTo), false}
	if conv {
		// Part D: conv pools of slots of (W−1)·C elements, f32 or bf16 whatever the state's type;
		// ConvStoreTo set exactly when StoreTo is, ConvState's very slice (with the same
		// SlotStride) exactly when StoreTo is State's; the slots in range of both pools.
		size := (c.ConvWidth - 1) * C
		cSlots, cStride, cOK := pool(&b.ConvState, size, false)
		if cOK {
			readLimits = append(readLimits, cSlots)
		} else {
			add(gdn.ErrShape)
		}
		poolSpans[2] = poolSpan(&b.ConvState)
		switch {
		case (b.ConvStoreTo != nil) != (b.StoreTo != nil):
			add(gdn.ErrUnsupported)
		case b.ConvStoreTo == nil:
			if cOK {
				storeLimits = append(storeLimits, cSlots)
			}
		default:
			poolSpans[3] = poolSpan(b.ConvStoreTo)
			same := sameSlice(&b.ConvState, b.ConvStoreTo)
			sameAsSource[1] = same
			dSlots, dStride, dOK := pool(b.ConvStoreTo, size, false)
			switch {
			case same != samePool:
				add(gdn.ErrOverlap)
			case same && cOK && dStride != cStride: // the effective SlotStrides (0: the slot), as for State
				add(gdn.ErrOverlap)
			}
			if !dOK {
				add(gdn.ErrShape)
			} else {
				storeLimits = append(storeLimits, dSlots)
			}
		}
	} else if b.X.F32 != nil || b.X.BF16 != nil || b.ConvState.F32 != nil || b.ConvState.BF16 != nil || b.ConvStoreTo != nil {
		add(gdn.ErrUnsupported)
	}
	outOf := func(s int32, limits []int) bool {
		return slices.ContainsFunc(limits, func(n int) bool { return int64(s) >= int64(n) })
	}
	// Rules 2–5: slots.
	writers := map[int64][]int{} // slot → the sequences writing it (once per write)
	for n := range N {
		t0, t1 := int(b.Start[n]), int(b.Start[n+1])
		rd := b.Read[n]
		if rd == gdn.Pad {
			if b.Store != nil && storeOK {
				for t := t0; t < t1; t++ {
					if b.Store[t] != gdn.NoStore {
						add(gdn.ErrSlot)
					}
				}
			}
			continue
		}
		if rd == gdn.Zero {
			if b.Store == nil && t1 > t0 {
				add(gdn.ErrSlot)
			}
		} else if rd < 0 || outOf(rd, readLimits) {
			add(gdn.ErrSlot)
		}
		if b.Store == nil {
			if t1 > t0 && rd >= 0 {
				if outOf(rd, storeLimits) {
					add(gdn.ErrSlot)
				}
				writers[int64(rd)] = append(writers[int64(rd)], n)
			}
			continue
		}
		if !storeOK {
			continue
		}
		for t := t0; t < t1; t++ {
			s := b.Store[t]
			if s == gdn.NoStore {
				continue
			}
			if s < 0 || outOf(s, storeLimits) {
				add(gdn.ErrSlot)
				continue
			}
			writers[int64(s)] = append(writers[int64(s)], n)
		}
	}
	for _, w := range writers {
		if len(w) > 1 {
			add(gdn.ErrSlot) // rule 3
		}
	}
	if samePool {
		for n := range N {
			if rd := b.Read[n]; rd >= 0 && b.Start[n+1] > b.Start[n] {
				for _, w := range writers[int64(rd)] {
					if w != n {
						add(gdn.ErrSlot) // rule 4
					}
				}
			}
		}
	}
	// Rule 6: pools overlap no other pool (a store pool may be its source pool's very slice),
	// no input; outputs overlap nothing.
	ins := []memSpan{spanOfSlice(b.Start), spanOfSlice(b.Read), spanOfSlice(b.Store)}
	for _, f := range rows {
		ins = append(ins, spanOfSlice(f.r.F32), spanOfSlice(f.r.BF16))
	}
	for i := range poolSpans {
		for j := i + 1; j < len(poolSpans); j++ {
			if poolSpans[i].overlaps(poolSpans[j]) && !(i%2 == 0 && j == i+1 && sameAsSource[i/2]) {
				add(gdn.ErrOverlap)
			}
		}
	}
	outs := []memSpan{spanOfSlice(b.Out), spanOfSlice(b.OutF32)}
	if outs[0].overlaps(outs[1]) {
		add(gdn.ErrOverlap)
	}
	for _, o := range outs {
		for _, x := range append(slices.Clone(ins), poolSpans...) {
			if o.overlaps(x) {
				add(gdn.ErrOverlap)
			}
		}
	}
	for _, p := range poolSpans {
		for _, x := range ins {
			if p.overlaps(x) {
				add(gdn.ErrOverlap)
			}
		}
	}
	return errs
}

// memoryOf lists the memory of every slice of b.
func memoryOf(b *gdn.Batch) [][]byte {
	bs := func(p unsafe.Pointer, n int) []byte {
		if n == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(p), n)
	}
	var m [][]byte
	addF := func(s []float32) { m = append(m, bs(unsafe.Pointer(unsafe.SliceData(s)), 4*len(s))) }
	addH := func(s []gdn.BF16) { m = append(m, bs(unsafe.Pointer(unsafe.SliceData(s)), 2*len(s))) }
	addI := func(s []int32) { m = append(m, bs(unsafe.Pointer(unsafe.SliceData(s)), 4*len(s))) }
	addI(b.Start)
	addI(b.Read)
	addI(b.Store)
	for _, r := range []*gdn.Rows{&b.Q, &b.K, &b.V, &b.Z, &b.B, &b.A} {
		addF(r.F32)
		addH(r.BF16)
	}
	addP := func(p *gdn.Pool) { // nil: an empty pool's two entries
		var q gdn.Pool
		if p != nil {
			q = *p
		}
		addF(q.F32)
		addH(q.BF16)
	}
	addP(&b.State)
	addP(b.StoreTo)
	addH(b.Out)
	addF(b.OutF32)
	addF(b.X.F32)
	addH(b.X.BF16)
	addP(&b.ConvState)
	addP(b.ConvStoreTo)
	return m
}

func cloneMem(m [][]byte) [][]byte {
	c := make([][]byte, len(m))
	for i, x := range m {
		c[i] = bytes.Clone(x)
	}
	return c
}

// cloneShared is a copy of x, the same copy for every x over the same memory (m); nil for nil.
func cloneShared[T any](m map[memSpan][]T, x []T) []T {
	if x == nil {
		return nil
	}
	if c, ok := m[spanOfSlice(x)]; ok {
		return c
	}
	c := slices.Clone(x)
	m[spanOfSlice(x)] = c
	return c
}

// cloneBatch is a deep copy of the case's batch (aliasing is not kept: only valid batches are
// cloned, whose aliasing is among inputs, which no one writes).
func cloneBatch(b *gdn.Batch) *gdn.Batch {
	c := *b
	c.Start, c.Read, c.Store = slices.Clone(b.Start), slices.Clone(b.Read), slices.Clone(b.Store)
	f32s, bf16s := map[memSpan][]float32{}, map[memSpan][]gdn.BF16{} // rows sharing a slice keep sharing it
	for _, r := range []*gdn.Rows{&c.Q, &c.K, &c.V, &c.Z, &c.B, &c.A, &c.X} {
		r.F32, r.BF16 = cloneShared(f32s, r.F32), cloneShared(bf16s, r.BF16)
	}
	same := b.StoreTo != nil && poolSpan(&b.State) == poolSpan(b.StoreTo)
	c.State = gdn.Pool{F32: slices.Clone(b.State.F32), BF16: slices.Clone(b.State.BF16), SlotStride: b.State.SlotStride}
	if b.StoreTo != nil {
		st := gdn.Pool{F32: slices.Clone(b.StoreTo.F32), BF16: slices.Clone(b.StoreTo.BF16), SlotStride: b.StoreTo.SlotStride}
		if same {
			st.F32, st.BF16 = c.State.F32, c.State.BF16
		}
		c.StoreTo = &st
	}
	c.ConvState = gdn.Pool{F32: slices.Clone(b.ConvState.F32), BF16: slices.Clone(b.ConvState.BF16), SlotStride: b.ConvState.SlotStride}
	if b.ConvStoreTo != nil {
		st := gdn.Pool{F32: slices.Clone(b.ConvStoreTo.F32), BF16: slices.Clone(b.ConvStoreTo.BF16), SlotStride: b.ConvStoreTo.SlotStride}
		if sameSlice(&b.ConvState, b.ConvStoreTo) {
			st.F32, st.BF16 = c.ConvState.F32, c.ConvState.BF16
		}
		c.ConvStoreTo = &st
	}
	c.Out, c.OutF32 = slices.Clone(b.Out), slices.Clone(b.OutF32)
	return &c
}

func runNoPanic(l *gdn.Layer, b *gdn.Batch) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, l.Run(b)
}

// denseRow returns token t's row of r (width w, grouped or not) widened to float32.
func denseRow(r *gdn.Rows, t, w int) []float32 {
	G, gs := w, w // ungrouped: one group
	if r.Group > 0 {
		G, gs = r.Group, r.GroupStride
	}
	st := r.Stride
	if st == 0 {
		st = (w/G-1)*gs + G
	}
	out := make([]float32, w)
	for i := range w {
		at := t*st + i/G*gs + i%G
		if r.F32 != nil {
			out[i] = r.F32[at]
		} else {
			out[i] = r.BF16[at].Float32()
		}
	}
	return out
}

// tokenRun is a valid batch run one token per call with f32 pools on one kernel: the output of
// every token, the state after every token (of non-padding sequences) and the state before it;
// with the conv front the conv state after every token and the token's q | k | v (the conv's
// output, evaluated here in float64: for nearGeneric's bounds).
type tokenRun struct {
	outF      [][]float32 // [T][HV·V]
	out       [][]gdn.BF16
	after     [][]float32 // [T][HV·K·V], nil for padding tokens
	before    [][]float32
	convAfter [][]float32 // [T][(W−1)·C], nil for padding tokens
	u         [][]float32 // [T][C], nil for padding tokens
}

// runTokens runs rc's batch token by token: call τ holds token τ of every sequence that has one,
// reading the slot its previous token stored to (τ = 0: its Read slot, or Zero), storing to a
// slot of its own. The pool holds State's slots (widened) and one slot per token.
func runTokens(t *testing.T, rc *runCase, kernel string) tokenRun {
	c := rc.c
	c.StateDType, c.Workers, c.Kernel = gdn.DTypeF32, 1, kernel
	l, err := gdn.New(c)
	if err != nil {
		t.Fatalf("token by token: New: %v", err)
	}
	b := &rc.b
	N := len(b.Read)
	T := int(b.Start[N])
	slot := c.VHeads * c.K * c.V
	hk, hv := c.KHeads*c.K, c.VHeads*c.V
	st := b.State.SlotStride
	if st == 0 {
		st = slot
	}
	nS := (len(b.State.F32)+len(b.State.BF16)-slot)/st + 1
	pool := make([]float32, (nS+T)*slot)
	for s := range nS {
		for i := range slot {
			if b.State.F32 != nil {
				pool[s*slot+i] = b.State.F32[s*st+i]
			} else {
				pool[s*slot+i] = b.State.BF16[s*st+i].Float32()
			}
		}
	}
	// The conv pool likewise: ConvState's slots (widened) and one slot per token.
	W, C := c.ConvWidth, 2*hk+hv
	csz := max(W-1, 0) * C
	var cpool []float32
	if W != 0 {
		cst := b.ConvState.SlotStride
		if cst == 0 {
			cst = csz
		}
		cS := (len(b.ConvState.F32)+len(b.ConvState.BF16)-csz)/cst + 1
		cpool = make([]float32, (nS+T)*csz)
		for s := range min(nS, cS) {
			for i := range csz {
				if b.ConvState.F32 != nil {
					cpool[s*csz+i] = b.ConvState.F32[s*cst+i]
				} else {
					cpool[s*csz+i] = b.ConvState.BF16[s*cst+i].Float32()
				}
			}
		}
	}
	tr := tokenRun{outF: make([][]float32, T), out: make([][]gdn.BF16, T), after: make([][]float32, T), before: make([][]float32, T),
		convAfter: make([][]float32, T), u: make([][]float32, T)}
	prev := slices.Clone(b.Read)
	for τ := 0; ; τ++ {
		s := &gdn.Batch{Start: []int32{0}, State: gdn.Pool{F32: pool}}
		var q, k, v, z, bb, a, xs []float32
		var toks []int
		for n := range N {
			t0, t1 := int(b.Start[n]), int(b.Start[n+1])
			if τ >= t1-t0 {
				continue
			}
			tk := t0 + τ
			toks = append(toks, tk)
			s.Start = append(s.Start, int32(len(toks)))
			s.Read = append(s.Read, prev[n])
			if prev[n] == gdn.Pad {
				s.Store = append(s.Store, gdn.NoStore)
			} else {
				s.Store = append(s.Store, int32(nS+tk))
				src := prev[n]
				if src == gdn.Zero {
					tr.before[tk] = make([]float32, slot)
				} else {
					tr.before[tk] = slices.Clone(pool[int(src)*slot : (int(src)+1)*slot])
				}
				if W != 0 {
					cs := make([]float32, csz)
					if src != gdn.Zero {
						cs = cpool[int(src)*csz : (int(src)+1)*csz]
					}
					tr.u[tk] = convRef(c, cs, denseRow(&b.X, tk, C))
				}
				prev[n] = int32(nS + tk)
			}
			if W != 0 {
				xs = append(xs, denseRow(&b.X, tk, C)...)
			} else {
				q, k = append(q, denseRow(&b.Q, tk, hk)...), append(k, denseRow(&b.K, tk, hk)...)
				v = append(v, denseRow(&b.V, tk, hv)...)
			}
			z = append(z, denseRow(&b.Z, tk, hv)...)
			bb, a = append(bb, denseRow(&b.B, tk, c.VHeads)...), append(a, denseRow(&b.A, tk, gateWidth(c))...)
		}
		if len(toks) == 0 {
			break
		}
		s.Z, s.B, s.A = gdn.Rows{F32: z}, gdn.Rows{F32: bb}, gdn.Rows{F32: a}
		if W != 0 {
			s.X, s.ConvState = gdn.Rows{F32: xs}, gdn.Pool{F32: cpool}
		} else {
			s.Q, s.K, s.V = gdn.Rows{F32: q}, gdn.Rows{F32: k}, gdn.Rows{F32: v}
		}
		s.Out, s.OutF32 = make([]gdn.BF16, len(toks)*hv), make([]float32, len(toks)*hv)
		if err := l.Run(s); err != nil {
			t.Fatalf("token by token, call %d: %v", τ, err)
		}
		for i, tk := range toks {
			tr.outF[tk] = s.OutF32[i*hv : (i+1)*hv]
			tr.out[tk] = s.Out[i*hv : (i+1)*hv]
			if s.Store[i] >= 0 {
				tr.after[tk] = slices.Clone(pool[(nS+tk)*slot : (nS+tk+1)*slot])
				if W != 0 {
					tr.convAfter[tk] = slices.Clone(cpool[(nS+tk)*csz : (nS+tk+1)*csz])
				}
			}
		}
	}
	return tr
}

// convRef is the conv front's output for one token in float64 (rounded to float32 once): the
// conv state cs ([W−1][C], the oldest row first) and the token's row x.
func convRef(c gdn.Config, cs, x []float32) []float32 {
	W, C := c.ConvWidth, len(x)
	u := make([]float32, C)
	for ch := range C {
		var sum float64
		for j := range W {
			xj := x[ch]
			if j < W-1 {
				xj = cs[j*C+ch]
			}
			sum += float64(c.ConvWeight[ch*W+j]) * float64(xj)
		}
		if c.ConvBias != nil {
			sum += float64(c.ConvBias[ch])
		}
		u[ch] = float32(sum / (1 + math.Exp(-sum)))
	}
	return u
}

// expected applies a token run to copies of the batch's memory: the outputs, and every stored
// state (explicit or implied) written to its slot, rounded for a bf16 pool.
func expectedBatch(c gdn.Config, b *gdn.Batch, tr tokenRun) *gdn.Batch {
	e := cloneBatch(b)
	N := len(b.Read)
	hv := c.VHeads * c.V
	slot := c.VHeads * c.K * c.V
	dst := &e.State
	if b.StoreTo != nil {
		dst = e.StoreTo
	}
	st := dst.SlotStride
	if st == 0 {
		st = slot
	}
	cdst := &e.ConvState
	if e.ConvStoreTo != nil {
		cdst = e.ConvStoreTo
	}
	csz := max(c.ConvWidth-1, 0) * (2*c.KHeads*c.K + hv)
	cst := cdst.SlotStride
	if cst == 0 {
		cst = csz
	}
	for n := range N {
		t0, t1 := int(b.Start[n]), int(b.Start[n+1])
		for tk := t0; tk < t1; tk++ {
			if e.Out != nil {
				copy(e.Out[tk*hv:(tk+1)*hv], tr.out[tk])
			}
			if e.OutF32 != nil {
				copy(e.OutF32[tk*hv:(tk+1)*hv], tr.outF[tk])
			}
			if b.Read[n] == gdn.Pad {
				continue
			}
			d := int32(gdn.NoStore)
			if b.Store != nil {
				d = b.Store[tk]
			} else if tk == t1-1 {
				d = b.Read[n]
			}
			if d < 0 {
				continue
			}
			for i, x := range tr.after[tk] {
				if dst.F32 != nil {
					dst.F32[int(d)*st+i] = x
				} else {
					dst.BF16[int(d)*st+i] = gdn.BF16FromFloat32(x)
				}
			}
			for i, x := range tr.convAfter[tk] {
				if cdst.F32 != nil {
					cdst.F32[int(d)*cst+i] = x
				} else {
					cdst.BF16[int(d)*cst+i] = gdn.BF16FromFloat32(x)
				}
			}
		}
	}
	return e
}

func firstDiff(a, b [][]byte) (int, int) {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			j := 0
			for j < len(a[i]) && j < len(b[i]) && a[i][j] == b[i][j] {
				j++
			}
			return i, j
		}
	}
	return -1, -1
}

var memNames = []string{"Start", "Read", "Store", "Q.F32", "Q.BF16", "K.F32", "K.BF16", "V.F32", "V.BF16", "Z.F32", "Z.BF16", "B.F32", "B.BF16", "A.F32", "A.BF16", "State.F32", "State.BF16", "StoreTo.F32", "StoreTo.BF16", "Out", "OutF32",
	"X.F32", "X.BF16", "ConvState.F32", "ConvState.BF16", "ConvStoreTo.F32", "ConvStoreTo.BF16"}

func memName(i int) string {
	if i < len(memNames) {
		return memNames[i]
	}
	return fmt.Sprint(i)
}

func describeRun(rc *runCase) string {
	b := &rc.b
	s := fmt.Sprintf("KHeads %d VHeads %d K %d V %d %v GQA %d Workers %d; Start %v Read %v Store %v; State len %d stride %d",
		rc.c.KHeads, rc.c.VHeads, rc.c.K, rc.c.V, rc.format, rc.c.GQA, rc.c.Workers, b.Start, b.Read, b.Store,
		len(b.State.F32)+len(b.State.BF16), b.State.SlotStride)
	if b.StoreTo != nil {
		s += fmt.Sprintf("; StoreTo len %d stride %d", len(b.StoreTo.F32)+len(b.StoreTo.BF16), b.StoreTo.SlotStride)
	}
	for i, r := range []*gdn.Rows{&b.Q, &b.K, &b.V, &b.Z, &b.B, &b.A, &b.X} {
		s += fmt.Sprintf("; %c f32 %d bf16 %d stride %d", "QKVZBAX"[i], len(r.F32), len(r.BF16), r.Stride)
		if r.Group != 0 || r.GroupStride != 0 {
			s += fmt.Sprintf(" group %d/%d", r.Group, r.GroupStride)
		}
	}
	s += fmt.Sprintf("; Out %d OutF32 %d; gate %d", len(b.Out), len(b.OutF32), rc.c.Gate)
	if rc.c.ConvWidth != 0 || b.ConvState.F32 != nil || b.ConvState.BF16 != nil || b.ConvStoreTo != nil {
		s += fmt.Sprintf("; ConvWidth %d bias %v; ConvState f32 %d bf16 %d stride %d", rc.c.ConvWidth, rc.c.ConvBias != nil,
			len(b.ConvState.F32), len(b.ConvState.BF16), b.ConvState.SlotStride)
		if p := b.ConvStoreTo; p != nil {
			s += fmt.Sprintf("; ConvStoreTo f32 %d bf16 %d stride %d same %v", len(p.F32), len(p.BF16), p.SlotStride, sameSlice(&b.ConvState, p))
		}
	}
	return s
}

// checkRun is FuzzRun's property on one input.
func checkRun(t *testing.T, data []byte) {
	rc := decodeRun(data)
	b := &rc.b
	expect := expectRun(rc.c, b)
	ks := kerneltest.Names(t)
	if len(expect) > 0 {
		for _, k := range ks {
			c := rc.c
			c.Kernel = k
			l, err := gdn.New(c)
			if err != nil {
				continue // the kernel lacks the format
			}
			before := cloneMem(memoryOf(b))
			p, err := runNoPanic(l, b)
			if p != nil {
				t.Fatalf("%s: Run panicked: %v\n%s\n(want one of %v)", k, p, describeRun(rc), expect)
			}
			if err == nil || !slices.ContainsFunc(expect, func(e error) bool { return errors.Is(err, e) }) {
				t.Fatalf("%s: Run(%s) = %v, want one of %v", k, describeRun(rc), err, expect)
			}
			if i, j := firstDiff(before, memoryOf(b)); i >= 0 {
				t.Fatalf("%s: Run returned %v but wrote to %s (byte %d): %s", k, err, memName(i), j, describeRun(rc))
			}
		}
		return
	}
	var gen tokenRun
	for _, k := range ks {
		kk, _ := gdnsimd.Lookup(k)
		if !kk.Implements(rc.format) {
			continue
		}
		c := rc.c
		c.Kernel = k
		l, err := gdn.New(c)
		if err != nil {
			t.Fatalf("%s: New: %v", k, err)
		}
		got := cloneBatch(b)
		p, err := runNoPanic(l, got)
		if p != nil || err != nil {
			t.Fatalf("%s: Run(%s) = %v (panic %v), want success", k, describeRun(rc), err, p)
		}
		tr := runTokens(t, rc, k)
		want := expectedBatch(rc.c, b, tr)
		if i, j := firstDiff(memoryOf(want), memoryOf(got)); i >= 0 {
			t.Fatalf("%s: Run vs token by token: %s differs at byte %d: %s", k, memName(i), j, describeRun(rc))
		}
		if got.Out != nil && got.OutF32 != nil {
			for i, y := range got.OutF32 {
				if got.Out[i] != gdn.BF16FromFloat32(y) {
					t.Fatalf("%s: Out[%d] = 0x%04x is not bf16(OutF32 = %g)", k, i, got.Out[i], y)
				}
			}
		}
		if k == "generic" {
			gen = tr
		} else {
			defer func(k string, tr tokenRun) { // once generic has run
				if err := nearGeneric(rc, tr, gen); err != nil {
					t.Fatalf("%s vs generic: %v: %s", k, err, describeRun(rc))
				}
			}(k, tr)
		}
	}
}

// gateWidth is the width of c's A rows: VHeads, VHeads·K with the per-channel gate.
func gateWidth(c gdn.Config) int {
	if c.Gate == gdn.GatePerChannel {
		return c.VHeads * c.K
	}
	return c.VHeads
}

// nearGeneric holds a kernel's token run to the generic kernel's within the float32 forward-error
// bound of the recurrence, per token and head, accumulated along each sequence (the exact map
// S ↦ eg·(I − beta·k̂k̂ᵀ)·S + … does not grow an error in the Frobenius norm: only the new
// rounding errors of each token add up).
func nearGeneric(rc *runCase, got, gen tokenRun) error {
	c, b := rc.c, &rc.b
	K, V, HV := c.K, c.V, c.VHeads
	eps := float64(c.RMSEps)
	if eps == 0 {
		eps = gdn.DefaultRMSEps
	}
	const u = 0x1p-24
	hk := c.KHeads * c.K
	idx := func(i, j int) int {
		if rc.format.VK {
			return j*K + i
		}
		return i*V + j
	}
	N := len(b.Read)
	for n := range N {
		if b.Read[n] == gdn.Pad {
			continue
		}
		errF := make([]float64, HV)
		for tk := int(b.Start[n]); tk < int(b.Start[n+1]); tk++ {
			var q, k, v []float32
			if c.ConvWidth != 0 { // the conv's output (the same bits on every kernel)
				u := gen.u[tk]
				q, k, v = u[:hk], u[hk:2*hk], u[2*hk:]
			} else {
				q, k, v = denseRow(&b.Q, tk, hk), denseRow(&b.K, tk, hk), denseRow(&b.V, tk, HV*V)
			}
			z := denseRow(&b.Z, tk, HV*V)
			bb := denseRow(&b.B, tk, HV)
			for h := range HV {
				kh := h / (HV / c.KHeads)
				if c.GQA == gdn.GQATiled {
					kh = h % c.KHeads
				}
				var qq, kk float64
				for i := range K {
					qq += sq(float64(q[kh*K+i]))
					kk += sq(float64(k[kh*K+i]))
				}
				rq, rk := 1/math.Sqrt(qq+1e-6)/math.Sqrt(float64(K)), 1/math.Sqrt(kk+1e-6)
				beta := 1 / (1 + math.Exp(-float64(bb[h])))
				P, S := gen.before[tk][h*K*V:(h+1)*K*V], gen.after[tk][h*K*V:(h+1)*K*V]
				var nP, nS, nv, kq, qn float64
				for i := range K * V {
					nP += sq(float64(P[i]))
					nS += sq(float64(S[i]))
				}
				for j := range V {
					nv += sq(float64(v[h*V+j]))
				}
				for i := range K {
					kq += math.Abs(float64(q[kh*K+i]) * rq * float64(k[kh*K+i]) * rk)
					qn += sq(float64(q[kh*K+i]) * rq)
				}
				nP, nS, nv, qn = math.Sqrt(nP), math.Sqrt(nS), math.Sqrt(nv), math.Sqrt(qn)
				kf := float64(K + 8)
				errF[h] += 8 * u * kf * (3*nP + nS + 3*nv)
				tolS := 2*errF[h] + 0x1p-120
				G := got.after[tk][h*K*V : (h+1)*K*V]
				for i := range K * V {
					if d := math.Abs(float64(G[i]) - float64(S[i])); !(d <= tolS) {
						return fmt.Errorf("token %d head %d: state [%d]: %g vs %g: difference %g > %g", tk, h, i, G[i], S[i], d, tolS)
					}
				}
				// y_j = o_j·r·w_j·silu(z_j), o = S'ᵀq̂.
				o, errO := make([]float64, V), make([]float64, V)
				var ss, relR float64
				for j := range V {
					var terms, kp float64
					for i := range K {
						qi := float64(q[kh*K+i]) * rq
						o[j] += qi * float64(S[idx(i, j)])
						terms += math.Abs(qi) * (math.Abs(float64(P[idx(i, j)])) + math.Abs(float64(S[idx(i, j)])))
						kp += math.Abs(float64(k[kh*K+i])*rk) * math.Abs(float64(P[idx(i, j)]))
					}
					errO[j] = qn*errF[h] + 8*u*kf*(terms+kq*beta*(math.Abs(float64(v[h*V+j]))+kp)) + 0x1p-120
					ss += o[j] * o[j]
				}
				for j := range V {
					relR += math.Abs(o[j]) * errO[j] / (ss + float64(V)*eps)
				}
				if relR > 0.25 {
					continue // the output cancels almost completely: no useful bound
				}
				r := 1 / math.Sqrt(ss/float64(V)+eps)
				for j := range V {
					zj := float64(z[h*V+j])
					act := zj / (1 + math.Exp(-zj))
					if c.OutGate == gdn.ActSigmoid {
						act = 1 / (1 + math.Exp(-zj))
					}
					g := math.Abs(float64(c.NormWeight[j]) * act)
					y := o[j] * r * g
					tol := 4*(r*g*errO[j]+math.Abs(y)*(relR+16*u)) + 0x1p-120
					a, w := float64(got.outF[tk][h*V+j]), float64(gen.outF[tk][h*V+j])
					if d := math.Abs(a - w); !(d <= tol) {
						return fmt.Errorf("token %d head %d: out_f32 [%d]: %g vs %g: difference %g > %g", tk, h, j, a, w, d, tol)
					}
				}
			}
		}
	}
	return nil
}

// seedRuns are FuzzRun's seeds. Byte layout (see decodeRun): rng, K, V, heads, format (layout,
// dtype, GQA, Workers, eps), N + 8·(slots−1), per sequence (tokens, read), StoreTo/Store mode, a
// store byte per token if explicit, row scales, six row bytes, pool, StoreTo, outputs,
// Start/Store corruption, aliasing; then (optional: zeros) 6 conv bytes and 2 grouping bytes.
func seedRuns() []namedSeed {
	type seq struct{ l, r byte }
	mk := func(hdr [6]byte, seqs []seq, mode byte, stores []byte, tail [12]byte) []byte {
		b := hdr[:]
		for _, s := range seqs {
			b = append(b, s.l, s.r)
		}
		b = append(b, mode)
		b = append(b, stores...)
		return append(b, tail[:]...)
	}
	const (
		slot0 = 0 // read byte: slot (byte>>3) % (slots+1)
		slot1 = 8
		slot2 = 16
		pad   = 4
		zero  = 5
	)
	plain := [12]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0}
	var s []namedSeed
	add := func(name string, b []byte) { s = append(s, namedSeed{name, b}) }
	hdr := func(K, V, heads, format, N, slots byte) [6]byte {
		return [6]byte{1, K - 1, V - 1, heads, format, N + 8*(slots-1)}
	}
	for f := range byte(4) {
		name := []string{"kv_f32", "vk_f32", "kv_bf16", "vk_bf16"}[f]
		add("decode_"+name, mk(hdr(4, 3, 3, f, 3, 4), []seq{{1, slot0}, {1, slot1}, {1, slot2}}, 0, nil, plain))
		add("prefill_zero_"+name, mk(hdr(5, 6, 1, f|4, 2, 3), []seq{{4, zero}, {3, slot1}}, 1, []byte{0, 0, 0, 0x90, 0, 0, 0x91}, plain))
		add("chunk_"+name, mk(hdr(3, 2, 2, f|8, 1, 2), []seq{{0xFC, slot0}}, 0, nil, plain))
		add("workers3_"+name, mk(hdr(6, 6, 5, f|16, 4, 5), []seq{{3, slot0}, {2, pad}, {4, slot2}, {1, 24}}, 0, nil, plain))
	}
	for g := range byte(3) { // the gates of decodeRun's x >> 6: per channel, per channel bounded, ssm_a
		for f := range byte(4) {
			name := fmt.Sprintf("gate%d_%s", g+1, []string{"kv_f32", "vk_f32", "kv_bf16", "vk_bf16"}[f])
			add(name+"_chunk", mk(hdr(5, 4, 3, f|(g+1)<<6, 2, 4), []seq{{0xFC, slot0}, {3, slot1}}, 0, nil, plain))
			// A snapshot after every token of sequence 0 (slots 2, 3, 4, then its read slot 0),
			// sequence 1's last state back to its slot 1.
			add(name+"_snapshots", mk(hdr(4, 4, 1, f|4|(g+1)<<6, 2, 5), []seq{{4, slot0}, {2, slot1}}, 1, []byte{0xD4, 0xD5, 0xD6, 0xD2, 0, 0xD3}, plain))
		}
	}
	add("spec_snapshots", mk(hdr(4, 4, 1, 0, 2, 5), []seq{{4, slot0}, {2, slot1}}, 1, []byte{0x90, 0x91, 0x92, 0x93, 0, 0xC8}, plain))
	add("storeto", mk(hdr(4, 4, 1, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0x40|3, []byte{0, 0x90, 0, 0x91, 0x92}, plain))
	add("storeto_implied", mk(hdr(4, 4, 1, 2, 2, 3), []seq{{3, slot0}, {2, slot2}}, 0x42, nil, plain))
	add("storeto_same", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {2, slot1}}, 0x50, nil, plain))
	add("storeto_same_other_stride", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {2, slot1}}, 0x60, nil, plain))
	add("storeto_overlapping", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {2, slot1}}, 0x70, nil, plain))
	add("zero_store_nil", mk(hdr(3, 3, 1, 0, 1, 2), []seq{{2, zero}}, 0, nil, plain))
	add("pad_storing", mk(hdr(3, 3, 1, 0, 1, 2), []seq{{2, pad}}, 1, []byte{0, 0x90}, plain))
	add("read_out_of_range", mk(hdr(3, 3, 1, 0, 1, 2), []seq{{2, 16}}, 0, nil, plain))
	add("written_twice", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{1, slot0}, {1, slot1}}, 1, []byte{0xD2, 0xD2}, plain))
	add("written_then_read", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{1, slot0}, {1, slot1}}, 1, []byte{0xD1, 0}, plain))
	st := plain
	st[8] = 0x02 // StoreTo's SlotStride = slot + 1, State's dense
	add("storeto_strided", mk(hdr(4, 3, 3, 0, 3, 3), []seq{{3, slot0}, {2, slot1}, {2, zero}}, 0x45, []byte{0x90, 0, 0x91, 0, 0x92, 0, 0x93}, st))
	add("read_eq_slots_explicit", mk(hdr(3, 3, 1, 0, 2, 2), []seq{{2, slot0}, {1, 16}}, 1, []byte{0, 0x90, 0}, plain))
	add("workers_parallel", mk(hdr(10, 10, 5, 16, 4, 5), []seq{{0xFF, slot0}, {0xFE, slot1}, {0xFF, slot2}, {0xFD, 24}}, 0, nil, plain))
	add("workers_parallel_vk_bf16", mk(hdr(10, 10, 5, 3|16, 4, 5), []seq{{0xFF, slot0}, {0xFE, slot1}, {0xFF, slot2}, {0xFD, 24}}, 0, nil, plain))
	add("fork", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot1}, {2, slot1}}, 1, []byte{0, 0x90, 0, 0x91}, plain))
	rows := plain
	rows[1], rows[2], rows[3], rows[4], rows[5], rows[6] = 0x01, 0x04, 0x25, 0x02, 0x07, 0x03
	add("rows_strided_bf16", mk(hdr(5, 3, 3, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, rows))
	short := plain
	short[3] = 0xF8
	add("row_short", mk(hdr(3, 3, 1, 0, 1, 2), []seq{{2, slot0}}, 0, nil, short))
	for i, x := range []byte{0, 1, 2, 3} {
		t := plain
		t[9] = x
		add(fmt.Sprintf("outputs_%d", i), mk(hdr(3, 3, 1, 0, 1, 2), []seq{{2, slot0}}, 0, nil, t))
	}
	for i := range byte(8) {
		t := plain
		t[11] = 0xE0 + i
		add(fmt.Sprintf("alias_%d", i), mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {1, slot1}}, 0, nil, t))
	}
	for i := range byte(4) {
		t := plain
		t[10] = 0xF0 + i
		add(fmt.Sprintf("start_%d", i), mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {1, slot1}}, 0, nil, t))
	}
	pools := plain
	pools[7] = 0x16 // a bigger SlotStride and a tail
	add("pool_strided_tail", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {1, slot2}}, 0, nil, pools))
	pools[7] = 0x03 // SlotStride slot−1
	add("pool_stride_short", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {1, slot2}}, 0, nil, pools))
	pools[7] = 0xFF // the wrong dtype
	add("pool_dtype", mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {1, slot2}}, 0, nil, pools))

	// The conv front: after the tail, 6 conv bytes (width/bias/misuse, X, ConvState's form, its
	// slots and overlaps, ConvStoreTo's mode, its form) and 2 grouping bytes (see decodeConv,
	// decodeGroups).
	ext := func(b []byte, conv [6]byte, grp [2]byte) []byte {
		return append(append(b, conv[:]...), grp[:]...)
	}
	const (
		w2, w3, w4, w8 = 4, 5, 6, 7
		bias           = 8
	)
	fmts := []string{"kv_f32", "vk_f32", "kv_bf16", "vk_bf16"}
	for f := range byte(4) {
		// Decode (1 token: fewer than W−1, the conv state keeps old rows), bf16 conv pool for
		// the bf16 formats.
		add("conv_decode_"+fmts[f], ext(mk(hdr(4, 3, 3, f, 3, 4), []seq{{1, slot0}, {1, slot1}, {1, slot2}}, 0, nil, plain), [6]byte{w4 | bias, f >> 1, f >> 1 << 5, 0, 0, 0}, [2]byte{}))
		// Prefill across the 64-token chunk beside a short sequence, bf16 X.
		add("conv_chunk_"+fmts[f], ext(mk(hdr(3, 2, 2, f|8, 2, 3), []seq{{0xFC, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{w4, 1, 0, 0, 0, 0}, [2]byte{}))
		// From Zero with explicit stores (W = 3).
		add("conv_prefill_zero_"+fmts[f], ext(mk(hdr(5, 6, 1, f|4, 2, 3), []seq{{4, zero}, {3, slot1}}, 1, []byte{0, 0, 0, 0x90, 0, 0, 0x91}, plain), [6]byte{w3 | bias, 0, 0x20, 0, 0, 0}, [2]byte{}))
	}
	add("conv_W2", ext(mk(hdr(4, 4, 1, 0, 3, 4), []seq{{3, slot0}, {1, slot1}, {4, slot2}}, 0, nil, plain), [6]byte{w2, 0, 0, 0, 0, 0}, [2]byte{}))
	add("conv_W8_short_seqs", ext(mk(hdr(4, 4, 1, 0, 3, 4), []seq{{3, slot0}, {1, slot1}, {4, slot2}}, 0, nil, plain), [6]byte{w8 | bias, 0, 0, 0, 0, 0}, [2]byte{}))
	add("conv_W8_chunk", ext(mk(hdr(3, 3, 1, 2, 2, 3), []seq{{0xFD, slot0}, {4, pad}}, 0, nil, plain), [6]byte{w8, 0, 0, 0, 0, 0}, [2]byte{}))
	add("conv_workers_parallel", ext(mk(hdr(10, 10, 5, 16, 4, 5), []seq{{0xFF, slot0}, {0xFE, slot1}, {0xFF, slot2}, {0xFD, 24}}, 0, nil, plain), [6]byte{w4 | bias, 0, 0, 0, 0, 0}, [2]byte{}))
	add("conv_x_strided_bf16", ext(mk(hdr(4, 3, 3, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{w4, 0x25, 0, 0, 0, 0}, [2]byte{}))
	add("conv_pool_strided_tail", ext(mk(hdr(4, 3, 3, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{w4, 0, 0x36, 0, 0, 0}, [2]byte{}))
	add("conv_pool_adjacent_state", ext(mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {1, slot1}}, 0, nil, plain), [6]byte{w4, 0, 0, 0x0C, 0, 0}, [2]byte{}))
	// Out of place: snapshots after tokens into StoreTo and ConvStoreTo (pools of their own: a
	// bf16 conv pool of SlotStride the slot), implied stores, in place.
	add("conv_snapshots_storeto", ext(mk(hdr(4, 4, 1, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0x40|3, []byte{0, 0x90, 0, 0x91, 0x92}, plain), [6]byte{w4 | bias, 0, 0, 0, 0, 0x21}, [2]byte{}))
	add("conv_storeto_implied", ext(mk(hdr(4, 4, 1, 2, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0x42, nil, plain), [6]byte{w3, 1, 0x20, 0, 0, 0}, [2]byte{}))
	add("conv_storeto_same", ext(mk(hdr(3, 3, 1, 0, 2, 3), []seq{{2, slot0}, {2, slot1}}, 0x50, nil, plain), [6]byte{w4, 0, 0, 0, 0, 0}, [2]byte{}))
	// A snapshot after every token of sequence 0 (slots 2, 3, 4, then its read slot 0), sequence
	// 1's last state back to its slot 1.
	add("conv_snapshots", ext(mk(hdr(4, 4, 1, 0, 2, 5), []seq{{4, slot0}, {2, slot1}}, 1, []byte{0xD4, 0xD5, 0xD6, 0xD2, 0, 0xD3}, plain), [6]byte{w4, 0, 0, 0, 0, 0}, [2]byte{}))
	// The read slot stored first (after token 0), then snapshots whose conv states still hold
	// rows of the read slot's old conv state (W = 4, 8; in place).
	for _, w := range []byte{w4, w8} {
		add(fmt.Sprintf("conv_read_slot_first_W%d", []int{4: 2, 5: 3, 6: 4, 7: 8}[w]), ext(mk(hdr(4, 4, 1, 0, 2, 5), []seq{{4, slot0}, {2, slot1}}, 1, []byte{0xD2, 0xD4, 0xD5, 0xD6, 0xD3, 0}, plain), [6]byte{w, 0, 0, 0, 0, 0}, [2]byte{}))
	}
	add("conv_read_slot_first_bf16_pool", ext(mk(hdr(4, 4, 1, 2, 2, 5), []seq{{4, slot0}, {2, slot1}}, 1, []byte{0xD2, 0xD4, 0xD5, 0xD6, 0xD3, 0}, plain), [6]byte{w4, 1, 0x21, 0, 0, 0}, [2]byte{}))
	// Invalid conv fronts.
	bad := []struct {
		name string
		mode byte
		seqs []seq
		conv [6]byte
	}{
		{"q_set", 0, nil, [6]byte{0xF0 | w4}},
		{"v_stride_only", 0, nil, [6]byte{0xE0 | w4}},
		{"x_without", 0, nil, [6]byte{0xF0}},
		{"x_stride_without", 0, nil, [6]byte{0xE0}},
		{"state_without", 0, nil, [6]byte{0xD0}},
		{"storeto_without", 0, nil, [6]byte{0xC0}},
		{"x_short", 0, nil, [6]byte{w4, 0xF8}},
		{"x_missing", 0, nil, [6]byte{w4, 0xF6}},
		{"x_both", 0, nil, [6]byte{w4, 0xF7}},
		{"x_stride_below", 0, nil, [6]byte{w4, 0xFE}},
		{"state_missing", 0, nil, [6]byte{w4, 0, 0xFF}},
		{"state_both", 0, nil, [6]byte{w4, 0, 0xFE}},
		{"state_last_short", 0, []seq{{2, slot0}, {2, slot2}}, [6]byte{w4, 0, 0xC0}},
		{"state_stride_short", 0, nil, [6]byte{w4, 0, 0x03}},
		{"state_too_few_slots", 0, []seq{{2, slot0}, {1, slot2}}, [6]byte{w4, 0, 0, 2}},
		{"state_too_few_slots_store", 1, nil, [6]byte{w4, 0, 0, 2}},
		{"state_too_few_slots_read", 3, []seq{{2, slot0}, {2, slot2}}, [6]byte{w4, 0, 0, 2}},
		{"storeto_nil_with_storeto", 0x43, nil, [6]byte{w4, 0, 0, 0, 3}},
		{"storeto_without_storeto", 0, nil, [6]byte{w4, 0, 0, 0, 2}},
		{"storeto_same_out_of_place", 0x43, nil, [6]byte{w4, 0, 0, 0, 1}},
		{"storeto_own_in_place", 0x50, nil, [6]byte{w4, 0, 0, 0, 2}},
		{"storeto_same_stride_0_size", 0x50, nil, [6]byte{w4, 0, 0x01, 0, 1 | 1<<3}},
		{"storeto_same_stride_size_0", 0x50, nil, [6]byte{w4, 0, 0, 0, 1 | 2<<3}},
		{"storeto_same_other_stride", 0x50, nil, [6]byte{w4, 0, 0, 0, 1 | 3<<3}},
		{"storeto_overlapping", 0x43, nil, [6]byte{w4, 0, 0, 0, 4, 7}},
		{"storeto_other_type", 0x43, nil, [6]byte{w4, 0, 0, 0, 5}},
		{"storeto_last_short", 0x43, nil, [6]byte{w4, 0, 0, 0, 0, 0xC0}},
		{"state_over_x", 0, nil, [6]byte{w4, 0, 0, 0x10}},
		{"out_over_state", 0, nil, [6]byte{w4, 0, 0, 0x14}},
		{"state_over_state", 0, nil, [6]byte{w4, 0, 0x20, 0x18}},
		{"storeto_over_storeto", 0x43, nil, [6]byte{w4, 0, 0, 0x1C}},
		{"state_over_read", 0, nil, [6]byte{w4, 0, 0, 0x1C}},
	}
	for _, x := range bad {
		seqs := x.seqs
		if seqs == nil {
			seqs = []seq{{2, slot0}, {2, slot1}}
		}
		var stores []byte
		switch x.mode {
		case 1, 0x43:
			stores = []byte{0, 0x90, 0, 0xD2} // Store[1] = slot 0, Store[3] = slot 2 (of 3)
		case 3:
			stores = []byte{0, 0, 0, 0} // no stores (mode 3: toSlots = slots)
		}
		add("conv_bad_"+x.name, ext(mk(hdr(3, 3, 1, 0, 2, 3), seqs, x.mode, stores, plain), x.conv, [2]byte{}))
	}

	// Grouped B and A (KHeads 2, VHeads 4): B grouped by 2, A by 4 (GroupStride 5), both from one
	// in_proj_ba buffer (f32, bf16 padded, with the conv front), on the scalar gates; invalid on
	// the per-channel gate's A, and the bad groupings.
	for _, gate := range []byte{0, 0xC0} {
		gn := []string{"", "_ssm_a"}[gate>>7]
		add("group_B"+gn, ext(mk(hdr(3, 4, 3, gate, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{4 | 1<<3, 0x02}))
		add("group_A"+gn, ext(mk(hdr(3, 4, 3, gate|1, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{5 | 2<<3 | 1<<5, 0x05}))
		add("group_ba"+gn, ext(mk(hdr(3, 4, 3, gate|2, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{6, 0}))
		add("group_ba_padded_bf16"+gn, ext(mk(hdr(3, 4, 3, gate, 2, 3), []seq{{0xFC, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{6 | 2<<3 | 1<<5, 1}))
		add("group_ba_conv"+gn, ext(mk(hdr(3, 4, 3, gate|3, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{w4}, [2]byte{6 | 1<<3, 0}))
	}
	add("group_A_per_channel", ext(mk(hdr(3, 4, 3, 0x40, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{5, 0}))
	add("group_ba_per_channel", ext(mk(hdr(3, 4, 3, 0x80, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{6, 0}))
	add("group_B_short", ext(mk(hdr(3, 4, 3, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{4 | 1<<3, 0xF8}))
	for k := range byte(8) {
		add(fmt.Sprintf("group_bad_%d", k), ext(mk(hdr(3, 4, 3, 0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{7 | k<<3, 0}))
		if k == 6 || k == 7 { // one value head: valid
			add(fmt.Sprintf("group_bad_%d_one_head", k), ext(mk(hdr(3, 4, 0, 0xC0, 2, 3), []seq{{3, slot0}, {2, slot1}}, 0, nil, plain), [6]byte{}, [2]byte{7 | k<<3, 0}))
		}
	}
	return s
}

// TestWriteRunCorpus writes FuzzRun's seeds to testdata/fuzz/FuzzRun (GDN_WRITE_CORPUS=1);
// otherwise it checks that the committed ones are current.
func TestWriteRunCorpus(t *testing.T) {
	seeds := seedRuns()
	if os.Getenv("GDN_WRITE_CORPUS") == "1" {
		writeCorpus(t, "FuzzRun", seeds)
		return
	}
	for _, s := range seeds {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzRun", "seed_"+s.name))
		if err != nil || string(b) != fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data) {
			t.Fatalf("FuzzRun/seed_%s missing or stale (GDN_WRITE_CORPUS=1 go test -run TestWriteRunCorpus ./fuzz): %v", s.name, err)
		}
	}
}

func sq(x float64) float64 { return x * x }

// stateLayout is f's layout as a gdn.Config names it.
func stateLayout(f gdnsimd.Format) gdn.StateLayout {
	if f.VK {
		return gdn.LayoutVK
	}
	return gdn.LayoutKV
}
