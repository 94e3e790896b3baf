package experiment

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/viz"
)

// This file holds the sparse experiment's training comparison: one small model trained per
// normalizer and pattern, as `mha train --normalizer … --pattern …` trains it.

// SparseTrained is one model of the sparse experiment's training comparison: the architecture of
// the shipped induction model trained on its task from the same seed, batches and steps as the
// others, with one normalizer or pattern.
type SparseTrained struct {
	// Variant is the normalizer, or the patterns joined by "+" (under the softmax).
	Variant string `json:"variant"`
	// Config is the trained model's configuration, whose Normalizer, Patterns and Block are the
	// variant's.
	Config nn.Config `json:"config"`
	// Density is the number of pairs the model's attention sees on the evaluation sequences over
	// the number the same model without patterns sees (1 without patterns).
	Density     jsonnum.Number `json:"density"`
	Loss        jsonnum.Number `json:"loss"`     // on held-out sequences, nats
	Accuracy    jsonnum.Number `json:"accuracy"` // on held-out sequences, fraction of scored positions
	SeqAccuracy jsonnum.Number `json:"seq_accuracy"`
	Seconds     jsonnum.Number `json:"seconds"` // the training's wall time, the evaluation left out
	Curve       Curve          `json:"curve"`
	// Zeros is, layer by layer and head by head, the fraction of the visible pairs (those the
	// causal mask and the patterns keep) whose weight is exactly 0 on the evaluation sequences:
	// the keys the normalizer drops. It is 0 for the softmax.
	Zeros []jsonnum.Number `json:"zeros"`
}

// sparseVariants are the attention variants the sparse experiment trains, the softmax without
// patterns first (the baseline the others are compared with). The patterns are sized for the
// induction task's 32 positions, whose answer lies 8 to 16 positions back.
var sparseVariants = []struct {
	normalizer string   // nn.Config.Normalizer: "" for the softmax
	patterns   []string // nn.Config.Patterns
}{
	{"", nil},
	{"sparsemax", nil},
	{"entmax15", nil},
	{"topk:4", nil},
	{"", []string{"local:8"}},
	{"", []string{"local:4", "global:0"}},
	{"", []string{"strided:8"}},
}

// sparseTraining trains the shipped induction model's architecture (2 layers × 4 heads, d_model
// 64, attention only) on its task once per sparseVariants entry, with the same seed, batches and
// steps (600 by default, 40 in the quick form), and adds each model's held-out loss and accuracy,
// training time and per-head zeros to data, and a row per model to res's table.
func sparseTraining(ctx context.Context, cfg Config, data *SparseData, res *Result) error {
	task, err := tasks.New("induction", tasks.Config{})
	if err != nil {
		return err
	}
	data.TrainTask = task.Name()
	tc := trainSettings(cfg, 600, 40)
	bt, err := task.Batch(probe.EvalSeed, evalSettings(cfg).Batch)
	if err != nil {
		return err
	}
	for _, v := range sparseVariants {
		mc := nn.Config{DModel: 64, Heads: 4, Layers: 2, AttnOnly: true, Norm: nn.PreNorm, Positions: nn.Learned, Seed: cfg.Seed,
			Normalizer: v.normalizer, Patterns: v.patterns}
		name := cmp.Or(v.normalizer, "softmax")
		if len(v.patterns) > 0 {
			mc.Block = []int{8, 8}
			name = strings.Join(v.patterns, "+")
		}
		t, err := trainModel(ctx, cfg, mc, task, tc, nil)
		if err != nil {
			return err
		}
		zeros, density, err := attentionZeros(t.model, bt.Tokens, bt.B, bt.T, cfg.Workers)
		if err != nil {
			return err
		}
		st := SparseTrained{Variant: name, Config: t.model.Config(), Density: jsonnum.Number(density),
			Loss: t.report.Loss, Accuracy: t.report.Accuracy, SeqAccuracy: t.report.SeqAccuracy,
			Seconds: jsonnum.Number(t.elapsed.Seconds()), Curve: t.curve}
		for _, z := range zeros {
			st.Zeros = append(st.Zeros, jsonnum.Number(z))
		}
		data.Trained = append(data.Trained, st)
	}
	base := data.Trained[0]
	for _, st := range data.Trained {
		zeros := "zeros 0"
		if top := slices.Index(st.Zeros, slices.Max(st.Zeros)); st.Zeros[top] > 0 {
			zeros = fmt.Sprintf("zeros %.2f (most: head %s, %.2f)", meanOf(st.Zeros), headName(st.Config, top), float64(st.Zeros[top]))
		}
		res.Table.Rows = append(res.Table.Rows, []string{"trained on " + data.TrainTask, st.Variant, fmt.Sprintf("%.3f", float64(st.Density)),
			fmt.Sprintf("accuracy %.3f, loss %.3f", float64(st.Accuracy), float64(st.Loss)), zeros, fmt.Sprintf("%.2f", float64(st.Seconds/base.Seconds))})
	}
	return nil
}

