package nn

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// block is one decoder block: causal multi-head self-attention and, unless attention-only, a
// feed-forward network (see mlp), each with a residual connection and a normalisation layer
// (LayerNorm or RMSNorm):
//
//	post-norm:  x = LN1(x + MHA(x));     x = LN2(x + FFN(x))
//	pre-norm:   x = x + MHA(LN1(x));     x = x + FFN(LN2(x))
//	sandwich:   x = x + LN1'(MHA(LN1(x)));  x = x + LN2'(FFN(LN2(x)))
//	parallel:   x = x + MHA(LN1(x)) + FFN(LN2(x)), or FFN(LN1(x)) with a shared norm
type block struct {
	d        int // the stream's width, d_model
	pre      bool
	parallel bool       // the feed-forward network reads the block's input, not the stream after the attention
	ln1, ln2 *normLayer // ln2 is nil in attention-only blocks and with a shared norm
	post1    *normLayer // the sandwich's LN1' and LN2', or nil
	post2    *normLayer
	attn     *mha.Layer
	ffn      ffn         // nil in attention-only blocks
	window   *mha.Window // the block's sliding window, or nil

	res   mha.Result
	step  mha.Result // forwardCached's output, its storage reused from call to call
	saved mha.Saved
	grads mha.Grads     // Params hold the Grad tensors of the attention's nn parameters
	gated bool          // the last forward gated the heads: backward fills grads.Gate
	in    tensor.Tensor // views of the attention's input and of its output gradient, [B, T, d]
	dOut  tensor.Tensor
	dIn   tensor.Tensor
	sum1  []float32 // the residual sums: x + MHA(·) and x + FFN(·), [n, d]
	sum2  []float32
	x     []float32 // the last forward's input and the stream after its attention, [n, d]
	mid   []float32
}

// newBlock builds block l of a model for c from its parameters, with its attention layer, whose
// tensors become the values of the blocks.l.attn.* parameters. When half is not nil the layer
// is built from it (mha.NewHalf): its weight matrices become the parameters' Half, its float32
// biases their Value, with a Grad. When full is not nil the layer holds full's tensors
// (mha.NewFloat32); else New initialises it.
func newBlock(ps params, c Config, l int, attnSeed uint64, half map[string]*tensor.Half, full map[string]*tensor.Tensor) (_ *block, err error) {
	prefix := "blocks." + strconv.Itoa(l) + "."
	ac := c.blockAttention(l)
	ac.Seed = attnSeed
	var attn *mha.Layer
	var sd map[string]*tensor.Half
	switch {
	case half != nil:
		sd = attnTensors(half, prefix)
		attn, err = mha.NewHalf(ac, sd) // NewModelHalf checked the shapes and formats
	case full != nil:
		attn, err = mha.NewFloat32(ac, attnTensors(full, prefix)) // NewModelFloat32 checked the shapes
	default:
		attn, err = mha.New(ac)
	}
	if err != nil {
		return nil, fmt.Errorf("nn: block %d: %w", l, err)
	}
	b := &block{d: c.DModel, pre: c.Norm == PreNorm, parallel: c.ParallelResidual, attn: attn, window: c.window(l)}
	if !c.NoInputNorm {
		b.ln1 = newNorm(ps, c, prefix+"ln1")
	}
	if c.SandwichNorm {
		b.post1 = newNorm(ps, c, prefix+"ln1_post")
	}
	for _, q := range attn.HeldParameters() {
		p := ps.get(prefix + "attn." + q.Name)
		if q.T == nil { // a weight held in half precision
			p.Half, p.Value, p.Grad = sd[q.Name], nil, nil
		} else {
			if p.Value != nil && !slices.Equal(p.Value.Shape, q.T.Shape) {
				panic(fmt.Sprintf("nn: the layout gives %s shape %v, the attention layer %v", p.Name, p.Value.Shape, q.T.Shape))
			}
			p.Value = q.T
			if p.Grad == nil {
				p.Grad = tensor.New(q.T.Shape...)
			}
		}
		b.grads.Params = append(b.grads.Params, mha.Param{Name: q.Name, T: p.Grad})
	}
	if !c.AttnOnly {
		if !c.SharedNorm && !c.NoInputNorm {
			b.ln2 = newNorm(ps, c, prefix+"ln2")
		}
		b.ffn = newFFN(ps, c, prefix+"ffn.")
		if c.SandwichNorm {
			b.post2 = newNorm(ps, c, prefix+"ln2_post")
		}
	}
	return b, nil
}

