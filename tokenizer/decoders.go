package tokenizer

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns tokens back into text pieces, which Decode joins.
type decoder interface {
	decode(toks []string) []string
}

// decoders are the decoder of a tokenizer: a Sequence's steps (nested Sequences flattened), or
// the one decoder.
type decoders []decoder

// decode applies each decoder in turn and returns the tokens and their size in bytes. It stops,
// reporting false, as soon as a step would leave more than limit bytes in all (see
// growthBound): the size is then what that step made, or what a bounded step would make, since
// it does not make it.
func (s decoders) decode(toks []string, limit int) ([]string, int, bool) {
	for _, d := range s {
		if b, ok := d.(boundedDecoder); ok {
			var size int
			if toks, size, ok = b.within(toks, limit); !ok {
				return toks, size, false
			}
			continue
		}
		if toks = d.decode(toks); textLen(toks) > limit {
			return toks, textLen(toks), false
		}
	}
	return toks, textLen(toks), true
}

// boundedDecoder is a decoder that sizes its tokens before it makes them, as a
// boundedNormalizer does its text (Replace).
type boundedDecoder interface {
	within(toks []string, limit int) ([]string, int, bool)
}

// textLen is the bytes of all the strings.
func textLen(toks []string) int {
	n := 0
	for _, t := range toks {
		n += len(t)
	}
	return n
}

// byteLevelDec is the ByteLevel decoder: the byte characters of all tokens back into bytes
// (byteLevelDecode), read as UTF-8 (bad bytes become U+FFFD).
type byteLevelDec struct{}

func (byteLevelDec) decode(toks []string) []string {
	var b []byte
	for _, t := range toks {
		b = append(b, byteLevelDecode(t)...)
	}
	return []string{lossyUTF8(b)}
}

// replaceDec is the Replace decoder: a string replaced in every token.
type replaceDec struct{ find replaceNorm }

func (r replaceDec) decode(toks []string) []string {
	toks, _, _ = r.within(toks, math.MaxInt)
	return toks
}

func (r replaceDec) within(toks []string, limit int) ([]string, int, bool) {
	spans, size := make([][][2]int, len(toks)), 0
	for i, t := range toks {
		spans[i] = r.find.find(t)
		size += replacedLen(len(t), spans[i], r.find.content)
	}
	if size > limit {
		return toks, size, false
	}
	out := make([]string, len(toks))
	for i, t := range toks {
		var b strings.Builder
		b.Grow(replacedLen(len(t), spans[i], r.find.content))
		prev := 0
		for _, sp := range spans[i] {
			b.WriteString(t[prev:sp[0]])
			b.WriteString(r.find.content)
			prev = sp[1]
		}
		b.WriteString(t[prev:])
		out[i] = b.String()
	}
	return out, size, true
}

// byteFallbackDec is the ByteFallback decoder: runs of byte tokens <0xXX> become the text of
// their bytes, or one U+FFFD per byte when those are not UTF-8.
type byteFallbackDec struct{}

func (byteFallbackDec) decode(toks []string) []string {
	var out []string
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if s := string(pending); utf8.ValidString(s) {
			out = append(out, s)
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range toks {
		if b, ok := byteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken reads a byte token, <0xXX>.
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(v), err == nil
}

// fuseDec is the Fuse decoder: all tokens as one.
type fuseDec struct{}

func (fuseDec) decode(toks []string) []string { return []string{strings.Join(toks, "")} }

// stripDec is the Strip decoder: up to start copies of content removed from the front of every
// token and up to stop from its end.
type stripDec struct {
	content     string
	start, stop int
}

func (s stripDec) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		for k := 0; k < s.start && s.content != "" && strings.HasPrefix(t, s.content); k++ {
			t = t[len(s.content):]
		}
		for k := 0; k < s.stop && s.content != "" && strings.HasSuffix(t, s.content); k++ {
			t = t[:len(t)-len(s.content)]
		}
		out[i] = t
	}
	return out
}

// metaspaceDec is the Metaspace decoder: the replacement back into spaces, except in the first
// token, where Hugging Face tokenizers drops it (unless the prepend scheme is never).
type metaspaceDec struct {
	replacement string
	dropFirst   bool
}

func (m metaspaceDec) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		rep := " "
		if i == 0 && m.dropFirst {
			rep = ""
		}
		out[i] = strings.ReplaceAll(t, m.replacement, rep)
	}
	return out
}

// wordPieceDec is the WordPiece decoder: continuing pieces lose their prefix, the others get a
// space in front, and with cleanup the spaces before punctuation and contractions go.
type wordPieceDec struct {
	prefix  string
	cleanup bool
}

func (w wordPieceDec) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		if i > 0 {
			if strings.HasPrefix(t, w.prefix) {
				t = strings.Replace(t, w.prefix, "", 1)
			} else {
				t = " " + t
			}
		}
		if w.cleanup {
			t = cleanup(t)
		}
		out[i] = t
	}
	return out
}

// bpeDec is the BPEDecoder: the end-of-word suffix becomes a space, and the last token's goes.
type bpeDec struct{ suffix string }

func (b bpeDec) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		rep := " "
		if i == len(toks)-1 {
			rep = ""
		}
		out[i] = strings.ReplaceAll(t, b.suffix, rep)
	}
	return out
}

// cleanupPairs is Hugging Face's clean_up_tokenization: no space before punctuation and
// English contractions.
var cleanupPairs = []string{
	" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'", " n't", "n't", " 'm", "'m",
	" do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re",
}

// cleanup applies the replacements one after the other, as Hugging Face does.
func cleanup(s string) string {
	for i := 0; i < len(cleanupPairs); i += 2 {
		s = strings.ReplaceAll(s, cleanupPairs[i], cleanupPairs[i+1])
	}
	return s
}
