package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sgemmCase is one Sgemm problem: shape, transposes and padded leading dimensions.
type sgemmCase struct {
	m, n, k          int
	transA, transB   bool
	padA, padB, padC int // extra values per row beyond the width
}

// logical returns random op(A) (m×k) and op(B) (k×n), row-major without padding, rounded to
// float32.
func (tc sgemmCase) logical(r *rand.Rand) (opA, opB []float64) {
	round := func(x []float64) []float64 {
		for i := range x {
			x[i] = float64(float32(x[i]))
		}
		return x
	}
	return round(randSlice(r, tc.m*tc.k)), round(randSlice(r, tc.k*tc.n))
}

// operands lays op(A) and op(B) out as the case's A and B (transposed as its flags say, with its
// padding) and adds a random C. Each slice is exactly as long as its shape needs, so a kernel
// that reads past the last row's end fails; the padding between the rows of A and B is NaN, so
// a kernel that lets a value from outside the matrix into a result shows it.
func (tc sgemmCase) operands(r *rand.Rand, opA, opB []float64) (a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	lay := func(x []float64, rows, cols int, trans bool, pad int) ([]float64, int) {
		if trans {
			rows, cols = cols, rows
		}
		ld := cols + pad
		if rows == 0 || cols == 0 {
			return nil, ld
		}
		out := make([]float64, (rows-1)*ld+cols)
		for i := range out {
			out[i] = math.NaN()
		}
		for i := range rows {
			for j := range cols {
				if trans {
					out[i*ld+j] = x[j*rows+i]
				} else {
					out[i*ld+j] = x[i*cols+j]
				}
			}
		}
		return out, ld
	}
	a, lda = lay(opA, tc.m, tc.k, tc.transA, tc.padA)
	b, ldb = lay(opB, tc.k, tc.n, tc.transB, tc.padB)
	ldc = tc.n + tc.padC
	if tc.m > 0 && tc.n > 0 {
		c = randSlice(r, (tc.m-1)*ldc+tc.n)
		for i := range c {
			c[i] = float64(float32(c[i]))
		}
	}
	return
}

// reference returns op(A)·op(B) and |op(A)|·|op(B)|, m×n with row stride n, in float64, from
// the row-major op(A) (m×k) and op(B) (k×n).
func (tc sgemmCase) reference(opA, opB []float64) (prod, mag []float64) {
	m, n, k := tc.m, tc.n, tc.k
	prod, mag = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for p, x := range opA[i*k : i*k+k] {
			for j, y := range opB[p*n : p*n+n] {
				prod[i*n+j] += x * y
				mag[i*n+j] += abs(x * y)
			}
		}
	}
	return prod, mag
}

// sgemmTol is the error bound the tests allow on one value of C: float32 accumulation of k
// products errs by at most about k·u·Σ|a·b| (u = 2⁻²⁴, the unit roundoff), the scaling by alpha,
// the addition of beta·C and of the bias by a few more u of their magnitudes. We allow
// (k+4)·2u on the sum of the magnitudes, twice the worst case, so a wrong index or a lost term
// (an error of order |a·b| itself) still fails.
func sgemmTol(k int, alpha, mag, betaC, bias float64) float64 {
	const eps = 1.0 / (1 << 23) // 2u
	return float64(k+4) * eps * (abs(alpha)*mag + abs(betaC) + abs(bias))
}

// abs is math.Abs without its unsafe bit conversion, which -race builds check on every call.
func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// sgemmShapes are the m, n, k of TestSgemm: odd sizes around the tile and block sizes.
var sgemmShapes = [][3]int{
	{1, 1, 1}, {7, 13, 5}, {33, 1, 1000}, {5, 6, 0}, {0, 5, 3}, {4, 0, 3},
	{2, 3, 4}, {15, 33, 17}, {29, 47, 300}, {64, 64, 64}, {128, 128, 64}, {96, 64, 128},
	{300, 40, 9}, // m > inPlaceM: B packed even for NN
	{1023, 769, 33},
	// At most GemvRows rows: with a transposed B, dot products whose k crosses the kernels'
	// blocks of 32, their block of 16 and their masked tail.
	{1, 70, 16}, {2, 9, 31}, {3, 5, 47}, {1, 2, 48}, {4, 33, 65}, {4, 3, 100},
}

