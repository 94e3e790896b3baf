// Command gemm generates the float32 matrix-multiply micro-kernels of package kernel for amd64,
// and those of its bfloat16 GEMM (bf16.go): gemm_amd64.s and its Go declarations. Run it
// through go generate in internal/kernel:
//
//	cd _asm && go run ./gemm -out ../gemm_amd64.s -stubs ../gemm_stubs_amd64.go -pkg kernel
//
// Each micro-kernel computes one mr×nr tile of C = alpha·A·B + bias + beta·C over a k loop,
// keeping the whole tile in vector registers:
//
//   - AVX-512: mr ≤ 14 rows × 32 columns, 2 zmm per row (28 accumulators, 2 for B, 2 for
//     broadcasts of A); the loads and stores of C and bias are masked with k-registers (for
//     the columns past the edge of C; a full mask costs nothing measurable, so there is one
//     epilogue for both).
//   - AVX2+FMA: mr ≤ 6 rows × 16 columns, 2 ymm per row (12 accumulators, 2 for B, 2 for
//     broadcasts of A); the Go driver gives edge tiles a scratch tile.
//
// There is one kernel per row count mr (so edge rows cost no masking) and per layout of A:
// "N" reads A row-major in place (element (i, p) at a[i·sa + p]), "T" reads it k-major (element
// (i, p) at a[p·sa + i]), which serves transposed A and packed A alike. B is always k-major:
// element (p, j) at b[p·sb + j]; the driver either packs B into 32- (or 16-) wide panels or
// points into B itself when B is row-major.
//
// Measured on Zen 5: the k loop is unrolled by 2, because by 4 it ran up to 20% slower when B is
// read in place with a 4 KiB stride (the Q·Kᵀ tiles of attention) and no faster elsewhere. Left
// out: software prefetch of C before the k loop and of B ahead in it (both slower on the
// attention shapes) and a separate unmasked AVX-512 epilogue (no faster). The flags below
// exist to repeat such experiments; go generate uses the defaults.
package main

