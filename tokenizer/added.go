package tokenizer

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text: leftmost first, and the longest of those that start
// there, as the Aho-Corasick automaton of Hugging Face tokenizers does.
type addedMatcher struct {
	byFirst map[byte][]matchable // by first byte, longest first
}

// matchable is an added token and the text it is found as (its content, normalized when the
// token is).
type matchable struct {
	text string
	tok  *addedToken
}

func newAddedMatcher(ms []matchable) addedMatcher {
	m := addedMatcher{byFirst: map[byte][]matchable{}}
	for _, x := range ms {
		if x.text != "" {
			m.byFirst[x.text[0]] = append(m.byFirst[x.text[0]], x)
		}
	}
	for _, l := range m.byFirst {
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].text) > len(l[j].text) })
	}
	return m
}

// segment is a part of a piece of text: an added token (tok non-nil) with the bytes [start, end)
// it covers, whitespace its lstrip or rstrip took included, or text between them.
type segment struct {
	start, end int
	tok        *addedToken
}

// split cuts s into added tokens and the text between them.
func (m addedMatcher) split(s string) []segment {
	var segs []segment
	if len(m.byFirst) == 0 {
		return []segment{{0, len(s), nil}}
	}
	done := 0     // the end of the last token taken
	spaceEnd := 0 // where the whitespace after the last rstrip token ends
	for pos := 0; pos < len(s); {
		x, ok := m.longestAt(s, pos)
		if !ok {
			pos++
			continue
		}
		start, stop := pos, pos+len(x.text)
		pos = stop
		t := x.tok
		if t.SingleWord && (start > 0 && isWordChar(lastRune(s[:start])) || stop < len(s) && isWordChar(firstRune(s[stop:]))) {
			continue
		}
		if t.LStrip {
			// The whitespace before done is the last token's: the scan goes back no further,
			// so that a run of whitespace tokens costs time in proportion to the run.
			// A token inside the whitespace that the last one took keeps none (Hugging Face
			// then panics with "AddedVocabulary bad split"): it starts where it ends.
			start = min(done+leftOfTrailingSpace(s[done:max(done, start)]), stop)
		}
		if t.RStrip {
			// The scan goes on from the token's end, as Hugging Face's does: an added token
			// that starts with the stripped space is still found (and keeps that space too).
			// Inside the whitespace that the last rstrip token took, that whitespace ends where
			// it did, and is not scanned again.
			if stop > spaceEnd {
				spaceEnd = stop + len(s[stop:]) - len(trimLeftSpace(s[stop:]))
			}
			stop = spaceEnd
		}
		if start > done {
			segs = append(segs, segment{done, start, nil})
		}
		segs = append(segs, segment{start, stop, t})
		done = stop
	}
	if done < len(s) {
		segs = append(segs, segment{done, len(s), nil})
	}
	return segs
}

func (m addedMatcher) longestAt(s string, pos int) (matchable, bool) {
	for _, x := range m.byFirst[s[pos]] {
		if len(s)-pos >= len(x.text) && s[pos:pos+len(x.text)] == x.text {
			return x, true
		}
	}
	return matchable{}, false
}

// isWordChar reports whether r is a word character for single_word: the regular expression \w
// that Hugging Face tokenizers tests with (Unicode's Alphabetic, marks, decimal digits,
// connector punctuation and the joiners).
func isWordChar(r rune) bool {
	return unicode.In(r, unicode.L, unicode.Nl, unicode.Other_Alphabetic, unicode.M, unicode.Nd, unicode.Pc, unicode.Join_Control)
}

func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

// leftOfTrailingSpace is where the whitespace that ends s starts.
func leftOfTrailingSpace(s string) int {
	for len(s) > 0 {
		r, w := utf8.DecodeLastRuneInString(s)
		if !isWhiteSpace(r) {
			break
		}
		s = s[:len(s)-w]
	}
	return len(s)
}

func trimLeftSpace(s string) string {
	for len(s) > 0 {
		r, w := utf8.DecodeRuneInString(s)
		if !isWhiteSpace(r) {
			break
		}
		s = s[w:]
	}
	return s
}
