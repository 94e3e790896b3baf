package nn

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// A checkpoint is a .safetensors file holding:
//
//   - every parameter as F32 under its name ("tok_emb.weight", "blocks.0.attn.in_proj_weight", …),
//     exactly the state dict of the PyTorch module in testdata/torch_model.py;
//   - extra tensors, such as an optimizer's state, under ExtraPrefix + their name;
//   - in the header's __metadata__, the model's Config as JSON under ConfigKey, the size of
//     every head of every layer under HeadsKey, and free-form strings (task, step, command line)
//     under any other key.
//
// Every stored value is finite: Save refuses NaN and ±Inf, and Load refuses them unless
// LoadOptions.AllowNonFinite.
const (
	ExtraPrefix = "extra."
	ConfigKey   = "config"
	// HeadsKey holds the heads' layout the weights were trained with, as JSON: one list per
	// layer of its heads' sizes, e.g. [[16,16,16,16],[16,16,16,16]]. The parameters' shapes do
	// not show how d_model is cut into heads (4 heads of 16 and 8 heads of 8 have the same
	// weight shapes), so the layout is stated twice, in the config and here, and Load refuses a
	// checkpoint whose two statements differ: a config edited after the weights were written.
	// Checkpoints without it (written before it existed, or by other tools) load unchecked.
	HeadsKey = "layer_head_dims"
)

// Save writes m's parameters (those held in half precision as their float32 values), the extra
// tensors and the metadata to a checkpoint at path. It writes a temporary file in the same
// directory and renames it over path, so an interrupted Save leaves the old file (or none), never
// a partial one. It returns an error, and writes nothing,
// when meta uses ConfigKey or HeadsKey; when an extra tensor is nil, has an empty name or a
// shape that does not match its data; when a parameter or extra tensor holds NaN or ±Inf (the
// error wraps a *tensor.NonFiniteError naming it); or when writing fails.
func Save(path string, m *Model, meta map[string]string, extra map[string]*tensor.Tensor) error {
	for _, key := range []string{ConfigKey, HeadsKey} {
		if _, ok := meta[key]; ok {
			return fmt.Errorf("nn: metadata key %q is reserved for the model's config", key)
		}
	}
	if err := m.CheckFinite(); err != nil {
		return fmt.Errorf("nn: will not save a model that is not finite: %w", err)
	}
	cfg, err := json.Marshal(m.cfg)
	if err != nil {
		return fmt.Errorf("nn: encode config: %w", err)
	}
	heads, err := json.Marshal(m.cfg.headDims())
	if err != nil {
		return fmt.Errorf("nn: encode the heads' layout: %w", err)
	}
	metadata := maps.Clone(meta)
	if metadata == nil {
		metadata = make(map[string]string, 2)
	}
	metadata[ConfigKey], metadata[HeadsKey] = string(cfg), string(heads)
	tensors := make(map[string]safetensors.Tensor, len(m.params)+len(extra))
	for _, p := range m.params {
		tensors[p.Name] = safetensors.FromFloat32(p.Float32())
	}
	for name, t := range extra {
		if name == "" || t == nil {
			return fmt.Errorf("nn: extra tensor %q is nil or has an empty name", name)
		}
		if n, err := tensor.NumElements(t.Shape); err != nil || n != len(t.Data) {
			return fmt.Errorf("nn: extra tensor %q has %d values for shape %v", name, len(t.Data), t.Shape)
		}
		if err := t.CheckFinite(ExtraPrefix + name); err != nil {
			return fmt.Errorf("nn: will not save an extra tensor that is not finite: %w", err)
		}
		tensors[ExtraPrefix+name] = safetensors.FromFloat32(t)
	}
	return safetensors.WriteFile(path, tensors, metadata)
}

// LoadOptions are the options of LoadOptions.Load and LoadOptions.Parse; the zero value is what
// Load and Parse do.
type LoadOptions struct {
	// AllowNonFinite loads parameters and extra tensors that hold NaN or ±Inf, which are
	// refused otherwise (one such parameter makes every output NaN): set it to look into a model
	// that diverged.
	AllowNonFinite bool
}

// Load reads a checkpoint that Save wrote (or that PyTorch wrote in the same layout) and returns
// the model, the metadata other than ConfigKey and HeadsKey, and the extra tensors by their names
// without ExtraPrefix. Parameters may be stored as F32, F64, F16 or BF16.
//
// Load checks everything before it trusts anything: the file must parse (see safetensors.Parse),
// hold a valid Config under ConfigKey, agree with the heads' layout under HeadsKey when it has
// one, hold every parameter of that config with its exact shape, and no tensor outside
// ExtraPrefix that is not a parameter. Errors name the tensor and, for a shape, both shapes. The
// model's memory is allocated only after the file has passed these checks, so a corrupt config
// cannot ask for more than the file holds. Last, every value must be finite: a NaN or ±Inf (also
// an F64 value beyond float32's range) is an error wrapping a *tensor.NonFiniteError that names
// the first such tensor.
func Load(path string) (m *Model, meta map[string]string, extra map[string]*tensor.Tensor, err error) {
	return LoadOptions{}.Load(path)
}

