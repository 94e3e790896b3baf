package pretrained

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// folders are the tiny Hugging Face folders testdata/gen_pretrained.py writes, with float64
// references after Hugging Face's modeling code.
var folders = []string{"gpt2", "gpt2-prefixed-f16-sharded", "bert", "bert-gamma-beta", "llama", "llama3-bf16", "qwen2", "mistral", "qwen3-bf16", "qwen3-wide", "gemma", "phi3", "phi3-longrope", "gemma2", "gemma3", "gemma3-vision", "pythia", "gpt-neox-sequential", "phi2", "roberta", "distilbert", "stablelm2", "qwen3-yarn", "smollm3", "gptj", "mixtral", "qwen3-moe-bf16", "qwen2-moe", "starcoder2", "falcon", "falcon-new-arch", "olmo2", "olmoe-bf16", "olmo3", "gpt-bigcode"}

func testdataDir(name string) string { return filepath.Join("..", "testdata", "pretrained", name) }

// int64s reads an I64 tensor of an expected file as ints.
func int64s(t *testing.T, f *safetensors.File, name string) ([]int, []int) {
	t.Helper()
	v, shape, err := f.Float64(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out, shape
}

// TestOpenMatchesReference opens every folder and checks the logits, the final hidden states and
// every layer's attention weights against the float64 reference.
func TestOpenMatchesReference(t *testing.T) {
	for _, name := range folders {
		t.Run(name, func(t *testing.T) {
			m, err := Open(testdataDir(name))
			if err != nil {
				t.Fatal(err)
			}
			exp, err := safetensors.ReadFile(filepath.Join(testdataDir(name), "expected.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			ids, shape := int64s(t, exp, "input_ids")
			opt := &nn.RunOptions{KeepWeights: true}
			if exp.Has("attention_mask") {
				am, _ := int64s(t, exp, "attention_mask")
				opt.Padding = make([]bool, len(am))
				for i, a := range am {
					opt.Padding[i] = a == 0
				}
			}
			if exp.Has("token_type_ids") {
				opt.TokenTypes, _ = int64s(t, exp, "token_type_ids")
			}
			logits, err := m.NN.Forward(ids, shape[0], shape[1], opt)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got *tensor.Tensor, want string) {
				t.Helper()
				w, wshape, err := exp.Float64(want)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Data) != len(w) {
					t.Fatalf("%s: %v values, want %v", what, got.Shape, wshape)
				}
				if e := tensor.RelError(got.Data, w); e > 1e-5 {
					t.Errorf("%s: relative error %.3g against the reference, want ≤ 1e-5", what, e)
				}
			}
			check("logits", logits, "logits")
			check("hidden", m.NN.Hidden(), "hidden")
			for l := range m.NN.Config().Layers {
				check("attentions."+strconv.Itoa(l), m.NN.Weights(l), "attentions."+strconv.Itoa(l))
			}
		})
	}
}

// TestOpenUnused checks which tensors a folder leaves unread: GPT-2's mask buffers, a stored
// tied head, BERT's tied decoder.
func TestOpenUnused(t *testing.T) {
	for name, want := range map[string]int{"gpt2": 4, "gpt2-prefixed-f16-sharded": 1, "bert": 2, "llama": 0} {
		m, err := Open(testdataDir(name))
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Unused) != want {
			t.Errorf("%s: unused %v, want %d of them", name, m.Unused, want)
		}
	}
}

