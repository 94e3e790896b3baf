package mha

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// BenchmarkForward times self-attention at E = 768, H = 12, B = 1 (the speed issue's shape) on
// all cores. It reports GFLOP/s with FLOPs = 8·T·E² + 4·T²·E (the same count for causal, so the
// skipped tiles show as speed) and scratch-MiB: the memory the first call allocates beyond its
// output, which later calls reuse.
func BenchmarkForward(b *testing.B) {
	const e, h = 768, 12
	for _, t := range []int{128, 512, 1024, 2048} {
		for _, v := range []struct {
			name string
			opt  Options
		}{
			{"tiled", Options{}},
			{"causal", Options{Causal: true}},
			{"weights", Options{NeedWeights: true}},
		} {
			b.Run(fmt.Sprintf("T=%d/%s", t, v.name), func(b *testing.B) {
				l, err := New(Config{EmbedDim: e, NumHeads: h, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				x := tensor.New(1, t, e)
				tensor.NewRNG(2).Normal(x, 1)
				var r Result
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				if err := l.ForwardInto(&r, x, nil, nil, &v.opt); err != nil {
					b.Fatal(err)
				}
				runtime.ReadMemStats(&after)
				scratch := after.TotalAlloc - before.TotalAlloc - 4*uint64(len(r.Output.Data))
				for b.Loop() {
					if err := l.ForwardInto(&r, x, nil, nil, &v.opt); err != nil {
						b.Fatal(err)
					}
				}
				flops := 8*float64(t)*e*e + 4*float64(t)*float64(t)*e
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(float64(scratch)/(1<<20), "scratch-MiB")
			})
		}
	}
}
