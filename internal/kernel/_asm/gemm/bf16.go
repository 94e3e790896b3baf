package main

// The bfloat16 GEMM (kernel.GemmBF16) on AVX512_BF16. VDPBF16PS multiplies the pairs of bfloat16
// in each 32-bit lane of two vectors and adds both products to a float32 accumulator: two k
// steps per lane per instruction, twice VFMADD231PS's rate. So the operands are packed in k
// pairs: element (i, 2q) of A in the low half of 32-bit word q of row i, (i, 2q+1) in the high
// half; likewise (2q, j) and (2q+1, j) of B in word j of packed row q. An odd k is padded with
// a zero pair half.
//
// The kernels (gemmBF16AVX512N1…14) are the float32 AVX-512 "N" kernels with the k step
// replaced: per pair row of B two zmm loads, per row of A a VPBROADCASTD of its pair and two
// VDPBF16PS. A is packed by the driver (row-major, converted with bf16Convert), B by the
// packers below, each of which converts as it packs:
//
//	bf16PackBT, bf16PackBTBF16, bf16PackBTF16   transposed B (n×k: the layer's Wᵀ) of float32,
//	                                            bfloat16 or binary16: packTranspose's 8×8
//	                                            transpose on 32-bit pairs
//	bf16PackB, bf16PackBBF16, bf16PackBF16      row-major B (k×n): two rows into one zmm of
//	                                            bfloat16, VPERMW interleaves them into pairs
//
// float32 is rounded to bfloat16 by VCVTNE2PS2BF16 / VCVTNEPS2BF16 (nearest even; subnormal
// inputs become zero of their sign, NaN stays NaN); binary16 goes through VCVTPH2PS first
// (exact), bfloat16 is copied.
//
// Neither avo v0.5.0 nor the Go 1.26 assembler knows the AVX512_BF16 instructions, so they are
// emitted as LONG and WORD directives holding their EVEX encoding (register operands only), each after a
// comment that spells the instruction in Go assembler order. The encodings were checked
// against llvm-mc -show-encoding.

