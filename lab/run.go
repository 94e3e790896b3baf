package lab

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// runRequest is the body of /api/run and /api/ablate: a model, the sequence to run it on
// (exactly one of text, tokens and seed) and the heads to ablate.
type runRequest struct {
	Model string `json:"model"`
	// Text is the sequence as space-separated symbols, as Task.Symbol prints them; for a model
	// without a task, natural text that its tokenizer encodes.
	Text *string `json:"text"`
	// Tokens is the sequence as token ids.
	Tokens []int `json:"tokens"`
	// Seed draws the sequence from the task (the first sequence of Task.Batch(seed, 1)), with
	// the task's targets and ground-truth attention.
	Seed *uint64 `json:"seed"`
	// Ablate lists the heads to ablate and how.
	Ablate []probe.Ablation `json:"ablate"`
	// Patterns, Block ([BQ, BK]) and Normalizer run the model under sparse attention, in the
	// forms of mha.ParsePattern and mha.ParseNormalizer; each left out is the model's own.
	Patterns   []string `json:"patterns"`
	Block      []int    `json:"block"`
	Normalizer *string  `json:"normalizer"`
}

// input is a checked runRequest: the model, the tokens [T] and their targets: for a sequence
// drawn from the task, the task's batch of one (targets, scored positions, ground-truth
// attention); for a causal language model without a task, the next token at each position.
type input struct {
	m        *model
	tokens   []int
	task     *tasks.Batch // nil without targets: a typed sequence of a task, a masked-LM text
	seed     *uint64
	ablate   []probe.Ablation
	text     string    // the text a model without a task read
	offsets  [][2]int  // the tokens' byte offsets into text, for a model without a task
	sparsity *sparsity // the attention the model runs with
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
	case req.Text != nil && m.task == nil:
		in.text = *req.Text
		in.tokens, in.offsets, err = m.encode(in.text)
	case req.Text != nil:
		in.tokens, err = m.parse(*req.Text)
	case req.Tokens != nil:
		in.tokens, err = slices.Clone(req.Tokens), m.checkTokens(req.Tokens)
	case m.task == nil:
		err = badRequest("model %s has no task, so no seed sequences; give text or tokens (ids) instead", m.name)
	default:
		var b tasks.Batch
		b, err = m.task.Batch(*req.Seed, 1)
		in.tokens, in.task = b.Tokens, &b
	}
	if err != nil {
		return nil, err
	}
	if m.task == nil && m.predicts() == "next" {
		in.task = nextTokens(in.tokens)
	}
	if in.ablate, err = m.ablations(req.Ablate); err != nil {
		return nil, err
	}
	in.sparsity, err = sparsityOf(m, req.Patterns, req.Block, req.Normalizer, len(in.tokens))
	return in, err
}

// model returns the model name, or a bad-request error listing the models.
func (s *Server) model(name string) (*model, error) {
	m, ok := s.models[name]
	if !ok {
		return nil, badRequest("unknown model %q; want one of %s", clip(name), strings.Join(s.names, ", "))
	}
	return m, nil
}

// record runs in's model on its tokens [T] with its sparsity and the ablations, holding the
// model's lock.
func (in *input) record(ctx context.Context, ablate []probe.Ablation, workers int) (*probe.Capture, error) {
	m := in.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return probe.Record(m.net, in.tokens, 1, len(in.tokens), &probe.RecordOptions{Ablate: ablate, Workers: workers, Sparsity: in.sparsity.run})
}

// runResponse is the answer of /api/run.
type runResponse struct {
	Model string `json:"model"`
	// Tokens are the ids; Symbols print them: the task's symbols, or the tokenizer's pieces.
	Tokens  []int    `json:"tokens"`
	Symbols []string `json:"symbols"`
	// Pieces are what the tokens read as (a model with a tokenizer): Ġ and ▁ as spaces, byte
	// tokens as their character.
	Pieces []string `json:"pieces,omitempty"`
	// Offsets are the tokens' byte offsets [start, end) into the text (a model with a
	// tokenizer); [0, 0] for a special token the tokenizer added.
	Offsets [][2]int `json:"offsets,omitempty"`
	Seed    *uint64  `json:"seed,omitempty"`
	// Causal is false for a bidirectional model, whose queries see later keys too.
	Causal bool `json:"causal"`
	// Weights[layer][head][query][key] is the attention weight α, [L, H, T, T].
	Weights [][][][]float32 `json:"weights"`
	// Predicts says what Predictions are: "next" token, the "masked" token at each position
	// (BERT), or "none" for a model without its language-model head.
	Predicts string `json:"predicts"`
	// Predictions has one entry per position (none when Predicts is "none").
	Predictions []prediction `json:"predictions"`
	// Score is the loss and accuracy over the positions the task scores, or for a causal
	// language model over its next tokens; absent for a typed sequence of a task.
	Score *score `json:"score,omitempty"`
	// Rollout is the attention rollout [T][T] (probe.Rollout, Abnar and Zuidema 2020).
	Rollout [][]float32 `json:"rollout"`
	// Measures are the head metrics on this sequence.
	Measures *measurement     `json:"measures"`
	Ablate   []probe.Ablation `json:"ablate"`
	// Sparsity is the attention the model ran with: its patterns' block map, the pairs each
	// query may see, and the exact zeros of a normalizer other than softmax.
	Sparsity *sparsityInfo `json:"sparsity"`
	// Routing is, for a mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE), each layer's choice
	// of experts per position; absent for a dense model.
	Routing []routing `json:"routing,omitempty"`
}

