package nn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/attend"
)

// Config describes a causal decoder: token embedding plus positions, Layers blocks of
// multi-head self-attention (and, unless AttnOnly, a feed-forward network), and an output head
// over the vocabulary. It is stored as JSON in checkpoints, under the field names of its tags.
//
// The fields after HeadScales make Hugging Face's GPT-2, BERT and Llama families configurations
// of the same model; their zero values are the model as it was before they existed, and they are
// left out of the JSON when zero, so older checkpoints load and save unchanged:
//
//	GPT-2   norm "pre", positions "learned", activation "gelu_new", tie_embeddings, no_head_bias
//	BERT    norm "post", positions "learned", norm_eps 1e-12, type_vocab 2, emb_norm
//	Llama   norm "pre", positions "none", norm_kind "rmsnorm", norm_eps 1e-5 or 1e-6,
//	        activation "swiglu", no_mlp_bias, no_head_bias (tie_embeddings in some)
//
// (the attention-side differences, such as rotary positions and bidirectional attention, are
// mha's). Every Linear stores its weight as [out, in], PyTorch's nn.Linear layout: GPT-2's
// Conv1D weights, stored [in, out], are transposed once when a loader maps them onto a Config.
type Config struct {
	Vocab     int     `json:"vocab"`     // tokens are in [0, Vocab); > 0
	SeqLen    int     `json:"seq_len"`   // the most positions a sequence may have; > 0
	DModel    int     `json:"d_model"`   // width of the residual stream; > 0
	Heads     int     `json:"heads"`     // attention heads per block; must divide DModel unless HeadDims or HeadSize is set
	Layers    int     `json:"layers"`    // number of blocks; > 0
	FFN       int     `json:"ffn"`       // hidden width of the feed-forward network; 0 with AttnOnly, else > 0 (NewModel reads 0 as 4·DModel)
	Norm      string  `json:"norm"`      // "post": x = LN(x + f(x)); "pre": x = x + f(LN(x)), with a final LayerNorm
	Positions string  `json:"positions"` // "sinusoidal" (fixed, Vaswani et al.) or "learned" ([SeqLen, DModel] parameter)
	AttnOnly  bool    `json:"attn_only"` // blocks without a feed-forward network
	Dropout   float64 `json:"dropout"`   // attention dropout probability in training; in [0, 1)
	Seed      uint64  `json:"seed"`      // seed of the parameter initialisation

	// HeadDims and HeadScales are mha.Config's, for every block: heads of different sizes (len
	// Heads, summing to DModel) and per-head score scales (len Heads); nil means d_model/heads
	// each and 1/√d_h.
	HeadDims   []int     `json:"head_dims,omitempty"`
	HeadScales []float64 `json:"head_scales,omitempty"`
	// HeadSize, when > 0, is the size d of every head where it is not d_model/heads
	// (mha.Config.HeadSize; Hugging Face's head_dim, as in Qwen3-0.6B's 16 heads of 128 in a
	// d_model of 1024): the heads' outputs, Model.Heads, are then heads·d wide. Not with HeadDims.
	HeadSize int `json:"head_size,omitempty"`

	// NormKind is the kind of every normalisation layer (blocks, final, embedding): "" or
	// "layernorm" for LayerNorm (parameters weight and bias), "rmsnorm" for Llama's RMSNorm
	// y = x/√(mean(x²) + eps)·w (parameter weight only).
	NormKind string `json:"norm_kind,omitempty"`
	// NormEps is the eps of every normalisation layer, in (0, 1]; 0 means 1e-5, PyTorch's
	// LayerNorm default (Hugging Face: GPT-2 layer_norm_epsilon 1e-5, BERT layer_norm_eps
	// 1e-12, Llama rms_norm_eps 1e-5 or 1e-6).
	NormEps float64 `json:"norm_eps,omitempty"`
	// Activation is the feed-forward network: "" or "gelu" for fc2(GELU(fc1(x))) with the exact
	// (erf) GELU; "gelu_new" or "gelu_pytorch_tanh" (Hugging Face's two names of one function)
	// for the same network with GELU's tanh approximation, as GPT-2; "swiglu" for Llama's gated
	// network down_proj(SiLU(gate_proj(x)) ⊙ up_proj(x)); "geglu" for Gemma's, with GELU's tanh
	// form in place of SiLU. Empty with AttnOnly.
	Activation string `json:"activation,omitempty"`
	// NoMLPBias leaves the biases out of the feed-forward network's Linears (Llama's
	// mlp_bias false). False with AttnOnly.
	NoMLPBias bool `json:"no_mlp_bias,omitempty"`
	// NoHeadBias leaves the bias out of the output head (Hugging Face's lm_head has none).
	NoHeadBias bool `json:"no_head_bias,omitempty"`
	// TieEmbeddings makes the output head's weight the token embedding tok_emb.weight [Vocab,
	// DModel] itself (Hugging Face's tie_word_embeddings): there is no head.weight parameter, the
	// head's gradient is added into the embedding's, and, an embedding, it is not weight-decayed.
	TieEmbeddings bool `json:"tie_embeddings,omitempty"`
	// TypeVocab, when > 0, adds BERT's token type embedding type_emb.weight [TypeVocab, DModel]
	// (token_type_embeddings, type_vocab_size) to the token and position embeddings, indexed by
	// RunOptions.TokenTypes (all 0 when nil); at most MaxDim.
	TypeVocab int `json:"type_vocab,omitempty"`
	// EmbNorm normalises the sum of the embeddings with a normalisation layer emb_ln of kind
	// NormKind (BERT's embeddings.LayerNorm) before the first block.
	EmbNorm bool `json:"emb_norm,omitempty"`
	// EmbScale, when not 0, multiplies every token embedding by float32(EmbScale) before the
	// position and type embeddings are added: Gemma's √d_model, which Hugging Face rounds to the
	// hidden states' dtype. A tied head reads tok_emb.weight unscaled. 0 means 1; else finite
	// and > 0.
	EmbScale float64 `json:"emb_scale,omitempty"`

	// HeadTransform puts BERT's masked-LM transform before the output head: y =
	// Norm(act(x·Wᵀ + b)), head_dense [DModel, DModel] with bias, act the Activation (not
	// "swiglu"), and a normalisation layer head_ln of kind NormKind.
	HeadTransform bool `json:"head_transform,omitempty"`
	// KVHeads, when > 0, is every block's number of key/value heads, a divisor of Heads
	// (mha.Config.NumKVHeads; Hugging Face's num_key_value_heads): grouped-query attention.
	KVHeads int `json:"kv_heads,omitempty"`
	// Rope, when not nil, rotates every block's queries and keys (mha.Config.Rotary), Llama's
	// positions: query and key t sit at position t.
	Rope *Rope `json:"rope,omitempty"`
	// NoAttnBias leaves the biases out of the attention's projections (in_proj_bias and
	// out_proj.bias; Llama's attention_bias false).
	NoAttnBias bool `json:"no_attn_bias,omitempty"`
	// QKNorm normalises every head's query and key with RMSNorm of eps NormEps before the
	// rotation (mha.Config.QKNorm; Qwen3's q_norm and k_norm): each block's attention has the
	// parameters attn.q_norm.weight and attn.k_norm.weight [d]. It needs heads of one size.
	QKNorm bool `json:"qk_norm,omitempty"`
	// QKNormAcross, with QKNorm, normalises each position's queries across all heads and its
	// keys across all K/V heads (mha.QKNorm.Across; OLMo 2's q_norm and k_norm over the whole
	// projections): the gains are attn.q_norm.weight [Heads·d] and attn.k_norm.weight [KVHeads·d].
	QKNormAcross bool `json:"qk_norm_across,omitempty"`
	// Bidirectional lets every position attend to every other (BERT's encoder); the default is
	// causal.
	Bidirectional bool `json:"bidirectional,omitempty"`
	// Window, when > 0, is a causal sliding window: position i attends to the Window positions
	// i − Window + 1 … i (Hugging Face's sliding_window, as Mistral uses it). Not with
	// Bidirectional or Local.
	Window int `json:"window,omitempty"`
	// Local, when not nil, makes some blocks local (Gemma 3's sliding_attention layers between
	// its full_attention ones): they attend in a causal sliding window and rotate with their own
	// Rope. The other blocks are as the rest of the Config says.
	Local *Local `json:"local,omitempty"`
	// NoRope, when not nil, has one flag per block: a block whose flag is set attends without
	// the rotary (Rope or a Local block's), as SmolLM3's NoPE layers (no_rope_layers 0).
	NoRope []bool `json:"no_rope,omitempty"`
	// SandwichNorm normalises, in a pre-norm block, the attention's and the feed-forward
	// network's outputs too before they are added to the stream (Gemma 2's and 3's
	// post_attention_layernorm and post_feedforward_layernorm): x = x + N1'(MHA(N1(x))); x = x +
	// N2'(FFN(N2(x))), with the parameters blocks.l.ln1_post and blocks.l.ln2_post (the latter
	// unless AttnOnly). Only with Norm "pre".
	SandwichNorm bool `json:"sandwich_norm,omitempty"`
	// NoInputNorm, with SandwichNorm, leaves out the blocks' input normalisations ln1 and ln2:
	// the attention and the feed-forward network read the stream itself, and only their outputs
	// are normalised (OLMo 2's post_attention_layernorm and post_feedforward_layernorm): x = x +
	// N1'(MHA(x)); x = x + N2'(FFN(x)).
	NoInputNorm bool `json:"no_input_norm,omitempty"`
	// ParallelResidual has each pre-norm block add its attention and its feed-forward network,
	// both reading the block's input, to the stream at once (GPT-NeoX's and Pythia's
	// use_parallel_residual, GPT-J's): x = x + MHA(N1(x)) + FFN(N2(x)). ResidualMid is then x +
	// MHA(N1(x)). Only with Norm "pre", a feed-forward network and no SandwichNorm.
	ParallelResidual bool `json:"parallel_residual,omitempty"`
	// SharedNorm, with ParallelResidual, has the feed-forward network read the attention's
	// normalised input, N1(x), rather than a second normalisation's (GPT-J's and Phi-2's one
	// input_layernorm): x = x + MHA(N1(x)) + FFN(N1(x)), and the blocks have no ln2.
	SharedNorm bool `json:"shared_norm,omitempty"`
	// AttnSoftcap, when > 0, caps every block's scaled attention scores s to
	// AttnSoftcap·tanh(s/AttnSoftcap) before the masks (mha.Options.Softcap; Gemma 2's
	// attn_logit_softcapping). LogitSoftcap, when > 0, caps the logits z likewise (Gemma 2's
	// final_logit_softcapping), in every forward and in Unembed. Each is 0 or finite and > 0.
	AttnSoftcap  float64 `json:"attn_softcap,omitempty"`
	LogitSoftcap float64 `json:"logit_softcap,omitempty"`
	// Experts, when > 0, makes every block's feed-forward network a sparse mixture of Experts
	// networks of the shape the rest of the Config gives (FFN wide each; Mixtral's
	// block_sparse_moe, Qwen3-MoE's experts): the router blocks.l.ffn.router [Experts, d_model],
	// without bias, scores each token, and the token's output is Σ_j w_j·E_j(x) over the
	// ExpertsPerToken experts of highest softmax probability p_j, with w_j = p_j, or p_j over
	// their sum with NormTopK (Mixtral's; Qwen3-MoE's norm_topk_prob); expert e's parameters
	// are under blocks.l.ffn.experts.e. ExpertsPerToken is in [1, Experts].
	Experts         int  `json:"experts,omitempty"`
	ExpertsPerToken int  `json:"experts_per_token,omitempty"`
	NormTopK        bool `json:"norm_topk,omitempty"`
	// SharedExpert, when > 0, adds to the experts' sum a shared expert of that hidden width that
	// every token goes through (blocks.l.ffn.shared.*), its output scaled by σ(x·g) with the
	// gate blocks.l.ffn.shared_gate.weight [1, d_model] (Qwen2-MoE's shared_expert and
	// shared_expert_gate). Only with Experts.
	SharedExpert int `json:"shared_expert,omitempty"`
	// Patterns, when not empty, make every block's attention sparse: the union of these
	// patterns, spelled as mha.ParsePattern reads them (local:W, dilated:W,D, strided:S,
	// global:I,J,…, bigbird:W,G,R,SEED), in blocks of Block ([BQ, BK]; empty means 64 × 64).
	Patterns []string `json:"patterns,omitempty"`
	Block    []int    `json:"block,omitempty"`
	// Normalizer, when not empty, replaces the softmax, as mha.ParseNormalizer reads it
	// (sparsemax, entmax15, entmax:ALPHA, topk:K).
	Normalizer string `json:"normalizer,omitempty"`
}

