// Package mha is multi-head attention compatible with PyTorch's nn.MultiheadAttention
// (batch_first=True): the same parameters under the same names and layouts, the same mask
// polarity, the same outputs.
//
// The computation follows the textbook's steps, each visible in the code:
//
//	Q, K, V  = X_q·W_qᵀ + b_q,  X_k·W_kᵀ + b_k,  X_v·W_vᵀ + b_v   stacked projection [B, T, E]
//	Q_i, K_i, V_i                                               head i = columns o_i … o_i + d_i
//	head_i   = softmax(s_i · Q_i·K_iᵀ + mask) · V_i              d_i = E / H, s_i = 1/√d_i
//	output   = Concat(head_1 … head_H)·W_oᵀ + b_o
//
// Heads may also have different sizes d_i (Config.HeadDims) and their own scales s_i
// (Config.HeadScales), and a call may gate, shift, flatten or record single heads
// (Options.Heads) — the hooks that head-level probes need.
//
// One difference from PyTorch is deliberate: in a head where a query's keys are all masked, that
// query gets weights 0 and head output 0, where PyTorch returns NaN; the layer's output there is
// then out_proj.bias. Result.FullyMasked counts such rows.
//
// Empty inputs are valid, with PyTorch's results: an empty batch or query sequence gives empty
// outputs, weights and input gradients and adds nothing to the parameter gradients; an empty key
// sequence (with no add_bias_kv or add_zero_attn key appended) leaves every query without a key,
// a fully masked row, so the output is out_proj.bias, which is also what PyTorch gives there.
package mha

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/tensor"
)

// Errors returned by this package wrap one of these, so callers can tell the kinds apart with
// errors.Is; the message of the wrapping error says what was expected and what came.
var (
	ErrConfig    = errors.New("mha: invalid config")
	ErrShape     = errors.New("mha: bad shape")
	ErrStateDict = errors.New("mha: bad state dict")
)

// Config describes a layer, with the meaning of nn.MultiheadAttention's arguments. The zero
// value of every optional field is PyTorch's default, except that PyTorch's bias=True is
// NoBias=false.
type Config struct {
	EmbedDim    int     // E, the model dimension of queries and outputs; > 0
	NumHeads    int     // H; must divide EmbedDim unless HeadDims or HeadSize is set
	KDim        int     // features of key inputs; 0 means EmbedDim
	VDim        int     // features of value inputs; 0 means EmbedDim
	NoBias      bool    // PyTorch's bias=False: no in_proj_bias and no out_proj.bias
	AddBiasKV   bool    // append learned rows bias_k and bias_v to the keys and values
	AddZeroAttn bool    // append a row of zeros to the keys and values (after bias_k/bias_v)
	Dropout     float64 // probability of zeroing an attention weight in training; in [0, 1)
	Seed        uint64  // seed of the parameter initialisation

	// HeadDims, when not nil, gives each head its own size d_h (len H, each > 0, summing to
	// EmbedDim): head h owns the HeadDims[h] columns from HeadOffset(h) of Q, K, V and the
	// concatenation. nil means E/H each, as in PyTorch. The parameters keep PyTorch's shapes.
	HeadDims []int
	// HeadScales, when not nil, gives each head's score scale s_h (len H, finite in float32):
	// its logits are s_h·Q_h·K_hᵀ. nil means 1/√d_h per head, PyTorch's scaling.
	HeadScales []float64
	// HeadSize, when > 0, is the size d of every head where it is not E/H (Hugging Face's
	// head_dim: Qwen3-0.6B has E = 1024 and 16 heads of 128): Q and the concatenated heads are
	// then InnerDim() = H·d wide, so in_proj_weight is [H·d + 2·KVDim, E], q_proj_weight
	// [H·d, E] and out_proj.weight [E, H·d]. 0 means E/H (or HeadDims); not with HeadDims.
	HeadSize int

	// NumKVHeads is the number of key/value heads, Hkv; 0 means NumHeads. Fewer than NumHeads
	// is grouped-query attention (1 is multi-query attention): Hkv must divide NumHeads, query
	// head h reads K/V head ⌊h·Hkv/H⌋, and the key and value projections are Hkv·d wide, so
	// in_proj_weight is [E + 2·Hkv·d, E] (or k_proj_weight and v_proj_weight [Hkv·d, kdim] and
	// [Hkv·d, vdim]), in_proj_bias [E + 2·Hkv·d], bias_k and bias_v [1, 1, Hkv·d]. It needs
	// heads of one size (no HeadDims of different sizes).
	NumKVHeads int
	// Sinks adds a learned logit per head, the parameter sinks [H], that joins every query's
	// softmax and takes weight but no value (gpt-oss's attention sinks; SDPAOptions.Sinks):
	// the weights of a row then sum to less than 1.
	Sinks bool
	// Rotary, when not nil, rotates every head's query and key after the projections (RoPE), as
	// SDPAOptions.Rotary does: key j at position Offset + j, query i at Offset + Tk − Tq + i. It
	// needs heads of one size and no appended keys (AddBiasKV, AddZeroAttn).
	Rotary *Rotary
	// QKNorm, when not nil, normalises every head's query and key after the projections and
	// before Rotary, as Qwen3 does: each head's d values by RMSNorm, x/√(mean(x²) + Eps)
	// times the learned gains q_norm.weight [d] (queries) and k_norm.weight [d] (keys, shared by
	// all K/V heads); with QKNorm.Across, each position's queries of all heads at once, and its
	// keys of all K/V heads. It needs heads of one size and no appended keys (AddBiasKV,
	// AddZeroAttn).
	QKNorm *QKNorm
}

