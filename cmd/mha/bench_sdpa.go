package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/tensor"
)

// mha bench's attention-core modes (--gqa, --window, --decode): mha.SDPA, or a decode step
// against mha.KVCache, on random q, k, v [B, H or Hkv, T, E/H], with no projections.

// cacheDTypes are the cache types --decode times, each as its own implementation mha-<name>.
var cacheDTypes = []struct {
	name  string
	dtype mha.CacheDType
}{{"f32", mha.CacheFloat32}, {"bf16", mha.CacheBFloat16}, {"f16", mha.CacheFloat16}}

// sdpa reports whether cfg times the attention core rather than the layer.
func (c *benchConfig) sdpa() bool { return c.kvHeads > 0 }

// headDim is D = E/H.
func (c *benchConfig) headDim() int { return c.embed / c.heads }

// sdpaFlops is the work of one call of the core at sequence (or cache) length t: 4·D·H·B per
// visible (query, key) pair. Full and causal attention count T² pairs (causal in full, as the
// layer's count does); a window counts the pairs it lets through, Σ_i min(i + 1, W + 1), and
// sparse patterns the pairs they keep (c.pairs, under the causal mask or window when there is
// one), so that the rate says how close the kernel comes to O(T·W) or O(T·s) work; a decode
// step counts its one query against the keys it reads (decodeKeys).
func (c *benchConfig) sdpaFlops(t int) float64 {
	pairs := float64(t) * float64(t)
	switch {
	case c.decode:
		pairs = float64(c.decodeKeys(t))
	case c.pairs != nil:
		return 4 * float64(c.headDim()) * float64(c.batch) * c.pairs[t]
	case c.window > 0:
		w := min(c.window, t-1) + 1 // the most keys a query sees; W + 1 overflows for W = MaxInt
		pairs = float64(w)*float64(t) - float64(w)*float64(w-1)/2
	}
	return 4 * float64(c.headDim()) * float64(c.heads) * float64(c.batch) * pairs
}

// decodeKeys is how many of a cache of t ≥ 1 tokens a decode step's query sees: all of them,
// or the W + 1 last under a window of W.
func (c *benchConfig) decodeKeys(t int) int {
	if c.window > 0 {
		return min(c.window, t-1) + 1 // W + 1 overflows for W = MaxInt
	}
	return t
}

// cacheBytes is what a decode step against a cache of t tokens must read: the keys and values
// its query sees.
func (c *benchConfig) cacheBytes(t int, dtype mha.CacheDType) float64 {
	return float64(c.decodeKeys(t)) * float64(c.kvHeads) * 2 * float64(c.headDim()) * float64(dtype.Size()) * float64(c.batch)
}

// sdpaMode describes the mode for the table's header.
func (c *benchConfig) sdpaMode() string {
	if c.decode {
		s := fmt.Sprintf("decode (mha.KVCache, AttendCache): one new token against a cache of T tokens, Hq=%d Hkv=%d D=%d B=%d", c.heads, c.kvHeads, c.headDim(), c.batch)
		if c.window > 0 {
			s += fmt.Sprintf(", sliding window W=%d (FLOPs and bytes count the W+1 keys it reads)", c.window)
		}
		return s
	}
	s := fmt.Sprintf("attention core (mha.SDPA, no projections): Hq=%d Hkv=%d D=%d B=%d", c.heads, c.kvHeads, c.headDim(), c.batch)
	switch {
	case c.window > 0:
		s += fmt.Sprintf(", causal sliding window W=%d", c.window)
	case c.causal:
		s += ", causal (bottom-right)"
	}
	if len(c.sparse.patterns) > 0 {
		s += fmt.Sprintf(", patterns %v", c.sparse.patterns)
	}
	if c.sparse.normalizer != "softmax" {
		s += ", normalizer " + c.sparse.normalizer
	}
	switch {
	case len(c.sparse.patterns) > 0 && (c.causal || c.window > 0):
		s += " (FLOPs count the pairs the patterns keep under the mask; rows of dense attention, its pairs)"
	case len(c.sparse.patterns) > 0:
		s += " (FLOPs count the pairs the patterns keep; rows of dense attention, every pair)"
	case c.window > 0:
		s += " (FLOPs count the pairs the window lets through)"
	case c.causal:
		s += " (FLOPs count every pair)"
	}
	return s
}

// cacheDType returns the cache type named by the worker's --cache-dtype.
func cacheDType(name string) (mha.CacheDType, error) {
	for _, d := range cacheDTypes {
		if d.name == name {
			return d.dtype, nil
		}
	}
	return 0, fmt.Errorf("--cache-dtype is %q, want f32, bf16 or f16", name)
}

