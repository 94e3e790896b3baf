//go:build !purego

package kernel

import "math"

//go:generate sh -c "cd _asm && go run ./gemm -out ../gemm_amd64.s -stubs ../gemm_stubs_amd64.go -pkg kernel"

// The vector path of Sgemm. A micro-kernel (gemm_amd64.s) keeps an mr×nr tile of C in registers
// while it walks k: per k step it loads nr values of B (two vectors) and broadcasts mr values of
// A, one per row. The driver here cuts C into such tiles:
//
//   - Rows: m is split into ⌈m/mrMax⌉ tiles of nearly equal height (every tile gets mrMax or a
//     row or two less), so no tile is a thin remainder; there is a kernel for every height.
//   - Columns: nr-wide panels; the last one is masked (AVX-512) or goes through a scratch tile
//     (AVX2).
//   - A is read in place, row-major or, when transposed, k-major: one kernel family each. A row
//     panel (mr×kc, ≤ 14 KiB) stays in L1 while the kernel sweeps the columns. A transposed A
//     that serves several column panels is first copied into a contiguous panel: its k steps
//     lie a whole row of A apart, and with strides of 1 KiB multiples they collide in L1 (AVX2
//     TN 1024³ went from 83 to 116 GFLOP/s). Packing a row-major A would need a transpose,
//     and reading it in place measured as fast as peak, so it is never packed.
//   - B is read in place when it is row-major and the problem is small (the attention tiles),
//     otherwise packed, kc×nc at a time, into nr-wide k-major panels that stay in L2. A
//     transposed B is always packed: that is where transB is handled. A PackedF32 holds such
//     panels of a whole transposed B, for SgemmPacked to run these loops on without packing.
//   - k is cut into kc blocks when B is packed; the first block applies beta, the last the bias.
//   - A half-precision B (SgemmHalf) is always packed, and decoded as it is: a transposed one
//     by sgemmPackBTBF16 or sgemmPackBTF16, sgemmPackBT with a decoding load, a row-major one
//     by the half decoders straight into the panel's rows. Its blocking is the one a float32 B
//     would get (kc = k and nc = n where that one is read in place), so that the kernels sum
//     the same products in the same order and the results agree to the bit.

const (
	mrAVX512 = 14 // largest tile height of the AVX-512 kernels
	nrAVX512 = 32 // tile width of the AVX-512 kernels: two zmm
	mrAVX2   = 6  // largest tile height of the AVX2 kernels
	nrAVX2   = 16 // tile width of the AVX2 kernels: two ymm
)

// tileHeight is the largest tile height of is's kernels, 0 for the generic path.
func tileHeight(is isa) int {
	switch is {
	case avx512:
		return mrAVX512
	case avx2:
		return mrAVX2
	}
	return 0
}

// Blocking. Variables rather than constants so benchmarks can tune them.
var (
	blockK = 256 // kc: k values per packed block of B
	blockN = 512 // nc: columns per packed block of B (kc×nc floats = 512 KiB, half of L2)

	// B is read in place (NN and TN) when m ≤ inPlaceM and k·n ≤ inPlaceKN: packing would
	// cost more than the strided reads it saves.
	inPlaceM  = 256
	inPlaceKN = 128 * 1024

	// A transposed A is copied panel by panel when it serves at least this many column panels.
	packAMinN = [...]int{avx2: 4, avx512: 4}
)

// kernel512 is an AVX-512 micro-kernel (gemm_amd64.s): for its mr rows and the ≤ 32 columns whose
// mask bit is set it sets C = alpha·A·B + bias + beta·C over k steps, reading C only when beta
// is not ±0. Strides sa, sb, ldc count float32 values; B and bias are read 32 wide (masked for
// bias), A as the kernel family's layout says.
type kernel512 func(k int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, alpha, beta float32, bias *float32, mask uint32)

// kernel256 is an AVX2 micro-kernel: kernel512 without the mask, always 16 columns wide.
type kernel256 func(k int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, alpha, beta float32, bias *float32)

