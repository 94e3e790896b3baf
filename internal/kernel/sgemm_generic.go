package kernel

// The pure-Go path of Sgemm (the purego build tag, and CPUs without AVX2, FMA and F16C). It is
// blocked like the vector path: k is cut into kc blocks; an mc×kc block of op(A) is packed into
// k-major panels mrGo tall (that absorbs transA); a row-major B is read in place, a transposed
// one is packed into k-major panels nrGo wide (as is the ragged last panel of a row-major one);
// and a register-tiled loop computes one mrGo×nrGo tile of C at a time. A half-precision B is
// packed whole (each kc block), transposed or not, decoded panel by panel into a small scratch
// that packGo packs from; the tiles then sum the same products in the same order as on a
// float32 B.

const (
	mrGo = 2   // rows of a register tile
	nrGo = 4   // columns of a register tile
	kcGo = 256 // k values per block
	mcGo = 128 // rows of A per packed block
)

// sgemmGeneric holds the packing buffers of the pure-Go path.
type sgemmGeneric struct {
	a, b []float32
	half []float32 // one panel of a half-precision B, decoded (kc×nrGo)
}

// run is sgemm on the pure-Go path for m, n, k > 0 and alpha ≠ 0, with the slices checked.
func (g *sgemmGeneric) run(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b operandB, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	kc := min(k, kcGo)
	packAll := transB || b.format != f32 // every panel of B packed, not only the ragged last
	if packAll {
		g.b = Grow(g.b, kc*((n+nrGo-1)/nrGo*nrGo))
	} else {
		g.b = Grow(g.b, kc*nrGo) // the ragged last panel only
	}
	g.a = Grow(g.a, kc*((min(m, mcGo)+mrGo-1)/mrGo*mrGo))
	var acc [mrGo * nrGo]float32
	nfull := n / nrGo * nrGo // columns in whole panels
	for pc := 0; pc < k; pc += kc {
		kcur := min(kc, k-pc)
		first, last := pc == 0, pc+kcur == k
		switch {
		case b.format != f32:
			g.packHalf(!transB, kcur, n, b, pc, ldb)
		case transB:
			packGo(g.b, false, kcur, n, nrGo, b.f32, pc, ldb)
		case nfull < n:
			packGo(g.b, true, kcur, n-nfull, nrGo, b.f32[nfull:], pc, ldb)
		}
		for ic := 0; ic < m; ic += mcGo {
			mcur := min(mcGo, m-ic)
			if transA {
				packGo(g.a, true, kcur, mcur, mrGo, a[ic:], pc, lda)
			} else {
				packGo(g.a, false, kcur, mcur, mrGo, a[ic*lda:], pc, lda)
			}
			for ir := 0; ir < mcur; ir += mrGo {
				mr := min(mrGo, mcur-ir)
				ap := g.a[ir*kcur : ir*kcur+kcur*mrGo]
				for jr := 0; jr < n; jr += nrGo {
					nr := min(nrGo, n-jr)
					switch {
					case packAll:
						tile2x4(&acc, kcur, ap, g.b[jr*kcur:jr*kcur+kcur*nrGo], nrGo)
					case jr < nfull:
						tile2x4(&acc, kcur, ap, b.f32[pc*ldb+jr:], ldb)
					default:
						tile2x4(&acc, kcur, ap, g.b[:kcur*nrGo], nrGo)
					}
					for i := range mr {
						row := c[(ic+ir+i)*ldc+jr : (ic+ir+i)*ldc+jr+nr]
						t := acc[i*nrGo : i*nrGo+nr]
						switch {
						case !first:
							for j := range row {
								row[j] += alpha * t[j]
							}
						case beta == 0:
							for j := range row {
								row[j] = alpha * t[j]
							}
						default:
							for j := range row {
								row[j] = alpha*t[j] + beta*row[j]
							}
						}
						if last && bias != nil {
							for j, v := range bias[jr : jr+nr] {
								row[j] += v
							}
						}
					}
				}
			}
		}
	}
}

// packGo packs rows pc…pc+kc−1 and columns 0…nc−1 of a k×n operand into dst as ⌈nc/w⌉ panels
// of kc×w values, k-major (panel q holds columns q·w…, value (p, j) at q·kc·w + p·w + j−q·w),
// zero-padded. When kmajor is set the operand's value (p, j) is x[p·ld+j] (B as stored, or a
// transposed A); otherwise it is x[j·ld+p] (a transposed B, or A as stored).
func packGo(dst []float32, kmajor bool, kc, nc, w int, x []float32, pc, ld int) {
	for q := 0; q*w < nc; q++ {
		j0 := q * w
		nw := min(w, nc-j0)
		pan := dst[j0*kc : j0*kc+kc*w]
		if kmajor {
			for p := range kc {
				row := pan[p*w : p*w+w]
				copy(row, x[(pc+p)*ld+j0:(pc+p)*ld+j0+nw])
				clear(row[nw:])
			}
			continue
		}
		if nw < w {
			clear(pan)
		}
		for j := range nw {
			src := x[(j0+j)*ld+pc : (j0+j)*ld+pc+kc]
			for p, v := range src {
				pan[p*w+j] = v
			}
		}
	}
}

// packHalf packs rows pc…pc+kc−1 and columns 0…nc−1 of a half-precision op(B) into g.b as
// packGo does (kmajor: B as stored, else transposed): panel by panel, it decodes the values the
// panel holds into g.half, laid out as in b but with rows only as wide as the panel needs, and
// packs them from there.
func (g *sgemmGeneric) packHalf(kmajor bool, kc, nc int, b operandB, pc, ld int) {
	g.half = Grow(g.half, kc*nrGo)
	for j0 := 0; j0 < nc; j0 += nrGo {
		nw := min(nrGo, nc-j0)
		if kmajor { // value (p, j) at b[(pc+p)·ld + j]
			for p := range kc {
				b.decode(generic, g.half[p*nw:p*nw+nw], (pc+p)*ld+j0)
			}
			packGo(g.b[j0*kc:], true, kc, nw, nrGo, g.half, 0, nw)
			continue
		}
		for j := range nw { // value (p, j) at b[j·ld + pc+p]
			b.decode(generic, g.half[j*kc:j*kc+kc], (j0+j)*ld+pc)
		}
		packGo(g.b[j0*kc:], false, kc, nw, nrGo, g.half, 0, kc)
	}
}

// tile2x4 sets acc[i·4+j] = Σ_p ap[p·2+i]·bp[p·sb+j] over kc k steps: ap is a packed A panel
// (2 wide), bp is B read with row stride sb (nrGo for a packed panel). It panics if ap or bp
// is too short.
func tile2x4(acc *[mrGo * nrGo]float32, kc int, ap, bp []float32, sb int) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	ap = ap[:2*kc]
	for p := range kc {
		a := (*[2]float32)(ap[2*p:])
		b := (*[4]float32)(bp[p*sb:])
		a0, a1 := a[0], a[1]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	*acc = [8]float32{c00, c01, c02, c03, c10, c11, c12, c13}
}
