package tokenizer

import (
	"math"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before it is split into words; the alignment follows.
type normalizer interface {
	normalize(n normString) normString
}

// normalizers are the normalizer of a tokenizer: a Sequence's steps (nested Sequences
// flattened), or the one normalizer, or none.
type normalizers []normalizer

// normalize applies each normalizer in turn and returns the text and its size in bytes. It
// stops, reporting false, as soon as a step would leave more than limit bytes (see growthBound):
// the size is then what that step made, or what a bounded step would make, since it does not
// make it.
func (s normalizers) normalize(n normString, limit int) (normString, int, bool) {
	for _, x := range s {
		if b, ok := x.(boundedNormalizer); ok {
			var size int
			if n, size, ok = b.within(n, limit); !ok {
				return n, size, false
			}
			continue
		}
		if n = x.normalize(n); len(n.s) > limit {
			return n, len(n.s), false
		}
	}
	return n, len(n.s), true
}

// boundedNormalizer is a normalizer that sizes its text before it makes it: one whose single
// step can multiply the text (Replace, by up to its content's length), so that a limit must stop
// it before the text is made. within returns the text and its size, or, when the size would pass
// limit, n unchanged, that size and false.
type boundedNormalizer interface {
	within(n normString, limit int) (normString, int, bool)
}

// growthBound is the most bytes of text that normalizing and pre-tokenizing n bytes of input may
// make (Encode counts both, for all the pieces of its text), and that decoding n bytes of tokens
// may make: 64 times n, and at least 1 MiB. No real tokenizer comes near it: NFKC grows a
// character at most 11 times (U+FDFA, 3 bytes, becomes 33), byte-level spelling at most doubles
// text, Prepend and Metaspace add a few bytes to a piece. But a file can hold a Sequence whose
// steps each double the text (40 Replace steps of "a" by "aa" would make a terabyte of "a" from
// one), so the Sequences check the bound after each step, and stop text that has outgrown it by
// one step's growth at most.
func growthBound(n int) int { return max(64*n, 1<<20) }

// unicodeForm is the NFC, NFD, NFKC or NFKD normalizer.
type unicodeForm struct{ form norm.Form }

func (u unicodeForm) normalize(n normString) normString { return n.unicodeNorm(u.form) }

// byteLevelNorm is the ByteLevel normalizer: every byte spelled as its byteChar, as the
// ByteLevel pre-tokenizer does, without a split.
type byteLevelNorm struct{}

func (byteLevelNorm) normalize(n normString) normString { return byteLevelEncode(n) }

// lowercase is the Lowercase normalizer: each character's full lowercase mapping, as Rust's
// char::to_lowercase (so 'İ' becomes "i̇" and a final 'Σ' stays 'σ').
type lowercase struct{}

func (lowercase) normalize(n normString) normString { return n.mapRunes(toLower) }

func toLower(r rune) string {
	if r == 'İ' {
		return "i\u0307"
	}
	return string(unicode.ToLower(r))
}

// stripAccents is the StripAccents normalizer: it removes the combining marks (Unicode's Mark
// category: Mn, Mc and Me), which after NFD hold the accents.
type stripAccents struct{}

func (stripAccents) normalize(n normString) normString { return removeRunes(n, unicode.M) }

// removeRunes removes the runes of a category from n.
func removeRunes(n normString, cat *unicode.RangeTable) normString {
	return n.mapRunes(func(r rune) string {
		if unicode.Is(cat, r) {
			return ""
		}
		return string(r)
	})
}

// strip is the Strip normalizer: whitespace removed on the left, the right or both.
type strip struct{ left, right bool }

func (s strip) normalize(n normString) normString { return n.trim(s.left, s.right, isWhiteSpace) }

// prependNorm is the Prepend normalizer: a string put before every non-empty piece.
type prependNorm struct{ s string }

func (p prependNorm) normalize(n normString) normString { return n.prepend(p.s) }

// replaceNorm is the Replace normalizer: every match of a string or a regex replaced.
type replaceNorm struct {
	literal string // when re is nil
	re      *pattern
	content string
}

func (r replaceNorm) normalize(n normString) normString {
	n, _, _ = r.within(n, math.MaxInt)
	return n
}

func (r replaceNorm) within(n normString, limit int) (normString, int, bool) {
	spans := r.find(n.s)
	if size := replacedLen(len(n.s), spans, r.content); size > limit {
		return n, size, false
	}
	n = n.replaceSpans(spans, r.content)
	return n, len(n.s), true
}

// replacedLen is the length of a text of n bytes once the spans are replaced by content.
func replacedLen(n int, spans [][2]int, content string) int {
	for _, sp := range spans {
		n += len(content) - (sp[1] - sp[0])
	}
	return n
}

// find is where the pattern occurs in s.
func (r replaceNorm) find(s string) [][2]int {
	if r.re != nil {
		return r.re.findAll(s)
	}
	if r.literal == "" {
		return nil
	}
	var spans [][2]int
	for i := 0; ; {
		k := strings.Index(s[i:], r.literal)
		if k < 0 {
			return spans
		}
		spans = append(spans, [2]int{i + k, i + k + len(r.literal)})
		i += k + len(r.literal)
	}
}

// bertNormalizer is BERT's normalizer: control characters removed and whitespace made ' '
// (cleanText), CJK ideographs set apart by spaces, accents stripped (after NFD) and lowercasing.
type bertNormalizer struct {
	cleanText, chinese, stripAccents, lowercase bool
}

func (b bertNormalizer) normalize(n normString) normString {
	if b.cleanText {
		n = n.mapRunes(func(r rune) string {
			switch {
			case r == 0 || r == 0xFFFD || isBertControl(r):
				return ""
			case isWhiteSpace(r):
				return " "
			}
			return string(r)
		})
	}
	if b.chinese {
		n = n.mapRunes(func(r rune) string {
			if isCJK(r) {
				return " " + string(r) + " "
			}
			return string(r)
		})
	}
	if b.stripAccents {
		n = removeRunes(n.unicodeNorm(norm.NFD), unicode.Mn) // BERT's accents: the nonspacing marks only
	}
	if b.lowercase {
		n = lowercase{}.normalize(n)
	}
	return n
}

// isWhiteSpace is the Unicode White_Space property, Rust's char::is_whitespace.
func isWhiteSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// isBertControl is BERT's control character: any of Unicode's Other categories (Cc, Cf, Co, Cs
// and the unassigned Cn) but tab, newline and carriage return.
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) || !unicode.In(r, assigned...)
}

// assigned are the categories of assigned characters but Other: a rune in none of them, nor in
// Other, is unassigned (Cn).
var assigned = []*unicode.RangeTable{unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C}

// isCJK is BERT's "Chinese character": the CJK Unified Ideographs blocks and their extensions
// and compatibility forms, with Hugging Face tokenizers' ranges (is_chinese_char, which leaves
// U+2B820 … U+2B91F out).
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}
