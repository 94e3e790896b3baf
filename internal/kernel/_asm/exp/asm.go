// Command exp generates exp_amd64.s and exp_stubs_amd64.go: the AVX-512 and AVX2+FMA kernels
// behind kernel.Smax, kernel.Sexp, kernel.SexpBF16, kernel.Sscal, kernel.SoftmaxGrad, kernel.SiLU,
// kernel.GELUTanh, kernel.GELU, kernel.GELUGrad, kernel.SiLUGrad, kernel.GELUTanhGrad, kernel.Smul, kernel.SumF64, kernel.SquaresF64, kernel.NormRow, kernel.NormGrad and
// kernel.NormGradInput.
//
// Run it through go generate in internal/kernel (see exp.go); the output is committed.
//
// The exp algorithm is the one written out in Go in exp.go (expGeneric); the constants below
// must stay bit-identical to the ones there (exp_test.go sweeps every path against float64
// math.Exp, so a mismatch shows up as a failure). SexpBF16's one pass, whose exps are rounded
// to bfloat16, uses a cheaper one of its own (blockBF16), held to 1e-5 by TestSexpBF16.
//
//	t = x − shift
//	n = round(t·log2e)                 to nearest even
//	r = (t − n·ln2hi) − n·ln2lo        Cody–Waite: ln2hi has 9 significant bits, so n·ln2hi and
//	                                   t − n·ln2hi are exact; |r| ≤ ln2/2 + a rounding
//	p = 1 + r + c2·r² + … + c6·r⁶      Horner with FMA; c2…c6 fitted for relative error
//	exp(t) = p·2ⁿ                      VSCALEFPS (AVX-512) or adding n to p's exponent (AVX2)
//
// t < tlo (results below the smallest normal float32, and −Inf) gives exactly 0, t > thi gives
// +Inf, NaN stays NaN.
package main