// Rope is the rotary position embedding of a Config: mha.Rotary's fields, as stored in JSON.
type Rope struct {
	Theta       float64 `json:"theta"`                 // the base θ, > 0 (Hugging Face's rope_theta)
	Dim         int     `json:"dim,omitempty"`         // rotated dimensions of each head; 0 means all
	Interleaved bool    `json:"interleaved,omitempty"` // pairs (2p, 2p+1) as GPT-J, not rotate-half as Llama
	// Scaling, when not nil, scales the frequencies as rope_scaling says: Llama 3's, linear,
	// YaRN or LongRoPE (whose model's ForwardCached recomputes its cache when a call passes the
	// original length).
	Scaling *mha.RopeScaling `json:"scaling,omitempty"`
}

// Local lists a Config's local blocks and how they attend.
type Local struct {
	// Layers[l] makes block l local; its length is the Config's Layers.
	Layers []bool `json:"layers"`
	// Window is the local blocks' causal sliding window, as Config.Window counts it; > 0.
	Window int `json:"window"`
	// Rope, when not nil, is the local blocks' rotary in place of Config.Rope (Gemma 3's
	// rope_local_base_freq); nil means Config.Rope.
	Rope *Rope `json:"rope,omitempty"`
}

// clone returns a copy of r that shares no memory with it, or nil for nil.
func (r *Rope) clone() *Rope {
	if r == nil {
		return nil
	}
	c := *r
	if s := r.Scaling; s != nil {
		sc := *s
		sc.ShortFactor, sc.LongFactor = slices.Clone(s.ShortFactor), slices.Clone(s.LongFactor)
		c.Scaling = &sc
	}
	return &c
}

