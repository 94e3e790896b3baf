package pretrained

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
)

// Buffers and heads the families skip, named without the base model's prefix.
var (
	gpt2Skip = regexp.MustCompile(`^(h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight)$`)
	// cls.predictions.decoder.weight is skipped only when the head is tied (an untied one reads it).
	bertSkip = regexp.MustCompile(`^(embeddings\.position_ids|pooler\..*|cls\.seq_relationship\..*|cls\.predictions\.decoder\.(weight|bias))$`)
	// DistilBERT's: vocab_projector.weight is skipped only when the head is tied.
	distilSkip = regexp.MustCompile(`^(embeddings\.position_ids|vocab_projector\.weight)$`)
	// RoBERTa's: lm_head.decoder.weight is skipped only when the head is tied.
	robertaSkip = regexp.MustCompile(`^(embeddings\.position_ids|pooler\..*|lm_head\.decoder\.(weight|bias))$`)
	// lm_head.weight is skipped only when the head is tied (an untied head reads it).
	llamaSkip = regexp.MustCompile(`^(layers\.\d+\.self_attn\.rotary_emb\.inv_freq|lm_head\.weight)$`)
	// GPT-J's attention buffers (older checkpoints carry them), and the head when tied.
	gptjSkip = regexp.MustCompile(`^(h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight)$`)
	// GPT-NeoX's attention buffers (older checkpoints carry them), and the head when tied.
	neoxSkip = regexp.MustCompile(`^(layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)|embed_out\.weight)$`)
	// Gemma 3's vision tower and multimodal projector, beside its text model.
	visionSkip = regexp.MustCompile(`^(model\.)?(vision_tower|multi_modal_projector)\.`)
)

// gpt2Layout maps a GPT2LMHeadModel (or GPT2Model) folder: pre-norm blocks with learned
// positions, Conv1D weights stored [in, out] and transposed here, c_attn's columns [Q | K | V]
// becoming in_proj_weight's rows, and the head tied to wte.
func gpt2Layout(hc *hfConfig, w *weights) (*layout, error) {
	e, v, heads, layers, pos, ffn, err := hc.gpt2Sizes()
	if err != nil {
		return nil, err
	}
	act := hc.ActivationFunction
	if act == "" {
		act = "gelu_new"
	}
	switch {
	case act != nn.GELUNew && act != nn.GELU && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: GPT-2 activation_function %q (mha has gelu, gelu_new, gelu_pytorch_tanh)", ErrUnsupported, act)
	case hc.ScaleAttnByInverseLayer || hc.ReorderAndUpcastAttn || !orDefault(hc.ScaleAttnWeights, true):
		return nil, fmt.Errorf("%w: GPT-2 with scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn or without scale_attn_weights", ErrUnsupported)
	case hc.AddCrossAttention:
		return nil, fmt.Errorf("%w: GPT-2 with cross-attention", ErrUnsupported)
	}
	tied := orDefault(hc.TieEmbeddings, true)
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: pos, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.Learned, Activation: act, NormEps: orDefault(hc.LayerNormEpsilon, 1e-5), TieEmbeddings: tied, NoHeadBias: true},
		prefixes: []string{"transformer.", ""},
		skip: func(name string) bool {
			return gpt2Skip.MatchString(name) && (name != "lm_head.weight" || tied)
		},
	}
	add := func(name string, transpose bool, p part) {
		l.params = append(l.params, binding{name: name, parts: []part{p}, transpose: transpose})
	}
	add("tok_emb.weight", false, src("wte.weight", v, e))
	add("pos_emb.weight", false, src("wpe.weight", pos, e))
	for i := range layers {
		h, b := "h."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		add(b+"ln1.weight", false, src(h+"ln_1.weight", e))
		add(b+"ln1.bias", false, src(h+"ln_1.bias", e))
		add(b+"attn.in_proj_weight", true, src(h+"attn.c_attn.weight", e, 3*e))
		add(b+"attn.in_proj_bias", false, src(h+"attn.c_attn.bias", 3*e))
		add(b+"attn.out_proj.weight", true, src(h+"attn.c_proj.weight", e, e))
		add(b+"attn.out_proj.bias", false, src(h+"attn.c_proj.bias", e))
		add(b+"ln2.weight", false, src(h+"ln_2.weight", e))
		add(b+"ln2.bias", false, src(h+"ln_2.bias", e))
		add(b+"ffn.fc1.weight", true, src(h+"mlp.c_fc.weight", e, ffn))
		add(b+"ffn.fc1.bias", false, src(h+"mlp.c_fc.bias", ffn))
		add(b+"ffn.fc2.weight", true, src(h+"mlp.c_proj.weight", ffn, e))
		add(b+"ffn.fc2.bias", false, src(h+"mlp.c_proj.bias", e))
	}
	add("ln_f.weight", false, src("ln_f.weight", e))
	add("ln_f.bias", false, src("ln_f.bias", e))
	if !tied {
		add("head.weight", false, part{names: []string{"lm_head.weight"}, shape: []int{v, e}, head: true})
	}
	return l, nil
}

// gpt2Sizes reads the sizes GPT-2's config keys give (GPT-2's and GPT-J's), each checked: n_embd
// e, vocab_size v, n_head, n_layer, n_positions and the MLP's width n_inner (4·n_embd when null
// or left out).
func (hc *hfConfig) gpt2Sizes() (e, v, heads, layers, pos, ffn int, err error) {
	e, v, heads, layers, pos = hc.NEmbd, hc.VocabSize, hc.NHead, hc.NLayer, hc.NPositions
	ffn = orDefault(hc.NInner, 4*e)
	err = checkSizes(map[string]int{"n_embd": e, "vocab_size": v, "n_head": heads, "n_layer": layers, "n_positions": pos, "n_inner": ffn})
	return
}

// bertLayout maps a BertModel or BertForMaskedLM folder: post-norm blocks, token types, an
// embedding LayerNorm, bidirectional attention with query, key and value stacked into
// in_proj_weight, and, when the folder has it, the masked-LM head (transform, then the decoder,
// tied to the word embeddings unless tie_word_embeddings is false, plus its bias). Old
// checkpoints' LayerNorm gamma and beta are read as weight and bias. RoBERTa and XLM-RoBERTa
// (RobertaModel, RobertaForMaskedLM, XLMRoberta…) are the same model under roberta. and
// lm_head. names, whose position p is position embedding p + pad_token_id + 1 (Hugging Face's
// create_position_ids_from_input_ids for a sequence without padding tokens, which it leaves out
// of the count).
func bertLayout(hc *hfConfig, w *weights) (*layout, error) {
	e, v, heads, layers, ffn, pos := hc.HiddenSize, hc.VocabSize, hc.NumAttentionHeads, hc.NumHiddenLayers, hc.IntermediateSize, hc.MaxPositionEmbeddings
	types := hc.TypeVocabSize
	if err := checkSizes(map[string]int{"hidden_size": e, "vocab_size": v, "num_attention_heads": heads, "num_hidden_layers": layers,
		"intermediate_size": ffn, "max_position_embeddings": pos, "type_vocab_size": types}); err != nil {
		return nil, err
	}
	act := hc.HiddenAct
	if act == "" {
		act = nn.GELU
	}
	switch {
	case act != nn.GELU && act != nn.GELUNew && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: BERT hidden_act %q (mha has gelu, gelu_new, gelu_pytorch_tanh)", ErrUnsupported, act)
	case hc.PositionEmbeddingType != "" && hc.PositionEmbeddingType != "absolute":
		return nil, fmt.Errorf("%w: BERT position_embedding_type %q (mha has absolute)", ErrUnsupported, hc.PositionEmbeddingType)
	case hc.IsDecoder || hc.AddCrossAttention:
		return nil, fmt.Errorf("%w: BERT as a decoder or with cross-attention", ErrUnsupported)
	}
	// The masked-LM decoder is the word embeddings unless tie_word_embeddings is false.
	tied := orDefault(hc.TieEmbeddings, true)
	roberta := hc.ModelType == "roberta" || hc.ModelType == "xlm-roberta" ||
		hc.ModelType == "" && slices.ContainsFunc(hc.Architectures, func(a string) bool { return strings.Contains(a, "Roberta") })
	prefix, head, decoder, skip := "bert.", "cls.predictions.", "cls.predictions.decoder.weight", bertSkip
	headDense, headNorm, headBias := head+"transform.dense", head+"transform.LayerNorm", []string{head + "bias", head + "decoder.bias"}
	first := 0 // the position embedding of position 0
	if roberta {
		prefix, head, decoder, skip = "roberta.", "lm_head.", "lm_head.decoder.weight", robertaSkip
		headDense, headNorm, headBias = head+"dense", head+"layer_norm", []string{head + "bias", head + "decoder.bias"}
		pad := 1 // RobertaConfig's pad_token_id
		if !isNull(hc.PadTokenID) {
			if err := json.Unmarshal(hc.PadTokenID, &pad); err != nil {
				return nil, fmt.Errorf("pretrained: pad_token_id is %s, want a token id", hc.PadTokenID)
			}
		}
		if first = pad + 1; first < 1 || first >= pos {
			return nil, fmt.Errorf("pretrained: pad_token_id %d leaves RoBERTa's max_position_embeddings %d no positions", pad, pos)
		}
	}
	l := &layout{prefixes: []string{prefix, ""}, skip: func(name string) bool {
		return skip.MatchString(name) && (name != decoder || tied)
	}}
	_, _, _, mlm := l.find(w, part{names: []string{headDense + ".weight"}, head: true})
	tied = tied || !mlm // a bare BertModel has no decoder: the nn model's head is the embedding
	if roberta && mlm && act != nn.GELU {
		// RobertaLMHead applies the exact GELU whatever hidden_act says; nn's head transform
		// applies the blocks' activation.
		return nil, fmt.Errorf("%w: a RoBERTa masked-LM head with hidden_act %q (its head's GELU is the exact one)", ErrUnsupported, act)
	}
	l.cfg = nn.Config{Vocab: v, SeqLen: pos - first, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PostNorm,
		Positions: nn.Learned, Activation: act, NormEps: orDefault(hc.LayerNormEps, 1e-12), TypeVocab: types, EmbNorm: true,
		Bidirectional: true, TieEmbeddings: tied, HeadTransform: mlm, NoHeadBias: !mlm}
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	add("tok_emb.weight", src("embeddings.word_embeddings.weight", v, e))
	add("pos_emb.weight", part{names: []string{"embeddings.position_embeddings.weight"}, shape: []int{pos, e}, rows: [2]int{first, pos}})
	add("type_emb.weight", src("embeddings.token_type_embeddings.weight", types, e))
	l.encoder(encoderNames{block: "encoder.layer.", q: "attention.self.query", k: "attention.self.key", v: "attention.self.value",
		o: "attention.output.dense", ln1: "attention.output.LayerNorm", fc1: "intermediate.dense", fc2: "output.dense",
		ln2: "output.LayerNorm", headDense: headDense, headNorm: headNorm, headBias: headBias, decoder: decoder}, e, ffn, layers, v, mlm, tied)
	return l, nil
}

