package kernel

import (
	"fmt"
	"math"
)

// The bfloat16 GEMM: C = alpha·op(A)·op(B) + beta·C with the operands rounded to bfloat16 and
// the products summed in float32, as the AVX512_BF16 instruction VDPBF16PS computes them, at
// twice the rate of float32 FMAs. The operands are packed in k pairs (see _asm/gemm/bf16.go);
// each VDPBF16PS step adds to a float32 lane the two products of one pair, first the odd k
// one, then the even one, each rounded to float32 (TestVDPBF16PSOrder checks this order on the
// CPU), and the pure-Go path sums the same products in that order.

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C, then adds bias[j] to column j of every row
// when bias is not nil, with A and B rounded to bfloat16 and the products summed in float32.
// The layout rules are Sgemm's (row-major; op(A) is m×k, stored k×m when transA is set; op(B)
// is k×n, stored n×k when transB is set; C is m×n; leading dimensions lda, ldb, ldc), and so
// are the rules on beta (0: C is not read, so NaN or Inf in it do not propagate), bias,
// goroutines and allocations; it panics as Sgemm does.
//
// What is rounded where, so that a reference can reproduce it:
//
//  1. Every value of A and B is rounded to bfloat16 as VCVTNEPS2BF16 does (RoundBF16): to
//     nearest, ties to even, a subnormal float32 to zero of its sign, a NaN to a quiet NaN.
//  2. The products of two bfloat16 are exact in float32. k is cut into blocks of 512 values
//     (blockKBF16; the last block may be shorter), and for each value C(i,j) each block's
//     products are summed into a float32 accumulator acc that starts at +0: for each k pair
//     (2q, 2q+1) of the block, first acc += A(i,2q+1)·B(2q+1,j), then acc += A(i,2q)·B(2q,j),
//     each sum rounded to nearest float32. An odd k is completed with a zero pair half.
//  3. Then C(i,j) is updated with fused multiply-adds (fma: one rounding to nearest float32):
//     after the first block to fma(beta, C(i,j), fma(alpha, acc, b)), or to fma(alpha, acc, b)
//     when beta is ±0; after each later block to C(i,j) + fma(alpha, acc, b), rounded. b is
//     bias[j] after the last block when bias is not nil, and −0 otherwise.
//
// VDPBF16PS is also defined to flush partial sums below the float32 normal range to zero
// (FTZ), which the pure-Go path (the purego build tag, or a CPU without AVX512_BF16) does not;
// where they stay normal (or zero) the two paths give C bit for bit alike, which the tests
// check on random data with every kind of operand, transpose form and k blocking. The epilogue
// computes its fused multiply-adds in float64 on the pure-Go path; in the tests' cases that
// rounded as the hardware's float32 FMA.
//
// Compared with Sgemm on the same float32 inputs, C carries the error of bfloat16's 8-bit
// significand: on random normal inputs at k = 768 (64×256, the projection's form) the error is
// 2.4·10⁻³ of C in the Frobenius norm, at most 0.9% of C's rms (TestGemmBF16VsSgemm logs it).
func (w *Workspace) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.gemmBF16(bestBF16, transA, transB, m, n, k, alpha, operandB{f32: a}, lda, operandB{f32: b}, ldb, beta, c, ldc, bias)
}

// GemmBF16Half is GemmBF16 with B held in half precision, as SgemmHalf takes it: b holds the
// bit patterns of B's values, bfloat16 when bf16 is set and IEEE 754 binary16 otherwise, laid
// out as GemmBF16's b. A bfloat16 B is used as it is; a binary16 one is converted to float32
// (exactly) and then rounded to bfloat16 as step 1 of GemmBF16 says. A subnormal bfloat16 value
// of B counts as zero of its sign (VDPBF16PS reads its inputs so). The layer's projection x·Wᵀ
// of an m×k x with W stored [n, k] in bfloat16 is GemmBF16Half(false, true, m, n, k, 1, x, k,
// w, true, k, 0, c, n, bias). Rules, rounding and panics are GemmBF16's.
func (w *Workspace) GemmBF16Half(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, bf16 bool, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	f := f16
	if bf16 {
		f = bfloat16
	}
	w.gemmBF16(bestBF16, transA, transB, m, n, k, alpha, operandB{f32: a}, lda, operandB{half: b, format: f}, ldb, beta, c, ldc, bias)
}

