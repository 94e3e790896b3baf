//go:build !purego

package kernel

// The AVX512_BF16 path of GemmBF16. It is blocked like Sgemm's AVX-512 path (sgemm_amd64.go):
// row tiles of ≤ 14 rows of nearly equal height, 32-wide column panels (the last one masked),
// B packed kc×nc at a time, the first k block applying beta and the last the bias. What
// differs:
//
//   - Both operands are packed as bfloat16 k pairs (one 32-bit word per pair): B into 32-wide
//     panels, pair row after pair row (bf16PackBT* for a transposed B, bf16PackB* for a
//     row-major one, with Go loops for the ragged edges and an odd last k), and A, which the
//     float32 path reads in place, one row tile at a time into a small row-major buffer
//     (bf16Convert, VCVTNE2PS2BF16, for a row-major float32 A; Go loops otherwise) that stays
//     in L1 while the kernel sweeps the panels. A transposed float32 A is packed k-major
//     instead (bf16PackAT, 16 pairs a pair row, for the T kernels), as its pairs lie in two
//     rows of the stored A. Only a row-major bfloat16 A (GemmBF16Bits) with an even k and
//     stride is read in place, its rows being rows of pairs already.
//   - B is always packed: even the smallest B has to be converted and paired.
//   - The k block is blockKBF16 = 512: a packed value of B takes half the bytes, so twice the
//     k fits the same share of L2 as Sgemm's 256 float32. (kc = 1024 with nc = 256, which
//     spares k ≤ 1024 a second pass over C, looked a little faster, but not beyond the noise
//     of the shared machine it was measured on.)
//
// Measured on Zen 5, one thread (BenchmarkGemmBF16, 18 runs alternating with Sgemm, median
// call; the machine was shared with other work, so single runs scattered by up to 2×, and the
// ratio is each run's own): the VDPBF16PS peak is 446 GFLOP/s, 2.0× the FMA peak of 223. The
// projection 2048×2304×768 (NT) ran at 211 GFLOP/s against Sgemm's 107, a median ratio of
// 1.83× (best runs 325 against 176); 1024³ NT 2.11×, NN 2.06×, TN 1.85×. Predicted: just
// under 2×, the kernel being Sgemm's with each FMA replaced by a VDPBF16PS of twice the work,
// less a few percent for packing A, which Sgemm reads in place. A profile of the projection
// put 89% of the time in the kernels and about 7% in packing.

// kernelBF16 is an AVX512_BF16 micro-kernel (gemm_amd64.s): for its mr rows and the ≤ 32
// columns whose mask bit is set it sets C = alpha·A·B + bias + beta·C over k pairs, reading C
// only when beta is not ±0. A holds row i's pair q as its family says, B column j's pair q at
// b[2(q·sb+j)]; strides count pairs, ldc float32 values.
type kernelBF16 func(k int, a *uint16, sa int, b *uint16, sb int, c *float32, ldc int, alpha, beta float32, bias *float32, mask uint32)

// Kernels indexed by tile height; N reads A's pairs row-major, T k-major (pair q of row i at
// a[2(q·sa+i)]).
var (
	kernelsBF16N = [mrAVX512 + 1]kernelBF16{nil, gemmBF16AVX512N1, gemmBF16AVX512N2, gemmBF16AVX512N3, gemmBF16AVX512N4, gemmBF16AVX512N5, gemmBF16AVX512N6, gemmBF16AVX512N7, gemmBF16AVX512N8, gemmBF16AVX512N9, gemmBF16AVX512N10, gemmBF16AVX512N11, gemmBF16AVX512N12, gemmBF16AVX512N13, gemmBF16AVX512N14}
	kernelsBF16T = [mrAVX512 + 1]kernelBF16{nil, gemmBF16AVX512T1, gemmBF16AVX512T2, gemmBF16AVX512T3, gemmBF16AVX512T4, gemmBF16AVX512T5, gemmBF16AVX512T6, gemmBF16AVX512T7, gemmBF16AVX512T8, gemmBF16AVX512T9, gemmBF16AVX512T10, gemmBF16AVX512T11, gemmBF16AVX512T12, gemmBF16AVX512T13, gemmBF16AVX512T14}
)

