package gdn

import (
	"cmp"
	"fmt"
	"math"
	"unsafe"

	"github.com/gdnsimd/gdnsimd"
)

// validator holds the scratch of one validation (kept in a free list: no allocation per call in
// steady state).
type validator struct {
	writes map[int32]write

	// A Step's call as a Batch (stepBatch): its Start and Read, its StoreTo, the Batch.
	start, read []int32
	out         Pool
	step        Batch
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
	kb := gdnsimd.Batch{
		KHeads: c.KHeads, VHeads: c.VHeads, K: c.K, V: c.V, RMSEps: c.RMSEps, NormWeight: c.NormWeight,
		N: len(b.Read), Start: b.Start, Read: b.Read, Store: b.Store,
	}
	l.setBatch(&kb)
	// Rule 1: Start, Store and the lengths of rows and outputs.
	T, err := l.checkStart(b)
	if err != nil {
		return kb, err
	}
	if err := l.checkRowInputs(b, &kb, T); err != nil {
		return kb, err
	}
	if err := checkOutputs(b, &kb, T*c.VHeads*c.V); err != nil {
		return kb, err
	}
	// Rule 2: pools.
	rs, err := l.checkPools(b, &kb)
	if err != nil {
		return kb, err
	}
	// Rules 3–5: slots.
	if err := v.checkSlots(b, rs); err != nil {
		return kb, err
	}
	// Rule 6: overlaps.
	if err := checkBatchOverlap(b, c.ConvWidth != 0); err != nil {
		return kb, err
	}
	return kb, nil
}

// checkStart checks Start and the length of Store (rule 1) and returns the call's tokens T.
func (l *Layer) checkStart(b *Batch) (int, error) {
	N := len(b.Read)
	if len(b.Start) != N+1 {
		return 0, fmt.Errorf("%w: Batch.Start has length %d, want N+1 = %d (N = len(Batch.Read))", ErrShape, len(b.Start), N+1)
	}
	if b.Start[0] != 0 {
		return 0, fmt.Errorf("%w: Batch.Start[0] = %d, want 0", ErrShape, b.Start[0])
	}
	for n := 1; n <= N; n++ {
		if b.Start[n] < b.Start[n-1] {
			return 0, fmt.Errorf("%w: Batch.Start[%d] = %d is below Batch.Start[%d] = %d", ErrShape, n, b.Start[n], n-1, b.Start[n-1])
		}
	}
	T := int(b.Start[N])
	if b.Store != nil && len(b.Store) != T {
		return 0, fmt.Errorf("%w: Batch.Store has length %d, want T = Batch.Start[N] = %d (or nil)", ErrShape, len(b.Store), T)
	}
	if T > math.MaxInt/l.c.VHeads/l.c.V {
		return 0, fmt.Errorf("%w: T = %d tokens: the outputs would not be addressable", ErrShape, T)
	}
	return T, nil
}

// checkRowInputs checks the row inputs of a call of T tokens (rule 1: the fields the Layer takes,
// their grouping, lengths and strides) and sets the kernel's view of them.
func (l *Layer) checkRowInputs(b *Batch, kb *gdnsimd.Batch, T int) error {
	c := &l.c
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
				return fmt.Errorf("%w: %s is set, but the Layer has a conv front (Config.ConvWidth %d): its pre-conv rows go in Batch.X", ErrUnsupported, f.name, c.ConvWidth)
			}
			return fmt.Errorf("%w: Batch.X is set, but the Layer has no conv front (Config.ConvWidth 0): q, k and v go in Batch.Q, K, V", ErrUnsupported)
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
			return fmt.Errorf("%w: %s.Group = %d, GroupStride = %d: only B and the scalar gate's A may be grouped", ErrUnsupported, f.name, f.r.Group, f.r.GroupStride)
		case f.r.Group < 1 || f.width%f.r.Group != 0 || f.r.GroupStride < f.r.Group:
			return fmt.Errorf("%w: %s.Group = %d, GroupStride = %d: want a Group dividing the width %d and a GroupStride of at least Group", ErrShape, f.name, f.r.Group, f.r.GroupStride, f.width)
		}
	}
	if T == 0 {
		return nil
	}
	var rows [len(fields)]gdnsimd.Rows
	for i, f := range use {
		r, held, err := checkRows(f, T)
		if err != nil && held >= 0 && shortAll(use, T) {
			return fmt.Errorf("%w: Batch.Start[%d] = %d tokens, more than any row input holds (%s has room for %d)", ErrShape, len(b.Read), T, f.name, held)
		}
		if err != nil {
			return err
		}
		rows[i] = r
	}
	kb.Z, kb.Beta, kb.Gate = rows[0], rows[1], rows[2]
	if conv {
		kb.X = rows[3]
	} else {
		kb.Q, kb.Key, kb.Val = rows[3], rows[4], rows[5]
	}
	return nil
}

