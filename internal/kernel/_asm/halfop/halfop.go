// Package halfop holds the instruction sequences that decode half-precision values to float32
// in the generated assembly: the one home of that conversion for the generators, used by half
// (the slice decoders behind kernel.DecodeBF16 and DecodeF16), gemm (the packing of a
// transposed half-precision B, which decodes as it transposes), and tile and gemv (whose
// kernels read an operand stored as float32, bfloat16 or binary16: Elem). Both sequences are
// exact and width-agnostic: src is a memory operand of 8 or 16 halves, dst a ymm or zmm register.
package halfop

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Elem is a stored type of an operand that a kernel reads as float32.
type Elem struct {
	Name string // F32, BF16 or F16, as the kernels' names spell it
	Size int    // bytes
	Ptr  string // the Go pointer type of the storage
}

// Elems are float32, bfloat16 and binary16.
var Elems = []Elem{{"F32", 4, "*float32"}, {"BF16", 2, "*uint16"}, {"F16", 2, "*uint16"}}

// Load sets the zmm register dst to the 16 values at src as float32. With a mask register
// (mask not nil) the values outside it are not read and are 0.
func (e Elem) Load(src Mem, mask, dst reg.Register) {
	switch {
	case e.Name == "F32" && mask == nil:
		VMOVUPS(src, dst)
	case e.Name == "F32":
		VMOVUPS_Z(src, mask, dst)
	case e.Name == "BF16" && mask == nil:
		DecodeBF16(src, dst)
	case e.Name == "BF16":
		VPMOVZXWD_Z(src, mask, dst)
		VPSLLD(U8(16), dst, dst)
	case mask == nil:
		DecodeF16(src, dst)
	default:
		VCVTPH2PS_Z(src, mask, dst)
	}
}

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
