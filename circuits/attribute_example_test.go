package circuits_test

import (
	"fmt"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/models"
)

// The shipped induction model reads BOS 5 9 2 14 7 5 9 2 and should continue with 14, the token
// that followed 2 the first time. Direct logit attribution says which heads write 14 (against
// 7, another token of the sequence) into the last position's logits.
func ExampleAttribute() {
	m, _, err := models.Open("induction")
	if err != nil {
		panic(err)
	}
	bos := m.Config().Vocab - 2
	tokens := []int{bos, 5, 9, 2, 14, 7, 5, 9, 2}
	a, err := circuits.Attribute(m, tokens, circuits.Metric{Target: 14, Foil: 7, Position: len(tokens) - 1}, 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("LD %.2f, sum of the parts %.2f\n", a.LD, a.Sum())
	fmt.Printf("embed %.2f\n", a.Embed)
	for l, heads := range a.Heads {
		fmt.Printf("layer %d heads", l)
		for _, v := range heads {
			fmt.Printf(" %6.2f", v)
		}
		fmt.Printf("   bias %.2f\n", a.AttnBias[l])
	}
	fmt.Printf("bias terms (final norm's β, head bias) %.2f\n", a.NormBias+a.HeadBias)
	// Output:
	// LD 11.39, sum of the parts 11.39
	// embed -1.53
	// layer 0 heads  -0.42   0.30   0.11  -0.27   bias 0.03
	// layer 1 heads   4.94   6.15   1.23   1.00   bias 0.02
	// bias terms (final norm's β, head bias) -0.15
}

// The logit lens of the same sequence: what the stream predicts after the embeddings, after
// layer 0 and after layer 1 (the model's own prediction), at the last position.
func ExampleLogitLens() {
	m, _, err := models.Open("induction")
	if err != nil {
		panic(err)
	}
	bos := m.Config().Vocab - 2
	tokens := []int{bos, 5, 9, 2, 14, 7, 5, 9, 2}
	targets := make([]int, len(tokens))
	for i := range targets {
		targets[i] = -1
	}
	targets[len(tokens)-1] = 14
	lens, err := circuits.LogitLens(m, tokens, &circuits.LensOptions{K: 3, Targets: targets, Workers: 1})
	if err != nil {
		panic(err)
	}
	last := len(tokens) - 1
	for l, top := range lens.Top {
		fmt.Printf("layer %d:", l)
		for _, p := range top[last] {
			fmt.Printf(" %d (%.2f)", p.Token, p.Prob)
		}
		t := lens.Targets[l][last]
		fmt.Printf("; 14 is ranked %d (%.2f)\n", t.Rank, t.Prob)
	}
	// Output:
	// layer 0: 22 (0.30) 1 (0.24) 9 (0.08); 14 is ranked 29 (0.00)
	// layer 1: 9 (0.99) 23 (0.00) 7 (0.00); 14 is ranked 17 (0.00)
	// layer 2: 14 (1.00) 0 (0.00) 23 (0.00); 14 is ranked 0 (1.00)
}
