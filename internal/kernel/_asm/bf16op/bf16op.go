// Package bf16op emits the AVX512_BF16 instructions for the generators: VDPBF16PS,
// VCVTNE2PS2BF16 and VCVTNEPS2BF16, the one home of their encoding, used by gemm (the bfloat16
// GEMM's kernels and packers), exp (SexpBF16's stores) and peak (the VDPBF16PS peak loop).
// Neither avo v0.5.0 nor the Go 1.26 assembler knows these instructions, so they are emitted as
// LONG and WORD directives holding their EVEX encoding (register operands only), each after a
// comment that spells the instruction in Go assembler order. The encodings were checked against
// llvm-mc -show-encoding (register numbers below and above 8 and 16 in every operand), and
// TestVDPBF16PSOrder and TestRoundBF16Hardware check the instructions' results on the CPU.
package bf16op

import (
	"fmt"

	"github.com/mmcloughlin/avo/ir"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// evex emits the register-only EVEX instruction opcode in map 0F38, prefix pp (2: F3, 3: F2),
// W0, of vector length 512 (or 256 when y is set: the length of the source operands), with
// ModRM.reg = dst, EVEX.vvvv = vvvv (none when nil) and ModRM.rm = rm, as LONG and WORD
// directives after a comment naming it.
func evex(name string, pp, opcode byte, y bool, rm, vvvv, dst reg.VecPhysical) {
	num := func(r reg.VecPhysical) byte { return byte(r.PhysicalIndex()) }
	r, b := num(dst), num(rm)
	v := byte(0) // no vvvv operand: 1111 and V' = 1 once inverted, as for register 0
	ops := fmt.Sprintf("%s, %s", rm.Asm(), dst.Asm())
	if vvvv != nil {
		v = num(vvvv)
		ops = fmt.Sprintf("%s, %s, %s", rm.Asm(), vvvv.Asm(), dst.Asm())
	}
	bit := func(x byte, i uint) byte { return x >> i & 1 }
	p0 := (1-bit(r, 3))<<7 | (1-bit(b, 4))<<6 | (1-bit(b, 3))<<5 | (1-bit(r, 4))<<4 | 0x2 // map 0F38
	p1 := (^v&0xf)<<3 | 1<<2 | pp                                                         // W0
	ll := byte(2)
	if y {
		ll = 1
	}
	p2 := ll<<5 | (1-bit(v, 4))<<3
	modrm := 0xc0 | (r&7)<<3 | b&7
	Comment(name + " " + ops)
	// LONG and WORD lay their values out little-endian: bytes 62 P0 P1 P2, then opcode, ModRM.
	Instruction(&ir.Instruction{Opcode: "LONG", Operands: []Op{U32(uint32(p2)<<24 | uint32(p1)<<16 | uint32(p0)<<8 | 0x62)}})
	Instruction(&ir.Instruction{Opcode: "WORD", Operands: []Op{U16(uint16(modrm)<<8 | uint16(opcode))}})
}

// VDPBF16PS emits VDPBF16PS b, a, acc on zmm registers: for each of the 16 lanes,
// acc += a.bf16[2i+1]·b.bf16[2i+1], then acc += a.bf16[2i]·b.bf16[2i], each rounded to float32.
func VDPBF16PS(b, a, acc reg.VecPhysical) { evex("VDPBF16PS", 2, 0x52, false, b, a, acc) }

// VCVTNE2PS2BF16 emits VCVTNE2PS2BF16 lo, hi, dst: dst's low half holds the float32 of lo
// rounded to bfloat16, its high half those of hi (ymm, or zmm when zmm is set).
func VCVTNE2PS2BF16(lo, hi, dst reg.VecPhysical, zmm bool) {
	evex("VCVTNE2PS2BF16", 3, 0x72, !zmm, lo, hi, dst)
}

// VCVTNEPS2BF16 emits VCVTNEPS2BF16 src, dst: the 16 float32 of zmm src rounded to bfloat16 in
// ymm dst.
func VCVTNEPS2BF16(src, dst reg.VecPhysical) { evex("VCVTNEPS2BF16", 2, 0x72, false, src, nil, dst) }
