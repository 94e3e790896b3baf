package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// layerFlags are the flags that describe where a layer and its input come from.
type layerFlags struct {
	weights, input, prefix string
	heads                  int
	addZeroAttn, causal    bool
	allowNonFinite         bool
	sparse                 sparseFlags
}

// job is one forward call read from files.
type job struct {
	layer           *mha.Layer
	prefix          string // of the parameter names in the weights file
	query, key, val *tensor.Tensor
	gradOutput      *tensor.Tensor // dL/doutput, for --backward
	opt             mha.Options
	warnings        []string // lines for stderr once the command has succeeded
}

// printWarnings writes j's warnings to w, one per line.
func (j *job) printWarnings(w io.Writer) {
	for _, line := range j.warnings {
		fmt.Fprintln(w, line)
	}
}

// load reads the layer and its input as the flags say. Weights that are not finite are an error
// unless --allow-nonfinite, and then a warning in the job; inputs that are not finite are a
// warning.
func (f *layerFlags) load() (*job, error) {
	switch {
	case f.weights == "":
		return nil, fmt.Errorf("--weights is required: a .safetensors file with nn.MultiheadAttention's state dict")
	case f.input == "":
		return nil, fmt.Errorf("--input is required: a .safetensors file with a query tensor")
	case f.heads == 0:
		return nil, fmt.Errorf("--heads is required: the number of heads (PyTorch does not store it in the state dict)")
	case f.heads < 0:
		return nil, fmt.Errorf("--heads is %d, want the number of heads (> 0)", f.heads)
	}
	var warnings []string
	warn := func(path string, err error) { warnings = append(warnings, nonFiniteWarning(path, err)) }
	l, prefix, err := loadLayer(f.weights, f.prefix, f.heads, f.addZeroAttn, f.allowNonFinite, warn)
	if err != nil {
		return nil, err
	}
	j, err := loadInput(f.input, l.Config(), warn)
	if err != nil {
		return nil, err
	}
	j.layer, j.prefix, j.warnings = l, prefix, warnings
	j.opt.Causal = f.causal
	if j.opt.Patterns, j.opt.Block, j.opt.Normalizer, err = f.sparse.parse(); err != nil {
		return nil, err
	}
	return j, nil
}

