package mha

import (
	"fmt"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/proj"
	"github.com/mhalab/mha/tensor"
)

// NewKVCache returns an empty cache for the layer's keys and values: batch sequences of up to
// capacity positions, stored as dtype, for ForwardCache. Errors are as for the package's
// NewKVCache, and one wrapping ErrConfig when a cache cannot serve the layer's self-attention
// (see ForwardCache).
func (l *Layer) NewKVCache(batch, capacity int, dtype CacheDType) (*KVCache, error) {
	if err := l.cfg.CheckCache(); err != nil {
		return nil, err
	}
	d := l.cfg.HeadDim(0)
	return NewKVCache(batch, l.cfg.KVHeads(), d, d, capacity, dtype)
}

// CheckCache returns nil when a KV cache can serve the self-attention of a layer of config c
// (Layer.NewKVCache, ForwardCache), and otherwise an error wrapping ErrConfig that says why: its
// keys and values must be the embedding's size (KDim = VDim = EmbedDim), its heads of one size
// and one score scale, and no key may be appended (AddBiasKV, AddZeroAttn).
func (c Config) CheckCache() error {
	switch {
	case !c.sameDims():
		return fmt.Errorf("%w: a KV cache serves self-attention, which needs kdim = vdim = E; the layer has kdim %d, vdim %d, E %d", ErrConfig, c.kdim(), c.vdim(), c.EmbedDim)
	case c.unequalHeads():
		return fmt.Errorf("%w: a KV cache needs heads of one size, the layer has head dims %v", ErrConfig, c.HeadDims)
	case c.AddBiasKV || c.AddZeroAttn:
		return fmt.Errorf("%w: appended keys (add_bias_kv, add_zero_attn) have no position in a KV cache", ErrConfig)
	}
	for h := range c.NumHeads {
		if c.HeadScale(h) != c.HeadScale(0) {
			return fmt.Errorf("%w: a KV cache needs one score scale for all heads, the layer has %v", ErrConfig, c.HeadScales)
		}
	}
	return nil
}

// ForwardCache is the layer's self-attention for decoding: x [B, T, E] holds the next T
// positions of B sequences whose earlier keys and values kv holds (from the layer's NewKVCache).
// It projects x, appends the new keys and values to kv (keys normalised with Config.QKNorm and
// rotated with Config.Rotary at their positions Offset + kv.Len() + t, as
// SDPAContext.AttendCache stores them), attends every query to
// the cached keys up to its own position (with opt.Causal; without it, to all of them), within
// opt.Window (counted from the query's own position), and returns the output projection
// [B, T, E]. A prefill of T tokens followed by steps of one token gives Forward's outputs on the
// whole sequence, up to float32 rounding.
//
// Of Options it reads Causal, Window, Softcap, ALiBi, Slopes, Workers and Compute (the
// projections of more than 4 rows per sequence follow it, and so does a prompt's attention into
// an empty cache; the rest computes in float32, as AttendCache says); masks, weights, dropout,
// sparse patterns, normalizers other than softmax and head interventions are errors. It returns
// an error wrapping ErrConfig when a cache cannot serve the layer: keys and values of other
// sizes than the embedding (KDim, VDim), heads of different sizes or score scales (HeadDims,
// HeadScales), or appended keys (AddBiasKV, AddZeroAttn), which have no position. It returns an
// error wrapping ErrShape, leaving kv unchanged, when x does not fit the layer or kv, or kv has
// too little room left.
func (l *Layer) ForwardCache(kv *KVCache, x *tensor.Tensor, opt *Options) (*tensor.Tensor, error) {
	var r Result
	if err := l.ForwardCacheInto(&r, kv, x, opt); err != nil {
		return nil, err
	}
	return r.Output, nil
}

