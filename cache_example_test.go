package mha_test

import (
	"fmt"
	"log"

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
