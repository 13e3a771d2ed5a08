package gdnsimd

import "math"

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
	//	y_j = o_j·r·w_j·silu(z_j)                    silu(z) = z / (1 + exp32(−z))
	//
	// and stores y to outF (if non-nil) and bf16RNE(y) to out (if non-nil).
	gate func(o, z, w []float32, eps float32, out []uint16, outF []float32)

	// l2 returns Σq², Σk² and Σk·q accumulated in float64 (len(q) == len(k)).
	l2 func(q, k []float32) (qq, kk, kq float64)

	// scale sets dst[i] = src[i]·f for i < len(src) (one float32 multiply each: the bits are the
	// same in every kernel); it panics if dst is shorter than src.
	scale func(dst, src []float32, f float32)

	// widen sets dst[i] to the float32 of the bf16 bits src[i] (exact; len(src) ≥ len(dst)).
	widen func(dst []float32, src []uint16)

	// gates sets beta[i], em1[i], eg[i] to the head gates of the lane b[i], a[i], alog[i],
	// dtb[i] for i < len(b) (gatesGeneric; the other slices hold at least len(b) elements).
	gates func(beta, em1, eg, b, a, alog, dtb []float32)

	// cells are the state routines over T tokens by format, [bf16][layout]; a nil cell is a
	// format the kernel does not implement.
	cells [2][2]stateFunc

	// tokF32 and tokBF16 are an assembly kernel's state routines over T tokens by layout, in
	// the flat signature the cells adapt (asmTokensF32, asmTokensBF16; nil: none).
	tokF32  [2]tokensF32
	tokBF16 [2]tokensBF16
	// prefetches reports that the routines over T tokens issue the prefetch list (headCall.pf).
	prefetches bool
}

var genericImpl = impl{
	name: "generic", state: stateGeneric, gate: gateGeneric, l2: l2Generic, scale: scale, widen: widenGeneric, gates: gatesGeneric,
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
		kvBlock(sIn[j0:], sOut[j0:], V, n, kh, qh, v[j0:j0+n], o[j0:j0+n], em1, eg, beta, kq)
	}
}

// kvBlock is one token over a block of n columns of a [K][V] state: row i of the block starts at
// sIn[i·rs] (sOut[i·rs]; sOut may be sIn), K = len(kh). v and o are the block's columns.
func kvBlock(sIn, sOut []float32, rs, n int, kh, qh, v, o []float32, em1, eg, beta, kq float32) {
	K := len(kh)
	qh = qh[:K]
	near := em1 >= nearOne
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
		k0, k1, k2, k3 := kh[i], kh[i+1], kh[i+2], kh[i+3]
		q0, q1, q2, q3 := qh[i], qh[i+1], qh[i+2], qh[i+3]
		for j := range ak {
			x0, x1, x2, x3 := r0[j], r1[j], r2[j], r3[j]
			ak[j] += k0*x0 + k1*x1 + k2*x2 + k3*x3
			aq[j] += q0*x0 + q1*x1 + q2*x2 + q3*x3
		}
	}
	for ; i < K; i++ {
		row := sIn[i*rs:][:n]
		ki, qi := kh[i], qh[i]
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

func gateGeneric(o, z, w []float32, eps float32, out []uint16, outF []float32) {
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
		y := x * r * w[j] * Silu32(z[j])
		if outF != nil {
			outF[j] = y
		}
		if out != nil {
			out[j] = BF16RNE(y)
		}
	}
}

// Silu32 is z·sigmoid(z) = z / (1 + Exp32(−z)), the gate of the gated RMSNorm.
func Silu32(z float32) float32 { return z / (1 + Exp32(-z)) }

// Exp32 is the float32 exponential every kernel uses for the silu gate: Cephes' expf (Moshier), a
// degree-5 polynomial after reducing x by n·ln2 (n = round(x·log2 e)), within 2 ulp of exp(x).
// x is clamped to [-87.33654, 88] so the result is a finite normal float (n in [-126, 127]); NaN
// stays NaN.
func Exp32(x float32) float32 {
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
