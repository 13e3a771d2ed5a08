package fuzz

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/gdnsimd/gdnsimd/gdn"
)

// reader hands out the fuzz bytes one at a time, then zeros.
type reader struct {
	b []byte
	i int
}

func (r *reader) next() byte {
	if r.i < len(r.b) {
		r.i++
		return r.b[r.i-1]
	}
	return 0
}

// apiDim: mostly 1–8, sometimes 1–32, 0 or negative (1/16), or around MaxDim (1/16).
func (r *reader) apiDim() int {
	x := r.next()
	switch x >> 4 {
	case 0xA:
		return -int(x & 7) // 0 … −7
	case 0xC:
		return gdn.MaxDim - 2 + int(x&3) // MaxDim−2 … MaxDim+1
	case 0xE, 0xF:
		return 1 + int(x&31)
	}
	return 1 + int(x&7)
}

// Slice placements in FuzzAPI's arena.
const (
	pCorrect   = iota // the right length, its own memory
	pNil              // nil
	pWrongLen         // the right length ± 1…3 (or 0), its own memory
	pOverlap          // the right length at a random place in the arena (may overlap anything)
	pSameState        // Output.State only: the very same slice as Input.State
	pShifted          // Output.State only: Input.State's memory shifted by 1–3 floats
)

// apiSlot is one slice of a Step call: where it lives in the arena (floats; bf16 in halves).
type apiSlot struct {
	name  string
	nil   bool
	off   int // in float32s (bf16: in uint16s)
	n     int // elements
	bf16  bool
	isOut bool
}

func (s apiSlot) span() (lo, hi int) { // in bytes from the arena start
	if s.nil || s.n == 0 {
		return 0, 0
	}
	if s.bf16 {
		return 2 * s.off, 2 * (s.off + s.n)
	}
	return 4 * s.off, 4 * (s.off + s.n)
}

const maxArena = 1 << 16 // floats

// FuzzAPI (seed corpus: testdata/fuzz/FuzzAPI): arbitrary, often malformed configs and Step calls.
// New and Step must never panic, must return an error wrapping the right sentinel exactly when
// the call is invalid (decided here from the documented rules), and must write nothing after an
// error; a valid Step writes nothing but its outputs.
func FuzzAPI(f *testing.F) {
	f.Fuzz(checkAPI)
}