// loadLayer builds a layer from an nn.MultiheadAttention state dict stored in path, taking the
// tensors whose names start with prefix (which is stripped). When they are all bfloat16 (or all
// float16), the layer keeps its weight matrices in that form. It returns the prefix it used: the
// one given, with a dot added when it names a module. A tensor holding NaN or ±Inf is an error
// unless allowNonFinite, and then passed to warn.
func loadLayer(path, prefix string, heads int, addZeroAttn, allowNonFinite bool, warn func(path string, err error)) (*mha.Layer, string, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	if !f.Has(prefix+"out_proj.weight") && f.Has(prefix+".out_proj.weight") {
		prefix += "." // a PyTorch module path given without the dot before the parameter names
	}
	sd := map[string]*tensor.Tensor{}
	dtypes := map[safetensors.DType]bool{}
	for _, name := range f.Names() {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if raw, err := f.Raw(name); err == nil {
			dtypes[raw.DType] = true
		}
		if err := needFloat(f, name); err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		t, err := f.Float32(name)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		if err := checkFinite(f, name, t); err != nil {
			if !allowNonFinite {
				return nil, "", withNonFiniteHint(fmt.Errorf("%s: %w", path, err))
			}
			warn(path, err)
		}
		sd[strings.TrimPrefix(name, prefix)] = t
	}
	if len(sd) == 0 {
		return nil, "", fmt.Errorf("%s: no tensor named %q… (has %s)", path, prefix, strings.Join(f.Names(), ", "))
	}
	cfg, err := mha.InferConfig(sd, heads)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	cfg.AddZeroAttn = addZeroAttn
	l, err := mha.New(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if len(dtypes) == 1 && (dtypes[safetensors.BF16] || dtypes[safetensors.F16]) {
		// A bfloat16 or float16 checkpoint: the layer keeps its weight matrices as they are.
		half := map[string]*tensor.Half{}
		for name := range sd {
			if half[name], err = f.Half(prefix + name); err != nil {
				return nil, "", fmt.Errorf("%s: %w", path, err)
			}
		}
		if err := l.LoadHalfStateDict(half); err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		return l, prefix, nil
	}
	if err := l.LoadStateDict(sd); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return l, prefix, nil
}

// inputNames are the tensors an input file may hold.
var inputNames = []string{"query", "key", "value", "key_padding_mask", "attn_mask", "grad_output"}

// loadInput reads the query, optional key and value, and masks from path. It passes to warn a
// query, key, value or grad_output that holds NaN or ±Inf, and a float attn_mask that holds NaN
// or +Inf (−Inf is a mask).
func loadInput(path string, cfg mha.Config, warn func(path string, err error)) (*job, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, name := range f.Names() {
		if !slices.Contains(inputNames, name) {
			return nil, fmt.Errorf("%s: unexpected tensor %q (an input file holds %s)", path, name, strings.Join(inputNames, ", "))
		}
	}
	if !f.Has("query") {
		return nil, fmt.Errorf("%s: no tensor \"query\" ([B Tq %d] or [Tq %d]); it has %s", path, cfg.EmbedDim, cfg.EmbedDim, strings.Join(f.Names(), ", "))
	}
	if f.Has("key") != f.Has("value") {
		return nil, fmt.Errorf("%s: has only one of key and value; give both, or neither for self-attention", path)
	}
	float := func(name string) (*tensor.Tensor, error) {
		t, err := readFloat(f, path, name)
		if t != nil {
			if err := checkFinite(f, name, t); err != nil {
				warn(path, err)
			}
		}
		return t, err
	}
	j := &job{}
	if j.query, err = float("query"); err != nil {
		return nil, err
	}
	if j.key, err = float("key"); err != nil {
		return nil, err
	}
	if j.val, err = float("value"); err != nil {
		return nil, err
	}
	if j.gradOutput, err = float("grad_output"); err != nil {
		return nil, err
	}
	if f.Has("key_padding_mask") {
		if j.opt.KeyPaddingMask, err = f.Bool("key_padding_mask"); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if f.Has("attn_mask") {
		raw, _ := f.Raw("attn_mask")
		switch raw.DType {
		case safetensors.Bool, safetensors.U8:
			j.opt.AttnMask, err = f.Bool("attn_mask")
		case safetensors.F32, safetensors.F64, safetensors.F16, safetensors.BF16:
			if j.opt.AttnBias, err = f.Float32("attn_mask"); err == nil {
				if bad := checkBias("attn_mask", j.opt.AttnBias); bad != nil {
					warn(path, bad)
				}
			}
		default:
			err = fmt.Errorf("tensor \"attn_mask\" is %s, want BOOL or U8 (true = may not attend) or a float dtype (added to the scores)", raw.DType)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return j, nil
}

// readFloat returns tensor name of f, read from path, as float32, or nil when f has no such
// tensor. It must be stored in a floating-point dtype.
func readFloat(f *safetensors.File, path, name string) (*tensor.Tensor, error) {
	if !f.Has(name) {
		return nil, nil
	}
	if err := needFloat(f, name); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := f.Float32(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// needFloat reports an error unless tensor name is stored in a floating-point dtype.
func needFloat(f *safetensors.File, name string) error {
	raw, err := f.Raw(name)
	if err != nil {
		return err
	}
	switch raw.DType {
	case safetensors.F32, safetensors.F64, safetensors.F16, safetensors.BF16:
		return nil
	}
	return fmt.Errorf("tensor %q is %s, want a float dtype (F32, F64, F16 or BF16)", name, raw.DType)
}
