package tokenizer_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mhalab/mha/tokenizer"
)

// A tiny byte-level BPE tokenizer in the format of GPT-2's tokenizer.json: the ByteLevel
// pre-tokenizer spells a space 'Ġ', and the merges build "Hello" and "Ġworld".
const tinyGPT2 = `{
  "added_tokens": [{"id": 21, "content": "<|endoftext|>", "special": true}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
  "decoder": {"type": "ByteLevel"},
  "model": {
    "type": "BPE",
    "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "!": 8,
              "He": 9, "ll": 10, "Hell": 11, "Hello": 12, "Ġw": 13, "or": 14, "Ġwor": 15,
              "ld": 16, "Ġworld": 17, "<|endoftext|>": 21},
    "merges": ["H e", "l l", "He ll", "Hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"]
  }
}`

func Example() {
	dir, err := os.MkdirTemp("", "tokenizer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, []byte(tinyGPT2), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	tok, err := tokenizer.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	text := "Hello world!<|endoftext|>"
	enc, err := tok.Encode(text, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, id := range enc.IDs {
		o := enc.Offsets[i]
		fmt.Printf("%2d %-15q %q\n", id, enc.Tokens[i], text[o[0]:o[1]])
	}
	back, err := tok.Decode(enc.IDs, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q\n", back)
	// Output:
	// 12 "Hello"         "Hello"
	// 17 "Ġworld"        " world"
	//  8 "!"             "!"
	// 21 "<|endoftext|>" "<|endoftext|>"
	// "Hello world!"
}
