package lab

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
)

// Model is one model opened as the lab opens it, for the commands that study a model outside
// the page (mha patch, attribute, lens and composition): a shipped model, with its task's
// symbols, or a Hugging Face folder or checkpoint of mha train, with its tokenizer. It reads
// sequences up to the model's seq_len (the page's MaxUserTokens does not apply). A Model is not
// safe for concurrent use.
type Model struct{ m *model }

// Open opens name: a shipped model (models.Names) or, when no shipped model has that name, a
// Hugging Face folder or a checkpoint of mha train at that path. It returns an error naming the
// shipped models when name is neither, or the error of opening the path.
func Open(name string) (*Model, error) {
	if slices.Contains(models.Names(), name) {
		m, err := loadModel(name)
		if err != nil {
			return nil, err
		}
		m.whole = true
		return &Model{m}, nil
	}
	m, err := loadUser(name, userNames([]string{name}, map[string]bool{})[0])
	if err != nil {
		return nil, badRequest("%v (the shipped models are %s)", err, strings.Join(models.Names(), ", "))
	}
	m.whole = true
	return &Model{m}, nil
}

// Name returns the model's name: a shipped model's, or its path's last element.
func (m *Model) Name() string { return m.m.name }

// Net returns the model's network.
func (m *Model) Net() *nn.Model { return m.m.net }

// Encode returns the tokens [T] of text: its space-separated symbols for a model with a task
// (a shipped model, or a checkpoint that records its task), else the encoding of the model's
// tokenizer with the special tokens it adds. It returns an error naming an unknown symbol, or
// when the model has neither a task nor a tokenizer, text is empty, a token is outside the
// model's vocabulary or the sequence is longer than its seq_len.
func (m *Model) Encode(text string) ([]int, error) {
	if m.m.task != nil {
		return m.m.parse(text)
	}
	ids, _, err := m.m.encode(text)
	return ids, err
}

// Token returns the id of tok: "#ID" for an id, a symbol of the model's task, a token as the
// tokenizer writes it in its vocabulary ("ĠParis"), or text that the tokenizer encodes as one
// token without special tokens (" Paris"). It returns an error saying which of these it tried.
func (m *Model) Token(tok string) (int, error) { return m.m.token(tok) }

// Piece returns how token id prints: its symbol, its spelling in the tokenizer's vocabulary,
// or "#ID".
func (m *Model) Piece(id int) string {
	if m.m.task != nil && id >= 0 && id < len(m.m.symbols) {
		return m.m.symbols[id]
	}
	return m.m.piece(id)
}

// Position returns the position of tokens [T] whose prediction a logit difference reads: the
// last [MASK] for a masked language model whose tokens hold one, else the last position.
func (m *Model) Position(tokens []int) int { return m.m.position(tokens) }

// token returns the id of tok: "#ID" for an id, a symbol of the model's task, a token as the
// tokenizer writes it in its vocabulary ("ĠParis"), or text that the tokenizer encodes as one
// token without special tokens (" Paris"). It returns an error saying which of these it tried.
func (m *model) token(tok string) (int, error) {
	if s, ok := strings.CutPrefix(tok, "#"); ok {
		id, err := strconv.Atoi(s)
		if err != nil || id < 0 || id >= m.vocab() {
			return 0, badRequest("token %q: want #ID with an id from 0 to %d", clip(tok), m.vocab()-1)
		}
		return id, nil
	}
	if m.task != nil {
		if id, ok := m.ids[tok]; ok {
			return id, nil
		}
		return 0, badRequest("token %q is not a symbol of %s; want one of %s, or #ID", clip(tok), m.name, m.vocabulary())
	}
	u := m.user
	if u.tok == nil {
		return 0, badRequest("model %s has no tokenizer, so token %q means nothing; give #ID", m.name, clip(tok))
	}
	if id, ok := u.tok.TokenToID(tok); ok && id < m.cfg.Vocab {
		return id, nil
	}
	if enc, err := u.tok.Encode(tok, false); err == nil && len(enc.IDs) == 1 && enc.IDs[0] < m.cfg.Vocab {
		if unk := enc.Tokens[0]; unk == "[UNK]" || unk == "<unk>" {
			return 0, badRequest("token %q is not in the vocabulary of %s: its text encodes as the unknown token %s; give a token as the tokenizer writes it, or #ID", clip(tok), m.name, unk)
		}
		return enc.IDs[0], nil
	} else if err == nil {
		return 0, badRequest("token %q is not in the vocabulary of %s, and its text encodes as %d tokens %s, want 1; give a token as the tokenizer writes it, or #ID",
			clip(tok), m.name, len(enc.IDs), clip(fmt.Sprintf("%q", enc.Tokens)))
	}
	return 0, badRequest("token %q is not in the vocabulary of %s; give a token as the tokenizer writes it, or #ID", clip(tok), m.name)
}

// position returns the position of tokens [T] whose prediction a logit difference reads: the
// last [MASK] for a masked language model whose tokens hold one, else the last position.
func (m *model) position(tokens []int) int {
	if u := m.user; u != nil && u.mask >= 0 {
		for i, id := range slices.Backward(tokens) {
			if id == u.mask {
				return i
			}
		}
	}
	return len(tokens) - 1
}
