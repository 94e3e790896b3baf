package probe

import (
	"fmt"
	"slices"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// AblationMode says what replaces an ablated head's output.
type AblationMode string

// The ablation modes.
const (
	// AblateZero sets the head's output to 0 (Michel et al.'s ξ_h = 0).
	AblateZero AblationMode = "zero"
	// AblateMean sets the head's output to its mean over the positions of the data it runs on
	// (a clean run of the same batches), keeping its average contribution but no information.
	AblateMean AblationMode = "mean"
	// AblateUniform makes the head attend uniformly over the keys it may see.
	AblateUniform AblationMode = "uniform"
)

// ParseAblationMode returns the mode named s, or an error listing the modes.
func ParseAblationMode(s string) (AblationMode, error) {
	switch m := AblationMode(s); m {
	case AblateZero, AblateMean, AblateUniform:
		return m, nil
	}
	return "", fmt.Errorf("probe: ablation mode %q, want zero, mean or uniform", s)
}

// Ablation removes one head: Head of block Layer, in Mode.
type Ablation struct {
	Layer int          `json:"layer"`
	Head  int          `json:"head"`
	Mode  AblationMode `json:"mode"`
}

// Capture is what a model did on one batch: its logits and, for every layer, every head's
// attention weights and output. It holds copies, not the model's storage.
type Capture struct {
	B, T   int
	Tokens []int          // [B, T]
	Logits *tensor.Tensor // [B, T, Vocab]
	// Weights are per layer [B, H, T, T]: α of head h, query t, key j.
	Weights []*tensor.Tensor
	// Heads are per layer [B, T, H·d] (DModel unless the model's HeadSize is set): head h's
	// output in columns HeadOffsets[h] … HeadOffsets[h] + HeadDims[h], before any ablation
	// replaced it (an ablated head's own computation still shows; what the next layers saw is
	// in Logits and the later layers).
	Heads       []*tensor.Tensor
	HeadDims    []int
	HeadOffsets []int
	// Routing is, in a model with a mixture of experts (nn.Config.Experts), each layer's routing
	// of the B·T positions (nn.Model.Routing), copied; nil otherwise.
	Routing []*nn.Route
}

// RecordOptions are Record's options; the zero value records the model as it is on
// GOMAXPROCS goroutines.
type RecordOptions struct {
	// Ablate lists the heads to ablate in the recorded run.
	Ablate []Ablation
	// Workers bounds the goroutines; 0 means GOMAXPROCS.
	Workers int
	// Sparsity, when not nil, replaces the model's sparse attention in the runs (see
	// nn.RunOptions).
	Sparsity *nn.Sparsity
}

// Record runs m in evaluation mode on tokens [B, T] (row-major, len b·t) and returns every
// layer's attention weights and head outputs, with the heads in opt.Ablate ablated. The model's
// result is the same as a plain Forward's when nothing is ablated. Mean ablation uses each
// head's mean output over this batch, from a clean run first. It returns an error when the
// tokens do not fit the model (see nn.Model.Forward) or an ablation names a layer, head or mode
// that does not exist.
func Record(m *nn.Model, tokens []int, b, t int, opt *RecordOptions) (*Capture, error) {
	if opt == nil {
		opt = new(RecordOptions)
	}
	mc := m.Config()
	if err := checkAblations(mc, opt.Ablate); err != nil {
		return nil, err
	}
	var means [][]float32
	if needsMeans(opt.Ablate) {
		if _, err := m.Forward(tokens, b, t, &nn.RunOptions{KeepHeads: true, Workers: opt.Workers, Sparsity: opt.Sparsity}); err != nil {
			return nil, err
		}
		means = make([][]float32, mc.Layers)
		for l := range means {
			means[l] = make([]float32, mc.Attention().InnerDim())
			addMeans(means[l], m.Heads(l), 1)
		}
	}
	run := &nn.RunOptions{KeepWeights: true, KeepHeads: true, Workers: opt.Workers, Heads: interventions(mc, opt.Ablate, means, b), Sparsity: opt.Sparsity}
	logits, err := m.Forward(tokens, b, t, run)
	if err != nil {
		return nil, err
	}
	c := &Capture{B: b, T: t, Tokens: slices.Clone(tokens), Logits: logits.Clone()}
	for l := range mc.Layers {
		c.Weights = append(c.Weights, m.Weights(l).Clone())
		c.Heads = append(c.Heads, m.Heads(l).Clone())
		if r := m.Routing(l); r != nil {
			c.Routing = append(c.Routing, &nn.Route{Probs: r.Probs.Clone(), Experts: r.Experts, Weights: r.Weights.Clone()})
		}
	}
	lc := mc.Attention()
	for h := range mc.Heads {
		c.HeadDims = append(c.HeadDims, lc.HeadDim(h))
		c.HeadOffsets = append(c.HeadOffsets, lc.HeadOffset(h))
	}
	return c, nil
}

// checkAblations returns an error when an ablation names a layer, head or mode m does not have.
func checkAblations(mc nn.Config, abl []Ablation) error {
	for _, a := range abl {
		if a.Layer < 0 || a.Layer >= mc.Layers || a.Head < 0 || a.Head >= mc.Heads {
			return fmt.Errorf("probe: ablation of layer %d head %d, want layer in [0, %d) and head in [0, %d)", a.Layer, a.Head, mc.Layers, mc.Heads)
		}
		if _, err := ParseAblationMode(string(a.Mode)); err != nil {
			return err
		}
	}
	return nil
}

func needsMeans(abl []Ablation) bool {
	return slices.ContainsFunc(abl, func(a Ablation) bool { return a.Mode == AblateMean })
}

// addMeans adds w times the mean over the B·T positions of heads [B, T, E] into mean [E].
func addMeans(mean []float32, heads *tensor.Tensor, w float64) {
	e := len(mean)
	n := len(heads.Data) / e
	sums := make([]float64, e)
	for i := range n {
		for j, x := range heads.Data[i*e : (i+1)*e] {
			sums[j] += float64(x)
		}
	}
	for j := range mean {
		mean[j] += float32(w * sums[j] / float64(n))
	}
}

// interventions returns the per-layer head options that carry out abl on a batch of b
// sequences, with means[l] the mean head outputs of layer l [E] for mean ablation; nil when abl
// is empty.
func interventions(mc nn.Config, abl []Ablation, means [][]float32, b int) []mha.HeadOptions {
	if len(abl) == 0 {
		return nil
	}
	lc := mc.Attention()
	hos := make([]mha.HeadOptions, mc.Layers)
	for _, a := range abl {
		ho := &hos[a.Layer]
		if a.Mode == AblateUniform {
			if ho.Uniform == nil {
				ho.Uniform = make([]bool, mc.Heads)
			}
			ho.Uniform[a.Head] = true
			continue
		}
		if ho.Gate == nil {
			ho.Gate = ones(b, mc.Heads)
		}
		for bi := range b {
			ho.Gate.Data[bi*mc.Heads+a.Head] = 0
		}
		if a.Mode == AblateMean {
			if ho.Shift == nil {
				ho.Shift = make([]float32, lc.InnerDim())
			}
			o := lc.HeadOffset(a.Head)
			copy(ho.Shift[o:o+lc.HeadDim(a.Head)], means[a.Layer][o:])
		}
	}
	return hos
}

// ones returns a [b, h] tensor of ones.
func ones(b, h int) *tensor.Tensor {
	g := tensor.New(b, h)
	for i := range g.Data {
		g.Data[i] = 1
	}
	return g
}
