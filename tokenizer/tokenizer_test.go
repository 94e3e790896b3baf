package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestTokenizerPattern checks the translation of Oniguruma patterns: GPT-2's \s+(?!\S) leaves
// the last space of a run to the word after it, and a run at the end of the text whole.
func TestTokenizerPattern(t *testing.T) {
	cases := []struct {
		pattern, text string
		want          []string
	}{
		{gpt2Pattern, "a   b", []string{"a", "  ", " b"}},
		{gpt2Pattern, "a b  ", []string{"a", " b", "  "}},
		{gpt2Pattern, "I'll  go\n\n x", []string{"I", "'ll", " ", " go", "\n\n", " x"}},
		{gpt2Pattern, "a\u3000\u3000b", []string{"a", "\u3000", "\u3000", "b"}}, // Unicode \s
		{`\s+(?!\S)|\s+`, " \t x", []string{" \t", " "}},
		{`(?i:'s|'t)|\p{N}{1,3}`, "IT'S 12345", []string{"'S", "123", "45"}},
		{`\w+|[^\w\s]+`, "héllo, wörld_1!", []string{"héllo", ",", "wörld_1", "!"}},
		{`a(?=b)|c`, "abacab", []string{"a", "c", "a"}},
		{`[[:alpha:]é]+`, "ab1é", []string{"ab", "é"}},
		{`\w+`, "teⅫ½ⓐb_1", []string{"teⅫ", "ⓐb_1"}}, // Oniguruma's \w: Alphabetic, not only letters
	}
	for _, c := range cases {
		p, err := compilePattern(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		var got []string
		for _, m := range p.findAll(c.text) {
			got = append(got, c.text[m[0]:m[1]])
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q on %q: got %q, want %q", c.pattern, c.text, got, c.want)
		}
	}
	for _, bad := range []string{`(?<=a)b`, `a(?!b)c`, `(a(?!b))`, `(?>a)`, `a++`, `\1`, `[a`, `(a`, `a)`, `[^\S]`, `[[:é`, `a{2`, `\p{L`, `\`, `?:(?!0)`, `?(?!0)`, `*a`, `a|+b`} {
		if _, err := compilePattern(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestTokenizerRustBehavior checks what package tokenizer does as Hugging Face tokenizers (Rust)
// does where tokenizers.js differs, and the corners no golden reaches.
func TestTokenizerRustBehavior(t *testing.T) {
	// Metaspace with split: a cut before every '▁' (the Rust library's own test).
	pieces := metaspacePre{replacement: "▁", scheme: prependAlways, split: true}.preTokenize([]normString{newNormString("Hey   friend!", 0)})
	var got []string
	var spans [][2]int
	for _, p := range pieces {
		got = append(got, p.s)
		spans = append(spans, p.span(0, len(p.s)))
	}
	if want := []string{"▁Hey", "▁", "▁", "▁friend!"}; !slices.Equal(got, want) {
		t.Errorf("Metaspace split: got %q, want %q", got, want)
	}
	if want := [][2]int{{0, 3}, {3, 4}, {4, 5}, {5, 13}}; !slices.Equal(spans, want) {
		t.Errorf("Metaspace split offsets: got %v, want %v", spans, want)
	}
	// Punctuation isolates every character (tokenizers.js keeps runs together); Digits without
	// individual_digits keeps runs.
	for _, c := range []struct {
		p    preTokenizer
		want []string
	}{
		{runeClassPre{isPunct, isolated}, []string{"a", "!", "!", "!", "b", "$", "(", "1", ")"}},
		{runeClassPre{isPunct, mergedWithPrevious}, []string{"a!", "!", "!", "b$", "(", "1)"}},
		{runeClassPre{isNumeric, contiguous}, []string{"a!!!b$(", "1", ")"}},
		{splitPre{find: replaceNorm{literal: "!"}, behavior: mergedWithNext}, []string{"a", "!", "!", "!b$(1)"}},
		{splitPre{find: replaceNorm{literal: "!"}, behavior: contiguous}, []string{"a", "!!!", "b$(1)"}},
		{splitPre{find: replaceNorm{literal: "!"}, behavior: removed, invert: true}, []string{"!", "!", "!"}},
	} {
		var got []string
		for _, p := range c.p.preTokenize([]normString{newNormString("a!!!b$(1)", 0)}) {
			got = append(got, p.s)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%#v: got %q, want %q", c.p, got, c.want)
		}
	}
	// StripAccents removes every mark, BERT's normalizer only the nonspacing ones.
	if got := (stripAccents{}).normalize(newNormString("दुनिया e\u0301", 0)).s; got != "दनय e" {
		t.Errorf("StripAccents: got %q", got)
	}
	if got := (bertNormalizer{stripAccents: true}).normalize(newNormString("दुनिया é", 0)).s; got != "दनिया e" {
		t.Errorf("BertNormalizer strip_accents: got %q", got)
	}
	// The Metaspace decoder drops every '▁' of the first token.
	if got := strings.Join(metaspaceDec{"▁", true}.decode([]string{"▁▁a", "▁b"}), ""); got != "a b" {
		t.Errorf("Metaspace decoder: got %q, want %q", got, "a b")
	}
	// ByteFallback: bytes that are not UTF-8 give one U+FFFD each.
	if got := (byteFallbackDec{}).decode([]string{"<0xE2>", "<0x82>", "a", "<0xE2>", "<0x82>", "<0xAC>"}); !slices.Equal(got, []string{"\uFFFD", "\uFFFD", "a", "€"}) {
		t.Errorf("ByteFallback: got %q", got)
	}
	// ByteLevel: a maximal ill-formed subsequence is one U+FFFD.
	for in, want := range map[string]string{"\xE2\x82A": "\uFFFDA", "\xF0\x9F\x98": "\uFFFD", "\xC0\xAF": "\uFFFD\uFFFD", "\xED\xA0\x80": "\uFFFD\uFFFD\uFFFD", "ok": "ok"} {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", in, got, want)
		}
	}
	// WordPiece's cleanup, token by token.
	if got := strings.Join(wordPieceDec{"##", true}.decode([]string{"hello", ",", "wor", "##ld", "!"}), ""); got != "hello, world!" {
		t.Errorf("WordPiece cleanup: got %q", got)
	}
	// NFC of ü, U+0308, U+094D: the marks reorder and U+0308 joins the u across U+094D; as in
	// Hugging Face tokenizers, each output character comes from the input character at its place.
	n := newNormString("ü\u0308\u094d", 0).unicodeNorm(norm.NFC)
	if want := [][2]int{{0, 2}, {0, 2}, {2, 4}, {2, 4}, {2, 4}, {4, 7}, {4, 7}}; n.s != "ü\u094d\u0308" || !slices.Equal(n.align, want) {
		t.Errorf("NFC: %q %v, want %q %v", n.s, n.align, "ü\u094d\u0308", want)
	}
	// Lowercase is per character: 'İ' is "i̇", a final 'Σ' is 'σ'.
	if got := (lowercase{}).normalize(newNormString("İΣ", 0)).s; got != "i\u0307σ" {
		t.Errorf("Lowercase: got %q", got)
	}
}

// TestTokenizerDuplicates checks a BPE merge and a Unigram piece given twice: the last one
// counts, as in Hugging Face tokenizers, whose maps keep it (0.23.2's Node binding gives "a"
// "bc" and id 4 here).
func TestTokenizerDuplicates(t *testing.T) {
	for _, c := range []struct {
		model string
		ids   []int
	}{
		{`{"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}, "merges": ["a b", "b c", "a b"]}`, []int{0, 4}},
		{`{"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1], ["b", -1], ["ab", -0.5], ["ab", -0.4]]}`, []int{4}},
	} {
		tok, err := Parse([]byte(`{"version": "1.0", "pre_tokenizer": {"type": "WhitespaceSplit"}, "model": ` + c.model + `}`))
		if err != nil {
			t.Fatal(err)
		}
		text := "ab"
		if len(c.ids) == 2 {
			text = "abc"
		}
		if enc, err := tok.Encode(text, false); err != nil || !slices.Equal(enc.IDs, c.ids) {
			t.Errorf("%s: %v, %v; want %v", c.model, enc.IDs, err, c.ids)
		}
	}
	// Each Unigram entry keeps its id for decoding, and added tokens follow the list's length
	// (the binding: ids [2 3 0], "a a <unk>", 4 ids).
	tok, err := Parse([]byte(`{"version": "1.0", "pre_tokenizer": {"type": "WhitespaceSplit"},
		"added_tokens": [{"id": 9, "content": "zz", "special": false}],
		"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1], ["a", -2]]}}`))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tok.Encode("a zz q", false)
	if err != nil || !slices.Equal(enc.IDs, []int{2, 3, 0}) {
		t.Errorf("Unigram with a piece twice and an added token: %v, %v; want [2 3 0]", enc.IDs, err)
	}
	if text, err := tok.Decode([]int{1, 2, 0}, false); err != nil || text != "a a <unk>" || tok.VocabSize() != 4 {
		t.Errorf("Decode [1 2 0] = %q, %v, VocabSize %d; want \"a a <unk>\" and 4", text, err, tok.VocabSize())
	}
}

// TestTokenizerMissingUnk checks a BPE unk_token that the vocabulary lacks: the file opens and
// encodes what needs no unknown token, and a character that does is an error, as in Hugging
// Face tokenizers (0.23.2's binding: [2 0], then "Unk token `<unk>` not found").
func TestTokenizerMissingUnk(t *testing.T) {
	tok, err := Parse([]byte(`{"pre_tokenizer": {"type": "WhitespaceSplit"}, "model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if enc, err := tok.Encode("ab a", false); err != nil || !slices.Equal(enc.IDs, []int{2, 0}) {
		t.Errorf("Encode(\"ab a\") = %v, %v; want [2 0]", enc.IDs, err)
	}
	if _, err := tok.Encode("az", false); err == nil || !strings.Contains(err.Error(), `needs the unknown token "<unk>", which is not in the vocabulary`) {
		t.Errorf("Encode(\"az\"): %v, want an error naming the missing unknown token", err)
	}
}

// TestTokenizerBPE checks unknown characters (dropped without unk, fused with fuse_unk), byte
// fallback and the continuing-subword prefix and end-of-word suffix. The ids and offsets of the
// first nine cases are Hugging Face tokenizers 0.23.2's (its Node binding, character offsets
// turned into bytes): offsets run on from the last token's end, so a dropped character shifts
// the rest; an unknown character waits for the next vocabulary piece, after byte tokens; byte
// fallback spells the prefix too.
func TestTokenizerBPE(t *testing.T) {
	vocab := map[string]int{"<unk>": 0, "a": 1, "b": 2, "ab": 3, "<0xC3>": 4, "<0xA9>": 5, "##b": 6, "a##b": 7, "b</w>": 8, "ab</w>": 9,
		"<0x23>": 10, "<0x78>": 11, "<0x79>": 12}
	cases := []struct {
		m    bpe
		word string
		want []piece
	}{
		{bpe{unk: -1}, "axxb", []piece{{1, 0, 1, ""}, {2, 1, 2, ""}}},
		{bpe{unk: 0}, "axxb", []piece{{1, 0, 1, ""}, {0, 1, 2, ""}, {0, 2, 3, ""}, {2, 3, 4, ""}}},
		{bpe{unk: 0, fuseUnk: true}, "axxbx", []piece{{1, 0, 1, ""}, {0, 1, 3, ""}, {2, 3, 4, ""}, {0, 4, 5, ""}}},
		{bpe{unk: 0, byteFallback: true}, "aé", []piece{{1, 0, 1, ""}, {4, 1, 2, ""}, {5, 2, 3, ""}}},
		{bpe{unk: 0, byteFallback: true}, "a€", []piece{{1, 0, 1, ""}, {0, 1, 4, ""}}}, // <0xE2> missing
		{bpe{unk: 0, byteFallback: true}, "xéy", []piece{{11, 0, 1, ""}, {4, 1, 2, ""}, {5, 2, 3, ""}, {12, 3, 4, ""}}},
		{bpe{unk: 0, byteFallback: true}, "€x€", []piece{{11, 0, 1, ""}, {0, 1, 4, ""}, {0, 4, 7, ""}}},
		{bpe{unk: 0, byteFallback: true, fuseUnk: true}, "€x€b", []piece{{11, 0, 1, ""}, {0, 1, 7, ""}, {2, 7, 8, ""}}},
		{bpe{unk: 0, byteFallback: true, prefix: "##"}, "abx", []piece{{1, 0, 1, ""}, {6, 1, 2, ""}, {10, 2, 3, ""}, {10, 3, 4, ""}, {11, 4, 5, ""}}},
		{bpe{unk: -1, merges: map[[2]int]merge{{1, 2}: {0, 3}}}, "abab", []piece{{3, 0, 2, ""}, {3, 2, 4, ""}}},
		{bpe{unk: -1, prefix: "##", merges: map[[2]int]merge{{1, 6}: {0, 7}}}, "ab", []piece{{7, 0, 2, ""}}},
		{bpe{unk: -1, suffix: "</w>", merges: map[[2]int]merge{{1, 8}: {0, 9}}}, "ab", []piece{{9, 0, 2, ""}}},
		{bpe{unk: -1, ignoreMerges: true}, "ab", []piece{{3, 0, 2, ""}}},
	}
	for i, c := range cases {
		c.m.vocab = vocab
		for b := range c.m.byteIDs {
			c.m.byteIDs[b] = -1
		}
		c.m.byteIDs[0xC3], c.m.byteIDs[0xA9], c.m.byteIDs['#'], c.m.byteIDs['x'], c.m.byteIDs['y'] = 4, 5, 10, 11, 12
		got, err := c.m.tokenize(c.word)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("case %d, %q: got %v, %v; want %v", i, c.word, got, err, c.want)
		}
	}
}

// TestTokenizerUnigram checks the Viterbi split of the Unigram model on the Rust library's own
// example, with unknown characters fused, and its errors.
func TestTokenizerUnigram(t *testing.T) {
	tok, err := Parse([]byte(`{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", 0], ["b", 0],
	  ["c", 0], ["d", 0], ["cd", 1], ["ab", 2], ["abc", 5], ["abcd", 10]]}}`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := tok.Encode("abcdacdxx", false)
	if err != nil || !slices.Equal(e.Tokens, []string{"abcd", "a", "cd", "xx"}) || !slices.Equal(e.IDs, []int{8, 1, 5, 0}) {
		t.Errorf("Encode: %q %v, %v", e.Tokens, e.IDs, err)
	}
	for _, c := range []struct{ file, want string }{
		{`{"model": {"type": "Unigram", "vocab": {"a": 1}}}`, "vocab: expected a list of [piece, score]"},
		{`{"model": {"type": "Unigram", "vocab": [["a"]]}}`, "vocab[0]: expected [piece, score], got 1 values"},
		{`{"model": {"type": "Unigram", "unk_id": 3, "vocab": [["a", 0]]}}`, "unk_id: expected an id of the vocabulary (0 to 0), got 3"},
	} {
		if _, err := Parse([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v, want an error with %q", c.file, err, c.want)
		}
	}
	noUnk, err := Parse([]byte(`{"model": {"type": "Unigram", "vocab": [["a", 0]]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noUnk.Encode("ab", false); err == nil || !strings.Contains(err.Error(), `"b" is unknown and there is no unk_id`) {
		t.Errorf("Encode without unk_id: %v", err)
	}
}

// TestTokenizerByteLevelNormalizer checks the ByteLevel normalizer (with a Split on 'Ġ') on
// GPT-2's vocabulary against what Hugging Face tokenizers 0.23.2 gives (offsets in characters).
func TestTokenizerByteLevelNormalizer(t *testing.T) {
	var file map[string]json.RawMessage
	if err := json.Unmarshal(tokenizerJSON(t, "gpt2"), &file); err != nil {
		t.Fatal(err)
	}
	file["normalizer"] = json.RawMessage(`{"type": "ByteLevel"}`)
	file["pre_tokenizer"] = json.RawMessage(`{"type": "Split", "pattern": {"String": "Ġ"}, "behavior": "MergedWithNext", "invert": false}`)
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text    string
		ids     []int
		tokens  []string
		offsets [][2]int
	}{
		{"Hello world 😀", []int{15496, 995, 30325, 222}, []string{"Hello", "Ġworld", "ĠðŁĺ", "Ģ"}, [][2]int{{0, 5}, {5, 11}, {11, 13}, {12, 13}}},
		{"a  b\n", []int{64, 220, 275, 198}, []string{"a", "Ġ", "Ġb", "Ċ"}, [][2]int{{0, 1}, {1, 2}, {2, 4}, {4, 5}}},
	} {
		e, err := tok.Encode(c.text, false)
		if err != nil || !slices.Equal(e.IDs, c.ids) || !slices.Equal(e.Tokens, c.tokens) || !slices.Equal(charOffsets(c.text, e.Offsets), c.offsets) {
			t.Errorf("Encode(%q) = %v %q %v, %v; want %v %q %v", c.text, e.IDs, e.Tokens, charOffsets(c.text, e.Offsets), err, c.ids, c.tokens, c.offsets)
		}
		if got, err := tok.Decode(e.IDs, false); err != nil || got != c.text {
			t.Errorf("Decode = %q, %v", got, err)
		}
	}
}

// TestTokenizerOffsets checks byte offsets on real vocabularies: words, a character split into
// byte tokens, normalization that changes lengths, and special tokens.
func TestTokenizerOffsets(t *testing.T) {
	cases := []struct {
		name, text string
		special    bool
		want       [][2]int
	}{
		{"gpt2", "Hello world", false, [][2]int{{0, 5}, {5, 11}}},
		{"gpt2", "a😀", false, [][2]int{{0, 1}, {1, 5}, {1, 5}}},
		{"gpt2", "x<|endoftext|>y", false, [][2]int{{0, 1}, {1, 14}, {14, 15}}},
		{"llama2", "Hi there", true, [][2]int{{0, 0}, {0, 2}, {2, 8}}},
		{"bert-base-uncased", "Héllo, WORLD!", true, [][2]int{{0, 0}, {0, 6}, {6, 7}, {8, 13}, {13, 14}, {0, 0}}},
		{"bert-base-uncased", "中文", false, [][2]int{{0, 3}, {3, 6}}},
		{"gpt2-added", "a <mask> b", false, [][2]int{{0, 1}, {1, 8}, {8, 10}}},
	}
	for _, c := range cases {
		tok := loadCase(t, c.name)
		e, err := tok.Encode(c.text, c.special)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(e.Offsets, c.want) {
			t.Errorf("%s %q: offsets %v of %q, want %v", c.name, c.text, e.Offsets, e.Tokens, c.want)
		}
	}
}

// TestTokenizerVocab checks TokenToID, IDToToken, VocabSize and Decode's error for an unknown id.
func TestTokenizerVocab(t *testing.T) {
	tok := loadCase(t, "gpt2")
	if n := tok.VocabSize(); n != 50257 {
		t.Errorf("VocabSize = %d, want 50257", n)
	}
	if id, ok := tok.TokenToID("<|endoftext|>"); !ok || id != 50256 {
		t.Errorf("TokenToID(<|endoftext|>) = %d, %v", id, ok)
	}
	if s, ok := tok.IDToToken(995); !ok || s != "Ġworld" {
		t.Errorf("IDToToken(995) = %q, %v", s, ok)
	}
	if _, ok := tok.IDToToken(50257); ok {
		t.Error("IDToToken(50257): found")
	}
	if _, err := tok.Decode([]int{1, -1}, false); err == nil || !strings.Contains(err.Error(), "ids[1]") {
		t.Errorf("Decode of an unknown id: %v", err)
	}
	if _, err := tok.Encode("\xff", false); err == nil {
		t.Error("Encode of invalid UTF-8: no error")
	}
}

// TestTokenizerParseErrors checks that bad files give one error saying what was expected and
// what came, naming unknown types.
func TestTokenizerParseErrors(t *testing.T) {
	const model = `"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}}`
	cases := []struct{ file, want string }{
		{``, "expected tokenizer.json, a JSON object"},
		{`[1]`, "expected tokenizer.json, a JSON object"},
		{`{}`, "model: expected an object, got none"},
		{`{"model": {"type": "Sentencepiece", "vocab": [["a", 0]]}}`, `model: type "Sentencepiece" is not supported (supported: BPE, WordPiece, WordLevel, Unigram)`},
		{`{"model": {"type": "BPE", "vocab": [1]}}`, "vocab: expected an object of token: id"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}}`, `merges[0] "a a": expected both tokens and their merge`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}`, "expected two tokens with one space"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}}`, "expected a pair of tokens, got 1"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": 3}}`, "merges: expected a list"},
		{`{"model": {"type": "BPE", "vocab": {"a": -1}}}`, "expected ids ≥ 0"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 4294967296}}}`, `expected ids below 2³², got "a": 4294967296`},
		{`{` + model + `, "normalizer": {"type": "Precompiled"}}`, `normalizer: type "Precompiled" is not supported`},
		{`{` + model + `, "normalizer": {"type": "Sequence", "normalizers": [{"type": "X"}]}}`, `normalizers[0]: normalizer: type "X"`},
		{`{` + model + `, "normalizer": 5}`, "normalizer: expected an object"},
		{`{` + model + `, "normalizer": {"type": "Replace"}}`, "expected a pattern"},
		{`{` + model + `, "pre_tokenizer": {"type": "UnicodeScripts"}}`, `pre_tokenizer: type "UnicodeScripts" is not supported`},
		{`{` + model + `, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=a)"}}}`, `regex "(?<=a)": the group at 0 ("(?<=") is not supported`},
		{`{` + model + `, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}}`, `behavior "Sideways"`},
		{`{` + model + `, "pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "sometimes"}}`, `prepend_scheme "sometimes"`},
		{`{` + model + `, "pre_tokenizer": {}}`, `pre_tokenizer: no "type"`},
		{`{` + model + `, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[X]"}}, {"Sequence": {"id": "A"}}]}}`, `special token "[X]"`},
		{`{` + model + `, "post_processor": {"type": "TemplateProcessing", "single": []}}`, "expected the sequence $A"},
		{`{` + model + `, "post_processor": {"type": "BertProcessing", "cls": "[CLS]"}}`, "cls: expected [token, id]"},
		{`{` + model + `, "post_processor": {"type": "Nope"}}`, `post_processor: type "Nope"`},
		{`{` + model + `, "decoder": {"type": "CTC"}}`, `decoder: type "CTC" is not supported`},
		{`{` + model + `, "added_tokens": [{"id": -2, "content": "x"}]}`, `added_tokens[0] "x": expected an id ≥ 0, got -2`},
		{`{` + model + `, "added_tokens": [{"id": 9223372036854775807, "content": "x"}]}`, `added_tokens[0] "x": expected an id below 2³², got 9223372036854775807`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s):\n got  %v\n want an error with %q", c.file, err, c.want)
		}
	}
}

