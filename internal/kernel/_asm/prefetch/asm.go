// Command prefetch writes prefetch_amd64.s: a loop of software prefetches that asks for a run of
// cache lines in L2 without waiting for them. Kernel's go:generate line runs it:
//
//	go generate -run prefetch ./internal/kernel
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

func main() {
	ConstraintExpr("!purego")
	TEXT("prefetchL2", NOSPLIT, "func(p *float32, lines int)")
	Pragma("noescape")
	Doc("prefetchL2 issues PREFETCHT1 for lines ≥ 1 cache lines of 64 bytes from p.")
	p := Load(Param("p"), GP64())
	n := Load(Param("lines"), GP64())
	Label("prefetchL2_loop")
	PREFETCHT1(Mem{Base: p})
	ADDQ(U32(64), p)
	DECQ(n)
	JNZ(LabelRef("prefetchL2_loop"))
	RET()
	Generate()
}