import (
	"math"

	"github.com/mhalab/mha/internal/kernel/_asm/asmutil"
	"github.com/mhalab/mha/internal/kernel/_asm/bf16op"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Constant rows: each is one float32 repeated 8 times (32 bytes), so AVX2 code uses a row as a
// ymm memory operand and AVX-512 code broadcasts its first element.
const (
	kLog2e   = iota // log2(e)
	kNegLn2H        // −ln2hi
	kNegLn2L        // −ln2lo
	kC6
	kC5
	kC4
	kC3
	kC2
	kOne
	kTlo    // smallest t whose exp is a normal float32
	kThi    // largest t whose exp is finite
	kClamp  // AVX-512 clamps t to this, above thi: the result then overflows to +Inf by itself
	kPosInf // +Inf
	kNegInf // −Inf
	kNaN    // a quiet NaN
	kB4     // the bfloat16 path's 2^r polynomial: b4…b1
	kB3
	kB2
	kB1
	kUlo    // the bfloat16 path's least u = t·log2e kept: 2^u ≥ 2⁻¹²⁶
	kUclamp // the bfloat16 path clamps u to this: 2^u then overflows to +Inf by itself
	kSign   // −0: the sign bit alone
	kCubic  // the tanh GELU's 0.044715
	kTanh   // the tanh GELU's −2·√(2/π), rounded to float32
	kPhi    // 1/√(2π), rounded to float32: the normal density's factor
	kScale  // the tanh GELU's √(2/π), rounded to float32
	kCubic3 // the tanh GELU's 3·0.044715, rounded to float32
	kRows
)

// Bit patterns, identical to the constants in exp.go.
var rowBits = [kRows]uint32{
	kLog2e:   0x3fb8aa3b, // 1.442695
	kNegLn2H: 0xbf318000, // −0.693359375
	kNegLn2L: 0x395e8083, // 2.1219444e-4
	kC6:      0x3ab55994, // 1.38359005e-3
	kC5:      0x3c093a70, // 8.37574899e-3
	kC4:      0x3d2aacf1, // 4.1668836e-2
	kC3:      0x3e2aaa1e, // 0.166664571
	kC2:      0x3efffffc, // 0.499999881
	kOne:     0x3f800000, // 1
	kTlo:     0xc2aeac4f, // −87.33654
	kThi:     0x42b17217, // 88.72283
	kClamp:   0x42b20000, // 89
	kPosInf:  0x7f800000,
	kNegInf:  0xff800000,
	kNaN:     0x7fc00000,
	kB4:      0x3c1d009d, // 9.58266575e-3
	kB3:      0x3d64ffbb, // 5.59079461e-2
	kB2:      0x3e7601c4, // 0.240241110
	kB1:      0x3f317093, // 0.693123996
	kUlo:     0xc2fc0000, // −126
	kUclamp:  0x43010000, // 129
	kSign:    0x80000000,
	kCubic:   math.Float32bits(0.044715),
	kTanh:    math.Float32bits(-2 * 0.7978845608028654),
	kPhi:     math.Float32bits(0.3989422804014327),
	kScale:   math.Float32bits(0.7978845608028654),
	kCubic3:  math.Float32bits(3 * 0.044715),
}

// VCMPPS predicates.
const (
	cmpUnord = 0x03 // either operand NaN
	cmpNLT   = 0x05 // not less than: ≥ or unordered
	cmpLT    = 0x11 // less than, false on NaN (LT_OQ)
	cmpGT    = 0x1e // greater than, false on NaN (GT_OQ)
	cmpGE    = 0x1d // greater than or equal, false on NaN (GE_OQ)
	cmpNEQ   = 0x04 // not equal, true on NaN (NEQ_UQ)
)

const roundNearest = 0x08 // VROUNDPS / VRNDSCALEPS: to nearest even, no precision exception

var (
	cdfConsts Mem // GELU's float64 constants: −cdfLo, cdfScale, cdfIntervals and 1
	consts    Mem // the constant rows
	tailMask  Mem // 8 × −1 then 8 × 0: the 32 bytes at offset 4·(8−k) enable the first k lanes
)

// row returns the memory operand of constant row i.
func row(i int) Mem { return consts.Offset(32 * i) }

func data() {
	consts = GLOBL("expconsts", RODATA|NOPTR)
	for i, b := range rowBits {
		for j := range 8 {
			DATA(32*i+4*j, U32(b))
		}
	}
	cdfConsts = GLOBL("cdfconsts", RODATA|NOPTR)
	for i, v := range []float64{10, 32, 640, 1} {
		DATA(8*i, U64(math.Float64bits(v)))
	}
	tailMask = GLOBL("exptailmask", RODATA|NOPTR)
	for j := range 16 {
		v := uint32(0)
		if j < 8 {
			v = math.MaxUint32
		}
		DATA(4*j, U32(v))
	}
}

func main() {
	ConstraintExpr("!purego")
	data()
	smax512()
	sexp512()
	sexpBF16512()
	sscal512()
	saxpy512()
	sgrad512()
	gate512("siluAVX512", false)
	gate512("geluTanhAVX512", true)
	gelu512()
	geluGrad512()
	gateGrad512("siluGradAVX512", false)
	gateGrad512("geluTanhGradAVX512", true)
	smul512()
	sum512("sumF64AVX512", false)
	sum512("squaresF64AVX512", true)
	norm512("normRowAVX512", false)
	norm512("normRowBiasAVX512", true)
	normGrad512()
	normGradInput512()
	smax256()
	sexp256()
	sscal256()
	sgrad256()
	Generate()
}

// sliceArgs loads the base pointer and length of the []float32 parameter x.
func sliceArgs() (ptr, n Register) {
	ptr = Load(Param("x").Base(), GP64())
	n = Load(Param("x").Len(), GP64())
	return ptr, n
}

// at returns the memory operand ptr + 4·i (i float32 elements further on).
func at(ptr Register, i int) Mem { return Mem{Base: ptr, Disp: 4 * i} }

// tailK sets k to the low n bits (n in 1…15); it clobbers RCX.
func tailK(n Register, k Register) {
	m := GP32()
	MOVL(U32(1), m)
	MOVQ(n, RCX)
	SHLL(CL, m)
	DECL(m)
	KMOVW(m, k)
}

// tailYMM loads the AVX2 lane mask that enables the first n lanes (1…7); n is negated.
func tailYMM(n Register) VecVirtual {
	base := GP64()
	LEAQ(tailMask, base)
	NEGQ(n)
	mask := YMM()
	VMOVUPS(Mem{Base: base, Index: n, Scale: 4, Disp: 32}, mask)
	return mask
}

// loop emits the usual strip-mined loop: while n ≥ step { body(); ptr += step; n −= step }.
func loop(name string, ptr, n Register, step int, body func()) {
	loopN(name, []Register{ptr}, n, step, body)
}

// loopN is loop for several slices walked together: it advances every pointer of ptrs.
func loopN(name string, ptrs []Register, n Register, step int, body func()) {
	Label(name)
	CMPQ(n, U32(step))
	JB(LabelRef(name + "_done"))
	body()
	for _, p := range ptrs {
		ADDQ(U32(4*step), p)
	}
	SUBQ(U32(step), n)
	JMP(LabelRef(name))
	Label(name + "_done")
}

// elementwise emits the body of an elementwise AVX-512 kernel over n values of the slices at
// ptrs: body(4, nil) for 64 values at a time, body(1, nil) for 16, then body(1, k) with k
// masking the last n mod 16; then it returns.
func elementwise(name string, ptrs []Register, n Register, body func(nv int, k Op)) {
	loopN(name+"_64", ptrs, n, 64, func() { body(4, nil) })
	loopN(name+"_16", ptrs, n, 16, func() { body(1, nil) })
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	k := K()
	tailK(n, k)
	body(1, k)
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// loadZ loads the 16 float32 at ptr + 64·u bytes into a new vector, only the lanes of k (the
// others 0) when k is not nil.
func loadZ(ptr Register, u int, k Op) VecVirtual {
	v := ZMM()
	if k == nil {
		VMOVUPS(at(ptr, 16*u), v)
	} else {
		VMOVUPS_Z(at(ptr, 16*u), k, v)
	}
	return v
}

// storeZ stores v at ptr + 64·u bytes, only the lanes of k when k is not nil.
func storeZ(v VecVirtual, ptr Register, u int, k Op) {
	if k == nil {
		VMOVUPS(v, at(ptr, 16*u))
	} else {
		VMOVUPS(v, k, at(ptr, 16*u))
	}
}

// ---------------------------------------------------------------------------------------------
// AVX-512

func smax512() {
	TEXT("smaxAVX512", NOSPLIT, "func(x []float32) float32")
	Doc("smaxAVX512 returns the largest value of x: −Inf when x is empty, NaN when x holds a NaN.")
	ptr, n := sliceArgs()
	// Neither VMAXPS nor VRANGEPS propagates a quiet NaN, so nan collects VCMPPS-unordered
	// masks on the side; an unordered compare of two vectors catches a NaN in either.
	acc := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
	for _, a := range acc {
		VBROADCASTSS(row(kNegInf), a)
	}
	nan := K()
	KXORW(nan, nan, nan)
	loop("smax512_64", ptr, n, 64, func() {
		x := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
		for u := range x {
			VMOVUPS(at(ptr, 16*u), x[u])
		}
		for u := range x {
			VMAXPS(x[u], acc[u], acc[u])
		}
		k0, k1 := K(), K()
		VCMPPS(U8(cmpUnord), x[1], x[0], k0)
		VCMPPS(U8(cmpUnord), x[3], x[2], k1)
		KORW(k1, k0, k0)
		KORW(k0, nan, nan)
	})
	loop("smax512_16", ptr, n, 16, func() {
		x, k := ZMM(), K()
		VMOVUPS(at(ptr, 0), x)
		VMAXPS(x, acc[0], acc[0])
		VCMPPS(U8(cmpUnord), x, x, k)
		KORW(k, nan, nan)
	})
	TESTQ(n, n)
	JZ(LabelRef("smax512_reduce"))
	kin, k := K(), K()
	tailK(n, kin)
	x := ZMM()
	VMOVUPS_Z(at(ptr, 0), kin, x)  // zeros past the end: no NaN there
	VMAXPS(x, acc[1], kin, acc[1]) // merge masking: the other lanes keep acc
	VCMPPS(U8(cmpUnord), x, x, k)
	KORW(k, nan, nan)

	Label("smax512_reduce")
	KORTESTW(nan, nan)
	JNZ(LabelRef("smax512_nan"))
	VMAXPS(acc[1], acc[0], acc[0])
	VMAXPS(acc[3], acc[2], acc[2])
	VMAXPS(acc[2], acc[0], acc[0])
	hsum512(acc[0], func(a, b Op) { VMAXPS(a, b, b) })
	VZEROUPPER() // keeps the low 128 bits; Store writes with MOVSS
	Store(acc[0].AsX(), ReturnIndex(0))
	RET()

	Label("smax512_nan")
	VZEROUPPER()
	r := XMM()
	MOVSS(row(kNaN), r)
	Store(r, ReturnIndex(0))
	RET()
}

// hsum512 folds the 16 lanes of z into lane 0 with op(a, b), which sets b to b ∘ a.
func hsum512(z VecVirtual, op func(a, b Op)) {
	y := YMM()
	VEXTRACTF64X4(U8(1), z, y)
	op(y, z.AsY())
	hsum256(z.AsY().(VecVirtual), op)
}

// hsum256 folds the 8 lanes of y into lane 0 with op.
func hsum256(y VecVirtual, op func(a, b Op)) {
	x, h := y.AsX(), XMM()
	VEXTRACTF128(U8(1), y, h)
	op(h, x)
	VPERMILPS(U8(0x4e), x, h) // swap the 64-bit halves
	op(h, x)
	VPERMILPS(U8(0xb1), x, h) // swap neighbours
	op(h, x)
}

// exp512 holds the registers of the AVX-512 exp. For blockBF16 (bits not nil), c6 holds b4,
// coef[1:] b3, b2, b1 and 1, tlo ulo and clamp uclamp; nhi, nlo and coef[0] are unused.
type exp512 struct {
	negShift, log2e, nhi, nlo, c6, tlo, clamp VecVirtual
	coef                                      [5]VecVirtual // c5, c4, c3, c2, 1
	acc                                       [4]VecVirtual
	bits                                      Register // not nil: the exps go there as bfloat16
}

// shifted loads the len(mem) vectors at mem (under the tail mask kin when it is not nil) as
// t = x − shift, and returns them with the registers a block computes in: n, p and the masks.
func (e *exp512) shifted(mem []Mem, kin Op) (t, nn, p []VecVirtual, k []Register) {
	nv := len(mem)
	t, nn, p, k = make([]VecVirtual, nv), make([]VecVirtual, nv), make([]VecVirtual, nv), make([]Register, nv)
	for u := range nv {
		t[u], nn[u], p[u], k[u] = ZMM(), ZMM(), ZMM(), K()
	}
	for u := range nv {
		if kin != nil {
			VMOVUPS_Z(mem[u], kin, t[u])
			VADDPS(e.negShift, t[u], t[u])
		} else {
			VADDPS(mem[u], e.negShift, t[u]) // t = x + (−shift) = x − shift
		}
	}
	return t, nn, p, k
}

// bound sets k[u] to the lanes of t[u] to keep, t ≥ e.tlo or NaN (the others, −Inf included,
// become 0), under kin when it is not nil, and clamps t[u] to at most e.clamp, NaN staying NaN
// (VMINPS returns its second source, t, when either is NaN).
func (e *exp512) bound(t []VecVirtual, k []Register, kin Op) {
	for u := range t {
		if kin != nil {
			VCMPPS(U8(cmpNLT), e.tlo, t[u], kin, k[u])
		} else {
			VCMPPS(U8(cmpNLT), e.tlo, t[u], k[u])
		}
	}
	for u := range t {
		VMINPS(t[u], e.clamp, t[u])
	}
}

// block512 replaces the len(mem) vectors at mem by their exp and adds them to acc[0…]. With a
// tail mask kin (not nil), one vector is read and written under the mask only. When e.bits is
// not nil, blockBF16 does the work instead.
func (e *exp512) block(mem []Mem, kin Op) {
	if e.bits != nil {
		e.blockBF16(mem, kin)
		return
	}
	t, nn, p, k := e.shifted(mem, kin)
	e.exp(t, nn, p, k, kin)
	for u := range p {
		if kin != nil {
			VMOVUPS(p[u], kin, mem[u])
		} else {
			VMOVUPS(p[u], mem[u])
		}
	}
	for u := range p {
		VADDPS(p[u], e.acc[u], e.acc[u])
	}
}

// exp sets p[u] = exp(t[u]) for each vector t[u] (clobbered), 0 outside the tail mask kin when
// it is not nil; nn and k are its scratch.
func (e *exp512) exp(t, nn, p []VecVirtual, k []Register, kin Op) {
	nv := len(t)
	e.bound(t, k, kin)
	for u := range nv {
		VMULPS(e.log2e, t[u], nn[u])
	}
	for u := range nv {
		VRNDSCALEPS(U8(roundNearest), nn[u], nn[u])
	}
	for u := range nv {
		VFMADD231PS(e.nhi, nn[u], t[u]) // t − n·ln2hi, exact
	}
	for u := range nv {
		VFMADD231PS(e.nlo, nn[u], t[u]) // r
	}
	for u := range nv {
		VMOVAPS(e.c6, p[u])
	}
	for _, c := range append(e.coef[:], e.coef[4]) { // c5, c4, c3, c2, 1, 1
		for u := range nv {
			VFMADD213PS(c, t[u], p[u]) // p = p·r + c
		}
	}
	for u := range nv {
		VSCALEFPS_Z(nn[u], p[u], k[u], p[u]) // p·2ⁿ, 0 outside k
	}
}

// blockBF16 is block for the bfloat16 path (e.bits not nil), with an exp accurate enough to
// be rounded to bfloat16 and cheaper than Sexp's: u = t·log2e, n = round(u), r = u − n,
// 2^r = 1 + b1·r + … + b4·r⁴ (relative error 2.9·10⁻⁶ on |r| ≤ 1/2), times 2ⁿ. With the
// rounding of u, the exps are within 1·10⁻⁵ of exp(t) relative, 0 where u < −126.
func (e *exp512) blockBF16(mem []Mem, kin Op) {
	nv := len(mem)
	t, nn, p, k := e.shifted(mem, kin)
	for u := range nv {
		VMULPS(e.log2e, t[u], t[u]) // u = t·log2e
	}
	e.bound(t, k, kin) // with ulo and uclamp
	for u := range nv {
		VRNDSCALEPS(U8(roundNearest), t[u], nn[u])
	}
	for u := range nv {
		VSUBPS(nn[u], t[u], t[u]) // r = u − n, exact
	}
	for u := range nv {
		VMOVAPS(e.c6, p[u]) // b4
	}
	for _, c := range e.coef[1:] { // b3, b2, b1, 1
		for u := range nv {
			VFMADD213PS(c, t[u], p[u])
		}
	}
	for u := range nv {
		VSCALEFPS_Z(nn[u], p[u], k[u], p[u])
	}
	e.storeBF16(p, kin)
	for u := range nv {
		VADDPS(p[u], e.acc[u], e.acc[u])
	}
}

// storeBF16 stores the vectors p rounded to bfloat16 at e.bits (vector u at e.bits + 32·u),
// under the mask kin when it is not nil: two vectors at a time by VCVTNE2PS2BF16 where it can.
// The instructions come encoded, register-only (bf16op), so the register allocator does not
// see them: they run on Z30 and Z31, which avo sees defined by the VMOVAPS before them and Z31
// read by the store after, so no virtual register lives there meanwhile.
func (e *exp512) storeBF16(p []VecVirtual, kin Op) {
	for u := 0; u < len(p); u++ {
		out := Mem{Base: e.bits, Disp: 32 * u}
		if kin == nil && u+1 < len(p) {
			VMOVAPS(p[u], Z30)
			VMOVAPS(p[u+1], Z31)
			bf16op.VCVTNE2PS2BF16(Z30, Z31, Z31, true)
			VMOVDQU16(Z31, out)
			u++
			continue
		}
		VMOVAPS(p[u], Z31)
		bf16op.VCVTNEPS2BF16(Z31, Y31)
		if kin != nil {
			VMOVDQU16(Y31, kin, out)
		} else {
			VMOVDQU16(Y31, out) // EVEX: VMOVDQU cannot name Y31
		}
	}
}

func sexp512() {
	TEXT("sexpAVX512", NOSPLIT, "func(x []float32, negShift float32) float32")
	Doc("sexpAVX512 sets x[i] = exp(x[i] + negShift) and returns the sum of the new values.")
	ptr, n := sliceArgs()
	sexpBody512("sexp512", ptr, n, nil)
}

// sexpBF16512 emits sexpBF16AVX512: exps by blockBF16's cheaper polynomial, stored as bfloat16
// (VCVTNE2PS2BF16, VCVTNEPS2BF16) instead of over x, summed as Sexp sums. It needs AVX512_BF16.
func sexpBF16512() {
	TEXT("sexpBF16AVX512", NOSPLIT, "func(dst []uint16, x []float32, negShift float32) float32")
	Doc("sexpBF16AVX512 sets dst[i] to the bfloat16 of exp(x[i] + negShift), computed within 1e-5 relative, for i < len(x) and returns the sum of the exps before rounding; x is not written. It needs AVX512_BF16; dst must be as long as x.")
	bits := Load(Param("dst").Base(), GP64())
	ptr, n := sliceArgs()
	sexpBody512("sexpbf16512", ptr, n, bits)
}

// sexpBody512 emits the body of sexpAVX512 (bits nil) or sexpBF16AVX512 over the n values at
// ptr, its labels prefixed by name.
func sexpBody512(name string, ptr, n, bits Register) {
	e := exp512{bits: bits}
	e.negShift = ZMM()
	VBROADCASTSS(Load(Param("negShift"), XMM()), e.negShift)
	if bits != nil {
		e.log2e, e.c6, e.tlo, e.clamp = bcast(kLog2e), bcast(kB4), bcast(kUlo), bcast(kUclamp)
		for i, r := range []int{kB3, kB2, kB1, kOne} {
			e.coef[i+1] = bcast(r)
		}
	} else {
		e.load()
	}
	for i := range e.acc {
		e.acc[i] = ZMM()
		VXORPS(e.acc[i], e.acc[i], e.acc[i])
	}
	// advance moves the pointers on by step values.
	advance := func(step int) {
		if bits != nil {
			ADDQ(U32(2*step), bits)
		}
	}
	loop(name+"_64", ptr, n, 64, func() {
		e.block([]Mem{at(ptr, 0), at(ptr, 16), at(ptr, 32), at(ptr, 48)}, nil)
		advance(64)
	})
	loop(name+"_16", ptr, n, 16, func() {
		e.block([]Mem{at(ptr, 0)}, nil)
		advance(16)
	})
	TESTQ(n, n)
	JZ(LabelRef(name + "_reduce"))
	kin := K()
	tailK(n, kin)
	e.acc[0], e.acc[1] = e.acc[1], e.acc[0] // the tail adds into acc[1]
	e.block([]Mem{at(ptr, 0)}, kin)
	e.acc[0], e.acc[1] = e.acc[1], e.acc[0]

	Label(name + "_reduce")
	VADDPS(e.acc[1], e.acc[0], e.acc[0])
	VADDPS(e.acc[3], e.acc[2], e.acc[2])
	VADDPS(e.acc[2], e.acc[0], e.acc[0])
	hsum512(e.acc[0], func(a, b Op) { VADDPS(a, b, b) })
	VZEROUPPER()
	Store(e.acc[0].AsX(), ReturnIndex(0))
	RET()
}

// bcast returns a new register holding constant row i in every lane.
func bcast(i int) VecVirtual {
	z := ZMM()
	VBROADCASTSS(row(i), z)
	return z
}

// load broadcasts the constants of Sexp's exp into e's registers.
func (e *exp512) load() {
	e.log2e, e.nhi, e.nlo, e.c6 = bcast(kLog2e), bcast(kNegLn2H), bcast(kNegLn2L), bcast(kC6)
	e.tlo, e.clamp = bcast(kTlo), bcast(kClamp)
	for i, r := range []int{kC5, kC4, kC3, kC2, kOne} {
		e.coef[i] = bcast(r)
	}
}

// gate512 emits siluAVX512 (tanh false) or geluTanhAVX512: s = 1/(1 + e^z) and y = x·s, where z
// is −x for SiLU and −2·√(2/π)·(x + 0.044715·x·x·x) for the tanh GELU, e^z is Sexp's exp, and
// each step is one float32 operation in the order written, as kernel's Go code does them.
func gate512(name string, tanh bool) {
	TEXT(name, NOSPLIT, "func(y, s, x []float32)")
	z := "−x"
	if tanh {
		z = "−2·√(2/π)·(x + 0.044715·x·x·x)"
	}
	Doc(name+" sets s[i] = 1/(1 + e^z), z = "+z+" of x[i], and y[i] = x[i]·s[i] for i < len(x); y and s must be as long as x.",
		"e^z is Sexp's exp, and each step is rounded to float32 as Go rounds it.")
	y := Load(Param("y").Base(), GP64())
	sp := Load(Param("s").Base(), GP64())
	ptr, n := sliceArgs()
	var e exp512
	e.load()
	one := e.coef[4]
	var sign, cubic, scale VecVirtual
	if tanh {
		cubic, scale = bcast(kCubic), bcast(kTanh)
	} else {
		sign = bcast(kSign)
	}
	// body handles nv vectors, or one under the tail mask kin when it is not nil.
	body := func(nv int, kin Op) {
		x, t, nn, p, k := make([]VecVirtual, nv), make([]VecVirtual, nv), make([]VecVirtual, nv), make([]VecVirtual, nv), make([]Register, nv)
		for u := range nv {
			x[u], t[u], nn[u], p[u], k[u] = ZMM(), ZMM(), ZMM(), ZMM(), K()
		}
		for u := range nv {
			if kin != nil {
				VMOVUPS_Z(at(ptr, 16*u), kin, x[u])
			} else {
				VMOVUPS(at(ptr, 16*u), x[u])
			}
		}
		for u := range nv {
			if !tanh {
				VPXORD(sign, x[u], t[u]) // −x
				continue
			}
			VMULPS(cubic, x[u], t[u])
			VMULPS(x[u], t[u], t[u])
			VMULPS(x[u], t[u], t[u])
			VADDPS(x[u], t[u], t[u])
			VMULPS(scale, t[u], t[u])
		}
		e.exp(t, nn, p, k, kin)
		for u := range nv {
			VADDPS(one, p[u], p[u])
		}
		for u := range nv {
			VDIVPS(p[u], one, p[u]) // s = 1/(1 + e^z)
		}
		for u := range nv {
			VMULPS(p[u], x[u], x[u]) // y = x·s
		}
		for u := range nv {
			if kin != nil {
				VMOVUPS(p[u], kin, at(sp, 16*u))
				VMOVUPS(x[u], kin, at(y, 16*u))
			} else {
				VMOVUPS(p[u], at(sp, 16*u))
				VMOVUPS(x[u], at(y, 16*u))
			}
		}
	}
	elementwise(name, []Register{ptr, y, sp}, n, body)
}

// smul512 emits smulAVX512: dst = a ⊙ b.
func smul512() {
	TEXT("smulAVX512", NOSPLIT, "func(dst, a, b []float32)")
	Doc("smulAVX512 sets dst[i] = a[i]·b[i] for i < len(dst); a and b must be as long as dst.")
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	a := Load(Param("a").Base(), GP64())
	b := Load(Param("b").Base(), GP64())
	body := func(nv int, kin Op) {
		v := make([]VecVirtual, nv)
		for u := range nv {
			v[u] = ZMM()
			if kin != nil {
				VMOVUPS_Z(at(a, 16*u), kin, v[u])
				w := ZMM()
				VMOVUPS_Z(at(b, 16*u), kin, w)
				VMULPS(w, v[u], v[u])
				VMOVUPS(v[u], kin, at(dst, 16*u))
				continue
			}
			VMOVUPS(at(a, 16*u), v[u])
			VMULPS(at(b, 16*u), v[u], v[u])
		}
		if kin == nil {
			for u := range nv {
				VMOVUPS(v[u], at(dst, 16*u))
			}
		}
	}
	elementwise("smul512", []Register{dst, a, b}, n, body)
}

// gelu512 emits geluAVX512(y, s, x []float32, table *[640][4]float64): s[i] = Φ(x[i]) and
// y[i] = x[i]·s[i], Φ as kernel.GELU's Go code computes it, step by step in float64 (no FMA):
// u = (x + 10)·32; in [0, 640) the cubic c₀ + t·(c₁ + t·(c₂ + t·c₃)) of interval k = ⌊u⌋ at
// t = u − k, its coefficients loaded from table; below 0 Φ = 0, from 640 on 1, and NaN stays
// the NaN it was. Eight values a step, in float64 lanes.
func gelu512() {
	TEXT("geluAVX512", NOSPLIT, "func(y, s, x []float32, table *[640][4]float64)")
	Doc("geluAVX512 sets s[i] = Φ(x[i]) by kernel.GELU's interpolation in table and y[i] = x[i]·s[i] for i < len(x); y and s must be as long as x.")
	y := Load(Param("y").Base(), GP64())
	sp := Load(Param("s").Base(), GP64())
	x := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	table := Load(Param("table"), GP64())
	ten, scale, top, one := ZMM(), ZMM(), ZMM(), ZMM()
	for i, c := range []VecVirtual{ten, scale, top, one} {
		VBROADCASTSD(cdfConsts.Offset(8*i), c)
	}
	zero := ZMM()
	VXORPD(zero, zero, zero)
	last := YMM() // the last interval, 639, in every int32 lane
	l := GP32()
	MOVL(U32(639), l)
	VPBROADCASTD(l, last)
	idx := AllocLocal(32) // the lanes' table offsets, for the loads' address registers
	body := func(kin Op) {
		xf := YMM()
		if kin == nil {
			VMOVUPS(at(x, 0), xf)
		} else {
			VMOVUPS_Z(at(x, 0), kin, xf)
		}
		u := ZMM()
		VCVTPS2PD(xf, u)
		VADDPD(ten, u, u) // x − cdfLo
		VMULPD(scale, u, u)
		below, above, nan := K(), K(), K()
		VCMPPD(U8(cmpLT), zero, u, below)
		VCMPPD(U8(cmpGE), top, u, above)
		VCMPPD(U8(cmpUnord), u, u, nan)
		k := YMM()
		VCVTTPD2DQ(u, k)
		t := ZMM()
		VCVTDQ2PD(k, t)
		VSUBPD(t, u, t) // u − k
		// Each lane's four coefficients are 32 bytes of table: k clamped to [0, 639] so that
		// every load lies in it (the lanes outside [0, 640) are replaced below), eight loads,
		// two lanes' to a vector, then transposed into c[j], the jth coefficient of every lane.
		VPMAXSD(zero.AsY(), k, k)
		VPMINSD(last, k, k)
		VPSLLD(U8(2), k, k)
		VMOVDQU(k, idx)
		var z [4]VecVirtual
		for v, pair := range [4][2]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}} {
			z[v] = ZMM()
			for h, lane := range pair {
				o := GP64()
				MOVL(idx.Offset(4*lane), o.As32())
				m := Mem{Base: table, Index: o, Scale: 8}
				if h == 0 {
					VMOVUPD(m, z[v].AsY())
				} else {
					VINSERTF64X4(U8(1), m, z[v], z[v])
				}
			}
		}
		lo01, hi01, lo45, hi45 := ZMM(), ZMM(), ZMM(), ZMM()
		VUNPCKLPD(z[1], z[0], lo01)
		VUNPCKHPD(z[1], z[0], hi01)
		VUNPCKLPD(z[3], z[2], lo45)
		VUNPCKHPD(z[3], z[2], hi45)
		c := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
		VSHUFF64X2(U8(0x88), lo45, lo01, c[0])
		VSHUFF64X2(U8(0x88), hi45, hi01, c[1])
		VSHUFF64X2(U8(0xdd), lo45, lo01, c[2])
		VSHUFF64X2(U8(0xdd), hi45, hi01, c[3])
		r := ZMM()
		VMULPD(c[3], t, r)
		VADDPD(c[2], r, r)
		VMULPD(t, r, r)
		VADDPD(c[1], r, r)
		VMULPD(t, r, r)
		VADDPD(c[0], r, r)
		VMOVAPD(zero, below, r)
		VMOVAPD(one, above, r)
		sf := YMM()
		VCVTPD2PS(r, sf)
		VMOVUPS(xf, nan, sf) // NaN: the input's own bits
		yf := YMM()
		VMULPS(sf, xf, yf)
		if kin == nil {
			VMOVUPS(sf, at(sp, 0))
			VMOVUPS(yf, at(y, 0))
		} else {
			VMOVUPS(sf, kin, at(sp, 0))
			VMOVUPS(yf, kin, at(y, 0))
		}
	}
	loopN("gelu512_8", []Register{y, sp, x}, n, 8, func() { body(nil) })
	TESTQ(n, n)
	JZ(LabelRef("gelu512_done"))
	kin := K()
	tailK(n, kin)
	body(kin)
	Label("gelu512_done")
	VZEROUPPER()
	RET()
}

