package nn

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// TestCheckpointRoundTrip saves a trained model with its optimizer state and metadata, loads
// it, and wants the same config, parameters (bit for bit), metadata, optimizer state and logits.
func TestCheckpointRoundTrip(t *testing.T) {
	cfg := Config{Vocab: 13, SeqLen: 16, DModel: 16, Heads: 4, Layers: 2, Norm: PostNorm, Positions: Sinusoidal, Seed: 3}
	m, opt := trainSteps(t, cfg, 0, 2)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	meta := map[string]string{"task": "first-token", "step": "2"}
	if err := Save(path, m, meta, opt.State()); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, extra, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Config(), m.Config()) || !maps.Equal(gotMeta, meta) {
		t.Errorf("loaded %+v %v, want %+v %v", got.Config(), gotMeta, m.Config(), meta)
	}
	sd := got.StateDict()
	for i, p := range got.Params() {
		sameBits(t, p.Name, p.Value.Data, m.Params()[i].Value.Data)
		if sd[p.Name] != p.Value {
			t.Errorf("StateDict()[%q] is not the parameter's tensor", p.Name)
		}
	}
	if len(sd) != len(got.Params()) {
		t.Errorf("StateDict has %d tensors, want %d", len(sd), len(got.Params()))
	}
	opt2, err := NewAdamW(got.Params(), AdamWConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := opt2.LoadState(extra); err != nil || opt2.Steps() != 2 {
		t.Fatalf("optimizer state: %v, %d steps", err, opt2.Steps())
	}
	for name, want := range opt.State() {
		if !slices.Equal(extra[name].Shape, want.Shape) {
			t.Fatalf("extra %s: %v, want %v", name, extra[name].Shape, want.Shape)
		}
		sameBits(t, name, extra[name].Data, want.Data)
	}
	tokens := []int{1, 2, 3, 4, 5, 6}
	a, err := m.Forward(tokens, 2, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := got.Forward(tokens, 2, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "logits", a.Data, b.Data)
}

// writeCheckpoint writes a checkpoint of m by hand after edit has changed its tensors and
// metadata, and returns its path.
func writeCheckpoint(t *testing.T, m *Model, edit func(map[string]safetensors.Tensor, map[string]string)) string {
	t.Helper()
	cfg, _ := json.Marshal(m.Config())
	meta := map[string]string{ConfigKey: string(cfg)}
	tensors := map[string]safetensors.Tensor{}
	for _, p := range m.Params() {
		tensors[p.Name] = safetensors.FromFloat32(p.Value)
	}
	edit(tensors, meta)
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := safetensors.WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadErrors checks that every kind of broken checkpoint is an error saying what is wrong.
func TestLoadErrors(t *testing.T) {
	m, err := NewModel(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	f32 := func(shape ...int) safetensors.Tensor { return safetensors.FromFloat32(tensor.New(shape...)) }
	for _, c := range []struct {
		name string
		edit func(map[string]safetensors.Tensor, map[string]string)
		want string
	}{
		{"no config", func(_ map[string]safetensors.Tensor, meta map[string]string) { delete(meta, ConfigKey) }, `no "config" in its metadata`},
		{"bad config", func(_ map[string]safetensors.Tensor, meta map[string]string) { meta[ConfigKey] = `{"vocab":11` }, "config is not a JSON object"},
		{"invalid config", func(_ map[string]safetensors.Tensor, meta map[string]string) {
			meta[ConfigKey] = strings.Replace(meta[ConfigKey], `"heads":2`, `"heads":3`, 1)
		}, "d_model 8 is not divisible by heads 3"},
		{"missing", func(ts map[string]safetensors.Tensor, _ map[string]string) { delete(ts, "blocks.1.ln2.bias") }, `missing parameter "blocks.1.ln2.bias" [8]`},
		{"shape", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts["head.weight"] = f32(8, 11) }, `parameter "head.weight" is [8 11], want [11 8]`},
		{"unknown", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts["blocks.2.ln1.weight"] = f32(8) }, `unexpected tensor "blocks.2.ln1.weight" [8]`},
		{"dtype", func(ts map[string]safetensors.Tensor, _ map[string]string) {
			ts["ln_f.bias"] = safetensors.Tensor{DType: safetensors.I32, Shape: []int{8}, Data: make([]byte, 32)}
		}, `parameter "ln_f.bias" is I32, want a float dtype`},
		{"empty extra", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts[ExtraPrefix] = f32(1) }, "empty extra name"},
		{"bad extra", func(ts map[string]safetensors.Tensor, _ map[string]string) {
			ts[ExtraPrefix+"mask"] = safetensors.Tensor{DType: safetensors.Bool, Shape: []int{1}, Data: []byte{2}}
		}, "mask"},
	} {
		path := writeCheckpoint(t, m, c.edit)
		if _, _, _, err := Load(path); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want %q and the path", c.name, err, c.want)
		}
	}

	good := writeCheckpoint(t, m, func(map[string]safetensors.Tensor, map[string]string) {})
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.safetensors")
	if err := os.WriteFile(truncated, data[:len(data)-4], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Load(truncated); err == nil {
		t.Error("a truncated checkpoint loaded")
	}
	if _, _, _, err := Load(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing file loaded")
	}
}

