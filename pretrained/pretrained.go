// Package pretrained opens Hugging Face model folders as nn models, offline: config.json and the
// weights in model.safetensors (or model.safetensors.index.json and its shards), F32, F16 or BF16.
// It maps a folder onto an nn.Config and the folder's tensors onto the model's parameters, and
// does nothing else: the toy models and the pretrained ones run through the same nn forward,
// backward and probes.
//
// The architectures, each exact against Hugging Face's modeling code:
//
//	GPT2LMHeadModel, GPT2Model            pre-norm, learned positions, gelu_new, tied head;
//	                                      Conv1D weights [in, out] are transposed at load time
//	BertModel, BertForMaskedLM,           post-norm LayerNorm(X + MultiHead(X)), token types,
//	RobertaModel, RobertaForMaskedLM,     bidirectional attention, the masked-LM head;
//	XLMRoberta…, DistilBertModel,         RoBERTa's positions after the padding token's;
//	DistilBertForMaskedLM                 DistilBERT's names, no token types
//	GPTNeoXForCausalLM, GPTNeoXModel      Pythia's: attention and MLP in parallel, partial
//	                                      rotary, query_key_value per head, LayerNorm
//	GPTBigCodeForCausalLM,                StarCoder's and SantaCoder's: GPT-2's blocks with
//	GPTBigCodeModel                       multi-query attention, Linear weights
//	GPTJForCausalLM, GPTJModel            GPT-J's: attention and MLP in parallel from one
//	                                      LayerNorm, interleaved rotary on rotary_dim features
//	FalconForCausalLM, FalconModel        Falcon's: multi-query or grouped K/V heads in one
//	                                      query_key_value, parallel attention and MLP from
//	                                      one LayerNorm or two (new_decoder_architecture)
//	PhiForCausalLM, PhiModel              Phi-2's: attention and MLP in parallel from one
//	                                      LayerNorm, partial rotary, biases, the head's too
//	StableLmForCausalLM, StableLmModel    LayerNorm, SwiGLU, partial rotary, q/k/v biases,
//	                                      parallel from one LayerNorm with use_parallel_residual
//	Starcoder2ForCausalLM,                LayerNorm, c_fc/c_proj around GELU's tanh form,
//	Starcoder2Model                       biases (use_bias), grouped K/V heads, sliding window
//	LlamaForCausalLM, MistralForCausalLM, RMSNorm, SwiGLU, rotary (rotate-half, rope_theta,
//	Qwen2ForCausalLM, Qwen3ForCausalLM    Llama 3's, linear, LongRoPE or YaRN rope_scaling),
//	GemmaForCausalLM, Gemma2ForCausalLM,  grouped K/V heads, Mistral's and Phi-3's sliding
//	Gemma3ForCausalLM, Phi3ForCausalLM,   window, Qwen2's q/k/v biases, Qwen3's q_norm and
//	SmolLM3ForCausalLM,                   k_norm, Gemma's GeGLU, √d-scaled embeddings and norm
//	MixtralForCausalLM,                   weights 1 + w (held so), Gemma 2's and 3's sandwich
//	Qwen2MoeForCausalLM,                  norms, sliding layers between global ones and
//	Qwen3MoeForCausalLM,                  query_pre_attn_scalar, Gemma 2's soft-capped scores
//	Olmo2ForCausalLM, Olmo3ForCausalLM,   and logits, Gemma 3's q_norm and k_norm and local
//	OlmoeForCausalLM                      rotary, Phi-3's fused qkv_proj and gate_up_proj and
//	(and their *Model, Gemma3TextModel;   partial rotary, SmolLM3's NoPE layers, OLMo 2's
//	the text model of                     blocks normalising only their outputs, OLMo 3's
//	Gemma3ForConditionalGeneration)       unscaled sliding layers, OLMo 2's and 3's and
//	                                      OLMoE's q_norm and k_norm across the heads, the
//	                                      mixtures of experts of Mixtral, Qwen2-MoE (with its
//	                                      gated shared expert), Qwen3-MoE and OLMoE; head_dim
//	                                      other than hidden_size / num_attention_heads
//
// Tensor names are accepted with or without the base model's prefix (transformer., bert.,
// model.; language_model.model. or model.language_model. in a multimodal Gemma 3, whose vision
// tower and projector are not read); buffers some checkpoints carry (GPT-2's attn.bias and
// attn.masked_bias, rotary inv_freq, position_ids) and heads the model does not run (BERT's
// pooler and next-sentence head) are skipped and listed in Model.Unused. A tied head may be
// stored or left out.
package pretrained

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/tokenizer"
)

