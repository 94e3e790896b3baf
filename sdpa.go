package mha

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/tensor"
)

// CausalMode says whether and how SDPA's causal mask is aligned when Tq ≠ Tk.
type CausalMode int

const (
	// NotCausal masks nothing by position.
	NotCausal CausalMode = iota
	// CausalTopLeft lets query i see keys j ≤ i: PyTorch's is_causal and the layer's Causal.
	CausalTopLeft
	// CausalBottomRight lets query i see keys j ≤ i + Tk − Tq, so that the last query sees the
	// last key: what a KV cache needs when the queries are the newest Tq of Tk positions
	// (flash-attn's causal).
	CausalBottomRight
)

// Window is a sliding window as flash-attn's window_size defines it: with δ = Tk − Tq, query i
// sees keys i + δ − Left ≤ j ≤ i + δ + Right. −1 leaves a side unbounded; other negative values
// are errors.
type Window struct {
	Left, Right int
}

// SDPAOptions are the options of SDPA. The zero value (or a nil *SDPAOptions) is attention with
// scale 1/√D, no mask, and the output only.
//
// With δ = Tk − Tq, query i of head h (which reads K/V head ⌊h·Hkv/Hq⌋) gives key j the logit
//
//	softcap(Scale·q_i·k_j) − slope_h·|i + δ − j| + AttnBias[i, j]
//
// where softcap(s) = Softcap·tanh(s/Softcap), unless a mask hides key j, and the row's softmax
// also counts exp(Sinks[h]) when Sinks is given. A row whose keys are all masked gets output 0,
// never NaN.
type SDPAOptions struct {
	// Scale multiplies q·k; 0 means 1/√D. It must be finite in float32 (|Scale| ≤ 3.4e38).
	Scale float64
	// Causal is the causal mask and its alignment.
	Causal CausalMode
	// Window, when not nil, is a sliding window (flash-attn's window_size, aligned bottom-right
	// whatever Causal says). Key tiles outside every query's window are skipped, so the cost is
	// O(Tq·W·D) for a window of W keys.
	Window *Window
	// Patterns, when not empty, make the attention sparse: a pair (query i, key j) is kept when
	// any pattern keeps it (see PatternKind), and then masked as without patterns (causal,
	// window, padding, masks). The blocks of Block[0] queries × Block[1] keys that keep no pair
	// are skipped, so that time and memory fall with the blocks kept (with at most an eighth of
	// the blocks kept, K is read in place rather than transposed first); Block's zero value is
	// 64 × 64. A row that keeps no key gives output 0.
	Patterns []Pattern
	Block    [2]int
	// Normalizer, when not nil, replaces the softmax of each row's kept scores: sparsemax,
	// α-entmax or top-k softmax, whose weights are exactly 0 on the keys they drop. A row
	// that keeps nothing gives weights and output 0. It needs each row whole: a worker holds
	// its block's rows of scores (64 × Tk), not every head's weights, which are returned only
	// with NeedWeights (SDPABackward reads them when given, or recomputes them block by block).
	// LSE is NaN; it takes no sinks. Dropout applies to its weights as to softmax's.
	Normalizer *Normalizer
	// ALiBi subtracts slope_h·|i + δ − j| from the logits of head h: Slopes[h] when Slopes is not
	// nil (len Hq, finite), else the standard geometric slopes of AlibiSlopes(Hq).
	ALiBi  bool
	Slopes []float64
	// Softcap, when > 0, caps the scaled scores to Softcap·tanh(s/Softcap) (Gemma 2), before the
	// slope, the bias and the masks. It must be finite and ≥ 0.
	Softcap float64
	// Sinks, when not nil, is [Hq]: a learned logit per head that joins every row's softmax and
	// takes probability mass but no value (gpt-oss). −Inf is no sink; NaN and +Inf are errors.
	Sinks []float32
	// Rotary, when not nil, rotates q and k inside the call (RoPE): key j at position
	// Rotary.Offset + j and query i at Rotary.Offset + Tk − Tq + i. K is rotated as it is
	// transposed for the kernel and Q into the call's scratch, so the caller's tensors are left
	// as they are.
	Rotary *Rotary
	// KeyPaddingMask is [B, Tk]; true marks a key no query may attend.
	KeyPaddingMask *tensor.Bool
	// AttnMask is [Tq, Tk] or [B, Hq, Tq, Tk]; true means query i may NOT attend key j. This is
	// nn.MultiheadAttention's polarity, the opposite of F.scaled_dot_product_attention's, whose
	// true means "may attend".
	AttnMask *tensor.Bool
	// AttnBias is [Tq, Tk] or [B, Hq, Tq, Tk], added to the logits; −Inf masks.
	AttnBias *tensor.Tensor
	// SlopeGrad asks SDPABackward for the ALiBi slopes' gradient in SDPAGrads.Slopes.
	SlopeGrad bool
	// Dropout, when > 0, zeroes each weight with this probability and scales the kept ones by
	// 1/(1 − Dropout), as in training; the mask depends only on DropoutSeed, the (batch, head)
	// and the position, so SDPABackward, SDPAReference and any worker count draw the same one.
	// Weights are returned after dropout, as PyTorch returns them. It must be in [0, 1).
	Dropout     float64
	DropoutSeed uint64
	// NeedLSE asks for each row's log-sum-exp in SDPAResult.LSE.
	NeedLSE bool
	// NeedWeights asks for the attention weights in SDPAResult.Weights. They build a
	// [B, Hq, Tq, Tk] matrix, bounded by MaxDenseElements.
	NeedWeights bool
	// Workers bounds how many goroutines the call runs on; 0 means runtime.GOMAXPROCS(0). The
	// result does not depend on it, to the bit.
	Workers int
	// Compute is the arithmetic of Q·Kᵀ and of the weights times V: ComputeFloat32 (the zero
	// value) or ComputeBFloat16 (Q, K, V converted to bfloat16 once per call, float32 sums and
	// softmax; see Compute). SDPABackward refuses ComputeBFloat16; AttendCache computes in
	// float32 whatever it says.
	Compute Compute
}

