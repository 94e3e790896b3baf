package lab

import (
	"context"
	"math"
	"net/http"

	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
)

// ablations checks a request's ablations against the model: layer and head in range, a known
// mode, each head at most once.
func (m *model) ablations(reqs []probe.Ablation) ([]probe.Ablation, error) {
	if len(reqs) > m.cfg.Layers*m.cfg.Heads {
		return nil, badRequest("ablate lists %d heads; %s has %d", len(reqs), m.name, m.cfg.Layers*m.cfg.Heads)
	}
	for i, a := range reqs {
		if a.Layer < 0 || a.Layer >= m.cfg.Layers {
			return nil, badRequest("ablate[%d]: layer %d, want 0 to %d", i, a.Layer, m.cfg.Layers-1)
		}
		if a.Head < 0 || a.Head >= m.cfg.Heads {
			return nil, badRequest("ablate[%d]: head %d, want 0 to %d", i, a.Head, m.cfg.Heads-1)
		}
		if _, err := probe.ParseAblationMode(string(a.Mode)); err != nil {
			return nil, badRequest("ablate[%d]: mode %q, want zero, mean or uniform", i, clip(string(a.Mode)))
		}
		for _, b := range reqs[:i] {
			if a.Layer == b.Layer && a.Head == b.Head {
				return nil, badRequest("ablate[%d]: layer %d head %d is listed twice", i, a.Layer, a.Head)
			}
		}
	}
	return reqs, nil
}

// Task-wide ablations score taskAblationBatches batches of taskBatch sequences.
const taskAblationBatches = 4

// ablateResponse is the answer of /api/ablate: what ablating the heads changes on the sequence
// and on the task.
type ablateResponse struct {
	Model   string           `json:"model"`
	Tokens  []int            `json:"tokens"`
	Symbols []string         `json:"symbols"`
	Pieces  []string         `json:"pieces,omitempty"` // what the tokens read as, as in /api/run
	Ablate  []probe.Ablation `json:"ablate"`
	// Positions compares the predictions at each position.
	Positions []change `json:"positions"`
	// Sequence is the loss and accuracy on the sequence, for one drawn from the task or the
	// next tokens of a causal language model's text.
	Sequence *versus `json:"sequence,omitempty"`
	// Task is the loss and accuracy on fresh sequences of the task (probe.Ablate); absent for a
	// model without a task.
	Task *taskVersus `json:"task,omitempty"`
}

// change is how ablation changes the prediction at one position.
type change struct {
	Before guess `json:"before"` // the most likely next token as the model is
	After  guess `json:"after"`  // and with the heads ablated
	// Reference follows Before's token: its probability before and after.
	Reference tracked `json:"reference"`
	// Target follows the task's target where the task scores the position.
	Target *tracked `json:"target,omitempty"`
	// Changed says whether the most likely token differs.
	Changed bool `json:"changed"`
	// KL is the Kullback–Leibler divergence of the ablated prediction from the original,
	// Σ p ln(p/q), nats.
	KL number `json:"kl"`
}

// tracked is a token's probability before and after ablation.
type tracked struct {
	Token  int    `json:"token"`
	Symbol string `json:"symbol"`
	Piece  string `json:"piece,omitempty"` // what the token reads as, for a model with a tokenizer
	Before number `json:"before"`
	After  number `json:"after"`
}

// versus is a score before and after ablation.
type versus struct {
	Before score `json:"before"`
	After  score `json:"after"`
}

// taskVersus is a score on the task before and after ablation.
type taskVersus struct {
	Sequences int         `json:"sequences"`
	Before    probe.Score `json:"before"`
	After     probe.Score `json:"after"`
}

// ablate answers POST /api/ablate.
func (s *Server) ablate(w http.ResponseWriter, r *http.Request) error {
	var req runRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	in, err := s.input(&req)
	if err != nil {
		return err
	}
	if len(in.ablate) == 0 {
		return badRequest("ablate is empty; want at least one {\"layer\", \"head\", \"mode\"}")
	}
	if in.m.predicts() == "none" {
		return badRequest("model %s (%s) has no language-model head, so no predictions to compare; /api/run with ablate shows the ablated attention", in.m.name, in.m.user.arch)
	}
	ctx := r.Context()
	base, err := in.record(ctx, nil, s.opt.Workers)
	if err != nil {
		return err
	}
	ablated, err := in.record(ctx, in.ablate, s.opt.Workers)
	if err != nil {
		return err
	}
	resp := &ablateResponse{
		Model:     in.m.name,
		Tokens:    in.tokens,
		Symbols:   in.m.symbolsOf(in.tokens),
		Pieces:    in.m.readable(in.tokens, in.offsets, in.text),
		Ablate:    in.ablate,
		Positions: in.m.changes(base.Logits.Data, ablated.Logits.Data, in.task),
	}
	if in.m.task != nil {
		task, err := in.m.taskAblation(ctx, in.ablate, s.opt.Workers)
		if err != nil {
			return err
		}
		resp.Task = &taskVersus{Sequences: taskAblationBatches * taskBatch, Before: task.Base, After: task.Ablated}
	}
	if before := scoreOf(base.Logits.Data, in.m.cfg.Vocab, in.task); before != nil {
		resp.Sequence = &versus{*before, *scoreOf(ablated.Logits.Data, in.m.cfg.Vocab, in.task)}
	}
	return writeJSON(w, http.StatusOK, resp)
}

// taskAblation scores the model on its task with and without the ablations, holding its lock.
func (m *model) taskAblation(ctx context.Context, ablate []probe.Ablation, workers int) (*probe.AblationResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return probe.Ablate(m.net, m.task, ablate, probe.EvalConfig{Batches: taskAblationBatches, Batch: taskBatch, Seed: taskSeed, Workers: workers})
}

// changes compares the predictions of two runs' logits [T, Vocab] position by position.
func (m *model) changes(base, ablated []float32, task *tasks.Batch) []change {
	v := m.cfg.Vocab
	out := make([]change, len(base)/v)
	for t := range out {
		row := base[t*v : (t+1)*v]
		p, q := softmax(row), softmax(ablated[t*v:(t+1)*v])
		top, after := argmax(row), argmax(ablated[t*v:(t+1)*v])
		follow := func(id int) tracked { return tracked{id, m.symbol(id), m.pieceText(id), number(p[id]), number(q[id])} }
		c := change{
			Before:    m.guess(top, p[top]),
			After:     m.guess(after, q[after]),
			Reference: follow(top),
			Changed:   top != after,
			KL:        number(kl(p, q)),
		}
		if task != nil && task.Scored[t] {
			target := follow(task.Targets[t])
			c.Target = &target
		}
		out[t] = c
	}
	return out
}

// kl returns Σ p ln(p/q), with 0·ln 0 = 0.
func kl(p, q []float64) float64 {
	d := 0.0
	for i, pi := range p {
		if pi > 0 {
			d += pi * math.Log(pi/q[i])
		}
	}
	return d
}
