package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tokenizer"
	"github.com/mhalab/mha/train"
)

// MaxUserTokens bounds the sequences the lab runs a model without a task on (a user's model),
// below its seq_len: /api/run sends every head's T×T weights, L·H·T² numbers.
const MaxUserTokens = 64

// The repeated random tokens that /api/heads measures a model without a task on: repeatBatch
// sequences of at most repeatLen distinct tokens, each repeated once (Olsson et al.), from
// taskSeed.
const (
	repeatBatch = 4
	repeatLen   = 32
)

// userModel is what a user's model (Options.Models) has besides a model: where it came from, its
// architecture and its tokenizer.
type userModel struct {
	path   string
	arch   string // pretrained.Model.Architecture
	family string // pretrained.Model.Family, or "mha" for a checkpoint of mha train
	tok    *tokenizer.Tokenizer
	lmHead bool
	mask   int    // the id of the mask token ([MASK], RoBERTa's <mask>) for a bidirectional model, or -1
	masked string // that token as the text writes it
}

// loadUser opens path, a Hugging Face folder or a checkpoint of mha train, as the model name. A
// checkpoint whose metadata records the task it was trained on gets that task, as a shipped
// model has.
func loadUser(path, name string) (*model, error) {
	pm, err := pretrained.OpenPath(path)
	if err != nil {
		return nil, fmt.Errorf("--model %s: expected a Hugging Face model folder or a checkpoint of mha train: %w", path, err)
	}
	u := &userModel{path: path, arch: pm.Architecture, family: string(pm.Family), tok: pm.Tokenizer, lmHead: pm.LMHead, mask: -1}
	if pm.Family == "" {
		u.family = "mha"
	}
	cfg := pm.NN.Config()
	if u.tok != nil && cfg.Bidirectional {
		for _, token := range []string{"[MASK]", "<mask>"} { // BERT's and DistilBERT's, RoBERTa's
			if id, ok := u.tok.TokenToID(token); ok {
				u.mask, u.masked = id, token
				break
			}
		}
	}
	if task, command, err := checkpointTask(path); err != nil {
		return nil, err
	} else if task != nil {
		m, err := newTaskModel(name, pm.NN, task, command)
		if err != nil {
			return nil, fmt.Errorf("--model %s: %w", path, err)
		}
		m.user = u
		return m, nil
	}
	return &model{name: name, cfg: cfg, params: pm.NN.NumParams(), user: u, net: pm.NN}, nil
}

// checkpointTask returns the task that the checkpoint of mha train at path was trained on and
// the command recorded with it, or nil when path is a folder or records no task.
func checkpointTask(path string) (tasks.Task, string, error) {
	if info, err := os.Stat(path); err != nil || info.IsDir() {
		return nil, "", nil
	}
	_, meta, _, err := nn.Load(path)
	if err != nil {
		return nil, "", err
	}
	raw, ok := meta[train.MetaKey]
	if !ok {
		return nil, "", nil
	}
	var r train.Recipe
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Task == "" {
		return nil, "", nil // no task to read: the model is shown without one
	}
	task, err := train.TaskOf(r.Task, meta)
	if err != nil {
		return nil, "", fmt.Errorf("--model %s: %w", path, err)
	}
	return task, meta["command"], nil
}

// userNames names the user's models after their paths' last element (a checkpoint without its
// extension), with -2, -3, … after a name already taken (taken holds the shipped models' names).
func userNames(paths []string, taken map[string]bool) []string {
	names := make([]string, len(paths))
	for i, p := range paths {
		base := filepath.Base(filepath.Clean(p))
		if ext := filepath.Ext(base); ext != "" && ext != base {
			base = strings.TrimSuffix(base, ext)
		}
		name := base
		for n := 2; taken[name]; n++ {
			name = base + "-" + strconv.Itoa(n)
		}
		taken[name] = true
		names[i] = name
	}
	return names
}

// describe says what a user's model without a task is, for the page.
func (u *userModel) describe(m *model) string {
	what := fmt.Sprintf("%s (%s) from %s.", u.arch, u.family, u.path)
	switch {
	case u.tok == nil:
		what += " It has no tokenizer.json: give token ids separated by spaces."
	case m.cfg.Bidirectional && u.mask >= 0:
		what += fmt.Sprintf(" Type text; write %s where the model should guess the word.", u.masked)
	case m.cfg.Bidirectional:
		what += " Type text; it is encoded with the model's tokenizer (it has no mask token)."
	default:
		what += " Type text; it is encoded with the model's tokenizer."
	}
	return what
}

// predicts says what the model's head predicts at each position: "next", "masked" or "none".
func (m *model) predicts() string {
	switch {
	case m.user != nil && !m.user.lmHead:
		return "none"
	case m.cfg.Bidirectional:
		return "masked"
	}
	return "next"
}