// TestSaveErrors checks Save's argument errors, and that a failed Save leaves the previous
// checkpoint in place and no temporary file behind.
func TestSaveErrors(t *testing.T) {
	m, err := NewModel(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	if err := Save(path, m, map[string]string{"step": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		meta  map[string]string
		extra map[string]*tensor.Tensor
		want  string
	}{
		{map[string]string{ConfigKey: "{}"}, nil, `metadata key "config" is reserved`},
		{map[string]string{HeadsKey: "[[4,4]]"}, nil, `metadata key "layer_head_dims" is reserved`},
		{nil, map[string]*tensor.Tensor{"": tensor.New(1)}, `extra tensor "" is nil or has an empty name`},
		{nil, map[string]*tensor.Tensor{"x": nil}, `extra tensor "x" is nil`},
		{nil, map[string]*tensor.Tensor{"x": {Shape: []int{2}, Data: []float32{1}}}, `extra tensor "x" has 1 values for shape [2]`},
	} {
		if err := Save(path, m, c.meta, c.extra); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Save(%v, %v): %v, want %q", c.meta, c.extra, err, c.want)
		}
	}
	if err := Save(filepath.Join(dir, "no", "such", "dir.safetensors"), m, nil, nil); err == nil {
		t.Error("Save into a missing directory succeeded")
	}
	_, meta, _, err := Load(path)
	if err != nil || meta["step"] != "1" {
		t.Errorf("the first checkpoint after failed saves: %v, %v", meta, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only the checkpoint", entries, err)
	}
}

// FuzzCheckpoint feeds arbitrary bytes to the checkpoint reader, and arbitrary configs with the
// tensors of a valid file: it must never panic, and what it accepts must be a model whose
// parameters have the layout's shapes.
func FuzzCheckpoint(f *testing.F) {
	m, err := NewModel(Config{Vocab: 3, SeqLen: 2, DModel: 2, Heads: 1, Layers: 1, FFN: 2, Norm: PreNorm, Positions: Learned})
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(f.TempDir(), "seed.safetensors")
	if err := Save(path, m, map[string]string{"task": "seed"}, map[string]*tensor.Tensor{"adam.step": {Shape: []int{}, Data: []float32{1}}}); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "")
	f.Add(seed, `{"vocab":3,"seq_len":2,"d_model":2,"heads":1,"layers":1,"ffn":2,"norm":"pre","positions":"sinusoidal"}`)
	f.Add(seed, `{"vocab":3,"seq_len":2,"d_model":2,"heads":1,"layers":1,"ffn":2,"norm":"pre","positions":"learned","tie_embeddings":true}`)
	llama, err := NewModel(Config{Vocab: 3, SeqLen: 2, DModel: 2, Heads: 1, Layers: 1, FFN: 2, Norm: PreNorm, Positions: NoPositions,
		NormKind: RMSNorm, Activation: SwiGLU, NoMLPBias: true, NoHeadBias: true, TypeVocab: 2, EmbNorm: true})
	if err != nil {
		f.Fatal(err)
	}
	if err := Save(path, llama, nil, nil); err != nil {
		f.Fatal(err)
	}
	if seed, err = os.ReadFile(path); err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "")
	f.Add(seed, `{"vocab":3,"seq_len":2,"d_model":2,"heads":1,"layers":1,"ffn":2,"norm":"pre","positions":"none","norm_kind":"layernorm","activation":"swiglu","no_mlp_bias":true,"no_head_bias":true,"type_vocab":2,"emb_norm":true}`)
	f.Fuzz(func(t *testing.T, data []byte, config string) {
		file, err := safetensors.Parse(data)
		if err != nil {
			return
		}
		if config != "" && file.Metadata != nil {
			file.Metadata[ConfigKey] = config
		}
		m, _, _, err := LoadOptions{AllowNonFinite: true}.fromFile(file)
		if err != nil {
			return
		}
		for i, s := range m.Config().layout() {
			if p := m.Params()[i]; p.Name != s.name || !slices.Equal(p.Value.Shape, s.shape) {
				t.Fatalf("parameter %d is %s %v, want %s %v", i, p.Name, p.Value.Shape, s.name, s.shape)
			}
		}
	})
}