// ErrUnsupported is wrapped by the errors about a folder mha cannot run: an architecture, or an
// option of one, that it does not implement.
var ErrUnsupported = errors.New("pretrained: unsupported model")

// Family is the layout an architecture belongs to.
type Family string

// The families.
const (
	GPT2       Family = "gpt2"
	BERT       Family = "bert"
	Llama      Family = "llama"
	GPTNeoX    Family = "gpt_neox"
	Phi        Family = "phi"
	StableLM   Family = "stablelm"
	DistilBERT Family = "distilbert"
	GPTJ       Family = "gptj"
	Starcoder2 Family = "starcoder2"
	Falcon     Family = "falcon"
	GPTBigCode Family = "gpt_bigcode"
)

// Model is a Hugging Face folder opened as an nn model.
type Model struct {
	// NN is the model, with the folder's weights.
	NN *nn.Model
	// Architecture is the folder's architecture (config.json's architectures[0], or its
	// model_type when it has none) and Family its layout.
	Architecture string
	Family       Family
	// LMHead reports whether the model has its language-model head (…ForCausalLM, GPT2LMHeadModel,
	// BertForMaskedLM): without it (GPT2Model, BertModel, LlamaModel, …) the nn model's head is
	// the tied embedding, and only its hidden states (nn.Model.Hidden) mean something.
	LMHead bool
	// EOS are the ids that end a generated sequence (config.json's eos_token_id).
	EOS []int
	// Tokenizer is the folder's tokenizer.json (with tokenizer_config.json), or nil when the
	// folder has none.
	Tokenizer *tokenizer.Tokenizer
	// Unused lists the folder's tensors the model does not read: buffers, a stored copy of a
	// tied head, and heads it does not run. Any other tensor the model does not read is an
	// error of Open.
	Unused []string
}

