package nn

import (
	"errors"
	"fmt"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// Cache holds every block's keys and values for generation: the positions a model has seen so
// far, which ForwardCached extends. Make one with Model.NewCache; it belongs to that model.
type Cache struct {
	m        *Model
	kv       []*mha.KVCache
	b, n     int
	capacity int
	tokens   []int // with LongRoPE, the tokens the cache holds, [b, capacity]
}

// NewCache returns an empty cache for batch sequences of up to capacity positions (at most the
// model's SeqLen), its keys and values stored as dtype (mha.CacheFloat32, mha.CacheFloat16 or
// mha.CacheBFloat16; the arithmetic stays float32). It returns an error when batch or capacity
// is not positive, capacity exceeds SeqLen, the model is bidirectional, or its attention cannot
// use a cache (sparse attention, heads of different sizes or score scales: Config.CanCache).
func (m *Model) NewCache(batch, capacity int, dtype mha.CacheDType) (*Cache, error) {
	switch {
	case batch <= 0 || capacity <= 0:
		return nil, fmt.Errorf("nn: cache of batch %d and capacity %d, want both > 0", batch, capacity)
	case capacity > m.cfg.SeqLen:
		return nil, fmt.Errorf("nn: cache capacity %d is more than the model's seq_len %d", capacity, m.cfg.SeqLen)
	case m.cfg.Bidirectional:
		return nil, errors.New("nn: a bidirectional model attends to later positions, which a cache of the earlier ones cannot give; use Forward")
	case m.cfg.sparseAttention():
		return nil, fmt.Errorf("nn: the model's attention is sparse (patterns %q, normalizer %q), which a KV cache does not compute; use Forward", m.cfg.Patterns, m.cfg.Normalizer)
	}
	c := &Cache{m: m, b: batch, capacity: capacity}
	if len(m.cfg.ropeSwitches()) > 0 {
		c.tokens = make([]int, batch*capacity)
	}
	for l, blk := range m.blocks {
		kv, err := blk.attn.NewKVCache(batch, capacity, dtype)
		if err != nil {
			return nil, fmt.Errorf("nn: block %d: %w", l, err)
		}
		c.kv = append(c.kv, kv)
	}
	return c, nil
}

// Len returns the number of positions the cache holds.
func (c *Cache) Len() int { return c.n }

// Reset empties the cache, keeping its memory.
func (c *Cache) Reset() {
	for _, kv := range c.kv {
		kv.Reset()
	}
	c.n = 0
}

// ForwardCached runs tokens [B, T] (row-major, len b·t) as the next T positions of the
// sequences in c, after the c.Len() it holds, and returns their logits [B, T, Vocab] ([B, 1,
// Vocab], the last position's, with opt.LastLogits), which equal those of a Forward of the
// sequences so far at those positions up to float32 rounding (or bfloat16's, with Compute
// bfloat16). A model with LongRoPE (mha.RopeScaling), whose rotation changes when a call's
// positions first pass the original length, recomputes the cache from the tokens it holds in
// the call that passes it, as Hugging Face's Phi-3 generation does. The storage is the
// model's, overwritten by the next forward. It keeps nothing for Loss or Backward (a Loss needs
// a Forward); of opt it reads Workers, Compute and LastLogits. It returns an error, leaving c
// unchanged, when b is not c's batch, t is not positive, c has fewer than t positions left, a
// token is outside [0, Vocab), or Compute is not one of mha's.
func (m *Model) ForwardCached(c *Cache, tokens []int, b, t int, opt *RunOptions) (*tensor.Tensor, error) {
	if opt == nil {
		opt = new(RunOptions)
	}
	cfg := m.cfg
	switch {
	case c == nil || c.m != m:
		return nil, errors.New("nn: ForwardCached needs a cache from this model's NewCache")
	case b != c.b || t <= 0:
		return nil, fmt.Errorf("nn: batch %d and length %d for a cache of batch %d, want the cache's batch and a length > 0", b, t, c.b)
	case c.n+t > c.capacity:
		return nil, fmt.Errorf("nn: %d positions after the cache's %d, more than its capacity %d", t, c.n, c.capacity)
	case len(tokens) != b*t:
		return nil, fmt.Errorf("nn: %d tokens for batch %d × length %d, want %d", len(tokens), b, t, b*t)
	case opt.Compute != mha.ComputeFloat32 && opt.Compute != mha.ComputeBFloat16:
		return nil, fmt.Errorf("nn: compute type %v, want mha.ComputeFloat32 or mha.ComputeBFloat16", opt.Compute)
	}
	for i, tok := range tokens {
		if tok < 0 || tok >= cfg.Vocab {
			return nil, fmt.Errorf("nn: token %d at position %d (batch %d, step %d) is outside [0, %d)", tok, i, i/t, i%t, cfg.Vocab)
		}
	}
	if err := m.r.setWorkers(opt.Workers); err != nil {
		return nil, err
	}
	if c.tokens != nil {
		for bb := range b {
			copy(c.tokens[bb*c.capacity+c.n:], tokens[bb*t:(bb+1)*t])
		}
		for _, orig := range cfg.ropeSwitches() {
			if c.n > 0 && c.n <= orig && c.n+t > orig {
				return m.recompute(c, t, opt)
			}
		}
	}
	return m.forwardCached(c, tokens, b, t, opt)
}

// recompute empties c and runs the c.n + t tokens it holds as one call, returning the logits
// of the last t positions (or the last one's, with opt.LastLogits) as ForwardCached does.
func (m *Model) recompute(c *Cache, t int, opt *RunOptions) (*tensor.Tensor, error) {
	b, n, v := c.b, c.n+t, m.cfg.Vocab
	all := make([]int, 0, b*n)
	for bb := range b {
		all = append(all, c.tokens[bb*c.capacity:bb*c.capacity+n]...)
	}
	c.Reset()
	logits, err := m.forwardCached(c, all, b, n, opt)
	if err != nil || opt.LastLogits {
		return logits, err
	}
	for bb := range b { // the last t rows of each sequence, moved to the front
		copy(m.logits[bb*t*v:(bb+1)*t*v], m.logits[(bb*n+n-t)*v:(bb+1)*n*v])
	}
	return &tensor.Tensor{Shape: []int{b, t, v}, Data: m.logits[:b*t*v]}, nil
}

// forwardCached is ForwardCached after its checks.
func (m *Model) forwardCached(c *Cache, tokens []int, b, t int, opt *RunOptions) (*tensor.Tensor, error) {
	cfg := m.cfg
	m.state = stateFresh // no Loss or Backward after this
	m.tokens = append(m.tokens[:0], tokens...)
	m.r.compute = opt.Compute.Effective()
	defer func() { m.r.compute = mha.ComputeFloat32 }()
	x := m.emb.forward(&m.r, m.tokens, nil, b, t, c.n)
	mo := cfg.attnOptions(&RunOptions{}, m.r.workers)
	mo.Compute = opt.Compute.Effective()
	for l, blk := range m.blocks {
		mo.Window = blk.window
		var err error
		if x, err = blk.forwardCached(&m.r, x, b, t, c.kv[l], &mo, &m.shared); err != nil {
			// Blocks before l have stored these positions: the cache is now inconsistent, so
			// empty it rather than leave it half-extended.
			c.Reset()
			return nil, fmt.Errorf("nn: block %d: %w", l, err)
		}
	}
	rows := t
	if opt.LastLogits && t > 1 {
		d := cfg.DModel
		m.last = kernel.Grow(m.last, b*d)
		for bb := range b {
			copy(m.last[bb*d:(bb+1)*d], x[((bb+1)*t-1)*d:])
		}
		x, rows = m.last, 1
	}
	m.unembed(x, b*rows)
	c.n += t
	return &tensor.Tensor{Shape: []int{b, rows, cfg.Vocab}, Data: m.logits}, nil
}
