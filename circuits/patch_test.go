package circuits

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// patchConfigs are small models in the layouts patching must handle: GPT-2-like (pre-norm,
// learned positions), BERT-like (post-norm, bidirectional), Llama-like (RMSNorm, rotary,
// grouped K/V heads, no biases), and heads of different sizes.
var patchConfigs = map[string]nn.Config{
	"gpt2": {Vocab: 13, SeqLen: 10, DModel: 16, Heads: 4, Layers: 3, FFN: 24, Norm: nn.PreNorm, Positions: nn.Learned,
		Activation: nn.GELUNew, Seed: 1},
	"bert": {Vocab: 13, SeqLen: 10, DModel: 16, Heads: 4, Layers: 2, FFN: 24, Norm: nn.PostNorm, Positions: nn.Learned,
		Bidirectional: true, TypeVocab: 2, EmbNorm: true, Seed: 2},
	"llama": {Vocab: 13, SeqLen: 10, DModel: 16, Heads: 4, KVHeads: 2, Layers: 2, FFN: 20, Norm: nn.PreNorm, Positions: nn.NoPositions,
		NormKind: nn.RMSNorm, Activation: nn.SwiGLU, NoMLPBias: true, NoHeadBias: true, NoAttnBias: true, Rope: &nn.Rope{Theta: 100}, Seed: 3},
	"dims": {Vocab: 13, SeqLen: 10, DModel: 12, Heads: 3, HeadDims: []int{2, 4, 6}, Layers: 2, AttnOnly: true, Norm: nn.PreNorm,
		Positions: nn.Learned, Seed: 4},
}

var (
	patchClean   = []int{3, 1, 4, 1, 5, 9, 2}
	patchCorrupt = []int{3, 1, 7, 1, 5, 9, 2} // differs at position 2 only
)