import (
	"fmt"

	"github.com/mmcloughlin/avo/ir"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// evex emits the register-only EVEX instruction opcode in map 0F38, prefix pp (2: F3, 3: F2),
// W0, of vector length 512 (or 256 when y is set: the length of the source operands), with ModRM.reg = reg, EVEX.vvvv = vvvv (none
// when nil) and ModRM.rm = rm, as LONG and WORD directives after a comment naming it.
func evex(name string, pp, opcode byte, y bool, rm, vvvv, reg VecPhysical) {
	num := func(r VecPhysical) byte { return byte(r.PhysicalIndex()) }
	r, b := num(reg), num(rm)
	v := byte(0) // no vvvv operand: 1111 and V' = 1 once inverted, as for register 0
	ops := fmt.Sprintf("%s, %s", rm.Asm(), reg.Asm())
	if vvvv != nil {
		v = num(vvvv)
		ops = fmt.Sprintf("%s, %s, %s", rm.Asm(), vvvv.Asm(), reg.Asm())
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

// vdpbf16ps emits VDPBF16PS b, a, acc: acc[i] += a.bf16[2i+1]·b.bf16[2i+1] + a.bf16[2i]·b.bf16[2i]
// for the 16 lanes of zmm registers.
func vdpbf16ps(b, a, acc VecPhysical) { evex("VDPBF16PS", 2, 0x52, false, b, a, acc) }

// vcvtne2ps2bf16 emits VCVTNE2PS2BF16 lo, hi, dst: dst's low half holds lo rounded to
// bfloat16, its high half hi (ymm, or zmm when zmm is set).
func vcvtne2ps2bf16(lo, hi, dst VecPhysical, zmm bool) {
	evex("VCVTNE2PS2BF16", 3, 0x72, !zmm, lo, hi, dst)
}

// vcvtneps2bf16 emits VCVTNEPS2BF16 src, dst: the 16 float32 of zmm src rounded to bfloat16 in
// ymm dst.
func vcvtneps2bf16(src, dst VecPhysical) { evex("VCVTNEPS2BF16", 2, 0x72, false, src, nil, dst) }

// zmmOf is the zmm register that holds ymm register y.
func zmmOf(y VecPhysical) VecPhysical { return y.AsZ().(VecPhysical) }

// bf16Packers emits the packers and the converter of the bfloat16 GEMM.
func bf16Packers() {
	tmp := Y16
	packTranspose("bf16PackBT", "func(dst *uint16, src *float32, ld, kc, nj, nr int)",
		"bf16PackBT sets pair p of dst[p·nr+j] to the bfloat16 of src[j·ld+2p], src[j·ld+2p+1] (VCVTNE2PS2BF16) for p < kc, j < nj; kc and nj are positive multiples of 8.",
		4, 64, 0, func(src Mem, dst Register) {
			VMOVUPS(src, tmp)
			VMOVUPS(src.Offset(32), dst)
			vcvtne2ps2bf16(tmp, dst.(VecPhysical), dst.(VecPhysical), false)
		})
	packTranspose("bf16PackBTBF16", "func(dst *uint16, src *uint16, ld, kc, nj, nr int)",
		"bf16PackBTBF16 sets pair p of dst[p·nr+j] to bfloat16 src[j·ld+2p], src[j·ld+2p+1] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		2, 32, *pfRows, func(src Mem, dst Register) { VMOVUPS(src, dst) })
	packTranspose("bf16PackBTF16", "func(dst *uint16, src *uint16, ld, kc, nj, nr int)",
		"bf16PackBTF16 sets pair p of dst[p·nr+j] to the bfloat16 of binary16 src[j·ld+2p], src[j·ld+2p+1] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		2, 32, *pfRows, func(src Mem, dst Register) {
			z := zmmOf(dst.(VecPhysical))
			VCVTPH2PS(src, z)
			vcvtneps2bf16(z, dst.(VecPhysical))
		})

	// Word permutation that interleaves the two 16-word halves of a zmm: pairs (i, 16+i).
	perm := GLOBL("bf16Interleave", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U16(i))
		DATA(4*i+2, U16(16+i))
	}
	rowMajor("bf16PackB", "func(dst *uint16, src *float32, ld, kc int)",
		"bf16PackB sets pair p of dst[p·32+j] to the bfloat16 of src[2p·ld+j], src[(2p+1)·ld+j] (VCVTNE2PS2BF16) for p < kc, j < 32; kc is positive.",
		4, perm, func(row0, row1 Mem, dst VecPhysical) {
			VMOVUPS(row0, Z16)
			VMOVUPS(row1, dst)
			vcvtne2ps2bf16(Z16, dst, dst, true)
		})
	rowMajor("bf16PackBBF16", "func(dst *uint16, src *uint16, ld, kc int)",
		"bf16PackBBF16 sets pair p of dst[p·32+j] to bfloat16 src[2p·ld+j], src[(2p+1)·ld+j] for p < kc, j < 32; kc is positive.",
		2, perm, func(row0, row1 Mem, dst VecPhysical) {
			VMOVDQU(row0, dst.AsY())
			VINSERTI64X4(U8(1), row1, dst, dst)
		})
	rowMajor("bf16PackBF16", "func(dst *uint16, src *uint16, ld, kc int)",
		"bf16PackBF16 sets pair p of dst[p·32+j] to the bfloat16 of binary16 src[2p·ld+j], src[(2p+1)·ld+j] for p < kc, j < 32; kc is positive.",
		2, perm, func(row0, row1 Mem, dst VecPhysical) {
			VCVTPH2PS(row0, Z16)
			VCVTPH2PS(row1, dst)
			vcvtne2ps2bf16(Z16, dst, dst, true)
		})
	convertBF16()
}

// rowMajor emits a packer of a row-major B (k×n, row stride ld in units of size bytes) into one
// 32-wide panel of bfloat16 pairs: per pair row, load sets dst to the 16 words of row 2p at row0
// followed by the 16 of row 2p+1 at row1 (bfloat16), and VPERMW with perm interleaves them;
// twice, for columns 0–15 and 16–31.
func rowMajor(name, sig, doc string, size int, perm Mem, load func(row0, row1 Mem, dst VecPhysical)) {
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	dst, src, ld, kc := RDI, RSI, RDX, RCX
	MOVQ(param("dst"), dst)
	MOVQ(param("src"), src)
	MOVQ(param("ld"), ld)
	if size == 4 {
		SHLQ(U8(2), ld)
	} else {
		SHLQ(U8(1), ld)
	}
	MOVQ(param("kc"), kc)
	VMOVDQU64(perm, Z17)
	Label(name + "_p")
	for h := range 2 {
		z := []VecPhysical{Z0, Z1}[h]
		load(Mem{Base: src, Disp: 16 * size * h}, Mem{Base: src, Index: ld, Scale: 1, Disp: 16 * size * h}, z)
		VPERMW(z, Z17, z)
		VMOVDQU64(z, Mem{Base: dst, Disp: 64 * h})
	}
	LEAQ(Mem{Base: src, Index: ld, Scale: 2}, src)
	ADDQ(U32(128), dst)
	DECQ(kc)
	JNZ(LabelRef(name + "_p"))
	VZEROUPPER()
	RET()
}

// convertBF16 emits func bf16Convert(dst *uint16, src *float32, n int): dst[i] is the bfloat16
// of src[i] for i < n, a positive multiple of 32, rounded by VCVTNE2PS2BF16.
func convertBF16() {
	TEXT("bf16Convert", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc("bf16Convert sets dst[i] to the bfloat16 of src[i] (VCVTNE2PS2BF16) for i < n, a positive multiple of 32.")
	dst, src, n := RDI, RSI, RCX
	MOVQ(param("dst"), dst)
	MOVQ(param("src"), src)
	MOVQ(param("n"), n)
	SHRQ(U8(5), n)
	Label("bf16Convert_loop")
	VMOVUPS(Mem{Base: src}, Z0)
	VMOVUPS(Mem{Base: src, Disp: 64}, Z1)
	vcvtne2ps2bf16(Z0, Z1, Z2, true)
	VMOVDQU64(Z2, Mem{Base: dst})
	ADDQ(U32(128), src)
	ADDQ(U32(64), dst)
	DECQ(n)
	JNZ(LabelRef("bf16Convert_loop"))
	VZEROUPPER()
	RET()
}