// TestTokenizerLoadDir checks the model folder: tokenizer_config.json's add_bos_token and
// add_eos_token, and the errors for a missing folder, file or bad config.
func TestTokenizerLoadDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokenizerJSON(t, "llama2"), 0o644); err != nil {
		t.Fatal(err)
	}
	encode := func(cfg map[string]any) []string {
		t.Helper()
		cfgPath := filepath.Join(dir, "tokenizer_config.json")
		os.Remove(cfgPath)
		if cfg != nil {
			data, _ := json.Marshal(cfg)
			if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tok, err := LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		e, err := tok.Encode("Hi", true)
		if err != nil {
			t.Fatal(err)
		}
		return e.Tokens
	}
	const llama = "LlamaTokenizer"
	for _, c := range []struct {
		cfg  map[string]any
		want []string
	}{
		{nil, []string{"<s>", "▁Hi"}},
		{map[string]any{"tokenizer_class": llama, "bos_token": "<s>"}, []string{"<s>", "▁Hi"}},
		{map[string]any{"tokenizer_class": llama, "add_bos_token": false}, []string{"▁Hi"}},
		{map[string]any{"tokenizer_class": "GPT2Tokenizer", "add_bos_token": false}, []string{"<s>", "▁Hi"}}, // not a Llama class
		{map[string]any{"tokenizer_class": "LlamaTokenizerFast", "add_eos_token": true, "bos_token": "<s>", "eos_token": "</s>"}, []string{"<s>", "▁Hi", "</s>"}},
		{map[string]any{"tokenizer_class": llama, "add_bos_token": true, "add_eos_token": true, "bos_token": map[string]any{"content": "<s>"}, "eos_token": "</s>"}, []string{"<s>", "▁Hi", "</s>"}},
	} {
		if got := encode(c.cfg); !slices.Equal(got, c.want) {
			t.Errorf("config %v: got %q, want %q", c.cfg, got, c.want)
		}
	}
	// Without tokenizer_class the class is config.json's, as AutoTokenizer finds it: its
	// tokenizer_class, else its model_type's.
	noClass := map[string]any{"add_bos_token": false, "add_eos_token": true, "eos_token": "</s>"}
	for _, c := range []struct {
		config string
		want   []string
	}{
		{``, []string{"<s>", "▁Hi"}},
		{`{"model_type": "gpt2"}`, []string{"<s>", "▁Hi"}},
		{`{"model_type": "llama"}`, []string{"▁Hi", "</s>"}},
		{`{"model_type": "gemma"}`, []string{"▁Hi", "</s>"}},
		{`{"model_type": "phi3"}`, []string{"▁Hi", "</s>"}},
		{`{"model_type": "qwen2", "tokenizer_class": "LlamaTokenizer"}`, []string{"▁Hi", "</s>"}},
		{`{"model_type": "mistral", "tokenizer_class": "PreTrainedTokenizerFast"}`, []string{"<s>", "▁Hi"}},
		{`not JSON`, []string{"<s>", "▁Hi"}},
	} {
		cfgPath := filepath.Join(dir, "config.json")
		os.Remove(cfgPath)
		if c.config != "" {
			if err := os.WriteFile(cfgPath, []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := encode(noClass); !slices.Equal(got, c.want) {
			t.Errorf("config.json %s: got %q, want %q", c.config, got, c.want)
		}
		if got := encode(map[string]any{"tokenizer_class": "GPT2Tokenizer", "add_bos_token": false}); c.config != "" && !slices.Equal(got, []string{"<s>", "▁Hi"}) {
			t.Errorf("config.json %s under tokenizer_config.json's GPT2Tokenizer: got %q", c.config, got)
		}
		os.Remove(cfgPath)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"tokenizer_class": "LlamaTokenizer", "add_bos_token": true, "bos_token": "<nope>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), `bos_token: expected a token of the vocabulary, got "<nope>"`) {
		t.Errorf("bad bos_token: %v", err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"):        "which does not exist",
		filepath.Join(dir, "tokenizer.json"): "got the file",
		t.TempDir():                          "to hold tokenizer.json",
	} {
		if _, err := LoadDir(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadDir(%s): %v, want an error with %q", path, err, want)
		}
	}
}

// TestTokenizerAddedTokens checks single_word, lstrip and rstrip (with the offsets they give) and
// a normalized added token, matched in the lowercased text.
func TestTokenizerAddedTokens(t *testing.T) {
	tok, err := Parse([]byte(`{
	  "added_tokens": [
	    {"id": 20, "content": "ab", "single_word": true},
	    {"id": 21, "content": "<x>", "lstrip": true, "rstrip": true, "special": true},
	    {"id": 22, "content": "Hi", "normalized": true}
	  ],
	  "normalizer": {"type": "Lowercase"},
	  "pre_tokenizer": {"type": "WhitespaceSplit"},
	  "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "b": 2, "c": 3, "##a": 4, "##b": 5, "##c": 6, "h": 7, "##i": 8}},
	  "decoder": {"type": "WordPiece"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	text := "ab cab abc ab_ HI  <x>  c"
	e, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	// "cab", "abc" and "ab_" hold ab inside a word: the model splits them ("ab_" is unknown to it:
	// the added token is not part of the model's vocabulary). As in Hugging Face tokenizers, an
	// added token's token is the text it covers: normalized for "Hi", with the whitespace that
	// lstrip and rstrip took for "<x>".
	wantTokens := []string{"ab", "c", "##a", "##b", "a", "##b", "##c", "[UNK]", "hi", "  <x>  ", "c"}
	wantOffsets := [][2]int{{0, 2}, {3, 4}, {4, 5}, {5, 6}, {7, 8}, {8, 9}, {9, 10}, {11, 14}, {15, 17}, {17, 24}, {24, 25}}
	if !slices.Equal(e.Tokens, wantTokens) || !slices.Equal(e.Offsets, wantOffsets) {
		t.Errorf("Encode(%q):\n got  %q %v\n want %q %v", text, e.Tokens, e.Offsets, wantTokens, wantOffsets)
	}
	// Decoding gives a normalized added token's normalized form, as Hugging Face tokenizers does.
	if got, err := tok.Decode(e.IDs, true); err != nil || got != "ab cab abc [UNK] hi c" {
		t.Errorf("Decode = %q, %v", got, err)
	}
}

// TestTokenizerAddedIDs checks that added tokens get the ids Hugging Face tokenizers gives them,
// whatever the file says: the model's id of their content, else the next ids after the model's
// vocabulary in file order; a content given twice keeps its first id and its later properties.
func TestTokenizerAddedIDs(t *testing.T) {
	tok, err := Parse([]byte(`{
	  "added_tokens": [
	    {"id": 70, "content": "<new>"},
	    {"id": 3, "content": "b", "special": true},
	    {"id": 50, "content": ""},
	    {"id": 60, "content": "<two>", "special": true},
	    {"id": 61, "content": "<new>", "special": true}
	  ],
	  "pre_tokenizer": {"type": "WhitespaceSplit"},
	  "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "b": 2}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]int{"<new>": 3, "b": 2, "<two>": 4} {
		if id, ok := tok.TokenToID(content); !ok || id != want {
			t.Errorf("TokenToID(%q) = %d, %v; want %d", content, id, ok, want)
		}
	}
	if n := tok.VocabSize(); n != 5 {
		t.Errorf("VocabSize = %d, want 5", n)
	}
	e, err := tok.Encode("a <new> b <two>", false)
	if err != nil || !slices.Equal(e.IDs, []int{1, 3, 2, 4}) {
		t.Errorf("Encode: %v, %v", e.IDs, err)
	}
	if got, err := tok.Decode(e.IDs, true); err != nil || got != "a" {
		t.Errorf("Decode skipping the special tokens (<new>'s later entry is special) = %q, %v", got, err)
	}
}

// TestTokenizerConcurrent encodes from several goroutines at once (run it with -race): a
// Tokenizer is read-only after Parse.
func TestTokenizerConcurrent(t *testing.T) {
	tok := loadCase(t, "gpt2")
	want, err := tok.Encode("Hello, concurrent world! 😀", true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []int)
	for range 4 {
		go func() {
			var ids []int
			for range 50 {
				e, _ := tok.Encode("Hello, concurrent world! 😀", true)
				ids = e.IDs
			}
			done <- ids
		}()
	}
	for range 4 {
		if ids := <-done; !slices.Equal(ids, want.IDs) {
			t.Errorf("got %v, want %v", ids, want.IDs)
		}
	}
}
