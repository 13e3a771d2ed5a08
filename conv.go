package gdnsimd

// maxConvW is the widest conv front the driver takes (its scratch holds chunk + maxConvW − 1 rows
// of a window): gdn.MaxConvWidth, tied by TestConvWidthLimit.
const maxConvW = 8

// convRows sets u[τ·n + c], τ < c1 − c0, c < n, to the conv front's output of channel off + c at
// token c0 + τ of the sequence being run: impl.conv over a table of the T + W − 1 input rows
// those tokens read, each where it is — an f32 X row, or for the tokens whose W rows reach back
// before the sequence's first token an f32 row of its Read slot's conv state, in place (no copy:
// at decode they were 5 % of a call); a bf16 row widened into the window; zeros for Zero.
func (d *driver) convRows(sq *seq, u []float32, c0, c1, off, n int) {
	b, s := d.b, d.s
	if sq.convTok { // computed for the whole token (c1 = c0 + 1)
		copy(u[:n], cutF32(s.u, off, n))
		return
	}
	W := b.ConvW
	R := W - 1
	T := c1 - c0
	if len(s.rows) < T+R {
		s.rows = make([][]float32, max(T+R, chunk+maxConvW-1))
	}
	if need := (T + R) * n; len(s.win) < need {
		s.win = make([]float32, max(need, (chunk+maxConvW-1)*max(b.K, b.V)))
	}
	rows := s.rows[:T+R]
	for r := range rows {
		rows[r] = d.convRow(sq, s.win[r*n:(r+1)*n:(r+1)*n], c0-R+r, off)
	}
	d.im.conv(u, n, rows, b.ConvTaps[off:], b.channels(), b.ConvBias[off:off+n:off+n], W, T)
	clear(rows) // the table holds no caller's memory once the call returns
}

// convToken computes the conv outputs of token t, the one token of the sequence being run, for
// the channels its value heads read (runs, from convRuns: their v channels and the q and k
// channels of the k-heads they read) into s.u by channel, three runs of the conv piece over
// contiguous channels instead of one a head (decode: a piece call of 128 channels took 72 ns, of
// many 47 a 128, and the rows stream from memory), and sets sq.convTok, so that convRows copies
// them from there.
func (d *driver) convToken(sq *seq, runs [3][2]int) {
	s, t := d.s, sq.t0
	if C := d.b.channels(); len(s.u) < C {
		s.u = make([]float32, C)
	}
	for _, r := range runs {
		d.convRows(sq, cutF32(s.u, r[0], r[1]), t, t+1, r[0], r[1])
	}
	sq.convTok = true
}

// convRuns returns the channels the value heads [hlo, hhi) read, as three runs (first channel,
// count): the q and the k channels of the k-heads they read (tiled GQA: a range covering them),
// and their v channels; false when they read none.
func (d *driver) convRuns(hlo, hhi int) ([3][2]int, bool) {
	b := d.b
	K, V, HK := b.K, b.V, b.KHeads
	lo, hi := HK, 0
	for h := hlo; h < hhi; h++ {
		hk := h / (b.VHeads / HK)
		if b.GQATiled {
			hk = h % HK
		}
		lo, hi = min(lo, hk), max(hi, hk+1)
	}
	return [3][2]int{{lo * K, (hi - lo) * K}, {(HK + lo) * K, (hi - lo) * K}, {2*HK*K + hlo*V, (hhi - hlo) * V}}, lo < hi
}

// convRow returns channels [off, off+len(win)) of the conv front's input row t of the sequence
// sq, as float32: an X row from its first token sq.t0 on, before it row R + t − t0 of the
// conv state of its Read slot (zeros for Zero); f32 rows in place, bf16 ones widened into win.
func (d *driver) convRow(sq *seq, win []float32, t, off int) []float32 {
	b := d.b
	n := len(win)
	if t >= sq.t0 {
		return d.im.row(&b.X, t, off, n, win)
	}
	if sq.read == readZero {
		if n <= len(d.s.zero32) {
			return d.s.zero32[:n:n]
		}
		clear(win)
		return win
	}
	p := &b.ConvState
	at := int(sq.read)*p.SlotStride + (b.ConvW-1+t-sq.t0)*b.channels() + off
	return d.im.f32At(p.F32, p.BF16, at, n, win)
}

// warmConv reads an element of each cache line of the conv state of slot read in the channels
// runs (from convRuns: those the item's value heads read; warm's purpose): the conv reads it a
// head's channels at a time, rows C elements apart, and from memory each such read waited for its
// lines in turn (decode at B = 64: 14 % of the call). Only their channels: with Workers 2 at B = 1
// each goroutine warmed the whole slot, and read the other core's half of the lines the last
// call's StoreConv wrote.
func (d *driver) warmConv(read int32, runs [3][2]int) {
	b, s := d.b, d.s
	p := &b.ConvState
	C := b.channels()
	n := (b.ConvW - 1) * C
	r := Rows{Stride: C}
	if p.F32 != nil {
		r.F32 = cutF32(p.F32, int(read)*p.SlotStride, n)
	} else {
		r.BF16 = cutU16(p.BF16, int(read)*p.SlotStride, n)
	}
	for _, run := range runs {
		s.sink ^= warm(&r, 0, b.ConvW-1, run[0], run[1])
	}
}
