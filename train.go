package mha

import (
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/proj"
	"github.com/mhalab/mha/tensor"
)

// Saved is what ForwardTrain keeps for Backward: the projections Q, K, V and Kᵀ, the
// concatenated head outputs, each row's log-sum-exp, and, when the forward returned weights,
// every head's weights before dropout. That is O(T·E) memory, plus B·H·Tq·Tk with weights.
// The zero value is ready to use; reuse one across steps to avoid allocation. A Saved holds one
// forward at a time: each forward whose backward is pending needs its own.
type Saved struct {
	l      *Layer // the layer that filled it; nil until then
	p      plan
	a      acts
	concat []float32 // [B, Tq, H·d] head outputs side by side
	gated  []float32 // [B, Tq, H·d] the concatenation after Options.Heads' Gate and Shift, when given
	lse    []float32 // [B, H, Tq] row log-sum-exp of the scaled, biased scores
	probs  []float32 // [B, H, Tq, Tkx] weights before dropout, when dense
	dense  bool      // the forward kept the weights: Backward uses them
	// With Config.QKNorm, the normalised rows' inputs [rows, d] and rstds [rows]: the queries'
	// rows [B, H, Tq], then the keys' [B, Hkv, Tk] (work.qkSaved); with QKNorm.Across, rows of
	// every head's values, [B·Tq, H·d] then [B·Tk, Hkv·d] (work.acrossSaved).
	qkRaw, qkRstd []float32
}

// ForwardTrain is ForwardInto that also keeps in s what Backward needs. The inputs and the
// layer's parameters must not change until Backward returns. Errors are as for Forward; after
// one, s holds nothing Backward accepts.
func (l *Layer) ForwardTrain(r *Result, s *Saved, query, key, value *tensor.Tensor, opt *Options) error {
	return l.forward(r, s, query, key, value, opt)
}

// Grads receives the gradients of a loss. Backward adds into it, as PyTorch accumulates into
// .grad, so one Grads can sum the gradients of several batches; Zero clears it.
type Grads struct {
	// Query is dL/dquery [B, Tq, E]. For self-attention (key and value nil, or both the query
	// itself) it is the whole gradient with respect to the input, and Key and Value stay nil.
	Query *tensor.Tensor
	// Key and Value are dL/dkey [B, Tk, kdim] and dL/dvalue [B, Tk, vdim] of cross-attention.
	// When key and value are one tensor, its gradient is their sum.
	Key, Value *tensor.Tensor
	// Params are the gradients of the layer's parameters, with the names, shapes and order of
	// Parameters (PyTorch's: in_proj_weight, in_proj_bias, …). The T of a weight the layer holds
	// in half precision (LoadHalfStateDict) may be nil: Backward then computes no gradient for
	// it, and the gradients of the inputs, the gate and the other parameters all the same.
	Params []Param
	// Gate is dL/dGate [B, H] ([H] unbatched) when the forward had Options.Heads.Gate; it stays
	// nil otherwise.
	Gate *tensor.Tensor
	// HeadsIn is an input, not a result: when not nil it is a gradient dL/dHeads [B, Tq, H·d] of
	// a loss on the head outputs (Result.Heads), added to what flows back from gradOutput.
	// Backward leaves it unchanged.
	HeadsIn *tensor.Tensor
}

// Zero sets every gradient in g to 0.
func (g *Grads) Zero() {
	for _, t := range []*tensor.Tensor{g.Query, g.Key, g.Value, g.Gate} {
		if t != nil {
			clear(t.Data)
		}
	}
	for _, p := range g.Params {
		if p.T != nil {
			clear(p.T.Data)
		}
	}
}

