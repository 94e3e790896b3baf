package probe

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
)

// EvalSeed is the seed evaluations draw their sequences from when they have no reason to pick
// another: far from the small seeds training draws from. `mha eval` and the lab use it, so
// that both report the same numbers for the same model.
const EvalSeed uint64 = 1 << 62

// EvalConfig says how much data Evaluate draws. The zero value is 8 batches of 64 sequences
// from seed 0 on GOMAXPROCS goroutines.
type EvalConfig struct {
	Batches, Batch int
	// Seed seeds the task's batches and the repeated random tokens of the prefix-matching
	// score; keep it away from the seeds a model was trained on (EvalSeed is).
	Seed    uint64
	Workers int
	// Repeat is the n of RepeatedScores' sequences, n random tokens and the same n again; 0
	// means SeqLen/2. It must be ≤ SeqLen/2.
	Repeat int
}

// Report is a model's evaluation on a task. Its numbers are NaN when the model's outputs are not
// finite (a model whose parameters are not), and JSON writes them as null.
type Report struct {
	Task        string         `json:"task"`
	Sequences   int            `json:"sequences"`
	Positions   int            `json:"positions"`    // scored positions
	Loss        jsonnum.Number `json:"loss"`         // mean cross-entropy over the scored positions, nats
	Accuracy    jsonnum.Number `json:"accuracy"`     // fraction of scored positions predicted right
	SeqAccuracy jsonnum.Number `json:"seq_accuracy"` // fraction of sequences with every scored position right
	Heads       []Head         `json:"heads"`        // layer by layer, head by head
}

// Head are one head's pattern scores, each averaged over the evaluation's batches.
type Head struct {
	Layer int `json:"layer"`
	Head  int `json:"head"`
	// PrevToken is the mean α_{t,t−1} on random tokens repeated once (see PrevToken); 0 when the
	// model's SeqLen is below 2.
	PrevToken jsonnum.Number `json:"prev_token"`
	// PrefixMatching is Olsson et al.'s score on sequences of random tokens repeated once (see
	// PrefixMatching); nil when the model's SeqLen is too short to repeat anything.
	PrefixMatching *jsonnum.Number `json:"prefix_matching"`
	// GroundTruth is S = Σ(A⊙D)/ΣA with D the task's correct attention (see GroundTruth).
	GroundTruth jsonnum.Number `json:"ground_truth"`
}

// Evaluate runs m on cfg.Batches batches of task t and reports the loss, the accuracy and every
// head's previous-token, prefix-matching and ground-truth scores. It returns an error when the
// task's sequences do not fit the model (vocabulary, length), a size in cfg is negative, or one
// batch would need more memory than MaxBatchBytes (the error gives the estimate and the largest
// batch that fits).
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
	lossSum, correctSum, correctSeqs := 0.0, 0, 0
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
		correctSum += correct
		correctSeqs += correctSequences(logits.Data, mc.Vocab, bt)
		for l := range mc.Layers {
			truth, err := GroundTruth(m.Weights(l).Data, bt.Attn, bt.B, mc.Heads, bt.T)
			if err != nil {
				return nil, err
			}
			for h := range mc.Heads {
				rep.Heads[l*mc.Heads+h].GroundTruth += jsonnum.Number(truth[h] / float64(cfg.Batches))
			}
		}
	}
	scores, err := repeatedScores(m, t.Vocab(), cfg)
	if err != nil {
		return nil, err
	}
	for i, sc := range scores {
		if !math.IsNaN(sc.PrevToken) {
			rep.Heads[i].PrevToken = jsonnum.Number(sc.PrevToken)
		}
		if !math.IsNaN(sc.Induction) {
			s := jsonnum.Number(sc.Induction)
			rep.Heads[i].PrefixMatching = &s
		}
	}
	rep.Sequences = cfg.Batches * cfg.Batch
	rep.Loss = jsonnum.Number(lossSum / float64(rep.Positions))
	rep.Accuracy = jsonnum.Number(float64(correctSum) / float64(rep.Positions))
	rep.SeqAccuracy = jsonnum.Number(float64(correctSeqs) / float64(rep.Sequences))
	return rep, nil
}

// RepeatedScores returns every head's PatternScores, layer by layer and head by head, as Olsson
// et al. and TransformerLens measure them: on cfg.Batches batches of cfg.Batch sequences of
// n = cfg.Repeat (or SeqLen/2) tokens drawn uniformly from [0, vocab) followed by the same n again (batch i from
// seed cfg.Seed + i, RepeatedTokens), with no padding. Evaluate reports the PrevToken and
// Induction scores. When the model's SeqLen is below 4 the scores that need a repeat
// (Induction, Duplicate) are NaN, and below 2 every score is. It returns an error when vocab is
// not in [1, the model's vocabulary], a size in cfg is negative, cfg.Repeat exceeds SeqLen/2, or
// one batch would need more memory than MaxBatchBytes (the error gives the estimate and the
// largest batch that fits).
func RepeatedScores(m *nn.Model, vocab int, cfg EvalConfig) ([]PatternScores, error) {
	if vocab < 1 || vocab > m.Config().Vocab {
		return nil, fmt.Errorf("probe: vocab is %d, want 1 to the model's %d", vocab, m.Config().Vocab)
	}
	cfg, err := cfg.defaults()
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	if cfg.Repeat > mc.SeqLen/2 {
		return nil, fmt.Errorf("probe: %d tokens repeated once need %d positions, more than the model's %d", cfg.Repeat, 2*cfg.Repeat, mc.SeqLen)
	}
	n := mc.SeqLen / 2
	if cfg.Repeat > 0 {
		n = cfg.Repeat
	}
	if err := checkBatch(mc, cfg.Batch, 2*n, func(b int) float64 { return mc.ForwardBytes(b, 2*n, true) }); err != nil {
		return nil, err
	}
	return repeatedScores(m, vocab, cfg)
}