// SDPAResult is what SDPA returns.
type SDPAResult struct {
	// Out is [B, Hq, Tq, Dv].
	Out *tensor.Tensor
	// LSE is nil unless SDPAOptions.NeedLSE: [B, Hq, Tq], each row's log of the sum of the
	// exponentials of its logits, the sink's included. It is +Inf for a row whose keys are all
	// masked and that has no sink (flash-attn's convention: exp(s − lse) is then 0), and the
	// sink's logit for such a row with one. With a Normalizer other than softmax it is NaN in
	// every row, fully masked or not.
	LSE *tensor.Tensor
	// Weights is nil unless SDPAOptions.NeedWeights: [B, Hq, Tq, Tk]. With a sink, a row sums to
	// less than 1.
	Weights *tensor.Tensor
	// FullyMasked counts the (batch, head, query) rows whose keys were all masked (or Tk = 0).
	FullyMasked int
	// ZeroFraction is nil unless SDPAOptions.Normalizer is other than softmax: per query head
	// [Hq], over the batch and the queries, the fraction of the pairs that the masks, window and
	// patterns leave visible whose weight the normalizer set to exactly 0 (0 for a head with no
	// visible pair).
	ZeroFraction []float64
}

// SDPATrace is what SDPAReference returns, in float64: Out [B, Hq, Tq, Dv], LSE [B, Hq, Tq] and
// Weights [B, Hq, Tq, Tk], row-major, with the meaning of SDPAResult's fields.
type SDPATrace struct {
	B, Hq, Hkv, Tq, Tk, D, Dv int
	Out, LSE, Weights         []float64
	FullyMasked               int
}

// AlibiSlopes returns the standard ALiBi slopes of n heads (Press et al.): for n a power of two,
// 2^(−8(h+1)/n) for head h; otherwise those of the largest power of two below n, followed by
// every other slope of twice that many.
func AlibiSlopes(n int) []float64 { return alibiInto(nil, n) }

// alibiInto writes the standard slopes of n heads into dst, reusing its storage.
func alibiInto(dst []float64, n int) []float64 {
	dst = dst[:0]
	if n <= 0 {
		return dst
	}
	p := 1
	for p*2 <= n {
		p *= 2
	}
	for i := range p {
		dst = append(dst, math.Pow(2, -8*float64(i+1)/float64(p)))
	}
	for i := 0; len(dst) < n; i += 2 {
		dst = append(dst, math.Pow(2, -8*float64(i+1)/float64(2*p)))
	}
	return dst
}

// SDPAContext keeps SDPA's scratch memory and helper goroutines between calls, so that
// SDPAInto makes no heap allocation once it has seen the largest shape. It is safe for
// concurrent use. The zero value is ready to use, as is NewSDPAContext's; either way the helper
// goroutines stop when the context is collected. Do not copy a context.
type SDPAContext struct {
	pool      *parallel.Pool
	mu        sync.Mutex
	free      []*sdpaWork
	cacheFree []*cacheWork // AttendCache's memory
}

// NewSDPAContext returns a context with no memory yet.
func NewSDPAContext() *SDPAContext { return new(SDPAContext) }

