//go:build !amd64 || purego

package kernel

// sgemmVector stands in for the assembly path's buffers; this build has no assembly.
type sgemmVector struct{}

// run is never called in this build: available() offers only the generic path.
func (w *sgemmVector) run(is isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	panic("kernel: no " + is.String() + " kernels in this build")
}

// runPacked is never called in this build: PackedF32.Pack packs nothing, so SgemmPacked has
// nothing to multiply.
func (w *sgemmVector) runPacked(m int, alpha float32, a []float32, lda int, b *PackedF32, beta float32, c []float32, ldc int, bias []float32) {
	panic("kernel: no AVX-512 kernels in this build")
}

// pack is never called in this build: best is never avx512.
func (p *PackedF32) pack(b []float32, ldb int) {
	panic("kernel: no AVX-512 kernels in this build")
}

// bf16Vector stands in for GemmBF16's assembly path's buffers; this build has no assembly.
type bf16Vector struct{}

// run is never called in this build: hasBF16 is false.
func (w *bf16Vector) run(transA, transB bool, m, n, k int, alpha float32, a operandB, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	panic("kernel: no AVX512_BF16 kernels in this build")
}

// runPacked is never called in this build: PackedBF16.Pack packs nothing, so nothing fits.
func (w *bf16Vector) runPacked(m, n, k int, alpha float32, a []uint16, lda int, b *PackedBF16, p0, j0 int, beta float32, c []float32, ldc int, bias []float32) {
	panic("kernel: no AVX512_BF16 kernels in this build")
}

// pack is never called in this build: hasBF16 is false.
func (p *PackedBF16) pack(trans bool, b []uint16, ldb int) {
	panic("kernel: no AVX512_BF16 kernels in this build")
}

// roundBF16sVector converts nothing in this build: RoundBF16s converts every value in Go.
func roundBF16sVector(dst []uint16, src []float32) int { return 0 }

// transpose is Transpose in Go: this build has no assembly.
func transpose(_ isa, dst []float32, ldd int, src []float32, lds, rows, cols int) {
	transposeGeneric(dst, ldd, src, lds, rows, cols)
}

// tileHeight is 0: this build has only the generic path, which tiles rows its own way.
func tileHeight(isa) int { return 0 }
