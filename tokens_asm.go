//go:build (amd64 || arm64) && !purego

package gdnsimd

import "unsafe"

// routine is one assembly state routine over T tokens (gdn_amd64.s, gdn_arm64.s): it takes a
// stateArgs (gdn_args.go, generated with the routines) and these limits, which asmCell applies.
type routine struct {
	fn         func(a stateArgs)
	st         Storage // its storage: a narrow one's src is uint16 bits (and src32, carry the f32 state)
	minK, maxK int     // a head with K outside [minK, maxK] runs the generic routine of its format
	// oddRow: the routine takes the rows of a [V][K] head in pairs; the last row of an odd V
	// runs the portable arithmetic (vkOddRow). No model has an odd V.
	oddRow bool
	// snap (f32 routines) says when the routine writes the stores of a call with a store at every
	// token (verification) non-temporally, so that the call is one call of T tokens rather than T
	// calls of one (perToken). nil: never.
	snap *snapRule
	cvt  *bool // AVX-512 bf16: stateArgs.cvt, read per call (a test turns it off)
	work bool  // the routine reads stateArgs.work
	// chans: the routine takes the per-channel gate (stateArgs.ch); heads with one run the
	// generic routine otherwise.
	chans bool
}

// snapRule is a routine's condition for non-temporal snapshot stores (gofile.Snap): K%kMod == 0,
// K ≤ kMax, V%vMod == 0, V ≥ vMin and every store aligned to align bytes (0: no condition).
type snapRule struct{ kMod, kMax, vMod, vMin, align int }

// once reports whether a call of a head of K×V with these stores, one at every token, writes them
// non-temporally.
func (s *snapRule) once(K, V int, stores []unsafe.Pointer) bool {
	if s == nil || s.kMod > 0 && K%s.kMod != 0 || s.kMax > 0 && K > s.kMax || s.vMod > 0 && V%s.vMod != 0 || V < s.vMin {
		return false
	}
	for _, p := range stores {
		if s.align > 0 && uintptr(p)%uintptr(s.align) != 0 {
			return false
		}
	}
	return true
}

// narrow reports whether s keeps 16-bit words (a routine's uint16 src and stores, the f32 state
// between a call's chunks in src32 and carry), rounded at each store.
func (s Storage) narrow() bool { return s != StorageF32 }

// withRoutines fills the cells of im from its routines (nil: a format im does not implement)
// and returns im.
func withRoutines(im impl, rs *[storages][2]*routine) impl {
	for st := range rs {
		for l, r := range rs[st] {
			if r != nil {
				im.cells[st][l] = asmCell(r, genericImpl.cells[st][l])
			}
		}
	}
	return im
}

// asmCell is the one adapter between the driver and the assembly: it makes the stateFunc of r
// (generic runs the heads r's limits leave out). Every dst of an f32 routine is f32 (an f32 pool
// or the carry the driver adds at a chunk's end); a narrow (bf16) routine's stores are the dsts'
// bits and the carry the f32 part (only ever at the last token).
func asmCell(r *routine, generic stateFunc) stateFunc {
	return func(h *headCall) {
		K, V, T := h.K, h.V, len(h.dst)
		if T == 0 {
			return
		}
		if r.fits(h) == planGeneric {
			generic(h)
			return
		}
		hs := K * V
		if r.work && h.work == nil {
			h.work = new([workFloats]float32)
		}
		a := stateArgs{K: K, V: V, T: T, vs: h.vs,
			kh: first(h.kh, T*K), qh: first(h.qh, T*K), v: first(h.v, (T-1)*h.vs+V), o: first(h.o, T*V), tok: first(h.tok, 4*T),
			pf: unsafe.SliceData(h.pf), npf: len(h.pf)}
		if h.ch != nil {
			a.ch = first(h.ch, 4*T*K)
		}
		if n := len(h.nx.f32); n > 0 {
			a.nx, a.nxn = unsafe.Pointer(&h.nx.f32[0]), 4*n
		} else if n := len(h.nx.bits); n > 0 {
			a.nx, a.nxn = unsafe.Pointer(&h.nx.bits[0]), 2*n
		}
		if r.work {
			a.work = h.work
		}
		stores := h.stores[:T]
		every, narrow := T > 1, r.st.narrow()
		for τ, d := range h.dst {
			stores[τ] = nil
			if narrow && d.bits != nil {
				stores[τ] = unsafe.Pointer(first(d.bits, hs))
			}
			if !narrow && d.f32 != nil {
				stores[τ] = unsafe.Pointer(first(d.f32, hs))
			}
			every = every && stores[τ] != nil
			if narrow && d.f32 != nil {
				if τ != T-1 {
					panic("gdnsimd: an f32 store before the last token of a narrow storage's call")
				}
				a.carry = first(d.f32, hs)
			}
		}
		a.stores = unsafe.SliceData(stores)
		switch {
		case !narrow:
			src := h.src.f32
			if src == nil {
				src = h.zero32
			}
			a.src = unsafe.Pointer(first(src, hs))
		case h.src.f32 != nil: // the previous chunk's carry
			a.src, a.src32 = unsafe.Pointer(first(h.zero16, hs)), first(h.src.f32, hs)
		case h.src.bits != nil:
			a.src = unsafe.Pointer(first(h.src.bits, hs))
		default:
			a.src = unsafe.Pointer(first(h.zero16, hs))
		}
		r.run(r.plan(&a, every), a)
		clear(stores)
	}
}

