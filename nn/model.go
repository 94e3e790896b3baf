package nn

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/tensor"
)

// Model is a causal transformer decoder (see Config) with explicit forward and backward passes.
// Its parameters use the names and layouts of the PyTorch module in testdata/torch_model.py, so
// a state dict moves between the two as is (its named_parameters(): with a tied head, PyTorch's
// state_dict() also lists head.weight, which is tok_emb.weight).
//
// A Model holds the state of its last Forward, Loss and Backward: it is not safe for concurrent
// use. Run one model per goroutine.
type Model struct {
	cfg    Config
	params []*Param
	emb    *embedding
	blocks []*block
	lnF    *normLayer     // pre-norm only
	trans  *headTransform // with Config.HeadTransform
	head   *linear
	r      runner

	b, t    int         // the last forward's batch and length; 0 before the first
	tokens  []int       // a copy of its tokens
	types   []int       // and of its token types, when given
	padding tensor.Bool // a copy of its padding mask, when given
	out     []float32   // the last block's output [B·T, d] (a block's buffer)
	hidden  []float32   // the final hidden states [B·T, d] (a module's buffer)
	patched bool        // the last forward patched the residual stream
	logits  []float32   // [B·T, Vocab]
	dlogits []float32   // dL/dlogits of the last Loss
	kept    bool        // the last forward kept the attention weights
	state   state
	scr     scratch
	shared  shared    // the blocks' buffers in ForwardCached
	last    []float32 // ForwardCached's last positions, [B, d], with RunOptions.LastLogits
	dx, dy  []float32 // the residual stream's gradient, [B·T, d], alternating between blocks
}

// state says which call may come next.
type state int

const (
	stateFresh   state = iota // no forward yet, or the last one failed
	stateForward              // Forward ran: Loss may follow
	stateLoss                 // Loss ran: Backward may follow
)

// RunOptions are the per-call options of Forward. The zero value (or nil) is evaluation mode
// on GOMAXPROCS goroutines.
type RunOptions struct {
	// Training turns attention dropout (Config.Dropout) on.
	Training bool
	// Seed seeds the dropout masks; vary it from step to step. Each layer derives its own.
	Seed uint64
	// KeepWeights keeps every layer's attention weights, per head, for Weights.
	KeepWeights bool
	// Workers bounds the goroutines the passes run on; 0 means GOMAXPROCS, and a negative
	// count is an error. Results do not depend on it.
	Workers int
	// KeepHeads keeps every layer's head outputs, for Heads.
	KeepHeads bool
	// Heads, when not nil, are per-layer head interventions (mha.HeadOptions: gates, shifts,
	// uniform heads): Heads[l] applies to block l; layers past its end are left alone, and more
	// entries than layers are an error. A Gate is [B, H] for the call's batch.
	Heads []mha.HeadOptions
	// TokenTypes, for a model with token type embeddings (Config.TypeVocab > 0), are the token
	// type ids [B, T] (BERT's token_type_ids, in [0, TypeVocab)); nil means all 0. They must be
	// nil for a model without.
	TokenTypes []int
	// Padding, when not nil, marks the padding positions [B, T] (true: padding, Hugging Face's
	// attention_mask 0), which no position attends to. Their own outputs are computed as any
	// other's; a caller ignores them.
	Padding []bool
	// Patches, when not nil, overwrite the residual stream (activation patching): each
	// replaces it at one position of one sequence where it enters one block. A Forward with
	// patches may be followed by Loss but not by Backward.
	Patches []ResidualPatch
	// Sparsity, when not nil, replaces the config's Patterns, Block and Normalizer in this
	// Forward: the attention runs, and its weights are kept, as if the model had been built with
	// them (to view a model under another pattern or normalizer). Its zero value is dense
	// softmax attention. A pattern or block size that does not fit the call is an error of
	// Forward.
	Sparsity *Sparsity
	// Compute is the arithmetic of ForwardCached's matrix products: mha.ComputeFloat32 (the
	// zero value) or mha.ComputeBFloat16, with which the products of more than
	// kernel.GemvRows (4) rows, a prompt's, take bfloat16 operands and float32 sums, as
	// mha.Options.Compute says for the attention layers (the activations rounded to bfloat16
	// once per product, the weights read as stored and packed once per block of columns):
	// about twice as fast, with bfloat16's rounding of the activations (~1% of a
	// logit), where the CPU has AVX512_BF16, and float32 elsewhere (mha.Compute.Effective).
	// The products of a decode step's few rows stay float32 dot products, bound by reading
	// the weights either way. Forward, which keeps what Backward needs, computes in float32
	// and refuses anything else.
	Compute mha.Compute
	// LastLogits has ForwardCached compute the logits of each sequence's last position only,
	// [B, 1, Vocab], all that generation needs of a prompt: the head, a large share of a
	// prompt's work, then runs on B rows, not B·T (as llama.cpp's decode does by default).
	// Forward, whose Loss needs every position, refuses it.
	LastLogits bool
}