// hfConfig holds the fields of config.json the families read, under Hugging Face's names.
// Pointers tell a field left out from a zero.
type hfConfig struct {
	Architectures []string        `json:"architectures"`
	ModelType     string          `json:"model_type"`
	VocabSize     int             `json:"vocab_size"`
	TieEmbeddings *bool           `json:"tie_word_embeddings"`
	EOSTokenID    json.RawMessage `json:"eos_token_id"` // a token id, a list of them, or null

	// GPT-2
	NEmbd                   int             `json:"n_embd"`
	NHead                   int             `json:"n_head"`
	NLayer                  int             `json:"n_layer"`
	NPositions              int             `json:"n_positions"`
	NInner                  *int            `json:"n_inner"`
	ActivationFunction      string          `json:"activation_function"`
	LayerNormEpsilon        *float64        `json:"layer_norm_epsilon"`
	ScaleAttnWeights        *bool           `json:"scale_attn_weights"`
	ScaleAttnByInverseLayer bool            `json:"scale_attn_by_inverse_layer_idx"`
	ReorderAndUpcastAttn    bool            `json:"reorder_and_upcast_attn"`
	AddCrossAttention       bool            `json:"add_cross_attention"`
	PositionEmbeddingType   string          `json:"position_embedding_type"`
	IsDecoder               bool            `json:"is_decoder"`
	HiddenSize              int             `json:"hidden_size"`
	NumAttentionHeads       int             `json:"num_attention_heads"`
	NumHiddenLayers         int             `json:"num_hidden_layers"`
	IntermediateSize        int             `json:"intermediate_size"`
	MaxPositionEmbeddings   int             `json:"max_position_embeddings"`
	TypeVocabSize           int             `json:"type_vocab_size"`
	LayerNormEps            *float64        `json:"layer_norm_eps"`
	HiddenAct               string          `json:"hidden_act"`
	HiddenActivation        *string         `json:"hidden_activation"` // Gemma's, which its MLP reads instead of hidden_act
	NumKeyValueHeads        *int            `json:"num_key_value_heads"`
	RMSNormEps              *float64        `json:"rms_norm_eps"`
	RopeTheta               *float64        `json:"rope_theta"`
	RopeScaling             json.RawMessage `json:"rope_scaling"`
	RopeParameters          json.RawMessage `json:"rope_parameters"` // transformers v5's rope_theta and rope_scaling in one
	AttentionBias           *bool           `json:"attention_bias"`
	MLPBias                 bool            `json:"mlp_bias"`
	HeadDim                 *int            `json:"head_dim"`
	SlidingWindow           json.RawMessage `json:"sliding_window"` // a number, null, or left out (Mistral's 4096)
	UseSlidingWindow        bool            `json:"use_sliding_window"`
	PartialRotaryFactor     *float64        `json:"partial_rotary_factor"`
	// OriginalMaxPositionEmbeddings is Phi-3's pre-training length, which its LongRoPE reads.
	OriginalMaxPositionEmbeddings *int `json:"original_max_position_embeddings"`

	// Phi, StableLM, StarCoder2
	QKLayerNorm bool     `json:"qk_layernorm"`
	UseQKVBias  *bool    `json:"use_qkv_bias"`
	UseBias     *bool    `json:"use_bias"`
	NormEpsilon *float64 `json:"norm_epsilon"`

	// DistilBERT
	Dim        int    `json:"dim"`
	NHeads     int    `json:"n_heads"`
	NLayers    int    `json:"n_layers"`
	HiddenDim  int    `json:"hidden_dim"`
	Activation string `json:"activation"`

	// RoBERTa: positions start after the padding token's embedding (read only there: other
	// families' configs may spell it otherwise)
	PadTokenID json.RawMessage `json:"pad_token_id"`

	// GPT-J
	RotaryDim *int `json:"rotary_dim"`

	// Falcon
	NumKVHeads             *int  `json:"num_kv_heads"`
	Alibi                  bool  `json:"alibi"`
	Bias                   *bool `json:"bias"`
	NewDecoderArchitecture bool  `json:"new_decoder_architecture"`
	MultiQuery             *bool `json:"multi_query"`
	ParallelAttn           *bool `json:"parallel_attn"`
	NumLNInParallelAttn    *int  `json:"num_ln_in_parallel_attn"`
	FFNHiddenSize          *int  `json:"ffn_hidden_size"`

	// GPT-NeoX
	RotaryPct           *float64 `json:"rotary_pct"`
	RotaryEmbBase       *float64 `json:"rotary_emb_base"`
	UseParallelResidual *bool    `json:"use_parallel_residual"`

	// Mixtral, Qwen3-MoE: the mixture of experts
	NumLocalExperts     *int  `json:"num_local_experts"` // Mixtral's
	NumExperts          *int  `json:"num_experts"`       // Qwen3-MoE's
	NumExpertsPerTok    *int  `json:"num_experts_per_tok"`
	MoEIntermediateSize *int  `json:"moe_intermediate_size"`
	NormTopKProb        *bool `json:"norm_topk_prob"`
	DecoderSparseStep   *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers       []int `json:"mlp_only_layers"`
	// Qwen2-MoE
	SharedExpertIntermediateSize *int  `json:"shared_expert_intermediate_size"`
	QKVBias                      *bool `json:"qkv_bias"`
	// OLMo, OLMoE: the projections clamped to ±clip_qkv (refused)
	ClipQKV *float64 `json:"clip_qkv"`

	// SmolLM3: 1 where a layer rotates, 0 for NoPE; else every interval-th layer is NoPE
	NoRopeLayers        []int `json:"no_rope_layers"`
	NoRopeLayerInterval *int  `json:"no_rope_layer_interval"`

	// Gemma 3
	LayerTypes                []string        `json:"layer_types"` // "sliding_attention" or "full_attention", per layer
	SlidingWindowPattern      *int            `json:"sliding_window_pattern"`
	RopeLocalBaseFreq         *float64        `json:"rope_local_base_freq"`
	QueryPreAttnScalar        *float64        `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping      json.RawMessage `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping     json.RawMessage `json:"final_logit_softcapping"`
	UseBidirectionalAttention bool            `json:"use_bidirectional_attention"`
	TextConfig                json.RawMessage `json:"text_config"` // Gemma3ForConditionalGeneration's text model

	multimodal bool // the config was a multimodal one's text_config (textModel)
	phi3       bool // the config is Phi-3's, whose rope_scaling has its own defaults and names (ropeFrom)
}

