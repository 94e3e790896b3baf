//go:build !purego

package kernel

//go:generate go run -C _asm ./gemv -out ../gemv_amd64.s -stubs ../gemv_stubs_amd64.go -pkg kernel

// The dot-product kernels (gemv_amd64.s) indexed by the rows of A they take, 1 to GemvRows, one
// table per stored type of B.
var (
	gemvsF32  = [GemvRows + 1]func(n, k int, x *float32, ldx int, w *float32, ldw int, s *float32, lds int){nil, gemvF321AVX512, gemvF322AVX512, gemvF323AVX512, gemvF324AVX512}
	gemvsBF16 = [GemvRows + 1]func(n, k int, x *float32, ldx int, w *uint16, ldw int, s *float32, lds int){nil, gemvBF161AVX512, gemvBF162AVX512, gemvBF163AVX512, gemvBF164AVX512}
	gemvsF16  = [GemvRows + 1]func(n, k int, x *float32, ldx int, w *uint16, ldw int, s *float32, lds int){nil, gemvF161AVX512, gemvF162AVX512, gemvF163AVX512, gemvF164AVX512}
)

// gemv is run for m ≤ GemvRows rows of a row-major A against a transposed B (n rows of k values,
// row stride ldb) on AVX-512, k ≥ 1: the kernels set w.dots to the m×n dot products, reading
// each row of B once, in place, in its stored type; then C = alpha·dots + bias + beta·C, C read
// only when beta is not ±0.
func (w *sgemmVector) gemv(m, n, k int, alpha float32, a []float32, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.dots = Grow(w.dots, m*n)
	s := &w.dots[0]
	switch b.format {
	case f32:
		gemvsF32[m](n, k, &a[0], lda, &b.f32[0], ldb, s, n)
	case bfloat16:
		gemvsBF16[m](n, k, &a[0], lda, &b.half[0], ldb, s, n)
	default:
		gemvsF16[m](n, k, &a[0], lda, &b.half[0], ldb, s, n)
	}
	for i := range m {
		dots, row := w.dots[i*n:(i+1)*n], c[i*ldc:i*ldc+n]
		for j, d := range dots {
			v := float32(alpha * d)
			if bias != nil {
				v = float32(v + bias[j])
			}
			if beta != 0 {
				v = float32(v + float32(beta*row[j]))
			}
			row[j] = v
		}
	}
}