// encoderNames are the tensor names of a BERT-like encoder's blocks (relative to block + its
// index + ".") and masked-LM head: BERT's, RoBERTa's, DistilBERT's.
type encoderNames struct {
	block                     string
	q, k, v, o, ln1, fc1, fc2 string
	ln2, headDense, headNorm  string
	headBias                  []string
	decoder                   string
}

// encoder adds the bindings of a BERT-like encoder named n to l, after its embeddings: the
// embedding norm, layers post-norm blocks of width e and hidden width ffn, and with mlm the
// masked-LM head over a vocabulary of v (its decoder the word embeddings when tied). LayerNorms
// are read as weight and bias, or old checkpoints' gamma and beta.
func (l *layout) encoder(n encoderNames, e, ffn, layers, v int, mlm, tied bool) {
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	norm := func(to, from string, head bool) {
		add(to+".weight", part{names: []string{from + ".weight", from + ".gamma"}, shape: []int{e}, head: head})
		add(to+".bias", part{names: []string{from + ".bias", from + ".beta"}, shape: []int{e}, head: head})
	}
	lin := func(to, from string, in, out int) {
		add(to+".weight", src(from+".weight", out, in))
		add(to+".bias", src(from+".bias", out))
	}
	norm("emb_ln", "embeddings.LayerNorm", false)
	for i := range layers {
		h, b := n.block+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		add(b+"attn.in_proj_weight", src(h+n.q+".weight", e, e), src(h+n.k+".weight", e, e), src(h+n.v+".weight", e, e))
		add(b+"attn.in_proj_bias", src(h+n.q+".bias", e), src(h+n.k+".bias", e), src(h+n.v+".bias", e))
		lin(b+"attn.out_proj", h+n.o, e, e)
		norm(b+"ln1", h+n.ln1, false)
		lin(b+"ffn.fc1", h+n.fc1, e, ffn)
		lin(b+"ffn.fc2", h+n.fc2, ffn, e)
		norm(b+"ln2", h+n.ln2, false)
	}
	if mlm {
		add("head_dense.weight", part{names: []string{n.headDense + ".weight"}, shape: []int{e, e}, head: true})
		add("head_dense.bias", part{names: []string{n.headDense + ".bias"}, shape: []int{e}, head: true})
		norm("head_ln", n.headNorm, true)
		add("head.bias", part{names: n.headBias, shape: []int{v}, head: true})
		if !tied {
			add("head.weight", part{names: []string{n.decoder}, shape: []int{v, e}, head: true})
		}
	}
}

// neoxLayout maps a GPTNeoXForCausalLM (or GPTNeoXModel) folder, Pythia's and GPT-NeoX-20B's:
// pre-norm blocks of LayerNorm whose attention and MLP run in parallel (use_parallel_residual,
// true unless the config says otherwise), the first rotary_pct of each head rotated in the
// rotate-half layout with base rotary_emb_base (transformers v5: partial_rotary_factor,
// rope_theta), query_key_value's rows stored per head [q_h; k_h; v_h] and read into
// in_proj_weight's [Q; K; V], biases on every projection, the exact GELU, and an untied head
// embed_out.
func neoxLayout(hc *hfConfig, w *weights) (*layout, error) {
	e, v, heads, layers, ffn, _, seq, err := hc.decoderSizes()
	if err != nil {
		return nil, err
	}
	if e%heads != 0 {
		return nil, fmt.Errorf("pretrained: hidden_size %d is not divisible by num_attention_heads %d", e, heads)
	}
	d := e / heads
	act := cmp.Or(hc.HiddenAct, nn.GELU)
	if act == "gelu_fast" { // GPT-NeoX-20B's: GELU's tanh form, as gelu_new
		act = nn.GELUNew
	}
	pct := 0.25 // GPTNeoXConfig's rotary_pct
	if hc.RotaryPct != nil {
		pct = *hc.RotaryPct
	} else if hc.PartialRotaryFactor != nil {
		pct = *hc.PartialRotaryFactor
	}
	theta := 10000.0
	if hc.RotaryEmbBase != nil {
		theta = *hc.RotaryEmbBase
	}
	switch {
	case act != nn.GELU && act != nn.GELUNew && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: GPT-NeoX hidden_act %q (mha has gelu, gelu_new, gelu_fast, gelu_pytorch_tanh)", ErrUnsupported, act)
	case !(pct >= 0 && pct <= 1):
		return nil, fmt.Errorf("pretrained: rotary_pct is %v, want a fraction in [0, 1]", pct)
	}
	rope, err := hc.ropeFrom(hc.RopeScaling, "rope_scaling", orDefault(hc.RopeTheta, theta))
	if err != nil {
		return nil, err
	}
	if rope, err = partialRope(rope, d, pct, "rotary_pct"); err != nil {
		return nil, err
	}
	tied := orDefault(hc.TieEmbeddings, false) // GPTNeoXConfig's default
	bias := orDefault(hc.AttentionBias, true)  // GPTNeoXConfig's default
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: seq, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.NoPositions, Activation: act, NormEps: orDefault(hc.LayerNormEps, 1e-5), NoHeadBias: true,
			TieEmbeddings: tied, Rope: rope, NoAttnBias: !bias, ParallelResidual: orDefault(hc.UseParallelResidual, true)},
		prefixes: []string{"gpt_neox.", ""},
		skip: func(name string) bool {
			return neoxSkip.MatchString(name) && (name != "embed_out.weight" || tied)
		},
	}
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	norm := func(to, from string) {
		add(to+".weight", src(from+".weight", e))
		add(to+".bias", src(from+".bias", e))
	}
	qkv := func(name string, cols int) []part { return fusedQKV(name, qkvPerHead, heads, heads, d, cols) }
	add("tok_emb.weight", src("embed_in.weight", v, e))
	for i := range layers {
		h, b := "layers."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		norm(b+"ln1", h+"input_layernorm")
		add(b+"attn.in_proj_weight", qkv(h+"attention.query_key_value.weight", e)...)
		add(b+"attn.out_proj.weight", src(h+"attention.dense.weight", e, e))
		if bias {
			add(b+"attn.in_proj_bias", qkv(h+"attention.query_key_value.bias", 0)...)
			add(b+"attn.out_proj.bias", src(h+"attention.dense.bias", e))
		}
		norm(b+"ln2", h+"post_attention_layernorm")
		add(b+"ffn.fc1.weight", src(h+"mlp.dense_h_to_4h.weight", ffn, e))
		add(b+"ffn.fc1.bias", src(h+"mlp.dense_h_to_4h.bias", ffn))
		add(b+"ffn.fc2.weight", src(h+"mlp.dense_4h_to_h.weight", e, ffn))
		add(b+"ffn.fc2.bias", src(h+"mlp.dense_4h_to_h.bias", e))
	}
	norm("ln_f", "final_layer_norm")
	if !tied {
		add("head.weight", part{names: []string{"embed_out.weight"}, shape: []int{v, e}, head: true})
	}
	return l, nil
}

// distilBERTLayout maps a DistilBertModel or DistilBertForMaskedLM folder: BERT's post-norm
// blocks under DistilBERT's names (q_lin … out_lin, sa_layer_norm, ffn.lin1, ffn.lin2,
// output_layer_norm; its config's dim, n_heads, n_layers, hidden_dim and activation), without
// token types, LayerNorm's eps 1e-12 as DistilBERT fixes it, and the masked-LM head
// (vocab_transform, vocab_layer_norm, vocab_projector tied to the word embeddings) when the
// folder has it. Sinusoidal position embeddings (sinusoidal_pos_embds) are stored as weights
// and read as such.
func distilBERTLayout(hc *hfConfig, w *weights) (*layout, error) {
	e, v, heads, layers, ffn, pos := hc.Dim, hc.VocabSize, hc.NHeads, hc.NLayers, hc.HiddenDim, hc.MaxPositionEmbeddings
	if err := checkSizes(map[string]int{"dim": e, "vocab_size": v, "n_heads": heads, "n_layers": layers, "hidden_dim": ffn,
		"max_position_embeddings": pos}); err != nil {
		return nil, err
	}
	act := cmp.Or(hc.Activation, nn.GELU)
	switch {
	case e%heads != 0:
		return nil, fmt.Errorf("pretrained: dim %d is not divisible by n_heads %d", e, heads)
	case act != nn.GELU:
		return nil, fmt.Errorf("%w: DistilBERT activation %q (mha has gelu)", ErrUnsupported, act)
	}
	tied := orDefault(hc.TieEmbeddings, true)
	l := &layout{prefixes: []string{"distilbert.", ""}, skip: func(name string) bool {
		return distilSkip.MatchString(name) && (name != "vocab_projector.weight" || tied)
	}}
	_, _, _, mlm := l.find(w, part{names: []string{"vocab_transform.weight"}, head: true})
	tied = tied || !mlm
	l.cfg = nn.Config{Vocab: v, SeqLen: pos, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PostNorm,
		Positions: nn.Learned, NormEps: 1e-12, EmbNorm: true, Bidirectional: true, TieEmbeddings: tied, HeadTransform: mlm, NoHeadBias: !mlm}
	l.params = append(l.params, binding{name: "tok_emb.weight", parts: []part{src("embeddings.word_embeddings.weight", v, e)}},
		binding{name: "pos_emb.weight", parts: []part{src("embeddings.position_embeddings.weight", pos, e)}})
	l.encoder(encoderNames{block: "transformer.layer.", q: "attention.q_lin", k: "attention.k_lin", v: "attention.v_lin",
		o: "attention.out_lin", ln1: "sa_layer_norm", fc1: "ffn.lin1", fc2: "ffn.lin2", ln2: "output_layer_norm",
		headDense: "vocab_transform", headNorm: "vocab_layer_norm", headBias: []string{"vocab_projector.bias"}, decoder: "vocab_projector.weight"},
		e, ffn, layers, v, mlm, tied)
	return l, nil
}