// textModel replaces hc, a Gemma3ForConditionalGeneration config (model_type gemma3), by its
// text_config, which mha runs as a Gemma 3 text model: the architectures stay the multimodal
// one's, and the text config takes eos_token_id and tie_word_embeddings from the outer one
// when it has none.
func (hc *hfConfig) textModel() error {
	if isNull(hc.TextConfig) {
		return errors.New("pretrained: a Gemma 3 multimodal config.json without text_config")
	}
	var tc hfConfig
	if err := json.Unmarshal(hc.TextConfig, &tc); err != nil {
		return fmt.Errorf("pretrained: text_config is not the JSON object expected: %w", err)
	}
	if tc.ModelType != "" && tc.ModelType != "gemma3_text" {
		return fmt.Errorf("%w: text_config of model_type %q in a Gemma 3 multimodal config, want gemma3_text", ErrUnsupported, tc.ModelType)
	}
	tc.ModelType, tc.Architectures, tc.multimodal = "gemma3_text", hc.Architectures, true
	if isNull(tc.EOSTokenID) {
		tc.EOSTokenID = hc.EOSTokenID
	}
	if tc.TieEmbeddings == nil {
		tc.TieEmbeddings = hc.TieEmbeddings
	}
	*hc = tc
	return nil
}

// architectures maps each architecture mha runs to its family.
var architectures = map[string]Family{
	"GPT2LMHeadModel": GPT2, "GPT2Model": GPT2,
	"BertModel": BERT, "BertForMaskedLM": BERT,
	"DistilBertModel": DistilBERT, "DistilBertForMaskedLM": DistilBERT,
	"RobertaModel": BERT, "RobertaForMaskedLM": BERT, "XLMRobertaModel": BERT, "XLMRobertaForMaskedLM": BERT,
	"GPTNeoXForCausalLM": GPTNeoX, "GPTNeoXModel": GPTNeoX,
	"GPTJForCausalLM": GPTJ, "GPTJModel": GPTJ,
	"GPTBigCodeForCausalLM": GPTBigCode, "GPTBigCodeModel": GPTBigCode,
	"FalconForCausalLM": Falcon, "FalconModel": Falcon,
	"PhiForCausalLM": Phi, "PhiModel": Phi,
	"StableLmForCausalLM": StableLM, "StableLmModel": StableLM,
	"Starcoder2ForCausalLM": Starcoder2, "Starcoder2Model": Starcoder2,
	"LlamaForCausalLM": Llama, "LlamaModel": Llama,
	"MistralForCausalLM": Llama, "MistralModel": Llama,
	"Qwen2ForCausalLM": Llama, "Qwen2Model": Llama,
	"Qwen3ForCausalLM": Llama, "Qwen3Model": Llama,
	"GemmaForCausalLM": Llama, "GemmaModel": Llama,
	"Gemma2ForCausalLM": Llama, "Gemma2Model": Llama,
	"Gemma3ForCausalLM": Llama, "Gemma3TextModel": Llama, "Gemma3ForConditionalGeneration": Llama,
	"Phi3ForCausalLM": Llama, "Phi3Model": Llama,
	"SmolLM3ForCausalLM": Llama, "SmolLM3Model": Llama,
	"MixtralForCausalLM": Llama, "MixtralModel": Llama,
	"Qwen3MoeForCausalLM": Llama, "Qwen3MoeModel": Llama,
	"Qwen2MoeForCausalLM": Llama, "Qwen2MoeModel": Llama,
	"Olmo2ForCausalLM": Llama, "Olmo2Model": Llama,
	"Olmo3ForCausalLM": Llama, "Olmo3Model": Llama,
	"OlmoeForCausalLM": Llama, "OlmoeModel": Llama,
}

