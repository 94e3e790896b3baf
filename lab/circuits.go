package lab

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
)

// circuitsRequest is the body of /api/circuits: a model, a clean and a corrupted prompt of the
// same token length, and the two tokens whose logit difference is the metric.
type circuitsRequest struct {
	Model string `json:"model"`
	// Clean and Corrupt are the prompts as /api/run's text reads them: space-separated symbols
	// for a model with a task, text for a model with a tokenizer, token ids separated by spaces
	// for a model with neither.
	Clean   string `json:"clean"`
	Corrupt string `json:"corrupt"`
	// Target and Foil are tokens as lab.Model.Token reads them: "#ID", a symbol, a piece of the
	// tokenizer's vocabulary, or text that encodes as one token.
	Target string `json:"target"`
	Foil   string `json:"foil"`
	// Position is the position whose logits the metric reads; nil for the default, the last
	// [MASK] of the clean prompt for a masked language model, else the last position.
	Position *int `json:"position"`
}

// circuitsInput is a checked circuitsRequest.
type circuitsInput struct {
	m              *model
	clean, corrupt prompt
	metric         circuits.Metric
}

// prompt is one prompt of a circuitsRequest: its tokens [T] and, for a model with a
// tokenizer, the text and the tokens' byte offsets into it.
type prompt struct {
	tokens  []int
	text    string
	offsets [][2]int
}

// key identifies the input in the model's cache of circuits results.
func (in *circuitsInput) key() string {
	return fmt.Sprint(in.clean.tokens, in.corrupt.tokens, in.metric)
}

// prompt reads text, which names field in error messages, as the model reads a typed sequence:
// symbols, text through the tokenizer, or token ids for a model with neither.
func (m *model) prompt(field, text string) (prompt, error) {
	p := prompt{text: text}
	var err error
	switch {
	case m.task != nil:
		p.tokens, err = m.parse(text)
	case m.user.tok != nil:
		p.tokens, p.offsets, err = m.encode(text)
	default:
		for i, f := range strings.Fields(strings.ReplaceAll(text, ",", " ")) {
			id, perr := strconv.Atoi(f)
			if perr != nil {
				return p, badRequest("%s: item %d is %q; model %s has no tokenizer, so want token ids separated by spaces", field, i, clip(f), m.name)
			}
			p.tokens = append(p.tokens, id)
		}
		err = m.checkTokens(p.tokens)
	}
	if err != nil {
		return p, badRequest("%s: %v", field, err)
	}
	return p, nil
}

// circuitsInput checks req and returns what it asks for, or a bad-request error saying what is
// wrong with it.
func (s *Server) circuitsInput(req *circuitsRequest) (*circuitsInput, error) {
	m, err := s.model(req.Model)
	if err != nil {
		return nil, err
	}
	if m.predicts() == "none" {
		return nil, badRequest("model %s has no language-model head, so no logits to take a logit difference of; pick a model that predicts tokens", m.name)
	}
	in := &circuitsInput{m: m}
	if in.clean, err = m.prompt("clean prompt", req.Clean); err != nil {
		return nil, err
	}
	if in.corrupt, err = m.prompt("corrupted prompt", req.Corrupt); err != nil {
		return nil, err
	}
	t := len(in.clean.tokens)
	if n := len(in.corrupt.tokens); n != t {
		return nil, badRequest("the clean prompt has %d tokens (%s), the corrupted one %d (%s); want the same number, so that each position of one faces the same position of the other",
			t, clip(strings.Join(m.symbolsOf(in.clean.tokens), " ")), n, clip(strings.Join(m.symbolsOf(in.corrupt.tokens), " ")))
	}
	if slices.Equal(in.clean.tokens, in.corrupt.tokens) {
		return nil, badRequest("the clean and corrupted prompts are the same tokens; change the corrupted one where the behaviour should break (the logit difference must differ between them)")
	}
	if in.metric.Target, err = m.token(req.Target); err != nil {
		return nil, badRequest("target: %v", err)
	}
	if in.metric.Foil, err = m.token(req.Foil); err != nil {
		return nil, badRequest("foil: %v", err)
	}
	if in.metric.Target == in.metric.Foil {
		return nil, badRequest("target and foil are the same token %q; want two different tokens, the right answer and the one it competes with", m.symbol(in.metric.Target))
	}
	switch {
	case req.Position != nil:
		if p := *req.Position; p < 0 || p >= t {
			return nil, badRequest("position %d; want a position of the prompts, 0 to %d", p, t-1)
		}
		in.metric.Position = *req.Position
	case m.user != nil && m.user.mask >= 0 && m.task == nil:
		in.metric.Position = m.position(in.clean.tokens)
		if in.clean.tokens[in.metric.Position] != m.user.mask {
			return nil, badRequest("model %s is a masked language model: write [MASK] in the clean prompt where the target and the foil compete (or give a position)", m.name)
		}
	default:
		in.metric.Position = t - 1
	}
	return in, nil
}