// attentionZeros runs m on tokens [b, t] and returns, layer by layer and head by head, the
// fraction of the visible pairs — those m's causal mask, window and patterns keep — whose weight
// is exactly 0 (the layers' Result.ZeroFraction, 0 under the softmax), and the density of the
// visible pairs: their number over the number that m's config without patterns sees, which
// maskModel finds.
func attentionZeros(m *nn.Model, tokens []int, b, t, workers int) (zeros []float64, density float64, err error) {
	if _, err := m.Forward(tokens, b, t, &nn.RunOptions{Workers: workers}); err != nil {
		return nil, 0, err
	}
	c := m.Config()
	for l := range c.Layers {
		zf := m.ZeroFraction(l)
		for h := range c.Heads {
			z := 0.0
			if zf != nil {
				z = zf[h]
			}
			zeros = append(zeros, z)
		}
	}
	visible, err := maskModel(c, tokens, b, t, workers)
	if err != nil {
		return nil, 0, err
	}
	c.Patterns, c.Block = nil, nil
	dense, err := maskModel(c, tokens, b, t, workers)
	if err != nil {
		return nil, 0, err
	}
	kept, all := 0, 0
	for l := range c.Layers {
		den := dense.Weights(l).Data
		for x, v := range visible.Weights(l).Data {
			if v > 0 {
				kept++
			}
			if den[x] > 0 {
				all++
			}
		}
	}
	return zeros, float64(kept) / float64(all), nil
}

// maskModel returns a model of c with the softmax and every parameter 0, run on tokens [b, t]
// with its weights kept. Its scores are all 0, so each row's weights are 1/n on the n pairs that
// c's causal mask, window and patterns keep and 0 elsewhere, whatever masks c sets.
func maskModel(c nn.Config, tokens []int, b, t, workers int) (*nn.Model, error) {
	c.Normalizer = ""
	m, err := nn.NewModel(c)
	if err != nil {
		return nil, err
	}
	for _, p := range m.Params() {
		clear(p.Value.Data)
	}
	if _, err := m.Forward(tokens, b, t, &nn.RunOptions{KeepWeights: true, Workers: workers}); err != nil {
		return nil, err
	}
	return m, nil
}

// headName names head i of the heads of c counted layer by layer: "layer.head".
func headName(c nn.Config, i int) string {
	return fmt.Sprintf("%d.%d", i/c.Heads, i%c.Heads)
}

// trainedSummary states which variants kept the baseline's accuracy (within one point) and
// which heads their normalizers made sparse.
func trainedSummary(data *SparseData) string {
	base := data.Trained[0]
	var accs, kept, lost, sparse []string
	for _, st := range data.Trained {
		accs = append(accs, fmt.Sprintf("%s %s", st.Variant, pct(st.Accuracy)))
		if st.Variant != base.Variant {
			if math.Abs(float64(st.Accuracy-base.Accuracy)) <= 0.01 {
				kept = append(kept, st.Variant)
			} else {
				lost = append(lost, st.Variant)
			}
		}
		if meanOf(st.Zeros) == 0 {
			continue
		}
		var layers []string
		for l := range st.Config.Layers {
			layers = append(layers, fmt.Sprintf("layer %d %s", l, pct(meanOf(st.Zeros[l*st.Config.Heads:(l+1)*st.Config.Heads]))))
		}
		lo := slices.Index(st.Zeros, slices.Min(st.Zeros))
		hi := slices.Index(st.Zeros, slices.Max(st.Zeros))
		heads := "the same on every head"
		if st.Zeros[lo] != st.Zeros[hi] {
			heads = fmt.Sprintf("heads from %s %s to %s %s", headName(st.Config, lo), pct(st.Zeros[lo]), headName(st.Config, hi), pct(st.Zeros[hi]))
		}
		sparse = append(sparse, fmt.Sprintf("%s %s (%s; %s)", st.Variant, pct(meanOf(st.Zeros)), strings.Join(layers, ", "), heads))
	}
	s := fmt.Sprintf(" Trained for %d steps on %s from the same seed (2 layers × 4 heads, d_model 64, attention only), the held-out accuracy is %s.",
		len(base.Curve.Loss), data.TrainTask, strings.Join(accs, ", "))
	if len(kept) > 0 {
		s += fmt.Sprintf(" Within a point of the softmax's: %s.", strings.Join(kept, ", "))
	}
	if len(lost) > 0 {
		s += fmt.Sprintf(" Further from it: %s.", strings.Join(lost, ", "))
	}
	if len(sparse) > 0 {
		s += fmt.Sprintf(" Weights exactly 0 among the visible pairs: %s; the softmax, with or without patterns, has none.", strings.Join(sparse, "; "))
	}
	return s
}

// trainedPictures are the training comparison's charts: each variant's fraction of exact zeros
// per head, and its training loss.
func trainedPictures(data *SparseData) []Figure {
	c := data.Trained[0].Config
	hm := viz.Heatmap{Title: "weights exactly 0 among the visible pairs, after training on " + data.TrainTask,
		Rows: len(data.Trained), Cols: c.Layers * c.Heads, XLabel: "layer.head", YLabel: "variant", ValueLabel: "fraction of zeros", Annotate: true}
	for i := range hm.Cols {
		hm.ColLabels = append(hm.ColLabels, headName(c, i))
	}
	var names []string
	var loss [][]float64
	for _, st := range data.Trained {
		hm.RowLabels = append(hm.RowLabels, st.Variant)
		for _, z := range st.Zeros {
			hm.Values = append(hm.Values, float64(z))
		}
		names = append(names, st.Variant)
		loss = append(loss, st.Curve.Loss)
	}
	return []Figure{
		{"trained-zeros", hm},
		{"trained-loss", curveChart("training loss on "+data.TrainTask+" by normalizer and pattern", "loss (nats)", names, loss, true)},
	}
}