// packATWidth is the width of a k-major A tile (the T kernels' sa): bf16PackAT packs 16 rows.
const packATWidth = 16

// bf16Vector holds the buffers of GemmBF16's assembly path.
type bf16Vector struct {
	pack  []uint16 // packed panels of B: kp pair rows × 32 pairs each
	apack []uint16 // one row tile of A: mr rows of kp pairs, or kp pair rows of 16
}

// run is gemmBF16 on AVX512_BF16 for m, n, k > 0 and alpha ≠ 0, with the slices checked.
func (w *bf16Vector) run(transA, transB bool, m, n, k int, alpha float32, a operandB, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	const nr = nrAVX512
	kc, nc := min(k, blockKBF16), min(n, blockNBF16)
	if nc < n {
		nc = max(nc/nr*nr, nr)
	}
	kpMax := (kc + 1) / 2
	w.pack = Grow(w.pack, 2*kpMax*((nc+nr-1)/nr*nr))
	w.apack = Grow(w.apack, 2*kpMax*packATWidth)

	// A row-major bfloat16 A whose rows hold whole pairs (k and lda even; kc is) is read in
	// place: its pairs are the words the kernel broadcasts.
	inPlaceA := a.format == bfloat16 && !transA && k%2 == 0 && lda%2 == 0
	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			kp := (kcur + 1) / 2
			packBF16B(w.pack, transB, kcur, ncur, b, pc, jc, ldb)
			w.kblock(transA, inPlaceA, m, k, kcur, pc, ncur, jc, alpha, a, lda, beta, c, ldc, bias,
				func(jr int) *uint16 { return &w.pack[jr*2*kp] })
		}
	}
}

// kblock runs the kernels over k block [pc, pc+kcur) (of k) for columns [jc, jc+ncur) of C: it
// reads A's row tiles in place (inPlaceA) or packs them, and B's panel for column jc+jr at
// panel(jr), its pair rows nr words apart. The first k block applies beta, the last adds the
// bias.
func (w *bf16Vector) kblock(transA, inPlaceA bool, m, k, kcur, pc, ncur, jc int, alpha float32, a operandB, lda int, beta float32, c []float32, ldc int, bias []float32, panel func(jr int) *uint16) {
	const nr = nrAVX512
	kp := (kcur + 1) / 2
	beta, bias = kBlock(pc, kcur, k, beta, bias)
	for i0, mr := range rowTiles(m, mrAVX512) {
		ap, sa, kern := &w.apack[0], kp, kernelsBF16N[mr]
		switch {
		case inPlaceA:
			ap, sa = &a.half[i0*lda+pc], lda/2
		case transA && a.format == f32:
			w.packAT(mr, kcur, a.f32, lda, i0, pc)
			sa, kern = packATWidth, kernelsBF16T[mr]
		default:
			w.packA(transA, mr, kcur, a, lda, i0, pc)
		}
		for jr := 0; jr < ncur; jr += nr {
			mask := ^uint32(0)
			if nrc := min(nr, ncur-jr); nrc < nr {
				mask = 1<<nrc - 1
			}
			biasp := &negZero[0]
			if bias != nil {
				biasp = &bias[jc+jr]
			}
			kern(kp, ap, sa, panel(jr), nr, &c[i0*ldc+jc+jr], ldc, alpha, beta, biasp, mask)
		}
	}
}

// pack sets p.bits to op(B), p.k×p.n, packed as packBF16B packs it.
func (p *PackedBF16) pack(trans bool, b []uint16, ldb int) {
	p.bits = Grow(p.bits, 2*p.kp*((p.n+nrAVX512-1)/nrAVX512*nrAVX512))
	if p.k > 0 && p.n > 0 {
		packBF16B(p.bits, trans, p.k, p.n, operandB{half: b, format: bfloat16}, 0, 0, ldb)
	}
}