// qkvOrder is how a fused query-key-value projection orders its rows.
type qkvOrder int

const (
	qkvStacked qkvOrder = iota // every query head, then every K/V head's key, then their values (Falcon-7B, StarCoder)
	qkvPerHead                 // [q_h; k_h; v_h] head by head, one K/V head per query head (GPT-NeoX)
	qkvGrouped                 // per K/V group: its query heads, its key, its value (Falcon's new architecture)
)

// fusedQKV returns the parts of a fused projection named name, its weight (cols > 0: [(heads +
// 2·kv)·d, cols]) or its bias (cols 0), laid out in order, that make in_proj's [Q; K; V] for
// heads query heads and kv K/V heads of d values.
func fusedQKV(name string, order qkvOrder, heads, kv, d, cols int) []part {
	shape := []int{(heads + 2*kv) * d}
	if cols > 0 {
		shape = append(shape, cols)
	}
	span := func(r0, n int) part { return part{names: []string{name}, shape: shape, rows: [2]int{r0, r0 + n}} }
	var q, k, v []part
	switch order {
	case qkvStacked:
		q, k, v = []part{span(0, heads*d)}, []part{span(heads*d, kv*d)}, []part{span((heads+kv)*d, kv*d)}
	case qkvPerHead:
		for h := range heads {
			q, k, v = append(q, span(3*h*d, d)), append(k, span((3*h+1)*d, d)), append(v, span((3*h+2)*d, d))
		}
	case qkvGrouped:
		per := heads / kv
		for g := range kv {
			r0 := g * (per + 2) * d
			q, k, v = append(q, span(r0, per*d)), append(k, span(r0+per*d, d)), append(v, span(r0+(per+1)*d, d))
		}
	}
	return append(append(q, k...), v...)
}

// gptBigCodeLayout maps a GPTBigCodeForCausalLM (or GPTBigCodeModel) folder, StarCoder's and
// SantaCoder's: GPT-2's config keys, blocks and learned positions with nn.Linear weights
// ([out, in], not transposed), multi-query attention (multi_query, the default: c_attn's rows
// [Q; K; V] with one K/V head; otherwise rows per head [q; k; v]), gelu_pytorch_tanh, and the
// head tied to wte.
func gptBigCodeLayout(hc *hfConfig, w *weights) (*layout, error) {
	e, v, heads, layers, pos, ffn, err := hc.gpt2Sizes()
	if err != nil {
		return nil, err
	}
	act := cmp.Or(hc.ActivationFunction, nn.GELUPyTorchTanh)
	switch {
	case act != nn.GELUNew && act != nn.GELU && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: GPTBigCode activation_function %q (mha has gelu, gelu_new, gelu_pytorch_tanh)", ErrUnsupported, act)
	case e%heads != 0:
		return nil, fmt.Errorf("pretrained: n_embd %d is not divisible by n_head %d", e, heads)
	case !orDefault(hc.ScaleAttnWeights, true):
		return nil, fmt.Errorf("%w: GPTBigCode without scale_attn_weights", ErrUnsupported)
	}
	d, multiQuery := e/heads, orDefault(hc.MultiQuery, true)
	kv := heads
	if multiQuery {
		kv = 1
	}
	tied := orDefault(hc.TieEmbeddings, true)
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: pos, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.Learned, Activation: act, NormEps: orDefault(hc.LayerNormEpsilon, 1e-5), TieEmbeddings: tied, NoHeadBias: true},
		prefixes: []string{"transformer.", ""},
		skip: func(name string) bool {
			return name == "lm_head.weight" && tied
		},
	}
	if kv != heads {
		l.cfg.KVHeads = kv
	}
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	norm := func(to, from string) {
		add(to+".weight", src(from+".weight", e))
		add(to+".bias", src(from+".bias", e))
	}
	order := qkvPerHead
	if multiQuery {
		order = qkvStacked
	}
	qkv := func(name string, cols int) []part { return fusedQKV(name, order, heads, kv, d, cols) }
	add("tok_emb.weight", src("wte.weight", v, e))
	add("pos_emb.weight", src("wpe.weight", pos, e))
	for i := range layers {
		h, b := "h."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		norm(b+"ln1", h+"ln_1")
		add(b+"attn.in_proj_weight", qkv(h+"attn.c_attn.weight", e)...)
		add(b+"attn.in_proj_bias", qkv(h+"attn.c_attn.bias", 0)...)
		add(b+"attn.out_proj.weight", src(h+"attn.c_proj.weight", e, e))
		add(b+"attn.out_proj.bias", src(h+"attn.c_proj.bias", e))
		norm(b+"ln2", h+"ln_2")
		add(b+"ffn.fc1.weight", src(h+"mlp.c_fc.weight", ffn, e))
		add(b+"ffn.fc1.bias", src(h+"mlp.c_fc.bias", ffn))
		add(b+"ffn.fc2.weight", src(h+"mlp.c_proj.weight", e, ffn))
		add(b+"ffn.fc2.bias", src(h+"mlp.c_proj.bias", e))
	}
	norm("ln_f", "ln_f")
	if !tied {
		add("head.weight", part{names: []string{"lm_head.weight"}, shape: []int{v, e}, head: true})
	}
	return l, nil
}

// gptjLayout maps a GPTJForCausalLM (or GPTJModel) folder, GPT-J-6B's: GPT-2's config keys,
// pre-norm blocks whose attention and MLP read one LayerNorm, ln_1, side by side (as Phi-2's),
// rotary positions of base 10000 on the first rotary_dim features of each head (all when null)
// in GPT-J's interleaved layout (rotate_every_two), q_proj, k_proj, v_proj and out_proj without
// biases, fc_in and fc_out with them, and lm_head with a bias.
func gptjLayout(hc *hfConfig, w *weights) (*layout, error) {
	e, v, heads, layers, pos, ffn, err := hc.gpt2Sizes()
	if err != nil {
		return nil, err
	}
	act := cmp.Or(hc.ActivationFunction, nn.GELUNew)
	switch {
	case act != nn.GELUNew && act != nn.GELU && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: GPT-J activation_function %q (mha has gelu, gelu_new, gelu_pytorch_tanh)", ErrUnsupported, act)
	case e%heads != 0:
		return nil, fmt.Errorf("pretrained: n_embd %d is not divisible by n_head %d", e, heads)
	}
	d := e / heads
	rope := &nn.Rope{Theta: 10000, Interleaved: true}
	if n := hc.RotaryDim; n != nil {
		switch {
		case *n <= 0 || *n > d || *n%2 != 0:
			return nil, fmt.Errorf("pretrained: rotary_dim is %d, want an even number in [2, %d] (the head size)", *n, d)
		case *n < d:
			rope.Dim = *n
		}
	}
	tied := orDefault(hc.TieEmbeddings, false)
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: pos, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.NoPositions, Activation: act, NormEps: orDefault(hc.LayerNormEpsilon, 1e-5), TieEmbeddings: tied,
			Rope: rope, NoAttnBias: true, ParallelResidual: true, SharedNorm: true},
		prefixes: []string{"transformer.", ""},
		skip: func(name string) bool {
			return gptjSkip.MatchString(name) && (name != "lm_head.weight" || tied)
		},
	}
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	norm := func(to, from string) {
		add(to+".weight", src(from+".weight", e))
		add(to+".bias", src(from+".bias", e))
	}
	add("tok_emb.weight", src("wte.weight", v, e))
	for i := range layers {
		h, b := "h."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		norm(b+"ln1", h+"ln_1")
		add(b+"attn.in_proj_weight", src(h+"attn.q_proj.weight", e, e), src(h+"attn.k_proj.weight", e, e), src(h+"attn.v_proj.weight", e, e))
		add(b+"attn.out_proj.weight", src(h+"attn.out_proj.weight", e, e))
		add(b+"ffn.fc1.weight", src(h+"mlp.fc_in.weight", ffn, e))
		add(b+"ffn.fc1.bias", src(h+"mlp.fc_in.bias", ffn))
		add(b+"ffn.fc2.weight", src(h+"mlp.fc_out.weight", e, ffn))
		add(b+"ffn.fc2.bias", src(h+"mlp.fc_out.bias", e))
	}
	norm("ln_f", "ln_f")
	if !tied {
		add("head.weight", part{names: []string{"lm_head.weight"}, shape: []int{v, e}, head: true})
	}
	// A bare GPTJModel (tied here) has no lm_head: its head's bias is zero.
	add("head.bias", part{names: []string{"lm_head.bias"}, shape: []int{v}, head: true, zero: tied})
	return l, nil
}

