// Package gates64consts is the one table of the float64 gates' constants (gates.go: exp64,
// log1p01, expm1Near, gate1) for the AVX-512, AVX2 and NEON generators, as float64: the value Go
// gives each constant where the Go code uses it. Its test reads gates.go and compares.
package gates64consts

// exp64's clamps, rounding magic (2⁵²·1.5) and range reduction; softplus64's threshold and
// its split between expm1 and exp (ln 0.5); the 0.5 of exp64's k1 = round(k/2).
const (
	Hi      = 710.0
	Lo      = -746.0
	Magic   = 6755399441055744.0
	Log2e   = 1.4426950408889634
	Ln2Hi   = 0.69314718055994529
	Ln2Lo   = 2.3190468138462996e-17
	Twenty  = 20.0
	Ln2Half = -0.6931471805599453
	Half    = 0.5
	Bias    = 1023      // added to k + Magic's bits, then shifted left by 52: 2^k
	Tiny    = 0x1p-1021 // log1p01(y) is y below it
)

// NearOne is the em1 from which the state decays as x + em1·x rather than eg·x (SPEC Part A; the
// library's nearOne): every generator's decay form takes it from here.
const NearOne = -0.5

// FormSoftplus and FormBounded are the gate forms as the gates routines take them (their form
// argument: the library's GateSoftplus and GateBounded).
const (
	FormSoftplus = 0
	FormBounded  = 1
)

// ExpP is exp64's polynomial, Log1pP log1p01's, Expm1P expm1Near's: highest degree first.
var (
	ExpP = [14]float64{
		1.6059043836821613e-10, 2.08767569878681e-09, 2.505210838544172e-08, 2.7557319223985888e-07,
		2.7557319223985893e-06, 2.4801587301587302e-05, 0.00019841269841269841, 0.0013888888888888889,
		0.0083333333333333332, 0.041666666666666664, 0.16666666666666666, 0.5, 1, 1,
	}
	Log1pP = [16]float64{
		0.030303030303030304, 0.032258064516129031, 0.034482758620689655, 0.037037037037037035,
		0.040000000000000001, 0.043478260869565216, 0.047619047619047616, 0.052631578947368418,
		0.058823529411764705, 0.066666666666666666, 0.076923076923076927, 0.090909090909090912,
		0.1111111111111111, 0.14285714285714285, 0.20000000000000001, 0.33333333333333331,
	}
	Expm1P = [16]float64{
		4.7794773323873853e-14, 7.6471637318198164e-13, 1.1470745597729725e-11, 1.6059043836821613e-10,
		2.08767569878681e-09, 2.505210838544172e-08, 2.7557319223985888e-07, 2.7557319223985893e-06,
		2.4801587301587302e-05, 0.00019841269841269841, 0.0013888888888888889, 0.0083333333333333332,
		0.041666666666666664, 0.16666666666666666, 0.5, 1,
	}
)
