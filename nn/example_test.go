package nn_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/mhalab/mha/nn"
)

// Train a small pre-norm decoder to continue the sequence 0 1 2 … (mod 10), save it with its
// optimizer state, and load it back.
func Example() {
	cfg := nn.Config{Vocab: 10, SeqLen: 8, DModel: 16, Heads: 2, Layers: 2, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 1}
	m, err := nn.NewModel(cfg)
	if err != nil {
		log.Fatal(err)
	}
	opt, err := nn.NewAdamW(m.Params(), nn.AdamWConfig{})
	if err != nil {
		log.Fatal(err)
	}
	const b, t = 10, 8 // every start 0 … 9
	tokens, targets := make([]int, b*t), make([]int, b*t)
	for i := range tokens {
		tokens[i] = (i/t + i%t) % 10
		targets[i] = (tokens[i] + 1) % 10
	}
	var first, last float64
	for step := range 60 {
		if _, err := m.Forward(tokens, b, t, &nn.RunOptions{Training: true, Seed: uint64(step)}); err != nil {
			log.Fatal(err)
		}
		loss, _, _, err := m.Loss(targets, nil)
		if err != nil {
			log.Fatal(err)
		}
		nn.ZeroGrads(m.Params())
		if err := m.Backward(); err != nil {
			log.Fatal(err)
		}
		if err := opt.Step(1e-2); err != nil {
			log.Fatal(err)
		}
		if step == 0 {
			first = loss
		}
		last = loss
	}
	fmt.Printf("loss at step 0 above 2: %v; at step 59 below 0.05: %v\n", first > 2, last < 0.05)

	dir, err := os.MkdirTemp("", "nn-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	if err := nn.Save(path, m, map[string]string{"task": "count", "step": "60"}, opt.State()); err != nil {
		log.Fatal(err)
	}
	loaded, meta, extra, err := nn.Load(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d parameters, task %s, step %s, %d optimizer tensors\n", loaded.NumParams(), meta["task"], meta["step"], len(extra))
	fmt.Printf("%+v\n", loaded.Config())
	// Output:
	// loss at step 0 above 2: true; at step 59 below 0.05: true
	// 7050 parameters, task count, step 60, 61 optimizer tensors
	// {Vocab:10 SeqLen:8 DModel:16 Heads:2 Layers:2 FFN:64 Norm:pre Positions:learned AttnOnly:false Dropout:0 Seed:1 HeadDims:[] HeadScales:[] HeadSize:0 NormKind: NormEps:0 Activation: NoMLPBias:false NoHeadBias:false TieEmbeddings:false TypeVocab:0 EmbNorm:false EmbScale:0 HeadTransform:false KVHeads:0 Rope:<nil> NoAttnBias:false QKNorm:false QKNormAcross:false Bidirectional:false Window:0 Local:<nil> NoRope:[] SandwichNorm:false NoInputNorm:false ParallelResidual:false SharedNorm:false AttnSoftcap:0 LogitSoftcap:0 Experts:0 ExpertsPerToken:0 NormTopK:false SharedExpert:0 Patterns:[] Block:[] Normalizer:}
}

// A Llama-like configuration: RMSNorm, SwiGLU without biases, no position embedding and a head
// tied to the token embedding; its parameters under their names.
func ExampleConfig_llama() {
	cfg := nn.Config{Vocab: 32, SeqLen: 16, DModel: 8, Heads: 2, Layers: 1, FFN: 24, Norm: nn.PreNorm, Positions: nn.NoPositions,
		NormKind: nn.RMSNorm, NormEps: 1e-6, Activation: nn.SwiGLU, NoMLPBias: true, NoHeadBias: true, TieEmbeddings: true}
	m, err := nn.NewModel(cfg)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range m.Params() {
		fmt.Println(p.Name, p.Value.Shape)
	}
	// Output:
	// tok_emb.weight [32 8]
	// blocks.0.ln1.weight [8]
	// blocks.0.attn.in_proj_weight [24 8]
	// blocks.0.attn.in_proj_bias [24]
	// blocks.0.attn.out_proj.weight [8 8]
	// blocks.0.attn.out_proj.bias [8]
	// blocks.0.ln2.weight [8]
	// blocks.0.ffn.gate_proj.weight [24 8]
	// blocks.0.ffn.up_proj.weight [24 8]
	// blocks.0.ffn.down_proj.weight [8 24]
	// ln_f.weight [8]
}

// A BERT-like embedding: token types (BERT's token_type_ids) are passed with each Forward.
func ExampleRunOptions_tokenTypes() {
	cfg := nn.Config{Vocab: 30, SeqLen: 8, DModel: 8, Heads: 2, Layers: 1, Norm: nn.PostNorm, Positions: nn.Learned,
		NormEps: 1e-12, TypeVocab: 2, EmbNorm: true}
	m, err := nn.NewModel(cfg)
	if err != nil {
		log.Fatal(err)
	}
	tokens := []int{2, 7, 9, 3, 12, 5} // [CLS] a b [SEP] c [SEP]
	types := []int{0, 0, 0, 0, 1, 1}
	logits, err := m.Forward(tokens, 1, 6, &nn.RunOptions{TokenTypes: types})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(logits.Shape)
	_, err = m.Forward(tokens, 1, 6, &nn.RunOptions{TokenTypes: []int{0, 0, 0, 0, 1, 2}})
	fmt.Println(err)
	// Output:
	// [1 6 30]
	// nn: token type 2 at position 5 (batch 0, step 5) is outside [0, 2)
}