// Kernels indexed by tile height; N reads A row-major, T k-major.
var (
	kernels512N = [mrAVX512 + 1]kernel512{nil, sgemmAVX512N1, sgemmAVX512N2, sgemmAVX512N3, sgemmAVX512N4, sgemmAVX512N5, sgemmAVX512N6, sgemmAVX512N7, sgemmAVX512N8, sgemmAVX512N9, sgemmAVX512N10, sgemmAVX512N11, sgemmAVX512N12, sgemmAVX512N13, sgemmAVX512N14}
	kernels512T = [mrAVX512 + 1]kernel512{nil, sgemmAVX512T1, sgemmAVX512T2, sgemmAVX512T3, sgemmAVX512T4, sgemmAVX512T5, sgemmAVX512T6, sgemmAVX512T7, sgemmAVX512T8, sgemmAVX512T9, sgemmAVX512T10, sgemmAVX512T11, sgemmAVX512T12, sgemmAVX512T13, sgemmAVX512T14}
	kernels256N = [mrAVX2 + 1]kernel256{nil, sgemmAVX2N1, sgemmAVX2N2, sgemmAVX2N3, sgemmAVX2N4, sgemmAVX2N5, sgemmAVX2N6}
	kernels256T = [mrAVX2 + 1]kernel256{nil, sgemmAVX2T1, sgemmAVX2T2, sgemmAVX2T3, sgemmAVX2T4, sgemmAVX2T5, sgemmAVX2T6}
)

// negZero is the bias of a call without one: adding −0 leaves every value as it is, −0 included.
var negZero = func() (z [nrAVX512]float32) {
	for i := range z {
		z[i] = float32(math.Copysign(0, -1))
	}
	return
}()

// sgemmVector holds the buffers of the assembly path.
type sgemmVector struct {
	pack  []float32 // packed panels of B (kc×nr each)
	apack []float32 // one packed row panel of a transposed A (kc×mr)
	edge  []float32 // one zero-padded panel of B read in place past the end of its slice
	dots  []float32 // the dot products of gemv, m×n

	tile  [mrAVX2 * nrAVX2]float32 // AVX2 edge tiles of C
	btile [nrAVX2]float32          // bias of an AVX2 edge tile
}

// run is sgemm on AVX-512 or AVX2 for m, n, k > 0 and alpha ≠ 0, with the slices checked.
func (w *sgemmVector) run(is isa, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if is == avx512 && !transA && transB && m <= GemvRows {
		w.gemv(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)
		return
	}
	mrMax, nr := mrAVX2, nrAVX2
	if is == avx512 {
		mrMax, nr = mrAVX512, nrAVX512
	}
	blocked := transB || m > inPlaceM || k*n > inPlaceKN
	packB := blocked || b.format != f32
	kc, nc := k, n
	if blocked {
		kc, nc = min(k, blockK), min(n, blockN)
		if nc < n {
			nc = max(nc/nr*nr, nr)
		}
	}
	if packB {
		w.pack = Grow(w.pack, kc*((nc+nr-1)/nr*nr))
	}

	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			if packB {
				w.packB(is, transB, kcur, ncur, nr, b, pc, jc, ldb)
			}
			bt, bs := kBlock(pc, kcur, k, beta, bias)
			for i0, mr := range rowTiles(m, mrMax) {
				var ap *float32
				sa := lda
				switch {
				case !transA:
					ap = &a[i0*lda+pc]
				case ncur >= packAMinN[is]*nr:
					// A k-major with a large stride: each k step would touch a new line, and
					// strides of 1 KiB multiples make them collide in L1. Copy the panel once;
					// ncur/nr kernels reuse it.
					w.apack = Grow(w.apack, kcur*mr)
					packAT(is, w.apack, a, (pc*lda)+i0, lda, kcur, mr)
					ap, sa = &w.apack[0], mr
				default:
					ap = &a[pc*lda+i0]
				}
				coff := i0 * ldc
				for jr := 0; jr < ncur; jr += nr {
					nrc := min(nr, ncur-jr)
					var bp *float32
					sb := nr
					if packB {
						bp = &w.pack[jr*kcur]
					} else {
						bp, sb = w.inPlaceB(b.f32, ldb, pc, kcur, jc+jr, nr, nrc)
					}
					biasp := &negZero[0]
					if bs != nil {
						biasp = &bs[jc+jr]
					}
					cp := coff + jc + jr
					if is == avx512 {
						mask := ^uint32(0)
						if nrc < nr {
							mask = 1<<nrc - 1
						}
						kern := kernels512N[mr]
						if transA {
							kern = kernels512T[mr]
						}
						kern(kcur, ap, sa, bp, sb, &c[cp], ldc, alpha, bt, biasp, mask)
						continue
					}
					kern := kernels256N[mr]
					if transA {
						kern = kernels256T[mr]
					}
					if nrc == nr {
						kern(kcur, ap, sa, bp, sb, &c[cp], ldc, alpha, bt, biasp)
						continue
					}
					// Edge tile: run the kernel on a scratch tile and copy the valid part.
					if bs != nil {
						clear(w.btile[:])
						copy(w.btile[:], bs[jc+jr:jc+jr+nrc])
						biasp = &w.btile[0]
					}
					if bt != 0 {
						for i := range mr {
							copy(w.tile[i*nrAVX2:i*nrAVX2+nrc], c[cp+i*ldc:cp+i*ldc+nrc])
						}
					}
					kern(kcur, ap, sa, bp, sb, &w.tile[0], nrAVX2, alpha, bt, biasp)
					for i := range mr {
						copy(c[cp+i*ldc:cp+i*ldc+nrc], w.tile[i*nrAVX2:i*nrAVX2+nrc])
					}
				}
			}
		}
	}
}

