package fuzz

import (
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/gdnsimd/gdnsimd/internal/oracle"
)

// FuzzStep's bytes: a fixed header (below) that picks the shape, offsets, epsilon, an optional
// NaN/Inf and one value class per tensor; the values themselves come from a PRNG seeded with a
// hash of all the bytes, so every mutation changes them.
const (
	hB         = iota // B = x % 6
	hHK               // KHeads = 1 + x%4 (x < 0xF0), else 1 + x%16
	hRatio            // VHeads/KHeads = 1 + x%6
	hK0               // K: see dim
	hK1               //
	hV0               // V: see dim
	hV1               //
	hOffsets          // seed of the slice offsets (0–15 floats each)
	hEps              // RMSEps: see epsilons
	hPoison           // x < 0xC0: none; else one NaN/±Inf in q, k, v, z, b, a or the state
	hPoisonVal        // NaN, +Inf, -Inf
	hPoisonIdx        // which element (mod the tensor's length)
	hClassQ           // value classes, see class
	hClassK
	hClassV
	hClassZ
	hClassB
	hClassA
	hClassState
	hClassParams // A_log, dt_bias
	hClassNorm   // norm_weight
	hSplit       // seed of the head ranges of the split run
	headerLen
)

// maxStateElems caps B·VHeads·K·V by reducing B, then the ratio, then KHeads (never K or V, so
// K = V = 300 runs with one head), so that a million executions are feasible on two cores.
const maxStateElems = 1 << 14

// Value classes (the low 3 bits of a class byte; the high bits pick an exponent).
const (
	cOrdinary = iota // N(0, 1)
	cTiny            // N(0, 1)·10^−(5…30)
	cHuge            // N(0, 1)·10^(3…30) (a and b: up to MaxFloat32)
	cZero            // all zero
	cDenormal        // N(0, 1) with about half the elements replaced by float32 denormals
	cMixed           // each element from ordinary, tiny, huge, zero or denormal
	cConstant        // one N(0, 1) value repeated (structured, e.g. a rank-1 state)
	cSmall           // N(0, 0.05): a realistic decode state
	nClasses
)

var epsilons = [...]float32{0, 1e-6, 1e-5, 1e-30, 1e-3, 1, 0x1p-149, 1e-6}

// tensor indices (poison targets and offsets)
const (
	tQ = iota
	tK
	tV
	tZ
	tB
	tA
	tState
	nTensors
)

// stepCase is one decoded FuzzStep input.
type stepCase struct {
	d       oracle.Dims
	in      oracle.Inputs // in.RMSEps is float64(the float32 the layer uses)
	eps     float32       // Config.RMSEps (0 = the default)
	offsets [nTensors + 3]int
	poison  int // tensor index + 1 of the NaN/Inf, 0 if none
	pIdx    int // its element
	split   [2]int
}

func header(data []byte, i int) byte {
	if i < len(data) {
		return data[i]
	}
	return 0
}

// dim decodes K or V from two bytes: 1–20 (x0 < 0x80, most often), 1–72 (x0 < 0xC0) or 1–300.
func dim(x0, x1 byte) int {
	switch {
	case x0 < 0x80:
		return 1 + int(x0)%20
	case x0 < 0xC0:
		return 1 + int(x1)%72
	default:
		return 1 + (int(x0&0x3F)<<8|int(x1))%300
	}
}

// encodeDim is dim's inverse.
func encodeDim(n int) (byte, byte) {
	switch {
	case n <= 20:
		return byte(n - 1), 0
	case n <= 72:
		return 0x80, byte(n - 1)
	default:
		return 0xC0 | byte((n-1)>>8), byte(n - 1)
	}
}

