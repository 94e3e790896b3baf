// Package halfop holds the instruction sequences that decode half-precision values to float32
// in the generated assembly: the one home of that conversion for the generators, used by half
// (the slice decoders behind kernel.DecodeBF16 and DecodeF16) and gemm (the packing of a
// transposed half-precision B, which decodes as it transposes). Both sequences are exact and
// width-agnostic: src is a memory operand of 8 or 16 halves, dst a ymm or zmm register.
package halfop

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// DecodeBF16 loads the bfloat16 values at src into dst as float32: VPMOVZXWD zero-extends each
// to 32 bits, VPSLLD $16 moves it into the top half (AVX2 for ymm, AVX-512 BW for zmm).
func DecodeBF16(src Mem, dst reg.Register) {
	VPMOVZXWD(src, dst)
	VPSLLD(U8(16), dst, dst)
}

// DecodeF16 loads the IEEE 754 binary16 values at src into dst as float32 with VCVTPH2PS (F16C
// for ymm, AVX-512 F for zmm); a NaN is made quiet, its payload kept.
func DecodeF16(src Mem, dst reg.Register) {
	VCVTPH2PS(src, dst)
}
