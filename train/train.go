// Package train is the training loop of mha's models: AdamW with gradient clipping and a
// warm-up + cosine schedule on batches of a synthetic task, as `mha train` and the chapters'
// experiments run it. The same model, task, Config and Seed give the same parameters bit for bit,
// whatever the worker count.
package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// MetaKey is the checkpoint metadata key under which `mha train` stores its Recipe as JSON.
const MetaKey = "train_config"

// Recipe is everything a training run depends on besides the model's own config: the task, its
// config and the Config. `mha train` stores it in the checkpoint (under MetaKey) so that the run
// can be repeated; the embedded Config's fields are flattened into its JSON after task and
// task_config.
type Recipe struct {
	Task       string       `json:"task"`
	TaskConfig tasks.Config `json:"task_config"`
	Config
}

// TaskOf returns the task called name with the task config that a checkpoint's metadata records
// under MetaKey, or with the task's defaults when it records none. It returns an error when the
// record is not a Recipe's JSON, names another task, or the task config is invalid.
func TaskOf(name string, meta map[string]string) (tasks.Task, error) {
	var r Recipe
	if s, ok := meta[MetaKey]; ok {
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			return nil, fmt.Errorf("train: checkpoint metadata %s: %w", MetaKey, err)
		}
		if r.Task != name {
			return nil, fmt.Errorf("train: the checkpoint was trained on task %s, not %s", r.Task, name)
		}
	}
	return tasks.New(name, r.TaskConfig)
}

// Bounds of Config's rates. AdamW moves every parameter by up to about LR per step, so a rate
// above MaxLR throws any model out of range at once; decoupled weight decay scales the
// parameters by 1 − LR·WeightDecay per step, and usual runs take WeightDecay ≤ 0.1.
const (
	MaxLR          = 10
	MaxWeightDecay = 1
)

// ErrDiverged is wrapped by Run's error when the training stops because a loss, a penalty or the
// gradients' norm is NaN or ±Inf.
var ErrDiverged = errors.New("the training diverged")

// Config is how a model is trained. Every field is read as given: there are no defaults.
type Config struct {
	Steps       int     `json:"steps"`        // optimizer steps; > 0
	Batch       int     `json:"batch"`        // sequences per step; > 0
	LR          float64 `json:"lr"`           // peak learning rate; in (0, MaxLR]
	MinLR       float64 `json:"min_lr"`       // rate at the end of the cosine decay; in [0, LR]
	Warmup      int     `json:"warmup"`       // steps of linear warm-up; in [0, Steps)
	WeightDecay float64 `json:"weight_decay"` // AdamW's decoupled weight decay; in [0, MaxWeightDecay], 0 for none
	Clip        float64 `json:"clip"`         // clip the gradients' global L2 norm to this; finite and ≥ 0, 0 for no clipping
	// Seed seeds the batches and the dropout masks (not the initialisation, which is the
	// model's own Config.Seed; `mha train` uses one seed for both).
	Seed    uint64 `json:"seed"`
	Workers int    `json:"workers"` // goroutines; 0 means GOMAXPROCS; the result does not depend on it
}

