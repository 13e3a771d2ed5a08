package gdnsimd

import (
	"math"
)

// impl is one kernel: the shared scalar driver (run) calls these three vector pieces per head.
// Every variant implements the same three pieces with the same arithmetic; the portable Go ones
// below are the reference the assembly is tested against (see the doc comment of each).
type impl struct {
	name string

	// state is the fused state update of one head. sIn and sOut are the head's K×V state
	// (row i = key index, V contiguous; sOut may be sIn), kh and qh the normalised key and the
	// normalised, 1/sqrt(K)-scaled query (len K), v the value (len V); it writes o (len V):
	//
	//	kv'_j = Σ_i kh_i·sIn[i][j]      qs'_j = Σ_i qh_i·sIn[i][j]      (one read pass)
	//	δ_j   = beta·(v_j − decay(kv'_j))
	//	o_j   = decay(qs'_j) + kq·δ_j
	//	sOut[i][j] = decay(sIn[i][j]) + kh_i·δ_j                       (one write pass)
	//
	// where decay(x) = x + em1·x when em1 ≥ −0.5 (a decay near 1 keeps its digits; the product
	// and the sum may be fused) and eg·x otherwise (a strong decay keeps its relative accuracy).
	state func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)

	// gate is the gated RMSNorm of one head's o (len V):
	//
	//	r   = 1/sqrt(Σ_j o_j² / V + eps)            (sum of squares accumulated in float64)
	//	y_j = o_j·r·w_j·act(z_j)     act = silu (z / (1 + exp32(−z))), sigmoid (1 / (1 + exp32(−z))) if sig
	//
	// and stores y to outF (if non-nil) and bf16RNE(y) to out (if non-nil).
	gate func(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool)

	// l2 returns Σq², Σk² and Σk·q accumulated in float64 (len(q) == len(k)).
	l2 func(q, k []float32) (qq, kk, kq float64)

	// scale sets dst[i] = src[i]·f for i < len(src) (one float32 multiply each: the bits are the
	// same in every kernel); it panics if dst is shorter than src.
	scale func(dst, src []float32, f float32)

	// widen sets dst[i] to the float32 of the bf16 bits src[i] (exact; len(src) ≥ len(dst)).
	widen func(dst []float32, src []uint16)

	// gates sets em1[i], eg[i] (and beta[i] unless b is empty) of the lane a[i], dtb[i],
	// rate[i] for i < len(a), lb < 0 the bounded form (gatesGeneric; the other slices hold at
	// least len(a) elements).
	gates func(beta, em1, eg, b, a, dtb []float32, rate []float64, lb float64)

	// chans sets, for the n = len(em1) channels of a head-token of the per-channel gate, their
	// decay forms (pairs[2i], pairs[2i+1] = chanForm(em1[i], eg[i])) and k̂, q̂ decayed by them
	// (kx, qx): chansGeneric; the other slices hold at least n elements (pairs 2n).
	chans func(kx, qx, pairs, em1, eg, kh, qh []float32)

	// conv is the causal conv1d of the conv front (SPEC Part D) over n = len(bias) channels and T
	// tokens (convGeneric): u[τ·us + c] = silu32 of bias[c] plus the W taps' products
	// w[j·ws + c]·x[τ+j][c], j < W, each rounded on its own and added from j = 0 up. x is a
	// table of T+W−1 input rows (each at least n long), so that they are read where they are:
	// the conv state's and the batch's X rows.
	conv func(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int)

	// cells are the state routines over T tokens by format, [bf16][layout]; a nil cell is a
	// format the kernel does not implement.
	cells [2][2]stateFunc

	// prefetches reports that the routines over T tokens issue the prefetch list (headCall.pf).
	prefetches bool
}

var genericImpl = impl{
	name: "generic", state: stateGeneric, gate: gateGeneric, l2: l2Generic, scale: scale, widen: widenGeneric, gates: gatesGeneric,
	chans: chansGeneric, conv: convGeneric,
	cells: [2][2]stateFunc{{kvTokens, vkTokens}, {kvTokens, vkTokens}},
}

// l2Eps is the epsilon added under the root of the q/k l2 norms (fixed by the models).
const l2Eps = 1e-6

