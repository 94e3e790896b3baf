package circuits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// PatchOptions choose what Patch computes and how. The zero value patches every head's output
// on GOMAXPROCS goroutines.
type PatchOptions struct {
	// Workers bounds the goroutines each forward pass runs on; 0 means GOMAXPROCS. The results
	// do not depend on it.
	Workers int
	// NoHeads leaves out head-output patching (PatchResult.Heads).
	NoHeads bool
	// Residual adds residual-stream patching (PatchResult.Residual).
	Residual bool
	// Patterns adds attention-pattern patching (PatchResult.Patterns).
	Patterns bool
	// Batch is the number of patched runs that one forward pass computes side by side; 0 picks
	// the most whose buffers (nn.Config.ForwardBytes) fit in 256 MiB, at least 1.
	Batch int
	// Context, when not nil, stops Patch between two batches once it is done (a server's
	// request deadline); Patch then returns its error.
	Context context.Context
}

// PatchResult is what Patch measures. A normalised score is
//
//	(LD_patched − LD_corrupt) / (LD_clean − LD_corrupt)
//
// 1 when the patch restores the clean run's logit difference, 0 when it changes nothing. The
// grids left out by PatchOptions are nil.
type PatchResult struct {
	// LDClean and LDCorrupt are the metric on the clean and on the corrupted prompt.
	LDClean, LDCorrupt float64
	// Heads is [Layers][Heads]: the score of the corrupted run with head h of layer l's output
	// z_h = A_h·V_h (before the output projection) replaced, at every position, by its value in
	// the clean run.
	Heads [][]float64
	// Residual is [Layers+1][T]: the score of the corrupted run with the residual stream entering
	// block l (row Layers: the last block's output, before the final normalisation) replaced at
	// one position by the clean run's (nn.Model.Residual).
	Residual [][]float64
	// Patterns is [Layers][Heads]: the score of the corrupted run with head h of layer l
	// attending with the clean run's weights: z_h = A_h(clean)·V_h(corrupted), where V_h is the
	// corrupted run's values of the K/V head that h reads (with grouped K/V heads, KV head
	// ⌊h·Hkv/H⌋; other heads sharing it keep their own weights). The patched head's output
	// replaces its own at every position.
	Patterns [][]float64
	// HeadsLD, ResidualLD and PatternsLD are the raw metrics LD_patched of the same patches, in
	// the same shapes.
	HeadsLD, ResidualLD, PatternsLD [][]float64
}

// patchBytes bounds the buffers of one batched forward when PatchOptions.Batch is 0.
const patchBytes = 256 << 20