// QKNorm is the RMSNorm of queries and keys (Config.QKNorm).
type QKNorm struct {
	// Eps is added to the mean of squares: finite and > 0 in float32 (Qwen3's rms_norm_eps, 1e-6).
	Eps float64
	// Across normalises each position's H·d query values together, with gains q_norm.weight
	// [H·d], and its Hkv·d key values, with k_norm.weight [Hkv·d] (OLMo 2's q_norm and k_norm
	// over the whole projections), rather than each head's d values with gains [d] (Qwen3's).
	Across bool
}

// MaxDim bounds every size in a Config, so that a size read from a file cannot ask for an absurd
// allocation.
const MaxDim = 1 << 16

// MaxParams bounds the parameters New allocates: each takes a float32 value and, in training, a
// float32 gradient, 16 GiB for 2³¹ of them (a layer of embed dim 16384 has 2³⁰).
const MaxParams = 1 << 31

// HeadDim returns d_h, the size of head h: HeadDims[h], HeadSize, or EmbedDim / NumHeads. It is
// for a config that New accepts and 0 ≤ h < NumHeads, and may panic (index out of range, division
// by zero) otherwise; so are HeadOffset, HeadScale, InnerDim, KVDim and KVHead.
func (c Config) HeadDim(h int) int {
	switch {
	case c.HeadDims != nil:
		return c.HeadDims[h]
	case c.HeadSize > 0:
		return c.HeadSize
	}
	return c.EmbedDim / c.NumHeads
}

// InnerDim returns the width of Q and of the concatenated heads, Σ d_h: EmbedDim, unless
// HeadSize makes it NumHeads·HeadSize.
func (c Config) InnerDim() int {
	if c.HeadSize > 0 {
		return c.NumHeads * c.HeadSize
	}
	return c.EmbedDim
}

// HeadOffset returns o_h, the first column of head h in Q, K, V and the concatenation: the sum
// of the sizes of the heads before it.
func (c Config) HeadOffset(h int) int {
	if c.HeadDims != nil {
		o := 0
		for _, d := range c.HeadDims[:h] {
			o += d
		}
		return o
	}
	return h * c.HeadDim(0)
}

// HeadScale returns s_h, head h's score scale: HeadScales[h], or 1/√d_h.
func (c Config) HeadScale(h int) float64 {
	if c.HeadScales != nil {
		return c.HeadScales[h]
	}
	return 1 / math.Sqrt(float64(c.HeadDim(h)))
}

// KVHeads returns Hkv, the number of key/value heads: NumKVHeads, or NumHeads.
func (c Config) KVHeads() int { return orDefault(c.NumKVHeads, c.NumHeads) }

// KVDim returns the width of the key and value projections, Hkv·d: InnerDim without grouped
// K/V heads.
func (c Config) KVDim() int {
	if c.KVHeads() == c.NumHeads {
		return c.InnerDim()
	}
	return c.KVHeads() * c.HeadDim(0)
}

// KVHead returns the K/V head that query head h reads, ⌊h·Hkv/H⌋.
func (c Config) KVHead(h int) int { return h * c.KVHeads() / c.NumHeads }

func (c Config) kdim() int { return orDefault(c.KDim, c.EmbedDim) }
func (c Config) vdim() int { return orDefault(c.VDim, c.EmbedDim) }

