package gdnsimd

// StoreConv writes the conv states of b's stores (SPEC Part D; nothing without the conv front):
// the conv state after token t, the last W−1 rows up to t, to the conv pool of every store of
// token t — Store's, or the implied store of a sequence's last token to its Read slot. It must run
// after every item of b (RunBatch reads the conv states it overwrites). Like RunBatch, it panics
// before writing on a malformed Batch, and cuts every slot from the slices with bounds checks.
func (b *Batch) StoreConv() {
	if b.ConvW == 0 {
		return
	}
	b.check()
	dst, inPlace := &b.ConvStoreTo, false
	if dst.F32 == nil && dst.BF16 == nil {
		dst, inPlace = &b.ConvState, true
	}
	for n := range b.N {
		t0, t1 := b.tokens(n)
		read := b.read(n)
		if read == readPad || t0 == t1 {
			continue
		}
		last := -1 // the store to the Read slot in place: the last, its old rows read first
		for t := t0; t < t1; t++ {
			slot := noStore
			if b.Store != nil {
				slot = b.Store[t]
			} else if t == t1-1 {
				slot = read
			}
			switch {
			case slot < 0:
			case inPlace && slot == read:
				last = t
			default:
				b.convStore(dst, slot, t, t0, read)
			}
		}
		if last >= 0 {
			b.convStore(dst, read, last, t0, read)
		}
	}
}

// convStore writes the conv state after token t of a sequence starting at token t0 and reading
// slot read to slot of dst: row i is input row t − (W−2) + i, an X row from t0 on, else row
// W − 1 + (that − t0) of the read slot's conv state. When dst is the read slot itself, row i reads
// a later row of it (i + 1 + t − t0), not yet written.
func (b *Batch) convStore(dst *Pool, slot int32, t, t0 int, read int32) {
	C, R := b.channels(), b.ConvW-1
	base := int(slot) * dst.SlotStride
	for i := range R {
		r := t - R + 1 + i
		at := base + i*C
		switch {
		case r >= t0:
			copyRow(dst, at, b.X.F32, b.X.BF16, r*b.X.Stride, C)
		case read == readZero:
			if dst.F32 != nil {
				clear(cutF32(dst.F32, at, C))
			} else {
				clear(cutU16(dst.BF16, at, C))
			}
		default:
			p := &b.ConvState
			copyRow(dst, at, p.F32, p.BF16, int(read)*p.SlotStride+(R+r-t0)*C, C)
		}
	}
}

// copyRow copies n elements from element off of src (f32, else the bf16 bits s16) to element at
// of dst, converting: bf16 to f32 exactly, f32 to bf16 rounded to nearest even.
func copyRow(dst *Pool, at int, s32 []float32, s16 []uint16, off, n int) {
	switch {
	case dst.F32 != nil && s32 != nil:
		copy(cutF32(dst.F32, at, n), cutF32(s32, off, n))
	case dst.F32 != nil:
		widenGeneric(cutF32(dst.F32, at, n), cutU16(s16, off, n))
	case s32 != nil:
		d := cutU16(dst.BF16, at, n)
		for i, x := range cutF32(s32, off, n) {
			d[i] = BF16RNE(x)
		}
	default:
		copy(cutU16(dst.BF16, at, n), cutU16(s16, off, n))
	}
}
