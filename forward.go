package mha

import (
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// Options are the per-call arguments of Forward, named after nn.MultiheadAttention.forward's. The
// zero value (or a nil *Options) is self- or cross-attention with no mask, no weights returned,
// in evaluation mode.
type Options struct {
	// KeyPaddingMask is [B, Tk] ([Tk] for unbatched inputs); true marks a padding key that no
	// query may attend.
	KeyPaddingMask *tensor.Bool
	// AttnMask is [Tq, Tk] or [B·H, Tq, Tk] (index b·H + h); true means query i may not attend
	// key j. This is PyTorch's boolean attn_mask.
	AttnMask *tensor.Bool
	// AttnBias is [Tq, Tk] or [B·H, Tq, Tk], added to the scaled scores; −Inf masks. This is
	// PyTorch's float attn_mask. It may be given together with AttnMask.
	AttnBias *tensor.Tensor
	// Causal masks key j for query i when j > i (top-left alignment, also when Tq ≠ Tk). The
	// keys appended by add_bias_kv and add_zero_attn stay visible, as in PyTorch.
	Causal bool
	// Window, when not nil, is a sliding window aligned as Causal is, top-left: query i sees
	// keys i − Left ≤ j ≤ i + Right (−1: unbounded on that side); with Causal, Right is
	// moot. Keys outside it are skipped, not computed. The keys appended by add_bias_kv and
	// add_zero_attn stay visible. (SDPA's windows align bottom-right, at i + Tk − Tq; in
	// self-attention the two agree.)
	Window *Window
	// Softcap, when > 0, caps every scaled score s to Softcap·tanh(s/Softcap) before the masks
	// and biases (Gemma 2's logit soft-capping).
	Softcap float64
	// ALiBi subtracts slope_h·|i − j| from head h's scores (Press et al.; positions aligned as
	// Causal is): Slopes[h] when Slopes is not nil (len H, finite), else AlibiSlopes(H).
	ALiBi  bool
	Slopes []float64
	// Patterns, Block and Normalizer make the attention sparse, as SDPAOptions' do (the
	// patterns' distances counted as there, r = i + Tk − Tq − j). A Normalizer other than
	// softmax needs whole rows: each worker holds its block's rows of scores (64 × Tk, not
	// every head's weights), and the backward recomputes them; it takes no sinks.
	Patterns   []Pattern
	Block      [2]int
	Normalizer *Normalizer
	// NeedWeights asks for the attention weights in Result.Weights.
	NeedWeights bool
	// PerHeadWeights returns weights per head, [B, H, Tq, Tk], instead of averaged over heads,
	// [B, Tq, Tk]: PyTorch's average_attn_weights=False.
	PerHeadWeights bool
	// Training applies dropout (Config.Dropout) to the attention weights.
	Training bool
	// DropoutSeed seeds the dropout mask; the same seed gives the same mask.
	DropoutSeed uint64
	// Workers bounds how many goroutines this call runs on; 0 means runtime.GOMAXPROCS(0), and a
	// negative count is an error. The result does not depend on it.
	Workers int
	// Heads records or intervenes on single heads, for probes; the zero value leaves them alone.
	Heads HeadOptions
	// Compute is the arithmetic of the projections and the attention's products:
	// ComputeFloat32 (the zero value; PyTorch's float32 results) or ComputeBFloat16 (about
	// twice as fast, ~10⁻² relative error; inference only: see Compute).
	Compute Compute
}

// HeadOptions record and intervene on single heads. With head_h the output of head h (the
// columns o_h … o_h + d_h of the concatenation), the output projection reads
//
//	Concat'[b, t, o_h + i] = Gate[b, h] · head_h[b, t, i] + Shift[o_h + i] + Add[b, t, o_h + i]
//
// instead of Concat. Gate is Michel et al.'s (2019) ξ_h: Backward returns dL/dGate, whose
// magnitude is the head's importance. Gate 0 with Shift the head's mean output is mean
// ablation; Uniform is uniform ablation; Gate 0 with Add holding the head's output from another
// run is activation patching. The zero value changes nothing.
type HeadOptions struct {
	// Keep returns every head's output, before Gate and Shift, in Result.Heads.
	Keep bool
	// Gate is [B, H] ([H] for unbatched inputs); nil means 1 everywhere.
	Gate *tensor.Tensor
	// Shift is [H·d] (Config.InnerDim: E unless HeadSize is set); nil means 0.
	Shift []float32
	// Add is [B, Tq, H·d] ([Tq, H·d] for unbatched inputs); nil means 0. It is a constant:
	// Backward gives it no gradient.
	Add *tensor.Tensor
	// Uniform is [H]; a head marked true scores every key 0, so it attends uniformly over the
	// keys its masks, window and patterns let it see: it takes no ALiBi distances, and softmax
	// whatever the Normalizer (top-k would pick K of the equal scores). AttnBias is still
	// added, and a sink still takes its share.
	Uniform []bool
}

// Result is what Forward returns.
type Result struct {
	// Output is [B, Tq, E] ([Tq, E] for unbatched inputs).
	Output *tensor.Tensor
	// Weights is nil unless Options.NeedWeights: [B, Tq, Tk'] averaged over heads, or
	// [B, H, Tq, Tk'] with Options.PerHeadWeights, where Tk' counts the key rows appended by
	// add_bias_kv and add_zero_attn. Unbatched inputs drop the B dimension.
	Weights *tensor.Tensor
	// Heads is nil unless Options.Heads.Keep: the concatenated head outputs [B, Tq, H·d] (H·d =
	// Config.InnerDim, E unless HeadSize is set) before
	// the output projection (and before Gate and Shift), head h in columns
	// Config.HeadOffset(h) … + Config.HeadDim(h). Unbatched inputs drop the B dimension.
	Heads *tensor.Tensor
	// FullyMasked counts the (batch, head, query) rows whose keys were all masked (or that had no
	// key at all: Tk' = 0). Their weights and head output are 0, so such a query's output is
	// out_proj.bias when every head masks it; PyTorch returns NaN for masked rows (and
	// out_proj.bias, like mha, when there is no key).
	FullyMasked int
	// ZeroFraction is nil unless Options.Normalizer is other than softmax: per head [H], over the
	// batch and the queries, the fraction of the pairs that the masks, window and patterns leave
	// visible whose weight the normalizer set to exactly 0 (0 for a head with no visible pair).
	ZeroFraction []float64
}

// Trace is every intermediate of one float64 Reference computation, laid out as in the
// chapters. Tk counts the appended bias_kv and zero_attn rows.
type Trace struct {
	B, Tq, Tk, H, D, E int       // D is the head size when all heads have one (0 with HeadDims of different sizes)
	Q                  []float64 // [B, Tq, H·d] query projection, normalised with QKNorm, rotated with rotary; head h is columns h·D … (h+1)·D
	K, V               []float64 // [B, Tk, KVDim] key and value projections, K normalised and rotated as Q
	Scores             []float64 // [B, H, Tq, Tk] Q_h·K_hᵀ
	Scaled             []float64 // [B, H, Tq, Tk] Q_h·K_hᵀ/√D + masks, −Inf where masked
	Weights            []float64 // [B, H, Tq, Tk] softmax of Scaled, or Options.Normalizer's weights (0 in fully masked rows); after dropout with Options.Training
	Concat             []float64 // [B, Tq, H·d] head outputs side by side, before Options.Heads' Gate and Shift
	Output             []float64 // [B, Tq, E]
	FullyMasked        int
}

// Forward computes multi-head attention of query over key and value in float32.
//
//	query [B, Tq, E], key [B, Tk, kdim], value [B, Tk, vdim] → Output [B, Tq, E]
//
// Unbatched inputs [Tq, E], [Tk, kdim], [Tk, vdim] give unbatched results. With key and value
// both nil it is self-attention (key = value = query). Any of B, Tq and Tk may be 0: B = 0 or
// Tq = 0 gives an empty Output [B, Tq, E] and Weights [B, Tq, Tk'], and Tk' = 0 (Tk = 0 with no
// appended key) gives every query no key, so that its Output row is out_proj.bias (0 without
// biases) and FullyMasked counts B·H·Tq rows. It returns an error wrapping ErrShape when an
// input or mask does not fit the layer or the others; the message gives the shape it wanted and
// the one that came.
func (l *Layer) Forward(query, key, value *tensor.Tensor, opt *Options) (*Result, error) {
	r := new(Result)
	if err := l.ForwardInto(r, query, key, value, opt); err != nil {
		return nil, err
	}
	return r, nil
}

// Reference computes the same as Forward in float64, step by step as the chapters write it, and
// returns every intermediate. It is the oracle of the tests and the engine of `mha explain`: slow,
// and it keeps all [Tq, Tk] matrices. Sizes of 0 and errors are as for Forward.
func (l *Layer) Reference(query, key, value *tensor.Tensor, opt *Options) (*Trace, error) {
	p := new(plan)
	if err := l.plan(p, query, key, value, opt, true); err != nil {
		return nil, err
	}
	tr := &Trace{B: p.b, Tq: p.tq, Tk: p.tkx, H: l.cfg.NumHeads, E: l.cfg.EmbedDim}
	if !l.cfg.unequalHeads() {
		tr.D = l.cfg.HeadDim(0)
	}
	tr.Output, tr.Weights, tr.FullyMasked = run[float64](l, p, tr)
	return tr, nil
}

// plan is a validated call: the inputs' values, read as [B, T, features], and the sizes that
// follow.
type plan struct {
	q, k, v     []float32
	self        bool // key and value are the query itself
	kvSame      bool // key and value are one tensor
	opt         Options
	b, tq, tk   int
	tkx         int // tk plus the appended bias_kv and zero_attn rows
	unbatched   bool
	maskPerHead bool            // AttnMask is [B·H, Tq, Tk]
	biasPerHead bool            // AttnBias is [B·H, Tq, Tk]
	slopes      []float64       // ALiBi's slopes per head, or nil
	sinks       []float32       // the layer's sinks per head, or nil
	sparse      []attend.Sparse // the patterns' layouts: one per head, or one for all
	layouts     layoutCache     // kept across calls
}

// MaxDenseElements bounds the [Tq, Tk] attention matrices a call may build: those of all B·H
// heads when Forward returns the weights, and those Reference keeps. Forward without weights
// never builds them. It also bounds what a call whose inputs have a size of 0 may ask for (a
// batch of empty sequences, SDPA with D = 0): sizes that no value of the inputs backs.
const MaxDenseElements = 1 << 31

// denseElements returns how many attention values the call holds at once: the weights of every
// head when they are returned or traced, else none.
func (p *plan) denseElements(heads int, traced bool) int64 {
	if !p.opt.NeedWeights && !traced {
		return 0
	}
	return int64(p.tq) * int64(p.tkx) * int64(p.b) * int64(heads)
}

// plan checks the inputs against the layer and each other and fills p. traced says the call
// keeps every head's attention matrices (Reference does).
func (l *Layer) plan(p *plan, query, key, value *tensor.Tensor, opt *Options, traced bool) error {
	c := l.cfg
	*p = plan{layouts: p.layouts}
	if opt != nil {
		p.opt = *opt
	}
	if err := p.opt.Compute.check(); err != nil {
		return err
	}
	if p.opt.Workers < 0 {
		return fmt.Errorf("%w: %d workers, want ≥ 0 (0 for GOMAXPROCS)", ErrShape, p.opt.Workers)
	}
	if query == nil {
		return fmt.Errorf("%w: query is nil, want [B Tq %d]", ErrShape, c.EmbedDim)
	}
	if (key == nil) != (value == nil) {
		return fmt.Errorf("%w: give key and value together, or neither for self-attention", ErrShape)
	}
	if key == nil {
		if !c.sameDims() {
			return fmt.Errorf("%w: self-attention needs kdim = vdim = E, the layer has kdim %d, vdim %d, E %d", ErrShape, c.kdim(), c.vdim(), c.EmbedDim)
		}
		key, value = query, query
	}
	p.self = key == query && value == query
	p.kvSame = key == value
	if err := checkData("query", query.Shape, len(query.Data)); err != nil {
		return err
	}
	switch len(query.Shape) {
	case 3:
	case 2:
		p.unbatched = true
	default:
		return fmt.Errorf("%w: query is %v, want [B Tq %d] or unbatched [Tq %d]", ErrShape, query.Shape, c.EmbedDim, c.EmbedDim)
	}
	qb, tq, err := batched("query", query, p.unbatched, "Tq", c.EmbedDim)
	if err != nil {
		return err
	}
	kb, tk, err := batched("key", key, p.unbatched, "Tk", c.kdim())
	if err != nil {
		return err
	}
	vb, tv, err := batched("value", value, p.unbatched, "Tk", c.vdim())
	if err != nil {
		return err
	}
	p.q, p.k, p.v = query.Data, key.Data, value.Data
	p.b, p.tq, p.tk = qb, tq, tk
	if kb != p.b || vb != p.b {
		return fmt.Errorf("%w: batch sizes differ: query %d, key %d, value %d", ErrShape, p.b, kb, vb)
	}
	if tv != p.tk {
		return fmt.Errorf("%w: key has %d rows and value %d, want the same", ErrShape, p.tk, tv)
	}
	if r := c.Rotary; r != nil {
		if start, _, _, _ := ropeSpan(r.Offset, p.tq, p.tk); r.Offset+p.tk > maxRopePosition || start < -maxRopePosition {
			return fmt.Errorf("%w: rotary positions %d to %d, want them within ±%d", ErrShape, start, r.Offset+p.tk-1, maxRopePosition)
		}
	}
	p.tkx = p.tk
	if c.AddBiasKV {
		p.tkx++
	}
	if c.AddZeroAttn {
		p.tkx++
	}
	// A size of 0 leaves the others backed by no value (an empty query and key of any batch);
	// as in SDPA, such a call, its sizes taken as at least 1, is held to MaxDenseElements
	// values of projections and Kᵀ (whose rows are padded by up to 16).
	if p.b == 0 || p.tq == 0 || p.tk == 0 {
		if n := elements(max(p.b, 1), max(p.tq, 1)+max(p.tkx, 1)+16, c.EmbedDim+c.kdim()+c.vdim()); n > MaxDenseElements {
			return fmt.Errorf("%w: query %v, key %v and value %v have a size of 0 and ask for %.4g values of projections that no value backs, more than %d", ErrShape, query.Shape, key.Shape, value.Shape, n, int64(MaxDenseElements))
		}
	}
	if n := p.denseElements(c.NumHeads, traced); n > MaxDenseElements {
		return fmt.Errorf("%w: the attention matrices of query %v and key %v hold %d values, more than the %d (8 GiB) allowed when they are kept (NeedWeights, Reference)", ErrShape, query.Shape, key.Shape, n, MaxDenseElements)
	}
	if w := p.opt.Window; w != nil && (w.Left < -1 || w.Right < -1) {
		return fmt.Errorf("%w: window is (%d, %d), want sizes ≥ 0 or −1 for unbounded", ErrShape, w.Left, w.Right)
	}
	if err := p.checkBiases(c.NumHeads); err != nil {
		return err
	}
	p.sinks = l.param("sinks")
	if err := p.checkSparsity(c.NumHeads); err != nil {
		return err
	}
	if m := p.opt.KeyPaddingMask; m != nil {
		if err := checkData("key_padding_mask", m.Shape, len(m.Data)); err != nil {
			return err
		}
		ok := len(m.Shape) == 2 && m.Shape[0] == p.b && m.Shape[1] == p.tk
		if p.unbatched {
			ok = len(m.Shape) == 1 && m.Shape[0] == p.tk
		}
		if !ok {
			want := []int{p.b, p.tk}
			if p.unbatched {
				want = want[1:]
			}
			return fmt.Errorf("%w: key_padding_mask is %v, want %v", ErrShape, m.Shape, want)
		}
	}
	if m := p.opt.AttnMask; m != nil {
		if p.maskPerHead, err = p.checkAttnMask("attn_mask", m.Shape, len(m.Data), c.NumHeads); err != nil {
			return err
		}
	}
	if m := p.opt.AttnBias; m != nil {
		if p.biasPerHead, err = p.checkAttnMask("attn_bias", m.Shape, len(m.Data), c.NumHeads); err != nil {
			return err
		}
	}
	return p.checkHeads(c)
}

// checkBiases checks Options.Softcap, ALiBi and Slopes for a layer of the given heads, and sets
// p.slopes.
func (p *plan) checkBiases(heads int) error {
	o := &p.opt
	switch {
	case !(o.Softcap >= 0) || math.IsInf(o.Softcap, 1):
		return fmt.Errorf("%w: softcap is %v, want a finite number ≥ 0 (0 for none)", ErrShape, o.Softcap)
	case o.Slopes != nil && !o.ALiBi:
		return fmt.Errorf("%w: slopes given without ALiBi", ErrShape)
	case o.Slopes != nil && len(o.Slopes) != heads:
		return fmt.Errorf("%w: %d ALiBi slopes, want one per head (%d)", ErrShape, len(o.Slopes), heads)
	}
	for h, s := range o.Slopes {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: ALiBi slope of head %d is %v, want a finite number", ErrShape, h, s)
		}
	}
	if o.ALiBi {
		p.slopes = o.Slopes
		if p.slopes == nil {
			p.slopes = AlibiSlopes(heads)
		}
	}
	return nil
}

