package mha

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/internal/proj"
	"github.com/mhalab/mha/tensor"
)

// ForwardInto is Forward writing into r: it reuses r.Output's and r.Weights' storage when it is
// large enough and allocates it otherwise, so a caller that passes the same Result every time
// makes no heap allocation once the layer has seen the largest shape (the layer keeps its
// scratch memory between calls). The tensors r held before the call are overwritten. Errors are
// as for Forward, and one wrapping ErrShape when r is nil; on error r is left as it was.
//
// The float32 path runs the projections as blocked GEMMs, the attention of each (batch, head,
// block of BlockQ queries) as one task, on up to Options.Workers goroutines. Without
// NeedWeights it uses the tiled online softmax and never builds a [Tq, Tk] matrix; with it, it
// builds the weights of all heads.
func (l *Layer) ForwardInto(r *Result, query, key, value *tensor.Tensor, opt *Options) error {
	return l.forward(r, nil, query, key, value, opt)
}

// forward is ForwardInto, keeping what Backward needs in s when s is not nil.
func (l *Layer) forward(r *Result, s *Saved, query, key, value *tensor.Tensor, opt *Options) error {
	if s != nil {
		s.l = nil // a failed call leaves nothing for Backward
	}
	if r == nil {
		return fmt.Errorf("%w: result is nil, want a Result to write into", ErrShape)
	}
	w := l.getWork()
	defer l.putWork(w)
	p := &w.p
	if err := l.plan(p, query, key, value, opt, false); err != nil {
		return err
	}
	if s != nil && p.opt.Compute == ComputeBFloat16 {
		return fmt.Errorf("%w: ForwardTrain in bfloat16: Backward is float32 only, train with ComputeFloat32", ErrUnsupported)
	}
	e := l.cfg.EmbedDim
	r.Output = reuse(r.Output, p.b*p.tq*e, p.b, p.tq, e)
	w.a = &w.own
	if s != nil {
		w.a = &s.a
	}
	w.forward(l, r, s)
	if !p.opt.NeedWeights {
		r.Weights = nil
	}
	if p.unbatched {
		r.Output.Shape = r.Output.Shape[1:]
		if r.Weights != nil {
			r.Weights.Shape = r.Weights.Shape[1:]
		}
		if r.Heads != nil {
			r.Heads.Shape = r.Heads.Shape[1:]
		}
	}
	if s != nil {
		s.p, s.l = *p, l
	}
	return nil
}

// keepWork is how many scratch sets a layer keeps between calls; more concurrent calls than this
// allocate and leave theirs to the garbage collector.
const keepWork = 4

func (l *Layer) getWork() *work {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if n := len(l.s.free); n > 0 {
		w := l.s.free[n-1]
		l.s.free = l.s.free[:n-1]
		return w
	}
	return new(work)
}