// geluGrad512 emits geluGradAVX512(dx, dy, x, s, e []float32): dx[i] += dy[i]·(s[i] +
// (x[i]·(1/√(2π)))·e[i]), each step one float32 operation in that order.
func geluGrad512() {
	TEXT("geluGradAVX512", NOSPLIT, "func(dx, dy, x, s, e []float32)")
	Doc("geluGradAVX512 adds dy[i]·(s[i] + (x[i]·(1/√(2π)))·e[i]) to dx[i] for i < len(dx); dy, x, s and e must be as long as dx.")
	dx := Load(Param("dx").Base(), GP64())
	n := Load(Param("dx").Len(), GP64())
	dy := Load(Param("dy").Base(), GP64())
	x := Load(Param("x").Base(), GP64())
	sp := Load(Param("s").Base(), GP64())
	e := Load(Param("e").Base(), GP64())
	phi := ZMM()
	VBROADCASTSS(row(kPhi), phi)
	body := func(nv int, k Op) {
		v := make([]VecVirtual, nv)
		for u := range nv {
			v[u] = ZMM()
			if k != nil {
				t := ZMM()
				VMOVUPS_Z(at(x, 16*u), k, v[u])
				VMULPS(phi, v[u], v[u])
				for _, src := range []struct {
					p   Register
					mul bool
				}{{e, true}, {sp, false}, {dy, true}, {dx, false}} {
					VMOVUPS_Z(at(src.p, 16*u), k, t)
					if src.mul {
						VMULPS(t, v[u], v[u])
					} else {
						VADDPS(t, v[u], v[u])
					}
				}
				VMOVUPS(v[u], k, at(dx, 16*u))
				continue
			}
			VMULPS(at(x, 16*u), phi, v[u])
			VMULPS(at(e, 16*u), v[u], v[u])
			VADDPS(at(sp, 16*u), v[u], v[u])
			VMULPS(at(dy, 16*u), v[u], v[u])
			VADDPS(at(dx, 16*u), v[u], v[u])
		}
		if k == nil {
			for u := range nv {
				VMOVUPS(v[u], at(dx, 16*u))
			}
		}
	}
	elementwise("geluGrad512", []Register{dx, dy, x, sp, e}, n, body)
}