// circuitsResult is what /api/circuits computes for one input: patching and direct logit
// attribution.
type circuitsResult struct {
	patch    *circuits.PatchResult
	dla      *dlaJSON
	dlaError string
	top      topJSON
}

// topJSON holds the model's three most likely tokens at the metric's position on each prompt.
type topJSON struct {
	Clean   []guess `json:"clean"`
	Corrupt []guess `json:"corrupt"`
}

// circuitsCache is how many circuits results a model keeps, the latest first: the page's
// pictures and downloads of the same prompts reuse them.
const circuitsCache = 4

// circuits returns the patching and attribution of in, computed or from the model's cache,
// holding the model's lock.
func (s *Server) circuits(ctx context.Context, in *circuitsInput) (*circuitsResult, error) {
	m := in.m
	m.mu.Lock()
	defer m.mu.Unlock()
	key := in.key()
	for i, c := range m.circuits {
		if c.key == key {
			m.circuits = slices.Insert(slices.Delete(m.circuits, i, i+1), 0, c)
			return c.res, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := circuits.Patch(m.net, in.clean.tokens, in.corrupt.tokens, in.metric,
		circuits.PatchOptions{Workers: s.opt.Workers, Residual: true, Patterns: true, Context: ctx})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // the request's deadline: the endpoint answers 503
		}
		// The input is checked above; what is left is the metric: the same on both prompts, or
		// not finite.
		return nil, badRequest("patching: %s", strings.TrimPrefix(err.Error(), "circuits: "))
	}
	res := &circuitsResult{patch: p}
	if res.top.Clean, err = m.topAt(in.clean.tokens, in.metric.Position, s.opt.Workers); err != nil {
		return nil, err
	}
	if res.top.Corrupt, err = m.topAt(in.corrupt.tokens, in.metric.Position, s.opt.Workers); err != nil {
		return nil, err
	}
	res.dla, res.dlaError = attribute(m, in, s.opt.Workers)
	m.circuits = slices.Insert(m.circuits, 0, cachedCircuits{key, res})
	if len(m.circuits) > circuitsCache {
		m.circuits = m.circuits[:circuitsCache]
	}
	return res, nil
}

// topAt returns the three most likely tokens at position pos of the model's logits on tokens
// [T]. Call it holding the model's lock.
func (m *model) topAt(tokens []int, pos, workers int) ([]guess, error) {
	logits, err := m.net.Forward(tokens, 1, len(tokens), &nn.RunOptions{Workers: workers})
	if err != nil {
		return nil, err
	}
	v := m.cfg.Vocab
	p := softmax(logits.Data[pos*v : (pos+1)*v])
	var out []guess
	for _, id := range kernel.TopK(p, 3, nil) {
		out = append(out, m.guess(id, p[id]))
	}
	return out, nil
}

// cachedCircuits is a circuits result kept by its input's key.
type cachedCircuits struct {
	key string
	res *circuitsResult
}

// promptJSON is one prompt of /api/circuits's answer.
type promptJSON struct {
	Tokens  []int    `json:"tokens"`
	Symbols []string `json:"symbols"`
	Pieces  []string `json:"pieces,omitempty"`
}

