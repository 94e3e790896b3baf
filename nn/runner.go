package nn

import (
	"fmt"
	"runtime"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
)

// runner spreads the work of one forward or backward pass over goroutines. Every loop is cut
// into tasks of a fixed size that depends on the problem only, and each output value is computed
// by one task in one order, so results are the same bit for bit whatever the worker count.
type runner struct {
	pool    *parallel.Pool
	loop    parallel.Loop
	workers int
	ws      []kernel.Workspace // one per worker
	tmp     [][]float32        // one scratch buffer per worker
	partial []float32          // gemmAcc's partial products
	compute mha.Compute        // the arithmetic of gemm's products of more than kernel.GemvRows rows
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

// Blocks of C that one GEMM task computes.
const gemmRows, gemmCols = 128, 256

// operand is the B matrix of a GEMM: float32 values f, or the bit patterns h of halves
// (bfloat16 when bf16 is set, else float16), which the GEMM decodes as it packs them.
type operand struct {
	f    []float32
	h    []uint16
	bf16 bool
}

// gemm computes C = op(A)·op(B) + beta·C, then adds bias[j] to column j when bias is not nil, as
// kernel.Workspace.Sgemm does (row-major, leading dimensions lda, ldb, ldc; op(A) is m×k, op(B)
// is k×n), in tasks of gemmRows×gemmCols blocks of C (narrower for the dot products of at most
// kernel.GemvRows rows with a transposed B). A half-precision B goes through
// kernel.Workspace.SgemmHalf, bit for bit Sgemm's result on its decoded values. With r.compute
// bfloat16, a product of more than kernel.GemvRows rows runs in kernel.Workspace.GemmBF16Half or
// GemmBF16 instead.
func (r *runner) gemm(transA, transB bool, m, n, k int, a []float32, lda int, b operand, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	blockCols := gemmCols
	gemv := !transA && transB && m <= kernel.GemvRows
	if gemv { // dot products, split finely over the workers
		blockCols = kernel.GemvCols(n, r.workers, gemmCols)
	}
	bf16 := r.compute == mha.ComputeBFloat16 && !gemv
	colBlocks := ceilDiv(n, blockCols)
	r.run(ceilDiv(m, gemmRows)*colBlocks, func(worker, task int) {
		i0, j0 := task/colBlocks*gemmRows, task%colBlocks*blockCols
		rows, cols := min(gemmRows, m-i0), min(blockCols, n-j0)
		aOff, bOff := i0*lda, j0
		if transA {
			aOff = i0
		}
		if transB {
			bOff = j0 * ldb
		}
		var bs []float32
		if bias != nil {
			bs = bias[j0 : j0+cols]
		}
		switch {
		case bf16 && b.h != nil:
			r.ws[worker].GemmBF16Half(transA, transB, rows, cols, k, 1, a[aOff:], lda, b.h[bOff:], b.bf16, ldb, beta, c[i0*ldc+j0:], ldc, bs)
			return
		case bf16:
			r.ws[worker].GemmBF16(transA, transB, rows, cols, k, 1, a[aOff:], lda, b.f[bOff:], ldb, beta, c[i0*ldc+j0:], ldc, bs)
			return
		case b.h != nil:
			r.ws[worker].SgemmHalf(transA, transB, rows, cols, k, 1, a[aOff:], lda, b.h[bOff:], b.bf16, ldb, beta, c[i0*ldc+j0:], ldc, bs)
			return
		}
		r.ws[worker].Sgemm(transA, transB, rows, cols, k, 1, a[aOff:], lda, b.f[bOff:], ldb, beta, c[i0*ldc+j0:], ldc, bs)
	})
}

// gemmAcc splits the sum over k into at most this many chunks of at least accRows rows, when C
// has fewer than accChunks blocks.
const accChunks, accRows = 8, 512

// gemmAcc computes C += Aᵀ·B for A [k, m] and B [k, n] (lda = m, ldb = n, ldc = n): the weight
// gradient of a linear map over k rows. When C has few blocks but k is long, the k rows are cut
// into chunks whose products run in parallel and are then added to C in chunk order.
func (r *runner) gemmAcc(m, n, k int, a, b, c []float32) {
	chunks := min(ceilDiv(k, accRows), accChunks)
	if ceilDiv(m, gemmRows)*ceilDiv(n, gemmCols) >= accChunks || chunks < 2 {
		r.gemm(true, false, m, n, k, a, m, operand{f: b}, n, 1, c, n, nil)
		return
	}
	rows := ceilDiv(k, chunks)
	r.partial = kernel.Grow(r.partial, chunks*m*n)
	colBlocks := ceilDiv(n, gemmCols)
	blocks := ceilDiv(m, gemmRows) * colBlocks
	r.run(chunks*blocks, func(worker, task int) {
		chunk, block := task/blocks, task%blocks
		k0 := chunk * rows
		i0, j0 := block/colBlocks*gemmRows, block%colBlocks*gemmCols
		p := r.partial[chunk*m*n:]
		r.ws[worker].Sgemm(true, false, min(gemmRows, m-i0), min(gemmCols, n-j0), min(rows, k-k0), 1,
			a[k0*m+i0:], m, b[k0*n+j0:], n, 0, p[i0*n+j0:], n, nil)
	})
	r.rows(m, gemmRows, func(_, _, i0, i1 int) {
		dst := c[i0*n : i1*n]
		for chunk := range chunks {
			kernel.Axpy(1, r.partial[chunk*m*n+i0*n:chunk*m*n+i1*n], dst)
		}
	})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