// headPlan is how a head call runs on a routine: chosen in one place, fits then plan (the driver
// chooses only between its single-token path, driver.token, for the [K][V] f32 format's decode,
// and a head call).
type headPlan uint8

const (
	planGeneric  headPlan = iota // the portable routine of the format: K outside the routine's range, or a per-channel gate it does not take
	planTokens                   // one call of T tokens
	planOne                      // one token with an f32 store: the [K][V] f32 routines' whole-row plan (dst1, tok1; the others ignore them)
	planPerToken                 // T calls of planOne: a store at every token, f32, where the routine has no non-temporal snapshot stores (perToken)
)

// fits is planGeneric if h cannot run on r, else planTokens.
func (r *routine) fits(h *headCall) headPlan {
	if h.K < r.minK || h.K > r.maxK || h.ch != nil && !r.chans {
		return planGeneric
	}
	return planTokens
}

// plan is the plan of a head call that fits r, given its arguments (a.stores set; every: a store
// at every token, T > 1).
func (r *routine) plan(a *stateArgs, every bool) headPlan {
	switch {
	case !r.st.narrow() && every && !r.snap.once(a.K, a.V, unsafe.Slice(a.stores, a.T)):
		return planPerToken
	case !r.st.narrow() && a.T == 1 && *a.stores != nil:
		return planOne
	}
	return planTokens
}

// run runs a head call's arguments a on r by plan p (not planGeneric).
func (r *routine) run(p headPlan, a stateArgs) {
	switch p {
	case planPerToken:
		perToken(r, a)
	case planOne:
		a.dst1, a.tok1 = *a.stores, *(*[4]float32)(unsafe.Pointer(a.tok))
		r.call(a)
	default:
		r.call(a)
	}
}

// call runs r on a (with the AVX-512 bf16 routines' cvt) and then, for an odd V of a routine
// that takes rows in pairs, the last row (vkOddRow, in work).
func (r *routine) call(a stateArgs) {
	if r.cvt != nil {
		a.cvt = *r.cvt
	}
	r.fn(a)
	if r.oddRow && a.V%2 == 1 {
		vkOddRow(&a, r.st)
	}
}

// perToken (the routines and shapes without non-temporal snapshot stores: once) runs the tokens
// of a one call each, token τ from the state token τ − 1 stored (src for the first) into its own
// store: the calls of a snapshot after every token (speculative verification). One call of T
// tokens keeps column blocks or row groups in the cache across the tokens and writes each
// snapshot in pieces, a piece per block and token, hopping between the T snapshots; calls of one
// token write each snapshot as one sequential stream, which memory takes about twice as fast when
// the snapshots do not fit the caches (Qwen3-Next, B = 8, T = 4, avx512 before its non-temporal
// stores: 6.4–7.5 ms → 3.6–3.8 ms a call). The routines that write those snapshots non-temporally
// need no such split: one call of T tokens, with neither the hops' cost nor the write-allocate
// reads, takes 2.2–2.3 ms. The bits are the same: the routines give T calls of one token the bits
// of one call of T tokens (the state stays float32 between tokens). f32 routines only.
func perToken(r *routine, a stateArgs) {
	K, V, T := a.K, a.V, a.T
	stores := unsafe.Slice(a.stores, T)
	one := a
	one.T, one.pf, one.npf, one.nx, one.nxn = 1, nil, 0, nil, 0 // the next call's state: in the last call
	for τ := range T {
		one.stores = &stores[τ]
		one.kh, one.qh = at(a.kh, τ*K), at(a.qh, τ*K)
		one.v, one.o, one.tok = at(a.v, τ*a.vs), at(a.o, τ*V), at(a.tok, 4*τ)
		if a.ch != nil {
			one.ch = at(a.ch, 4*τ*K)
		}
		if τ == T-1 {
			one.nx, one.nxn = a.nx, a.nxn
		}
		r.run(r.plan(&one, false), one)
		one.src = stores[τ]
	}
}

// first is the start of x's first n elements: x[:n] panics (as an index out of range) if x is
// shorter, so that no routine is given less than it reads or writes.
func first[E any](x []E, n int) *E { return unsafe.SliceData(x[:n]) }

// at is &p[i].
func at(p *float32, i int) *float32 { return (*float32)(unsafe.Add(unsafe.Pointer(p), 4*i)) }

