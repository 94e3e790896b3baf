package lab

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/train"
)

// model is one model of the lab, loaded once and kept: a shipped model with its task and the
// symbol table that parses typed sequences, or a user's model (Options.Models), which has a task
// only when it is a checkpoint of `mha train` that records one. Everything but net is immutable
// after loading; net, an nn.Model, is not safe for concurrent use, so mu guards it, and the
// measurements cached beside it.
type model struct {
	name    string
	task    tasks.Task // nil for a user model without a task
	cfg     nn.Config
	command string         // the `mha train` command that reproduces the checkpoint, if known
	params  int            // number of parameters
	symbols []string       // symbols[id] prints token id; nil without a task
	ids     map[string]int // ids[symbols[id]] = id
	user    *userModel     // nil for a shipped model
	whole   bool           // reads sequences up to seq_len, not MaxUserTokens (Open)

	mu   sync.Mutex
	net  *nn.Model
	wide *taskMeasurement // the measurement of /api/heads, once computed
	// circuits are the latest results of /api/circuits, the latest first; comp the model's
	// composition scores, once computed.
	circuits []cachedCircuits
	comp     *circuits.CompositionScores
}

// loadModel opens the shipped model name with the task configuration it was trained with.
func loadModel(name string) (*model, error) {
	net, meta, err := models.Open(name)
	if err != nil {
		return nil, err
	}
	task, err := train.TaskOf(name, meta)
	if err != nil {
		return nil, err
	}
	return newTaskModel(name, net, task, meta["command"])
}

// newTaskModel returns the model net, trained on task, with the task's symbol table.
func newTaskModel(name string, net *nn.Model, task tasks.Task, command string) (*model, error) {
	cfg := net.Config()
	if task.Vocab() > cfg.Vocab || task.SeqLen() > cfg.SeqLen {
		return nil, fmt.Errorf("lab: model %s takes vocab %d and length %d, its task has vocab %d and length %d",
			name, cfg.Vocab, cfg.SeqLen, task.Vocab(), task.SeqLen())
	}
	m := &model{
		name:    name,
		task:    task,
		cfg:     cfg,
		command: command,
		params:  net.NumParams(),
		symbols: make([]string, task.Vocab()),
		ids:     make(map[string]int, task.Vocab()),
		net:     net,
	}
	for id := range m.symbols {
		s := task.Symbol(id)
		if prev, dup := m.ids[s]; dup || strings.ContainsFunc(s, unicode.IsSpace) || s == "" {
			return nil, fmt.Errorf("lab: task %s prints id %d as %q (id %d prints the same, or it is empty or has a space); symbols must be unique words", name, id, s, prev)
		}
		m.symbols[id], m.ids[s] = s, id
	}
	return m, nil
}

// parse turns text, space-separated symbols as Task.Symbol prints them, into the token ids of a
// model with a task. It returns a bad-request error naming the first unknown symbol, or saying
// that the sequence is empty or longer than the model's seq_len.
func (m *model) parse(text string) ([]int, error) {
	words := strings.Fields(text)
	if err := m.checkLen(len(words)); err != nil {
		return nil, err
	}
	ids := make([]int, len(words))
	for i, w := range words {
		id, ok := m.ids[w]
		if !ok {
			return nil, badRequest("text: symbol %q at position %d is not in the vocabulary of %s; want one of %s",
				clip(w), i, m.name, m.vocabulary())
		}
		ids[i] = id
	}
	return ids, nil
}

// checkTokens returns a bad-request error unless tokens is a sequence of valid ids the model
// can read.
func (m *model) checkTokens(tokens []int) error {
	if err := m.checkLen(len(tokens)); err != nil {
		return err
	}
	for i, id := range tokens {
		if v := m.vocab(); id < 0 || id >= v {
			return badRequest("tokens: id %d at position %d is outside the vocabulary of %s, want 0 to %d", id, i, m.name, v-1)
		}
	}
	return nil
}

// checkLen returns a bad-request error unless n tokens fit the model: 1 to maxLen.
func (m *model) checkLen(n int) error {
	if most := m.maxLen(); n < 1 || n > most {
		if most < m.cfg.SeqLen {
			return badRequest("the sequence has %d tokens, want 1 to %d (the lab's limit: it sends every head's %d×%d weights; %s takes up to %d)", n, most, most, most, m.name, m.cfg.SeqLen)
		}
		return badRequest("the sequence has %d tokens, want 1 to %d (the seq_len of %s)", n, most, m.name)
	}
	return nil
}

// vocab is the number of token ids a sequence may hold: the task's, or the model's without one.
func (m *model) vocab() int {
	if m.task != nil {
		return len(m.symbols)
	}
	return m.cfg.Vocab
}

// maxLen is the longest sequence the lab runs the model on: its seq_len, and at most
// MaxUserTokens for a model without a task.
func (m *model) maxLen() int {
	if m.task != nil || m.whole {
		return m.cfg.SeqLen
	}
	return min(m.cfg.SeqLen, MaxUserTokens)
}