// tokenJSON is the target or the foil of /api/circuits's answer.
type tokenJSON struct {
	Token  int    `json:"token"`
	Symbol string `json:"symbol"`
	Piece  string `json:"piece,omitempty"`
}

// dlaJSON is the direct logit attribution of the clean prompt's logit difference
// (circuits.Attribute): each component's share, which sum with the bias terms to LD.
type dlaJSON struct {
	Heads    [][]number `json:"heads"`     // [L][H]: each head's output through W_O
	MLP      []number   `json:"mlp"`       // [L]: each feed-forward network; null for an attention-only model
	Embed    number     `json:"embed"`     // the embeddings
	AttnBias []number   `json:"attn_bias"` // [L]: each attention's output bias
	NormBias number     `json:"norm_bias"` // the final LayerNorm's β
	HeadBias number     `json:"head_bias"` // the unembedding's bias
	LD       number     `json:"ld"`        // the logit difference they sum to
	Scale    number     `json:"scale"`     // the final normalisation's scale, frozen at its value in the clean run
	// LogitSoftcap is the soft-cap c of the model's logits (Gemma 2's final_logit_softcapping),
	// absent without one: LD is then the uncapped logits', where the patching LDs are the
	// capped ones the model gives.
	LogitSoftcap number `json:"logit_softcap,omitempty"`
}

// circuitsResponse is the answer of /api/circuits.
type circuitsResponse struct {
	Model    string     `json:"model"`
	Clean    promptJSON `json:"clean"`
	Corrupt  promptJSON `json:"corrupt"`
	Target   tokenJSON  `json:"target"`
	Foil     tokenJSON  `json:"foil"`
	Position int        `json:"position"`
	Causal   bool       `json:"causal"`
	// LDClean and LDCorrupt are the logit difference on each prompt.
	LDClean   number `json:"ld_clean"`
	LDCorrupt number `json:"ld_corrupt"`
	// Top holds the model's three most likely tokens at the position on each prompt.
	Top topJSON `json:"top"`
	// Heads, Residual and Patterns are the normalised patching scores: [L][H] for each head's
	// output, [L+1][T] for the residual stream entering each block (row L: the last block's
	// output) at each position, [L][H] for each head's attention pattern.
	Heads    [][]number `json:"heads"`
	Residual [][]number `json:"residual"`
	Patterns [][]number `json:"patterns"`
	// DLA is the direct logit attribution on the clean prompt, or DLAError says why there is
	// none.
	DLA      *dlaJSON `json:"dla,omitempty"`
	DLAError string   `json:"dla_error,omitempty"`
}

// circuitsAnswer answers POST /api/circuits.
func (s *Server) circuitsAnswer(w http.ResponseWriter, r *http.Request) error {
	var req circuitsRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	in, err := s.circuitsInput(&req)
	if err != nil {
		return err
	}
	res, err := s.circuits(r.Context(), in)
	if err != nil {
		return err
	}
	m := in.m
	p := res.patch
	return writeJSON(w, http.StatusOK, &circuitsResponse{
		Model:     m.name,
		Clean:     m.promptJSON(in.clean),
		Corrupt:   m.promptJSON(in.corrupt),
		Target:    m.tokenJSON(in.metric.Target),
		Foil:      m.tokenJSON(in.metric.Foil),
		Position:  in.metric.Position,
		Causal:    !m.cfg.Bidirectional,
		LDClean:   number(p.LDClean),
		LDCorrupt: number(p.LDCorrupt),
		Top:       res.top,
		Heads:     numbers(p.Heads),
		Residual:  numbers(p.Residual),
		Patterns:  numbers(p.Patterns),
		DLA:       res.dla,
		DLAError:  res.dlaError,
	})
}

// promptJSON describes the tokens of p.
func (m *model) promptJSON(p prompt) promptJSON {
	return promptJSON{Tokens: p.tokens, Symbols: m.symbolsOf(p.tokens), Pieces: m.readable(p.tokens, p.offsets, p.text)}
}

// tokenJSON describes token id.
func (m *model) tokenJSON(id int) tokenJSON {
	return tokenJSON{Token: id, Symbol: m.symbol(id), Piece: m.pieceText(id)}
}

