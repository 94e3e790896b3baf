package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// sdpaFlags are mha sdpa's flags.
type sdpaFlags struct {
	input, out, causal, window, ropeLayout string
	sparse                                 sparseFlags
	softcap, scale, ropeTheta              float64
	ropeDim, ropeOffset                    int
	alibi, needWeights, backward           bool
}

func newSDPACmd() *cobra.Command {
	var f sdpaFlags
	cmd := &cobra.Command{
		Use:   "sdpa --input IN.safetensors --out OUT.safetensors",
		Short: "Run scaled dot-product attention (mha.SDPA) on the q, k and v in a file",
		Long: `Sdpa runs the functional attention core, mha.SDPA, on projections you bring: --input holds
q [B,Hq,Tq,D], k [B,Hkv,Tk,D] and v [B,Hkv,Tk,Dv] in any float dtype (F32, F64, F16, BF16), with Hq
a multiple of Hkv (query head h reads K/V head h·Hkv/Hq, rounded down: GQA, MQA and MHA alike), and
optionally:
  alibi_slopes [Hq]              ALiBi: slope_h·|i + Tk − Tq − j| is subtracted from the logits
  sinks [Hq]                     a logit per head that joins every row's softmax and takes no value
  key_padding_mask [B,Tk]        BOOL or U8, true = padding
  attn_mask [Tq,Tk] or [B,Hq,Tq,Tk]   BOOL or U8, true = may NOT attend (nn.MultiheadAttention's
                                 polarity, the opposite of F.scaled_dot_product_attention's)
  attn_bias [Tq,Tk] or [B,Hq,Tq,Tk]   float, added to the logits (−inf masks)
It writes out [B,Hq,Tq,Dv] and lse [B,Hq,Tq] (each row's log-sum-exp, the sink's included; +inf for
a row with no visible key and no sink), and with --need-weights weights [B,Hq,Tq,Tk], all float32,
to --out. A row whose keys are all masked gives output 0.

With δ = Tk − Tq the score of query i and key j is softcap(scale·q_i·k_j) − slope·|i + δ − j| + bias;
bottom-right causal lets query i see keys j ≤ i + δ, top-left j ≤ i; the window L,R keeps keys
i + δ − L ≤ j ≤ i + δ + R (flash-attn's window_size; −1 leaves a side open), with or without causal.
With --rope-theta, q and k are rotated (RoPE) first: key j at position P + j and query i at
P + δ + i, P = --rope-offset.

With --pattern the attention is sparse: a pair is kept when any of the patterns keeps it (r = i + δ − j):
local:W keeps |r| ≤ W; dilated:W,D keeps |r| ≤ W·D with r a multiple of D; strided:S keeps |r| < S
or r a multiple of S; global:I,J,… keeps the pairs whose query position (i + δ) or key is listed;
bigbird:W,G,R,SEED keeps |r| ≤ W, the pairs of positions 0 … G−1 and R random key blocks per query
block; blocks:FILE keeps the blocks marked in FILE's blocks (BOOL [⌈Tq/BQ⌉,⌈Tk/BK⌉] or [Hq,…]). The
kept pairs are then masked by causal, window, padding and masks as usual. Blocks of --block BQ,BK
(default 64,64) that keep no pair are never computed.

--normalizer replaces the softmax of each row's kept scores: sparsemax (Martins & Astudillo), entmax15
or entmax:ALPHA (α-entmax, Peters et al.; 1.5 exact by sorting, other α by bisection) or topk:K (a
softmax over the K largest). Their weights are exactly 0 on the keys they drop (written with
--need-weights, as softmax's), and lse is NaN. --out also gets zero_fraction [Hq], each head's fraction
of the visible pairs (those the masks, window and patterns leave) whose weight is exactly 0, and
the command prints it.

With --backward the input also holds grad_out [B,Hq,Tq,Dv], the gradient of a loss with respect to
out, and --out also gets grad.q, grad.k and grad.v (with respect to the q, k and v given, before
rotary; those of a K/V head summed over the query heads that read it) and, when sinks were given,
grad.sinks, all float32. With --need-weights the backward reads the weights; without, it recomputes
them tile by tile from lse (FlashAttention-2).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "the inputs (.safetensors): q, k, v and the optional tensors above")
	fl.StringVar(&f.out, "out", "", "write out, lse (and weights) to this .safetensors file")
	fl.StringVar(&f.causal, "causal", "none", "causal mask: none, top-left (query i sees keys ≤ i) or bottom-right (keys ≤ i + Tk − Tq)")
	fl.StringVar(&f.window, "window", "", "sliding window L,R: query i sees keys i+Tk−Tq−L … i+Tk−Tq+R (−1 = unbounded)")
	fl.Float64Var(&f.softcap, "softcap", 0, "cap the scaled scores to C·tanh(s/C) (0: no cap)")
	fl.Float64Var(&f.scale, "scale", 0, "multiply q·k by this (0: 1/√D)")
	fl.BoolVar(&f.alibi, "alibi", false, "ALiBi with the standard geometric slopes (or put alibi_slopes in --input)")
	fl.Float64Var(&f.ropeTheta, "rope-theta", 0, "rotate q and k (RoPE) with this base θ (0: no rotary)")
	fl.IntVar(&f.ropeDim, "rope-dim", 0, "rotate the first N dimensions of each head (0: all; needs --rope-theta)")
	fl.StringVar(&f.ropeLayout, "rope-layout", "half", "rotary pairs: half (GPT-NeoX, Hugging Face Llama) or interleaved (GPT-J); needs --rope-theta")
	fl.IntVar(&f.ropeOffset, "rope-offset", 0, "the position P of key 0 (needs --rope-theta)")
	fl.BoolVar(&f.needWeights, "need-weights", false, "also write the attention weights [B,Hq,Tq,Tk] as weights")
	f.sparse.register(fl)
	fl.BoolVar(&f.backward, "backward", false, "also compute the gradients of grad_out (from --input) and write them as grad.q, grad.k, grad.v (and grad.sinks)")
	return cmd
}

// sparseFlags are the flags of sparse attention, --pattern, --block and --normalizer, of the
// commands that run attention.
type sparseFlags struct {
	patterns          []string
	block, normalizer string
}

func (f *sparseFlags) register(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.patterns, "pattern", nil, "sparse pattern, repeatable (the union is kept): local:W, dilated:W,D, strided:S, global:I,J,…, bigbird:W,G,R,SEED or blocks:FILE (a .safetensors holding blocks BOOL [⌈Tq/BQ⌉ ⌈Tk/BK⌉] or [Hq …])")
	fl.StringVar(&f.block, "block", "", "the sparse patterns' blocks BQ,BK (default 64,64)")
	fl.StringVar(&f.normalizer, "normalizer", "softmax", "what turns each row's scores into weights: softmax, sparsemax, entmax15, entmax:ALPHA or topk:K")
}

// parse reads the flags: the patterns, their blocks and the normalizer (nil for softmax).
func (f *sparseFlags) parse() (patterns []mha.Pattern, block [2]int, norm *mha.Normalizer, err error) {
	if f.block != "" {
		a, b, ok := strings.Cut(f.block, ",")
		bq, err1 := strconv.Atoi(strings.TrimSpace(a))
		bk, err2 := strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil || bq < 1 || bk < 1 {
			return nil, block, nil, fmt.Errorf("--block is %q, want BQ,BK: two integers ≥ 1 (e.g. 64,64)", f.block)
		}
		if len(f.patterns) == 0 {
			return nil, block, nil, fmt.Errorf("--block sizes the blocks of --pattern; give a pattern")
		}
		block = [2]int{bq, bk}
	}
	n, err := mha.ParseNormalizer(f.normalizer)
	if err != nil {
		return nil, block, nil, fmt.Errorf("--normalizer: %w", err)
	}
	if n.Kind != mha.Softmax {
		norm = n
	}
	for _, s := range f.patterns {
		if file, ok := strings.CutPrefix(s, "blocks:"); ok {
			m, err := readBlocks(file)
			if err != nil {
				return nil, block, nil, fmt.Errorf("--pattern %s: %w", s, err)
			}
			patterns = append(patterns, mha.Pattern{Kind: mha.PatternBlocks, Blocks: m})
			continue
		}
		p, err := mha.ParsePattern(s)
		if err != nil {
			return nil, block, nil, fmt.Errorf("--pattern: %w", err)
		}
		patterns = append(patterns, p)
	}
	return patterns, block, norm, nil
}

// readBlocks reads the block map of --pattern blocks:FILE: the tensor blocks, BOOL or U8.
func readBlocks(path string) (*tensor.Bool, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !f.Has("blocks") {
		return nil, fmt.Errorf("%s has no tensor blocks (have %s), want blocks BOOL [⌈Tq/BQ⌉ ⌈Tk/BK⌉] or [Hq ⌈Tq/BQ⌉ ⌈Tk/BK⌉]", path, strings.Join(f.Names(), ", "))
	}
	m, err := f.Bool("blocks")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// sdpaInputs are the tensors an input file of mha sdpa may hold.
var sdpaInputs = []string{"q", "k", "v", "alibi_slopes", "sinks", "key_padding_mask", "attn_mask", "attn_bias", "grad_out"}

// options turns the flags into SDPAOptions, checking what the library cannot: their syntax and
// combinations.
func (f *sdpaFlags) options(cmd *cobra.Command) (*mha.SDPAOptions, error) {
	opt := &mha.SDPAOptions{Softcap: f.softcap, Scale: f.scale, NeedLSE: true, NeedWeights: f.needWeights, ALiBi: f.alibi}
	switch f.causal {
	case "none":
	case "top-left":
		opt.Causal = mha.CausalTopLeft
	case "bottom-right":
		opt.Causal = mha.CausalBottomRight
	default:
		return nil, fmt.Errorf("--causal is %q, want none, top-left or bottom-right", f.causal)
	}
	if f.window != "" {
		l, r, ok := strings.Cut(f.window, ",")
		left, err1 := strconv.Atoi(strings.TrimSpace(l))
		right, err2 := strconv.Atoi(strings.TrimSpace(r))
		if !ok || err1 != nil || err2 != nil || left < -1 || right < -1 {
			return nil, fmt.Errorf("--window is %q, want L,R: two integers ≥ 0, or −1 for an unbounded side (e.g. 256,0)", f.window)
		}
		opt.Window = &mha.Window{Left: left, Right: right}
	}
	var err error
	if opt.Patterns, opt.Block, opt.Normalizer, err = f.sparse.parse(); err != nil {
		return nil, err
	}
	fl := cmd.Flags()
	if f.ropeTheta == 0 {
		for _, name := range []string{"rope-dim", "rope-layout", "rope-offset"} {
			if fl.Changed(name) {
				return nil, fmt.Errorf("--%s needs --rope-theta, the rotary base (e.g. 10000)", name)
			}
		}
		return opt, nil
	}
	r := &mha.Rotary{Theta: f.ropeTheta, Dim: f.ropeDim, Offset: f.ropeOffset}
	switch f.ropeLayout {
	case "half":
	case "interleaved":
		r.Layout = mha.RopeInterleaved
	default:
		return nil, fmt.Errorf("--rope-layout is %q, want half or interleaved", f.ropeLayout)
	}
	opt.Rotary = r
	return opt, nil
}

func (f *sdpaFlags) run(cmd *cobra.Command) error {
	switch {
	case f.input == "":
		return fmt.Errorf("--input is required: a .safetensors file with q, k and v")
	case f.out == "":
		return fmt.Errorf("--out is required: the .safetensors file to write")
	}
	if err := checkOutFile("--out", f.out); err != nil {
		return err
	}
	opt, err := f.options(cmd)
	if err != nil {
		return err
	}
	in, err := loadSDPAInput(f.input, opt)
	if err != nil {
		return err
	}
	switch {
	case f.backward && in.gradOut == nil:
		return fmt.Errorf("--backward needs grad_out [B Hq Tq Dv] in %s", f.input)
	case !f.backward && in.gradOut != nil:
		return fmt.Errorf("%s holds grad_out; pass --backward to compute the gradients", f.input)
	}
	r, err := mha.SDPA(in.q, in.k, in.v, opt)
	if err != nil {
		return fmt.Errorf("%s: %w", f.input, err)
	}
	tensors := map[string]safetensors.Tensor{"out": safetensors.FromFloat32(r.Out), "lse": safetensors.FromFloat32(r.LSE)}
	if r.Weights != nil {
		tensors["weights"] = safetensors.FromFloat32(r.Weights)
	}
	if f.backward {
		g, err := mha.SDPABackward(in.q, in.k, in.v, r, in.gradOut, opt)
		if err != nil {
			return fmt.Errorf("%s: %w", f.input, err)
		}
		tensors["grad.q"], tensors["grad.k"], tensors["grad.v"] = safetensors.FromFloat32(g.Q), safetensors.FromFloat32(g.K), safetensors.FromFloat32(g.V)
		if g.Sinks != nil {
			tensors["grad.sinks"] = safetensors.FromFloat32(&tensor.Tensor{Shape: []int{len(g.Sinks)}, Data: g.Sinks})
		}
	}
	addZeroFraction(tensors, r.ZeroFraction)
	meta := map[string]string{"fully_masked_rows": fmt.Sprint(r.FullyMasked)}
	if err := safetensors.WriteFile(f.out, tensors, meta); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "wrote %s: out %v, lse %v", f.out, r.Out.Shape, r.LSE.Shape)
	if r.Weights != nil {
		fmt.Fprintf(w, ", weights %v", r.Weights.Shape)
	}
	if r.ZeroFraction != nil {
		fmt.Fprint(w, ", zero_fraction")
	}
	if f.backward {
		fmt.Fprint(w, ", grad.q, grad.k, grad.v")
		if _, ok := tensors["grad.sinks"]; ok {
			fmt.Fprint(w, ", grad.sinks")
		}
	}
	fmt.Fprintln(w)
	printZeroFraction(w, r.ZeroFraction)
	for _, line := range in.warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), line)
	}
	if err := r.Out.CheckFinite("out"); err != nil && len(in.warnings) == 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "mha: warning: every input is finite, but %v: the scores overflowed float32 (beyond ±3.4e38; check --scale and the inputs' size)\n", err)
	}
	if r.FullyMasked > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %d (batch, head, query) rows had no key to attend; their output is 0\n", r.FullyMasked)
	}
	return nil
}

// addZeroFraction adds zero_fraction [H], a normalizer's fraction of exact zeros per head, to
// tensors when there is one.
func addZeroFraction(tensors map[string]safetensors.Tensor, zf []float64) {
	if zf == nil {
		return
	}
	t := tensor.New(len(zf))
	for h, x := range zf {
		t.Data[h] = float32(x)
	}
	tensors["zero_fraction"] = safetensors.FromFloat32(t)
}

// printZeroFraction prints a normalizer's fraction of exact zeros per head, when there is one.
func printZeroFraction(w io.Writer, zf []float64) {
	if zf == nil {
		return
	}
	parts := make([]string, len(zf))
	for h, x := range zf {
		parts[h] = fmt.Sprintf("%d: %.1f%%", h, 100*x)
	}
	fmt.Fprintf(w, "weights exactly 0 among the visible pairs, per head: %s\n", strings.Join(parts, ", "))
}

// sdpaInput is what an input file of mha sdpa holds besides the options.
type sdpaInput struct {
	q, k, v, gradOut *tensor.Tensor
	warnings         []string // for each of q, k, v and grad_out that holds NaN or ±Inf
}

// loadSDPAInput reads q, k, v, grad_out and the optional tensors of mha sdpa from path, putting
// the optional ones into opt.
func loadSDPAInput(path string, opt *mha.SDPAOptions) (*sdpaInput, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, name := range f.Names() {
		if !slices.Contains(sdpaInputs, name) {
			return nil, fmt.Errorf("%s: unexpected tensor %q (an input file of mha sdpa holds %s)", path, name, strings.Join(sdpaInputs, ", "))
		}
	}
	float := func(name, dims string) (*tensor.Tensor, error) {
		t, err := readFloat(f, path, name)
		if t == nil || err != nil {
			return nil, err
		}
		if dims != "" && len(t.Shape) != strings.Count(dims, " ")+1 {
			return nil, fmt.Errorf("%s: tensor %q is %v, want [%s]", path, name, t.Shape, dims)
		}
		return t, nil
	}
	in := new(sdpaInput)
	for _, c := range []struct {
		name, dims string
		t          **tensor.Tensor
	}{{"q", "B Hq Tq D", &in.q}, {"k", "B Hkv Tk D", &in.k}, {"v", "B Hkv Tk Dv", &in.v}, {"grad_out", "B Hq Tq Dv", &in.gradOut}} {
		if !f.Has(c.name) {
			if c.name == "grad_out" {
				continue
			}
			return nil, fmt.Errorf("%s: no tensor %q ([%s]); it has %s", path, c.name, c.dims, strings.Join(f.Names(), ", "))
		}
		if *c.t, err = float(c.name, c.dims); err != nil {
			return nil, err
		}
		if err := checkFinite(f, c.name, *c.t); err != nil {
			in.warnings = append(in.warnings, nonFiniteWarning(path, err))
		}
	}
	slopes, err := float("alibi_slopes", "Hq")
	if err != nil {
		return nil, err
	}
	if slopes != nil {
		if opt.ALiBi {
			return nil, fmt.Errorf("%s holds alibi_slopes and --alibi asks for the standard ones: give one", path)
		}
		opt.ALiBi = true
		opt.Slopes = make([]float64, len(slopes.Data))
		for i, s := range slopes.Data {
			opt.Slopes[i] = float64(s)
		}
	}
	sinks, err := float("sinks", "Hq")
	if err != nil {
		return nil, err
	}
	if sinks != nil {
		opt.Sinks = sinks.Data
	}
	if opt.AttnBias, err = float("attn_bias", ""); err != nil {
		return nil, err
	}
	if opt.AttnBias != nil {
		if err := checkBias("attn_bias", opt.AttnBias); err != nil {
			in.warnings = append(in.warnings, nonFiniteWarning(path, err))
		}
	}
	for _, m := range []struct {
		name string
		t    **tensor.Bool
	}{{"key_padding_mask", &opt.KeyPaddingMask}, {"attn_mask", &opt.AttnMask}} {
		if !f.Has(m.name) {
			continue
		}
		raw, _ := f.Raw(m.name)
		if raw.DType != safetensors.Bool && raw.DType != safetensors.U8 {
			return nil, fmt.Errorf("%s: tensor %q is %s, want BOOL or U8 (true = may not attend)", path, m.name, raw.DType)
		}
		if *m.t, err = f.Bool(m.name); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return in, nil
}
