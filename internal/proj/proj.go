// Package proj computes the products of a layer's or a model's weights, C = X·op(W) + bias
// (+ beta·C), as tasks over blocks of C that a worker pool runs: one home for how mha's
// attention layers and nn's Linear modules split, pack and compute them.
//
// Each value of C is computed by one task, in an order fixed by the shapes alone, so results
// are the same bit for bit whatever the number of workers.
package proj

import "github.com/mhalab/mha/internal/kernel"

// Matrix is a weight matrix as the products read it: float32 values F, or, when F is nil, the
// bits H of half-precision values, bfloat16 when BF16 is set (else binary16).
type Matrix struct {
	F    []float32
	H    []uint16
	BF16 bool
}

// Present reports whether m holds any values.
func (m Matrix) Present() bool { return m.F != nil || m.H != nil }

// Slice returns values [i, j) of m.
func (m Matrix) Slice(i, j int) Matrix {
	if m.F != nil {
		return Matrix{F: m.F[i:j]}
	}
	return Matrix{H: m.H[i:j], BF16: m.BF16}
}

// From returns m from value i on.
func (m Matrix) From(i int) Matrix { return m.Slice(i, max(len(m.F), len(m.H))) }

// Float32s returns m's values as float32: m.F itself, or decoded into a new slice.
func (m Matrix) Float32s() []float32 {
	if m.F != nil || m.H == nil {
		return m.F
	}
	out := make([]float32, len(m.H))
	kernel.DecodeHalf(out, m.H, m.BF16)
	return out
}

// Rows and Cols are the rows and columns of C one task computes at most (a plain task; a packed
// one runs several blocks of Rows rows, and a short product's tasks take fewer columns: see
// Gemm.Plan).
const Rows, Cols = 256, 256

// packGroup is the most blocks of Rows rows a task of a packed product runs against its block
// of W: X's rows a task reads (packGroup·Rows of them) then stay in L3 for the tasks after it,
// which take the same rows and the next blocks of W.
const packGroup = 4

// Gemm is one parallel C = X·op(W) + Bias (+ Beta·C) for Rows rows of every batch, whose rows
// sit at different strides in X and C: batch b's rows start at row b·XRows of X and row b·CRows
// of C. op(W) is Wᵀ with W [N, K] when Trans is set (a forward projection), else W [K, N] (the
// input gradient of one). Set its fields, call Plan, then run Do for every task of Tasks.
type Gemm struct {
	X           []float32
	LdX, XRows  int
	K           int
	W           Matrix
	LdW         int
	Trans       bool
	Bias        []float32 // nil: none
	Beta        float32
	C           []float32
	LdC, CRows  int
	Rows        int
	N, Batches  int
	BF16        bool     // bfloat16 products (kernel.Workspace.GemmBF16 and its kin), float32 sums
	Bits        []uint16 // when not nil, laid out as C: each task also writes its block of C there as bfloat16 bits
	XB          []uint16 // with BF16, when not nil: X as bfloat16 bits, laid out as X would be (X is not read)
	group, cols int      // set by Plan
	half        bool     // set by Plan: W in half precision
}

// Plan decides how g's tasks split and pack the product for the given number of workers (the
// split never changes the result). Products of at most kernel.GemvRows rows per batch with a
// transposed W run as float32 dot products that read W in place, split finely over the workers,
// even with BF16, unless they read X from XB (X then need not hold it). A transposed float32 W
// (on AVX-512), or with BF16, XB and AVX512_BF16 a transposed W in float32 or bfloat16, is
// packed once per task for up to packGroup blocks of rows rather than once for every block: as
// many as leave the workers four tasks each. Other products split into blocks of Rows rows and
// Cols columns, or narrower columns where those would leave the workers too few (taskCols).
func (g *Gemm) Plan(workers int) {
	g.group, g.cols = 0, Cols
	g.half = g.W.F == nil && g.W.H != nil
	gemv := g.Trans && g.Rows <= kernel.GemvRows && g.XB == nil
	if gemv {
		g.BF16 = false
		g.cols = kernel.GemvCols(g.N, workers, Cols)
	}
	packs := g.Trans && g.W.F != nil && !gemv
	if g.BF16 {
		packs = g.Trans && g.XB != nil && kernel.HasBF16() && (g.W.F != nil || g.half && g.W.BF16)
	}
	if packs {
		blocks := g.Batches * ceilDiv(g.Rows, Rows) * ceilDiv(g.N, Cols)
		g.group = max(1, min(packGroup, blocks/(4*workers)))
	}
	if !gemv {
		g.cols = taskCols(g.N, g.Batches*ceilDiv(g.Rows, Rows), workers)
	}
}

// taskCols returns the columns of C a task computes when the product has rowBlocks blocks of
// rows: Cols, unless blocks of Cols columns would give the workers fewer than two tasks each,
// as a short prompt's narrow products do (the K and V projections of grouped heads, 256
// columns: one task for two workers). Then it cuts finer, in multiples of 32 (the kernels'
// panel), into about four tasks a worker, so that none waits long for the last one.
func taskCols(n, rowBlocks, workers int) int {
	workers = max(workers, 1)
	if rowBlocks == 0 || rowBlocks*ceilDiv(n, Cols) >= 2*workers {
		return Cols
	}
	want := ceilDiv(4*workers, rowBlocks) // blocks of columns
	return min(Cols, max(32, ceilDiv(ceilDiv(n, want), 32)*32))
}

// Tasks returns the number of tasks of the planned product.
func (g *Gemm) Tasks() int {
	rowBlocks := ceilDiv(g.Rows, Rows)
	if g.group > 0 {
		rowBlocks = ceilDiv(rowBlocks, g.group)
	}
	return g.Batches * rowBlocks * ceilDiv(g.N, g.cols)
}

