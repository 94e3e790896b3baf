package circuits

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/safetensors"
)

// dlaGolden is one reference of testdata/gen_circuits_dla.py: a tiny Hugging Face folder and
// the attribution and lens its float64 PyTorch forward gives.
type dlaGolden struct {
	f      *safetensors.File
	m      *pretrained.Model
	tokens []int
}

func openDLAGolden(t *testing.T, name string) dlaGolden {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join("..", "testdata", "circuits", "dla_"+name+".safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := pretrained.Open(filepath.Join("..", "testdata", "pretrained", name))
	if err != nil {
		t.Fatal(err)
	}
	g := dlaGolden{f: f, m: m}
	g.tokens = g.ints(t, "input_ids")
	return g
}

func (g dlaGolden) floats(t *testing.T, name string) ([]float64, []int) {
	t.Helper()
	v, shape, err := g.f.Float64(name)
	if err != nil {
		t.Fatal(err)
	}
	return v, shape
}

func (g dlaGolden) ints(t *testing.T, name string) []int {
	v, _ := g.floats(t, name)
	ids := make([]int, len(v))
	for i, x := range v {
		ids[i] = int(x)
	}
	return ids
}

// near reports whether got is want within 1e-4·max(1, |want|).
func near(got, want float64) bool { return math.Abs(got-want) <= 1e-4*max(1, math.Abs(want)) }

// TestAttributeReference checks every component of the attribution against the float64 PyTorch
// reference on tiny GPT-2 (LayerNorm, tied head, biases), Llama (RMSNorm, grouped-query
// attention; float32 and bfloat16 weights, untied and tied heads), Qwen3 (qk-norm, heads wider
// than d_model/heads), Gemma (GeGLU, √d_model-scaled embeddings, norm gains 1 + w), Phi-3
// (fused projections, partial rotary, a sliding window), Gemma 2 (soft-capped scores, and
// logits whose LD is taken before their cap), Gemma 3 (each head's write through the
// sandwich's post-attention norm at its frozen scale; local layers), Pythia (the MLP parallel
// to the attention, float16), Phi-2 (one LayerNorm for both, the head's bias), OLMo 2 (no input
// norms, each head's write through its post-attention norm at its frozen scale, qk-norm across
// the heads) and Mixtral (the MLP's part its experts' weighted sum) folders.
func TestAttributeReference(t *testing.T) {
	for _, name := range []string{"gpt2", "llama", "llama3-bf16", "qwen3-wide", "gemma", "phi3", "gemma2", "gemma3", "pythia", "phi2", "olmo2", "mixtral"} {
		g := openDLAGolden(t, name)
		mt := g.ints(t, "metric")
		a, err := Attribute(g.m.NN, g.tokens, Metric{Target: mt[0], Foil: mt[1], Position: mt[2]}, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		check := func(what string, got, want float64) {
			if !near(got, want) {
				t.Errorf("%s: %s is %.7g, reference %.7g", name, what, got, want)
			}
		}
		one := func(key string) float64 { v, _ := g.floats(t, key); return v[0] }
		check("LD", a.LD, one("dla.ld"))
		check("the sum", a.Sum(), one("dla.ld"))
		check("embed", a.Embed, one("dla.embed"))
		check("norm bias", a.NormBias, one("dla.norm_bias"))
		check("head bias", a.HeadBias, one("dla.head_bias"))
		check("scale", a.Scale, one("dla.scale"))
		heads, shape := g.floats(t, "dla.heads")
		if len(a.Heads) != shape[0] || len(a.Heads[0]) != shape[1] {
			t.Fatalf("%s: heads %d×%d, reference %v", name, len(a.Heads), len(a.Heads[0]), shape)
		}
		mlp, _ := g.floats(t, "dla.mlp")
		bias, _ := g.floats(t, "dla.attn_bias")
		for l := range a.Heads {
			for h, v := range a.Heads[l] {
				check(fmt.Sprintf("head %d.%d", l, h), v, heads[l*shape[1]+h])
			}
			check(fmt.Sprintf("MLP %d", l), a.MLP[l], mlp[l])
			check(fmt.Sprintf("attention bias %d", l), a.AttnBias[l], bias[l])
		}
	}
}

// TestLensReference checks the lens's top tokens, logits and probabilities at every layer and
// position against the float64 PyTorch reference, on the GPT-2, Llama and BERT folders.
func TestLensReference(t *testing.T) {
	for _, name := range []string{"gpt2", "llama", "llama3-bf16", "qwen3-wide", "gemma", "phi3", "gemma2", "gemma3", "pythia", "phi2", "olmo2", "mixtral", "bert"} {
		g := openDLAGolden(t, name)
		ids, shape := g.floats(t, "lens.ids")
		logits, _ := g.floats(t, "lens.logits")
		probs, _ := g.floats(t, "lens.probs")
		k := shape[2]
		lens, err := LogitLens(g.m.NN, g.tokens, &LensOptions{K: k})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(lens.Top) != shape[0] || len(lens.Top[0]) != shape[1] {
			t.Fatalf("%s: lens of %d layers × %d positions, reference %v", name, len(lens.Top), len(lens.Top[0]), shape)
		}
		for l := range lens.Top {
			for p := range lens.Top[l] {
				for i, pr := range lens.Top[l][p] {
					j := (l*shape[1]+p)*k + i
					if pr.Token != int(ids[j]) || !near(pr.Logit, logits[j]) || math.Abs(pr.Prob-probs[j]) > 1e-5 {
						t.Errorf("%s: layer %d, position %d, top %d: %+v, reference token %d, logit %.7g, probability %.7g",
							name, l, p, i, pr, int(ids[j]), logits[j], probs[j])
					}
				}
			}
		}
	}
}