// sameDims reports whether keys and values have E features, so PyTorch stacks the three input
// projections into one in_proj_weight.
func (c Config) sameDims() bool { return c.kdim() == c.EmbedDim && c.vdim() == c.EmbedDim }

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Validate reports whether c describes a layer New can build, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.EmbedDim <= 0:
		return fmt.Errorf("%w: embed dim is %d, want > 0", ErrConfig, c.EmbedDim)
	case c.NumHeads <= 0:
		return fmt.Errorf("%w: num heads is %d, want > 0", ErrConfig, c.NumHeads)
	case c.HeadSize < 0 || c.HeadSize > MaxDim:
		return fmt.Errorf("%w: head size is %d, want 0 (E/H) or a size in [1, %d]", ErrConfig, c.HeadSize, MaxDim)
	case c.HeadSize > 0 && c.HeadDims != nil:
		return fmt.Errorf("%w: head size %d and head dims %v; give one or the other", ErrConfig, c.HeadSize, c.HeadDims)
	case c.HeadDims == nil && c.HeadSize == 0 && c.EmbedDim%c.NumHeads != 0:
		return fmt.Errorf("%w: embed dim %d is not divisible by num heads %d (give HeadDims for heads of different sizes)", ErrConfig, c.EmbedDim, c.NumHeads)
	case c.HeadDims != nil && len(c.HeadDims) != c.NumHeads:
		return fmt.Errorf("%w: %d head dims for %d heads, want one per head", ErrConfig, len(c.HeadDims), c.NumHeads)
	case c.HeadScales != nil && len(c.HeadScales) != c.NumHeads:
		return fmt.Errorf("%w: %d head scales for %d heads, want one per head", ErrConfig, len(c.HeadScales), c.NumHeads)
	case c.KDim < 0:
		return fmt.Errorf("%w: kdim is %d, want > 0 (or 0 for embed dim)", ErrConfig, c.KDim)
	case c.VDim < 0:
		return fmt.Errorf("%w: vdim is %d, want > 0 (or 0 for embed dim)", ErrConfig, c.VDim)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("%w: dropout is %v, want a probability in [0, 1)", ErrConfig, c.Dropout)
	case c.NumKVHeads < 0 || c.NumKVHeads > c.NumHeads || c.NumHeads%c.KVHeads() != 0:
		return fmt.Errorf("%w: %d K/V heads for %d query heads, want a divisor of the query heads (or 0 for as many)", ErrConfig, c.NumKVHeads, c.NumHeads)
	case c.KVHeads() < c.NumHeads && c.unequalHeads():
		return fmt.Errorf("%w: grouped K/V heads (%d for %d heads) need heads of one size, have head dims %v", ErrConfig, c.KVHeads(), c.NumHeads, c.HeadDims)
	case c.Rotary != nil && c.unequalHeads():
		return fmt.Errorf("%w: rotary needs heads of one size, have head dims %v", ErrConfig, c.HeadDims)
	case c.Rotary != nil && (c.AddBiasKV || c.AddZeroAttn):
		return fmt.Errorf("%w: rotary gives appended keys (add_bias_kv, add_zero_attn) no position; use one or the other", ErrConfig)
	case c.QKNorm != nil && c.unequalHeads():
		return fmt.Errorf("%w: qk-norm needs heads of one size, have head dims %v", ErrConfig, c.HeadDims)
	case c.QKNorm != nil && (c.AddBiasKV || c.AddZeroAttn):
		return fmt.Errorf("%w: qk-norm normalises projected keys, and appended keys (add_bias_kv, add_zero_attn) are not; use one or the other", ErrConfig)
	case c.QKNorm != nil && !(float32(c.QKNorm.Eps) > 0 && c.QKNorm.Eps <= math.MaxFloat32):
		// 1/√eps, a zero row's rstd, must be finite in float32, where rows are normalised.
		return fmt.Errorf("%w: qk-norm eps is %v, want a finite number > 0 in float32 (at least 2⁻¹⁴⁹)", ErrConfig, c.QKNorm.Eps)
	}
	for _, d := range []int{c.EmbedDim, c.NumHeads, c.kdim(), c.vdim(), c.NumHeads * c.HeadSize} {
		if d > MaxDim {
			return fmt.Errorf("%w: dimension %d is larger than %d", ErrConfig, d, MaxDim)
		}
	}
	if c.HeadDims != nil {
		sum := 0
		for h, d := range c.HeadDims {
			if d <= 0 || d > MaxDim {
				return fmt.Errorf("%w: head %d has size %d, want a size in [1, %d]", ErrConfig, h, d, MaxDim)
			}
			sum += d
		}
		if sum != c.EmbedDim {
			return fmt.Errorf("%w: head dims %v sum to %d, want embed dim %d", ErrConfig, c.HeadDims, sum, c.EmbedDim)
		}
	}
	for h, s := range c.HeadScales {
		if !finite32(s) {
			return fmt.Errorf("%w: head %d has scale %v, want a number finite in float32, in which scores are computed", ErrConfig, h, s)
		}
	}
	if c.Rotary != nil {
		if _, err := c.Rotary.check(c.HeadDim(0)); err != nil {
			return fmt.Errorf("%w: %s", ErrConfig, strings.TrimPrefix(err.Error(), ErrShape.Error()+": "))
		}
	}
	return nil
}

