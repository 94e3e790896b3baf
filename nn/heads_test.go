package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

// headsBatch is a fixed batch for the head tests: B = 3 sequences of T = 6 tokens.
func headsBatch() (tokens, targets []int) {
	for i := range 18 {
		tokens = append(tokens, (i*7+3)%11)
		targets = append(targets, (i*5+1)%11)
	}
	return tokens, targets
}

// TestGateGrad checks dL/dGate at gates of 1 against the identity Σ_b dL/dξ_{b,h} =
// Σ_{i, j ∈ head h} W_o[i, j]·dW_o[i, j], which holds because the gate scales the columns of the
// output projection that head h reads; and checks that gating changes nothing at 1.
func TestGateGrad(t *testing.T) {
	cfg := testConfig()
	cfg.DModel, cfg.Heads, cfg.HeadDims, cfg.HeadScales = 10, 2, []int{4, 6}, []float64{0.3, 0.5}
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens, targets := headsBatch()
	plain, err := m.Forward(tokens, 3, 6, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), plain.Data...)
	gates := make([]mha.HeadOptions, cfg.Layers)
	for l := range gates {
		g := tensor.New(3, 2)
		for i := range g.Data {
			g.Data[i] = 1
		}
		gates[l].Gate = g
	}
	got, err := m.Forward(tokens, 3, 6, &RunOptions{Heads: gates})
	if err != nil {
		t.Fatal(err)
	}
	if e := tensor.RelError(got.Data, f64(want)); e != 0 {
		t.Errorf("gates of 1 change the logits by %.3g", e)
	}
	if _, _, _, err := m.Loss(targets, nil); err != nil {
		t.Fatal(err)
	}
	ZeroGrads(m.Params())
	if err := m.Backward(); err != nil {
		t.Fatal(err)
	}
	sd := m.StateDict()
	for l := range cfg.Layers {
		gg := m.GateGrad(l)
		if gg == nil || len(gg.Data) != 6 {
			t.Fatalf("layer %d: GateGrad = %v", l, gg)
		}
		wo := sd[blockName(l, "attn.out_proj.weight")].Data
		var dwo []float32
		for _, p := range m.Params() {
			if p.Name == blockName(l, "attn.out_proj.weight") {
				dwo = p.Grad.Data
			}
		}
		for h, cols := range [][2]int{{0, 4}, {4, 10}} {
			want := 0.0
			for i := range 10 {
				for j := cols[0]; j < cols[1]; j++ {
					want += float64(wo[i*10+j]) * float64(dwo[i*10+j])
				}
			}
			sum := 0.0
			for b := range 3 {
				sum += float64(gg.Data[b*2+h])
			}
			if math.Abs(sum-want) > 1e-5*(1+math.Abs(want)) {
				t.Errorf("layer %d head %d: Σ_b dL/dξ = %v, want Σ W_o·dW_o = %v", l, h, sum, want)
			}
		}
	}
	if m.GateGrad(cfg.Layers) != nil || m.GateGrad(-1) != nil {
		t.Error("GateGrad of a layer that does not exist is not nil")
	}
	if _, err := m.Forward(tokens, 3, 6, &RunOptions{Heads: append(gates, mha.HeadOptions{Uniform: []bool{true, true}})}); err == nil {
		t.Error("head interventions for a layer past the last: no error")
	}
}

func blockName(l int, rest string) string { return fmt.Sprintf("blocks.%d.%s", l, rest) }

// TestBackwardHeads checks the extra gradient on the head outputs by central differences of
// L + P, P = Σ c∘Heads(0), with respect to some embedding weights.
func TestBackwardHeads(t *testing.T) {
	m, err := NewModel(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	tokens, targets := headsBatch()
	c := tensor.New(3, 6, 8)
	tensor.NewRNG(3).Normal(c, 1)
	total := func() float64 {
		if _, err := m.Forward(tokens, 3, 6, &RunOptions{KeepHeads: true}); err != nil {
			t.Fatal(err)
		}
		loss, _, _, err := m.Loss(targets, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range m.Heads(0).Data {
			loss += float64(c.Data[i]) * float64(h)
		}
		return loss
	}
	total()
	ZeroGrads(m.Params())
	if err := m.BackwardHeads([]*tensor.Tensor{c}); err != nil {
		t.Fatal(err)
	}
	emb := m.Params()[0]
	for _, i := range []int{3 * 8, 7*8 + 5, 9*8 + 2} {
		x0 := emb.Value.Data[i]
		const h = 1.0 / 64
		emb.Value.Data[i] = x0 + h
		up := total()
		emb.Value.Data[i] = x0 - h
		down := total()
		emb.Value.Data[i] = x0
		fd, got := (up-down)/(2*h), float64(emb.Grad.Data[i])
		if math.Abs(fd-got) > 2e-3*(1+math.Abs(fd)) {
			t.Errorf("%s[%d]: gradient %v, central difference %v", emb.Name, i, got, fd)
		}
	}
	total()
	if err := m.BackwardHeads([]*tensor.Tensor{tensor.New(3, 6, 7)}); err == nil {
		t.Error("a head gradient of the wrong shape was accepted")
	}
}
