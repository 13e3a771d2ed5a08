package main

import (
	"fmt"

	"github.com/gdnsimd/gdnsimd/asm/internal/stateargs"
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// stateSig is avo's signature of every state routine: the stateargs struct passed by value, a
// word per field (avo cannot name the Go type: fixups writes stateArgs into the header comment and
// the field names into the operands, a_K+0(FP), so that go vet's asmdecl checks every access
// against the Go declaration, func(a stateArgs)).
var stateSig = fmt.Sprintf("func(a [%d]uint64)", stateargs.Words())

// argField is the frame address of the named stateargs field (of its first word).
func argField(name string) Mem {
	off := stateargs.Offset(name)
	b, err := Param("a").Index(off / 8).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr.Offset(off % 8)
}

// loadArg loads the named stateargs field (a word) into dst.
func loadArg(name string, dst reg.Register) { MOVQ(argField(name), dst) }

// paramMem is the frame address of a scalar parameter of the small pieces (gate, scale).
func paramMem(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}
