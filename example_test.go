package mha_test

import (
	"fmt"
	"log"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// A self-attention layer with PyTorch's defaults: E = 512, H = 8.
func ExampleNew() {
	layer, err := mha.New(mha.Config{EmbedDim: 512, NumHeads: 8, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("parameters:", layer.NumParams()) // 4·E² + 4·E
	for _, p := range layer.Parameters() {
		fmt.Println(p.Name, p.T.Shape)
	}
	// Output:
	// parameters: 1050624
	// in_proj_weight [1536 512]
	// in_proj_bias [1536]
	// out_proj.weight [512 512]
	// out_proj.bias [512]
}

// Causal self-attention over a batch, with a padding mask and the per-head weights.
func ExampleLayer_Forward() {
	layer, err := mha.New(mha.Config{EmbedDim: 8, NumHeads: 2, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	x := tensor.New(2, 3, 8) // [B, T, E]
	tensor.NewRNG(2).Normal(x, 1)
	pad := tensor.NewBool(2, 3)                        // [B, Tk], true = padding
	pad.Data[1*3+2] = true                             // the last token of the second sequence is padding
	r, err := layer.Forward(x, nil, nil, &mha.Options{ // key, value nil: self-attention
		KeyPaddingMask: pad,
		Causal:         true,
		NeedWeights:    true,
		PerHeadWeights: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("output", r.Output.Shape, "weights", r.Weights.Shape)
	fmt.Printf("batch 0, head 0, query 0: %.2f\n", r.Weights.Data[:3])
	fmt.Println("fully masked rows:", r.FullyMasked)
	// Output:
	// output [2 3 8] weights [2 2 3 3]
	// batch 0, head 0, query 0: [1.00 0.00 0.00]
	// fully masked rows: 0
}

// A serving loop: ForwardInto reuses the result's memory, so after the first call a forward makes
// no heap allocation. Workers bounds the goroutines one call uses.
func ExampleLayer_ForwardInto() {
	layer, err := mha.New(mha.Config{EmbedDim: 64, NumHeads: 4, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	x := tensor.New(1, 100, 64)
	var r mha.Result
	for step := range 3 {
		tensor.NewRNG(uint64(step)).Normal(x, 1) // the next batch
		if err := layer.ForwardInto(&r, x, nil, nil, &mha.Options{Causal: true, Workers: 2}); err != nil {
			log.Fatal(err)
		}
		fmt.Println(step, r.Output.Shape)
	}
	// Output:
	// 0 [1 100 64]
	// 1 [1 100 64]
	// 2 [1 100 64]
}

// Loading a PyTorch checkpoint: torch's state_dict saved with safetensors.torch.save_file.
func ExampleLayer_LoadStateDict() {
	// Here the file is made in memory; with a real one, use safetensors.ReadFile(path).
	src, _ := mha.New(mha.Config{EmbedDim: 4, NumHeads: 2, Seed: 3})
	file := map[string]safetensors.Tensor{}
	for name, t := range src.StateDict() {
		file[name] = safetensors.FromFloat32(t)
	}
	data, err := safetensors.Encode(file, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Parse(data)
	if err != nil {
		log.Fatal(err)
	}
	sd := map[string]*tensor.Tensor{}
	for _, name := range f.Names() {
		if sd[name], err = f.Float32(name); err != nil {
			log.Fatal(err)
		}
	}
	cfg, err := mha.InferConfig(sd, 2) // E, kdim, vdim, bias, add_bias_kv from names and shapes
	if err != nil {
		log.Fatal(err)
	}
	layer, err := mha.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := layer.LoadStateDict(sd); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("E=%d H=%d bias=%v params=%d\n", cfg.EmbedDim, cfg.NumHeads, !cfg.NoBias, layer.NumParams())
	// Output:
	// E=4 H=2 bias=true params=80
}

// One training step of a layer by hand: ForwardTrain keeps what Backward needs, Backward adds
// the gradients of the loss (here L = Σ output², so dL/doutput = 2·output) into a Grads, and
// plain gradient descent updates the parameters.
func ExampleLayer_Backward() {
	layer, err := mha.New(mha.Config{EmbedDim: 8, NumHeads: 2, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	x := tensor.New(2, 5, 8) // [B, T, E]
	tensor.NewRNG(2).Normal(x, 1)
	var (
		r     mha.Result
		saved mha.Saved
		grads mha.Grads
	)
	loss := func() float64 {
		if err := layer.ForwardTrain(&r, &saved, x, nil, nil, &mha.Options{Causal: true}); err != nil {
			log.Fatal(err)
		}
		s := 0.0
		for _, y := range r.Output.Data {
			s += float64(y * y)
		}
		return s
	}
	for step := range 3 {
		l := loss()
		dy := r.Output.Clone()
		for i := range dy.Data {
			dy.Data[i] *= 2
		}
		grads.Zero()
		if err := layer.Backward(&grads, &saved, dy); err != nil {
			log.Fatal(err)
		}
		for i, p := range layer.Parameters() {
			for j, g := range grads.Params[i].T.Data {
				p.T.Data[j] -= 0.01 * g
			}
		}
		fmt.Printf("step %d: loss %.3f\n", step, l)
	}
	fmt.Println("dL/dx:", grads.Query.Shape, "dL/d"+grads.Params[0].Name+":", grads.Params[0].T.Shape)
	// Output:
	// step 0: loss 9.314
	// step 1: loss 2.907
	// step 2: loss 1.808
	// dL/dx: [2 5 8] dL/din_proj_weight: [24 8]
}
