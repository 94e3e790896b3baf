//go:build !purego

package kernel

//go:generate go run -C _asm ./half -out ../half_amd64.s -stubs ../half_stubs_amd64.go -pkg kernel

// The AVX-512 kernels convert the first len/16·16 values; the scalar functions the rest.

func decodeBF16(i isa, dst []float32, src []uint16) {
	if i == avx512 {
		decodeBF16AVX512(dst, src)
		n := len(dst) &^ 15
		dst, src = dst[n:], src[n:]
	}
	decodeBF16Generic(dst, src)
}

func encodeBF16(i isa, dst []uint16, src []float32) {
	if i == avx512 {
		encodeBF16AVX512(dst, src)
		n := len(dst) &^ 15
		dst, src = dst[n:], src[n:]
	}
	encodeBF16Generic(dst, src)
}

func decodeF16(i isa, dst []float32, src []uint16) {
	if i == avx512 {
		decodeF16AVX512(dst, src)
		n := len(dst) &^ 15
		dst, src = dst[n:], src[n:]
	}
	decodeF16Generic(dst, src)
}

func encodeF16(i isa, dst []uint16, src []float32) {
	if i == avx512 {
		encodeF16AVX512(dst, src)
		n := len(dst) &^ 15
		dst, src = dst[n:], src[n:]
	}
	encodeF16Generic(dst, src)
}