// SDPA computes scaled dot-product attention in float32 with the tiled online softmax on all
// cores, for callers that bring their own projections:
//
//	q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] → Out [B, Hq, Tq, Dv]
//
// Hq must be a multiple of Hkv ≥ 1: query head h reads K/V head ⌊h·Hkv/Hq⌋ (PyTorch's
// enable_gqa), so multi-query (Hkv = 1), grouped-query and plain multi-head attention (Hkv = Hq)
// are the same call, and K and V are never copied per query head. SDPAOptions lists the masks,
// biases and outputs; note that a true in AttnMask means "may NOT attend", as in
// nn.MultiheadAttention, the opposite of F.scaled_dot_product_attention. Any size may be 0,
// but the sizes that a 0 leaves backed by no value (those of q and the pairs with D = 0, Dv with
// Tk = 0, …) may not ask for more than MaxDenseElements outputs or pairs. It returns an error
// wrapping ErrShape when a tensor or option does not fit the others, saying what was expected
// and what came.
func SDPA(q, k, v *tensor.Tensor, opt *SDPAOptions) (*SDPAResult, error) {
	c := NewSDPAContext()
	r := new(SDPAResult)
	err := c.SDPAInto(r, q, k, v, opt)
	if c.pool != nil {
		c.pool.Close()
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// SDPAInto is SDPA writing into r: it reuses r.Out's, r.LSE's and r.Weights' storage when it is
// large enough, so that calls with the same r make no heap allocation in steady state. Fields
// not asked for are set to nil. Errors are as for SDPA, and one wrapping ErrShape when r is nil;
// on error r is left as it was.
func (c *SDPAContext) SDPAInto(r *SDPAResult, q, k, v *tensor.Tensor, opt *SDPAOptions) error {
	if r == nil {
		return fmt.Errorf("%w: result is nil, want an SDPAResult to write into", ErrShape)
	}
	w, pool := c.get()
	defer c.put(w)
	p := &w.p
	if err := p.check(q, k, v, opt, &w.slopes); err != nil {
		return err
	}
	r.Out = reuse(r.Out, p.b*p.hq*p.tq*p.dv, p.b, p.hq, p.tq, p.dv)
	if p.opt.NeedLSE {
		r.LSE = reuse(r.LSE, p.b*p.hq*p.tq, p.b, p.hq, p.tq)
	} else {
		r.LSE = nil
	}
	if p.opt.NeedWeights {
		r.Weights = reuse(r.Weights, p.b*p.hq*p.tq*p.tk, p.b, p.hq, p.tq, p.tk)
	} else {
		r.Weights = nil
	}
	w.r = r
	if p.b*p.hq*p.tq == 0 {
		// No query row: nothing to compute, however large the other sizes.
		r.FullyMasked, r.ZeroFraction = 0, nil
		if p.normalized() {
			r.ZeroFraction = zeroFractions(r.ZeroFraction, nil, nil, 0, p.hq)
		}
		return nil
	}
	w.qBlocks = ceilDiv(p.tq, p.opt.Compute.blockQ())
	n := p.opt.Workers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	n = min(n, max(1, p.b*p.hkv, p.b*p.hq*w.qBlocks)) // no scratch for workers without a task
	if len(w.scratch) < n {
		w.scratch = make([]attend.Scratch, n)
		w.masked = make([]int, n)
	}
	clear(w.masked)

	// Kᵀ of every (batch, K/V head), then one task per (batch, query head, run of query blocks).
	w.prepare(pool, n, false)
	w.phase = 1
	w.run = runBlocks(p.prefetches(), p.b*p.hq*w.qBlocks, n)
	tasks := p.b * p.hq * ceilDiv(w.qBlocks, w.run)
	if p.normalized() {
		w.visible, w.zero = slices.Grow(w.visible[:0], tasks)[:tasks], slices.Grow(w.zero[:0], tasks)[:tasks]
	}
	pool.Run(&w.loop, n, tasks, w)
	r.FullyMasked = 0
	for _, m := range w.masked[:n] {
		r.FullyMasked += m
	}
	if p.normalized() {
		r.ZeroFraction = zeroFractions(r.ZeroFraction, w.visible, w.zero, p.b, p.hq)
	} else {
		r.ZeroFraction = nil
	}
	return nil
}

// elements returns the product of sizes in float64, where no product of sizes overflows.
func elements(sizes ...int) float64 {
	n := 1.0
	for _, s := range sizes {
		n *= float64(s)
	}
	return n
}

// zeroFractions returns, in dst's storage, the fraction of zeros per head [hq] from the visible
// and zero pairs counted per task, [b, hq, tasks per head].
func zeroFractions(dst []float64, visible, zero []int, b, hq int) []float64 {
	dst = slices.Grow(dst[:0], hq)[:hq]
	per := 0 // tasks per (batch, head); an empty batch has none
	if b > 0 && hq > 0 {
		per = len(visible) / (b * hq)
	}
	for h := range hq {
		var v, z int
		for bb := range b {
			i := (bb*hq + h) * per
			for t := i; t < i+per; t++ {
				v, z = v+visible[t], z+zero[t]
			}
		}
		dst[h] = 0
		if v > 0 {
			dst[h] = float64(z) / float64(v)
		}
	}
	return dst
}

func (c *SDPAContext) get() (*sdpaWork, *parallel.Pool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startPool()
	if n := len(c.free); n > 0 {
		w := c.free[n-1]
		c.free = c.free[:n-1]
		return w, c.pool
	}
	return new(sdpaWork), c.pool
}

// startPool starts the context's pool on first use; c.mu must be held.
func (c *SDPAContext) startPool() {
	if c.pool == nil {
		c.pool = new(parallel.Pool)
		runtime.AddCleanup(c, (*parallel.Pool).Close, c.pool)
	}
}

func (c *SDPAContext) put(w *sdpaWork) {
	w.p, w.r, w.q, w.g, w.dOut = sdpaPlan{layouts: w.p.layouts}, nil, nil, nil, nil // drop the references to the caller's tensors
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.free) < keepWork {
		c.free = append(c.free, w)
	}
}

// sdpaPlan is a validated SDPA call.
type sdpaPlan struct {
	q, k, v            []float32
	opt                SDPAOptions
	b, hq, hkv, tq, tk int
	d, dv              int
	scale              float64
	ropeDim            int // rotary dimensions (0: no rotary)
	ropeStart          int // the position of the table's first row (ropeSpan)
	ropeCount          int // its rows
	ropeK0, ropeQ0     int // the rows of key 0 and query 0
	maskPerHead        bool
	biasPerHead        bool
	sparse             []attend.Sparse // the patterns' layouts: one per query head, or one for all
	layouts            layoutCache     // kept across calls
}

// check validates a call and fills p.
//
// slopes is where the default ALiBi slopes are kept between calls.
func (p *sdpaPlan) check(q, k, v *tensor.Tensor, opt *SDPAOptions, slopes *[]float64) error {
	*p = sdpaPlan{layouts: p.layouts}
	if opt != nil {
		p.opt = *opt
	}
	for _, t := range []struct {
		name string
		t    *tensor.Tensor
		dims string
	}{{"q", q, "[B Hq Tq D]"}, {"k", k, "[B Hkv Tk D]"}, {"v", v, "[B Hkv Tk Dv]"}} {
		if t.t == nil {
			return fmt.Errorf("%w: %s is nil, want a tensor %s", ErrShape, t.name, t.dims)
		}
		if err := checkData(t.name, t.t.Shape, len(t.t.Data)); err != nil {
			return err
		}
		if len(t.t.Shape) != 4 {
			return fmt.Errorf("%w: %s is %v, want 4 dimensions %s", ErrShape, t.name, t.t.Shape, t.dims)
		}
	}
	p.b, p.hq, p.tq, p.d = q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	p.hkv, p.tk, p.dv = k.Shape[1], k.Shape[2], v.Shape[3]
	switch {
	case k.Shape[0] != p.b || k.Shape[3] != p.d:
		return fmt.Errorf("%w: k is %v, want [%d Hkv Tk %d] (B and D of q %v)", ErrShape, k.Shape, p.b, p.d, q.Shape)
	case v.Shape[0] != p.b || v.Shape[1] != p.hkv || v.Shape[2] != p.tk:
		return fmt.Errorf("%w: v is %v, want [%d %d %d Dv] (B, Hkv and Tk of k %v)", ErrShape, v.Shape, p.b, p.hkv, p.tk, k.Shape)
	case p.hkv < 1:
		return fmt.Errorf("%w: k has %d heads, want at least 1", ErrShape, p.hkv)
	case p.hq%p.hkv != 0:
		return fmt.Errorf("%w: q has %d heads, want a multiple of k's %d heads", ErrShape, p.hq, p.hkv)
	}
	if err := p.checkOptions(slopes); err != nil {
		return err
	}
	p.q, p.k, p.v = q.Data, k.Data, v.Data
	return nil
}

// finite32 reports whether x is a number that float32 holds without overflowing to ±Inf.
func finite32(x float64) bool { return math.Abs(x) <= math.MaxFloat32 }

// checkOptions validates p.opt against the sizes in p and sets p.scale (and the default ALiBi
// slopes, kept in slopes between calls).
func (p *sdpaPlan) checkOptions(slopes *[]float64) error {
	o := &p.opt
	if err := o.Compute.check(); err != nil {
		return err
	}
	switch {
	case !finite32(o.Scale):
		return fmt.Errorf("%w: scale is %v, want a number finite in float32, in which scores are computed (0 for 1/√D)", ErrShape, o.Scale)
	case o.Scale == 0 && p.d == 0:
		return fmt.Errorf("%w: head size D is 0, so the default scale 1/√D is undefined; give a scale", ErrShape)
	case o.Causal < NotCausal || o.Causal > CausalBottomRight:
		return fmt.Errorf("%w: causal mode is %d, want NotCausal, CausalTopLeft or CausalBottomRight", ErrShape, o.Causal)
	case o.Window != nil && (o.Window.Left < -1 || o.Window.Right < -1):
		return fmt.Errorf("%w: window is (%d, %d), want sizes ≥ 0 or −1 for unbounded", ErrShape, o.Window.Left, o.Window.Right)
	case !(o.Softcap >= 0) || math.IsInf(o.Softcap, 1):
		return fmt.Errorf("%w: softcap is %v, want a finite number ≥ 0 (0 for none)", ErrShape, o.Softcap)
	case o.Slopes != nil && !o.ALiBi:
		return fmt.Errorf("%w: slopes given without ALiBi", ErrShape)
	case o.Slopes != nil && len(o.Slopes) != p.hq:
		return fmt.Errorf("%w: %d ALiBi slopes, want one per query head (%d)", ErrShape, len(o.Slopes), p.hq)
	case o.Sinks != nil && len(o.Sinks) != p.hq:
		return fmt.Errorf("%w: %d sinks, want one per query head (%d)", ErrShape, len(o.Sinks), p.hq)
	case o.Workers < 0:
		return fmt.Errorf("%w: %d workers, want ≥ 0 (0 for GOMAXPROCS)", ErrShape, o.Workers)
	case p.normalized() && o.Sinks != nil:
		return fmt.Errorf("%w: the %s normalizer takes no sinks", ErrShape, o.Normalizer)
	case o.Normalizer != nil && !o.Normalizer.Valid():
		return fmt.Errorf("%w: normalizer %s, want softmax, sparsemax, entmax with α > 1 finite, or top-k with K ≥ 1", ErrShape, o.Normalizer)
	case !(o.Dropout >= 0 && o.Dropout < 1):
		return fmt.Errorf("%w: dropout is %v, want a probability in [0, 1)", ErrShape, o.Dropout)
	}
	for h, s := range o.Slopes {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: ALiBi slope of head %d is %v, want a finite number", ErrShape, h, s)
		}
	}
	for h, s := range o.Sinks {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 1) {
			return fmt.Errorf("%w: sink of head %d is %v, want a finite number or −Inf", ErrShape, h, s)
		}
	}
	// q, k and v hold as many values as their sizes say, so those bound the call's memory and
	// work, except where a size is 0: then q or k holds nothing, and the other sizes of q, the
	// pairs' Tk or v's Dv are backed by no value. A few bytes of input must not ask for any
	// amount of memory or work: such a call, its sizes taken as at least 1, is held to
	// MaxDenseElements outputs, pairs and values of Kᵀ (whose rows are padded by up to 16).
	if p.b == 0 || p.hq == 0 || p.tq == 0 || p.d == 0 || p.tk == 0 {
		b := max(p.b, 1)
		if n := max(elements(b, max(p.hq, 1), max(p.tq, 1), max(p.dv, p.tk, 1)), elements(b, p.hkv, max(p.d, 1), p.tk+16)); n > MaxDenseElements {
			return fmt.Errorf("%w: q [%d %d %d %d], k [%d %d %d %d] and v [%d %d %d %d] have a size of 0 and ask for %.4g outputs, pairs or values of Kᵀ that no value backs, more than %d", ErrShape,
				p.b, p.hq, p.tq, p.d, p.b, p.hkv, p.tk, p.d, p.b, p.hkv, p.tk, p.dv, n, int64(MaxDenseElements))
		}
	}
	var err error
	if p.sparse, err = p.layouts.compileSparse(o.Patterns, o.Block, p.hq, p.tq, p.tk); err != nil {
		return err
	}
	if m := o.KeyPaddingMask; m != nil {
		if err := checkData("key_padding_mask", m.Shape, len(m.Data)); err != nil {
			return err
		}
		if !slices.Equal(m.Shape, []int{p.b, p.tk}) {
			return fmt.Errorf("%w: key_padding_mask is %v, want [%d %d] (B Tk)", ErrShape, m.Shape, p.b, p.tk)
		}
	}
	if m := o.AttnMask; m != nil {
		if p.maskPerHead, err = p.checkMask("attn_mask", m.Shape, len(m.Data)); err != nil {
			return err
		}
	}
	if m := o.AttnBias; m != nil {
		if p.biasPerHead, err = p.checkMask("attn_bias", m.Shape, len(m.Data)); err != nil {
			return err
		}
	}
	if o.NeedWeights && elements(p.b, p.hq, p.tq, p.tk) > MaxDenseElements {
		return fmt.Errorf("%w: weights [%d %d %d %d] would hold more than %d values", ErrShape, p.b, p.hq, p.tq, p.tk, int64(MaxDenseElements))
	}
	p.scale = o.Scale
	if p.scale == 0 {
		p.scale = 1 / math.Sqrt(float64(p.d))
	}
	if o.ALiBi && o.Slopes == nil {
		*slopes = alibiInto(*slopes, p.hq)
		o.Slopes = *slopes
	}
	if r := o.Rotary; r != nil {
		n, err := r.check(p.d)
		if err != nil {
			return err
		}
		p.ropeDim = n
		p.ropeStart, p.ropeCount, p.ropeK0, p.ropeQ0 = ropeSpan(r.Offset, p.tq, p.tk)
		if r.Offset+p.tk > maxRopePosition || p.ropeStart < -maxRopePosition {
			return fmt.Errorf("%w: rotary positions %d to %d, want them within ±%d", ErrShape, p.ropeStart, r.Offset+p.tk-1, maxRopePosition)
		}
	}
	return nil
}

