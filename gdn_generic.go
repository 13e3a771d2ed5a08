package gdnsimd

import (
	"math"
)

// impl is one kernel: the pieces the driver (driver.go) calls and the state routines over T
// tokens of each format (cells). Every kernel implements the same pieces with the same arithmetic;
// the portable Go ones (this file, gdn_generic_gates.go for the gates and their float64 maths) are
// the reference the assembly is tested against (see the doc comment of each).
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
	// rate[i] for i < len(a), the log-decay of the form (lb: GateBounded's bound; gatesGeneric,
	// the other slices hold at least len(a) elements).
	gates gatesFunc

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
	cells [storages][2]stateFunc

	// prefetches reports that the routines over T tokens issue the prefetch list (headCall.pf).
	prefetches bool
}

var genericImpl = impl{
	name: "generic", state: stateGeneric, gate: gateGeneric, l2: l2Generic, scale: scale, widen: widenGeneric, gates: gatesGeneric,
	chans: chansGeneric, conv: convGeneric,
	cells: [storages][2]stateFunc{StorageF32: {kvTokens, vkTokens}, StorageBF16: {kvTokens, vkTokens}},
}

// l2Eps is the epsilon added under the root of the q/k l2 norms (fixed by the models).
const l2Eps = 1e-6

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
//	g    = −rate·softplus(a + dt_bias) (GateSoftplus), or lb·sigmoid(rate·(a + dt_bias)) (GateBounded)
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

// loadState sets dst to the len(dst) elements of r from off: f32 as is, a narrow storage's bits
// widened exactly, zeros when r is none.
func loadState(dst []float32, r stateRef, off int) {
	switch {
	case r.f32 != nil:
		copy(dst, r.f32[off:off+len(dst)])
	case r.bits != nil:
		r.st.widen(dst, r.bits[off:off+len(dst)])
	default:
		clear(dst)
	}
}

// storeState writes src to r from off: to its f32 storage as is and to its bits rounded to their
// storage.
func storeState(r stateRef, off int, src []float32) {
	if r.f32 != nil {
		copy(r.f32[off:off+len(src)], src)
	}
	if r.bits != nil {
		r.st.round(r.bits[off:off+len(src)], src)
	}
}

// widenGeneric sets dst[i] to the float32 of the bf16 bits src[i] (exact).
func widenGeneric(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}
