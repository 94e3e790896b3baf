package mha

import (
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// SDPAGrads receives SDPA's gradients.
type SDPAGrads struct {
	// Q [B, Hq, Tq, D], K [B, Hkv, Tk, D] and V [B, Hkv, Tk, Dv] are the gradients of the loss
	// with respect to q, k and v (the tensors given, before any rotary); those of a K/V head
	// sum over the query heads that read it.
	Q, K, V *tensor.Tensor
	// Sinks is [Hq], the gradient with respect to SDPAOptions.Sinks when they were given, else
	// nil.
	Sinks []float32
	// Slopes is [Hq], the gradient with respect to the ALiBi slopes when SDPAOptions.ALiBi and
	// SlopeGrad are set, else nil.
	Slopes []float64
}

// SDPABackward returns the gradients of a loss with respect to SDPA's inputs, given dOut
// [B, Hq, Tq, Dv], the loss's gradient with respect to the output. q, k, v and opt must be the
// forward's, and r its result, run with NeedLSE: the backward recomputes the weights tile by tile
// from r.LSE (FlashAttention-2), or reads r.Weights when the forward returned them (and had no
// dropout: the weights it returns are after dropout, the backward needs them before). With a
// Normalizer, r.LSE is not needed: without r.Weights the backward recomputes the normalized
// rows, a block of 64 queries at a time. A row whose
// keys were all masked adds nothing. It returns an error wrapping ErrShape when a tensor or
// option does not fit the others or r lacks Out or LSE.
func SDPABackward(q, k, v *tensor.Tensor, r *SDPAResult, dOut *tensor.Tensor, opt *SDPAOptions) (*SDPAGrads, error) {
	c := NewSDPAContext()
	g := new(SDPAGrads)
	err := c.SDPABackwardInto(g, q, k, v, r, dOut, opt)
	if c.pool != nil {
		c.pool.Close()
	}
	if err != nil {
		return nil, err
	}
	return g, nil
}

// SDPABackwardInto is SDPABackward writing into g, reusing its tensors' storage when it is large
// enough, so that calls with the same g make no heap allocation in steady state. The result has
// the same bits for any number of workers: each task owns one (batch, K/V head) and runs its query
// heads in order. It returns SDPABackward's errors, and one wrapping ErrShape when g is nil; on
// error g is left as it was.
func (c *SDPAContext) SDPABackwardInto(g *SDPAGrads, q, k, v *tensor.Tensor, r *SDPAResult, dOut *tensor.Tensor, opt *SDPAOptions) error {
	if g == nil {
		return fmt.Errorf("%w: gradients are nil, want an SDPAGrads to write into", ErrShape)
	}
	w, pool := c.get()
	defer c.put(w)
	p := &w.p
	if err := p.check(q, k, v, opt, &w.slopes); err != nil {
		return err
	}
	if p.opt.Compute == ComputeBFloat16 {
		return fmt.Errorf("%w: SDPABackward after a bfloat16 forward: the backward is float32 only, run the forward with ComputeFloat32", ErrUnsupported)
	}
	if err := p.checkBackward(r, dOut); err != nil {
		return err
	}
	g.Q = reuse(g.Q, len(p.q), p.b, p.hq, p.tq, p.d)
	g.K = reuse(g.K, len(p.k), p.b, p.hkv, p.tk, p.d)
	g.V = reuse(g.V, len(p.v), p.b, p.hkv, p.tk, p.dv)
	clear(g.Q.Data)
	clear(g.K.Data)
	clear(g.V.Data)
	bh := p.b * p.hq
	w.dsink = slices.Grow(w.dsink[:0], bh)[:bh]
	w.dslope = slices.Grow(w.dslope[:0], bh)[:bh]
	clear(w.dsink)
	clear(w.dslope)
	w.r, w.g, w.dOut = r, g, dOut.Data

	n := p.opt.Workers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	n = min(n, max(1, p.b*p.hkv, p.b*p.hq))
	if len(w.back) < n {
		w.back = make([]attend.BackScratch, n)
	}
	w.prepare(pool, n, true)
	w.phase = 2
	pool.Run(&w.loop, n, p.b*p.hkv, w)

	if p.opt.Sinks != nil {
		g.Sinks = sumHeads(g.Sinks, w.dsink, p.hq)
	} else {
		g.Sinks = nil
	}
	if p.opt.ALiBi && p.opt.SlopeGrad {
		g.Slopes = sumHeads(g.Slopes, w.dslope, p.hq)
	} else {
		g.Slopes = nil
	}
	return nil
}

// sumHeads returns dst, resized to hq, holding the sum over the batch of per [B, hq] in order.
func sumHeads[F float32 | float64](dst []F, per []float64, hq int) []F {
	dst = slices.Grow(dst[:0], hq)[:hq]
	for h := range hq {
		s := 0.0
		for b := h; b < len(per); b += hq {
			s += per[b]
		}
		dst[h] = F(s)
	}
	return dst
}

// checkBackward checks the forward's result r and dOut against plan p.
func (p *sdpaPlan) checkBackward(r *SDPAResult, dOut *tensor.Tensor) error {
	switch {
	case r == nil || r.Out == nil:
		return fmt.Errorf("%w: the forward's result has no Out, want the SDPAResult of the same call", ErrShape)
	case r.LSE == nil && !p.normalized():
		return fmt.Errorf("%w: the forward's result has no LSE: run SDPA with NeedLSE for the backward", ErrShape)
	case dOut == nil:
		return fmt.Errorf("%w: dOut is nil, want a tensor [%d %d %d %d]", ErrShape, p.b, p.hq, p.tq, p.dv)
	}
	if err := checkShape("the forward's Out", r.Out, p.b, p.hq, p.tq, p.dv); err != nil {
		return err
	}
	if r.LSE != nil {
		if err := checkShape("the forward's LSE", r.LSE, p.b, p.hq, p.tq); err != nil {
			return err
		}
	}
	if err := checkShape("dOut", dOut, p.b, p.hq, p.tq, p.dv); err != nil {
		return err
	}
	if r.Weights != nil {
		return checkShape("the forward's Weights", r.Weights, p.b, p.hq, p.tq, p.tk)
	}
	return nil
}

// checkShape reports an error unless t is a consistent tensor of the given shape.
func checkShape(name string, t *tensor.Tensor, shape ...int) error {
	if err := checkData(name, t.Shape, len(t.Data)); err != nil {
		return err
	}
	if !slices.Equal(t.Shape, shape) {
		return fmt.Errorf("%w: %s is %v, want %v", ErrShape, name, t.Shape, slices.Clone(shape))
	}
	return nil
}

// backward runs one (batch, K/V head) task of the backward: the query heads that read it, in
// order, then the inverse rotation of the gradients with rotary.
func (w *sdpaWork) backward(worker, task int) {
	p, g := &w.p, w.g
	b, kh := task/p.hkv, task%p.hkv
	group := p.hq / p.hkv
	k := p.k
	if w.krot != nil {
		k = w.krot
	}
	for h := kh * group; h < (kh+1)*group; h++ {
		bh := b*p.hq + h
		hd := attend.Head[float32]{
			Q: view(w.q, bh*p.tq*p.d), LdQ: p.d,
			K: view(k, task*p.tk*p.d), LdK: p.d,
			Kt: view(w.kt, task*max(p.d, 1)*w.ldkt), LdKt: w.ldkt,
			V: view(p.v, task*p.tk*p.dv), LdV: p.dv,
			Out: view(w.r.Out.Data, bh*p.tq*p.dv), LdOut: p.dv,
			Tq: p.tq, Tk: p.tk, D: p.d, Dv: p.dv,
		}
		gr := attend.Grad{
			DQ: view(g.Q.Data, bh*p.tq*p.d), LdDQ: p.d,
			DK: view(g.K.Data, task*p.tk*p.d), LdDK: p.d,
			DV: view(g.V.Data, task*p.tk*p.dv), LdDV: p.dv,
		}
		if p.opt.ALiBi && p.opt.SlopeGrad {
			gr.Slope = &w.dslope[bh]
		}
		var d attend.Dropout
		drop := p.dropout(&d, b, h)
		var pw []float32 // the weights before dropout, which the forward returns only without it
		if w.r.Weights != nil && drop == nil {
			pw = w.r.Weights.Data[bh*p.tq*p.tk : (bh+1)*p.tq*p.tk]
		}
		var lse []float32 // not read with a normalizer, whose weights are read or recomputed
		if w.r.LSE != nil {
			lse = w.r.LSE.Data[bh*p.tq : (bh+1)*p.tq]
		}
		dOut := view(w.dOut, bh*p.tq*p.dv)
		bias := p.bias(b, h)
		attend.Backward(&hd, &gr, dOut, p.dv, lse, &bias, float32(p.scale), drop, pw, &w.back[worker])
		if p.opt.Sinks != nil {
			// The sink's weight in row i is exp(sink − lse_i) and its value 0, so
			// d loss/d sink = −Σ_i exp(sink − lse_i)·D_i with D_i = dOut_i·Out_i.
			sink, s := float64(p.opt.Sinks[h]), 0.0
			for i := range p.tq {
				if d := kernel.Dot(dOut[i*p.dv:(i+1)*p.dv], hd.Out[i*p.dv:(i+1)*p.dv]); d != 0 {
					s -= math.Exp(sink-float64(lse[i])) * float64(d)
				}
			}
			w.dsink[bh] = s
		}
		if p.ropeDim > 0 {
			w.rope.rotate(g.Q.Data[bh*p.tq*p.d:(bh+1)*p.tq*p.d], p.d, p.tq, p.ropeQ0, true)
		}
	}
	if p.ropeDim > 0 {
		w.rope.rotate(g.K.Data[task*p.tk*p.d:(task+1)*p.tk*p.d], p.d, p.tk, p.ropeK0, true)
	}
}
