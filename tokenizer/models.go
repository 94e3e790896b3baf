package tokenizer

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// piece is one token a model made of a word: its id and its bytes [start, end) in the word, and
// its token when that is not the vocabulary's for the id (Unigram's unknown pieces).
type piece struct {
	id         int
	start, end int
	value      string
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
	unk          int    // -1: no unknown token, unknown characters are dropped
	missingUnk   string // an unk_token the vocabulary lacks: an error when a character needs it
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
			return []piece{{id: id, end: len(word)}}, nil
		}
	}
	// As Hugging Face's merge_word: a symbol's offsets run on from the previous symbol's end;
	// byte fallback spells the piece with its prefix and suffix; an unknown character waits,
	// fusing with the next one under fuse_unk, until a piece of the vocabulary comes (byte
	// tokens go before it) or the word ends.
	var syms []symbol
	off := 0 // the end of the last symbol
	push := func(id, n int) {
		syms = append(syms, symbol{id: id, start: off, end: off + n, prev: len(syms) - 1, next: len(syms) + 1})
		off += n
	}
	unkLen := 0 // the bytes of the unknown characters waiting, 0 for none
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
			if unkLen > 0 {
				push(m.unk, unkLen)
				unkLen = 0
			}
			push(id, w)
			continue
		}
		if m.byteFallback && m.hasBytes(s) {
			for k := range len(s) {
				push(m.byteIDs[s[k]], 1)
			}
			continue
		}
		switch {
		case m.missingUnk != "":
			return nil, fmt.Errorf("tokenizer: BPE: %q needs the unknown token %q, which is not in the vocabulary", s, m.missingUnk)
		case m.unk < 0:
		case unkLen > 0 && m.fuseUnk:
			unkLen += w
		default:
			if unkLen > 0 {
				push(m.unk, unkLen)
			}
			unkLen = w
		}
	}
	if unkLen > 0 {
		push(m.unk, unkLen)
	}
	if len(syms) == 0 {
		return nil, nil
	}
	syms[len(syms)-1].next = -1
	m.mergeAll(syms)
	var out []piece
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		out = append(out, piece{id: syms[i].id, start: syms[i].start, end: syms[i].end})
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

// candidates is a binary min-heap of candidates: the lowest rank first, the leftmost among
// equal ranks (Hugging Face tokenizers' order).
type candidates []candidate

func (c candidates) less(i, j int) bool {
	return c[i].rank < c[j].rank || c[i].rank == c[j].rank && c[i].pos < c[j].pos
}

func (c *candidates) push(x candidate) {
	*c = append(*c, x)
	h := *c
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (c *candidates) pop() candidate {
	h := *c
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*c = h
	return top
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
			q.push(candidate{mg, i, l, r})
		}
	}
	for i := range syms {
		queue(i)
	}
	for len(q) > 0 {
		c := q.pop()
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
	index    vocabIndex // of vocab
	cont     walk       // the index walked through prefix
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
		return []piece{{id: id, end: len(word)}}, nil
	}
	if utf8.RuneCountInString(word) > m.maxChars {
		return unk()
	}
	var out []piece
	for start := 0; start < len(word); {
		// The longest entry that the word's bytes from start (after the prefix, but at the
		// start) spell, ending at a character's end: a walk of the index, which ends where no
		// entry goes on, so that a long word costs no more than the longest entry per piece.
		c := m.index.root()
		if start > 0 {
			c = m.cont
		}
		p := piece{id: -1, start: start}
		for end := start; !c.dead() && end < len(word); end++ {
			c = m.index.next(c, word[end])
			if id, found := m.index.id(c); found && (end+1 == len(word) || utf8.RuneStart(word[end+1])) {
				p.id, p.end = id, end+1
			}
		}
		if p.id < 0 {
			return unk()
		}
		out = append(out, p)
		start = p.end
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
	return []piece{{id: id, end: len(word)}}, nil
}

// unigram is the Unigram model (SentencePiece's): the split of a word into vocabulary pieces
// whose scores (log probabilities) sum highest, found by Viterbi. A character no piece starts
// with is unknown, scored 10 below the lowest piece; consecutive unknown characters make one
// unknown token, spelled as the text it covers, or with byteFallback its bytes' <0xXX> tokens.
type unigram struct {
	vocab        map[string]int // a piece given twice has its last id
	pieces       []string       // by id
	scores       []float64
	unk          int // -1: none
	byteFallback bool
	index        vocabIndex // of vocab
	unkScore     float64
}

