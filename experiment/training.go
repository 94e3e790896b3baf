package experiment

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/train"
	"github.com/mhalab/mha/viz"
)

// This file holds what the experiments that train share: the training settings, one training
// run with its curves and evaluation, and the chart of curves.

// Curve is what a training run recorded at every step. Its values are finite: train.Run stops
// at a loss or penalty that is not.
type Curve struct {
	Loss     []float64 `json:"loss"`              // the batch's mean cross-entropy, nats
	Accuracy []float64 `json:"accuracy"`          // the batch's fraction of scored positions right
	Penalty  []float64 `json:"penalty,omitempty"` // the penalty's value, when the run had one
}

// trainSettings returns the training configuration of an experiment: steps steps (quick in the
// quick form; cfg.Steps overrides both), batches of 32 sequences (8 in the quick form), the
// learning rates of the shipped models (3e-3 decaying to 3e-4), a warm-up of a tenth of the run
// up to 100 steps, weight decay 0.01 and clipping at 1, seeded with cfg.Seed.
func trainSettings(cfg Config, steps, quick int) train.Config {
	tc := train.Config{Steps: steps, Batch: 32, LR: 3e-3, MinLR: 3e-4, WeightDecay: 0.01, Clip: 1, Seed: cfg.Seed, Workers: cfg.Workers}
	if cfg.Quick {
		tc.Steps, tc.Batch = quick, 8
	}
	if cfg.Steps > 0 {
		tc.Steps = cfg.Steps
	}
	tc.Warmup = min(100, tc.Steps/10)
	return tc
}

// evalSettings is how much data an experiment evaluates its models on: 8 batches of 64
// sequences, or 2 of 16 in the quick form.
func evalSettings(cfg Config) probe.EvalConfig {
	if cfg.Quick {
		return probe.EvalConfig{Batches: 2, Batch: 16, Seed: probe.EvalSeed, Workers: cfg.Workers}
	}
	return probe.EvalConfig{Batches: 8, Batch: 64, Seed: probe.EvalSeed, Workers: cfg.Workers}
}

// trained is a model after one training run, with what the run recorded and its evaluation.
type trained struct {
	model   *nn.Model
	curve   Curve
	report  *probe.Report
	elapsed time.Duration // the training's wall time, the evaluation left out
}

// penaltyFunc is train.Hooks.Penalty.
type penaltyFunc = func(m *nn.Model) (float64, []*tensor.Tensor, error)

// trainModel builds a model of mc for task, trains it with tc (and penalty, when not nil) and
// evaluates it.
func trainModel(ctx context.Context, cfg Config, mc nn.Config, task tasks.Task, tc train.Config, penalty penaltyFunc) (*trained, error) {
	mc.Vocab, mc.SeqLen = task.Vocab(), task.SeqLen()
	m, err := nn.NewModel(mc)
	if err != nil {
		return nil, err
	}
	t := &trained{model: m}
	hooks := train.Hooks{Penalty: penalty, OnStep: func(s train.StepInfo) {
		t.curve.Loss = append(t.curve.Loss, s.Loss)
		t.curve.Accuracy = append(t.curve.Accuracy, float64(s.Correct)/float64(s.Counted))
		if penalty != nil {
			t.curve.Penalty = append(t.curve.Penalty, s.Penalty)
		}
	}}
	start := time.Now()
	if _, err := train.Run(ctx, m, task, tc, hooks); err != nil {
		return nil, err
	}
	t.elapsed = time.Since(start)
	if t.report, err = probe.Evaluate(m, task, evalSettings(cfg)); err != nil {
		return nil, err
	}
	return t, nil
}

// curveChart charts one curve per name against the training step, each smoothed by averaging
// windows of steps so that at most 200 points are drawn. On a log axis (logY) a window whose
// mean is not positive (a loss that rounds to 0) is left out.
func curveChart(title, ylabel string, names []string, curves [][]float64, logY bool) viz.Chart {
	c := viz.Chart{Title: title, XLabel: "training step", YLabel: ylabel, LogY: logY}
	for i, y := range curves {
		s := viz.Series{Name: names[i]}
		window := (len(y) + 199) / 200
		for start := 0; start < len(y); start += window {
			part := y[start:min(start+window, len(y))]
			sum := 0.0
			for _, v := range part {
				sum += v
			}
			mean := sum / float64(len(part))
			if logY && mean <= 0 {
				mean = math.NaN()
			}
			s.X = append(s.X, float64(start)+float64(len(part)-1)/2)
			s.Y = append(s.Y, mean)
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// accuracyWindow is the number of steps whose batch accuracies stepsTo averages.
const accuracyWindow = 20

// stepsTo returns the number of steps after which the training accuracy, averaged over the last
// accuracyWindow steps, first reaches level; nil when it never does.
func stepsTo(acc []float64, level float64) *int {
	sum := 0.0
	for i, a := range acc {
		sum += a
		if i >= accuracyWindow {
			sum -= acc[i-accuracyWindow]
		}
		if i+1 >= accuracyWindow && sum/accuracyWindow >= level {
			n := i + 1
			return &n
		}
	}
	return nil
}

// countOrDash prints a step count, or "—" for nil.
func countOrDash(n *int) string {
	if n == nil {
		return "—"
	}
	return fmt.Sprint(*n)
}

// reached says when the training accuracy reached 99% (see stepsTo), for summaries.
func reached(n *int) string {
	if n == nil {
		return "99% training accuracy not reached"
	}
	return fmt.Sprintf("99%% training accuracy after %d steps", *n)
}

// pct prints a fraction as a percentage with one decimal.
func pct[F ~float64](x F) string {
	return fmt.Sprintf("%.1f%%", 100*x)
}
