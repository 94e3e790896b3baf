package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// halfFormats are the two formats SgemmHalf takes, by the value of its bf16 argument.
var halfFormats = []bool{true, false}

// formatName names the format SgemmHalf's bf16 argument selects.
func formatName(bf16 bool) string {
	if bf16 {
		return "bf16"
	}
	return "f16"
}

// encodeHalf returns the bits of the halves of x, which must be representable (or NaN).
func encodeHalf(x []float64, bf16 bool) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		if bf16 {
			out[i] = F32ToBF16(float32(v))
		} else {
			out[i] = F32ToF16(float32(v))
		}
	}
	return out
}

// halfOpB returns a random k×n op(B) whose values are halves of the format: normal values of
// several magnitudes, signed zeros and a sprinkling of subnormals.
func halfOpB(r *rand.Rand, k, n int, bf16 bool) []float64 {
	out := make([]float64, k*n)
	for i := range out {
		v := r.NormFloat64()
		switch r.IntN(16) {
		case 0:
			v = math.Copysign(0, v)
		case 1: // subnormal: below 2^-14 (binary16) or 2^-126 (bfloat16)
			if bf16 {
				v *= 0x1p-130
			} else {
				v *= 0x1p-18
			}
		case 2:
			v *= 1000
		}
		var h float32
		if bf16 {
			h = BF16ToF32(F32ToBF16(float32(v)))
		} else {
			h = F16ToF32(F32ToF16(float32(v)))
		}
		out[i] = float64(h)
	}
	return out
}

// sgemmHalfShapes are the m, n, k of TestSgemmHalf: the layer's x·Wᵀ from a decode step to a
// batch, with k and n around the block sizes (blockK = 256, blockN = 512) and the tile widths,
// and the small shapes of TestSgemm.
var sgemmHalfShapes = [][3]int{
	{1, 768, 768}, {1, 33, 1}, {2, 600, 300}, {16, 257, 300}, {13, 1025, 40}, {7, 520, 260},
	{257, 40, 20}, // m > inPlaceM
	{5, 600, 300}, // k·n > inPlaceKN: a row-major B blocked in k and n
	{1, 1, 1}, {7, 13, 5}, {33, 1, 1000}, {5, 6, 0}, {0, 5, 3}, {4, 0, 3},
	{2, 3, 4}, {15, 33, 17}, {29, 47, 300}, {64, 64, 64}, {300, 40, 9},
	{1, 70, 16}, {2, 9, 31}, {3, 5, 47}, {4, 33, 65}, // GemvRows: blocks, 16 and a masked tail
}

