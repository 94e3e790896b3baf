package pretrained_test

import (
	"fmt"
	"log"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
)

// Open a Hugging Face folder (here a tiny random Llama in bfloat16, sharded in two files), encode
// a text with its tokenizer and run it: logits [B, T, vocab] and every layer's attention.
func ExampleOpen() {
	m, err := pretrained.Open("../testdata/pretrained/llama3-bf16")
	if err != nil {
		log.Fatal(err)
	}
	enc, err := m.Tokenizer.Encode("the cat", true)
	if err != nil {
		log.Fatal(err)
	}
	logits, err := m.NN.Forward(enc.IDs, 1, len(enc.IDs), &nn.RunOptions{KeepWeights: true})
	if err != nil {
		log.Fatal(err)
	}
	cfg := m.NN.Config()
	fmt.Println(m.Architecture, m.Family, enc.Tokens)
	fmt.Println(logits.Shape, m.NN.Weights(0).Shape, cfg.Heads, cfg.KVHeads, cfg.Rope.Scaling != nil)
	// Output:
	// LlamaForCausalLM llama [<s> ▁the ▁ c a t]
	// [1 6 295] [1 4 6 6] 4 1 true
}
