package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// prefetchList is a routine's cursor in its argument pf []uintptr: entries of two words, a row's
// address and its number of 64-byte lines, in groups ended by an entry of zero lines (or by the
// list's end). The Go driver lists the rows its next call reads from memory (v, z, q, k and the
// output rows, a group per token) and the routines over T tokens issue one group per token
// pass (group), so those rows arrive while this call computes instead of one after another at
// the start of the next (avx512, Qwen3-Next prefill: see doc/notebook/2026-12-01-prefetch-lists.md). To L2
// (PREFETCHT1), as every prefetch here: a T0 one holds one of L1's miss buffers until its line
// arrives (see vkBody.prefetch). A prefetch touches no memory architecturally and cannot fault,
// whatever the address; the list itself is read only within its length (an odd last word is
// ignored). A count is trusted: the driver's are at most a row's lines (a huge one would only
// spin).
type prefetchList struct {
	next, end Mem // frame slots: the next entry, the end of the whole entries
}

// newPrefetchList allocates the cursor's frame slots and sets it to pf's first entry.
func newPrefetchList() prefetchList {
	l := prefetchList{next: AllocLocal(8), end: AllocLocal(8)}
	p, n := GP64(), GP64()
	loadArg("pf", p)
	loadArg("npf", n)
	MOVQ(p, l.next)
	ANDQ(I8(-2), n)
	LEAQ(Mem{Base: p, Index: n, Scale: 8}, p)
	MOVQ(p, l.end)
	return l
}

// group issues the list's next group (nothing once the list is done).
func (l prefetchList) group() {
	Comment("The prefetch list's next group.")
	p, n, x := GP64(), GP64(), GP64()
	done, entry, line := label("pfdone"), label("pfentry"), label("pfline")
	MOVQ(l.next, p)
	Label(entry)
	CMPQ(p, l.end)
	JAE(LabelRef(done))
	MOVQ(Mem{Base: p}, x)
	MOVQ(Mem{Base: p, Disp: 8}, n)
	ADDQ(U8(16), p)
	TESTQ(n, n)
	JZ(LabelRef(done))
	Label(line)
	PREFETCHT1(Mem{Base: x})
	ADDQ(U8(64), x)
	DECQ(n)
	JNZ(LabelRef(line))
	JMP(LabelRef(entry))
	Label(done)
	MOVQ(p, l.next)
}

// nextState is a routine's cursor in stateArgs.nx, the state the driver's next call reads: the
// [K][V] routines over T tokens prefetch it to L2 (PREFETCHT1) kvNextLines lines at a time, once
// per row of their token passes (not in AVX2's guarded spans), so that the next call's first
// pass (pass 0, which reads the state from memory and computes little) reads it from L2 while
// this call's passes, which compute from L1, leave memory idle. A call of few tokens (speculative verification) otherwise paid its state's
// read from memory and its arithmetic one after the other. A hint: a prefetch cannot fault, and
// the cursor stops at nx + nxn.
type nextState struct {
	next, end Mem // frame slots: the next line, the end
}

// kvNextLines is how many lines a row of a [K][V] token pass prefetches: a call of T tokens makes
// T·(V/64)·K row steps of 64-column blocks (AVX-512) for the K·V·4/64 lines of an f32 state, so 2
// a step cover it from T = 2 on. (The [V][K] routines do not: in their AVX-512 blocks and AVX2
// pairs, 4 lines every two rows, avx512 vk-f32 T = 4, B = 8 was no faster, 2.60–2.68 → 2.64–2.95
// times the single-token call, 3 alternating runs.)
const kvNextLines = 2

// newNextState allocates the cursor's frame slots and sets it to nx's first line.
func newNextState() nextState {
	c := nextState{next: AllocLocal(8), end: AllocLocal(8)}
	p, n := GP64(), GP64()
	loadArg("nx", p)
	loadArg("nxn", n)
	ADDQ(p, n)
	MOVQ(n, c.end)
	ANDQ(I8(-64), p)
	MOVQ(p, c.next)
	return c
}

// load returns a register holding the cursor, for a loop of steps (store it back after).
func (c nextState) load() GPVirtual {
	p := GP64()
	MOVQ(c.next, p)
	return p
}

// step prefetches the next n lines at p (the cursor, in a register: load), if any are left.
func (c nextState) step(p GPVirtual, n int) {
	done := label("nxdone")
	CMPQ(p, c.end)
	JAE(LabelRef(done))
	for l := range n {
		PREFETCHT1(Mem{Base: p, Disp: 64 * l})
	}
	ADDQ(U8(64*n), p)
	Label(done)
}