// TestSgemmHalf checks that SgemmHalf on half-precision B gives, bit for bit, what Sgemm gives
// on the same B decoded to float32, for both formats, every instruction set and transpose form,
// padded strides, and several alpha, beta and bias.
func TestSgemmHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	type combo struct {
		alpha, beta float32
		bias        bool
	}
	all := []combo{{1, 0, false}, {1, 0, true}, {1, 1, false}, {1, 1, true}, {-1.5, 0.5, true}, {0, 0.5, true}, {0.5, 1, false}}
	for _, s := range sgemmHalfShapes {
		for _, bf16 := range halfFormats {
			shape := sgemmCase{m: s[0], n: s[1], k: s[2]}
			opA := randSlice(r, shape.m*shape.k)
			opB := halfOpB(r, shape.k, shape.n, bf16)
			bias := to32(randSlice(r, shape.n))
			combos, forms := all, []int{0, 1, 2, 3}
			if shape.m*shape.n*shape.k > 1<<18 { // keep the large shapes quick: the layer's forms
				combos = []combo{{1, 0, false}, {-1.5, 0.5, true}}
				forms = []int{0, 2}
			}
			for _, f := range forms {
				tc := shape
				tc.transA, tc.transB = f&1 != 0, f&2 != 0
				tc.padA, tc.padB, tc.padC = (f+tc.m)%3, (f+tc.n+1)%4, f%2*5
				a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB) // NaN between B's rows
				a32, b32, bh := to32(a), to32(b), encodeHalf(b, bf16)
				for _, is := range available() {
					var w Workspace
					for _, cb := range combos {
						name := fmt.Sprintf("%v/%s/%dx%dx%d/tA=%v,tB=%v/alpha=%v,beta=%v,bias=%v", is, formatName(bf16), tc.m, tc.n, tc.k, tc.transA, tc.transB, cb.alpha, cb.beta, cb.bias)
						want, got := to32(c), to32(c)
						if cb.beta == 0 {
							for i := range got {
								got[i] = float32(math.NaN()) // beta 0 must not read C
							}
						}
						var bs []float32
						if cb.bias {
							bs = bias
						}
						w.sgemm(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, cb.alpha, a32, lda, b32, ldb, cb.beta, want, ldc, bs)
						w.sgemmHalf(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, cb.alpha, a32, lda, bh, bf16, ldb, cb.beta, got, ldc, bs)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(cb.beta == 0 && i%ldc >= tc.n) {
								t.Fatalf("%s: C[%d][%d] = %v, Sgemm gives %v", name, i/ldc, i%ldc, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestSgemmHalfNoAllocs checks that a warmed Workspace serves repeated SgemmHalf calls without
// allocating, also when it alternates with Sgemm.
func TestSgemmHalfNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, is := range available() {
		for _, tc := range []sgemmCase{
			{m: 1, n: 768, k: 768, transB: true},  // a decode step's projection
			{m: 30, n: 600, k: 300, transB: true}, // blocked in k and n
			{m: 13, n: 45, k: 7, transA: true},    // row-major B packed whole, edge tiles
			{m: 40, n: 20, k: 600},                // k blocks
		} {
			opA, opB := tc.logical(r)
			a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
			a32, b32, c32, bias := to32(a), to32(b), to32(c), to32(randSlice(r, tc.n))
			bh := encodeHalf(b, true)
			var w Workspace
			call := func() {
				w.sgemmHalf(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, a32, lda, bh, true, ldb, 0.5, c32, ldc, bias)
				w.sgemmHalf(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, a32, lda, bh, false, ldb, 0.5, c32, ldc, bias)
				w.sgemm(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, a32, lda, b32, ldb, 0.5, c32, ldc, bias)
			}
			call()
			if n := testing.AllocsPerRun(10, call); n != 0 {
				t.Errorf("%v %+v: %v allocations per call with a warm Workspace, want 0", is, tc, n)
			}
		}
	}
}

// TestSgemmHalfPanics checks that a short B, a short stride and the other operands' checks are
// refused as Sgemm refuses them.
func TestSgemmHalfPanics(t *testing.T) {
	for _, is := range available() {
		for name, f := range map[string]func(w *Workspace){
			"B": func(w *Workspace) {
				w.sgemmHalf(is, false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]uint16, 5), true, 2, 0, make([]float32, 6), 3, nil)
			},
			"B row-major": func(w *Workspace) {
				w.sgemmHalf(is, false, false, 2, 3, 2, 1, make([]float32, 4), 2, make([]uint16, 5), false, 3, 0, make([]float32, 6), 3, nil)
			},
			"ldb": func(w *Workspace) {
				w.sgemmHalf(is, false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]uint16, 8), true, 1, 0, make([]float32, 6), 3, nil)
			},
			"A": func(w *Workspace) {
				w.sgemmHalf(is, false, true, 2, 3, 2, 1, make([]float32, 3), 2, make([]uint16, 6), true, 2, 0, make([]float32, 6), 3, nil)
			},
			"C": func(w *Workspace) {
				w.sgemmHalf(is, false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]uint16, 6), false, 2, 0, make([]float32, 5), 3, nil)
			},
			"bias": func(w *Workspace) {
				w.sgemmHalf(is, false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]uint16, 6), true, 2, 0, make([]float32, 6), 3, make([]float32, 2))
			},
			"m": func(w *Workspace) {
				w.sgemmHalf(is, false, true, -1, 3, 2, 1, nil, 2, nil, true, 2, 0, nil, 3, nil)
			},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%v: SgemmHalf accepted %s", is, name)
					}
				}()
				f(new(Workspace))
			}()
		}
	}
}

// TestSgemmHalfExported checks the exported SgemmHalf against the exported Sgemm on the decoded
// B, through the exported decoders.
func TestSgemmHalfExported(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	m, n, k := 3, 70, 50
	a := to32(randSlice(r, m*k))
	for _, bf16 := range halfFormats {
		bh := encodeHalf(halfOpB(r, n, k, bf16), bf16)
		b := make([]float32, len(bh))
		if bf16 {
			DecodeBF16(b, bh)
		} else {
			DecodeF16(b, bh)
		}
		want, got := make([]float32, m*n), make([]float32, m*n)
		var w Workspace
		w.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, want, n, nil)
		w.SgemmHalf(false, true, m, n, k, 1, a, k, bh, bf16, k, 0, got, n, nil)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: C[%d] = %v, Sgemm gives %v", formatName(bf16), i, got[i], want[i])
			}
		}
	}
}