// decoderLayouts map the decoder families' folders (every family but the encoders BERT and
// DistilBERT) to their nn models.
var decoderLayouts = map[Family]func(*hfConfig, *weights) (*layout, error){
	GPT2: gpt2Layout, GPTBigCode: gptBigCodeLayout, GPTJ: gptjLayout, GPTNeoX: neoxLayout, Falcon: falconLayout, Phi: phiLayout, StableLM: stableLMLayout,
	Starcoder2: starcoder2Layout, Llama: llamaLayout,
}

// modelTypes maps config.json's model_type to the family, for folders without architectures.
var modelTypes = map[string]Family{"gpt2": GPT2, "bert": BERT, "roberta": BERT, "xlm-roberta": BERT, "distilbert": DistilBERT, "gpt_neox": GPTNeoX, "gptj": GPTJ, "gpt_bigcode": GPTBigCode, "falcon": Falcon, "phi": Phi, "stablelm": StableLM, "starcoder2": Starcoder2, "llama": Llama, "mistral": Llama, "qwen2": Llama, "qwen3": Llama, "gemma": Llama, "gemma2": Llama, "gemma3_text": Llama, "gemma3": Llama, "phi3": Llama, "smollm3": Llama, "mixtral": Llama, "qwen3_moe": Llama, "qwen2_moe": Llama, "olmo2": Llama, "olmo3": Llama, "olmoe": Llama}

// OpenPath opens path as Open does when it is a folder; a file is read as a checkpoint that mha
// train wrote (nn.Load), which has no tokenizer, and gets Architecture "mha".
func OpenPath(path string) (*Model, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("pretrained: %w", err)
	}
	if info.IsDir() {
		return Open(path)
	}
	nm, _, _, err := nn.Load(path)
	if err != nil {
		return nil, err
	}
	return &Model{NN: nm, Architecture: "mha", LMHead: true}, nil
}

// Open reads the Hugging Face model folder dir: config.json, then the weights, then
// tokenizer.json when the folder has one. It returns an
// error when a file is missing or malformed, the architecture or one of its options is not
// supported (wrapping ErrUnsupported), or a tensor the model needs is missing or has another
// shape than the config gives (the error names the tensor, its file, and both shapes). It never
// touches the network.
func Open(dir string) (*Model, error) { return Options{}.Open(dir) }

// Options are choices of how Open builds the model; the zero value is Open's.
type Options struct {
	// Float32 converts half-precision weights to float32, as a model that trains needs (an
	// optimizer refuses weights held in half precision), at twice the memory.
	Float32 bool
}