// normalized reports whether the call replaces the softmax.
func (p *plan) normalized() bool {
	return p.opt.Normalizer != nil && p.opt.Normalizer.Kind != Softmax
}

// checkSparsity checks Options.Patterns, Block and Normalizer, and compiles the patterns into
// p.sparse.
func (p *plan) checkSparsity(heads int) error {
	o := &p.opt
	if n := o.Normalizer; n != nil {
		switch {
		case !n.Valid():
			return fmt.Errorf("%w: normalizer %s, want softmax, sparsemax, entmax with α > 1 finite, or top-k with K ≥ 1", ErrShape, n)
		case n.Kind != Softmax && p.sinks != nil:
			return fmt.Errorf("%w: the %s normalizer takes no sinks", ErrShape, n)
		}
	}
	var err error
	p.sparse, err = p.layouts.compileSparse(o.Patterns, o.Block, heads, p.tq, p.tk)
	return err
}

// checkHeads checks Options.Heads against the layer and the call.
func (p *plan) checkHeads(c Config) error {
	ho := &p.opt.Heads
	if g := ho.Gate; g != nil {
		if err := checkData("head gate", g.Shape, len(g.Data)); err != nil {
			return err
		}
		want := []int{p.b, c.NumHeads}
		if p.unbatched {
			want = want[1:]
		}
		if !slices.Equal(g.Shape, want) {
			return fmt.Errorf("%w: head gate is %v, want %v (B H)", ErrShape, g.Shape, want)
		}
		for i, x := range g.Data {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%w: head gate value %d is %v, want a finite number", ErrShape, i, x)
			}
		}
	}
	if a := ho.Add; a != nil {
		if err := checkData("head add", a.Shape, len(a.Data)); err != nil {
			return err
		}
		want := []int{p.b, p.tq, c.InnerDim()}
		if p.unbatched {
			want = want[1:]
		}
		if !slices.Equal(a.Shape, want) {
			return fmt.Errorf("%w: head add is %v, want %v (B Tq %s)", ErrShape, a.Shape, want, c.innerName())
		}
	}
	if ho.Shift != nil && len(ho.Shift) != c.InnerDim() {
		return fmt.Errorf("%w: head shift has %d values, want %s = %d", ErrShape, len(ho.Shift), c.innerName(), c.InnerDim())
	}
	if ho.Uniform != nil && len(ho.Uniform) != c.NumHeads {
		return fmt.Errorf("%w: uniform heads has %d flags, want H = %d", ErrShape, len(ho.Uniform), c.NumHeads)
	}
	return nil
}