// prepare runs phase 0 on n workers: Kᵀ of every (batch, K/V head) into w.kt and, with
// rotary, the rotated Q into w.qrot (one task per (batch, query head)) and, when keepK, the
// rotated K into w.krot. It points w.q at the Q the kernel reads. With ComputeBFloat16 it
// writes the bits of Q, K and V (rotated with rotary) into w.qb, w.kb and w.vb instead of Kᵀ,
// and where the CPU has AVX512_BF16 (packKV) K's and V's packings into w.kvp.
// When the forward reads K in place (keepK false and p.walkedDensity() ≤ kInPlaceDensity) it
// writes no Kᵀ: with rotary it writes the rotated K into w.krot, and without it K needs nothing.
func (w *sdpaWork) prepare(pool *parallel.Pool, n int, keepK bool) {
	p := &w.p
	bf := p.opt.Compute.bf16()
	w.kInPlace = !keepK && p.walkedDensity() <= kInPlaceDensity
	w.packKV = bf && kernel.HasBF16()
	switch {
	case bf:
		// At least one value each, so that no view of them is nil where D or Dv is 0: Tiled
		// reads nil bits as no bfloat16 operands, and would look for a Kᵀ never written.
		w.qb, w.kb, w.vb = kernel.Grow(w.qb, max(1, len(p.q))), kernel.Grow(w.kb, max(1, len(p.k))), kernel.Grow(w.vb, max(1, len(p.v)))
		if w.packKV {
			nkv := 2 * p.b * p.hkv
			w.kvp = slices.Grow(w.kvp[:0], nkv)[:nkv]
		}
	case !w.kInPlace:
		w.ldkt = paddedStride(p.tk)
		w.kt = kernel.Grow(w.kt, p.b*p.hkv*max(p.d, 1)*w.ldkt)
	}
	w.q, w.krot = p.q, nil
	tasks := p.b * p.hkv
	if w.kInPlace && p.ropeDim == 0 {
		tasks = 0
	}
	if bf && p.ropeDim == 0 {
		tasks += p.b * p.hq // Q's conversion
	}
	if p.ropeDim > 0 {
		w.rope.build(p.opt.Rotary, p.ropeDim, p.ropeStart, p.ropeCount)
		w.qrot = kernel.Grow(w.qrot, len(p.q))
		w.q = w.qrot
		if len(w.rows) < n {
			w.rows = make([][]float32, n)
		}
		if keepK || w.kInPlace {
			w.krot = kernel.Grow(w.kbuf, len(p.k))
			w.kbuf = w.krot
		}
		tasks += p.b * p.hq
	}
	w.phase = 0
	pool.Run(&w.loop, n, tasks, w)
}

