package tokenizer

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// steps is n copies of a JSON component, comma-separated.
func steps(n int, component string) string {
	return strings.TrimSuffix(strings.Repeat(component+",", n), ",")
}

// TestTokenizerGrowthBound checks that a normalizer, a pre-tokenizer or a decoder that grows
// text exponentially (each step doubles it) is an error once the text passes growthBound, not
// an out-of-memory crash, and that text at the bound is still made.
func TestTokenizerGrowthBound(t *testing.T) {
	const model = `"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}`
	doubleA := `{"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}`
	normalizer := func(n int) string {
		return `, "normalizer": {"type": "Sequence", "normalizers": [` + steps(n, doubleA) + `]}`
	}
	decoder := func(n int) string {
		return `, "decoder": {"type": "Sequence", "decoders": [` + steps(n, doubleA) + `]}`
	}
	encode := func(text string) func(*Tokenizer) error {
		return func(tok *Tokenizer) error {
			_, err := tok.Encode(text, false)
			return err
		}
	}
	decode := func(tok *Tokenizer) error {
		_, err := tok.Decode([]int{0}, false)
		return err
	}
	cases := []struct {
		name, file string
		run        func(*Tokenizer) error // nil: the error is Parse's
		want       string
	}{
		{"Replace", normalizer(40), encode("a"), "the normalizer grew the text from 1 to 2097152 bytes, past the bound of 1048576 bytes"},
		{"ByteLevel", `, "normalizer": {"type": "Sequence", "normalizers": [` + steps(40, `{"type": "ByteLevel"}`) + `]}`,
			encode("é"), "the normalizer grew the text from 2 to 2097152 bytes, past the bound of 1048576 bytes"},
		{"nested", `, "normalizer": {"type": "Sequence", "normalizers": [` + steps(20, `{"type": "Sequence", "normalizers": [`+doubleA+`, `+doubleA+`]}`) + `]}`,
			encode("a"), "the normalizer grew the text from 1 to 2097152 bytes"},
		// The bound is on the text of all the pieces between raw added tokens: the first "a"
		// makes 2¹⁹ bytes, counted as normalized and again as pre-tokenized, which leaves no
		// room for the next.
		{"pieces", normalizer(19) + `, "added_tokens": [{"id": 1, "content": "<x>"}]`,
			encode("a<x>a<x>a"), "the normalizer grew the text from 9 to 1048578 bytes, past the bound of 1048576 bytes"},
		{"pre-tokenizer", `, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [` + steps(40, `{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}`) + `]}`,
			encode("é"), "the pre-tokenizer grew the text from 2 to 1048578 bytes, past the bound of 1048576 bytes"},
		{"decoder", decoder(40), decode, "the decoder grew the text from 1 to 2097152 bytes, past the bound of 1048576 bytes"},
		{"added token", normalizer(40) + `, "added_tokens": [{"id": 1, "content": "a", "normalized": true}]`,
			nil, `added token "a": the normalizer grew the added tokens to 2097152 bytes, past the bound of 1048576 bytes`},
	}
	for _, c := range cases {
		tok, err := Parse([]byte(`{` + model + c.file + `}`))
		if c.run != nil {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			err = c.run(tok)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want one with %q", c.name, err, c.want)
		}
	}

	// One Replace by a long content multiplies the text in one step: it is sized before it is
	// made, so that refusing it allocates next to nothing (made, the 4 MB of text would take
	// 64 MB more of alignment).
	long := `{"type": "Replace", "pattern": {"String": "a"}, "content": "` + strings.Repeat("b", 4000) + `"}`
	for _, c := range []struct{ name, file string }{
		{"normalizer", `, "normalizer": ` + long},
		{"decoder", `, "decoder": ` + long},
	} {
		tok, err := Parse([]byte(`{` + model + c.file + `}`))
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if c.name == "decoder" {
			_, err = tok.Decode(slices.Repeat([]int{0}, 1000), false)
		} else {
			_, err = tok.Encode(strings.Repeat("a", 1000), false)
		}
		runtime.ReadMemStats(&after)
		if want := "grew the text from 1000 to 4000000 bytes, past the bound of 1048576 bytes"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("one long Replace, %s: got error %v, want one with %q", c.name, err, want)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("one long Replace, %s: refusing it allocated %d bytes, want under 1 MiB", c.name, n)
		}
	}

	// At the bound, 2²⁰ bytes from 1, the text is made.
	tok, err := Parse([]byte(`{` + model + decoder(20) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tok.Decode([]int{0}, false); err != nil || got != strings.Repeat("a", 1<<20) {
		t.Errorf("Decode with 20 doublings: got %d bytes, %v; want 1048576 bytes of a", len(got), err)
	}
	// An empty Sequence is still a decoder: the tokens are joined with nothing between them,
	// where without a decoder they are joined by spaces.
	for _, c := range []struct{ decoder, want string }{{`, "decoder": {"type": "Sequence", "decoders": []}`, "aa"}, {"", "a a"}} {
		tok, err := Parse([]byte(`{` + model + c.decoder + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tok.Decode([]int{0, 0}, false); err != nil || got != c.want {
			t.Errorf("decoder %q: Decode = %q, %v; want %q", c.decoder, got, err, c.want)
		}
	}
}

// TestTokenizerWordPieceLongWord checks that WordPiece, with a max_input_chars_per_word that
// lets a long word through, takes time in proportion to the word (it tried every end for every
// start, and so took hours on this word) and cuts it as before.
func TestTokenizerWordPieceLongWord(t *testing.T) {
	tok, err := Parse([]byte(`{"model": {"type": "WordPiece", "unk_token": "[UNK]", "max_input_chars_per_word": 1000000000,
		"vocab": {"[UNK]": 0, "a": 1, "##a": 2, "##é": 3, "éa": 4, "##ab": 5, "##ba": 6}}}`))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	e, err := tok.Encode(strings.Repeat("a", n), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.IDs) != n {
		t.Fatalf("got %d tokens, want %d", len(e.IDs), n)
	}
	for i, id := range e.IDs {
		if want := min(i, 1) + 1; id != want || e.Offsets[i] != [2]int{i, i + 1} {
			t.Fatalf("token %d: got %d at %v, want %d at [%d %d]", i, id, e.Offsets[i], want, i, i+1)
		}
	}
	// The longest entry, ending at a character's end, and [UNK] for a word with a part no entry
	// covers.
	for _, c := range []struct {
		word string
		want []int
	}{{"éaab", []int{4, 5}}, {"aéa", []int{1, 3, 2}}, {"aba", []int{1, 6}}, {"ab", []int{0}}, {"b", []int{0}}} {
		e, err := tok.Encode(c.word, false)
		if err != nil || fmt.Sprint(e.IDs) != fmt.Sprint(c.want) {
			t.Errorf("%q: got %v, %v; want %v", c.word, e.IDs, err, c.want)
		}
	}
}

// TestTokenizerUnigramLongPiece checks that Unigram, with a long piece in its vocabulary, looks
// at each start only as far as some piece goes on (it looked as far as the longest piece, and
// so took hours on this text), and still finds the long piece.
func TestTokenizerUnigramLongPiece(t *testing.T) {
	long := "a" + strings.Repeat("c", 39999)
	vocab := [][]any{{"<unk>", 0}, {"a", -1}, {"b", -1}, {long, -1}, {"bb", -2.5}}
	for i := range 200 {
		vocab = append(vocab, []any{fmt.Sprintf("p%d", i), -2})
	}
	data, err := json.Marshal(vocab)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(fmt.Appendf(nil, `{"model": {"type": "Unigram", "unk_id": 0, "vocab": %s}}`, data))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	e, err := tok.Encode(long+strings.Repeat("b", n), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.IDs) != n+1 || e.IDs[0] != 3 || e.Offsets[0] != [2]int{0, len(long)} {
		t.Fatalf("got %d tokens, the first %v at %v; want %d, the first 3 at [0 %d]", len(e.IDs), e.IDs[:1], e.Offsets[:1], n+1, len(long))
	}
	for i, id := range e.IDs[1:] {
		if id != 2 {
			t.Fatalf("token %d: got %d, want 2 (b)", i+1, id)
		}
	}
}

// TestTokenizerWhitespaceAddedTokens checks that added tokens of whitespace with lstrip or rstrip
// take time in proportion to the text (each took the whole run of whitespace before or after it
// again, and so the split took minutes on this text), and what they take.
func TestTokenizerWhitespaceAddedTokens(t *testing.T) {
	lstrip := &addedToken{Content: "\n", LStrip: true}
	rstrip := &addedToken{Content: "\n", RStrip: true}
	both := &addedToken{Content: "\n", LStrip: true, RStrip: true}
	for _, c := range []struct {
		tok  *addedToken
		text string
		want []segment
	}{
		{lstrip, " \n \n\n", []segment{{0, 2, lstrip}, {2, 4, lstrip}, {4, 5, lstrip}}},
		{lstrip, "a \n", []segment{{0, 1, nil}, {1, 3, lstrip}}},
		{rstrip, "\n \n\n a", []segment{{0, 5, rstrip}, {2, 5, rstrip}, {3, 5, rstrip}, {5, 6, nil}}},
		{both, "a \n \n", []segment{{0, 1, nil}, {1, 5, both}, {5, 5, both}}},
	} {
		got := newAddedMatcher([]matchable{{c.tok.Content, c.tok}}).split(c.text)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("lstrip %v, rstrip %v, %q: got %v, want %v", c.tok.LStrip, c.tok.RStrip, c.text, got, c.want)
		}
	}
	const n = 1 << 20
	text := strings.Repeat("\n", n)
	for _, tok := range []*addedToken{lstrip, rstrip} {
		segs := newAddedMatcher([]matchable{{"\n", tok}}).split(text)
		if len(segs) != n {
			t.Fatalf("lstrip %v: got %d segments, want %d", tok.LStrip, len(segs), n)
		}
		for i, s := range segs {
			want := segment{i, i + 1, tok}
			if tok.RStrip {
				want.end = n // each takes the newlines after it, as in Hugging Face tokenizers
			}
			if s != want {
				t.Fatalf("lstrip %v: segment %d: got %v, want %v", tok.LStrip, i, s, want)
			}
		}
	}
}

// TestTokenizerAddedInsideStrip checks an lstrip added token found inside the whitespace that
// an rstrip token before it took: Hugging Face tokenizers panics there ("AddedVocabulary bad
// split"); here the token keeps no text, as when its start meets its end, and the text after
// it is read as Hugging Face reads it when the token has no lstrip.
func TestTokenizerAddedInsideStrip(t *testing.T) {
	tok, err := Parse([]byte(`{"model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"},
		"added_tokens": [{"id": 2, "content": "\t", "lstrip": true, "rstrip": true}, {"id": 3, "content": " ", "lstrip": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := tok.Encode("\t  a", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 3, 3, 0}; fmt.Sprint(e.IDs) != fmt.Sprint(want) || fmt.Sprint(e.Offsets) != "[[0 3] [2 2] [2 3] [3 4]]" {
		t.Errorf("got %v at %v, want %v at [[0 3] [2 2] [2 3] [3 4]]", e.IDs, e.Offsets, want)
	}
}

// TestTokenizerNesting checks the nesting bound against what Hugging Face tokenizers reads
// (seen through its Node binding): 62 Sequences around a Replace, whose pattern object lies 127
// levels deep, parse and run; 63 around a Lowercase, or 62 around a Replace with an array in an
// array, reach a 128th level and are refused, as by serde_json's recursion limit; brackets and
// escaped quotes inside strings do not count.
func TestTokenizerNesting(t *testing.T) {
	nest := func(n int, leaf string) string {
		return `{"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "[UNK]": 2}, "unk_token": "[UNK]"}, "normalizer": ` +
			strings.Repeat(`{"type": "Sequence", "normalizers": [`, n) + leaf + strings.Repeat(`]}`, n) + `}`
	}
	tok, err := Parse([]byte(nest(62, `{"type": "Replace", "pattern": {"String": "[[\"{{"}, "content": "b"}`)))
	if err != nil {
		t.Fatalf("62 levels of Sequence: %v", err)
	}
	if got, err := tok.Encode(`[["{{`, false); err != nil || !slices.Equal(got.IDs, []int{1}) {
		t.Errorf(`Encode("[[\"{{") = %v, %v, want ids [1]`, got.IDs, err)
	}
	const want = "tokenizer: expected arrays and objects nested at most 127 levels deep, as Hugging Face tokenizers reads them, got a 128th level"
	for _, file := range []string{nest(63, `{"type": "Lowercase"}`), nest(62, `{"type": "Replace", "pattern": {"String": "a"}, "content": [[]]}`)} {
		if _, err := Parse([]byte(file)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%.60s…) = %v, want an error starting %q", file, err, want)
		}
	}
}