// repeatedScores is RepeatedScores with cfg's defaults filled in.
func repeatedScores(m *nn.Model, vocab int, cfg EvalConfig) ([]PatternScores, error) {
	mc := m.Config()
	heads := mc.Layers * mc.Heads
	out := make([]PatternScores, heads)
	for i := range out {
		out[i].Layer, out[i].Head = i/mc.Heads, i%mc.Heads
	}
	n := mc.SeqLen / 2
	if cfg.Repeat > 0 {
		n = cfg.Repeat
	}
	t := 2 * n
	if n < 1 {
		for i := range out {
			out[i].PrevToken, out[i].Induction, out[i].Duplicate, out[i].FirstToken, out[i].Position, out[i].Broad =
				math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		}
		return out, nil
	}
	// Sums over the batches: prefix matching and duplicate token weighted by their queries, the
	// rest by batch; the offset profiles are averaged before the strongest offset is chosen.
	induction, duplicate := make([]float64, heads), make([]float64, heads)
	profiles := make([][]float64, heads)
	indQueries, dupQueries := 0, 0
	opt := &nn.RunOptions{KeepWeights: true, Workers: cfg.Workers}
	// norm[l][h]: the mean of the log of the keys a row may see, over head h's rows that see
	// any, in block l (whose window may be a Local one's).
	norm := make([][]float64, mc.Layers)
	for l := range norm {
		visible, err := mc.LayerVisibleKeys(l, t)
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		norm[l] = make([]float64, mc.Heads)
		for h, rows := range visible {
			n := 0
			for _, keys := range rows {
				if keys > 0 {
					norm[l][h] += math.Log(float64(keys))
					n++
				}
			}
			norm[l][h] /= float64(n)
		}
	}
	per := 1 / float64(cfg.Batches)
	for bi := range cfg.Batches {
		tokens := RepeatedTokens(cfg.Seed+uint64(bi), cfg.Batch, n, vocab)
		if _, err := m.Forward(tokens, cfg.Batch, t, opt); err != nil {
			return nil, err
		}
		for l := range mc.Layers {
			w := m.Weights(l)
			b, h := cfg.Batch, mc.Heads
			prev, err := PrevToken(w.Data, b, h, t, 1)
			if err != nil {
				return nil, err
			}
			ind, iq, err := PrefixMatching(w.Data, tokens, b, h, t)
			if err != nil {
				return nil, err
			}
			dup, dq, err := DuplicateToken(w.Data, tokens, b, h, t)
			if err != nil {
				return nil, err
			}
			profile, err := OffsetProfile(w.Data, b, h, t)
			if err != nil {
				return nil, err
			}
			entropy, err := Entropy(w)
			if err != nil {
				// Entropy refuses weights that are not finite, which a model whose parameters
				// are not gives (mha eval --allow-nonfinite): the broad score is then NaN, like
				// the others.
				entropy = make([]float64, h)
				for i := range entropy {
					entropy[i] = math.NaN()
				}
			}
			first, err := FirstToken(w.Data, b, h, t)
			if err != nil {
				return nil, err
			}
			for hd := range h {
				s := &out[l*h+hd]
				s.PrevToken += prev[hd] * per
				s.Broad += entropy[hd] / norm[l][hd] * per
				s.FirstToken += first[hd] * per
				induction[l*h+hd] += ind[hd] * float64(iq)
				duplicate[l*h+hd] += dup[hd] * float64(dq)
				if profiles[l*h+hd] == nil {
					profiles[l*h+hd] = make([]float64, len(profile[hd]))
				}
				for k, v := range profile[hd] {
					profiles[l*h+hd][k] += v * per
				}
			}
			if l == 0 {
				indQueries += iq
				dupQueries += dq
			}
		}
	}
	for i := range out {
		s := &out[i]
		s.Induction, s.Duplicate = math.NaN(), math.NaN()
		if indQueries > 0 {
			s.Induction = induction[i] / float64(indQueries)
		}
		if dupQueries > 0 {
			s.Duplicate = duplicate[i] / float64(dupQueries)
		}
		for k, v := range profiles[i] {
			if d := k - (t - 1); d != -1 && d != -n && d != 1-n && v > s.Position {
				s.Position, s.Offset = v, d
			}
		}
	}
	return out, nil
}