// falconLayout maps a FalconForCausalLM (or FalconModel) folder (model_type falcon): Falcon-7B's
// multi-query attention (query_key_value's rows [Q; K; V] with one K/V head) with the attention
// and the MLP in parallel from one input_layernorm, or with parallel_attn false the sequential
// block with post_attention_layernorm; the new_decoder_architecture of Falcon-40B and 180B,
// num_kv_heads groups of rows [Q of the group's heads; K; V] and the attention and the MLP in
// parallel from ln_attn and ln_mlp (num_ln_in_parallel_attn 2, the default) or from one
// input_layernorm (1); without multi_query, rows per head [q; k; v]. Rotary in the rotate-half
// layout, mlp.dense_h_to_4h and dense_4h_to_h around activation (the exact GELU by default),
// biases only with bias, LayerNorm of layer_norm_epsilon, and a head tied to the embedding
// unless tie_word_embeddings is false. ALiBi (falcon-rw) is refused.
func falconLayout(hc *hfConfig, w *weights) (*layout, error) {
	if hc.IntermediateSize == 0 && hc.HiddenSize > 0 {
		hc.IntermediateSize = orDefault(hc.FFNHiddenSize, 4*hc.HiddenSize) // FalconConfig's ffn_hidden_size
	}
	e, v, heads, layers, ffn, _, seq, err := hc.decoderSizes()
	if err != nil {
		return nil, err
	}
	newArch, multiQuery := hc.NewDecoderArchitecture, orDefault(hc.MultiQuery, true)
	kv := orDefault(hc.NumKVHeads, heads)
	if !newArch && multiQuery {
		kv = 1
	}
	norms := 1
	if newArch {
		norms = orDefault(hc.NumLNInParallelAttn, 2)
	}
	act := cmp.Or(hc.Activation, nn.GELU)
	parallel := orDefault(hc.ParallelAttn, true)
	switch {
	case e%heads != 0:
		return nil, fmt.Errorf("pretrained: hidden_size %d is not divisible by num_attention_heads %d", e, heads)
	case kv <= 0 || heads%kv != 0:
		return nil, fmt.Errorf("pretrained: num_kv_heads %d does not divide num_attention_heads %d", kv, heads)
	case hc.Alibi:
		return nil, fmt.Errorf("%w: Falcon with alibi (mha's models have rotary or learned positions)", ErrUnsupported)
	case act != nn.GELU && act != nn.GELUNew && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: Falcon activation %q (mha has gelu, gelu_new, gelu_pytorch_tanh)", ErrUnsupported, act)
	case norms != 1 && norms != 2:
		return nil, fmt.Errorf("pretrained: num_ln_in_parallel_attn is %d, want 1 or 2", norms)
	case newArch && !parallel && norms == 1:
		return nil, fmt.Errorf("pretrained: Falcon's new_decoder_architecture with parallel_attn false and one norm has no MLP input (transformers fails on it too)")
	}
	d := e / heads
	rope, err := hc.ropeFrom(hc.RopeScaling, "rope_scaling", orDefault(hc.RopeTheta, 10000))
	if err != nil {
		return nil, err
	}
	tied, bias := orDefault(hc.TieEmbeddings, true), orDefault(hc.Bias, false)
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: seq, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.NoPositions, Activation: act, NormEps: orDefault(hc.LayerNormEpsilon, 1e-5), NoHeadBias: true,
			TieEmbeddings: tied, Rope: rope, NoAttnBias: !bias, NoMLPBias: !bias,
			ParallelResidual: newArch || parallel, SharedNorm: newArch && norms == 1 || !newArch && parallel},
		prefixes: []string{"transformer.", ""},
		skip: func(name string) bool {
			return name == "lm_head.weight" && tied
		},
	}
	if kv != heads {
		l.cfg.KVHeads = kv
	}
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	norm := func(to, from string) {
		add(to+".weight", src(from+".weight", e))
		add(to+".bias", src(from+".bias", e))
	}
	// query_key_value's rows, as FalconAttention._split_heads reads them.
	order := qkvPerHead
	switch {
	case newArch:
		order = qkvGrouped
	case multiQuery:
		order = qkvStacked
	}
	qkv := func(name string, cols int) []part { return fusedQKV(name, order, heads, kv, d, cols) }
	add("tok_emb.weight", src("word_embeddings.weight", v, e))
	for i := range layers {
		h, b := "h."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		switch {
		case newArch && norms == 2:
			norm(b+"ln1", h+"ln_attn")
			norm(b+"ln2", h+"ln_mlp")
		default:
			norm(b+"ln1", h+"input_layernorm")
			if !newArch && !parallel {
				norm(b+"ln2", h+"post_attention_layernorm")
			}
		}
		add(b+"attn.in_proj_weight", qkv(h+"self_attention.query_key_value.weight", e)...)
		add(b+"attn.out_proj.weight", src(h+"self_attention.dense.weight", e, e))
		if bias {
			add(b+"attn.in_proj_bias", qkv(h+"self_attention.query_key_value.bias", 0)...)
			add(b+"attn.out_proj.bias", src(h+"self_attention.dense.bias", e))
		}
		add(b+"ffn.fc1.weight", src(h+"mlp.dense_h_to_4h.weight", ffn, e))
		add(b+"ffn.fc2.weight", src(h+"mlp.dense_4h_to_h.weight", e, ffn))
		if bias {
			add(b+"ffn.fc1.bias", src(h+"mlp.dense_h_to_4h.bias", ffn))
			add(b+"ffn.fc2.bias", src(h+"mlp.dense_4h_to_h.bias", e))
		}
	}
	norm("ln_f", "ln_f")
	if !tied {
		add("head.weight", part{names: []string{"lm_head.weight"}, shape: []int{v, e}, head: true})
	}
	return l, nil
}

// phiLayout maps a PhiForCausalLM (or PhiModel) folder, Phi-1, Phi-1.5's and Phi-2's: pre-norm
// blocks whose attention and MLP run in parallel from one LayerNorm (input_layernorm), the first
// partial_rotary_factor of each head rotated in the rotate-half layout, biases on every
// projection and on the untied head lm_head, grouped K/V heads when num_key_value_heads says so.
// Its per-head LayerNorm of queries and keys (qk_layernorm) is refused.
func phiLayout(hc *hfConfig, w *weights) (*layout, error) {
	return lnDecoderLayout(hc, lnDecoder{name: "Phi", act: nn.GELUNew, pct: 0.5, out: "dense", finalNorm: "final_layernorm",
		qkvBias: true, outBias: true, mlpBias: true, headBias: true, parallel: true})
}

// stableLMLayout maps a StableLmForCausalLM (or StableLmModel) folder, StableLM-3B-4E1T's and
// StableLM 2's: pre-norm blocks of LayerNorm, the SwiGLU network, the first
// partial_rotary_factor (0.25) of each head rotated in the rotate-half layout, q/k/v biases with
// use_qkv_bias, grouped K/V heads, and with use_parallel_residual the attention and the MLP in
// parallel from one input_layernorm. Its per-head LayerNorm of queries and keys (qk_layernorm,
// StableLM 2 12B's) is refused.
func stableLMLayout(hc *hfConfig, w *weights) (*layout, error) {
	return lnDecoderLayout(hc, lnDecoder{name: "StableLM", act: "silu", pct: 0.25, out: "o_proj", finalNorm: "norm",
		qkvBias: orDefault(hc.UseQKVBias, false), parallel: orDefault(hc.UseParallelResidual, false)})
}

// starcoder2Layout maps a Starcoder2ForCausalLM (or Starcoder2Model) folder, StarCoder2's:
// pre-norm blocks of LayerNorm (norm_epsilon), grouped K/V heads with whole heads rotated,
// mlp.c_fc and mlp.c_proj around gelu_pytorch_tanh, biases everywhere but on lm_head unless
// use_bias is false, a sliding window over every layer when sliding_window is set, and a head
// tied to the embedding unless tie_word_embeddings is false.
func starcoder2Layout(hc *hfConfig, w *weights) (*layout, error) {
	bias := orDefault(hc.UseBias, true)
	return lnDecoderLayout(hc, lnDecoder{name: "Starcoder2", act: nn.GELUPyTorchTanh, pct: 1, out: "o_proj", finalNorm: "norm",
		fc1: "c_fc", fc2: "c_proj", qkvBias: bias, outBias: bias, mlpBias: bias, tied: true, eps: hc.NormEpsilon, window: true})
}

// lnDecoder is what sets apart the families lnDecoderLayout maps.
type lnDecoder struct {
	name      string   // the family, in errors
	act       string   // hidden_act when the config leaves it out; "silu" is the SwiGLU network
	pct       float64  // partial_rotary_factor when the config leaves it out
	out       string   // the attention's output Linear, under self_attn.
	finalNorm string   // the final LayerNorm
	fc1, fc2  string   // an ungated MLP's Linears under mlp. ("" for fc1 and fc2)
	qkvBias   bool     // q_proj, k_proj and v_proj have biases
	outBias   bool     // the output Linear has one (when qkvBias)
	mlpBias   bool     // an ungated MLP's Linears have biases
	headBias  bool     // lm_head has one
	parallel  bool     // the attention and the MLP read one input_layernorm side by side
	tied      bool     // tie_word_embeddings when the config leaves it out
	eps       *float64 // the LayerNorms' eps under the family's own key; nil: layer_norm_eps
	window    bool     // sliding_window (none when null or left out) covers every layer
}