// Pack is one worker's packing of a block of a product's weights; Do reuses it from task to
// task.
type Pack struct {
	p    kernel.PackedBF16
	bits []uint16 // the block of a float32 W rounded to bfloat16, before it is packed
	f    kernel.PackedF32
}

// Do runs task of the planned product on a worker with workspace ws and packing buffers pk.
func (g *Gemm) Do(ws *kernel.Workspace, pk *Pack, task int) {
	if g.group > 0 {
		g.doPacked(ws, pk, task)
		return
	}
	rowBlocks, colBlocks := ceilDiv(g.Rows, Rows), ceilDiv(g.N, g.cols)
	b, rest := task/(rowBlocks*colBlocks), task%(rowBlocks*colBlocks)
	r0, c0 := rest/colBlocks*Rows, rest%colBlocks*g.cols
	rows, cols := min(Rows, g.Rows-r0), min(g.cols, g.N-c0)
	var bias []float32
	if g.Bias != nil {
		bias = g.Bias[c0 : c0+cols]
	}
	w := g.W.From(c0)
	if g.Trans {
		w = g.W.From(c0 * g.LdW)
	}
	c, xo := g.C[(b*g.CRows+r0)*g.LdC+c0:], (b*g.XRows+r0)*g.LdX
	switch {
	case g.XB != nil:
		ws.GemmBF16BitsA(false, g.Trans, rows, cols, g.K, 1, g.XB[xo:], g.LdX, w.F, w.H, w.BF16, g.LdW, g.Beta, c, g.LdC, bias)
	case g.BF16 && g.half:
		ws.GemmBF16Half(false, g.Trans, rows, cols, g.K, 1, g.X[xo:], g.LdX, w.H, w.BF16, g.LdW, g.Beta, c, g.LdC, bias)
	case g.BF16:
		ws.GemmBF16(false, g.Trans, rows, cols, g.K, 1, g.X[xo:], g.LdX, w.F, g.LdW, g.Beta, c, g.LdC, bias)
	case g.half:
		ws.SgemmHalf(false, g.Trans, rows, cols, g.K, 1, g.X[xo:], g.LdX, w.H, w.BF16, g.LdW, g.Beta, c, g.LdC, bias)
	default:
		ws.Sgemm(false, g.Trans, rows, cols, g.K, 1, g.X[xo:], g.LdX, w.F, g.LdW, g.Beta, c, g.LdC, bias)
	}
	if g.Bits != nil {
		EncodeRows(g.Bits[(b*g.CRows+r0)*g.LdC+c0:], c, g.LdC, rows, cols)
	}
}

// doPacked runs one task of a product with g.group set: it packs one block of g.cols rows of the
// transposed W, columns [c0, c0+cols) of C, and computes them for g.group blocks of Rows rows of
// one batch, with Do's sums: kernel.GemmBF16Packed gives GemmBF16BitsA's results, and
// SgemmPacked Sgemm's (where the CPU's kernels do not read packed float32 panels, or a block has
// at most kernel.GemvRows rows, Sgemm runs instead). Consecutive tasks take the same rows and
// the next block of W.
func (g *Gemm) doPacked(ws *kernel.Workspace, pk *Pack, task int) {
	rowBlocks, colBlocks := ceilDiv(g.Rows, Rows), ceilDiv(g.N, g.cols)
	groups := ceilDiv(rowBlocks, g.group)
	b, rest := task/(groups*colBlocks), task%(groups*colBlocks)
	r0, c0 := rest/colBlocks*g.group*Rows, rest%colBlocks*g.cols
	r1, cols := min(g.Rows, r0+g.group*Rows), min(g.cols, g.N-c0)
	w := g.W.From(c0 * g.LdW)
	var bias []float32
	if g.Bias != nil {
		bias = g.Bias[c0 : c0+cols]
	}
	packed := true
	switch {
	case !g.BF16:
		packed = pk.f.Pack(g.K, cols, w.F, g.LdW)
	case w.F != nil:
		pk.bits = kernel.Grow(pk.bits, cols*g.K)
		for r := range cols {
			kernel.RoundBF16s(pk.bits[r*g.K:(r+1)*g.K], w.F[r*g.LdW:r*g.LdW+g.K])
		}
		pk.p.Pack(true, g.K, cols, pk.bits, g.K)
	default:
		pk.p.Pack(true, g.K, cols, w.H, g.LdW)
	}
	for ; r0 < r1; r0 += Rows {
		rows := min(Rows, r1-r0)
		x, c := (b*g.XRows+r0)*g.LdX, g.C[(b*g.CRows+r0)*g.LdC+c0:]
		switch {
		case g.BF16:
			ws.GemmBF16Packed(rows, cols, g.K, 1, g.XB[x:], g.LdX, &pk.p, 0, 0, g.Beta, c, g.LdC, bias)
		case packed && rows > kernel.GemvRows:
			ws.SgemmPacked(rows, 1, g.X[x:], g.LdX, &pk.f, g.Beta, c, g.LdC, bias)
		default:
			ws.Sgemm(false, true, rows, cols, g.K, 1, g.X[x:], g.LdX, w.F, g.LdW, g.Beta, c, g.LdC, bias)
		}
		if g.Bits != nil {
			EncodeRows(g.Bits[(b*g.CRows+r0)*g.LdC+c0:], c, g.LdC, rows, cols)
		}
	}
}

// EncodeRows rounds n values of each of rows rows of src, stride ld, to bfloat16 bits in the
// same places of dst.
func EncodeRows(dst []uint16, src []float32, ld, rows, n int) {
	for r := range rows {
		kernel.RoundBF16s(dst[r*ld:r*ld+n], src[r*ld:r*ld+n])
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