// gated reports whether the call gates or shifts the heads before the output projection.
func (p *plan) gated() bool {
	ho := &p.opt.Heads
	return ho.Gate != nil || ho.Shift != nil || ho.Add != nil
}

// gate returns Gate[b, h], 1 without a gate.
func (p *plan) gate(b, h, heads int) float32 {
	if g := p.opt.Heads.Gate; g != nil {
		return g.Data[b*heads+h]
	}
	return 1
}

// scale returns head h's score scale in this call: 0 for a uniform head, else the layer's.
func (p *plan) scale(c Config, h int) float64 {
	if u := p.opt.Heads.Uniform; u != nil && u[h] {
		return 0
	}
	return c.HeadScale(h)
}

// applyGate writes dst = Gate·src + Shift + Add for the concatenated heads of every batch, src and dst
// [B, rows, H·d] with row strides lds and ldd and rows per batch rs and rd; the first tq rows of
// each batch count. Head h owns columns offs[h] … offs[h+1].
func applyGate[F kernel.Float](p *plan, offs []int, src []F, lds, rs int, dst []F, ldd, rd int) {
	heads := len(offs) - 1
	e, shift, add := offs[heads], p.opt.Heads.Shift, p.opt.Heads.Add
	for b := range p.b {
		for t := range p.tq {
			in, out := src[(b*rs+t)*lds:][:e], dst[(b*rd+t)*ldd:][:e]
			for h := range heads {
				g := F(p.gate(b, h, heads))
				for j := offs[h]; j < offs[h+1]; j++ {
					out[j] = g * in[j]
				}
			}
			if shift != nil {
				for j := range out {
					out[j] += F(shift[j])
				}
			}
			if add != nil {
				for j, v := range add.Data[(b*p.tq+t)*e:][:e] {
					out[j] += F(v)
				}
			}
		}
	}
}