// lnDecoderLayout maps a pre-norm decoder of LayerNorms (weight and bias) with partial rotary
// and q_proj, k_proj, v_proj under the names Phi, StableLM and StarCoder2 share, its
// differences in f.
func lnDecoderLayout(hc *hfConfig, f lnDecoder) (*layout, error) {
	e, v, heads, layers, ffn, kv, seq, err := hc.decoderSizes()
	if err != nil {
		return nil, err
	}
	act := cmp.Or(hc.HiddenAct, f.act)
	pct := orDefault(hc.PartialRotaryFactor, f.pct)
	gated := act == "silu"
	switch {
	case e%heads != 0:
		return nil, fmt.Errorf("pretrained: hidden_size %d is not divisible by num_attention_heads %d", e, heads)
	case kv <= 0 || heads%kv != 0:
		return nil, fmt.Errorf("pretrained: num_key_value_heads %d does not divide num_attention_heads %d", kv, heads)
	case !gated && act != nn.GELU && act != nn.GELUNew && act != nn.GELUPyTorchTanh:
		return nil, fmt.Errorf("%w: %s hidden_act %q (mha has silu, gelu, gelu_new, gelu_pytorch_tanh)", ErrUnsupported, f.name, act)
	case !(pct >= 0 && pct <= 1):
		return nil, fmt.Errorf("pretrained: partial_rotary_factor is %v, want a fraction in [0, 1]", pct)
	case hc.QKLayerNorm:
		return nil, fmt.Errorf("%w: %s with qk_layernorm (a LayerNorm of each head's query and key; mha's is RMSNorm)", ErrUnsupported, f.name)
	}
	if gated {
		act = nn.SwiGLU
	}
	d := e / heads
	rope, err := hc.ropeFrom(hc.RopeScaling, "rope_scaling", orDefault(hc.RopeTheta, 10000))
	if err != nil {
		return nil, err
	}
	if rope, err = partialRope(rope, d, pct, "partial_rotary_factor"); err != nil {
		return nil, err
	}
	tied, eps := orDefault(hc.TieEmbeddings, f.tied), hc.LayerNormEps
	if f.eps != nil {
		eps = f.eps
	}
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: seq, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.NoPositions, Activation: act, NormEps: orDefault(eps, 1e-5), TieEmbeddings: tied,
			Rope: rope, NoAttnBias: !f.qkvBias, NoMLPBias: gated || !f.mlpBias, NoHeadBias: !f.headBias, ParallelResidual: f.parallel, SharedNorm: f.parallel},
		prefixes: []string{"model.", ""},
		skip: func(name string) bool {
			return llamaSkip.MatchString(name) && (name != "lm_head.weight" || tied)
		},
	}
	if kv != heads {
		l.cfg.KVHeads = kv
	}
	if f.window {
		w, err := slidingWindow(hc.SlidingWindow, 0)
		if err != nil {
			return nil, err
		}
		if w > 0 {
			l.cfg.Window = min(w, seq)
		}
	}
	ekv := kv * d
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	norm := func(to, from string) {
		add(to+".weight", src(from+".weight", e))
		add(to+".bias", src(from+".bias", e))
	}
	add("tok_emb.weight", src("embed_tokens.weight", v, e))
	for i := range layers {
		h, b := "layers."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		at := h + "self_attn."
		norm(b+"ln1", h+"input_layernorm")
		add(b+"attn.in_proj_weight", src(at+"q_proj.weight", e, e), src(at+"k_proj.weight", ekv, e), src(at+"v_proj.weight", ekv, e))
		add(b+"attn.out_proj.weight", src(at+f.out+".weight", e, e))
		if f.qkvBias {
			add(b+"attn.in_proj_bias", src(at+"q_proj.bias", e), src(at+"k_proj.bias", ekv), src(at+"v_proj.bias", ekv))
			// StableLM's o_proj has no bias: the layer's out_proj.bias is zero.
			add(b+"attn.out_proj.bias", part{names: []string{at + f.out + ".bias"}, shape: []int{e}, zero: !f.outBias})
		}
		if !f.parallel {
			norm(b+"ln2", h+"post_attention_layernorm")
		}
		if gated {
			add(b+"ffn.gate_proj.weight", src(h+"mlp.gate_proj.weight", ffn, e))
			add(b+"ffn.up_proj.weight", src(h+"mlp.up_proj.weight", ffn, e))
			add(b+"ffn.down_proj.weight", src(h+"mlp.down_proj.weight", e, ffn))
			continue
		}
		fc1, fc2 := cmp.Or(f.fc1, "fc1"), cmp.Or(f.fc2, "fc2")
		add(b+"ffn.fc1.weight", src(h+"mlp."+fc1+".weight", ffn, e))
		add(b+"ffn.fc2.weight", src(h+"mlp."+fc2+".weight", e, ffn))
		if f.mlpBias {
			add(b+"ffn.fc1.bias", src(h+"mlp."+fc1+".bias", ffn))
			add(b+"ffn.fc2.bias", src(h+"mlp."+fc2+".bias", e))
		}
	}
	norm("ln_f", f.finalNorm)
	if !tied {
		add("head.weight", part{names: []string{"lm_head.weight"}, shape: []int{v, e}, head: true})
	}
	if f.headBias {
		// A bare PhiModel (tied here) has no lm_head: its head's bias is zero.
		add("head.bias", part{names: []string{"lm_head.bias"}, shape: []int{v}, head: true, zero: tied})
	}
	return l, nil
}