// TestSgemm checks every instruction set, transpose form and (alpha, beta, bias) combination on
// odd shapes and padded strides against the float64 definition.
func TestSgemm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range sgemmShapes {
		shape := sgemmCase{m: s[0], n: s[1], k: s[2]}
		opA, opB := shape.logical(r)
		prod, mag := shape.reference(opA, opB)
		bias := randSlice(r, shape.n)
		for f := range 4 {
			tc := shape
			tc.transA, tc.transB = f&1 != 0, f&2 != 0
			tc.padA, tc.padB, tc.padC = (f+tc.m)%3, (f+tc.n+1)%4, f%2*5
			testSgemmCase(t, r, tc, opA, opB, prod, mag, bias)
		}
	}
}

// testSgemmCase runs one case on every instruction set with several alpha, beta and bias.
func testSgemmCase(t *testing.T, r *rand.Rand, tc sgemmCase, opA, opB, prod, mag, bias []float64) {
	t.Helper()
	type combo struct {
		alpha, beta float64
		bias        bool
	}
	var combos []combo
	for _, ab := range [][2]float64{{1, 0}, {1, 1}, {-1.5, 0.5}, {0, 0.5}, {0, 0}, {0.5, 1}, {1, -1.5}} {
		combos = append(combos, combo{ab[0], ab[1], false}, combo{ab[0], ab[1], true})
	}
	if tc.m*tc.n*tc.k > 1<<20 {
		combos = []combo{{1, 0, false}, {-1.5, 0.5, true}} // keep the large shape quick
	}
	a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
	a32, b32, bias32 := to32(a), to32(b), to32(bias)
	for _, is := range available() {
		var w Workspace
		for _, cb := range combos {
			name := fmt.Sprintf("%v/%dx%dx%d/tA=%v,tB=%v/alpha=%v,beta=%v,bias=%v", is, tc.m, tc.n, tc.k, tc.transA, tc.transB, cb.alpha, cb.beta, cb.bias)
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
			w.sgemm(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(cb.alpha), a32, lda, b32, ldb, float32(cb.beta), c32, ldc, bs)
			checkSgemm(t, name, tc, cb.alpha, cb.beta, prod, mag, c, c32, ldc, bias, cb.bias)
		}
	}
}

// checkSgemm compares got (C after the call) with alpha·prod + beta·c0 + bias, and checks that
// the padding between rows of C was left alone.
func checkSgemm(t *testing.T, name string, tc sgemmCase, alpha, beta float64, prod, mag, c0 []float64, got []float32, ldc int, bias []float64, withBias bool) {
	t.Helper()
	for i := range tc.m {
		for j := range ldc {
			idx := i*ldc + j
			if idx >= len(got) {
				break
			}
			if j >= tc.n {
				if g := float64(got[idx]); g != c0[idx] && !(beta == 0 && g != g) { // NaN stays NaN
					t.Fatalf("%s: padding C[%d][%d] changed to %v", name, i, j, got[idx])
				}
				continue
			}
			betaC := 0.0
			if beta != 0 {
				betaC = beta * c0[idx]
			}
			bj := 0.0
			if withBias {
				bj = bias[j]
			}
			want := alpha*prod[i*tc.n+j] + betaC + bj
			tol := sgemmTol(tc.k, alpha, mag[i*tc.n+j], betaC, bj)
			if d := abs(float64(got[idx]) - want); !(d <= tol) {
				t.Fatalf("%s: C[%d][%d] = %v, want %v (|error| %.3g > bound %.3g)", name, i, j, got[idx], want, d, tol)
			}
		}
	}
}

