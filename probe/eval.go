package probe

import (
	"fmt"
	"math/rand/v2"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
)

// EvalConfig says how much data Evaluate draws. The zero value is 8 batches of 64 sequences
// from seed 0 on GOMAXPROCS goroutines.
type EvalConfig struct {
	Batches, Batch int
	// Seed seeds the task's batches and the repeated random tokens of the prefix-matching
	// score; keep it away from the seeds a model was trained on.
	Seed    uint64
	Workers int
}

// Report is a model's evaluation on a task.
type Report struct {
	Task        string  `json:"task"`
	Sequences   int     `json:"sequences"`
	Positions   int     `json:"positions"`    // scored positions
	Loss        float64 `json:"loss"`         // mean cross-entropy over the scored positions, nats
	Accuracy    float64 `json:"accuracy"`     // fraction of scored positions predicted right
	SeqAccuracy float64 `json:"seq_accuracy"` // fraction of sequences with every scored position right
	Heads       []Head  `json:"heads"`        // layer by layer, head by head
}

// Head are one head's pattern scores, each averaged over the evaluation's batches.
type Head struct {
	Layer int `json:"layer"`
	Head  int `json:"head"`
	// PrevToken is the mean α_{t,t−1} on random tokens repeated once (see PrevToken); 0 when the
	// model's SeqLen is below 2.
	PrevToken float64 `json:"prev_token"`
	// PrefixMatching is Olsson et al.'s score on sequences of random tokens repeated once (see
	// PrefixMatching); nil when the model's SeqLen is too short to repeat anything.
	PrefixMatching *float64 `json:"prefix_matching"`
	// GroundTruth is S = Σ(A⊙D)/ΣA with D the task's correct attention (see GroundTruth).
	GroundTruth float64 `json:"ground_truth"`
}

// Evaluate runs m on cfg.Batches batches of task t and reports the loss, the accuracy and every
// head's previous-token, prefix-matching and ground-truth scores. It returns an error when the
// task's sequences do not fit the model (vocabulary, length) or a size in cfg is negative.
func Evaluate(m *nn.Model, t tasks.Task, cfg EvalConfig) (*Report, error) {
	cfg, err := cfg.resolve(m, t)
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	rep := &Report{Task: t.Name(), Heads: make([]Head, mc.Layers*mc.Heads)}
	for i := range rep.Heads {
		rep.Heads[i].Layer, rep.Heads[i].Head = i/mc.Heads, i%mc.Heads
	}
	opt := &nn.RunOptions{KeepWeights: true, Workers: cfg.Workers}
	lossSum, correctSeqs, matched := 0.0, 0, make([]float64, len(rep.Heads))
	prefixQueries := 0
	for i := range cfg.Batches {
		bt, err := t.Batch(cfg.Seed+uint64(i), cfg.Batch)
		if err != nil {
			return nil, err
		}
		logits, err := m.Forward(bt.Tokens, bt.B, bt.T, opt)
		if err != nil {
			return nil, err
		}
		loss, correct, counted, err := m.Loss(bt.Targets, bt.Scored)
		if err != nil {
			return nil, err
		}
		lossSum += loss * float64(counted)
		rep.Positions += counted
		rep.Accuracy += float64(correct)
		correctSeqs += correctSequences(logits.Data, mc.Vocab, bt)
		for l := range mc.Layers {
			truth, err := GroundTruth(m.Weights(l).Data, bt.Attn, bt.B, mc.Heads, bt.T)
			if err != nil {
				return nil, err
			}
			for h := range mc.Heads {
				rep.Heads[l*mc.Heads+h].GroundTruth += truth[h] / float64(cfg.Batches)
			}
		}

		// The task-independent scores, on n random tokens followed by the same n again, as
		// TransformerLens measures them: no padding, every position a real token.
		tokens, n := repeatedTokens(cfg.Seed+uint64(i), cfg.Batch, mc.SeqLen, t.Vocab())
		if n < 1 {
			continue
		}
		if _, err := m.Forward(tokens, cfg.Batch, 2*n, opt); err != nil {
			return nil, err
		}
		for l := range mc.Layers {
			w := m.Weights(l).Data
			prev, err := PrevToken(w, cfg.Batch, mc.Heads, 2*n, 1)
			if err != nil {
				return nil, err
			}
			scores, queries, err := PrefixMatching(w, tokens, cfg.Batch, mc.Heads, 2*n)
			if err != nil {
				return nil, err
			}
			for h := range mc.Heads {
				rep.Heads[l*mc.Heads+h].PrevToken += prev[h] / float64(cfg.Batches)
				matched[l*mc.Heads+h] += scores[h] * float64(queries)
			}
			if l == 0 {
				prefixQueries += queries
			}
		}
	}
	rep.Sequences = cfg.Batches * cfg.Batch
	rep.Loss = lossSum / float64(rep.Positions)
	rep.Accuracy /= float64(rep.Positions)
	rep.SeqAccuracy = float64(correctSeqs) / float64(rep.Sequences)
	if prefixQueries > 0 {
		for i := range rep.Heads {
			s := matched[i] / float64(prefixQueries)
			rep.Heads[i].PrefixMatching = &s
		}
	}
	return rep, nil
}

// resolve returns cfg with its defaults filled in, or an error when a size is negative or the
// task's sequences do not fit the model.
func (cfg EvalConfig) resolve(m *nn.Model, t tasks.Task) (EvalConfig, error) {
	if cfg.Batches < 0 || cfg.Batch < 0 {
		return cfg, fmt.Errorf("probe: %d batches of %d sequences, want sizes ≥ 0 (0 for the default)", cfg.Batches, cfg.Batch)
	}
	if cfg.Batches == 0 {
		cfg.Batches = 8
	}
	if cfg.Batch == 0 {
		cfg.Batch = 64
	}
	mc := m.Config()
	if t.Vocab() > mc.Vocab || t.SeqLen() > mc.SeqLen {
		return cfg, fmt.Errorf("probe: task %s has vocab %d and length %d; the model takes vocab %d and length %d", t.Name(), t.Vocab(), t.SeqLen(), mc.Vocab, mc.SeqLen)
	}
	return cfg, nil
}

// correctSequences counts the sequences of bt whose scored positions all have the target as
// their largest logit (the first, on ties, as nn's Loss counts).
func correctSequences(logits []float32, vocab int, bt tasks.Batch) int {
	n := 0
	for b := range bt.B {
		ok := true
		for t := range bt.T {
			i := b*bt.T + t
			if !bt.Scored[i] {
				continue
			}
			row, best := logits[i*vocab:(i+1)*vocab], 0
			for j, x := range row {
				if x > row[best] {
					best = j
				}
			}
			ok = ok && best == bt.Targets[i]
		}
		if ok {
			n++
		}
	}
	return n
}

// repeatedTokens returns b sequences of n tokens drawn uniformly from [0, vocab) followed by the
// same n again, n = seqLen/2, and n (0 when seqLen < 2).
func repeatedTokens(seed uint64, b, seqLen, vocab int) ([]int, int) {
	n := seqLen / 2
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	tokens := make([]int, 0, b*2*n)
	for range b {
		start := len(tokens)
		for range n {
			tokens = append(tokens, rng.IntN(vocab))
		}
		tokens = append(tokens, tokens[start:start+n]...)
	}
	return tokens, n
}