func newPatchModel(t *testing.T, name string) *nn.Model {
	t.Helper()
	m, err := nn.NewModel(patchConfigs[name])
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPatchProperties checks what patching must give whatever the model: the clean stream at
// the metric position of the last layer restores the clean metric (1); at layer 0, the one
// position where the prompts differ restores it (1) and the others change nothing (0); in a
// causal model, positions after the metric's change nothing; every score is the raw metric
// normalised; and the batch size does not change the results.
func TestPatchProperties(t *testing.T) {
	all := PatchOptions{Residual: true, Patterns: true}
	for name := range patchConfigs {
		m := newPatchModel(t, name)
		c := m.Config()
		for _, pos := range []int{len(patchClean) - 1, 4} {
			mt := Metric{Target: 5, Foil: 8, Position: pos}
			res, err := Patch(m, patchClean, patchCorrupt, mt, all)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := res.Residual[c.Layers][pos]; math.Abs(got-1) > 1e-4 {
				t.Errorf("%s, position %d: clean stream at the output patched at the metric position scores %g, want 1", name, pos, got)
			}
			for p, got := range res.Residual[0] {
				want := 0.0
				if p == 2 {
					want = 1
				}
				if math.Abs(got-want) > 1e-4 {
					t.Errorf("%s, position %d: stream entering layer 0 patched at position %d scores %g, want %g", name, pos, p, got, want)
				}
			}
			for l, row := range res.Residual {
				for p, got := range row {
					if !c.Bidirectional && p > pos && got != 0 {
						t.Errorf("%s: causal model, layer %d, position %d after the metric's %d scores %g, want 0", name, l, p, pos, got)
					}
				}
			}
			diff := res.LDClean - res.LDCorrupt
			for _, g := range []struct {
				name       string
				score, raw [][]float64
			}{{"heads", res.Heads, res.HeadsLD}, {"residual", res.Residual, res.ResidualLD}, {"patterns", res.Patterns, res.PatternsLD}} {
				for l := range g.score {
					for i := range g.score[l] {
						if want := (g.raw[l][i] - res.LDCorrupt) / diff; math.Abs(g.score[l][i]-want) > 1e-12 || math.IsNaN(g.score[l][i]) {
							t.Errorf("%s: %s[%d][%d] = %g, want (raw − corrupt)/(clean − corrupt) = %g", name, g.name, l, i, g.score[l][i], want)
						}
					}
				}
			}
			one, err := Patch(m, patchClean, patchCorrupt, mt, PatchOptions{Residual: true, Patterns: true, Batch: 1, Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, pair := range [][2][][]float64{{res.Heads, one.Heads}, {res.Residual, one.Residual}, {res.Patterns, one.Patterns}} {
				for l := range pair[0] {
					for i := range pair[0][l] {
						if d := math.Abs(pair[0][l][i] - pair[1][l][i]); d > 1e-4 {
							t.Errorf("%s: batch 1 and the default batch differ by %g at [%d][%d]", name, d, l, i)
						}
					}
				}
			}
		}
	}
}

// TestPatchHeadDirect checks a head's score against a patch written out by hand: the
// corrupted prompt, all T positions, with that head's gate 0 and the clean head output added.
func TestPatchHeadDirect(t *testing.T) {
	for name := range patchConfigs {
		m := newPatchModel(t, name)
		c, ac := m.Config(), m.Config().Attention()
		tl := len(patchClean)
		mt := Metric{Target: 2, Foil: 6, Position: 3}
		res, err := Patch(m, patchClean, patchCorrupt, mt, PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Residual != nil || res.Patterns != nil {
			t.Errorf("%s: residual and pattern grids computed without being asked for", name)
		}
		l, h := c.Layers-1, 1
		if _, err := m.Forward(patchClean, 1, tl, &nn.RunOptions{KeepHeads: true}); err != nil {
			t.Fatal(err)
		}
		z := slices.Clone(m.Heads(l).Data)
		gate, add := tensor.New(1, c.Heads), tensor.New(1, tl, c.DModel)
		for i := range gate.Data {
			gate.Data[i] = 1
		}
		gate.Data[h] = 0
		o, d := ac.HeadOffset(h), ac.HeadDim(h)
		for p := range tl {
			copy(add.Data[p*c.DModel+o:][:d], z[p*c.DModel+o:][:d])
		}
		opts := make([]mha.HeadOptions, c.Layers)
		opts[l] = mha.HeadOptions{Gate: gate, Add: add}
		logits, err := m.Forward(patchCorrupt, 1, tl, &nn.RunOptions{Heads: opts})
		if err != nil {
			t.Fatal(err)
		}
		want := mt.ld(logits.Data, 0, tl, c.Vocab)
		if got := res.HeadsLD[l][h]; math.Abs(got-want) > 1e-4 {
			t.Errorf("%s: head %d of layer %d patched: LD %g, by hand %g", name, h, l, got, want)
		}
	}
}

// TestPatchNothing checks that patching the corrupted run with itself scores 0: each head's
// output, and each head's pattern with the corrupted run's own weights.
func TestPatchNothing(t *testing.T) {
	for name := range patchConfigs {
		m := newPatchModel(t, name)
		c := m.Config()
		tl := len(patchCorrupt)
		if _, err := m.Forward(patchCorrupt, 1, tl, &nn.RunOptions{KeepHeads: true}); err != nil {
			t.Fatal(err)
		}
		mt := Metric{Target: 2, Foil: 6, Position: tl - 1}
		p := &patcher{m: m, cfg: c, ac: c.Attention(), mt: mt, t: tl, corrupt: patchCorrupt}
		var jobs []job
		for l := range c.Layers {
			z := slices.Clone(m.Heads(l).Data)
			for h := range c.Heads {
				jobs = append(jobs, job{kind: kindHeads, layer: l, pos: h, src: z})
			}
		}
		lds := make([]float64, len(jobs))
		if err := p.run(jobs, lds); err != nil {
			t.Fatal(err)
		}
		logits, err := m.Forward(patchCorrupt, 1, tl, nil)
		if err != nil {
			t.Fatal(err)
		}
		base := mt.ld(logits.Data, 0, tl, c.Vocab)
		for i, ld := range lds {
			if math.Abs(ld-base) > 1e-5 {
				t.Errorf("%s: layer %d, head %d patched with its own output: LD %g, unpatched %g", name, jobs[i].layer, jobs[i].pos, ld, base)
			}
		}
	}
}

// TestMixHeads checks pattern patching's recomputation of the heads: the clean run's weights
// times the values recomputed from its attention input are its head outputs, in float32 and
// half-precision models, with grouped K/V heads and heads of different sizes.
func TestMixHeads(t *testing.T) {
	for name := range patchConfigs {
		m := newPatchModel(t, name)
		models := map[string]*nn.Model{name: m}
		if !m.Config().Bidirectional { // one half-precision model is enough
			models[name+"/bf16"] = halfModel(t, m)
		}
		for mname, m := range models {
			c := m.Config()
			tl := len(patchClean)
			if _, err := m.Forward(patchClean, 1, tl, &nn.RunOptions{KeepHeads: true, KeepWeights: true}); err != nil {
				t.Fatal(err)
			}
			for l := range c.Layers {
				v, err := values(m, l, m.AttnInput(l).Data, tl)
				if err != nil {
					t.Fatal(err)
				}
				z := mixHeads(c.Attention(), m.Weights(l).Data, v, tl)
				if d := maxAbsDiff(z, m.Heads(l).Data); d > 1e-5 {
					t.Errorf("%s, layer %d: A·V recomputed differs from the heads by %g", mname, l, d)
				}
			}
		}
	}
}

// halfModel returns a bfloat16 model holding m's parameters rounded.
func halfModel(t *testing.T, m *nn.Model) *nn.Model {
	t.Helper()
	sd := map[string]*tensor.Half{}
	for name, v := range m.StateDict() {
		h := &tensor.Half{Shape: slices.Clone(v.Shape), Data: make([]uint16, len(v.Data)), Format: tensor.BFloat16}
		kernel.EncodeBF16(h.Data, v.Data)
		sd[name] = h
	}
	half, err := nn.NewModelHalf(m.Config(), sd)
	if err != nil {
		t.Fatal(err)
	}
	return half
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestPatchErrors checks that bad input is an error, never a panic.
func TestPatchErrors(t *testing.T) {
	m := newPatchModel(t, "gpt2")
	long := make([]int, 11)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name           string
		m              *nn.Model
		clean, corrupt []int
		mt             Metric
		opt            PatchOptions
		want           string
	}{
		{"lengths", m, patchClean, patchCorrupt[:6], Metric{Position: 0, Target: 1}, PatchOptions{}, "clean prompt has 7 tokens, corrupted 6; want the same length"},
		{"empty", m, nil, nil, Metric{}, PatchOptions{}, "empty"},
		{"same", m, patchClean, patchClean, Metric{Target: 1, Foil: 2, Position: 6}, PatchOptions{}, "do not differ"},
		{"same target and foil", m, patchClean, patchCorrupt, Metric{Target: 1, Foil: 1, Position: 6}, PatchOptions{}, "do not differ"},
		{"position", m, patchClean, patchCorrupt, Metric{Target: 1, Position: 7}, PatchOptions{}, "position 7"},
		{"target", m, patchClean, patchCorrupt, Metric{Target: 13, Position: 6}, PatchOptions{}, "target token 13"},
		{"foil", m, patchClean, patchCorrupt, Metric{Foil: -1, Position: 6}, PatchOptions{}, "foil token -1"},
		{"token", m, []int{1, 99}, []int{1, 2}, Metric{Target: 1, Position: 1}, PatchOptions{}, "clean prompt"},
		{"corrupt token", m, []int{1, 2}, []int{1, -2}, Metric{Target: 1, Position: 1}, PatchOptions{}, "corrupted prompt"},
		{"too long", m, long, long, Metric{Target: 1, Position: 10}, PatchOptions{}, "seq_len"},
		{"batch", m, patchClean, patchCorrupt, Metric{Target: 1, Position: 6}, PatchOptions{Batch: -1}, "batch -1"},
		{"nil model", nil, patchClean, patchCorrupt, Metric{Target: 1, Position: 6}, PatchOptions{}, "nil model"},
		{"cancelled", m, patchClean, patchCorrupt, Metric{Target: 1, Foil: 2, Position: 6}, PatchOptions{Context: cancelled}, "patching stopped after 0 of 12 runs: context canceled"},
	} {
		_, err := Patch(tc.m, tc.clean, tc.corrupt, tc.mt, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkPatchGPT2 patches all 144 heads of a randomly initialised model of GPT-2 small's
// shape (12 layers × 12 heads, d_model 768, vocabulary 50257) on prompts of 16 tokens.
func BenchmarkPatchGPT2(b *testing.B) {
	cfg := nn.Config{Vocab: 50257, SeqLen: 1024, DModel: 768, Heads: 12, Layers: 12, FFN: 3072, Norm: nn.PreNorm,
		Positions: nn.Learned, Activation: nn.GELUNew, TieEmbeddings: true, NoHeadBias: true, Seed: 1}
	m, err := nn.NewModel(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const tl = 16
	clean, corrupt := make([]int, tl), make([]int, tl)
	for i := range clean {
		clean[i] = (i*7919 + 13) % cfg.Vocab
		corrupt[i] = clean[i]
	}
	corrupt[tl/2] = 42
	mt := Metric{Target: 100, Foil: 200, Position: tl - 1}
	for _, batch := range []int{0, 1, 48} {
		name := "batch=" + strconv.Itoa(batch)
		if batch == 0 {
			name = "batch=auto"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				res, err := Patch(m, clean, corrupt, mt, PatchOptions{Batch: batch})
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Heads) != 12 || len(res.Heads[0]) != 12 {
					b.Fatalf("heads grid %d × %d", len(res.Heads), len(res.Heads[0]))
				}
			}
		})
	}
}

// TestPatchGolden compares Patch on the tiny GPT-2, Llama (grouped K/V heads, rotary), Llama 3
// (bfloat16 weights, one K/V head for four query heads), Qwen3 (qk-norm, heads wider than
// d_model/heads), Gemma (GeGLU, scaled embeddings), Phi-3 (fused projections, partial rotary,
// a window), Gemma 2 (soft-caps), Gemma 3 (sandwich norms, local layers), Pythia and Phi-2
// (parallel attention and MLP), OLMo 2 (outputs normalised, qk-norm across the heads), Mixtral
// (a mixture of experts) and BERT folders with the float64 PyTorch
// reference of testdata/gen_circuits_patch.py: the raw LDs and the normalised scores of head, residual and
// pattern patching, within 1e-4.
func TestPatchGolden(t *testing.T) {
	for _, name := range []string{"gpt2", "llama", "llama3-bf16", "qwen3-wide", "gemma", "phi3", "gemma2", "gemma3", "pythia", "phi2", "olmo2", "mixtral", "bert"} {
		pm, err := pretrained.Open(filepath.Join("..", "testdata", "pretrained", name))
		if err != nil {
			t.Fatal(err)
		}
		g, err := safetensors.ReadFile(filepath.Join("..", "testdata", "circuits", "patch-"+name+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		read := func(key string) ([]float64, []int) {
			v, shape, err := g.Float64(key)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v, shape
		}
		ints := func(key string) []int {
			v, _ := read(key)
			out := make([]int, len(v))
			for i, x := range v {
				out[i] = int(x)
			}
			return out
		}
		clean, corrupt, metric := ints("clean"), ints("corrupt"), ints("metric")
		mt := Metric{Target: metric[0], Foil: metric[1], Position: metric[2]}
		res, err := Patch(pm.NN, clean, corrupt, mt, PatchOptions{Residual: true, Patterns: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ld, _ := read("ld")
		if math.Abs(res.LDClean-ld[0]) > 1e-4 || math.Abs(res.LDCorrupt-ld[1]) > 1e-4 {
			t.Errorf("%s: LD clean %g, corrupted %g; reference %g, %g", name, res.LDClean, res.LDCorrupt, ld[0], ld[1])
		}
		for _, grid := range []struct {
			key        string
			raw, score [][]float64
		}{{"heads", res.HeadsLD, res.Heads}, {"residual", res.ResidualLD, res.Residual}, {"patterns", res.PatternsLD, res.Patterns}} {
			want, shape := read(grid.key)
			if len(grid.raw) != shape[0] || len(grid.raw[0]) != shape[1] {
				t.Fatalf("%s: %s is %d × %d, reference %v", name, grid.key, len(grid.raw), len(grid.raw[0]), shape)
			}
			var worstRaw, worstScore float64
			for i := range shape[0] {
				for j := range shape[1] {
					w := want[i*shape[1]+j]
					worstRaw = max(worstRaw, math.Abs(grid.raw[i][j]-w))
					worstScore = max(worstScore, math.Abs(grid.score[i][j]-(w-ld[1])/(ld[0]-ld[1])))
				}
			}
			if worstRaw > 1e-4 || worstScore > 1e-4 {
				t.Errorf("%s: %s differs from the reference by %.3g (LD), %.3g (score)", name, grid.key, worstRaw, worstScore)
			} else {
				t.Logf("%s: %s within %.2g (LD), %.2g (score)", name, grid.key, worstRaw, worstScore)
			}
		}
	}
}
