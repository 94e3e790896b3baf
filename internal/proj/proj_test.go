package proj

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
)

// run plans g for workers workers and runs its tasks one after another, task t on worker
// t mod workers, as a pool might; it returns C and Bits.
func run(g Gemm, workers int) ([]float32, []uint16) {
	g.Plan(workers)
	ws, pk := make([]kernel.Workspace, workers), make([]Pack, workers)
	for t := range g.Tasks() {
		g.Do(&ws[t%workers], &pk[t%workers], t)
	}
	return g.C, g.Bits
}

// bf16 returns v rounded to bfloat16, as a float64.
func bf16(v float32) float64 {
	return float64(math.Float32frombits(uint32(kernel.RoundBF16(v)) << 16))
}

// TestGemm checks every kind of product against a float64 reference over its rounded operands:
// batches with strided rows, W transposed or not, in float32, bfloat16 or binary16, with and
// without bias, beta, BF16 products (with X's bits given, X then unread, or not) and bfloat16
// copies of C, at sizes that make the tasks plain, packed in groups and dot products; rows past
// Rows are left alone, and 1 and 3 workers give the same bits.
func TestGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, rows := range []int{1, 4, 5, 37, 600} {
		for _, n := range []int{3, 300} {
			for _, trans := range []bool{true, false} {
				for _, wkind := range []string{"f32", "bf16", "f16"} {
					for _, mode := range []string{"float32", "bfloat16", "bfloat16 XB"} {
						name := fmt.Sprintf("rows=%d n=%d trans=%v W=%s %s", rows, n, trans, wkind, mode)
						t.Run(name, func(t *testing.T) { checkGemm(t, r, rows, n, trans, wkind, mode) })
					}
				}
			}
		}
	}
}

func checkGemm(t *testing.T, r *rand.Rand, rows, n int, trans bool, wkind, mode string) {
	const batches, k, sentinel = 2, 70, 7.5
	ldx, xRows, ldc, cRows := k+3, rows+1, n+2, rows+2
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	x, wf, bias := fill(batches*xRows*ldx), fill(n*k), fill(n)
	ldw := k
	if !trans {
		ldw = n
	}
	w := Matrix{F: wf}
	wv := slices.Clone(wf) // W's values as the product sees them
	if wkind != "f32" {
		h := make([]uint16, len(wf))
		if wkind == "bf16" {
			kernel.EncodeBF16(h, wf)
		} else {
			kernel.EncodeF16(h, wf)
		}
		w = Matrix{H: h, BF16: wkind == "bf16"}
		kernel.DecodeHalf(wv, h, w.BF16)
	}
	beta := float32(0)
	if r.IntN(2) == 0 {
		beta = 1
	}
	c0 := make([]float32, batches*cRows*ldc)
	for i := range c0 {
		c0[i] = sentinel
	}
	for b := range batches {
		for i := range rows {
			copy(c0[(b*cRows+i)*ldc:][:n], fill(n))
		}
	}
	bf := mode != "float32"
	g := Gemm{X: x, LdX: ldx, XRows: xRows, K: k, W: w, LdW: ldw, Trans: trans, Bias: bias, Beta: beta,
		LdC: ldc, CRows: cRows, Rows: rows, N: n, Batches: batches, BF16: bf}
	if mode == "bfloat16 XB" {
		g.XB = make([]uint16, len(x))
		kernel.RoundBF16s(g.XB, x)
		g.X = make([]float32, len(x)) // X is not read: NaN would show
		for i := range g.X {
			g.X[i] = float32(math.NaN())
		}
	}
	rounded := bf && !(trans && rows <= kernel.GemvRows && g.XB == nil) // dot products of X stay float32
	var first []float32
	var firstBits []uint16
	for _, workers := range []int{1, 3} {
		g.C = slices.Clone(c0)
		g.Bits = make([]uint16, len(c0))
		c, bits := run(g, workers)
		if first == nil {
			first, firstBits = c, bits
		} else if !slices.Equal(c, first) || !slices.Equal(bits, firstBits) {
			t.Fatalf("%d workers give other bits than 1", workers)
		}
	}
	for b := range batches {
		for i := range cRows {
			for j := range n {
				at := (b*cRows+i)*ldc + j
				if i >= rows {
					if first[at] != sentinel {
						t.Fatalf("batch %d row %d (past Rows) written", b, i)
					}
					continue
				}
				want, mag := float64(bias[j])+float64(beta)*float64(c0[at]), math.Abs(float64(bias[j]))+math.Abs(float64(c0[at]))
				for p := range k {
					xv := x[(b*xRows+i)*ldx+p]
					var wvv float32
					if trans {
						wvv = wv[j*ldw+p]
					} else {
						wvv = wv[p*ldw+j]
					}
					a, bw := float64(xv), float64(wvv)
					if rounded {
						a, bw = bf16(xv), bf16(wvv)
					}
					want += a * bw
					mag += math.Abs(a * bw)
				}
				if d := math.Abs(float64(first[at]) - want); d > 2e-6*mag {
					t.Fatalf("C[%d][%d][%d] = %v, want %v (error %.3g, bound %.3g)", b, i, j, first[at], want, d, 2e-6*mag)
				}
				if got := firstBits[at]; got != kernel.RoundBF16(first[at]) {
					t.Fatalf("Bits[%d][%d][%d] = %#x, want the bfloat16 of C, %#x", b, i, j, got, kernel.RoundBF16(first[at]))
				}
			}
		}
	}
}

