package kernel

import "fmt"

// Workspace holds the buffers Sgemm packs its operands into. The zero value is ready to use; it
// grows to the largest problem it has seen and then stops allocating: a later call of the same
// size or smaller makes no heap allocation. A Workspace must not be used by two goroutines at
// once: give each worker its own.
type Workspace struct {
	vec sgemmVector  // buffers of the assembly path
	gen sgemmGeneric // buffers of the pure-Go path
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C in float32 on the fastest instruction set the CPU
// has, then, when bias is not nil, adds bias[j] to column j of every row of C. The layout rules
// are Gemm's: row-major, op(A) is m×k (A is stored k×m when transA is set), op(B) is k×n (B is
// stored n×k when transB is set), C is m×n, with leading dimensions (row strides) lda, ldb, ldc.
// When beta is 0, C is overwritten without being read, so NaN or Inf left in it do not
// propagate. bias must hold at least n values.
//
// Sgemm runs on the calling goroutine only; callers parallelise by giving disjoint blocks of C
// to workers with a Workspace each. Once the Workspace has served a problem of some size, calls
// of that size or smaller make no heap allocations. Sgemm panics when A, B, C or bias is too short
// for the dimensions given, or when a leading dimension is smaller than its row's width.
func (w *Workspace) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.sgemm(best, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
}

// sgemm is Sgemm on the instruction set is, which must be one of available().
func (w *Workspace) sgemm(is isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in Sgemm: m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	checkOperands(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("kernel: bias has %d values, too few for %d columns", len(bias), n))
	}
	if k == 0 || alpha == 0 {
		scaleAddBias(m, n, beta, c, ldc, bias)
		return
	}
	switch is {
	case generic:
		w.gen.run(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
	default:
		w.vec.run(is, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
	}
}

// scaleAddBias sets C = beta·C + bias for an m×n C with row stride ldc, reading C only when
// beta is not 0. bias may be nil.
func scaleAddBias(m, n int, beta float32, c []float32, ldc int, bias []float32) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch {
		case beta == 0:
			clear(row)
		case beta != 1:
			for j := range row {
				row[j] *= beta
			}
		}
		if bias != nil {
			for j, v := range bias[:n] {
				row[j] += v
			}
		}
	}
}

// Grow returns buf resliced to n values, or a new slice when its capacity is short: the growth
// rule of every reusable scratch buffer.
func Grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}