// Open is the package's Open with the options: it reads the Hugging Face model folder dir.
//
// The safetensors files are memory-mapped (safetensors.Open) and each tensor is copied out of
// the mapping into the model, its pages released behind it, so that the file and the model are
// not both resident. When every tensor the model reads is BF16, or every one F16, and
// o.Float32 is false, the model keeps its weight matrices and token embedding as they are
// stored (nn.NewModelHalf), at half the memory of float32; otherwise every tensor is converted
// to float32, and the model holds the converted tensors themselves (nn.NewModelFloat32), not
// copies of them.
func (o Options) Open(dir string) (*Model, error) {
	var hc hfConfig
	if err := readJSON(dir, "config.json", &hc); err != nil {
		return nil, err
	}
	if hc.ModelType == "gemma3" || len(hc.Architectures) > 0 && hc.Architectures[0] == "Gemma3ForConditionalGeneration" {
		if err := hc.textModel(); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, filepath.Join(dir, "config.json"))
		}
	}
	for _, eps := range []struct {
		name string
		v    *float64
	}{{"layer_norm_epsilon", hc.LayerNormEpsilon}, {"layer_norm_eps", hc.LayerNormEps}, {"rms_norm_eps", hc.RMSNormEps}} {
		if eps.v != nil && !(*eps.v > 0) { // nn would read an eps of 0 as its default
			return nil, fmt.Errorf("pretrained: %s's %s is %v, want > 0", filepath.Join(dir, "config.json"), eps.name, *eps.v)
		}
	}
	m := &Model{}
	switch {
	case len(hc.Architectures) > 0:
		m.Architecture = hc.Architectures[0]
		fam, ok := architectures[m.Architecture]
		if !ok {
			return nil, fmt.Errorf("%w: architecture %q in %s; mha runs %s", ErrUnsupported, m.Architecture, filepath.Join(dir, "config.json"), strings.Join(slices.Sorted(maps.Keys(architectures)), ", "))
		}
		m.Family = fam
	case hc.ModelType != "":
		m.Architecture = hc.ModelType
		fam, ok := modelTypes[hc.ModelType]
		if !ok {
			return nil, fmt.Errorf("%w: model_type %q in %s; mha runs %s", ErrUnsupported, hc.ModelType, filepath.Join(dir, "config.json"), strings.Join(slices.Sorted(maps.Keys(modelTypes)), ", "))
		}
		m.Family = fam
	default:
		return nil, fmt.Errorf("pretrained: %s names no architectures and no model_type", filepath.Join(dir, "config.json"))
	}
	w, err := openWeights(dir)
	if err != nil {
		return nil, err
	}
	defer w.close()
	bare := strings.HasSuffix(m.Architecture, "Model") && !strings.HasSuffix(m.Architecture, "LMHeadModel")
	var lay *layout
	switch m.Family {
	case BERT:
		lay, err = bertLayout(&hc, w)
		m.LMHead = err == nil && lay.cfg.HeadTransform
	case DistilBERT:
		lay, err = distilBERTLayout(&hc, w)
		m.LMHead = err == nil && lay.cfg.HeadTransform
	default:
		if bare {
			hc.TieEmbeddings = new(true) // no head (lm_head, embed_out): the nn model's head is the embedding
		}
		lay, err = decoderLayouts[m.Family](&hc, w)
		m.LMHead = !bare
	}
	if err == nil {
		m.EOS, err = eosIDs(hc.EOSTokenID, lay.cfg.Vocab)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, filepath.Join(dir, "config.json"))
	}
	used, err := lay.build(m, w, o.Float32)
	if err != nil {
		return nil, fmt.Errorf("pretrained: %s: %w", dir, err)
	}
	for _, b := range lay.params {
		if b.plusOne { // Gemma's norm gains: 1 + w, rounded in float32 as its RMSNorm computes them
			gains := m.NN.Param(b.name).Value.Data
			for i := range gains {
				gains[i]++
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if m.Tokenizer, err = tokenizer.LoadDir(dir); err != nil {
			return nil, err
		}
	}
	for _, n := range slices.Sorted(maps.Keys(w.where)) {
		if used[n] {
			continue
		}
		if !lay.skip(lay.base(n)) {
			return nil, fmt.Errorf("pretrained: tensor %s in %s is not part of a %s model as mha maps it", n, w.where[n], m.Architecture)
		}
		m.Unused = append(m.Unused, n)
	}
	return m, nil
}

// layout is a family's mapping of a folder onto nn: the config, and each parameter's sources.
type layout struct {
	cfg      nn.Config
	prefixes []string // the base model's name prefixes, tried in order; "" is no prefix
	params   []binding
	skip     func(name string) bool // buffers and heads the model does not run
}

// binding builds one nn parameter from the folder's tensors: the parts, each [rows, cols] as
// stored (with transpose, [cols, rows] is stored and transposed), concatenated by rows.
type binding struct {
	name      string
	parts     []part
	transpose bool
	plusOne   bool // the model holds 1 + the stored values (Gemma's norm weights), in float32
}

// part is one source tensor: its name (without the base prefix, unless head), alternative
// names (BERT's gamma and beta), and its shape as stored. With zero, a missing tensor is zeros.
// With rows, the part is only rows rows[0] … rows[1] − 1 of it (Phi-3's gate_up_proj holds
// gate_proj's rows, then up_proj's).
type part struct {
	names []string
	shape []int
	head  bool // outside the base model: lm_head., cls.
	zero  bool
	rows  [2]int // all of the tensor when rows[1] is 0
}

// size returns how many values p contributes to its parameter.
func (p part) size() int {
	n, _ := tensor.NumElements(p.shape)
	if p.rows[1] > 0 {
		n = n / p.shape[0] * (p.rows[1] - p.rows[0])
	}
	return n
}

func src(name string, shape ...int) part { return part{names: []string{name}, shape: shape} }

// build reads the tensors of every binding from w and makes m.NN: in the one half-precision
// format they share (unless toFloat32), or in float32. It returns the tensor names read.
func (l *layout) build(m *Model, w *weights, toFloat32 bool) (map[string]bool, error) {
	if err := l.cfg.Validate(); err != nil { // before any weight is read
		return nil, fmt.Errorf("maps to an invalid model: %w", err)
	}
	format := l.halfFormat(w)
	if format == 0 || toFloat32 {
		sd, used, err := load(l, w, (*safetensors.File).ReadFloat32Rows)
		if err != nil {
			return nil, err
		}
		tensors := make(map[string]*tensor.Tensor, len(sd))
		for name, v := range sd {
			tensors[name] = &tensor.Tensor{Shape: v.shape, Data: v.data}
		}
		if m.NN, err = nn.NewModelFloat32(l.cfg, tensors); err != nil {
			return nil, fmt.Errorf("maps to an invalid model: %w", err)
		}
		return used, nil
	}
	sd, used, err := load(l, w, func(f *safetensors.File, name string, r0, r1 int, dst []uint16) error {
		_, err := f.ReadHalfRows(name, r0, r1, dst) // halfFormat checked that every tensor is in format
		return err
	})
	if err != nil {
		return nil, err
	}
	halves := make(map[string]*tensor.Half, len(sd))
	for name, v := range sd {
		halves[name] = &tensor.Half{Shape: v.shape, Data: v.data, Format: format}
	}
	if m.NN, err = nn.NewModelHalf(l.cfg, halves); err != nil {
		return nil, fmt.Errorf("maps to an invalid model: %w", err)
	}
	return used, nil
}

// halfFormat returns the half-precision format of every tensor the bindings read from w, or 0
// when they are not all BF16 or all F16.
func (l *layout) halfFormat(w *weights) tensor.HalfFormat {
	var dtype safetensors.DType
	for _, b := range l.params {
		for _, p := range b.parts {
			_, t, _, found := l.find(w, p)
			if !found {
				continue
			}
			if dtype == "" {
				dtype = t.DType
			}
			if t.DType != dtype {
				return 0
			}
		}
	}
	switch dtype {
	case safetensors.BF16:
		return tensor.BFloat16
	case safetensors.F16:
		return tensor.Float16
	}
	return 0
}

// values are one parameter's values and shape.
type values[T float32 | uint16] struct {
	shape []int
	data  []T
}

// load resolves every binding of l against w, reading each parameter's tensors with read into
// one slice allocated for the parameter (so a parameter made of parts is never held twice) and
// releasing their pages from w's mapping, and returns the parameters by name and the tensor
// names read.
func load[T float32 | uint16](l *layout, w *weights, read func(f *safetensors.File, name string, r0, r1 int, dst []T) error) (map[string]values[T], map[string]bool, error) {
	sd := make(map[string]values[T], len(l.params))
	used := map[string]bool{}
	var scratch []T // transpose's buffer, kept for the next transposed parameter
	for _, b := range l.params {
		rows, cols := 0, 0
		for _, p := range b.parts {
			r := p.shape[0]
			if p.rows[1] > 0 {
				r = p.rows[1] - p.rows[0]
			}
			rows += r
			if len(p.shape) == 2 {
				cols = p.shape[1]
			}
		}
		data := make([]T, rows*max(cols, 1))
		at := 0 // where the next part goes in data
		for _, p := range b.parts {
			name, t, file, found := l.find(w, p)
			want := p.shape
			size := p.size()
			dst := data[at : at+size]
			at += size
			if !found {
				if !p.zero {
					return nil, nil, fmt.Errorf("the folder has no tensor %s %v (for %s)", l.fullName(p), want, b.name)
				}
				continue // data is zero already
			}
			used[name] = true
			if !slices.Equal(t.Shape, want) {
				return nil, nil, fmt.Errorf("%s in %s is %v, want %v", name, file, t.Shape, want)
			}
			if t.DType != safetensors.F32 && t.DType != safetensors.F16 && t.DType != safetensors.BF16 {
				return nil, nil, fmt.Errorf("%s in %s is %s, want F32, F16 or BF16", name, file, t.DType)
			}
			f := w.files[file]
			r0, r1 := p.rows[0], p.rows[1]
			if r1 == 0 {
				r1 = -1 // every row
			}
			if err := read(f, name, r0, r1, dst); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", file, err)
			}
			if err := f.Release(name); err != nil {
				return nil, nil, err
			}
		}
		shape := []int{rows}
		if cols > 0 {
			shape = append(shape, cols)
		}
		if b.transpose {
			scratch = transpose(data, rows, cols, scratch)
			shape = []int{cols, rows}
		}
		sd[b.name] = values[T]{shape: shape, data: data}
	}
	return sd, used, nil
}

