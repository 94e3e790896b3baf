package nn

import (
	"fmt"
	"testing"

	"github.com/mhalab/mha"
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

// BenchmarkMoEForward times a prefill (ForwardCached, the last position's logits) of T tokens through a decoder whose feed-forward networks
// are a mixture of 8 SwiGLU experts, 2 a token (moe), against the same decoder with one dense
// SwiGLU network twice an expert's width (dense): the same multiply-adds per token, a quarter
// of the experts' weights read per token.
func BenchmarkMoEForward(b *testing.B) {
	const d, f, t = 512, 1024, 512
	base := Config{Vocab: 1000, SeqLen: t, DModel: d, Heads: 8, Layers: 4, Norm: PreNorm, Positions: NoPositions,
		NormKind: RMSNorm, Activation: SwiGLU, NoMLPBias: true, NoAttnBias: true, Rope: &Rope{Theta: 10000}}
	moe, dense := base, base
	moe.FFN, moe.Experts, moe.ExpertsPerToken, moe.NormTopK = f, 8, 2, true
	dense.FFN = 2 * f
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"dense", dense}, {"moe", moe}} {
		b.Run(c.name, func(b *testing.B) {
			m, err := NewModel(c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			rng := tensor.NewRNG(1)
			tokens := make([]int, t)
			for i := range tokens {
				tokens[i] = int(rng.Float64() * float64(base.Vocab))
			}
			cache, err := m.NewCache(1, t, mha.CacheFloat32)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				cache.Reset()
				if _, err := m.ForwardCached(cache, tokens, 1, t, &RunOptions{LastLogits: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(t)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