// checkData reports an error when a tensor's data does not fill its shape.
func checkData(name string, shape []int, n int) error {
	want, err := tensor.NumElements(shape)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrShape, name, err)
	}
	if want != n {
		return fmt.Errorf("%w: %s is %v (%d values) but holds %d values", ErrShape, name, shape, want, n)
	}
	return nil
}

// batched checks that t is [B, T, features] (or [T, features] when unbatched, B = 1) and returns
// B and T.
func batched(name string, t *tensor.Tensor, unbatched bool, rows string, features int) (b, n int, err error) {
	if err := checkData(name, t.Shape, len(t.Data)); err != nil {
		return 0, 0, err
	}
	if unbatched {
		if len(t.Shape) != 2 || t.Shape[1] != features {
			return 0, 0, fmt.Errorf("%w: %s is %v, want unbatched [%s %d] like the query", ErrShape, name, t.Shape, rows, features)
		}
		return 1, t.Shape[0], nil
	}
	if len(t.Shape) != 3 || t.Shape[2] != features {
		return 0, 0, fmt.Errorf("%w: %s is %v, want [B %s %d]", ErrShape, name, t.Shape, rows, features)
	}
	return t.Shape[0], t.Shape[1], nil
}

// checkAttnMask checks an attention mask's shape, [Tq, Tk] or [B·H, Tq, Tk], and reports
// whether it is per head.
func (p *plan) checkAttnMask(name string, shape []int, n, heads int) (perHead bool, err error) {
	if err := checkData(name, shape, n); err != nil {
		return false, err
	}
	switch {
	case slices.Equal(shape, []int{p.tq, p.tk}):
		return false, nil
	case slices.Equal(shape, []int{p.b * heads, p.tq, p.tk}):
		return true, nil
	}
	return false, fmt.Errorf("%w: %s is %v, want [%d %d] or [%d %d %d] (Tq Tk or B·H Tq Tk)", ErrShape, name, shape, p.tq, p.tk, p.b*heads, p.tq, p.tk)
}