// Backward adds to g the gradients of a loss L with respect to the layer's parameters and
// inputs, given gradOutput = dL/dOutput [B, Tq, E] ([Tq, E] unbatched) of the ForwardTrain
// that filled s. A nil tensor in g (or nil g.Params) is first allocated with zeros.
//
// When that forward returned weights, Backward reads the saved weights (the dense backward);
// otherwise it recomputes them tile by tile from the saved row log-sum-exp, the backward of
// FlashAttention-2, in O(T·E) memory. Dropout replays the forward's mask. Rows whose keys were
// all masked add nothing: their gradients are 0, never NaN. An empty batch or query sequence
// (B = 0 or Tq = 0) adds nothing at all, and the input gradients it allocates are empty or zero.
//
// It returns an error wrapping ErrShape when g is nil, gradOutput or a tensor in g does not fit,
// or s was not filled by this layer's ForwardTrain.
func (l *Layer) Backward(g *Grads, s *Saved, gradOutput *tensor.Tensor) error {
	if g == nil {
		return fmt.Errorf("%w: Backward into nil Grads, want a Grads to add into", ErrShape)
	}
	if s == nil || s.l != l {
		return fmt.Errorf("%w: Backward needs the Saved of a ForwardTrain of this layer", ErrShape)
	}
	p, e := &s.p, l.cfg.EmbedDim
	if gradOutput == nil || !p.fits(gradOutput.Shape, p.tq, e) || len(gradOutput.Data) != p.b*p.tq*e {
		got := "nil"
		if gradOutput != nil {
			got = fmt.Sprint(gradOutput.Shape)
		}
		return fmt.Errorf("%w: gradOutput is %s, want %v like the output", ErrShape, got, p.shape(p.tq, e))
	}
	if err := l.prepare(g, p); err != nil {
		return err
	}
	w := l.getWork()
	defer l.putWork(w)
	w.p, w.a, w.s, w.l, w.dy, w.gr = *p, &s.a, s, l, gradOutput.Data, g
	defer func() { w.l = nil }()
	w.backwardLayer()
	return nil
}

// prepare allocates g's missing tensors for a call of plan p and checks the present ones.
func (l *Layer) prepare(g *Grads, p *plan) error {
	c := l.cfg
	check := func(t **tensor.Tensor, name string, rows, cols int) error {
		if *t == nil {
			*t = tensor.New(p.shape(rows, cols)...)
			return nil
		}
		if !p.fits((*t).Shape, rows, cols) || len((*t).Data) != rows*cols*p.b {
			return fmt.Errorf("%w: Grads.%s is %v, want %v", ErrShape, name, (*t).Shape, p.shape(rows, cols))
		}
		return nil
	}
	if err := check(&g.Query, "Query", p.tq, c.EmbedDim); err != nil {
		return err
	}
	if h := g.HeadsIn; h != nil && (!p.fits(h.Shape, p.tq, c.InnerDim()) || len(h.Data) != p.b*p.tq*c.InnerDim()) {
		return fmt.Errorf("%w: Grads.HeadsIn is %v, want %v like Result.Heads", ErrShape, h.Shape, p.shape(p.tq, c.InnerDim()))
	}
	if gate := p.opt.Heads.Gate; gate != nil {
		if g.Gate == nil {
			g.Gate = tensor.New(gate.Shape...)
		} else if !slices.Equal(g.Gate.Shape, gate.Shape) || len(g.Gate.Data) != len(gate.Data) {
			return fmt.Errorf("%w: Grads.Gate is %v, want %v like Options.Heads.Gate", ErrShape, g.Gate.Shape, gate.Shape)
		}
	}
	if !p.self {
		if err := check(&g.Key, "Key", p.tk, c.kdim()); err != nil {
			return err
		}
		if err := check(&g.Value, "Value", p.tk, c.vdim()); err != nil {
			return err
		}
	}
	if g.Params == nil {
		for i, q := range l.params {
			g.Params = append(g.Params, Param{q.Name, tensor.New(l.shapes[i]...)})
		}
		return nil
	}
	if len(g.Params) != len(l.params) {
		return fmt.Errorf("%w: Grads.Params has %d tensors, want %d (%s)", ErrShape, len(g.Params), len(l.params), l.describe())
	}
	for i, q := range l.params {
		gp := g.Params[i]
		if gp.Name == q.Name && gp.T == nil && l.half[q.Name] != nil {
			continue // a half-precision weight whose gradient the caller does not want
		}
		if n, _ := tensor.NumElements(l.shapes[i]); gp.Name != q.Name || gp.T == nil || !slices.Equal(gp.T.Shape, l.shapes[i]) || len(gp.T.Data) != n {
			return fmt.Errorf("%w: Grads.Params[%d] is %s %v, want %s %v", ErrShape, i, gp.Name, shapeOf(gp.T), q.Name, l.shapes[i])
		}
	}
	return nil
}