// find looks p up under its names, with each prefix.
func (l *layout) find(w *weights, p part) (name string, t safetensors.Tensor, file string, ok bool) {
	prefixes := l.prefixes
	if p.head {
		prefixes = []string{""}
	}
	for _, n := range p.names {
		for _, pre := range prefixes {
			if t, file, ok := w.raw(pre + n); ok {
				return pre + n, t, file, true
			}
		}
	}
	return "", safetensors.Tensor{}, "", false
}

// fullName is p's first name as the folder would hold it with the first prefix.
func (l *layout) fullName(p part) string {
	if p.head {
		return p.names[0]
	}
	return l.prefixes[0] + p.names[0]
}

// base strips the base model's prefix from name.
func (l *layout) base(name string) string {
	for _, pre := range l.prefixes {
		if pre != "" && strings.HasPrefix(name, pre) {
			return strings.TrimPrefix(name, pre)
		}
	}
	return name
}

// transpose transposes x [rows, cols] in place into [cols, rows], through buf, which it grows to
// len(x) and returns for the next call: one buffer for all of a folder's transposed weights, not
// a second copy of each left for the garbage collector.
func transpose[T any](x []T, rows, cols int, buf []T) []T {
	buf = slices.Grow(buf[:0], len(x))[:len(x)]
	const block = 64 // rows and columns of x a block moves, so that buf's lines are written whole
	for i0 := 0; i0 < rows; i0 += block {
		for j0 := 0; j0 < cols; j0 += block {
			for j := j0; j < min(j0+block, cols); j++ {
				for i := i0; i < min(i0+block, rows); i++ {
					buf[j*rows+i] = x[i*cols+j]
				}
			}
		}
	}
	copy(x, buf)
	return buf
}

