package circuits

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
)

// lensModels add the post-norm layouts, with and without a head transform, to attributeModels.
func lensModels() map[string]nn.Config {
	ms := map[string]nn.Config{
		"bert":      {Vocab: 19, SeqLen: 10, DModel: 12, Heads: 3, Layers: 2, FFN: 16, Norm: nn.PostNorm, Positions: nn.Learned, NormEps: 1e-12, TypeVocab: 2, EmbNorm: true, Bidirectional: true, HeadTransform: true, TieEmbeddings: true, Seed: 8},
		"post-norm": {Vocab: 11, SeqLen: 10, DModel: 12, Heads: 2, Layers: 3, FFN: 16, Norm: nn.PostNorm, Positions: nn.Sinusoidal, Seed: 9},
		"pre-tanh":  {Vocab: 11, SeqLen: 10, DModel: 12, Heads: 2, Layers: 2, FFN: 16, Norm: nn.PreNorm, Positions: nn.Learned, Activation: nn.GELUNew, HeadTransform: true, Seed: 10},
	}
	for name, c := range attributeModels {
		ms[name] = c
	}
	return ms
}

// TestLensLastLayer checks that the lens at the last layer gives the model's own top tokens and
// probabilities, at every position, for every layout, and that the targets' ranks agree with
// the top tokens.
func TestLensLastLayer(t *testing.T) {
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6}
	for name, cfg := range lensModels() {
		m, err := nn.NewModel(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		targets := make([]int, len(tokens))
		for p := range targets {
			targets[p] = tokens[(p+1)%len(tokens)]
		}
		targets[2] = -1
		k := 4
		lens, err := LogitLens(m, tokens, &LensOptions{K: k, Targets: targets, Workers: 2})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		logits, err := m.Forward(tokens, 1, len(tokens), nil)
		if err != nil {
			t.Fatal(err)
		}
		v := cfg.Vocab
		if len(lens.Top) != cfg.Layers+1 || len(lens.Targets) != cfg.Layers+1 {
			t.Fatalf("%s: %d and %d layers, want %d", name, len(lens.Top), len(lens.Targets), cfg.Layers+1)
		}
		for p := range tokens {
			row := logits.Data[p*v:][:v]
			want := topK(row, k)
			got := lens.Top[cfg.Layers][p]
			for i := range want {
				if got[i].Token != want[i].Token || math.Abs(got[i].Logit-want[i].Logit) > 1e-4 || math.Abs(got[i].Prob-want[i].Prob) > 1e-5 {
					t.Errorf("%s, position %d, top %d: lens %+v, model %+v", name, p, i, got[i], want[i])
				}
			}
			for l := range cfg.Layers + 1 {
				top := lens.Top[l][p]
				if len(top) != k {
					t.Fatalf("%s: %d top tokens, want %d", name, len(top), k)
				}
				for i := 1; i < k; i++ {
					if top[i].Logit > top[i-1].Logit {
						t.Errorf("%s: layer %d, position %d: top tokens out of order: %+v", name, l, p, top)
					}
				}
				tg := lens.Targets[l][p]
				switch {
				case targets[p] < 0:
					if tg.Token != -1 {
						t.Errorf("%s: position %d has no target, got %+v", name, p, tg)
					}
				case tg.Rank < k && top[tg.Rank].Token != tg.Token && top[tg.Rank].Logit != tg.Logit:
					t.Errorf("%s: layer %d, position %d: target %+v, top %+v", name, l, p, tg, top)
				case tg.Rank >= k && tg.Logit > top[k-1].Logit:
					t.Errorf("%s: layer %d, position %d: target %+v ranked below the top %+v", name, l, p, tg, top)
				}
			}
		}
	}
}

// TestLensFirstLayer checks the lens at layer 0 of a pre-norm model without a head transform
// against the final norm and head applied by hand, in float64, to the embeddings.
func TestLensFirstLayer(t *testing.T) {
	cfg := attributeModels["layernorm"]
	m, err := nn.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{5, 2, 7}
	lens, err := LogitLens(m, tokens, &LensOptions{K: cfg.Vocab})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(tokens, 1, len(tokens), nil); err != nil {
		t.Fatal(err)
	}
	d, v := cfg.DModel, cfg.Vocab
	x := m.Residual(0).Data
	g, b := m.Param("ln_f.weight").Value.Data, m.Param("ln_f.bias").Value.Data
	w, hb := m.Param("head.weight").Value.Data, m.Param("head.bias").Value.Data
	for p := range tokens {
		row := x[p*d:][:d]
		var mean, ss float64
		for _, a := range row {
			mean += float64(a) / float64(d)
		}
		for _, a := range row {
			ss += (float64(a) - mean) * (float64(a) - mean)
		}
		sd := math.Sqrt(ss/float64(d) + nn.DefaultNormEps)
		want := make([]float64, v)
		for i := range v {
			want[i] = float64(hb[i])
			for j, a := range row {
				want[i] += ((float64(a)-mean)/sd*float64(g[j]) + float64(b[j])) * float64(w[i*d+j])
			}
		}
		for _, pr := range lens.Top[0][p] {
			if math.Abs(pr.Logit-want[pr.Token]) > 1e-4 {
				t.Errorf("position %d, token %d: lens logit %v, want %v", p, pr.Token, pr.Logit, want[pr.Token])
			}
		}
		ids := make([]int, v)
		for i, pr := range lens.Top[0][p] {
			ids[i] = pr.Token
		}
		slices.Sort(ids)
		if !slices.Equal(ids, func() []int {
			r := make([]int, v)
			for i := range r {
				r[i] = i
			}
			return r
		}()) {
			t.Errorf("position %d: the top %d tokens are %v, want every token once", p, v, ids)
		}
	}
}

// TestTopK checks the order and the ties of topK.
func TestTopK(t *testing.T) {
	top := topK([]float32{1, 3, 3, 0, 2, 3}, 4)
	var ids []int
	for _, p := range top {
		ids = append(ids, p.Token)
	}
	if !slices.Equal(ids, []int{1, 2, 5, 4}) {
		t.Errorf("topK: %v, want [1 2 5 4]", ids)
	}
	if r := rank([]float32{1, 3, 3, 0, 2, 3}, 4); r.Rank != 3 {
		t.Errorf("rank of 2 among [1 3 3 0 2 3]: %d, want 3", r.Rank)
	}
}

// TestLensErrors checks that bad input is an error.
func TestLensErrors(t *testing.T) {
	m, err := nn.NewModel(attributeModels["layernorm"])
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		tokens []int
		opt    *LensOptions
		want   string
	}{
		"empty":   {nil, nil, "empty"},
		"token":   {[]int{1, 13}, nil, "outside"},
		"k":       {[]int{1}, &LensOptions{K: 14}, "top 14"},
		"neg k":   {[]int{1}, &LensOptions{K: -1}, "top -1"},
		"targets": {[]int{1, 2}, &LensOptions{Targets: []int{1}}, "1 lens targets"},
		"target":  {[]int{1, 2}, &LensOptions{Targets: []int{1, 13}}, "target 13"},
	} {
		if _, err := LogitLens(m, tc.tokens, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, tc.want)
		}
	}
	if _, err := LogitLens(nil, []int{1}, nil); err == nil {
		t.Error("nil model: no error")
	}
}