// innerName names InnerDim in messages: E, unless HeadSize makes it H·d.
func (c Config) innerName() string {
	if c.HeadSize > 0 {
		return "H·d"
	}
	return "E"
}

// transformsQK reports whether the queries and keys change between the projections and the
// attention: normalised (QKNorm), rotated (Rotary) or both.
func (c Config) transformsQK() bool { return c.Rotary != nil || c.QKNorm != nil }

// unequalHeads reports whether HeadDims gives heads of different sizes.
func (c Config) unequalHeads() bool {
	return c.HeadDims != nil && slices.ContainsFunc(c.HeadDims, func(d int) bool { return d != c.HeadDims[0] })
}

// clone returns c with its own copies of the slices and the rotary.
func (c Config) clone() Config {
	c.HeadDims, c.HeadScales = slices.Clone(c.HeadDims), slices.Clone(c.HeadScales)
	if r := c.Rotary; r != nil {
		rc := *r
		rc.Scaling = r.Scaling.clone()
		c.Rotary = &rc
	}
	if n := c.QKNorm; n != nil {
		nc := *n
		c.QKNorm = &nc
	}
	return c
}

// Layer is a multi-head attention layer. Its Forward is safe to call from many goroutines at
// once; changing its parameters (LoadStateDict, writing through Parameters) while a Forward runs
// is not.
type Layer struct {
	cfg    Config
	params []Param // in PyTorch's state-dict order; T is nil for a weight held in half precision
	shapes [][]int // the parameters' shapes, in the same order
	// half holds the weight matrices LoadHalfStateDict loaded, by name; nil when the layer is all
	// float32.
	half    map[string]*tensor.Half
	offs    []int // head h owns columns offs[h] … offs[h+1] of Q and the concatenation
	kvOffs  []int // K/V head g owns columns kvOffs[g] … kvOffs[g+1] of K and V
	ropeDim int   // the dimensions Config.Rotary rotates

	s *layerScratch // what the calls compute in; shared with other layers by ShareScratch
}

// layerScratch is what a layer's calls compute in and keep between calls: helper goroutines,
// work sets and the cached attention's SDPA context. Its pool is stopped when no layer holds it.
type layerScratch struct {
	pool *parallel.Pool // Forward's helper goroutines
	sdpa *SDPAContext   // ForwardCache's attention

	mu   sync.Mutex
	free []*work // Forward's scratch memory, kept for the next calls
}

// newLayerScratch returns a scratch of its own, whose pool stops once it is collected.
func newLayerScratch() *layerScratch {
	s := &layerScratch{pool: new(parallel.Pool), sdpa: NewSDPAContext()}
	runtime.AddCleanup(s, (*parallel.Pool).Close, s.pool)
	return s
}

// ShareScratch has l compute in other's scratch memory instead of its own: its work buffers,
// helper goroutines and its ForwardCache's attention buffers, which grow to the largest call
// and stay between calls. A stack of layers that run one after another, as a model's do, then
// keeps one set rather than one per layer. Results do not change. Calls on layers that share
// may still run at once: each takes a set to itself and a concurrent one gets another. Call it
// before l is used from other goroutines; l's own scratch is dropped.
func (l *Layer) ShareScratch(other *Layer) {
	l.s = other.s
}

// Param is one named parameter. T is the layer's own tensor, not a copy.
type Param struct {
	Name string
	T    *tensor.Tensor
}

// New returns a layer for cfg with parameters initialised as nn.MultiheadAttention does, drawn
// from cfg.Seed: xavier-uniform in_proj_weight (or q/k/v_proj_weight), zero in_proj_bias and
// out_proj.bias, nn.Linear's default init for out_proj.weight, xavier-normal bias_k and bias_v,
// and gains of 1 in q_norm.weight and k_norm.weight.
// It returns an error wrapping ErrConfig when cfg is invalid or has more than MaxParams
// parameters.
func New(cfg Config) (*Layer, error) {
	l, err := makeLayer(cfg, true)
	if err != nil {
		return nil, err
	}
	rng := tensor.NewRNG(cfg.Seed)
	for _, p := range l.params {
		switch p.Name {
		case "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight":
			rng.XavierUniform(p.T)
		case "out_proj.weight":
			rng.LinearDefault(p.T)
		case "bias_k", "bias_v":
			rng.XavierNormal(p.T)
		case "q_norm.weight", "k_norm.weight":
			for i := range p.T.Data {
				p.T.Data[i] = 1
			}
		}
	}
	return l, nil
}

