package generate

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
)

func model(t *testing.T) *nn.Model {
	t.Helper()
	return newModel(t, config())
}

func config() nn.Config {
	return nn.Config{Vocab: 13, SeqLen: 32, DModel: 16, Heads: 4, KVHeads: 2, Layers: 2, FFN: 24,
		Norm: nn.PreNorm, Positions: nn.NoPositions, NormKind: nn.RMSNorm, Activation: nn.SwiGLU, Rope: &nn.Rope{Theta: 100}, Seed: 7}
}

func newModel(t *testing.T, cfg nn.Config) *nn.Model {
	t.Helper()
	m, err := nn.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGreedyMatchesForward checks that greedy decoding picks, at every step, the most likely next
// token of a Forward of the whole sequence so far: through the cache, and for models a cache
// cannot serve (sparse attention, heads of different sizes or score scales).
func TestGreedyMatchesForward(t *testing.T) {
	sparse := config()
	sparse.Patterns, sparse.Block, sparse.Normalizer = []string{"local:2", "global:0"}, []int{4, 4}, "sparsemax"
	unequal := nn.Config{Vocab: 13, SeqLen: 32, DModel: 16, Heads: 4, HeadDims: []int{2, 6, 4, 4}, Layers: 2, FFN: 24,
		Norm: nn.PreNorm, Positions: nn.Learned, Seed: 7}
	scales := config()
	scales.HeadScales = make([]float64, scales.Heads)
	for h := range scales.HeadScales {
		scales.HeadScales[h] = 0.2 + 0.1*float64(h)
	}
	for name, cfg := range map[string]nn.Config{"cached": config(), "sparse": sparse, "unequal heads": unequal, "head scales": scales} {
		t.Run(name, func(t *testing.T) { greedyMatchesForward(t, newModel(t, cfg)) })
	}
}

func greedyMatchesForward(t *testing.T, m *nn.Model) {
	prompt := []int{1, 5, 2, 9}
	var streamed []int
	res, err := Run(context.Background(), m, prompt, Options{MaxTokens: 8}, func(tok int) error {
		streamed = append(streamed, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 8 || !slices.Equal(streamed, res.Tokens) {
		t.Fatalf("tokens %v, streamed %v, want 8 of them, the same", res.Tokens, streamed)
	}
	seq := slices.Clone(prompt)
	for i, tok := range res.Tokens {
		logits, err := m.Forward(seq, 1, len(seq), nil)
		if err != nil {
			t.Fatal(err)
		}
		last := logits.Data[(len(seq)-1)*13:]
		best := 0
		for j, x := range last {
			if x > last[best] {
				best = j
			}
		}
		if tok != best {
			t.Fatalf("step %d: token %d, want the Forward's argmax %d", i, tok, best)
		}
		seq = append(seq, tok)
	}
}

// TestComputeBFloat16 checks Options.Compute: bfloat16 prompts generate the asked-for tokens,
// the same ones every time, and a model without a cache computes in float32 whatever it says.
func TestComputeBFloat16(t *testing.T) {
	sparse := config()
	sparse.Patterns, sparse.Block, sparse.Normalizer = []string{"local:2", "global:0"}, []int{4, 4}, "sparsemax"
	prompt := []int{1, 5, 2, 9, 3, 7} // more rows than a decode step's dot products take
	for name, cfg := range map[string]nn.Config{"cached": config(), "sparse": sparse} {
		m := newModel(t, cfg)
		run := func(c mha.Compute) []int {
			res, err := Run(context.Background(), m, prompt, Options{MaxTokens: 6, Compute: c}, nil)
			if err != nil {
				t.Fatalf("%s, %v: %v", name, c, err)
			}
			return res.Tokens
		}
		f32, bf, again := run(mha.ComputeFloat32), run(mha.ComputeBFloat16), run(mha.ComputeBFloat16)
		if len(bf) != 6 || !slices.Equal(bf, again) {
			t.Errorf("%s: bfloat16 tokens %v, then %v; want 6, the same twice", name, bf, again)
		}
		if name == "sparse" && !slices.Equal(bf, f32) {
			t.Errorf("sparse, no cache: bfloat16 tokens %v, float32 %v; want float32's", bf, f32)
		}
	}
}

// TestSeed checks that a seed gives the same tokens every time and that stop tokens end the
// generation.
func TestSeed(t *testing.T) {
	m := model(t)
	opt := Options{MaxTokens: 12, Temperature: 1.5, TopK: 8, TopP: 0.95, Seed: 3}
	a, err := Run(context.Background(), m, []int{1, 2}, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), m, []int{1, 2}, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tokens, b.Tokens) {
		t.Errorf("seed 3 gave %v, then %v", a.Tokens, b.Tokens)
	}
	opt.Stop = []int{a.Tokens[2]}
	c, err := Run(context.Background(), m, []int{1, 2}, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := a.Tokens[:slices.Index(a.Tokens, a.Tokens[2])+1]; !slices.Equal(c.Tokens, want) {
		t.Errorf("with stop token %d: %v, want %v", a.Tokens[2], c.Tokens, want)
	}
}

// TestSamplerDistribution checks the sampler's frequencies against the softmax of the logits
// at the temperature, with top-k and top-p cutting and renormalising as Hugging Face's warpers
// do.
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{1, 3, 0.5, 2, 3} // ids 1 and 4 tie: id 1 ranks first
	for _, c := range []struct {
		opt  Options
		keep []int
	}{
		{Options{Temperature: 1}, []int{0, 1, 2, 3, 4}},
		{Options{Temperature: 0.5}, []int{0, 1, 2, 3, 4}},
		{Options{Temperature: 1, TopK: 2}, []int{1, 4}},
		{Options{Temperature: 1, TopK: 3}, []int{1, 4, 3}},
		{Options{Temperature: 1, TopP: 0.5}, []int{1, 4}},
		{Options{Temperature: 1, TopP: 0.3}, []int{1}},
	} {
		want := make([]float64, len(logits))
		sum := 0.0
		for _, id := range c.keep {
			want[id] = math.Exp(float64(logits[id]) / c.opt.Temperature)
			sum += want[id]
		}
		for i := range want {
			want[i] /= sum
		}
		s := newSampler(c.opt)
		const draws = 40000
		got := make([]float64, len(logits))
		for range draws {
			got[s.choose(logits)]++
		}
		for i := range got {
			got[i] /= draws
			if math.Abs(got[i]-want[i]) > 0.01 {
				t.Errorf("%+v: token %d drawn %.4f of the time, want %.4f", c.opt, i, got[i], want[i])
			}
		}
	}
}

// TestErrors checks the options and models Run refuses.
func TestErrors(t *testing.T) {
	m := model(t)
	for _, opt := range []Options{{MaxTokens: -1}, {Temperature: -1}, {Temperature: math.Inf(1)}, {TopK: -2}, {TopP: 1.5}, {MaxTokens: 40}, {MaxTokens: math.MaxInt}, {Compute: 7}} {
		if _, err := Run(context.Background(), m, []int{1}, opt, nil); err == nil {
			t.Errorf("%+v: no error", opt)
		}
	}
	// A model without a cache, whose sequence Run would have allocated for MaxInt tokens.
	sparse := config()
	sparse.Patterns = []string{"local:2"}
	if _, err := Run(context.Background(), newModel(t, sparse), []int{1}, Options{MaxTokens: math.MaxInt}, nil); err == nil || !strings.Contains(err.Error(), "exceed the model's 32 positions") {
		t.Errorf("MaxTokens MaxInt without a cache: %v, want an error about the 32 positions", err)
	}
	if _, err := Run(context.Background(), m, nil, Options{}, nil); err == nil {
		t.Error("an empty prompt: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, m, []int{1}, Options{MaxTokens: 3}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
	stop := errors.New("stop")
	res, err := Run(context.Background(), m, []int{1}, Options{MaxTokens: 5}, func(int) error { return stop })
	if !errors.Is(err, stop) || len(res.Tokens) != 1 {
		t.Errorf("emit's error: %v after %d tokens, want it after 1", err, len(res.Tokens))
	}
}