// Patch measures activation patching (Meng et al. 2022; Wang et al. 2022) of model m on two
// prompts of the same length T, clean and corrupt (token ids in [0, Vocab)), with metric mt,
// whose Position is in [0, T): the metric on each prompt, and the normalised effect of patching
// each head's output, each position of the residual stream and each head's attention pattern
// from the clean run into the corrupted one (see PatchResult). The patched runs go through m in
// batches of PatchOptions.Batch sequences, one patch per sequence. In a causal model the
// positions after mt.Position do not change the metric: Patch runs the prompts up to it only,
// and scores the residual stream after it 0.
//
// Patch runs m's Forward: m must not be in use by another goroutine, and its last forward is
// one of the patched batches afterwards. It returns an error when the prompts are empty or of
// different lengths, longer than the model's seq_len, hold a token outside the vocabulary, the
// metric does not fit the model or the prompts, or the metric is the same on both prompts
// (LD_clean = LD_corrupt, where no score is defined), or is not finite; and, wrapping the
// context's error, when PatchOptions.Context is done before the last batch.
func Patch(m *nn.Model, clean, corrupt []int, mt Metric, opt PatchOptions) (*PatchResult, error) {
	if m == nil {
		return nil, errors.New("circuits: nil model")
	}
	switch {
	case len(clean) != len(corrupt):
		return nil, fmt.Errorf("circuits: clean prompt has %d tokens, corrupted %d; want the same length", len(clean), len(corrupt))
	case len(clean) == 0:
		return nil, errors.New("circuits: the prompts are empty; want at least one token")
	case opt.Batch < 0:
		return nil, fmt.Errorf("circuits: batch %d, want ≥ 1 (or 0 to choose)", opt.Batch)
	}
	if err := mt.check(m, len(clean)); err != nil {
		return nil, err
	}
	c := m.Config()
	tFull := len(clean)
	t := tFull
	if !c.Bidirectional {
		t = mt.Position + 1 // later positions cannot reach the metric under causal attention
	}
	p := &patcher{m: m, cfg: c, ac: c.Attention(), mt: mt, t: t, workers: opt.Workers}
	p.corrupt = corrupt[:t]
	res := new(PatchResult)

	// The clean run: its head outputs, weights and residual stream.
	logits, err := m.Forward(clean[:t], 1, t, &nn.RunOptions{Workers: opt.Workers, KeepHeads: true, KeepWeights: opt.Patterns})
	if err != nil {
		return nil, fmt.Errorf("circuits: clean prompt: %w", err)
	}
	res.LDClean = mt.ld(logits.Data, 0, t, c.Vocab)
	L := c.Layers
	heads, weights, resid := make([][]float32, L), make([][]float32, L), make([][]float32, L+1)
	for l := range L {
		heads[l] = slices.Clone(m.Heads(l).Data)
		if opt.Patterns {
			weights[l] = slices.Clone(m.Weights(l).Data)
		}
	}
	if opt.Residual {
		for l := range L + 1 {
			resid[l] = slices.Clone(m.Residual(l).Data)
		}
	}

	// The corrupted run: the metric, and the values for pattern patching.
	logits, err = m.Forward(p.corrupt, 1, t, &nn.RunOptions{Workers: opt.Workers})
	if err != nil {
		return nil, fmt.Errorf("circuits: corrupted prompt: %w", err)
	}
	res.LDCorrupt = mt.ld(logits.Data, 0, t, c.Vocab)
	diff := res.LDClean - res.LDCorrupt
	switch {
	case math.IsNaN(diff) || math.IsInf(diff, 0):
		return nil, fmt.Errorf("circuits: the metric is %v on the clean prompt and %v on the corrupted one, want finite values", res.LDClean, res.LDCorrupt)
	case diff == 0:
		return nil, fmt.Errorf("circuits: the metric is %v on both prompts: they do not differ on it, so no patch can be scored", res.LDClean)
	}
	var patterns [][]float32 // [L][T, E]: A(clean)·V(corrupted), each head in its columns
	if opt.Patterns {
		patterns = make([][]float32, L)
		for l := range L {
			v, err := values(m, l, m.AttnInput(l).Data, t)
			if err != nil {
				return nil, err
			}
			patterns[l] = mixHeads(p.ac, weights[l], v, t)
		}
	}

	// The patched runs, one per job.
	var jobs []job
	if !opt.NoHeads {
		for l := range L {
			for h := range c.Heads {
				jobs = append(jobs, job{kind: kindHeads, layer: l, pos: h, src: heads[l]})
			}
		}
	}
	if opt.Patterns {
		for l := range L {
			for h := range c.Heads {
				jobs = append(jobs, job{kind: kindPatterns, layer: l, pos: h, src: patterns[l]})
			}
		}
	}
	if opt.Residual {
		for l := range L + 1 {
			for pos := range t {
				jobs = append(jobs, job{kind: kindResidual, layer: l, pos: pos, src: resid[l][pos*c.DModel:][:c.DModel]})
			}
		}
	}
	batch := opt.Batch
	if batch == 0 {
		batch = 1
		for batch < len(jobs) && c.ForwardBytes(2*batch, t, false) <= patchBytes {
			batch *= 2
		}
	}
	lds := make([]float64, len(jobs))
	for i := 0; i < len(jobs); i += batch {
		if opt.Context != nil {
			if err := opt.Context.Err(); err != nil {
				return nil, fmt.Errorf("circuits: patching stopped after %d of %d runs: %w", i, len(jobs), err)
			}
		}
		chunk := jobs[i:min(i+batch, len(jobs))]
		if err := p.run(chunk, lds[i:]); err != nil {
			return nil, err
		}
	}

	// The grids.
	grid := func(rows, cols int) [][]float64 {
		g := make([][]float64, rows)
		for r := range g {
			g[r] = make([]float64, cols)
		}
		return g
	}
	if !opt.NoHeads {
		res.Heads, res.HeadsLD = grid(L, c.Heads), grid(L, c.Heads)
	}
	if opt.Patterns {
		res.Patterns, res.PatternsLD = grid(L, c.Heads), grid(L, c.Heads)
	}
	if opt.Residual {
		res.Residual, res.ResidualLD = grid(L+1, tFull), grid(L+1, tFull)
		for _, row := range res.ResidualLD {
			for pos := t; pos < tFull; pos++ {
				row[pos] = res.LDCorrupt
			}
		}
	}
	for i, j := range jobs {
		var score, raw [][]float64
		switch j.kind {
		case kindHeads:
			score, raw = res.Heads, res.HeadsLD
		case kindPatterns:
			score, raw = res.Patterns, res.PatternsLD
		default:
			score, raw = res.Residual, res.ResidualLD
		}
		raw[j.layer][j.pos] = lds[i]
		score[j.layer][j.pos] = (lds[i] - res.LDCorrupt) / diff
	}
	return res, nil
}

// Kinds of patch.
const (
	kindHeads = iota
	kindPatterns
	kindResidual
)

// job is one patched run: head pos of layer (kindHeads, kindPatterns), its columns of src [T, E]
// replacing the head's output; or the residual stream entering layer at position pos replaced by
// src [E] (kindResidual).
type job struct {
	kind, layer, pos int
	src              []float32
}

// patcher runs batches of patched corrupted prompts.
type patcher struct {
	m       *nn.Model
	cfg     nn.Config
	ac      mha.Config
	mt      Metric
	t       int
	workers int
	corrupt []int // [t]
}