// llamaLayout maps the Llama family (Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3,
// Phi-3; CausalLM or the bare model): pre-norm blocks of RMSNorm (Gemma 2's and 3's sandwiched:
// gemmaLayers), grouped-query attention with rotary positions in the rotate-half layout (after
// Qwen3's and Gemma 3's per-head RMSNorm of queries and keys; on the first part of each head
// with Phi-3's partial_rotary_factor), q, k and v stacked into in_proj_weight (Phi-3 stores them
// so), the SwiGLU network (Gemma's GeGLU; Phi-3 stores gate and up in one tensor), no position
// embedding (Gemma's token embeddings scaled by √hidden_size), and an untied or tied head.
func llamaLayout(hc *hfConfig, w *weights) (*layout, error) {
	// The family's variant: config.json's model_type, which transformers' Auto classes build the
	// model from, or without one the architecture's name.
	named := func(modelType, prefix string) bool {
		if hc.ModelType != "" {
			return hc.ModelType == modelType
		}
		return slices.ContainsFunc(hc.Architectures, func(a string) bool { return strings.HasPrefix(a, prefix) })
	}
	qwen, qwen3, mistral, phi3 := named("qwen2", "Qwen2"), named("qwen3", "Qwen3"), named("mistral", "Mistral"), named("phi3", "Phi3")
	smollm3, mixtral, qwen3MoE, qwen2MoE := named("smollm3", "SmolLM3"), named("mixtral", "Mixtral"), named("qwen3_moe", "Qwen3Moe"), named("qwen2_moe", "Qwen2Moe")
	olmo2, olmo3, olmoe := named("olmo2", "Olmo2"), named("olmo3", "Olmo3"), named("olmoe", "Olmoe")
	olmo2 = olmo2 || olmo3 // OLMo 3 is OLMo 2 with sliding layers
	// Qwen3-MoE's attention is Qwen3's, Qwen2-MoE's Qwen2's.
	qwen3, qwen = qwen3 || qwen3MoE, qwen || qwen2MoE
	hc.phi3 = phi3
	// Gemma 3 is Gemma with sandwich norms, qk-norm and local layers: gemma covers both.
	gemma2, gemma3 := named("gemma2", "Gemma2"), named("gemma3_text", "Gemma3")
	gemma := gemma2 || gemma3 || named("gemma", "Gemma")
	if gemma3 {
		hc.gemma3Defaults()
	}
	e, v, heads, layers, ffn, kv, seq, err := hc.decoderSizes()
	if err != nil {
		return nil, err
	}
	// Gemma's MLP reads hidden_activation, GELU's tanh form when it is absent, and ignores
	// hidden_act (modeling_gemma.py; later versions read hidden_act, so one other than the
	// legacy "gelu" is refused as ambiguous); its head_dim is 256 when the config gives none,
	// Qwen3's 128 (GemmaConfig's and Qwen3Config's defaults).
	activation, gemmaAct, headDim := nn.SwiGLU, "gelu_pytorch_tanh", hc.HeadDim
	if gemma {
		activation = nn.GeGLU
		if hc.HiddenActivation != nil {
			gemmaAct = *hc.HiddenActivation
		}
		if headDim == nil {
			headDim = new(256)
		}
	}
	if qwen3 && !qwen3MoE && headDim == nil {
		headDim = new(128) // Qwen3MoeConfig has no default: hidden_size / num_attention_heads
	}
	switch act := hc.HiddenAct; {
	case gemma && gemmaAct != "gelu_pytorch_tanh" && gemmaAct != "gelu_new":
		return nil, fmt.Errorf("%w: hidden_activation %q (mha's GeGLU is gelu_pytorch_tanh)", ErrUnsupported, gemmaAct)
	case gemma && !gemma2 && !gemma3 && hc.HiddenActivation == nil && act != "" && act != "gelu" && act != "gelu_pytorch_tanh" && act != "gelu_new":
		return nil, fmt.Errorf("%w: Gemma with hidden_act %q and no hidden_activation (transformers' versions read it differently)", ErrUnsupported, act)
	case !gemma && act != "" && act != "silu":
		return nil, fmt.Errorf("%w: hidden_act %q (mha's SwiGLU is silu)", ErrUnsupported, act)
	case headDim == nil && e%heads != 0:
		return nil, fmt.Errorf("pretrained: hidden_size %d is not divisible by num_attention_heads %d (and config.json gives no head_dim)", e, heads)
	case headDim != nil && (*headDim <= 0 || *headDim > nn.MaxDim):
		return nil, fmt.Errorf("pretrained: head_dim is %d, want a size in [1, %d]", *headDim, nn.MaxDim)
	case kv <= 0 || heads%kv != 0:
		return nil, fmt.Errorf("pretrained: num_key_value_heads %d does not divide num_attention_heads %d", kv, heads)
	case !phi3 && hc.PartialRotaryFactor != nil && *hc.PartialRotaryFactor != 1:
		// Llama's attention rotates whole heads whatever its rope parameters say; Phi-3's rotates
		// the first partial_rotary_factor of each.
		return nil, fmt.Errorf("%w: partial_rotary_factor %v", ErrUnsupported, *hc.PartialRotaryFactor)
	case phi3 && hc.PartialRotaryFactor != nil && !(*hc.PartialRotaryFactor > 0 && *hc.PartialRotaryFactor <= 1):
		return nil, fmt.Errorf("pretrained: partial_rotary_factor is %v, want a fraction in (0, 1]", *hc.PartialRotaryFactor)
	}
	// The rotary's base and scaling: rope_theta and rope_scaling (transformers v4) or
	// rope_parameters (v5), which holds both; as in transformers' convert_rope_params_to_dict,
	// rope_scaling wins over rope_parameters, and the object's rope_theta over the top level's.
	// Gemma 3's v5 rope_parameters hold one such object per layer type.
	params, key := hc.RopeScaling, "rope_scaling"
	if isNull(params) {
		params, key = hc.RopeParameters, "rope_parameters"
	}
	var byType map[string]json.RawMessage
	if (gemma3 || olmo3) && key == "rope_parameters" && !isNull(params) {
		if err := json.Unmarshal(params, &byType); err != nil {
			return nil, fmt.Errorf("pretrained: %s is not the JSON object expected: %w", key, err)
		}
		if _, ok := byType["full_attention"]; ok {
			params, key = byType["full_attention"], "rope_parameters.full_attention"
		} else {
			byType = nil
		}
	}
	theta := 10000.0
	switch {
	case gemma3:
		theta = 1e6 // Gemma3TextConfig's rope_theta
	case smollm3:
		theta = 2e6 // SmolLM3Config's
	}
	rope, err := hc.ropeFrom(params, key, orDefault(hc.RopeTheta, theta))
	if err != nil {
		return nil, err
	}
	// Each head is head_dim wide (Qwen3-0.6B: 16 heads of 128 in a hidden_size of 1024), or
	// hidden_size / num_attention_heads when the config does not say.
	d := e / heads
	if headDim != nil {
		d = *headDim
	}
	qd, ekv := heads*d, kv*d
	qkvBias := !phi3 && (orDefault(hc.AttentionBias, false) || qwen) // Phi-3's qkv_proj has no bias
	if qwen2MoE {
		qkvBias = orDefault(hc.QKVBias, true) // Qwen2MoeConfig's qkv_bias
	}
	// Only Llama's MLP reads mlp_bias; the others' have no biases whatever the config says.
	mlpBias := hc.MLPBias && !(qwen || qwen3 || mistral || gemma || phi3 || mixtral)
	if phi3 && hc.PartialRotaryFactor != nil {
		if rope, err = partialRope(rope, d, *hc.PartialRotaryFactor, "partial_rotary_factor"); err != nil {
			return nil, err
		}
	}
	eps := 1e-6 // LlamaConfig's and its kin's default rms_norm_eps; Phi3Config's, Olmo2Config's and OlmoeConfig's 1e-5
	if phi3 || olmo2 || olmoe {
		eps = 1e-5
	}
	if hc.ClipQKV != nil {
		return nil, fmt.Errorf("%w: clip_qkv %v (OLMo's clamping of the projections)", ErrUnsupported, *hc.ClipQKV)
	}
	tied := orDefault(hc.TieEmbeddings, gemma || smollm3) // GemmaConfig and SmolLM3Config tie by default, LlamaConfig does not
	l := &layout{
		cfg: nn.Config{Vocab: v, SeqLen: seq, DModel: e, Heads: heads, Layers: layers, FFN: ffn, Norm: nn.PreNorm,
			Positions: nn.NoPositions, NormKind: nn.RMSNorm, NormEps: orDefault(hc.RMSNormEps, eps), Activation: activation,
			NoMLPBias: !mlpBias, NoHeadBias: true, TieEmbeddings: tied, Rope: rope, NoAttnBias: !qkvBias,
			QKNorm: qwen3 || olmo2 || olmoe, QKNormAcross: olmo2 || olmoe, SandwichNorm: olmo2, NoInputNorm: olmo2},
		prefixes: []string{"model.", ""},
		skip: func(name string) bool {
			return llamaSkip.MatchString(name) && (name != "lm_head.weight" || tied)
		},
	}
	head := []string{"lm_head.weight"}
	if hc.multimodal {
		// Gemma 3's multimodal checkpoints: the text model under language_model.model.
		// (transformers before 4.52) or model.language_model., beside the vision tower and the
		// projector, which are not read.
		head = []string{"language_model.lm_head.weight", "lm_head.weight"}
		l.prefixes = []string{"language_model.model.", "model.language_model."}
		l.skip = func(name string) bool {
			return visionSkip.MatchString(name) || tied && slices.Contains(head, name) || llamaSkip.MatchString(name) && name != "lm_head.weight"
		}
	}
	if kv != heads {
		l.cfg.KVHeads = kv
	}
	if qd != e {
		l.cfg.HeadSize = d
	}
	if gemma {
		l.cfg.EmbScale = math.Sqrt(float64(e)) // GemmaModel's normalizer, hidden_size**0.5
	}
	// Gemma's RMSNorm multiplies by 1 + weight: the model holds that sum.
	norm := func(name string, parts ...part) {
		l.params = append(l.params, binding{name: name, parts: parts, plusOne: gemma})
	}
	// Of the family only Mistral's attention reads sliding_window (4096 when left out, none
	// when null); Llama's ignores it, and Qwen2's and Qwen3's need use_sliding_window, which mha
	// lacks.
	switch {
	case qwen && hc.UseSlidingWindow:
		return nil, fmt.Errorf("%w: Qwen2 with use_sliding_window", ErrUnsupported)
	case qwen3 && hc.UseSlidingWindow:
		return nil, fmt.Errorf("%w: Qwen3 with use_sliding_window", ErrUnsupported)
	case mistral || phi3 || mixtral:
		def := 0 // Phi-3 and Mixtral without sliding_window attend to every earlier position
		if mistral {
			def = 4096
		}
		w, err := slidingWindow(hc.SlidingWindow, def)
		if err != nil {
			return nil, err
		}
		if w > 0 {
			l.cfg.Window = min(w, seq)
		}
	case gemma2 || gemma3:
		if err := gemmaLayers(hc, &l.cfg, byType, d, gemma2); err != nil {
			return nil, err
		}
	case smollm3:
		if err := smolLM3Layers(hc, &l.cfg); err != nil {
			return nil, err
		}
	case olmo3:
		if err := olmo3Layers(hc, &l.cfg, byType); err != nil {
			return nil, err
		}
	}
	// The experts' tensors: Mixtral's block_sparse_moe.gate and experts.e.w1 (gate), w3 (up)
	// and w2 (down); Qwen2-MoE's and Qwen3-MoE's mlp.gate and experts.e.gate_proj, up_proj,
	// down_proj (Qwen2-MoE's shared_expert too).
	moe, moeNames := "block_sparse_moe.", [3]string{"w1", "w3", "w2"}
	if qwen3MoE || qwen2MoE || olmoe {
		moe, moeNames = "mlp.", [3]string{"gate_proj", "up_proj", "down_proj"}
	}
	if mixtral || qwen3MoE || qwen2MoE || olmoe {
		kind := "mixtral"
		switch {
		case qwen2MoE:
			kind = "qwen2_moe"
		case qwen3MoE:
			kind = "qwen3_moe"
		case olmoe:
			kind = "olmoe"
		}
		if err := hc.moeExperts(&l.cfg, kind); err != nil {
			return nil, err
		}
		ffn = l.cfg.FFN
	}
	add := func(name string, parts ...part) { l.params = append(l.params, binding{name: name, parts: parts}) }
	add("tok_emb.weight", src("embed_tokens.weight", v, e))
	for i := range layers {
		h, b := "layers."+strconv.Itoa(i)+".", "blocks."+strconv.Itoa(i)+"."
		at := h + "self_attn."
		switch {
		case olmo2: // only the attention's and the MLP's outputs normalised
			norm(b+"ln1_post.weight", src(h+"post_attention_layernorm.weight", e))
			norm(b+"ln2_post.weight", src(h+"post_feedforward_layernorm.weight", e))
		case gemma2 || gemma3: // the sandwich: the attention's and the MLP's outputs normalised too
			norm(b+"ln1.weight", src(h+"input_layernorm.weight", e))
			norm(b+"ln1_post.weight", src(h+"post_attention_layernorm.weight", e))
			norm(b+"ln2_post.weight", src(h+"post_feedforward_layernorm.weight", e))
			norm(b+"ln2.weight", src(h+"pre_feedforward_layernorm.weight", e))
		default:
			norm(b+"ln1.weight", src(h+"input_layernorm.weight", e))
			norm(b+"ln2.weight", src(h+"post_attention_layernorm.weight", e))
		}
		if phi3 { // q, k and v stacked as in_proj_weight stacks them
			add(b+"attn.in_proj_weight", src(at+"qkv_proj.weight", qd+2*ekv, e))
		} else {
			add(b+"attn.in_proj_weight", src(at+"q_proj.weight", qd, e), src(at+"k_proj.weight", ekv, e), src(at+"v_proj.weight", ekv, e))
		}
		if qkvBias {
			add(b+"attn.in_proj_bias", src(at+"q_proj.bias", qd), src(at+"k_proj.bias", ekv), src(at+"v_proj.bias", ekv))
		}
		add(b+"attn.out_proj.weight", src(at+"o_proj.weight", e, qd))
		switch {
		case qwen3 || gemma3:
			norm(b+"attn.q_norm.weight", src(at+"q_norm.weight", d))
			norm(b+"attn.k_norm.weight", src(at+"k_norm.weight", d))
		case olmo2 || olmoe: // over the whole projections
			norm(b+"attn.q_norm.weight", src(at+"q_norm.weight", qd))
			norm(b+"attn.k_norm.weight", src(at+"k_norm.weight", ekv))
		}
		if qkvBias {
			// Qwen2 has q/k/v biases and none on o_proj: the layer's out_proj.bias is zero.
			add(b+"attn.out_proj.bias", part{names: []string{at + "o_proj.bias"}, shape: []int{e}, zero: qwen})
		}
		if n := l.cfg.Experts; n > 0 {
			add(b+"ffn.router.weight", src(h+moe+"gate.weight", n, e))
			for x := range n {
				to, from := b+"ffn.experts."+strconv.Itoa(x)+".", h+moe+"experts."+strconv.Itoa(x)+"."
				add(to+"gate_proj.weight", src(from+moeNames[0]+".weight", ffn, e))
				add(to+"up_proj.weight", src(from+moeNames[1]+".weight", ffn, e))
				add(to+"down_proj.weight", src(from+moeNames[2]+".weight", e, ffn))
			}
			if f := l.cfg.SharedExpert; f > 0 { // Qwen2-MoE's shared_expert and its gate
				for _, p := range [][3]int{{0, e, f}, {1, e, f}, {2, f, e}} {
					name := moeNames[p[0]]
					add(b+"ffn.shared."+name+".weight", src(h+moe+"shared_expert."+name+".weight", p[2], p[1]))
				}
				add(b+"ffn.shared_gate.weight", src(h+moe+"shared_expert_gate.weight", 1, e))
			}
			continue
		}
		for i, proj := range []struct {
			name    string
			in, out int
		}{{"gate_proj", e, ffn}, {"up_proj", e, ffn}, {"down_proj", ffn, e}} {
			if phi3 && i < 2 { // gate_up_proj [2·ffn, e]: gate_proj's rows, then up_proj's
				add(b+"ffn."+proj.name+".weight", part{names: []string{h + "mlp.gate_up_proj.weight"}, shape: []int{2 * ffn, e}, rows: [2]int{i * ffn, (i + 1) * ffn}})
				continue
			}
			add(b+"ffn."+proj.name+".weight", src(h+"mlp."+proj.name+".weight", proj.out, proj.in))
			if mlpBias {
				add(b+"ffn."+proj.name+".bias", src(h+"mlp."+proj.name+".bias", proj.out))
			}
		}
	}
	norm("ln_f.weight", src("norm.weight", e))
	if !tied {
		add("head.weight", part{names: head, shape: []int{v, e}, head: true})
	}
	return l, nil
}

