package nn

import (
	"math"
	"slices"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

// patchModels are the two layouts the residual-stream accessors differ on.
var patchModels = map[string]Config{
	"pre":  {Vocab: 11, SeqLen: 8, DModel: 12, Heads: 3, Layers: 3, FFN: 16, Norm: PreNorm, Positions: Learned, Seed: 3},
	"post": {Vocab: 11, SeqLen: 8, DModel: 12, Heads: 3, Layers: 3, FFN: 16, Norm: PostNorm, Positions: Learned, Seed: 4},
}

// TestResidualPatches checks activation patching of the residual stream: patching a corrupted
// run with the clean run's stream at every position of a layer's input gives the clean run
// from there on (at the last layer, the clean logits), patching one position changes nothing
// before it under causal attention, and an empty patch list changes nothing.
func TestResidualPatches(t *testing.T) {
	clean, corrupt := []int{1, 2, 3, 4, 5, 6}, []int{1, 2, 7, 4, 5, 6}
	for name, cfg := range patchModels {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Config()
		tl := len(clean)
		want, err := m.Forward(clean, 1, tl, &RunOptions{KeepHeads: true})
		if err != nil {
			t.Fatal(err)
		}
		wantLogits := slices.Clone(want.Data)
		streams := make([][]float32, c.Layers+1)
		for l := range streams {
			streams[l] = slices.Clone(m.Residual(l).Data)
		}
		base, err := m.Forward(corrupt, 1, tl, nil)
		if err != nil {
			t.Fatal(err)
		}
		baseLogits := slices.Clone(base.Data)
		for l := range c.Layers + 1 {
			var patches []ResidualPatch
			for p := range tl {
				patches = append(patches, ResidualPatch{Layer: l, Pos: p, Value: streams[l][p*c.DModel:][:c.DModel]})
			}
			got, err := m.Forward(corrupt, 1, tl, &RunOptions{Patches: patches})
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(got.Data, wantLogits); d > 1e-5 {
				t.Errorf("%s: every position patched at layer %d: logits differ from the clean run's by %g", name, l, d)
			}
			if err := m.Backward(); err == nil {
				t.Errorf("%s: Backward after a patched Forward gave no error", name)
			}
		}
		// One position, the last layer: only that position's logits change, to the clean ones.
		last := tl - 1
		got, err := m.Forward(corrupt, 1, tl, &RunOptions{Patches: []ResidualPatch{{Layer: c.Layers, Pos: last, Value: streams[c.Layers][last*c.DModel:][:c.DModel]}}})
		if err != nil {
			t.Fatal(err)
		}
		v := c.Vocab
		if d := maxDiff(got.Data[last*v:], wantLogits[last*v:]); d > 1e-5 {
			t.Errorf("%s: last position patched at the output: logits differ from the clean ones by %g", name, d)
		}
		if d := maxDiff(got.Data[:last*v], baseLogits[:last*v]); d != 0 {
			t.Errorf("%s: last position patched: earlier logits changed by %g", name, d)
		}
		got, err = m.Forward(corrupt, 1, tl, &RunOptions{Patches: []ResidualPatch{}})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(got.Data, baseLogits); d != 0 {
			t.Errorf("%s: no patch changed the logits by %g", name, d)
		}
	}
}

// TestResidualDecomposition checks the accessors against each other: in a pre-norm model the
// stream after the attention is the stream before plus the heads through the output
// projection, and the last stream normalised is Hidden.
func TestResidualDecomposition(t *testing.T) {
	m, err := NewModel(patchModels["pre"])
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}
	b, tl, d := 2, 6, c.DModel
	if _, err := m.Forward(tokens, b, tl, &RunOptions{KeepHeads: true}); err != nil {
		t.Fatal(err)
	}
	for l := range c.Layers {
		in, mid, heads := m.Residual(l).Data, m.ResidualMid(l).Data, m.Heads(l).Data
		wo := m.Param(blockName(l, "attn.out_proj.weight")).Value.Data
		bo := m.Param(blockName(l, "attn.out_proj.bias")).Value.Data
		for i := range b * tl {
			for j := range d {
				s := float64(in[i*d+j]) + float64(bo[j])
				for k := range d {
					s += float64(heads[i*d+k]) * float64(wo[j*d+k])
				}
				if diff := math.Abs(s - float64(mid[i*d+j])); diff > 1e-5 {
					t.Fatalf("layer %d, row %d, column %d: Residual + heads·W_Oᵀ + b_O = %g, ResidualMid %g", l, i, j, s, mid[i*d+j])
				}
			}
		}
		if got := m.AttnInput(l); !slices.Equal(got.Shape, []int{b, tl, d}) {
			t.Errorf("AttnInput(%d) is %v, want %v", l, got.Shape, []int{b, tl, d})
		}
	}
	// The final LayerNorm of the last stream is Hidden.
	out, hidden := m.Residual(c.Layers).Data, m.Hidden().Data
	g, beta := m.Param("ln_f.weight").Value.Data, m.Param("ln_f.bias").Value.Data
	for i := range b * tl {
		row := out[i*d:][:d]
		var mean, v float64
		for _, x := range row {
			mean += float64(x)
		}
		mean /= float64(d)
		for _, x := range row {
			v += (float64(x) - mean) * (float64(x) - mean)
		}
		sd := math.Sqrt(v/float64(d) + 1e-5)
		for j, x := range row {
			if want := (float64(x)-mean)/sd*float64(g[j]) + float64(beta[j]); math.Abs(want-float64(hidden[i*d+j])) > 1e-5 {
				t.Fatalf("row %d, column %d: LayerNorm(Residual(L)) = %g, Hidden %g", i, j, want, hidden[i*d+j])
			}
		}
	}
	for _, l := range []int{-1, c.Layers + 1} {
		if m.Residual(l) != nil {
			t.Errorf("Residual(%d) is not nil", l)
		}
	}
	if m.ResidualMid(c.Layers) != nil || m.AttnInput(c.Layers) != nil {
		t.Errorf("ResidualMid or AttnInput of layer %d (= Layers) is not nil", c.Layers)
	}
}