// shortAll reports whether every row input of fs is well-formed but too short for T tokens: then
// Start claims tokens that are not there, rather than one row input missing them.
func shortAll(fs []rowsField, T int) bool {
	for _, f := range fs {
		if _, held, err := checkRows(f, T); err == nil || held < 0 {
			return false
		}
	}
	return true
}

// checkOutputs checks the outputs' lengths (outLen = T·VHeads·V elements each) and sets the
// kernel's view of them.
func checkOutputs(b *Batch, kb *gdnsimd.Batch, outLen int) error {
	if b.Out != nil && len(b.Out) != outLen {
		return fmt.Errorf("%w: Batch.Out has length %d, want T·VHeads·V = %d", ErrShape, len(b.Out), outLen)
	}
	if b.OutF32 != nil && len(b.OutF32) != outLen {
		return fmt.Errorf("%w: Batch.OutF32 has length %d, want T·VHeads·V = %d", ErrShape, len(b.OutF32), outLen)
	}
	if outLen > 0 && b.Out == nil && b.OutF32 == nil {
		return fmt.Errorf("%w: Batch.Out and Batch.OutF32 are both nil", ErrNoOutput)
	}
	if b.Out != nil {
		kb.Out = unsafe.Slice((*uint16)(unsafe.SliceData(b.Out)), len(b.Out))
	}
	kb.OutF32 = b.OutF32
	return nil
}

// slotRange is how many slots a sequence may read (or store to): the least of its pools' (State
// and ConvState; StoreTo and ConvStoreTo), and the pool that has that least, for the errors.
type slotRange struct {
	n    int
	pool string
}

// fewer is r bounded by another pool of n slots as well: where n is less, that pool names it.
func (r slotRange) fewer(n int, pool string) slotRange {
	if n < r.n {
		return slotRange{n, fmt.Sprintf("%s (%s has %d)", pool, r.pool, r.n)}
	}
	return r
}

// pools is the slot ranges of a call's pools (rule 2), and whether the stores go to the read pool.
type pools struct {
	read, store slotRange
	same        bool
}

// checkPools checks the state pools and, with the conv front, the conv pools (rule 2), sets the
// kernel's view of them and returns their slot ranges.
func (l *Layer) checkPools(b *Batch, kb *gdnsimd.Batch) (pools, error) {
	slots, err := l.checkPool("Batch.State", &b.State, &kb.State)
	if err != nil {
		return pools{}, err
	}
	p := pools{read: slotRange{slots, "Batch.State"}, same: true}
	p.store = p.read
	if b.StoreTo != nil {
		if slots, err = l.checkPool("Batch.StoreTo", b.StoreTo, &kb.StoreTo); err != nil {
			return pools{}, err
		}
		p.store, p.same = slotRange{slots, "Batch.StoreTo"}, false
		if sameSlice(b.State, *b.StoreTo) {
			if kb.StoreTo.SlotStride != kb.State.SlotStride {
				return pools{}, fmt.Errorf("%w: Batch.StoreTo is Batch.State's slice with another SlotStride (%d, not %d)", ErrOverlap, b.StoreTo.SlotStride, b.State.SlotStride)
			}
			p.same = true
			kb.StoreTo = gdnsimd.Pool{} // the same pool: in place
		}
	}
	if l.c.ConvWidth != 0 {
		return l.checkConvPools(b, kb, p)
	}
	if b.ConvState.F32 != nil || b.ConvState.BF16 != nil || b.ConvStoreTo != nil {
		return pools{}, fmt.Errorf("%w: Batch.ConvState or ConvStoreTo is set, but the Layer has no conv front (Config.ConvWidth 0)", ErrUnsupported)
	}
	return p, nil
}

// checkSlots checks the Read and Store slots against the pools' ranges (rules 3–5): in range, no
// slot written twice, padding stores nothing, a Zero sequence's state is kept somewhere, and (one
// pool) a slot written by one sequence is read by no other.
func (v *validator) checkSlots(b *Batch, p pools) error {
	for n := range len(b.Read) {
		t0, t1 := int(b.Start[n]), int(b.Start[n+1])
		r := b.Read[n]
		switch {
		case r == Pad:
			if b.Store != nil {
				for t := t0; t < t1; t++ {
					if b.Store[t] != NoStore {
						return fmt.Errorf("%w: Batch.Store[%d] = %d, but token %d belongs to padding sequence %d (Batch.Read[%d] = Pad)", ErrSlot, t, b.Store[t], t, n, n)
					}
				}
			}
			continue
		case r == Zero:
			if b.Store == nil && t1 > t0 {
				return fmt.Errorf("%w: Batch.Read[%d] = Zero with Batch.Store nil: the state of sequence %d would be lost (store it, or say NoStore per token)", ErrSlot, n, n)
			}
		case r < 0 || int64(r) >= int64(p.read.n):
			return fmt.Errorf("%w: Batch.Read[%d] = %d, want a slot in [0, %d) of %s, Pad (-1) or Zero (-2)", ErrSlot, n, r, p.read.n, p.read.pool)
		}
		if err := v.sequenceStores(b, n, p.store); err != nil {
			return err
		}
	}
	if !p.same {
		return nil
	}
	// Rule 4: a slot written by one sequence is read by no other.
	for n, r := range b.Read {
		if r < 0 || b.Start[n+1] == b.Start[n] {
			continue
		}
		if w, ok := v.writes[r]; ok && int(w.seq) != n {
			return fmt.Errorf("%w: Batch.Read[%d] = %d, but sequence %d writes slot %d (after token %d): the order would be undefined", ErrSlot, n, r, w.seq, r, w.tok)
		}
	}
	return nil
}