// gateGrad512 emits name(dx, dy, x, s []float32): dx[i] += dy[i]·d with the gate s = s[i] of
// x = x[i] and ds = s·(1 − s), each step one float32 operation in this order:
//
//	SiLU:      d = s + (x·s)·(1 − s)
//	tanh GELU: d = s + (((x·ds)·2)·√(2/π))·(1 + ((3·0.044715)·x)·x), or d = s where ds = 0
func gateGrad512(name string, tanh bool) {
	TEXT(name, NOSPLIT, "func(dx, dy, x, s []float32)")
	if tanh {
		Doc(name + " adds dy[i]·(s + x·s·(1 − s)·2·√(2/π)·(1 + 3·0.044715·x²)) to dx[i] (s alone where s·(1 − s) = 0), x = x[i], s = s[i], in kernel.GELUTanhGrad's order, for i < len(dx); dy, x and s must be as long as dx.")
	} else {
		Doc(name + " adds dy[i]·(s + x·s·(1 − s)) to dx[i], x = x[i], s = s[i], in kernel.SiLUGrad's order, for i < len(dx); dy, x and s must be as long as dx.")
	}
	dx := Load(Param("dx").Base(), GP64())
	n := Load(Param("dx").Len(), GP64())
	dy := Load(Param("dy").Base(), GP64())
	x := Load(Param("x").Base(), GP64())
	sp := Load(Param("s").Base(), GP64())
	one := ZMM()
	VBROADCASTSS(row(kOne), one)
	var scale, cubic3 VecVirtual
	if tanh {
		scale, cubic3 = ZMM(), ZMM()
		VBROADCASTSS(row(kScale), scale)
		VBROADCASTSS(row(kCubic3), cubic3)
	}
	body := func(nv int, k Op) {
		for u := range nv {
			load := func(p Register) VecVirtual { return loadZ(p, u, k) }
			xv, sv := load(x), load(sp)
			ds := ZMM()
			VSUBPS(sv, one, ds) // 1 − s
			d := ZMM()
			if tanh {
				VMULPS(ds, sv, ds) // s·(1 − s)
				nz := K()
				VXORPS(d, d, d)
				VCMPPS(U8(cmpNEQ), d, ds, nz) // ds ≠ 0 (or NaN)
				VMULPS(ds, xv, ds)            // x·ds
				VADDPS(ds, ds, ds)            // ·2
				VMULPS(scale, ds, ds)
				p := ZMM()
				VMULPS(cubic3, xv, p)
				VMULPS(xv, p, p)
				VADDPS(one, p, p)
				VMULPS(p, ds, ds)
				VMOVAPS(sv, d)
				VADDPS(ds, d, nz, d) // s + t where ds ≠ 0, s elsewhere
			} else {
				VMULPS(sv, xv, d) // x·s
				VMULPS(ds, d, d)  // ·(1 − s)
				VADDPS(sv, d, d)  // s + …
			}
			VMULPS(load(dy), d, d)
			VADDPS(load(dx), d, d)
			storeZ(d, dx, u, k)
		}
	}
	elementwise(name, []Register{dx, dy, x, sp}, n, body)
}

