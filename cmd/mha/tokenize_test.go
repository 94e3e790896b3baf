package main

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tokenizerDir is a model folder holding the tokenizer.json of testdata/tokenizer/NAME.json.gz.
func tokenizerDir(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("../../testdata/tokenizer", name+".json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTokenizeCLI runs `mha tokenize` on GPT-2's and Llama-2's tokenizers and checks its two
// outputs against tokenizers.js's ids (testdata/tokenizer's goldens), with and without --special.
func TestTokenizeCLI(t *testing.T) {
	gpt2, llama2 := tokenizerDir(t, "gpt2"), tokenizerDir(t, "llama2")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--model", gpt2, "--text", "Hello world", "--json"}, `{"ids": [15496, 995], "tokens": ["Hello", "Ġworld"]}` + "\n"},
		{[]string{"--model", gpt2, "--text", "Hello world"}, "ids:    15496 995\ntokens: \"Hello\" \"Ġworld\"\n"},
		{[]string{"--model", gpt2, "--text", "", "--json"}, `{"ids": [], "tokens": []}` + "\n"},
		{[]string{"--model", llama2, "--text", "Hello world", "--json"}, `{"ids": [15043, 3186], "tokens": ["▁Hello", "▁world"]}` + "\n"},
		{[]string{"--model", llama2, "--text", "Hello world", "--json", "--special"}, `{"ids": [1, 15043, 3186], "tokens": ["<s>", "▁Hello", "▁world"]}` + "\n"},
		{[]string{"--model", llama2, "--text", "a</s>", "--special"}, "ids:    1 263 2\ntokens: \"<s>\" \"▁a\" \"</s>\"\n"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(append([]string{"tokenize"}, c.args...)...)
		if code != 0 || stdout != c.want {
			t.Errorf("mha tokenize %q: exit %d, stdout %q, stderr %q; want %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// --json is JSON, and add_bos_token: false in tokenizer_config.json takes <s> away.
	if err := os.WriteFile(filepath.Join(llama2, "tokenizer_config.json"), []byte(`{"tokenizer_class": "LlamaTokenizer", "add_bos_token": false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("tokenize", "--model", llama2, "--text", "<s>x", "--special", "--json")
	var got struct {
		IDs    []int    `json:"ids"`
		Tokens []string `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || !slices.Equal(got.Tokens, []string{"<s>", "▁x"}) {
		t.Errorf("add_bos_token false: exit %d, %q, %v, stderr %q", code, stdout, err, stderr)
	}
}

// TestTokenizeCLIErrors checks that a bad folder, a missing or bad tokenizer.json and missing
// flags end with exit status 1 and one line that says what was expected.
func TestTokenizeCLIErrors(t *testing.T) {
	empty := t.TempDir()
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"model": {"type": "Mystery", "vocab": {}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	notJSON := t.TempDir()
	if err := os.WriteFile(filepath.Join(notJSON, "tokenizer.json"), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--text", "x"}, "--model is required"},
		{[]string{"--model", empty}, "--text is required"},
		{[]string{"--model", filepath.Join(empty, "nope"), "--text", "x"}, "expected a model folder, got " + filepath.Join(empty, "nope") + ", which does not exist"},
		{[]string{"--model", empty, "--text", "x"}, "to hold tokenizer.json, got a folder without it"},
		{[]string{"--model", bad, "--text", "x"}, `model: type "Mystery" is not supported (supported: BPE, WordPiece, WordLevel, Unigram)`},
		{[]string{"--model", notJSON, "--text", "x"}, "expected tokenizer.json, a JSON object, got not json"},
		{[]string{"--model", empty, "--text", "x", "extra"}, `tokenize takes no arguments, got "extra"`},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(append([]string{"tokenize"}, c.args...)...)
		if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "mha: ") || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("mha tokenize %q: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", c.args, code, stdout, stderr, c.want)
		}
	}
}