// checkMask checks an attention mask's shape, [Tq, Tk] or [B, Hq, Tq, Tk], and reports whether
// it is per head.
func (p *sdpaPlan) checkMask(name string, shape []int, n int) (perHead bool, err error) {
	if err := checkData(name, shape, n); err != nil {
		return false, err
	}
	switch {
	case slices.Equal(shape, []int{p.tq, p.tk}):
		return false, nil
	case slices.Equal(shape, []int{p.b, p.hq, p.tq, p.tk}):
		return true, nil
	}
	return false, fmt.Errorf("%w: %s is %v, want [%d %d] or [%d %d %d %d] (Tq Tk or B Hq Tq Tk)", ErrShape, name, shape, p.tq, p.tk, p.b, p.hq, p.tq, p.tk)
}

// dropout points d at the dropout of batch b, query head h and returns it, or returns nil
// without dropout. (d is the caller's, so that nothing is allocated.)
func (p *sdpaPlan) dropout(d *attend.Dropout, b, h int) *attend.Dropout {
	if p.opt.Dropout == 0 {
		return nil
	}
	*d = headDropout(p.opt.Dropout, p.opt.DropoutSeed, b, h, p.hq)
	return d
}

// runBlocks returns how many query blocks of a head one attention task runs in turn: 1, or, when
// the blocks prefetch, up to maxRun, so that each block prefetches the rows of the next one on
// the same worker (attend.Scratch.Prefetch), as long as the blocks still make at least 8 tasks
// per worker.
func runBlocks(prefetch bool, blocks, workers int) int {
	if !prefetch {
		return 1
	}
	return max(1, min(maxRun, blocks/(8*workers)))
}

