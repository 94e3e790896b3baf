package nn

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// TestModelFloat32 checks that NewModelFloat32 holds the state dict's own tensors, each with a
// zero gradient of its own, and that it computes and trains as the model the tensors came from:
// the same logits, gradients and updated values, bit for bit.
func TestModelFloat32(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(halfConfigs())) {
		cfg := halfConfigs()[name]
		t.Run(name, func(t *testing.T) {
			full, err := NewModel(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sd := map[string]*tensor.Tensor{}
			for pname, v := range full.StateDict() {
				sd[pname] = &tensor.Tensor{Shape: slices.Clone(v.Shape), Data: slices.Clone(v.Data)}
			}
			m, err := NewModelFloat32(cfg, sd)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range m.Params() {
				if p.Value != sd[p.Name] || p.Half != nil {
					t.Errorf("%s: not the state dict's tensor", p.Name)
				}
				if p.Grad == nil || &p.Grad.Data[0] == &p.Value.Data[0] || slices.ContainsFunc(p.Grad.Data, func(g float32) bool { return g != 0 }) {
					t.Errorf("%s: its gradient is not a zero tensor of its own", p.Name)
				}
			}
			b, n := 2, min(cfg.SeqLen, 11)
			tokens, targets := make([]int, b*n), make([]int, b*n)
			for i := range tokens {
				tokens[i], targets[i] = (7*i+3)%cfg.Vocab, (5*i+1)%cfg.Vocab
			}
			opt := &RunOptions{}
			if cfg.TypeVocab > 0 {
				opt.TokenTypes = make([]int, b*n)
				for i := range opt.TokenTypes {
					opt.TokenTypes[i] = i % cfg.TypeVocab
				}
			}
			for _, mm := range []*Model{m, full} {
				if _, err := mm.Forward(tokens, b, n, opt); err != nil {
					t.Fatal(err)
				}
				if _, _, _, err := mm.Loss(targets, nil); err != nil {
					t.Fatal(err)
				}
				if err := mm.Backward(); err != nil {
					t.Fatal(err)
				}
				adam, err := NewAdamW(mm.Params(), AdamWConfig{})
				if err != nil {
					t.Fatal(err)
				}
				if err := adam.Step(1e-2); err != nil {
					t.Fatal(err)
				}
			}
			if !bitsEqual(m.logits, full.logits) {
				t.Error("Forward: the logits differ from the original model's")
			}
			fullParams := full.Params()
			for i, p := range m.Params() {
				if !bitsEqual(p.Grad.Data, fullParams[i].Grad.Data) || !bitsEqual(p.Value.Data, fullParams[i].Value.Data) {
					t.Errorf("%s: the gradient or the updated value differs from the original model's", p.Name)
				}
			}
		})
	}
}

// TestModelFloat32Errors checks what NewModelFloat32 refuses.
func TestModelFloat32Errors(t *testing.T) {
	cfg := hfConfigs()["gpt2"]
	full, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sd := full.StateDict()
	edit := func(f func(sd map[string]*tensor.Tensor)) map[string]*tensor.Tensor {
		c := maps.Clone(sd)
		f(c)
		return c
	}
	for _, tc := range []struct {
		name, want string
		sd         map[string]*tensor.Tensor
	}{
		{"missing", `missing parameter "ln_f.bias"`, edit(func(sd map[string]*tensor.Tensor) { delete(sd, "ln_f.bias") })},
		{"extra", `unexpected tensor "head.weight"`, edit(func(sd map[string]*tensor.Tensor) { sd["head.weight"] = tensor.New(1) })},
		{"shape", `"ln_f.bias" is [4 2], want [8]`, edit(func(sd map[string]*tensor.Tensor) { sd["ln_f.bias"] = tensor.New(4, 2) })},
		{"count", `"ln_f.bias" has 3 values for shape [8]`, edit(func(sd map[string]*tensor.Tensor) {
			sd["ln_f.bias"] = &tensor.Tensor{Shape: []int{8}, Data: make([]float32, 3)}
		})},
		{"nil", `"ln_f.bias" is nil`, edit(func(sd map[string]*tensor.Tensor) { sd["ln_f.bias"] = nil })},
	} {
		if _, err := NewModelFloat32(cfg, tc.sd); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	bad := cfg
	bad.Heads = 3
	if _, err := NewModelFloat32(bad, sd); err == nil || !strings.Contains(err.Error(), "not divisible") {
		t.Errorf("a bad config: %v", err)
	}
}