// clone returns a copy of c that shares no memory with it: a model keeps one, so that a caller's
// later edits to its slices and pointers change neither the model nor what it saves.
func (c Config) clone() Config {
	c.HeadDims, c.HeadScales = slices.Clone(c.HeadDims), slices.Clone(c.HeadScales)
	c.Patterns, c.Block, c.NoRope = slices.Clone(c.Patterns), slices.Clone(c.Block), slices.Clone(c.NoRope)
	c.Rope = c.Rope.clone()
	if l := c.Local; l != nil {
		c.Local = &Local{Layers: slices.Clone(l.Layers), Window: l.Window, Rope: l.Rope.clone()}
	}
	return c
}

// rotary returns r as the attention layer's Rotary, or nil for nil.
func (r *Rope) rotary() *mha.Rotary {
	if r == nil {
		return nil
	}
	rot := &mha.Rotary{Theta: r.Theta, Dim: r.Dim, Layout: mha.RopeHalf, Scaling: r.Scaling}
	if r.Interleaved {
		rot.Layout = mha.RopeInterleaved
	}
	return rot
}

// Values of Config.Norm and Config.Positions.
const (
	PostNorm   = "post"
	PreNorm    = "pre"
	Sinusoidal = "sinusoidal"
	Learned    = "learned"
	// NoPositions adds no position embedding: positions come from inside the attention (rotary
	// embeddings, as Llama's), or not at all.
	NoPositions = "none"
)

