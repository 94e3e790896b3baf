package circuits

import (
	"errors"
	"math"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// denseCircuits returns head's raw OV and QK circuits of an unfolded model, [Vocab, Vocab],
// computed from the PyTorch-layout parameters directly.
func denseCircuits(t *testing.T, m *nn.Model, layer, head int) (ov, qk *mat.Dense) {
	t.Helper()
	cfg := m.Config()
	e, d, v := cfg.DModel, cfg.DModel/cfg.Heads, cfg.Vocab
	p := func(name string, r, c int) *mat.Dense {
		x, err := weightParam(m, name, r, c)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	in := p("blocks.0.attn.in_proj_weight", 3*e, e)
	out := p("blocks.0.attn.out_proj.weight", e, e)
	emb := p("tok_emb.weight", v, e)
	un := emb
	if !cfg.TieEmbeddings {
		un = p("head.weight", v, e)
	}
	o := head * d
	wq, wk, wv := in.Slice(o, o+d, 0, e), in.Slice(e+o, e+o+d, 0, e), in.Slice(2*e+o, 2*e+o+d, 0, e)
	wo := out.Slice(0, e, o, o+d)
	var a, b, c, x, y mat.Dense
	a.Mul(emb, wv.T()) // [V, d]
	b.Mul(&a, wo.T())  // [V, E]
	c.Mul(&b, un.T())  // [V, V]
	x.Mul(emb, wq.T())
	y.Mul(emb, wk.T())
	var q mat.Dense
	q.Mul(&x, y.T())
	return &c, &q
}

func TestCircuitsMatchDense(t *testing.T) {
	for _, tie := range []bool{false, true} {
		m := newWeightTestModel(t, 16, 4, 1, func(c *nn.Config) { c.TieEmbeddings = tie })
		raw := &WeightOptions{NoFold: true}
		for h := range 4 {
			wantOV, wantQK := denseCircuits(t, m, 0, h)
			ov, err := OVCircuit(m, 0, h, raw)
			if err != nil {
				t.Fatal(err)
			}
			qk, err := QKCircuit(m, 0, h, raw)
			if err != nil {
				t.Fatal(err)
			}
			if !mat.EqualApprox(ov, wantOV, 1e-9) || !mat.EqualApprox(qk, wantQK, 1e-9) {
				t.Errorf("tie %v head %d: circuits differ from the dense products", tie, h)
			}
			// Folded: every OV row is centred.
			fov, _ := OVCircuit(m, 0, h, nil)
			r, _ := fov.Dims()
			for i := range r {
				if s := mat.Sum(fov.RowView(i)); math.Abs(s) > 1e-9 {
					t.Fatalf("folded OV row %d sums to %v, want 0", i, s)
				}
			}
		}
		tc, err := TokenCircuits(m, 3, raw)
		if err != nil {
			t.Fatal(err)
		}
		if len(tc) != 4 || len(tc[2].OV) != 3 {
			t.Fatalf("%d heads, %d pairs; want 4 and 3", len(tc), len(tc[2].OV))
		}
		wantOV, _ := denseCircuits(t, m, 0, 2)
		best := mat.Max(wantOV)
		if p := tc[2].OV[0]; math.Abs(p.Value-best) > 1e-9 || math.Abs(wantOV.At(p.Row, p.Col)-best) > 1e-9 {
			t.Errorf("top OV pair %+v, want the maximum %v", p, best)
		}
		for i := 1; i < 3; i++ {
			if tc[2].OV[i].Value > tc[2].OV[i-1].Value {
				t.Errorf("pairs not in descending order: %+v", tc[2].OV)
			}
		}
	}
}

func TestTopPairsTies(t *testing.T) {
	c := mat.NewDense(2, 3, []float64{1, 5, 5, 5, 0, 2})
	got := topPairs(c, 4)
	want := []TokenPair{{0, 1, 5}, {0, 2, 5}, {1, 0, 5}, {1, 2, 2}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("topPairs = %v, want %v", got, want)
		}
	}
	all := topPairs(c, 6)
	for _, n := range []int{10, math.MaxInt} {
		if got := topPairs(c, n); !slices.Equal(got, all) {
			t.Errorf("topPairs(c, %d) = %v, want all 6 pairs %v", n, got, all)
		}
	}
}

func TestCircuitsHalfPrecision(t *testing.T) {
	// A model held in bfloat16 gives the circuits of its decoded weights.
	fm := newWeightTestModel(t, 16, 4, 2, nil)
	sd := map[string]*tensor.Half{}
	for name, v := range fm.StateDict() {
		h := &tensor.Half{Shape: slices.Clone(v.Shape), Data: make([]uint16, len(v.Data)), Format: tensor.BFloat16}
		kernel.EncodeBF16(h.Data, v.Data)
		kernel.DecodeHalf(v.Data, h.Data, true) // fm now holds the rounded values
		sd[name] = h
	}
	hm, err := nn.NewModelHalf(fm.Config(), sd)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Composition(hm, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Composition(fm, nil)
	if a.Pairs[0].Q[1][2] != b.Pairs[0].Q[1][2] {
		t.Errorf("bf16 model %v, its decoded float32 model %v", a.Pairs[0].Q[1][2], b.Pairs[0].Q[1][2])
	}
}

func TestCircuitsErrors(t *testing.T) {
	m := newWeightTestModel(t, 16, 4, 2, nil)
	for _, a := range [][2]int{{-1, 0}, {2, 0}, {0, 4}, {0, -1}} {
		if _, err := OVCircuit(m, a[0], a[1], nil); !errors.Is(err, ErrArgument) {
			t.Errorf("OVCircuit%v: %v, want ErrArgument", a, err)
		}
		if _, err := QKCircuit(m, a[0], a[1], nil); !errors.Is(err, ErrArgument) {
			t.Errorf("QKCircuit%v: %v, want ErrArgument", a, err)
		}
	}
	if _, err := TokenCircuits(m, 0, nil); !errors.Is(err, ErrArgument) {
		t.Errorf("top 0: %v, want ErrArgument", err)
	}
	if _, err := TokenCircuits(nil, 1, nil); !errors.Is(err, ErrModel) {
		t.Errorf("nil model: %v, want ErrModel", err)
	}
	big := newWeightTestModel(t, 8, 2, 1, func(c *nn.Config) { c.Vocab = MaxCircuitVocab + 1 })
	if _, err := TokenCircuits(big, 1, nil); !errors.Is(err, ErrArgument) {
		t.Errorf("vocabulary %d: %v, want ErrArgument", MaxCircuitVocab+1, err)
	}
}