func (m *unigram) tokenize(word string) ([]piece, error) {
	type node struct {
		id    int
		score float64
		start int // -1: not reached
	}
	best := make([]node, len(word)+1)
	for i := range best {
		best[i].start = -1
	}
	for start := 0; start < len(word); {
		_, mblen := utf8.DecodeRuneInString(word[start:])
		here := best[start].score
		single := false
		// The pieces that the word's bytes from start spell, ending at a character's end, as
		// Hugging Face's trie finds them (common_prefix_search): a walk of the index, which ends
		// where no piece goes on.
		c := m.index.root()
		for end := start + 1; !c.dead() && end <= len(word); end++ {
			c = m.index.next(c, word[end-1])
			id, found := m.index.id(c)
			if !found || end < len(word) && !utf8.RuneStart(word[end]) {
				continue
			}
			if s := here + m.scores[id]; best[end].start < 0 || s > best[end].score {
				best[end] = node{id, s, start}
			}
			single = single || end == start+mblen
		}
		if !single {
			if m.unk < 0 {
				return nil, fmt.Errorf("model Unigram: %q is unknown and there is no unk_id", word[start:start+mblen])
			}
			if s := here + m.unkScore; best[start+mblen].start < 0 || s > best[start+mblen].score {
				best[start+mblen] = node{m.unk, s, start}
			}
		}
		start += mblen
	}
	var rev []piece // the pieces, last first, unknown ones fused
	for end := len(word); end > 0; {
		n := best[end]
		if n.id == m.unk && len(rev) > 0 && rev[len(rev)-1].id == m.unk && rev[len(rev)-1].start == end {
			rev[len(rev)-1].start = n.start
		} else {
			rev = append(rev, piece{id: n.id, start: n.start, end: end})
		}
		end = n.start
	}
	var out []piece
	for i := len(rev) - 1; i >= 0; i-- {
		p := rev[i]
		text := word[p.start:p.end]
		if id, ok := m.vocab[text]; ok {
			out = append(out, piece{id: id, start: p.start, end: p.end})
			continue
		}
		if m.byteFallback && m.hasBytes(text) {
			for k := range len(text) {
				b := fmt.Sprintf("<0x%02X>", text[k])
				out = append(out, piece{id: m.vocab[b], start: p.start, end: p.end, value: b})
			}
			continue
		}
		out = append(out, piece{id: m.unk, start: p.start, end: p.end, value: text})
	}
	return out, nil
}

func (m *unigram) hasBytes(s string) bool {
	for k := range len(s) {
		if _, ok := m.vocab[fmt.Sprintf("<0x%02X>", s[k])]; !ok {
			return false
		}
	}
	return true
}

// vocabIndex finds the entries of a vocabulary that a text starts with, byte by byte, as a trie
// does: the entries are sorted, so that those that start with the bytes walked so far are a range
// of them, which each byte narrows.
type vocabIndex struct {
	keys  []string // sorted
	ids   []int    // the id of each key
	first [257]int // the keys that start with byte b are [first[b], first[b+1])
}

func newVocabIndex(vocab map[string]int) vocabIndex {
	x := vocabIndex{keys: slices.Sorted(maps.Keys(vocab)), ids: make([]int, len(vocab))}
	var all strings.Builder // the keys side by side, which the searches read faster
	for _, k := range x.keys {
		all.WriteString(k)
	}
	s := all.String()
	for i, k := range x.keys {
		x.ids[i] = vocab[k]
		x.keys[i], s = s[:len(k)], s[len(k):]
	}
	for b := range x.first {
		x.first[b] = sort.Search(len(x.keys), func(i int) bool { return x.keys[i] != "" && int(x.keys[i][0]) >= b })
	}
	return x
}

// walk is a place in a walk of a vocabIndex: the keys [lo, hi) start with the depth bytes walked.
type walk struct{ lo, hi, depth int }

func (x *vocabIndex) root() walk { return walk{0, len(x.keys), 0} }

// dead reports whether no key starts with the bytes walked.
func (w walk) dead() bool { return w.lo == w.hi }

// next walks on by b.
func (x *vocabIndex) next(w walk, b byte) walk {
	if w.depth == 0 {
		return walk{x.first[b], x.first[int(b)+1], 1}
	}
	lo, hi := w.lo, w.hi
	if lo < hi && len(x.keys[lo]) == w.depth {
		lo++ // the key that ends here, first of the range
	}
	// Binary searches for the first key whose byte depth is b or more, then more than b.
	for k := hi; lo < k; {
		if m := int(uint(lo+k) >> 1); x.keys[m][w.depth] < b {
			lo = m + 1
		} else {
			k = m
		}
	}
	for k := lo; k < hi; {
		if m := int(uint(k+hi) >> 1); x.keys[m][w.depth] > b {
			hi = m
		} else {
			k = m + 1
		}
	}
	return walk{lo, hi, w.depth + 1}
}

// id is the id of the key that the bytes walked spell, if there is one.
func (x *vocabIndex) id(w walk) (int, bool) {
	if w.lo < w.hi && len(x.keys[w.lo]) == w.depth {
		return x.ids[w.lo], true
	}
	return 0, false
}