// attnTensors returns the tensors of sd whose names start with prefix+"attn.", by the rest of
// their names: an attention layer's state dict.
func attnTensors[T any](sd map[string]T, prefix string) map[string]T {
	out := make(map[string]T)
	for name, t := range sd {
		if n, ok := strings.CutPrefix(name, prefix+"attn."); ok {
			out[n] = t
		}
	}
	return out
}

// forward returns the block's output [B·T, d] for x [B·T, d], keeping what backward needs.
// x must stay unchanged until backward has run.
func (b *block) forward(r *runner, x []float32, batch, t int, opt *mha.Options) ([]float32, error) {
	return b.run(r, x, batch, t, func() ([]float32, error) {
		if err := b.attn.ForwardTrain(&b.res, &b.saved, &b.in, nil, nil, opt); err != nil {
			return nil, err
		}
		b.gated = opt.Heads.Gate != nil
		return b.res.Output.Data, nil
	})
}

// forwardCached returns the block's output [B·T, d] for x [B·T, d], the next T positions of the
// sequences whose keys and values kv holds, which it extends; it keeps nothing for backward and
// computes in s's buffers, where the output lies.
func (b *block) forwardCached(r *runner, x []float32, batch, t int, kv *mha.KVCache, opt *mha.Options, s *shared) ([]float32, error) {
	b.swap(s)
	defer b.swap(s)
	return b.run(r, x, batch, t, func() ([]float32, error) {
		if err := b.attn.ForwardCacheInto(&b.step, kv, &b.in, opt); err != nil {
			return nil, err
		}
		return b.step.Output.Data, nil
	})
}

// shared holds the buffers of a block's forward that the blocks of an inference pass
// (ForwardCached) take turns with, since they run one after another and keep nothing for
// Backward: one set of activations for the model rather than one per block. A block's output
// lies in them until the next block has read it: the next one writes each buffer only after
// its input is no longer needed.
type shared struct {
	sum1, sum2            []float32
	norms                 [4]sharedNorm // ln1, ln2, and the sandwich's ln1_post and ln2_post
	gate, up, act, sig, h []float32     // the feed-forward network's hidden-width buffers
	ffnOut                []float32
	step                  mha.Result
}

// sharedNorm holds a normalisation layer's forward buffers in shared.
type sharedNorm struct{ y, mean, rstd []float32 }

// swap exchanges the block's forward buffers with s's. Called before and after a forward (it is
// its own inverse), it has the block compute in s's memory and leaves its own as it found them.
func (b *block) swap(s *shared) {
	sw := func(x, y *[]float32) { *x, *y = *y, *x }
	sw(&b.sum1, &s.sum1)
	sw(&b.sum2, &s.sum2)
	b.step, s.step = s.step, b.step
	for i, l := range []*normLayer{b.ln1, b.ln2, b.post1, b.post2} {
		if l != nil {
			n := &s.norms[i]
			sw(&l.y, &n.y)
			sw(&l.mean, &n.mean)
			sw(&l.rstd, &n.rstd)
		}
	}
	// A mixture of experts keeps its experts' buffers: its output is read within the block.
	if f, ok := b.ffn.(*mlp); ok {
		sw(&f.in.y, &s.gate)
		sw(&f.act.y, &s.act)
		sw(&f.act.gate, &s.sig)
		sw(&f.out.y, &s.ffnOut)
		if f.up != nil {
			sw(&f.up.y, &s.up)
			sw(&f.h, &s.h)
		}
	}
}

// run is the block's computation on x [B·T, d], with attend the attention of b.in, which run
// sets to the attention's input.
func (b *block) run(r *runner, x []float32, batch, t int, attend func() ([]float32, error)) ([]float32, error) {
	n, d := batch*t, b.d
	b.sum1 = kernel.Grow(b.sum1, n*d)
	b.x = x
	in := x
	if b.pre && b.ln1 != nil { // without input norms (OLMo 2) the attention reads the stream
		in = b.ln1.forward(r, x, n)
	}
	b.in = tensor.Tensor{Shape: []int{batch, t, d}, Data: in}
	y, err := attend()
	if err != nil {
		return nil, err
	}
	if b.post1 != nil {
		y = b.post1.forward(r, y, n)
	}
	add(r, b.sum1, x, y)
	x = b.sum1
	if !b.pre {
		x = b.ln1.forward(r, x, n)
	}
	b.mid = x
	if b.ffn == nil {
		return x, nil
	}
	b.sum2 = kernel.Grow(b.sum2, n*d)
	in = x
	switch {
	case b.parallel && b.ln2 == nil: // the shared norm's output, the attention's input
		in = b.in.Data
	case b.parallel:
		in = b.ln2.forward(r, b.x, n)
	case b.pre && b.ln2 != nil:
		in = b.ln2.forward(r, x, n)
	}
	y = b.ffn.forward(r, in, n)
	if b.post2 != nil {
		y = b.post2.forward(r, y, n)
	}
	add(r, b.sum2, x, y)
	if b.pre {
		return b.sum2, nil
	}
	return b.ln2.forward(r, b.sum2, n), nil
}

