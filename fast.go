package mha

import (
	"math"
	"runtime"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/tensor"
)

// ForwardInto is Forward writing into r: it reuses r.Output's and r.Weights' storage when it is
// large enough and allocates it otherwise, so a caller that passes the same Result every time
// makes no heap allocation once the layer has seen the largest shape (the layer keeps its
// scratch memory between calls). The tensors r held before the call are overwritten. Errors are
// as for Forward; on error r is left as it was.
//
// The float32 path runs the projections as blocked GEMMs, the attention of each (batch, head,
// block of BlockQ queries) as one task, on up to Options.Workers goroutines. Without
// NeedWeights it uses the tiled online softmax and never builds a [Tq, Tk] matrix; with it, it
// builds the weights of all heads.
func (l *Layer) ForwardInto(r *Result, query, key, value *tensor.Tensor, opt *Options) error {
	w := l.getWork()
	defer l.putWork(w)
	p := &w.p
	if err := l.plan(p, query, key, value, opt, false); err != nil {
		return err
	}
	e := l.cfg.EmbedDim
	r.Output = reuse(r.Output, p.b*p.tq*e, p.b, p.tq, e)
	w.forward(l, r)
	if !p.opt.NeedWeights {
		r.Weights = nil
	}
	if p.unbatched {
		r.Output.Shape = r.Output.Shape[1:]
		if r.Weights != nil {
			r.Weights.Shape = r.Weights.Shape[1:]
		}
	}
	return nil
}

// keepWork is how many scratch sets a layer keeps between calls; more concurrent calls than this
// allocate and leave theirs to the garbage collector.
const keepWork = 4

func (l *Layer) getWork() *work {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		w := l.free[n-1]
		l.free = l.free[:n-1]
		return w
	}
	return new(work)
}

func (l *Layer) putWork(w *work) {
	w.p, w.g = plan{}, gemm{} // drop the references to the caller's tensors
	w.q, w.k, w.v, w.wh, w.avg = nil, nil, nil, nil, nil
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < keepWork {
		l.free = append(l.free, w)
	}
}

// reuse returns t reshaped to shape when its storage holds n values, or a new tensor.
func reuse(t *tensor.Tensor, n int, shape ...int) *tensor.Tensor {
	if t == nil || cap(t.Data) < n || cap(t.Shape) < len(shape) {
		t = &tensor.Tensor{Shape: make([]int, 0, 4), Data: make([]float32, n)}
	}
	t.Data = t.Data[:n]
	t.Shape = append(t.Shape[:0], shape...)
	return t
}

// work is one Forward's memory, kept in Layer.free between calls. It is also the parallel.Job of
// every phase: Do dispatches on phase.
type work struct {
	p     plan
	l     *Layer
	loop  parallel.Loop
	phase phase

	buf     []float32 // projections: Q, K, V (fused: one [rows, 3E] block)
	kt      []float32 // Kᵀ of every (batch, head): [B, H, D, ldkt], the first Tkx of each row used
	ldkt    int
	weights []float32 // per-head weights [B, H, Tq, Tkx] when they are averaged
	wh      []float32 // where the per-head weights go (weights or the result's storage)
	avg     []float32 // the averaged weights [B, Tq, Tkx] (the result's storage)

	q, k, v       []float32 // the projections' views
	ldq, ldk, ldv int       // their row strides
	rq, rk        int       // their rows per batch (rk counts the appended key rows)

	g       gemm // the current GEMM phase
	qBlocks int  // query blocks per head
	scratch []attend.Scratch
	ws      []kernel.Workspace
	masked  []int // fully masked rows, per worker
}

type phase int

const (
	phaseGemm phase = iota
	phaseTranspose
	phaseAttend
	phaseAverage
)

// Do runs one task of the current phase.
func (w *work) Do(worker, task int) {
	switch w.phase {
	case phaseGemm:
		w.g.do(&w.ws[worker], task)
	case phaseTranspose:
		w.transpose(task)
	case phaseAttend:
		w.attend(worker, task)
	case phaseAverage:
		w.average(task)
	}
}

