// Package generate continues a prompt with an nn model through its KV cache: a prefill of the
// prompt, then one token per step, chosen greedily or sampled with a temperature, top-k and
// top-p (nucleus) filtering, from a seeded generator, so the same seed gives the same tokens. A
// causal model that a KV cache cannot serve (nn.Config.CanCache: sparse attention, heads of
// different sizes or score scales) runs a Forward of the whole sequence at every step instead.
package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// Options control a generation. The zero value is greedy decoding of one token with a float32
// cache.
type Options struct {
	// MaxTokens is how many tokens to generate at most; 0 means 1.
	MaxTokens int
	// Temperature divides the logits before sampling; 0 is greedy (the most likely token, the
	// first one on ties). It must be ≥ 0 and finite.
	Temperature float64
	// TopK keeps the K most likely tokens (0: all). It, TopP and Seed shape the sampling, which
	// a Temperature of 0 does not do.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probabilities sum to at least P,
	// and at least one (0 or 1: all). It must lie in [0, 1].
	TopP float64
	// Seed seeds the sampling.
	Seed uint64
	// Stop ends the generation after any of these tokens (the model's end of sequence).
	Stop []int
	// Cache is the storage of the keys and values (the arithmetic stays float32), for a model
	// that a cache can serve (nn.Config.CanCache).
	Cache mha.CacheDType
	// Workers bounds the goroutines each step runs on; 0 means GOMAXPROCS.
	Workers int
	// Compute is the arithmetic of the prompt's matrix products through the cache
	// (nn.RunOptions.Compute): mha.ComputeFloat32, the zero value, or mha.ComputeBFloat16,
	// about twice as fast with bfloat16's rounding of the activations. A model without a cache
	// computes in float32 whatever it says.
	Compute mha.Compute
}

// Result is a generation's tokens and timings.
type Result struct {
	Tokens  []int         // the generated tokens, without the prompt (the stop token included)
	Prefill time.Duration // the forward of the prompt and the choice of the first token
	Decode  time.Duration // the steps after it
}

// Run generates up to opt.MaxTokens tokens after prompt with m, calling emit (when not nil)
// with each token as it is chosen; an error from emit ends the generation with that error. ctx
// ends it between steps with ctx's error; the tokens so far are in the result either way. It
// returns an error for an empty prompt, a prompt and MaxTokens longer than the model's SeqLen,
// invalid options, or a model that cannot decode with a cache (a bidirectional one).
func Run(ctx context.Context, m *nn.Model, prompt []int, opt Options, emit func(token int) error) (Result, error) {
	var res Result
	n := max(opt.MaxTokens, 1)
	switch {
	case m.Config().Bidirectional:
		return res, errors.New("generate: a bidirectional model (BERT) sees the tokens after each position and cannot generate; run it with Forward")
	case len(prompt) == 0:
		return res, errors.New("generate: the prompt has no token")
	case opt.MaxTokens < 0:
		return res, fmt.Errorf("generate: max tokens is %d, want ≥ 0", opt.MaxTokens)
	case !(opt.Temperature >= 0) || math.IsInf(opt.Temperature, 0):
		return res, fmt.Errorf("generate: temperature is %v, want a finite number ≥ 0", opt.Temperature)
	case opt.TopK < 0:
		return res, fmt.Errorf("generate: top-k is %d, want ≥ 0", opt.TopK)
	case !(opt.TopP >= 0 && opt.TopP <= 1):
		return res, fmt.Errorf("generate: top-p is %v, want a value in [0, 1]", opt.TopP)
	case opt.Compute != mha.ComputeFloat32 && opt.Compute != mha.ComputeBFloat16:
		return res, fmt.Errorf("generate: compute type %v, want mha.ComputeFloat32 or mha.ComputeBFloat16", opt.Compute)
	case n > m.Config().SeqLen-len(prompt): // not len(prompt)+n, which may overflow
		return res, fmt.Errorf("generate: %d prompt tokens and %d more exceed the model's %d positions", len(prompt), n, m.Config().SeqLen)
	}
	// The next token's logits after input: through the cache, or, for a model a cache cannot
	// serve (nn.Config.CanCache), from a Forward of the whole sequence so far.
	var next func(input []int) (*tensor.Tensor, error)
	run := &nn.RunOptions{Workers: opt.Workers}
	if !m.Config().CanCache() {
		seq := make([]int, 0, len(prompt)+n)
		next = func(input []int) (*tensor.Tensor, error) {
			seq = append(seq, input...)
			return m.Forward(seq, 1, len(seq), run)
		}
	} else {
		cache, err := m.NewCache(1, len(prompt)+n, opt.Cache)
		if err != nil {
			return res, fmt.Errorf("generate: %w", err)
		}
		run.Compute, run.LastLogits = opt.Compute, true // a prompt needs only its last logits
		next = func(input []int) (*tensor.Tensor, error) {
			return m.ForwardCached(cache, input, 1, len(input), run)
		}
	}
	s := newSampler(opt)
	start := time.Now()
	input := prompt
	for len(res.Tokens) < n {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		logits, err := next(input)
		if err != nil {
			return res, fmt.Errorf("generate: %w", err)
		}
		v := m.Config().Vocab
		tok := s.choose(logits.Data[len(logits.Data)-v:])
		if len(res.Tokens) == 0 {
			res.Prefill = time.Since(start)
			start = time.Now()
		}
		res.Tokens = append(res.Tokens, tok)
		if emit != nil {
			if err := emit(tok); err != nil {
				res.Decode = time.Since(start)
				return res, err
			}
		}
		if slices.Contains(opt.Stop, tok) {
			break
		}
		input = []int{tok}
	}
	res.Decode = time.Since(start)
	return res, nil
}

// sampler chooses tokens from logits as Options say: Hugging Face's order, temperature, then
// top-k, then top-p.
type sampler struct {
	opt   Options
	rng   *rand.Rand
	probs []float64
	order []int
}

func newSampler(opt Options) *sampler {
	return &sampler{opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))}
}

// choose returns the next token for logits [V].
func (s *sampler) choose(logits []float32) int {
	if s.opt.Temperature == 0 {
		best := 0
		for i, x := range logits {
			if x > logits[best] {
				best = i
			}
		}
		return best
	}
	// The candidates, most likely first (ties by id), and their softmax at the temperature.
	s.order = s.order[:0]
	for i := range logits {
		s.order = append(s.order, i)
	}
	slices.SortStableFunc(s.order, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	keep := len(s.order)
	if k := s.opt.TopK; k > 0 && k < keep {
		keep = k
	}
	top := float64(logits[s.order[0]])
	s.probs = s.probs[:0]
	sum := 0.0
	for _, id := range s.order[:keep] {
		p := math.Exp((float64(logits[id]) - top) / s.opt.Temperature)
		s.probs = append(s.probs, p)
		sum += p
	}
	if p := s.opt.TopP; p > 0 && p < 1 {
		cum := 0.0
		for i, q := range s.probs {
			cum += q / sum
			if cum >= p {
				keep = i + 1
				break
			}
		}
		sum = 0
		for _, q := range s.probs[:keep] {
			sum += q
		}
	}
	u := s.rng.Float64() * sum
	for i, q := range s.probs[:keep] {
		if u < q {
			return s.order[i]
		}
		u -= q
	}
	return s.order[keep-1] // rounding left u at the end
}