// GemmBF16Bits is GemmBF16 with both A and B held as bfloat16 bits, used as they are (a
// subnormal counts as zero of its sign): a and b are laid out as GemmBF16's, with strides
// counted in values. Operands converted once (EncodeBF16 rounds as RoundBF16 does, except for
// subnormals, which it keeps and this product then reads as zero) can so be multiplied many
// times, as attention's Q, K and V tiles are, without GemmBF16's rounding of them at every
// call. Rules, summation order and panics are GemmBF16's.
func (w *Workspace) GemmBF16Bits(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	w.gemmBF16(bestBF16, transA, transB, m, n, k, alpha, operandB{half: a, format: bfloat16}, lda, operandB{half: b, format: bfloat16}, ldb, beta, c, ldc, bias)
}

// GemmBF16BitsA is GemmBF16 with A held as bfloat16 bits, used as they are (a subnormal counts
// as zero of its sign; a row-major A with an even k and lda is read in place, unpacked), and B
// as GemmBF16 takes it when b is not nil, else as GemmBF16Half takes it (bh, bfloat16 bits when
// bf16 is set, binary16 otherwise). A computed in float32 and rounded once with RoundBF16s
// gives the bits GemmBF16 would give on the float32 A. Rules, summation order and panics are
// GemmBF16's.
func (w *Workspace) GemmBF16BitsA(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []float32, bh []uint16, bf16 bool, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	ob := operandB{f32: b}
	if b == nil {
		ob = operandB{half: bh, format: f16}
		if bf16 {
			ob.format = bfloat16
		}
	}
	w.gemmBF16(bestBF16, transA, transB, m, n, k, alpha, operandB{half: a, format: bfloat16}, lda, ob, ldb, beta, c, ldc, bias)
}

// panelBF16 is the width of PackedBF16's panels: the AVX512_BF16 kernels' tile width.
const panelBF16 = 32

// PackedBF16 is a B operand of GemmBF16Bits, bfloat16 bits, packed once into the AVX512_BF16
// kernels' panels (⌈n/32⌉ panels of ⌈k/2⌉ k pairs × 32 columns), so that GemmBF16Packed can
// multiply parts of it many times without packing them again, as attention's query blocks
// multiply the tiles of one head's K and V. The zero value holds nothing; Pack fills it, reusing
// its memory. It is read-only for GemmBF16Packed, so goroutines may share it.
type PackedBF16 struct {
	bits []uint16
	k, n int // op(B) is k×n
	kp   int // pair rows per panel: ⌈k/2⌉
}

// Pack packs op(B) into p, replacing what p held: op(B) is k×n, stored n×k (row stride ldb)
// when trans is set, as GemmBF16Bits's transB says, else k×n. Attention's K [Tk, D] packs with
// trans, k = D, n = Tk (op(B) = Kᵀ); its V [Tk, Dv] without, k = Tk, n = Dv. Pack reports
// whether it packed: where GemmBF16 runs on pure Go (HasBF16 false) it packs nothing and leaves
// p empty, so that GemmBF16Packed takes no part of it. It panics on a negative size or a b too
// short for its shape.
func (p *PackedBF16) Pack(trans bool, k, n int, b []uint16, ldb int) bool {
	if k < 0 || n < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in PackedBF16.Pack: k=%d n=%d", k, n))
	}
	r, c := k, n
	if trans {
		r, c = n, k
	}
	checkLen("B", b, r, c, ldb)
	p.k, p.n, p.kp = 0, 0, 0
	if !hasBF16 {
		return false
	}
	p.k, p.n, p.kp = k, n, (k+1)/2
	p.pack(trans, b, ldb)
	return true
}

