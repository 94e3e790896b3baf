// Package asmutil holds what several generators need from avo beyond its build API.
package asmutil

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// ParamAddr is the stack address of the named argument of the function being generated, for
// instructions that take a memory operand (a broadcast from it, say) rather than a register.
func ParamAddr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}