// shape returns the shape of a [B, rows, cols] tensor of the call ([rows, cols] unbatched).
func (p *plan) shape(rows, cols int) []int {
	if p.unbatched {
		return []int{rows, cols}
	}
	return []int{p.b, rows, cols}
}

// fits reports whether s is p.shape(rows, cols), without building it.
func (p *plan) fits(s []int, rows, cols int) bool {
	if p.unbatched {
		return len(s) == 2 && s[0] == rows && s[1] == cols
	}
	return len(s) == 3 && s[0] == p.b && s[1] == rows && s[2] == cols
}

func shapeOf(t *tensor.Tensor) any {
	if t == nil {
		return "nil"
	}
	return t.Shape
}

// grad returns the gradient of the parameter called name, or nil when the layer has none or the
// caller wants none (a half-precision weight's nil T).
func (w *work) grad(name string) []float32 {
	for i, p := range w.l.params {
		if p.Name == name && w.gr.Params[i].T != nil {
			return w.gr.Params[i].T.Data
		}
	}
	return nil
}

// backwardLayer runs the layer's backward pass, in the reverse order of forward.
func (w *work) backwardLayer() {
	l, p, a, s := w.l, &w.p, w.a, w.s
	c := l.cfg
	e, qd, ekv, tkx := c.EmbedDim, c.InnerDim(), c.KVDim(), p.tkx
	w.workers()

	// The output projection Y = concat'·W_oᵀ + b_o of the (gated) heads: dW_o += dYᵀ·concat',
	// db_o += Σ dY, and dconcat' = dY·W_o.
	x := s.concat
	if p.gated() {
		x = s.gated
	}
	w.wg = wgrad{dy: w.dy, ldy: e, yRows: p.tq, x: x, ldx: qd, xRows: p.tq, dw: w.grad("out_proj.weight"), db: w.grad("out_proj.bias"), rows: p.tq, n: e, k: qd, batches: p.b}
	w.run(phaseWgrad, w.wg.tasks())
	w.dconcat = kernel.Grow(w.dconcat, p.b*p.tq*qd)
	w.runGemm(proj.Gemm{X: w.dy, LdX: e, XRows: p.tq, K: e, W: l.matrix("out_proj.weight"), LdW: qd, C: w.dconcat, LdC: qd, CRows: p.tq, Rows: p.tq, N: qd, Batches: p.b})
	w.gateBackward()

	// Attention, per (batch, K/V head): the gradients of Q, K and V land in dbuf, laid out as
	// the projections are in acts.buf. With rotary they are the gradients of the rotated Q and
	// K, which each task turns back by the inverse rotation.
	w.dbuf = kernel.Grow(w.dbuf, len(a.buf))
	clear(w.dbuf)
	w.out, w.ldo, w.ro = s.concat, qd, p.tq
	if c.Rotary != nil {
		w.buildRope()
	}
	if p.sinks != nil {
		w.dsink = kernel.Grow(w.dsink, p.b*c.NumHeads)
	}
	if c.QKNorm != nil {
		w.dnorm = kernel.Grow(w.dnorm, max(p.b*c.KVHeads()*4*c.HeadDim(0), 4*max(qd, c.KVDim())))
	}
	w.run(phaseBackward, p.b*c.KVHeads())
	if n := c.QKNorm; n != nil && n.Across {
		w.normAcrossGrad()
	} else if n != nil {
		// Each (batch, K/V head) task left its part of the gains' gradients; they are summed in
		// task order.
		d, gq, gk := c.HeadDim(0), w.grad("q_norm.weight"), w.grad("k_norm.weight")
		for t := range p.b * c.KVHeads() {
			if gq != nil {
				kernel.Axpy(1, w.dnorm[4*t*d:][:d], gq)
			}
			if gk != nil {
				kernel.Axpy(1, w.dnorm[(4*t+1)*d:][:d], gk)
			}
		}
	}
	if g := w.grad("sinks"); g != nil {
		// Each (batch, head) task left its part; they are summed in batch order.
		for b := range p.b {
			kernel.Axpy(1, w.dsink[b*c.NumHeads:(b+1)*c.NumHeads], g)
		}
	}
	dq, dk, dv := a.split(w.dbuf)

	// The appended rows: bias_k and bias_v get their rows' gradients; the zero rows are constant.
	if gk := w.grad("bias_k"); gk != nil {
		gv := w.grad("bias_v")
		for b := range p.b {
			row := b*tkx + p.tk
			kernel.Axpy(1, dk[row*a.ldk:row*a.ldk+ekv], gk)
			kernel.Axpy(1, dv[row*a.ldv:row*a.ldv+ekv], gv)
		}
	}

	// The input projections X·Wᵀ + b: dW += dProjᵀ·X, db += Σ dProj, dX += dProj·W.
	wq, wk, wv, _, _, _ := l.projections()
	if a.fused {
		w.project(w.dbuf, a.ldq, tkx, p.q, e, p.tq, l.matrix("in_proj_weight"), w.grad("in_proj_weight"), w.grad("in_proj_bias"), w.gr.Query.Data, a.ldq)
		return
	}
	gq, gk, gv, bq, bk, bv := splitProjections(w.grad, e, qd, ekv)
	w.project(dq, a.ldq, a.rq, p.q, e, p.tq, wq, gq, bq, w.gr.Query.Data, qd)
	w.project(dk, a.ldk, a.rk, p.k, c.kdim(), p.tk, wk, gk, bk, w.gr.Key.Data, ekv)
	w.project(dv, a.ldv, a.rk, p.v, c.vdim(), p.tk, wv, gv, bv, w.gr.Value.Data, ekv)
}