// TestResidualPatchErrors checks that a patch outside the model or the call is an error.
func TestResidualPatchErrors(t *testing.T) {
	m, err := NewModel(patchModels["pre"])
	if err != nil {
		t.Fatal(err)
	}
	ok := make([]float32, m.Config().DModel)
	for name, p := range map[string]ResidualPatch{
		"layer":    {Layer: 4, Value: ok},
		"negative": {Layer: -1, Value: ok},
		"batch":    {Batch: 1, Value: ok},
		"position": {Pos: 3, Value: ok},
		"values":   {Value: ok[1:]},
	} {
		if _, err := m.Forward([]int{1, 2, 3}, 1, 3, &RunOptions{Patches: []ResidualPatch{p}}); err == nil {
			t.Errorf("%s: no error for %+v", name, p)
		}
	}
}

// TestHeadPatch checks head patching through mha.HeadOptions: gate 0 and Add holding the clean
// run's head output replaces that head's output.
func TestHeadPatch(t *testing.T) {
	m, err := NewModel(patchModels["pre"])
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	clean, corrupt := []int{1, 2, 3, 4}, []int{1, 8, 3, 4}
	tl, d, h := len(clean), c.DModel, c.Heads
	if _, err := m.Forward(clean, 1, tl, &RunOptions{KeepHeads: true}); err != nil {
		t.Fatal(err)
	}
	cleanHeads := slices.Clone(m.Heads(1).Data)
	gate := tensor.New(1, h)
	for i := range gate.Data {
		gate.Data[i] = 1
	}
	gate.Data[2] = 0
	add := tensor.New(1, tl, d)
	o, w := 2*d/h, d/h
	for p := range tl {
		copy(add.Data[p*d+o:][:w], cleanHeads[p*d+o:][:w])
	}
	heads := []mha.HeadOptions{{}, {Gate: gate, Add: add}}
	if _, err := m.Forward(corrupt, 1, tl, &RunOptions{KeepHeads: true, Heads: heads}); err != nil {
		t.Fatal(err)
	}
	// The layer's output is that of its heads after the patch: the clean head 2 and the
	// corrupted heads 0 and 1, so the stream after it differs from the unpatched run's.
	patchedMid := slices.Clone(m.ResidualMid(1).Data)
	in := slices.Clone(m.Residual(1).Data)
	own := slices.Clone(m.Heads(1).Data) // kept before the gate and Add
	for p := range tl {
		copy(own[p*d+o:][:w], cleanHeads[p*d+o:][:w])
	}
	wo := m.Param(blockName(1, "attn.out_proj.weight")).Value.Data
	bo := m.Param(blockName(1, "attn.out_proj.bias")).Value.Data
	for i := range tl {
		for j := range d {
			s := float64(in[i*d+j]) + float64(bo[j])
			for k := range d {
				s += float64(own[i*d+k]) * float64(wo[j*d+k])
			}
			if diff := math.Abs(s - float64(patchedMid[i*d+j])); diff > 1e-5 {
				t.Fatalf("row %d, column %d: stream after the patched layer %g, want %g", i, j, patchedMid[i*d+j], s)
			}
		}
	}
}

// maxDiff returns the largest |a[i] − b[i]| over the shorter length.
func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range min(len(a), len(b)) {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// TestUnembed checks that Unembed of the last stream gives Forward's logits, for pre- and
// post-norm models, and that bad shapes are errors.
func TestUnembed(t *testing.T) {
	for name, cfg := range patchModels {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Config()
		logits, err := m.Forward([]int{1, 2, 3, 4, 5, 6}, 2, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(logits.Data)
		x := m.Residual(c.Layers)
		got, err := m.Unembed(&tensor.Tensor{Shape: []int{6, c.DModel}, Data: slices.Clone(x.Data)}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Shape, []int{6, c.Vocab}) || maxDiff(got.Data, want) != 0 {
			t.Errorf("%s: Unembed is %v, %g from Forward's logits", name, got.Shape, maxDiff(got.Data, want))
		}
		if m.Residual(0) != nil {
			t.Errorf("%s: Residual after Unembed is not nil", name)
		}
		for _, bad := range []*tensor.Tensor{nil, tensor.New(6), tensor.New(0, c.DModel), tensor.New(2, c.DModel+1), {Shape: []int{2, c.DModel}, Data: make([]float32, 3)}} {
			if _, err := m.Unembed(bad, 1); err == nil {
				t.Errorf("%s: Unembed of %v: no error", name, bad)
			}
		}
	}
}