// newSDPABenchCall returns the call to time in the core's modes at sequence (or cache) length t.
// A decode call appends one token to a cache prefilled with t − 1, so the cache grows by one per
// call, as it does while a model decodes.
func newSDPABenchCall(cfg *benchConfig, t int) (benchCall, error) {
	d, rng := cfg.headDim(), tensor.NewRNG(benchInputSeed)
	random := func(shape ...int) *tensor.Tensor {
		x := tensor.New(shape...)
		rng.Normal(x, 1)
		return x
	}
	ctx := mha.NewSDPAContext()
	var r mha.SDPAResult
	opt := &mha.SDPAOptions{Workers: cfg.threads, Compute: cfg.compute}
	if cfg.causal || cfg.window > 0 || cfg.decode {
		opt.Causal = mha.CausalBottomRight
	}
	if cfg.window > 0 {
		opt.Window = &mha.Window{Left: cfg.window, Right: 0}
	}
	var err error
	if opt.Patterns, opt.Block, opt.Normalizer, err = cfg.sparse.parse(); err != nil {
		return benchCall{}, err
	}
	if !cfg.decode {
		q, k, v := random(cfg.batch, cfg.heads, t, d), random(cfg.batch, cfg.kvHeads, t, d), random(cfg.batch, cfg.kvHeads, t, d)
		return benchCall{run: func() error { return ctx.SDPAInto(&r, q, k, v, opt) }, reset: func() {}}, nil
	}
	dtype, err := cacheDType(cfg.cacheDType)
	if err != nil {
		return benchCall{}, err
	}
	kv, err := mha.NewKVCache(cfg.batch, cfg.kvHeads, d, d, t+cfg.warmup+cfg.runs, dtype)
	if err != nil {
		return benchCall{}, err
	}
	none := tensor.New(cfg.batch, cfg.heads, 0, d)
	if err := ctx.AttendCache(&r, kv, none, random(cfg.batch, cfg.kvHeads, t-1, d), random(cfg.batch, cfg.kvHeads, t-1, d), opt); err != nil {
		return benchCall{}, err
	}
	q, k, v := random(cfg.batch, cfg.heads, 1, d), random(cfg.batch, cfg.kvHeads, 1, d), random(cfg.batch, cfg.kvHeads, 1, d)
	return benchCall{run: func() error { return ctx.AttendCache(&r, kv, q, k, v, opt) }, reset: func() {}}, nil
}

// sdpaArgs are the worker's flags of the core's modes.
func (c *benchConfig) sdpaArgs() []string {
	args := []string{"--gqa", strconv.Itoa(c.kvHeads)}
	if c.window > 0 {
		args = append(args, "--window", strconv.Itoa(c.window))
	}
	for _, p := range c.sparse.patterns {
		args = append(args, "--pattern", p)
	}
	if c.sparse.block != "" {
		args = append(args, "--block", c.sparse.block)
	}
	return append(args, "--normalizer", c.sparse.normalizer)
}

// sdpaImpls are mha's implementations in the core's modes: one (per compute type), with --dense
// the same without patterns and normalizer beside it (mha-dense), or one per cache type.
func sdpaImpls(cfg *benchConfig, worker func(args ...string) *exec.Cmd) []benchImpl {
	if !cfg.decode {
		impls := mhaImpls(cfg, worker)
		if cfg.dense {
			for _, im := range mhaImpls(cfg.denseConfig(), worker) {
				im.name = strings.Replace(im.name, "mha", "mha-dense", 1)
				impls = append(impls, im)
			}
		}
		return impls
	}
	var impls []benchImpl
	for _, d := range cacheDTypes {
		impls = append(impls, benchImpl{name: "mha-" + d.name, command: func(t int) *exec.Cmd {
			return worker(append(cfg.workerArgs(t), "--decode", strconv.Itoa(t), "--cache-dtype", d.name)...)
		}})
	}
	return impls
}

// torchSDPAImpl is PyTorch 1.13's eager equivalent of the core's modes, which it has no call for:
// K and V repeated per query head (repeat_interleave), then softmax(q·kᵀ/√D + mask)·v in float32,
// with the window as an explicit mask and a decode step as one query against the whole cache.
func torchSDPAImpl(python, dir string, cfg *benchConfig) benchImpl {
	return benchImpl{name: "torch-eager", command: func(t int) *exec.Cmd {
		args := append([]string{filepath.Join(dir, "torch_sdpa.py"), "--H", strconv.Itoa(cfg.heads),
			"--Hkv", strconv.Itoa(cfg.kvHeads), "--window", strconv.Itoa(cfg.window)}, cfg.scriptArgs(t)...)
		if cfg.causal {
			args = append(args, "--causal")
		}
		if cfg.decode {
			args = append(args, "--decode")
		}
		c := exec.Command(python, args...)
		c.Env = torchEnv(cfg.threads)
		return c
	}}
}