func (l *Layer) putWork(w *work) {
	// Drop the references to the caller's tensors and to a Saved.
	w.p, w.g, w.wg, w.a, w.s = plan{layouts: w.p.layouts}, proj.Gemm{}, wgrad{}, nil, nil
	w.wh, w.rw, w.out, w.dy, w.gr, w.outb = nil, nil, nil, nil, nil, nil
	w.kInPlace = false
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if len(l.s.free) < keepWork {
		l.s.free = append(l.s.free, w)
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

// acts are a forward's projections, laid out for the attention tasks: the layer's scratch in
// inference, kept in a Saved for Backward in training.
type acts struct {
	buf []float32 // Q, K, V: one [B, Tkx, 3E] block when fused, else Q then K and V
	kt  []float32 // Kᵀ of every (batch, head): [B, H, D, ldkt], the first Tkx of each row used

	fused         bool      // self-attention with stacked weights: one GEMM writes [Q | K | V]
	kvFused       bool      // key and value are one tensor: one GEMM writes [K | V]
	q, k, v       []float32 // the projections' views into buf, from offsets qo, ko, vo
	qo, ko, vo    int
	ldq, ldk, ldv int // their row strides
	rq, rk        int // their rows per batch (rk counts the appended key rows)
	ldkt          int

	// With ComputeBFloat16: Q, K and V as bfloat16 bits, laid out as buf (views qb, kb, vb at
	// the same offsets and strides), written by the projection tasks (or, with rotary, by the
	// transpose phase after rotating); the heads then write their outputs over Q's.
	bits       []uint16
	qb, kb, vb []uint16
}

// split returns the views of q, k and v into buf, a buffer laid out as a.buf (empty views when
// the call has no rows: an empty batch or sequence).
func (a *acts) split(buf []float32) (q, k, v []float32) {
	return view(buf, a.qo), view(buf, a.ko), view(buf, a.vo)
}

// layout sizes buf for a call of plan p to a layer with query width qd (Config.InnerDim) and
// key/value width ekv, whose input projection weights are stacked (in_proj_weight) or not, and
// points q, k and v into it.
func (a *acts) layout(p *plan, qd, ekv int, stacked bool) {
	tkx := p.tkx
	a.fused, a.kvFused = p.self && stacked, !p.self && p.kvSame && stacked
	switch nq, nk := p.b*p.tq*qd, p.b*tkx*ekv; {
	case a.fused:
		// Rows per batch are Tkx for all three, so the appended key rows fit; Q uses the first Tq.
		w := qd + 2*ekv
		a.buf = kernel.Grow(a.buf, p.b*tkx*w)
		a.qo, a.ko, a.vo = 0, qd, qd+ekv
		a.ldq, a.ldk, a.ldv, a.rq, a.rk = w, w, w, tkx, tkx
	case a.kvFused:
		a.buf = kernel.Grow(a.buf, nq+2*nk)
		a.qo, a.ko, a.vo = 0, nq, nq+ekv
		a.ldq, a.ldk, a.ldv, a.rq, a.rk = qd, 2*ekv, 2*ekv, p.tq, tkx
	default:
		a.buf = kernel.Grow(a.buf, nq+2*nk)
		a.qo, a.ko, a.vo = 0, nq, nq+nk
		a.ldq, a.ldk, a.ldv, a.rq, a.rk = qd, ekv, ekv, p.tq, tkx
	}
	a.q, a.k, a.v = a.split(a.buf)
}

// work is one call's memory, kept in Layer.free between calls. It is also the parallel.Job of
// every phase: Do dispatches on phase.
type work struct {
	p     plan
	l     *Layer
	loop  parallel.Loop
	phase phase

	a   *acts // the projections: &own, or a Saved's
	own acts
	s   *Saved // where a training forward keeps its state; nil otherwise

	out     []float32 // where the heads write: Q's block, or Saved.concat
	outb    []uint16  // ComputeBFloat16 without Heads.Keep and gates: where the heads write instead, as bits (Q's bits)
	ldo, ro int       // its row stride and rows per batch
	// With ComputeBFloat16: the inputs the projections read (query, then key and value where
	// they are other tensors), and their bfloat16 bits, which phaseEncode writes once per call
	// rather than every projection task rounding its rows of them again.
	enc     [3][]float32
	xb      [3][]uint16
	wp      []proj.Pack // per worker: its block of a projection's weights, packed
	weights []float32   // per-head weights [B, H, Tq, Tkx] when they are not the result's
	gated   []float32   // the gated heads [B, Tq, E] in inference (Saved.gated in training)
	wh      []float32   // where the per-head weights go (before dropout)
	rw      *Result     // the result whose Weights the weights phase fills
	dy      []float32   // Backward: the output gradient [B, Tq, E]
	gr      *Grads      // Backward: where the gradients go
	dbuf    []float32   // Backward: gradients of the projections, laid out as acts.buf
	dconcat []float32   // Backward: gradient of the concatenated heads [B, Tq, E]
	g       proj.Gemm   // the current GEMM phase
	wg      wgrad       // the current weight-gradient phase
	qBlocks int         // query blocks per head
	runQ    int         // query blocks per attention task (runBlocks)
	scratch []attend.Scratch
	back    []attend.BackScratch
	ws      []kernel.Workspace
	rows    [][]float32 // a row of weights per worker
	rope    ropeTable   // with Config.Rotary: the call's sines and cosines
	ropeK0  int         // the rows of rope that key 0 and query 0 sit at
	ropeQ0  int
	masked  []int // fully masked rows, per worker
	// With a normalizer, the visible pairs and the zero weights of each attention task.
	visible, zero []int
	lse           []float32 // where the row log-sum-exps go: Saved.lse or nil

	// Whether an inference forward's attention reads K in place (kInPlaceDensity): no Kᵀ then.
	kInPlace bool

	// With ComputeBFloat16 where the CPU has AVX512_BF16 (packKV), the transpose phase packs
	// the bits of K and V of each (batch, K/V head) for the GEMM's kernels, once per call, into
	// kvp (K's then V's), which every query block of the heads reading them shares.
	packKV bool
	kvp    []kernel.PackedBF16

	dsink      []float32      // Backward: the sinks' gradient per (batch, head)
	dnorm      []float32      // Backward with QKNorm: per (batch, K/V head) task, the gains' gradients and scratch
	cq, ck, cv *tensor.Tensor // ForwardCache: the projections per head, [B, H, T, d]
	cres       SDPAResult     // ForwardCache: the attention's result
	layouts    []headLayout   // ForwardCache: the copies of the current phaseLayout
}

type phase int

const (
	phaseGemm phase = iota
	phaseWgrad
	phaseTranspose
	phaseAttend
	phaseWeights
	phaseBackward
	phaseEncode
	phaseLayout
)

// Do runs one task of the current phase.
func (w *work) Do(worker, task int) {
	switch w.phase {
	case phaseGemm:
		w.g.Do(&w.ws[worker], &w.wp[worker], task)
	case phaseWgrad:
		w.wg.do(&w.ws[worker], task)
	case phaseTranspose:
		w.transpose(task)
	case phaseAttend:
		w.attend(worker, task)
	case phaseWeights:
		w.finishWeights(worker, task)
	case phaseBackward:
		w.backward(worker, task)
	case phaseEncode:
		w.encode(task)
	case phaseLayout:
		for i := range w.layouts {
			c := &w.layouts[i]
			if task < c.b*c.h {
				c.copy(task)
				break
			}
			task -= c.b * c.h
		}
	}
}

// encodeChunk is the values of an input one phaseEncode task rounds to bfloat16.
const encodeChunk = 1 << 16

// encodeInputs writes the bfloat16 bits of the projections' inputs (phaseEncode) and returns
// them for the query, key and value inputs: key's are query's when key is the query tensor, and
// value's are key's when value is the key tensor.
func (w *work) encodeInputs() (xq, xk, xv []uint16) {
	p := &w.p
	same := func(a, b []float32) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }
	w.enc = [3][]float32{p.q}
	if !same(p.k, p.q) {
		w.enc[1] = p.k
	}
	if !same(p.v, p.k) && !same(p.v, p.q) {
		w.enc[2] = p.v
	}
	tasks := 0
	for i, x := range w.enc {
		w.xb[i] = kernel.Grow(w.xb[i], len(x))
		tasks += ceilDiv(len(x), encodeChunk)
	}
	w.run(phaseEncode, tasks)
	xq, xk, xv = w.xb[0], w.xb[1], w.xb[2]
	if w.enc[1] == nil {
		xk = xq
	}
	switch {
	case w.enc[2] != nil:
	case same(p.v, p.k):
		xv = xk
	default:
		xv = xq
	}
	w.enc = [3][]float32{} // the caller's tensors are not kept past the call
	return xq, xk, xv
}

// encodeOne writes the bfloat16 bits of x into w.xb[0] (phaseEncode) and returns them; they
// stay valid until the next encoding.
func (w *work) encodeOne(x []float32) []uint16 {
	w.enc = [3][]float32{x}
	w.xb[0] = kernel.Grow(w.xb[0], len(x))
	w.run(phaseEncode, ceilDiv(len(x), encodeChunk))
	w.enc = [3][]float32{}
	return w.xb[0]
}

// encode rounds one chunk of the inputs to bfloat16 (phaseEncode).
func (w *work) encode(task int) {
	for i, x := range w.enc {
		if n := ceilDiv(len(x), encodeChunk); task >= n {
			task -= n
			continue
		}
		j0 := task * encodeChunk
		j1 := min(j0+encodeChunk, len(x))
		kernel.RoundBF16s(w.xb[i][j0:j1], x[j0:j1])
		return
	}
}

// runGemm runs the projection g on the call's workers, with each block of its weights packed
// once for several blocks of rows where that applies (gemm.pack).
func (w *work) runGemm(g proj.Gemm) {
	w.g = g
	w.g.Plan(w.workers())
	w.run(phaseGemm, w.g.Tasks())
}

// run runs phase ph's tasks on the call's workers.
func (w *work) run(ph phase, tasks int) {
	w.phase = ph
	w.l.s.pool.Run(&w.loop, w.workers(), tasks, w)
}

// workers returns the call's worker count and sizes the per-worker scratch for it.
func (w *work) workers() int {
	n := w.p.opt.Workers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	if len(w.ws) < n {
		w.scratch = make([]attend.Scratch, n)
		w.back = make([]attend.BackScratch, n)
		w.ws = make([]kernel.Workspace, n)
		w.wp = make([]proj.Pack, n)
		w.rows = make([][]float32, n)
		w.masked = make([]int, n)
	}
	return n
}

// matrix returns the weight matrix called name, in the precision the layer holds it.
func (l *Layer) matrix(name string) proj.Matrix {
	if h := l.half[name]; h != nil {
		return proj.Matrix{H: h.Data, BF16: h.Format == tensor.BFloat16}
	}
	return proj.Matrix{F: l.param(name)}
}

// projections returns the layer's input projection weights, in the precision the layer holds
// them, and biases (nil without biases): the blocks of in_proj_weight and in_proj_bias, or
// q/k/v_proj_weight.
func (l *Layer) projections() (wq, wk, wv proj.Matrix, bq, bk, bv []float32) {
	e, qd, ekv := l.cfg.EmbedDim, l.cfg.InnerDim(), l.cfg.KVDim()
	wq, wk, wv = l.matrix("q_proj_weight"), l.matrix("k_proj_weight"), l.matrix("v_proj_weight")
	if w := l.matrix("in_proj_weight"); w.Present() {
		wq, wk, wv = w.Slice(0, qd*e), w.Slice(qd*e, (qd+ekv)*e), w.From((qd+ekv)*e)
	}
	if b := l.param("in_proj_bias"); b != nil {
		bq, bk, bv = b[:qd], b[qd:qd+ekv], b[qd+ekv:]
	}
	return wq, wk, wv, bq, bk, bv
}

// splitProjections returns the query, key and value parts of the input projections' gradients,
// looked up by PyTorch name with get: the blocks of in_proj_weight and in_proj_bias, or
// q/k/v_proj_weight, for embed dim e, query width qd and key/value width ekv. Absent tensors
// give nil.
func splitProjections(get func(name string) []float32, e, qd, ekv int) (wq, wk, wv, bq, bk, bv []float32) {
	wq, wk, wv = get("q_proj_weight"), get("k_proj_weight"), get("v_proj_weight")
	if w := get("in_proj_weight"); w != nil {
		wq, wk, wv = w[:qd*e], w[qd*e:(qd+ekv)*e], w[(qd+ekv)*e:]
	}
	if b := get("in_proj_bias"); b != nil {
		bq, bk, bv = b[:qd], b[qd:qd+ekv], b[qd+ekv:]
	}
	return wq, wk, wv, bq, bk, bv
}

// forward computes r.Output (sized by the caller) and the weights, keeping in s (when not nil)
// what Backward needs.
func (w *work) forward(l *Layer, r *Result, s *Saved) {
	p, c, a := &w.p, l.cfg, w.a
	e, qd, ekv, heads := c.EmbedDim, c.InnerDim(), c.KVDim(), c.NumHeads
	w.l, w.s = l, s
	defer func() { w.l = nil }()
	clear(w.masked[:w.workers()])
	bf := p.opt.Compute.bf16()

	// The input projections. Self-attention with stacked weights is one GEMM writing
	// [Q | K | V] side by side; cross-attention is one for Q and one for [K | V] when key and
	// value are the same tensor, else one each.
	tkx := p.tkx
	wq, wk, wv, bq, bk, bv := l.projections()
	inW, inB := l.matrix("in_proj_weight"), l.param("in_proj_bias")
	a.layout(p, qd, ekv, inW.Present())
	// With ComputeBFloat16, Q, K and V are also needed as bfloat16 bits (a.bits, laid out as
	// a.buf). Without rotary or qk-norm each projection task writes its block's bits while the
	// block is in cache (epi); with them the transpose phase writes them after the transform.
	epi := bf && !c.transformsQK()
	var bits, qb, kb, vb []uint16
	if bf {
		a.bits = kernel.Grow(a.bits, len(a.buf))
		a.qb, a.kb, a.vb = view(a.bits, a.qo), view(a.bits, a.ko), view(a.bits, a.vo)
		if epi {
			bits, qb, kb, vb = a.bits, a.qb, a.kb, a.vb
		}
	}
	var xq, xk, xv []uint16
	if bf {
		xq, xk, xv = w.encodeInputs()
	}
	if a.fused {
		w.runGemm(proj.Gemm{X: p.q, LdX: e, XRows: p.tq, K: e, W: inW, LdW: e, Trans: true, Bias: inB, C: a.buf, LdC: a.ldq, CRows: tkx, Rows: p.tq, N: a.ldq, Batches: p.b, BF16: bf, Bits: bits, XB: xq})
	} else {
		w.runGemm(proj.Gemm{X: p.q, LdX: e, XRows: p.tq, K: e, W: wq, LdW: e, Trans: true, Bias: bq, C: a.q, LdC: qd, CRows: p.tq, Rows: p.tq, N: qd, Batches: p.b, BF16: bf, Bits: qb, XB: xq})
		if a.kvFused {
			var bkv []float32
			if inB != nil {
				bkv = inB[qd:]
			}
			w.runGemm(proj.Gemm{X: p.k, LdX: e, XRows: p.tk, K: e, W: inW.From(qd * e), LdW: e, Trans: true, Bias: bkv, C: a.k, LdC: a.ldk, CRows: tkx, Rows: p.tk, N: 2 * ekv, Batches: p.b, BF16: bf, Bits: kb, XB: xk})
		} else {
			for _, g := range [...]proj.Gemm{
				{X: p.k, LdX: c.kdim(), XRows: p.tk, K: c.kdim(), W: wk, LdW: c.kdim(), Trans: true, Bias: bk, C: a.k, LdC: a.ldk, CRows: tkx, Rows: p.tk, N: ekv, Batches: p.b, BF16: bf, Bits: kb, XB: xk},
				{X: p.v, LdX: c.vdim(), XRows: p.tk, K: c.vdim(), W: wv, LdW: c.vdim(), Trans: true, Bias: bv, C: a.v, LdC: a.ldv, CRows: tkx, Rows: p.tk, N: ekv, Batches: p.b, BF16: bf, Bits: vb, XB: xv},
			} {
				w.runGemm(g)
			}
		}
	}
	if tkx > p.tk {
		biasK, biasV := l.param("bias_k"), l.param("bias_v")
		for b := range p.b {
			row := b*tkx + p.tk
			if biasK != nil {
				copy(a.k[row*a.ldk:row*a.ldk+ekv], biasK)
				copy(a.v[row*a.ldv:row*a.ldv+ekv], biasV)
				row++
			}
			if c.AddZeroAttn {
				clear(a.k[row*a.ldk : row*a.ldk+ekv])
				clear(a.v[row*a.ldv : row*a.ldv+ekv])
			}
			if epi { // the appended rows' bits
				proj.EncodeRows(a.kb[(b*tkx+p.tk)*a.ldk:], a.k[(b*tkx+p.tk)*a.ldk:], a.ldk, tkx-p.tk, ekv)
				proj.EncodeRows(a.vb[(b*tkx+p.tk)*a.ldv:], a.v[(b*tkx+p.tk)*a.ldv:], a.ldv, tkx-p.tk, ekv)
			}
		}
	}

	// Kᵀ per K/V head (with rotary: K rotated in place first, and Q per head), then attention
	// per (batch, head, query block). The heads write side by side into the concatenation:
	// their own query columns, which they no longer need, or Saved's own buffer in training,
	// where Backward needs Q.
	// In bfloat16 Kᵀ is not needed: the bfloat16 product reads K's bits as they lie, so the
	// transpose phase only rotates and converts, with rotary, and packs K and V for the
	// kernels where they run (packKV).
	// A sparse layout of low density reads K in place instead (in inference: Backward needs
	// Kᵀ), so that only the rotation is left, with rotary.
	tasks := p.b * c.KVHeads()
	w.kInPlace = s == nil && p.walkedDensity() <= kInPlaceDensity
	w.packKV = bf && kernel.HasBF16()
	switch {
	case !bf && !w.kInPlace:
		a.ldkt = paddedStride(tkx)
		a.kt = kernel.Grow(a.kt, p.b*ekv*a.ldkt)
	case w.packKV:
		w.kvp = slices.Grow(w.kvp[:0], 2*tasks)[:2*tasks]
	case !c.transformsQK(): // bfloat16 with epi, or K read in place: nothing to do
		tasks = 0
	}
	if c.Rotary != nil {
		w.buildRope()
	}
	if c.transformsQK() {
		tasks += p.b * heads
	}
	if c.QKNorm != nil && s != nil {
		// Backward needs each normalised row's input and rstd: the queries' [B, H, Tq] rows, then
		// the keys' [B, Hkv, Tk].
		rows := p.b * (heads*p.tq + c.KVHeads()*tkx)
		s.qkRaw = kernel.Grow(s.qkRaw, rows*c.HeadDim(0))
		s.qkRstd = kernel.Grow(s.qkRstd, rows)
	}
	if n := c.QKNorm; n != nil && n.Across {
		w.normAcross(n.Eps)
	}
	w.run(phaseTranspose, tasks)
	w.out, w.ldo, w.ro, w.lse, w.wh = a.q, a.ldq, a.rq, nil, nil
	// In bfloat16 the output projection rounds the concatenated heads to bfloat16 anyway: the
	// heads write them so, over their own rows of Q's bits, which the attention has just read
	// (so the lines are in cache), unless they are returned or gated in float32.
	w.outb = nil
	if bf && !p.opt.Heads.Keep && !p.gated() && s == nil {
		w.outb = a.qb
	}
	if s != nil {
		s.concat = kernel.Grow(s.concat, p.b*p.tq*qd)
		s.lse = kernel.Grow(s.lse, p.b*heads*p.tq)
		w.out, w.ldo, w.ro, w.lse = s.concat, qd, p.tq, s.lse
		s.dense = p.opt.NeedWeights
	}
	if p.opt.NeedWeights {
		n := p.b * heads * p.tq * tkx
		switch {
		case s != nil:
			s.probs = kernel.Grow(s.probs, n)
			w.wh = s.probs
		case p.opt.PerHeadWeights:
			r.Weights = reuse(r.Weights, n, p.b, heads, p.tq, tkx)
			w.wh = r.Weights.Data
		default:
			w.weights = kernel.Grow(w.weights, n)
			w.wh = w.weights
		}
	}
	w.qBlocks = ceilDiv(p.tq, p.opt.Compute.blockQ())
	nt := p.b * heads * w.qBlocks
	if p.normalized() {
		w.visible, w.zero = slices.Grow(w.visible[:0], nt)[:nt], slices.Grow(w.zero[:0], nt)[:nt]
	}
	w.runQ = runBlocks(p.walkedDensity() <= prefetchDensity, nt, w.workers())
	w.run(phaseAttend, p.b*heads*ceilDiv(w.qBlocks, w.runQ))
	if p.opt.NeedWeights {
		if p.opt.PerHeadWeights {
			r.Weights = reuse(r.Weights, p.b*heads*p.tq*tkx, p.b, heads, p.tq, tkx)
		} else {
			r.Weights = reuse(r.Weights, p.b*p.tq*tkx, p.b, p.tq, tkx)
		}
		// Per-head weights written straight into the result need only the dropout.
		if !p.opt.PerHeadWeights || s != nil || (p.opt.Training && c.Dropout > 0) {
			w.rw = r
			w.run(phaseWeights, p.b*p.tq)
		}
	}

	if p.opt.Heads.Keep {
		r.Heads = reuse(r.Heads, p.b*p.tq*qd, p.b, p.tq, qd)
		for b := range p.b {
			for t := range p.tq {
				copy(r.Heads.Data[(b*p.tq+t)*qd:][:qd], w.out[(b*w.ro+t)*w.ldo:])
			}
		}
	} else {
		r.Heads = nil
	}

	// The output projection reads the concatenated heads in place, or their gated copy.
	x, ldx, xRows := w.out, w.ldo, w.ro
	if p.gated() {
		buf := &w.gated
		if s != nil {
			buf = &s.gated
		}
		*buf = kernel.Grow(*buf, p.b*p.tq*qd)
		applyGate(p, l.offs, w.out, w.ldo, w.ro, *buf, qd, p.tq)
		x, ldx, xRows = *buf, qd, p.tq
	}
	w.runGemm(proj.Gemm{X: x, LdX: ldx, XRows: xRows, K: qd, W: l.matrix("out_proj.weight"), LdW: qd, Trans: true, Bias: l.param("out_proj.bias"), C: r.Output.Data, LdC: e, CRows: p.tq, Rows: p.tq, N: e, Batches: p.b, BF16: bf, XB: w.outb})
	r.FullyMasked = 0
	for _, m := range w.masked {
		r.FullyMasked += m
	}
	if p.normalized() {
		r.ZeroFraction = zeroFractions(r.ZeroFraction, w.visible, w.zero, p.b, heads)
	} else {
		r.ZeroFraction = nil
	}
}

// buildRope fills w.rope with the positions of the call's keys and queries under
// Config.Rotary.
func (w *work) buildRope() {
	r, p := w.l.cfg.Rotary, &w.p
	start, count, k0, q0 := ropeSpan(r.Offset, p.tq, p.tk)
	w.rope.build(r, w.l.ropeDim, start, count)
	w.ropeK0, w.ropeQ0 = k0, q0
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

// walkedDensity is the function walkedDensity for this call, as SDPA decides: an inference
// forward reads K in place at densities up to kInPlaceDensity rather than a Kᵀ written first.
func (p *plan) walkedDensity() float64 {
	return walkedDensity(p.sparse, &p.layouts, p.opt.Compute.bf16(), p.opt.NeedWeights, p.normalized())
}

// transpose runs one task of the transpose phase. The first B·Hkv tasks write Kᵀ of one
// (batch, K/V head g): kt[b, o_g + i, j] = K[b, j, o_g + i] for i < d_g, walking the keys in
// blocks, so that each block's rows of K stay in cache while Kᵀ is written in order; with rotary
// each block is rotated in place first. With rotary, the B·H tasks after them rotate Q of one
// (batch, head) in place. When the attention reads K in place, the first tasks only rotate it.
// In bfloat16 they write no Kᵀ: with rotary they rotate K and write K's and V's bits, and with
// packKV they pack those bits into w.kvp.
func (w *work) transpose(task int) {
	a, c, p := w.a, &w.l.cfg, &w.p
	hkv, tkx, ld, ekv := c.KVHeads(), p.tkx, a.ldkt, c.KVDim()
	bf := p.opt.Compute.bf16()
	if task >= p.b*hkv {
		task -= p.b * hkv
		b, h := task/c.NumHeads, task%c.NumHeads
		off := b*a.rq*a.ldq + w.l.offs[h]
		w.transformQ(b, h, off)
		if bf {
			proj.EncodeRows(view(a.qb, off), view(a.q, off), a.ldq, p.tq, w.l.offs[h+1]-w.l.offs[h])
		}
		return
	}
	b, g := task/hkv, task%hkv
	o, d := w.l.kvOffs[g], w.l.kvOffs[g+1]-w.l.kvOffs[g]
	if w.kInPlace {
		w.transformK(b, g, b*a.rk*a.ldk+o, 0, tkx)
		return
	}
	if bf {
		k, v := b*a.rk*a.ldk+o, b*a.rk*a.ldv+o
		if c.transformsQK() { // without a transform the projections wrote the bits
			w.transformK(b, g, k, 0, tkx)
			proj.EncodeRows(view(a.kb, k), view(a.k, k), a.ldk, tkx, d)
			proj.EncodeRows(view(a.vb, v), view(a.v, v), a.ldv, tkx, d)
		}
		if w.packKV {
			w.kvp[2*task].Pack(true, d, tkx, view(a.kb, k), a.ldk)
			w.kvp[2*task+1].Pack(false, tkx, d, view(a.vb, v), a.ldv)
		}
		return
	}
	dst := a.kt[(b*ekv+o)*ld : (b*ekv+o+d)*ld]
	src := view(a.k, b*a.rk*a.ldk+o)
	const block = 64
	for j0 := 0; j0 < tkx; j0 += block {
		j1 := min(j0+block, tkx)
		w.transformK(b, g, b*a.rk*a.ldk+o, j0, j1)
		kernel.Transpose(dst[j0:], ld, src[j0*a.ldk:], a.ldk, j1-j0, d)
	}
}

// normAcross normalises each position's queries across all heads and its keys across all K/V
// heads (QKNorm.Across), before the heads' tasks read them, keeping in Saved what Backward needs:
// the queries' [B·Tq, H·d] inputs, then the keys' [B·Tk, Hkv·d], and their rstds.
func (w *work) normAcross(eps float64) {
	a, c, p, s := w.a, &w.l.cfg, &w.p, w.s
	qd, ekv := c.InnerDim(), c.KVDim()
	for b := range p.b {
		var qraw, qrstd, kraw, krstd []float32
		if s != nil {
			qraw, qrstd, kraw, krstd = w.acrossSaved(b)
		}
		normHead(view(a.q, b*a.rq*a.ldq), a.ldq, p.tq, w.l.param("q_norm.weight")[:qd], eps, qraw, qrstd)
		normHead(view(a.k, b*a.rk*a.ldk), a.ldk, p.tkx, w.l.param("k_norm.weight")[:ekv], eps, kraw, krstd)
	}
}

// acrossSaved returns, with QKNorm.Across in a training forward, where Saved keeps batch b's
// normalised rows' inputs and rstds, queries then keys.
func (w *work) acrossSaved(b int) (qraw, qrstd, kraw, krstd []float32) {
	s, p, c := w.s, &w.p, &w.l.cfg
	qd, ekv := c.InnerDim(), c.KVDim()
	kRows := p.b * p.tq // the keys' rows follow every query row
	qraw, qrstd = s.qkRaw[b*p.tq*qd:(b+1)*p.tq*qd], s.qkRstd[b*p.tq:(b+1)*p.tq]
	kraw = s.qkRaw[kRows*qd+b*p.tkx*ekv:][:p.tkx*ekv]
	krstd = s.qkRstd[kRows+b*p.tkx:][:p.tkx]
	return
}

// transformQ normalises (Config.QKNorm, per head) and rotates (Config.Rotary) the queries of
// batch b, head h, which start at off in Q, keeping in Saved what Backward needs.
func (w *work) transformQ(b, h, off int) {
	a, c, p := w.a, &w.l.cfg, &w.p
	x := view(a.q, off)
	if n := c.QKNorm; n != nil && !n.Across {
		raw, rstd := w.qkSaved(b*c.NumHeads+h, p.tq)
		normHead(x, a.ldq, p.tq, w.l.param("q_norm.weight"), n.Eps, raw, rstd)
	}
	if c.Rotary != nil {
		w.rope.rotate(x, a.ldq, p.tq, w.ropeQ0, false)
	}
}

// transformK normalises and rotates keys j0 … j1 − 1 of batch b, K/V head g, whose key 0
// starts at off in K, as transformQ does queries.
func (w *work) transformK(b, g, off, j0, j1 int) {
	a, c, p := w.a, &w.l.cfg, &w.p
	x := view(a.k, off+j0*a.ldk)
	if n := c.QKNorm; n != nil && !n.Across {
		raw, rstd := w.qkSaved(p.b*c.NumHeads+b*c.KVHeads()+g, p.tkx)
		if raw != nil {
			raw, rstd = raw[j0*c.HeadDim(0):], rstd[j0:]
		}
		normHead(x, a.ldk, j1-j0, w.l.param("k_norm.weight"), n.Eps, raw, rstd)
	}
	if c.Rotary != nil {
		w.rope.rotate(x, a.ldk, j1-j0, w.ropeK0+j0, false)
	}
}

// qkSaved returns, in a training forward with Config.QKNorm, where Saved keeps the inputs and
// rstds of the n rows of block i: block b·H + h holds the queries of batch b, head h, and
// block B·H + b·Hkv + g the keys of batch b, K/V head g. It returns nil, nil otherwise.
func (w *work) qkSaved(i, n int) (raw, rstd []float32) {
	s, p := w.s, &w.p
	if s == nil {
		return nil, nil
	}
	heads := w.l.cfg.NumHeads
	row := i * p.tq // the rows of the blocks before i: Tq each, then Tk each
	if q := p.b * heads; i >= q {
		row = q*p.tq + (i-q)*p.tkx
	}
	d := w.l.cfg.HeadDim(0)
	return s.qkRaw[row*d : (row+n)*d], s.qkRstd[row : row+n]
}

// head returns the operands of batch b, head h, with the output written to (or read from) the
// concatenation w.out.
func (w *work) head(b, h int) attend.Head[float32] {
	a, p, offs := w.a, &w.p, w.l.offs
	o, d := offs[h], offs[h+1]-offs[h]
	ko, ekv := w.l.kvOffs[w.l.cfg.KVHead(h)], w.l.cfg.KVDim()
	hd := attend.Head[float32]{
		Q: view(a.q, b*a.rq*a.ldq+o), LdQ: a.ldq,
		K: view(a.k, b*a.rk*a.ldk+ko), LdK: a.ldk,
		Kt: view(a.kt, (b*ekv+ko)*a.ldkt), LdKt: a.ldkt,
		V: view(a.v, b*a.rk*a.ldv+ko), LdV: a.ldv,
		Out: view(w.out, b*w.ro*w.ldo+o), LdOut: w.ldo,
		Tq: p.tq, Tk: p.tkx, D: d, Dv: d,
	}
	if p.opt.Compute.bf16() {
		hd.Qb, hd.Kb, hd.Vb = view(a.qb, b*a.rq*a.ldq+o), view(a.kb, b*a.rk*a.ldk+ko), view(a.vb, b*a.rk*a.ldv+ko)
		if w.packKV {
			kv := b*w.l.cfg.KVHeads() + w.l.cfg.KVHead(h)
			hd.Kp, hd.Vp = &w.kvp[2*kv], &w.kvp[2*kv+1]
		}
	}
	if w.kInPlace {
		hd.Kt, hd.LdKt = nil, 0
	}
	if w.outb != nil {
		hd.OutB = view(w.outb, b*w.ro*w.ldo+o)
	}
	return hd
}

// attend runs one task: a run of w.runQ query blocks of one (batch, head).
func (w *work) attend(worker, task int) {
	bh, blk0, blk1 := blockRun(task, w.qBlocks, w.runQ)
	for blk := blk0; blk < blk1; blk++ {
		w.attendBlock(worker, bh, blk, blk+1 < blk1)
	}
}

// attendBlock runs query block blk of (batch, head) bh, prefetching for the next block when
// ahead.
func (w *work) attendBlock(worker, bh, blk int, ahead bool) {
	p, heads, tkx := &w.p, w.l.cfg.NumHeads, w.p.tkx
	task := bh*w.qBlocks + blk
	b, h := bh/heads, bh%heads
	bq := p.opt.Compute.blockQ()
	i0 := blk * bq
	i1 := min(i0+bq, p.tq)
	hd := w.head(b, h)
	bias := p.bias(b, h, heads)
	var wts, lse []float32
	if w.wh != nil {
		wts = w.wh[(bh*p.tq+i0)*tkx : (bh*p.tq+i1)*tkx]
	}
	if w.lse != nil {
		lse = w.lse[bh*p.tq+i0 : bh*p.tq+i1]
	}
	sc := &w.scratch[worker]
	if ahead {
		sc.Prefetch(&hd, &bias, i1, min(i1+bq, p.tq))
	}
	w.masked[worker] += attend.Tiled(&hd, &bias, float32(p.scale(w.l.cfg, h)), p.dropout(b, h, heads, w.l.cfg.Dropout), i0, i1, wts, lse, sc)
	if p.normalized() {
		w.visible[task], w.zero[task], sc.Visible, sc.Zero = sc.Visible, sc.Zero, 0, 0
	}
}

// finishWeights writes one (batch, query) row of the returned weights from the per-head
// weights the attention left before dropout: per head with dropout applied, or averaged over
// the heads.
func (w *work) finishWeights(worker, task int) {
	p, heads := &w.p, w.l.cfg.NumHeads
	b, i, tkx := task/p.tq, task%p.tq, p.tkx
	var avg []float32
	if !p.opt.PerHeadWeights {
		avg = w.rw.Weights.Data[task*tkx : (task+1)*tkx]
		clear(avg)
		w.rows[worker] = kernel.Grow(w.rows[worker], tkx)
	}
	for h := range heads {
		off := ((b*heads+h)*p.tq + i) * tkx
		src, dst := w.wh[off:off+tkx], w.rows[worker]
		if avg == nil {
			dst = w.rw.Weights.Data[off : off+tkx]
		}
		copy(dst, src) // a no-op when the heads wrote into the result
		if drop := p.dropout(b, h, heads, w.l.cfg.Dropout); drop != nil {
			drop.Apply(i, 0, dst)
		}
		if avg != nil {
			kernel.Axpy(1, dst, avg)
		}
	}
	if avg != nil {
		kernel.Sscal(1/float32(heads), avg)
	}
}

// wgrad is one parallel weight gradient of a projection Y = X·Wᵀ + b: it adds Σ_batches
// dYᵀ·X to dW [n, k] and the column sums of dY to db (when not nil), over the first rows rows of
// every batch. Each task owns a block of dW, so the sums run in a fixed order.
type wgrad struct {
	dy         []float32
	ldy, yRows int
	x          []float32
	ldx, xRows int
	dw, db     []float32
	rows, n, k int
	batches    int
}

// tasks returns the number of dW blocks, or 0 when there are no rows to sum over (an empty batch
// or sequence adds nothing).
func (g *wgrad) tasks() int {
	if g.rows == 0 || g.batches == 0 {
		return 0
	}
	return ceilDiv(g.n, proj.Rows) * ceilDiv(g.k, proj.Cols)
}

func (g *wgrad) do(ws *kernel.Workspace, task int) {
	colBlocks := ceilDiv(g.k, proj.Cols)
	n0, k0 := task/colBlocks*proj.Rows, task%colBlocks*proj.Cols
	nn, kk := min(proj.Rows, g.n-n0), min(proj.Cols, g.k-k0)
	for b := range g.batches {
		dy := g.dy[b*g.yRows*g.ldy+n0:]
		if g.dw != nil {
			ws.Sgemm(true, false, nn, kk, g.rows, 1, dy, g.ldy, g.x[b*g.xRows*g.ldx+k0:], g.ldx, 1, g.dw[n0*g.k+k0:], g.k, nil)
		}
		if g.db != nil && k0 == 0 {
			for r := range g.rows {
				kernel.Axpy(1, dy[r*g.ldy:r*g.ldy+nn], g.db[n0:n0+nn])
			}
		}
	}
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0 and b > 0, without overflow when b is near math.MaxInt.
func ceilDiv(a, b int) int {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
