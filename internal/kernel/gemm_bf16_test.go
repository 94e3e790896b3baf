package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Paths lists GemmBF16's paths this CPU and build can run: generic, and avx512 (the
// AVX512_BF16 kernels) where the CPU has them.
func bf16Paths() []isa {
	if hasBF16 {
		return []isa{generic, avx512}
	}
	return []isa{generic}
}

// bf16Formats are the formats of B GemmBF16 and GemmBF16Half take.
var bf16Formats = []bFormat{f32, bfloat16, f16}

func (f bFormat) String() string { return [...]string{"f32", "bf16", "f16"}[f] }

// bf16Effective returns the values GemmBF16 multiplies for the values x stored in format f:
// rounded to bfloat16 (RoundBF16; binary16 through float32), a subnormal bfloat16 made zero.
func bf16Effective(x []float64, f bFormat) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		var h uint16
		switch f {
		case f32:
			h = RoundBF16(float32(v))
		case bfloat16:
			h = F32ToBF16(float32(v)) // v is a bfloat16: exact
		default:
			h = RoundBF16(F16ToF32(F32ToF16(float32(v))))
		}
		out[i] = float64(bf16Operand(h))
	}
	return out
}

// bf16OpB returns a random k×n op(B) whose values are of format f, and B stored as GemmBF16 or
// GemmBF16Half takes it (transposed and padded as tc says, NaN between the rows).
func bf16OpB(r *rand.Rand, tc sgemmCase, f bFormat) []float64 {
	if f == f32 {
		_, opB := tc.logical(r)
		return opB
	}
	return halfOpB(r, tc.k, tc.n, f == bfloat16)
}

// bf16OpA returns a random m×k op(A) whose values are of format f (float32 or bfloat16).
func bf16OpA(r *rand.Rand, tc sgemmCase, f bFormat) []float64 {
	if f == f32 {
		opA, _ := tc.logical(r)
		return opA
	}
	return halfOpB(r, tc.m, tc.k, true)
}

// bf16Operand64 makes x (float64 values of format f) the operandB GemmBF16 takes.
func bf16Operand64(x []float64, f bFormat) operandB {
	if f == f32 {
		return operandB{f32: to32(x)}
	}
	return operandB{half: encodeHalf(x, f == bfloat16), format: f}
}

// gemmBF16Shapes are the m, n, k of TestGemmBF16: odd sizes around the tile (14×32), the
// transposing packer's 8×8 blocks of pairs, the k block (512) and the n block (512).
var gemmBF16Shapes = [][3]int{
	{1, 1, 1}, {3, 40, 1}, {7, 13, 5}, {5, 6, 0}, {0, 5, 3}, {4, 0, 3}, {2, 3, 4},
	{15, 33, 17}, {14, 32, 32}, {29, 47, 300}, {64, 64, 64}, {31, 65, 33}, {33, 1, 1100},
	{300, 40, 9}, {20, 600, 70},
}

// bf16Operands are the formats of A and B that TestGemmBF16 multiplies: GemmBF16's, GemmBF16Half's
// two and GemmBF16Bits's.
var bf16Operands = [][2]bFormat{{f32, f32}, {f32, bfloat16}, {f32, f16}, {bfloat16, bfloat16}}