// runPacked is SgemmPacked on AVX-512 for m, n, k > 0 and alpha ≠ 0, with the slices checked:
// run's loops for a row-major A and a transposed B, in run's k blocks, with the kernels reading
// b's panels instead of a packing of their own.
func (w *sgemmVector) runPacked(m int, alpha float32, a []float32, lda int, b *PackedF32, beta float32, c []float32, ldc int, bias []float32) {
	const nr = nrAVX512
	k, n := b.k, b.n
	kc := min(k, blockK)
	for pc := 0; pc < k; pc += kc {
		kcur := min(kc, k-pc)
		bt, bs := kBlock(pc, kcur, k, beta, bias)
		for i0, mr := range rowTiles(m, mrAVX512) {
			for jr := 0; jr < n; jr += nr {
				mask := ^uint32(0)
				if nrc := n - jr; nrc < nr {
					mask = 1<<nrc - 1
				}
				biasp := &negZero[0]
				if bs != nil {
					biasp = &bs[jr]
				}
				kernels512N[mr](kcur, &a[i0*lda+pc], lda, &b.f[jr*k+pc*nr], nr, &c[i0*ldc+jr], ldc, alpha, bt, biasp, mask)
			}
		}
	}
}

// pack sets p.f to op(B), p.k×p.n, B stored p.n×p.k: packPanels' panels of all p.k rows.
func (p *PackedF32) pack(b []float32, ldb int) {
	p.f = Grow(p.f, p.k*((p.n+nrAVX512-1)/nrAVX512*nrAVX512))
	packPanels(avx512, p.f, true, p.k, p.n, nrAVX512, operandB{f32: b}, 0, 0, ldb)
}

// inPlaceB returns the address and k-stride of the kc×nr panel of a row-major B whose top-left
// value is b[pc·ldb+j]. Only nrc ≤ nr of its columns are wanted, but the kernel reads nr; when
// those reads would run past the end of b the panel is copied, zero-padded, into w.edge.
func (w *sgemmVector) inPlaceB(b []float32, ldb, pc, kc, j, nr, nrc int) (*float32, int) {
	off := pc*ldb + j
	if nrc == nr || off+(kc-1)*ldb+nr <= len(b) {
		return &b[off], ldb
	}
	w.edge = Grow(w.edge, kc*nr)
	for p := range kc {
		row := w.edge[p*nr : (p+1)*nr]
		copy(row, b[off+p*ldb:off+p*ldb+nrc])
		clear(row[nrc:])
	}
	return &w.edge[0], nr
}

// packB packs rows pc…pc+kc−1 and columns jc…jc+nc−1 of op(B) into w.pack (packPanels).
func (w *sgemmVector) packB(is isa, transB bool, kc, nc, nr int, b operandB, pc, jc, ldb int) {
	packPanels(is, w.pack, transB, kc, nc, nr, b, pc, jc, ldb)
}

// packPanels packs rows pc…pc+kc−1 and columns jc…jc+nc−1 of op(B) into pack as ⌈nc/nr⌉ panels
// of kc×nr values, k-major, the last one zero-padded. A half-precision B is decoded on the
// instruction set is.
func packPanels(is isa, pack []float32, transB bool, kc, nc, nr int, b operandB, pc, jc, ldb int) {
	for jr := 0; jr < nc; jr += nr {
		nrc := min(nr, nc-jr)
		dst := pack[jr*kc : jr*kc+kc*nr]
		switch {
		case !transB:
			off := pc*ldb + jc + jr
			for p := range kc {
				row := dst[p*nr : p*nr+nrc]
				if b.format == f32 {
					copy(row, b.f32[off+p*ldb:])
				} else {
					b.decode(is, row, off+p*ldb)
				}
			}
		default:
			// op(B)(p, j) = b[j·ldb + p]: transpose.
			packBT(is, dst, b, (jc+jr)*ldb+pc, ldb, kc, nrc, nr)
		}
		if nrc < nr {
			for p := range kc {
				clear(dst[p*nr+nrc : p*nr+nr])
			}
		}
	}
}

