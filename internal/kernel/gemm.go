// Package kernel holds the numeric loops under the attention layer: matrix products and the
// row operations of softmax. Every function here works on float32 and float64 alike; the float64
// instantiation is the reference the tests and `mha explain` trust, the float32 one is the path
// the layer runs.
package kernel

import (
	"fmt"
	"math"
	"unsafe"
)

// Float is the element type of every kernel.
type Float interface {
	~float32 | ~float64
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C, where op(X) is X, or Xᵀ when the matching trans
// flag is set. All matrices are row-major: op(A) is m×k, op(B) is k×n and C is m×n, with leading
// dimensions (row strides) lda, ldb and ldc. When beta is 0, C is overwritten without being read,
// so NaN or Inf left in it do not propagate. Gemm panics when a slice is too short for the
// dimensions given: callers validate shapes before they get here.
func Gemm[F Float](transA, transB bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkOperands(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
	if k == 0 || alpha == 0 {
		return
	}
	switch {
	case !transA && !transB:
		for i := range m {
			ci := c[i*ldc : i*ldc+n]
			for p, av := range a[i*lda : i*lda+k] {
				Axpy(alpha*av, b[p*ldb:p*ldb+n], ci)
			}
		}
	case !transA && transB:
		for i := range m {
			ai := a[i*lda : i*lda+k]
			ci := c[i*ldc : i*ldc+n]
			for j := range ci {
				ci[j] += alpha * Dot(ai, b[j*ldb:j*ldb+k])
			}
		}
	case transA && !transB:
		for p := range k {
			bp := b[p*ldb : p*ldb+n]
			for i, av := range a[p*lda : p*lda+m] {
				Axpy(alpha*av, bp, c[i*ldc:i*ldc+n])
			}
		}
	default:
		for i := range m {
			ci := c[i*ldc : i*ldc+n]
			for j := range ci {
				var s F
				for p := range k {
					s += a[p*lda+i] * b[j*ldb+p]
				}
				ci[j] += alpha * s
			}
		}
	}
}

// checkOperands panics unless A, B and C hold the matrices a GEMM of these sizes reads and
// writes. B's elements may be of another type than A's and C's (half-precision bits).
func checkOperands[F Float, E any](transA, transB bool, m, n, k int, a []F, lda int, b []E, ldb int, c []F, ldc int) {
	checkLen("C", c, m, n, ldc)
	if transA {
		checkLen("A", a, k, m, lda)
	} else {
		checkLen("A", a, m, k, lda)
	}
	if transB {
		checkLen("B", b, n, k, ldb)
	} else {
		checkLen("B", b, k, n, ldb)
	}
}

// checkLen panics unless x holds a rows×cols matrix with row stride ld.
func checkLen[E any](name string, x []E, rows, cols, ld int) {
	if rows == 0 || cols == 0 {
		return
	}
	if ld < cols || len(x) < (rows-1)*ld+cols {
		panic(fmt.Sprintf("kernel: %s has %d values and stride %d, too few for %d×%d", name, len(x), ld, rows, cols))
	}
}

// Dot returns Σ x[i]·y[i] over len(x) values; y must be at least as long as x.
func Dot[F Float](x, y []F) F {
	y = y[:len(x)]
	var s0, s1, s2, s3 F
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// GemmDot returns Σ x[i]·y[i] summed as Sgemm sums one element of C with alpha = 1, beta = 0
// and k = len(x) ≤ 256 (one block of k): from 0, in order, each step one fused multiply-add on the
// AVX2 and AVX-512 paths, a product then an addition on the pure-Go one, so that it has the
// bits of the same values' product through Sgemm. FlashAttention's backward forms D = dO·O with
// it: a row whose one weight is 1 (O = V) then gets dP − D = 0 exactly, as PyTorch's
// rowsum(P ∘ dP) does. y must be at least as long as x.
func GemmDot(x, y []float32) float32 { return gemmDot(best, x, y) }

func gemmDot(is isa, x, y []float32) float32 {
	y = y[:len(x)]
	var s float32
	if is == generic {
		for i, v := range x {
			s += v * y[i] // as the pure-Go kernel's c += a * b
		}
		return s
	}
	for i, v := range x {
		s = fma32(v, y[i], s)
	}
	return s
}

// fma32 returns a·b + c rounded once to float32, as VFMADD231PS does. The product is exact in
// float64, so the float64 sum s is a·b + c rounded once; rounding s to float32 then gives the
// same as rounding the exact sum unless s lies exactly halfway between two float32 values (or in
// float32's subnormal range, where the halfway points are spaced otherwise), which
// fma32Halfway settles.
func fma32(a, b, c float32) float32 {
	s := float64(a)*float64(b) + float64(c)
	if math.Float64bits(s)&(1<<29-1) != 1<<28 && math.Abs(s) >= 0x1p-126 {
		return float32(s) // also ±Inf and NaN
	}
	return fma32Halfway(a, b, c)
}

// fma32Halfway is fma32's slow path: the sum's rounding error is recovered (TwoSum), and a float64
// sum exactly halfway between two float32 values is decided by the error's sign.
func fma32Halfway(a, b, c float32) float32 {
	p, q := float64(a)*float64(b), float64(c)
	s := p + q
	r := float32(s)
	t := s - p
	e := (p - (s - t)) + (q - t) // s + e = p + q exactly
	d := s - float64(r)          // how far rounding to float32 moved s
	if e == 0 || d == 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return r
	}
	other := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), d)))
	if float64(other)-s != d { // s is not halfway between r and its neighbour on s's side
		return r
	}
	if (e > 0) == (d > 0) { // the exact sum lies past the midpoint, on other's side
		return other
	}
	return r
}

// Axpy computes y[i] += alpha·x[i] over len(x) values, the product rounded before the sum; y must
// be at least as long as x. float32 runs on the fastest instruction set the CPU has.
func Axpy[F Float](alpha F, x, y []F) {
	y = y[:len(x)]
	if unsafe.Sizeof(alpha) == 4 && len(x) > 0 { // float32: a constant of the instantiation
		saxpy(best, *(*float32)(unsafe.Pointer(&alpha)), f32s(x), f32s(y))
		return
	}
	for i, v := range x {
		y[i] += alpha * v
	}
}

// f32s is x, whose elements are 4 bytes (a float32 type), as a []float32.
func f32s[F Float](x []F) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// saxpyGeneric is Axpy in Go, for float32.
func saxpyGeneric(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