// Values of Config.NormKind; "" is LayerNorm.
const (
	LayerNorm = "layernorm"
	RMSNorm   = "rmsnorm"
)

// Values of Config.Activation; "" is GELU.
const (
	GELU            = "gelu"              // x·Φ(x), Φ by erf: PyTorch's F.gelu, Hugging Face's "gelu"
	GELUNew         = "gelu_new"          // GELU's tanh approximation, Hugging Face's name in GPT-2
	GELUPyTorchTanh = "gelu_pytorch_tanh" // the same function under Hugging Face's other name
	SwiGLU          = "swiglu"            // Llama's gated network with SiLU (hidden_act "silu")
	GeGLU           = "geglu"             // Gemma's gated network with GELU's tanh form (hidden_activation "gelu_pytorch_tanh")
)

// gated reports whether the feed-forward network is gated: down_proj(act(gate_proj(x)) ⊙
// up_proj(x)).
func (c Config) gated() bool { return c.Activation == SwiGLU || c.Activation == GeGLU }

// DefaultNormEps is the eps of the normalisation layers when Config.NormEps is 0.
const DefaultNormEps = 1e-5

// MaxDim bounds DModel, FFN and the other widths, MaxVocab Vocab, MaxSeqLen SeqLen, MaxLayers
// Layers and MaxExperts Experts, so that sizes read from a file cannot overflow the arithmetic
// on them. (Llama 3's vocabulary has 128256 tokens and its context 131072 positions; Gemma 3's
// vocabulary 262208; DeepSeek-V3 has 256 experts a block.)
const (
	MaxDim     = 1 << 16
	MaxVocab   = 1 << 19
	MaxSeqLen  = 1 << 20
	MaxLayers  = 1 << 10
	MaxExperts = 1 << 10
)

// ErrConfig is wrapped by every error about an invalid Config.
var ErrConfig = errors.New("nn: invalid config")