// MaxBatchBytes bounds the memory that one batch of Evaluate or RepeatedScores may need (2 GiB),
// as nn.Config.ForwardBytes estimates it with the attention weights kept, plus, for Evaluate, the
// task's ground-truth attention [B, T, T].
const MaxBatchBytes = 2 << 30

// resolve returns cfg with its defaults filled in, or an error when a size is negative, the
// task's sequences do not fit the model, or a batch would need more than MaxBatchBytes.
func (cfg EvalConfig) resolve(m *nn.Model, t tasks.Task) (EvalConfig, error) {
	cfg, err := cfg.defaults()
	if err != nil {
		return cfg, err
	}
	mc := m.Config()
	if t.Vocab() > mc.Vocab || t.SeqLen() > mc.SeqLen {
		return cfg, fmt.Errorf("probe: task %s has vocab %d and length %d; the model takes vocab %d and length %d", t.Name(), t.Vocab(), t.SeqLen(), mc.Vocab, mc.SeqLen)
	}
	seqLen := max(t.SeqLen(), 2*(mc.SeqLen/2)) // the task's sequences, and the repeated random tokens
	return cfg, checkBatch(mc, cfg.Batch, seqLen, func(b int) float64 {
		return mc.ForwardBytes(b, seqLen, true) + 4*float64(b)*float64(seqLen)*float64(seqLen)
	})
}

// checkBatch returns an error, with the estimate and the largest batch that fits, when a batch
// of b sequences of seqLen tokens would need more than MaxBatchBytes; need(b) estimates it.
func checkBatch(mc nn.Config, b, seqLen int, need func(b int) float64) error {
	n := need(b)
	if n <= MaxBatchBytes {
		return nil
	}
	most := "not even one sequence fits"
	if fit := int(MaxBatchBytes / need(1)); fit > 0 {
		most = fmt.Sprintf("use a batch of at most %d (and more batches)", fit)
	}
	return fmt.Errorf("probe: a batch of %d sequences of %d tokens needs about %.1f GiB (the activations, the attention weights [B, %d, T, T] of %d layers, the logits [B, T, %d]), more than the limit of %d GiB; %s",
		b, seqLen, n/(1<<30), mc.Heads, mc.Layers, mc.Vocab, MaxBatchBytes>>30, most)
}

// defaults returns cfg with its zero sizes set to the defaults, or an error when a size is
// negative.
func (cfg EvalConfig) defaults() (EvalConfig, error) {
	if cfg.Batches < 0 || cfg.Batch < 0 || cfg.Repeat < 0 {
		return cfg, fmt.Errorf("probe: %d batches of %d sequences repeating %d tokens, want sizes ≥ 0 (0 for the default)", cfg.Batches, cfg.Batch, cfg.Repeat)
	}
	if cfg.Batches == 0 {
		cfg.Batches = 8
	}
	if cfg.Batch == 0 {
		cfg.Batch = 64
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

// RepeatedTokens returns b sequences of 2n tokens, [b, 2n] row-major: n tokens drawn uniformly
// from [0, vocab) with a generator seeded by seed, followed by the same n again, as Olsson et al.
// measure induction heads. The same arguments give the same tokens. Like math/rand's IntN, it
// panics unless vocab ≥ 1, and it panics when b or n is negative or b·2n tokens cannot be
// allocated: its sizes are the caller's, checked there.
func RepeatedTokens(seed uint64, b, n, vocab int) []int {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	tokens := make([]int, 0, b*2*n)
	for range b {
		start := len(tokens)
		for range n {
			tokens = append(tokens, rng.IntN(vocab))
		}
		tokens = append(tokens, tokens[start:start+n]...)
	}
	return tokens
}

// DistinctRepeatedTokens returns b sequences of 2n tokens, [b, 2n] row-major: n distinct tokens
// drawn uniformly from [0, vocab) with a generator seeded by seed, followed by the same n again.
// On them the pattern scores are Olsson et al.'s positional ones: with no repeat inside a half,
// PrefixMatching is the mean over the second half's queries i of α_{i, i−n+1} (the induction
// score) and DuplicateToken the mean of α_{i, i−n}. It returns an error unless 1 ≤ n ≤ vocab,
// b ≥ 1, and b·2n and vocab are at most 2³⁰ (each sequence shuffles the whole vocabulary).
func DistinctRepeatedTokens(seed uint64, b, n, vocab int) ([]int, error) {
	const most = 1 << 30
	if b < 1 || n < 1 || n > vocab || vocab > most || b > most/(2*n) {
		return nil, fmt.Errorf("probe: %d sequences of %d distinct tokens of a vocabulary of %d; want b ≥ 1, 1 ≤ n ≤ vocab ≤ 2³⁰ and b·2n ≤ 2³⁰", b, n, vocab)
	}
	rng := rand.New(rand.NewPCG(seed, 0xd15c))
	tokens := make([]int, 0, b*2*n)
	for range b {
		half := rng.Perm(vocab)[:n]
		tokens = append(append(tokens, half...), half...)
	}
	return tokens, nil
}