// at returns value i of b as float32.
func (b operandB) at(i int) float32 {
	switch b.format {
	case f32:
		return b.f32[i]
	case bfloat16:
		return BF16ToF32(b.half[i])
	}
	return F16ToF32(b.half[i])
}

// packBT sets dst[p·nr+j] = op(B)(p, j) = b[off + j·ld + p] for p < kc, j < nj, decoded where B
// is half-precision: it transposes an nj×kc block of the stored B into kc rows of stride nr.
// Whole blocks go to the assembly, 16×16 ones where is is avx512 and 8×8 ones elsewhere and
// beside them (blocks16); the ragged right and bottom edges to the loops.
func packBT(is isa, dst []float32, b operandB, off, ld, kc, nj, nr int) {
	p8, j8 := kc/8*8, nj/8*8
	if p8 > 0 && j8 > 0 {
		last := off + (j8-1)*ld + p8 - 1 // the assembly reads no further
		_ = dst[(p8-1)*nr+j8-1]          // nor writes
		if b.format == f32 {
			_ = b.f32[last]
		} else {
			_ = b.half[last]
		}
		pack := func(p0, j0, kc, nj int, wide bool) {
			d, o := &dst[p0*nr+j0], off+j0*ld+p0
			switch {
			case b.format == f32 && wide:
				sgemmPackBT16(d, &b.f32[o], ld, kc, nj, nr)
			case b.format == f32:
				sgemmPackBT(d, &b.f32[o], ld, kc, nj, nr)
			case b.format == bfloat16 && wide:
				sgemmPackBT16BF16(d, &b.half[o], ld, kc, nj, nr)
			case b.format == bfloat16:
				sgemmPackBTBF16(d, &b.half[o], ld, kc, nj, nr)
			case wide:
				sgemmPackBT16F16(d, &b.half[o], ld, kc, nj, nr)
			default:
				sgemmPackBTF16(d, &b.half[o], ld, kc, nj, nr)
			}
		}
		if is == avx512 {
			blocks16(p8, j8, pack)
		} else {
			pack(0, 0, p8, j8, false)
		}
	}
	for j := j8; j < nj; j++ {
		for p := range p8 {
			dst[p*nr+j] = b.at(off + j*ld + p)
		}
	}
	for p := p8; p < kc; p++ {
		row := dst[p*nr : p*nr+nj]
		for j := range row {
			row[j] = b.at(off + j*ld + p)
		}
	}
}

// blocks16 splits a kc×nj block, kc and nj multiples of 8, between a packer of 16×16 blocks and
// one of 8×8 blocks: it calls pack(p0, j0, kc, nj, true) on the part that 16 divides and
// pack(…, false) on the strips right of it and below it.
func blocks16(kc, nj int, pack func(p0, j0, kc, nj int, wide bool)) {
	p16, j16 := kc/16*16, nj/16*16
	if p16 > 0 && j16 > 0 {
		pack(0, 0, p16, j16, true)
	}
	if p16 > 0 && nj > j16 {
		pack(0, j16, p16, nj-j16, false)
	}
	if kc > p16 {
		pack(p16, 0, kc-p16, nj, false)
	}
}

// packAT sets dst[p·mr : p·mr+mr] = a[off+p·lda : off+p·lda+mr] for p < kc: the kc k steps of
// one row panel of a transposed A, made contiguous; with AVX-512 by sgemmPackAT512, where copy
// would call memmove for each step's few bytes.
func packAT(is isa, dst, a []float32, off, lda, kc, mr int) {
	if is == avx512 && mr <= 16 && kc > 0 {
		_ = a[off+(kc-1)*lda+mr-1] // the assembly reads no further
		_ = dst[kc*mr-1]           // nor writes
		sgemmPackAT512(&dst[0], &a[off], lda, kc, mr)
		return
	}
	for p := range kc {
		copy(dst[p*mr:p*mr+mr], a[off+p*lda:])
	}
}

// transpose is Transpose on the instruction set is: packBT's blocks, or Go.
func transpose(is isa, dst []float32, ldd int, src []float32, lds, rows, cols int) {
	if is == generic {
		transposeGeneric(dst, ldd, src, lds, rows, cols)
		return
	}
	packBT(is, dst, operandB{f32: src}, 0, lds, cols, rows, ldd)
}
