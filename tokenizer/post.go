package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// token is a token of an encoding on its way out.
type token struct {
	id      int
	value   string
	offsets [2]int
	special bool // added by the post-processor
}

// postProcessor adds the special tokens of a single sequence (when addSpecial) and may adjust
// the offsets.
type postProcessor interface {
	process(toks []token, addSpecial bool) []token
}

// postProcessors is a Sequence post-processor: each in turn.
type postProcessors []postProcessor

func (s postProcessors) process(toks []token, addSpecial bool) []token {
	for _, p := range s {
		toks = p.process(toks, addSpecial)
	}
	return toks
}

// template is TemplateProcessing's single-sequence template (and BertProcessing's and
// RobertaProcessing's [CLS] $A [SEP]): the tokens before and after the sequence.
type template struct {
	before, after []token
	trim          *byteLevelOffsets // RobertaProcessing's trim_offsets
}

func (t template) process(toks []token, addSpecial bool) []token {
	if t.trim != nil {
		toks = t.trim.process(toks, addSpecial)
	}
	if !addSpecial {
		return toks
	}
	out := make([]token, 0, len(t.before)+len(toks)+len(t.after))
	out = append(out, t.before...)
	out = append(out, toks...)
	return append(out, t.after...)
}

// byteLevelOffsets is the ByteLevel post-processor: with trim, the offsets of a token leave out
// the spaces ('Ġ' and whitespace) at its ends.
type byteLevelOffsets struct {
	trim, addPrefixSpace bool
}

func (b *byteLevelOffsets) process(toks []token, _ bool) []token {
	if !b.trim {
		return toks
	}
	isSpace := func(r rune) bool { return r == 'Ġ' || isWhiteSpace(r) }
	for i := range toks {
		t := &toks[i]
		lead := utf8.RuneCountInString(t.value) - utf8.RuneCountInString(strings.TrimLeftFunc(t.value, isSpace))
		trail := utf8.RuneCountInString(t.value) - utf8.RuneCountInString(strings.TrimRightFunc(t.value, isSpace))
		if lead > 0 {
			if (i == 0 || t.offsets[0] == 0) && b.addPrefixSpace && lead == 1 {
				lead = 0 // the space the pre-tokenizer put there
			}
			t.offsets[0] = min(t.offsets[0]+lead, t.offsets[1])
		}
		if trail > 0 && t.offsets[1] >= trail {
			t.offsets[1] = max(t.offsets[1]-trail, t.offsets[0])
		}
	}
	return toks
}