// gateBackward turns dconcat' = dL/dconcat' into dL/dconcat, the gradient of the heads' own
// outputs: it adds dL/dGate[b, h] = Σ_t head_h[b, t]·dconcat'_h[b, t] to the Grads, scales
// each head's block by its gate, and adds Grads.HeadsIn.
func (w *work) gateBackward() {
	p, offs, qd := &w.p, w.l.offs, w.l.cfg.InnerDim()
	heads := len(offs) - 1
	if gate := p.opt.Heads.Gate; gate != nil {
		dg := w.gr.Gate.Data
		for b := range p.b {
			for t := range p.tq {
				row := (b*p.tq + t) * qd
				for h := range heads {
					cols := row + offs[h]
					n := offs[h+1] - offs[h]
					dc := w.dconcat[cols : cols+n]
					dg[b*heads+h] += kernel.Dot(w.s.concat[cols:cols+n], dc)
					kernel.Sscal(gate.Data[b*heads+h], dc)
				}
			}
		}
	}
	if in := w.gr.HeadsIn; in != nil {
		kernel.Axpy(1, in.Data, w.dconcat[:len(in.Data)])
	}
}

// project is the backward of one input projection Y = X·Wᵀ + b, for X [B, rows, in] and W
// [n, in]: it adds dYᵀ·X to dW, Σ dY to db (when not nil) and dY·W to dX. dY's rows are
// strided by ldy, with yRows rows per batch of which the first rows count.
func (w *work) project(dy []float32, ldy, yRows int, x []float32, in, rows int, wt proj.Matrix, dw, db, dx []float32, n int) {
	b := w.p.b
	w.wg = wgrad{dy: dy, ldy: ldy, yRows: yRows, x: x, ldx: in, xRows: rows, dw: dw, db: db, rows: rows, n: n, k: in, batches: b}
	w.run(phaseWgrad, w.wg.tasks())
	w.runGemm(proj.Gemm{X: dy, LdX: ldy, XRows: yRows, K: n, W: wt, LdW: in, Beta: 1, C: dx, LdC: in, CRows: rows, Rows: rows, N: in, Batches: b})
}

