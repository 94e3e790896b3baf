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
	g := newGateGrads(m)
	defer nn.ZeroGrads(g.params)
	for i := range cfg.Batches {
		bt, err := t.Batch(cfg.Seed+uint64(i), cfg.Batch)
		if err != nil {
			return nil, err
		}
		if err := g.add(bt.Tokens, bt.Targets, bt.Scored, bt.B, bt.T, cfg.Workers); err != nil {
			return nil, err
		}
	}
	return g.importance(), nil
}

// ImportanceOn returns every head's importance as Importance defines it, on the b sequences of
// tokens [B, T] with their own targets [B, T] and scored positions [B, T] (nil: all) instead of
// a task's: for a model without a task, such as a pretrained language model scored on its
// next-token loss over a text (targets[t] = tokens[t+1], the last position not scored). A
// sequence with no scored position does not count. It overwrites the model's parameter
// gradients (it leaves them zero), and returns an error when the tokens or targets do not fit
// the model (nn.Model.Forward, nn.Model.Loss).
func ImportanceOn(m *nn.Model, tokens, targets []int, scored []bool, b, t, workers int) ([][]float64, error) {
	g := newGateGrads(m)
	defer nn.ZeroGrads(g.params)
	if err := g.add(tokens, targets, scored, b, t, workers); err != nil {
		return nil, err
	}
	return g.importance(), nil
}

// gateGrads sums |∂L(x)/∂ξ_h| over sequences x, for Importance and ImportanceOn.
type gateGrads struct {
	m      *nn.Model
	params []*nn.Param
	sum    [][]float64 // [layer][head]
	seqs   int         // sequences counted
}

func newGateGrads(m *nn.Model) *gateGrads {
	mc := m.Config()
	g := &gateGrads{m: m, params: m.Params(), sum: make([][]float64, mc.Layers)}
	for l := range g.sum {
		g.sum[l] = make([]float64, mc.Heads)
	}
	return g
}

// add runs a forward and a backward pass on one batch with every head gated by ξ = 1 and adds
// each sequence's |∂L/∂ξ_h|, its own loss being the mean over its scored positions.
func (g *gateGrads) add(tokens, targets []int, scored []bool, b, t, workers int) error {
	mc := g.m.Config()
	gates := make([]mha.HeadOptions, mc.Layers)
	for l := range gates {
		gates[l].Gate = ones(b, mc.Heads)
	}
	if _, err := g.m.Forward(tokens, b, t, &nn.RunOptions{Heads: gates, Workers: workers}); err != nil {
		return err
	}
	_, _, counted, err := g.m.Loss(targets, scored)
	if err != nil {
		return err
	}
	nn.ZeroGrads(g.params)
	if err := g.m.Backward(); err != nil {
		return err
	}
	// The batch loss is the mean over its counted positions, so sequence b's own loss has
	// gradient counted/n_b times the batch loss's with respect to its own gates.
	for bi := range b {
		nb := t
		if scored != nil {
			nb = 0
			for _, s := range scored[bi*t : (bi+1)*t] {
				if s {
					nb++
				}
			}
		}
		if nb == 0 {
			continue
		}
		g.seqs++
		for l := range mc.Layers {
			grad := g.m.GateGrad(l).Data[bi*mc.Heads : (bi+1)*mc.Heads]
			for h, x := range grad {
				g.sum[l][h] += math.Abs(float64(x) * float64(counted) / float64(nb))
			}
		}
	}
	return nil
}

// importance returns the mean of the sums over the sequences counted, each layer divided by its
// ℓ2 norm (a layer whose heads all score 0 stays 0).
func (g *gateGrads) importance() [][]float64 {
	for _, row := range g.sum {
		norm := 0.0
		for h := range row {
			row[h] /= float64(max(g.seqs, 1))
			norm += row[h] * row[h]
		}
		if norm > 0 {
			norm = math.Sqrt(norm)
			for h := range row {
				row[h] /= norm
			}
		}
	}
	return g.sum
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
			outMeans[l] = make([]float32, mc.Attention().InnerDim())
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