// copyFolder copies the files of testdata folder name into a new temporary folder, except those
// in skip, and returns it.
func copyFolder(t testing.TB, name string, skip ...string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(testdataDir(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if slices.Contains(skip, e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(testdataDir(name), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// editConfig copies testdata folder name into a new temporary folder, changes its config.json
// with change, and returns the folder.
func editConfig(t *testing.T, name string, change func(cfg map[string]any)) string {
	t.Helper()
	dir := copyFolder(t, name)
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	change(cfg)
	data, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// editTensors copies testdata folder name into a new temporary folder, rewrites its
// model.safetensors with edit (which may rename, change or delete the tensors, by name), and
// returns the folder.
func editTensors(t *testing.T, name string, edit func(tensors map[string]safetensors.Tensor)) string {
	t.Helper()
	dir := copyFolder(t, name)
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]safetensors.Tensor{}
	for _, n := range f.Names() {
		tensors[n], _ = f.Raw(n)
	}
	edit(tensors)
	if err := safetensors.WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openLogits opens dir and returns the model and its logits on the token ids 1 … 6.
func openLogits(t *testing.T, dir string) (*Model, []float32) {
	t.Helper()
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.NN.Forward([]int{1, 2, 3, 4, 5, 6}, 1, 6, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, slices.Clone(logits.Data)
}

// TestOpenConfigForms checks config.json fields against what transformers does with them:
// transformers v5's rope_parameters (rope_theta and rope_scaling in one) gives the logits of the
// v4 fields; Llama's attention ignores sliding_window and Mistral's defaults it to 4096 (and takes
// one as long as its context); BERT's
// masked-LM decoder is its own when tie_word_embeddings is false.
func TestOpenConfigForms(t *testing.T) {
	logits := func(dir string) []float32 {
		_, l := openLogits(t, dir)
		return l
	}
	for _, name := range []string{"llama", "llama3-bf16"} {
		want := logits(testdataDir(name))
		v5 := editConfig(t, name, func(c map[string]any) {
			p, _ := c["rope_scaling"].(map[string]any)
			if p == nil {
				p = map[string]any{"rope_type": "default"}
			}
			p["rope_theta"] = c["rope_theta"]
			c["rope_parameters"] = p
			delete(c, "rope_scaling")
			delete(c, "rope_theta")
		})
		if got := logits(v5); !slices.Equal(got, want) {
			t.Errorf("%s with rope_parameters: the logits differ from those of rope_theta and rope_scaling", name)
		}
	}
	dynamic := editConfig(t, "llama", func(c map[string]any) { c["rope_parameters"] = map[string]any{"rope_type": "dynamic", "factor": 2} })
	if _, err := Open(dynamic); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `rope_parameters type "dynamic"`) {
		t.Errorf("rope_parameters of type dynamic: %v, want ErrUnsupported", err)
	}

	if got, want := logits(editConfig(t, "llama", func(c map[string]any) { c["sliding_window"] = 2 })), logits(testdataDir("llama")); !slices.Equal(got, want) {
		t.Error("Llama with sliding_window: the logits changed, while transformers' Llama attention ignores it")
	}
	// (A window of 131072 keys, as long as the context, is past nn.MaxDim.)
	for _, c := range []struct {
		value any
		want  int
	}{{nil, 0}, {"absent", 64}, {3, 3}, {131072, 131072}} {
		dir := editConfig(t, "mistral", func(cfg map[string]any) {
			if c.value == "absent" {
				delete(cfg, "sliding_window")
			} else {
				cfg["sliding_window"] = c.value
			}
			if c.value == 131072 {
				cfg["max_position_embeddings"] = 131072
			}
		})
		if m, _ := openLogits(t, dir); m.NN.Config().Window != c.want {
			w := m.NN.Config().Window
			t.Errorf("Mistral with sliding_window %v: window %d, want %d", c.value, w, c.want)
		}
	}

	// An untied BERT decoder of −3 × the word embeddings: logits' = −3·(logits − bias) + bias.
	tied, want := openLogits(t, testdataDir("bert"))
	bias := tied.NN.Param("head.bias").Value.Data
	dir := editConfig(t, "bert", func(c map[string]any) { c["tie_word_embeddings"] = false })
	f, err := safetensors.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]safetensors.Tensor{}
	for _, name := range f.Names() {
		tensors[name], _ = f.Raw(name)
	}
	emb, err := f.Float32("bert.embeddings.word_embeddings.weight")
	if err != nil {
		t.Fatal(err)
	}
	for i := range emb.Data {
		emb.Data[i] *= -3
	}
	tensors["cls.predictions.decoder.weight"] = safetensors.FromFloat32(emb)
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	untied, got := openLogits(t, dir)
	if len(untied.Unused) != 1 {
		t.Errorf("untied BERT leaves %v unread, want only the decoder's bias copy", untied.Unused)
	}
	for i, x := range want {
		b := bias[i%len(bias)]
		if w := -3*(x-b) + b; math.Abs(float64(got[i]-w)) > 1e-4*(1+math.Abs(float64(w))) {
			t.Fatalf("untied BERT logit %d: %v, want %v", i, got[i], w)
		}
	}
}

// TestOpenErrors checks that a folder mha cannot run gives one error saying what was expected
// and what came.
func TestOpenErrors(t *testing.T) {
	edit := func(name string, change func(cfg map[string]any)) string { return editConfig(t, name, change) }
	// The llama folder with model.norm.weight stored as dtype.
	stored := func(dtype safetensors.DType) string {
		return editTensors(t, "llama", func(tensors map[string]safetensors.Tensor) {
			norm := tensors["model.norm.weight"]
			norm.DType, norm.Data = dtype, make([]byte, norm.Shape[0]*dtype.Size())
			tensors["model.norm.weight"] = norm
		})
	}
	for _, c := range []struct {
		name, dir, want string
		unsupported     bool
	}{
		{"no folder", filepath.Join(t.TempDir(), "none"), "no such file", false},
		{"no config", copyFolder(t, "gpt2", "config.json"), "config.json: no such file", false},
		{"no weights", copyFolder(t, "gpt2", "model.safetensors"), "neither model.safetensors nor model.safetensors.index.json", false},
		{"no shard", copyFolder(t, "llama3-bf16", "model-00002-of-00002.safetensors"), "model-00002-of-00002.safetensors", false},
		{"architecture", edit("gpt2", func(c map[string]any) { c["architectures"] = []string{"T5ForConditionalGeneration"} }), `architecture "T5ForConditionalGeneration"`, true},
		{"model type", edit("gpt2", func(c map[string]any) { delete(c, "architectures"); c["model_type"] = "t5" }), `model_type "t5"`, true},
		{"nothing", edit("gpt2", func(c map[string]any) { delete(c, "architectures"); delete(c, "model_type") }), "no architectures and no model_type", false},
		{"shape", edit("gpt2", func(c map[string]any) { c["n_embd"] = 32 }), "wte.weight in model.safetensors is [265 16], want [265 32]", false},
		{"missing tensor", edit("llama", func(c map[string]any) { c["num_hidden_layers"] = 3 }), "no tensor model.layers.2.input_layernorm.weight [16]", false},
		{"extra tensor", edit("llama", func(c map[string]any) { c["num_hidden_layers"] = 1 }), "model.layers.1.input_layernorm.weight in model.safetensors is not part of", false},
		{"size", edit("bert", func(c map[string]any) { c["num_attention_heads"] = 0 }), "num_attention_heads is 0", false},
		{"activation", edit("gpt2", func(c map[string]any) { c["activation_function"] = "relu" }), `activation_function "relu"`, true},
		{"rope scaling", edit("llama", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "dynamic", "factor": 2} }), `rope_scaling type "dynamic"`, true},
		{"rope parameters", edit("llama", func(c map[string]any) { c["rope_parameters"] = "fast" }), "rope_parameters is not the JSON object expected", false},
		{"sliding window", edit("mistral", func(c map[string]any) { c["sliding_window"] = "four" }), `sliding_window is "four", want a whole number or null`, false},
		{"qwen3 head_dim", edit("qwen3-bf16", func(c map[string]any) { c["head_dim"] = 8 }), "model.layers.0.self_attn.q_proj.weight in model.safetensors is [16 16], want [32 16]", false},
		{"gemma activation", edit("gemma", func(c map[string]any) { c["hidden_activation"] = "gelu" }), `hidden_activation "gelu" (mha's GeGLU is gelu_pytorch_tanh)`, true},
		{"gemma head_dim 256", edit("gemma", func(c map[string]any) { delete(c, "head_dim") }), "model.layers.0.self_attn.q_proj.weight in model.safetensors is [32 16], want [1024 16]", false},
		{"phi3 partial rotary", edit("phi3", func(c map[string]any) { c["partial_rotary_factor"] = 1.5 }), "partial_rotary_factor is 1.5, want a fraction in (0, 1]", false},
		{"phi3 odd rotary", edit("phi3", func(c map[string]any) { c["partial_rotary_factor"] = 0.25 }), "partial_rotary_factor 0.25 of head_dim 4 rotates an odd 1 features", true},
		{"gemma hidden_act", edit("gemma", func(c map[string]any) { delete(c, "hidden_activation"); c["hidden_act"] = "relu" }), `Gemma with hidden_act "relu" and no hidden_activation`, true},
		{"gemma3 soft-cap", edit("gemma3", func(c map[string]any) { c["attn_logit_softcapping"] = "fifty" }), `attn_logit_softcapping is "fifty", want a number or null`, false},
		{"gemma3 final soft-cap", edit("gemma3", func(c map[string]any) { c["final_logit_softcapping"] = -30.0 }), "final_logit_softcapping is -30, want a number > 0 finite in float32 (or null for none)", false},
		{"gemma3 bidirectional", edit("gemma3", func(c map[string]any) { c["use_bidirectional_attention"] = true }), "Gemma 3 with use_bidirectional_attention", true},
		{"gemma3 layer type", edit("gemma3", func(c map[string]any) {
			c["layer_types"] = []string{"full_attention", "chunked_attention", "full_attention"}
		}), `layer_types[1] is "chunked_attention"`, true},
		{"gemma3 layer types", edit("gemma3", func(c map[string]any) { c["layer_types"] = []string{"full_attention"} }), "layer_types lists 1 layers, want num_hidden_layers 3", false},
		{"gemma3 pattern", edit("gemma3", func(c map[string]any) { c["sliding_window_pattern"] = 0 }), "sliding_window_pattern is 0, want ≥ 1", false},
		{"gemma3 scalar", edit("gemma3", func(c map[string]any) { c["query_pre_attn_scalar"] = 0 }), "query_pre_attn_scalar is 0, want a finite number > 0", false},
		{"gemma3 window", edit("gemma3", func(c map[string]any) { c["sliding_window"] = 0 }), "sliding_window is 0, want a whole number ≥ 1 (or null for none)", false},
		{"gemma3 local rope", edit("gemma3", func(c map[string]any) {
			delete(c, "rope_scaling")
			c["rope_parameters"] = map[string]any{"full_attention": map[string]any{"rope_type": "default"}, "sliding_attention": map[string]any{"rope_type": "dynamic"}}
		}), `rope_parameters.sliding_attention type "dynamic"`, true},
		{"neox activation", edit("pythia", func(c map[string]any) { c["hidden_act"] = "relu" }), `GPT-NeoX hidden_act "relu"`, true},
		{"neox odd rotary", edit("pythia", func(c map[string]any) { c["rotary_pct"] = 0.375 }), "rotary_pct 0.375 of head_dim 8 rotates an odd 3 features", true},
		{"neox rotary", edit("pythia", func(c map[string]any) { c["rotary_pct"] = 2 }), "rotary_pct is 2, want a fraction in [0, 1]", false},
		{"neox heads", edit("pythia", func(c map[string]any) { c["num_attention_heads"] = 3 }), "hidden_size 16 is not divisible by num_attention_heads 3", false},
		{"neox no bias", edit("pythia", func(c map[string]any) { c["attention_bias"] = false }), "gpt_neox.layers.0.attention.dense.bias in model.safetensors is not part of", false},
		{"phi qk_layernorm", edit("phi2", func(c map[string]any) { c["qk_layernorm"] = true }), "Phi with qk_layernorm", true},
		{"phi activation", edit("phi2", func(c map[string]any) { c["hidden_act"] = "relu" }), `Phi hidden_act "relu"`, true},
		{"phi odd rotary", edit("phi2", func(c map[string]any) { c["partial_rotary_factor"] = 0.375 }), "partial_rotary_factor 0.375 of head_dim 8 rotates an odd 3 features", true},
		{"phi kv heads", edit("phi2", func(c map[string]any) { c["num_key_value_heads"] = 3 }), "num_key_value_heads 3 does not divide num_attention_heads 2", false},
		{"distilbert activation", edit("distilbert", func(c map[string]any) { c["activation"] = "relu" }), `DistilBERT activation "relu"`, true},
		{"distilbert heads", edit("distilbert", func(c map[string]any) { c["n_heads"] = 3 }), "dim 16 is not divisible by n_heads 3", false},
		{"distilbert size", edit("distilbert", func(c map[string]any) { delete(c, "dim") }), "dim is 0", false},
		{"stablelm qk_layernorm", edit("stablelm2", func(c map[string]any) { c["qk_layernorm"] = true }), "StableLM with qk_layernorm", true},
		{"stablelm activation", edit("stablelm2", func(c map[string]any) { c["hidden_act"] = "relu" }), `StableLM hidden_act "relu"`, true},
		{"stablelm parallel", edit("stablelm2", func(c map[string]any) { c["use_parallel_residual"] = true }), "post_attention_layernorm.bias in model.safetensors is not part of", false},
		{"roberta head activation", edit("roberta", func(c map[string]any) { c["hidden_act"] = "gelu_new" }), `a RoBERTa masked-LM head with hidden_act "gelu_new"`, true},
		{"roberta padding id", edit("roberta", func(c map[string]any) { c["pad_token_id"] = "one" }), `pad_token_id is "one", want a token id`, false},
		{"roberta padding", edit("roberta", func(c map[string]any) { c["pad_token_id"] = 17 }), "pad_token_id 17 leaves RoBERTa's max_position_embeddings 18 no positions", false},
		{"phi3 ffn", edit("phi3", func(c map[string]any) { c["intermediate_size"] = 20 }), "model.layers.0.mlp.gate_up_proj.weight in model.safetensors is [56 16], want [40 16]", false},
		{"llama partial rotary", edit("llama", func(c map[string]any) { c["partial_rotary_factor"] = 0.5 }), "partial_rotary_factor 0.5", true},
		{"head_dim 0", edit("qwen3-wide", func(c map[string]any) { c["head_dim"] = 0 }), "head_dim is 0, want a size in [1, 65536]", false},
		{"no head_dim", edit("llama", func(c map[string]any) {
			c["num_attention_heads"] = 3
			c["num_key_value_heads"] = 1
		}), "hidden_size 16 is not divisible by num_attention_heads 3 (and config.json gives no head_dim)", false},
		{"qwen3 head_dim 128", edit("qwen3-wide", func(c map[string]any) { delete(c, "head_dim") }), "model.layers.0.self_attn.q_proj.weight in model.safetensors is [32 16], want [512 16]", false},
		{"model_type wins", edit("qwen3-wide", func(c map[string]any) { c["model_type"] = "llama" }), "self_attn.k_norm.weight in model.safetensors is not part of", false},
		{"qwen3 sliding window", edit("qwen3-bf16", func(c map[string]any) { c["use_sliding_window"] = true }), "Qwen3 with use_sliding_window", true},
		{"qwen3 no q_norm", edit("qwen3-bf16", func(c map[string]any) { c["architectures"] = []string{"Qwen2ForCausalLM"}; c["model_type"] = "qwen2" }), "no tensor model.layers.0.self_attn.q_proj.bias", false},
		{"bad json", edit("llama", func(c map[string]any) { c["hidden_size"] = "sixteen" }), "config.json is not the JSON expected", false},
		{"heads", edit("llama", func(c map[string]any) { c["num_key_value_heads"] = 3 }), "num_key_value_heads 3 does not divide", false},
		{"integer weights", stored(safetensors.I64), "model.norm.weight in model.safetensors is I64, want F32, F16 or BF16", false},
		{"bool weights", stored(safetensors.Bool), "model.norm.weight in model.safetensors is BOOL, want F32, F16 or BF16", false},
		{"float64 weights", stored(safetensors.F64), "model.norm.weight in model.safetensors is F64, want F32, F16 or BF16", false},
		// The config is checked before the weights are read: the missing layer is not reached.
		{"config first", edit("llama", func(c map[string]any) { c["num_hidden_layers"] = 3; c["rms_norm_eps"] = 2 }), "norm_eps is 2", false},
	} {
		_, err := Open(c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
			continue
		}
		if errors.Is(err, ErrUnsupported) != c.unsupported {
			t.Errorf("%s: errors.Is(err, ErrUnsupported) = %v", c.name, !c.unsupported)
		}
	}
	// What Hugging Face's classes ignore or read as nothing, so do these: Mistral's MLP has no
	// biases whatever mlp_bias says; a partial_rotary_factor that rotates no feature of Phi-3's
	// heads leaves them unrotated.
	if m, err := Open(edit("mistral", func(c map[string]any) { c["mlp_bias"] = true })); err != nil || !m.NN.Config().NoMLPBias {
		t.Errorf("Mistral with mlp_bias: %v", err)
	}
	if m, err := Open(edit("phi3", func(c map[string]any) { c["partial_rotary_factor"] = 0.1 })); err != nil || m.NN.Config().Rope != nil {
		t.Errorf("Phi-3 rotating int(4 · 0.1) = 0 features: %v, want a model without rotary", err)
	}
}

// TestOpenGemma3Configs checks that the spellings of a Gemma 3 config that transformers'
// versions write open as the same model: layer_types in place of sliding_window_pattern, and
// v5's rope_parameters per layer type in place of rope_theta, rope_scaling and
// rope_local_base_freq; and that a query_pre_attn_scalar of head_dim leaves the default scale.
func TestOpenGemma3Configs(t *testing.T) {
	base, err := Open(testdataDir("gemma3"))
	if err != nil {
		t.Fatal(err)
	}
	want := base.NN.Config()
	if want.Local == nil || !slices.Equal(want.Local.Layers, []bool{true, false, true}) || want.Local.Window != 4 || !want.SandwichNorm || !want.QKNorm {
		t.Fatalf("gemma3 config %+v, want local blocks 0 and 2 of window 4, sandwich norms and qk-norm", want)
	}
	for name, change := range map[string]func(map[string]any){
		"layer_types": func(c map[string]any) {
			delete(c, "sliding_window_pattern")
			c["layer_types"] = []string{"sliding_attention", "full_attention", "sliding_attention"}
		},
		"rope_parameters": func(c map[string]any) {
			delete(c, "rope_theta")
			delete(c, "rope_scaling")
			delete(c, "rope_local_base_freq")
			c["rope_parameters"] = map[string]any{
				"full_attention":    map[string]any{"rope_type": "linear", "factor": 4.0, "rope_theta": 500.0},
				"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10.0},
			}
		},
	} {
		m, err := Open(editConfig(t, "gemma3", change))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := m.NN.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: config %+v, want %+v", name, got, want)
		}
	}
	m, err := Open(editConfig(t, "gemma3", func(c map[string]any) { c["query_pre_attn_scalar"] = 8 }))
	if err != nil || m.NN.Config().HeadScales != nil {
		t.Errorf("query_pre_attn_scalar = head_dim: %v, want the default scale", err)
	}
	if want.HeadScales == nil || want.HeadScales[0] != math.Pow(6, -0.5) {
		t.Errorf("query_pre_attn_scalar 6: head scales %v, want 6^-0.5 each", want.HeadScales)
	}
}

// TestOpenLongRoPE checks Phi-3's LongRoPE in the regime that the folder's reference does not
// reach: a call whose positions end within original_max_position_embeddings (6 of 8) rotates
// with the short factors, and the logits match the reference's for it; the folder's 10 positions
// (TestOpenMatchesReference) take the long ones. The attention factor is √(1 + ln 8 / ln 8).
func TestOpenLongRoPE(t *testing.T) {
	m, err := Open(testdataDir("phi3-longrope"))
	if err != nil {
		t.Fatal(err)
	}
	s := m.NN.Config().Rope.Scaling
	if s == nil || s.Type != "longrope" || s.OriginalMaxPositions != 8 || math.Abs(s.AttentionFactor-math.Sqrt2) > 1e-15 || m.NN.Config().Rope.Dim != 6 {
		t.Fatalf("rope %+v, scaling %+v: want LongRoPE over 6 dimensions, original length 8, attention factor √2", m.NN.Config().Rope, s)
	}
	exp, err := safetensors.ReadFile(filepath.Join(testdataDir("phi3-longrope"), "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ids, shape := int64s(t, exp, "short.input_ids")
	want, _, err := exp.Float64("short.logits")
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.NN.Forward(ids, shape[0], shape[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := tensor.RelError(got.Data, want); e > 1e-5 {
		t.Errorf("6 positions: relative error %.3g against the reference, want ≤ 1e-5", e)
	}
	// Phi3Config's defaults: an original length of 4096 when the config leaves it out, and the
	// LongRoPE of older configs called "su" or "yarn".
	def, err := Open(editConfig(t, "phi3-longrope", func(c map[string]any) {
		delete(c, "original_max_position_embeddings")
		c["max_position_embeddings"] = 8192
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s := def.NN.Config().Rope.Scaling; s.OriginalMaxPositions != 4096 || math.Abs(s.AttentionFactor-math.Sqrt(1+math.Ln2/math.Log(4096))) > 1e-15 {
		t.Errorf("no original_max_position_embeddings: %+v, want 4096 and √(1 + ln 2 / ln 4096)", s)
	}
	for _, name := range []string{"su", "yarn"} {
		m2, err := Open(editConfig(t, "phi3-longrope", func(c map[string]any) { c["rope_scaling"].(map[string]any)["type"] = name }))
		if err != nil || !reflect.DeepEqual(m2.NN.Config(), m.NN.Config()) {
			t.Errorf("rope_scaling type %q: %v, want the LongRoPE model", name, err)
		}
	}
}

// TestOpenYaRN checks how rope_scaling's YaRN fields read (the qwen3-yarn folder's reference
// checks the model it opens): what the object leaves out takes _compute_yarn_parameters'
// defaults (the original length max_position_embeddings, the factor their ratio), mscale and
// mscale_all_dim give DeepSeek's attention factor, truncate false an unrounded ramp, and
// transformers v5's rope_parameters opens the same model.
func TestOpenYaRN(t *testing.T) {
	m, err := Open(testdataDir("qwen3-yarn"))
	if err != nil {
		t.Fatal(err)
	}
	want := mha.RopeScaling{Type: mha.RopeYaRN, Factor: 4, OriginalMaxPositions: 4096}
	if s := m.NN.Config().Rope.Scaling; s == nil || !reflect.DeepEqual(*s, want) {
		t.Fatalf("scaling %+v, want %+v", s, want)
	}
	for _, c := range []struct {
		name string
		edit func(sc map[string]any)
		want mha.RopeScaling
	}{
		{"defaults", func(sc map[string]any) {
			delete(sc, "factor")
			delete(sc, "original_max_position_embeddings")
		}, mha.RopeScaling{Type: mha.RopeYaRN, Factor: 1, OriginalMaxPositions: 64}},
		{"deepseek", func(sc map[string]any) {
			sc["mscale"], sc["mscale_all_dim"], sc["truncate"], sc["beta_fast"], sc["beta_slow"] = 0.5, 2.0, false, 16.0, 2.0
		},
			mha.RopeScaling{Type: mha.RopeYaRN, Factor: 4, OriginalMaxPositions: 4096, BetaFast: 16, BetaSlow: 2, UnroundedRamp: true,
				AttentionFactor: (0.05*math.Log(4) + 1) / (0.2*math.Log(4) + 1)}},
		{"attention_factor wins", func(sc map[string]any) { sc["mscale"], sc["mscale_all_dim"], sc["attention_factor"] = 0.5, 2.0, 1.5 },
			mha.RopeScaling{Type: mha.RopeYaRN, Factor: 4, OriginalMaxPositions: 4096, AttentionFactor: 1.5}},
	} {
		m2, err := Open(editConfig(t, "qwen3-yarn", func(cfg map[string]any) { c.edit(cfg["rope_scaling"].(map[string]any)) }))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s := m2.NN.Config().Rope.Scaling; !reflect.DeepEqual(*s, c.want) {
			t.Errorf("%s: scaling %+v, want %+v", c.name, *s, c.want)
		}
	}
	v5, err := Open(editConfig(t, "qwen3-yarn", func(cfg map[string]any) {
		sc := cfg["rope_scaling"].(map[string]any)
		sc["rope_theta"] = cfg["rope_theta"]
		delete(cfg, "rope_scaling")
		delete(cfg, "rope_theta")
		cfg["rope_parameters"] = sc
	}))
	if err != nil || !reflect.DeepEqual(v5.NN.Config(), m.NN.Config()) {
		t.Errorf("rope_parameters: %v, want the same model", err)
	}
	if _, err := Open(editConfig(t, "qwen3-yarn", func(cfg map[string]any) {
		cfg["rope_scaling"].(map[string]any)["original_max_position_embeddings"] = -3
	})); err == nil || !strings.Contains(err.Error(), "original_max_position_embeddings is -3") {
		t.Errorf("original length -3: %v", err)
	}
}

// TestOpenSmolLM3 checks how SmolLM3's NoPE layers and sliding window read (the smollm3
// folder's reference checks the model it opens: layer 1 NoPE and sliding): no_rope_layers may
// list more layers than the model has, no_rope_layer_interval (default 4) makes every such
// layer NoPE when the list is left out, the window needs use_sliding_window and a
// sliding_window, and layer_types says which layers slide; bad values are refused.
func TestOpenSmolLM3(t *testing.T) {
	m, err := Open(testdataDir("smollm3"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.NN.Config(); !slices.Equal(c.NoRope, []bool{false, true, false}) || c.Local == nil ||
		!slices.Equal(c.Local.Layers, []bool{false, true, false}) || c.Local.Window != 4 || c.Local.Rope != nil || !c.TieEmbeddings {
		t.Fatalf("no_rope %v, local %+v, tied %v: want layer 1 NoPE and sliding in a window of 4, tied", c.NoRope, c.Local, c.TieEmbeddings)
	}
	for _, c := range []struct {
		name   string
		edit   func(cfg map[string]any)
		nope   []bool
		local  []bool
		errMsg string
	}{
		{"longer list", func(cfg map[string]any) { cfg["no_rope_layers"] = []int{1, 0, 1, 1, 0} }, []bool{false, true, false}, []bool{false, true, false}, ""},
		{"interval", func(cfg map[string]any) { delete(cfg, "no_rope_layers"); cfg["no_rope_layer_interval"] = 2 }, []bool{false, true, false}, []bool{false, true, false}, ""},
		{"default interval", func(cfg map[string]any) { delete(cfg, "no_rope_layers") }, nil, nil, ""},
		{"no use_sliding_window", func(cfg map[string]any) { cfg["use_sliding_window"] = false }, []bool{false, true, false}, nil, ""},
		{"null window", func(cfg map[string]any) { cfg["sliding_window"] = nil }, []bool{false, true, false}, nil, ""},
		{"layer_types", func(cfg map[string]any) {
			cfg["layer_types"] = []string{"sliding_attention", "full_attention", "sliding_attention"}
		}, []bool{false, true, false}, []bool{true, false, true}, ""},
		{"short list", func(cfg map[string]any) { cfg["no_rope_layers"] = []int{1, 0} }, nil, nil, "no_rope_layers lists 2 layers, want at least num_hidden_layers 3"},
		{"flag 2", func(cfg map[string]any) { cfg["no_rope_layers"] = []int{1, 2, 1} }, nil, nil, "no_rope_layers[1] is 2, want 1 (rotary) or 0 (NoPE)"},
		{"interval 0", func(cfg map[string]any) { delete(cfg, "no_rope_layers"); cfg["no_rope_layer_interval"] = 0 }, nil, nil, "no_rope_layer_interval is 0, want ≥ 1"},
		{"bad layer type", func(cfg map[string]any) {
			cfg["layer_types"] = []string{"full_attention", "chunked_attention", "full_attention"}
		}, nil, nil, `layer_types[1] is "chunked_attention"`},
	} {
		m2, err := Open(editConfig(t, "smollm3", c.edit))
		if c.errMsg != "" {
			if err == nil || !strings.Contains(err.Error(), c.errMsg) {
				t.Errorf("%s: %v, want an error containing %q", c.name, err, c.errMsg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := m2.NN.Config()
		var local []bool
		if got.Local != nil {
			local = got.Local.Layers
		}
		if !slices.Equal(got.NoRope, c.nope) || !slices.Equal(local, c.local) {
			t.Errorf("%s: no_rope %v, local %v; want %v, %v", c.name, got.NoRope, local, c.nope, c.local)
		}
	}
}

// TestOpenNeoX checks what the GPT-NeoX and Phi folders' references do not: the buffers older
// checkpoints carry are skipped and listed; transformers v5's names of the rotary's fraction and
// base open the same model; a bare GPTNeoXModel reads no embed_out, a bare PhiModel no lm_head.
func TestOpenNeoX(t *testing.T) {
	m, err := Open(testdataDir("gpt-neox-sequential"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Unused) != 6 || !strings.HasSuffix(m.Unused[0], "attention.bias") {
		t.Errorf("unused %q, want each layer's attention.bias, masked_bias and rotary_emb.inv_freq", m.Unused)
	}
	base, err := Open(testdataDir("pythia"))
	if err != nil {
		t.Fatal(err)
	}
	// GPT-NeoX-20B's hidden_act, gelu_fast, is GELU's tanh form.
	if fast, err := Open(editConfig(t, "pythia", func(c map[string]any) { c["hidden_act"] = "gelu_fast" })); err != nil || fast.NN.Config().Activation != nn.GELUNew {
		t.Errorf("gelu_fast: %v, want the model with gelu_new", err)
	}
	v5, err := Open(editConfig(t, "pythia", func(c map[string]any) {
		c["partial_rotary_factor"], c["rope_theta"] = c["rotary_pct"], c["rotary_emb_base"]
		delete(c, "rotary_pct")
		delete(c, "rotary_emb_base")
	}))
	if err != nil || !reflect.DeepEqual(v5.NN.Config(), base.NN.Config()) {
		t.Errorf("transformers v5's names: %v, config %+v, want %+v", err, v5.NN.Config(), base.NN.Config())
	}
	bare, err := Open(editConfig(t, "pythia", func(c map[string]any) { c["architectures"] = []string{"GPTNeoXModel"} }))
	if err != nil || bare.LMHead || !bare.NN.Config().TieEmbeddings || !slices.Equal(bare.Unused, []string{"embed_out.weight"}) {
		t.Errorf("GPTNeoXModel: %v, LM head %v, unused %q; want no LM head and embed_out unused", err, bare != nil && bare.LMHead, bare.Unused)
	}
	// A bare PhiModel folder, without lm_head: its model's head is the embedding, with no bias.
	dir := editTensors(t, "phi2", func(tensors map[string]safetensors.Tensor) {
		delete(tensors, "lm_head.weight")
		delete(tensors, "lm_head.bias")
	})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["PhiModel"],"model_type":"phi","vocab_size":265,"hidden_size":16,"intermediate_size":24,"num_hidden_layers":2,"num_attention_heads":2,"partial_rotary_factor":0.5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	phi, err := Open(dir)
	if err != nil || phi.LMHead || !phi.NN.Config().TieEmbeddings || slices.ContainsFunc(phi.NN.Param("head.bias").Value.Data, func(x float32) bool { return x != 0 }) {
		t.Errorf("PhiModel: %v; want a model without an LM head, tied, its head's bias zero", err)
	}
}

// TestOpenMoE checks how the mixtures of experts read (the mixtral, qwen3-moe-bf16 and qwen2-moe
// folders' references check the models they open): Mixtral renormalises its chosen experts'
// weights, Qwen3-MoE and Qwen2-MoE only with norm_topk_prob; Qwen2-MoE's shared expert has its
// own width, its q/k/v biases follow qkv_bias; a folder without model_type is told apart by its
// architecture; Qwen3-MoE's dense layers among the sparse ones and impossible expert counts are
// refused, and a config that asks for more experts than the folder holds (Mixtral's default 8)
// meets a router of the wrong shape.
func TestOpenMoE(t *testing.T) {
	for _, c := range []struct {
		name          string
		experts, k    int
		norm          bool
		ffn, headSize int
	}{{"mixtral", 4, 2, true, 28, 0}, {"qwen3-moe-bf16", 4, 2, false, 12, 8}, {"qwen2-moe", 4, 2, false, 12, 0}} {
		m, err := Open(testdataDir(c.name))
		if err != nil {
			t.Fatal(err)
		}
		got := m.NN.Config()
		if got.Experts != c.experts || got.ExpertsPerToken != c.k || got.NormTopK != c.norm || got.FFN != c.ffn || got.HeadSize != c.headSize {
			t.Errorf("%s: experts %d, %d a token, norm %v, ffn %d, head size %d; want %+v", c.name, got.Experts, got.ExpertsPerToken, got.NormTopK, got.FFN, got.HeadSize, c)
		}
		bare, err := Open(editConfig(t, c.name, func(cfg map[string]any) { delete(cfg, "model_type") }))
		if err != nil || !reflect.DeepEqual(bare.NN.Config(), got) {
			t.Errorf("%s without model_type: %v, want the same model", c.name, err)
		}
	}
	if m, err := Open(editConfig(t, "qwen3-moe-bf16", func(cfg map[string]any) { cfg["norm_topk_prob"] = true })); err != nil || !m.NN.Config().NormTopK {
		t.Errorf("norm_topk_prob true: %v, want renormalised weights", err)
	}
	if m, err := Open(testdataDir("qwen2-moe")); err != nil || m.NN.Config().SharedExpert != 20 || m.NN.Config().NoAttnBias {
		t.Errorf("qwen2-moe: %v, want a shared expert 20 wide and q/k/v biases", err)
	}
	for _, c := range []struct {
		name, folder string
		edit         func(cfg map[string]any)
		want         string
	}{
		{"sparse step", "qwen3-moe-bf16", func(cfg map[string]any) { cfg["decoder_sparse_step"] = 2 }, "Qwen3-MoE with dense layers among the sparse ones (decoder_sparse_step 2"},
		{"mlp_only_layers", "qwen3-moe-bf16", func(cfg map[string]any) { cfg["mlp_only_layers"] = []int{1} }, "mlp_only_layers [1]"},
		{"top 5 of 4", "qwen3-moe-bf16", func(cfg map[string]any) { cfg["num_experts_per_tok"] = 5 }, "num_experts_per_tok is 5, want 1 to the 4 experts"},
		{"no experts", "mixtral", func(cfg map[string]any) { cfg["num_local_experts"] = -1 }, "the number of experts is -1"},
		{"default 8 experts", "mixtral", func(cfg map[string]any) { delete(cfg, "num_local_experts") }, "block_sparse_moe.gate.weight in model.safetensors is [4 16], want [8 16]"},
		{"moe_intermediate_size", "qwen3-moe-bf16", func(cfg map[string]any) { cfg["moe_intermediate_size"] = 0 }, "moe_intermediate_size"},
		{"shared expert width", "qwen2-moe", func(cfg map[string]any) { cfg["shared_expert_intermediate_size"] = 0 }, "shared_expert_intermediate_size"},
		{"no qkv_bias", "qwen2-moe", func(cfg map[string]any) { cfg["qkv_bias"] = false }, "_proj.bias in model.safetensors is not part of a Qwen2MoeForCausalLM model"},
	} {
		if _, err := Open(editConfig(t, c.folder, c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestOpenOLMo checks how OLMo 2's, OLMo 3's and OLMoE's configs read (their folders' references
// check the models): OLMo 2's blocks without input norms, normalising their outputs; the q_norm
// and k_norm across the heads; OLMo 3's sliding layers, unscaled, whose rotary transformers v5's
// rope_parameters may give per layer type; OLMoE's experts; OLMo's clip_qkv refused.
func TestOpenOLMo(t *testing.T) {
	m, err := Open(testdataDir("olmo2"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.NN.Config(); !c.NoInputNorm || !c.SandwichNorm || !c.QKNorm || !c.QKNormAcross || c.Experts != 0 {
		t.Errorf("olmo2: config %+v, want no input norms, the outputs normalised, qk-norm across the heads", c)
	}
	moe, err := Open(testdataDir("olmoe-bf16"))
	if err != nil {
		t.Fatal(err)
	}
	if c := moe.NN.Config(); c.NoInputNorm || !c.QKNormAcross || c.Experts != 4 || c.ExpertsPerToken != 2 || c.NormTopK || c.FFN != 28 {
		t.Errorf("olmoe: config %+v, want input norms, qk-norm across the heads, 2 of 4 experts 28 wide, not renormalised", c)
	}
	o3, err := Open(testdataDir("olmo3"))
	if err != nil {
		t.Fatal(err)
	}
	if c := o3.NN.Config(); c.Local == nil || !slices.Equal(c.Local.Layers, []bool{true, true, true, false}) || c.Local.Window != 4 ||
		c.Local.Rope == nil || c.Local.Rope.Scaling != nil || c.Rope.Scaling == nil || !c.NoInputNorm {
		t.Errorf("olmo3: config %+v, local %+v: want layers 0-2 sliding in a window of 4 with the rotary unscaled, the full layer's YaRN", c, c.Local)
	}
	v5, err := Open(editConfig(t, "olmo3", func(c map[string]any) {
		full := c["rope_scaling"].(map[string]any)
		full["rope_theta"] = c["rope_theta"]
		c["rope_parameters"] = map[string]any{"full_attention": full, "sliding_attention": map[string]any{"rope_type": "default", "rope_theta": c["rope_theta"]}}
		delete(c, "rope_scaling")
		delete(c, "rope_theta")
	}))
	if err != nil || !reflect.DeepEqual(v5.NN.Config(), o3.NN.Config()) {
		t.Errorf("olmo3 with rope_parameters per layer type: %v, want the same model", err)
	}
	for _, folder := range []string{"olmo2", "olmoe-bf16", "olmo3"} {
		if _, err := Open(editConfig(t, folder, func(c map[string]any) { c["clip_qkv"] = 8.0 })); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "clip_qkv 8") {
			t.Errorf("%s with clip_qkv: %v, want ErrUnsupported", folder, err)
		}
	}
}

// TestOpenFalcon checks what the falcon and falcon-new-arch folders' references do not: the
// blocks each config gives (Falcon-7B's one norm and one K/V head, the new architecture's two
// norms and K/V groups, one norm with num_ln_in_parallel_attn 1), the sequential block's and the
// biases' tensors asked for when the config says so, and ALiBi refused.
func TestOpenFalcon(t *testing.T) {
	for _, c := range []struct {
		folder                   string
		kv                       int
		shared, parallel, biased bool
	}{{"falcon", 1, true, true, false}, {"falcon-new-arch", 2, false, true, true}} {
		m, err := Open(testdataDir(c.folder))
		if err != nil {
			t.Fatal(err)
		}
		got := m.NN.Config()
		if got.KVHeads != c.kv || got.SharedNorm != c.shared || got.ParallelResidual != c.parallel || got.NoAttnBias == c.biased || !got.TieEmbeddings {
			t.Errorf("%s: config %+v, want %+v and a tied head", c.folder, got, c)
		}
	}
	for _, c := range []struct {
		name, folder string
		edit         func(map[string]any)
		want         string
	}{
		{"sequential", "falcon", func(c map[string]any) { c["parallel_attn"] = false }, "h.0.post_attention_layernorm.weight"},
		{"one norm", "falcon-new-arch", func(c map[string]any) { c["num_ln_in_parallel_attn"] = 1 }, "h.0.input_layernorm.weight"},
		{"three norms", "falcon-new-arch", func(c map[string]any) { c["num_ln_in_parallel_attn"] = 3 }, "num_ln_in_parallel_attn is 3, want 1 or 2"},
		{"alibi", "falcon", func(c map[string]any) { c["alibi"] = true }, "Falcon with alibi"},
		{"biases", "falcon", func(c map[string]any) { c["bias"] = true }, "query_key_value.bias"},
		{"heads per row", "falcon", func(c map[string]any) { c["multi_query"] = false }, "query_key_value.weight in model.safetensors is [24 16], want [48 16]"},
		{"kv groups", "falcon-new-arch", func(c map[string]any) { c["num_kv_heads"] = 3 }, "num_kv_heads 3 does not divide num_attention_heads 4"},
		{"relu", "falcon", func(c map[string]any) { c["activation"] = "relu" }, `Falcon activation "relu"`},
	} {
		if _, err := Open(editConfig(t, c.folder, c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestOpenStarcoder2 checks what the starcoder2 folder's reference does not: norm_epsilon is
// the LayerNorms' eps, sliding_window null leaves every layer unwindowed, use_bias false reads
// no biases (the folder's are then not part of the model), and an untied head needs lm_head.
func TestOpenStarcoder2(t *testing.T) {
	m, err := Open(testdataDir("starcoder2"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.NN.Config(); c.Window != 4 || c.NormEps != 1e-5 || !c.TieEmbeddings || c.NoAttnBias || c.NoMLPBias || c.Activation != nn.GELUPyTorchTanh {
		t.Errorf("config %+v: want a window of 4, eps 1e-5, a tied head, biases, gelu_pytorch_tanh", c)
	}
	if eps, err := Open(editConfig(t, "starcoder2", func(c map[string]any) { c["norm_epsilon"] = 1e-3 })); err != nil || eps.NN.Config().NormEps != 1e-3 {
		t.Errorf("norm_epsilon 1e-3: %v", err)
	}
	if nw, err := Open(editConfig(t, "starcoder2", func(c map[string]any) { c["sliding_window"] = nil })); err != nil || nw.NN.Config().Window != 0 {
		t.Errorf("sliding_window null: %v, want no window", err)
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"use_bias false", func(c map[string]any) { c["use_bias"] = false }, ".bias in model.safetensors is not part of a Starcoder2ForCausalLM model"},
		{"untied", func(c map[string]any) { c["tie_word_embeddings"] = false }, "lm_head.weight"},
	} {
		if _, err := Open(editConfig(t, "starcoder2", c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestOpenGPTBigCode checks what the gpt-bigcode folder's reference does not: one K/V head with
// multi_query (the default), c_attn's rows per head without it (the folder's then do not fit),
// and the activation and attention scaling refused when mha lacks them.
func TestOpenGPTBigCode(t *testing.T) {
	m, err := Open(testdataDir("gpt-bigcode"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.NN.Config(); c.KVHeads != 1 || c.Positions != nn.Learned || !c.TieEmbeddings || c.Activation != nn.GELUPyTorchTanh {
		t.Errorf("config %+v: want one K/V head, learned positions, a tied head, gelu_pytorch_tanh", c)
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"multi-head", func(c map[string]any) { c["multi_query"] = false }, "attn.c_attn.weight in model.safetensors is [24 16], want [48 16]"},
		{"relu", func(c map[string]any) { c["activation_function"] = "relu" }, `GPTBigCode activation_function "relu"`},
		{"unscaled", func(c map[string]any) { c["scale_attn_weights"] = false }, "GPTBigCode without scale_attn_weights"},
	} {
		if _, err := Open(editConfig(t, "gpt-bigcode", c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestOpenGPTJ checks what the gptj folder's reference does not: the attention buffers are
// skipped and listed; rotary_dim null rotates whole heads; a bare GPTJModel, without lm_head,
// has the embedding as its head and no bias; bad rotary_dim and activation_function are refused.
func TestOpenGPTJ(t *testing.T) {
	m, err := Open(testdataDir("gptj"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.NN.Config(); len(m.Unused) != 4 || !strings.HasSuffix(m.Unused[0], "attn.bias") || c.Rope.Dim != 4 || !c.Rope.Interleaved || !c.SharedNorm {
		t.Errorf("unused %q, rope %+v, shared norm %v: want each layer's attn.bias and masked_bias, 4 of 8 features interleaved, one norm", m.Unused, c.Rope, c.SharedNorm)
	}
	if full, err := Open(editConfig(t, "gptj", func(c map[string]any) { c["rotary_dim"] = nil })); err != nil || full.NN.Config().Rope.Dim != 0 {
		t.Errorf("rotary_dim null: %v, want whole heads rotated", err)
	}
	for _, c := range []struct {
		name, key string
		value     any
		want      string
	}{
		{"odd rotary_dim", "rotary_dim", 3, "rotary_dim is 3, want an even number in [2, 8]"},
		{"wide rotary_dim", "rotary_dim", 10, "rotary_dim is 10"},
		{"relu", "activation_function", "relu", `GPT-J activation_function "relu"`},
		{"n_head", "n_head", 3, "n_embd 16 is not divisible by n_head 3"},
	} {
		if _, err := Open(editConfig(t, "gptj", func(cfg map[string]any) { cfg[c.key] = c.value })); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	dir := editTensors(t, "gptj", func(tensors map[string]safetensors.Tensor) {
		delete(tensors, "lm_head.weight")
		delete(tensors, "lm_head.bias")
	})
	edit := editConfig(t, "gptj", func(c map[string]any) { c["architectures"] = []string{"GPTJModel"} })
	cfg, err := os.ReadFile(filepath.Join(edit, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	bare, err := Open(dir)
	if err != nil || bare.LMHead || !bare.NN.Config().TieEmbeddings || slices.ContainsFunc(bare.NN.Param("head.bias").Value.Data, func(x float32) bool { return x != 0 }) {
		t.Errorf("GPTJModel: %v; want a model without an LM head, tied, its head's bias zero", err)
	}
}

// TestOpenRoBERTa checks what the roberta folder's reference does not: its positions are the
// position embeddings after the padding token's (max_position_embeddings 18, pad_token_id 1:
// 16 positions, the first read from row 2), and its tokenizer wraps a text in <s> … </s>.
func TestOpenRoBERTa(t *testing.T) {
	m, err := Open(testdataDir("roberta"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(testdataDir("roberta"), "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := f.Float32("roberta.embeddings.position_embeddings.weight")
	if err != nil {
		t.Fatal(err)
	}
	pos := m.NN.Param("pos_emb.weight").Value
	if m.NN.Config().SeqLen != 16 || !slices.Equal(pos.Data, stored.Data[2*16:]) || !m.LMHead {
		t.Errorf("seq_len %d, positions from row 2: %v, LM head %v; want 16, true, true", m.NN.Config().SeqLen, slices.Equal(pos.Data, stored.Data[2*16:]), m.LMHead)
	}
	enc, err := m.Tokenizer.Encode("the cat", true)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(enc.IDs); n < 3 || enc.IDs[0] != 0 || enc.IDs[n-1] != 2 {
		t.Errorf("ids %v, want <s> (0) … </s> (2)", enc.IDs)
	}
}

// TestOpenGemma2Softcaps checks Gemma 2's soft-caps as Gemma2Config reads them: 50 and 30 when
// the config leaves them out, none when null, the config's otherwise; and its sliding layers
// 0 and 2 of 3, with the global rotary.
func TestOpenGemma2Softcaps(t *testing.T) {
	for name, c := range map[string]struct {
		change      func(map[string]any)
		attn, final float64
	}{
		"given":      {func(map[string]any) {}, 1, 3},
		"left out":   {func(c map[string]any) { delete(c, "attn_logit_softcapping"); delete(c, "final_logit_softcapping") }, 50, 30},
		"null":       {func(c map[string]any) { c["attn_logit_softcapping"] = nil; c["final_logit_softcapping"] = nil }, 0, 0},
		"final null": {func(c map[string]any) { c["final_logit_softcapping"] = nil }, 1, 0},
	} {
		m, err := Open(editConfig(t, "gemma2", c.change))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cfg := m.NN.Config()
		if cfg.AttnSoftcap != c.attn || cfg.LogitSoftcap != c.final {
			t.Errorf("%s: soft-caps %v and %v, want %v and %v", name, cfg.AttnSoftcap, cfg.LogitSoftcap, c.attn, c.final)
		}
		if cfg.Local == nil || !slices.Equal(cfg.Local.Layers, []bool{true, false, true}) || cfg.Local.Window != 4 || cfg.Local.Rope != nil || !cfg.SandwichNorm || cfg.QKNorm {
			t.Errorf("%s: config %+v, want local blocks 0 and 2 of window 4 with the global rotary, sandwich norms, no qk-norm", name, cfg)
		}
	}
}

// TestOpenGemma3Multimodal checks that a Gemma3ForConditionalGeneration folder opens as its text
// model, the gemma3 folder's, whether its tensors are named as transformers before 4.52 saved
// them (language_model.model., vision_tower.) or after (model.language_model.,
// model.vision_tower.): the vision tower and the projector are listed as unused; its
// text_config's left-out sizes take Gemma3TextConfig's defaults; and a config without a
// Gemma 3 text_config is an error.
func TestOpenGemma3Multimodal(t *testing.T) {
	text, err := Open(testdataDir("gemma3"))
	if err != nil {
		t.Fatal(err)
	}
	vision := []string{"multi_modal_projector.mm_input_projection_weight", "multi_modal_projector.mm_soft_emb_norm.weight",
		"vision_tower.vision_model.embeddings.patch_embedding.weight", "vision_tower.vision_model.post_layernorm.weight"}
	renamed := editTensors(t, "gemma3-vision", func(tensors map[string]safetensors.Tensor) {
		for name, x := range maps.Clone(tensors) {
			delete(tensors, name)
			to := "model." + name // the vision tower and the projector
			if rest, ok := strings.CutPrefix(name, "language_model.model."); ok {
				to = "model.language_model." + rest
			}
			tensors[to] = x
		}
	})
	var newNames []string
	for _, n := range vision {
		newNames = append(newNames, "model."+n)
	}
	for dir, unused := range map[string][]string{testdataDir("gemma3-vision"): vision, renamed: newNames} {
		m, err := Open(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if got, want := m.NN.Config(), text.NN.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: config %+v, want the text model's %+v", dir, got, want)
		}
		if !slices.Equal(m.Unused, unused) || m.Architecture != "Gemma3ForConditionalGeneration" || !m.LMHead || !slices.Equal(m.EOS, []int{1, 2}) {
			t.Errorf("%s: unused %q, architecture %q, LM head %v, EOS %v; want %q, the multimodal architecture, a head, [1 2]", dir, m.Unused, m.Architecture, m.LMHead, m.EOS, unused)
		}
	}
	for _, c := range []struct {
		name   string
		change func(map[string]any)
		want   string
	}{
		{"no text_config", func(c map[string]any) { delete(c, "text_config") }, "a Gemma 3 multimodal config.json without text_config"},
		{"other text model", func(c map[string]any) { c["text_config"].(map[string]any)["model_type"] = "llama" }, `text_config of model_type "llama"`},
		{"default vocabulary", func(c map[string]any) { delete(c["text_config"].(map[string]any), "vocab_size") },
			"language_model.model.embed_tokens.weight in model.safetensors is [295 16], want [262208 16]"},
		{"by model_type", func(c map[string]any) { delete(c, "architectures"); c["text_config"] = "none" }, "text_config is not the JSON object expected"},
	} {
		if _, err := Open(editConfig(t, "gemma3-vision", c.change)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// FuzzConfig opens the GPT-2, Llama, BERT, wide-headed Qwen3, Gemma, Phi-3, Gemma 2 and 3 (and
// multimodal), LongRoPE, Pythia, Phi-2, RoBERTa, DistilBERT, StableLM, YaRN, SmolLM3, GPT-J,
// Mixtral, Qwen2-MoE, Qwen3-MoE, StarCoder2, Falcon, OLMo 2 and 3, OLMoE and GPTBigCode folders
// with fuzzed config.json files: an error or a model, never a panic, and no allocation beyond
// what the folder's tensors hold.
func FuzzConfig(f *testing.F) {
	folders := []string{"gpt2", "llama", "bert", "qwen3-wide", "gemma", "phi3", "gemma2", "gemma3", "gemma3-vision", "phi3-longrope", "pythia", "phi2", "roberta", "distilbert", "stablelm2",
		"qwen3-yarn", "smollm3", "gptj", "mixtral", "qwen2-moe", "qwen3-moe-bf16", "starcoder2", "falcon", "falcon-new-arch", "olmo2", "olmoe-bf16", "olmo3", "gpt-bigcode"}
	for i, name := range folders {
		data, err := os.ReadFile(filepath.Join(testdataDir(name), "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(i))
	}
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":16,"num_attention_heads":4,"num_key_value_heads":0}`), uint8(1))
	f.Add([]byte(`{"model_type":"gpt2","n_embd":1e18}`), uint8(0))
	// transformers v5's rope_parameters, Mistral's sliding_window, an untied BERT decoder.
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":28,"num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":1,"vocab_size":295,"rope_parameters":{"rope_type":"llama3","rope_theta":500,"factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8}}`), uint8(1))
	f.Add([]byte(`{"architectures":["MistralForCausalLM"],"hidden_size":16,"intermediate_size":28,"num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":1,"vocab_size":295,"sliding_window":"four"}`), uint8(1))
	f.Add([]byte(`{"architectures":["BertForMaskedLM"],"tie_word_embeddings":false,"hidden_size":16,"intermediate_size":28,"num_attention_heads":4,"num_hidden_layers":2,"vocab_size":40,"max_position_embeddings":32,"type_vocab_size":2}`), uint8(2))
	dirs := make([]string, len(folders))
	for i, name := range folders {
		dirs[i] = copyFolder(f, name)
	}
	f.Fuzz(func(t *testing.T, config []byte, which uint8) {
		dir := dirs[int(which)%len(dirs)]
		if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(dir)
		if err == nil && m.NN == nil {
			t.Fatal("no error and no model")
		}
	})
}

// FuzzIndex reads arbitrary bytes as model.safetensors.index.json of the two-shard Llama 3
// folder: an error or a model, never a panic, and never a file read from outside the folder
// (the fuzzer's indexes may name any path; one holding the weights lies next to the folder).
func FuzzIndex(f *testing.F) {
	index, err := os.ReadFile(filepath.Join(testdataDir("llama3-bf16"), "model.safetensors.index.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(index)
	f.Add([]byte(`{"weight_map": {"model.embed_tokens.weight": "../outside.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {}}`))
	dir := copyFolder(f, "llama3-bf16")
	shard, err := os.ReadFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..", "outside.safetensors"), shard, 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, index []byte) {
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(dir)
		if err == nil && m.NN == nil {
			t.Fatal("no error and no model")
		}
		if err != nil {
			return
		}
		var parsed struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(index, &parsed); err != nil {
			t.Fatalf("Open read an index that is not JSON: %v", err)
		}
		for name, file := range parsed.WeightMap {
			if file != filepath.Base(file) || file == ".." || file == "." {
				t.Fatalf("Open took %q from %q, outside the folder", name, file)
			}
		}
	})
}

// TestTranspose checks transpose against the definition on shapes around its block size, with
// one buffer reused from a larger call to smaller ones and back.
func TestTranspose(t *testing.T) {
	var buf []uint16
	for _, s := range [][2]int{{1, 1}, {1, 7}, {5, 1}, {64, 64}, {63, 65}, {130, 70}, {3, 200}, {200, 3}} {
		rows, cols := s[0], s[1]
		x := make([]uint16, rows*cols)
		for i := range x {
			x[i] = uint16(i)
		}
		buf = transpose(x, rows, cols, buf)
		for i := range rows {
			for j := range cols {
				if got, want := x[j*rows+i], uint16(i*cols+j); got != want {
					t.Fatalf("%d×%d: element [%d, %d] of the transpose is %d, want %d", rows, cols, j, i, got, want)
				}
			}
		}
	}
}

// TestConfigFieldChecks checks config.json's eos_token_id forms (a token id, a list, null, left out)
// and that anything else, or an id outside the vocabulary, is an error naming it; also that the
// norms' eps must be > 0 and Mistral's sliding_window ≥ 1 when set.
func TestConfigFieldChecks(t *testing.T) {
	for _, c := range []struct {
		value any
		want  []int
	}{{7, []int{7}}, {[]any{2, 294, 0}, []int{2, 294, 0}}, {nil, nil}, {"absent", nil}, {[]any{}, []int{}}} {
		m, err := Open(editConfig(t, "llama", func(cfg map[string]any) {
			if c.value == "absent" {
				delete(cfg, "eos_token_id")
			} else {
				cfg["eos_token_id"] = c.value
			}
		}))
		if err != nil || !slices.Equal(m.EOS, c.want) {
			t.Errorf("eos_token_id %v: %v, %v; want %v", c.value, m, err, c.want)
		}
	}
	for _, c := range []struct {
		value  any
		phrase string
	}{
		{1.5, "eos_token_id is 1.5, want a token id"},
		{1e30, "eos_token_id is 1e+30, want a token id"},
		{"2", `eos_token_id is "2", want a token id`},
		{[]any{2, "x"}, `eos_token_id is [2,"x"], want a token id`},
		{295, "eos_token_id 295 is not a token of the 295 in vocab_size"},
		{[]any{2, -7}, "eos_token_id -7 is not a token"},
	} {
		_, err := Open(editConfig(t, "llama", func(cfg map[string]any) { cfg["eos_token_id"] = c.value }))
		if err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("eos_token_id %v: %v, want an error containing %q", c.value, err, c.phrase)
		}
	}
	for _, c := range [][2]string{{"llama", "rms_norm_eps"}, {"gpt2", "layer_norm_epsilon"}, {"bert", "layer_norm_eps"}} {
		for _, eps := range []float64{0, -1e-5} {
			_, err := Open(editConfig(t, c[0], func(cfg map[string]any) { cfg[c[1]] = eps }))
			if want := fmt.Sprintf("%s is %v, want > 0", c[1], eps); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s with %s %v: %v, want an error containing %q", c[0], c[1], eps, err, want)
			}
		}
	}
	for w, phrase := range map[any]string{
		0:   "sliding_window is 0, want a whole number ≥ 1 (or null for none)",
		-5:  "sliding_window is -5, want a whole number ≥ 1",
		1.5: "sliding_window is 1.5, want a whole number or null",
	} {
		_, err := Open(editConfig(t, "mistral", func(cfg map[string]any) { cfg["sliding_window"] = w }))
		if err == nil || !strings.Contains(err.Error(), phrase) {
			t.Errorf("Mistral's sliding_window %v: %v, want an error containing %q", w, err, phrase)
		}
	}
}
