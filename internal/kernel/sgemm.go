package kernel

import (
	"fmt"
	"iter"
)

// Workspace holds the buffers Sgemm, SgemmHalf and GemmBF16 pack their operands into. The zero value is
// ready to use; it grows to the largest problem it has seen and then stops allocating: a later
// call of the same size or smaller makes no heap allocation. A Workspace must not be used by two
// goroutines at once: give each worker its own.
type Workspace struct {
	vec sgemmVector  // buffers of the assembly path
	gen sgemmGeneric // buffers of the pure-Go path

	bvec bf16Vector  // buffers of GemmBF16's assembly path
	bgen bf16Generic // buffers of GemmBF16's pure-Go path
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

// SgemmHalf is Sgemm with B held in half precision: b holds the bit patterns of B's values,
// bfloat16 when bf16 is set and IEEE 754 binary16 otherwise, laid out as Sgemm's b (k×n, or n×k
// when transB is set, with row stride ldb, counted in values). The values are decoded to float32
// while B is packed, a block at a time, never as a whole, or, for the dot products of at most
// GemvRows rows, in registers as they are read; decoding is exact and the products are summed
// in Sgemm's order, so C comes out bit for bit as Sgemm's on the decoded B. The layer's
// projection x·Wᵀ of an m×k x with W stored [n, k] is SgemmHalf(false, true, m, n, k, 1, x, k,
// w, bf16, k, 0, c, n, bias).
//
// SgemmHalf has Sgemm's rules on beta, bias, goroutines and allocations, and panics as Sgemm
// does. It packs B in Sgemm's blocks, and where Sgemm reads a small row-major B in place
// (k·n ≤ 128 Ki), it packs that B whole, its n columns rounded up to whole panels of 16 or 32,
// so its Workspace may grow larger.
func (w *Workspace) SgemmHalf(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, bf16 bool, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.sgemmHalf(best, transA, transB, m, n, k, alpha, a, lda, b, bf16, ldb, beta, c, ldc, bias)
}

// GemvRows is the most rows of A that Sgemm and SgemmHalf multiply by a transposed B (a
// projection's weights W [n, k]) as dot products on AVX-512: each row of W read once, in place,
// in its stored type, with no packing; a decode step's x·Wᵀ is such a product. Each dot product
// is then summed in one fixed order whatever the rows, so a row's result does not depend on how
// many rows come with it, nor on whether W is float32 or half precision.
const GemvRows = 4

// GemvCols returns the columns of C per task for a product of at most GemvRows rows with a
// transposed B of n rows, on workers goroutines: about a quarter of each worker's share, a
// multiple of 16, at least 16 and at most maxCols. Such a product reads every row of B once and
// is bound by that read, so it is split finely enough to keep every worker reading; its results
// do not depend on the split.
func GemvCols(n, workers, maxCols int) int {
	share := (n + 4*max(workers, 1) - 1) / (4 * max(workers, 1))
	return min(maxCols, max(16, (share+15)/16*16))
}

// PackedF32 is a transposed B operand of Sgemm, a projection's weights W [n, k] say, packed
// once into the AVX-512 kernels' panels (⌈n/32⌉ panels of k rows × 32 columns of Wᵀ), so that
// SgemmPacked can multiply it by many blocks of rows without packing it again. The zero value
// holds nothing; Pack fills it, reusing its memory. It is read-only for SgemmPacked, so
// goroutines may share it.
type PackedF32 struct {
	f    []float32
	k, n int // op(B) = Bᵀ is k×n
}

// Pack packs op(B) = Bᵀ into p, replacing what p held: B is stored n×k with row stride ldb, as
// Sgemm's b with transB. It reports whether it packed: only the AVX-512 kernels read packed
// panels, so on other instruction sets (and under purego) it packs nothing and leaves p empty,
// and the caller multiplies with Sgemm instead. It panics on a negative size or a b too short
// for its shape.
func (p *PackedF32) Pack(k, n int, b []float32, ldb int) bool {
	if k < 0 || n < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in PackedF32.Pack: k=%d n=%d", k, n))
	}
	checkLen("B", b, n, k, ldb)
	p.k, p.n = 0, 0
	if best != avx512 {
		return false
	}
	p.k, p.n = k, n
	p.pack(b, ldb)
	return true
}

// SgemmPacked computes C = alpha·A·op(B) + beta·C with A m×k row-major (stride lda), op(B) the
// k×n operand b holds, and C m×n (stride ldc), then, when bias is not nil, adds bias[j] to
// column j of every row of C: Sgemm(false, true, m, n, k, alpha, a, lda, B, ldb, beta, c, ldc,
// bias) on the B that b packed, without packing B; bit for bit when m > GemvRows (for fewer
// rows Sgemm sums dot products, see GemvRows, and its C differs in the last bits; a caller that
// needs those bits calls Sgemm on the rows of B instead). An empty b (Pack returned false)
// has n = 0: there is no C to compute. Rules on beta and bias are Sgemm's; it panics when A, C or
// bias is too short for the dimensions.
func (w *Workspace) SgemmPacked(m int, alpha float32, a []float32, lda int, b *PackedF32, beta float32, c []float32, ldc int, bias []float32) {
	n, k := b.n, b.k
	if m < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in SgemmPacked: m=%d", m))
	}
	if !packedTrivial(m, n, k, alpha, a, lda, beta, c, ldc, bias) {
		w.vec.runPacked(m, alpha, a, lda, b, beta, c, ldc, bias)
	}
}