// run computes the metric of every job of chunk, one sequence each, into lds.
func (p *patcher) run(chunk []job, lds []float64) error {
	b, t, qd, nh := len(chunk), p.t, p.ac.InnerDim(), p.cfg.Heads // qd: the heads' outputs side by side
	tokens := make([]int, 0, b*t)
	for range b {
		tokens = append(tokens, p.corrupt...)
	}
	opt := &nn.RunOptions{Workers: p.workers}
	for i, j := range chunk {
		if j.kind == kindResidual {
			opt.Patches = append(opt.Patches, nn.ResidualPatch{Layer: j.layer, Batch: i, Pos: j.pos, Value: j.src})
			continue
		}
		for len(opt.Heads) <= j.layer {
			opt.Heads = append(opt.Heads, mha.HeadOptions{})
		}
		ho := &opt.Heads[j.layer]
		if ho.Gate == nil {
			ho.Gate, ho.Add = tensor.New(b, nh), tensor.New(b, t, qd)
			for k := range ho.Gate.Data {
				ho.Gate.Data[k] = 1
			}
		}
		ho.Gate.Data[i*nh+j.pos] = 0
		o, w := p.ac.HeadOffset(j.pos), p.ac.HeadDim(j.pos)
		for pos := range t {
			copy(ho.Add.Data[(i*t+pos)*qd+o:][:w], j.src[pos*qd+o:][:w])
		}
	}
	logits, err := p.m.Forward(tokens, b, t, opt)
	if err != nil {
		return fmt.Errorf("circuits: patched runs: %w", err)
	}
	for i := range chunk {
		lds[i] = p.mt.ld(logits.Data, i, t, p.cfg.Vocab)
	}
	return nil
}

// values returns the values V = x·W_Vᵀ + b_V [T, KVDim] of block l's attention for its input x
// [T, E] (nn.Model.AttnInput of one sequence), from the fused in_proj_weight (rows H·d+KVDim …
// H·d+2·KVDim, H·d = InnerDim) or a separate v_proj_weight, and in_proj_bias's last KVDim
// values, in float32 or half precision. Rotary embeddings and qk-norm change queries and keys
// only, so V needs neither.
func values(m *nn.Model, l int, x []float32, t int) ([]float32, error) {
	c := m.Config()
	e, qd, ekv := c.DModel, c.Attention().InnerDim(), c.Attention().KVDim()
	prefix := blockParam(l, "attn.")
	w, off := m.Param(prefix+"in_proj_weight"), qd+ekv
	bias := m.Param(prefix + "in_proj_bias")
	if w == nil {
		w, off = m.Param(prefix+"v_proj_weight"), 0 // PyTorch's layout with kdim/vdim: in_proj_bias stays fused
	}
	if w == nil {
		return nil, fmt.Errorf("circuits: block %d's attention has neither in_proj_weight nor v_proj_weight", l)
	}
	wv := make([]float32, ekv*e)
	if h := w.Half; h != nil {
		kernel.DecodeHalf(wv, h.Data[off*e:][:ekv*e], h.Format == tensor.BFloat16)
	} else {
		copy(wv, w.Value.Data[off*e:][:ekv*e])
	}
	var bv []float32
	if bias != nil {
		bt := bias.Float32()
		if len(bt.Data) >= qd+2*ekv {
			bv = bt.Data[qd+ekv:][:ekv]
		}
	}
	v := make([]float32, t*ekv)
	for s := range t {
		row := x[s*e:][:e]
		for j := range ekv {
			var sum float64
			wr := wv[j*e:][:e]
			for k, xv := range row {
				sum += float64(xv) * float64(wr[k])
			}
			if bv != nil {
				sum += float64(bv[j])
			}
			v[s*ekv+j] = float32(sum)
		}
	}
	return v, nil
}

// kvOffset returns the first column of the K/V head that query head h reads, in V [T, KVDim].
func kvOffset(ac mha.Config, h int) int {
	if ac.KVHeads() == ac.NumHeads {
		return ac.HeadOffset(h)
	}
	return ac.KVHead(h) * ac.HeadDim(0)
}

// mixHeads returns every head's output A_h·V_{kv(h)} [T, H·d] (head h in columns HeadOffset(h)
// …; H·d = InnerDim) for weights a [1, H, T, T] and values v [T, KVDim].
func mixHeads(ac mha.Config, a, v []float32, t int) []float32 {
	e, ekv := ac.InnerDim(), ac.KVDim()
	z := make([]float32, t*e)
	for h := range ac.NumHeads {
		o, d, ko := ac.HeadOffset(h), ac.HeadDim(h), kvOffset(ac, h)
		ah := a[h*t*t:][:t*t]
		for q := range t {
			for i := range d {
				var sum float64
				for s := range t {
					sum += float64(ah[q*t+s]) * float64(v[s*ekv+ko+i])
				}
				z[q*e+o+i] = float32(sum)
			}
		}
	}
	return z
}
