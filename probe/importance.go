package probe

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
)

// Importance returns every head's importance as Michel et al., "Are Sixteen Heads Really Better
// than One?" (2019) define it: with a gate ξ_h multiplying head h's output (ξ = 1 leaves the
// model as it is),
//
//	I_h = E_x |∂L(x)/∂ξ_h|,
//
// the mean over cfg's sequences x of the task of the magnitude of the gradient of x's loss (mean
// cross-entropy over its scored positions). Each layer's scores are then divided by their ℓ2
// norm, as Michel et al. do, so they are [layer][head] values whose squares sum to 1 per layer
// (a layer whose heads all score 0 stays 0).
//
// It runs a forward and a backward pass per batch, so it overwrites the model's parameter
// gradients (it leaves them zero). Errors are as for Evaluate.
func Importance(m *nn.Model, t tasks.Task, cfg EvalConfig) ([][]float64, error) {
	cfg, err := cfg.resolve(m, t)
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	params := m.Params()
	defer nn.ZeroGrads(params)
	imp := make([][]float64, mc.Layers)
	for l := range imp {
		imp[l] = make([]float64, mc.Heads)
	}
	seqs := 0
	for i := range cfg.Batches {
		bt, err := t.Batch(cfg.Seed+uint64(i), cfg.Batch)
		if err != nil {
			return nil, err
		}
		gates := make([]mha.HeadOptions, mc.Layers)
		for l := range gates {
			gates[l].Gate = ones(bt.B, mc.Heads)
		}
		if _, err := m.Forward(bt.Tokens, bt.B, bt.T, &nn.RunOptions{Heads: gates, Workers: cfg.Workers}); err != nil {
			return nil, err
		}
		_, _, counted, err := m.Loss(bt.Targets, bt.Scored)
		if err != nil {
			return nil, err
		}
		nn.ZeroGrads(params)
		if err := m.Backward(); err != nil {
			return nil, err
		}
		// The batch loss is the mean over its counted positions, so sequence b's own loss has
		// gradient counted/n_b times the batch loss's with respect to its own gates.
		for b := range bt.B {
			nb := 0
			for _, s := range bt.Scored[b*bt.T : (b+1)*bt.T] {
				if s {
					nb++
				}
			}
			if nb == 0 {
				continue
			}
			seqs++
			for l := range mc.Layers {
				g := m.GateGrad(l).Data[b*mc.Heads : (b+1)*mc.Heads]
				for h, x := range g {
					imp[l][h] += math.Abs(float64(x) * float64(counted) / float64(nb))
				}
			}
		}
	}
	for _, row := range imp {
		norm := 0.0
		for h := range row {
			row[h] /= float64(max(seqs, 1))
			norm += row[h] * row[h]
		}
		if norm > 0 {
			norm = math.Sqrt(norm)
			for h := range row {
				row[h] /= norm
			}
		}
	}
	return imp, nil
}

// Score is a model's loss and accuracy on a task's scored positions.
type Score struct {
	Loss     float64 `json:"loss"`     // mean cross-entropy, nats
	Accuracy float64 `json:"accuracy"` // fraction of scored positions predicted right
}

// AblationResult is a model's score on a task with and without some heads.
type AblationResult struct {
	Ablate  []Ablation `json:"ablate"`
	Base    Score      `json:"base"`    // the model as it is
	Ablated Score      `json:"ablated"` // with the heads ablated
}

// Ablate scores m on cfg's batches of the task as it is and with the heads in abl ablated. Mean
// ablation replaces a head's output with its mean over the same batches. It returns an error
// when an ablation names a layer, head or mode m does not have, and otherwise as Evaluate.
func Ablate(m *nn.Model, t tasks.Task, abl []Ablation, cfg EvalConfig) (*AblationResult, error) {
	cfg, err := cfg.resolve(m, t)
	if err != nil {
		return nil, err
	}
	if err := checkAblations(m.Config(), abl); err != nil {
		return nil, err
	}
	base, means, err := score(m, t, cfg, nil, nil, needsMeans(abl))
	if err != nil {
		return nil, err
	}
	ablated, _, err := score(m, t, cfg, abl, means, false)
	if err != nil {
		return nil, err
	}
	return &AblationResult{Ablate: slices.Clone(abl), Base: base, Ablated: ablated}, nil
}

