package mha_test

import (
	"fmt"
	"log"
	"math"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

// Grouped-query attention with your own projections: two query heads share one K/V head, the
// queries are the newest two of three positions (bottom-right causal, as with a KV cache), and
// head 1 has an attention sink that takes part of the mass.
func ExampleSDPA() {
	q, _ := tensor.FromData([]float32{
		1, 0, 0, 1, // head 0: queries 0 and 1, D = 2
		0, 1, 1, 1, // head 1
	}, 1, 2, 2, 2) // [B Hq Tq D]
	k, _ := tensor.FromData([]float32{1, 0, 0, 1, 1, 1}, 1, 1, 3, 2) // [B Hkv Tk D]
	v, _ := tensor.FromData([]float32{1, 2, 3}, 1, 1, 3, 1)          // [B Hkv Tk Dv]
	r, err := mha.SDPA(q, k, v, &mha.SDPAOptions{
		Causal:  mha.CausalBottomRight, // query i sees keys j ≤ i + Tk − Tq
		Sinks:   []float32{float32(math.Inf(-1)), 0},
		NeedLSE: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("out", r.Out.Shape)
	for i, x := range r.Out.Data {
		fmt.Printf("head %d query %d: out %.4f lse %.4f\n", i/2, i%2, x, r.LSE.Data[i])
	}
	// Output:
	// out [1 2 2 1]
	// head 0 query 0: out 1.3302 lse 1.1079
	// head 0 query 1: out 2.2033 lse 1.6206
	// head 1 query 0: out 1.2552 lse 1.3933
	// head 1 query 1: out 2.0093 lse 2.2159
}
