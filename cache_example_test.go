package mha_test

import (
	"fmt"
	"log"
	"math"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

// Decoding with a bfloat16 KV cache: a prompt of two positions is prefilled, then each step
// appends one key and value and attends the new query against everything cached. The last
// step gives what one SDPA call over all three positions gives for its last query (up to the
// bfloat16 rounding of K and V; these values are exact in bfloat16).
func ExampleSDPAContext_AttendCache() {
	kv, err := mha.NewKVCache(1, 1, 2, 1, 16, mha.CacheBFloat16) // B = Hkv = 1, D = 2, Dv = 1
	if err != nil {
		log.Fatal(err)
	}
	ctx := mha.NewSDPAContext()
	opt := &mha.SDPAOptions{Causal: mha.CausalBottomRight}
	var r mha.SDPAResult
	t := func(data []float32, shape ...int) *tensor.Tensor {
		x, err := tensor.FromData(data, shape...)
		if err != nil {
			log.Fatal(err)
		}
		return x
	}
	// Prefill: two queries [B Hq Tq D], two keys [B Hkv Tn D] and values [B Hkv Tn Dv].
	if err := ctx.AttendCache(&r, kv, t([]float32{1, 0, 0, 1}, 1, 1, 2, 2), t([]float32{1, 0, 0, 1}, 1, 1, 2, 2), t([]float32{1, 2}, 1, 1, 2, 1), opt); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("prefill: %d cached, out %.4f\n", kv.Len(), r.Out.Data)
	// One decode step: the newest query, key and value.
	if err := ctx.AttendCache(&r, kv, t([]float32{0, 1}, 1, 1, 1, 2), t([]float32{1, 1}, 1, 1, 1, 2), t([]float32{3}, 1, 1, 1, 1), opt); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("step: %d cached, out %.4f\n", kv.Len(), r.Out.Data)
	// Output:
	// prefill: 2 cached, out [1.0000 1.6698]
	// step: 3 cached, out [2.2033]
}

// A Llama-style layer — grouped K/V heads and rotary positions — decoding through its own KV
// cache: a prefill of three positions, then one at a time. The last step's output is Forward's
// on the whole sequence at that position.
func ExampleLayer_ForwardCache() {
	layer, err := mha.New(mha.Config{EmbedDim: 8, NumHeads: 4, NumKVHeads: 2, NoBias: true,
		Rotary: &mha.Rotary{Theta: 10000}, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	x := tensor.New(1, 4, 8) // [B, T, E]
	tensor.NewRNG(2).Normal(x, 1)
	full, err := layer.Forward(x, nil, nil, &mha.Options{Causal: true})
	if err != nil {
		log.Fatal(err)
	}
	kv, err := layer.NewKVCache(1, 4, mha.CacheFloat32)
	if err != nil {
		log.Fatal(err)
	}
	opt := &mha.Options{Causal: true}
	prompt := &tensor.Tensor{Shape: []int{1, 3, 8}, Data: x.Data[:3*8]}
	if _, err := layer.ForwardCache(kv, prompt, opt); err != nil {
		log.Fatal(err)
	}
	step, err := layer.ForwardCache(kv, &tensor.Tensor{Shape: []int{1, 1, 8}, Data: x.Data[3*8:]}, opt)
	if err != nil {
		log.Fatal(err)
	}
	diff := 0.0
	for i, v := range step.Data {
		diff = max(diff, math.Abs(float64(v-full.Output.Data[3*8+i])))
	}
	fmt.Println(kv.Len(), step.Shape, diff < 1e-5)
	// Output: 4 [1 1 8] true
}