// forward computes r.Output (sized by the caller) and the weights.
func (w *work) forward(l *Layer, r *Result) {
	p, c := &w.p, l.cfg
	e, heads, d := c.EmbedDim, c.NumHeads, c.HeadDim()
	workers := p.opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	w.l = l
	defer func() { w.l = nil }()
	if len(w.scratch) < workers {
		w.scratch = make([]attend.Scratch, workers)
		w.ws = make([]kernel.Workspace, workers)
		w.masked = make([]int, workers)
	}
	clear(w.masked)
	run := func(ph phase, tasks int) {
		w.phase = ph
		l.pool.Run(&w.loop, workers, tasks, w)
	}

	// The input projections. Self-attention with stacked weights is one GEMM writing
	// [Q | K | V] side by side; cross-attention is one for Q and one for [K | V] when key and
	// value are the same tensor, else one each.
	tkx, extra := p.tkx, p.tkx-p.tk
	wq, wk, wv := l.param("q_proj_weight"), l.param("k_proj_weight"), l.param("v_proj_weight")
	inW := l.param("in_proj_weight")
	if inW != nil {
		wq, wk, wv = inW[:e*e], inW[e*e:2*e*e], inW[2*e*e:]
	}
	bq, bk, bv := []float32(nil), []float32(nil), []float32(nil)
	inB := l.param("in_proj_bias")
	if inB != nil {
		bq, bk, bv = inB[:e], inB[e:2*e], inB[2*e:]
	}
	if p.self && inW != nil {
		// Rows per batch are Tkx for all three, so the appended key rows fit; Q uses the first Tq.
		w.buf = kernel.Grow(w.buf, p.b*tkx*3*e)
		w.q, w.k, w.v = w.buf, w.buf[e:], w.buf[2*e:]
		w.ldq, w.ldk, w.ldv, w.rq, w.rk = 3*e, 3*e, 3*e, tkx, tkx
		w.g = gemm{x: p.q, ldx: e, xRows: p.tq, in: e, w: inW, bias: inB, c: w.buf, ldc: 3 * e, cRows: tkx, rows: p.tq, n: 3 * e, batches: p.b}
		run(phaseGemm, w.g.tasks())
	} else {
		nq := p.b * p.tq * e
		w.buf = kernel.Grow(w.buf, nq+2*p.b*tkx*e)
		w.q, w.ldq, w.rq, w.rk = w.buf[:nq], e, p.tq, tkx
		w.g = gemm{x: p.q, ldx: e, xRows: p.tq, in: e, w: wq, bias: bq, c: w.q, ldc: e, cRows: p.tq, rows: p.tq, n: e, batches: p.b}
		run(phaseGemm, w.g.tasks())
		kv := w.buf[nq:]
		if p.kvSame && inW != nil {
			// Key and value are one tensor: one GEMM writes [K | V] side by side.
			var bkv []float32
			if inB != nil {
				bkv = inB[e:]
			}
			w.k, w.v, w.ldk, w.ldv = kv, kv[e:], 2*e, 2*e
			w.g = gemm{x: p.k, ldx: e, xRows: p.tk, in: e, w: inW[e*e:], bias: bkv, c: kv, ldc: 2 * e, cRows: tkx, rows: p.tk, n: 2 * e, batches: p.b}
			run(phaseGemm, w.g.tasks())
		} else {
			nk := p.b * tkx * e
			w.k, w.v, w.ldk, w.ldv = kv[:nk], kv[nk:], e, e
			for _, g := range [...]gemm{
				{x: p.k, ldx: c.kdim(), xRows: p.tk, in: c.kdim(), w: wk, bias: bk, c: w.k, ldc: e, cRows: tkx, rows: p.tk, n: e, batches: p.b},
				{x: p.v, ldx: c.vdim(), xRows: p.tk, in: c.vdim(), w: wv, bias: bv, c: w.v, ldc: e, cRows: tkx, rows: p.tk, n: e, batches: p.b},
			} {
				w.g = g
				run(phaseGemm, w.g.tasks())
			}
		}
	}
	if extra > 0 {
		biasK, biasV := l.param("bias_k"), l.param("bias_v")
		for b := range p.b {
			row := b*tkx + p.tk
			if biasK != nil {
				copy(w.k[row*w.ldk:row*w.ldk+e], biasK)
				copy(w.v[row*w.ldv:row*w.ldv+e], biasV)
				row++
			}
			if c.AddZeroAttn {
				clear(w.k[row*w.ldk : row*w.ldk+e])
				clear(w.v[row*w.ldv : row*w.ldv+e])
			}
		}
	}

	// Kᵀ per head, then attention per (batch, head, query block). Head outputs overwrite their
	// own query rows, so the concatenation of heads is Q's block, ready for the output GEMM.
	w.ldkt = paddedStride(tkx)
	w.kt = kernel.Grow(w.kt, p.b*heads*d*w.ldkt)
	run(phaseTranspose, p.b*heads)
	w.wh = nil
	if p.opt.NeedWeights {
		n := p.b * heads * p.tq * tkx
		if p.opt.PerHeadWeights {
			r.Weights = reuse(r.Weights, n, p.b, heads, p.tq, tkx)
			w.wh = r.Weights.Data
		} else {
			w.weights = kernel.Grow(w.weights, n)
			w.wh = w.weights
		}
	}
	w.qBlocks = (p.tq + attend.BlockQ - 1) / attend.BlockQ
	run(phaseAttend, p.b*heads*w.qBlocks)
	if p.opt.NeedWeights && !p.opt.PerHeadWeights {
		r.Weights = reuse(r.Weights, p.b*p.tq*tkx, p.b, p.tq, tkx)
		w.avg = r.Weights.Data
		run(phaseAverage, p.b*p.tq)
	}

	// The output projection reads the concatenated heads in place.
	w.g = gemm{x: w.q, ldx: w.ldq, xRows: w.rq, in: e, w: l.param("out_proj.weight"), bias: l.param("out_proj.bias"), c: r.Output.Data, ldc: e, cRows: p.tq, rows: p.tq, n: e, batches: p.b}
	run(phaseGemm, w.g.tasks())
	r.FullyMasked = 0
	for _, m := range w.masked {
		r.FullyMasked += m
	}
}