// ln2Half is ln(0.5): the split between the two formulas (near it both are exact to 2⁻⁵³); the
// decay's form itself is chosen from the float32 em1 (nearOne), the same way in every kernel.
const ln2Half = -0.6931471805599453

// nearOne is the em1 from which decay(x) is x + em1·x rather than eg·x (eg ≥ 0.5).
const nearOne = -0.5

// decay is x + em1·x when em1 ≥ nearOne, else eg·x (SPEC Part A).
func decay(x, em1, eg float32, near bool) float32 {
	if near {
		return x + em1*x
	}
	return eg * x
}

// scale sets dst[i] = src[i]·f.
func scale(dst, src []float32, f float32) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = x * f
	}
}

func l2Generic(q, k []float32) (qq, kk, kq float64) {
	k = k[:len(q)]
	for i, x := range q {
		xq, xk := float64(x), float64(k[i])
		qq += xq * xq
		kk += xk * xk
		kq += xk * xq
	}
	return qq, kk, kq
}

// genericBlock is the column-block width of the portable kernel: the K×genericBlock slab of the
// state (32 KiB at K = 128) stays in L1 between the read and the write pass.
const genericBlock = 64

// stateGeneric is the single-token state piece in portable Go (the reference of the assembly
// pieces): column blocks of genericBlock columns, each a read pass and a write pass (kvBlock).
func stateGeneric(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32) {
	K, V := len(kh), len(v)
	sIn, sOut = sIn[:K*V:K*V], sOut[:K*V:K*V]
	for j0 := 0; j0 < V; j0 += genericBlock {
		n := min(genericBlock, V-j0)
		kvBlock(sIn[j0:], sOut[j0:], V, n, kh, qh, v[j0:j0+n], o[j0:j0+n], em1, eg, beta, kq, nil)
	}
}

// kvBlock is one token over a block of n columns of a [K][V] state: row i of the block starts at
// sIn[i·rs] (sOut[i·rs]; sOut may be sIn), K = len(kh). v and o are the block's columns. ch is the
// token's per-channel gate (headCall.ch, then em1 = 0 and eg = 1) or nil: the read pass takes its
// decayed k̂ and q̂, and row i decays by channel i's form.
func kvBlock(sIn, sOut []float32, rs, n int, kh, qh, v, o []float32, em1, eg, beta, kq float32, ch []float32) {
	K := len(kh)
	qh = qh[:K]
	near := em1 >= nearOne
	rk, rq := kh, qh // the read pass's vectors
	if ch != nil {
		rk, rq = ch[:K:K], ch[K:2*K:2*K]
	}
	var accK, accQ, delta [genericBlock]float32
	ak, aq, d := accK[:n], accQ[:n], delta[:n]
	// Read pass, four rows at a time: the accumulators are loaded and stored once per four
	// rows (the Go compiler keeps no arrays in registers).
	i := 0
	for ; i+4 <= K; i += 4 {
		r0 := sIn[i*rs:][:n]
		r1 := sIn[(i+1)*rs:][:n]
		r2 := sIn[(i+2)*rs:][:n]
		r3 := sIn[(i+3)*rs:][:n]
		k0, k1, k2, k3 := rk[i], rk[i+1], rk[i+2], rk[i+3]
		q0, q1, q2, q3 := rq[i], rq[i+1], rq[i+2], rq[i+3]
		for j := range ak {
			x0, x1, x2, x3 := r0[j], r1[j], r2[j], r3[j]
			ak[j] += k0*x0 + k1*x1 + k2*x2 + k3*x3
			aq[j] += q0*x0 + q1*x1 + q2*x2 + q3*x3
		}
	}
	for ; i < K; i++ {
		row := sIn[i*rs:][:n]
		ki, qi := rk[i], rq[i]
		for j := range ak {
			x := row[j]
			ak[j] += ki * x
			aq[j] += qi * x
		}
	}
	v, o = v[:n], o[:n]
	for j := range d {
		dj := beta * (v[j] - decay(ak[j], em1, eg, near))
		d[j] = dj
		o[j] = decay(aq[j], em1, eg, near) + kq*dj
	}
	for i := range K {
		src, dst := sIn[i*rs:][:n], sOut[i*rs:][:n]
		ki := kh[i]
		if ch != nil {
			c, m := ch[2*K+2*i], math.Float32bits(ch[2*K+2*i+1])
			for j := range d {
				dst[j] = decayCM(src[j], c, m) + ki*d[j]
			}
			continue
		}
		if near {
			for j := range d {
				x := src[j]
				dst[j] = x + em1*x + ki*d[j]
			}
		} else {
			for j := range d {
				dst[j] = eg*src[j] + ki*d[j]
			}
		}
	}
}