// backward runs the attention backward of one (batch, K/V head) task: of each query head of the
// group in turn, which all add into the K/V head's dK and dV.
func (w *work) backward(worker, task int) {
	p, a, s, c := &w.p, w.a, w.s, &w.l.cfg
	heads, hkv, qd := c.NumHeads, c.KVHeads(), c.InnerDim()
	b, g := task/hkv, task%hkv
	ko := w.l.kvOffs[g]
	dq, dk, dv := a.split(w.dbuf)
	dkh := view(dk, b*a.rk*a.ldk+ko)
	group := heads / hkv
	var dnorm []float32 // [dw of q_norm | dw of k_norm | scratch of 2d]
	if n := c.QKNorm; n != nil && !n.Across {
		d := c.HeadDim(0)
		dnorm = w.dnorm[4*task*d : 4*(task+1)*d]
		clear(dnorm[:2*d])
	}
	for h := g * group; h < (g+1)*group; h++ {
		o, bh := w.l.offs[h], b*heads+h
		hd := w.head(b, h)
		gr := attend.Grad{
			DQ: view(dq, b*a.rq*a.ldq+o), LdDQ: a.ldq,
			DK: dkh, LdDK: a.ldk,
			DV: view(dv, b*a.rk*a.ldv+ko), LdDV: a.ldv,
		}
		bias := p.bias(b, h, heads)
		var probs []float32
		if s.dense {
			n := p.tq * p.tkx
			probs = s.probs[bh*n : (bh+1)*n]
		}
		dOut, lse := view(w.dconcat, b*p.tq*qd+o), s.lse[bh*p.tq:(bh+1)*p.tq]
		attend.Backward(&hd, &gr, dOut, qd, lse, &bias, float32(p.scale(*c, h)), p.dropout(b, h, heads, c.Dropout), probs, &w.back[worker])
		if p.sinks != nil {
			// The sink's weight in row i is exp(sink − lse_i) and its value 0, so
			// dL/dsink = −Σ_i exp(sink − lse_i)·D_i with D_i = dOut_i·Out_i.
			sum, d := 0.0, hd.D
			for i := range p.tq {
				di := kernel.Dot(dOut[i*qd:i*qd+d], s.concat[(b*p.tq+i)*qd+o:][:d])
				sum -= math.Exp(bias.Sink-float64(lse[i])) * float64(di)
			}
			w.dsink[bh] = float32(sum)
		}
		if c.Rotary != nil {
			w.rope.rotate(gr.DQ, a.ldq, p.tq, w.ropeQ0, true)
		}
		if dnorm != nil {
			raw, rstd := w.qkSaved(bh, p.tq)
			normHeadGrad(gr.DQ, a.ldq, p.tq, w.l.param("q_norm.weight"), raw, rstd, dnorm[:hd.D], dnorm[2*hd.D:])
		}
	}
	if c.Rotary != nil {
		w.rope.rotate(dkh, a.ldk, p.tk, w.ropeK0, true)
	}
	if dnorm != nil {
		d := c.HeadDim(0)
		raw, rstd := w.qkSaved(p.b*heads+task, p.tk)
		normHeadGrad(dkh, a.ldk, p.tk, w.l.param("k_norm.weight"), raw, rstd, dnorm[d:2*d], dnorm[2*d:])
	}
}

// normAcrossGrad is normAcross's backward, once every head's task has left its queries' and
// keys' gradients (rotated back) in dq and dk: batch by batch, each position's gradient of its
// normalised row becomes its input's, and the gains' gradients add up in batch order.
func (w *work) normAcrossGrad() {
	a, c, p := w.a, &w.l.cfg, &w.p
	qd, ekv := c.InnerDim(), c.KVDim()
	dq, dk, _ := a.split(w.dbuf)
	gains := w.dnorm[:qd+ekv] // the gains' gradients when the layer keeps none
	scratch := w.dnorm[qd+ekv:][:2*max(qd, ekv)]
	gq, gk := w.grad("q_norm.weight"), w.grad("k_norm.weight")
	if gq == nil {
		gq = gains[:qd]
	}
	if gk == nil {
		gk = gains[qd:]
	}
	for b := range p.b {
		qraw, qrstd, kraw, krstd := w.acrossSaved(b)
		normHeadGrad(view(dq, b*a.rq*a.ldq), a.ldq, p.tq, w.l.param("q_norm.weight")[:qd], qraw, qrstd, gq, scratch)
		normHeadGrad(view(dk, b*a.rk*a.ldk), a.ldk, p.tk, w.l.param("k_norm.weight")[:ekv], kraw, krstd, gk, scratch)
	}
}