// NewHalf returns a layer for cfg holding sd's tensors as LoadHalfStateDict loads them (the
// weight matrices kept in sd's format, the biases converted to float32), without allocating the
// float32 weights New would initialise first. It returns an error wrapping ErrConfig when cfg is
// invalid, and LoadHalfStateDict's errors.
func NewHalf(cfg Config, sd map[string]*tensor.Half) (*Layer, error) {
	l, err := makeLayer(cfg, false)
	if err != nil {
		return nil, err
	}
	if err := l.LoadHalfStateDict(sd); err != nil {
		return nil, err
	}
	return l, nil
}

// NewFloat32 returns a layer for cfg holding sd's tensors themselves, not copies, as its
// parameters: a float32 state dict as LoadStateDict takes it, checked as LoadStateDict checks it,
// without the weights New would allocate and initialise first, so that a checkpoint loads at the
// memory of one copy. Training the layer writes to sd's tensors. It returns an error wrapping
// ErrConfig when cfg is invalid, and LoadStateDict's errors.
func NewFloat32(cfg Config, sd map[string]*tensor.Tensor) (*Layer, error) {
	l, err := makeLayer(cfg, false)
	if err != nil {
		return nil, err
	}
	if err := checkStateDict(l, sd, floatDims); err != nil {
		return nil, err
	}
	for i, p := range l.params {
		l.params[i].T = sd[p.Name]
	}
	return l, nil
}

// makeLayer returns a layer for cfg with zero parameters, or with none allocated (every T nil)
// when alloc is false, for LoadHalfStateDict to fill.
func makeLayer(cfg Config, alloc bool) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if alloc {
		n := 0 // a valid Config's shapes are each under 2³⁴ elements
		for _, s := range cfg.paramShapes() {
			k, _ := tensor.NumElements(s.shape)
			n += k
		}
		if n > MaxParams {
			return nil, fmt.Errorf("%w: %d parameters, more than the %d (16 GiB of values and gradients in float32) that New allocates; NewHalf holds larger layers", ErrConfig, n, MaxParams)
		}
	}
	cfg = cfg.clone()
	l := &Layer{cfg: cfg, s: newLayerScratch()}
	for h := range cfg.NumHeads {
		l.offs = append(l.offs, cfg.HeadOffset(h))
	}
	l.offs = append(l.offs, cfg.InnerDim())
	l.kvOffs = l.offs
	if hkv := cfg.KVHeads(); hkv < cfg.NumHeads {
		l.kvOffs = nil
		for g := range hkv + 1 {
			l.kvOffs = append(l.kvOffs, g*cfg.HeadDim(0))
		}
	}
	if cfg.Rotary != nil {
		l.ropeDim, _ = cfg.Rotary.check(cfg.HeadDim(0)) // Validate checked it
	}
	for _, s := range cfg.paramShapes() {
		var t *tensor.Tensor
		if alloc {
			t = tensor.New(s.shape...)
		}
		l.params = append(l.params, Param{s.name, t})
		l.shapes = append(l.shapes, s.shape)
	}
	return l, nil
}

type paramShape struct {
	name  string
	shape []int
}

// paramShapes lists the parameters of a layer for c, with PyTorch's names, shapes and order.
func (c Config) paramShapes() []paramShape {
	e, qd, ekv := c.EmbedDim, c.InnerDim(), c.KVDim()
	var s []paramShape
	if c.sameDims() {
		s = append(s, paramShape{"in_proj_weight", []int{qd + 2*ekv, e}})
	} else {
		s = append(s,
			paramShape{"q_proj_weight", []int{qd, e}},
			paramShape{"k_proj_weight", []int{ekv, c.kdim()}},
			paramShape{"v_proj_weight", []int{ekv, c.vdim()}})
	}
	if !c.NoBias {
		s = append(s, paramShape{"in_proj_bias", []int{qd + 2*ekv}})
	}
	if c.AddBiasKV {
		s = append(s, paramShape{"bias_k", []int{1, 1, ekv}}, paramShape{"bias_v", []int{1, 1, ekv}})
	}
	s = append(s, paramShape{"out_proj.weight", []int{e, qd}})
	if !c.NoBias {
		s = append(s, paramShape{"out_proj.bias", []int{e}})
	}
	if c.Sinks {
		s = append(s, paramShape{"sinks", []int{c.NumHeads}})
	}
	if n := c.QKNorm; n != nil && n.Across {
		s = append(s, paramShape{"q_norm.weight", []int{c.InnerDim()}}, paramShape{"k_norm.weight", []int{c.KVDim()}})
	} else if n != nil {
		s = append(s, paramShape{"q_norm.weight", []int{c.HeadDim(0)}}, paramShape{"k_norm.weight", []int{c.HeadDim(0)}})
	}
	return s
}