// attnBackward adds dL/dinput of the attention into dIn, given dOut = dL/dMHA(input); dOut and
// dIn must not overlap. It sets grads.Gate to dL/dGate when the forward gated the heads.
func (b *block) attnBackward(dOut, dIn []float32) error {
	b.dOut = tensor.Tensor{Shape: b.in.Shape, Data: dOut}
	b.dIn = tensor.Tensor{Shape: b.in.Shape, Data: dIn}
	b.grads.Query = &b.dIn
	b.grads.Gate = nil
	return b.attn.Backward(&b.grads, &b.saved, &b.dOut)
}

// backward writes dL/dx into dx and adds the parameters' gradients, given dy = dL/dy of the last
// forward's output and dHeads, an extra gradient on the attention's head outputs (or nil); dx
// and dy must not overlap.
func (b *block) backward(r *runner, dy, dx []float32, n int, s *scratch, dHeads *tensor.Tensor) error {
	b.grads.HeadsIn = dHeads
	d := b.d
	if b.pre {
		// y = x1 + FFN(LN2(x1)), x1 = x + MHA(LN1(x)) (with the sandwich, LN2'(FFN(·)) and
		// LN1'(MHA(·))): dx holds dL/dx1, then dL/dx.
		copy(dx, dy)
		if b.ffn != nil {
			dOut := dy
			if b.post2 != nil {
				dOut = zeroed(&s.d2, n*d)
				b.post2.backward(r, dy, dOut, n)
			}
			dh := zeroed(&s.d1, n*d)
			b.ffn.backward(r, dOut, dh, n, s)
			switch {
			case b.ln2 != nil:
				b.ln2.backward(r, dh, dx, n)
			case !b.parallel: // no input norm: the FFN read x1 itself
				add(r, dx, dx, dh)
			}
		}
		dOut := dx
		if b.parallel { // the attention's output reaches y directly, not through the FFN
			dOut = dy
		}
		if b.post1 != nil {
			dOut = zeroed(&s.d2, n*d)
			b.post1.backward(r, dx, dOut, n)
		}
		dh := s.d1 // with a shared norm, it holds the FFN's input gradient, to which the attention's adds
		if b.ffn == nil || b.ln2 != nil || !b.parallel {
			dh = zeroed(&s.d1, n*d)
		}
		if err := b.attnBackward(dOut, dh); err != nil {
			return err
		}
		if b.ln1 == nil { // no input norm: the attention read x itself
			add(r, dx, dx, dh)
			return nil
		}
		b.ln1.backward(r, dh, dx, n)
		return nil
	}
	// y = LN2(s2), s2 = x1 + FFN(x1), x1 = LN1(s1), s1 = x + MHA(x).
	dx1 := dy
	if b.ffn != nil {
		ds2 := zeroed(&s.d1, n*d)
		b.ln2.backward(r, dy, ds2, n)
		dx1 = zeroed(&s.d2, n*d)
		copy(dx1, ds2)
		b.ffn.backward(r, ds2, dx1, n, s)
	}
	ds1 := zeroed(&s.d1, n*d)
	b.ln1.backward(r, dx1, ds1, n)
	copy(dx, ds1)
	return b.attnBackward(ds1, dx)
}

// scratch holds the gradient buffers a backward pass reuses across blocks.
type scratch struct {
	d1, d2     []float32 // [n, d]
	f1, f2, f3 []float32 // [n, ffn]
}

// zeroed returns *buf grown to n values, all 0.
func zeroed(buf *[]float32, n int) []float32 {
	*buf = kernel.Grow(*buf, n)
	clear(*buf)
	return *buf
}

// addBlock is the number of values one task of add handles.
const addBlock = 1 << 14

// add sets dst = a + b elementwise.
func add(r *runner, dst, a, b []float32) {
	r.rows(len(dst), addBlock, func(_, _, i0, i1 int) {
		for i := i0; i < i1; i++ {
			dst[i] = a[i] + b[i]
		}
	})
}