// encode turns the text a user typed for a model without a task into its tokens, with the
// special tokens the tokenizer adds, the tokens' byte offsets into text and their readable text.
func (m *model) encode(text string) (ids []int, offsets [][2]int, err error) {
	u := m.user
	if u.tok == nil {
		return nil, nil, badRequest("model %s has no tokenizer.json, so it cannot read text; give tokens (ids from 0 to %d)", m.name, m.cfg.Vocab-1)
	}
	if strings.TrimSpace(text) == "" {
		return nil, nil, badRequest("text is empty; want some words for %s", m.name)
	}
	// Text the normalizer removes whole (control characters, to BERT) leaves only special tokens.
	if own, err := u.tok.Encode(text, false); err != nil {
		return nil, nil, badRequest("text: %v", err)
	} else if len(own.IDs) == 0 {
		return nil, nil, badRequest("text %q has no tokens of its own for %s (only the special ones); want some words", clip(text), m.name)
	}
	enc, err := u.tok.Encode(text, true)
	if err != nil {
		return nil, nil, badRequest("text: %v", err)
	}
	if err := m.checkLen(len(enc.IDs)); err != nil {
		return nil, nil, err
	}
	for i, id := range enc.IDs {
		if id < 0 || id >= m.cfg.Vocab {
			return nil, nil, badRequest("text: the tokenizer gives token %q (id %d) at position %d, outside the vocabulary of %s (ids 0 to %d)",
				clip(enc.Tokens[i]), id, i, m.name, m.cfg.Vocab-1)
		}
	}
	return enc.IDs, enc.Offsets, nil
}

// piece returns the tokenizer's spelling of id for a model without a task ("#id" without a
// tokenizer or for an id it does not have).
func (m *model) piece(id int) string {
	if m.user != nil && m.user.tok != nil {
		if s, ok := m.user.tok.IDToToken(id); ok {
			return s
		}
	}
	return "#" + strconv.Itoa(id)
}

// readable returns what tokens [T] read as, token by token, for a model with a tokenizer: the
// tokenizer's decoding of each alone (Ġ and ▁ become a space, byte tokens their character, a
// WordPiece continuation keeps its ##), with a space back in front of a ▁ piece that the decoder
// strips; a token that holds part of a character reads as the text it covers (offsets, into
// text), or as its spelling when there is no text (offsets nil). It returns nil for a model
// without a tokenizer.
func (m *model) readable(tokens []int, offsets [][2]int, text string) []string {
	if m.user == nil || m.user.tok == nil {
		return nil
	}
	out := make([]string, len(tokens))
	for i, id := range tokens {
		raw := m.piece(id)
		s, err := m.user.tok.Decode([]int{id}, false)
		if err != nil {
			s = raw
		}
		if strings.HasPrefix(raw, "▁") && !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		if strings.ContainsRune(s, utf8.RuneError) || s == "" {
			// Part of a character (a byte token): the character the text has there, or the
			// tokenizer's spelling (<0xE2>) for a token read alone.
			s = raw
			if offsets != nil && offsets[i][1] > offsets[i][0] {
				s = text[offsets[i][0]:offsets[i][1]]
			}
		}
		out[i] = s
	}
	return out
}

// pieceText returns what token id reads as alone (see readable), or "" for a model without a
// tokenizer.
func (m *model) pieceText(id int) string {
	if r := m.readable([]int{id}, nil, ""); r != nil {
		return r[0]
	}
	return ""
}

// label prints a readable token on one line for a picture, in characters viz's font has: line
// breaks and tabs as \n, \r and \t, a token of spaces as middle dots.
func label(s string) string {
	s = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	if strings.TrimSpace(s) == "" {
		return strings.Repeat("·", max(1, utf8.RuneCountInString(s)))
	}
	return s
}

// nextTokens returns the targets of a causal language model on tokens [T]: each position's next
// token, the last position not scored; nil when there is no next token to score.
func nextTokens(tokens []int) *tasks.Batch {
	t := len(tokens)
	if t < 2 {
		return nil
	}
	b := &tasks.Batch{B: 1, T: t, Tokens: tokens, Targets: make([]int, t), Scored: make([]bool, t)}
	for i := range t - 1 {
		b.Targets[i], b.Scored[i] = tokens[i+1], true
	}
	return b
}

// textImportance returns every head's importance (probe.ImportanceOn) against the model's own
// next-token loss on tokens [T], holding the model's lock.
func (m *model) textImportance(ctx context.Context, next *tasks.Batch, workers int) ([][]float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return probe.ImportanceOn(m.net, next.Tokens, next.Targets, next.Scored, 1, next.T, workers)
}

// repeatedMeasurement measures a model without a task on repeated random tokens: the answer of
// /api/heads for it. Call it holding m.mu.
func (m *model) repeatedMeasurement(ctx context.Context, workers int) (*taskMeasurement, error) {
	n := min(m.cfg.SeqLen/2, repeatLen)
	if n < 1 {
		return nil, badRequest("model %s takes at most %d token, too few to repeat a sequence", m.name, m.cfg.SeqLen)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n = min(n, m.cfg.Vocab)
	tokens, err := probe.DistinctRepeatedTokens(taskSeed, repeatBatch, n, m.cfg.Vocab)
	if err != nil {
		return nil, err
	}
	c, err := probe.Record(m.net, tokens, repeatBatch, 2*n, &probe.RecordOptions{Workers: workers})
	if err != nil {
		return nil, err
	}
	meas, err := measure(c, nil)
	if err != nil {
		return nil, err
	}
	meas.About = fmt.Sprintf("On %d sequences of %d distinct random tokens repeated once (Olsson et al. 2022): "+
		"prefix-matching is the induction score, the mean attention from a token of the second half to the token after its first occurrence; "+
		"duplicate-token the attention to that first occurrence; %s has no task, so no importance or pruning.", repeatBatch, n, m.name)
	return &taskMeasurement{measurement: *meas}, nil
}
