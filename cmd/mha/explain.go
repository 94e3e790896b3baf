package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
	"github.com/spf13/cobra"
)

// maxExplained bounds the values one explained matrix may hold: explain prints every one.
const maxExplained = 20000

func newExplainCmd() *cobra.Command {
	var (
		f      layerFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "explain [--weights W.safetensors --input IN.safetensors --heads N] [--format text|markdown|json]",
		Short: "Print a multi-head attention computation step by step, every matrix and value",
		Long: `Explain computes multi-head attention in float64 and prints each step as the chapters write
it: input, Q/K/V projections, per-head Q_i K_i V_i, scores, scaled scores, softmax weights, head
outputs, concatenation, output and the parameter count. Weights are shown in the chapters' X·W
form (PyTorch stores their transposes).

With no arguments it runs chapter 003's worked example (d_model = 4, h = 2) and checks the numbers
the chapter prints against the computed ones. With --weights, --input and --heads it explains a
small case of your own, read as 'mha run' reads it, with its options (--causal, --pattern,
--normalizer, …), which the chapter's example refuses.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			render, ok := renderers[format]
			if !ok {
				return fmt.Errorf("--format is %q, want text, markdown or json", format)
			}
			var (
				j   *job
				err error
			)
			chapter := f.weights == "" && f.input == "" && f.heads == 0
			if chapter {
				// The chapter's example is fixed: the options of a case of one's own would be
				// ignored.
				for _, name := range []string{"prefix", "add-zero-attn", "causal", "pattern", "block", "normalizer", "allow-nonfinite"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s applies to a case of your own (--weights, --input and --heads); without them explain runs chapter 003's fixed example", name)
					}
				}
				j, err = chapterJob()
			} else {
				j, err = f.load()
			}
			if err != nil {
				return err
			}
			ex, err := explain(j, f.sparse)
			if err != nil {
				return err
			}
			if chapter {
				ex.Title = "Chapter 003's worked example: d_model = 4, h = 2, d_k = d_v = 2"
				ex.Checks = chapterChecks(j, ex.trace)
			}
			if err := render(cmd.OutOrStdout(), ex); err != nil {
				return err
			}
			j.printWarnings(cmd.ErrOrStderr())
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, markdown or json")
	return cmd
}

// explanation is what explain prints, independent of the format.
type explanation struct {
	Title  string  `json:"title"`
	Config config  `json:"config"`
	Steps  []step  `json:"steps"`
	Checks []check `json:"checks,omitempty"`
	trace  *mha.Trace
}

type config struct {
	Batch       int  `json:"batch"`
	Tq          int  `json:"tq"`
	Tk          int  `json:"tk"`
	EmbedDim    int  `json:"embed_dim"`
	NumHeads    int  `json:"num_heads"`
	HeadDim     int  `json:"head_dim"`
	Bias        bool `json:"bias"`
	AddBiasKV   bool `json:"add_bias_kv"`
	AddZeroAttn bool `json:"add_zero_attn"`
	Causal      bool `json:"causal"`
	FullyMasked int  `json:"fully_masked_rows"`
	// The sparse patterns (--pattern) and their blocks, and the normalizer when not softmax,
	// as the flags give them.
	Patterns   []string `json:"patterns,omitempty"`
	Block      string   `json:"block,omitempty"`
	Normalizer string   `json:"normalizer,omitempty"`
}

// step is one stage of the computation.
type step struct {
	Title    string   `json:"title"`
	Formula  string   `json:"formula"`
	Notes    []string `json:"notes,omitempty"`
	Matrices []matrix `json:"matrices"`
}

// matrix is a named two-dimensional block of values.
type matrix struct {
	Name   string  `json:"name"`
	Rows   int     `json:"rows"`
	Cols   int     `json:"cols"`
	Values [][]num `json:"values"`
}

// check compares a number the chapter prints with the computed one.
type check struct {
	What     string `json:"what"`
	Chapter  string `json:"chapter"`
	Computed string `json:"computed"`
	Agrees   bool   `json:"agrees"`
}

// block returns rows×cols values of data starting at off with row stride ld.
func block(name string, data []float64, off, rows, cols, ld int) matrix {
	m := matrix{Name: name, Rows: rows, Cols: cols, Values: make([][]num, rows)}
	for r := range rows {
		m.Values[r] = make([]num, cols)
		for c := range cols {
			m.Values[r][c] = num(data[off+r*ld+c])
		}
	}
	return m
}

// weightBlock returns rows r0 … r0+n of a PyTorch [out, in] weight, transposed into the chapters'
// [in, n] form.
func weightBlock(name string, w []float32, in, r0, n int) matrix {
	m := matrix{Name: name, Rows: in, Cols: n, Values: make([][]num, in)}
	for i := range in {
		m.Values[i] = make([]num, n)
		for c := range n {
			m.Values[i][c] = num(w[(r0+c)*in+i])
		}
	}
	return m
}

// explain runs j in float64 and describes every step; sp are the flags that gave j's sparse
// patterns and normalizer.
func explain(j *job, sp sparseFlags) (*explanation, error) {
	if err := checkExplainSize(j); err != nil {
		return nil, err
	}
	tr, err := j.layer.Reference(j.query, j.key, j.val, &j.opt)
	if err != nil {
		return nil, err
	}
	cfg := j.layer.Config()
	b, tq, tk, h, d, e := tr.B, tr.Tq, tr.Tk, tr.H, tr.D, tr.E
	ex := &explanation{trace: tr, Title: "Multi-head attention, step by step", Config: config{
		Batch: b, Tq: tq, Tk: tk, EmbedDim: e, NumHeads: h, HeadDim: d, Bias: !cfg.NoBias,
		AddBiasKV: cfg.AddBiasKV, AddZeroAttn: cfg.AddZeroAttn, Causal: j.opt.Causal, FullyMasked: tr.FullyMasked,
		Patterns: sp.patterns, Block: sp.block,
	}}
	norm := "softmax"
	if n := j.opt.Normalizer; n != nil && n.Kind != mha.Softmax {
		norm = sp.normalizer
		ex.Config.Normalizer = norm
	}
	batch := func(name string, bi int) string {
		if b == 1 {
			return name
		}
		return fmt.Sprintf("%s (batch %d)", name, bi)
	}
	sd := j.layer.StateDict()

	// 1. Inputs.
	type input struct {
		name string
		t    *tensor.Tensor
	}
	in := step{Title: "Input", Formula: "X ∈ ℝ^{n×d_model}"}
	inputs := []input{{"X", j.query}}
	if j.key != nil {
		in.Formula = "X_q ∈ ℝ^{n_q×d_model}, X_k ∈ ℝ^{n_k×kdim}, X_v ∈ ℝ^{n_k×vdim}"
		inputs = []input{{"X_q", j.query}, {"X_k", j.key}, {"X_v", j.val}}
	}
	for _, x := range inputs {
		x64 := toF64(x.t.Data)
		rows, cols := x.t.Shape[len(x.t.Shape)-2], x.t.Shape[len(x.t.Shape)-1]
		for bi := range b {
			in.Matrices = append(in.Matrices, block(batch(x.name, bi), x64, bi*rows*cols, rows, cols, cols))
		}
	}
	ex.Steps = append(ex.Steps, in)

	// 2. Parameters, in the chapters' X·W form.
	par := step{Title: "Parameters", Formula: "W_i^Q, W_i^K ∈ ℝ^{d_model×d_k}, W_i^V ∈ ℝ^{d_model×d_v}, W^O ∈ ℝ^{d_model×d_model}",
		Notes: []string{"PyTorch stores the transposes: in_proj_weight = [W^Q W^K W^V]ᵀ stacked by rows, out_proj.weight = (W^O)ᵀ; head i owns rows i·d_k … (i+1)·d_k of each block."}}
	// Q, the concatenation: qd = h·d_k wide (d_model unless the heads are of another size); K and
	// V: ekv wide, hkv heads (h unless grouped).
	qd, ekv, hkv := cfg.InnerDim(), cfg.KVDim(), cfg.KVHeads()
	if hkv < h {
		par.Notes = append(par.Notes, fmt.Sprintf("Grouped K/V heads: %d key/value heads for %d query heads; query head i reads K/V head ⌊i·%d/%d⌋.", hkv, h, hkv, h))
	}
	for _, p := range []struct {
		sym, name string
		r0, heads int
	}{{"Q", "q_proj_weight", 0, h}, {"K", "k_proj_weight", qd, hkv}, {"V", "v_proj_weight", qd + ekv, hkv}} {
		w, r0, inDim := sd["in_proj_weight"], p.r0, e
		if w == nil {
			w, r0, inDim = sd[p.name], 0, sd[p.name].Shape[1]
		}
		for hi := range p.heads {
			par.Matrices = append(par.Matrices, weightBlock(fmt.Sprintf("W_%d^%s", hi+1, p.sym), w.Data, inDim, r0+hi*d, d))
		}
	}
	par.Matrices = append(par.Matrices, weightBlock("W^O", sd["out_proj.weight"].Data, qd, 0, e))
	for _, name := range []string{"in_proj_bias", "out_proj.bias", "bias_k", "bias_v", "sinks", "q_norm.weight", "k_norm.weight"} {
		if t := sd[name]; t != nil {
			par.Matrices = append(par.Matrices, block(name, toF64(t.Data), 0, 1, len(t.Data), len(t.Data)))
		}
	}
	ex.Steps = append(ex.Steps, par)

	// 3. Stacked projections.
	proj := step{Title: "Projections (all heads at once)", Formula: "Q = X_q·W^Q + b_q,  K = X_k·W^K + b_k,  V = X_v·W^V + b_v"}
	if cfg.AddBiasKV || cfg.AddZeroAttn {
		proj.Notes = append(proj.Notes, fmt.Sprintf("K and V end with %d appended row(s): bias_k/bias_v (add_bias_kv) then zeros (add_zero_attn).", btoi(cfg.AddBiasKV)+btoi(cfg.AddZeroAttn)))
	}
	for bi := range b {
		proj.Matrices = append(proj.Matrices,
			block(batch("Q", bi), tr.Q, bi*tq*qd, tq, qd, qd),
			block(batch("K", bi), tr.K, bi*tk*ekv, tk, ekv, ekv),
			block(batch("V", bi), tr.V, bi*tk*ekv, tk, ekv, ekv))
	}
	ex.Steps = append(ex.Steps, proj)

	// 4–8. Per head.
	split := step{Title: "Split into heads", Formula: "Q_i = Q[:, i·d_k … (i+1)·d_k] (and K_i, V_i): reshape [n, d_model] → [h, n, d_k]"}
	scores := step{Title: "Scores", Formula: "S_i = Q_i·K_iᵀ ∈ ℝ^{n_q×n_k}"}
	scaled := step{Title: "Scaled scores", Formula: fmt.Sprintf("S_i/√d_k + mask   (√d_k = √%d = %.4f)", d, math.Sqrt(float64(d))),
		Notes: []string{"-inf marks a key the query may not attend (masks use PyTorch's polarity: true = masked)."}}
	if len(sp.patterns) > 0 {
		scaled.Notes = append(scaled.Notes, fmt.Sprintf("The sparse patterns %s keep only some (query, key) pairs; the others are masked too.", strings.Join(sp.patterns, ", ")))
	}
	weights := step{Title: "Attention weights", Formula: fmt.Sprintf("A_i = %s(S_i/√d_k + mask), each row sums to 1", norm)}
	if norm != "softmax" {
		weights.Notes = append(weights.Notes, fmt.Sprintf("%s gives some visible keys a weight of exactly 0.", norm))
	}
	if tr.FullyMasked > 0 {
		weights.Notes = append(weights.Notes, fmt.Sprintf("%d row(s) had no key to attend: their weights and head outputs are 0 (PyTorch gives NaN).", tr.FullyMasked))
	}
	heads := step{Title: "Head outputs", Formula: "head_i = A_i·V_i ∈ ℝ^{n_q×d_v}"}
	for bi := range b {
		for hi := range h {
			name := func(s string) string { return batch(fmt.Sprintf(s, hi+1), bi) }
			sq, g := (bi*h+hi)*tq*tk, cfg.KVHead(hi)
			split.Matrices = append(split.Matrices,
				block(name("Q_%d"), tr.Q, bi*tq*qd+hi*d, tq, d, qd),
				block(name("K_%d"), tr.K, bi*tk*ekv+g*d, tk, d, ekv),
				block(name("V_%d"), tr.V, bi*tk*ekv+g*d, tk, d, ekv))
			scores.Matrices = append(scores.Matrices, block(name("S_%d"), tr.Scores, sq, tq, tk, tk))
			scaled.Matrices = append(scaled.Matrices, block(name("S_%d/√d_k"), tr.Scaled, sq, tq, tk, tk))
			weights.Matrices = append(weights.Matrices, block(name("A_%d"), tr.Weights, sq, tq, tk, tk))
			heads.Matrices = append(heads.Matrices, block(name("head_%d"), tr.Concat, bi*tq*qd+hi*d, tq, d, qd))
		}
	}
	ex.Steps = append(ex.Steps, split, scores, scaled, weights, heads)

	// 9–10. Concatenation and output.
	cat := step{Title: "Concatenation", Formula: "Concat(head_1 … head_h) ∈ ℝ^{n_q×h·d_v} = ℝ^{n_q×d_model}"}
	if qd != e {
		cat.Formula = fmt.Sprintf("Concat(head_1 … head_h) ∈ ℝ^{n_q×h·d_v}, h·d_v = %d ≠ d_model = %d: W^O maps it back to d_model", qd, e)
	}
	out := step{Title: "Output", Formula: "Output = Concat·W^O + b_o"}
	for bi := range b {
		cat.Matrices = append(cat.Matrices, block(batch("Concat", bi), tr.Concat, bi*tq*qd, tq, qd, qd))
		out.Matrices = append(out.Matrices, block(batch("Output", bi), tr.Output, bi*tq*e, tq, e, e))
	}
	ex.Steps = append(ex.Steps, cat, out)

	// 11. Parameter count.
	count := step{Title: "Parameter count", Formula: "4·d_model² + 4·d_model for the default layer (W^Q, W^K, W^V, W^O and their biases)"}
	for _, p := range j.layer.Parameters() {
		count.Notes = append(count.Notes, fmt.Sprintf("%-16s %-12s %d", p.Name, fmt.Sprint(p.T.Shape), len(p.T.Data)))
	}
	count.Notes = append(count.Notes, fmt.Sprintf("total            %d", j.layer.NumParams()))
	ex.Steps = append(ex.Steps, count)
	return ex, nil
}

// checkExplainSize returns an error when j is too large to print: matrices of more than
// maxExplained values, or more than 64 batch×head blocks. It reads the sizes from the inputs'
// shapes, [B, T, features] or [T, features], so that a large case is refused before it is
// computed; inputs of another rank are left to Reference, which says what it wants. The sizes
// are multiplied as float64, which does not overflow.
func checkExplainSize(j *job) error {
	q := j.query.Shape
	if len(q) != 2 && len(q) != 3 {
		return nil
	}
	b, tq := 1.0, float64(q[len(q)-2])
	if len(q) == 3 {
		b = float64(q[0])
	}
	tk := tq
	if j.key != nil && len(j.key.Shape) >= 2 {
		tk = float64(j.key.Shape[len(j.key.Shape)-2])
	}
	cfg := j.layer.Config()
	tk += float64(btoi(cfg.AddBiasKV) + btoi(cfg.AddZeroAttn)) // the appended keys
	e, bh := float64(max(cfg.EmbedDim, cfg.InnerDim())), b*float64(cfg.NumHeads)
	if n := max(b*tq*e, b*tk*e, tq*tk, e*e); n > maxExplained || bh > 64 {
		return fmt.Errorf("explain prints every value, and this case has matrices of %.0f values in %.0f batch×head blocks (at most %d and 64); use 'mha run' for large inputs", n, bh, maxExplained)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toF64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}