import (
	"flag"
	"fmt"
	"github.com/mhalab/mha/internal/kernel/_asm/asmutil"

	"github.com/mhalab/mha/internal/kernel/_asm/bf16op"
	"github.com/mhalab/mha/internal/kernel/_asm/halfop"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var (
	unroll = flag.Int("unroll", 2, "k-loop unroll factor (1, 2 or 4)")
	mrZ    = flag.Int("mr512", 14, "largest row count of the AVX-512 kernels (≤ 14)")
	mrY    = flag.Int("mr256", 6, "largest row count of the AVX2 kernels (≤ 6)")
	pfRows = flag.Int("pfrows", 16, "rows ahead the half-precision packers prefetch (a multiple of 8, 0: none)")
)

func main() {
	flag.Parse()
	ConstraintExpr("!purego")

	for _, t := range []bool{false, true} {
		for mr := 1; mr <= *mrZ; mr++ {
			kernel(config{zmm: true, mr: mr, transA: t})
		}
	}
	for _, t := range []bool{false, true} {
		for mr := 1; mr <= *mrY; mr++ {
			kernel(config{zmm: false, mr: mr, transA: t})
		}
	}
	packBT()
	packBTHalf()
	packAT()
	for _, t := range []bool{false, true} {
		for mr := 1; mr <= *mrZ; mr++ {
			kernel(config{zmm: true, mr: mr, transA: t, bf16: true})
		}
	}
	bf16Packers()
	Generate()
}

// config selects one micro-kernel.
type config struct {
	zmm    bool // AVX-512 (zmm, masked edge columns) or AVX2 (ymm)
	mr     int  // rows of the C tile
	transA bool // A is k-major (element (i, p) at a[p·sa+i]) rather than row-major
	bf16   bool // a VDPBF16PS kernel on bfloat16 pairs (zmm only): see bf16.go
}

// name is the kernel's Go name, e.g. sgemmAVX512N14.
func (c config) name() string {
	if c.bf16 {
		l := "N"
		if c.transA {
			l = "T"
		}
		return fmt.Sprintf("gemmBF16AVX512%s%d", l, c.mr)
	}
	isa, l := "AVX2", "N"
	if c.zmm {
		isa = "AVX512"
	}
	if c.transA {
		l = "T"
	}
	return fmt.Sprintf("sgemm%s%s%d", isa, l, c.mr)
}

// width is the number of float32 lanes in one vector register.
func (c config) width() int {
	if c.zmm {
		return 16
	}
	return 8
}

// vec is vector register i of the kernel's width.
func (c config) vec(i int) VecPhysical {
	if c.zmm {
		return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
			Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
	}
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
}

// Register plan. Vectors: accumulators acc(i, v) = vec(2i+v); B in vec(nv-4), vec(nv-3);
// broadcasts of A in vec(nv-2), vec(nv-1), where nv is 32 (zmm) or 16 (ymm). General purpose:
// see kernel.
func (c config) acc(i, v int) VecPhysical { return c.vec(2*i + v) }

// nvec is the number of vector registers: 32 zmm or 16 ymm.
func (c config) nvec() int {
	if c.zmm {
		return 32
	}
	return 16
}

// breg is the register holding vector v of the current row of B.
func (c config) breg(v int) VecPhysical { return c.vec(c.nvec() - 4 + v) }

// treg is the register that receives the broadcast of A(i, p); rows alternate between two.
func (c config) treg(i int) VecPhysical { return c.vec(c.nvec() - 2 + i%2) }

// packAT emits
//
//	func sgemmPackAT512(dst, src *float32, ld, kc, mr int)
//
// which copies one row panel of a transposed (k-major) A into contiguous memory: dst[p·mr+i] =
// src[p·ld+i] for p < kc, i < mr, with 1 ≤ mr ≤ 16 and kc > 0: one masked load and store per k
// step, four steps per loop. (Go's copy called memmove for each step's 56 bytes: 3.7% of the
// layer's training step at T = 2048 went there, BENCHMARKS.md v10.)
func packAT() {
	TEXT("sgemmPackAT512", NOSPLIT, "func(dst, src *float32, ld, kc, mr int)")
	Pragma("noescape")
	Doc("sgemmPackAT512 sets dst[p·mr+i] = src[p·ld+i] for p < kc, i < mr; 1 ≤ mr ≤ 16, kc > 0 (AVX-512).")
	dst, src, ld, kc, mr := RDI, RSI, RDX, RBX, RCX
	MOVQ(asmutil.ParamAddr("dst"), dst)
	MOVQ(asmutil.ParamAddr("src"), src)
	MOVQ(asmutil.ParamAddr("ld"), ld)
	SHLQ(U8(2), ld)
	MOVQ(asmutil.ParamAddr("kc"), kc)
	MOVQ(asmutil.ParamAddr("mr"), mr)
	MOVL(U32(1), EAX)
	SHLL(CL, EAX)
	DECL(EAX)
	KMOVW(EAX, K1)
	SHLQ(U8(2), mr) // bytes per packed step
	z := []VecPhysical{Z0, Z1, Z2, Z3}
	Label("packat_4")
	CMPQ(kc, U8(4))
	JB(LabelRef("packat_1"))
	for q := range 4 {
		VMOVUPS_Z(Mem{Base: src}, K1, z[q])
		ADDQ(ld, src)
	}
	for q := range 4 {
		VMOVUPS(z[q], K1, Mem{Base: dst})
		ADDQ(mr, dst)
	}
	SUBQ(U8(4), kc)
	JMP(LabelRef("packat_4"))
	Label("packat_1")
	TESTQ(kc, kc)
	JZ(LabelRef("packat_done"))
	VMOVUPS_Z(Mem{Base: src}, K1, z[0])
	VMOVUPS(z[0], K1, Mem{Base: dst})
	ADDQ(ld, src)
	ADDQ(mr, dst)
	DECQ(kc)
	JMP(LabelRef("packat_1"))
	Label("packat_done")
	VZEROUPPER()
	RET()
}

// kernel emits one micro-kernel:
//
//	func name(k int, a *float32, sa int, b *float32, sb int, c *float32, ldc int,
//	          alpha, beta float32, bias *float32[, mask uint32])
//
// It sets C[i][j] = alpha·Σ_p A(i,p)·B(p,j) + bias[j] + beta·C[i][j] for i < mr and the 2·width
// columns j (the columns whose mask bit is set, for AVX-512). C is not read when beta is ±0.
// bias points at 2·width values (at the masked ones for AVX-512); the driver passes −0 values
// when there is no bias, which leave every sum, −0 included, unchanged.
func kernel(c config) {
	sig := "func(k int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, alpha, beta float32, bias *float32)"
	if c.zmm {
		sig = "func(k int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, alpha, beta float32, bias *float32, mask uint32)"
	}
	if c.bf16 {
		sig = "func(k int, a *uint16, sa int, b *uint16, sb int, c *float32, ldc int, alpha, beta float32, bias *float32, mask uint32)"
	}
	TEXT(c.name(), NOSPLIT, sig)
	Pragma("noescape")
	if c.bf16 {
		at := "a[2(i·sa+q)]"
		if c.transA {
			at = "a[2(q·sa+i)]"
		}
		Doc(fmt.Sprintf("%s computes a %d×32 tile with AVX512_BF16: C = alpha·A·B + bias + beta·C over k pairs of bfloat16, pair q of row i at %s, of column j at b[2(q·sb+j)].", c.name(), c.mr, at))
	}
	var rows, lay string
	if c.zmm {
		rows = fmt.Sprintf("%d×32 tile with AVX-512", c.mr)
	} else {
		rows = fmt.Sprintf("%d×16 tile with AVX2+FMA", c.mr)
	}
	if c.transA {
		lay = "A(i,p) = a[p·sa+i]"
	} else {
		lay = "A(i,p) = a[i·sa+p]"
	}
	if !c.bf16 {
		Doc(fmt.Sprintf("%s computes a %s: C = alpha·A·B + bias + beta·C, %s, B(p,j) = b[p·sb+j].", c.name(), rows, lay))
	}

	w := c.width()
	vb := 4 * w // bytes per vector

	// General-purpose registers.
	var (
		cnt = RCX
		bp  = RBX // B pointer
		sb  = RDX // B k-stride, bytes
		sb3 = RSI // 3·sb
		ap  = RDI // A pointer (transA) / row-0 base (row-major A)
		sa  = R8  // A stride, bytes
		sa3 = R9  // 3·sa (transA only)
	)
	bases := []GPPhysical{RDI, R10, R11, R12, R13} // row-major A: base of rows 3q, 3q+1, 3q+2

	MOVQ(asmutil.ParamAddr("b"), bp)
	MOVQ(asmutil.ParamAddr("sb"), sb)
	SHLQ(U8(2), sb)
	LEAQ(Mem{Base: sb, Index: sb, Scale: 2}, sb3)
	MOVQ(asmutil.ParamAddr("a"), ap)
	MOVQ(asmutil.ParamAddr("sa"), sa)
	SHLQ(U8(2), sa)
	nb := (c.mr + 2) / 3
	if c.transA {
		LEAQ(Mem{Base: sa, Index: sa, Scale: 2}, sa3)
	} else {
		for q := 1; q < nb; q++ {
			// base q = base q-1 + 3·sa
			LEAQ(Mem{Base: bases[q-1], Index: sa, Scale: 2}, bases[q])
			ADDQ(sa, bases[q])
		}
	}

	for i := 0; i < c.mr; i++ {
		for v := 0; v < 2; v++ {
			r := c.acc(i, v)
			VXORPS(r, r, r)
		}
	}

	// aAddr is the address of A(i, u) relative to the current k position.
	aAddr := func(i, u int) Mem {
		if c.transA {
			m := quadRow(ap, sa, sa3, u)
			m.Disp = 4 * i
			return m
		}
		m := Mem{Base: bases[i/3], Disp: 4 * u}
		if i%3 > 0 {
			m.Index, m.Scale = sa, uint8(i%3)
		}
		return m
	}
	bAddr := func(u, v int) Mem {
		m := quadRow(bp, sb, sb3, u)
		m.Disp = v * vb
		return m
	}
	step := func(u int) {
		VMOVUPS(bAddr(u, 0), c.breg(0))
		VMOVUPS(bAddr(u, 1), c.breg(1))
		for i := 0; i < c.mr; i++ {
			t := c.treg(i)
			if c.bf16 {
				// A's pair of bfloat16 (i, u) in every lane; acc += the pairs' dot products.
				VPBROADCASTD(aAddr(i, u), t)
				bf16op.VDPBF16PS(c.breg(0), t, c.acc(i, 0))
				bf16op.VDPBF16PS(c.breg(1), t, c.acc(i, 1))
				continue
			}
			VBROADCASTSS(aAddr(i, u), t)
			VFMADD231PS(c.breg(0), t, c.acc(i, 0))
			VFMADD231PS(c.breg(1), t, c.acc(i, 1))
		}
	}
	advance := func(steps int) {
		switch steps {
		case 1:
			ADDQ(sb, bp)
		case 2:
			LEAQ(Mem{Base: bp, Index: sb, Scale: 2}, bp)
		case 4:
			LEAQ(Mem{Base: bp, Index: sb, Scale: 4}, bp)
		}
		if c.transA {
			switch steps {
			case 1:
				ADDQ(sa, ap)
			case 2:
				LEAQ(Mem{Base: ap, Index: sa, Scale: 2}, ap)
			case 4:
				LEAQ(Mem{Base: ap, Index: sa, Scale: 4}, ap)
			}
			return
		}
		for q := 0; q < nb; q++ {
			ADDQ(U8(4*steps), bases[q])
		}
	}

	u := *unroll
	shift := map[int]int{1: 0, 2: 1, 4: 2}[u]
	MOVQ(asmutil.ParamAddr("k"), cnt)
	if u > 1 {
		SHRQ(U8(shift), cnt)
		JZ(LabelRef(c.name() + "_tail"))
	} else {
		TESTQ(cnt, cnt)
		JZ(LabelRef(c.name() + "_epilogue"))
	}
	Label(c.name() + "_loop")
	for s := 0; s < u; s++ {
		step(s)
	}
	advance(u)
	DECQ(cnt)
	JNZ(LabelRef(c.name() + "_loop"))

	if u > 1 {
		Label(c.name() + "_tail")
		MOVQ(asmutil.ParamAddr("k"), cnt)
		ANDQ(U8(u-1), cnt)
		JZ(LabelRef(c.name() + "_epilogue"))
		Label(c.name() + "_tailloop")
		step(0)
		advance(1)
		DECQ(cnt)
		JNZ(LabelRef(c.name() + "_tailloop"))
	}

	// Epilogue: acc = alpha·acc + bias, then + beta·C unless beta is ±0, then store.
	Label(c.name() + "_epilogue")
	alpha, beta := c.breg(0), c.breg(1)
	bias := []VecPhysical{c.treg(0), c.treg(1)}
	VBROADCASTSS(asmutil.ParamAddr("alpha"), alpha)
	VBROADCASTSS(asmutil.ParamAddr("beta"), beta)
	cp, ldc := RAX, R14 // R14 (g in ABIInternal) is free in ABI0 code; the wrapper restores it
	MOVQ(asmutil.ParamAddr("bias"), RSI)
	MOVQ(asmutil.ParamAddr("c"), cp)
	MOVQ(asmutil.ParamAddr("ldc"), ldc)
	SHLQ(U8(2), ldc)
	if c.zmm {
		MOVL(asmutil.ParamAddr("mask"), EDX)
		KMOVW(RDX.As32(), K1)
		SHRL(U8(16), RDX.As32())
		KMOVW(RDX.As32(), K2)
		VMOVUPS_Z(Mem{Base: RSI}, K1, bias[0])
		VMOVUPS_Z(Mem{Base: RSI, Disp: vb}, K2, bias[1])
	} else {
		VMOVUPS(Mem{Base: RSI}, bias[0])
		VMOVUPS(Mem{Base: RSI, Disp: vb}, bias[1])
	}
	for i := 0; i < c.mr; i++ {
		for v := 0; v < 2; v++ {
			VFMADD213PS(bias[v], alpha, c.acc(i, v))
		}
	}
	MOVL(asmutil.ParamAddr("beta"), EBX)
	ANDL(U32(0x7fffffff), RBX.As32())
	JZ(LabelRef(c.name() + "_beta0"))

	masks := []Op{K1, K2}
	store := func(withC, masked bool) {
		for i := 0; i < c.mr; i++ {
			for v := 0; v < 2; v++ {
				m := Mem{Base: cp, Disp: v * vb}
				if withC {
					if masked {
						VFMADD231PS_Z(m, beta, masks[v], c.acc(i, v))
					} else {
						VFMADD231PS(m, beta, c.acc(i, v))
					}
				}
				if masked {
					VMOVUPS(c.acc(i, v), masks[v], m)
				} else {
					VMOVUPS(c.acc(i, v), m)
				}
			}
			if i+1 < c.mr {
				ADDQ(ldc, cp)
			}
		}
		VZEROUPPER()
		RET()
	}
	store(true, c.zmm)
	Label(c.name() + "_beta0")
	store(false, c.zmm)
}

// packBT emits
//
//	func sgemmPackBT(dst, src *float32, ld, kc, nj, nr int)
//
// which transposes an nj×kc block of a row-major matrix (row stride ld) into kc rows of stride
// nr: dst[p·nr+j] = src[j·ld+p] for p < kc, j < nj. nj and kc must be positive multiples of 8.
// It uses AVX only. With it comes sgemmPackBT16, the same in 16×16 blocks with AVX-512 for nj
// and kc multiples of 16 (packTranspose16). packBTHalf emits their half-precision siblings.
func packBT() {
	packTranspose("sgemmPackBT", "func(dst, src *float32, ld, kc, nj, nr int)",
		"sgemmPackBT sets dst[p·nr+j] = src[j·ld+p] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		4, 32, 0, func(src Mem, dst Register) { VMOVUPS(src, dst) })
	packTranspose16("sgemmPackBT16", "func(dst, src *float32, ld, kc, nj, nr int)",
		"sgemmPackBT16 is sgemmPackBT in 16×16 blocks with AVX-512: kc and nj are positive multiples of 16.",
		4, 64, 0, func(src Mem, dst VecPhysical) { VMOVUPS(src, dst) })
}

// packBTHalf emits sgemmPackBTBF16 and sgemmPackBTF16: sgemmPackBT for a matrix of bfloat16 or
// binary16 values (src *uint16, ld counted in values), decoding each row of 8 as it loads it
// (package halfop: AVX2, and F16C for binary16), so a half-precision B is packed as float32
// without a decoded copy of it in between; they prefetch pfRows rows ahead. Likewise
// sgemmPackBT16BF16 and sgemmPackBT16F16 for sgemmPackBT16, decoding rows of 16.
func packBTHalf() {
	packTranspose("sgemmPackBTBF16", "func(dst *float32, src *uint16, ld, kc, nj, nr int)",
		"sgemmPackBTBF16 sets dst[p·nr+j] to the float32 of bfloat16 src[j·ld+p] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		2, 16, *pfRows, halfop.DecodeBF16)
	packTranspose("sgemmPackBTF16", "func(dst *float32, src *uint16, ld, kc, nj, nr int)",
		"sgemmPackBTF16 sets dst[p·nr+j] to the float32 of binary16 src[j·ld+p] for p < kc, j < nj; kc and nj are positive multiples of 8.",
		2, 16, *pfRows, halfop.DecodeF16)
	packTranspose16("sgemmPackBT16BF16", "func(dst *float32, src *uint16, ld, kc, nj, nr int)",
		"sgemmPackBT16BF16 is sgemmPackBTBF16 in 16×16 blocks with AVX-512: kc and nj are positive multiples of 16.",
		2, 32, *pfRows, func(src Mem, dst VecPhysical) { halfop.DecodeBF16(src, dst) })
	packTranspose16("sgemmPackBT16F16", "func(dst *float32, src *uint16, ld, kc, nj, nr int)",
		"sgemmPackBT16F16 is sgemmPackBTF16 in 16×16 blocks with AVX-512: kc and nj are positive multiples of 16.",
		2, 32, *pfRows, func(src Mem, dst VecPhysical) { halfop.DecodeF16(src, dst) })
}

// quadRow addresses row q mod 4 of the four rows from base, ld bytes apart (ld3 = 3·ld).
func quadRow(base, ld, ld3 Register, q int) Mem {
	m := Mem{Base: base}
	switch q % 4 {
	case 1:
		m.Index, m.Scale = ld, 1
	case 2:
		m.Index, m.Scale = ld, 2
	case 3:
		m.Index, m.Scale = ld3, 1
	}
	return m
}

// transposeEntry emits a transposing packer's entry, func(dst, src, ld, kc, nj, nr) with ld
// counting units of size bytes, and returns its registers: dst and src, ld and 3·ld in bytes,
// nr in bytes per packed row, and kc in blocks of 1<<shift values.
func transposeEntry(name, sig, doc string, size, shift int) (dst, src, ld, ld3, nr, kc Register) {
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	dst, src, ld, ld3, nr, kc = RDI, RSI, RDX, R8, R9, RCX
	MOVQ(asmutil.ParamAddr("dst"), dst)
	MOVQ(asmutil.ParamAddr("src"), src)
	MOVQ(asmutil.ParamAddr("ld"), ld)
	SHLQ(U8(size/2), ld) // bytes per row of src: size 2 or 4
	LEAQ(Mem{Base: ld, Index: ld, Scale: 2}, ld3)
	MOVQ(asmutil.ParamAddr("nr"), nr)
	SHLQ(U8(2), nr) // bytes per packed row
	MOVQ(asmutil.ParamAddr("kc"), kc)
	SHRQ(U8(shift), kc)
	return
}

// packTranspose16 emits packTranspose's packer in 16×16 blocks with AVX-512, for nj and kc
// multiples of 16: load converts step bytes of a row into a zmm of 16 packed 32-bit values (16
// float32, or 16 bfloat16 pairs); per block, 16 loads, a 16×16 transpose of 32-bit words
// (unpack, VSHUFPS, two rounds of VSHUFF32X4: 64 shuffles) and 16 stores of 64 bytes, each a
// whole line of a panel 32 values wide. packTranspose's 8×8 blocks write 32 bytes of each of 8
// packed rows and come back for the other half of every line a group of rows later, when it
// has left L1 (a panel of 768 bfloat16 pairs is 48 KiB): bf16PackBTBF16 packs a 256×768 block
// in cache in 12.3 µs, this one in 7.6 (BenchmarkPackBT16, BENCHMARKS.md v27). The rows are
// walked 16 at a time, each group along all kc values, prefetching the rows pf further down
// (the next group's, for pf = 16) when pf > 0.
func packTranspose16(name, sig, doc string, size, step, pf int, load func(src Mem, dst VecPhysical)) {
	dst, src, ld, ld3, nr, kc := transposeEntry(name, sig, doc, size, 4)
	out, jj, pp := R11, R12, RBX
	rows := []Register{R10, R13, R14, R15} // rows 0, 4, 8 and 12 of the group
	rowAddr := func(base Register, q int) Mem { return quadRow(base, ld, ld3, q) }
	r := []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15}
	t := []VecPhysical{Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
	MOVQ(asmutil.ParamAddr("nj"), jj)
	SHRQ(U8(4), jj)
	Label(name + "_j")
	MOVQ(src, rows[0])
	for g := 1; g < 4; g++ {
		LEAQ(Mem{Base: rows[g-1], Index: ld, Scale: 4}, rows[g])
	}
	MOVQ(dst, out)
	MOVQ(kc, pp)
	Label(name + "_p")
	for q := range 16 {
		load(rowAddr(rows[q/4], q), r[q])
	}
	if pf > 0 {
		// The group's rows pf further down, from row pf on, four rows per base.
		LEAQ(Mem{Base: rows[0], Index: ld, Scale: 8}, RAX)
		for range pf/8 - 1 {
			LEAQ(Mem{Base: RAX, Index: ld, Scale: 8}, RAX)
		}
		for q := range 16 {
			if q > 0 && q%4 == 0 {
				LEAQ(Mem{Base: RAX, Index: ld, Scale: 4}, RAX)
			}
			PREFETCHT0(rowAddr(RAX, q))
		}
	}
	// Rows a, b of each pair interleaved within 128-bit lanes.
	for q := 0; q < 16; q += 2 {
		VUNPCKLPS(r[q+1], r[q], t[q])
		VUNPCKHPS(r[q+1], r[q], t[q+1])
	}
	// s[4i+e], lane L: column 4L+e of rows 4i…4i+3.
	for i := 0; i < 16; i += 4 {
		VSHUFPS(U8(0x44), t[i+2], t[i], r[i])
		VSHUFPS(U8(0xEE), t[i+2], t[i], r[i+1])
		VSHUFPS(U8(0x44), t[i+3], t[i+1], r[i+2])
		VSHUFPS(U8(0xEE), t[i+3], t[i+1], r[i+3])
	}
	// For each e, the lanes of s[e], s[4+e], s[8+e], s[12+e] regrouped: lanes 0 and 2 of a
	// pair of them, then lanes 1 and 3.
	for e := range 4 {
		VSHUFF32X4(U8(0x88), r[4+e], r[e], t[4*e])
		VSHUFF32X4(U8(0xDD), r[4+e], r[e], t[4*e+1])
		VSHUFF32X4(U8(0x88), r[12+e], r[8+e], t[4*e+2])
		VSHUFF32X4(U8(0xDD), r[12+e], r[8+e], t[4*e+3])
	}
	// Column 4L+e: lane L of the four, from t[4e] and t[4e+2] (L = 0, 2) or t[4e+1] and
	// t[4e+3] (L = 1, 3).
	for e := range 4 {
		VSHUFF32X4(U8(0x88), t[4*e+2], t[4*e], r[e])      // L = 0
		VSHUFF32X4(U8(0xDD), t[4*e+2], t[4*e], r[8+e])    // L = 2
		VSHUFF32X4(U8(0x88), t[4*e+3], t[4*e+1], r[4+e])  // L = 1
		VSHUFF32X4(U8(0xDD), t[4*e+3], t[4*e+1], r[12+e]) // L = 3
	}
	// Packed row c = 4L+e is r[c].
	MOVQ(out, RAX)
	for c := range 16 {
		VMOVUPS(r[c], Mem{Base: RAX})
		if c < 15 {
			ADDQ(nr, RAX)
		}
	}
	for _, b := range rows {
		ADDQ(U8(step), b)
	}
	LEAQ(Mem{Base: out, Index: nr, Scale: 8}, out)
	LEAQ(Mem{Base: out, Index: nr, Scale: 8}, out)
	DECQ(pp)
	JNZ(LabelRef(name + "_p"))

	LEAQ(Mem{Base: src, Index: ld, Scale: 8}, src)
	LEAQ(Mem{Base: src, Index: ld, Scale: 8}, src)
	ADDQ(U8(64), dst)
	DECQ(jj)
	JNZ(LabelRef(name + "_j"))
	VZEROUPPER()
	RET()
}

// packTranspose emits one transposing packer: name, signature and doc as given, for a source
// whose row stride ld counts units of size bytes, and which load converts step bytes at a time
// into a ymm of 8 packed 32-bit values (8 float32 from 8 elements, or 8 bfloat16 pairs). It walks the
// 8×8 blocks 8 rows at a time, each group along all kc values, so the 8 lines it reads from
// stay in L1 until it has used all of them. The other order, k block by k block down all nj
// rows, lost them when the rows lay a multiple of 4 KiB apart (k = 2048 in float32, bfloat16
// or binary16): the 32 rows of a panel then fall in one L1 set and evict each other's lines
// before the next k block reads the rest. Measured at m = 1, n = k = 2048 (B packed, hardly
// any arithmetic): float32 1.49 → 1.03 ms, bfloat16 1.01 → 0.61 ms; the large NT benchmarks
// did not move beyond the noise.
//
// With pf > 0 each 8×8 block also prefetches the lines of the rows pf further down at the same
// k values, which the packer reaches two groups later (pf = 16): a row's k block is too short
// (8 lines of bfloat16 for kc = 256) for the hardware prefetcher to get ahead of it, so without
// this a decode step's weights, read from memory, kept the packer waiting (a prefetch past the
// end of B does not fault). Measured at m = 1 with W from memory: bfloat16 n = k = 2048
// 1.10 → 0.80 ms, 768 182 → 107 µs; with W in cache it costs ~7%, and for float32 it gained
// less and lost more, so sgemmPackBT does not prefetch.
func packTranspose(name, sig, doc string, size, step, pf int, load func(src Mem, dst Register)) {
	dst, src, ld, ld3, nr, kc := transposeEntry(name, sig, doc, size, 3)
	row, out, jj := R10, R11, R12
	r := []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7}
	t := []VecPhysical{Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}
	// rows 0..3 from base, rows 4..7 from base + 4·ld
	rowAddr := func(base Register, q int) Mem { return quadRow(base, ld, ld3, q) }
	row4, pp := R13, RBX
	MOVQ(asmutil.ParamAddr("nj"), jj)
	SHRQ(U8(3), jj)
	Label(name + "_j")
	// For these 8 rows of src: walk along their kc values, 8 at a time.
	MOVQ(src, row)
	LEAQ(Mem{Base: src, Index: ld, Scale: 4}, row4)
	MOVQ(dst, out)
	MOVQ(kc, pp)
	Label(name + "_p")
	for q := 0; q < 4; q++ {
		load(rowAddr(row, q), r[q])
	}
	for q := 4; q < 8; q++ {
		load(rowAddr(row4, q), r[q])
	}
	if pf > 0 {
		LEAQ(Mem{Base: row, Index: ld, Scale: 8}, RAX)
		for range pf/8 - 1 {
			LEAQ(Mem{Base: RAX, Index: ld, Scale: 8}, RAX)
		}
		for q := 0; q < 4; q++ {
			PREFETCHT0(rowAddr(RAX, q))
		}
		LEAQ(Mem{Base: RAX, Index: ld, Scale: 4}, RAX)
		for q := 4; q < 8; q++ {
			PREFETCHT0(rowAddr(RAX, q))
		}
	}
	// 8×8 transpose; column q of the block is packed row q.
	for q := 0; q < 8; q += 2 {
		VUNPCKLPS(r[q+1], r[q], t[q])
		VUNPCKHPS(r[q+1], r[q], t[q+1])
	}
	// s0..s7 into r
	VSHUFPS(U8(0x44), t[2], t[0], r[0])
	VSHUFPS(U8(0xEE), t[2], t[0], r[1])
	VSHUFPS(U8(0x44), t[3], t[1], r[2])
	VSHUFPS(U8(0xEE), t[3], t[1], r[3])
	VSHUFPS(U8(0x44), t[6], t[4], r[4])
	VSHUFPS(U8(0xEE), t[6], t[4], r[5])
	VSHUFPS(U8(0x44), t[7], t[5], r[6])
	VSHUFPS(U8(0xEE), t[7], t[5], r[7])
	for q := 0; q < 4; q++ {
		VPERM2F128(U8(0x20), r[q+4], r[q], t[q])
		VPERM2F128(U8(0x31), r[q+4], r[q], t[q+4])
	}
	MOVQ(out, RAX)
	for q := 0; q < 8; q++ {
		VMOVUPS(t[q], Mem{Base: RAX})
		if q < 7 {
			ADDQ(nr, RAX)
		}
	}
	ADDQ(U8(step), row)
	ADDQ(U8(step), row4)
	// out += 8 packed rows
	LEAQ(Mem{Base: out, Index: nr, Scale: 8}, out)
	DECQ(pp)
	JNZ(LabelRef(name + "_p"))

	LEAQ(Mem{Base: src, Index: ld, Scale: 8}, src)
	ADDQ(U8(32), dst)
	DECQ(jj)
	JNZ(LabelRef(name + "_j"))
	VZEROUPPER()
	RET()
}