// Validate returns an error wrapping ErrConfig that names the first field out of range, what it
// is and what it should be; nil when c describes a model NewModel can build.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	for _, f := range []struct {
		name  string
		v, to int
	}{{"vocab", c.Vocab, MaxVocab}, {"seq_len", c.SeqLen, MaxSeqLen}, {"d_model", c.DModel, MaxDim}, {"heads", c.Heads, MaxDim}} {
		if f.v <= 0 || f.v > f.to {
			return bad("%s is %d, want a value in [1, %d]", f.name, f.v, f.to)
		}
	}
	switch {
	case c.HeadDims == nil && c.HeadSize == 0 && c.DModel%c.Heads != 0:
		return bad("d_model %d is not divisible by heads %d", c.DModel, c.Heads)
	case c.Layers <= 0 || c.Layers > MaxLayers:
		return bad("layers is %d, want a value in [1, %d]", c.Layers, MaxLayers)
	case c.AttnOnly && c.FFN != 0:
		return bad("ffn is %d with attn_only, want 0", c.FFN)
	case c.FFN < 0 || c.FFN > MaxDim:
		return bad("ffn is %d, want a value in [1, %d] (or 0 for 4·d_model)", c.FFN, MaxDim)
	case c.Norm != PostNorm && c.Norm != PreNorm:
		return bad("norm is %q, want %q or %q", c.Norm, PostNorm, PreNorm)
	case c.Positions != Sinusoidal && c.Positions != Learned && c.Positions != NoPositions:
		return bad("positions is %q, want %q, %q or %q", c.Positions, Sinusoidal, Learned, NoPositions)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return bad("dropout is %v, want a probability in [0, 1)", c.Dropout)
	case c.NormKind != "" && c.NormKind != LayerNorm && c.NormKind != RMSNorm:
		return bad("norm_kind is %q, want %q or %q (or empty for %q)", c.NormKind, LayerNorm, RMSNorm, LayerNorm)
	case !(c.NormEps >= 0 && c.NormEps <= 1):
		return bad("norm_eps is %v, want a value in (0, 1] (or 0 for %v)", c.NormEps, DefaultNormEps)
	case c.NormEps > 0 && float32(c.NormEps) == 0:
		// A zero row's rstd, 1/√eps, must be finite in float32, where rows are normalised.
		return bad("norm_eps is %v, want a value in (0, 1] (or 0 for %v) that float32 holds, at least 2⁻¹⁴⁹", c.NormEps, DefaultNormEps)
	case c.AttnOnly && c.Activation != "":
		return bad("activation is %q with attn_only, want none", c.Activation)
	case c.Activation != "" && c.Activation != GELU && c.Activation != GELUNew && c.Activation != GELUPyTorchTanh && !c.gated():
		return bad("activation is %q, want %q, %q, %q or %q (or empty for %q), or Gemma's %q", c.Activation, GELU, GELUNew, GELUPyTorchTanh, SwiGLU, GELU, GeGLU)
	case c.EmbScale != 0 && !(float32(c.EmbScale) > 0 && c.EmbScale <= math.MaxFloat32):
		return bad("emb_scale is %v, want a number > 0 finite in float32 (or 0 for none)", c.EmbScale)
	case c.AttnOnly && c.NoMLPBias:
		return bad("no_mlp_bias is set with attn_only, which has no feed-forward network")
	case c.TypeVocab < 0 || c.TypeVocab > MaxDim:
		return bad("type_vocab is %d, want a value in [1, %d] (or 0 for no token types)", c.TypeVocab, MaxDim)
	case c.HeadTransform && (c.AttnOnly || c.gated()):
		return bad("head_transform needs a GELU activation, have attn_only %v, activation %q", c.AttnOnly, c.Activation)
	case c.Window < 0 || c.Window > MaxSeqLen:
		return bad("window is %d, want a value in [1, %d] (or 0 for none)", c.Window, MaxSeqLen)
	case c.Window > 0 && c.Bidirectional:
		return bad("window %d with bidirectional attention, want a window only on causal attention", c.Window)
	case c.Local != nil && len(c.Local.Layers) != c.Layers:
		return bad("local lists %d layers, want one flag per layer, %d", len(c.Local.Layers), c.Layers)
	case c.Local != nil && (c.Local.Window < 1 || c.Local.Window > MaxSeqLen):
		return bad("local window is %d, want a value in [1, %d]", c.Local.Window, MaxSeqLen)
	case c.Local != nil && (c.Bidirectional || c.Window > 0):
		return bad("local blocks with bidirectional %v and window %d, want causal attention without a window of every block", c.Bidirectional, c.Window)
	case c.Experts < 0 || c.Experts > MaxExperts:
		return bad("experts is %d, want 0 (a dense feed-forward network) to %d", c.Experts, MaxExperts)
	case c.Experts > 0 && (c.ExpertsPerToken < 1 || c.ExpertsPerToken > c.Experts):
		return bad("experts_per_token is %d, want 1 to experts, %d", c.ExpertsPerToken, c.Experts)
	case c.Experts == 0 && (c.ExpertsPerToken != 0 || c.NormTopK || c.SharedExpert != 0):
		return bad("experts_per_token %d, norm_topk %v and shared_expert %d without experts", c.ExpertsPerToken, c.NormTopK, c.SharedExpert)
	case c.SharedExpert < 0 || c.SharedExpert > MaxDim:
		return bad("shared_expert is %d, want 0 (none) to %d", c.SharedExpert, MaxDim)
	case c.Experts > 0 && c.AttnOnly:
		return bad("experts with attn_only, which has no feed-forward network")
	case c.NoRope != nil && len(c.NoRope) != c.Layers:
		return bad("no_rope lists %d layers, want one flag per layer, %d", len(c.NoRope), c.Layers)
	case c.NoInputNorm && !c.SandwichNorm:
		return bad("no_input_norm without sandwich_norm, want both (a block normalises its outputs or its inputs)")
	case c.QKNormAcross && !c.QKNorm:
		return bad("qk_norm_across without qk_norm, want both")
	case c.SandwichNorm && c.Norm != PreNorm:
		return bad("sandwich_norm with norm %q, want %q", c.Norm, PreNorm)
	case c.ParallelResidual && (c.Norm != PreNorm || c.AttnOnly || c.SandwichNorm):
		return bad("parallel_residual with norm %q, attn_only %v and sandwich_norm %v, want a pre-norm block with a feed-forward network and no sandwich", c.Norm, c.AttnOnly, c.SandwichNorm)
	case c.SharedNorm && !c.ParallelResidual:
		return bad("shared_norm without parallel_residual, want both")
	case !(c.AttnSoftcap >= 0 && c.AttnSoftcap <= math.MaxFloat32) || c.AttnSoftcap > 0 && float32(c.AttnSoftcap) == 0:
		return bad("attn_softcap is %v, want a number > 0 finite in float32 (or 0 for none)", c.AttnSoftcap)
	case !(c.LogitSoftcap >= 0 && c.LogitSoftcap <= math.MaxFloat32) || c.LogitSoftcap > 0 && float32(c.LogitSoftcap) == 0:
		return bad("logit_softcap is %v, want a number > 0 finite in float32 (or 0 for none)", c.LogitSoftcap)
	case c.Block != nil && (len(c.Block) != 2 || c.Block[0] < 1 || c.Block[1] < 1):
		return bad("block is %v, want two sizes ≥ 1 (or none for 64 × 64)", c.Block)
	}
	if _, _, err := c.sparsity(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if !c.AttnOnly && c.FFN == 0 && 4*c.DModel > MaxDim {
		return bad("the default ffn 4·d_model = %d is larger than %d", 4*c.DModel, MaxDim)
	}
	if err := c.Attention().Validate(); err != nil {
		return fmt.Errorf("%w: attention: %w", ErrConfig, err)
	}
	if c.Local != nil && c.Local.Rope != nil { // checked even when no block is Local: it is saved
		ac := c.Attention()
		ac.Rotary = c.Local.Rope.rotary()
		if err := ac.Validate(); err != nil {
			return fmt.Errorf("%w: local attention: %w", ErrConfig, err)
		}
	}
	return nil
}

