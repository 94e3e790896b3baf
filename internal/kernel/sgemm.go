package kernel

// Workspace holds the buffers Sgemm packs its operands into. The zero value is ready to use; it
// grows to the largest problem it has seen and then stops allocating. A Workspace must not be
// used by two goroutines at once: give each worker its own.
type Workspace struct {
	pack []float32
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C in float32 on the fastest instruction set the CPU
// has, then, when bias is not nil, adds bias[j] to column j of every row of C. The layout rules
// are Gemm's: row-major, op(A) m×k, op(B) k×n, C m×n, leading dimensions lda, ldb, ldc; beta 0
// overwrites C without reading it. bias must hold n values. Sgemm runs on the calling goroutine
// only and panics when a slice is too short for the dimensions given.
func (w *Workspace) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.sgemm(best, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
}

func (w *Workspace) sgemm(_ isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	if bias != nil {
		bias = bias[:n]
		for i := range m {
			Axpy(1, bias, c[i*ldc:i*ldc+n])
		}
	}
}