// sum512 emits name(x []float32, c float64) float64: Σ float64(x[i]), or with squares
// Σ (float64(x[i]) − c)² (each term one FMA), in 32 float64 lanes (four vectors, lane l taking
// the i ≡ l mod 32, in order of i, the last len(x) mod 32 under a mask), then reduced as
// sumF64Generic does: (a₀ + a₁) + (a₂ + a₃) across the vectors, then halves 4 + 4, 2 + 2, 1 + 1.
func sum512(name string, squares bool) {
	TEXT(name, NOSPLIT, "func(x []float32, c float64) float64")
	if squares {
		Doc(name + " returns Σ (float64(x[i]) − c)² in kernel.SquaresF64's order.")
	} else {
		Doc(name + " returns Σ float64(x[i]) in kernel.SumF64's order; c is not read.")
	}
	ptr, n := sliceArgs()
	var c VecVirtual
	if squares {
		c = ZMM()
		VBROADCASTSD(asmutil.ParamAddr("c"), c)
	}
	acc := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
	for _, a := range acc {
		VXORPD(a, a, a)
	}
	// add adds the 8 values at ptr + 32·u bytes, converted, to acc[u] (in the lanes of k).
	add := func(u int, k Op) {
		x := ZMM()
		if k == nil {
			VCVTPS2PD(Mem{Base: ptr, Disp: 32 * u}, x)
		} else {
			VCVTPS2PD_Z(Mem{Base: ptr, Disp: 32 * u}, k, x)
		}
		switch {
		case squares:
			VSUBPD(c, x, x)
			if k == nil {
				VFMADD231PD(x, x, acc[u])
			} else {
				VFMADD231PD(x, x, k, acc[u])
			}
		case k == nil:
			VADDPD(x, acc[u], acc[u])
		default:
			VADDPD(x, acc[u], k, acc[u])
		}
	}
	loop(name+"_32", ptr, n, 32, func() {
		for u := range acc {
			add(u, nil)
		}
	})
	TESTQ(n, n)
	JZ(LabelRef(name + "_reduce"))
	// The last n < 32 values: lane l of vector u when 8u + l < n.
	m := GP64()
	MOVQ(U32(1), m)
	SHLXQ(n, m, m)
	DECQ(m)
	for u := range acc {
		k := K()
		KMOVW(m.As32(), k)
		add(u, k)
		if u < len(acc)-1 {
			SHRQ(U8(8), m)
		}
	}
	Label(name + "_reduce")
	x := reduce64(acc)
	VZEROUPPER()
	Store(x, ReturnIndex(0))
	RET()
}