func checkAPI(t *testing.T, data []byte) {
	r := &reader{b: data}
	rng := rand.New(rand.NewPCG(uint64(len(data)), uint64(r.next())))
	c := gdn.Config{KHeads: r.apiDim(), VHeads: r.apiDim(), K: r.apiDim(), V: r.apiDim()}
	if x := r.next(); x < 0xC0 && c.KHeads > 0 && c.KHeads <= 8 { // usually a multiple
		c.VHeads = c.KHeads * (1 + int(x)%4)
	}
	paramLen := func(want int) []float32 {
		x := r.next()
		n := want
		switch {
		case x >= 0xF8:
			return nil
		case x >= 0xF0:
			n = want + int(x&3) - 2
		}
		n = max(0, min(n, maxArena))
		return randFloats(rng, n)
	}
	c.ALog, c.DtBias, c.NormWeight = paramLen(c.VHeads), paramLen(c.VHeads), paramLen(c.V)
	c.RMSEps = [...]float32{0, 1e-6, 1e-5, -1e-6, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)),
		1e-6, 0, 1e-5, 1e-3, 1, 1e-30, 0x1p-149, 1e-6, 0, 0, 0, 0, 1e-6, 1e-6, 1e-6, 1e-6,
		0, 0, 0, 0, 1e-6, 1e-6, 1e-6, 1e-5}[r.next()%32]
	c.Workers = [...]int{1, 0, 2, 3, -1, 1000, math.MinInt, 1, 1, 0, 2, 3, 1, 1, 0, 2}[r.next()%16]
	kernelNames := append([]string{"", "avx512", "avx2", "neon", "generic", "bogus", "AVX512"}, gdn.Kernels()...)
	if x := int(r.next()); x < 0x80 {
		c.Kernel = kernelNames[x%len(kernelNames)]
	} else {
		c.Kernel = gdn.Kernels()[x%len(gdn.Kernels())]
	}
	// The conv front: ConvWidth 0 (none) half the time, else 2, 4, 8 or a bad width (1, 9, −1, or
	// 0 with a weight); ConvWeight [C][W] and ConvBias [C] (or nil) of the right length, one
	// short or long, nil, or with a NaN or ±Inf.
	C := 2*c.KHeads*c.K + c.VHeads*c.V
	if x := r.next(); x&7 >= 4 {
		c.ConvWidth = [...]int{2, 4, 8, 0}[x&3]
		if x&3 == 3 {
			c.ConvWidth = [...]int{1, 9, -1, 0}[x>>3&3]
		}
		wantW := max(C, 1) * c.ConvWidth
		if c.ConvWidth < 1 {
			wantW = max(C, 1) * 4
		}
		switch y := r.next(); {
		case y >= 0xF0:
			c.ConvWeight = nil
		case y >= 0xE0:
			c.ConvWeight = convParam(rng, wantW+int(y&3)-2)
		default:
			c.ConvWeight = convParam(rng, wantW)
			if y >= 0xD0 && len(c.ConvWeight) > 0 {
				c.ConvWeight[int(y)%len(c.ConvWeight)] = [...]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0}[y&3]
			}
		}
		switch y := r.next(); {
		case y < 0x80:
		case y < 0xD0:
			c.ConvBias = convParam(rng, max(C, 0))
		case y < 0xE0:
			c.ConvBias = convParam(rng, max(C, 0)+int(y&3)-2)
		default:
			c.ConvBias = convParam(rng, max(C, 0))
			if len(c.ConvBias) > 0 {
				c.ConvBias[int(y)%len(c.ConvBias)] = [...]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0}[y&3]
			}
		}
	}

	// Validity of New, decided from the documented rules.
	var badConfig, badKernel bool
	for _, d := range []int{c.KHeads, c.VHeads, c.K, c.V} {
		badConfig = badConfig || d < 1 || d > gdn.MaxDim
	}
	badConfig = badConfig || c.VHeads%max(c.KHeads, 1) != 0 ||
		len(c.ALog) != c.VHeads || len(c.DtBias) != c.VHeads || len(c.NormWeight) != c.V ||
		!(c.RMSEps >= 0) || math.IsInf(float64(c.RMSEps), 0) || c.Workers < 0
	nonFinite := func(x float32) bool { return math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) }
	for _, p := range [][]float32{c.ALog, c.DtBias, c.NormWeight} { // randFloats makes none today
		badConfig = badConfig || slices.ContainsFunc(p, nonFinite)
	}
	// The conv front: ConvWidth 0 with neither ConvWeight nor ConvBias, or 2..MaxConvWidth with a
	// finite ConvWeight of C·W and a finite ConvBias of C or nil.
	if W := c.ConvWidth; W == 0 {
		badConfig = badConfig || c.ConvWeight != nil || c.ConvBias != nil
	} else {
		badConfig = badConfig || W < 2 || W > gdn.MaxConvWidth || len(c.ConvWeight) != C*W ||
			c.ConvBias != nil && len(c.ConvBias) != C ||
			slices.ContainsFunc(c.ConvWeight, nonFinite) || slices.ContainsFunc(c.ConvBias, nonFinite)
	}
	badKernel = c.Kernel != "" && !slices.Contains(gdn.Kernels(), c.Kernel)
	params := [][]float32{slices.Clone(c.ALog), slices.Clone(c.DtBias), slices.Clone(c.NormWeight), slices.Clone(c.ConvWeight), slices.Clone(c.ConvBias)}
	l, err := gdn.New(c)
	for i, p := range [][]float32{c.ALog, c.DtBias, c.NormWeight, c.ConvWeight, c.ConvBias} {
		if !slices.Equal(f32bits(p), f32bits(params[i])) {
			t.Fatalf("New modified its parameter slice %d", i)
		}
	}
	switch {
	case badConfig || badKernel:
		if err == nil {
			t.Fatalf("New(%s): no error, want one (bad config %v, bad kernel %v)", describe(c), badConfig, badKernel)
		}
		if !(badConfig && errors.Is(err, gdn.ErrConfig) || badKernel && errors.Is(err, gdn.ErrKernel)) {
			t.Fatalf("New(%s): %v does not wrap the sentinel of the violation (bad config %v, bad kernel %v)", describe(c), err, badConfig, badKernel)
		}
		return
	case err != nil:
		t.Fatalf("New(%s): %v, want no error", describe(c), err)
	}

	for range 1 + int(r.next())%2 {
		apiStep(t, r, rng, l, c)
	}
}

