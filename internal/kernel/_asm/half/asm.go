// Command half generates half_amd64.s and half_stubs_amd64.go: the AVX-512 kernels behind
// kernel.DecodeBF16, EncodeBF16, DecodeF16 and EncodeF16, 16 values a step. The Go callers
// (half_amd64.go) convert the last len mod 16 values with the scalar functions of half.go, which
// these kernels match bit for bit (half_test.go checks every path on all 2^16 halves):
//
//	bf16 → f32   VPMOVZXWD, VPSLLD $16: exact (package halfop, shared with the gemm generator)
//	f32 → bf16   integer round to nearest even, (b + 0x7fff + (b>>16 & 1)) >> 16, with a NaN
//	             made quiet instead (b>>16 | 0x40) so it cannot round to Inf; VCVTNEPS2BF16 is
//	             not used because it flushes subnormal inputs to zero
//	f16 → f32    VCVTPH2PS (package halfop)
//	f32 → f16    VCVTPS2PH $0 (round to nearest even)
//
// The decoders read a KV cache from memory in tiles of a few KiB, too short for the hardware
// prefetcher to run far enough ahead, so they prefetch 2 KiB ahead themselves (the next tile
// usually follows; a prefetch past the end of memory does not fault). That took a bf16 decode
// step from about 40% to 50–55% of the measured read bandwidth.
//
// Run it through go generate in internal/kernel (see half_amd64.go); the output is committed.
package main

import (
	"github.com/mhalab/mha/internal/kernel/_asm/halfop"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// prefetch is how many bytes ahead of their loads the decoders prefetch.
const prefetch = 2048

func main() {
	ConstraintExpr("!purego")
	convert("decodeBF16AVX512", "func(dst []float32, src []uint16)",
		"decodeBF16AVX512 sets dst[i] to the float32 of bfloat16 src[i] for the first len(dst)/16·16 values.",
		4, 2, func(src Mem, dst Mem, _ []VecVirtual) {
			z := ZMM()
			PREFETCHT0(Mem{Base: src.Base, Disp: prefetch})
			halfop.DecodeBF16(src, z)
			VMOVUPS(z, dst)
		})
	convert("encodeBF16AVX512", "func(dst []uint16, src []float32)",
		"encodeBF16AVX512 sets dst[i] to the bfloat16 of src[i], rounded to nearest even, for the first len(dst)/16·16 values.",
		2, 4, func(src Mem, dst Mem, c []VecVirtual) {
			b, t, r := ZMM(), ZMM(), ZMM()
			k := K()
			VMOVDQU32(src, b)
			// NaN: (b & 0x7fffffff) > 0x7f800000, as signed integers.
			VPANDD(c[0], b, t)
			VPCMPGTD(c[1], t, k)
			// Round to nearest even: (b + 0x7fff + (b>>16 & 1)) >> 16.
			VPSRLD(U8(16), b, t)
			VPANDD(c[2], t, t)
			VPADDD(c[3], b, r)
			VPADDD(t, r, r)
			VPSRLD(U8(16), r, r)
			// A NaN keeps its top bits, made quiet.
			VPSRLD(U8(16), b, t)
			VPORD(c[4], t, t)
			VMOVDQU32(t, k, r)
			VPMOVDW(r, dst)
		}, 0x7fffffff, 0x7f800000, 1, 0x7fff, 0x40)
	convert("decodeF16AVX512", "func(dst []float32, src []uint16)",
		"decodeF16AVX512 sets dst[i] to the float32 of binary16 src[i] for the first len(dst)/16·16 values.",
		4, 2, func(src Mem, dst Mem, _ []VecVirtual) {
			z := ZMM()
			PREFETCHT0(Mem{Base: src.Base, Disp: prefetch})
			halfop.DecodeF16(src, z)
			VMOVUPS(z, dst)
		})
	convert("encodeF16AVX512", "func(dst []uint16, src []float32)",
		"encodeF16AVX512 sets dst[i] to the binary16 of src[i], rounded to nearest even, for the first len(dst)/16·16 values.",
		2, 4, func(src Mem, dst Mem, _ []VecVirtual) {
			z := ZMM()
			VMOVUPS(src, z)
			VCVTPS2PH(U8(0), z, dst)
		})
	Generate()
}

// convert emits a loop over len(dst)/16 steps of 16 values: step converts the 16 values at src
// (elements of srcSize bytes) to dst (elements of dstSize bytes), with consts broadcast into
// zmm registers before the loop.
func convert(name, sig, doc string, dstSize, srcSize int, step func(src, dst Mem, c []VecVirtual), consts ...uint32) {
	TEXT(name, NOSPLIT, sig)
	Doc(doc)
	dst := Load(Param("dst").Base(), GP64())
	src := Load(Param("src").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	SHRQ(U8(4), n)
	JZ(LabelRef(name + "_done"))
	var c []VecVirtual
	for _, v := range consts {
		r := GP32()
		MOVL(U32(v), r)
		z := ZMM()
		VPBROADCASTD(r, z)
		c = append(c, z)
	}
	Label(name + "_loop")
	step(Mem{Base: src}, Mem{Base: dst}, c)
	ADDQ(U32(16*srcSize), src)
	ADDQ(U32(16*dstSize), dst)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