// TestGemmBF16 checks every path, transpose form, format of A and B and (alpha, beta, bias)
// combination on odd shapes and padded strides against the float64 product of the
// bfloat16-rounded operands, within float32 accumulation's bound (sgemmTol), and checks that
// the paths agree bit for bit.
func TestGemmBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	type combo struct {
		alpha, beta float64
		bias        bool
	}
	all := []combo{{1, 0, false}, {1, 0, true}, {1, 1, false}, {-1.5, 0.5, true}, {0, 0.5, true}, {0.5, 1, true}, {1, -1.5, false}}
	for _, s := range gemmBF16Shapes {
		for _, fs := range bf16Operands {
			fa, fb := fs[0], fs[1]
			shape := sgemmCase{m: s[0], n: s[1], k: s[2]}
			opA := bf16OpA(r, shape, fa)
			opB := bf16OpB(r, shape, fb)
			prod, mag := shape.reference(bf16Effective(opA, fa), bf16Effective(opB, fb))
			bias := randSlice(r, shape.n)
			combos := all
			if shape.m*shape.n*shape.k > 1<<16 {
				combos = []combo{{1, 0, true}, {-1.5, 0.5, false}}
			}
			for form := range 4 {
				tc := shape
				tc.transA, tc.transB = form&1 != 0, form&2 != 0
				tc.padA, tc.padB, tc.padC = (form+tc.m)%3, (form+tc.n+1)%4, form%2*5
				a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
				aop, bop, bias32 := bf16Operand64(a, fa), bf16Operand64(b, fb), to32(bias)
				for _, cb := range combos {
					var first []float32
					for _, is := range bf16Paths() {
						name := fmt.Sprintf("%v/A=%v,B=%v/%dx%dx%d/tA=%v,tB=%v/alpha=%v,beta=%v,bias=%v", is, fa, fb, tc.m, tc.n, tc.k, tc.transA, tc.transB, cb.alpha, cb.beta, cb.bias)
						c32 := to32(c)
						if cb.beta == 0 {
							for i := range c32 {
								c32[i] = float32(math.NaN()) // beta 0 must not read C
							}
						}
						var bs []float32
						if cb.bias {
							bs = bias32
						}
						var w Workspace
						w.gemmBF16(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(cb.alpha), aop, lda, bop, ldb, float32(cb.beta), c32, ldc, bs)
						checkSgemm(t, name, tc, cb.alpha, cb.beta, prod, mag, c, c32, ldc, bias, cb.bias)
						if first == nil {
							first = c32
							continue
						}
						for i := range c32 {
							if math.Float32bits(c32[i]) != math.Float32bits(first[i]) && !(cb.beta == 0 && i%ldc >= tc.n) {
								t.Fatalf("%s: C[%d][%d] = %v, the pure-Go path gives %v", name, i/ldc, i%ldc, c32[i], first[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmBF16Blocking checks the paths against each other, bit for bit, and against the
// reference under other k and n blocks, so that blocks end inside pairs of panels and packer
// blocks, with a k block of 2 the smallest.
func TestGemmBF16Blocking(t *testing.T) {
	defer func(k, n int) { blockKBF16, blockNBF16 = k, n }(blockKBF16, blockNBF16)
	r := rand.New(rand.NewPCG(23, 24))
	for _, blk := range [][2]int{{2, 32}, {16, 40}, {18, 64}, {100, 70}} {
		blockKBF16, blockNBF16 = blk[0], blk[1]
		for _, f := range bf16Formats {
			for form := range 4 {
				tc := sgemmCase{m: 17, n: 150, k: 123, transA: form&1 != 0, transB: form&2 != 0, padA: 1, padB: 3, padC: 2}
				opA, _ := tc.logical(r)
				opB := bf16OpB(r, tc, f)
				prod, mag := tc.reference(bf16Effective(opA, f32), bf16Effective(opB, f))
				a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
				bias := randSlice(r, tc.n)
				var first []float32
				for _, is := range bf16Paths() {
					name := fmt.Sprintf("%v/B=%v/blocks %v/tA=%v,tB=%v", is, f, blk, tc.transA, tc.transB)
					var w Workspace
					c32 := to32(c)
					w.gemmBF16(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.75, operandB{f32: to32(a)}, lda, bf16Operand64(b, f), ldb, 1.25, c32, ldc, to32(bias))
					checkSgemm(t, name, tc, 0.75, 1.25, prod, mag, c, c32, ldc, bias, true)
					if first == nil {
						first = c32
						continue
					}
					for i := range c32 {
						if math.Float32bits(c32[i]) != math.Float32bits(first[i]) {
							t.Fatalf("%s: C[%d][%d] = %v, the pure-Go path gives %v", name, i/ldc, i%ldc, c32[i], first[i])
						}
					}
				}
			}
		}
	}
}

// TestVDPBF16PSOrder pins down the summation order GemmBF16 documents: per k pair the odd
// product is added before the even one, each sum rounded. In column 0 the pair (1.5·2⁻²⁴,
// 2⁻²⁴) added to 1 gives 1+2⁻²³ that way, 1+2⁻²² in the other order; in column 1 the pair
// (0.75·2⁻²⁴, 2⁻²⁴) gives 1 in either order, where one rounding of the whole sum would give
// 1+2⁻²³.
func TestVDPBF16PSOrder(t *testing.T) {
	const u = 0x1p-12
	a := []float32{1, 0, 1.5 * u, u}             // 1×4
	b := []float32{1, 1, 0, 0, u, 0.5 * u, u, u} // 4×2
	want := []float32{1 + 0x1p-23, 1}
	for _, is := range bf16Paths() {
		c := make([]float32, 2)
		var w Workspace
		w.gemmBF16(is, false, false, 1, 2, 4, 1, operandB{f32: a}, 4, operandB{f32: b}, 2, 0, c, 2, nil)
		if c[0] != want[0] || c[1] != want[1] {
			t.Errorf("%v: C = %v, want %v", is, c, want)
		}
	}
}

// TestRoundBF16 checks RoundBF16 on special values: subnormals to zero, ties to even, NaN
// quiet, overflow to Inf.
func TestRoundBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x00000000, 0x0000}, {0x80000000, 0x8000}, {0x00000001, 0x0000}, {0x807fffff, 0x8000},
		{0x00800000, 0x0080}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81},
		{0x7f7fffff, 0x7f80}, {0xff800000, 0xff80}, {0x7f800001, 0x7fc0}, {0xffc00000, 0xffc0},
	} {
		if got := RoundBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("RoundBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

// TestGemmBF16VsSgemm measures how far GemmBF16 lands from Sgemm on the same float32 random
// normal inputs at the layer's k = 768 (the projection x·Wᵀ), and checks it is what bfloat16's
// 8-bit significand predicts: a relative error (in the Frobenius norm) between 10⁻⁴ and 10⁻².
func TestGemmBF16VsSgemm(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	m, n, k := 64, 256, 768
	a, b := to32(randSlice(r, m*k)), to32(randSlice(r, n*k))
	want := make([]float32, m*n)
	var w Workspace
	w.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, want, n, nil)
	for _, is := range bf16Paths() {
		got := make([]float32, m*n)
		w.gemmBF16(is, false, true, m, n, k, 1, operandB{f32: a}, k, operandB{f32: b}, k, 0, got, n, nil)
		var num, den, worst float64
		for i := range want {
			d := float64(got[i]) - float64(want[i])
			num += d * d
			den += float64(want[i]) * float64(want[i])
			worst = max(worst, abs(d))
		}
		rel := math.Sqrt(num / den)
		rms := math.Sqrt(den / float64(len(want)))
		t.Logf("%v: GemmBF16 vs Sgemm at %dx%dx%d, random normal inputs: relative error %.2e (Frobenius), max |error| %.2e = %.2e of C's rms %.1f",
			is, m, n, k, rel, worst, worst/rms, rms)
		if !(rel > 1e-4 && rel < 1e-2) {
			t.Errorf("%v: relative error %.3g, want between 1e-4 and 1e-2", is, rel)
		}
	}
}

// TestGemmBF16NoAllocs checks that a warmed Workspace serves repeated calls without allocating.
func TestGemmBF16NoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	for _, is := range bf16Paths() {
		for _, tc := range []sgemmCase{
			{m: 30, n: 600, k: 530, transB: true}, // blocked in k and n
			{m: 13, n: 45, k: 7, transA: true},    // edge tiles
			{m: 40, n: 64, k: 33},
		} {
			opA, opB := tc.logical(r)
			a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
			a32, b32, c32, bias := to32(a), to32(b), to32(c), to32(randSlice(r, tc.n))
			bh := encodeHalf(b, true)
			var w Workspace
			call := func() {
				w.gemmBF16(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, operandB{f32: a32}, lda, operandB{f32: b32}, ldb, 0.5, c32, ldc, bias)
				w.gemmBF16(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, operandB{f32: a32}, lda, operandB{half: bh, format: bfloat16}, ldb, 0.5, c32, ldc, bias)
			}
			call()
			if n := testing.AllocsPerRun(10, call); n != 0 {
				t.Errorf("%v %+v: %v allocations per call with a warm Workspace, want 0", is, tc, n)
			}
		}
	}
}

// TestGemmBF16Panics checks that short slices and strides are refused.
func TestGemmBF16Panics(t *testing.T) {
	for name, f := range map[string]func(w *Workspace){
		"A": func(w *Workspace) {
			w.GemmBF16(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2, nil)
		},
		"B": func(w *Workspace) {
			w.GemmBF16(false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]float32, 5), 2, 0, make([]float32, 6), 3, nil)
		},
		"B half": func(w *Workspace) {
			w.GemmBF16Half(false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]uint16, 5), true, 2, 0, make([]float32, 6), 3, nil)
		},
		"C": func(w *Workspace) {
			w.GemmBF16(true, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2, nil)
		},
		"lda": func(w *Workspace) {
			w.GemmBF16(false, false, 2, 2, 2, 1, make([]float32, 8), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2, nil)
		},
		"bias": func(w *Workspace) {
			w.GemmBF16(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2, make([]float32, 1))
		},
		"m": func(w *Workspace) {
			w.GemmBF16(false, false, -1, 2, 2, 1, nil, 2, nil, 2, 0, nil, 2, nil)
		},
		"A bits": func(w *Workspace) {
			w.GemmBF16Bits(true, true, 2, 3, 2, 1, make([]uint16, 3), 2, make([]uint16, 6), 2, 0, make([]float32, 6), 3, nil)
		},
		"lda bits": func(w *Workspace) {
			w.GemmBF16Bits(false, true, 2, 3, 2, 1, make([]uint16, 4), 1, make([]uint16, 6), 2, 0, make([]float32, 6), 3, nil)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("GemmBF16 accepted a short %s", name)
				}
			}()
			f(new(Workspace))
		}()
	}
}

