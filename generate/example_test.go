package generate_test

import (
	"context"
	"fmt"
	"log"

	"github.com/mhalab/mha/generate"
	"github.com/mhalab/mha/pretrained"
)

// Continue a prompt greedily with a Hugging Face folder (a tiny random GPT-2): the prompt runs
// once, then each token goes through every layer's KV cache.
func ExampleRun() {
	m, err := pretrained.Open("../testdata/pretrained/gpt2")
	if err != nil {
		log.Fatal(err)
	}
	enc, err := m.Tokenizer.Encode("the cat", true)
	if err != nil {
		log.Fatal(err)
	}
	res, err := generate.Run(context.Background(), m.NN, enc.IDs, generate.Options{MaxTokens: 5, Stop: m.EOS}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(enc.IDs), len(res.Tokens) <= 5)
	// Output: 6 true
}