// ResidualPatch sets the residual stream entering block Layer (Layer = Layers: the last block's
// output, before the final normalisation) at sequence Batch, position Pos to Value [DModel],
// which Model.Residual(Layer) then returns there.
type ResidualPatch struct {
	Layer, Batch, Pos int
	Value             []float32
}

// Sparsity is a sparse attention setting for RunOptions: the union of Patterns in blocks of
// Block (both 0: 64 × 64) and a Normalizer (nil: softmax), as mha.Options takes them.
type Sparsity struct {
	Patterns   []mha.Pattern
	Block      [2]int
	Normalizer *mha.Normalizer
}

// NewModel returns a model for cfg with parameters initialised as PyTorch initialises the
// matching module (nn.Embedding N(0, 1), nn.Linear U(±1/√in) for weight and bias, LayerNorm 1
// and 0, RMSNorm 1, nn.MultiheadAttention's own scheme), drawn from cfg.Seed; the values differ from
// PyTorch's because the generators differ. An FFN of 0 without AttnOnly becomes 4·DModel, as
// Config() then reports. It returns an error wrapping ErrConfig when cfg is invalid or has more
// than MaxParams parameters.
func NewModel(cfg Config) (*Model, error) {
	cfg, err := float32Config(cfg)
	if err != nil {
		return nil, err
	}
	rng := tensor.NewRNG(cfg.Seed)
	return newModel(cfg, nil, nil, func(s paramSpec) *Param { return s.newParam(rng) })
}

// float32Config validates cfg for a model held in float32 and returns it with its defaults.
func float32Config(cfg Config) (Config, error) {
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	cfg = cfg.withDefaults()
	n := 0 // a valid Config's shapes are within tensor.MaxElements, and their sum fits an int
	for _, s := range cfg.layout() {
		k, _ := tensor.NumElements(s.shape)
		n += k
	}
	if n > MaxParams {
		return cfg, fmt.Errorf("%w: %d parameters, more than the %d (16 GiB of values and gradients in float32) that a float32 model holds; NewModelHalf holds larger models", ErrConfig, n, MaxParams)
	}
	return cfg, nil
}

// NewModelFloat32 returns a model for cfg holding sd's tensors themselves, not copies, as its
// parameters' values, each with a zero Grad: the state dict LoadStateDict takes, without the
// values NewModel would allocate and initialise first, so that a checkpoint loads at the memory
// of one copy. Training the model writes to sd's tensors, which must not share their values.
// It returns an error wrapping ErrConfig when cfg is invalid or has more than MaxParams
// parameters, and one naming the tensor when a parameter is missing, nil or has another shape,
// or a tensor is not a parameter.
func NewModelFloat32(cfg Config, sd map[string]*tensor.Tensor) (*Model, error) {
	cfg, err := float32Config(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkStateDict(cfg.layout(), sd, floatDims); err != nil {
		return nil, err
	}
	return newModel(cfg, nil, sd, func(s paramSpec) *Param {
		p := &Param{Name: s.name, NoDecay: !s.decay}
		if s.init != initAttn { // an attention layer's are bound by newBlock
			p.Value, p.Grad = sd[s.name], tensor.New(s.shape...)
		}
		return p
	})
}

// MaxParams bounds the parameters of a NewModel model: each takes a float32 value and a float32
// gradient, 16 GiB for 2³¹ of them (the bound of a single attention layer, mha.MaxParams).
const MaxParams = mha.MaxParams

// NewModelHalf returns a model for cfg holding the values of sd, a state dict in bfloat16 or
// float16 (every tensor in one format) with exactly the model's parameters, as LoadStateDict
// takes them. The token embedding and the weight matrices (every Linear's weight, the attention
// layers' in_proj_weight and out_proj.weight, an untied head's weight) stay in sd's format, at
// half the memory of float32, as Param.Half with no Value and no Grad; the model keeps sd's
// tensors themselves, not copies, and they must not change while it runs. The other parameters
// (normalisation weights, biases, learned positions and token types) become float32, with a
// Grad. Nothing of the size of the weights is allocated in float32.
//
// Forward and ForwardCached compute in float32 on the half-precision values and give the same
// bits as a NewModel model loaded with the decoded values (the matrix products decode while
// they pack, in the same order of sums). Backward computes the gradients of the inputs, of head
// gates (GateGrad) and of the float32 parameters, and none for the half ones: train with
// float32 weights instead (an optimizer refuses a parameter without a Grad).
//
// It returns an error wrapping ErrConfig when cfg is invalid, and an error naming the tensor
// when a parameter is missing or has another shape, a tensor is not a parameter, or the
// tensors are not all bfloat16 or all float16.
func NewModelHalf(cfg Config, sd map[string]*tensor.Half) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := checkStateDict(cfg.layout(), sd, halfDims); err != nil {
		return nil, err
	}
	var format tensor.HalfFormat
	for _, name := range slices.Sorted(maps.Keys(sd)) {
		h := sd[name]
		if format == 0 {
			format = h.Format
		}
		if h.Format != format || (format != tensor.BFloat16 && format != tensor.Float16) {
			return nil, fmt.Errorf("nn: state dict tensor %q is %v after tensors in %v, want all bfloat16 or all float16", name, h.Format, format)
		}
	}
	return newModel(cfg, sd, nil, func(s paramSpec) *Param {
		p := &Param{Name: s.name, NoDecay: !s.decay}
		switch h := sd[s.name]; {
		case s.init == initAttn: // its attention layer's, bound by newBlock
		case s.matrix():
			p.Half = h
		default:
			p.Value, p.Grad = decodeHalf(h), tensor.New(s.shape...)
		}
		return p
	})
}

