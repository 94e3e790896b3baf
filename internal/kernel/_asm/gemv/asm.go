// Command gemv writes gemv_amd64.s: the AVX-512 kernels of the dot products that Sgemm and
// SgemmHalf run when A has at most 4 rows and B is transposed (a decode step's projections, x·Wᵀ
// with W stored [n, k]): each row of W is read once, in place, in its stored type (float32,
// bfloat16 or binary16, converted in registers), against the rows of A held in L1.
// Kernel's go:generate line runs it:
//
//	go generate -run gemv ./internal/kernel
package main

import (
	"fmt"

	"github.com/mhalab/mha/internal/kernel/_asm/halfop"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("!purego")
	for _, e := range halfop.Elems {
		for m := 1; m <= 4; m++ {
			gemv(e, m)
		}
	}
	Generate()
}

// gemv emits gemv<e><m>AVX512(n, k int, x *float32, ldx int, w *E, ldw int, s *float32, lds int),
// which sets s[i·lds + r] = Σ_{p<k} x[i·ldx + p]·w[r·ldw + p] for i < m and r < n, with n ≥ 1 and
// k ≥ 1 (n = 0 would loop for ever).
//
// Each sum runs the same way whatever m is: 32 lanes (two vectors) take the products of p ≡ lane
// (mod 32) in order of p over the whole blocks of 32; a block of 16 after them goes into the
// first vector, the last k mod 16 values (masked) into the second; then the two vectors are
// added and their 16 lanes summed by halves (8 + 8, 4 + 4, 2 + 2, 1 + 1).
func gemv(e halfop.Elem, m int) {
	name := fmt.Sprintf("gemv%s%dAVX512", e.Name, m)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(n, k int, x *float32, ldx int, w %s, ldw int, s *float32, lds int)", e.Ptr))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets s[i·lds + r] = Σ_{p<k} x[i·ldx + p]·w[r·ldw + p] for i < %d, r < n, n ≥ 1 and k ≥ 1: each row of w read once, in place.", name, m))

	n := Load(Param("n"), GP64())
	k := Load(Param("k"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	x := make([]GPVirtual, m)
	x[0] = GP64()
	Load(Param("x"), x[0])
	for i := 1; i < m; i++ {
		x[i] = GP64()
		LEAQ(Mem{Base: x[i-1], Index: ldx, Scale: 1}, x[i])
	}
	w := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	if e.Size == 4 {
		SHLQ(U8(2), ldw)
	} else {
		SHLQ(U8(1), ldw)
	}
	s := Load(Param("s"), GP64())
	lds := Load(Param("lds"), GP64())
	SHLQ(U8(2), lds)

	// The mask of the last k mod 16 values, the number of whole blocks of 32, and whether a
	// block of 16 is left before those (k keeps only that bit).
	rem := GP64()
	MOVQ(k, rem)
	ANDQ(U8(15), rem)
	one := GP64()
	MOVQ(U32(1), one)
	SHLXQ(rem, one, one)
	DECQ(one)
	tail := K()
	KMOVW(one.As32(), tail)
	blocks := GP64()
	MOVQ(k, blocks)
	SHRQ(U8(5), blocks)
	ANDQ(U8(16), k)
	var lds3 GPVirtual
	if m == 4 {
		lds3 = GP64()
		LEAQ(Mem{Base: lds, Index: lds, Scale: 2}, lds3)
	}

	o := GP64() // the byte offset of p in w's row; x's is o·4/size
	xs := uint8(4 / e.Size)
	cnt := GP64()
	Label(name + "_row")
	acc := make([][2]VecVirtual, m)
	for i := range acc {
		for v := range 2 {
			acc[i][v] = ZMM()
			VXORPS(acc[i][v], acc[i][v], acc[i][v])
		}
	}
	XORQ(o, o)
	MOVQ(blocks, cnt)
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "_sixteen"))
	Label(name + "_block")
	wv := [2]VecVirtual{ZMM(), ZMM()}
	for v := range 2 {
		e.Load(Mem{Base: w, Index: o, Scale: 1, Disp: v * 16 * e.Size}, nil, wv[v])
	}
	for i := range m {
		for v := range 2 {
			VFMADD231PS(Mem{Base: x[i], Index: o, Scale: xs, Disp: v * 64}, wv[v], acc[i][v])
		}
	}
	ADDQ(U32(32*e.Size), o)
	DECQ(cnt)
	JNZ(LabelRef(name + "_block"))

	// k mod 32 ≥ 16: one more vector into the first lanes.
	Label(name + "_sixteen")
	TESTQ(k, k)
	JZ(LabelRef(name + "_tail"))
	w0 := ZMM()
	e.Load(Mem{Base: w, Index: o, Scale: 1}, nil, w0)
	for i := range m {
		VFMADD231PS(Mem{Base: x[i], Index: o, Scale: xs}, w0, acc[i][0])
	}
	ADDQ(U32(16*e.Size), o)

	// The last k mod 16, masked, into the lanes after them.
	Label(name + "_tail")
	KORTESTW(tail, tail)
	JZ(LabelRef(name + "_sum"))
	w1 := ZMM()
	e.Load(Mem{Base: w, Index: o, Scale: 1}, tail, w1)
	xt := ZMM()
	for i := range m {
		VMOVUPS_Z(Mem{Base: x[i], Index: o, Scale: xs}, tail, xt)
		VFMADD231PS(xt, w1, acc[i][1])
	}

	Label(name + "_sum")
	for i := range m {
		z := acc[i][0]
		VADDPS(acc[i][1], z, z)
		y := YMM()
		VEXTRACTF64X4(U8(1), z, y)
		VADDPS(y, z.AsY(), y)
		xx := XMM()
		VEXTRACTF128(U8(1), y, xx)
		VADDPS(xx, y.AsX(), xx)
		t := XMM()
		VMOVHLPS(xx, xx, t)
		VADDPS(t, xx, xx)
		VMOVSHDUP(xx, t)
		VADDSS(t, xx, xx)
		switch i {
		case 0:
			VMOVSS(xx, Mem{Base: s})
		case 3:
			VMOVSS(xx, Mem{Base: s, Index: lds3, Scale: 1})
		default:
			VMOVSS(xx, Mem{Base: s, Index: lds, Scale: uint8(i)})
		}
	}
	ADDQ(U8(4), s)
	ADDQ(ldw, w)
	DECQ(n)
	JNZ(LabelRef(name + "_row"))
	VZEROUPPER()
	RET()
}
