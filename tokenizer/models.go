package tokenizer

import (
	"container/heap"
	"fmt"
	"unicode/utf8"
)

// piece is one token a model made of a word: its id and its bytes [start, end) in the word.
type piece struct {
	id         int
	start, end int
}

// model turns a pre-tokenized word into tokens.
type model interface {
	tokenize(word string) ([]piece, error)
}

// bpe is the BPE model: characters (or, for byte-level tokenizers, byte characters) merged pair
// by pair, the pair of lowest rank first and the leftmost among equals.
type bpe struct {
	vocab        map[string]int
	merges       map[[2]int]merge
	unk          int // -1: no unknown token, unknown characters are dropped
	prefix       string
	suffix       string
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	byteIDs      [256]int // the ids of <0x00> … <0xFF>, -1 where missing
}

// merge is what a pair of tokens merges into, and its rank (lower merges first).
type merge struct{ rank, id int }

// symbol is a token of a word being merged, in a list linked by index; a merged-away symbol has
// end == start.
type symbol struct {
	id, start, end, prev, next int
}

func (m *bpe) tokenize(word string) ([]piece, error) {
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return []piece{{id, 0, len(word)}}, nil
		}
	}
	var syms []symbol
	push := func(id, start, end int) {
		syms = append(syms, symbol{id: id, start: start, end: end, prev: len(syms) - 1, next: len(syms) + 1})
	}
	lastUnk := false
	for i, r := range word {
		w := utf8.RuneLen(r)
		if w < 0 {
			w = 1
		}
		s := word[i : i+w]
		if i > 0 {
			s = m.prefix + s
		}
		if i+w == len(word) {
			s += m.suffix
		}
		if id, ok := m.vocab[s]; ok {
			push(id, i, i+w)
			lastUnk = false
			continue
		}
		if m.byteFallback && m.hasBytes(word[i:i+w]) {
			for k := range w {
				push(m.byteIDs[word[i+k]], i+k, i+k+1)
			}
			lastUnk = false
			continue
		}
		if m.unk < 0 {
			continue
		}
		if m.fuseUnk && lastUnk {
			syms[len(syms)-1].end = i + w
			continue
		}
		push(m.unk, i, i+w)
		lastUnk = true
	}
	if len(syms) == 0 {
		return nil, nil
	}
	syms[len(syms)-1].next = -1
	m.mergeAll(syms)
	var out []piece
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		out = append(out, piece{syms[i].id, syms[i].start, syms[i].end})
	}
	return out, nil
}

func (m *bpe) hasBytes(s string) bool {
	for i := range len(s) {
		if m.byteIDs[s[i]] < 0 {
			return false
		}
	}
	return true
}

// candidate is a pair of neighbouring symbols that may merge: the left one's index and the ids
// both had when it was queued.
type candidate struct {
	merge
	pos, left, right int
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	return c[i].rank < c[j].rank || c[i].rank == c[j].rank && c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// mergeAll applies the merges to syms, whose first symbol stays at index 0.
func (m *bpe) mergeAll(syms []symbol) {
	var q candidates
	queue := func(i int) {
		if i < 0 || syms[i].next < 0 {
			return
		}
		l, r := syms[i].id, syms[syms[i].next].id
		if mg, ok := m.merges[[2]int{l, r}]; ok {
			heap.Push(&q, candidate{mg, i, l, r})
		}
	}
	for i := range syms {
		queue(i)
	}
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		s := &syms[c.pos]
		if s.end == s.start || s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue // stale: one of the two has merged since
		}
		right := &syms[s.next]
		s.id, s.end, s.next = c.id, right.end, right.next
		right.end = right.start
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		queue(s.prev)
		queue(c.pos)
	}
}

// wordPiece is the WordPiece model: the longest vocabulary entry that starts the word, then the
// longest "##"-prefixed one that continues it, and so on; a word that cannot be covered, or has
// more than maxChars characters, is the unknown token.
type wordPiece struct {
	vocab    map[string]int
	unk      string
	prefix   string
	maxChars int
}

func (m *wordPiece) tokenize(word string) ([]piece, error) {
	unk := func() ([]piece, error) {
		id, ok := m.vocab[m.unk]
		if !ok {
			return nil, fmt.Errorf("WordPiece: the unknown token %q is not in the vocabulary", m.unk)
		}
		return []piece{{id, 0, len(word)}}, nil
	}
	if utf8.RuneCountInString(word) > m.maxChars {
		return unk()
	}
	var out []piece
	for start := 0; start < len(word); {
		found := false
		for end := len(word); end > start; {
			sub := word[start:end]
			if start > 0 {
				sub = m.prefix + sub
			}
			if id, ok := m.vocab[sub]; ok {
				out = append(out, piece{id, start, end})
				start, found = end, true
				break
			}
			_, w := utf8.DecodeLastRuneInString(word[start:end])
			end -= w
		}
		if !found {
			return unk()
		}
	}
	return out, nil
}

// wordLevel is the WordLevel model: a word is its vocabulary entry, or the unknown token.
type wordLevel struct {
	vocab map[string]int
	unk   string
}

func (m *wordLevel) tokenize(word string) ([]piece, error) {
	id, ok := m.vocab[word]
	if !ok {
		if id, ok = m.vocab[m.unk]; !ok {
			return nil, fmt.Errorf("WordLevel: the unknown token %q is not in the vocabulary", m.unk)
		}
	}
	return []piece{{id, 0, len(word)}}, nil
}
