package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer splits normalized pieces into words (and may rewrite them, as ByteLevel does).
type preTokenizer interface {
	preTokenize(pieces []normString) []normString
}

// each applies f to every piece and gathers the non-empty results.
func each(pieces []normString, f func(normString) []normString) []normString {
	var out []normString
	for _, p := range pieces {
		for _, q := range f(p) {
			if q.s != "" {
				out = append(out, q)
			}
		}
	}
	return out
}

// preTokenizers are the pre-tokenizer of a tokenizer: a Sequence's steps (nested Sequences
// flattened), or the one pre-tokenizer, or none.
type preTokenizers []preTokenizer

// preTokenize applies each pre-tokenizer in turn. It stops, reporting false with the pieces it
// has, as soon as a step leaves more than limit bytes in all (see growthBound).
func (s preTokenizers) preTokenize(pieces []normString, limit int) ([]normString, bool) {
	for _, p := range s {
		if pieces = p.preTokenize(pieces); piecesLen(pieces) > limit {
			return pieces, false
		}
	}
	return pieces, true
}

// piecesLen is the bytes of all the pieces.
func piecesLen(pieces []normString) int {
	n := 0
	for _, p := range pieces {
		n += len(p.s)
	}
	return n
}

// behavior is what a split does with the matches of its pattern (Hugging Face's
// SplitDelimiterBehavior).
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

// split cuts n at the matches (sorted, not overlapping) as b says; invert swaps the matches and
// the text between them.
func split(n normString, matches [][2]int, b behavior, invert bool) []normString {
	type part struct {
		span  [2]int
		match bool
	}
	var parts []part
	prev := 0
	for _, m := range matches {
		if m[0] > prev {
			parts = append(parts, part{[2]int{prev, m[0]}, invert})
		}
		parts = append(parts, part{m, !invert})
		prev = m[1]
	}
	if prev < len(n.s) {
		parts = append(parts, part{[2]int{prev, len(n.s)}, invert})
	}
	var out [][2]int
	switch b {
	case removed, isolated:
		for _, p := range parts {
			if b == isolated || !p.match {
				out = append(out, p.span)
			}
		}
	case mergedWithPrevious, contiguous:
		previous := false
		for _, p := range parts {
			joins := p.match && !previous
			if b == contiguous {
				joins = p.match == previous
			}
			if joins && len(out) > 0 {
				out[len(out)-1][1] = p.span[1]
			} else {
				out = append(out, p.span)
			}
			previous = p.match
		}
	case mergedWithNext:
		previous := false
		for i := len(parts) - 1; i >= 0; i-- {
			p := parts[i]
			if p.match && !previous && len(out) > 0 {
				out[len(out)-1][0] = p.span[0]
			} else {
				out = append(out, p.span)
			}
			previous = p.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	pieces := make([]normString, 0, len(out))
	for _, sp := range out {
		if sp[1] > sp[0] {
			pieces = append(pieces, n.slice(sp[0], sp[1]))
		}
	}
	return pieces
}

// runeMatches is every rune of s for which is is true, each a match of its own.
func runeMatches(s string, is func(rune) bool) [][2]int {
	var m [][2]int
	for i, r := range s {
		if is(r) {
			m = append(m, [2]int{i, i + utf8.RuneLen(r)})
		}
	}
	return m
}

// gpt2Pattern is GPT-2's pre-tokenization regex, which the ByteLevel pre-tokenizer uses.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevelPre is the ByteLevel pre-tokenizer: a space put in front (addPrefixSpace), a split by
// GPT-2's regex (useRegex), then every byte spelled as its byteChar.
type byteLevelPre struct {
	addPrefixSpace bool
	re             *pattern // nil: no regex split
}

func (p byteLevelPre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		if p.addPrefixSpace && !strings.HasPrefix(n.s, " ") {
			n = n.prepend(" ")
		}
		words := []normString{n}
		if p.re != nil {
			words = split(n, p.re.findAll(n.s), isolated, false)
		}
		for i := range words {
			words[i] = byteLevelEncode(words[i])
		}
		return words
	})
}

// splitPre is the Split pre-tokenizer: a split at the matches of a string or a regex.
type splitPre struct {
	find     replaceNorm // its literal or re; content unused
	behavior behavior
	invert   bool
}

func (p splitPre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		return split(n, p.find.find(n.s), p.behavior, p.invert)
	})
}

// prependScheme says where Metaspace puts its replacement in front of a piece.
type prependScheme int

const (
	prependAlways prependScheme = iota // before every piece
	prependFirst                       // before the piece that starts the text
	prependNever
)

// metaspacePre is the Metaspace pre-tokenizer: spaces become the replacement ('▁'), which is put
// in front as the prepend scheme says, and with split the text is cut before each replacement.
type metaspacePre struct {
	replacement string
	scheme      prependScheme
	split       bool
}

func (p metaspacePre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		n = n.replaceSpans(replaceNorm{literal: " "}.find(n.s), p.replacement)
		if !strings.HasPrefix(n.s, p.replacement) && (p.scheme == prependAlways || p.scheme == prependFirst && len(n.align) > 0 && n.align[0][0] == 0) {
			n = n.prepend(p.replacement)
		}
		if !p.split {
			return []normString{n}
		}
		return split(n, replaceNorm{literal: p.replacement}.find(n.s), mergedWithNext, false)
	})
}

// bertPre is BERT's pre-tokenizer: split at whitespace, which goes, and at each punctuation
// character, which stays as a word of its own.
type bertPre struct{}

func (bertPre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		return each(split(n, runeMatches(n.s, isWhiteSpace), removed, false), func(w normString) []normString {
			return split(w, runeMatches(w.s, isPunct), isolated, false)
		})
	})
}

// isPunct is BERT's punctuation: ASCII punctuation (which holds symbols such as '$' and '^') and
// Unicode's punctuation categories.
func isPunct(r rune) bool {
	return r < 0x80 && unicode.IsPunct(r) || r < 0x80 && unicode.IsSymbol(r) || unicode.IsPunct(r)
}

// whitespaceSplitPre is the WhitespaceSplit pre-tokenizer: split at whitespace, which goes.
type whitespaceSplitPre struct{}

func (whitespaceSplitPre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		return split(n, runeMatches(n.s, isWhiteSpace), removed, false)
	})
}

// regexWordsPre keeps the matches of a regex as words and drops the rest: the Whitespace
// pre-tokenizer, \w+|[^\w\s]+.
type regexWordsPre struct{ re *pattern }

func (p regexWordsPre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		return split(n, p.re.findAll(n.s), removed, true)
	})
}

// runeClassPre splits at each rune of a class: Digits (numeric characters, one by one or in runs)
// and Punctuation.
type runeClassPre struct {
	is       func(rune) bool
	behavior behavior
}

func (p runeClassPre) preTokenize(pieces []normString) []normString {
	return each(pieces, func(n normString) []normString {
		return split(n, runeMatches(n.s, p.is), p.behavior, false)
	})
}

// isNumeric is Rust's char::is_numeric: Unicode's number categories (Nd, Nl, No).
func isNumeric(r rune) bool { return unicode.IsNumber(r) }
