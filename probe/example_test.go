package probe_test

import (
	"fmt"

	"github.com/mhalab/mha/probe"
)

// Two heads over one sequence of four tokens: head 0 always attends to the previous token,
// head 1 spreads its weight evenly over the keys it can see.
func ExamplePrevToken() {
	const b, h, t = 1, 2, 4
	w := []float32{
		// head 0: query t attends to key t−1 (query 0 to itself)
		1, 0, 0, 0,
		1, 0, 0, 0,
		0, 1, 0, 0,
		0, 0, 1, 0,
		// head 1: uniform causal attention
		1, 0, 0, 0,
		1.0 / 2, 1.0 / 2, 0, 0,
		1.0 / 3, 1.0 / 3, 1.0 / 3, 0,
		1.0 / 4, 1.0 / 4, 1.0 / 4, 1.0 / 4,
	}
	scores, err := probe.PrevToken(w, b, h, t, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Head 1 scores (1/2 + 1/3 + 1/4)/3 = 13/36.
	fmt.Printf("previous-token scores: %.4f\n", scores)
	// Output:
	// previous-token scores: [1.0000 0.3611]
}