// TestMatrix checks Matrix's views and decoding.
func TestMatrix(t *testing.T) {
	f := Matrix{F: []float32{1, 2, 3, 4}}
	if got := f.Slice(1, 3).F; !slices.Equal(got, []float32{2, 3}) || !slices.Equal(f.From(2).F, []float32{3, 4}) {
		t.Errorf("float32 views: Slice(1, 3) %v, From(2) %v", got, f.From(2).F)
	}
	h := make([]uint16, 4)
	kernel.EncodeBF16(h, f.F)
	m := Matrix{H: h, BF16: true}
	if s := m.From(1); !s.BF16 || len(s.H) != 3 || s.F != nil {
		t.Errorf("bfloat16 From(1) = %+v", s)
	}
	if got := m.Float32s(); !slices.Equal(got, f.F) {
		t.Errorf("Float32s of bfloat16 = %v, want %v", got, f.F)
	}
	if !f.Present() || !m.Present() || (Matrix{}).Present() {
		t.Error("Present is wrong")
	}
}

// TestPlanShortProducts checks that a product with few rows, which blocks of Cols columns
// would give the workers fewer than two tasks each, is cut into narrower tasks (about four a
// worker, at least 32 columns), and that others keep their blocks of Cols columns.
func TestPlanShortProducts(t *testing.T) {
	for _, c := range []struct{ rows, n, batches, workers, tasks int }{
		{128, 256, 1, 2, 8},   // a short prompt's K projection: 1 task of 256 columns → 8 of 32
		{128, 768, 1, 2, 8},   // its Q projection: 3 → 8 of 96
		{128, 2048, 1, 2, 8},  // its MLP: 8 of 256 already
		{512, 256, 1, 2, 8},   // 2 row blocks: 2 tasks → 8 of 64 columns
		{512, 768, 1, 2, 6},   // 6 of 256 already
		{1024, 192, 1, 2, 4},  // 4 row blocks of 192 columns already
		{128, 40, 1, 2, 2},    // never narrower than 32 columns
		{128, 768, 1, 16, 24}, // 16 workers: 64 wanted, 24 of 32 columns at most
		{300, 256, 2, 3, 12},  // batches count as row blocks: 4 tasks → 12 of 96 columns
		{0, 256, 1, 2, 0},     // no rows, no tasks
	} {
		g := Gemm{X: []float32{}, LdX: 64, XRows: c.rows, K: 64, W: Matrix{F: []float32{}}, LdW: 64, Trans: true,
			LdC: c.n, CRows: c.rows, Rows: c.rows, N: c.n, Batches: c.batches}
		g.Plan(c.workers)
		if got := g.Tasks(); got != c.tasks {
			t.Errorf("%d×%d ×%d batches on %d workers: %d tasks, want %d", c.rows, c.n, c.batches, c.workers, got, c.tasks)
		}
	}
}
