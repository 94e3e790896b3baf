// Command tile generates tile_amd64.s and tile_stubs_amd64.go: the AVX-512 kernels behind
// kernel.ScoreTile and kernel.AccumTile (and their bfloat16 and float16 forms), the two products
// of a decode step against a KV cache, run on the cache's own storage: no conversion buffer, no
// packing, no GEMM driver.
//
//	score   s[r, j] = scale·Σ_i q[r, i]·K[i, j]   for r < M ≤ 4, j < 128: a key tile stored
//	                                               transposed, [D, 128]; the keys run along the
//	                                               lanes and q[r, i] is broadcast (fmaRow)
//	accum   acc[r, c] += Σ_n p[r, n]·V[n, c]       for r < M ≤ 4, c < cols (a multiple of 16):
//	                                               V [N, ldv] row-major, read in place
//
// Each works on 4 rows × 64 columns at a time (16 accumulators), so a key or value row is read
// once from memory and its second half from L2. bfloat16 is converted in registers by VPMOVZXWD
// and VPSLLD $16, float16 by VCVTPH2PS (package halfop), both exact. The sums run in index order
// with one FMA per term; the score is multiplied by scale at the end. Both prefetch the rows
// they will read 8 rows ahead (the hardware prefetcher does not run far enough ahead on these
// short strided streams), and both bring the memory the caller reads next (next: the tile's
// values after its keys, the next tile's keys after its values) into L2 while they compute, as
// many bytes of it as they read, so that the next call does not start by waiting for memory.
//
// Run it through go generate in internal/kernel (see tile_amd64.go); the output is committed.
package main