// reduce64 sums the 32 float64 lanes of acc as kernel.SumF64 does, (a₀ + a₁) + (a₂ + a₃) across
// the vectors, then halves 4 + 4, 2 + 2, 1 + 1, and returns the register holding the sum.
func reduce64(acc [4]VecVirtual) VecVirtual {
	VADDPD(acc[1], acc[0], acc[0])
	VADDPD(acc[3], acc[2], acc[2])
	VADDPD(acc[2], acc[0], acc[0])
	y := YMM()
	VEXTRACTF64X4(U8(1), acc[0], y)
	VADDPD(y, acc[0].AsY(), y)
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	VADDPD(x, y.AsX(), x)
	t := XMM()
	VUNPCKHPD(x, x, t)
	VADDSD(t, x, x)
	return x
}

// normGrad512 emits normGradAVX512(dw, db, x, g, w []float32, mean, rstd float32) (sumG, sumGN
// float64): with norm = (x[i] − mean)·rstd and dn = w[i]·g[i], each one float32 operation at a
// time, it adds g[i]·norm to dw[i] and g[i] to db[i], and returns Σ dn and Σ dn·norm in float64
// (dn·norm rounded to float32 first) in kernel.SumF64's order. Thirty-two values a step: value
// 16h + l of a step is in half h's float32 vector, lane l, and goes to float64 accumulator
// 2h + l/8; the last len(x) mod 32 under masks.
func normGrad512() {
	TEXT("normGradAVX512", NOSPLIT, "func(dw, db, x, g, w []float32, mean, rstd float32) (sumG, sumGN float64)")
	Doc("normGradAVX512 adds g[i]·norm to dw[i] and g[i] to db[i] and returns Σ w[i]·g[i] and Σ w[i]·g[i]·norm, norm = (x[i] − mean)·rstd, in kernel.NormGrad's order; dw, db, g and w must be as long as x.")
	dw := Load(Param("dw").Base(), GP64())
	db := Load(Param("db").Base(), GP64())
	x := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	g := Load(Param("g").Base(), GP64())
	w := Load(Param("w").Base(), GP64())
	mean, rstd := ZMM(), ZMM()
	VBROADCASTSS(asmutil.ParamAddr("mean"), mean)
	VBROADCASTSS(asmutil.ParamAddr("rstd"), rstd)
	var accG, accGN [4]VecVirtual
	for u := range 4 {
		accG[u], accGN[u] = ZMM(), ZMM()
		VXORPD(accG[u], accG[u], accG[u])
		VXORPD(accGN[u], accGN[u], accGN[u])
	}
	// half runs the 16 values at 16h; k16 masks them and k8 holds its two 8-lane masks.
	half := func(h int, k16 Op, k8 [2]Op) {
		load := func(p Register) VecVirtual { return loadZ(p, h, k16) }
		store := func(v VecVirtual, p Register) { storeZ(v, p, h, k16) }
		norm := load(x)
		VSUBPS(mean, norm, norm)
		VMULPS(rstd, norm, norm)
		gv := load(g)
		dn := load(w)
		VMULPS(gv, dn, dn)
		dnn := ZMM()
		VMULPS(norm, dn, dnn)
		t := load(dw)
		VMULPS(gv, norm, norm)
		VADDPS(norm, t, t)
		store(t, dw)
		t = load(db)
		VADDPS(gv, t, t)
		store(t, db)
		for _, sum := range []struct {
			v   VecVirtual
			acc *[4]VecVirtual
		}{{dn, &accG}, {dnn, &accGN}} {
			for q := range 2 {
				src := Op(sum.v.AsY())
				if q == 1 {
					y := YMM()
					VEXTRACTF64X4(U8(1), sum.v, y)
					src = y
				}
				d := ZMM()
				VCVTPS2PD(src, d)
				a := sum.acc[2*h+q]
				if k8[q] == nil {
					VADDPD(d, a, a)
				} else {
					VADDPD(d, a, k8[q], a)
				}
			}
		}
	}
	loopN("normGrad512_32", []Register{dw, db, x, g, w}, n, 32, func() {
		half(0, nil, [2]Op{})
		half(1, nil, [2]Op{})
	})
	TESTQ(n, n)
	JZ(LabelRef("normGrad512_reduce"))
	m := GP64()
	MOVQ(U32(1), m)
	SHLXQ(n, m, m)
	DECQ(m)
	for h := range 2 {
		k16 := K()
		KMOVW(m.As32(), k16)
		var k8 [2]Op
		for q := range 2 {
			b := GP64()
			MOVQ(m, b)
			SHRQ(U8(8*q), b)
			k := K()
			KMOVW(b.As32(), k)
			k8[q] = k
		}
		half(h, k16, k8)
		if h == 0 {
			SHRQ(U8(16), m)
		}
	}
	Label("normGrad512_reduce")
	sg := reduce64(accG)
	Store(sg, ReturnIndex(0))
	sgn := reduce64(accGN)
	VZEROUPPER()
	Store(sgn, ReturnIndex(1))
	RET()
}

// normGradInput512 emits normGradInputAVX512(dx, x, g, w []float32, mean, rstd, a, c float32):
// dx[i] += rstd·((w[i]·g[i] − a) − ((x[i] − mean)·rstd)·c), each step one float32 operation.
func normGradInput512() {
	TEXT("normGradInputAVX512", NOSPLIT, "func(dx, x, g, w []float32, mean, rstd, a, c float32)")
	Doc("normGradInputAVX512 adds rstd·((w[i]·g[i] − a) − ((x[i] − mean)·rstd)·c) to dx[i] for i < len(dx); x, g and w must be as long as dx.")
	dx := Load(Param("dx").Base(), GP64())
	n := Load(Param("dx").Len(), GP64())
	x := Load(Param("x").Base(), GP64())
	g := Load(Param("g").Base(), GP64())
	w := Load(Param("w").Base(), GP64())
	var cs [4]VecVirtual
	for i, name := range []string{"mean", "rstd", "a", "c"} {
		cs[i] = ZMM()
		VBROADCASTSS(asmutil.ParamAddr(name), cs[i])
	}
	mean, rstd, a, c := cs[0], cs[1], cs[2], cs[3]
	body := func(nv int, k Op) {
		for u := range nv {
			load := func(p Register) VecVirtual { return loadZ(p, u, k) }
			norm := load(x)
			VSUBPS(mean, norm, norm)
			VMULPS(rstd, norm, norm)
			VMULPS(c, norm, norm)
			t := load(w)
			gv := load(g)
			VMULPS(gv, t, t)
			VSUBPS(a, t, t)
			VSUBPS(norm, t, t)
			VMULPS(rstd, t, t)
			o := load(dx)
			VADDPS(t, o, o)
			storeZ(o, dx, u, k)
		}
	}
	elementwise("normGradInput512", []Register{dx, x, g, w}, n, body)
}