// sequenceStores checks and records the stores of sequence n (not padding): Store's, else the
// implied store of its last token to its Read slot.
func (v *validator) sequenceStores(b *Batch, n int, store slotRange) error {
	t0, t1 := int(b.Start[n]), int(b.Start[n+1])
	r := b.Read[n]
	if b.Store == nil {
		if t1 > t0 && r >= 0 {
			if int64(r) >= int64(store.n) {
				return fmt.Errorf("%w: Batch.Read[%d] = %d with Batch.Store nil: the implied store wants a slot in [0, %d) of %s", ErrSlot, n, r, store.n, store.pool)
			}
			return v.addWrite(r, int32(n), int32(t1-1), "the implied store of Batch.Read")
		}
		return nil
	}
	for t := t0; t < t1; t++ {
		s := b.Store[t]
		if s == NoStore {
			continue
		}
		if s < 0 || int64(s) >= int64(store.n) {
			return fmt.Errorf("%w: Batch.Store[%d] = %d, want a slot in [0, %d) of %s or NoStore (-1)", ErrSlot, t, s, store.n, store.pool)
		}
		if err := v.addWrite(s, int32(n), int32(t), "Batch.Store"); err != nil {
			return err
		}
	}
	return nil
}

// addWrite records that sequence seq writes slot s after token tok, refusing a second writer.
func (v *validator) addWrite(s, seq, tok int32, what string) error {
	if w, ok := v.writes[s]; ok {
		return fmt.Errorf("%w: slot %d written twice: after token %d (sequence %d) and after token %d (sequence %d, %s)", ErrSlot, s, w.tok, w.seq, tok, seq, what)
	}
	v.writes[s] = write{seq, tok}
	return nil
}

// checkRows checks one row input of a batch of T > 0 tokens (its grouping checked before) and
// returns the kernel's view, and the tokens it has room for (−1 when it fails on anything else:
// storage, stride, extent).
func checkRows(f rowsField, T int) (gdnsimd.Rows, int, error) {
	r := f.r
	if (r.F32 == nil) == (r.BF16 == nil) {
		return gdnsimd.Rows{}, -1, fmt.Errorf("%w: %s: exactly one of F32 and BF16 must be set (F32 has %d elements, BF16 %d)", ErrShape, f.name, len(r.F32), len(r.BF16))
	}
	width, what := f.width, "width"
	if r.Group > 0 {
		if f.width/r.Group > math.MaxInt/r.GroupStride {
			return gdnsimd.Rows{}, -1, fmt.Errorf("%w: %s.GroupStride = %d: the row's extent overflows", ErrShape, f.name, r.GroupStride)
		}
		width, what = (f.width/r.Group-1)*r.GroupStride+r.Group, "extent of the row's groups"
	}
	stride := r.Stride
	if stride == 0 {
		stride = width
	}
	if stride < width {
		return gdnsimd.Rows{}, -1, fmt.Errorf("%w: %s.Stride = %d, want 0 (dense) or at least the %s %d", ErrShape, f.name, r.Stride, what, width)
	}
	n := len(r.F32) + len(r.BF16)
	// (T−1)·stride + width ≤ n, without overflow.
	held := 0
	if n >= width {
		held = (n-width)/stride + 1
	}
	if held < T {
		return gdnsimd.Rows{}, held, fmt.Errorf("%w: %s has %d elements, want at least (T−1)·stride + %s = %d·%d + %d for T = %d tokens",
			ErrShape, f.name, n, what, T-1, stride, width, T)
	}
	out := gdnsimd.Rows{F32: r.F32, Stride: stride, Group: r.Group, GroupStride: r.GroupStride}
	if r.BF16 != nil {
		out.BF16 = unsafe.Slice((*uint16)(unsafe.SliceData(r.BF16)), len(r.BF16))
	}
	return out, held, nil
}