// score runs m on cfg's batches with the heads in abl ablated (means as interventions takes
// them) and returns the score, and, when keepMeans, each layer's mean head outputs [E] over all
// positions of the batches.
func score(m *nn.Model, t tasks.Task, cfg EvalConfig, abl []Ablation, means [][]float32, keepMeans bool) (Score, [][]float32, error) {
	mc := m.Config()
	var s Score
	var outMeans [][]float32
	if keepMeans {
		outMeans = make([][]float32, mc.Layers)
		for l := range outMeans {
			outMeans[l] = make([]float32, mc.DModel)
		}
	}
	positions := 0
	for i := range cfg.Batches {
		bt, err := t.Batch(cfg.Seed+uint64(i), cfg.Batch)
		if err != nil {
			return s, nil, err
		}
		run := &nn.RunOptions{KeepHeads: keepMeans, Workers: cfg.Workers, Heads: interventions(mc, abl, means, bt.B)}
		if _, err := m.Forward(bt.Tokens, bt.B, bt.T, run); err != nil {
			return s, nil, err
		}
		loss, correct, counted, err := m.Loss(bt.Targets, bt.Scored)
		if err != nil {
			return s, nil, err
		}
		s.Loss += loss * float64(counted)
		s.Accuracy += float64(correct)
		positions += counted
		for l := range outMeans {
			addMeans(outMeans[l], m.Heads(l), 1/float64(cfg.Batches))
		}
	}
	s.Loss /= float64(positions)
	s.Accuracy /= float64(positions)
	return s, outMeans, nil
}

// PrunePoint is one point of a pruning curve: the score with the Removed least important heads
// zero-ablated.
type PrunePoint struct {
	Removed  int     `json:"removed"`
	Fraction float64 `json:"fraction"` // Removed / (layers · heads)
	Score
	// Last is the head removed last, nil at Removed = 0.
	Last *Ablation `json:"last,omitempty"`
}

// Prune returns the pruning curve of Michel et al.: heads are removed (zero-ablated) one at a
// time in order of increasing importance ([layer][head], as Importance returns; ties in layer
// then head order), and the model is scored on cfg's batches after each, from no head removed
// to all. It returns an error when importance does not have the model's layers × heads, and
// otherwise as Evaluate.
func Prune(m *nn.Model, t tasks.Task, importance [][]float64, cfg EvalConfig) ([]PrunePoint, error) {
	cfg, err := cfg.resolve(m, t)
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	if len(importance) != mc.Layers || slices.ContainsFunc(importance, func(r []float64) bool { return len(r) != mc.Heads }) {
		return nil, fmt.Errorf("probe: importance is not %d layers × %d heads", mc.Layers, mc.Heads)
	}
	var order []Ablation
	for l := range mc.Layers {
		for h := range mc.Heads {
			order = append(order, Ablation{Layer: l, Head: h, Mode: AblateZero})
		}
	}
	slices.SortStableFunc(order, func(a, b Ablation) int {
		return cmp.Compare(importance[a.Layer][a.Head], importance[b.Layer][b.Head])
	})
	total := len(order)
	curve := make([]PrunePoint, 0, total+1)
	for k := 0; k <= total; k++ {
		s, _, err := score(m, t, cfg, order[:k], nil, false)
		if err != nil {
			return nil, err
		}
		p := PrunePoint{Removed: k, Fraction: float64(k) / float64(total), Score: s}
		if k > 0 {
			last := order[k-1]
			p.Last = &last
		}
		curve = append(curve, p)
	}
	return curve, nil
}
