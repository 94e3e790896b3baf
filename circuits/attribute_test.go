package circuits

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// attributeModels are random models of the layouts direct logit attribution covers: pre-norm,
// LayerNorm and RMSNorm, multi-head and grouped-query attention, tied and untied heads, with and
// without biases, attention-only.
var attributeModels = map[string]nn.Config{
	"layernorm":      {Vocab: 13, SeqLen: 10, DModel: 12, Heads: 3, Layers: 2, FFN: 20, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 1},
	"gpt2":           {Vocab: 13, SeqLen: 10, DModel: 12, Heads: 4, Layers: 3, FFN: 24, Norm: nn.PreNorm, Positions: nn.Learned, Activation: nn.GELUNew, TieEmbeddings: true, NoHeadBias: true, Seed: 2},
	"llama-gqa":      {Vocab: 17, SeqLen: 10, DModel: 16, Heads: 4, KVHeads: 2, Layers: 2, FFN: 28, Norm: nn.PreNorm, Positions: nn.NoPositions, NormKind: nn.RMSNorm, NormEps: 1e-6, Activation: nn.SwiGLU, NoMLPBias: true, NoHeadBias: true, NoAttnBias: true, Rope: &nn.Rope{Theta: 500}, Seed: 3},
	"llama-tied":     {Vocab: 17, SeqLen: 10, DModel: 16, Heads: 4, KVHeads: 1, Layers: 2, FFN: 28, Norm: nn.PreNorm, Positions: nn.NoPositions, NormKind: nn.RMSNorm, Activation: nn.SwiGLU, TieEmbeddings: true, Rope: &nn.Rope{Theta: 10000}, Seed: 4},
	"attn-only":      {Vocab: 11, SeqLen: 10, DModel: 12, Heads: 3, Layers: 2, AttnOnly: true, Norm: nn.PreNorm, Positions: nn.Sinusoidal, Seed: 5},
	"head-dims":      {Vocab: 11, SeqLen: 10, DModel: 12, Heads: 3, HeadDims: []int{2, 4, 6}, Layers: 2, FFN: 16, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 6},
	"emb-norm-types": {Vocab: 11, SeqLen: 10, DModel: 12, Heads: 2, Layers: 2, FFN: 16, Norm: nn.PreNorm, Positions: nn.Learned, TypeVocab: 2, EmbNorm: true, Bidirectional: true, Seed: 7},
	// Sandwich norms: the attention's output normalised before it joins the stream, with
	// LayerNorm (centred, with a shift) and with Gemma 3's RMSNorm, local blocks and qk-norm.
	"sandwich-layernorm": {Vocab: 13, SeqLen: 10, DModel: 12, Heads: 3, Layers: 2, FFN: 20, Norm: nn.PreNorm, Positions: nn.Learned, SandwichNorm: true, Seed: 8},
	"gemma3": {Vocab: 17, SeqLen: 10, DModel: 16, Heads: 4, KVHeads: 2, HeadSize: 6, Layers: 2, FFN: 28, Norm: nn.PreNorm, Positions: nn.NoPositions, NormKind: nn.RMSNorm,
		Activation: nn.GeGLU, NoMLPBias: true, NoHeadBias: true, NoAttnBias: true, TieEmbeddings: true, QKNorm: true, SandwichNorm: true, Rope: &nn.Rope{Theta: 1e6},
		Local: &nn.Local{Layers: []bool{true, false}, Window: 3, Rope: &nn.Rope{Theta: 10}}, Seed: 9},
}

// TestAttributeSums checks that the components and bias terms of an attribution sum to the
// logit difference of the model's own logits, at every position, on random models of every
// layout Attribute covers; and that the attribution does not depend on the worker count.
func TestAttributeSums(t *testing.T) {
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5}
	for name, cfg := range attributeModels {
		m, err := nn.NewModel(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rng := tensor.NewRNG(uint64(len(name)))
		for _, p := range m.Params() {
			if strings.Contains(p.Name, "_post.") { // the sandwich's gains and shifts off their init
				rng.Normal(p.Value, 0.5)
			}
		}
		for p := range tokens {
			mt := Metric{Target: (p + 2) % cfg.Vocab, Foil: (3*p + 1) % cfg.Vocab, Position: p}
			a, err := Attribute(m, tokens, mt, 1)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if d := math.Abs(a.Sum() - a.LD); d > 1e-4*max(1, math.Abs(a.LD)) {
				t.Errorf("%s, position %d: the attribution sums to %.7g, LD %.7g (difference %.3g)", name, p, a.Sum(), a.LD, d)
			}
			if len(a.Heads) != cfg.Layers || len(a.Heads[0]) != cfg.Heads || len(a.MLP) != cfg.Layers || len(a.AttnBias) != cfg.Layers {
				t.Fatalf("%s: heads %d×%d, mlp %d, attn_bias %d, want %d×%d and %d", name, len(a.Heads), len(a.Heads[0]), len(a.MLP), len(a.AttnBias), cfg.Layers, cfg.Heads, cfg.Layers)
			}
			b, err := Attribute(m, tokens, mt, 3)
			if err != nil {
				t.Fatal(err)
			}
			if b.Sum() != a.Sum() || b.Heads[0][0] != a.Heads[0][0] {
				t.Errorf("%s: 3 workers give %v, 1 worker %v", name, b.Sum(), a.Sum())
			}
		}
	}
}

// TestAttributeErrors checks that bad input is an error, and a post-norm model or one with a
// head transform an error wrapping ErrNotDecomposable.
func TestAttributeErrors(t *testing.T) {
	m, err := nn.NewModel(attributeModels["layernorm"])
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		tokens []int
		mt     Metric
		want   string
	}{
		"empty":    {nil, Metric{}, "empty"},
		"token":    {[]int{1, 99}, Metric{Position: 1}, "outside"},
		"long":     {make([]int, 11), Metric{}, "seq_len"},
		"target":   {[]int{1, 2}, Metric{Target: 13}, "target"},
		"foil":     {[]int{1, 2}, Metric{Foil: -1}, "foil"},
		"position": {[]int{1, 2}, Metric{Position: 2}, "position"},
	} {
		if _, err := Attribute(m, tc.tokens, tc.mt, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, tc.want)
		}
	}
	if _, err := Attribute(nil, []int{1}, Metric{}, 0); err == nil {
		t.Error("nil model: no error")
	}
	post := attributeModels["layernorm"]
	post.Norm = nn.PostNorm
	transform := attributeModels["layernorm"]
	transform.HeadTransform = true
	for name, cfg := range map[string]nn.Config{"post-norm": post, "head transform": transform} {
		m, err := nn.NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Attribute(m, []int{1, 2}, Metric{}, 0); !errors.Is(err, ErrNotDecomposable) {
			t.Errorf("%s: error %v, want ErrNotDecomposable", name, err)
		}
	}
}