// bias returns the mask description of batch b, head h.
func (p *plan) bias(b, h, heads int) attend.Bias {
	bias := attend.Bias{Causal: p.opt.Causal, Stride: p.tk, Softcap: p.opt.Softcap}
	if p.slopes != nil {
		bias.Slope = p.slopes[h]
	}
	if p.sinks != nil {
		bias.HasSink, bias.Sink = true, float64(p.sinks[h])
	}
	if len(p.sparse) > 0 {
		bias.Sparse = &p.sparse[min(h, len(p.sparse)-1)]
	}
	bias.Normalizer = p.opt.Normalizer
	if u := p.opt.Heads.Uniform; u != nil && u[h] {
		bias.Slope, bias.Normalizer = 0, nil // see HeadOptions.Uniform
	}
	if w := p.opt.Window; w != nil {
		// Sizes beyond Tq + Tk see the same keys; clamping keeps i ± size from overflowing.
		bias.Window, bias.Left, bias.Right = true, min(w.Left, p.tq+p.tk), min(w.Right, p.tq+p.tk)
	}
	n := p.tq * p.tk
	if m := p.opt.KeyPaddingMask; m != nil {
		bias.KeyPad = m.Data[b*p.tk : (b+1)*p.tk]
	}
	if m := p.opt.AttnMask; m != nil {
		bias.Mask = m.Data
		if p.maskPerHead {
			bias.Mask = m.Data[(b*heads+h)*n : (b*heads+h+1)*n]
		}
	}
	if m := p.opt.AttnBias; m != nil {
		bias.Add = m.Data
		if p.biasPerHead {
			bias.Add = m.Data[(b*heads+h)*n : (b*heads+h+1)*n]
		}
	}
	return bias
}