// TestGemmBF16Exported checks the exported entry points against the float64 reference.
func TestGemmBF16Exported(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	tc := sgemmCase{m: 5, n: 70, k: 51, transB: true}
	for _, fs := range bf16Operands {
		fa, fb := fs[0], fs[1]
		opA, opB := bf16OpA(r, tc, fa), bf16OpB(r, tc, fb)
		prod, mag := tc.reference(bf16Effective(opA, fa), bf16Effective(opB, fb))
		a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
		got := to32(c)
		var w Workspace
		switch {
		case fa == bfloat16:
			w.GemmBF16Bits(false, true, tc.m, tc.n, tc.k, 1, encodeHalf(a, true), lda, encodeHalf(b, true), ldb, 1, got, ldc, nil)
		case fb == f32:
			w.GemmBF16(false, true, tc.m, tc.n, tc.k, 1, to32(a), lda, to32(b), ldb, 1, got, ldc, nil)
		default:
			w.GemmBF16Half(false, true, tc.m, tc.n, tc.k, 1, to32(a), lda, encodeHalf(b, fb == bfloat16), fb == bfloat16, ldb, 1, got, ldc, nil)
		}
		checkSgemm(t, fmt.Sprintf("A=%v,B=%v", fa, fb), tc, 1, 1, prod, mag, c, got, ldc, nil, false)
	}
}