// TestSgemmAttentionShapes runs the shapes the tiled attention calls, with its strides: A and B
// inside wider matrices, B read in place.
func TestSgemmAttentionShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []sgemmCase{
		{m: 128, n: 128, k: 64, padA: 2304 - 64, padB: 512 - 128},   // S = Q·Kᵀ (Kᵀ stored)
		{m: 70, n: 100, k: 64, padA: 2304 - 64, padB: 1024 - 100},   // ragged tile
		{m: 128, n: 64, k: 128, padA: 0, padB: 2304 - 64, padC: 64}, // O += P·V
		{m: 64, n: 64, k: 96, padB: 2304 - 64},
	} {
		opA, opB := tc.logical(r)
		a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
		prod, mag := tc.reference(opA, opB)
		a32 := to32(a)
		// B inside a longer slice whose tail is NaN: the last panel is read in place.
		b32 := to32(append(b, make([]float64, 2*ldb)...))
		for i := len(b); i < len(b32); i++ {
			b32[i] = float32(math.NaN())
		}
		for _, is := range available() {
			var w Workspace
			for _, beta := range []float64{0, 1} {
				c32 := to32(c)
				w.sgemm(is, false, false, tc.m, tc.n, tc.k, 0.125, a32, lda, b32, ldb, float32(beta), c32, ldc, nil)
				checkSgemm(t, fmt.Sprintf("%v/%dx%dx%d/beta=%v", is, tc.m, tc.n, tc.k, beta), tc, 0.125, beta, prod, mag, c, c32, ldc, nil, false)
			}
		}
	}
}

// TestSgemmNoAllocs checks that a warmed Workspace serves repeated calls without allocating.
func TestSgemmNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, is := range available() {
		for _, tc := range []sgemmCase{
			{m: 128, n: 128, k: 64, padB: 100},       // B in place
			{m: 300, n: 600, k: 300, transB: true},   // packed, blocked in k and n
			{m: 13, n: 45, k: 7, transA: true},       // edge tiles
			{m: 6, n: 37, k: 9, padB: 0, padC: 0},    // in-place B edge panel copied
			{m: 40, n: 20, k: 600, transB: false},    // k blocks
			{m: 280, n: 20, k: 10, transA: true},     // packed NN-like, TN
			{m: 257, n: 33, k: 5, transB: true},      // row tiles of mixed height
			{m: 64, n: 64, k: 128, padA: 5, padB: 3}, // attention PV
			{m: 3, n: 70, k: 37, transB: true},       // dot products (GemvRows)
		} {
			opA, opB := tc.logical(r)
			a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
			a32, b32, c32, bias := to32(a), to32(b), to32(c), to32(randSlice(r, tc.n))
			var w Workspace
			call := func() {
				w.sgemm(is, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, a32, lda, b32, ldb, 0.5, c32, ldc, bias)
			}
			call()
			if n := testing.AllocsPerRun(10, call); n != 0 {
				t.Errorf("%v %+v: %v allocations per call with a warm Workspace, want 0", is, tc, n)
			}
		}
	}
}

// TestSgemmPanics checks that short slices are refused.
func TestSgemmPanics(t *testing.T) {
	for _, is := range available() {
		for name, f := range map[string]func(w *Workspace){
			"A": func(w *Workspace) {
				w.sgemm(is, false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2, nil)
			},
			"B": func(w *Workspace) {
				w.sgemm(is, false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]float32, 5), 2, 0, make([]float32, 6), 3, nil)
			},
			"C": func(w *Workspace) {
				w.sgemm(is, true, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2, nil)
			},
			"lda": func(w *Workspace) {
				w.sgemm(is, false, false, 2, 2, 2, 1, make([]float32, 8), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2, nil)
			},
			"bias": func(w *Workspace) {
				w.sgemm(is, false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2, make([]float32, 1))
			},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%v: Sgemm accepted a short %s", is, name)
					}
				}()
				f(new(Workspace))
			}()
		}
	}
}