// moeExperts sets c's mixture of experts from the config of kind: Mixtral's (num_local_experts,
// default 8, num_experts_per_tok, default 2, the chosen experts' weights renormalised, each
// expert intermediate_size wide), Qwen3-MoE's (num_experts, default 128, num_experts_per_tok,
// default 8, norm_topk_prob, default false, each expert moe_intermediate_size wide, default 768),
// Qwen2-MoE's (Qwen3-MoE's with the defaults 60, 4 and 1408, plus the gated shared expert
// shared_expert_intermediate_size wide, default 5632) or OLMoE's (Qwen3-MoE's with the defaults
// 64 and 8, each expert intermediate_size wide). A Qwen config's num_experts 0 is a dense model;
// its dense layers among the sparse ones (decoder_sparse_step other than 1, mlp_only_layers) are
// refused.
func (hc *hfConfig) moeExperts(c *nn.Config, kind string) error {
	n, k, norm := orDefault(hc.NumLocalExperts, 8), orDefault(hc.NumExpertsPerTok, 2), true // MixtralConfig's
	width, name := c.FFN, "Qwen3-MoE"
	switch kind {
	case "mixtral":
	case "olmoe":
		n, k, norm = orDefault(hc.NumExperts, 64), orDefault(hc.NumExpertsPerTok, 8), orDefault(hc.NormTopKProb, false)
	default:
		n, k, width = orDefault(hc.NumExperts, 128), orDefault(hc.NumExpertsPerTok, 8), orDefault(hc.MoEIntermediateSize, 768)
		if kind == "qwen2_moe" {
			n, k, width, name = orDefault(hc.NumExperts, 60), orDefault(hc.NumExpertsPerTok, 4), orDefault(hc.MoEIntermediateSize, 1408), "Qwen2-MoE"
		}
		if n == 0 {
			return nil // the decoder layers' dense MLP in every layer
		}
		if step := orDefault(hc.DecoderSparseStep, 1); step != 1 || len(hc.MLPOnlyLayers) > 0 {
			return fmt.Errorf("%w: %s with dense layers among the sparse ones (decoder_sparse_step %d, mlp_only_layers %v)", ErrUnsupported, name, step, hc.MLPOnlyLayers)
		}
		sizes := map[string]int{"moe_intermediate_size": width}
		if kind == "qwen2_moe" {
			c.SharedExpert = orDefault(hc.SharedExpertIntermediateSize, 5632)
			sizes["shared_expert_intermediate_size"] = c.SharedExpert
		}
		if err := checkSizes(sizes); err != nil {
			return err
		}
		norm = orDefault(hc.NormTopKProb, false)
	}
	switch {
	case n < 1 || n > nn.MaxExperts:
		return fmt.Errorf("pretrained: the number of experts is %d, want 1 to %d", n, nn.MaxExperts)
	case k < 1 || k > n:
		return fmt.Errorf("pretrained: num_experts_per_tok is %d, want 1 to the %d experts", k, n)
	}
	c.FFN, c.Experts, c.ExpertsPerToken, c.NormTopK = width, n, k, norm
	return nil
}

