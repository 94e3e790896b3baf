package nn

import (
	"encoding/json"
	"maps"
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
	f.Fuzz(func(t *testing.T, data []byte, config string) {
		file, err := safetensors.Parse(data)
		if err != nil {
			return
		}
		if config != "" && file.Metadata != nil {
			file.Metadata[ConfigKey] = config
		}
		m, _, _, err := fromFile(file)
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