import (
	"fmt"

	"github.com/mhalab/mha/internal/kernel/_asm/asmutil"
	"github.com/mhalab/mha/internal/kernel/_asm/halfop"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tileKeys is the keys of one transposed key tile (mha's cacheTile).
const tileKeys = 128

// ahead is how many rows ahead of their loads the kernels prefetch.
const ahead = 8

// fmaRow adds x·y[c] to acc[c] for each c, x the float32 at src: for halves x is broadcast into
// a register once and the FMAs read it there; for float32 each FMA broadcasts it from memory
// (embedded broadcast). The register form runs the kernels' own loops 20–35% faster for every
// type (BenchmarkTile, cached); in decode steps (mha bench --decode 32768, alternated rounds) it
// made bfloat16 caches 7–14% faster, float16 caches no slower, float32 caches ~10% slower, so
// float32 keeps the memory form.
func fmaRow(e halfop.Elem, src Mem, y, acc []VecVirtual) {
	if e.Size == 4 {
		for c := range y {
			VFMADD231PS_BCST(src, y[c], acc[c])
		}
		return
	}
	x := ZMM()
	VBROADCASTSS(src, x)
	for c := range y {
		VFMADD231PS(x, y[c], acc[c])
	}
}

func main() {
	ConstraintExpr("!purego")
	for _, e := range halfop.Elems {
		for m := 1; m <= 4; m++ {
			score(e, m)
		}
	}
	for _, e := range halfop.Elems {
		for m := 1; m <= 4; m++ {
			accum(e, m)
		}
	}
	Generate()
}

// rows returns the addresses of m rows ld bytes apart from base: base, base+ld, base+2·ld,
// base+ld3 (ld3 = 3·ld, needed only for m = 4).
func rows(m int, base, ld, ld3 Register) []Mem {
	out := []Mem{{Base: base}, {Base: base, Index: ld, Scale: 1}, {Base: base, Index: ld, Scale: 2}, {Base: base, Index: ld3, Scale: 1}}
	return out[:m]
}

// strides loads the named int parameter as a byte stride of float32 rows (×4) and its triple.
func strides(name string, m int) (ld, ld3 Register) {
	ld = Load(Param(name), GP64())
	SHLQ(U8(2), ld)
	if m == 4 {
		ld3 = GP64()
		LEAQ(Mem{Base: ld, Index: ld, Scale: 2}, ld3)
	}
	return ld, ld3
}

// score emits scoreTile<e><m>AVX512.
func score(e halfop.Elem, m int) {
	name := fmt.Sprintf("scoreTile%s%dAVX512", e.Name, m)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(s *float32, q *float32, ldq int, d int, scale float32, k %s, next %s)", e.Ptr, e.Ptr))
	Doc(fmt.Sprintf("%s sets s[r·128 + j] = scale·Σ_{i<d} q[r·ldq + i]·k[i·128 + j] for r < %d, j < 128, and prefetches as many bytes from next into L2.", name, m))
	s := Load(Param("s"), GP64())
	next := Load(Param("next"), GP64())
	q := Load(Param("q"), GP64())
	k := Load(Param("k"), GP64())
	d := Load(Param("d"), GP64())
	ldq, ldq3 := strides("ldq", m)
	sc := ZMM()
	VBROADCASTSS(asmutil.ParamAddr("scale"), sc)
	rowBytes := tileKeys * e.Size
	p, qp, n := GP64(), GP64(), GP64()
	for half := range 2 {
		acc := make([][4]VecVirtual, m)
		for r := range acc {
			for c := range 4 {
				acc[r][c] = ZMM()
				VXORPS(acc[r][c], acc[r][c], acc[r][c])
			}
		}
		loop, done := fmt.Sprintf("%s_loop%d", name, half), fmt.Sprintf("%s_done%d", name, half)
		LEAQ(Mem{Base: k, Disp: half * 64 * e.Size}, p)
		MOVQ(q, qp)
		MOVQ(d, n)
		TESTQ(n, n)
		JZ(LabelRef(done))
		Label(loop)
		var kz [4]VecVirtual
		for c := range kz {
			kz[c] = ZMM()
			e.Load(Mem{Base: p, Disp: c * 16 * e.Size}, nil, kz[c])
		}
		if half == 0 { // the whole row, so the second half finds it in cache
			for l := 0; l < rowBytes; l += 64 {
				PREFETCHT0(Mem{Base: p, Disp: ahead*rowBytes + l})
			}
		}
		for l := 0; l < rowBytes/2; l += 64 {
			PREFETCHT1(Mem{Base: next, Disp: l})
		}
		ADDQ(U32(rowBytes/2), next)
		for r, a := range rows(m, qp, ldq, ldq3) {
			fmaRow(e, a, kz[:], acc[r][:])
		}
		ADDQ(U32(rowBytes), p)
		ADDQ(U8(4), qp)
		DECQ(n)
		JNZ(LabelRef(loop))
		Label(done)
		for r := range acc {
			for c := range 4 {
				VMULPS(sc, acc[r][c], acc[r][c])
				VMOVUPS(acc[r][c], Mem{Base: s, Disp: r*tileKeys*4 + half*256 + c*64})
			}
		}
	}
	VZEROUPPER()
	RET()
}

// accum emits accumTile<e><m>AVX512.
func accum(e halfop.Elem, m int) {
	name := fmt.Sprintf("accumTile%s%dAVX512", e.Name, m)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(acc *float32, ldacc int, p *float32, ldp int, n int, cols int, v %s, ldv int, next %s)", e.Ptr, e.Ptr))
	Doc(fmt.Sprintf("%s adds Σ_{t<n} p[r·ldp + t]·v[t·ldv + c] to acc[r·ldacc + c] for r < %d, c < cols, cols a multiple of 16, and prefetches about as many bytes from next into L2.", name, m))
	next := Load(Param("next"), GP64())
	acc := Load(Param("acc"), GP64())
	p := Load(Param("p"), GP64())
	v := Load(Param("v"), GP64())
	cols := Load(Param("cols"), GP64())
	ldacc, ldacc3 := strides("ldacc", m)
	ldp, ldp3 := strides("ldp", m)
	ldv := Load(Param("ldv"), GP64())
	if e.Size == 4 {
		SHLQ(U8(2), ldv)
	} else {
		SHLQ(U8(1), ldv)
	}
	pf := GP64()
	LEAQ(Mem{Base: ldv, Index: ldv, Scale: 1}, pf) // 2·ldv
	SHLQ(U8(2), pf)                                // 8·ldv: ahead rows
	vp, pp, t := GP64(), GP64(), GP64()
	// block accumulates w·16 columns from column offset acc/v, then advances them.
	block := func(w int, again string) {
		a := make([][]VecVirtual, m)
		for r, row := range rows(m, acc, ldacc, ldacc3) {
			a[r] = make([]VecVirtual, w)
			for c := range w {
				a[r][c] = ZMM()
				VMOVUPS(row.Offset(c*64), a[r][c])
			}
		}
		loop, done := fmt.Sprintf("%s_loop%d", name, w), fmt.Sprintf("%s_done%d", name, w)
		MOVQ(v, vp)
		MOVQ(p, pp)
		Load(Param("n"), t)
		TESTQ(t, t)
		JZ(LabelRef(done))
		Label(loop)
		vz := make([]VecVirtual, w)
		for c := range vz {
			vz[c] = ZMM()
			e.Load(Mem{Base: vp, Disp: c * 16 * e.Size}, nil, vz[c])
		}
		for l := 0; l < w*16*e.Size; l += 64 {
			PREFETCHT0(Mem{Base: vp, Index: pf, Scale: 1, Disp: l})
			PREFETCHT1(Mem{Base: next, Disp: l})
		}
		ADDQ(U32(max(64, w*16*e.Size)), next)
		for r, ar := range rows(m, pp, ldp, ldp3) {
			fmaRow(e, ar, vz, a[r])
		}
		ADDQ(ldv, vp)
		ADDQ(U8(4), pp)
		DECQ(t)
		JNZ(LabelRef(loop))
		Label(done)
		for r, row := range rows(m, acc, ldacc, ldacc3) {
			for c := range w {
				VMOVUPS(a[r][c], row.Offset(c*64))
			}
		}
		ADDQ(U32(w*64), acc)
		ADDQ(U32(w*16*e.Size), v)
		SUBQ(U8(w*16), cols)
		JMP(LabelRef(again))
	}
	wide, narrow, end := name+"_wide", name+"_narrow", name+"_end"
	Label(wide)
	CMPQ(cols, U8(64))
	JL(LabelRef(narrow))
	block(4, wide)
	Label(narrow)
	CMPQ(cols, U8(16))
	JL(LabelRef(end))
	block(1, narrow)
	Label(end)
	VZEROUPPER()
	RET()
}
