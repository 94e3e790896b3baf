package nn

import (
	"fmt"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// BenchmarkTrainStep times one forward, loss and backward pass (no optimizer step) of a small
// decoder, per batch of B sequences of T tokens.
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct{ d, heads, layers, t, batch int }{
		{64, 4, 2, 32, 32},
		{128, 4, 4, 64, 32},
	} {
		cfg := Config{Vocab: 32, SeqLen: c.t, DModel: c.d, Heads: c.heads, Layers: c.layers, Norm: PreNorm, Positions: Learned}
		b.Run(fmt.Sprintf("d%d_L%d_T%d_B%d", c.d, c.layers, c.t, c.batch), func(b *testing.B) {
			m, err := NewModel(cfg)
			if err != nil {
				b.Fatal(err)
			}
			rng := tensor.NewRNG(1)
			tokens := make([]int, c.batch*c.t)
			for i := range tokens {
				tokens[i] = int(rng.Float64() * float64(cfg.Vocab))
			}
			for b.Loop() {
				if _, err := m.Forward(tokens, c.batch, c.t, &RunOptions{Training: true}); err != nil {
					b.Fatal(err)
				}
				if _, _, _, err := m.Loss(tokens, nil); err != nil {
					b.Fatal(err)
				}
				if err := m.Backward(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
