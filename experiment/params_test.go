package experiment

import (
	"testing"

	"github.com/mhalab/mha"
)

// TestParamCount checks the formula on configurations counted by hand.
func TestParamCount(t *testing.T) {
	for _, c := range []struct {
		cfg  mha.Config
		want int
	}{
		// 4·4² + 4·4: chapter 003's worked example.
		{mha.Config{EmbedDim: 4, NumHeads: 2}, 80},
		// q, k, v: 64·64 + 64·32 + 64·48; out: 64·64; biases 4·64.
		{mha.Config{EmbedDim: 64, NumHeads: 4, KDim: 32, VDim: 48}, 4096 + 2048 + 3072 + 4096 + 256},
		// No bias: 4·64²; bias_k and bias_v: 2·64.
		{mha.Config{EmbedDim: 64, NumHeads: 4, NoBias: true, AddBiasKV: true}, 4*4096 + 128},
		// add_zero_attn adds nothing; the heads' sizes change nothing.
		{mha.Config{EmbedDim: 160, NumHeads: 2, HeadDims: []int{32, 128}, AddZeroAttn: true}, 4*160*160 + 4*160},
	} {
		if got := ParamCount(c.cfg); got != c.want {
			t.Errorf("%+v: %d, want %d", c.cfg, got, c.want)
		}
	}
}

// TestParams checks that the experiment finds the formula, the built layer and its state dict in
// agreement everywhere, and the count independent of H at each swept width.
func TestParams(t *testing.T) {
	res := run(t, "params")
	data := res.Data.(*ParamsData)
	if len(data.Rows) != len(res.Table.Rows) || len(data.Rows) < 20 {
		t.Fatalf("%d rows of data, %d in the table", len(data.Rows), len(res.Table.Rows))
	}
	for i, r := range data.Rows {
		if r.Formula != r.Built || r.Built != r.StateDict || r.Built == 0 {
			t.Errorf("%+v: formula %d, built %d, state dict %d", r.Config, r.Formula, r.Built, r.StateDict)
		}
		if got := res.Table.Rows[i][len(res.Table.Columns)-1]; got != "yes" {
			t.Errorf("row %d: match %q", i, got)
		}
	}
	if len(data.FixedWidth) != len(sweepWidths) {
		t.Fatalf("%d sweeps, want %d", len(data.FixedWidth), len(sweepWidths))
	}
	for _, s := range data.FixedWidth {
		e := s.EmbedDim
		if s.Heads[0] != 1 || s.Heads[len(s.Heads)-1] != e {
			t.Errorf("d_model %d: heads %v, want 1 … %d", e, s.Heads, e)
		}
		for i, p := range s.Params {
			if p != 4*e*e+4*e {
				t.Errorf("d_model %d, H = %d: %d parameters, want 4·%d² + 4·%d", e, s.Heads[i], p, e, e)
			}
		}
	}
}