// gemma3Defaults fills in what Gemma3TextConfig gives a config that leaves it out, as the text
// configs of Gemma 3's multimodal checkpoints do (gemma-3-4b-it's names only its hidden and
// intermediate sizes, layers, rope_scaling and sliding_window).
func (hc *hfConfig) gemma3Defaults() {
	for _, f := range []struct {
		v   *int
		def int
	}{{&hc.VocabSize, 262208}, {&hc.HiddenSize, 2304}, {&hc.IntermediateSize, 9216}, {&hc.NumHiddenLayers, 26},
		{&hc.NumAttentionHeads, 8}, {&hc.MaxPositionEmbeddings, 131072}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if hc.NumKeyValueHeads == nil {
		hc.NumKeyValueHeads = new(4)
	}
}

// decoderSizes reads a decoder's sizes from hc: hidden_size e, vocab_size v,
// num_attention_heads, num_hidden_layers, intermediate_size ffn (each checked), the K/V heads
// (num_key_value_heads, or one per head), and the longest sequence, max_position_embeddings
// bounded by nn.MaxSeqLen (nn.MaxSeqLen when the config leaves it out).
func (hc *hfConfig) decoderSizes() (e, v, heads, layers, ffn, kv, seq int, err error) {
	e, v, heads, layers, ffn = hc.HiddenSize, hc.VocabSize, hc.NumAttentionHeads, hc.NumHiddenLayers, hc.IntermediateSize
	if err = checkSizes(map[string]int{"hidden_size": e, "vocab_size": v, "num_attention_heads": heads, "num_hidden_layers": layers, "intermediate_size": ffn}); err != nil {
		return
	}
	if hc.MaxPositionEmbeddings < 0 {
		err = fmt.Errorf("pretrained: config.json's max_position_embeddings is %d, want > 0", hc.MaxPositionEmbeddings)
		return
	}
	kv, seq = heads, nn.MaxSeqLen
	if hc.NumKeyValueHeads != nil {
		kv = *hc.NumKeyValueHeads
	}
	if p := hc.MaxPositionEmbeddings; p > 0 {
		seq = min(p, nn.MaxSeqLen)
	}
	return
}

// partialRope returns rope rotating the first int(d · frac) features of heads of d, as
// Hugging Face's partial rotaries compute them (GPT-NeoX's rotary_pct, Phi's and Phi-3's
// partial_rotary_factor, the config key name): nil, rotating none, when that is 0, and an error
// for an odd count, whose frequencies' denominator (one more than the count) mha's rotary
// (θ^(−2p/n) over n rotated features) does not express.
func partialRope(rope *nn.Rope, d int, frac float64, name string) (*nn.Rope, error) {
	switch n := int(float64(d) * frac); {
	case n == 0:
		return nil, nil
	case n%2 != 0:
		return nil, fmt.Errorf("%w: %s %v of head_dim %d rotates an odd %d features", ErrUnsupported, name, frac, d, n)
	case n < d:
		rope.Dim = n
	}
	return rope, nil
}

// softcap reads a soft-cap field named name: def when it is left out, 0 (none) when null.
func softcap(raw json.RawMessage, name string, def float64) (float64, error) {
	if len(raw) == 0 {
		return def, nil
	}
	var p *float64
	if err := json.Unmarshal(raw, &p); err != nil {
		return 0, fmt.Errorf("pretrained: %s is %s, want a number or null", name, raw)
	}
	if p == nil {
		return 0, nil
	}
	if !(*p > 0 && *p <= math.MaxFloat32) {
		return 0, fmt.Errorf("pretrained: %s is %v, want a number > 0 finite in float32 (or null for none)", name, *p)
	}
	return *p, nil
}

// slidingWindow reads a sliding_window field: def when it is left out, 0 when null.
func slidingWindow(raw json.RawMessage, def int) (int, error) {
	if len(raw) == 0 {
		return def, nil
	}
	var p *int
	if err := json.Unmarshal(raw, &p); err != nil {
		return 0, fmt.Errorf("pretrained: sliding_window is %s, want a whole number or null", raw)
	}
	if p == nil {
		return 0, nil
	}
	if *p < 1 {
		return 0, fmt.Errorf("pretrained: sliding_window is %d, want a whole number ≥ 1 (or null for none)", *p)
	}
	return *p, nil
}

// gemmaLayers sets what Gemma 2 and 3 add to Gemma on c: the sandwich norms; the logit
// soft-caps (attn_logit_softcapping and final_logit_softcapping, 50 and 30 when Gemma 2's config
// leaves them out, none for Gemma 3's); Gemma 3's qk-norm; the sliding_attention layers
// (layer_types, or every layer but each sliding_window_pattern-th: 2 for Gemma 2, 6 for Gemma
// 3) as Local blocks with their window and, in Gemma 3, their rotary (rope_local_base_freq, or
// byType's sliding_attention parameters); and the score scale query_pre_attn_scalar^−½ for
// heads of d. Bidirectional attention (EmbeddingGemma's) is refused.
func gemmaLayers(hc *hfConfig, c *nn.Config, byType map[string]json.RawMessage, d int, gemma2 bool) error {
	if hc.UseBidirectionalAttention {
		return fmt.Errorf("%w: Gemma 3 with use_bidirectional_attention", ErrUnsupported)
	}
	attnCap, finalCap, pattern := 0.0, 0.0, 6
	if gemma2 {
		attnCap, finalCap, pattern = 50, 30, 2 // Gemma2Config's defaults; layers 0, 2, 4, … slide
	}
	var err error
	if c.AttnSoftcap, err = softcap(hc.AttnLogitSoftcapping, "attn_logit_softcapping", attnCap); err != nil {
		return err
	}
	if c.LogitSoftcap, err = softcap(hc.FinalLogitSoftcapping, "final_logit_softcapping", finalCap); err != nil {
		return err
	}
	c.SandwichNorm, c.QKNorm = true, !gemma2
	types := hc.LayerTypes
	if types == nil {
		// The configs' default: every pattern-th layer is global.
		if hc.SlidingWindowPattern != nil {
			pattern = *hc.SlidingWindowPattern
		}
		if pattern < 1 {
			return fmt.Errorf("pretrained: sliding_window_pattern is %d, want ≥ 1", pattern)
		}
		for i := range c.Layers {
			t := "sliding_attention"
			if (i+1)%pattern == 0 {
				t = "full_attention"
			}
			types = append(types, t)
		}
	}
	local, err := slidingLayers(types, c.Layers)
	if err != nil {
		return err
	}
	if slices.Contains(local, true) {
		w, err := slidingWindow(hc.SlidingWindow, 4096) // Gemma2Config's and Gemma3TextConfig's default
		if err != nil {
			return err
		}
		if w == 0 { // null: the sliding layers see every earlier position
			w = c.SeqLen
		}
		c.Local = &nn.Local{Layers: local, Window: min(w, c.SeqLen)}
		if !gemma2 { // Gemma 2's local layers rotate as its global ones
			rope, err := hc.ropeFrom(byType["sliding_attention"], "rope_parameters.sliding_attention", orDefault(hc.RopeLocalBaseFreq, 10000))
			if err != nil {
				return err
			}
			c.Local.Rope = rope
		}
	}
	q := orDefault(hc.QueryPreAttnScalar, 256)
	if !(q > 0) || math.IsInf(q, 0) {
		return fmt.Errorf("pretrained: query_pre_attn_scalar is %v, want a finite number > 0", q)
	}
	if q != float64(d) {
		c.HeadScales = slices.Repeat([]float64{math.Pow(q, -0.5)}, c.Heads)
	}
	return nil
}

// slidingLayers returns which of layers layers layer_types makes sliding_attention ones.
func slidingLayers(types []string, layers int) ([]bool, error) {
	if len(types) != layers {
		return nil, fmt.Errorf("pretrained: layer_types lists %d layers, want num_hidden_layers %d", len(types), layers)
	}
	local := make([]bool, layers)
	for i, t := range types {
		switch t {
		case "sliding_attention":
			local[i] = true
		case "full_attention":
		default:
			return nil, fmt.Errorf("%w: layer_types[%d] is %q (mha has sliding_attention and full_attention)", ErrUnsupported, i, t)
		}
	}
	return local, nil
}

// olmo3Layers sets OLMo 3's sliding layers in c: those layer_types calls sliding_attention (by
// default three of every four, all but layers 3, 7, …) attend in a window of sliding_window
// (default 4096) and rotate without the full layers' rope_scaling ("RoPE scaling is not applied
// to sliding window attention layers", modeling_olmo3.py; transformers v5's rope_parameters may
// give their rotary as sliding_attention).
func olmo3Layers(hc *hfConfig, c *nn.Config, byType map[string]json.RawMessage) error {
	types := hc.LayerTypes
	if types == nil {
		for i := range c.Layers {
			t := "sliding_attention"
			if (i+1)%4 == 0 {
				t = "full_attention"
			}
			types = append(types, t)
		}
	}
	local, err := slidingLayers(types, c.Layers)
	if err != nil || !slices.Contains(local, true) {
		return err
	}
	w, err := slidingWindow(hc.SlidingWindow, 4096)
	if err != nil {
		return err
	}
	if w == 0 { // null: the sliding layers see every earlier position
		w = c.SeqLen
	}
	c.Local = &nn.Local{Layers: local, Window: min(w, c.SeqLen)}
	switch {
	case byType["sliding_attention"] != nil:
		if c.Local.Rope, err = hc.ropeFrom(byType["sliding_attention"], "rope_parameters.sliding_attention", c.Rope.Theta); err != nil {
			return err
		}
	case c.Rope.Scaling != nil: // the full layers' base, unscaled
		c.Local.Rope = &nn.Rope{Theta: c.Rope.Theta}
	}
	return nil
}

// smolLM3Layers sets SmolLM3's NoPE layers and sliding window in c: no_rope_layers (its first
// num_hidden_layers flags: 1 rotates, 0 does not), else every no_rope_layer_interval-th layer
// (default 4) is NoPE; with use_sliding_window and a sliding_window, the layers layer_types
// calls sliding_attention (by default the NoPE ones) attend in that window, as SmolLM3Config
// and SmolLM3Attention do.
func smolLM3Layers(hc *hfConfig, c *nn.Config) error {
	nope := make([]bool, c.Layers)
	switch {
	case hc.NoRopeLayers != nil:
		if len(hc.NoRopeLayers) < c.Layers {
			return fmt.Errorf("pretrained: no_rope_layers lists %d layers, want at least num_hidden_layers %d", len(hc.NoRopeLayers), c.Layers)
		}
		for i := range nope {
			switch hc.NoRopeLayers[i] {
			case 0:
				nope[i] = true
			case 1:
			default:
				return fmt.Errorf("pretrained: no_rope_layers[%d] is %d, want 1 (rotary) or 0 (NoPE)", i, hc.NoRopeLayers[i])
			}
		}
	default:
		interval := 4
		if hc.NoRopeLayerInterval != nil {
			interval = *hc.NoRopeLayerInterval
		}
		if interval < 1 {
			return fmt.Errorf("pretrained: no_rope_layer_interval is %d, want ≥ 1", interval)
		}
		for i := range nope {
			nope[i] = (i+1)%interval == 0
		}
	}
	if slices.Contains(nope, true) {
		c.NoRope = nope
	}
	w, err := slidingWindow(hc.SlidingWindow, 0) // SmolLM3Config's default: none
	if err != nil || !hc.UseSlidingWindow || w == 0 {
		return err
	}
	types := hc.LayerTypes
	if types == nil {
		for _, n := range nope {
			t := "full_attention"
			if n {
				t = "sliding_attention"
			}
			types = append(types, t)
		}
	}
	local, err := slidingLayers(types, c.Layers)
	if err != nil {
		return err
	}
	if slices.Contains(local, true) {
		c.Local = &nn.Local{Layers: local, Window: min(w, c.SeqLen)}
	}
	return nil
}

// ropeFrom returns the rotary of base theta that params gives (a rope_scaling or
// rope_parameters object, named key in errors; null or left out for none): its rope_theta
// replaces theta, and its rope_type (or type) "llama3", "linear", "longrope" (in Phi-3 also
// "su" and "yarn", as Phi3Config renames them) or "yarn" scales the frequencies. LongRoPE's
// original length is config.json's original_max_position_embeddings (Phi-3's, 4096 when left
// out), else the object's, else max_position_embeddings; its attention factor the
// object's attention_factor, else √(1 + ln f / ln original) for f = max_position_embeddings /
// original_max_position_embeddings (Phi-3's) or the object's factor, 1 when f ≤ 1, as
// _compute_longrope_parameters computes it. YaRN's original length is the object's
// original_max_position_embeddings, else max_position_embeddings; its factor the object's,
// else max_position_embeddings over the original length; its attention factor the object's
// attention_factor, else, with mscale and mscale_all_dim (DeepSeek's), the ratio of
// 0.1·mscale·ln f + 1 to 0.1·mscale_all_dim·ln f + 1 (1 each for f ≤ 1), else mha's default
// 0.1·ln f + 1; truncate (default true) rounds its ramp's ends, as _compute_yarn_parameters
// does.
func (hc *hfConfig) ropeFrom(params json.RawMessage, key string, theta float64) (*nn.Rope, error) {
	rope := &nn.Rope{Theta: theta}
	if isNull(params) {
		return rope, nil
	}
	var sc struct {
		RopeType  string   `json:"rope_type"`
		Type      string   `json:"type"`
		RopeTheta *float64 `json:"rope_theta"`
		// YaRN's fields that mha.RopeScaling holds in another form.
		Truncate     *bool   `json:"truncate"`
		Mscale       float64 `json:"mscale"`
		MscaleAllDim float64 `json:"mscale_all_dim"`
		mha.RopeScaling
	}
	if err := json.Unmarshal(params, &sc); err != nil {
		return nil, fmt.Errorf("pretrained: %s is not the JSON object expected: %w", key, err)
	}
	rope.Theta = orDefault(sc.RopeTheta, rope.Theta)
	kind := cmp.Or(sc.RopeType, sc.Type, "default")
	if hc.phi3 && (kind == "su" || kind == "yarn") {
		kind = mha.RopeLongRoPE // Phi3Config reads older configs' names of its LongRoPE so
	}
	switch kind {
	case "default":
		return rope, nil
	case mha.RopeLlama3, mha.RopeLinear:
	case mha.RopeLongRoPE:
		orig, factor := sc.OriginalMaxPositions, sc.Factor
		p := hc.OriginalMaxPositionEmbeddings
		if p == nil && hc.phi3 {
			p = new(4096) // Phi3Config's default
		}
		if p != nil {
			orig, factor = *p, float64(hc.MaxPositionEmbeddings)/float64(*p)
		}
		if orig == 0 {
			orig = hc.MaxPositionEmbeddings
		}
		if orig <= 0 {
			return nil, fmt.Errorf("pretrained: %s of type longrope with original_max_position_embeddings %d, want > 0", key, orig)
		}
		sc.OriginalMaxPositions = orig
		if sc.AttentionFactor == 0 && factor > 1 {
			sc.AttentionFactor = math.Sqrt(1 + math.Log(factor)/math.Log(float64(orig)))
		}
	case mha.RopeYaRN:
		if sc.OriginalMaxPositions == 0 {
			sc.OriginalMaxPositions = hc.MaxPositionEmbeddings
		}
		if sc.OriginalMaxPositions <= 0 {
			return nil, fmt.Errorf("pretrained: %s of type yarn: original_max_position_embeddings is %d, want > 0", key, sc.OriginalMaxPositions)
		}
		if sc.Factor == 0 {
			sc.Factor = float64(hc.MaxPositionEmbeddings) / float64(sc.OriginalMaxPositions)
		}
		sc.UnroundedRamp = sc.Truncate != nil && !*sc.Truncate
		if sc.AttentionFactor == 0 && sc.Mscale != 0 && sc.MscaleAllDim != 0 {
			mscale := func(m float64) float64 {
				if sc.Factor <= 1 {
					return 1
				}
				return 0.1*m*math.Log(sc.Factor) + 1
			}
			sc.AttentionFactor = mscale(sc.Mscale) / mscale(sc.MscaleAllDim)
		}
	default:
		return nil, fmt.Errorf("%w: %s type %q (mha has default, llama3, linear, longrope and yarn)", ErrUnsupported, key, kind)
	}
	rope.Scaling = &sc.RopeScaling
	rope.Scaling.Type = kind
	return rope, nil
}

// isNull reports whether a config field was left out or is null.
func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