// runPacked is GemmBF16Packed on AVX512_BF16 for m, n, k > 0 and alpha ≠ 0, with the slices
// and the part of b checked: run's loops for a row-major bfloat16 A, with the kernels reading
// b's panels from pair row p0/2 on instead of a packing of their own.
func (w *bf16Vector) runPacked(m, n, k int, alpha float32, a []uint16, lda int, b *PackedBF16, p0, j0 int, beta float32, c []float32, ldc int, bias []float32) {
	const nr = nrAVX512
	kc, nc := min(k, blockKBF16), min(n, blockNBF16)
	if nc < n {
		nc = max(nc/nr*nr, nr)
	}
	w.apack = Grow(w.apack, 2*((kc+1)/2)*packATWidth)
	inPlaceA := k%2 == 0 && lda%2 == 0 // as in run
	ao := operandB{half: a, format: bfloat16}
	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			// Column j's panel starts at j·2·b.kp, its pair row q 2·q·nr further.
			w.kblock(false, inPlaceA, m, k, kcur, pc, ncur, jc, alpha, ao, lda, beta, c, ldc, bias,
				func(jr int) *uint16 { return &b.bits[(j0+jc+jr)*2*b.kp+(p0+pc)*nr] })
		}
	}
}

// packA sets w.apack to rows i0…i0+mr−1 and columns pc…pc+kc−1 of op(A) as bfloat16, row-major
// with rows of ⌈kc/2⌉ pairs, an odd kc padded with 0.
func (w *bf16Vector) packA(transA bool, mr, kc int, a operandB, lda, i0, pc int) {
	kw := (kc + 1) &^ 1
	if transA {
		// A(i, p) = a[p·lda + i]: read along the stored rows, write down the tile's columns.
		for p := range kc {
			off := (pc+p)*lda + i0
			if a.format == f32 {
				for i, v := range a.f32[off : off+mr] {
					w.apack[i*kw+p] = RoundBF16(v)
				}
				continue
			}
			for i := range mr {
				w.apack[i*kw+p] = a.bf16At(off + i)
			}
		}
		if kc&1 == 1 {
			for i := range mr {
				w.apack[i*kw+kc] = 0
			}
		}
		return
	}
	for i := range mr {
		row := w.apack[i*kw : i*kw+kw]
		row[kw-1] = 0
		switch {
		case a.format == bfloat16:
			off := (i0+i)*lda + pc
			copy(row[:kc], a.half[off:off+kc])
		case a.format == f32:
			src := a.f32[(i0+i)*lda+pc : (i0+i)*lda+pc+kc]
			n32 := kc &^ 31
			if n32 > 0 {
				bf16Convert(&row[0], &src[0], n32)
			}
			for p := n32; p < kc; p++ {
				row[p] = RoundBF16(src[p])
			}
		default:
			off := (i0+i)*lda + pc
			for p := range kc {
				row[p] = a.bf16At(off + p)
			}
		}
	}
}

// packAT sets w.apack to rows i0…i0+mr−1 and columns pc…pc+kc−1 of op(A) = Aᵀ, float32 A
// stored k×m, as bfloat16 pairs k-major: pair q of row i at w.apack[2(q·16+i)], an odd kc
// padded with 0. Where 16 columns of A can be read from i0 on, bf16PackAT packs the whole pairs
// (the columns past mr are packed and never read); otherwise, and for an odd last k, Go does.
func (w *bf16Vector) packAT(mr, kc int, a []float32, lda, i0, pc int) {
	const wd = packATWidth
	off := pc*lda + i0 // A(i, p) = a[off + p·lda + i]
	full := kc / 2
	q0 := 0
	if full > 0 && off+(2*full-1)*lda+wd <= len(a) {
		bf16PackAT(&w.apack[0], &a[off], lda, full)
		q0 = full
	}
	for q := q0; q < (kc+1)/2; q++ {
		for i := range mr {
			d := w.apack[2*(q*wd+i):]
			d[0] = RoundBF16(a[off+2*q*lda+i])
			d[1] = 0
			if 2*q+1 < kc {
				d[1] = RoundBF16(a[off+(2*q+1)*lda+i])
			}
		}
	}
}