// dropout returns the dropout of batch b, head h, or nil when the call does not drop.
func (p *plan) dropout(b, h, heads int, prob float64) *attend.Dropout {
	if !p.opt.Training || prob == 0 {
		return nil
	}
	d := headDropout(prob, p.opt.DropoutSeed, b, h, heads)
	return &d
}

// headDropout is the dropout of batch b, head h of heads: each (batch, head) draws its own mask
// from seed.
func headDropout(prob float64, seed uint64, b, h, heads int) attend.Dropout {
	return attend.Dropout{P: prob, Seed: seed ^ uint64(b*heads+h+1)*0x9e3779b97f4a7c15}
}

// run is the layer's computation in precision F. It returns the output [B, Tq, E], the per-head
// weights [B, H, Tq, Tkx] when they were asked for or traced, and the count of fully masked rows.
func run[F kernel.Float](l *Layer, p *plan, tr *Trace) (out, weights []F, fullyMasked int) {
	c := l.cfg
	e, ekv, heads := c.InnerDim(), c.KVDim(), c.NumHeads
	wq, wk, wv, bq, bk, bv := l.projections()

	// The stacked projections: Q = X_q·W_qᵀ + b_q and likewise K and V, [B, T, H·d] (K and V
	// [B, T, Hkv·d] with grouped K/V heads).
	q := linear(as[F](p.q), p.b*p.tq, c.EmbedDim, wq.Float32s(), bq, e)
	k := linear(as[F](p.k), p.b*p.tk, c.kdim(), wk.Float32s(), bk, ekv)
	v := linear(as[F](p.v), p.b*p.tk, c.vdim(), wv.Float32s(), bv, ekv)
	k = appendRows(k, p, ekv, l.param("bias_k"), c.AddZeroAttn)
	v = appendRows(v, p, ekv, l.param("bias_v"), c.AddZeroAttn)
	if n := c.QKNorm; n != nil && n.Across {
		normRows(q, e, []int{0, e}, l.param("q_norm.weight"), n.Eps)
		normRows(k, ekv, []int{0, ekv}, l.param("k_norm.weight"), n.Eps)
	} else if n != nil {
		normRows(q, e, l.offs, l.param("q_norm.weight"), n.Eps)
		normRows(k, ekv, l.kvOffs, l.param("k_norm.weight"), n.Eps)
	}
	if r := c.Rotary; r != nil {
		// Every head's query and key rotated by the exact angles of their positions.
		inv, a := r.invFreq(nil, l.ropeDim, r.Offset+p.tk), r.attentionFactor()
		rotateRows(q, e, p.tq, p.tk-p.tq+r.Offset, l.offs, l.ropeDim, inv, r.Layout, a)
		rotateRows(k, ekv, p.tk, r.Offset, l.kvOffs, l.ropeDim, inv, r.Layout, a)
	}

	// Each head attends in its own d_h-wide column block; head outputs land side by side in concat.
	n := p.tq * p.tkx
	keepWeights := p.opt.NeedWeights || tr != nil
	var w []F
	if keepWeights {
		w = make([]F, p.b*heads*n)
	} else {
		w = make([]F, n)
	}
	concat := make([]F, p.b*p.tq*e)
	for b := range p.b {
		for h := range heads {
			o, d, ko := l.offs[h], l.offs[h+1]-l.offs[h], l.kvOffs[c.KVHead(h)]
			hd := &attend.Head[F]{
				Q: view(q, b*p.tq*e+o), LdQ: e,
				K: view(k, b*p.tkx*ekv+ko), LdK: ekv,
				V: view(v, b*p.tkx*ekv+ko), LdV: ekv,
				Out: view(concat, b*p.tq*e+o), LdOut: e,
				Tq: p.tq, Tk: p.tkx, D: d, Dv: d,
			}
			bias := p.bias(b, h, heads)
			wh := w
			if keepWeights {
				wh = w[(b*heads+h)*n : (b*heads+h+1)*n]
			}
			drop := p.dropout(b, h, heads, c.Dropout)
			fullyMasked += attend.Dense(hd, &bias, F(p.scale(c, h)), drop, wh, traceSteps[F](tr, (b*heads+h)*n))
		}
	}

	// The output projection: Concat(head_1 … head_H)·W_oᵀ + b_o, of the gated heads.
	x := concat
	if p.gated() {
		x = make([]F, len(concat))
		applyGate(p, l.offs, concat, e, p.tq, x, e, p.tq)
	}
	out = linear(x, p.b*p.tq, e, l.matrix("out_proj.weight").Float32s(), l.param("out_proj.bias"), c.EmbedDim)
	if tr != nil {
		tr.Q, tr.K, tr.V, tr.Concat = f64(q), f64(k), f64(v), f64(concat)
	}
	if keepWeights {
		weights = w
	}
	return out, weights, fullyMasked
}

