package lab

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// runRequest is the body of /api/run and /api/ablate: a model, the sequence to run it on
// (exactly one of text, tokens and seed) and the heads to ablate.
type runRequest struct {
	Model string `json:"model"`
	// Text is the sequence as space-separated symbols, as Task.Symbol prints them.
	Text *string `json:"text"`
	// Tokens is the sequence as token ids.
	Tokens []int `json:"tokens"`
	// Seed draws the sequence from the task (the first sequence of Task.Batch(seed, 1)), with
	// the task's targets and ground-truth attention.
	Seed *uint64 `json:"seed"`
	// Ablate lists the heads to ablate and how.
	Ablate []probe.Ablation `json:"ablate"`
}

// input is a checked runRequest: the model, the tokens [T] and, for a sequence drawn from the
// task, the task's batch of one (targets, scored positions, ground-truth attention).
type input struct {
	m      *model
	tokens []int
	task   *tasks.Batch // nil for a typed sequence
	seed   *uint64
	ablate []probe.Ablation
}

// input checks req and returns the sequence it names, or a bad-request error saying what is
// wrong with it.
func (s *Server) input(req *runRequest) (*input, error) {
	m, err := s.model(req.Model)
	if err != nil {
		return nil, err
	}
	in := &input{m: m, seed: req.Seed}
	given := 0
	for _, set := range []bool{req.Text != nil, req.Tokens != nil, req.Seed != nil} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, badRequest("give the sequence as exactly one of text (symbols), tokens (ids) or seed (drawn from the task), got %d of them", given)
	}
	switch {
	case req.Text != nil:
		in.tokens, err = m.parse(*req.Text)
	case req.Tokens != nil:
		in.tokens, err = slices.Clone(req.Tokens), m.checkTokens(req.Tokens)
	default:
		var b tasks.Batch
		b, err = m.task.Batch(*req.Seed, 1)
		in.tokens, in.task = b.Tokens, &b
	}
	if err != nil {
		return nil, err
	}
	in.ablate, err = m.ablations(req.Ablate)
	return in, err
}

// model returns the shipped model name, or a bad-request error listing the models.
func (s *Server) model(name string) (*model, error) {
	m, ok := s.models[name]
	if !ok {
		return nil, badRequest("unknown model %q; want one of %s", clip(name), strings.Join(s.names, ", "))
	}
	return m, nil
}

// record runs the model on tokens [T] with the ablations, holding the model's lock.
func (m *model) record(ctx context.Context, tokens []int, ablate []probe.Ablation, workers int) (*probe.Capture, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return probe.Record(m.net, tokens, 1, len(tokens), &probe.RecordOptions{Ablate: ablate, Workers: workers})
}

// runResponse is the answer of /api/run.
type runResponse struct {
	Model   string   `json:"model"`
	Tokens  []int    `json:"tokens"`
	Symbols []string `json:"symbols"`
	Seed    *uint64  `json:"seed,omitempty"`
	// Weights[layer][head][query][key] is the attention weight α, [L, H, T, T].
	Weights [][][][]float32 `json:"weights"`
	// Predictions has one entry per position: what the model predicts comes next.
	Predictions []prediction `json:"predictions"`
	// Score is the loss and accuracy over the positions the task scores; absent for a typed
	// sequence, which has no targets.
	Score *score `json:"score,omitempty"`
	// Measures are the head metrics on this sequence.
	Measures *measurement     `json:"measures"`
	Ablate   []probe.Ablation `json:"ablate"`
}

// prediction is the model's output at one position.
type prediction struct {
	Top []guess `json:"top"` // the three most likely next tokens, most likely first
	// Target is the task's answer and its probability where the task scores the position;
	// Correct says whether it is the most likely token (the first, on ties).
	Target  *guess `json:"target,omitempty"`
	Correct *bool  `json:"correct,omitempty"`
}

// guess is a token and the probability the model gives it.
type guess struct {
	Token  int    `json:"token"`
	Symbol string `json:"symbol"`
	P      number `json:"p"`
}

// score is the mean cross-entropy (nats) and the accuracy over the scored positions.
type score struct {
	Loss     number `json:"loss"`
	Accuracy number `json:"accuracy"`
	Scored   int    `json:"scored"`
}