// ForwardCacheInto is ForwardCache writing its output [B, T, E] into r.Output, whose storage it
// reuses when it is large enough (overwriting what that tensor held) and allocates otherwise, so
// that a caller that passes the same Result every time, as a model's prefill and decode steps
// do, allocates no output once it has seen the largest shape; the other fields of r are set to
// their zero values (ForwardCache computes no weights or head outputs). Errors are as for
// ForwardCache; on error r is left as it was.
func (l *Layer) ForwardCacheInto(r *Result, kv *KVCache, x *tensor.Tensor, opt *Options) error {
	c := l.cfg
	var o Options
	if opt != nil {
		o = *opt
	}
	switch {
	case kv == nil:
		return fmt.Errorf("%w: ForwardCache needs a KV cache (Layer.NewKVCache)", ErrShape)
	case x == nil:
		return fmt.Errorf("%w: x is nil, want [B T %d]", ErrShape, c.EmbedDim)
	case o.KeyPaddingMask != nil || o.AttnMask != nil || o.AttnBias != nil || o.NeedWeights || o.Training ||
		len(o.Patterns) > 0 || o.Normalizer != nil && o.Normalizer.Kind != Softmax ||
		o.Heads.Keep || o.Heads.Gate != nil || o.Heads.Shift != nil || o.Heads.Add != nil || o.Heads.Uniform != nil:
		return fmt.Errorf("%w: ForwardCache takes Causal, Window, Softcap, ALiBi, Workers and Compute; masks, weights, dropout, sparse patterns, normalizers and head options need Forward", ErrShape)
	}
	if err := c.CheckCache(); err != nil {
		return err
	}
	if err := checkData("x", x.Shape, len(x.Data)); err != nil {
		return err
	}
	if len(x.Shape) != 3 || x.Shape[2] != c.EmbedDim {
		return fmt.Errorf("%w: x is %v, want [B T %d]", ErrShape, x.Shape, c.EmbedDim)
	}
	b, t := x.Shape[0], x.Shape[1]
	scale := c.HeadScale(0)
	if w := o.Window; w != nil && (w.Left < -1 || w.Right < -1) {
		return fmt.Errorf("%w: window is (%d, %d), want sizes ≥ 0 or −1 for unbounded", ErrShape, w.Left, w.Right)
	}
	if kv.b != b {
		return fmt.Errorf("%w: x has %d sequences, the cache %d", ErrShape, b, kv.b)
	}
	if d := c.HeadDim(0); kv.hkv != c.KVHeads() || kv.d != d || kv.dv != d {
		return fmt.Errorf("%w: the cache holds %d K/V heads of %d (values %d), the layer has %d K/V heads of %d; make the cache with the layer's NewKVCache", ErrShape, kv.hkv, kv.d, kv.dv, c.KVHeads(), d)
	}
	if err := o.Compute.check(); err != nil {
		return err
	}
	bf := o.Compute.bf16()

	w := l.getWork()
	defer l.putWork(w)
	w.l = l
	defer func() { w.l = nil }()
	w.p.opt.Workers = o.Workers
	w.workers()
	e, qd, ekv, heads, hkv, d := c.EmbedDim, c.InnerDim(), c.KVDim(), c.NumHeads, c.KVHeads(), c.HeadDim(0)

	// The projections, Q [B·T, E] and K, V [B·T, Hkv·d], then laid out per head.
	wq, wk, wv, bq, bk, bv := l.projections()
	n := b * t
	w.dbuf = kernel.Grow(w.dbuf, n*(qd+2*ekv))
	q, k, v := w.dbuf[:n*qd], w.dbuf[n*qd:n*(qd+ekv)], w.dbuf[n*(qd+ekv):]
	var xb []uint16 // bfloat16 products read x's bits, rounded once for all three
	if bf && n > kernel.GemvRows {
		xb = w.encodeOne(x.Data)
	}
	for _, g := range [...]proj.Gemm{
		{X: x.Data, LdX: e, XRows: n, K: e, W: wq, LdW: e, Trans: true, Bias: bq, C: q, LdC: qd, CRows: n, Rows: n, N: qd, Batches: 1},
		{X: x.Data, LdX: e, XRows: n, K: e, W: wk, LdW: e, Trans: true, Bias: bk, C: k, LdC: ekv, CRows: n, Rows: n, N: ekv, Batches: 1},
		{X: x.Data, LdX: e, XRows: n, K: e, W: wv, LdW: e, Trans: true, Bias: bv, C: v, LdC: ekv, CRows: n, Rows: n, N: ekv, Batches: 1},
	} {
		g.BF16, g.XB = bf, xb
		w.runGemm(g)
	}
	if nm := c.QKNorm; nm != nil && nm.Across { // each position's row of every head at once
		normHead(q, qd, n, l.param("q_norm.weight"), nm.Eps, nil, nil)
		normHead(k, ekv, n, l.param("k_norm.weight"), nm.Eps, nil, nil)
	}
	w.cq = reuse(w.cq, n*qd, b, heads, t, d)
	w.ck = reuse(w.ck, n*ekv, b, hkv, t, d)
	w.cv = reuse(w.cv, n*ekv, b, hkv, t, d)
	w.relayout(headLayout{q, w.cq.Data, b, t, heads, d, true},
		headLayout{k, w.ck.Data, b, t, hkv, d, true},
		headLayout{v, w.cv.Data, b, t, hkv, d, true})
	if nm := c.QKNorm; nm != nil && !nm.Across { // before the rotation, which AttendCache applies
		normHead(w.cq.Data, d, n*heads, l.param("q_norm.weight"), nm.Eps, nil, nil)
		normHead(w.ck.Data, d, n*hkv, l.param("k_norm.weight"), nm.Eps, nil, nil)
	}

	so := SDPAOptions{Scale: scale, Rotary: c.Rotary, Window: o.Window, Workers: o.Workers, Compute: o.Compute,
		Softcap: o.Softcap, ALiBi: o.ALiBi, Slopes: o.Slopes, Sinks: l.param("sinks")}
	if o.Causal {
		so.Causal = CausalBottomRight
	}
	if err := l.s.sdpa.AttendCache(&w.cres, kv, w.cq, w.ck, w.cv, &so); err != nil {
		return err
	}

	// The heads side by side, then the output projection.
	w.dconcat = kernel.Grow(w.dconcat, n*qd)
	w.relayout(headLayout{w.dconcat, w.cres.Out.Data, b, t, heads, d, false})
	if xb != nil {
		xb = w.encodeOne(w.dconcat)
	}
	y := reuse(r.Output, n*e, b, t, e)
	w.runGemm(proj.Gemm{X: w.dconcat, LdX: qd, XRows: n, K: qd, W: l.matrix("out_proj.weight"), LdW: qd, Trans: true, Bias: l.param("out_proj.bias"), C: y.Data, LdC: e, CRows: n, Rows: n, N: e, Batches: 1, BF16: bf, XB: xb})
	*r = Result{Output: y}
	return nil
}

