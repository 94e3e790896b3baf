package mha

import (
	"fmt"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// BenchmarkForward times self-attention at E = 768, H = 12, B = 1 (the speed issue's shape) and
// reports GFLOP/s with FLOPs = 8·T·E² + 4·T²·E.
func BenchmarkForward(b *testing.B) {
	const e, h = 768, 12
	l, err := New(Config{EmbedDim: e, NumHeads: h, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []int{128, 512} {
		b.Run(fmt.Sprintf("T=%d", t), func(b *testing.B) {
			x := tensor.New(1, t, e)
			tensor.NewRNG(2).Normal(x, 1)
			flops := 8*float64(t)*e*e + 4*float64(t)*float64(t)*e
			for b.Loop() {
				if _, err := l.Forward(x, nil, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
