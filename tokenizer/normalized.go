package tokenizer

import (
	"slices"
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

// span is the part of the input that the bytes [i, j) of n came from: from where the first
// byte's character starts to where the last byte's ends, as Hugging Face tokenizers computes
// offsets. An empty range is an empty span where it lies.
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
	return [2]int{n.align[i][0], n.align[j-1][1]}
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

// grow makes room for size more bytes.
func (b *builder) grow(size int) {
	b.sb.Grow(size)
	b.align = slices.Grow(b.align, size)
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
		b.add(f(r), n.align[i])
	}
	return b.done()
}

// prepend puts s in front of n, coming from n's first character; an empty n stays empty.
func (n normString) prepend(s string) normString {
	if n.s == "" {
		return n
	}
	var b builder
	b.add(s, n.align[0])
	b.addFrom(n, 0, len(n.s))
	return b.done()
}

// replaceSpans replaces each non-empty span of n (sorted, not overlapping) by content, which
// comes from where the last character it replaces came from (as in Hugging Face tokenizers, which
// removes the span, then inserts content after it).
func (n normString) replaceSpans(spans [][2]int, content string) normString {
	if len(spans) == 0 {
		return n
	}
	var b builder
	b.grow(replacedLen(len(n.s), spans, content))
	prev := 0
	for _, sp := range spans {
		b.addFrom(n, prev, sp[0])
		b.add(content, n.align[sp[1]-1])
		prev = sp[1]
	}
	b.addFrom(n, prev, len(n.s))
	return b.done()
}

// unicodeNorm puts n in a Unicode normalization form. Segment by segment (a starter and the
// marks after it), an unchanged segment keeps its alignment; a changed one is aligned as Hugging
// Face tokenizers aligns it (see alignSegment).
func (n normString) unicodeNorm(form norm.Form) normString {
	if form.IsNormalString(n.s) {
		return n
	}
	var b builder
	for i := 0; i < len(n.s); {
		j := len(n.s)
		if k := form.NextBoundaryInString(n.s[i:], true); k > 0 {
			j = i + k
		}
		seg := n.s[i:j]
		if out := form.String(seg); out == seg {
			b.addFrom(n, i, j)
		} else if !n.alignSegment(&b, form, i, j, out) {
			b.add(out, n.span(i, j))
		}
		i = j
	}
	return b.done()
}

// alignSegment appends out, the normalization of n's bytes [i, j), to b, each character aligned
// as in Hugging Face tokenizers, which tags every output character as replacing the next input
// character (0), coming after it (+1) or replacing it and the k after it (−k): the decomposition
// of each input character is its first character replacing it, the others coming after;
// canonical reordering carries the tags along; a composition of c characters sums their tags
// less c − 1. A replacing character comes from the input character it replaces, one coming after
// from the character before it. It reports false, appending nothing, when out is not what this
// reconstruction gives (it then is the caller's to align out).
func (n normString) alignSegment(b *builder, form norm.Form, i, j int, out string) bool {
	type tagged struct {
		r   rune
		tag int
	}
	decomp := norm.NFD
	if form == norm.NFKC || form == norm.NFKD {
		decomp = norm.NFKD
	}
	var starts []int // the input characters, by byte offset
	var d []tagged
	for k, r := range n.s[i:j] {
		starts = append(starts, i+k)
		for m, dr := range []rune(decomp.String(string(r))) {
			d = append(d, tagged{dr, min(m, 1)})
		}
	}
	ccc := func(r rune) uint8 { return norm.NFD.PropertiesString(string(r)).CCC() }
	for k := 0; k < len(d); { // canonical reordering: a stable sort of each run of marks
		m := k
		for m < len(d) && ccc(d[m].r) != 0 {
			m++
		}
		if m > k {
			slices.SortStableFunc(d[k:m], func(a, b tagged) int { return int(ccc(a.r)) - int(ccc(b.r)) })
			k = m
		} else {
			k++
		}
	}
	if form == norm.NFC || form == norm.NFKC {
		// Canonical composition: a character joins the last starter when nothing between them
		// blocks it (a starter, or a mark of the same or a higher class).
		var c []tagged
		starter, last := -1, uint8(0) // the starter's index in c; the class of the last mark after it
		for _, x := range d {
			cc := ccc(x.r)
			if starter >= 0 && (starter == len(c)-1 || last != 0 && last < cc) {
				if r := []rune(norm.NFC.String(string(c[starter].r) + string(x.r))); len(r) == 1 {
					c[starter] = tagged{r[0], c[starter].tag + x.tag - 1}
					continue
				}
			}
			if cc == 0 {
				starter, last = len(c), 0
			} else {
				last = cc
			}
			c = append(c, x)
		}
		d = c
	}
	var got strings.Builder
	for _, t := range d {
		got.WriteRune(t.r)
	}
	if got.String() != out {
		return false
	}
	var nb builder
	q := 0 // the next input character
	for _, t := range d {
		var a [2]int
		if t.tag > 0 {
			prev := j
			if q < len(starts) {
				prev = starts[q]
			}
			if prev > 0 {
				a = n.align[prev-1]
			}
		} else {
			if q >= len(starts) {
				return false
			}
			a = n.align[starts[q]]
			q += 1 - t.tag
		}
		nb.add(string(t.r), a)
	}
	if q != len(starts) {
		return false
	}
	b.sb.WriteString(nb.sb.String())
	b.align = append(b.align, nb.align...)
	return true
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