// headLayout is one copy between heads side by side, rows [B, T, H·d], and heads one after
// another, [B, H, T, d]: into heads when toHeads is set, else back into rows.
type headLayout struct {
	rows, heads []float32
	b, t, h, d  int
	toHeads     bool
}

// copy copies head task mod h of batch task / h.
func (c *headLayout) copy(task int) {
	bb, h, e := task/c.h, task%c.h, c.h*c.d
	for i := range c.t {
		r := c.rows[(bb*c.t+i)*e+h*c.d:][:c.d]
		hd := c.heads[((bb*c.h+h)*c.t+i)*c.d:][:c.d]
		if c.toHeads {
			copy(hd, r)
		} else {
			copy(r, hd)
		}
	}
}

// relayout runs the copies ls, a (batch, head) a task: on the call's workers, or on the caller
// where they move fewer than parallelCopy values (a decode step's), too few to share.
func (w *work) relayout(ls ...headLayout) {
	tasks, values := 0, 0
	for _, c := range ls {
		tasks += c.b * c.h
		values += c.b * c.t * c.h * c.d
	}
	if values >= parallelCopy {
		w.layouts = append(w.layouts[:0], ls...)
		w.run(phaseLayout, tasks)
		return
	}
	for _, c := range ls {
		for task := range c.b * c.h {
			c.copy(task)
		}
	}
}

// parallelCopy is the fewest values that relayout copies on more than one worker.
const parallelCopy = 1 << 14
