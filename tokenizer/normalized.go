package tokenizer

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normString is a piece of text on its way through the normalizer and the pre-tokenizer, with,
// for every byte, the span [start, end) of the input text it came from. A rune of the input gives
// all its bytes the rune's whole span, so that a token holding part of a character (a byte-level
// token of an emoji) covers the whole character, as Hugging Face's offsets do.
type normString struct {
	s     string
	align [][2]int
}

// newNormString is text, found at byte offset base of the input, before any normalization.
func newNormString(text string, base int) normString {
	align := make([][2]int, len(text))
	for i, r := range text {
		w := utf8.RuneLen(r)
		if w < 0 {
			w = 1
		}
		for k := range w {
			align[i+k] = [2]int{base + i, base + i + w}
		}
	}
	return normString{s: text, align: align}
}

// span is the part of the input that the bytes [i, j) of n came from.
func (n normString) span(i, j int) [2]int {
	if i >= j || j > len(n.align) {
		if i < len(n.align) {
			return [2]int{n.align[i][0], n.align[i][0]}
		}
		if len(n.align) > 0 {
			end := n.align[len(n.align)-1][1]
			return [2]int{end, end}
		}
		return [2]int{}
	}
	start, end := n.align[i][0], n.align[i][1]
	for _, a := range n.align[i+1 : j] {
		start, end = min(start, a[0]), max(end, a[1])
	}
	return [2]int{start, end}
}

// slice is the bytes [i, j) of n.
func (n normString) slice(i, j int) normString {
	return normString{s: n.s[i:j], align: n.align[i:j]}
}

// builder assembles a new normString piece by piece.
type builder struct {
	sb    strings.Builder
	align [][2]int
}

// add appends s, every byte of it coming from the input span a.
func (b *builder) add(s string, a [2]int) {
	b.sb.WriteString(s)
	for range len(s) {
		b.align = append(b.align, a)
	}
}

// addFrom appends the bytes [i, j) of n with their own alignment.
func (b *builder) addFrom(n normString, i, j int) {
	b.sb.WriteString(n.s[i:j])
	b.align = append(b.align, n.align[i:j]...)
}

func (b *builder) done() normString {
	return normString{s: b.sb.String(), align: b.align}
}

// mapRunes replaces every rune of n by f's string for it (empty to remove it); the new bytes come
// from where the rune came from.
func (n normString) mapRunes(f func(r rune) string) normString {
	var b builder
	for i, r := range n.s {
		w := utf8.RuneLen(r)
		if w < 0 {
			w = 1
		}
		b.add(f(r), n.span(i, i+w))
	}
	return b.done()
}

// prepend puts s in front of n, coming from n's first character; an empty n stays empty.
func (n normString) prepend(s string) normString {
	if n.s == "" {
		return n
	}
	_, w := utf8.DecodeRuneInString(n.s)
	var b builder
	b.add(s, n.span(0, w))
	b.addFrom(n, 0, len(n.s))
	return b.done()
}

// replaceSpans replaces each span of n (sorted, not overlapping) by content, which comes from the
// whole span it replaces.
func (n normString) replaceSpans(spans [][2]int, content string) normString {
	if len(spans) == 0 {
		return n
	}
	var b builder
	prev := 0
	for _, sp := range spans {
		b.addFrom(n, prev, sp[0])
		b.add(content, n.span(sp[0], sp[1]))
		prev = sp[1]
	}
	b.addFrom(n, prev, len(n.s))
	return b.done()
}

// unicodeNorm puts n in a Unicode normalization form; each output segment (a starter and its
// combining marks) comes from the input segment it was made of.
func (n normString) unicodeNorm(form norm.Form) normString {
	if form.IsNormalString(n.s) {
		return n
	}
	var b builder
	var it norm.Iter
	it.InitString(form, n.s)
	for !it.Done() {
		start := it.Pos()
		seg := it.Next()
		b.add(string(seg), n.span(start, it.Pos()))
	}
	return b.done()
}

// trim removes the leading and trailing runes for which drop is true, as asked.
func (n normString) trim(left, right bool, drop func(rune) bool) normString {
	i, j := 0, len(n.s)
	if left {
		for i < j {
			r, w := utf8.DecodeRuneInString(n.s[i:])
			if !drop(r) {
				break
			}
			i += w
		}
	}
	if right {
		for j > i {
			r, w := utf8.DecodeLastRuneInString(n.s[i:j])
			if !drop(r) {
				break
			}
			j -= w
		}
	}
	return n.slice(i, j)
}
