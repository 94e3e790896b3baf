package nn

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// A checkpoint is a .safetensors file holding:
//
//   - every parameter as F32 under its name ("tok_emb.weight", "blocks.0.attn.in_proj_weight", …),
//     exactly the state dict of the PyTorch module in testdata/torch_model.py;
//   - extra tensors, such as an optimizer's state, under ExtraPrefix + their name;
//   - in the header's __metadata__, the model's Config as JSON under ConfigKey, and free-form
//     strings (task, step, command line) under any other key.
const (
	ExtraPrefix = "extra."
	ConfigKey   = "config"
)

// Save writes m's parameters, the extra tensors and the metadata to a checkpoint at path. It
// writes a temporary file in the same directory and renames it over path, so an interrupted Save
// leaves the old file (or none), never a partial one. It returns an error when meta uses
// ConfigKey, when an extra tensor is nil, has an empty name or a shape that does not match its
// data, or when writing fails.
func Save(path string, m *Model, meta map[string]string, extra map[string]*tensor.Tensor) error {
	if _, ok := meta[ConfigKey]; ok {
		return fmt.Errorf("nn: metadata key %q is reserved for the model's config", ConfigKey)
	}
	cfg, err := json.Marshal(m.cfg)
	if err != nil {
		return fmt.Errorf("nn: encode config: %w", err)
	}
	metadata := maps.Clone(meta)
	if metadata == nil {
		metadata = make(map[string]string, 1)
	}
	metadata[ConfigKey] = string(cfg)
	tensors := make(map[string]safetensors.Tensor, len(m.params)+len(extra))
	for _, p := range m.params {
		tensors[p.Name] = safetensors.FromFloat32(p.Value)
	}
	for name, t := range extra {
		if name == "" || t == nil {
			return fmt.Errorf("nn: extra tensor %q is nil or has an empty name", name)
		}
		if n, err := tensor.NumElements(t.Shape); err != nil || n != len(t.Data) {
			return fmt.Errorf("nn: extra tensor %q has %d values for shape %v", name, len(t.Data), t.Shape)
		}
		tensors[ExtraPrefix+name] = safetensors.FromFloat32(t)
	}
	return safetensors.WriteFile(path, tensors, metadata)
}

// Load reads a checkpoint that Save wrote (or that PyTorch wrote in the same layout) and returns
// the model, the metadata other than ConfigKey, and the extra tensors by their names without
// ExtraPrefix. Parameters may be stored as F32, F64, F16 or BF16.
//
// Load checks everything before it trusts anything: the file must parse (see safetensors.Parse),
// hold a valid Config under ConfigKey, every parameter of that config with its exact shape, and
// no tensor outside ExtraPrefix that is not a parameter. Errors name the tensor and, for a
// shape, both shapes. The model's memory is allocated only after the file has passed these
// checks, so a corrupt config cannot ask for more than the file holds.
func Load(path string) (m *Model, meta map[string]string, extra map[string]*tensor.Tensor, err error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	m, meta, extra, err = fromFile(f)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return m, meta, extra, nil
}

// Parse is Load of a checkpoint's bytes, such as one embedded in a binary.
func Parse(data []byte) (m *Model, meta map[string]string, extra map[string]*tensor.Tensor, err error) {
	f, err := safetensors.Parse(data)
	if err != nil {
		return nil, nil, nil, err
	}
	return fromFile(f)
}

// fromFile is Load of a parsed file.
func fromFile(f *safetensors.File) (*Model, map[string]string, map[string]*tensor.Tensor, error) {
	raw, ok := f.Metadata[ConfigKey]
	if !ok {
		return nil, nil, nil, fmt.Errorf("nn: checkpoint has no %q in its metadata: not a model checkpoint", ConfigKey)
	}
	cfg, err := ParseConfig([]byte(raw))
	if err != nil {
		return nil, nil, nil, err
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
	cfg = cfg.withDefaults()
	if err := checkShapes(cfg.layout(), shapes); err != nil {
		return nil, nil, nil, err
	}
	m, err := NewModel(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, p := range m.params {
		t, err := f.Float32(p.Name)
		if err != nil {
			return nil, nil, nil, err
		}
		copy(p.Value.Data, t.Data)
	}
	extra := make(map[string]*tensor.Tensor, len(extraNames))
	for _, name := range extraNames {
		t, err := f.Float32(name)
		if err != nil {
			return nil, nil, nil, err
		}
		extra[strings.TrimPrefix(name, ExtraPrefix)] = t
	}
	meta := maps.Clone(f.Metadata)
	delete(meta, ConfigKey)
	return m, meta, extra, nil
}
