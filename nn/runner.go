package nn

import (
	"fmt"
	"runtime"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/internal/proj"
)

// runner spreads the work of one forward or backward pass over goroutines. Every loop is cut
// into tasks of a fixed size that depends on the problem only, and each output value is computed
// by one task in one order, so results are the same bit for bit whatever the worker count.
type runner struct {
	pool    *parallel.Pool
	loop    parallel.Loop
	workers int
	ws      []kernel.Workspace // one per worker
	pk      []proj.Pack        // one per worker
	tmp     [][]float32        // one scratch buffer per worker
	partial []float32          // gemmAcc's partial products
	xb      []uint16           // project's X as bfloat16
	compute mha.Compute        // the arithmetic of the Linear modules' products (see project)
}

// setWorkers sets the number of goroutines the next loops use, 0 meaning GOMAXPROCS, and
// returns an error for n < 0.
func (r *runner) setWorkers(n int) error {
	if n < 0 {
		return fmt.Errorf("nn: %d workers, want ≥ 0 (0 for GOMAXPROCS)", n)
	}
	if n == 0 {
		n = runtime.GOMAXPROCS(0)
	}
	r.workers = n
	if len(r.ws) < n {
		r.ws = make([]kernel.Workspace, n)
		r.pk = make([]proj.Pack, n)
		r.tmp = make([][]float32, n)
	}
	return nil
}

// jobFunc adapts a function to parallel.Job.
type jobFunc func(worker, task int)

func (f jobFunc) Do(worker, task int) { f(worker, task) }

// run calls f(worker, task) for every task in [0, tasks).
func (r *runner) run(tasks int, f func(worker, task int)) {
	r.pool.Run(&r.loop, r.workers, tasks, jobFunc(f))
}

// rows calls f(worker, task, i0, i1) for the rows [i0, i1) of n, in tasks of block rows.
func (r *runner) rows(n, block int, f func(worker, task, i0, i1 int)) {
	r.run(ceilDiv(n, block), func(worker, task int) {
		i0 := task * block
		f(worker, task, i0, min(i0+block, n))
	})
}

// scratch returns worker's scratch buffer with n values.
func (r *runner) scratch(worker, n int) []float32 {
	r.tmp[worker] = kernel.Grow(r.tmp[worker], n)
	return r.tmp[worker]
}

// project runs the product g (see proj.Gemm) on the workers. With g.BF16 it first rounds X to
// bfloat16 once, into g.XB, for every task to read: a product of more than kernel.GemvRows
// rows then runs in bfloat16 (kernel.Workspace.GemmBF16Packed and its kin), fewer as float32
// dot products.
func (r *runner) project(g proj.Gemm) {
	if g.BF16 && g.Rows > kernel.GemvRows {
		n := g.Batches * g.XRows * g.LdX
		r.xb = kernel.Grow(r.xb, n)
		r.rows(n, encodeChunk, func(_, _, i0, i1 int) {
			kernel.RoundBF16s(r.xb[i0:i1], g.X[i0:i1])
		})
		g.XB = r.xb
	}
	g.Plan(r.workers)
	r.run(g.Tasks(), func(worker, task int) {
		g.Do(&r.ws[worker], &r.pk[worker], task)
	})
}

// encodeChunk is the values of X one task of project rounds to bfloat16.
const encodeChunk = 1 << 16

// Blocks of C that one task of gemmAcc computes.
const gemmRows, gemmCols = 128, 256

// gemmAcc splits the sum over k into at most this many chunks of at least accRows rows, when C
// has fewer than accChunks blocks.
const accChunks, accRows = 8, 512

// gemmAcc computes C += Aᵀ·B for A [k, m] and B [k, n] (lda = m, ldb = n, ldc = n): the weight
// gradient of a linear map over k rows, in tasks of gemmRows×gemmCols blocks of C. When C has
// few blocks but k is long, the k rows are cut into chunks whose products run in parallel and
// are then added to C in chunk order.
func (r *runner) gemmAcc(m, n, k int, a, b, c []float32) {
	colBlocks := ceilDiv(n, gemmCols)
	blocks := ceilDiv(m, gemmRows) * colBlocks
	chunks := max(1, min(ceilDiv(k, accRows), accChunks))
	if blocks >= accChunks {
		chunks = 1
	}
	rows := ceilDiv(k, chunks)
	if chunks > 1 {
		r.partial = kernel.Grow(r.partial, chunks*m*n)
	}
	r.run(chunks*blocks, func(worker, task int) {
		chunk, block := task/blocks, task%blocks
		k0 := chunk * rows
		i0, j0 := block/colBlocks*gemmRows, block%colBlocks*gemmCols
		dst, beta := r.partial[chunk*m*n:], float32(0)
		if chunks == 1 {
			dst, beta = c, 1
		}
		r.ws[worker].Sgemm(true, false, min(gemmRows, m-i0), min(gemmCols, n-j0), min(rows, k-k0), 1,
			a[k0*m+i0:], m, b[k0*n+j0:], n, beta, dst[i0*n+j0:], n, nil)
	})
	if chunks == 1 {
		return
	}
	r.rows(m, gemmRows, func(_, _, i0, i1 int) {
		dst := c[i0*n : i1*n]
		for chunk := range chunks {
			kernel.Axpy(1, r.partial[chunk*m*n+i0*n:chunk*m*n+i1*n], dst)
		}
	})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
