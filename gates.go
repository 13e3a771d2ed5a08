package gdnsimd

import "math"

// The head gates (SPEC Part A) of many (token, value head) lanes at once:
//
//	beta = sigmoid(b) = 1/(1 + exp(−b))
//	g    = −exp(A_log)·softplus(a + dt_bias)
//	em1  = expm1(g), eg = exp(g)
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

// gatesGeneric sets beta[i], em1[i] and eg[i] to the gates of the lane b[i], a[i] (the token's
// Beta and Gate entries of the head), alog[i], dtb[i] (the head's A_log and dt_bias), for
// i < len(b); every other slice holds at least len(b) elements.
func gatesGeneric(beta, em1, eg, b, a, alog, dtb []float32) {
	n := len(b)
	beta, em1, eg, a, alog, dtb = beta[:n], em1[:n], eg[:n], a[:n], alog[:n], dtb[:n]
	for i := range n {
		beta[i], em1[i], eg[i] = gate1(b[i], a[i], alog[i], dtb[i])
	}
}

// gate1 is one lane of gatesGeneric: gate64's values, each rounded once to float32.
func gate1(b, a, alog, dtb float32) (beta, em1, eg float32) {
	b64, em1d, egd := gate64(b, a, alog, dtb)
	return float32(b64), float32(em1d), float32(egd)
}

// gate64 is one lane's gates in float64, before their rounding to float32.
func gate64(b, a, alog, dtb float32) (beta, em1, eg float64) {
	beta = 1 / (1 + exp64(-float64(b)))
	x := float64(a) + float64(dtb)
	// softplus(x) = x for x > 20, else log1p(exp(x)), computed as max(x, 0) + log1p(exp(−|x|)):
	// the same value, with log1p's argument in [0, 1].
	px := 0.0
	if x > 0 {
		px = x
	}
	sp := px + log1p01(exp64(-math.Abs(x)))
	if x > 20 {
		sp = x
	}
	g := float64(-exp64(float64(alog)) * sp)
	if g >= ln2Half {
		em1 = expm1Near(g)
		return beta, em1, 1 + em1
	}
	eg = exp64(g)
	return beta, eg - 1, eg
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