// Validate returns an error naming the first field of c out of range, what it is and what it
// should be; nil when Run can train with c.
func (c Config) Validate() error {
	switch {
	case c.Steps <= 0:
		return fmt.Errorf("train: steps is %d, want > 0", c.Steps)
	case c.Batch <= 0:
		return fmt.Errorf("train: batch is %d, want > 0", c.Batch)
	case !(c.LR > 0 && c.LR <= MaxLR):
		return fmt.Errorf("train: lr is %g, want a learning rate in (0, %d]", c.LR, MaxLR)
	case !(c.Clip >= 0 && c.Clip < math.Inf(1)):
		return fmt.Errorf("train: clip is %g, want a finite norm ≥ 0 (0: no clipping)", c.Clip)
	case !(c.WeightDecay >= 0 && c.WeightDecay <= MaxWeightDecay):
		return fmt.Errorf("train: weight decay is %g, want a value in [0, %d] (0: none)", c.WeightDecay, MaxWeightDecay)
	case c.Workers < 0:
		return fmt.Errorf("train: workers is %d, want ≥ 0 (0: GOMAXPROCS)", c.Workers)
	}
	if err := c.schedule().Validate(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// schedule is c's learning-rate schedule.
func (c Config) schedule() nn.Schedule {
	return nn.Schedule{LR: c.LR, MinLR: c.MinLR, WarmupSteps: c.Warmup, TotalSteps: c.Steps}
}

// StepInfo describes one optimizer step, as Hooks.OnStep receives it.
type StepInfo struct {
	Step    int     // counted from 0
	Loss    float64 // the batch's mean cross-entropy before the update, nats
	Correct int     // scored positions whose largest logit was the target
	Counted int     // scored positions in the batch
	LR      float64 // the learning rate of the update
	Tokens  int     // tokens trained on so far, this step's included
	Penalty float64 // the value Hooks.Penalty reported for the batch (0 without one)
}

// Hooks are optional callbacks of Run. The zero value has none.
type Hooks struct {
	// OnStep, when set, is called after every optimizer step, on Run's goroutine.
	OnStep func(StepInfo)
	// Penalty, when set, adds a term P of the head outputs to the loss, such as a penalty on
	// their redundancy. Run keeps every layer's head outputs in the forward pass and, after the
	// loss, calls Penalty, which reads them with m.Heads(layer) and returns a value to report in
	// StepInfo.Penalty (P itself, or the unweighted measure P is a multiple of) and dHeads, where
	// dHeads[l] = dP/dHeads(l) [B, T, DModel] (nil, or a short slice, for layers P does not
	// read); Run then backpropagates L + P with m.BackwardHeads. An error from Penalty stops Run.
	Penalty func(m *nn.Model) (value float64, dHeads []*tensor.Tensor, err error)
}

// Result is what a Run did.
type Result struct {
	Steps  int     // optimizer steps taken
	Loss   float64 // the last step's loss (0 when no step was taken)
	Tokens int     // tokens trained on
}

// Run trains m on batches of task with cfg, changing m's parameters in place. Step s draws its
// batch from BatchSeed(cfg.Seed, s) and its dropout masks from BatchSeed(^cfg.Seed, s), then
// runs forward, loss, backward (with the penalty of hooks, if any), gradient clipping and an
// AdamW update, with a fresh optimizer: no state carries over from an earlier Run.
//
// Run checks ctx before every step. When ctx is done it returns what it did so far, with
// Steps < cfg.Steps, together with ctx's error; m then holds the parameters after those steps.
// It returns an error when cfg is invalid, when task's sequences do not fit m (vocabulary,
// length), or when a pass fails. It stops with an error wrapping ErrDiverged, naming the step
// and what went wrong, at the first loss, penalty or gradient norm that is NaN or ±Inf, before
// that step's update; Steps counts the steps completed before it, and m holds their parameters,
// which may be what made the loss so (nn.Save refuses parameters that are not finite).
func Run(ctx context.Context, m *nn.Model, task tasks.Task, cfg Config, hooks Hooks) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if mc := m.Config(); task.Vocab() > mc.Vocab || task.SeqLen() > mc.SeqLen {
		return res, fmt.Errorf("train: task %s has vocab %d and length %d; the model takes vocab %d and length %d",
			task.Name(), task.Vocab(), task.SeqLen(), mc.Vocab, mc.SeqLen)
	}
	params := m.Params()
	opt, err := nn.NewAdamW(params, nn.AdamWConfig{WeightDecay: cfg.WeightDecay, NoWeightDecay: cfg.WeightDecay == 0})
	if err != nil {
		return res, err
	}
	sched := cfg.schedule()
	run := &nn.RunOptions{Training: true, Workers: cfg.Workers, KeepHeads: hooks.Penalty != nil}
	for step := range cfg.Steps {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		bt, err := task.Batch(BatchSeed(cfg.Seed, step), cfg.Batch)
		if err != nil {
			return res, err
		}
		run.Seed = BatchSeed(^cfg.Seed, step)
		if _, err := m.Forward(bt.Tokens, bt.B, bt.T, run); err != nil {
			return res, err
		}
		loss, correct, counted, err := m.Loss(bt.Targets, bt.Scored)
		if err != nil {
			return res, err
		}
		nn.ZeroGrads(params)
		penalty, err := backward(m, hooks.Penalty)
		if err != nil {
			return res, err
		}
		norm := nn.ClipGradNorm(params, cfg.Clip) // with Clip 0, only the norm
		for _, v := range []struct {
			what  string
			value float64
		}{{"loss", loss}, {"penalty", penalty}, {"gradients' norm", norm}} {
			if math.IsNaN(v.value) || math.IsInf(v.value, 0) {
				return res, fmt.Errorf("train: step %d of %d: the %s is %v: %w", step+1, cfg.Steps, v.what, v.value, ErrDiverged)
			}
		}
		lr := sched.At(step)
		if err := opt.Step(lr); err != nil {
			return res, err
		}
		res = Result{Steps: step + 1, Loss: loss, Tokens: res.Tokens + bt.B*bt.T}
		if hooks.OnStep != nil {
			hooks.OnStep(StepInfo{Step: step, Loss: loss, Correct: correct, Counted: counted, LR: lr, Tokens: res.Tokens, Penalty: penalty})
		}
	}
	return res, nil
}

// backward adds the gradient of the last loss, plus penalty's when it is not nil, into the
// parameters' gradients, and returns the penalty's value.
func backward(m *nn.Model, penalty func(*nn.Model) (float64, []*tensor.Tensor, error)) (float64, error) {
	if penalty == nil {
		return 0, m.Backward()
	}
	value, dHeads, err := penalty(m)
	if err != nil {
		return 0, fmt.Errorf("train: penalty: %w", err)
	}
	return value, m.BackwardHeads(dHeads)
}

// BatchSeed is the seed of step's batch in a run seeded with seed: a mix of the two
// (SplitMix64's finaliser), so that runs with different seeds draw different batches.
func BatchSeed(seed uint64, step int) uint64 {
	z := seed*0x9e3779b97f4a7c15 + uint64(step)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