// maxRun is the longest run of query blocks (runBlocks). A run's first block has nothing
// prefetched for it: runs of 16 rather than 4 took 3–5% off a layout of density 1/64 and a
// window of 256 keys, and runs of 64 no more (BENCHMARKS.md, v17).
const maxRun = 16

// blockRun returns the (batch, head) bh and the query blocks [blk0, blk1) of attention task
// task, when each task runs run of a head's qBlocks query blocks in turn (runBlocks).
func blockRun(task, qBlocks, run int) (bh, blk0, blk1 int) {
	runs := ceilDiv(qBlocks, run)
	bh, blk0 = task/runs, task%runs*run
	return bh, blk0, min(blk0+run, qBlocks)
}

// Where a query block reads few keys, it waits for its own rows of Q and, in a sparse layout,
// for the scattered key blocks it keeps, which the processor does not fetch ahead by itself:
// at density 1/64 a block waited for them a fifth of its time. The query blocks then prefetch
// the next one's (runBlocks) in a sparse layout of density ≤ prefetchDensity (at 1/2 it gained
// nothing) and under a window of at most prefetchKeys keys (BENCHMARKS.md, v16).
const (
	prefetchDensity = 1.0 / 4
	prefetchKeys    = 4 * attend.BlockK
)

// prefetches reports whether this call's query blocks prefetch the next one's rows: a float32
// forward that walks a sparse layout of density ≤ prefetchDensity, or whose rows see at most
// prefetchKeys keys of a window.
func (p *sdpaPlan) prefetches() bool {
	o := &p.opt
	switch {
	case p.walkedDensity() <= prefetchDensity:
		return true
	case o.Window == nil || o.Window.Left < 0 || o.Compute.bf16() || o.NeedWeights || p.normalized():
		return false
	case o.Causal != NotCausal:
		return o.Window.Left < prefetchKeys
	}
	return o.Window.Right >= 0 && o.Window.Left+o.Window.Right < prefetchKeys
}

// kInPlaceDensity is the largest density of a sparse layout (the fraction of its blocks that are
// not empty) at which the forward reads K in place rather than writing Kᵀ first. Kᵀ costs one
// pass over every key of every head, whatever the layout keeps; reading K in place costs a
// transposing pack of each key block per query block that keeps it, and makes a dense tile's
// product 2–7% slower (BENCHMARKS.md, v8 and v13).
const kInPlaceDensity = 1.0 / 8

// walkedDensity returns the density of the sparse layouts compiled by c whose kept blocks a
// float32 forward's tiles walk, or +Inf when they walk none: no layout, bf16, or weights asked
// for or a normalizer (which take every key of a row at once). SDPA and the layer both decide
// by it whether the forward reads K in place (kInPlaceDensity) and prefetches (runBlocks).
func walkedDensity(sparse []attend.Sparse, c *layoutCache, bf16, weights, normalized bool) float64 {
	if len(sparse) == 0 || bf16 || weights || normalized {
		return math.Inf(1)
	}
	return c.density
}

// walkedDensity is the function walkedDensity for this call.
func (p *sdpaPlan) walkedDensity() float64 {
	return walkedDensity(p.sparse, &p.layouts, p.opt.Compute.bf16(), p.opt.NeedWeights, p.normalized())
}

// normalized reports whether the call replaces the softmax.
func (p *sdpaPlan) normalized() bool {
	return p.opt.Normalizer != nil && p.opt.Normalizer.Kind != Softmax
}

// kvHead returns the K/V head that query head h reads.
func (p *sdpaPlan) kvHead(h int) int { return h * p.hkv / p.hq }

// bias returns the bias of batch b, query head h.
func (p *sdpaPlan) bias(b, h int) attend.Bias {
	o := &p.opt
	delta := p.tk - p.tq
	bias := attend.Bias{Stride: p.tk, Center: delta, Causal: o.Causal != NotCausal, Softcap: o.Softcap}
	if o.Causal == CausalBottomRight {
		bias.Offset = delta
	}
	if o.Window != nil {
		// Sizes beyond Tq + Tk see the same keys; clamping them keeps i + δ ± size from
		// overflowing.
		bias.Window, bias.Left, bias.Right = true, min(o.Window.Left, p.tq+p.tk), min(o.Window.Right, p.tq+p.tk)
	}
	if o.ALiBi {
		bias.Slope = o.Slopes[h]
	}
	if o.Sinks != nil {
		bias.HasSink, bias.Sink = true, float64(o.Sinks[h])
	}
	if len(p.sparse) > 0 {
		bias.Sparse = &p.sparse[min(h, len(p.sparse)-1)]
	}
	bias.Normalizer = o.Normalizer
	n := p.tq * p.tk
	if m := o.KeyPaddingMask; m != nil {
		bias.KeyPad = m.Data[b*p.tk : (b+1)*p.tk]
	}
	if m := o.AttnMask; m != nil {
		bias.Mask = m.Data
		if p.maskPerHead {
			bias.Mask = m.Data[(b*p.hq+h)*n : (b*p.hq+h+1)*n]
		}
	}
	if m := o.AttnBias; m != nil {
		bias.Add = m.Data
		if p.biasPerHead {
			bias.Add = m.Data[(b*p.hq+h)*n : (b*p.hq+h+1)*n]
		}
	}
	return bias
}