// TestSgemmPackBT checks the transposing packer on its own, including blocks that leave a
// ragged edge to the Go code.
func TestSgemmPackBT(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, is := range available() {
		for _, s := range [][3]int{{32, 8, 40}, {17, 19, 23}, {64, 300, 310}, {8, 8, 8}, {3, 5, 7}} {
			n, k, ldb := s[0], s[1], s[2]
			b := to32(randSlice(r, (n-1)*ldb+k))
			// I·op(B) with op(B) = Bᵀ (B stored n×k) is Bᵀ itself, exactly.
			id := make([]float32, k*k)
			for i := range k {
				id[i*k+i] = 1
			}
			c := make([]float32, k*n)
			var w Workspace
			w.sgemm(is, false, true, k, n, k, 1, id, k, b, ldb, 0, c, n, nil)
			for p := range k {
				for j := range n {
					if c[p*n+j] != b[j*ldb+p] {
						t.Fatalf("%v %v: C[%d][%d] = %v, want %v", is, s, p, j, c[p*n+j], b[j*ldb+p])
					}
				}
			}
		}
	}
}

// TestTranspose checks Transpose on every instruction set against the definition, on blocks
// with and without ragged 8×8 edges, and that it writes nothing outside the transposed block.
func TestTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, is := range available() {
		for _, s := range [][2]int{{1, 1}, {8, 8}, {3, 17}, {64, 256}, {257, 64}, {30, 9}} {
			rows, cols := s[0], s[1]
			lds, ldd := cols+r.IntN(5), rows+r.IntN(20)
			src := to32(randSlice(r, (rows-1)*lds+cols))
			dst := make([]float32, (cols-1)*ldd+rows+8)
			for i := range dst {
				dst[i] = -9
			}
			transpose(is, dst, ldd, src, lds, rows, cols)
			for i := range dst {
				c, rr := i/ldd, i%ldd
				want := float32(-9)
				if c < cols && rr < rows {
					want = src[rr*lds+c]
				}
				if dst[i] != want {
					t.Fatalf("%v %dx%d: dst[%d] = %v, want %v", is, rows, cols, i, dst[i], want)
				}
			}
		}
	}
}

// TestRowTiles checks RowTiles' bounds: from 0 to m, each tile no taller than the kernels' tiles
// (all m rows on pure Go), the heights within one row of each other, and the tiles Sgemm's
// driver takes.
func TestRowTiles(t *testing.T) {
	for m := 1; m <= 100; m++ {
		b := RowTiles([]int{-1}, m)[1:] // appends after what dst holds
		if b[0] != 0 || b[len(b)-1] != m {
			t.Fatalf("m %d: bounds %v, want 0 … %d", m, b, m)
		}
		mr := tileHeight(best)
		if mr == 0 {
			mr = m
		}
		lo, hi := m, 0
		for i := range len(b) - 1 {
			h := b[i+1] - b[i]
			lo, hi = min(lo, h), max(hi, h)
		}
		if lo < 1 || hi > mr || hi-lo > 1 || len(b)-1 != (m+mr-1)/mr {
			t.Fatalf("m %d: bounds %v, want ⌈m/%d⌉ tiles of equal height within a row", m, b, mr)
		}
		i := 0
		for i0, h := range rowTiles(m, mr) {
			if b[i] != i0 || b[i+1] != i0+h {
				t.Fatalf("m %d: bounds %v, Sgemm's tile %d is rows %d+%d", m, b, i, i0, h)
			}
			i++
		}
	}
}

