package nn

import (
	"fmt"
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
