package lab

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/viz"
)

// Bounds on a request's sparse attention, so that compiling it stays cheap: the patterns are
// compiled for every layer of every run.
const (
	maxPatterns      = 8    // patterns in a request
	maxPatternLength = 200  // characters of one pattern
	maxBlock         = 1024 // queries or keys of a block
)

// sparsity is the sparse attention a run views its model under: the request's patterns, block
// and normalizer, each the model's own (nn.Config's) where the request leaves it out, checked
// against the sequence.
type sparsity struct {
	patterns   []string       // as mha.ParsePattern reads them; empty for dense attention
	block      [2]int         // [BQ, BK]: mha's 64 × 64 unless the request or model sets it
	normalizer string         // as mha.ParseNormalizer reads it
	run        *nn.Sparsity   // the same, parsed, for the model's runs
	layout     *attend.Sparse // the patterns' layout (shared by the heads), nil without patterns
}

// sparsityOf checks a request's patterns, block and normalizer for m on a sequence of t tokens
// and returns the sparse attention to run with, each left out (nil) the model's own, or a
// bad-request error saying what is wrong.
func sparsityOf(m *model, patterns []string, block []int, normalizer *string, t int) (*sparsity, error) {
	if len(patterns) > maxPatterns {
		return nil, badRequest("patterns: %d of them, want at most %d", len(patterns), maxPatterns)
	}
	for i, s := range patterns {
		if len(s) > maxPatternLength {
			return nil, badRequest("patterns[%d] is %d characters long, want at most %d", i, len(s), maxPatternLength)
		}
	}
	if len(block) > 4 { // not echoed whole
		return nil, badRequest("block is an array of %d, want [BQ, BK], two sizes from 1 to %d", len(block), maxBlock)
	}
	if block != nil && (len(block) != 2 || block[0] < 1 || block[1] < 1 || block[0] > maxBlock || block[1] > maxBlock) {
		return nil, badRequest("block is %v, want [BQ, BK], two sizes from 1 to %d", block, maxBlock)
	}
	if patterns == nil {
		patterns = m.cfg.Patterns
	}
	if block == nil {
		block = m.cfg.Block // valid, as nn.Config.Validate checked
	}
	norm := m.cfg.Normalizer
	if normalizer != nil {
		switch norm = *normalizer; {
		case norm == "":
			return nil, badRequest("normalizer is empty; want softmax, sparsemax, entmax15, entmax:ALPHA or topk:K, or none for the model's own")
		case len(norm) > maxPatternLength:
			return nil, badRequest("normalizer is %d characters long, want at most %d", len(norm), maxPatternLength)
		}
	}
	sp := &sparsity{patterns: patterns, normalizer: cmp.Or(norm, "softmax"), block: [2]int{64, 64}, run: new(nn.Sparsity)}
	for i, s := range patterns {
		p, err := mha.ParsePattern(s)
		if err != nil {
			return nil, badRequest("patterns[%d]: %v", i, err)
		}
		sp.run.Patterns = append(sp.run.Patterns, p)
	}
	if block != nil {
		sp.block = [2]int{block[0], block[1]}
	}
	sp.run.Block = sp.block
	n, err := mha.ParseNormalizer(sp.normalizer)
	if err != nil {
		return nil, badRequest("normalizer: %v", err)
	}
	if n.Kind != mha.Softmax {
		sp.run.Normalizer = n
	}
	if len(sp.run.Patterns) > 0 {
		// The patterns parsed from text are shared by the heads: one layout.
		layouts, err := mha.SparseLayouts(sp.run.Patterns, sp.block, m.cfg.Heads, t, t)
		if err != nil {
			return nil, badRequest("patterns: %v", err)
		}
		sp.layout = &layouts[0]
	}
	return sp, nil
}

// adaptive reports whether the normalizer gives weights of exactly 0: sparsemax, entmax or
// top-k, not softmax.
func (sp *sparsity) adaptive() bool { return sp.run.Normalizer != nil }

// visible returns which pairs (query, key) of a sequence of t tokens the attention of block
// layer may weigh (−1: a block that is not Local), [T, T] row-major: those its patterns keep,
// before the query for a causal model, and within the block's sliding window.
func (sp *sparsity) visible(cfg nn.Config, layer, t int) []bool {
	out := make([]bool, t*t)
	w := cfg.LayerWindow(layer)
	for q := range t {
		for k := range t {
			out[q*t+k] = (sp.layout == nil || sp.layout.Keep(q, k)) &&
				(cfg.Bidirectional || k <= q) && (w == 0 || q-k < w)
		}
	}
	return out
}

// visibleRows spells visible [T, T] as T strings of T characters, '1' for a visible pair.
func visibleRows(visible []bool, t int) []string {
	var out []string
	var b strings.Builder
	for q := range t {
		b.Reset()
		for _, v := range visible[q*t : (q+1)*t] {
			c := byte('0')
			if v {
				c = '1'
			}
			b.WriteByte(c)
		}
		out = append(out, b.String())
	}
	return out
}