// TestSgemmPacked checks SgemmPacked against Sgemm(false, true, …) on the same B, bit for bit,
// across k blocks, edge panels and row tiles, with and without bias and beta, one PackedF32
// reused from larger to smaller B; where the AVX-512 kernels are not in use, Pack packs nothing.
func TestSgemmPacked(t *testing.T) {
	var p PackedF32
	if best != avx512 {
		if p.Pack(3, 2, make([]float32, 6), 3) || p.n != 0 {
			t.Fatal("Pack packed without the AVX-512 kernels")
		}
		t.Skip("no AVX-512 kernels")
	}
	r := rand.New(rand.NewPCG(51, 52))
	var w Workspace
	for _, tc := range []struct {
		m, n, k, lda, ldb, ldc int
		beta                   float32
		bias                   bool
	}{
		{256, 256, 768, 768, 768, 2304, 0, true}, // a projection's task
		{100, 300, 800, 801, 803, 310, 1, true},
		{15, 33, 257, 260, 257, 40, 0, false},
		{14, 32, 256, 256, 256, 32, 1, false},
		{13, 31, 255, 255, 255, 31, 0, true},
		{5, 1, 1, 1, 1, 1, 0, true},
		{7, 100, 7, 9, 8, 100, 1, false},
		{3, 5, 0, 1, 1, 5, 1, true}, // k = 0: C = beta·C + bias
		// At most GemvRows rows, Sgemm sums dot products in another order: close, not the bits.
		{1, 1, 1, 1, 1, 1, 0, true},
		{4, 70, 300, 301, 300, 70, 1, true},
	} {
		a, b := to32(randSlice(r, tc.m*tc.lda)), to32(randSlice(r, tc.n*tc.ldb))
		c0 := to32(randSlice(r, tc.m*tc.ldc))
		var bias []float32
		if tc.bias {
			bias = to32(randSlice(r, tc.n))
		}
		want := slices.Clone(c0)
		w.Sgemm(false, true, tc.m, tc.n, tc.k, 0.7, a, tc.lda, b, tc.ldb, tc.beta, want, tc.ldc, bias)
		if !p.Pack(tc.k, tc.n, b, tc.ldb) {
			t.Fatal("Pack did not pack on AVX-512")
		}
		got := slices.Clone(c0)
		w.SgemmPacked(tc.m, 0.7, a, tc.lda, &p, tc.beta, got, tc.ldc, bias)
		for i := range got {
			if tc.m <= GemvRows && tc.k > 0 {
				if d := math.Abs(float64(got[i]) - float64(want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("%+v: c[%d] = %v, Sgemm gives %v", tc, i, got[i], want[i])
				}
				continue
			}
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: c[%d] = %v, Sgemm gives %v", tc, i, got[i], want[i])
			}
		}
	}
}

// TestSgemmFewRows checks what GemvRows promises: with at most GemvRows rows and a transposed B,
// each row of C is the same bits whether it comes alone or with the others, with B in float32
// or in half precision (k crossing the kernels' blocks, padded strides, beta and bias).
func TestSgemmFewRows(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, k := range []int{1, 15, 16, 17, 32, 33, 48, 63, 95, 300, 768} {
		const n, lda, ldb, ldc = 37, 800, 801, 40
		a := to32(randSlice(r, GemvRows*lda))
		for _, bf16 := range halfFormats {
			bh := encodeHalf(randSlice(r, n*ldb), bf16)
			b := make([]float32, len(bh))
			if bf16 {
				DecodeBF16(b, bh)
			} else {
				DecodeF16(b, bh)
			}
			c0, bias := to32(randSlice(r, GemvRows*ldc)), to32(randSlice(r, n))
			for _, is := range available() {
				var w Workspace
				for _, beta := range []float32{0, 1} {
					all := slices.Clone(c0)
					w.sgemm(is, false, true, GemvRows, n, k, 0.7, a, lda, b, ldb, beta, all, ldc, bias)
					for m := 1; m <= GemvRows; m++ {
						for i := 0; i+m <= GemvRows; i += m {
							name := fmt.Sprintf("%v/%s/k=%d/beta=%v/rows %d to %d", is, formatName(bf16), k, beta, i, i+m-1)
							got, half := slices.Clone(c0), slices.Clone(c0)
							w.sgemm(is, false, true, m, n, k, 0.7, a[i*lda:], lda, b, ldb, beta, got[i*ldc:], ldc, bias)
							w.sgemmHalf(is, false, true, m, n, k, 0.7, a[i*lda:], lda, bh, bf16, ldb, beta, half[i*ldc:], ldc, bias)
							for j := i * ldc; j < (i+m)*ldc; j++ {
								if math.Float32bits(got[j]) != math.Float32bits(all[j]) || math.Float32bits(half[j]) != math.Float32bits(all[j]) {
									t.Fatalf("%s: C[%d][%d] = %v, half %v; with all %d rows %v", name, j/ldc, j%ldc, got[j], half[j], GemvRows, all[j])
								}
							}
						}
					}
				}
			}
		}
	}
}