// Parse is Load of a checkpoint's bytes, such as one embedded in a binary.
func Parse(data []byte) (m *Model, meta map[string]string, extra map[string]*tensor.Tensor, err error) {
	return LoadOptions{}.Parse(data)
}

// Load is the package's Load with the options o. Errors name path.
func (o LoadOptions) Load(path string) (m *Model, meta map[string]string, extra map[string]*tensor.Tensor, err error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	m, meta, extra, err = o.fromFile(f)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return m, meta, extra, nil
}

// Parse is the package's Parse with the options o.
func (o LoadOptions) Parse(data []byte) (m *Model, meta map[string]string, extra map[string]*tensor.Tensor, err error) {
	f, err := safetensors.Parse(data)
	if err != nil {
		return nil, nil, nil, err
	}
	return o.fromFile(f)
}

// fromFile is Load of a parsed file.
func (o LoadOptions) fromFile(f *safetensors.File) (*Model, map[string]string, map[string]*tensor.Tensor, error) {
	raw, ok := f.Metadata[ConfigKey]
	if !ok {
		return nil, nil, nil, fmt.Errorf("nn: checkpoint has no %q in its metadata: not a model checkpoint", ConfigKey)
	}
	cfg, err := ParseConfig([]byte(raw))
	if err != nil {
		return nil, nil, nil, err
	}
	if heads, ok := f.Metadata[HeadsKey]; ok {
		if err := cfg.checkHeads(heads); err != nil {
			return nil, nil, nil, err
		}
	}
	shapes := make(map[string][]int)
	var extraNames []string
	for _, name := range f.Names() {
		if rest, ok := strings.CutPrefix(name, ExtraPrefix); ok {
			if rest == "" {
				return nil, nil, nil, fmt.Errorf("nn: checkpoint tensor %q has an empty extra name", name)
			}
			extraNames = append(extraNames, name)
			continue
		}
		t, err := f.Raw(name)
		if err != nil {
			return nil, nil, nil, err
		}
		switch t.DType {
		case safetensors.F32, safetensors.F64, safetensors.F16, safetensors.BF16:
		default:
			return nil, nil, nil, fmt.Errorf("nn: parameter %q is %s, want a float dtype (F32, F64, F16 or BF16)", name, t.DType)
		}
		shapes[name] = t.Shape
	}
	if err := checkShapes(cfg.withDefaults().layout(), shapes); err != nil {
		return nil, nil, nil, err
	}
	sd := make(map[string]*tensor.Tensor, len(shapes))
	for name := range shapes {
		if sd[name], err = f.Float32(name); err != nil {
			return nil, nil, nil, err
		}
	}
	m, err := NewModelFloat32(cfg, sd)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := m.CheckFinite(); err != nil && !o.AllowNonFinite {
		return nil, nil, nil, fmt.Errorf("nn: checkpoint %w", err)
	}
	extra := make(map[string]*tensor.Tensor, len(extraNames))
	for _, name := range extraNames {
		t, err := f.Float32(name)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := t.CheckFinite(name); err != nil && !o.AllowNonFinite {
			return nil, nil, nil, fmt.Errorf("nn: checkpoint %w", err)
		}
		extra[strings.TrimPrefix(name, ExtraPrefix)] = t
	}
	meta := maps.Clone(f.Metadata)
	delete(meta, ConfigKey)
	delete(meta, HeadsKey)
	return m, meta, extra, nil
}

// headDims returns the size of every head of every layer of c, as Save records it under
// HeadsKey.
func (c Config) headDims() [][]int {
	ac := c.Attention()
	dims := make([]int, c.Heads)
	for h := range dims {
		dims[h] = ac.HeadDim(h)
	}
	layers := make([][]int, c.Layers)
	for l := range layers {
		layers[l] = dims
	}
	return layers
}

// checkHeads returns an error unless raw, a checkpoint's HeadsKey metadata, is the JSON of the
// heads' layout of c.
func (c Config) checkHeads(raw string) error {
	var got [][]int
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		return fmt.Errorf("nn: checkpoint metadata %q is not a JSON list of every layer's head sizes: %w", HeadsKey, err)
	}
	want := c.headDims()
	if len(got) != len(want) {
		return fmt.Errorf("nn: checkpoint metadata %q gives the heads of %d layers, but the config has %d layers", HeadsKey, len(got), len(want))
	}
	for l := range want {
		if !slices.Equal(got[l], want[l]) {
			return fmt.Errorf("nn: the checkpoint's config gives layer %d %d heads of sizes %v, but its weights were written for %d heads of sizes %v (metadata %q): the config was changed after the weights were saved",
				l, len(want[l]), want[l], len(got[l]), got[l], HeadsKey)
		}
	}
	return nil
}
