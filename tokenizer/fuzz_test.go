package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// tinyJSON is a small byte-level BPE tokenizer.json, a seed for FuzzParse.
const tinyJSON = `{
  "added_tokens": [{"id": 9, "content": "<|end|>", "special": true, "lstrip": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "Ġab": 5, "1": 6, "2": 7, "12": 8},
            "merges": [["a", "b"], ["Ġ", "a"], "Ġa b", "1 2"], "ignore_merges": true},
  "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": true},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|end|>"}}, {"Sequence": {"id": "A"}}],
     "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [9], "tokens": ["<|end|>"]}}}]},
  "decoder": {"type": "ByteLevel"}
}`

// FuzzParse reads arbitrary bytes as tokenizer.json: an error or a tokenizer, never a panic, and
// a tokenizer that encodes and decodes without one (and without an error, but for a decoder that
// grows text past growthBound).
func FuzzParse(f *testing.F) {
	f.Add([]byte(tinyJSON))
	f.Add([]byte(`{"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}, "normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"}, "decoder": {"type": "WordPiece"}, "post_processor": {"type": "BertProcessing", "cls": ["[UNK]", 0], "sep": ["a", 1]}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"<unk>": 0, "▁": 1, "<0x61>": 2}, "merges": [], "byte_fallback": true, "fuse_unk": true, "unk_token": "<unk>"}, "pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "first", "split": true}, "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?i:a|b)(?!\\S)|[^\\s\\p{L}]+|\\w+"}, "behavior": "MergedWithPrevious", "invert": true}}`))
	f.Add([]byte(`{"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Digits", "individual_digits": true}}`))
	f.Add([]byte(`{"model": {"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0], ["a", -1], ["ab", -1.5], ["<0x62>", -3]]}, "pre_tokenizer": {"type": "Metaspace"}}`))
	f.Add([]byte(`{"model": {"type": "WordLevel", "unk_token": "?", "vocab": {"?": 0, "ab": 1}}, "pre_tokenizer": {"type": "Whitespace"}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`)) // unk_token not in the vocabulary
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		for _, text := range []string{"", "ab 12 <|end|>  a\n\tb", "é😀中 ab"} {
			e, err := tok.Encode(text, true)
			if err != nil {
				continue
			}
			checkOffsets(t, text, e)
			if _, err := tok.Decode(e.IDs, false); err != nil && !strings.Contains(err.Error(), "past the bound") {
				t.Errorf("Decode of Encode(%q)'s ids: %v", text, err) // only a decoder that grows text exponentially fails
			}
		}
	})
}

// FuzzEncode encodes arbitrary text with the real vocabularies: never a panic, offsets in the
// text and in order, decode(encode(x)) == x for Llama-2 (byte fallback), and for the byte-level
// tokenizers without a normalizer (GPT-2, Llama-3) decode(encode(x)) == x and each token's bytes
// inside the part of the text its offsets give.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello world", "  a\n\n b\t", "<|endoftext|>x<s>[CLS]", "中文😀👨‍👩‍👧", "e\u0301 İ ß", "'s 'LL 12345"} {
		f.Add(s)
	}
	names := []string{"gpt2", "llama3", "llama2", "mistral-metaspace-always-split", "bert-base-uncased", "gpt2-added", "unigram"}
	const byteLevel = 2 // the first two
	toks := make([]*Tokenizer, len(names))
	for i, n := range names {
		toks[i] = loadCase(f, n)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if !utf8.ValidString(text) {
			if _, err := toks[0].Encode(text, false); err == nil {
				t.Errorf("Encode(%q): no error for invalid UTF-8", text)
			}
			return
		}
		for i, tok := range toks {
			e, err := tok.Encode(text, true)
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", names[i], text, err)
			}
			checkOffsets(t, text, e)
			if _, err := tok.Decode(e.IDs, true); err != nil {
				t.Fatalf("%s: Decode: %v", names[i], err)
			}
			if names[i] == "llama2" && !strings.ContainsAny(text, "<▁") {
				// SentencePiece-style with byte fallback: every character comes back, the '▁' put
				// in front goes (text with '▁' or special tokens' spellings aside).
				e, err := tok.Encode(text, false)
				if err != nil {
					t.Fatalf("llama2: Encode(%q): %v", text, err)
				}
				if got, err := tok.Decode(e.IDs, false); err != nil || got != text {
					t.Errorf("llama2: Decode(Encode(%q)) = %q, %v", text, got, err)
				}
			}
			if i >= byteLevel {
				continue
			}
			if e, err = tok.Encode(text, false); err != nil {
				t.Fatalf("%s: Encode(%q): %v", names[i], text, err)
			}
			if got, err := tok.Decode(e.IDs, false); err != nil || got != text {
				t.Errorf("%s: Decode(Encode(%q)) = %q, %v", names[i], text, got, err)
			}
			for k, o := range e.Offsets {
				if b := string(byteLevelDecode(e.Tokens[k])); !strings.Contains(text[o[0]:o[1]], b) {
					t.Errorf("%s: %q: token %q (%q) outside its offsets %v (%q)", names[i], text, e.Tokens[k], b, o, text[o[0]:o[1]])
				}
			}
		}
	})
}

// FuzzTokenizerConfig reads arbitrary bytes as a Llama-2 folder's tokenizer_config.json (what
// LoadDir does with it, on a tokenizer.json parsed once, with config.json's class the Llama
// one): an error or a tokenizer, never a panic,
// and a tokenizer that encodes "Hi" as the vocabulary does, with at most a special token on
// either side when asked for them.
func FuzzTokenizerConfig(f *testing.F) {
	f.Add([]byte(`{"tokenizer_class": "LlamaTokenizer", "add_bos_token": true, "add_eos_token": true, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}`))
	f.Add([]byte(`{"tokenizer_class": "GemmaTokenizerFast", "add_bos_token": false}`))
	f.Add([]byte(`{"tokenizer_class": "LlamaTokenizer", "add_eos_token": true, "eos_token": "<nope>"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"add_bos_token": false, "add_eos_token": true, "eos_token": "</s>"}`))
	base, err := Parse(tokenizerJSON(f, "llama2"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, config []byte) {
		tok := *base // applyConfig replaces the post-processor and changes nothing else
		if tok.applyConfig(config, func() string { return "LlamaTokenizerFast" }) != nil {
			return
		}
		plain, err := tok.Encode("Hi", false)
		if err != nil || !slices.Equal(plain.Tokens, []string{"▁Hi"}) {
			t.Fatalf("Encode(\"Hi\") = %q, %v, want [▁Hi]", plain.Tokens, err)
		}
		e, err := tok.Encode("Hi", true)
		if err != nil {
			t.Fatalf("Encode(\"Hi\") with special tokens: %v", err)
		}
		if i := slices.Index(e.Tokens, "▁Hi"); i < 0 || i > 1 || len(e.Tokens)-i > 2 {
			t.Fatalf("Encode(\"Hi\") with special tokens = %q, want ▁Hi with at most one token on each side", e.Tokens)
		}
	})
}