// TestRoundBF16s checks RoundBF16s against RoundBF16 on every length to 100 (the vector part and
// the tail), with subnormals, NaN, infinities and ties among the values.
func TestRoundBF16s(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.MaxFloat32}
	src := make([]float32, 100)
	for i := range src {
		src[i] = float32(math.Sin(float64(i)*1.7)) * float32(math.Pow(10, float64(i%9-4)))
		if i%11 == 0 {
			src[i] = special[i/11%len(special)]
		}
	}
	for n := range len(src) + 1 {
		dst := make([]uint16, n)
		RoundBF16s(dst, src)
		for i, h := range dst {
			if want := RoundBF16(src[i]); h != want {
				t.Fatalf("n %d: value %d (%v): %#04x, want %#04x", n, i, src[i], h, want)
			}
		}
	}
}

// TestGemmBF16BitsA checks that GemmBF16BitsA on A rounded by RoundBF16s gives GemmBF16's and
// GemmBF16Half's bits on the float32 A, for A read in place (row-major, even k and lda) and
// packed (odd k, transposed), over more than one k block.
func TestGemmBF16BitsA(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, tc := range []struct {
		m, n, k        int
		transA, transB bool
	}{{37, 70, 600, false, true}, {37, 70, 51, false, true}, {20, 33, 64, true, false}, {14, 64, 256, false, false}} {
		ar, ac := tc.m, tc.k
		if tc.transA {
			ar, ac = tc.k, tc.m
		}
		br, bc := tc.k, tc.n
		if tc.transB {
			br, bc = tc.n, tc.k
		}
		a, b := make([]float32, ar*ac), make([]float32, br*bc)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		for i := range b {
			b[i] = float32(r.NormFloat64())
		}
		ab := make([]uint16, len(a))
		RoundBF16s(ab, a)
		for _, half := range []int{0, 1, 2} { // B float32, bfloat16, binary16
			var w Workspace
			want, got := make([]float32, tc.m*tc.n), make([]float32, tc.m*tc.n)
			switch half {
			case 0:
				w.GemmBF16(tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, a, ac, b, bc, 0, want, tc.n, nil)
				w.GemmBF16BitsA(tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, ab, ac, b, nil, false, bc, 0, got, tc.n, nil)
			default:
				b64 := make([]float64, len(b))
				for i, v := range b {
					b64[i] = float64(v)
				}
				bh := encodeHalf(b64, half == 1)
				w.GemmBF16Half(tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, a, ac, bh, half == 1, bc, 0, want, tc.n, nil)
				w.GemmBF16BitsA(tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, ab, ac, nil, bh, half == 1, bc, 0, got, tc.n, nil)
			}
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%+v B format %d: C[%d] = %v, want %v", tc, half, i, got[i], want[i])
				}
			}
		}
	}
}