// run answers POST /api/run.
func (s *Server) run(w http.ResponseWriter, r *http.Request) error {
	var req runRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	in, err := s.input(&req)
	if err != nil {
		return err
	}
	c, err := in.m.record(r.Context(), in.tokens, in.ablate, s.opt.Workers)
	if err != nil {
		return err
	}
	meas, err := measure(c, in.attn())
	if err != nil {
		return err
	}
	resp := &runResponse{
		Model:       in.m.name,
		Tokens:      in.tokens,
		Symbols:     in.m.symbolsOf(in.tokens),
		Seed:        in.seed,
		Weights:     nested(c.Weights),
		Predictions: in.m.predictions(c.Logits.Data, in.task),
		Score:       scoreOf(c.Logits.Data, in.m.cfg.Vocab, in.task),
		Measures:    meas,
		Ablate:      in.ablate,
	}
	return writeJSON(w, http.StatusOK, resp)
}

// attn returns the ground-truth attention [1, T, T] of a sequence drawn from the task, or nil.
func (in *input) attn() []float32 {
	if in.task == nil {
		return nil
	}
	return in.task.Attn
}

// symbolsOf prints tokens.
func (m *model) symbolsOf(tokens []int) []string {
	out := make([]string, len(tokens))
	for i, id := range tokens {
		out[i] = m.symbol(id)
	}
	return out
}

// symbol prints one token id.
func (m *model) symbol(id int) string {
	if id >= 0 && id < len(m.symbols) {
		return m.symbols[id]
	}
	return m.task.Symbol(id)
}

// nested reshapes per-layer weights [1, H, T, T] into [L][H][T][T].
func nested(weights []*tensor.Tensor) [][][][]float32 {
	out := make([][][][]float32, len(weights))
	for l, w := range weights {
		h, t := w.Shape[1], w.Shape[2]
		out[l] = make([][][]float32, h)
		for hi := range h {
			out[l][hi] = make([][]float32, t)
			for q := range t {
				out[l][hi][q] = w.Data[(hi*t+q)*t:][:t]
			}
		}
	}
	return out
}

// predictions returns the top three next tokens at each position of logits [T, Vocab] and,
// where task scores the position, the target.
func (m *model) predictions(logits []float32, task *tasks.Batch) []prediction {
	v := m.cfg.Vocab
	out := make([]prediction, len(logits)/v)
	for t := range out {
		p := softmax(logits[t*v : (t+1)*v])
		order := make([]int, v)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p[b], p[a]) })
		for _, id := range order[:min(3, v)] {
			out[t].Top = append(out[t].Top, guess{id, m.symbol(id), number(p[id])})
		}
		if task != nil && task.Scored[t] {
			id := task.Targets[t]
			correct := argmax(logits[t*v:(t+1)*v]) == id
			out[t].Target, out[t].Correct = &guess{id, m.symbol(id), number(p[id])}, &correct
		}
	}
	return out
}

// softmax returns the probabilities of one row of logits, in float64.
func softmax(logits []float32) []float64 {
	hi := math.Inf(-1)
	for _, x := range logits {
		hi = max(hi, float64(x))
	}
	p, sum := make([]float64, len(logits)), 0.0
	for i, x := range logits {
		p[i] = math.Exp(float64(x) - hi)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// scoreOf returns the loss and accuracy of logits [T, Vocab] on the positions task scores, as
// nn.Model.Loss computes them, or nil without a task or scored position.
func scoreOf(logits []float32, vocab int, task *tasks.Batch) *score {
	if task == nil {
		return nil
	}
	var s score
	loss, correct := 0.0, 0
	for t, scored := range task.Scored {
		if !scored {
			continue
		}
		row := logits[t*vocab : (t+1)*vocab]
		p := softmax(row)
		loss -= math.Log(p[task.Targets[t]])
		if argmax(row) == task.Targets[t] {
			correct++
		}
		s.Scored++
	}
	if s.Scored == 0 {
		return nil
	}
	s.Loss, s.Accuracy = number(loss/float64(s.Scored)), number(float64(correct)/float64(s.Scored))
	return &s
}

// argmax returns the index of the largest value, the first on ties.
func argmax(xs []float32) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}