// Config returns the layer's configuration (a copy: changing it does not change the layer).
func (l *Layer) Config() Config {
	return l.cfg.clone()
}

// Parameters returns the layer's parameters in PyTorch's state-dict order. The float32 tensors
// are the layer's own: writing to them changes the layer. A weight held in half precision
// (LoadHalfStateDict) comes as a new float32 tensor of its values, which the layer does not read.
func (l *Layer) Parameters() []Param {
	ps := slices.Clone(l.params)
	for i, p := range ps {
		if h := l.half[p.Name]; h != nil {
			ps[i].T = decodeHalf(h)
		}
	}
	return ps
}

// HeldParameters returns the layer's parameters in PyTorch's state-dict order as the layer holds
// them, converting nothing: T is the layer's own float32 tensor, or nil for a weight held in half
// precision (LoadHalfStateDict), which is the *tensor.Half given to LoadHalfStateDict.
func (l *Layer) HeldParameters() []Param { return slices.Clone(l.params) }

// NumParams returns the number of scalar parameters: 4·E² + 4·E for the default config (the
// chapters' 4·d_model², plus biases).
func (l *Layer) NumParams() int {
	n := 0
	for _, s := range l.shapes {
		c, _ := tensor.NumElements(s) // New checked the sizes
		n += c
	}
	return n
}

// param returns the float32 parameter called name, or nil when the layer has none (or holds it
// in half precision: read weight matrices through matrix).
func (l *Layer) param(name string) []float32 {
	for _, p := range l.params {
		if p.Name == name && p.T != nil {
			return p.T.Data
		}
	}
	return nil
}

// has reports whether the layer has a parameter called name.
func (l *Layer) has(name string) bool {
	return slices.ContainsFunc(l.params, func(p Param) bool { return p.Name == name })
}

// StateDict returns the parameters by PyTorch name, as nn.MultiheadAttention.state_dict() does.
// The float32 tensors are the layer's own, not copies; a weight held in half precision comes as a
// new float32 tensor of its values.
func (l *Layer) StateDict() map[string]*tensor.Tensor {
	sd := make(map[string]*tensor.Tensor, len(l.params))
	for _, p := range l.Parameters() {
		sd[p.Name] = p.T
	}
	return sd
}

// LoadStateDict copies sd's tensors into the layer's parameters, strictly as PyTorch's
// load_state_dict does: every parameter must be present with its exact shape and no other name
// may appear. Weights the layer held in half precision are float32 again afterwards. On error
// (wrapping ErrStateDict) the layer is unchanged.
func (l *Layer) LoadStateDict(sd map[string]*tensor.Tensor) error {
	if err := checkStateDict(l, sd, floatDims); err != nil {
		return err
	}
	for i, p := range l.params {
		if p.T == nil {
			l.params[i].T = tensor.New(l.shapes[i]...)
		}
		copy(l.params[i].T.Data, sd[p.Name].Data)
	}
	l.half = nil
	return nil
}

// LoadHalfStateDict is LoadStateDict for a checkpoint stored in bfloat16 or float16, all its
// tensors in one format. The weight matrices (in_proj_weight or q/k/v_proj_weight, and
// out_proj.weight) are kept as they are, at half the memory of float32, and read by the matrix
// products, which convert them to float32 as they pack them; the biases (and bias_k, bias_v) are
// converted to float32. Every pass then computes in float32 (Reference in float64) on the
// half-precision values, Backward included: its gradients are float32, but an optimiser has no
// float32 weight to update, so train with float32 weights (LoadStateDict converts back). The
// layer keeps sd's matrices, not copies: they must not change while the layer uses them. On
// error (wrapping ErrStateDict) the layer is unchanged.
func (l *Layer) LoadHalfStateDict(sd map[string]*tensor.Half) error {
	if err := checkStateDict(l, sd, halfDims); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(sd))
	format := sd[names[0]].Format
	for _, name := range names {
		switch f := sd[name].Format; {
		case f != tensor.BFloat16 && f != tensor.Float16:
			return fmt.Errorf("%w: %s is in format %v, want bfloat16 or float16", ErrStateDict, name, f)
		case f != format:
			return fmt.Errorf("%w: %s is %v and %s %v, want one format for all", ErrStateDict, names[0], format, name, f)
		}
	}
	l.half = make(map[string]*tensor.Half)
	for i, p := range l.params {
		h := sd[p.Name]
		if isMatrix(p.Name) {
			l.half[p.Name] = h
			l.params[i].T = nil
			continue
		}
		l.params[i].T = decodeHalf(h)
	}
	return nil
}