// gateGeneric is the gated RMSNorm of one head's o with the output gate sigmoid32(z) if sig
// (Kimi-Linear), else silu32(z) (Qwen).
func gateGeneric(o, z, w []float32, eps float32, out []uint16, outF []float32, sig bool) {
	V := len(o)
	z, w = z[:V], w[:V]
	var ss float64
	for _, x := range o {
		ss += float64(x) * float64(x)
	}
	r := float32(1 / math.Sqrt(ss/float64(V)+float64(eps)))
	if outF != nil {
		outF = outF[:V]
	}
	if out != nil {
		out = out[:V]
	}
	for j, x := range o {
		a := z[j]
		if sig {
			a = 1 / (1 + exp32(-a))
		} else {
			a = silu32(a)
		}
		y := x * r * w[j] * a
		if outF != nil {
			outF[j] = y
		}
		if out != nil {
			out[j] = BF16RNE(y)
		}
	}
}

// silu32 is z·sigmoid(z) = z / (1 + exp32(−z)), the gate of the gated RMSNorm (Qwen3-Next);
// Kimi-Linear's is sigmoid(z) = 1 / (1 + exp32(−z)).
func silu32(z float32) float32 { return z / (1 + exp32(-z)) }

// exp32 is the float32 exponential every kernel uses for the silu gate: Cephes' expf (Moshier), a
// degree-5 polynomial after reducing x by n·ln2 (n = round(x·log2 e)), within 2 ulp of exp(x).
// x is clamped to [-87.33654, 88] so the result is a finite normal float (n in [-126, 127]); NaN
// stays NaN.
func exp32(x float32) float32 {
	const (
		hi    = 88.0
		lo    = -87.33654
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	if x > hi {
		x = hi
	}
	if x < lo {
		x = lo
	}
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*c1
	r = r - n*c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	// 2^n for n in [-126, 127]: build the float directly.
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// BF16RNE rounds f to bfloat16 bits, to nearest even. NaN stays a (quiet) NaN with its sign;
// ±Inf and values that round past the largest bf16 become ±Inf.
func BF16RNE(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// The gates (SPEC Parts A and C) of many lanes at once, a lane a (token, value head) of the scalar
// gate or a (token, value head, key channel) of the per-channel gate:
//
//	beta = sigmoid(b) = 1/(1 + exp(−b))
//	g    = −rate·softplus(a + dt_bias), or lb·sigmoid(rate·(a + dt_bias)) (lb < 0)
//	em1  = expm1(g), eg = exp(g)
//
// with the head's rate = exp(A_log) (rate64) or −ssm_a.
//
// in float64, each rounded once to float32. Where eg ≥ 0.5 (g ≥ ln 0.5) em1 is expm1(g) and
// eg = 1 + em1; below, eg is exp(g) and em1 = eg − 1 (either way exact to about 2⁻⁵³ where
// it is computed).
//
// The float64 functions are this file's own (exp64, log1p01, expm1Near), not package math's: a
// fixed sequence of IEEE operations (math.FMA where an FMA is meant, every other product rounded
// on its own: float64(x*y), so that no compiler fuses it with an addition), so that the AVX-512 and
// AVX2 routines (asm/gates.go) and the NEON one (asm/neon/gates.go) compute each lane exactly as
// gatesGeneric does, bit for bit, while doing 8, 4 or 2 lanes at once. Each is accurate to about
// 2 ulp of float64. Rounded to float32 they give the result of package math's functions except where the
// float64 value lies within a few ulp (|g| times that for eg) of a float32 rounding boundary
// (TestGatesMath counts those), and at inputs no model has: amd64's math.Exp is +Inf from e^709.44
// where exp64 is finite (such an A_log gave eg 0; now the right value).

// gatesGeneric sets em1[i] and eg[i] to the decay of the lane a[i] (a raw gate: the token's Gate
// entry of a head, or of a channel), dtb[i] (its dt_bias) and rate[i] (its head's rate exp(A_log),
// or −ssm_a) for i < len(a), the log-decay logDecay64's (lb < 0: the bounded form); and, unless b
// is empty, beta[i] = sigmoid(b[i]). Every other slice holds at least len(a) elements.
func gatesGeneric(beta, em1, eg, b, a, dtb []float32, rate []float64, lb float64) {
	n := len(a)
	em1, eg, dtb, rate = em1[:n], eg[:n], dtb[:n], rate[:n]
	if len(b) > 0 {
		beta, b = beta[:n], b[:n]
		for i, x := range b {
			beta[i] = float32(sigmoid64(x))
		}
	}
	for i, x := range a {
		m, e := decay64(logDecay64(x, dtb[i], rate[i], lb))
		em1[i], eg[i] = float32(m), float32(e)
	}
}

// sigmoid64 is beta = 1/(1 + exp64(−b)) in float64, before its rounding to float32.
func sigmoid64(b float32) float64 { return 1 / (1 + exp64(-float64(b))) }

// softplus64 is softplus(x) = x for x > 20, else log1p(exp(x)), computed as
// max(x, 0) + log1p(exp(−|x|)): the same value, with log1p's argument in [0, 1].
func softplus64(x float64) float64 {
	px := 0.0
	if x > 0 {
		px = x
	}
	sp := px + log1p01(exp64(-math.Abs(x)))
	if x > 20 {
		sp = x
	}
	return sp
}

// decay64 is em1 = expm1(g) and eg = exp(g) of a log-decay g, each exact to about 2⁻⁵³ where it
// is computed: expm1Near(g) and 1 + em1 for g ≥ ln 0.5, else exp64(g) and eg − 1.
func decay64(g float64) (em1, eg float64) {
	if g >= ln2Half {
		em1 = expm1Near(g)
		return em1, 1 + em1
	}
	eg = exp64(g)
	return eg - 1, eg
}

// rate64 is a head's decay rate exp(A_log) as every gate uses it (exp64, the bits of the gates
// pieces).
func rate64(alog float32) float64 { return exp64(float64(alog)) }

// logDecay64 is a lane's log-decay g (SPEC Parts A and C) from its raw gate a, its dt_bias and the
// head's rate exp(A_log) (−ssm_a): −rate·softplus(a + dtb), or with a lower bound lb < 0 (the
// per-channel gate's bounded form) lb·sigmoid(rate·(a + dtb)).
func logDecay64(a, dtb float32, rate, lb float64) float64 {
	x := float64(a) + float64(dtb)
	if lb < 0 {
		return float64(lb / (1 + exp64(-float64(rate*x))))
	}
	return float64(-rate * softplus64(x))
}

// chanForm is a channel's decay as the per-channel routines apply it, branch-free: decay(x) =
// c·x + (x & m), where c = em1 and m = all ones when em1 ≥ nearOne (x + em1·x), else c = eg and m
// the sign bit only (eg·x plus a zero of x's sign: eg·x, its zero sign included).
func chanForm(em1, eg float32) (c float32, m uint32) {
	if em1 >= nearOne {
		return em1, 0xffffffff
	}
	return eg, 0x80000000
}

// chansGeneric is impl.chans: per channel i < len(em1), its form c, m (chanForm) in pairs[2i],
// pairs[2i+1], and kx[i], qx[i] = chanDecay of kh[i], qh[i] (the dot vectors of the per-channel
// gate: headCall.ch).
func chansGeneric(kx, qx, pairs, em1, eg, kh, qh []float32) {
	n := len(em1)
	kx, qx, pairs, eg, kh, qh = kx[:n], qx[:n], pairs[:2*n], eg[:n], kh[:n], qh[:n]
	for i, e := range em1 {
		c, m := chanForm(e, eg[i])
		kx[i], qx[i] = chanDecay(kh[i], c, m), chanDecay(qh[i], c, m)
		pairs[2*i], pairs[2*i+1] = c, math.Float32frombits(m)
	}
}

// chanDecay is decay(x) = c·x + (x & m) of a channel (chanForm) with c·x rounded on its own (no
// fused multiply-add on any architecture: the kernels' chans pieces give these bits).
func chanDecay(x, c float32, m uint32) float32 {
	return float32(c*x) + math.Float32frombits(math.Float32bits(x)&m)
}

// convGeneric is impl.conv: for τ < T and c < n = len(bias),
//
//	u[τ·us + c] = silu32(bias[c] + p_0 + p_1 + … + p_{W−1}),  p_j = float32(w[j·ws + c]·x[τ+j][c])
//
// added left to right, every product rounded on its own (no fused multiply-add on any
// architecture: the kernels' conv pieces give these bits). x's row τ+j is the input W−1−j tokens
// before token τ's, so tap W−1 multiplies the current row. It panics, before writing, if a slice
// (x, or one of its first T+W−1 rows) is too short for its last index.
func convGeneric(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int) {
	convFrom(u, us, x, 0, w, ws, bias, W, T)
}

// convFrom is convGeneric over the channels xo, …, xo+n−1 of x's rows: x[τ+j][xo + c].
func convFrom(u []float32, us int, x [][]float32, xo int, w []float32, ws int, bias []float32, W, T int) {
	n := len(bias)
	if T <= 0 || n == 0 {
		return
	}
	_, _, _ = u[(T-1)*us+n-1], x[T+W-2], w[(W-1)*ws+n-1]
	for _, r := range x[:T+W-1] {
		_ = r[xo+n-1]
	}
	for τ := range T {
		row, in := u[τ*us:τ*us+n], x[τ:τ+W]
		for c, a := range bias {
			for j, r := range in {
				a += float32(w[j*ws+c] * r[xo+c])
			}
			row[c] = silu32(a)
		}
	}
}

// decayCM is decay(x) = c·x + (x & m) of a channel (chanForm).
func decayCM(x, c float32, m uint32) float32 {
	return c*x + math.Float32frombits(math.Float32bits(x)&m)
}

// exp64's constants: its clamps (beyond them e^x is +Inf or 0 anyway), 2⁵²·1.5 (x·log2e +
// expMagic rounds x·log2e to an integer k in the low bits), ln 2 in two parts.
const (
	exp64Hi  = 710.0
	exp64Lo  = -746.0
	expMagic = 6755399441055744.0
	log2e64  = 1.4426950408889634
	ln2Hi64  = 0.69314718055994529
	ln2Lo64  = 2.3190468138462996e-17
)

// exp64P is e^r's Taylor polynomial, highest degree first: 1/13!, …, 1/1!, 1/0!.
var exp64P = [14]float64{
	1.6059043836821613e-10, 2.08767569878681e-09, 2.505210838544172e-08, 2.7557319223985888e-07,
	2.7557319223985893e-06, 2.4801587301587302e-05, 0.00019841269841269841, 0.0013888888888888889,
	0.0083333333333333332, 0.041666666666666664, 0.16666666666666666, 0.5, 1, 1,
}

// exp64 is e^x (NaN for NaN): x, clamped to [exp64Lo, exp64Hi], is k·ln 2 + r with |r| ≤ ln 2 / 2;
// e^r is its Taylor polynomial of degree 13 (Horner, FMAs; the remainder is below 2⁻⁵⁷), times
// 2^k1 and then 2^k2, k1 = round(k/2), k2 = k − k1, each built from its bits: the first product
// is exact, the second overflows to +Inf or rounds into the denormals as e^x does.
func exp64(x float64) float64 {
	x = min(max(x, exp64Lo), exp64Hi)
	t := math.FMA(x, log2e64, expMagic)
	k := t - expMagic
	r := math.FMA(-k, ln2Hi64, x)
	r = math.FMA(-k, ln2Lo64, r)
	p := exp64P[0]
	for _, c := range exp64P[1:] {
		p = math.FMA(p, r, c)
	}
	t1 := math.FMA(k, 0.5, expMagic)
	t2 := (k - (t1 - expMagic)) + expMagic
	return float64(float64(p*pow2(t1)) * pow2(t2))
}

// pow2 is 2^k for t = k + expMagic, |k| ≤ 1022 (from t's bits; NaN: some float).
func pow2(t float64) float64 { return math.Float64frombits((math.Float64bits(t) + 1023) << 52) }

// log1p01P is log1p's series 2s·(1 + s²/3 + s⁴/5 + …) after its first term: 1/(2n+3), n = 15 down
// to 0.
var log1p01P = [16]float64{
	0.030303030303030304, 0.032258064516129031, 0.034482758620689655, 0.037037037037037035,
	0.040000000000000001, 0.043478260869565216, 0.047619047619047616, 0.052631578947368418,
	0.058823529411764705, 0.066666666666666666, 0.076923076923076927, 0.090909090909090912,
	0.1111111111111111, 0.14285714285714285, 0.20000000000000001, 0.33333333333333331,
}

// log1p01Tiny is the y below which log1p01(y) is y: log(1 + y) rounds to y there, and y/(2 + y)
// would round in the denormals (up to 2⁻¹⁰⁷⁴ off).
const log1p01Tiny = 0x1p-1021

// log1p01 is log(1 + y) for y in [0, 1] (NaN for NaN): with s = y/(2 + y) (≤ 1/3),
// log(1 + y) = 2·atanh(s) = 2s + 2s·w·(1/3 + w/5 + …), w = s², the series to w¹⁵ (the
// remainder is below 2⁻⁵⁷ of the result); y itself below log1p01Tiny.
func log1p01(y float64) float64 {
	s := y / (2 + y)
	s2 := s + s
	w := float64(s * s)
	p := log1p01P[0]
	for _, c := range log1p01P[1:] {
		p = math.FMA(p, w, c)
	}
	l := math.FMA(float64(s2*w), p, s2)
	if y < log1p01Tiny {
		l = y
	}
	return l
}

// expm1NearP is expm1(g)/g = Σ gⁿ/(n+1)!, highest degree first: 1/16!, …, 1/1!.
var expm1NearP = [16]float64{
	4.7794773323873853e-14, 7.6471637318198164e-13, 1.1470745597729725e-11, 1.6059043836821613e-10,
	2.08767569878681e-09, 2.505210838544172e-08, 2.7557319223985888e-07, 2.7557319223985893e-06,
	2.4801587301587302e-05, 0.00019841269841269841, 0.0013888888888888889, 0.0083333333333333332,
	0.041666666666666664, 0.16666666666666666, 0.5, 1,
}

// expm1Near is e^g − 1 for g in [ln 0.5, 0] (−0 for −0): g times its Taylor quotient of degree 15
// (the remainder is below 2⁻⁵⁶ of the result).
func expm1Near(g float64) float64 {
	p := expm1NearP[0]
	for _, c := range expm1NearP[1:] {
		p = math.FMA(p, g, c)
	}
	return float64(g * p)
}

// The portable state routines over T tokens, one per layout; the storage type is handled by
// loadState and storeState only. Each keeps the part of the state it works on in float32 scratch
// for all of a call's tokens — a column block of the [K][V] state, a row of the [V][K] one — and
// writes it to memory only where a token's state is stored. Per token they compute exactly what
// one single-token call does, so a call of T tokens gives the bits of T calls of one.

// kvTokens is the [K][V] routine: column blocks of genericBlock columns, each loaded into the
// K×n slab once, advanced through every token (kvBlock: a read and a write pass in L1) and
// stored at every token that keeps its state.
func kvTokens(h *headCall) {
	K, V, T := h.K, h.V, len(h.tok)/4
	for j0 := 0; j0 < V; j0 += genericBlock {
		n := min(genericBlock, V-j0)
		slab := h.slab[: K*n : K*n]
		for i := range K {
			loadState(slab[i*n:(i+1)*n], h.src, i*V+j0)
		}
		for τ := range T {
			tk := h.tok[4*τ : 4*τ+4]
			kvBlock(slab, slab, n, n, h.kh[τ*K:(τ+1)*K], h.qh[τ*K:(τ+1)*K],
				h.v[τ*h.vs+j0:τ*h.vs+j0+n], h.o[τ*V+j0:τ*V+j0+n], tk[0], tk[1], tk[2], tk[3], h.chanAt(τ))
			if d := h.dst[τ]; !d.none() {
				for i := range K {
					storeState(d, i*V+j0, slab[i*n:(i+1)*n])
				}
			}
		}
	}
}

// vkTokens is the [V][K] routine: row j (column j of the maths, K contiguous) is loaded once,
// advanced through every token and stored at every token that keeps its state.
func vkTokens(h *headCall) {
	K := h.K
	row := h.slab[:K:K]
	for j := range h.V {
		loadState(row, h.src, j*K)
		vkRow(row, j, h.V, h.kh, h.qh, h.v, h.vs, h.o, h.tok, h.ch, func(τ int) stateRef { return h.dst[τ] })
	}
}

// vkRow advances row j of a [V][K] head (row: its K elements, loaded) through the tokens of tok:
// it writes o[τ·V+j], and the row after token τ to dst(τ) from element j·K unless that is none.
// ch is the per-channel gate ([T][4K], headCall.ch) or nil.
func vkRow(row []float32, j, V int, kh, qh, v []float32, vs int, o, tok, ch []float32, dst func(τ int) stateRef) {
	K := len(row)
	for τ := range len(tok) / 4 {
		tk := tok[4*τ : 4*τ+4]
		em1, eg, beta, kq := tk[0], tk[1], tk[2], tk[3]
		near := em1 >= nearOne
		kh, qh := kh[τ*K:(τ+1)*K], qh[τ*K:(τ+1)*K]
		rk, rq := kh, qh
		if ch != nil {
			c := ch[4*K*τ : 4*K*(τ+1)]
			rk, rq = c[:K], c[K:2*K]
		}
		kv, qs := dot2(row, rk, rq)
		d := beta * (v[τ*vs+j] - decay(kv, em1, eg, near))
		o[τ*V+j] = decay(qs, em1, eg, near) + kq*d
		if ch != nil {
			c := ch[4*K*τ+2*K : 4*K*(τ+1)]
			for i, x := range row {
				row[i] = decayCM(x, c[2*i], math.Float32bits(c[2*i+1])) + kh[i]*d
			}
		} else if near {
			for i, x := range row {
				row[i] = x + em1*x + kh[i]*d
			}
		} else {
			for i, x := range row {
				row[i] = eg*x + kh[i]*d
			}
		}
		if d := dst(τ); !d.none() {
			storeState(d, j*K, row)
		}
	}
}

// dot2 returns Σ r_i·a_i and Σ r_i·b_i, each over four interleaved partial sums
// ((s0 + s1) + (s2 + s3)), then the tail.
func dot2(r, a, b []float32) (float32, float32) {
	n := len(r)
	a, b = a[:n], b[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		x0, x1, x2, x3 := r[i], r[i+1], r[i+2], r[i+3]
		a0 += x0 * a[i]
		a1 += x1 * a[i+1]
		a2 += x2 * a[i+2]
		a3 += x3 * a[i+3]
		b0 += x0 * b[i]
		b1 += x1 * b[i+1]
		b2 += x2 * b[i+2]
		b3 += x3 * b[i+3]
	}
	sa, sb := (a0+a1)+(a2+a3), (b0+b1)+(b2+b3)
	for ; i < n; i++ {
		sa += r[i] * a[i]
		sb += r[i] * b[i]
	}
	return sa, sb
}

// loadState sets dst to the len(dst) elements of r from off: f32 as is, bf16 widened exactly,
// zeros when r is none.
func loadState(dst []float32, r stateRef, off int) {
	switch {
	case r.f32 != nil:
		copy(dst, r.f32[off:off+len(dst)])
	case r.bf16 != nil:
		src := r.bf16[off : off+len(dst)]
		for i, b := range src {
			dst[i] = math.Float32frombits(uint32(b) << 16)
		}
	default:
		clear(dst)
	}
}

// storeState writes src to r from off: to its f32 storage as is and to its bf16 storage rounded to
// nearest even (BF16RNE).
func storeState(r stateRef, off int, src []float32) {
	if r.f32 != nil {
		copy(r.f32[off:off+len(src)], src)
	}
	if r.bf16 != nil {
		dst := r.bf16[off : off+len(src)]
		for i, x := range src {
			dst[i] = BF16RNE(x)
		}
	}
}

// widenGeneric sets dst[i] to the float32 of the bf16 bits src[i] (exact).
func widenGeneric(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}
