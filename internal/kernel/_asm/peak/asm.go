// Command peak writes peak_amd64.s: register-only FMA loops that measure how many float32
// FLOPs a core can issue when nothing waits on memory, and read loops that measure how many
// bytes a core can load from memory. Kernel's go:generate line runs it:
//
//	go generate -run peak ./internal/kernel
//
// Each loop keeps more independent accumulators in flight than FMA latency × FMA ports on any
// x86 core we know (4 cycles × 2 ports = 8), so the FMA units, not the dependency chains, bound
// the loop.
package main

import (
	"fmt"

	"github.com/mhalab/mha/internal/kernel/_asm/bf16op"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Accumulator counts: zmm has 32 registers, ymm 16; one more holds the multiplicand.
const (
	zmmAccumulators = 16
	ymmAccumulators = 12
)

func main() {
	ConstraintExpr("!purego")
	one := ConstData("peakOne", F32(1))
	loop("fmaZMM", zmmAccumulators, ZMM, one,
		fmt.Sprintf("fmaZMM runs n iterations of %d independent zmm VFMADD231PS (AVX-512F).", zmmAccumulators))
	loop("fmaYMM", ymmAccumulators, YMM, one,
		fmt.Sprintf("fmaYMM runs n iterations of %d independent ymm VFMADD231PS (AVX2 + FMA).", ymmAccumulators))
	dotBF16("dpbf16ZMM", zmmAccumulators,
		fmt.Sprintf("dpbf16ZMM runs n iterations of %d independent zmm VDPBF16PS (AVX512_BF16).", zmmAccumulators))
	read("readZMM", ZMM, 64, "readZMM reads n·256 bytes from p, 64 bytes a load into 4 zmm accumulators (AVX-512F).")
	read("readYMM", YMM, 32, "readYMM reads n·256 bytes from p, 32 bytes a load into 8 ymm accumulators (AVX2).")
	Generate()
}

// read emits func name(p *byte, n int): a loop that loads 256 bytes per iteration with vectors
// of width bytes and ORs them into independent accumulators, so that the loads, not a
// dependency chain, bound it: the memory read ceiling. n must be ≥ 1.
func read(name string, vec func() reg.VecVirtual, width int, doc string) {
	TEXT(name, NOSPLIT, "func(p *byte, n int)")
	Doc(doc)
	p := Load(Param("p"), GP64())
	n := Load(Param("n"), GP64())
	acc := make([]reg.VecVirtual, 256/width)
	for i := range acc {
		acc[i] = vec()
		if width == 64 {
			VPXORD(acc[i], acc[i], acc[i])
		} else {
			VPXOR(acc[i], acc[i], acc[i])
		}
	}
	Label(name + "_loop")
	for i, a := range acc {
		if width == 64 {
			VPORD(Mem{Base: p, Disp: i * width}, a, a)
		} else {
			VPOR(Mem{Base: p, Disp: i * width}, a, a)
		}
	}
	ADDQ(U32(256), p)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}

// loop emits func name(n int): acc[i] += one·one for every accumulator, n times. n must be ≥ 1.
func loop(name string, accs int, vec func() reg.VecVirtual, one Mem, doc string) {
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(doc)
	n := Load(Param("n"), GP64())
	x := vec()
	VBROADCASTSS(one, x)
	acc := make([]reg.VecVirtual, accs)
	for i := range acc {
		acc[i] = vec()
		VXORPS(acc[i], acc[i], acc[i])
	}
	Label(name + "_loop")
	for _, a := range acc {
		VFMADD231PS(x, x, a)
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}

// dotBF16 emits func name(n int): acc[i] += the dot products of the bfloat16 pairs of x with
// themselves (x: pairs (0, 0.5), so each lane grows by 0.25 and stays normal), for accs
// accumulators, n times, with VDPBF16PS (bf16op; physical registers, which avo's allocator
// cannot see through the encoded instruction). n must be ≥ 1.
func dotBF16(name string, accs int, doc string) {
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(doc)
	n, err := Param("n").Resolve()
	if err != nil {
		panic(err)
	}
	MOVQ(n.Addr, reg.RCX)
	MOVL(U32(0x3f000000), reg.EAX)
	x := reg.Z31
	VPBROADCASTD(reg.EAX, x)
	acc := []reg.VecPhysical{reg.Z0, reg.Z1, reg.Z2, reg.Z3, reg.Z4, reg.Z5, reg.Z6, reg.Z7, reg.Z8,
		reg.Z9, reg.Z10, reg.Z11, reg.Z12, reg.Z13, reg.Z14, reg.Z15, reg.Z16, reg.Z17}[:accs]
	for _, a := range acc {
		VPXORD(a, a, a)
	}
	Label(name + "_loop")
	for _, a := range acc {
		bf16op.VDPBF16PS(x, x, a)
	}
	DECQ(reg.RCX)
	JNZ(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}