// newModel builds the model for cfg (valid, with defaults) from the parameters newParam makes,
// and builds the attention layers from half or full when one is not nil (see NewModelHalf and
// NewModelFloat32).
func newModel(cfg Config, half map[string]*tensor.Half, full map[string]*tensor.Tensor, newParam func(paramSpec) *Param) (*Model, error) {
	cfg = cfg.clone() // the model's own: its layers hold its rotaries
	m := &Model{cfg: cfg, r: runner{pool: new(parallel.Pool)}}
	runtime.AddCleanup(m, (*parallel.Pool).Close, m.r.pool)
	ps := make(params)
	for _, s := range cfg.layout() {
		p := newParam(s)
		m.params = append(m.params, p)
		ps[p.Name] = p
	}
	m.emb = newEmbedding(ps, cfg)
	for l := range cfg.Layers {
		b, err := newBlock(ps, cfg, l, mix(cfg.Seed, uint64(l)), half, full)
		if err != nil {
			return nil, err
		}
		if l > 0 { // the blocks run one after another: one set of attention scratch for all
			b.attn.ShareScratch(m.blocks[0].attn)
		}
		m.blocks = append(m.blocks, b)
	}
	if cfg.Norm == PreNorm {
		m.lnF = newNorm(ps, cfg, "ln_f")
	}
	if cfg.HeadTransform {
		m.trans = newHeadTransform(ps, cfg)
	}
	if cfg.TieEmbeddings {
		m.head = linearOf(ps.get("tok_emb.weight"), ps["head.bias"])
	} else {
		m.head = newLinear(ps, "head")
	}
	return m, nil
}

// checkTypes returns an error unless types, RunOptions.TokenTypes for a forward of b sequences
// of length t, are nil, or hold b·t ids in [0, typeVocab) for a model with token types.
func checkTypes(types []int, typeVocab, b, t int) error {
	switch {
	case types == nil:
		return nil
	case typeVocab == 0:
		return errors.New("nn: token types given to a model without token type embeddings (type_vocab 0), want nil")
	case len(types) != b*t:
		return fmt.Errorf("nn: %d token types for batch %d × length %d, want %d", len(types), b, t, b*t)
	}
	for i, typ := range types {
		if typ < 0 || typ >= typeVocab {
			return fmt.Errorf("nn: token type %d at position %d (batch %d, step %d) is outside [0, %d)", typ, i, i/t, i%t, typeVocab)
		}
	}
	return nil
}

