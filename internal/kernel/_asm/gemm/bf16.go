package main

// The bfloat16 GEMM (kernel.GemmBF16) on AVX512_BF16. VDPBF16PS multiplies the pairs of bfloat16
// in each 32-bit lane of two vectors and adds both products to a float32 accumulator: two k
// steps per lane per instruction, twice VFMADD231PS's rate. So the operands are packed in k
// pairs: element (i, 2q) of A in the low half of 32-bit word q of row i, (i, 2q+1) in the high
// half; likewise (2q, j) and (2q+1, j) of B in word j of packed row q. An odd k is padded with
// a zero pair half.
//
// The kernels (gemmBF16AVX512N1…14 and T1…14) are the float32 AVX-512 kernels with the k step
// replaced: per pair row of B two zmm loads, per row of A a VPBROADCASTD of its pair and two
// VDPBF16PS. A is packed by the driver, row-major for the N kernels (converted with
// bf16Convert), k-major for the T kernels (a transposed float32 A, by bf16PackAT); B by the
// packers below, each of which converts as it packs:
//
//	bf16PackBT, bf16PackBTBF16, bf16PackBTF16   transposed B (n×k: the layer's Wᵀ) of float32,
//	                                            bfloat16 or binary16: packTranspose's 8×8
//	                                            transpose on 32-bit pairs
//	bf16PackBT16BF16                            the same for bfloat16 in 16×16 blocks
//	                                            (packTranspose16), where 16 divides the block
//	bf16PackB, bf16PackBBF16, bf16PackBF16      row-major B (k×n): two rows into one zmm of
//	                                            bfloat16, VPERMW interleaves them into pairs
//	bf16PackAT                                  the same, 16 wide: a transposed float32 A
//
// float32 is rounded to bfloat16 by VCVTNE2PS2BF16 / VCVTNEPS2BF16 (nearest even; subnormal
// inputs become zero of their sign, NaN stays NaN); binary16 goes through VCVTPH2PS first
// (exact), bfloat16 is copied.
//
// The AVX512_BF16 instructions come from package bf16op, which encodes them.

import (
	"github.com/mhalab/mha/internal/kernel/_asm/asmutil"
	"github.com/mhalab/mha/internal/kernel/_asm/bf16op"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

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
			bf16op.VCVTNE2PS2BF16(tmp, dst.(VecPhysical), dst.(VecPhysical), false)
		})
	packTranspose("bf16PackBTBF16", "func(dst *uint16, src *uint16, ld, kc, nj, nr int)",
		"bf16PackBTBF16 sets pair p of dst[p·nr+j] to bfloat16 src[j·ld+2p], src[j·ld+2p+1] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		2, 32, *pfRows, func(src Mem, dst Register) { VMOVUPS(src, dst) })
	packTranspose("bf16PackBTF16", "func(dst *uint16, src *uint16, ld, kc, nj, nr int)",
		"bf16PackBTF16 sets pair p of dst[p·nr+j] to the bfloat16 of binary16 src[j·ld+2p], src[j·ld+2p+1] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		2, 32, *pfRows, func(src Mem, dst Register) {
			z := zmmOf(dst.(VecPhysical))
			VCVTPH2PS(src, z)
			bf16op.VCVTNEPS2BF16(z, dst.(VecPhysical))
		})

	// Word permutation that interleaves the two 16-word halves of a zmm: pairs (i, 16+i).
	perm := GLOBL("bf16Interleave", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U16(i))
		DATA(4*i+2, U16(16+i))
	}
	rowMajor("bf16PackB", "func(dst *uint16, src *float32, ld, kc int)",
		"bf16PackB sets pair p of dst[p·32+j] to the bfloat16 of src[2p·ld+j], src[(2p+1)·ld+j] (VCVTNE2PS2BF16) for p < kc, j < 32; kc is positive.",
		4, 2, perm, f32Rows)
	rowMajor("bf16PackBBF16", "func(dst *uint16, src *uint16, ld, kc int)",
		"bf16PackBBF16 sets pair p of dst[p·32+j] to bfloat16 src[2p·ld+j], src[(2p+1)·ld+j] for p < kc, j < 32; kc is positive.",
		2, 2, perm, func(row0, row1 Mem, dst VecPhysical) {
			VMOVDQU(row0, dst.AsY())
			VINSERTI64X4(U8(1), row1, dst, dst)
		})
	rowMajor("bf16PackBF16", "func(dst *uint16, src *uint16, ld, kc int)",
		"bf16PackBF16 sets pair p of dst[p·32+j] to the bfloat16 of binary16 src[2p·ld+j], src[(2p+1)·ld+j] for p < kc, j < 32; kc is positive.",
		2, 2, perm, func(row0, row1 Mem, dst VecPhysical) {
			VCVTPH2PS(row0, Z16)
			VCVTPH2PS(row1, dst)
			bf16op.VCVTNE2PS2BF16(Z16, dst, dst, true)
		})
	rowMajor("bf16PackAT", "func(dst *uint16, src *float32, ld, kc int)",
		"bf16PackAT sets pair p of dst[p·16+i] to the bfloat16 of src[2p·ld+i], src[(2p+1)·ld+i] (VCVTNE2PS2BF16) for p < kc, i < 16; kc is positive.",
		4, 1, perm, f32Rows)
	packTranspose16("bf16PackBT16BF16", "func(dst *uint16, src *uint16, ld, kc, nj, nr int)",
		"bf16PackBT16BF16 is bf16PackBTBF16 in 16×16 blocks: kc and nj are positive multiples of 16.",
		2, 64, *pfRows, func(src Mem, dst VecPhysical) { VMOVUPS(src, dst) })
	convertBF16()
}

