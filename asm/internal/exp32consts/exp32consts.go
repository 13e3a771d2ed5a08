// Package exp32consts is the one table of Exp32's constants (gdn_generic_gates.go) for the generators of
// both assembly files, as float32: the value Go gives each constant where Exp32 uses it.
package exp32consts

// Exp32's clamps, its range reduction x − n·C1 − n·C2 (n = floor(x·Log2e + Half)), the degree-5
// polynomial P[0]·r⁵ + … + P[5] (Horner, P[0] first) finished as p·r·r + r + One, and 2^n built as
// (n + Bias) << Shift.
const (
	Hi    float32 = 88.0
	Lo    float32 = -87.33654
	Log2e float32 = 1.44269504088896341
	Half  float32 = 0.5
	C1    float32 = 0.693359375
	C2    float32 = -2.12194440e-4
	One   float32 = 1
	Bias          = 127
	Shift         = 23
)

// P is the polynomial, highest degree first (P[5] = 5.0000001201e-1 rounds to 0.5 in float32).
var P = [6]float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}