// Fits reports whether GemmBF16Packed takes rows [p0, p0+k) and columns [j0, j0+n) of p's
// op(B), giving GemmBF16Bits's results on them bit for bit: they lie within it, j0 is a
// multiple of 32 (a panel's first column), p0 is even (a pair's first row), and k is even or
// reaches p's last row (an odd k's pair is completed with p's zero padding, never with the next
// row).
func (p *PackedBF16) Fits(p0, k, j0, n int) bool {
	return p0 >= 0 && k >= 0 && j0 >= 0 && n >= 0 && p0+k <= p.k && j0+n <= p.n &&
		j0%panelBF16 == 0 && p0%2 == 0 && (k%2 == 0 || p0+k == p.k)
}

// GemmBF16Packed computes C = alpha·A·B + beta·C with A m×k row-major bfloat16 bits (stride
// lda), B rows [p0, p0+k) and columns [j0, j0+n) of b's op(B), and C m×n (stride ldc), then,
// when bias is not nil, adds bias[j] to column j of every row of C: what GemmBF16Bits(false,
// transB, m, n, k, alpha, a, lda, that part of op(B) as b packed it, …, beta, c, ldc, bias)
// computes, bit for bit, without packing B (a layer's weights, say, packed once for the many
// row blocks of its projection). Rules on beta and bias are GemmBF16's. It panics on a negative
// size, on slices too short for their shapes, and unless b.Fits(p0, k, j0, n).
func (w *Workspace) GemmBF16Packed(m, n, k int, alpha float32, a []uint16, lda int, b *PackedBF16, p0, j0 int, beta float32, c []float32, ldc int, bias []float32) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in GemmBF16Packed: m=%d n=%d k=%d", m, n, k))
	}
	if !b.Fits(p0, k, j0, n) {
		panic(fmt.Sprintf("kernel: GemmBF16Packed cannot take rows %d+%d and columns %d+%d of a packed %d×%d B", p0, k, j0, n, b.k, b.n))
	}
	if !packedTrivial(m, n, k, alpha, a, lda, beta, c, ldc, bias) {
		w.bvec.runPacked(m, n, k, alpha, a, lda, b, p0, j0, beta, c, ldc, bias)
	}
}