// mix derives a seed from seed and i (the splitmix64 finaliser of their combination), so that
// layers get independent streams.
func mix(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Config returns the model's configuration, with FFN resolved (a copy that shares no memory
// with the model's).
func (m *Model) Config() Config { return m.cfg.clone() }

// Params returns the model's parameters in a fixed order (PyTorch's named_parameters order).
// The Params are the model's own: an optimizer updates them in place. A tied output head
// (Config.TieEmbeddings) has no Param of its own: its weight is tok_emb.weight. In a model of
// NewModelHalf the weight matrices and the token embedding are held in half precision (Half set,
// Value and Grad nil).
func (m *Model) Params() []*Param { return slices.Clone(m.params) }

// Param returns the parameter called name (a Params name), the model's own, or nil when there is
// none. Its Float32 reads one parameter where StateDict would convert every half-precision one.
func (m *Model) Param(name string) *Param {
	for _, p := range m.params {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// NumParams returns the number of scalar parameters.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.params {
		c, _ := tensor.NumElements(p.Shape()) // the layout's sizes are valid
		n += c
	}
	return n
}

// ParamBytes returns the bytes the parameters' values occupy: half, those held in half precision
// (0 in a float32 model), and float, the float32 ones; gradients are not counted. A forward of
// one token reads every weight matrix once.
func (m *Model) ParamBytes() (half, float int) {
	for _, p := range m.params {
		if p.Half != nil {
			half += 2 * len(p.Half.Data)
		} else {
			float += 4 * len(p.Value.Data)
		}
	}
	return half, float
}

// finiteChunk is the number of half-precision values CheckFinite decodes at a time.
const finiteChunk = 1 << 12

// CheckFinite returns a *tensor.NonFiniteError naming the first parameter, in Params order, that
// holds NaN or ±Inf; nil when every parameter value is finite. Half-precision parameters are
// decoded a chunk at a time.
func (m *Model) CheckFinite() error {
	var buf [finiteChunk]float32
	for _, p := range m.params {
		h := p.Half
		if h == nil {
			if err := p.Value.CheckFinite(p.Name); err != nil {
				return err
			}
			continue
		}
		for i := 0; i < len(h.Data); i += finiteChunk {
			chunk := buf[:min(finiteChunk, len(h.Data)-i)]
			kernel.DecodeHalf(chunk, h.Data[i:], h.Format == tensor.BFloat16)
			if (&tensor.Tensor{Shape: []int{len(chunk)}, Data: chunk}).CheckFinite(p.Name) != nil {
				return p.Float32().CheckFinite(p.Name) // the whole tensor, for the error's position and count
			}
		}
	}
	return nil
}

// Forward runs the model on tokens [B, T] (row-major, len b·t) and returns the logits
// [B, T, Vocab], whose storage is the model's and is overwritten by the next Forward. The model
// keeps a copy of the tokens and what Backward needs. It returns an error, leaving no forward
// for Loss, when b or t is not positive, t > SeqLen, len(tokens) ≠ b·t, a token is outside
// [0, Vocab), opt.TokenTypes is not nil and the model has no token types, its length is not
// b·t, or a type is outside [0, TypeVocab), or opt.Padding is not nil and its length is not b·t.
func (m *Model) Forward(tokens []int, b, t int, opt *RunOptions) (*tensor.Tensor, error) {
	m.state = stateFresh
	if opt == nil {
		opt = new(RunOptions)
	}
	c := m.cfg
	switch {
	case b <= 0 || t <= 0:
		return nil, fmt.Errorf("nn: batch %d and length %d, want both > 0", b, t)
	case t > c.SeqLen:
		return nil, fmt.Errorf("nn: length %d is more than the model's seq_len %d", t, c.SeqLen)
	case len(tokens) != b*t:
		return nil, fmt.Errorf("nn: %d tokens for batch %d × length %d, want %d", len(tokens), b, t, b*t)
	case opt.Compute != mha.ComputeFloat32:
		return nil, fmt.Errorf("nn: Forward computes in float32 (it keeps what Backward needs), got compute type %v; ForwardCached takes bfloat16", opt.Compute)
	case opt.LastLogits:
		return nil, errors.New("nn: Forward computes every position's logits (a Loss needs them); ForwardCached takes LastLogits")
	}
	for i, tok := range tokens {
		if tok < 0 || tok >= c.Vocab {
			return nil, fmt.Errorf("nn: token %d at position %d (batch %d, step %d) is outside [0, %d)", tok, i, i/t, i%t, c.Vocab)
		}
	}
	if err := checkTypes(opt.TokenTypes, c.TypeVocab, b, t); err != nil {
		return nil, err
	}
	if opt.Padding != nil && len(opt.Padding) != b*t {
		return nil, fmt.Errorf("nn: padding mask of %d values for batch %d × length %d, want %d", len(opt.Padding), b, t, b*t)
	}
	if len(opt.Heads) > c.Layers {
		return nil, fmt.Errorf("nn: head interventions for %d layers, the model has %d", len(opt.Heads), c.Layers)
	}
	for i, p := range opt.Patches {
		switch {
		case p.Layer < 0 || p.Layer > c.Layers:
			return nil, fmt.Errorf("nn: patch %d is at layer %d, want 0 to %d (the layers' inputs and the last output)", i, p.Layer, c.Layers)
		case p.Batch < 0 || p.Batch >= b || p.Pos < 0 || p.Pos >= t:
			return nil, fmt.Errorf("nn: patch %d is at sequence %d, position %d, outside batch %d × length %d", i, p.Batch, p.Pos, b, t)
		case len(p.Value) != c.DModel:
			return nil, fmt.Errorf("nn: patch %d has %d values, want d_model = %d", i, len(p.Value), c.DModel)
		}
	}
	if err := m.r.setWorkers(opt.Workers); err != nil {
		return nil, err
	}
	m.b, m.t = b, t
	m.tokens = append(m.tokens[:0], tokens...)
	m.types = append(m.types[:0], opt.TokenTypes...)
	var types []int // nil for all 0
	if opt.TokenTypes != nil {
		types = m.types
	}
	x := m.emb.forward(&m.r, m.tokens, types, b, t, 0)
	mo := c.attnOptions(opt, m.r.workers)
	if opt.Padding != nil {
		m.padding.Shape, m.padding.Data = append(m.padding.Shape[:0], b, t), append(m.padding.Data[:0], opt.Padding...)
		mo.KeyPaddingMask = &m.padding
	}
	for l, blk := range m.blocks {
		mo.DropoutSeed = mix(opt.Seed, uint64(l))
		mo.Heads = mha.HeadOptions{}
		if l < len(opt.Heads) {
			mo.Heads = opt.Heads[l]
		}
		mo.Heads.Keep = mo.Heads.Keep || opt.KeepHeads
		mo.Window = blk.window
		m.patch(x, l, t, opt.Patches)
		var err error
		if x, err = blk.forward(&m.r, x, b, t, &mo); err != nil {
			return nil, fmt.Errorf("nn: block %d: %w", l, err)
		}
	}
	m.patch(x, len(m.blocks), t, opt.Patches)
	m.out = x
	m.unembed(x, b*t)
	m.kept = opt.KeepWeights
	m.patched = len(opt.Patches) > 0
	m.state = stateForward
	return &tensor.Tensor{Shape: []int{b, t, c.Vocab}, Data: m.logits}, nil
}

// unembed sets m.hidden and m.logits from the last stream x [n, d]: x through the final
// normalisation (pre-norm), the head transform (if any), the head and the logits' soft-cap (if
// any).
func (m *Model) unembed(x []float32, n int) {
	if m.lnF != nil {
		x = m.lnF.forward(&m.r, x, n)
	}
	m.hidden = x
	if m.trans != nil {
		x = m.trans.forward(&m.r, x, n)
	}
	m.logits = m.head.forward(&m.r, x, n)
	if c := m.cfg.LogitSoftcap; c > 0 {
		logits := m.logits[:n*m.cfg.Vocab]
		m.r.rows(len(logits), addBlock, func(_, _, i0, i1 int) {
			for i := i0; i < i1; i++ {
				logits[i] = float32(c * math.Tanh(float64(logits[i])/c))
			}
		})
	}
}

// Unembed returns the logits [N, Vocab] that the model's output stack gives residual streams x
// [N, DModel]: the final normalisation (pre-norm), the head transform (when the model has one),
// the head and the logits' soft-cap (Config.LogitSoftcap), as Forward applies them to the last
// block's output. Given Residual(l) it is the logit lens of layer l. It runs on workers
// goroutines (0: GOMAXPROCS). The storage is the model's, overwritten by the next call or
// forward, and the call ends the last Forward: no Loss may follow, and Residual and the other
// accessors return nil until the next Forward. It returns an error when x is not [N, DModel]
// with N > 0 or workers is negative.
func (m *Model) Unembed(x *tensor.Tensor, workers int) (*tensor.Tensor, error) {
	d := m.cfg.DModel
	if x == nil || len(x.Shape) != 2 || x.Shape[0] < 1 || x.Shape[1] != d || len(x.Data) != x.Shape[0]*d {
		var shape []int
		if x != nil {
			shape = x.Shape
		}
		return nil, fmt.Errorf("nn: Unembed of streams %v, want [N %d] with N > 0 and N·%d values", shape, d, d)
	}
	if err := m.r.setWorkers(workers); err != nil {
		return nil, err
	}
	m.state = stateFresh
	n := x.Shape[0]
	m.unembed(x.Data, n)
	return &tensor.Tensor{Shape: []int{n, m.cfg.Vocab}, Data: m.logits}, nil
}

// patch applies the patches at layer to x, the residual stream [B·T, d] of sequences of length t
// entering that block (or leaving the last).
func (m *Model) patch(x []float32, layer, t int, patches []ResidualPatch) {
	d := m.cfg.DModel
	for _, p := range patches {
		if p.Layer == layer {
			copy(x[(p.Batch*t+p.Pos)*d:][:d], p.Value)
		}
	}
}

// Residual returns the residual stream of the last Forward entering block layer, [B, T, DModel]
// (the embeddings for layer 0), or for layer = Layers the last block's output, before the
// final normalisation; nil before a Forward or for a layer outside 0 … Layers. With
// RunOptions.Patches it holds the patched values. The storage is the model's, overwritten by
// the next Forward.
func (m *Model) Residual(layer int) *tensor.Tensor {
	if m.state == stateFresh || layer < 0 || layer > len(m.blocks) {
		return nil
	}
	x := m.out
	if layer < len(m.blocks) {
		x = m.blocks[layer].x
	}
	return &tensor.Tensor{Shape: []int{m.b, m.t, m.cfg.DModel}, Data: x}
}

// ResidualMid returns the residual stream of the last Forward between the attention and the
// feed-forward network of block layer, [B, T, DModel]: x + MHA(·), after the block's first
// normalisation in a post-norm model. In a pre-norm model Residual(layer) plus the attention's
// output (normalised, with Config.SandwichNorm) is ResidualMid(layer), and ResidualMid(layer)
// plus the FFN's output (likewise) is Residual(layer+1). It is nil before a Forward or for a
// layer outside 0 … Layers−1; the storage is the model's, overwritten by the next Forward.
func (m *Model) ResidualMid(layer int) *tensor.Tensor {
	if m.state == stateFresh || layer < 0 || layer >= len(m.blocks) {
		return nil
	}
	return &tensor.Tensor{Shape: []int{m.b, m.t, m.cfg.DModel}, Data: m.blocks[layer].mid}
}

// AttnOutScale returns, for a model with Config.SandwichNorm, the factor 1/√(mean(y²) + eps)
// by which block layer's ln1_post scaled each position's attention output y in the last
// Forward, [B, T]: the attention's part of the stream is then y·AttnOutScale ⊙ ln1_post.weight,
// linear in y at that scale, so that each head's part is its own part of y scaled so. It is
// nil without SandwichNorm, before a Forward or for a layer outside 0 … Layers−1; the storage
// is the model's, overwritten by the next Forward.
func (m *Model) AttnOutScale(layer int) *tensor.Tensor {
	if m.state == stateFresh || layer < 0 || layer >= len(m.blocks) || m.blocks[layer].post1 == nil {
		return nil
	}
	return &tensor.Tensor{Shape: []int{m.b, m.t}, Data: m.blocks[layer].post1.rstd[:m.b*m.t]}
}

// AttnInput returns the input of block layer's attention in the last Forward, [B, T, DModel]:
// Residual(layer) after the block's first normalisation in a pre-norm model, Residual(layer)
// itself in a post-norm one; nil before a Forward or for a layer outside 0 … Layers−1. The
// storage is the model's, overwritten by the next Forward.
func (m *Model) AttnInput(layer int) *tensor.Tensor {
	if m.state == stateFresh || layer < 0 || layer >= len(m.blocks) {
		return nil
	}
	in := m.blocks[layer].in
	return &tensor.Tensor{Shape: []int{m.b, m.t, m.cfg.DModel}, Data: in.Data}
}

// Hidden returns the final hidden states of the last Forward, [B, T, DModel]: the output of the
// last block, after the final normalisation of a pre-norm model (Hugging Face's
// last_hidden_state), before the head transform and the head. It is nil before the first
// Forward; the storage is the model's, overwritten by the next Forward.
func (m *Model) Hidden() *tensor.Tensor {
	if m.state == stateFresh {
		return nil
	}
	return &tensor.Tensor{Shape: []int{m.b, m.t, m.cfg.DModel}, Data: m.hidden}
}

// Weights returns the attention weights of block layer from the last Forward, [B, H, T, T]
// after dropout, or nil when that Forward did not keep them or there is no such layer. The
// storage is the model's, overwritten by the next Forward.
func (m *Model) Weights(layer int) *tensor.Tensor {
	if !m.kept || m.state == stateFresh || layer < 0 || layer >= len(m.blocks) {
		return nil
	}
	return m.blocks[layer].res.Weights
}

// ZeroFraction returns, per head [H], the fraction of the visible pairs (those the causal mask,
// window and patterns leave) whose weight the normalizer set to exactly 0 in block layer during
// the last Forward, or nil when that Forward ran the softmax or there is no such layer. The
// storage is the model's, overwritten by the next Forward.
func (m *Model) ZeroFraction(layer int) []float64 {
	if m.state == stateFresh || layer < 0 || layer >= len(m.blocks) {
		return nil
	}
	return m.blocks[layer].res.ZeroFraction
}

// Heads returns the head outputs of block layer from the last Forward, [B, T, H·d] (DModel
// unless Config.HeadSize is set: Attention().InnerDim()) with head h in columns HeadOffset(h) …
// + HeadDim(h) of the block's attention config (before any gate or shift), or nil when that
// Forward did not keep them or there is no such layer. The storage is the model's, overwritten
// by the next Forward.
func (m *Model) Heads(layer int) *tensor.Tensor {
	if m.state == stateFresh || layer < 0 || layer >= len(m.blocks) {
		return nil
	}
	return m.blocks[layer].res.Heads
}

// GateGrad returns dL/dGate [B, H] of block layer from the last Backward, when the Forward
// before it gated that layer's heads (RunOptions.Heads[layer].Gate); nil otherwise. With gates
// of 1 its entries are Michel et al.'s ∂L/∂ξ_h per sequence. The storage is the model's.
func (m *Model) GateGrad(layer int) *tensor.Tensor {
	if m.state != stateForward || layer < 0 || layer >= len(m.blocks) || !m.blocks[layer].gated {
		return nil
	}
	return m.blocks[layer].grads.Gate
}

// Loss computes the softmax cross-entropy of the last Forward's logits against targets [B, T],
// averaged over the scored positions (scored [B, T], or nil for all), and dL/dlogits for
// Backward. It returns the mean loss, the number of scored positions whose largest logit is the
// target (the first, on ties), and the number scored. Targets of unscored positions are not
// read. It returns an error when no Forward preceded it, when a length differs from B·T, when a
// scored target is outside [0, Vocab), or when no position is scored.
func (m *Model) Loss(targets []int, scored []bool) (loss float64, correct, counted int, err error) {
	if m.state == stateFresh {
		return 0, 0, 0, errors.New("nn: Loss needs a Forward first")
	}
	n, v := m.b*m.t, m.cfg.Vocab
	if len(targets) != n {
		return 0, 0, 0, fmt.Errorf("nn: %d targets for the forward's %d positions", len(targets), n)
	}
	if scored != nil && len(scored) != n {
		return 0, 0, 0, fmt.Errorf("nn: scored mask of %d values for the forward's %d positions", len(scored), n)
	}
	for i, tgt := range targets {
		if (scored == nil || scored[i]) && (tgt < 0 || tgt >= v) {
			return 0, 0, 0, fmt.Errorf("nn: target %d at position %d is outside [0, %d)", tgt, i, v)
		}
	}
	m.dlogits = kernel.Grow(m.dlogits, n*v)
	loss, correct, counted = crossEntropy(&m.r, m.logits, v, targets, scored, m.dlogits)
	if counted == 0 {
		return 0, 0, 0, errors.New("nn: no position is scored")
	}
	m.state = stateLoss
	return loss, correct, counted, nil
}

// Backward adds the gradient of the last Loss with respect to every parameter into its Grad
// (clear them with ZeroGrads between steps). It may run once per Loss; it returns an error when
// no Loss precedes it.
func (m *Model) Backward() error { return m.BackwardHeads(nil) }

// BackwardHeads is Backward for the loss L + P, where P is a function of the head outputs (such
// as a penalty on their redundancy): dHeads[l] is dP/dHeads(l) [B, T, H·d] (Heads' shape), or
// nil where P does not depend on layer l; dHeads may be shorter than Layers, or nil. It returns
// an error when no Loss precedes it or a tensor in dHeads does not have the heads' shape.
func (m *Model) BackwardHeads(dHeads []*tensor.Tensor) error {
	if m.state != stateLoss {
		return errors.New("nn: Backward needs a Forward and a Loss first")
	}
	if m.patched {
		return errors.New("nn: Backward after a Forward with residual patches, which have no gradient; run Forward without RunOptions.Patches")
	}
	if len(dHeads) > len(m.blocks) {
		return fmt.Errorf("nn: %d head gradients for %d layers", len(dHeads), len(m.blocks))
	}
	for l, g := range dHeads {
		if want := []int{m.b, m.t, m.cfg.Attention().InnerDim()}; g != nil && (!slices.Equal(g.Shape, want) || len(g.Data) != m.b*m.t*want[2]) {
			return fmt.Errorf("nn: head gradient of layer %d is %v with %d values, want %v", l, g.Shape, len(g.Data), want)
		}
	}
	m.state = stateForward
	n, d := m.b*m.t, m.cfg.DModel
	dy, dx := zeroed(&m.dy, n*d), zeroed(&m.dx, n*d)
	if c := m.cfg.LogitSoftcap; c > 0 {
		// z = c·tanh(u/c): dz/du = 1 − (z/c)², from the capped logits the forward kept.
		m.r.rows(len(m.dlogits), addBlock, func(_, _, i0, i1 int) {
			for i := i0; i < i1; i++ {
				t := float64(m.logits[i]) / c
				m.dlogits[i] *= float32(1 - t*t)
			}
		})
	}
	m.head.backward(&m.r, m.dlogits, dy, n)
	if m.trans != nil {
		m.trans.backward(&m.r, dy, dx, n)
		dy, dx = dx, dy
		clear(dx)
	}
	if m.lnF != nil {
		m.lnF.backward(&m.r, dy, dx, n)
		dy, dx = dx, dy
	}
	for l := len(m.blocks) - 1; l >= 0; l-- {
		var dh *tensor.Tensor
		if l < len(dHeads) {
			dh = dHeads[l]
		}
		if err := m.blocks[l].backward(&m.r, dy, dx, n, &m.scr, dh); err != nil {
			return fmt.Errorf("nn: block %d: %w", l, err)
		}
		dy, dx = dx, dy
	}
	m.emb.backward(&m.r, dy, m.t)
	return nil
}

// LoadStateDict copies sd's tensors into the model's parameters, strictly: every parameter must
// be present with its exact shape, and no other name may appear. On error, which names the
// tensor and both shapes, the model is unchanged. A model holding half-precision parameters
// (NewModelHalf) has no float32 storage to copy into: it returns an error.
func (m *Model) LoadStateDict(sd map[string]*tensor.Tensor) error {
	for _, p := range m.params {
		if p.Half != nil {
			return fmt.Errorf("nn: LoadStateDict into a model holding %s in %v, want a float32 model (NewModel)", p.Name, p.Half.Format)
		}
	}
	if err := checkStateDict(m.cfg.layout(), sd, floatDims); err != nil {
		return err
	}
	for _, p := range m.params {
		copy(p.Value.Data, sd[p.Name].Data)
	}
	return nil
}

// StateDict returns the parameters' values by name. The float32 tensors are the model's own; a
// parameter held in half precision comes as a new float32 tensor of its values (Param.Float32).
func (m *Model) StateDict() map[string]*tensor.Tensor {
	sd := make(map[string]*tensor.Tensor, len(m.params))
	for _, p := range m.params {
		sd[p.Name] = p.Float32()
	}
	return sd
}

// checkStateDict returns an error unless sd holds exactly the parameters of layout, each a tensor
// of its shape; dims gives a tensor's shape and value count.
func checkStateDict[T any](layout []paramSpec, sd map[string]*T, dims func(*T) ([]int, int)) error {
	shapes := make(map[string][]int, len(sd))
	for _, name := range slices.Sorted(maps.Keys(sd)) {
		t := sd[name]
		if t == nil {
			return fmt.Errorf("nn: state dict tensor %q is nil", name)
		}
		shape, count := dims(t)
		if n, err := tensor.NumElements(shape); err != nil || n != count {
			return fmt.Errorf("nn: state dict tensor %q has %d values for shape %v", name, count, shape)
		}
		shapes[name] = shape
	}
	return checkShapes(layout, shapes)
}

// floatDims and halfDims give a tensor's shape and value count, for checkStateDict.
func floatDims(t *tensor.Tensor) ([]int, int) { return t.Shape, len(t.Data) }
func halfDims(t *tensor.Half) ([]int, int)    { return t.Shape, len(t.Data) }

// checkShapes returns an error unless have holds exactly the parameters of layout, each with its
// shape.
func checkShapes(layout []paramSpec, have map[string][]int) error {
	for _, s := range layout {
		shape, ok := have[s.name]
		if !ok {
			return fmt.Errorf("nn: missing parameter %q %v", s.name, s.shape)
		}
		if !slices.Equal(shape, s.shape) {
			return fmt.Errorf("nn: parameter %q is %v, want %v", s.name, shape, s.shape)
		}
	}
	if len(have) != len(layout) {
		known := make(map[string]bool, len(layout))
		for _, s := range layout {
			known[s.name] = true
		}
		for _, name := range slices.Sorted(maps.Keys(have)) {
			if !known[name] {
				hint := ""
				if name == "head.weight" { // in every layout but a tied head's
					hint = " (its head is tied: the head's weight is tok_emb.weight)"
				}
				return fmt.Errorf("nn: unexpected tensor %q %v: the model has no such parameter%s", name, have[name], hint)
			}
		}
	}
	return nil
}
