package mha

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
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
			{"bf16", Options{Compute: ComputeBFloat16}},
			{"bf16-causal", Options{Causal: true, Compute: ComputeBFloat16}},
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

// BenchmarkSDPA times the functional core at B = 1, Hq = 32 query heads over Hkv = 8 K/V heads
// (Llama-3-8B's grouping), D = 128, on all cores: full, bottom-right causal, and a sliding
// window of 256 keys to the left. It reports GFLOP/s of the work done (4·Tq·Tk·D·Hq for full
// attention; about half under the causal mask and 4·Tq·W·D·Hq in the window are not counted
// separately: the reported rate is always over the full count, so skipped tiles show as speed).
func BenchmarkSDPA(b *testing.B) {
	const hq, hkv, d = 32, 8, 128
	for _, t := range []int{1024, 4096} {
		for _, v := range []struct {
			name string
			opt  SDPAOptions
		}{
			{"full", SDPAOptions{}},
			{"causal", SDPAOptions{Causal: CausalBottomRight}},
			{"window256", SDPAOptions{Causal: CausalBottomRight, Window: &Window{Left: 256, Right: 0}}},
			{"causal+rotary", SDPAOptions{Causal: CausalBottomRight, Rotary: &Rotary{Theta: 500000}}},
			{"bf16", SDPAOptions{Compute: ComputeBFloat16}},
			{"bf16-causal", SDPAOptions{Causal: CausalBottomRight, Compute: ComputeBFloat16}},
		} {
			b.Run(fmt.Sprintf("T=%d/%s", t, v.name), func(b *testing.B) {
				rng := tensor.NewRNG(3)
				q, k, val := tensor.New(1, hq, t, d), tensor.New(1, hkv, t, d), tensor.New(1, hkv, t, d)
				rng.Normal(q, 1)
				rng.Normal(k, 1)
				rng.Normal(val, 1)
				var c SDPAContext
				var r SDPAResult
				if err := c.SDPAInto(&r, q, k, val, &v.opt); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					if err := c.SDPAInto(&r, q, k, val, &v.opt); err != nil {
						b.Fatal(err)
					}
				}
				flops := 4 * float64(t) * float64(t) * d * hq
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkSDPANormalizer times SDPA with each normalizer in issue 14's shape (H = 12, D = 64,
// T = 2048, random unit-variance inputs), against softmax: mha bench --gqa 12 --normalizer.
func BenchmarkSDPANormalizer(b *testing.B) {
	const h, t, d = 12, 2048, 64
	rng := tensor.NewRNG(3)
	q, k, v := tensor.New(1, h, t, d), tensor.New(1, h, t, d), tensor.New(1, h, t, d)
	rng.Normal(q, 1)
	rng.Normal(k, 1)
	rng.Normal(v, 1)
	for _, name := range []string{"softmax", "sparsemax", "entmax15", "entmax:1.3", "topk:32"} {
		b.Run(name, func(b *testing.B) {
			n, err := ParseNormalizer(name)
			if err != nil {
				b.Fatal(err)
			}
			opt := SDPAOptions{Normalizer: n}
			var c SDPAContext
			var r SDPAResult
			for b.Loop() {
				if err := c.SDPAInto(&r, q, k, v, &opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBF16BlockQ times the layer's bfloat16 forward at E = 768, H = 12, T = 2048 with
// query blocks of 64, 128 and 256 rows per attention task.
func BenchmarkBF16BlockQ(b *testing.B) {
	defer func(v int) { bf16BlockQ = v }(bf16BlockQ)
	l, err := New(Config{EmbedDim: 768, NumHeads: 12, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	x := tensor.New(1, 2048, 768)
	tensor.NewRNG(2).Normal(x, 1)
	opt := Options{Compute: ComputeBFloat16}
	var r Result
	for _, bq := range []int{64, 128, 256} {
		b.Run(fmt.Sprint(bq), func(b *testing.B) {
			bf16BlockQ = bq
			for b.Loop() {
				if err := l.ForwardInto(&r, x, nil, nil, &opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBF16Weights times the layer's bfloat16 forward at E = 768, H = 12, T = 2048 with the
// weights held in float32 (converted to bfloat16 as each projection task packs them) and in
// bfloat16 (LoadHalfStateDict: used as they are).
func BenchmarkBF16Weights(b *testing.B) {
	x := tensor.New(1, 2048, 768)
	tensor.NewRNG(2).Normal(x, 1)
	opt := Options{Compute: ComputeBFloat16}
	for _, half := range []bool{false, true} {
		b.Run(fmt.Sprintf("bf16weights=%v", half), func(b *testing.B) {
			l, err := New(Config{EmbedDim: 768, NumHeads: 12, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			if half {
				sd := map[string]*tensor.Half{}
				for name, p := range l.StateDict() {
					bits := make([]uint16, len(p.Data))
					kernel.EncodeBF16(bits, p.Data)
					if sd[name], err = tensor.HalfFromData(bits, tensor.BFloat16, p.Shape...); err != nil {
						b.Fatal(err)
					}
				}
				if err := l.LoadHalfStateDict(sd); err != nil {
					b.Fatal(err)
				}
			}
			var r Result
			if err := l.ForwardInto(&r, x, nil, nil, &opt); err != nil { // warm: scratch allocated
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := l.ForwardInto(&r, x, nil, nil, &opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBackward times one training step of the layer (ForwardTrain and Backward, the
// gradients of the input and every parameter) at E = 768, H = 12, B = 1 on all cores, as
// mha bench --backward does ("step"), and the backward alone after one ForwardTrain
// ("backward"). It reports GFLOP/s: the step's FLOPs counted as 3× the forward's (24·T·E² +
// 12·T²·E), the backward's as 2× (16·T·E² + 8·T²·E); the Q·Kᵀ the backward recomputes is not
// counted.
func BenchmarkBackward(b *testing.B) {
	const e, h = 768, 12
	for _, t := range []int{512, 1024, 2048} {
		for _, v := range []struct {
			name string
			opt  Options
		}{
			{"step", Options{}},
			{"backward", Options{}},
			{"causal-step", Options{Causal: true}},
		} {
			b.Run(fmt.Sprintf("T=%d/%s", t, v.name), func(b *testing.B) {
				l, err := New(Config{EmbedDim: e, NumHeads: h, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				x, dy := tensor.New(1, t, e), tensor.New(1, t, e)
				tensor.NewRNG(2).Normal(x, 1)
				tensor.NewRNG(3).Normal(dy, 1)
				var r Result
				var s Saved
				var g Grads
				step := v.name != "backward"
				if err := l.ForwardTrain(&r, &s, x, nil, nil, &v.opt); err != nil {
					b.Fatal(err)
				}
				if err := l.Backward(&g, &s, dy); err != nil { // warm: scratch allocated
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					if step {
						if err := l.ForwardTrain(&r, &s, x, nil, nil, &v.opt); err != nil {
							b.Fatal(err)
						}
					}
					if err := l.Backward(&g, &s, dy); err != nil {
						b.Fatal(err)
					}
				}
				fwd := 8*float64(t)*e*e + 4*float64(t)*float64(t)*e
				mult := 3.0
				if !step {
					mult = 2
				}
				b.ReportMetric(mult*fwd*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkSDPASparse times SDPA with a random block map in issue 14's shape (H = 12, D = 64,
// T = 16384, blocks of 64 × 64) at densities 1/64, 1/16 and 1/4: each query block keeps
// 256·density distinct key blocks, as cmd/mha/benchscripts/random_blocks.py draws them. The time
// should fall in proportion to the density (BENCHMARKS.md, v8 and v13).
func BenchmarkSDPASparse(b *testing.B) {
	const h, t, d, nb = 12, 16384, 64, 256
	rng := tensor.NewRNG(3)
	q, k, v := tensor.New(1, h, t, d), tensor.New(1, h, t, d), tensor.New(1, h, t, d)
	rng.Normal(q, 1)
	rng.Normal(k, 1)
	rng.Normal(v, 1)
	for _, frac := range []int{64, 16, 4} {
		b.Run(fmt.Sprintf("1of%d", frac), func(b *testing.B) {
			blocks := tensor.NewBool(nb, nb)
			r := rand.New(rand.NewPCG(uint64(frac), 0))
			for qb := range nb {
				for _, kb := range r.Perm(nb)[:nb/frac] {
					blocks.Data[qb*nb+kb] = true
				}
			}
			opt := SDPAOptions{Patterns: []Pattern{{Kind: PatternBlocks, Blocks: blocks}}}
			var c SDPAContext
			var res SDPAResult
			for b.Loop() {
				if err := c.SDPAInto(&res, q, k, v, &opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