// isMatrix reports whether the parameter called name is a weight matrix, which a layer may hold
// in half precision.
func isMatrix(name string) bool {
	return strings.HasSuffix(name, "proj_weight") || name == "out_proj.weight"
}

// decodeHalf returns h's values as a new float32 tensor.
func decodeHalf(h *tensor.Half) *tensor.Tensor {
	t := &tensor.Tensor{Shape: slices.Clone(h.Shape), Data: make([]float32, len(h.Data))}
	kernel.DecodeHalf(t.Data, h.Data, h.Format == tensor.BFloat16)
	return t
}

// checkStateDict checks sd against the layer's parameters: each present, not nil and of its
// shape (dims gives a tensor's shape and value count), and no other name.
func checkStateDict[T any](l *Layer, sd map[string]*T, dims func(*T) ([]int, int)) error {
	names := slices.Sorted(maps.Keys(sd))
	if err := checkNotNil(names, sd); err != nil {
		return err
	}
	for i, p := range l.params {
		t, ok := sd[p.Name]
		if !ok {
			return fmt.Errorf("%w: missing %q (want %s)", ErrStateDict, p.Name, l.describe())
		}
		shape, count := dims(t)
		want, _ := tensor.NumElements(l.shapes[i])
		if !slices.Equal(shape, l.shapes[i]) {
			return fmt.Errorf("%w: %s is %v, want %v", ErrStateDict, p.Name, shape, l.shapes[i])
		}
		if count != want {
			return fmt.Errorf("%w: %s has %d values for its shape %v, want %d", ErrStateDict, p.Name, count, shape, want)
		}
	}
	for _, name := range names {
		if !l.has(name) {
			return fmt.Errorf("%w: unexpected %q (want %s)", ErrStateDict, name, l.describe())
		}
	}
	return nil
}

// floatDims and halfDims give a tensor's shape and value count, for checkStateDict.
func floatDims(t *tensor.Tensor) ([]int, int) { return t.Shape, len(t.Data) }
func halfDims(t *tensor.Half) ([]int, int)    { return t.Shape, len(t.Data) }

// checkNotNil returns an error naming the first of names whose tensor in sd is nil.
func checkNotNil[T any](names []string, sd map[string]*T) error {
	for _, name := range names {
		if sd[name] == nil {
			return fmt.Errorf("%w: %s is nil, want a tensor", ErrStateDict, name)
		}
	}
	return nil
}

// describe lists the parameters' names and shapes, for errors.
func (l *Layer) describe() string {
	names := make([]string, len(l.params))
	for i, p := range l.params {
		names[i] = fmt.Sprintf("%s %v", p.Name, l.shapes[i])
	}
	return strings.Join(names, ", ")
}

// InferConfig reads the embed dim, kdim, vdim, the K/V heads, bias and add_bias_kv from the
// names and shapes in an nn.MultiheadAttention state dict (or one of a layer with grouped K/V
// heads, whose key and value projections are narrower, with sinks, or with a HeadSize, whose
// out_proj.weight is [E, H·d]), with numHeads heads. AddZeroAttn,
// Dropout, Rotary and Seed are not stored in a state dict and are left zero; q_norm.weight gives
// QKNorm with Qwen3's Eps of 1e-6, which is not stored either (Across when it holds H·d
// gains). It returns an error
// wrapping ErrStateDict when sd is not such a state dict, or ErrConfig when the sizes do not make
// a valid layer.
func InferConfig(sd map[string]*tensor.Tensor, numHeads int) (Config, error) {
	cfg, err := inferConfig(sd, numHeads)
	if out := sd["out_proj.weight"]; err != nil && out != nil && len(out.Shape) == 2 && out.Shape[0] != out.Shape[1] && numHeads > 0 && out.Shape[1] > 0 && out.Shape[1]%numHeads == 0 {
		// out_proj.weight [E, H·d] was read as heads of d ≠ E/H, which the rest contradicts:
		// it may as well be out_proj.weight that is wrong.
		detail := strings.TrimPrefix(strings.TrimPrefix(err.Error(), ErrStateDict.Error()+": "), ErrConfig.Error()+": ")
		return Config{}, fmt.Errorf("%w: out_proj.weight is %v, want [E E], or [E H·d] with %d heads of d ≠ E/H, which the rest of the state dict contradicts: %s", ErrStateDict, out.Shape, numHeads, detail)
	}
	return cfg, err
}

