package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
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