// resave reads the checkpoint at path, lets edit change its tensors and metadata, and writes the
// result to a new file, whose path it returns.
func resave(t *testing.T, path string, edit func(map[string]safetensors.Tensor, map[string]string)) string {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]safetensors.Tensor{}
	for _, name := range f.Names() {
		if tensors[name], err = f.Raw(name); err != nil {
			t.Fatal(err)
		}
	}
	meta := maps.Clone(f.Metadata)
	edit(tensors, meta)
	out := filepath.Join(t.TempDir(), "edited.safetensors")
	if err := safetensors.WriteFile(out, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckpointNonFinite checks that Load refuses a parameter or extra tensor holding NaN or
// ±Inf (an F64 value beyond float32's range included), naming it, unless AllowNonFinite; and
// that Save refuses to write one, leaving the previous file.
func TestCheckpointNonFinite(t *testing.T) {
	m, err := NewModel(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Save(path, m, nil, map[string]*tensor.Tensor{"adam.step": {Shape: []int{}, Data: []float32{1}}}); err != nil {
		t.Fatal(err)
	}
	withNaN := func(name string, i int) func(map[string]safetensors.Tensor, map[string]string) {
		return func(ts map[string]safetensors.Tensor, _ map[string]string) {
			ts[name] = safetensors.Tensor{DType: ts[name].DType, Shape: ts[name].Shape, Data: slices.Clone(ts[name].Data)}
			binary.LittleEndian.PutUint32(ts[name].Data[4*i:], math.Float32bits(float32(math.NaN())))
		}
	}
	for _, c := range []struct {
		name string
		edit func(map[string]safetensors.Tensor, map[string]string)
		want string
	}{
		{"NaN weight", withNaN("blocks.1.attn.in_proj_weight", 9), `nn: checkpoint tensor "blocks.1.attn.in_proj_weight" [24 8]: 1 of 192 values is not finite: NaN at [1 1] (index 9)`},
		{"F64 overflow", func(ts map[string]safetensors.Tensor, _ map[string]string) {
			big, err := safetensors.FromFloat64([]float64{1, 1e300, math.Inf(-1), 1, 1, 1, 1, 1}, []int{8})
			if err != nil {
				t.Fatal(err)
			}
			ts["ln_f.weight"] = big
		}, `tensor "ln_f.weight" [8]: 2 of 8 values are not finite: +Inf at [1] (index 1)`},
		{"NaN extra", withNaN(ExtraPrefix+"adam.step", 0), `tensor "extra.adam.step" []: 1 of 1 values is not finite: NaN`},
	} {
		bad := resave(t, path, c.edit)
		_, _, _, err := Load(bad)
		var nf *tensor.NonFiniteError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &nf) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		loaded, _, _, err := LoadOptions{AllowNonFinite: true}.Load(bad)
		if err != nil {
			t.Errorf("%s with AllowNonFinite: %v", c.name, err)
			continue
		}
		if c.name == "NaN extra" {
			continue
		}
		if err := Save(path, loaded, nil, nil); err == nil || !strings.Contains(err.Error(), "will not save a model that is not finite: "+c.want[strings.Index(c.want, "tensor"):]) {
			t.Errorf("%s: Save: %v", c.name, err)
		}
	}
	if err := Save(path, m, nil, map[string]*tensor.Tensor{"m": {Shape: []int{2}, Data: []float32{1, float32(math.Inf(1))}}}); err == nil ||
		!strings.Contains(err.Error(), `will not save an extra tensor that is not finite: tensor "extra.m" [2]: 1 of 2 values is not finite: +Inf at [1]`) {
		t.Errorf("Save of an infinite extra tensor: %v", err)
	}
	if _, _, extra, err := Load(path); err != nil || extra["adam.step"] == nil {
		t.Errorf("the checkpoint after refused saves: %v, %v", extra, err)
	}
}

// TestCheckpointHeads checks that Save records the heads' layout, that Load refuses a config
// whose heads were changed after the weights were written (same parameter shapes), and that a
// checkpoint without the record, as written before it existed, still loads.
func TestCheckpointHeads(t *testing.T) {
	cfg := testConfig()
	cfg.Heads = 4
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Save(path, m, map[string]string{"step": "3"}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(path)
	if err != nil || f.Metadata[HeadsKey] != "[[2,2,2,2],[2,2,2,2]]" {
		t.Fatalf("saved %s %q (%v), want [[2,2,2,2],[2,2,2,2]]", HeadsKey, f.Metadata[HeadsKey], err)
	}
	if _, meta, _, err := Load(path); err != nil || !maps.Equal(meta, map[string]string{"step": "3"}) {
		t.Errorf("Load: meta %v, %v; want only step", meta, err)
	}
	heads := func(h int) func(map[string]safetensors.Tensor, map[string]string) {
		return func(_ map[string]safetensors.Tensor, meta map[string]string) {
			meta[ConfigKey] = strings.Replace(meta[ConfigKey], `"heads":4`, fmt.Sprintf(`"heads":%d`, h), 1)
		}
	}
	for _, c := range []struct {
		name string
		edit func(map[string]safetensors.Tensor, map[string]string)
		want string
	}{
		{"8 heads", heads(8), `the checkpoint's config gives layer 0 8 heads of sizes [1 1 1 1 1 1 1 1], but its weights were written for 4 heads of sizes [2 2 2 2] (metadata "layer_head_dims")`},
		{"2 heads", heads(2), `config gives layer 0 2 heads of sizes [4 4], but its weights were written for 4 heads`},
		{"layers", func(_ map[string]safetensors.Tensor, meta map[string]string) { meta[HeadsKey] = "[[2,2,2,2]]" }, `gives the heads of 1 layers, but the config has 2 layers`},
		{"not JSON", func(_ map[string]safetensors.Tensor, meta map[string]string) { meta[HeadsKey] = "4" }, `metadata "layer_head_dims" is not a JSON list of every layer's head sizes`},
	} {
		if _, _, _, err := Load(resave(t, path, c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	old := resave(t, path, func(_ map[string]safetensors.Tensor, meta map[string]string) { delete(meta, HeadsKey) })
	if got, _, _, err := Load(old); err != nil || got.Config().Heads != 4 {
		t.Errorf("a checkpoint without %s: %v", HeadsKey, err)
	}
}