// Attention returns the config of every block's attention layer, whose HeadDim and HeadOffset
// give the layout of the heads; a Local or NoRope block's may differ in its Rotary only. Its Seed is 0:
// each block seeds its own layer.
func (c Config) Attention() mha.Config {
	ac := mha.Config{EmbedDim: c.DModel, NumHeads: c.Heads, NumKVHeads: c.KVHeads, NoBias: c.NoAttnBias,
		Dropout: c.Dropout, HeadDims: c.HeadDims, HeadScales: c.HeadScales, HeadSize: c.HeadSize, Rotary: c.Rope.rotary()}
	if c.QKNorm {
		ac.QKNorm = &mha.QKNorm{Eps: c.normEps(), Across: c.QKNormAcross}
	}
	return ac
}

// blockAttention returns the config of block l's attention: Attention's, with a Local block's
// rotary, or none in a NoRope block.
func (c Config) blockAttention(l int) mha.Config {
	ac := c.Attention()
	switch {
	case l < len(c.NoRope) && c.NoRope[l]:
		ac.Rotary = nil
	case c.local(l) && c.Local.Rope != nil:
		ac.Rotary = c.Local.Rope.rotary()
	}
	return ac
}

// local reports whether block l is local.
func (c Config) local(l int) bool {
	return c.Local != nil && l >= 0 && l < len(c.Local.Layers) && c.Local.Layers[l]
}

