package gdnsimd

import (
	"math"
)

// heads computes the gates of token t for the value heads [hlo, hhi) into s.lane(3…5): one call of
// the kernel's gates piece for all of a one-token sequence's heads (a lane per head).
func (d *driver) heads(t, hlo, hhi int) {
	b, s := d.b, d.s
	n := hhi - hlo
	var gb, ga []float32
	if b.Beta.Group > 0 || b.Gate.Group > 0 {
		gb, ga = s.lane(0, n), s.lane(1, n)
		for i := range n {
			gb[i], ga[i] = rowAt(&b.Beta, t, hlo+i), rowAt(&b.Gate, t, hlo+i)
		}
		d.laneGates(n, gb, ga, func(i int) int { return hlo + i })
		return
	}
	gb = d.im.row(&b.Beta, t, hlo, n, s.lane(0, n))
	ga = d.im.row(&b.Gate, t, hlo, n, s.lane(1, n))
	d.laneGates(n, gb, ga, func(i int) int { return hlo + i })
}

// laneGates sets s.lane(3…5) to the gates beta, em1, eg of n lanes with the inputs gb, ga (b and
// a), lane i of value head head(i): the kernel's gates piece. With the per-channel gate only beta
// is used (the decays are the channels': see channels).
func (d *driver) laneGates(n int, gb, ga []float32, head func(i int) int) {
	b, s := d.b, d.s
	beta, em1, eg := s.lane(3, n), s.lane(4, n), s.lane(5, n)
	dt, rate := s.lane(2, n), s.rate[:n:n]
	if b.PerChannel {
		clear(dt)
		clear(rate)
		d.im.gates(beta, em1, eg, gb, dt, dt, rate, GateSoftplus, 0)
		return
	}
	rs := d.rates()
	for i := range n {
		h := head(i)
		rate[i], dt[i] = rs[h], b.DtBias[h]
	}
	d.im.gates(beta, em1, eg, gb, ga, dt, rate, GateSoftplus, 0)
}

// rates returns the value heads' decay rates, exp(A_log) (rate64) or −ssm_a: computed once for
// the values of the Batch's A_log or ssm_a (a Layer's are the same every call) and kept with them.
func (d *driver) rates() []float64 {
	b, s := d.b, d.s
	src, ssm := b.ALog, b.SsmA != nil
	if ssm {
		src = b.SsmA
	}
	same := s.rateSsm == ssm && len(s.rateOf) == len(src)
	for i := 0; same && i < len(src); i++ {
		same = s.rateOf[i] == math.Float32bits(src[i])
	}
	if same {
		return s.rates
	}
	s.rateOf, s.rates, s.rateSsm = s.rateOf[:0], s.rates[:0], ssm
	for _, x := range src {
		r := rate64(x)
		if ssm {
			r = -float64(x)
		}
		s.rateOf, s.rates = append(s.rateOf, math.Float32bits(x)), append(s.rates, r)
	}
	return s.rates
}

// channels makes the per-channel gate (headCall.ch) of value head h over the tokens [c0, c1),
// with their k̂ and q̂ prepared (s.kh, s.qh): per token the channels' em1 and eg (the gates piece), their
// forms c, m, and k̂, q̂ decayed by them.
func (d *driver) channels(h, c0, c1 int) []float32 {
	b, s := d.b, d.s
	K := b.K
	form, lb := b.GateForm, float64(b.LowerBound)
	dtb := b.DtBias[h*K : (h+1)*K : (h+1)*K]
	em1, eg := s.cg[:K:K], s.cg[K:2*K:2*K]
	rate := s.rate[:K:K]
	r := d.rates()[h]
	for i := range rate {
		rate[i] = r
	}
	ch := s.ch[:4*K*(c1-c0)]
	for τ := range c1 - c0 {
		t := c0 + τ
		g := d.im.row(&b.Gate, t, h*K, K, s.row)
		d.im.gates(nil, em1, eg, nil, g, dtb, rate, form, lb)
		c := ch[4*K*τ : 4*K*(τ+1) : 4*K*(τ+1)]
		d.im.chans(c[:K], c[K:2*K], c[2*K:], em1, eg, s.kh[τ*K:(τ+1)*K], s.qh[τ*K:(τ+1)*K])
	}
	return ch
}

// gates returns the gates beta, em1, eg of value head h over the tokens [c0, c1), one each: those
// heads computed when the sequence is one token, else computed here (a lane per token).
func (d *driver) gates(sq *seq, h, c0, c1 int) (beta, em1, eg []float32) {
	b, s := d.b, d.s
	if sq.oneTok {
		i := h - sq.hlo
		return s.lane(3, i+1)[i:], s.lane(4, i+1)[i:], s.lane(5, i+1)[i:]
	}
	T := c1 - c0
	gb, ga := s.lane(0, T), s.lane(1, T)
	for τ := range T {
		gb[τ], ga[τ] = rowAt(&b.Beta, c0+τ, h), 0
		if !b.PerChannel {
			ga[τ] = rowAt(&b.Gate, c0+τ, h)
		}
	}
	d.laneGates(T, gb, ga, func(int) int { return h })
	return s.lane(3, T), s.lane(4, T), s.lane(5, T)
}

// prepareQK writes k̂, q̂ and k̂·q̂ of tokens [c0, c1) of sq, k-head hk, into the scratch.
func (d *driver) prepareQK(sq *seq, c0, c1, hk int) {
	b, s := d.b, d.s
	K := b.K
	invSqrtK := 1 / math.Sqrt(float64(K))
	conv := b.ConvW != 0
	if conv {
		// q and k are the conv's outputs, normalised in place.
		T := c1 - c0
		d.convRows(sq, s.qh[:T*K], c0, c1, hk*K, K)
		d.convRows(sq, s.kh[:T*K], c0, c1, (b.KHeads+hk)*K, K)
	} else {
		s.sink ^= warm(&b.Q, c0, c1, hk*K, K) ^ warm(&b.Key, c0, c1, hk*K, K)
	}
	for τ := range c1 - c0 {
		t := c0 + τ
		q, k := s.qh[τ*K:(τ+1)*K:(τ+1)*K], s.kh[τ*K:(τ+1)*K:(τ+1)*K]
		if !conv {
			q, k = d.im.row(&b.Q, t, hk*K, K, s.row), d.im.row(&b.Key, t, hk*K, K, s.row[K:])
		}
		qq, kk, qk := d.im.l2(q, k)
		rq := 1 / math.Sqrt(qq+l2Eps) * invSqrtK
		rk := 1 / math.Sqrt(kk+l2Eps)
		d.im.scale(s.qh[τ*K:(τ+1)*K:(τ+1)*K], q, float32(rq))
		d.im.scale(s.kh[τ*K:(τ+1)*K:(τ+1)*K], k, float32(rk))
		s.kq[τ] = float32(qk * rq * rk)
	}
}

// farOne returns T times −1 and T ones: the em1 and eg of tok with the per-channel gate (decay(x)
// = 1·x after the dot products, whose vectors are decayed).
func (s *Scratch) farOne(T int) (em1, eg []float32) {
	em1, eg = s.lane(4, T), s.lane(5, T)
	for τ := range T {
		em1[τ], eg[τ] = -1, 1
	}
	return em1, eg
}