// zeroFraction returns the fraction of the visible pairs ([T, T]) whose weight in w [T, T] is
// exactly 0 (0 when none is visible).
func zeroFraction(w []float32, visible []bool) float64 {
	zeros, seen := 0, 0
	for i, v := range visible {
		if v {
			seen++
			if w[i] == 0 {
				zeros++
			}
		}
	}
	return float64(zeros) / float64(max(seen, 1))
}

// sparsityInfo is the sparse attention of a run, as its answer reports it.
type sparsityInfo struct {
	// Patterns are the patterns kept pairs must match one of, empty for dense attention.
	Patterns []string `json:"patterns"`
	// Block is [BQ, BK], the block size the patterns are laid out in.
	Block [2]int `json:"block"`
	// Normalizer replaces the softmax, or is "softmax".
	Normalizer string `json:"normalizer"`
	// Blocks[qb][kb] is each block's kind, "empty" (never computed), "partial" or "full"
	// ([⌈T/BQ⌉][⌈T/BK⌉]); absent without patterns.
	Blocks [][]string `json:"blocks,omitempty"`
	// Visible[q] marks with '1' the keys query q may attend to (its patterns, causal mask and
	// window), '0' the others: T strings of T characters. In a model with Local blocks (Gemma
	// 2's and 3's sliding layers) it is the other blocks', and LocalVisible the Local blocks'.
	Visible      []string `json:"visible"`
	LocalVisible []string `json:"local_visible,omitempty"`
	// Zeros[layer][head] is the fraction of visible pairs whose weight is exactly 0; absent
	// for softmax, whose weights never are.
	Zeros [][]number `json:"zeros,omitempty"`
}

// localLayers returns which of cfg's blocks are Local, or nil.
func localLayers(cfg nn.Config) []bool {
	if cfg.Local == nil {
		return nil
	}
	return cfg.Local.Layers
}

// kindNames name attend's block kinds in answers.
var kindNames = map[attend.BlockKind]string{attend.Empty: "empty", attend.Partial: "partial", attend.Full: "full"}

// info reports sp on a run of model cfg whose weights are weights [1, H, T, T] per layer.
func (sp *sparsity) info(cfg nn.Config, weights []*tensor.Tensor) *sparsityInfo {
	h, t := weights[0].Shape[1], weights[0].Shape[2]
	out := &sparsityInfo{Patterns: sp.patterns, Block: sp.block, Normalizer: sp.normalizer, Visible: visibleRows(sp.visible(cfg, -1, t), t)}
	if l := slices.Index(localLayers(cfg), true); l >= 0 {
		out.LocalVisible = visibleRows(sp.visible(cfg, l, t), t)
	}
	if out.Patterns == nil {
		out.Patterns = []string{}
	}
	if s := sp.layout; s != nil {
		for qb := range len(s.Kinds) / s.NBK {
			row := make([]string, s.NBK)
			for kb := range row {
				row[kb] = kindNames[s.Kinds[qb*s.NBK+kb]]
			}
			out.Blocks = append(out.Blocks, row)
		}
	}
	if sp.adaptive() {
		out.Zeros = make([][]number, len(weights))
		for l, w := range weights {
			visible := sp.visible(cfg, l, t)
			for i := range h {
				out.Zeros[l] = append(out.Zeros[l], number(zeroFraction(w.Data[i*t*t:][:t*t], visible)))
			}
		}
	}
	return out
}

// blockKinds are attend's block kinds as viz draws them.
var blockKinds = map[attend.BlockKind]viz.BlockKind{attend.Empty: viz.BlockEmpty, attend.Partial: viz.BlockPartial, attend.Full: viz.BlockFull}

// overlay returns h, the heatmap of one head's weights w [T, T], with the pairs outside visible
// [T, T] masked, the patterns' block map over it, and for a normalizer other than softmax a mark
// on each visible weight that is exactly 0.
func (sp *sparsity) overlay(h viz.Heatmap, w []float32, visible []bool) viz.Heatmap {
	for i, v := range visible {
		if !v {
			h.Values[i] = math.NaN()
		}
	}
	if s := sp.layout; s != nil {
		h.Blocks = &viz.BlockMap{Size: sp.block}
		for _, k := range s.Kinds {
			h.Blocks.Kinds = append(h.Blocks.Kinds, blockKinds[k])
		}
	}
	if sp.adaptive() {
		h.Marks = make([]bool, len(w))
		for i, v := range visible {
			h.Marks[i] = v && w[i] == 0
		}
	}
	return h
}

// percent prints a fraction as a whole percentage.
func percent(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// note describes sp for a picture's title, or "" for dense softmax attention.
func (sp *sparsity) note() string {
	var parts []string
	if len(sp.patterns) > 0 {
		parts = append(parts, fmt.Sprintf("%s in %d×%d blocks", strings.Join(sp.patterns, " "), sp.block[0], sp.block[1]))
	}
	if sp.adaptive() {
		parts = append(parts, sp.normalizer)
	}
	if parts == nil {
		return ""
	}
	return " · " + strings.Join(parts, ", ")
}

// queryBlock reads a picture query's block, "BQ,BK".
func queryBlock(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || len(parts) != 2 {
			return nil, badRequest("block %q; want BQ,BK, two whole numbers such as 4,4", clip(s))
		}
		out[i] = v
	}
	return out, nil
}