// paddedStride returns a row stride of at least n floats that is a multiple of 16 (64 bytes) but
// not of 256, so that the rows of Kᵀ the GEMM walks down do not all fall into the same cache
// sets.
func paddedStride(n int) int {
	ld := (n + 15) &^ 15
	if ld%256 == 0 {
		ld += 16
	}
	return ld
}

// transpose writes Kᵀ of one (batch, head) task: kt[b, h, i, j] = K[b, j, h·D + i]. It walks
// the keys in blocks, so that each block's rows of K stay in cache while Kᵀ is written in order.
func (w *work) transpose(task int) {
	heads, d, tkx, ld := w.l.cfg.NumHeads, w.l.cfg.HeadDim(), w.p.tkx, w.ldkt
	b, h := task/heads, task%heads
	dst := w.kt[task*d*ld : (task+1)*d*ld]
	src := w.k[b*w.rk*w.ldk+h*d:]
	const block = 64
	for j0 := 0; j0 < tkx; j0 += block {
		j1 := min(j0+block, tkx)
		for i := range d {
			out := dst[i*ld+j0 : i*ld+j1]
			for j := range out {
				out[j] = src[(j0+j)*w.ldk+i]
			}
		}
	}
}

// attend runs one (batch, head, query block) task.
func (w *work) attend(worker, task int) {
	p, c := &w.p, w.l.cfg
	heads, d, tkx := c.NumHeads, c.HeadDim(), p.tkx
	bh, blk := task/w.qBlocks, task%w.qBlocks
	b, h := bh/heads, bh%heads
	i0 := blk * attend.BlockQ
	i1 := min(i0+attend.BlockQ, p.tq)
	q := w.q[b*w.rq*w.ldq+h*d:]
	hd := attend.Head[float32]{
		Q: q, LdQ: w.ldq,
		Kt: w.kt[bh*d*w.ldkt:], LdKt: w.ldkt,
		V: w.v[b*w.rk*w.ldv+h*d:], LdV: w.ldv,
		Out: q, LdOut: w.ldq,
		Tq: p.tq, Tk: tkx, D: d, Dv: d,
	}
	bias := p.bias(b, h, heads)
	var wts []float32
	if w.wh != nil {
		wts = w.wh[(bh*p.tq+i0)*tkx : (bh*p.tq+i1)*tkx]
	}
	scale := float32(1 / math.Sqrt(float64(d)))
	w.masked[worker] += attend.Tiled(&hd, &bias, scale, p.dropout(b, h, heads, c.Dropout), i0, i1, wts, &w.scratch[worker])
}

// average writes one (batch, query) row of the head-averaged weights.
func (w *work) average(task int) {
	p, heads := &w.p, w.l.cfg.NumHeads
	b, i, tkx := task/p.tq, task%p.tq, p.tkx
	dst := w.avg[task*tkx : (task+1)*tkx]
	clear(dst)
	for h := range heads {
		off := ((b*heads+h)*p.tq + i) * tkx
		kernel.Axpy(1, w.weights[off:off+tkx], dst)
	}
	kernel.Sscal(1/float32(heads), dst)
}

// gemm is one parallel C = X·Wᵀ + bias for rows rows of every batch, whose rows sit at
// different strides in X and C: batch b's rows start at row b·xRows of X and row b·cRows of C.
type gemm struct {
	x          []float32
	ldx, xRows int
	in         int
	w, bias    []float32 // w is [n, in]
	c          []float32
	ldc, cRows int
	rows       int
	n, batches int
}

// Task blocks of the projection GEMMs: rows and columns of C per task.
const gemmRows, gemmCols = 256, 256

func (g *gemm) tasks() int {
	return g.batches * ceilDiv(g.rows, gemmRows) * ceilDiv(g.n, gemmCols)
}

func (g *gemm) do(ws *kernel.Workspace, task int) {
	rowBlocks, colBlocks := ceilDiv(g.rows, gemmRows), ceilDiv(g.n, gemmCols)
	b, rest := task/(rowBlocks*colBlocks), task%(rowBlocks*colBlocks)
	r0, c0 := rest/colBlocks*gemmRows, rest%colBlocks*gemmCols
	rows, cols := min(gemmRows, g.rows-r0), min(gemmCols, g.n-c0)
	var bias []float32
	if g.bias != nil {
		bias = g.bias[c0 : c0+cols]
	}
	ws.Sgemm(false, true, rows, cols, g.in, 1, g.x[(b*g.xRows+r0)*g.ldx:], g.ldx, g.w[c0*g.in:], g.in, 0, g.c[(b*g.cRows+r0)*g.ldc+c0:], g.ldc, bias)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