// routing is one layer's routing: Experts[t] are position t's experts by decreasing
// probability, Weights[t] their weights in its output.
type routing struct {
	Experts [][]int     `json:"experts"`
	Weights [][]float32 `json:"weights"`
}

// routingOf returns c's routing per layer, or nil for a dense model.
func routingOf(c *probe.Capture) []routing {
	var out []routing
	for _, r := range c.Routing {
		k := r.Weights.Shape[2]
		var lr routing
		for t := range c.B * c.T {
			lr.Experts = append(lr.Experts, r.Experts[t*k:(t+1)*k])
			lr.Weights = append(lr.Weights, r.Weights.Data[t*k:(t+1)*k])
		}
		out = append(out, lr)
	}
	return out
}

// prediction is the model's output at one position.
type prediction struct {
	Top []guess `json:"top"` // the three most likely next tokens, most likely first
	// Masked marks a [MASK] position of a masked-LM model: the one whose prediction counts.
	Masked bool `json:"masked,omitempty"`
	// Target is the task's answer and its probability where the task scores the position;
	// Correct says whether it is the most likely token (the first, on ties).
	Target  *guess `json:"target,omitempty"`
	Correct *bool  `json:"correct,omitempty"`
}

// guess is a token and the probability the model gives it.
type guess struct {
	Token  int    `json:"token"`
	Symbol string `json:"symbol"`
	Piece  string `json:"piece,omitempty"` // what the token reads as, for a model with a tokenizer
	P      number `json:"p"`
}

// guess returns token id with probability p.
func (m *model) guess(id int, p float64) guess {
	return guess{Token: id, Symbol: m.symbol(id), Piece: m.pieceText(id), P: number(p)}
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
	c, err := in.record(r.Context(), in.ablate, s.opt.Workers)
	if err != nil {
		return err
	}
	meas, err := measure(c, in.attn())
	if err != nil {
		return err
	}
	rollout, err := probe.Rollout(c.Weights)
	if err != nil {
		return err
	}
	resp := &runResponse{
		Model:    in.m.name,
		Tokens:   in.tokens,
		Symbols:  in.m.symbolsOf(in.tokens),
		Pieces:   in.m.readable(in.tokens, in.offsets, in.text),
		Offsets:  in.offsets,
		Seed:     in.seed,
		Causal:   !in.m.cfg.Bidirectional,
		Weights:  nested(c.Weights),
		Predicts: in.m.predicts(),
		Score:    scoreOf(c.Logits.Data, in.m.cfg.Vocab, in.task),
		Rollout:  rows(rollout.Data, len(in.tokens)),
		Measures: meas,
		Ablate:   in.ablate,
		Sparsity: in.sparsity.info(in.m.cfg, c.Weights),
		Routing:  routingOf(c),
	}
	if resp.Predicts != "none" {
		resp.Predictions = in.m.predictions(c.Logits.Data, in.tokens, in.task)
	}
	if in.m.task == nil && in.task != nil {
		// The importance of each head to the model's own next-token loss on this text.
		imp, err := in.m.textImportance(r.Context(), in.task, s.opt.Workers)
		if err != nil {
			return err
		}
		for i := range meas.Heads {
			h := &meas.Heads[i]
			h.Importance = number(imp[h.Layer][h.Head])
		}
		meas.About += " Importance: against the model's next-token loss on this text, without the ablation."
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

// symbol prints one token id: its symbol, or the tokenizer's piece for a model without a task.
func (m *model) symbol(id int) string {
	if m.task == nil {
		return m.piece(id)
	}
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
			out[l][hi] = rows(w.Data[hi*t*t:][:t*t], t)
		}
	}
	return out
}

// rows splits a row-major [T, T] matrix into its rows.
func rows(data []float32, t int) [][]float32 {
	out := make([][]float32, t)
	for q := range out {
		out[q] = data[q*t:][:t]
	}
	return out
}

// predictions returns the top three tokens at each position of logits [T, Vocab] of tokens [T]
// (the next token, or the one at the position for a masked-LM model, whose [MASK] positions are
// marked) and, where task scores the position, the target.
func (m *model) predictions(logits []float32, tokens []int, task *tasks.Batch) []prediction {
	v := m.cfg.Vocab
	out := make([]prediction, len(logits)/v)
	for t := range out {
		p := softmax(logits[t*v : (t+1)*v])
		for _, id := range kernel.TopK(p, 3, nil) {
			out[t].Top = append(out[t].Top, m.guess(id, p[id]))
		}
		if m.user != nil && m.user.mask >= 0 && m.user.mask == tokens[t] {
			out[t].Masked = true
		}
		if task != nil && task.Scored[t] {
			id := task.Targets[t]
			correct := argmax(logits[t*v:(t+1)*v]) == id
			target := m.guess(id, p[id])
			out[t].Target, out[t].Correct = &target, &correct
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