// sdpaWork is one SDPA call's memory, kept in SDPAContext.free between calls, and the
// parallel.Job of its phases: Kᵀ per K/V head and, with rotary, the rotated Q (phase 0),
// attention per (batch, query head, query block) (phase 1), or the backward per (batch, K/V
// head) (phase 2).
type sdpaWork struct {
	p       sdpaPlan
	r       *SDPAResult
	loop    parallel.Loop
	phase   int
	kt      []float32 // Kᵀ of every (batch, K/V head): [B, Hkv, D, ldkt], rotated with rotary
	ldkt    int
	q       []float32 // the Q the kernel reads: the caller's, or qrot
	slopes  []float64 // the default ALiBi slopes
	qBlocks int
	run     int // query blocks per attention task (runBlocks)
	scratch []attend.Scratch
	masked  []int
	// With a normalizer, the visible pairs and the zero weights of each task.
	visible, zero []int

	// Whether the forward reads K (with rotary, krot) in place: kt is not written then.
	kInPlace bool

	// With rotary: the table, the rotated Q [B, Hq, Tq, D], each worker's block of rotated keys,
	// and in the backward the rotated K [B, Hkv, Tk, D] (krot, in kbuf's storage).
	rope       ropeTable
	qrot       []float32
	rows       [][]float32
	krot, kbuf []float32

	// With ComputeBFloat16: Q (rotated with rotary), K (rotated) and V as bfloat16 bits, laid
	// out as the caller's q, k and v. Kᵀ is not built then. Where the CPU has AVX512_BF16
	// (packKV), K's and V's bits are also packed for the GEMM's kernels, once per call: kvp
	// holds K's then V's packing of each (batch, K/V head).
	qb, kb, vb []uint16
	packKV     bool
	kvp        []kernel.PackedBF16

	// The backward's: the gradients, dOut, each worker's scratch, and per (batch, query head)
	// the sink's and the slope's gradient.
	g             *SDPAGrads
	dOut          []float32
	back          []attend.BackScratch
	dsink, dslope []float64
}

// Do runs one task of the current phase.
func (w *sdpaWork) Do(worker, task int) {
	switch {
	case w.phase == 1:
		w.attend(worker, task)
	case w.phase == 2:
		w.backward(worker, task)
	case task < w.p.b*w.p.hkv:
		w.transpose(worker, task)
	default:
		w.rotateQ(task - w.p.b*w.p.hkv)
	}
}

// rotateQ writes the rotated Q of one (batch, query head) into w.qrot and, with
// ComputeBFloat16, the bfloat16 bits of that Q (or, without rotary, of the caller's) into w.qb.
func (w *sdpaWork) rotateQ(bh int) {
	p := &w.p
	if p.ropeDim == 0 { // ComputeBFloat16 without rotary: only the conversion
		kernel.RoundBF16s(w.qb[bh*p.tq*p.d:(bh+1)*p.tq*p.d], p.q[bh*p.tq*p.d:])
		return
	}
	q := w.qrot[bh*p.tq*p.d : (bh+1)*p.tq*p.d]
	copy(q, p.q[bh*p.tq*p.d:])
	w.rope.rotate(q, p.d, p.tq, p.ropeQ0, false)
	if p.opt.Compute.bf16() {
		kernel.RoundBF16s(w.qb[bh*p.tq*p.d:(bh+1)*p.tq*p.d], q)
	}
}

// transpose writes Kᵀ of one (batch, K/V head) in blocks of keys, as the layer does, rotating
// each block first with rotary; when the forward reads K in place, only the rotated K.
func (w *sdpaWork) transpose(worker, task int) {
	p, ld := &w.p, w.ldkt
	if p.opt.Compute.bf16() {
		w.convertKV(worker, task)
		return
	}
	src := p.k[task*p.tk*p.d:]
	dst := w.kt[task*p.d*ld:]
	const block = 64
	if p.ropeDim > 0 {
		w.rows[worker] = kernel.Grow(w.rows[worker], block*p.d)
	}
	for j0 := 0; j0 < p.tk; j0 += block {
		j1 := min(j0+block, p.tk)
		blk := src[j0*p.d:]
		if p.ropeDim > 0 {
			blk = w.rows[worker][:(j1-j0)*p.d]
			if w.krot != nil {
				blk = w.krot[(task*p.tk+j0)*p.d : (task*p.tk+j1)*p.d]
			}
			copy(blk, src[j0*p.d:j1*p.d])
			w.rope.rotate(blk, p.d, j1-j0, p.ropeK0+j0, false)
		}
		if w.kInPlace {
			continue
		}
		kernel.Transpose(dst[j0:], ld, blk, p.d, j1-j0, p.d)
	}
}

// convertKV writes the bfloat16 bits of K (rotated, with rotary) and V of one (batch, K/V head)
// into w.kb and w.vb, and with packKV their packings into w.kvp: the transpose phase's task
// with ComputeBFloat16.
func (w *sdpaWork) convertKV(worker, task int) {
	p := &w.p
	kb, vb := w.kb[task*p.tk*p.d:(task+1)*p.tk*p.d], w.vb[task*p.tk*p.dv:(task+1)*p.tk*p.dv]
	kernel.RoundBF16s(vb, p.v[task*p.tk*p.dv:])
	if p.ropeDim == 0 {
		kernel.RoundBF16s(kb, p.k[task*p.tk*p.d:])
	} else {
		const block = 64
		w.rows[worker] = kernel.Grow(w.rows[worker], block*p.d)
		for j0 := 0; j0 < p.tk; j0 += block {
			j1 := min(j0+block, p.tk)
			blk := w.rows[worker][:(j1-j0)*p.d]
			copy(blk, p.k[(task*p.tk+j0)*p.d:])
			w.rope.rotate(blk, p.d, j1-j0, p.ropeK0+j0, false)
			kernel.RoundBF16s(kb[j0*p.d:j1*p.d], blk)
		}
	}
	if w.packKV {
		w.kvp[2*task].Pack(true, p.d, p.tk, kb, p.d)
		w.kvp[2*task+1].Pack(false, p.tk, p.dv, vb, p.dv)
	}
}

