package nn

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

// TestForwardCached checks generation's path: a prefill and then steps of one or more tokens
// through the cache give, at every step, the logits of a Forward of the whole sequence so far,
// for every family and cache dtype.
func TestForwardCached(t *testing.T) {
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3} // 2 sequences of 8
	const b, n = 2, 8
	for name, cfg := range hfConfigs() {
		for _, dtype := range []mha.CacheDType{mha.CacheFloat32, mha.CacheBFloat16} {
			t.Run(fmt.Sprintf("%s/%v", name, dtype), func(t *testing.T) {
				m, err := NewModel(cfg)
				if err != nil {
					t.Fatal(err)
				}
				c, err := m.NewCache(b, n, dtype)
				if cfg.Bidirectional {
					if err == nil {
						t.Error("NewCache accepted a bidirectional model")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				tol := 1e-5
				if dtype != mha.CacheFloat32 {
					tol = 2e-2 // keys and values rounded to bfloat16
				}
				checkCachedSteps(t, m, c, tokens, b, n, []int{3, 1, 2, 1, 1}, tol)
				if _, err := m.ForwardCached(c, []int{1, 2}, b, 1, nil); err == nil {
					t.Error("a full cache took another position")
				}
			})
		}
	}
}

// checkCachedSteps runs tokens [b, n] through the empty cache c in steps of the given lengths
// (summing to n) and checks each step's logits against those positions of a Forward of the
// sequences so far, within tol relative.
func checkCachedSteps(t *testing.T, m *Model, c *Cache, tokens []int, b, n int, steps []int, tol float64) {
	t.Helper()
	v := m.Config().Vocab
	for _, step := range steps {
		start := c.Len()
		part := make([]int, 0, b*step)
		for bb := range b {
			part = append(part, tokens[bb*n+start:bb*n+start+step]...)
		}
		got, err := m.ForwardCached(c, part, b, step, nil)
		if err != nil {
			t.Fatalf("positions %d to %d: %v", start, start+step-1, err)
		}
		got = got.Clone()
		prefix := make([]int, 0, b*(start+step))
		for bb := range b {
			prefix = append(prefix, tokens[bb*n:bb*n+start+step]...)
		}
		full, err := m.Forward(prefix, b, start+step, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, 0, len(got.Data))
		for bb := range b {
			want = append(want, f64(full.Data[(bb*(start+step)+start)*v:(bb+1)*(start+step)*v])...)
		}
		if e := tensor.RelError(got.Data, want); e > tol {
			t.Errorf("positions %d to %d: relative error %.3g against Forward, want ≤ %g", start, start+step-1, e, tol)
		}
	}
}

// TestNewCacheSparse checks that a model with sparse attention, which a KV cache does not
// compute, gets no cache.
func TestNewCacheSparse(t *testing.T) {
	for _, sparse := range []Config{{Patterns: []string{"local:2"}}, {Normalizer: "entmax15"}} {
		cfg := hfConfigs()["llama"]
		cfg.Patterns, cfg.Normalizer = sparse.Patterns, sparse.Normalizer
		if !cfg.sparseAttention() {
			t.Errorf("patterns %q, normalizer %q: sparseAttention is false", cfg.Patterns, cfg.Normalizer)
		}
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.NewCache(1, 4, mha.CacheFloat32); err == nil {
			t.Errorf("patterns %q, normalizer %q: NewCache gave a cache", cfg.Patterns, cfg.Normalizer)
		}
	}
	if cfg := hfConfigs()["llama"]; cfg.sparseAttention() {
		t.Error("a dense model's sparseAttention is true")
	}
	if cfg := (Config{Normalizer: "softmax"}); cfg.sparseAttention() {
		t.Error("the softmax normalizer counts as sparse")
	}
}

// TestForwardCachedBFloat16 checks ForwardCached with RunOptions.Compute bfloat16: a prompt's
// logits within bfloat16's rounding of the float32 ones but not equal to them (its products ran
// in bfloat16; on a CPU without AVX512_BF16, equal), the same bits from a model of bfloat16
// weights as from the float32 model of their values, and from 1 and 3 workers; Forward and an
// unknown compute type are refused.
func TestForwardCachedBFloat16(t *testing.T) {
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3} // 2 sequences of 8
	const b, n = 2, 8
	for name, cfg := range hfConfigs() {
		if cfg.Bidirectional {
			continue
		}
		t.Run(name, func(t *testing.T) {
			half, full := halfPair(t, cfg, tensor.BFloat16)
			logits := func(m *Model, opt RunOptions) []float32 {
				t.Helper()
				c, err := m.NewCache(b, n, mha.CacheFloat32)
				if err != nil {
					t.Fatal(err)
				}
				y, err := m.ForwardCached(c, tokens, b, n, &opt)
				if err != nil {
					t.Fatal(err)
				}
				return y.Clone().Data
			}
			want := logits(full, RunOptions{})
			got := logits(full, RunOptions{Compute: mha.ComputeBFloat16, Workers: 1})
			e := tensor.RelError(got, f64(want))
			t.Logf("relative error of bfloat16 products: %.3g", e)
			switch {
			case mha.ComputeBFloat16.Effective() != mha.ComputeBFloat16:
				if !bitsEqual(got, want) { // no AVX512_BF16: float32
					t.Errorf("bfloat16 where the CPU computes it in float32: relative error %.3g, want the float32 bits", e)
				}
			case e > 3e-2 || bitsEqual(got, want):
				t.Errorf("relative error %.3g against float32, want > 0 and ≤ 3e-2", e)
			}
			if h := logits(half, RunOptions{Compute: mha.ComputeBFloat16, Workers: 3}); !bitsEqual(h, got) {
				t.Error("bfloat16 weights on 3 workers gave other bits than their float32 values on 1")
			}
			if again := logits(full, RunOptions{}); !bitsEqual(again, want) {
				t.Error("a float32 call after a bfloat16 one gave other bits")
			}
			if _, err := full.Forward(tokens, b, n, &RunOptions{Compute: mha.ComputeBFloat16}); err == nil || !strings.Contains(err.Error(), "Forward computes in float32") {
				t.Errorf("Forward in bfloat16: error %v", err)
			}
			c, err := full.NewCache(b, n, mha.CacheFloat32)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := full.ForwardCached(c, tokens, b, n, &RunOptions{Compute: 7}); err == nil || !strings.Contains(err.Error(), "compute type") {
				t.Errorf("compute type 7: error %v", err)
			}
		})
	}
}