// RoundBF16 rounds f to bfloat16 as the AVX512_BF16 conversions VCVTNEPS2BF16 and
// VCVTNE2PS2BF16 do, and returns its bits: to nearest, ties to even; a subnormal f becomes zero
// of its sign (F32ToBF16 rounds it instead); a NaN becomes a quiet NaN with the top of its
// payload; values beyond the largest bfloat16 become ±Inf.
func RoundBF16(f float32) uint16 {
	b := math.Float32bits(f)
	switch {
	case b&0x7f800000 == 0: // zero or subnormal
		return uint16(b>>16) & 0x8000
	case b&0x7fffffff > 0x7f800000:
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// RoundBF16s sets dst[i] to RoundBF16(src[i]) for every i < len(dst) (src may be longer; it
// panics when it is shorter), with VCVTNE2PS2BF16 where the CPU has AVX512_BF16: the rounding
// GemmBF16 applies to its float32 operands, so that GemmBF16Bits on the results computes what
// GemmBF16 on src does. It differs from EncodeBF16 on subnormals, which it makes zero (as
// GemmBF16Bits reads them anyway), and is faster on processors whose narrowing stores are slow.
func RoundBF16s(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i := roundBF16sVector(dst, src); i < len(dst); i++ {
		dst[i] = RoundBF16(src[i])
	}
}

// bestBF16 is the path GemmBF16 takes: avx512 where the CPU has AVX512_BF16 (and this build
// has assembly), generic otherwise.
var bestBF16 = func() isa {
	if hasBF16 {
		return avx512
	}
	return generic
}()

// blockKBF16 is the k block of GemmBF16 (an even number): the products of a block are summed
// into one float32 accumulator per value of C. A variable so tests and benchmarks can vary it;
// both paths read it.
var blockKBF16 = 512

// blockNBF16 is the column block (nc) of the assembly path's packed B: kc×nc bfloat16 = 512 KiB.
var blockNBF16 = 512

// bf16At returns value i of operand x as bfloat16 bits: rounded by RoundBF16 when x is float32
// or binary16, as it is when bfloat16.
func (x operandB) bf16At(i int) uint16 {
	switch x.format {
	case f32:
		return RoundBF16(x.f32[i])
	case bfloat16:
		return x.half[i]
	}
	return RoundBF16(F16ToF32(x.half[i]))
}

// gemmBF16 is GemmBF16 and GemmBF16Half on path is (generic or avx512 with AVX512_BF16), for
// an A and a B of any format.
func (w *Workspace) gemmBF16(is isa, transA, transB bool, m, n, k int, alpha float32, a operandB, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel: negative dimension in GemmBF16: m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	checkLen("C", c, m, n, ldc)
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	for _, x := range []struct {
		name   string
		op     operandB
		r, col int
		ld     int
	}{{"A", a, ar, ac, lda}, {"B", b, br, bc, ldb}} {
		if x.op.format == f32 {
			checkLen(x.name, x.op.f32, x.r, x.col, x.ld)
		} else {
			checkLen(x.name, x.op.half, x.r, x.col, x.ld)
		}
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
		w.bgen.run(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
	default:
		w.bvec.run(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
	}
}

// bf16Operand is the float32 of bfloat16 h as VDPBF16PS multiplies it: a subnormal is zero.
func bf16Operand(h uint16) float32 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return BF16ToF32(h)
}

// bf16Store is the epilogue of one k block for one value of C: first tells whether the block is
// the first (beta applies), b is the bias to add (−0 for none).
func bf16Store(cv *float32, acc, alpha, beta, b float32, first bool) {
	t := fma32(alpha, acc, b)
	switch {
	case !first:
		t = *cv + t
	case beta != 0:
		t = fma32(beta, *cv, t)
	}
	*cv = t
}

// bf16Generic holds the buffers of GemmBF16's pure-Go path.
type bf16Generic struct {
	a, b []float32 // one k block of op(A) by rows and of op(B) by columns, bfloat16 values
}

// run is gemmBF16 on the pure-Go path for m, n, k > 0 and alpha ≠ 0, with the slices checked.
// Per k block it lays op(A)'s rows and op(B)'s columns out as bfloat16 values (made float32,
// the odd k padded with 0), then sums each value of C in VDPBF16PS's order.
func (g *bf16Generic) run(transA, transB bool, m, n, k int, alpha float32, a operandB, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	kc := min(k, blockKBF16)
	kw := (kc + 1) &^ 1
	g.a = Grow(g.a, m*kw)
	g.b = Grow(g.b, n*kw)
	negZero := float32(math.Copysign(0, -1))
	for pc := 0; pc < k; pc += kc {
		kcur := min(kc, k-pc)
		kp := (kcur + 1) &^ 1 // values per row, padded to whole pairs
		for i := range m {
			row := g.a[i*kp : i*kp+kp]
			for p := range kcur {
				idx := i*lda + pc + p
				if transA {
					idx = (pc+p)*lda + i
				}
				row[p] = bf16Operand(a.bf16At(idx))
			}
			if kcur&1 == 1 {
				row[kp-1] = 0
			}
		}
		for j := range n {
			col := g.b[j*kp : j*kp+kp]
			for p := range kcur {
				idx := (pc+p)*ldb + j
				if transB {
					idx = j*ldb + pc + p
				}
				col[p] = bf16Operand(b.bf16At(idx))
			}
			if kcur&1 == 1 {
				col[kp-1] = 0
			}
		}
		first, last := pc == 0, pc+kcur == k
		for i := range m {
			ar := g.a[i*kp : i*kp+kp]
			crow := c[i*ldc : i*ldc+n]
			for j := range crow {
				br := g.b[j*kp : j*kp+kp]
				var acc float32
				for q := 0; q < kp; q += 2 {
					acc += ar[q+1] * br[q+1]
					acc += ar[q] * br[q]
				}
				bj := negZero
				if last && bias != nil {
					bj = bias[j]
				}
				bf16Store(&crow[j], acc, alpha, beta, bj, first)
			}
		}
	}
}