// norm512 emits name(y, x []float32, mean, rstd float32, w, b []float32): y[i] =
// ((x[i] − mean)·rstd)·w[i], with bias + b[i], each step one float32 operation, for i < len(y).
func norm512(name string, bias bool) {
	TEXT(name, NOSPLIT, "func(y, x []float32, mean, rstd float32, w, b []float32)")
	if bias {
		Doc(name + " sets y[i] = ((x[i] − mean)·rstd)·w[i] + b[i] for i < len(y); x, w and b must be as long as y.")
	} else {
		Doc(name + " sets y[i] = ((x[i] − mean)·rstd)·w[i] for i < len(y); x and w must be as long as y; b is not read.")
	}
	y := Load(Param("y").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	x := Load(Param("x").Base(), GP64())
	w := Load(Param("w").Base(), GP64())
	ptrs := []Register{y, x, w}
	var b Register
	if bias {
		b = Load(Param("b").Base(), GP64())
		ptrs = append(ptrs, b)
	}
	mean, rstd := ZMM(), ZMM()
	VBROADCASTSS(asmutil.ParamAddr("mean"), mean)
	VBROADCASTSS(asmutil.ParamAddr("rstd"), rstd)
	body := func(nv int, k Op) {
		v := make([]VecVirtual, nv)
		for u := range nv {
			v[u] = ZMM()
			if k != nil {
				VMOVUPS_Z(at(x, 16*u), k, v[u])
				VSUBPS(mean, v[u], v[u])
				VMULPS(rstd, v[u], v[u])
				t := ZMM()
				VMOVUPS_Z(at(w, 16*u), k, t)
				VMULPS(t, v[u], v[u])
				if bias {
					VMOVUPS_Z(at(b, 16*u), k, t)
					VADDPS(t, v[u], v[u])
				}
				VMOVUPS(v[u], k, at(y, 16*u))
				continue
			}
			VMOVUPS(at(x, 16*u), v[u])
			VSUBPS(mean, v[u], v[u])
			VMULPS(rstd, v[u], v[u])
			VMULPS(at(w, 16*u), v[u], v[u])
			if bias {
				VADDPS(at(b, 16*u), v[u], v[u])
			}
		}
		if k == nil {
			for u := range nv {
				VMOVUPS(v[u], at(y, 16*u))
			}
		}
	}
	elementwise(name, ptrs, n, body)
}

func sscal512() {
	TEXT("sscalAVX512", NOSPLIT, "func(s float32, x []float32)")
	Doc("sscalAVX512 multiplies every value of x by s.")
	ptr, n := sliceArgs()
	s := ZMM()
	VBROADCASTSS(Load(Param("s"), XMM()), s)
	loop("sscal512_64", ptr, n, 64, func() {
		v := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
		for u := range v {
			VMULPS(at(ptr, 16*u), s, v[u])
		}
		for u := range v {
			VMOVUPS(v[u], at(ptr, 16*u))
		}
	})
	loop("sscal512_16", ptr, n, 16, func() {
		v := ZMM()
		VMULPS(at(ptr, 0), s, v)
		VMOVUPS(v, at(ptr, 0))
	})
	TESTQ(n, n)
	JZ(LabelRef("sscal512_done"))
	k := K()
	tailK(n, k)
	v := ZMM()
	VMOVUPS_Z(at(ptr, 0), k, v)
	VMULPS(s, v, v)
	VMOVUPS(v, k, at(ptr, 0))
	Label("sscal512_done")
	VZEROUPPER()
	RET()
}

// saxpy512 emits saxpyAVX512: y += alpha·x, the product rounded before the sum (VMULPS, then
// VADDPS), as Go's y[i] += alpha*x[i] without fused multiply-adds.
func saxpy512() {
	TEXT("saxpyAVX512", NOSPLIT, "func(alpha float32, x, y []float32)")
	Doc("saxpyAVX512 sets y[i] += alpha·x[i] for i < len(x), rounding the product before the sum; y must be at least as long as x.")
	ptr, n := sliceArgs()
	y := Load(Param("y").Base(), GP64())
	a := ZMM()
	VBROADCASTSS(Load(Param("alpha"), XMM()), a)
	body := func(u int, v VecVirtual, k Op) {
		if k != nil {
			VMOVUPS_Z(at(ptr, 16*u), k, v)
			VMULPS(a, v, v)
			t := ZMM()
			VMOVUPS_Z(at(y, 16*u), k, t)
			VADDPS(t, v, v)
			VMOVUPS(v, k, at(y, 16*u))
			return
		}
		VMULPS(at(ptr, 16*u), a, v)
		VADDPS(at(y, 16*u), v, v)
		VMOVUPS(v, at(y, 16*u))
	}
	loopN("saxpy512_64", []Register{ptr, y}, n, 64, func() {
		for u := range 4 {
			body(u, ZMM(), nil)
		}
	})
	loopN("saxpy512_16", []Register{ptr, y}, n, 16, func() {
		body(0, ZMM(), nil)
	})
	TESTQ(n, n)
	JZ(LabelRef("saxpy512_done"))
	k := K()
	tailK(n, k)
	body(0, ZMM(), k)
	Label("saxpy512_done")
	VZEROUPPER()
	RET()
}

// gradArgs loads the base pointers of ds and p and the length of ds.
func gradArgs() (ds, p, n Register) {
	ds = Load(Param("ds").Base(), GP64())
	p = Load(Param("p").Base(), GP64())
	n = Load(Param("ds").Len(), GP64())
	return ds, p, n
}

func sgrad512() {
	TEXT("sgradAVX512", NOSPLIT, "func(ds, p []float32, delta float32)")
	Doc("sgradAVX512 sets ds[i] = p[i]·(ds[i] − delta) for i < len(ds); p must be as long.")
	ds, p, n := gradArgs()
	d := ZMM()
	VBROADCASTSS(Load(Param("delta"), XMM()), d)
	loopN("sgrad512_64", []Register{ds, p}, n, 64, func() {
		v := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
		for u := range v {
			VMOVUPS(at(ds, 16*u), v[u])
		}
		for u := range v {
			VSUBPS(d, v[u], v[u])
		}
		for u := range v {
			VMULPS(at(p, 16*u), v[u], v[u])
		}
		for u := range v {
			VMOVUPS(v[u], at(ds, 16*u))
		}
	})
	loopN("sgrad512_16", []Register{ds, p}, n, 16, func() {
		v := ZMM()
		VMOVUPS(at(ds, 0), v)
		VSUBPS(d, v, v)
		VMULPS(at(p, 0), v, v)
		VMOVUPS(v, at(ds, 0))
	})
	TESTQ(n, n)
	JZ(LabelRef("sgrad512_done"))
	k := K()
	tailK(n, k)
	v, w := ZMM(), ZMM()
	VMOVUPS_Z(at(ds, 0), k, v)
	VMOVUPS_Z(at(p, 0), k, w)
	VSUBPS(d, v, v)
	VMULPS(w, v, v)
	VMOVUPS(v, k, at(ds, 0))
	Label("sgrad512_done")
	VZEROUPPER()
	RET()
}

// ---------------------------------------------------------------------------------------------
// AVX2 + FMA: 16 ymm registers, so the constants stay in memory as full-width operands.

func smax256() {
	TEXT("smaxAVX2", NOSPLIT, "func(x []float32) float32")
	Doc("smaxAVX2 returns the largest value of x: −Inf when x is empty, NaN when x holds a NaN.")
	ptr, n := sliceArgs()
	// VMAXPS does not propagate NaN, so nan collects VCMPPS-unordered masks on the side.
	acc := [4]VecVirtual{YMM(), YMM(), YMM(), YMM()}
	for _, a := range acc {
		VBROADCASTSS(row(kNegInf), a)
	}
	nan := YMM()
	VXORPS(nan, nan, nan)
	loop("smax256_32", ptr, n, 32, func() {
		x := [4]VecVirtual{YMM(), YMM(), YMM(), YMM()}
		for u := range x {
			VMOVUPS(at(ptr, 8*u), x[u])
		}
		for u := range x {
			VMAXPS(x[u], acc[u], acc[u])
		}
		VCMPPS(U8(cmpUnord), x[1], x[0], x[0]) // a NaN in x[0] or x[1]
		VCMPPS(U8(cmpUnord), x[3], x[2], x[2])
		VORPS(x[2], x[0], x[0])
		VORPS(x[0], nan, nan)
	})
	oneVector := func(x VecVirtual) {
		VMAXPS(x, acc[0], acc[0])
		VCMPPS(U8(cmpUnord), x, x, x)
		VORPS(x, nan, nan)
	}
	loop("smax256_8", ptr, n, 8, func() {
		x := YMM()
		VMOVUPS(at(ptr, 0), x)
		oneVector(x)
	})
	TESTQ(n, n)
	JZ(LabelRef("smax256_reduce"))
	mask := tailYMM(n)
	x, ninf := YMM(), YMM()
	VMASKMOVPS(at(ptr, 0), mask, x)
	VBROADCASTSS(row(kNegInf), ninf)
	VBLENDVPS(mask, x, ninf, x) // −Inf in the lanes past the end
	oneVector(x)

	Label("smax256_reduce")
	VPTEST(nan, nan)
	JNZ(LabelRef("smax256_nan"))
	VMAXPS(acc[1], acc[0], acc[0])
	VMAXPS(acc[3], acc[2], acc[2])
	VMAXPS(acc[2], acc[0], acc[0])
	hsum256(acc[0], func(a, b Op) { VMAXPS(a, b, b) })
	VZEROUPPER() // keeps the low 128 bits; Store writes with MOVSS
	Store(acc[0].AsX(), ReturnIndex(0))
	RET()

	Label("smax256_nan")
	r := XMM()
	VZEROUPPER()
	MOVSS(row(kNaN), r)
	Store(r, ReturnIndex(0))
	RET()
}

// block256 replaces the len(mem) vectors at mem by their exp and adds them to acc[0…]. With a
// tail mask (not nil), one vector is read and written under the mask only.
func block256(negShift VecVirtual, acc []VecVirtual, mem []Mem, mask VecVirtual) {
	nv := len(mem)
	t, nn, r, p := make([]VecVirtual, nv), make([]VecVirtual, nv), make([]VecVirtual, nv), make([]VecVirtual, nv)
	for u := range nv {
		t[u], nn[u], r[u], p[u] = YMM(), YMM(), YMM(), YMM()
	}
	for u := range nv {
		if mask != nil {
			VMASKMOVPS(mem[u], mask, t[u])
			VADDPS(negShift, t[u], t[u])
		} else {
			VADDPS(mem[u], negShift, t[u]) // t = x + (−shift) = x − shift
		}
	}
	for u := range nv {
		VMULPS(row(kLog2e), t[u], nn[u])
	}
	for u := range nv {
		VROUNDPS(U8(roundNearest), nn[u], nn[u])
	}
	for u := range nv {
		VMOVAPS(t[u], r[u])
	}
	for u := range nv {
		VFMADD231PS(row(kNegLn2H), nn[u], r[u]) // t − n·ln2hi, exact
	}
	for u := range nv {
		VFMADD231PS(row(kNegLn2L), nn[u], r[u])
	}
	for u := range nv {
		VMOVUPS(row(kC6), p[u])
	}
	for _, c := range []int{kC5, kC4, kC3, kC2, kOne, kOne} {
		for u := range nv {
			VFMADD213PS(row(c), r[u], p[u]) // p = p·r + c
		}
	}
	// p·2ⁿ by adding n to the exponent field: p's exponent is −1 or 0 and n ∈ [−126, 128] for
	// tlo ≤ t ≤ thi, where the sum stays a normal number. Outside, n is out of range or NaN
	// (VCVTTPS2DQ then gives 0x80000000, which shifts to 0, so a NaN p stays NaN) and the two
	// masks below replace the value.
	for u := range nv {
		VCVTTPS2DQ(nn[u], nn[u])
	}
	for u := range nv {
		VPSLLD(U8(23), nn[u], nn[u])
	}
	for u := range nv {
		VPADDD(nn[u], p[u], p[u])
	}
	for u := range nv {
		VCMPPS(U8(cmpGT), row(kThi), t[u], nn[u])
	}
	for u := range nv {
		VBLENDVPS(nn[u], row(kPosInf), p[u], p[u]) // t > thi: +Inf
	}
	for u := range nv {
		VCMPPS(U8(cmpLT), row(kTlo), t[u], nn[u])
	}
	for u := range nv {
		VANDNPS(p[u], nn[u], p[u]) // t < tlo: 0
	}
	for u := range nv {
		if mask != nil {
			VANDPS(mask, p[u], p[u]) // the lanes past the end add 0 to the sum
			VMASKMOVPS(p[u], mask, mem[u])
		} else {
			VMOVUPS(p[u], mem[u])
		}
	}
	for u := range nv {
		VADDPS(p[u], acc[u], acc[u])
	}
}

func sexp256() {
	TEXT("sexpAVX2", NOSPLIT, "func(x []float32, negShift float32) float32")
	Doc("sexpAVX2 sets x[i] = exp(x[i] + negShift) and returns the sum of the new values.")
	ptr, n := sliceArgs()
	negShift := YMM()
	VBROADCASTSS(Load(Param("negShift"), XMM()), negShift)
	acc := []VecVirtual{YMM(), YMM()}
	for _, a := range acc {
		VXORPS(a, a, a)
	}
	loop("sexp256_16", ptr, n, 16, func() {
		block256(negShift, acc, []Mem{at(ptr, 0), at(ptr, 8)}, nil)
	})
	loop("sexp256_8", ptr, n, 8, func() {
		block256(negShift, acc, []Mem{at(ptr, 0)}, nil)
	})
	TESTQ(n, n)
	JZ(LabelRef("sexp256_reduce"))
	mask := tailYMM(n)
	block256(negShift, acc[1:], []Mem{at(ptr, 0)}, mask)

	Label("sexp256_reduce")
	VADDPS(acc[1], acc[0], acc[0])
	hsum256(acc[0], func(a, b Op) { VADDPS(a, b, b) })
	VZEROUPPER() // keeps the low 128 bits; Store writes with MOVSS
	Store(acc[0].AsX(), ReturnIndex(0))
	RET()
}

func sscal256() {
	TEXT("sscalAVX2", NOSPLIT, "func(s float32, x []float32)")
	Doc("sscalAVX2 multiplies every value of x by s.")
	ptr, n := sliceArgs()
	s := YMM()
	VBROADCASTSS(Load(Param("s"), XMM()), s)
	loop("sscal256_32", ptr, n, 32, func() {
		v := [4]VecVirtual{YMM(), YMM(), YMM(), YMM()}
		for u := range v {
			VMULPS(at(ptr, 8*u), s, v[u])
		}
		for u := range v {
			VMOVUPS(v[u], at(ptr, 8*u))
		}
	})
	loop("sscal256_8", ptr, n, 8, func() {
		v := YMM()
		VMULPS(at(ptr, 0), s, v)
		VMOVUPS(v, at(ptr, 0))
	})
	TESTQ(n, n)
	JZ(LabelRef("sscal256_done"))
	mask := tailYMM(n)
	v := YMM()
	VMASKMOVPS(at(ptr, 0), mask, v)
	VMULPS(s, v, v)
	VMASKMOVPS(v, mask, at(ptr, 0))
	Label("sscal256_done")
	VZEROUPPER()
	RET()
}

func sgrad256() {
	TEXT("sgradAVX2", NOSPLIT, "func(ds, p []float32, delta float32)")
	Doc("sgradAVX2 sets ds[i] = p[i]·(ds[i] − delta) for i < len(ds); p must be as long.")
	ds, p, n := gradArgs()
	d := YMM()
	VBROADCASTSS(Load(Param("delta"), XMM()), d)
	loopN("sgrad256_32", []Register{ds, p}, n, 32, func() {
		v := [4]VecVirtual{YMM(), YMM(), YMM(), YMM()}
		for u := range v {
			VMOVUPS(at(ds, 8*u), v[u])
		}
		for u := range v {
			VSUBPS(d, v[u], v[u])
		}
		for u := range v {
			VMULPS(at(p, 8*u), v[u], v[u])
		}
		for u := range v {
			VMOVUPS(v[u], at(ds, 8*u))
		}
	})
	loopN("sgrad256_8", []Register{ds, p}, n, 8, func() {
		v := YMM()
		VMOVUPS(at(ds, 0), v)
		VSUBPS(d, v, v)
		VMULPS(at(p, 0), v, v)
		VMOVUPS(v, at(ds, 0))
	})
	TESTQ(n, n)
	JZ(LabelRef("sgrad256_done"))
	mask := tailYMM(n)
	v, w := YMM(), YMM()
	VMASKMOVPS(at(ds, 0), mask, v)
	VMASKMOVPS(at(p, 0), mask, w)
	VSUBPS(d, v, v)
	VMULPS(w, v, v)
	VMASKMOVPS(v, mask, at(ds, 0))
	Label("sgrad256_done")
	VZEROUPPER()
	RET()
}