// packBTBF16 packs the first kc pairs of the first nj rows of the bfloat16 src (row stride ld)
// into pair rows of dst nrAVX512 wide, as bf16PackBTBF16 does (kc and nj positive multiples of
// 8), in the 16×16 blocks of bf16PackBT16BF16 where it can (blocks16).
func packBTBF16(dst, src []uint16, ld, kc, nj int) {
	const nr = nrAVX512
	blocks16(kc, nj, func(p0, j0, kc, nj int, wide bool) {
		d, s := &dst[2*(p0*nr+j0)], &src[j0*ld+2*p0]
		if wide {
			bf16PackBT16BF16(d, s, ld, kc, nj, nr)
		} else {
			bf16PackBTBF16(d, s, ld, kc, nj, nr)
		}
	})
}

// packBF16B packs rows pc…pc+kc−1 and columns jc…jc+nc−1 of op(B) into pack as ⌈nc/32⌉ panels
// of ⌈kc/2⌉ pair rows × 32 pairs, as bfloat16, zero-padded past nc and past an odd kc.
func packBF16B(pack []uint16, transB bool, kc, nc int, b operandB, pc, jc, ldb int) {
	const nr = nrAVX512
	kp, full := (kc+1)/2, kc/2 // pair rows, of which whole
	for jr := 0; jr < nc; jr += nr {
		nrc := min(nr, nc-jr)
		dst := pack[jr*2*kp : jr*2*kp+2*kp*nr]
		// set stores the pair rows q0…kp−1 of columns j0…nrc−1 with Go code, each op(B)(p, j)
		// at b[off + p·sp + j·sj].
		set := func(q0, j0, off, sp, sj int) {
			for q := q0; q < kp; q++ {
				for j := j0; j < nrc; j++ {
					d := dst[2*(q*nr+j):]
					d[0] = b.bf16At(off + 2*q*sp + j*sj)
					d[1] = 0
					if 2*q+1 < kc {
						d[1] = b.bf16At(off + (2*q+1)*sp + j*sj)
					}
				}
			}
		}
		if transB {
			off := (jc+jr)*ldb + pc // op(B)(p, j) = b[off + j·ldb + p]
			p8, j8 := full/8*8, nrc/8*8
			if p8 > 0 && j8 > 0 {
				last := off + (j8-1)*ldb + 2*p8 - 1 // the assembly reads no further
				switch b.format {
				case f32:
					_ = b.f32[last]
					bf16PackBT(&dst[0], &b.f32[off], ldb, p8, j8, nr)
				case bfloat16:
					_ = b.half[last]
					packBTBF16(dst, b.half[off:], ldb, p8, j8)
				default:
					_ = b.half[last]
					bf16PackBTF16(&dst[0], &b.half[off], ldb, p8, j8, nr)
				}
				// The right edge beside the assembly's blocks, then every column below them.
				for q := range p8 {
					for j := j8; j < nrc; j++ {
						d := dst[2*(q*nr+j):]
						d[0] = b.bf16At(off + j*ldb + 2*q)
						d[1] = b.bf16At(off + j*ldb + 2*q + 1)
					}
				}
				set(p8, 0, off, 1, ldb)
			} else {
				set(0, 0, off, 1, ldb)
			}
		} else {
			off := pc*ldb + jc + jr // op(B)(p, j) = b[off + p·ldb + j]
			if nrc == nr && full > 0 {
				last := off + (2*full-1)*ldb + nr - 1
				switch b.format {
				case f32:
					_ = b.f32[last]
					bf16PackB(&dst[0], &b.f32[off], ldb, full)
				case bfloat16:
					_ = b.half[last]
					bf16PackBBF16(&dst[0], &b.half[off], ldb, full)
				default:
					_ = b.half[last]
					bf16PackBF16(&dst[0], &b.half[off], ldb, full)
				}
				set(full, 0, off, ldb, 1)
			} else {
				set(0, 0, off, ldb, 1)
			}
		}
		if nrc < nr {
			for q := range kp {
				clear(dst[2*(q*nr+nrc) : 2*(q*nr+nr)])
			}
		}
	}
}

// roundBF16sVector converts the first multiple of 32 values of src into dst with
// VCVTNE2PS2BF16 where the CPU has AVX512_BF16, and returns how many it converted.
func roundBF16sVector(dst []uint16, src []float32) int {
	n := len(src) &^ 31
	if !hasBF16 || n == 0 {
		return 0
	}
	bf16Convert(&dst[0], &src[0], n)
	return n
}
