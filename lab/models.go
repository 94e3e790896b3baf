package lab

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/train"
)

// model is one shipped model, loaded once and kept, with its task and the symbol table that
// parses typed sequences. Everything but net is immutable after loadModel; net, an nn.Model, is
// not safe for concurrent use, so mu guards it, and the task-wide measurements cached beside it.
type model struct {
	name    string
	task    tasks.Task
	cfg     nn.Config
	command string         // the `mha train` command that reproduces the checkpoint
	params  int            // number of parameters
	symbols []string       // symbols[id] prints token id
	ids     map[string]int // ids[symbols[id]] = id

	mu   sync.Mutex
	net  *nn.Model
	wide *taskMeasurement // the task-wide measurement, once computed
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
	cfg := net.Config()
	if task.Vocab() > cfg.Vocab || task.SeqLen() > cfg.SeqLen {
		return nil, fmt.Errorf("lab: model %s takes vocab %d and length %d, its task has vocab %d and length %d",
			name, cfg.Vocab, cfg.SeqLen, task.Vocab(), task.SeqLen())
	}
	m := &model{
		name:    name,
		task:    task,
		cfg:     cfg,
		command: meta["command"],
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

// parse turns text, space-separated symbols as Task.Symbol prints them, into token ids. It
// returns a bad-request error naming the first unknown symbol, or saying that the sequence is
// empty or longer than the model's seq_len.
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
		if id < 0 || id >= len(m.symbols) {
			return badRequest("tokens: id %d at position %d is outside the vocabulary of %s, want 0 to %d", id, i, m.name, len(m.symbols)-1)
		}
	}
	return nil
}

// checkLen returns a bad-request error unless n tokens fit the model: 1 to seq_len.
func (m *model) checkLen(n int) error {
	if n < 1 || n > m.cfg.SeqLen {
		return badRequest("the sequence has %d tokens, want 1 to %d (the seq_len of %s)", n, m.cfg.SeqLen, m.name)
	}
	return nil
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

// modelInfo describes a shipped model for the page.
type modelInfo struct {
	Name     string   `json:"name"` // the model's task
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
	Symbols  []string `json:"symbols"` // symbols[id] prints token id
	Command  string   `json:"command"` // the `mha train` command that made it
}

// listModels answers GET /api/models: every shipped model, by name.
func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) error {
	out := make([]modelInfo, len(s.names))
	for i, name := range s.names {
		m := s.models[name]
		out[i] = modelInfo{
			Name:     name,
			Describe: m.task.Describe(),
			Vocab:    m.cfg.Vocab,
			SeqLen:   m.cfg.SeqLen,
			Layers:   m.cfg.Layers,
			Heads:    m.cfg.Heads,
			DModel:   m.cfg.DModel,
			HeadDims: m.dims(),
			AttnOnly: m.cfg.AttnOnly,
			Norm:     m.cfg.Norm,
			Params:   m.params,
			Symbols:  m.symbols,
			Command:  m.command,
		}
	}
	return writeJSON(w, http.StatusOK, out)
}