// f32Rows loads 16 float32 of two rows as 32 bfloat16, those of row0 first (VCVTNE2PS2BF16).
func f32Rows(row0, row1 Mem, dst VecPhysical) {
	VMOVUPS(row0, Z16)
	VMOVUPS(row1, dst)
	bf16op.VCVTNE2PS2BF16(Z16, dst, dst, true)
}

// rowMajor emits a packer of a row-major B (k×n, row stride ld in units of size bytes) into one
// panel of bfloat16 pairs 16·halves wide: per pair row, load sets dst to the 16 words of row 2p
// at row0 followed by the 16 of row 2p+1 at row1 (bfloat16), and VPERMW with perm interleaves
// them; once per 16 columns.
func rowMajor(name, sig, doc string, size, halves int, perm Mem, load func(row0, row1 Mem, dst VecPhysical)) {
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	dst, src, ld, kc := RDI, RSI, RDX, RCX
	MOVQ(asmutil.ParamAddr("dst"), dst)
	MOVQ(asmutil.ParamAddr("src"), src)
	MOVQ(asmutil.ParamAddr("ld"), ld)
	if size == 4 {
		SHLQ(U8(2), ld)
	} else {
		SHLQ(U8(1), ld)
	}
	MOVQ(asmutil.ParamAddr("kc"), kc)
	VMOVDQU64(perm, Z17)
	Label(name + "_p")
	for h := range halves {
		z := []VecPhysical{Z0, Z1}[h]
		load(Mem{Base: src, Disp: 16 * size * h}, Mem{Base: src, Index: ld, Scale: 1, Disp: 16 * size * h}, z)
		VPERMW(z, Z17, z)
		VMOVDQU64(z, Mem{Base: dst, Disp: 64 * h})
	}
	LEAQ(Mem{Base: src, Index: ld, Scale: 2}, src)
	ADDQ(U32(64*halves), dst)
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
	MOVQ(asmutil.ParamAddr("dst"), dst)
	MOVQ(asmutil.ParamAddr("src"), src)
	MOVQ(asmutil.ParamAddr("n"), n)
	SHRQ(U8(5), n)
	Label("bf16Convert_loop")
	VMOVUPS(Mem{Base: src}, Z0)
	VMOVUPS(Mem{Base: src, Disp: 64}, Z1)
	bf16op.VCVTNE2PS2BF16(Z0, Z1, Z2, true)
	VMOVDQU64(Z2, Mem{Base: dst})
	ADDQ(U32(128), src)
	ADDQ(U32(64), dst)
	DECQ(n)
	JNZ(LabelRef("bf16Convert_loop"))
	VZEROUPPER()
	RET()
}