// attend runs one task: a run of w.run query blocks of one (batch, query head).
func (w *sdpaWork) attend(worker, task int) {
	bh, blk0, blk1 := blockRun(task, w.qBlocks, w.run)
	for blk := blk0; blk < blk1; blk++ {
		w.attendBlock(worker, bh, blk, blk+1 < blk1)
	}
}

// attendBlock runs query block blk of (batch, query head) bh, prefetching for the next block
// when ahead.
func (w *sdpaWork) attendBlock(worker, bh, blk int, ahead bool) {
	p := &w.p
	task := bh*w.qBlocks + blk
	b, h := bh/p.hq, bh%p.hq
	kv := b*p.hkv + p.kvHead(h)
	bq := p.opt.Compute.blockQ()
	i0 := blk * bq
	i1 := min(i0+bq, p.tq)
	hd := attend.Head[float32]{
		Q: view(w.q, bh*p.tq*p.d), LdQ: p.d,
		Kt: view(w.kt, kv*max(p.d, 1)*w.ldkt), LdKt: w.ldkt,
		V: view(p.v, kv*p.tk*p.dv), LdV: p.dv,
		Out: view(w.r.Out.Data, bh*p.tq*p.dv), LdOut: p.dv,
		Tq: p.tq, Tk: p.tk, D: p.d, Dv: p.dv,
	}
	if p.opt.Compute.bf16() {
		hd.Qb, hd.Kb, hd.Vb = view(w.qb, bh*p.tq*p.d), view(w.kb, kv*p.tk*p.d), view(w.vb, kv*p.tk*p.dv)
		hd.LdK = p.d
		if w.packKV {
			hd.Kp, hd.Vp = &w.kvp[2*kv], &w.kvp[2*kv+1]
		}
	}
	if w.kInPlace {
		k := p.k
		if w.krot != nil {
			k = w.krot
		}
		hd.K, hd.LdK, hd.Kt, hd.LdKt = view(k, kv*p.tk*p.d), p.d, nil, 0
	}
	bias := p.bias(b, h)
	var wts, lse []float32
	if w.r.Weights != nil {
		wts = w.r.Weights.Data[(bh*p.tq+i0)*p.tk : (bh*p.tq+i1)*p.tk]
	}
	if w.r.LSE != nil {
		lse = w.r.LSE.Data[bh*p.tq+i0 : bh*p.tq+i1]
	}
	var d attend.Dropout
	drop := p.dropout(&d, b, h)
	sc := &w.scratch[worker]
	if ahead {
		sc.Prefetch(&hd, &bias, i1, min(i1+bq, p.tq))
	}
	w.masked[worker] += attend.Tiled(&hd, &bias, float32(p.scale), drop, i0, i1, wts, lse, sc)
	if p.normalized() {
		w.visible[task], w.zero[task], sc.Visible, sc.Zero = sc.Visible, sc.Zero, 0, 0
	}
	if wts != nil && drop != nil { // Tiled leaves the weights before dropout
		for r := range i1 - i0 {
			drop.Apply(i0+r, 0, wts[r*p.tk:(r+1)*p.tk])
		}
	}
}

// SDPAReference computes the same as SDPA in float64, densely, one (batch, query head) at a time
// with the full [Tq, Tk] weight matrix: the oracle of SDPA's tests. Shapes and errors are as for
// SDPA; Workers is ignored.
func SDPAReference(q, k, v *tensor.Tensor, opt *SDPAOptions) (*SDPATrace, error) {
	p := new(sdpaPlan)
	var slopes []float64
	if err := p.check(q, k, v, opt, &slopes); err != nil {
		return nil, err
	}
	if elements(p.b, p.hq, p.tq, p.tk) > MaxDenseElements {
		return nil, fmt.Errorf("%w: weights [%d %d %d %d] would hold more than %d values", ErrShape, p.b, p.hq, p.tq, p.tk, int64(MaxDenseElements))
	}
	tr := &SDPATrace{B: p.b, Hq: p.hq, Hkv: p.hkv, Tq: p.tq, Tk: p.tk, D: p.d, Dv: p.dv}
	tr.Out = make([]float64, p.b*p.hq*p.tq*p.dv)
	tr.LSE = make([]float64, p.b*p.hq*p.tq)
	tr.Weights = make([]float64, p.b*p.hq*p.tq*p.tk)
	qf, kf, vf := as[float64](p.q), as[float64](p.k), as[float64](p.v)
	if r := p.opt.Rotary; r != nil {
		inv, a := r.invFreq(nil, p.ropeDim, r.Offset+p.tk), r.attentionFactor()
		for row := range len(qf) / max(p.d, 1) {
			rotate64(qf[row*p.d:(row+1)*p.d], inv, r.Offset+p.tk-p.tq+row%p.tq, r.Layout, a)
		}
		for row := range len(kf) / max(p.d, 1) {
			rotate64(kf[row*p.d:(row+1)*p.d], inv, r.Offset+row%p.tk, r.Layout, a)
		}
	}
	for b := range p.b {
		for h := range p.hq {
			bh, kv := b*p.hq+h, b*p.hkv+p.kvHead(h)
			hd := attend.Head[float64]{
				Q: view(qf, bh*p.tq*p.d), LdQ: p.d,
				K: view(kf, kv*p.tk*p.d), LdK: p.d,
				V: view(vf, kv*p.tk*p.dv), LdV: p.dv,
				Out: view(tr.Out, bh*p.tq*p.dv), LdOut: p.dv,
				Tq: p.tq, Tk: p.tk, D: p.d, Dv: p.dv,
			}
			bias := p.bias(b, h)
			tr.FullyMasked += attend.DenseLSE(&hd, &bias, p.scale, p.dropout(new(attend.Dropout), b, h), view(tr.Weights, bh*p.tq*p.tk), view(tr.LSE, bh*p.tq))
		}
	}
	return tr, nil
}