// vkOddRow runs the last row of a [V][K] head through the portable routine's arithmetic (vkRow):
// from a's src (src32 when not nil), to a's stores (rounded to st if narrow) and the last token's
// state to the carry when not nil. Its row is the first K floats of a's work space (the routines
// with oddRow take one): nothing is allocated.
func vkOddRow(a *stateArgs, st Storage) {
	K, V, T, hs := a.K, a.V, a.T, a.K*a.V
	in := stateRef{st: st}
	switch {
	case a.src32 != nil:
		in.f32 = unsafe.Slice(a.src32, hs)
	case st.narrow():
		in.bits = unsafe.Slice((*uint16)(a.src), hs)
	default:
		in.f32 = unsafe.Slice((*float32)(a.src), hs)
	}
	stores := unsafe.Slice(a.stores, T)
	row, j := a.work[:K:K], V-1
	loadState(row, in, j*K)
	vkRow(row, j, V, unsafe.Slice(a.kh, T*K), unsafe.Slice(a.qh, T*K), unsafe.Slice(a.v, (T-1)*a.vs+V), a.vs,
		unsafe.Slice(a.o, T*V), unsafe.Slice(a.tok, 4*T), nil, func(τ int) stateRef {
			d := stateRef{st: st}
			switch p := stores[τ]; {
			case p == nil:
			case st.narrow():
				d.bits = unsafe.Slice((*uint16)(p), hs)
			default:
				d.f32 = unsafe.Slice((*float32)(p), hs)
			}
			if τ == T-1 && a.carry != nil {
				d.f32 = unsafe.Slice(a.carry, hs)
			}
			return d
		})
}

// single is impl.state of an assembly kernel: the T = 1 plan of its [K][V] f32 routine fn (one
// token from sIn to dst1 = sOut), any K. K = len(kh) = len(qh), V = len(v) = len(o), len(sIn) =
// len(sOut) = K·V (not checked; sOut may be sIn). The scalars travel in the argument itself
// (tok1): nothing on the stack is pointed to, so nothing is moved to the heap.
func single(fn func(a stateArgs)) func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32) {
	return func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32) {
		fn(stateArgs{K: len(kh), V: len(v), T: 1, vs: len(v), src: unsafe.Pointer(unsafe.SliceData(sIn)), dst1: unsafe.Pointer(unsafe.SliceData(sOut)),
			kh: unsafe.SliceData(kh), qh: unsafe.SliceData(qh), v: unsafe.SliceData(v), o: unsafe.SliceData(o), tok1: [4]float32{em1, eg, beta, kq}})
	}
}

// gatesChecked makes impl.gates of a gates routine that does not check its lengths: every slice
// is cut to len(a) first (b and beta unless b is empty), so that a short one panics as
// gatesGeneric's indexing does instead of being read or written past.
func gatesChecked(f func(beta, em1, eg, b, a, dtb []float32, rate []float64, form uint8, lb float64)) gatesFunc {
	return func(beta, em1, eg, b, a, dtb []float32, rate []float64, form GateForm, lb float64) {
		n := len(a)
		if len(b) > 0 {
			beta, b = beta[:n], b[:n]
		}
		f(beta, em1[:n], eg[:n], b, a, dtb[:n], rate[:n], uint8(form), lb)
	}
}

// chansChecked makes impl.chans of a chans routine that takes whole vectors of lanes channels and
// does not check its lengths: every slice is cut to n = len(em1) (pairs to 2n) first, so that a
// short one panics as chansGeneric's indexing does; the routine takes the whole vectors, and
// chansGeneric the n mod lanes channels after them (the same bits).
func chansChecked(f func(kx, qx, pairs, em1, eg, kh, qh []float32), lanes int) func(kx, qx, pairs, em1, eg, kh, qh []float32) {
	return func(kx, qx, pairs, em1, eg, kh, qh []float32) {
		n := len(em1)
		kx, qx, pairs, eg, kh, qh = kx[:n], qx[:n], pairs[:2*n], eg[:n], kh[:n], qh[:n]
		w := n - n%lanes
		f(kx[:w], qx[:w], pairs[:2*w], em1[:w], eg[:w], kh[:w], qh[:w])
		chansGeneric(kx[w:], qx[w:], pairs[2*w:], em1[w:], eg[w:], kh[w:], qh[w:])
	}
}

// convChecked makes impl.conv of a conv routine that takes whole vectors of lanes channels (lanes
// 1: every channel) and checks nothing: every length is checked first, as convGeneric's first
// lines do (a panic before any write: u holds (T−1)·us + n elements, w (W−1)·ws + n, x T+W−1
// rows of at least n; a negative stride or W < 1 panics too), then the routine takes the whole
// vectors and convFrom the n mod lanes channels after them (the same bits).
func convChecked(f func(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int), lanes int) func(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int) {
	return func(u []float32, us int, x [][]float32, w []float32, ws int, bias []float32, W, T int) {
		n := len(bias)
		if T <= 0 || n == 0 {
			return
		}
		if us < 0 || ws < 0 || W < 1 {
			panic("gdnsimd: conv: a negative stride or no tap")
		}
		_, _, _ = u[(T-1)*us+n-1], x[T+W-2], w[(W-1)*ws+n-1]
		for _, r := range x[:T+W-1] {
			_ = r[n-1]
		}
		v := n - n%lanes
		if v > 0 {
			f(u, us, x, w, ws, bias[:v], W, T)
		}
		if v < n {
			convFrom(u[v:], us, x, v, w[v:], ws, bias[v:], W, T)
		}
	}
}
