package circuits_test

import (
	"fmt"
	"log"
	"math"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/nn"
)

// Patch a small model's heads and residual stream from a clean prompt into a corrupted one that
// differs at position 2, with the logit difference of tokens 3 and 9 at the last position as
// the metric.
func ExamplePatch() {
	m, err := nn.NewModel(nn.Config{Vocab: 16, SeqLen: 8, DModel: 16, Heads: 4, Layers: 2, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	clean, corrupt := []int{1, 2, 3, 4, 5}, []int{1, 2, 9, 4, 5}
	mt := circuits.Metric{Target: 3, Foil: 9, Position: 4}
	res, err := circuits.Patch(m, clean, corrupt, mt, circuits.PatchOptions{Residual: true, Patterns: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("heads %d × %d, patterns %d × %d, residual %d × %d\n",
		len(res.Heads), len(res.Heads[0]), len(res.Patterns), len(res.Patterns[0]), len(res.Residual), len(res.Residual[0]))
	fmt.Printf("the clean stream at the output, position 4: %.2f\n", res.Residual[2][4])
	fmt.Printf("the clean embedding at position 2: %.2f\n", res.Residual[0][2])
	fmt.Println("the clean embedding at position 0 changes nothing:", math.Abs(res.Residual[0][0]) < 1e-4)
	// Output:
	// heads 2 × 4, patterns 2 × 4, residual 3 × 5
	// the clean stream at the output, position 4: 1.00
	// the clean embedding at position 2: 1.00
	// the clean embedding at position 0 changes nothing: true
}