// decodeStep turns fuzz bytes into a case.
func decodeStep(data []byte) stepCase {
	h := func(i int) byte { return header(data, i) }
	var c stepCase
	hk := 1 + int(h(hHK))%4
	if h(hHK) >= 0xF0 {
		hk = 1 + int(h(hHK))%16
	}
	d := oracle.Dims{B: int(h(hB)) % 6, HK: hk, K: dim(h(hK0), h(hK1)), V: dim(h(hV0), h(hV1))}
	ratio := 1 + int(h(hRatio))%6
	for d.B*d.HK*ratio*d.K*d.V > maxStateElems && d.B*d.HK*ratio > 1 {
		switch {
		case d.B > 1:
			d.B--
		case ratio > 1:
			ratio--
		default:
			d.HK--
		}
	}
	d.HV = d.HK * ratio
	c.d = d

	fh := fnv.New64a()
	fh.Write(data)
	r := rand.New(rand.NewPCG(fh.Sum64(), 0x9e3779b97f4a7c15))
	or := rand.New(rand.NewPCG(uint64(h(hOffsets)), 1))
	for i := range c.offsets {
		c.offsets[i] = or.IntN(16)
	}
	sr := rand.New(rand.NewPCG(uint64(h(hSplit)), 2))
	heads := d.Heads()
	c.split = [2]int{sr.IntN(heads + 1), sr.IntN(heads + 1)}
	if c.split[0] > c.split[1] {
		c.split[0], c.split[1] = c.split[1], c.split[0]
	}

	c.eps = epsilons[int(h(hEps))%len(epsilons)]
	eps := c.eps
	if eps == 0 {
		eps = 1e-6 // gdn.DefaultRMSEps
	}
	kl, vl := d.B*d.HK*d.K, heads*d.V
	in := oracle.Inputs{RMSEps: float64(eps)}
	in.Q = values(r, kl, h(hClassQ), 30)
	in.K = values(r, kl, h(hClassK), 30)
	in.V = values(r, vl, h(hClassV), 30)
	in.Z = clampAll(values(r, vl, h(hClassZ), 30), 80) // silu: exp32 clamps beyond ±87
	in.B = values(r, heads, h(hClassB), 38)
	in.A = values(r, heads, h(hClassA), 38)
	in.State = values(r, heads*d.K*d.V, h(hClassState), 30)
	in.ALog = clampAll(values(r, d.HV, h(hClassParams), 30), 10)
	in.DtBias = clampAll(values(r, d.HV, h(hClassParams)>>1, 30), 50)
	in.NormWeight = clampAll(values(r, d.V, h(hClassNorm), 30), 1e10)
	c.in = in

	if p := h(hPoison); p >= 0xC0 {
		c.poison = 1 + int(p-0xC0)%nTensors
		t := c.tensor(c.poison - 1)
		if len(t) > 0 {
			c.pIdx = int(h(hPoisonIdx)) % len(t)
			t[c.pIdx] = [...]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[int(h(hPoisonVal))%3]
		} else {
			c.poison = 0
		}
	}
	return c
}

func (c *stepCase) tensor(t int) []float32 {
	return [...][]float32{c.in.Q, c.in.K, c.in.V, c.in.Z, c.in.B, c.in.A, c.in.State}[t]
}

// poisoned reports whether flattened head bh reads the NaN/Inf.
func (c *stepCase) poisoned(bh int) bool {
	d := c.d
	switch c.poison - 1 {
	case tQ, tK:
		b, h := bh/d.HV, bh%d.HV
		return c.pIdx/d.K == b*d.HK+h/(d.HV/d.HK)
	case tV, tZ:
		return c.pIdx/d.V == bh
	case tB, tA:
		return c.pIdx == bh
	case tState:
		return c.pIdx/(d.K*d.V) == bh
	}
	return false
}

// values makes n values of class x; huge values reach 10^maxExp (capped at MaxFloat32).
func values(r *rand.Rand, n int, x byte, maxExp int) []float32 {
	class, e := int(x)%nClasses, int(x)/nClasses // e in 0..31
	v := make([]float32, n)
	c := float32(r.NormFloat64())
	for i := range v {
		cl := class
		if cl == cMixed {
			cl = []int{cOrdinary, cTiny, cHuge, cZero, cDenormal}[r.IntN(5)]
			e = r.IntN(32)
		}
		v[i] = value(r, cl, e, maxExp, c)
	}
	return v
}

// pow10 is 10^n for n in [-40, 40].
var pow10 = func() (p [81]float64) {
	for i := range p {
		p[i] = math.Pow(10, float64(i-40))
	}
	return p
}()

func value(r *rand.Rand, class, e, maxExp int, c float32) float32 {
	g := r.NormFloat64()
	switch class {
	case cTiny:
		return float32(g * pow10[40-(5+e*25/31)])
	case cHuge:
		x := g * pow10[40+3+e*(maxExp-3)/31]
		return float32(max(-math.MaxFloat32, min(math.MaxFloat32, x)))
	case cZero:
		return 0
	case cDenormal:
		if r.IntN(2) == 0 {
			return float32(g)
		}
		d := math.Float32frombits(uint32(1 + r.IntN(1<<23-1)))
		if g < 0 {
			d = -d
		}
		return d
	case cConstant:
		return c
	case cSmall:
		return float32(0.05 * g)
	}
	return float32(g)
}

func clampAll(v []float32, m float32) []float32 {
	for i, x := range v {
		v[i] = max(-m, min(m, x))
	}
	return v
}

// encodeStep builds FuzzStep bytes for a shape, classes (q, k, v, z, b, a, state, params, norm),
// an epsilon index and a poison byte; extra bytes vary the values.
func encodeStep(d oracle.Dims, classes [9]byte, eps, poison, poisonVal, poisonIdx byte, extra ...byte) []byte {
	b := make([]byte, headerLen)
	b[hB] = byte(d.B)
	b[hHK] = byte(d.HK - 1)
	if d.HK > 4 {
		b[hHK] = 0xF0 + byte(d.HK-1)
	}
	b[hRatio] = byte(d.HV/d.HK - 1)
	b[hK0], b[hK1] = encodeDim(d.K)
	b[hV0], b[hV1] = encodeDim(d.V)
	b[hOffsets] = byte(d.K*7 + d.V)
	b[hEps] = eps
	b[hPoison], b[hPoisonVal], b[hPoisonIdx] = poison, poisonVal, poisonIdx
	copy(b[hClassQ:], classes[:])
	b[hSplit] = byte(d.B*3 + d.HV)
	return append(b, extra...)
}