// vocabulary lists the model's symbols for an error message, eliding the middle of a long list.
func (m *model) vocabulary() string {
	s := m.symbols
	if len(s) > 16 {
		return strings.Join(s[:8], " ") + " … " + strings.Join(s[len(s)-4:], " ")
	}
	return strings.Join(s, " ")
}

// clip shortens a string quoted back to the user to at most 40 bytes (whole runes).
func clip(s string) string {
	const limit = 40
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// dims returns the sizes of the model's heads.
func (m *model) dims() []int {
	ac := m.cfg.Attention()
	dims := make([]int, ac.NumHeads)
	for h := range dims {
		dims[h] = ac.HeadDim(h)
	}
	return dims
}

// modelInfo describes a model for the page.
type modelInfo struct {
	Name     string   `json:"name"` // the model's task, or the name of a user's model
	Describe string   `json:"describe"`
	Vocab    int      `json:"vocab"`
	SeqLen   int      `json:"seq_len"`
	Layers   int      `json:"layers"`
	Heads    int      `json:"heads"`
	DModel   int      `json:"d_model"`
	HeadDims []int    `json:"head_dims"`
	AttnOnly bool     `json:"attn_only"`
	Norm     string   `json:"norm"`
	Params   int      `json:"params"`
	Symbols  []string `json:"symbols"` // symbols[id] prints token id; null without a task
	Command  string   `json:"command"` // the `mha train` command that made it, if known
	// Task says whether the model has a task: seeds, targets, task scores and pruning.
	Task bool `json:"task"`
	// MaxTokens is the longest sequence the lab runs it on.
	MaxTokens int `json:"max_tokens"`
	// User says whether the model came from --model (Options.Models); Path is where.
	User bool   `json:"user"`
	Path string `json:"path,omitempty"`
	// Architecture and Family are pretrained.Model's ("mha" for a checkpoint of mha train).
	Architecture string `json:"architecture,omitempty"`
	Family       string `json:"family,omitempty"`
	// Tokenizer says whether the model reads text through its tokenizer.json.
	Tokenizer bool `json:"tokenizer"`
	// Causal is false for a bidirectional model (BERT), whose positions see every other.
	Causal bool `json:"causal"`
	// Predicts is "next" (the next token), "masked" (the token at each position, BERT's
	// masked-LM head) or "none" (a model without its language-model head).
	Predicts string `json:"predicts"`
	// Mask is the mask token a masked-LM model's text holds where it should guess ("[MASK]",
	// RoBERTa's "<mask>"); absent otherwise.
	Mask string `json:"mask,omitempty"`
	// Patterns, Block and Normalizer are the sparse attention the model was built with
	// (nn.Config's), absent for dense softmax attention in 64 × 64 blocks.
	Patterns   []string `json:"patterns,omitempty"`
	Block      []int    `json:"block,omitempty"`
	Normalizer string   `json:"normalizer,omitempty"`
	// Experts and ExpertsPerToken are a mixture of experts' (nn.Config's), absent for a dense
	// feed-forward network.
	Experts         int `json:"experts,omitempty"`
	ExpertsPerToken int `json:"experts_per_token,omitempty"`
}

// info describes m for /api/models.
func (m *model) info() modelInfo {
	out := modelInfo{
		Name:       m.name,
		Vocab:      m.cfg.Vocab,
		SeqLen:     m.cfg.SeqLen,
		Layers:     m.cfg.Layers,
		Heads:      m.cfg.Heads,
		DModel:     m.cfg.DModel,
		HeadDims:   m.dims(),
		AttnOnly:   m.cfg.AttnOnly,
		Norm:       m.cfg.Norm,
		Params:     m.params,
		Symbols:    m.symbols,
		Command:    m.command,
		Task:       m.task != nil,
		MaxTokens:  m.maxLen(),
		Causal:     !m.cfg.Bidirectional,
		Predicts:   m.predicts(),
		Patterns:   m.cfg.Patterns,
		Block:      m.cfg.Block,
		Normalizer: m.cfg.Normalizer,
		Experts:    m.cfg.Experts, ExpertsPerToken: m.cfg.ExpertsPerToken,
	}
	if m.task != nil {
		out.Describe = m.task.Describe()
	}
	if u := m.user; u != nil {
		out.User, out.Path, out.Architecture, out.Family, out.Tokenizer = true, u.path, u.arch, u.family, u.tok != nil
		out.Mask = u.masked
		if m.task == nil {
			out.Describe = u.describe(m)
		}
	}
	return out
}

// listModels answers GET /api/models: the shipped models, by name, then the user's.
func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) error {
	out := make([]modelInfo, len(s.names))
	for i, name := range s.names {
		out[i] = s.models[name].info()
	}
	return writeJSON(w, http.StatusOK, out)
}