// packedTrivial checks the A, C and bias of a product with a packed B (SgemmPacked,
// GemmBF16Packed) against its sizes, panicking when one is too short, and does the product where
// there is nothing to multiply: nothing where C is empty, C = beta·C + bias where k or alpha is
// 0. It reports whether that was the whole product.
func packedTrivial[E float32 | uint16](m, n, k int, alpha float32, a []E, lda int, beta float32, c []float32, ldc int, bias []float32) bool {
	if m == 0 || n == 0 {
		return true
	}
	checkLen("C", c, m, n, ldc)
	checkLen("A", a, m, k, lda)
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("kernel: bias has %d values, too few for %d columns", len(bias), n))
	}
	if k == 0 || alpha == 0 {
		scaleAddBias(m, n, beta, c, ldc, bias)
		return true
	}
	return false
}

// kBlock returns the beta and the bias of the pass over k block [pc, pc+kcur) of k: the first
// block applies beta and the later ones add into C (beta 1); only the last adds the bias.
func kBlock(pc, kcur, k int, beta float32, bias []float32) (float32, []float32) {
	if pc > 0 {
		beta = 1
	}
	if pc+kcur < k {
		bias = nil
	}
	return beta, bias
}

// sgemm is Sgemm on the instruction set is, which must be one of available().
func (w *Workspace) sgemm(is isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.gemm(is, transA, transB, m, n, k, alpha, a, lda, operandB{f32: b}, ldb, beta, c, ldc, bias)
}

// sgemmHalf is SgemmHalf on the instruction set is, which must be one of available().
func (w *Workspace) sgemmHalf(is isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, bf16 bool, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	f := f16
	if bf16 {
		f = bfloat16
	}
	w.gemm(is, transA, transB, m, n, k, alpha, a, lda, operandB{half: b, format: f}, ldb, beta, c, ldc, bias)
}

// bFormat is how the B operand of a product is stored.
type bFormat uint8

const (
	f32      bFormat = iota // float32 values
	bfloat16                // bfloat16 bits, decoded while B is packed
	f16                     // IEEE 754 binary16 bits, decoded while B is packed
)

// operandB is the B operand of a product: f32 holds its values when format is f32, half holds
// their bits otherwise.
type operandB struct {
	f32    []float32
	half   []uint16
	format bFormat
}

// decode sets dst to the len(dst) values of half-precision b starting at index off, decoded on
// the instruction set is.
func (b operandB) decode(is isa, dst []float32, off int) {
	src := b.half[off : off+len(dst)]
	if b.format == bfloat16 {
		decodeBF16(is, dst, src)
	} else {
		decodeF16(is, dst, src)
	}
}

// gemm is sgemm and sgemmHalf: the checks, then the path of the instruction set is.
func (w *Workspace) gemm(is isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in Sgemm: m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	if b.format == f32 {
		checkOperands(transA, transB, m, n, k, a, lda, b.f32, ldb, c, ldc)
	} else {
		checkOperands(transA, transB, m, n, k, a, lda, b.half, ldb, c, ldc)
	}
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

// Transpose sets dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols: the cols×rows
// transpose of a rows×cols row-major block, on the fastest instruction set the CPU has (8×8
// blocks in AVX, as Sgemm packs a transposed B). It panics when a slice is too short or a
// stride smaller than its row's width.
func Transpose(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	checkLen("Transpose's src", src, rows, cols, lds)
	checkLen("Transpose's dst", dst, cols, rows, ldd)
	transpose(best, dst, ldd, src, lds, rows, cols)
}

func transposeGeneric(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	for r := range rows {
		for c, x := range src[r*lds : r*lds+cols] {
			dst[c*ldd+r] = x
		}
	}
}

// rowTiles splits m > 0 rows into ⌈m/mrMax⌉ tiles of nearly equal height, the first m mod tiles
// one row taller than the rest, so that no tile is a thin remainder, and yields each tile's
// first row and height.
func rowTiles(m, mrMax int) iter.Seq2[int, int] {
	return func(yield func(i0, mr int) bool) {
		tiles := (m + mrMax - 1) / mrMax
		short, taller := m/tiles, m%tiles
		i0 := 0
		for t := range tiles {
			mr := short
			if t < taller {
				mr++
			}
			if !yield(i0, mr) {
				return
			}
			i0 += mr
		}
	}
}

// RowTiles appends to dst the first row of each tile into which Sgemm, SgemmHalf and GemmBF16
// cut m > 0 rows, then m, and returns it: each tile is as tall as one register tile of the
// kernels this CPU runs (all m rows are one tile on pure Go). A caller that needs only some
// columns in each tile computes them with one product per tile and still gets full-height
// kernels.
func RowTiles(dst []int, m int) []int {
	mr := tileHeight(best)
	if mr == 0 {
		mr = max(m, 1)
	}
	for i0 := range rowTiles(m, mr) {
		dst = append(dst, i0)
	}
	return append(dst, m)
}

// Grow returns buf resliced to n values, or a new slice when its capacity is short: the growth
// rule of every reusable scratch buffer.
func Grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}
