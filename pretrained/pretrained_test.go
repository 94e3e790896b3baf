package pretrained

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// folders are the tiny Hugging Face folders testdata/gen_pretrained.py writes, with float64
// references after Hugging Face's modeling code.
var folders = []string{"gpt2", "gpt2-prefixed-f16-sharded", "bert", "bert-gamma-beta", "llama", "llama3-bf16", "qwen2", "mistral"}

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

// TestOpenErrors checks that a folder mha cannot run gives one error saying what was expected
// and what came.
func TestOpenErrors(t *testing.T) {
	edit := func(name string, change func(cfg map[string]any)) string {
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
		{"rope scaling", edit("llama", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 2} }), `rope_scaling type "yarn"`, true},
		{"bad json", edit("llama", func(c map[string]any) { c["hidden_size"] = "sixteen" }), "config.json is not the JSON expected", false},
		{"heads", edit("llama", func(c map[string]any) { c["num_key_value_heads"] = 3 }), "num_key_value_heads 3 does not divide", false},
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
}

// FuzzConfig opens the GPT-2 and Llama folders with fuzzed config.json files: an error or a
// model, never a panic, and no allocation beyond what the folder's tensors hold.
func FuzzConfig(f *testing.F) {
	for _, name := range []string{"gpt2", "llama", "bert"} {
		data, err := os.ReadFile(filepath.Join(testdataDir(name), "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(0))
	}
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":16,"num_attention_heads":4,"num_key_value_heads":0}`), uint8(1))
	f.Add([]byte(`{"model_type":"gpt2","n_embd":1e18}`), uint8(0))
	dirs := map[uint8]string{0: copyFolder(f, "gpt2"), 1: copyFolder(f, "llama"), 2: copyFolder(f, "bert")}
	f.Fuzz(func(t *testing.T, config []byte, which uint8) {
		dir := dirs[which%3]
		if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(dir)
		if err == nil && m.NN == nil {
			t.Fatal("no error and no model")
		}
	})
}