// checkPool checks a pool against the Layer's storage type and shape, sets the kernel's view and
// returns the number of slots.
func (l *Layer) checkPool(name string, p *Pool, out *gdnsimd.Pool) (int, error) {
	c := &l.c
	if set, _ := p.fields(); set == 1 {
		if d, have := p.dtype(); d != c.StateDType {
			return 0, fmt.Errorf("%w: %s.%s is set, but the Layer stores its state as %v (Config.StateDType)", ErrShape, name, have, c.StateDType)
		}
	}
	return slotsOf(name, p, c.VHeads*c.K*c.V, "VHeads·K·V", out)
}

// slotsOf checks a pool of slots of size elements (named so in the errors): one storage set, a
// SlotStride of at least size, room for a slot; it sets the kernel's view and returns the number
// of slots.
func slotsOf(name string, p *Pool, size int, sizeName string, out *gdnsimd.Pool) (int, error) {
	set, n := p.fields()
	if set != 1 {
		return 0, fmt.Errorf("%w: %s: exactly one of %s must be set (%s)", ErrShape, name, poolFields, p.lens())
	}
	stride := p.SlotStride
	if stride == 0 {
		stride = size
	}
	if stride < size {
		return 0, fmt.Errorf("%w: %s.SlotStride = %d, want 0 or at least %s = %d", ErrShape, name, p.SlotStride, sizeName, size)
	}
	if n < size {
		return 0, fmt.Errorf("%w: %s has %d elements: it holds no slot of %s = %d", ErrShape, name, n, sizeName, size)
	}
	*out = p.view(stride)
	return (n-size)/stride + 1, nil
}

// checkConvPools checks the conv pools of a Layer with the conv front (their storage, sizes and
// whether ConvStoreTo is ConvState's very slice, as StoreTo is State's or not), sets the kernel's
// view and returns p, the state pools' ranges, bounded by the conv pools': a read slot must be in
// State and ConvState, a store slot in both store pools.
func (l *Layer) checkConvPools(b *Batch, kb *gdnsimd.Batch, p pools) (pools, error) {
	c := &l.c
	size := (c.ConvWidth - 1) * (2*c.KHeads*c.K + c.VHeads*c.V)
	n, err := slotsOf("Batch.ConvState", &b.ConvState, size, "(ConvWidth−1)·C", &kb.ConvState)
	if err != nil {
		return pools{}, err
	}
	p.read = p.read.fewer(n, "Batch.ConvState")
	if (b.ConvStoreTo != nil) != (b.StoreTo != nil) {
		return pools{}, fmt.Errorf("%w: Batch.StoreTo is %s and Batch.ConvStoreTo %s: set both (out of place) or neither", ErrUnsupported, setOrNil(b.StoreTo != nil), setOrNil(b.ConvStoreTo != nil))
	}
	if b.ConvStoreTo == nil {
		p.store = p.store.fewer(n, "Batch.ConvState")
		return p, nil
	}
	if same := sameSlice(b.ConvState, *b.ConvStoreTo); same != p.same {
		return pools{}, fmt.Errorf("%w: Batch.StoreTo is Batch.State's very slice: %v, Batch.ConvStoreTo Batch.ConvState's: %v (both in place or both out of place)", ErrOverlap, p.same, same)
	} else if eff := func(s int) int { return cmp.Or(s, size) }; same && eff(b.ConvStoreTo.SlotStride) != eff(b.ConvState.SlotStride) {
		return pools{}, fmt.Errorf("%w: Batch.ConvStoreTo is Batch.ConvState's slice with another SlotStride (%d, not %d)", ErrOverlap, b.ConvStoreTo.SlotStride, b.ConvState.SlotStride)
	} else if same {
		p.store = p.store.fewer(n, "Batch.ConvStoreTo")
		return p, nil
	}
	m, err := slotsOf("Batch.ConvStoreTo", b.ConvStoreTo, size, "(ConvWidth−1)·C", &kb.ConvStoreTo)
	p.store = p.store.fewer(m, "Batch.ConvStoreTo")
	return p, err
}

func setOrNil(set bool) string {
	if set {
		return "set"
	}
	return "nil"
}

// sameSlice reports whether two pools are the very same slice.
func sameSlice(a, b Pool) bool {
	da, _ := a.dtype()
	db, _ := b.dtype()
	return da == db && a.span("") == b.span("")
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
	pools[0] = b.State.span("Batch.State")
	if b.StoreTo != nil {
		pools[1] = b.StoreTo.span("Batch.StoreTo")
	}
	if conv {
		pools[2] = b.ConvState.span("Batch.ConvState")
		if b.ConvStoreTo != nil {
			pools[3] = b.ConvStoreTo.span("Batch.ConvStoreTo")
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