// rotateRows rotates x [N, T, width] in place: the first n dimensions of each head's columns,
// heads starting at offs (the last entry ends them), row t of each block of T at position
// first + t, by the exact float64 angles of inverse frequencies inv, the cosines and sines times
// a.
func rotateRows[F kernel.Float](x []F, width, t, first int, offs []int, n int, inv []float64, l RopeLayout, a float64) {
	row := make([]float64, n)
	for r := range len(x) / max(width, 1) {
		for _, o := range offs[:len(offs)-1] {
			seg := x[r*width+o : r*width+o+n]
			for i, v := range seg {
				row[i] = float64(v)
			}
			rotate64(row, inv, first+r%t, l, a)
			for i, v := range row {
				seg[i] = F(v)
			}
		}
	}
}

// traceSteps returns the hooks that copy one head's scores into tr at offset off, or nil when
// not tracing.
func traceSteps[F kernel.Float](tr *Trace, off int) *attend.Steps[F] {
	if tr == nil {
		return nil
	}
	if tr.Scores == nil {
		n := tr.B * tr.H * tr.Tq * tr.Tk
		tr.Scores, tr.Scaled = make([]float64, n), make([]float64, n)
	}
	save := func(dst []float64) func([]F) {
		return func(src []F) {
			for i, x := range src {
				dst[off+i] = float64(x)
			}
		}
	}
	return &attend.Steps[F]{Scores: save(tr.Scores), Scaled: save(tr.Scaled)}
}

