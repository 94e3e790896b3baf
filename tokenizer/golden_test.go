package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// testdata is where gen.mjs writes the tokenizer files and the goldens.
const testdata = "../testdata/tokenizer"

// goldenCase is one text of a golden file, encoded and decoded by tokenizers.js.
type goldenCase struct {
	Text        string   `json:"text"`
	IDs         []int    `json:"ids"`
	Tokens      []string `json:"tokens"`
	PlainIDs    []int    `json:"plain_ids"`
	PlainTokens []string `json:"plain_tokens"`
	Decoded     string   `json:"decoded"`
	DecodedSkip string   `json:"decoded_skip"`
}

func readGzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
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
	return data
}

// variant is an entry of variants.json: a vocabulary with some top-level keys of its
// tokenizer.json replaced.
type variant struct {
	Base  string                     `json:"base"`
	Patch map[string]json.RawMessage `json:"patch"`
}

// tokenizerFiles caches the tokenizer.json of each case, base vocabularies being large.
var tokenizerFiles sync.Map

// tokenizerJSON is the tokenizer.json of a golden case: a vocabulary of testdata, or a variant.
func tokenizerJSON(t testing.TB, name string) []byte {
	t.Helper()
	if data, ok := tokenizerFiles.Load(name); ok {
		return data.([]byte)
	}
	var variants map[string]variant
	raw, err := os.ReadFile(filepath.Join(testdata, "variants.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &variants); err != nil {
		t.Fatal(err)
	}
	v, ok := variants[name]
	if !ok {
		data := readGzip(t, filepath.Join(testdata, name+".json.gz"))
		tokenizerFiles.Store(name, data)
		return data
	}
	var file map[string]json.RawMessage
	if err := json.Unmarshal(tokenizerJSON(t, v.Base), &file); err != nil {
		t.Fatal(err)
	}
	for k, p := range v.Patch {
		file[k] = p
	}
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	tokenizerFiles.Store(name, data)
	return data
}

// loadCase parses the tokenizer of a golden case.
func loadCase(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tok, err := Parse(tokenizerJSON(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// goldenNames are the golden cases in testdata.
func goldenNames(t testing.TB) []string {
	paths, err := filepath.Glob(filepath.Join(testdata, "*.golden.json.gz"))
	if err != nil || len(paths) < 4 {
		t.Fatalf("golden files: %v, %v", paths, err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".golden.json.gz"))
	}
	return names
}

// TestTokenizerGoldens encodes and decodes every text of every golden file and compares ids,
// tokens and decoded text with tokenizers.js's.
func TestTokenizerGoldens(t *testing.T) {
	for _, name := range goldenNames(t) {
		t.Run(name, func(t *testing.T) {
			var g struct{ Cases []goldenCase }
			if err := json.Unmarshal(readGzip(t, filepath.Join(testdata, name+".golden.json.gz")), &g); err != nil {
				t.Fatal(err)
			}
			tok := loadCase(t, name)
			skipped := 0
			for _, c := range g.Cases {
				encode, decode := divergent(name, c)
				if !encode || !decode {
					skipped++
				}
				checkCase(t, tok, c, encode, decode)
			}
			t.Logf("%d texts, %d of them compared only in part (known differences of tokenizers.js from Hugging Face tokenizers)", len(g.Cases), skipped)
		})
	}
}

// divergent says which of a golden case's encoding and decoding tokenizers.js gets the way
// Hugging Face tokenizers (Rust) does, and so are compared; package tokenizer follows the Rust
// library where the two differ, and TestRustBehavior checks it there.
//
//   - The Metaspace pre-tokenizer with split cuts the text before every '▁' (MergedWithNext), so
//     that "a   b" is "▁a", "▁", "▁", "▁b"; tokenizers.js keeps a run of '▁' together.
//   - The Metaspace decoder drops every '▁' of the first token (unless the prepend scheme is
//     never); tokenizers.js drops only a leading one.
func divergent(name string, c goldenCase) (encode, decode bool) {
	encode, decode = true, true
	if name == "mistral-metaspace-always-split" && strings.Contains(c.Text, "  ") {
		encode = false
	}
	if name == "mistral-metaspace-first" {
		for _, toks := range [][]string{c.Tokens, c.Tokens[min(1, len(c.Tokens)):]} { // with and without <s>
			if len(toks) > 0 && strings.Count(toks[0], "▁") > 1 {
				decode = false
			}
		}
	}
	return encode, decode
}

func checkCase(t *testing.T, tok *Tokenizer, c goldenCase, encode, decode bool) {
	t.Helper()
	for _, special := range []bool{true, false} {
		if !encode {
			break
		}
		wantIDs, wantTokens := c.IDs, c.Tokens
		if !special {
			wantIDs, wantTokens = c.PlainIDs, c.PlainTokens
		}
		e, err := tok.Encode(c.Text, special)
		if err != nil {
			t.Errorf("Encode(%q, %v): %v", c.Text, special, err)
			continue
		}
		if !slices.Equal(e.IDs, wantIDs) || !slices.Equal(e.Tokens, wantTokens) {
			t.Errorf("Encode(%q, %v):\n got  %v %q\n want %v %q", c.Text, special, e.IDs, e.Tokens, wantIDs, wantTokens)
		}
		checkOffsets(t, c.Text, e)
	}
	for _, skip := range []bool{false, true} {
		if !decode {
			break
		}
		want := c.Decoded
		if skip {
			want = c.DecodedSkip
		}
		got, err := tok.Decode(c.IDs, skip)
		if err != nil || got != want {
			t.Errorf("Decode(%v, %v) of %q = %q, %v; want %q", c.IDs, skip, c.Text, got, err, want)
		}
	}
}

// checkOffsets checks that the offsets lie in the text, start at the boundaries of characters,
// and do not go back.
func checkOffsets(t *testing.T, text string, e Encoding) {
	t.Helper()
	if len(e.Offsets) != len(e.IDs) {
		t.Fatalf("%q: %d offsets for %d ids", text, len(e.Offsets), len(e.IDs))
	}
	last := 0
	for i, o := range e.Offsets {
		if o == [2]int{} {
			continue // a special token of the post-processor
		}
		if o[0] < last || o[0] > o[1] || o[1] > len(text) {
			t.Errorf("%q: token %d %q: offsets %v out of order or range (previous start %d)", text, i, e.Tokens[i], o, last)
			return
		}
		last = o[0]
	}
}
