package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// fileJSON is the part of tokenizer.json that encoding and decoding need; truncation and padding
// are not read.
type fileJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

// compJSON holds the fields of every normalizer, pre-tokenizer, post-processor and decoder that
// package tokenizer reads; Type says which it is.
type compJSON struct {
	Type string `json:"type"`

	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	Prepend string       `json:"prepend"`
	Pattern *patternJSON `json:"pattern"`
	Content string       `json:"content"`

	CleanText          *bool `json:"clean_text"`
	HandleChineseChars *bool `json:"handle_chinese_chars"`
	StripAccents       *bool `json:"strip_accents"`
	Lowercase          *bool `json:"lowercase"`
	StripLeft          bool  `json:"strip_left"`
	StripRight         bool  `json:"strip_right"`

	AddPrefixSpace   *bool  `json:"add_prefix_space"`
	TrimOffsets      *bool  `json:"trim_offsets"`
	UseRegex         *bool  `json:"use_regex"`
	Behavior         string `json:"behavior"`
	Invert           bool   `json:"invert"`
	Replacement      string `json:"replacement"`
	PrependScheme    string `json:"prepend_scheme"`
	Split            *bool  `json:"split"`
	IndividualDigits bool   `json:"individual_digits"`

	Single        []json.RawMessage           `json:"single"`
	SpecialTokens map[string]specialTokenJSON `json:"special_tokens"`
	Sep           json.RawMessage             `json:"sep"`
	Cls           json.RawMessage             `json:"cls"`

	Prefix  *string `json:"prefix"`
	Cleanup *bool   `json:"cleanup"`
	Start   int     `json:"start"`
	Stop    int     `json:"stop"`
	Suffix  *string `json:"suffix"`
}