// linear returns x·wᵀ + bias for x [rows, in] and w [out, in]; bias [out] may be nil.
func linear[F kernel.Float](x []F, rows, in int, w, bias []float32, out int) []F {
	y := make([]F, rows*out)
	var beta F
	if bias != nil {
		bf := as[F](bias)
		for r := range rows {
			copy(y[r*out:(r+1)*out], bf)
		}
		beta = 1
	}
	kernel.Gemm(false, true, rows, out, in, 1, x, in, as[F](w), in, beta, y, out)
	return y
}

// appendRows returns x [B, Tk, E] with bias [E] (when not nil) and then a zero row (when zero)
// appended to every batch's rows, giving [B, Tkx, E].
func appendRows[F kernel.Float](x []F, p *plan, e int, bias []float32, zero bool) []F {
	if p.tkx == p.tk {
		return x
	}
	bf := as[F](bias)
	y := make([]F, 0, p.b*p.tkx*e)
	for b := range p.b {
		y = append(y, x[b*p.tk*e:(b+1)*p.tk*e]...)
		y = append(y, bf...) // empty without add_bias_kv
		if zero {
			y = append(y, make([]F, e)...)
		}
	}
	return y
}

// view returns s from offset off, or an empty slice when off is past the end (zero-size inputs).
func view[F any](s []F, off int) []F {
	return s[min(off, len(s)):]
}

// as returns x in precision F: x itself for float32, a converted copy otherwise.
func as[F kernel.Float](x []float32) []F {
	if y, ok := any(x).([]F); ok {
		return y
	}
	y := make([]F, len(x))
	for i, v := range x {
		y[i] = F(v)
	}
	return y
}

// f64 returns x as float64 values (x itself when it already is).
func f64[F kernel.Float](x []F) []float64 {
	if y, ok := any(x).([]float64); ok {
		return y
	}
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}