// numbers converts a grid of float64 to JSON numbers (null where not finite).
func numbers(g [][]float64) [][]number {
	if g == nil {
		return nil
	}
	out := make([][]number, len(g))
	for i, row := range g {
		out[i] = make([]number, len(row))
		for j, v := range row {
			out[i][j] = number(v)
		}
	}
	return out
}

// compositionResponse is the answer of /api/composition.
type compositionResponse struct {
	Model  string `json:"model"`
	Layers int    `json:"layers"`
	Heads  int    `json:"heads"`
	// Baseline is the mean score of random matrices of the heads' shapes.
	Baseline number `json:"baseline"`
	Folded   bool   `json:"folded"`
	// Pairs holds, for every layer From and later layer To, the scores Q, K and V [H][H] of
	// head i of From (the writer) with head j of To (the reader).
	Pairs []compositionPair `json:"pairs"`
}

// compositionPair is one pair of layers of a compositionResponse.
type compositionPair struct {
	From int        `json:"from"`
	To   int        `json:"to"`
	Q    [][]number `json:"q"`
	K    [][]number `json:"k"`
	V    [][]number `json:"v"`
}

// composition returns the composition scores of m's heads, computed once and kept.
func (m *model) composition(ctx context.Context) (*circuits.CompositionScores, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.comp != nil {
		return m.comp, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := circuits.Composition(m.net, nil)
	if err != nil {
		return nil, err
	}
	m.comp = c
	return c, nil
}

// compositionModel returns the model the query's only parameter names, with the check that
// composition needs: two layers at least.
func (s *Server) compositionModel(q map[string][]string) (*model, error) {
	for k, v := range q {
		if k != "model" {
			return nil, badRequest("unknown parameter %q; /api/composition takes only model", clip(k))
		}
		if len(v) > 1 {
			return nil, badRequest("parameter %q is given %d times; want it once", k, len(v))
		}
	}
	name := ""
	if v := q["model"]; len(v) > 0 {
		name = v[0]
	}
	m, err := s.model(name)
	if err != nil {
		return nil, err
	}
	if m.cfg.Layers < 2 {
		return nil, badRequest("model %s has %d layer; composition is between heads of different layers, so it needs two", m.name, m.cfg.Layers)
	}
	return m, nil
}

// compositionAnswer answers GET /api/composition.
func (s *Server) compositionAnswer(w http.ResponseWriter, r *http.Request) error {
	m, err := s.compositionModel(r.URL.Query())
	if err != nil {
		return err
	}
	c, err := m.composition(r.Context())
	if err != nil {
		return err
	}
	out := &compositionResponse{Model: m.name, Layers: c.Layers, Heads: c.Heads, Baseline: number(c.Baseline), Folded: c.Folded}
	for _, p := range c.Pairs {
		out.Pairs = append(out.Pairs, compositionPair{From: p.From, To: p.To, Q: numbers(p.Q), K: numbers(p.K), V: numbers(p.V)})
	}
	return writeJSON(w, http.StatusOK, out)
}

// attribute returns the direct logit attribution of in's clean prompt, or why there is none
// (a post-norm model). Call it holding the model's lock.
func attribute(m *model, in *circuitsInput, workers int) (*dlaJSON, string) {
	a, err := circuits.Attribute(m.net, in.clean.tokens, in.metric, workers)
	if err != nil {
		return nil, strings.TrimPrefix(err.Error(), "circuits: ")
	}
	out := &dlaJSON{
		Heads:    numbers(a.Heads),
		Embed:    number(a.Embed),
		AttnBias: numbers([][]float64{a.AttnBias})[0],
		NormBias: number(a.NormBias),
		HeadBias: number(a.HeadBias),
		LD:       number(a.LD),
		Scale:    number(a.Scale),

		LogitSoftcap: number(m.cfg.LogitSoftcap),
	}
	if !m.cfg.AttnOnly {
		out.MLP = numbers([][]float64{a.MLP})[0]
	}
	return out, ""
}
