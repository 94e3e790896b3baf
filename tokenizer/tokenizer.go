// Package tokenizer reads Hugging Face tokenizer.json files (the serialization of the tokenizers
// library) and encodes and decodes text as Hugging Face tokenizers does, in pure Go.
//
// It covers the three kinds of tokenizer that most models use:
//
//   - byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM): the ByteLevel pre-tokenizer with GPT-2's
//     regex, or a Split pre-tokenizer with the file's own regex (Llama-3's and Qwen2's, lookahead
//     included), GPT-2's byte-to-character map, merges by rank and ignore_merges;
//   - SentencePiece-style BPE (Llama-2, TinyLlama, Mistral): the "▁" metaspace, from a
//     Prepend+Replace normalizer or a Metaspace pre-tokenizer, byte_fallback to <0xXX> tokens and
//     fuse_unk, with the Replace, ByteFallback, Fuse, Strip and Metaspace decoders;
//   - WordPiece (BERT): BertNormalizer, BertPreTokenizer, "##" continuing pieces and [UNK].
//
// It also reads the Unigram model (SentencePiece's, as in T5, with byte fallback) and the
// WordLevel model (a word is its vocabulary entry, or the unknown token).
//
// Added and special tokens are found in the text before the model sees it (respecting
// single_word, lstrip, rstrip and normalized), and the post-processor (TemplateProcessing,
// BertProcessing, RobertaProcessing, ByteLevel) adds BOS, CLS and SEP.
//
// Where tokenizers.js and the Rust library differ, package tokenizer does as the Rust library
// does. Not supported, each an error naming the type: the Precompiled normalizer (of converted
// SentencePiece models such as T5's and ALBERT's), the UnicodeScripts pre-tokenizer, the CTC
// decoder; regex patterns with lookbehind, or a lookahead anywhere but at the end of a top-level
// alternative. BPE dropout, truncation and padding are not read, and only single sequences are
// encoded (not pairs). A Replace normalizer's or Split pre-tokenizer's regex that matches the
// empty string (such as "^" or "a*") replaces and cuts only at its non-empty matches, where
// Hugging Face also inserts or cuts at the empty ones.
//
// The tests compare ids, tokens, offsets and decoded text with Hugging Face tokenizers (the Rust
// library) and with tokenizers.js on the GPT-2, Llama-2, Mistral-7B, Llama-3 and
// bert-base-uncased vocabularies and variants of them (testdata/tokenizer).
package tokenizer

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes text into token ids and decodes ids back into text, as the tokenizer.json it
// was read from says. It is safe for concurrent use.
type Tokenizer struct {
	normalizer normalizers
	pre        preTokenizers
	model      model
	post       postProcessor // nil: none
	decoder    decoders      // nil: none, tokens joined by spaces
	rawAdded   addedMatcher  // added tokens matched in the text as given
	normAdded  addedMatcher  // added tokens matched in the normalized text
	vocab      map[string]int
	tokens     map[int]string
	special    map[string]bool // the contents of the special added tokens
}

// Encoding is the result of Tokenizer.Encode: the tokens of a text, in order.
type Encoding struct {
	// IDs are the tokens' ids.
	IDs []int
	// Tokens are the tokens as the vocabulary spells them (byte-level tokenizers spell a space
	// 'Ġ', SentencePiece ones '▁'); an added token found in the text is the text it covers, as in
	// Hugging Face tokenizers (with the whitespace its lstrip or rstrip took).
	Tokens []string
	// Offsets are, for each token, the byte offsets [start, end) in the text of the part it
	// covers, as Hugging Face tokenizers gives them. Byte offsets, not rune offsets:
	// text[start:end] is that part. A token that holds only some bytes of a character covers the
	// whole character, and a special token that the post-processor added covers [0, 0). (The
	// trim_offsets of the ByteLevel and RoBERTa post-processors, which takes the spaces at a
	// token's ends off its offsets, counts each as one byte, and so can end a token's offsets
	// inside a character, as Hugging Face tokenizers does.)
	Offsets [][2]int
}

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// LoadDir reads the tokenizer of a model folder: DIR/tokenizer.json, and DIR/tokenizer_config.json
// where it matters: for the Llama and Gemma tokenizer classes (as transformers' tokenizers of
// those classes do), add_bos_token and add_eos_token (true and false when not given) say whether
// encoding with special tokens puts bos_token in front and eos_token at the end. The class is
// tokenizer_config.json's tokenizer_class or, where it names none, the one transformers'
// AutoTokenizer takes from DIR/config.json: its tokenizer_class, else its model_type's tokenizer.
func LoadDir(dir string) (*Tokenizer, error) {
	if fi, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: expected a model folder, got %s, which does not exist", dir)
	} else if err != nil {
		return nil, fmt.Errorf("tokenizer: expected a model folder, got %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("tokenizer: expected a model folder, got the file %s", dir)
	}
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: expected the model folder %s to hold tokenizer.json, got a folder without it", dir)
	}
	t, err := Load(path)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := t.applyConfig(data, func() string { return modelClass(dir) }); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	return t, nil
}