// TestGemmBF16Packed checks that GemmBF16Packed on parts of a packed B gives GemmBF16Bits's C
// on the same parts bit for bit (C's padding included): a transposed B as attention's K and a
// row-major one as its V, odd sizes, panels cut by the part's end, odd strides of A (packed
// then), beta 0 over NaN and beta 1, k over several k blocks (a projection's weights) with a
// bias, and Inf in B (which an odd part's padding must not reach).
// It checks Fits on the parts it refuses and that GemmBF16Packed panics on them.
func TestGemmBF16Packed(t *testing.T) {
	if !hasBF16 {
		var p PackedBF16
		if p.Pack(true, 2, 2, make([]uint16, 4), 2) || p.Fits(0, 2, 0, 2) {
			t.Fatal("Pack packed without AVX512_BF16")
		}
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(41, 42))
	bits := func(n int) []uint16 {
		x := make([]uint16, n)
		for i := range x {
			x[i] = RoundBF16(float32(r.NormFloat64()))
			if r.IntN(50) == 0 {
				x[i] = RoundBF16(float32(math.Inf(1 - 2*r.IntN(2))))
			}
		}
		return x
	}
	var w Workspace
	var p PackedBF16 // reused across the cases
	for _, tc := range []struct {
		trans    bool
		k, n     int // op(B)
		ldb      int
		p0, kk   int // the part: rows [p0, p0+kk), columns [j0, j0+nn)
		j0, nn   int
		m, lda   int
		beta     float32
		fits     bool
		describe string
		bias     bool
	}{
		{true, 64, 333, 64, 0, 64, 0, 256, 128, 64, 0, true, "K tile", false},
		{true, 64, 333, 70, 0, 64, 256, 77, 37, 192, 1, true, "K last tile, masked panel", false},
		{true, 63, 300, 63, 0, 63, 32, 45, 15, 63, 0, true, "odd D, A packed", false},
		{true, 17, 40, 20, 0, 17, 32, 8, 1, 17, 1, true, "one row", false},
		{true, 130, 96, 131, 0, 130, 0, 96, 29, 130, 0, true, "D above a panel's 64 pairs", false},
		{true, 64, 333, 64, 0, 64, 16, 64, 14, 64, 0, false, "j0 not a panel's first column", false},
		{true, 64, 333, 64, 0, 64, 320, 32, 14, 64, 0, false, "past the columns", false},
		{false, 333, 64, 64, 0, 256, 0, 64, 128, 512, 1, true, "V tile", false},
		{false, 333, 64, 64, 256, 77, 0, 64, 128, 512, 1, true, "V last tile, odd, padded", false},
		{false, 333, 40, 41, 2, 100, 0, 40, 13, 101, 0, true, "odd stride of A", false},
		{false, 333, 96, 96, 300, 33, 0, 96, 15, 66, 1, true, "odd k reaching the end", false},
		{false, 333, 64, 64, 32, 64, 0, 32, 14, 64, 0, true, "the first panel alone", false},
		{false, 333, 64, 64, 32, 64, 32, 32, 14, 64, 0, true, "the second panel alone", false},
		{false, 333, 64, 64, 1, 64, 0, 64, 14, 64, 0, false, "odd p0", false},
		{false, 333, 64, 64, 2, 63, 0, 64, 14, 64, 0, false, "odd k short of the end", false},
		{false, 1200, 64, 64, 0, 600, 0, 64, 14, 600, 0, true, "k over two k blocks", false},
		{false, 1200, 64, 64, 500, 700, 32, 32, 14, 700, 1, true, "k from row 500 to the end, bias", true},
		{true, 768, 300, 770, 0, 768, 32, 256, 29, 768, 0, true, "a projection's weights: k over two blocks, bias", true},
		{true, 768, 300, 770, 0, 768, 32, 256, 29, 771, 1, true, "the same, A packed, beta 1", true},
	} {
		br, bc := tc.k, tc.n
		if tc.trans {
			br, bc = tc.n, tc.k
		}
		b := bits((br-1)*tc.ldb + bc)
		if !p.Pack(tc.trans, tc.k, tc.n, b, tc.ldb) {
			t.Fatal("Pack packed nothing")
		}
		if got := p.Fits(tc.p0, tc.kk, tc.j0, tc.nn); got != tc.fits {
			t.Fatalf("%s: Fits = %v, want %v", tc.describe, got, tc.fits)
		}
		a := bits((tc.m-1)*tc.lda + tc.kk)
		ldc := tc.nn + 3
		if !tc.fits {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: GemmBF16Packed did not panic", tc.describe)
					}
				}()
				w.GemmBF16Packed(tc.m, tc.nn, tc.kk, 1, a, tc.lda, &p, tc.p0, tc.j0, 0, make([]float32, tc.m*ldc), ldc, nil)
			}()
			continue
		}
		want, got := make([]float32, tc.m*ldc), make([]float32, tc.m*ldc)
		for i := range want {
			want[i] = float32(math.NaN())
			if tc.beta != 0 {
				want[i] = float32(r.NormFloat64())
			}
		}
		copy(got, want)
		off := tc.p0*tc.ldb + tc.j0
		if tc.trans {
			off = tc.j0*tc.ldb + tc.p0
		}
		var bias []float32
		if tc.bias {
			bias = make([]float32, tc.nn)
			for j := range bias {
				bias[j] = float32(r.NormFloat64())
			}
		}
		w.GemmBF16Bits(false, tc.trans, tc.m, tc.nn, tc.kk, 0.375, a, tc.lda, b[off:], tc.ldb, tc.beta, want, ldc, bias)
		w.GemmBF16Packed(tc.m, tc.nn, tc.kk, 0.375, a, tc.lda, &p, tc.p0, tc.j0, tc.beta, got, ldc, bias)
		for i := range want {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
				t.Fatalf("%s: C[%d] = %v, GemmBF16Bits gives %v", tc.describe, i, got[i], want[i])
			}
		}
	}
}