// patternJSON is a Split or Replace pattern: {"String": "..."} or {"Regex": "..."}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type specialTokenJSON struct {
	IDs    []int    `json:"ids"`
	Tokens []string `json:"tokens"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	MaxInputCharsPerWord    *int            `json:"max_input_chars_per_word"`
	UnkID                   *int            `json:"unk_id"`
}

// isNull says whether a JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// decodeComp reads a component; what is its kind ("normalizer", …) for errors.
func decodeComp(raw json.RawMessage, what string) (*compJSON, error) {
	var c compJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: expected an object with a \"type\", got %s: %w", what, excerpt(raw), err)
	}
	return &c, nil
}

// excerpt is the start of a JSON value, for errors.
func excerpt(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	if s == "" {
		s = "nothing"
	}
	return s
}

func unknownType(what, typ, known string) error {
	if typ == "" {
		return fmt.Errorf("%s: no \"type\" (expected one of %s)", what, known)
	}
	return fmt.Errorf("%s: type %q is not supported (supported: %s)", what, typ, known)
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// buildSteps reads a normalizer, pre-tokenizer or decoder (what) of a tokenizer.json: nil for
// none, one step (built by step), or a Sequence's steps flattened in order, not nil even when
// there are none (list gives a Sequence's components, which a path in errors names field).
func buildSteps[S any](raw json.RawMessage, what, field string, list func(*compJSON) []json.RawMessage, step func(*compJSON) (S, error)) ([]S, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := decodeComp(raw, what)
	if err != nil {
		return nil, err
	}
	if c.Type != "Sequence" {
		s, err := step(c)
		if err != nil {
			return nil, err
		}
		return []S{s}, nil
	}
	seq := []S{}
	for i, r := range list(c) {
		s, err := buildSteps(r, what, field, list, step)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		seq = append(seq, s...)
	}
	return seq, nil
}

// buildNormalizer reads the normalizer: its steps, in order, nil for none.
func buildNormalizer(raw json.RawMessage) (normalizers, error) {
	return buildSteps(raw, "normalizer", "normalizers", func(c *compJSON) []json.RawMessage { return c.Normalizers }, buildNormalizerStep)
}

// buildNormalizerStep reads a normalizer other than a Sequence.
func buildNormalizerStep(c *compJSON) (normalizer, error) {
	switch c.Type {
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "ByteLevel":
		return byteLevelNorm{}, nil
	case "StripAccents":
		return stripAccents{}, nil
	case "Strip":
		return strip{c.StripLeft, c.StripRight}, nil
	case "Prepend":
		return prependNorm{c.Prepend}, nil
	case "Replace":
		f, err := buildFind(c.Pattern, "Replace")
		if err != nil {
			return nil, fmt.Errorf("normalizer: %w", err)
		}
		f.content = c.Content
		return f, nil
	case "BertNormalizer":
		lower := boolOr(c.Lowercase, true)
		return bertNormalizer{
			cleanText:    boolOr(c.CleanText, true),
			chinese:      boolOr(c.HandleChineseChars, true),
			stripAccents: boolOr(c.StripAccents, lower),
			lowercase:    lower,
		}, nil
	}
	return nil, unknownType("normalizer", c.Type, "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, BertNormalizer, ByteLevel")
}

// buildFind reads a Split or Replace pattern.
func buildFind(p *patternJSON, what string) (replaceNorm, error) {
	switch {
	case p == nil || p.String == nil && p.Regex == nil:
		return replaceNorm{}, fmt.Errorf("%s: expected a pattern {\"String\": …} or {\"Regex\": …}, got none", what)
	case p.Regex != nil:
		re, err := compilePattern(*p.Regex)
		if err != nil {
			return replaceNorm{}, fmt.Errorf("%s: %w", what, err)
		}
		return replaceNorm{re: re}, nil
	}
	return replaceNorm{literal: *p.String}, nil
}

func buildBehavior(s string) (behavior, error) {
	switch s {
	case "Removed":
		return removed, nil
	case "Isolated", "":
		return isolated, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("behavior %q is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", s)
}

// buildPreTokenizer reads the pre-tokenizer: its steps, in order, nil for none.
func buildPreTokenizer(raw json.RawMessage) (preTokenizers, error) {
	return buildSteps(raw, "pre_tokenizer", "pretokenizers", func(c *compJSON) []json.RawMessage { return c.Pretokenizers }, buildPreTokenizerStep)
}

// buildPreTokenizerStep reads a pre-tokenizer other than a Sequence.
func buildPreTokenizerStep(c *compJSON) (preTokenizer, error) {
	switch c.Type {
	case "ByteLevel":
		p := byteLevelPre{addPrefixSpace: boolOr(c.AddPrefixSpace, true)}
		if boolOr(c.UseRegex, true) {
			re, err := compilePattern(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			p.re = re
		}
		return p, nil
	case "Split":
		f, err := buildFind(c.Pattern, "pre_tokenizer Split")
		if err != nil {
			return nil, err
		}
		b, err := buildBehavior(c.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		return splitPre{find: f, behavior: b, invert: c.Invert}, nil
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "▁"
		}
		scheme, err := buildPrependScheme(c)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		return metaspacePre{replacement: rep, scheme: scheme, split: boolOr(c.Split, true)}, nil
	case "BertPreTokenizer":
		return bertPre{}, nil
	case "Whitespace":
		re, err := compilePattern(`\w+|[^\w\s]+`)
		if err != nil {
			return nil, err
		}
		return regexWordsPre{re}, nil
	case "WhitespaceSplit":
		return whitespaceSplitPre{}, nil
	case "Digits":
		b := contiguous
		if c.IndividualDigits {
			b = isolated
		}
		return runeClassPre{is: isNumeric, behavior: b}, nil
	case "Punctuation":
		b, err := buildBehavior(c.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		return runeClassPre{is: isPunct, behavior: b}, nil
	}
	return nil, unknownType("pre_tokenizer", c.Type, "Sequence, ByteLevel, Split, Metaspace, BertPreTokenizer, Whitespace, WhitespaceSplit, Digits, Punctuation")
}

// buildPrependScheme reads Metaspace's prepend_scheme, or the older add_prefix_space.
func buildPrependScheme(c *compJSON) (prependScheme, error) {
	switch c.PrependScheme {
	case "always":
		return prependAlways, nil
	case "first":
		return prependFirst, nil
	case "never":
		return prependNever, nil
	case "":
		if boolOr(c.AddPrefixSpace, true) {
			return prependAlways, nil
		}
		return prependNever, nil
	}
	return 0, fmt.Errorf("prepend_scheme %q is not one of always, first, never", c.PrependScheme)
}

// buildPostProcessor reads the post-processor; the ids of its special tokens must be in tokens.
func buildPostProcessor(raw json.RawMessage, tokens map[int]string) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := decodeComp(raw, "post_processor")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq postProcessors
		for i, r := range c.Processors {
			p, err := buildPostProcessor(r, tokens)
			if err != nil {
				return nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "ByteLevel":
		return &byteLevelOffsets{trim: boolOr(c.TrimOffsets, true), addPrefixSpace: boolOr(c.AddPrefixSpace, true)}, nil
	case "TemplateProcessing":
		return buildTemplate(c, tokens)
	case "BertProcessing", "RobertaProcessing":
		cls, err := tokenPair(c.Cls, "cls", tokens)
		if err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", c.Type, err)
		}
		sep, err := tokenPair(c.Sep, "sep", tokens)
		if err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", c.Type, err)
		}
		t := template{before: []token{cls}, after: []token{sep}}
		if c.Type == "RobertaProcessing" && boolOr(c.TrimOffsets, true) {
			t.trim = &byteLevelOffsets{trim: true, addPrefixSpace: boolOr(c.AddPrefixSpace, true)}
		}
		return t, nil
	}
	return nil, unknownType("post_processor", c.Type, "Sequence, ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing")
}

// tokenPair reads BertProcessing's ["[CLS]", 101].
func tokenPair(raw json.RawMessage, name string, tokens map[int]string) (token, error) {
	var pair []json.RawMessage
	var tok string
	var id int
	if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 || json.Unmarshal(pair[0], &tok) != nil || json.Unmarshal(pair[1], &id) != nil {
		return token{}, fmt.Errorf("%s: expected [token, id], got %s", name, excerpt(raw))
	}
	if _, ok := tokens[id]; !ok {
		return token{}, fmt.Errorf("%s: expected an id of the vocabulary, got %d", name, id)
	}
	return token{id: id, value: tok, special: true}, nil
}

// buildTemplate reads TemplateProcessing's single-sequence template.
func buildTemplate(c *compJSON, tokens map[int]string) (postProcessor, error) {
	var t template
	seen := false
	for i, raw := range c.Single {
		var item struct {
			SpecialToken *struct {
				ID string `json:"id"`
			}
			Sequence *struct {
				ID string `json:"id"`
			}
		}
		if err := json.Unmarshal(raw, &item); err != nil || (item.SpecialToken == nil) == (item.Sequence == nil) {
			return nil, fmt.Errorf("post_processor TemplateProcessing: single[%d]: expected {\"SpecialToken\": …} or {\"Sequence\": …}, got %s", i, excerpt(raw))
		}
		if item.Sequence != nil {
			if seen || item.Sequence.ID != "A" {
				return nil, fmt.Errorf("post_processor TemplateProcessing: single[%d]: expected one sequence, $A, got %q", i, "$"+item.Sequence.ID)
			}
			seen = true
			continue
		}
		sp, ok := c.SpecialTokens[item.SpecialToken.ID]
		if !ok || len(sp.IDs) != len(sp.Tokens) {
			return nil, fmt.Errorf("post_processor TemplateProcessing: single[%d]: special token %q: expected an entry in special_tokens with as many ids as tokens", i, item.SpecialToken.ID)
		}
		for k, id := range sp.IDs {
			if _, ok := tokens[id]; !ok {
				return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q: expected ids of the vocabulary, got %d", item.SpecialToken.ID, id)
			}
			tok := token{id: id, value: sp.Tokens[k], special: true}
			if seen {
				t.after = append(t.after, tok)
			} else {
				t.before = append(t.before, tok)
			}
		}
	}
	if !seen {
		return nil, errors.New("post_processor TemplateProcessing: single: expected the sequence $A in the template, got none")
	}
	return t, nil
}

// buildDecoder reads the decoder: its steps, in order; nil for none, and not nil for a Sequence,
// even an empty one (with a decoder, Decode joins the tokens with nothing between them, and
// without one with spaces).
func buildDecoder(raw json.RawMessage) (decoders, error) {
	return buildSteps(raw, "decoder", "decoders", func(c *compJSON) []json.RawMessage { return c.Decoders }, buildDecoderStep)
}

// buildDecoderStep reads a decoder other than a Sequence.
func buildDecoderStep(c *compJSON) (decoder, error) {
	switch c.Type {
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "Replace":
		f, err := buildFind(c.Pattern, "decoder Replace")
		if err != nil {
			return nil, err
		}
		f.content = c.Content
		return replaceDec{f}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		return stripDec{content: c.Content, start: c.Start, stop: c.Stop}, nil
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "▁"
		}
		scheme, err := buildPrependScheme(c)
		if err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		return metaspaceDec{replacement: rep, dropFirst: scheme != prependNever}, nil
	case "WordPiece":
		prefix := "##"
		if c.Prefix != nil {
			prefix = *c.Prefix
		}
		return wordPieceDec{prefix: prefix, cleanup: boolOr(c.Cleanup, true)}, nil
	case "BPEDecoder":
		suffix := "</w>"
		if c.Suffix != nil {
			suffix = *c.Suffix
		}
		return bpeDec{suffix}, nil
	}
	return nil, unknownType("decoder", c.Type, "Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece, BPEDecoder")
}

// buildModel reads the model and its vocabulary.
func buildModel(raw json.RawMessage) (model, map[string]int, error) {
	if isNull(raw) {
		return nil, nil, errors.New("model: expected an object, got none")
	}
	var m modelJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("model: expected an object with a \"type\" and a \"vocab\", got %s: %w", excerpt(raw), err)
	}
	typ := m.Type
	if typ == "" && !isNull(m.Merges) {
		typ = "BPE" // files older than the "type" field
	} else if typ == "" && m.MaxInputCharsPerWord != nil {
		typ = "WordPiece"
	}
	if typ == "Unigram" {
		return buildUnigram(m)
	}
	if typ != "BPE" && typ != "WordPiece" && typ != "WordLevel" {
		return nil, nil, unknownType("model", typ, "BPE, WordPiece, WordLevel, Unigram")
	}
	vocab := map[string]int{}
	if err := json.Unmarshal(m.Vocab, &vocab); err != nil {
		return nil, nil, fmt.Errorf("model %s: vocab: expected an object of token: id, got %s", typ, excerpt(m.Vocab))
	}
	for tok, id := range vocab {
		if id < 0 {
			return nil, nil, fmt.Errorf("model %s: vocab: expected ids ≥ 0, got %q: %d", typ, tok, id)
		}
		if id > math.MaxUint32 { // Hugging Face's ids are u32
			return nil, nil, fmt.Errorf("model %s: vocab: expected ids below 2³², got %q: %d", typ, tok, id)
		}
	}
	if typ == "WordLevel" {
		wl := &wordLevel{vocab: vocab, unk: "<unk>"}
		if m.UnkToken != nil {
			wl.unk = *m.UnkToken
		}
		return wl, vocab, nil
	}
	if typ == "WordPiece" {
		wp := &wordPiece{vocab: vocab, unk: "[UNK]", prefix: "##", maxChars: 100}
		if m.UnkToken != nil {
			wp.unk = *m.UnkToken
		}
		if m.ContinuingSubwordPrefix != nil {
			wp.prefix = *m.ContinuingSubwordPrefix
		}
		if m.MaxInputCharsPerWord != nil {
			wp.maxChars = *m.MaxInputCharsPerWord
		}
		wp.index = newVocabIndex(vocab)
		wp.cont = wp.index.root()
		for i := range len(wp.prefix) {
			wp.cont = wp.index.next(wp.cont, wp.prefix[i])
		}
		return wp, vocab, nil
	}
	b := &bpe{vocab: vocab, unk: -1, fuseUnk: m.FuseUnk, byteFallback: m.ByteFallback, ignoreMerges: m.IgnoreMerges}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	if m.UnkToken != nil {
		// A file may name an unknown token its vocabulary lacks: Hugging Face tokenizers opens
		// it and fails only on a character that needs it, and so does this package.
		if id, ok := vocab[*m.UnkToken]; ok {
			b.unk = id
		} else {
			b.missingUnk = *m.UnkToken
		}
	}
	for i := range b.byteIDs {
		id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]
		if !ok {
			id = -1
		}
		b.byteIDs[i] = id
	}
	merges, err := readMerges(m.Merges)
	if err != nil {
		return nil, nil, err
	}
	b.merges = make(map[[2]int]merge, len(merges))
	for rank, pair := range merges {
		l, okl := vocab[pair[0]]
		r, okr := vocab[pair[1]]
		id, okm := vocab[pair[0]+strings.TrimPrefix(pair[1], b.prefix)]
		if !okl || !okr || !okm {
			return nil, nil, fmt.Errorf("model BPE: merges[%d] %q: expected both tokens and their merge in the vocabulary, got one that is not", rank, pair[0]+" "+pair[1])
		}
		b.merges[[2]int{l, r}] = merge{rank: rank, id: id} // a pair given twice takes its last rank, as in Hugging Face's map
	}
	return b, vocab, nil
}

// readMerges reads BPE merges, written either as "a b" strings or as ["a", "b"] pairs.
func readMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			parts := strings.Split(s, " ")
			if len(parts) != 2 {
				return nil, fmt.Errorf("model BPE: merges[%d]: expected two tokens with one space between, got %q", i, s)
			}
			out[i] = [2]string{parts[0], parts[1]}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("model BPE: merges: expected a list of \"a b\" strings or of [\"a\", \"b\"] pairs, got %s", excerpt(raw))
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("model BPE: merges[%d]: expected a pair of tokens, got %d", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// buildUnigram reads a Unigram model: its vocabulary is a list of [piece, score].
func buildUnigram(m modelJSON) (model, map[string]int, error) {
	var entries [][]json.RawMessage
	if err := json.Unmarshal(m.Vocab, &entries); err != nil {
		return nil, nil, fmt.Errorf("model Unigram: vocab: expected a list of [piece, score], got %s", excerpt(m.Vocab))
	}
	u := &unigram{vocab: make(map[string]int, len(entries)), pieces: make([]string, len(entries)), scores: make([]float64, len(entries)), unk: -1, byteFallback: m.ByteFallback}
	minScore := math.Inf(1)
	for id, e := range entries {
		var piece string
		if len(e) != 2 || json.Unmarshal(e[0], &piece) != nil || json.Unmarshal(e[1], &u.scores[id]) != nil {
			return nil, nil, fmt.Errorf("model Unigram: vocab[%d]: expected [piece, score], got %d values", id, len(e))
		}
		u.vocab[piece], u.pieces[id] = id, piece // a piece given twice is its last id, as in Hugging Face's map
		minScore = min(minScore, u.scores[id])
	}
	if m.UnkID != nil {
		if *m.UnkID < 0 || *m.UnkID >= len(entries) {
			return nil, nil, fmt.Errorf("model Unigram: unk_id: expected an id of the vocabulary (0 to %d), got %d", len(entries)-1, *m.UnkID)
		}
		u.unk = *m.UnkID
	}
	u.unkScore = minScore - 10
	u.index = newVocabIndex(u.vocab)
	vocab := maps.Clone(u.vocab)
	return u, vocab, nil
}