func describe(c gdn.Config) string {
	return fmt.Sprintf("KHeads %d VHeads %d K %d V %d len(ALog) %d len(DtBias) %d len(NormWeight) %d RMSEps %g Workers %d Kernel %q ConvWidth %d len(ConvWeight) %d (nil %v) len(ConvBias) %d (nil %v)",
		c.KHeads, c.VHeads, c.K, c.V, len(c.ALog), len(c.DtBias), len(c.NormWeight), c.RMSEps, c.Workers, c.Kernel,
		c.ConvWidth, len(c.ConvWeight), c.ConvWeight == nil, len(c.ConvBias), c.ConvBias == nil)
}

// convParam is n random weights (none for n < 0), capped at the arena size (then the length is
// wrong, as it is for too big a paramLen).
func convParam(rng *rand.Rand, n int) []float32 {
	return randFloats(rng, max(0, min(n, maxArena)))
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// apiStep builds one Step call in an arena, decides its validity and checks the outcome.
func apiStep(t *testing.T, r *reader, rng *rand.Rand, l *gdn.Layer, c gdn.Config) {
	B := int(r.next()) % 4
	heads := B * c.VHeads
	if x := r.next(); x >= 0xE0 { // len(Input.B) not a multiple of VHeads
		heads += 1 + int(x&3)
	}
	heads = min(heads, maxArena)
	want := func(name string) int { // the right length for the B the call implies
		b := heads / c.VHeads
		h := b * c.VHeads
		switch name {
		case "Input.Q", "Input.K":
			return b * c.KHeads * c.K
		case "Input.V", "Input.Z", "Output.Out", "Output.OutF32":
			return h * c.V
		case "Input.A":
			return h
		case "Input.State", "Output.State":
			return h * c.K * c.V
		}
		panic(name)
	}
	names := []string{"Input.Q", "Input.K", "Input.V", "Input.Z", "Input.B", "Input.A", "Input.State", "Output.State", "Output.Out", "Output.OutF32"}
	slots := make([]apiSlot, len(names))
	next := 0 // the arena's fill level (floats)
	var overlapping []int
	for i, name := range names {
		s := apiSlot{name: name, bf16: name == "Output.Out", isOut: i >= 7}
		if name == "Input.B" {
			s.n = heads
		} else {
			s.n = want(name)
		}
		x := r.next()
		p := pCorrect
		switch {
		case x >= 0xF8 && name == "Output.State":
			p = pShifted
		case x >= 0xE0 && name == "Output.State":
			p = pSameState
		case x >= 0xD0:
			p = pOverlap
		case x >= 0xC0:
			p = pWrongLen
		case x >= 0xB0 && i != 4: // Input.B defines B: never nil
			p = pNil
		case name == "Output.State" && x >= 0x40: // in place is the common case
			p = pSameState
		}
		if s.n > maxArena/4 { // too big to build correctly: make it wrong instead
			s.n, p = int(x&3), pWrongLen
		}
		switch p {
		case pNil:
			s.nil, s.n = true, 0
		case pWrongLen:
			if d := int(x&7) - 3; d != 0 {
				s.n = max(0, s.n+d)
			} else {
				s.n = 0
			}
		}
		units := s.n
		if s.bf16 {
			units = (s.n + 1) / 2
		}
		switch p {
		case pSameState, pShifted:
			s.off, s.n = slots[6].off, slots[6].n
			if slots[6].nil {
				s.nil = true
			}
			if p == pShifted {
				s.off += 1 + int(x&1)
			}
			next = max(next, s.off+s.n+1)
		case pOverlap:
			overlapping = append(overlapping, i)
		default:
			next += int(x & 3) // gaps
			s.off = next
			if s.bf16 {
				s.off = 2*next + int(x&4>>2) // bf16: offsets in halves, sometimes odd
			}
			next += units + 1
		}
		slots[i] = s
	}
	arenaLen := next + 8
	for _, i := range overlapping {
		s := &slots[i]
		units := s.n
		if s.bf16 {
			units = (s.n + 1) / 2
		}
		arenaLen = max(arenaLen, units+1)
		s.off = rng.IntN(arenaLen - units)
		if s.bf16 {
			s.off = 2*s.off + rng.IntN(2)
		}
	}
	arena := randFloats(rng, arenaLen)
	mk := func(s apiSlot) []float32 {
		if s.nil {
			return nil
		}
		return arena[s.off : s.off+s.n : s.off+s.n]
	}
	var out []gdn.BF16
	if o := slots[8]; !o.nil {
		base := unsafe.Slice((*gdn.BF16)(unsafe.Pointer(unsafe.SliceData(arena))), 2*len(arena))
		out = base[o.off : o.off+o.n : o.off+o.n]
	}
	in := gdn.Input{Q: mk(slots[0]), K: mk(slots[1]), V: mk(slots[2]), Z: mk(slots[3]), B: mk(slots[4]), A: mk(slots[5]), State: mk(slots[6])}
	o := gdn.Output{State: mk(slots[7]), Out: out, OutF32: mk(slots[9])}

	// Validity, from the documented rules.
	var expect []error
	heads = len(in.B)
	if c.ConvWidth != 0 { // Step has no conv states: a Layer with the conv front runs through Run
		expect = append(expect, gdn.ErrUnsupported)
	} else if heads%c.VHeads != 0 {
		expect = append(expect, gdn.ErrShape)
	} else {
		for i, s := range slots {
			optional := s.nil && (s.name == "Output.Out" || s.name == "Output.OutF32")
			if i != 4 && !optional && s.n != want(s.name) {
				expect = append(expect, gdn.ErrShape)
				break
			}
		}
	}
	if heads > 0 && o.Out == nil && o.OutF32 == nil {
		expect = append(expect, gdn.ErrNoOutput)
	}
	for i := 7; i < len(slots); i++ {
		for j := range slots {
			if j == i || (j > 6 && j < i) {
				continue // each pair of outputs once
			}
			lo1, hi1 := slots[i].span()
			lo2, hi2 := slots[j].span()
			if lo1 < hi2 && lo2 < hi1 && !(i == 7 && j == 6 && lo1 == lo2 && hi1 == hi2) {
				expect = append(expect, gdn.ErrOverlap)
			}
		}
	}

	for j := range 6 { // Run's rule: a pool (Input.State) overlaps no input
		lo1, hi1 := slots[6].span()
		lo2, hi2 := slots[j].span()
		if lo1 < hi2 && lo2 < hi1 {
			expect = append(expect, gdn.ErrOverlap)
		}
	}

	before := f32bits(arena)
	err := l.Step(in, o)
	after := f32bits(arena)
	if len(expect) > 0 {
		if err == nil {
			t.Fatalf("Step(%s): no error, want one of %v", describeSlots(slots, c), expect)
		}
		if !slices.ContainsFunc(expect, func(e error) bool { return errors.Is(err, e) }) {
			t.Fatalf("Step(%s): %v, want one of %v", describeSlots(slots, c), err, expect)
		}
		if !slices.Equal(before, after) {
			t.Fatalf("Step(%s) returned %v but wrote to memory", describeSlots(slots, c), err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Step(%s): %v, want no error", describeSlots(slots, c), err)
	}
	// Nothing but the outputs may change.
	for i := range before {
		if before[i] == after[i] {
			continue
		}
		inOut := false
		for _, s := range slots[7:] {
			lo, hi := s.span()
			inOut = inOut || (4*i < hi && lo < 4*i+4)
		}
		if !inOut {
			t.Fatalf("Step(%s): arena float %d changed outside the outputs", describeSlots(slots, c), i)
		}
	}
}

func describeSlots(slots []apiSlot, c gdn.Config) string {
	s := fmt.Sprintf("KHeads %d VHeads %d K %d V %d;", c.KHeads, c.VHeads, c.K, c.V)
	for _, x := range slots {
		if x.nil {
			s += " " + x.name + " nil"
		} else {
			s += fmt.Sprintf(" %s [%d:+%d]", x.name, x.off, x.n)
		}
	}
	return s
}