// LayerWindow returns the sliding window of block layer (a Local block's, or Window): each
// query sees the LayerWindow() positions up to its own; 0 for none (a layer outside 0 …
// Layers−1 has Window's).
func (c Config) LayerWindow(layer int) int {
	if w := c.window(layer); w != nil {
		return w.Left + 1
	}
	return 0
}

// window returns block l's sliding window, or nil for none.
func (c Config) window(l int) *mha.Window {
	switch {
	case c.local(l):
		return &mha.Window{Left: c.Local.Window - 1}
	case c.Window > 0:
		return &mha.Window{Left: c.Window - 1}
	}
	return nil
}

// ropeSwitches returns the original lengths of the blocks' LongRoPE rotaries, past which their
// rotation changes.
func (c Config) ropeSwitches() []int {
	var out []int
	for _, r := range []*Rope{c.Rope, c.localRope()} {
		if r != nil && r.Scaling != nil && r.Scaling.Type == mha.RopeLongRoPE {
			out = append(out, r.Scaling.OriginalMaxPositions)
		}
	}
	return out
}

// localRope returns the Local blocks' own rotary, or nil (also when no block is Local).
func (c Config) localRope() *Rope {
	if c.Local == nil || !slices.Contains(c.Local.Layers, true) {
		return nil
	}
	return c.Local.Rope
}

// CanCache reports whether a KV cache can serve the model (Model.NewCache): its attention is
// causal (not Bidirectional), dense and softmax (no Patterns, no Normalizer but softmax), with
// heads of one size and one score scale. Generation runs the other causal models by a Forward
// of the whole sequence at each step.
func (c Config) CanCache() bool {
	return !c.Bidirectional && !c.sparseAttention() && c.Attention().CheckCache() == nil
}

// sparseAttention reports whether the blocks' attention is sparse: Patterns keep only some
// pairs, or a Normalizer other than softmax replaces the softmax.
func (c Config) sparseAttention() bool {
	ps, n, err := c.sparsity()
	return err == nil && (len(ps) > 0 || n != nil)
}

// sparsity parses Patterns and Normalizer.
func (c Config) sparsity() ([]mha.Pattern, *mha.Normalizer, error) {
	var ps []mha.Pattern
	for _, s := range c.Patterns {
		p, err := mha.ParsePattern(s)
		if err != nil {
			return nil, nil, err
		}
		ps = append(ps, p)
	}
	if c.Normalizer == "" {
		return ps, nil, nil
	}
	n, err := mha.ParseNormalizer(c.Normalizer)
	if err != nil {
		return nil, nil, err
	}
	if n.Kind == mha.Softmax {
		n = nil
	}
	return ps, n, nil
}

// attnOptions returns the options of every block's attention for a forward of opt: causal
// unless Bidirectional, and the config's sparsity unless opt replaces it. The sliding window
// is each block's (window).
func (c Config) attnOptions(opt *RunOptions, workers int) mha.Options {
	mo := mha.Options{Causal: !c.Bidirectional, NeedWeights: opt.KeepWeights, PerHeadWeights: true, Training: opt.Training, Workers: workers,
		Softcap: c.AttnSoftcap}
	if s := opt.Sparsity; s != nil {
		mo.Patterns, mo.Block, mo.Normalizer = s.Patterns, s.Block, s.Normalizer
		return mo
	}
	mo.Patterns, mo.Normalizer, _ = c.sparsity() // Validate checked them
	if c.Block != nil {
		mo.Block = [2]int{c.Block[0], c.Block[1]}
	}
	return mo
}

// VisibleKeys returns, per head, how many keys each of t queries may see in the attention of
// the blocks that are not Local ([Heads][t]): those the causal mask (unless Bidirectional),
// the sliding Window and the Patterns leave it. LayerVisibleKeys gives a given block's. It
// returns an error when the config is invalid (Validate), t is not in 1 … SeqLen, or the
// config's patterns do not lay out for t tokens.
func (c Config) VisibleKeys(t int) ([][]int, error) { return c.visibleKeys(-1, t) }

// LayerVisibleKeys is VisibleKeys for block layer, a Local one's window included; it also
// returns an error when layer is not in 0 … Layers−1.
func (c Config) LayerVisibleKeys(layer, t int) ([][]int, error) {
	if layer < 0 || layer >= c.Layers {
		return nil, fmt.Errorf("nn: visible keys of layer %d, want 0 … %d", layer, c.Layers-1)
	}
	return c.visibleKeys(layer, t)
}

