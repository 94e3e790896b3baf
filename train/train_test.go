package train

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// tiny returns a small model for task and a config that trains it for steps steps.
func tiny(t *testing.T, task tasks.Task, steps int) (*nn.Model, Config) {
	t.Helper()
	m, err := nn.NewModel(nn.Config{
		Vocab: task.Vocab(), SeqLen: task.SeqLen(), DModel: 16, Heads: 2, Layers: 1, AttnOnly: true,
		Norm: nn.PreNorm, Positions: nn.Learned, Dropout: 0.1, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, Config{Steps: steps, Batch: 8, LR: 3e-3, MinLR: 3e-4, Warmup: 5, WeightDecay: 0.01, Clip: 1, Seed: 5}
}

// newTask returns the named task with the sizes in cfg.
func newTask(t *testing.T, name string, cfg tasks.Config) tasks.Task {
	t.Helper()
	task, err := tasks.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestRunIsDeterministic trains the same model three times, with 2, 2 and 1 workers (dropout on),
// and expects the same parameters bit for bit.
func TestRunIsDeterministic(t *testing.T) {
	task := newTask(t, "prev-token", tasks.Config{})
	var first map[string][]float32
	for i, workers := range []int{2, 2, 1} {
		m, cfg := tiny(t, task, 12)
		cfg.Workers = workers
		if _, err := Run(context.Background(), m, task, cfg, Hooks{}); err != nil {
			t.Fatal(err)
		}
		params := map[string][]float32{}
		for name, p := range m.StateDict() {
			params[name] = p.Data
		}
		if i == 0 {
			first = params
			continue
		}
		for name, p := range params {
			if !slices.Equal(p, first[name]) {
				t.Errorf("run %d (%d workers): %s differs from the first run's", i, workers, name)
			}
		}
	}
}

// TestRunSteps checks what OnStep receives at every step (the step, the schedule's rate, the
// token count) and that the loss falls on a short prev-token task.
func TestRunSteps(t *testing.T) {
	task := newTask(t, "prev-token", tasks.Config{SeqLen: 8, Vocab: 4})
	m, cfg := tiny(t, task, 150)
	cfg.LR = 1e-2
	var steps []StepInfo
	res, err := Run(context.Background(), m, task, cfg, Hooks{OnStep: func(s StepInfo) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != cfg.Steps || res.Steps != cfg.Steps {
		t.Fatalf("OnStep called %d times, Result.Steps %d, want %d", len(steps), res.Steps, cfg.Steps)
	}
	perStep := cfg.Batch * task.SeqLen()
	sched := cfg.schedule()
	for i, s := range steps {
		if s.Step != i || s.LR != sched.At(i) || s.Tokens != (i+1)*perStep || s.Counted == 0 || s.Correct > s.Counted {
			t.Fatalf("step %d: %+v, want step %d, lr %v, tokens %d", i, s, i, sched.At(i), (i+1)*perStep)
		}
	}
	if res.Loss != steps[len(steps)-1].Loss || res.Tokens != cfg.Steps*perStep {
		t.Errorf("result %+v, want the last step's loss %v and %d tokens", res, steps[len(steps)-1].Loss, cfg.Steps*perStep)
	}
	mean := func(s []StepInfo) float64 {
		sum := 0.0
		for _, x := range s {
			sum += x.Loss
		}
		return sum / float64(len(s))
	}
	first, last := mean(steps[:10]), mean(steps[len(steps)-10:])
	if !(last < first/2) {
		t.Errorf("mean loss of the first 10 steps %.3f, of the last 10 %.3f: want it at least halved", first, last)
	}
}

// TestRunCancelled cancels the context during step 3 and expects Run to stop after it, reporting
// the 4 steps done and the context's error.
func TestRunCancelled(t *testing.T) {
	task := newTask(t, "sort", tasks.Config{})
	m, cfg := tiny(t, task, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	res, err := Run(ctx, m, task, cfg, Hooks{OnStep: func(s StepInfo) {
		calls++
		if s.Step == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || res.Steps != 4 || calls != 4 || res.Tokens != 4*cfg.Batch*task.SeqLen() {
		t.Errorf("result %+v after %d calls, error %v; want 4 steps and context.Canceled", res, calls, err)
	}
}

// TestRunErrors checks that bad configs and a task that does not fit the model are refused
// before any step.
func TestRunErrors(t *testing.T) {
	task := newTask(t, "sort", tasks.Config{})
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Steps = 0 }, "steps is 0, want > 0"},
		{func(c *Config) { c.Batch = -2 }, "batch is -2, want > 0"},
		{func(c *Config) { c.Clip = -1 }, "clip is -1, want a finite norm ≥ 0"},
		{func(c *Config) { c.Clip = math.Inf(1) }, "clip is +Inf, want a finite norm ≥ 0"},
		{func(c *Config) { c.WeightDecay = -0.1 }, "weight decay is -0.1, want a value in [0, 1]"},
		{func(c *Config) { c.WeightDecay = 2 }, "weight decay is 2, want a value in [0, 1]"},
		{func(c *Config) { c.LR = 1e308 }, "lr is 1e+308, want a learning rate in (0, 10]"},
		{func(c *Config) { c.LR = math.NaN() }, "lr is NaN, want a learning rate in (0, 10]"},
		{func(c *Config) { c.Workers = -1 }, "workers is -1"},
		{func(c *Config) { c.LR = 0 }, "lr is 0, want a learning rate in (0, 10]"},
		{func(c *Config) { c.Warmup = 10 }, "train: "},
	} {
		m, cfg := tiny(t, task, 10)
		c.change(&cfg)
		called := false
		res, err := Run(context.Background(), m, task, cfg, Hooks{OnStep: func(StepInfo) { called = true }})
		if err == nil || !strings.Contains(err.Error(), c.want) || called || res.Steps != 0 {
			t.Errorf("config %+v: error %v, steps %d, want an error containing %q before any step", cfg, err, res.Steps, c.want)
		}
	}
	m, cfg := tiny(t, task, 10)
	_, err := Run(context.Background(), m, newTask(t, "prev-token", tasks.Config{}), cfg, Hooks{})
	if err == nil || !strings.Contains(err.Error(), "task prev-token has vocab 16 and length 32; the model takes vocab 11 and length 16") {
		t.Errorf("a task that does not fit the model: error %v", err)
	}
}

// TestBatchSeed checks the seeds against SplitMix64's published outputs for seed 0
// (0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f): BatchSeed(s, i) is the
// finaliser applied to s·γ + i, which is SplitMix64's output number s + i for seed 0 when i = 0.
func TestBatchSeed(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	for s, w := range want {
		if got := BatchSeed(uint64(s+1), 0); got != w {
			t.Errorf("BatchSeed(%d, 0) = %#x, want %#x", s+1, got, w)
		}
	}
	if BatchSeed(1, 1) == BatchSeed(2, 0) || BatchSeed(1, 1) == BatchSeed(1, 0) {
		t.Error("neighbouring seeds and steps share a batch seed")
	}
}

// TestRunPenalty starts from a model whose two heads are near copies and trains it with chapter
// 002's penalty on the mutual information between head outputs, with weight 1 and with weight 0
// (the value reported, no gradient): the penalty must fall far below where plain training leaves
// it. A penalty with no gradient leaves training bit for bit as it is without one, and a
// penalty's error stops the run.
func TestRunPenalty(t *testing.T) {
	task := newTask(t, "prev-token", tasks.Config{SeqLen: 8, Vocab: 4})
	const e, d = 16, 8
	twins := func() (*nn.Model, Config) {
		m, cfg := tiny(t, task, 60)
		w := m.StateDict()["blocks.0.attn.in_proj_weight"].Data // [3E, E]: W_q; W_k; W_v
		for block := range 3 {
			for i := range d * e {
				w[(block*e+d)*e+i] = w[block*e*e+i] * 1.05
			}
		}
		cfg.LR = 1e-2
		return m, cfg
	}
	dims := []int{d, d}
	miPenalty := func(weight float64) func(m *nn.Model) (float64, []*tensor.Tensor, error) {
		return func(m *nn.Model) (float64, []*tensor.Tensor, error) {
			heads := m.Heads(0)
			grad := tensor.New(heads.Shape...)
			p, err := probe.MIPenalty(heads, dims, grad)
			for i := range grad.Data {
				grad.Data[i] *= float32(weight)
			}
			return p, []*tensor.Tensor{grad}, err
		}
	}
	var last [2]float64
	for i, weight := range []float64{0, 1} {
		m, cfg := twins()
		first := 0.0
		_, err := Run(context.Background(), m, task, cfg, Hooks{Penalty: miPenalty(weight), OnStep: func(s StepInfo) {
			if s.Step == 0 {
				first = s.Penalty
			}
			last[i] = s.Penalty
		}})
		if err != nil {
			t.Fatal(err)
		}
		if first < 1 {
			t.Fatalf("weight %v: penalty %.3g at the first step, want the near copies to score > 1 nat", weight, first)
		}
	}
	if !(last[1] < last[0]/4) {
		t.Errorf("penalty after training: %.4g with weight 1, %.4g with weight 0; want it cut by 4 at least", last[1], last[0])
	}

	plain, cfg := tiny(t, task, 8)
	if _, err := Run(context.Background(), plain, task, cfg, Hooks{}); err != nil {
		t.Fatal(err)
	}
	zero, cfg := tiny(t, task, 8)
	none := func(*nn.Model) (float64, []*tensor.Tensor, error) { return 0, nil, nil }
	if _, err := Run(context.Background(), zero, task, cfg, Hooks{Penalty: none}); err != nil {
		t.Fatal(err)
	}
	want := plain.StateDict()
	for name, p := range zero.StateDict() {
		if !slices.Equal(p.Data, want[name].Data) {
			t.Errorf("%s: a penalty without gradient changed training", name)
		}
	}

	failing := func(*nn.Model) (float64, []*tensor.Tensor, error) { return 0, nil, errors.New("no heads") }
	res, err := Run(context.Background(), zero, task, cfg, Hooks{Penalty: failing})
	if err == nil || err.Error() != "train: penalty: no heads" || res.Steps != 0 {
		t.Errorf("failing penalty: %+v, error %v", res, err)
	}
}

// TestRunDiverged checks that Run stops at the first loss, penalty or gradient norm that is not
// finite, with an error wrapping ErrDiverged that names the step and what went wrong, without
// calling OnStep for that step.
func TestRunDiverged(t *testing.T) {
	task := newTask(t, "prev-token", tasks.Config{SeqLen: 8, Vocab: 4})
	nan := float32(math.NaN())
	for _, c := range []struct {
		name    string
		prepare func(m *nn.Model, hooks *Hooks)
		steps   int
		want    string
	}{
		{"NaN weight", func(m *nn.Model, _ *Hooks) {
			m.StateDict()["head.weight"].Data[5] = nan
		}, 0, "train: step 1 of 6: the loss is NaN: the training diverged"},
		{"NaN gradient", func(_ *nn.Model, h *Hooks) {
			h.Penalty = func(m *nn.Model) (float64, []*tensor.Tensor, error) {
				g := tensor.New(m.Heads(0).Shape...)
				g.Data[3] = nan
				return 0, []*tensor.Tensor{g}, nil
			}
		}, 0, "train: step 1 of 6: the gradients' norm is NaN: the training diverged"},
		{"infinite penalty", func(_ *nn.Model, h *Hooks) {
			h.Penalty = func(*nn.Model) (float64, []*tensor.Tensor, error) { return math.Inf(1), nil, nil }
		}, 0, "train: step 1 of 6: the penalty is +Inf: the training diverged"},
		{"NaN after 2 steps", func(m *nn.Model, h *Hooks) {
			h.OnStep = func(s StepInfo) {
				if s.Step == 1 {
					m.StateDict()["tok_emb.weight"].Data[0] = nan
				}
			}
		}, 2, "train: step 3 of 6: the loss is NaN: the training diverged"},
	} {
		m, cfg := tiny(t, task, 6)
		var hooks Hooks
		c.prepare(m, &hooks)
		onStep, calls := hooks.OnStep, 0
		hooks.OnStep = func(s StepInfo) {
			calls++
			if onStep != nil {
				onStep(s)
			}
		}
		res, err := Run(context.Background(), m, task, cfg, hooks)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.Is(err, ErrDiverged) || res.Steps != c.steps || calls != c.steps {
			t.Errorf("%s: %+v after %d steps, error %v; want %d steps and %q", c.name, res, calls, err, c.steps, c.want)
		}
	}
}
