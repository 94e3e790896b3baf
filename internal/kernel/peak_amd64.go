//go:build !purego

package kernel

//go:generate go run -C _asm ./peak -out ../peak_amd64.s -pkg kernel

// fmaZMM runs n ≥ 1 iterations of 16 independent zmm VFMADD231PS (AVX-512F); peak_amd64.s.
func fmaZMM(n int)

// fmaYMM runs n ≥ 1 iterations of 12 independent ymm VFMADD231PS (AVX2 + FMA); peak_amd64.s.
func fmaYMM(n int)

// dpbf16ZMM runs n ≥ 1 iterations of peakAccumulators independent zmm VDPBF16PS
// (AVX512_BF16); peak_amd64.s.
func dpbf16ZMM(n int)

// peakAccumulators is the number of independent instructions in an iteration of fmaZMM and
// dpbf16ZMM.
const peakAccumulators = 16

// dpbf16Loop is dpbf16ZMM as a peak loop.
func dpbf16Loop(n int) float32 { dpbf16ZMM(n); return 0 }

// peakLoop returns the register-only FMA loop for instruction set i and the FLOPs of one of its
// iterations (2 per lane per FMA).
func peakLoop(i isa) (loop func(n int) float32, flopsPerIter int) {
	switch i {
	case avx512:
		return func(n int) float32 { fmaZMM(n); return 0 }, 2 * 16 * 16
	case avx2:
		return func(n int) float32 { fmaYMM(n); return 0 }, 2 * 8 * 12
	}
	return fmaGo, fmaGoFLOPs
}

// readZMM reads n·256 bytes from p with zmm loads (AVX-512F); peak_amd64.s.
func readZMM(p *byte, n int)

// readYMM reads n·256 bytes from p with ymm loads (AVX2); peak_amd64.s.
func readYMM(p *byte, n int)

// readLoop returns the memory read loop for instruction set i: it reads n·256 bytes from p.
func readLoop(i isa) func(p *byte, n int) {
	switch i {
	case avx512:
		return readZMM
	case avx2:
		return readYMM
	}
	return readGo
}