// visibleKeys is LayerVisibleKeys without the check of the layer (−1: a block that is not
// Local).
func (c Config) visibleKeys(layer, t int) ([][]int, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if t < 1 || t > c.SeqLen {
		return nil, fmt.Errorf("nn: visible keys of %d tokens, want 1 … %d (the config's seq_len)", t, c.SeqLen)
	}
	mo := c.attnOptions(&RunOptions{}, 1)
	var layouts []attend.Sparse
	if len(mo.Patterns) > 0 {
		var err error
		if layouts, err = mha.SparseLayouts(mo.Patterns, mo.Block, c.Heads, t, t); err != nil {
			return nil, fmt.Errorf("nn: %w", err)
		}
	}
	out := make([][]int, c.Heads)
	for h := range out {
		out[h] = make([]int, t)
		for i := range t {
			lo, hi := 0, t
			if mo.Causal {
				hi = i + 1
			}
			if w := c.window(layer); w != nil {
				lo = max(0, i-w.Left)
			}
			if layouts == nil {
				out[h][i] = hi - lo
				continue
			}
			s := &layouts[min(h, len(layouts)-1)]
			for j := lo; j < hi; j++ {
				if s.Keep(i, j) {
					out[h][i]++
				}
			}
		}
	}
	return out, nil
}

// ForwardBytes estimates the memory, in bytes, of the buffers that a Forward of b sequences of
// length t and the Loss after it keep: per block, the attention's projections Q, K, V and Kᵀ, its
// head outputs and output, the normalisation outputs and residual sums, and the feed-forward
// network's hidden activations [B, T, FFN], three times (fc1, the activation and its gate Φ or
// σ) or, gated (SwiGLU, GeGLU), five (gate_proj, up_proj, the gate, the activation and the
// product); with keepWeights, the
// attention weights [B, H, T, T] of every block twice (before and after dropout); the
// embeddings (twice with EmbNorm); and the logits [B, T, Vocab] and their gradient. It is a
// float64 so that no size overflows it; c must be valid.
func (c Config) ForwardBytes(b, t int, keepWeights bool) float64 {
	c = c.withDefaults()
	n, d := float64(b)*float64(t), float64(c.DModel)
	qd := float64(c.Attention().InnerDim())
	perBlock := 3*n*d + 5*n*qd // LN1(x), output, x + MHA; Q, K, V, Kᵀ, heads (H·d wide)
	if !c.AttnOnly {
		hidden := 3.0 // fc1, GELU, Φ
		if c.gated() {
			hidden = 5
		}
		perBlock += 3*n*d + hidden*n*float64(c.FFN) // LN2(x), fc2, x + FFN; the hidden activations
		if c.SharedNorm {
			perBlock -= n * d // no LN2(x)
		}
	}
	if c.SandwichNorm {
		perBlock += 2 * n * d // LN1'(MHA(·)), LN2'(FFN(·))
	}
	if keepWeights {
		perBlock += 2 * float64(b) * float64(c.Heads) * float64(t) * float64(t)
	}
	emb := 2 * n * d // embeddings, final LN
	if c.EmbNorm {
		emb += n * d
	}
	floats := emb + float64(c.Layers)*perBlock + 2*n*float64(c.Vocab) // blocks; logits, dlogits
	return 4 * floats
}

// normEps returns the eps of c's normalisation layers.
func (c Config) normEps() float64 {
	if c.NormEps == 0 {
		return DefaultNormEps
	}
	return c.NormEps
}

// withDefaults returns c with FFN set to 4·DModel when it is 0 and the blocks have a
// feed-forward network.
func (c Config) withDefaults() Config {
	if !c.AttnOnly && c.FFN == 0 {
		c.FFN = 4 * c.DModel
	}
	return c
}

// ParseConfig decodes a Config from JSON, as stored in checkpoints, and validates it. It returns
// an error when data is not one JSON object of Config's fields (an unknown field, a wrong type, a
// number out of range, trailing data) or when the Config is invalid (wrapping ErrConfig).
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("nn: config is not a JSON object of Config fields: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, errors.New("nn: config has data after its JSON object")
	}
	// An empty list means what an absent one does: one Config for both, as they are written.
	c.HeadDims, c.HeadScales = nilIfEmpty(c.HeadDims), nilIfEmpty(c.HeadScales)
	c.Patterns, c.Block = nilIfEmpty(c.Patterns), nilIfEmpty(c.Block)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// nilIfEmpty returns s, or nil when s is empty.
func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
