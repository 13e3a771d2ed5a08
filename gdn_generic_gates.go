package gdnsimd

import (
	"math"
)

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

// GateForm is the form of a gate's log-decay (SPEC Parts A and C): Batch.GateForm, and the form
// argument of the gates pieces (gatesFunc), which every kernel branches on (logDecay64; asm/gates.go
// and asm/neon/gates.go take the values from gates64consts, tied to these by its test).
type GateForm uint8

const (
	GateSoftplus GateForm = 0 // g = −rate·softplus(a + dt_bias): the scalar gate, and Kimi's KDA gate
	GateBounded  GateForm = 1 // g = lb·sigmoid(rate·(a + dt_bias)), lb = Batch.LowerBound < 0 (fla's lower_bound)
	gateForms             = 2 // the number of forms
)

// gatesFunc is the gates piece (impl.gates): gatesGeneric's contract.
type gatesFunc func(beta, em1, eg, b, a, dtb []float32, rate []float64, form GateForm, lb float64)

// gatesGeneric sets em1[i] and eg[i] to the decay of the lane a[i] (a raw gate: the token's Gate
// entry of a head, or of a channel), dtb[i] (its dt_bias) and rate[i] (its head's rate exp(A_log),
// or −ssm_a) for i < len(a), the log-decay logDecay64's of the form (lb: the bounded form's
// bound); and, unless b is empty, beta[i] = sigmoid(b[i]). Every other slice holds at least
// len(a) elements.
func gatesGeneric(beta, em1, eg, b, a, dtb []float32, rate []float64, form GateForm, lb float64) {
	n := len(a)
	em1, eg, dtb, rate = em1[:n], eg[:n], dtb[:n], rate[:n]
	if len(b) > 0 {
		beta, b = beta[:n], b[:n]
		for i, x := range b {
			beta[i] = float32(sigmoid64(x))
		}
	}
	for i, x := range a {
		m, e := decay64(logDecay64(x, dtb[i], rate[i], form, lb))
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
// head's rate exp(A_log) (−ssm_a): −rate·softplus(a + dtb), or in the bounded form (the
// per-channel gate's, with its lower bound lb < 0) lb·sigmoid(rate·(a + dtb)).
func logDecay64(a, dtb float32, rate float64, form GateForm, lb float64) float64 {
	x := float64(a) + float64(dtb)
	if form == GateBounded {
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

// decayCM is decay(x) = c·x + (x & m) of a channel (chanForm).
func decayCM(x, c float32, m uint32) float32 {
	return c*x + math.Float32frombits(math.Float32bits(x)&m)
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

// expm1Near is e^g − 1 for g in [ln 0.5, 0] (−0 for −0): g times its Taylor quotient of degree 15
// (the remainder is below 2⁻⁵⁶ of the result).
func expm1Near(g float64) float64 {
	p := expm1NearP[0]
	for _, c := range expm1NearP[1:] {
		p = math.FMA(p, g, c)
	}
	return float64(g * p)
}

// ln2Half is ln(0.5): the split between the two formulas (near it both are exact to 2⁻⁵³); the
// decay's form itself is chosen from the float32 em1 (nearOne), the same way in every kernel.
const ln2Half = -0.6931471805599453

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

// expm1NearP is expm1(g)/g = Σ gⁿ/(n+1)!, highest degree first: 1/16!, …, 1/1!.
var expm1NearP = [16]float64{
	4.7794773323873853e-14, 7.6471637318198164e-13, 1.1470745597729725e-11, 1.6059043836821613e-10,
	2.08767569878681e-09, 2.505210838544172e-08, 2.7557319223985888e-07, 2.7557319223985893e-06,
	2.4801587301587302e-05, 0.00019841269841269841, 0.0013888888888888889, 0.0083333333333333332,
	0.041666666666666664, 0.16666666666666666, 0.5, 1,
}

// nearOne is the em1 from which decay(x) is x + em1·x rather than eg·x (eg ≥ 0.5).
const nearOne = -0.5