// denseConfig is cfg without its sparse patterns and normalizer: the dense softmax attention
// that --dense times beside them, under the same causal mask and window.
func (c *benchConfig) denseConfig() *benchConfig {
	d := *c
	d.sparse, d.pairs, d.dense = sparseFlags{normalizer: "softmax"}, nil, false
	return &d
}

// sparseRow reports whether implementation impl runs the sparse patterns: mha's own rows do;
// mha-dense and PyTorch's torch-eager (which has no patterns) run dense attention.
func (c *benchConfig) sparseRow(impl string) bool {
	return impl == "mha" || strings.HasPrefix(impl, "mha-") && !strings.HasPrefix(impl, "mha-dense")
}

// implFlops is the work of one call of implementation impl at sequence length t: flops, or
// dense attention's for a row that does not run the sparse patterns (sparseRow).
func (c *benchConfig) implFlops(impl string, t int) float64 {
	if c.pairs != nil && !c.sparseRow(impl) {
		return c.denseConfig().flops(t)
	}
	return c.flops(t)
}

// sdpaConfig checks the core's flags and puts them into cfg.
func (f *benchFlags) sdpaConfig(cfg *benchConfig) error {
	switch {
	case f.gqa < 0 || f.window < 0 || f.decode < 0:
		return fmt.Errorf("--gqa %d --window %d --decode %d: want 0 (off) or a positive number", f.gqa, f.window, f.decode)
	case f.backward || f.needWeights || f.ort:
		return fmt.Errorf("--gqa, --window and --decode time the attention core's forward: want them without --backward, --need-weights and --ort")
	case f.gqa > 0 && f.heads%f.gqa != 0:
		return fmt.Errorf("--gqa %d does not divide --heads %d, want a divisor of %d (each K/V head serves a group of query heads)", f.gqa, f.heads, f.heads)
	case f.decode > 0 && f.seqSet && !f.worker:
		return fmt.Errorf("--decode %d sets the cache length; want it without --seq", f.decode)
	}
	if _, err := cacheDType(f.cacheDType); err != nil {
		return err
	}
	patterns, block, _, err := f.sparse.parse()
	if err != nil {
		return err
	}
	if f.decode > 0 && (len(f.sparse.patterns) > 0 || f.sparse.normalizer != "softmax") {
		return fmt.Errorf("--decode times the KV cache, which takes no --pattern or --normalizer yet")
	}
	cfg.dense = f.dense && !f.worker
	cfg.kvHeads, cfg.window, cfg.cacheDType, cfg.sparse = f.heads, f.window, f.cacheDType, f.sparse
	if f.gqa > 0 {
		cfg.kvHeads = f.gqa
	}
	if f.decode > 0 {
		cfg.decode = true
		cfg.seqs = []int{f.decode}
	}
	if len(patterns) > 0 && !f.worker {
		cfg.pairs = map[int]float64{}
		for _, t := range cfg.seqs {
			n, err := keptPairs(patterns, block, cfg.heads, t, cfg.causal, cfg.window)
			if err != nil {
				return fmt.Errorf("--pattern at --seq %d: %w", t, err)
			}
			cfg.pairs[t] = n
		}
	}
	return nil
}

// keptPairs returns the (query, key) pairs of self-attention over t positions that patterns,
// laid out in blocks as SDPA lays them out, leave to the heads query heads, summed over the
// heads: those kept by a pattern and, with causal or a window of w keys back (w > 0, causal
// too), seen under the mask.
func keptPairs(patterns []mha.Pattern, block [2]int, heads, t int, causal bool, w int) (float64, error) {
	layouts, err := mha.SparseLayouts(patterns, block, heads, t, t)
	if err != nil {
		return 0, err
	}
	pairs := 0
	for _, s := range layouts {
		for b, kind := range s.Kinds {
			if kind == attend.Empty {
				continue
			}
			i0, j0 := b/s.NBK*s.BQ, b%s.NBK*s.BK
			for i := i0; i < min(i0+s.BQ, t); i++ {
				lo, hi := j0, min(j0+s.BK, t)
				if causal || w > 0 {
					hi = min(hi, i+1)
				}
				if w > 0 {
					lo = max(lo, i-w)
				}
				if kind == attend.Full {
					pairs += max(hi-lo, 0)
					continue
				}
				for j := lo; j < hi; j++ {
					if s.Keep(i, j) {
						pairs++
					}
				}
			}
		}
	}
	if len(layouts) == 1 {
		return float64(pairs) * float64(heads), nil
	}
	return float64(pairs), nil
}