// checkSizes reports an error naming the first size outside [1, its bound]: nn's bounds, so
// that a config cannot make Open plan more layers or larger tensors than nn builds.
func checkSizes(sizes map[string]int) error {
	for _, k := range slices.Sorted(maps.Keys(sizes)) {
		bound := nn.MaxDim
		switch k {
		case "vocab_size":
			bound = nn.MaxVocab
		case "n_positions", "max_position_embeddings":
			bound = nn.MaxSeqLen
		case "n_layer", "num_hidden_layers":
			bound = nn.MaxLayers
		}
		if v := sizes[k]; v <= 0 || v > bound {
			return fmt.Errorf("pretrained: config.json's %s is %d, want a value in [1, %d]", k, v, bound)
		}
	}
	return nil
}

// eosIDs returns config.json's eos_token_id, raw: a token id or a list of them, each in
// [0, vocab), or null or left out (none).
func eosIDs(raw json.RawMessage, vocab int) ([]int, error) {
	if isNull(raw) {
		return nil, nil
	}
	var ids []int
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		ids = []int{one}
	} else if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("pretrained: eos_token_id is %s, want a token id, a list of them, or null", raw)
	}
	for _, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("pretrained: eos_token_id %d is not a token of the %d in vocab_size", id, vocab)
		}
	}
	return ids, nil
}

// orDefault returns *p, or def when a config left the field out (p is nil).
func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