// modelTypeClasses are the tokenizer classes transformers' AutoTokenizer maps these model_types
// of config.json to (TOKENIZER_MAPPING_NAMES), for the classes in bosEOSClasses.
var modelTypeClasses = map[string]string{
	"llama": "LlamaTokenizerFast", "mistral": "LlamaTokenizerFast", "mixtral": "LlamaTokenizerFast",
	"code_llama": "CodeLlamaTokenizerFast", "gemma": "GemmaTokenizerFast", "gemma2": "GemmaTokenizerFast",
	"gemma3": "GemmaTokenizerFast", "gemma3_text": "GemmaTokenizerFast",
	"phi3": "LlamaTokenizerFast", "phimoe": "LlamaTokenizerFast",
}

// modelClass returns the tokenizer class that the model folder dir's config.json implies: its
// tokenizer_class, or the one of its model_type; "" when it has neither, or no config.json that
// reads (the model's loader reports a bad one).
func modelClass(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct {
		Class     string `json:"tokenizer_class"`
		ModelType string `json:"model_type"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return ""
	}
	return cmp.Or(cfg.Class, modelTypeClasses[cfg.ModelType])
}

// bosEOSClasses are the tokenizer classes of transformers whose add_bos_token and add_eos_token
// rebuild the post-processor (update_post_processor).
var bosEOSClasses = map[string]bool{
	"LlamaTokenizer": true, "LlamaTokenizerFast": true, "CodeLlamaTokenizer": true,
	"CodeLlamaTokenizerFast": true, "GemmaTokenizer": true, "GemmaTokenizerFast": true,
}

// applyConfig makes the single-sequence template [bos] $A [eos] as tokenizer_config.json's
// add_bos_token and add_eos_token say, for the classes of bosEOSClasses when it says either. The
// class is the config's tokenizer_class, or fallback's when it names none.
func (t *Tokenizer) applyConfig(data []byte, fallback func() string) error {
	var cfg struct {
		Class  string          `json:"tokenizer_class"`
		AddBOS *bool           `json:"add_bos_token"`
		AddEOS *bool           `json:"add_eos_token"`
		BOS    json.RawMessage `json:"bos_token"`
		EOS    json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("expected a JSON object, got %w", err)
	}
	if cfg.AddBOS == nil && cfg.AddEOS == nil {
		return nil
	}
	if cfg.Class == "" {
		cfg.Class = fallback()
	}
	if !bosEOSClasses[cfg.Class] {
		return nil
	}
	yes, no := true, false
	if cfg.AddBOS == nil {
		cfg.AddBOS = &yes
	}
	if cfg.AddEOS == nil {
		cfg.AddEOS = &no
	}
	var tmpl template
	for _, s := range []struct {
		add  *bool
		raw  json.RawMessage
		name string
		to   *[]token
	}{{cfg.AddBOS, cfg.BOS, "bos_token", &tmpl.before}, {cfg.AddEOS, cfg.EOS, "eos_token", &tmpl.after}} {
		if s.add == nil || !*s.add {
			continue
		}
		content, err := tokenContent(s.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		id, ok := t.vocab[content]
		if !ok {
			return fmt.Errorf("%s: expected a token of the vocabulary, got %q", s.name, content)
		}
		*s.to = []token{{id: id, value: content, special: true}}
	}
	switch p := t.post.(type) {
	case nil, template:
		t.post = tmpl
	case postProcessors:
		seq := make(postProcessors, 0, len(p)+1)
		for _, x := range p {
			if _, ok := x.(template); !ok {
				seq = append(seq, x)
			}
		}
		t.post = append(seq, tmpl)
	default:
		t.post = postProcessors{p, tmpl}
	}
	return nil
}

// tokenContent reads a special token of tokenizer_config.json: a string or {"content": …}.
func tokenContent(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, nil
	}
	return "", fmt.Errorf("expected a string or {\"content\": …}, got %s", excerpt(raw))
}

// maxNesting is how deeply the arrays and objects of a tokenizer.json may nest, counting the
// file's own object: the most that Hugging Face tokenizers reads (serde_json's recursion limit
// refuses a 128th level). It also bounds the Sequences' parsing, each level of which decodes the
// levels below it again, to about 63 passes over the file.
const maxNesting = 127

// checkNesting returns an error when the arrays and objects of the JSON text data nest more than
// maxNesting levels deep. It reads no further than that: invalid JSON is left to json.Unmarshal.
func checkNesting(data []byte) error {
	depth, inString := 0, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxNesting {
				return fmt.Errorf("expected arrays and objects nested at most %d levels deep, as Hugging Face tokenizers reads them, got a %dth level at byte %d", maxNesting, depth, i)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// Parse reads the contents of a tokenizer.json file. A model, normalizer, pre-tokenizer,
// post-processor or decoder of a type it does not know is an error that names the type; so is a
// file nested deeper than Hugging Face tokenizers reads (maxNesting levels).
func Parse(data []byte) (*Tokenizer, error) {
	if err := checkNesting(data); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: expected tokenizer.json, a JSON object, got %s: %w", excerpt(data), err)
	}
	t := &Tokenizer{tokens: map[int]string{}, special: map[string]bool{}}
	var err error
	if t.model, t.vocab, err = buildModel(f.Model); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t.vocab = maps.Clone(t.vocab) // the model's stays without the added tokens, as in Hugging Face tokenizers
	for tok, id := range t.vocab {
		t.tokens[id] = tok
	}
	size := len(t.vocab) // the model's vocabulary size, which the added tokens' ids follow
	if u, ok := t.model.(*unigram); ok {
		// A Unigram vocabulary is a list: each entry has its id, a piece given twice too.
		for id, p := range u.pieces {
			t.tokens[id] = p
		}
		size = len(u.pieces)
	}
	if t.normalizer, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.pre, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.decoder, err = buildDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	// The added tokens get the ids Hugging Face tokenizers gives them, whatever the file says
	// (it only warns): the model's id of their content, or else the next id after the model's
	// vocabulary, in file order. A content given twice keeps its id and takes the later
	// properties; an empty content is skipped.
	nextID := size
	var order []*addedToken
	byContent := map[string]int{} // index in order
	for i := range f.AddedTokens {
		a := &f.AddedTokens[i]
		if a.ID < 0 {
			return nil, fmt.Errorf("tokenizer: added_tokens[%d] %q: expected an id ≥ 0, got %d", i, a.Content, a.ID)
		}
		if a.ID > math.MaxUint32 { // Hugging Face's ids are u32
			return nil, fmt.Errorf("tokenizer: added_tokens[%d] %q: expected an id below 2³², got %d", i, a.Content, a.ID)
		}
		if a.Content == "" {
			continue
		}
		if k, ok := byContent[a.Content]; ok {
			a.ID = order[k].ID
			order[k] = a
			continue
		}
		if id, ok := t.vocab[a.Content]; ok {
			a.ID = id
		} else {
			a.ID = nextID
			nextID++
		}
		byContent[a.Content] = len(order)
		order = append(order, a)
	}
	var raw, normed []matchable
	bound := growthBound(len(data))
	made := 0 // the bytes of the normalized added tokens
	for _, a := range order {
		t.vocab[a.Content] = a.ID
		t.tokens[a.ID] = a.Content
		if a.Special {
			t.special[a.Content] = true
		}
		if !a.Normalized {
			raw = append(raw, matchable{a.Content, a})
			continue
		}
		// Decoding, and IDToToken, give a normalized token's normalized form, as Hugging Face
		// tokenizers does, so that the decoder can undo the normalization.
		n, size, ok := t.normalizer.normalize(newNormString(a.Content, 0), bound-made)
		if made += size; !ok {
			return nil, fmt.Errorf("tokenizer: added token %q: the normalizer grew the added tokens to %d bytes, past the bound of %d bytes (64 times the file's %d, at least 1 MiB)", a.Content, made, bound, len(data))
		}
		t.tokens[a.ID] = n.s
		normed = append(normed, matchable{n.s, a})
	}
	t.rawAdded, t.normAdded = newAddedMatcher(raw), newAddedMatcher(normed)
	if t.post, err = buildPostProcessor(f.PostProcessor, t.tokens); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// Encode splits text into tokens. With addSpecial the post-processor adds the model's special
// tokens (BOS, or CLS and SEP); special tokens written in the text are found either way. text
// must be valid UTF-8. A normalizer or pre-tokenizer that grows the text to more than 64 times
// its size (and more than 1 MiB) is an error.
func (t *Tokenizer) Encode(text string, addSpecial bool) (Encoding, error) {
	if !utf8.ValidString(text) {
		return Encoding{}, errors.New("tokenizer: expected UTF-8 text, got invalid UTF-8")
	}
	var toks []token
	bound := growthBound(len(text))
	made := 0 // the bytes of text the normalizer and the pre-tokenizer have made, each counted
	for _, seg := range t.rawAdded.split(text) {
		if seg.tok != nil {
			// The token is the text it covers, lstrip's and rstrip's whitespace included, as in
			// Hugging Face tokenizers.
			toks = append(toks, token{id: seg.tok.ID, value: text[seg.start:seg.end], offsets: [2]int{seg.start, seg.end}})
			continue
		}
		n, size, ok := t.normalizer.normalize(newNormString(text[seg.start:seg.end], seg.start), bound-made)
		if made += size; !ok {
			return Encoding{}, errGrew("the normalizer", len(text), made, bound)
		}
		for _, sub := range t.normAdded.split(n.s) {
			if sub.tok != nil {
				toks = append(toks, token{id: sub.tok.ID, value: n.s[sub.start:sub.end], offsets: n.span(sub.start, sub.end)})
				continue
			}
			if sub.start == sub.end {
				continue
			}
			words, ok := t.pre.preTokenize([]normString{n.slice(sub.start, sub.end)}, bound-made)
			if made += piecesLen(words); !ok {
				return Encoding{}, errGrew("the pre-tokenizer", len(text), made, bound)
			}
			for _, w := range words {
				pieces, err := t.model.tokenize(w.s)
				if err != nil {
					return Encoding{}, fmt.Errorf("tokenizer: %w", err)
				}
				for _, p := range pieces {
					v := p.value
					if v == "" {
						v = t.tokens[p.id]
					}
					toks = append(toks, token{id: p.id, value: v, offsets: w.span(p.start, p.end)})
				}
			}
		}
	}
	if t.post != nil {
		toks = t.post.process(toks, addSpecial)
	}
	e := Encoding{IDs: make([]int, len(toks)), Tokens: make([]string, len(toks)), Offsets: make([][2]int, len(toks))}
	for i, tok := range toks {
		e.IDs[i], e.Tokens[i], e.Offsets[i] = tok.id, tok.value, tok.offsets
		if tok.special {
			e.Offsets[i] = [2]int{}
		}
	}
	return e, nil
}

// Decode turns ids back into text, through the tokenizer's decoder. With skipSpecial, the
// special tokens (added tokens marked special, such as <s> and [CLS]) are left out. An id that is
// not in the vocabulary is an error, and so is a decoder that grows the text to more than 64
// times the size of the tokens (and more than 1 MiB).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	toks := make([]string, 0, len(ids))
	for i, id := range ids {
		tok, ok := t.tokens[id]
		if !ok {
			return "", fmt.Errorf("tokenizer: ids[%d]: expected an id of the vocabulary, got %d", i, id)
		}
		if skipSpecial && t.special[tok] {
			continue
		}
		toks = append(toks, tok)
	}
	if t.decoder == nil {
		return strings.Join(toks, " "), nil
	}
	n := textLen(toks)
	bound := growthBound(n)
	out, size, ok := t.decoder.decode(toks, bound)
	if !ok {
		return "", errGrew("the decoder", n, size, bound)
	}
	return strings.Join(out, ""), nil
}

// errGrew is the error of a normalizer, a pre-tokenizer or a decoder (what) that has grown text
// of from bytes to to bytes, more than bound, growthBound(from).
func errGrew(what string, from, to, bound int) error {
	return fmt.Errorf("tokenizer: %s grew the text from %d to %d bytes, past the bound of %d bytes (64 times the input, at least 1 MiB)", what, from, to, bound)
}

// TokenToID is the id of a token of the vocabulary (added tokens included), and whether there
// is one.
func (t *Tokenizer) TokenToID(token string) (int, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// IDToToken is the token of an id, and whether the vocabulary (added tokens included) has it.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	tok, ok := t.tokens[id]
	return tok, ok
}

// VocabSize is the number of distinct ids: the model's vocabulary and the added tokens.
func (t *Tokenizer) VocabSize() int {
	return len(t.tokens)
}
