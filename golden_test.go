package mha

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// goldenCase is one file written by testdata/gen_golden.py: a PyTorch layer, its inputs, and
// what PyTorch computed from them in float64.
type goldenCase struct {
	file    *safetensors.File
	layer   *Layer
	q, k, v *tensor.Tensor
	opt     Options
}

func loadGolden(t *testing.T, path string) *goldenCase {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := strconv.Atoi(f.Metadata["num_heads"])
	if err != nil {
		t.Fatalf("num_heads: %v", err)
	}
	sd := map[string]*tensor.Tensor{}
	inputs := map[string]bool{"query": true, "key": true, "value": true, "key_padding_mask": true, "attn_mask": true, "grad_output": true}
	outputs := map[string]bool{"output": true, "attn_weights": true, "attn_weights_per_head": true}
	for _, name := range f.Names() {
		if inputs[name] || outputs[name] || strings.HasPrefix(name, "grad.") {
			continue
		}
		if sd[name], err = f.Float32(name); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := InferConfig(sd, heads)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AddZeroAttn = f.Metadata["add_zero_attn"] == "true"
	g := &goldenCase{file: f, layer: newLayer(t, cfg)}
	if err := g.layer.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	get := func(name string) *tensor.Tensor {
		if !f.Has(name) {
			return nil
		}
		x, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	g.q, g.k, g.v = get("query"), get("key"), get("value")
	g.opt.Causal = f.Metadata["causal"] == "true"
	if f.Has("key_padding_mask") {
		if g.opt.KeyPaddingMask, err = f.Bool("key_padding_mask"); err != nil {
			t.Fatal(err)
		}
	}
	if raw, err := f.Raw("attn_mask"); err == nil {
		if raw.DType == safetensors.Bool {
			g.opt.AttnMask, err = f.Bool("attn_mask")
		} else {
			g.opt.AttnBias, err = f.Float32("attn_mask")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func (g *goldenCase) want(t *testing.T, name string) []float64 {
	t.Helper()
	v, _, err := g.file.Float64(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGolden compares Forward (float32) and Reference (float64) with PyTorch 1.13's
// nn.MultiheadAttention computed in float64, on every case in testdata/golden.
func TestGolden(t *testing.T) {
	paths, _ := filepath.Glob("testdata/golden/*.safetensors")
	if len(paths) < 20 {
		t.Fatalf("found %d golden files, want the ~28 of testdata/gen_golden.py", len(paths))
	}
	worst32, worst64 := 0.0, 0.0
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".safetensors")
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, path)
			per := g.opt
			per.NeedWeights, per.PerHeadWeights = true, true
			r, err := g.layer.Forward(g.q, g.k, g.v, &per)
			if err != nil {
				t.Fatal(err)
			}
			avg := g.opt
			avg.NeedWeights = true
			ra, err := g.layer.Forward(g.q, g.k, g.v, &avg)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := g.layer.Reference(g.q, g.k, g.v, &g.opt)
			if err != nil {
				t.Fatal(err)
			}
			if r.FullyMasked != 0 {
				t.Errorf("FullyMasked = %d, want 0", r.FullyMasked)
			}
			for _, c := range []struct {
				what string
				got  []float32
				want string
			}{
				{"output", r.Output.Data, "output"},
				{"per-head weights", r.Weights.Data, "attn_weights_per_head"},
				{"averaged weights", ra.Weights.Data, "attn_weights"},
			} {
				e := tensor.RelError(c.got, g.want(t, c.want))
				worst32 = max(worst32, e)
				if e > 1e-5 {
					t.Errorf("float32 %s: relative error %.3g, want ≤ 1e-5", c.what, e)
				}
			}
			if _, shape, _ := g.file.Float64("output"); !equalInts(r.Output.Shape, shape) {
				t.Errorf("output shape %v, PyTorch's %v", r.Output.Shape, shape)
			}
			for _, c := range []struct {
				what      string
				got, want []float64
			}{{"output", tr.Output, g.want(t, "output")}, {"weights", tr.Weights, g.want(t, "attn_weights_per_head")}} {
				e := tensor.RelError(c.got, c.want)
				worst64 = max(worst64, e)
				if e > 1e-12 {
					t.Errorf("float64 %s: relative error %.3g, want ≤ 1e-12", c.what, e)
				}
			}
		})
	}
	t.Logf("worst relative error against PyTorch: float32 path %.3g, float64 reference %.3g", worst32, worst64)
}