// TestForwardCachedShared checks that ForwardCached computes every block in the model's one set
// of shared buffers: after it, the blocks of a model that never ran Forward hold none of their
// own, and its logits still match Forward's, pre-norm, post-norm and attention-only.
func TestForwardCachedShared(t *testing.T) {
	cfgs := hfConfigs()
	attnOnly := cfgs["gpt2"]
	attnOnly.AttnOnly, attnOnly.Layers, attnOnly.FFN, attnOnly.Activation = true, 3, 0, ""
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}
	for name, cfg := range map[string]Config{"llama": cfgs["llama"], "mixed": cfgs["mixed"], "attn-only": attnOnly, "gemma3": cfgs["gemma3"]} {
		t.Run(name, func(t *testing.T) {
			m, err := NewModel(cfg)
			if err != nil {
				t.Fatal(err)
			}
			c, err := m.NewCache(2, 8, mha.CacheFloat32)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.ForwardCached(c, tokens[:12], 2, 6, nil); err != nil {
				t.Fatal(err)
			}
			for l, b := range m.blocks {
				own := b.sum1 != nil || b.sum2 != nil || b.ln1.y != nil || b.step.Output != nil
				if f, ok := b.ffn.(*mlp); ok {
					own = own || f.in.y != nil || f.out.y != nil || f.act.y != nil || f.act.gate != nil || b.ln2.y != nil
				}
				if own {
					t.Errorf("block %d holds buffers of its own after ForwardCached", l)
				}
			}
			if m.shared.sum1 == nil || m.shared.step.Output == nil {
				t.Error("the shared buffers are empty after ForwardCached")
			}
			c.Reset()
			checkCachedSteps(t, m, c, tokens, 2, 8, []int{5, 1, 2}, 1e-5)
		})
	}
}

// TestForwardCachedLastLogits checks RunOptions.LastLogits: each sequence's last logits [B, 1,
// Vocab], those of the full call's last positions within float32 rounding, in a prompt and in a
// step, and in a LongRoPE model's call that passes the original length (and recomputes the
// cache); Forward refuses it.
func TestForwardCachedLastLogits(t *testing.T) {
	for name, steps := range map[string][][2]int{"llama": {{0, 5}, {5, 6}}, "phi3_longrope": {{0, 3}, {3, 5}}} {
		t.Run(name, func(t *testing.T) { checkLastLogits(t, hfConfigs()[name], steps) })
	}
}

// checkLastLogits runs the steps [from, to) of LastLogits' checks on a model for cfg: a prompt
// of from positions, then the step.
func checkLastLogits(t *testing.T, cfg Config, stepList [][2]int) {
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8} // 2 sequences of 6
	const b, v = 2, 11
	for _, steps := range stepList {
		t0, t1 := steps[0], steps[1]
		var part []int
		for bb := range b {
			part = append(part, tokens[bb*6+t0:bb*6+t1]...)
		}
		var got, want []float32
		for _, last := range []bool{false, true} {
			c, err := m.NewCache(b, 6, mha.CacheFloat32)
			if err != nil {
				t.Fatal(err)
			}
			if t0 > 0 {
				var prompt []int
				for bb := range b {
					prompt = append(prompt, tokens[bb*6:bb*6+t0]...)
				}
				if _, err := m.ForwardCached(c, prompt, b, t0, nil); err != nil {
					t.Fatal(err)
				}
			}
			y, err := m.ForwardCached(c, part, b, t1-t0, &RunOptions{LastLogits: last})
			if err != nil {
				t.Fatal(err)
			}
			if c.Len() != t1 {
				t.Errorf("Len() = %d after positions up to %d", c.Len(), t1)
			}
			if !last {
				n := t1 - t0
				for bb := range b {
					want = append(want, y.Data[((bb+1)*n-1)*v:(bb+1)*n*v]...)
				}
				continue
			}
			if !slices.Equal(y.Shape, []int{b, 1, v}) {
				t.Fatalf("LastLogits: shape %v, want [%d 1 %d]", y.Shape, b, v)
			}
			got = y.Data
		}
		if e := tensor.RelError(got, f64(want)); e > 1e-5 {
			t.Errorf("positions %d…%d: last logits %.3g from the full call's", t0, t1-1, e)
		}
	}
	if _, err := m.Forward(tokens, b, 6, &RunOptions{LastLogits: true}); err == nil {
		t.Error("Forward took LastLogits")
	}
}