// inferConfig is InferConfig without the hint on out_proj.weight.
func inferConfig(sd map[string]*tensor.Tensor, numHeads int) (Config, error) {
	if err := checkNotNil(slices.Sorted(maps.Keys(sd)), sd); err != nil {
		return Config{}, err
	}
	out, ok := sd["out_proj.weight"]
	if !ok {
		return Config{}, fmt.Errorf("%w: no out_proj.weight (have %s)", ErrStateDict, strings.Join(slices.Sorted(maps.Keys(sd)), ", "))
	}
	if len(out.Shape) != 2 || out.Shape[0] != out.Shape[1] && (numHeads <= 0 || out.Shape[1] <= 0 || out.Shape[1]%numHeads != 0) {
		return Config{}, fmt.Errorf("%w: out_proj.weight is %v, want [E E] (or [E H·d] for %d heads of d ≠ E/H)", ErrStateDict, out.Shape, numHeads)
	}
	e, qd := out.Shape[0], out.Shape[1]
	cfg := Config{EmbedDim: e, NumHeads: numHeads}
	if qd != e {
		cfg.HeadSize = qd / numHeads
	}
	ekv := qd
	if in, ok := sd["in_proj_weight"]; ok {
		if len(in.Shape) != 2 || in.Shape[1] != e || in.Shape[0] <= qd || (in.Shape[0]-qd)%2 != 0 {
			if qd != e {
				return Config{}, fmt.Errorf("%w: in_proj_weight is %v, want [H·d + 2·Ekv, E] with H·d = %d, E = %d", ErrStateDict, in.Shape, qd, e)
			}
			return Config{}, fmt.Errorf("%w: in_proj_weight is %v, want [E + 2·Ekv, E] with E = %d", ErrStateDict, in.Shape, e)
		}
		ekv = (in.Shape[0] - qd) / 2
	} else {
		k, v := sd["k_proj_weight"], sd["v_proj_weight"]
		if k == nil || v == nil {
			return Config{}, fmt.Errorf("%w: want in_proj_weight, or q_proj_weight, k_proj_weight and v_proj_weight (have %s)", ErrStateDict, strings.Join(slices.Sorted(maps.Keys(sd)), ", "))
		}
		if len(k.Shape) != 2 || len(v.Shape) != 2 || k.Shape[0] != v.Shape[0] {
			return Config{}, fmt.Errorf("%w: k_proj_weight is %v and v_proj_weight %v, want [Ekv kdim] and [Ekv vdim]", ErrStateDict, k.Shape, v.Shape)
		}
		cfg.KDim, cfg.VDim, ekv = k.Shape[1], v.Shape[1], k.Shape[0]
		if cfg.sameDims() {
			// PyTorch stores separate projections only when kdim or vdim differ from E.
			return Config{}, fmt.Errorf("%w: q/k/v_proj_weight with kdim = vdim = E = %d; PyTorch names these in_proj_weight", ErrStateDict, cfg.EmbedDim)
		}
	}
	if ekv != qd {
		if numHeads <= 0 || qd%numHeads != 0 || qd < numHeads || ekv%(qd/numHeads) != 0 {
			return Config{}, fmt.Errorf("%w: key/value projections %d wide for E = %d and %d heads, want a multiple of the head size", ErrStateDict, ekv, e, numHeads)
		}
		cfg.NumKVHeads = ekv / (qd / numHeads)
	}
	_, hasBias := sd["in_proj_bias"]
	cfg.NoBias = !hasBias
	_, cfg.AddBiasKV = sd["bias_k"]
	_, cfg.Sinks = sd["sinks"]
	if w, ok := sd["q_norm.weight"]; ok {
		// Gains of H·d values (H > 1) normalise across the heads.
		cfg.QKNorm = &QKNorm{Eps: 1e-6, Across: len(w.Shape) == 1 && cfg.NumHeads > 1 && w.Shape[0] == cfg.InnerDim()}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
