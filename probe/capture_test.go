package probe

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// testModel returns a small untrained model for the prev-token task and the task.
func testModel(t *testing.T) (*nn.Model, tasks.Task) {
	t.Helper()
	tk, err := tasks.New("prev-token", tasks.Config{SeqLen: 8, Vocab: 10})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(nn.Config{Vocab: tk.Vocab(), SeqLen: 8, DModel: 12, Heads: 3, Layers: 2, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return m, tk
}

// cutHead returns a copy of m whose layer's out_proj reads nothing from head h and adds
// W_o·mean to its bias, mean [E] being the replacement of the head's output (nil for 0).
func cutHead(t *testing.T, m *nn.Model, layer, h, d int, mean []float32) *nn.Model {
	t.Helper()
	c, err := nn.NewModel(m.Config())
	if err != nil {
		t.Fatal(err)
	}
	sd := map[string]*tensor.Tensor{}
	for name, v := range m.StateDict() {
		sd[name] = v.Clone()
	}
	e := m.Config().DModel
	prefix := fmt.Sprintf("blocks.%d.attn.out_proj.", layer)
	w, b := sd[prefix+"weight"].Data, sd[prefix+"bias"].Data
	for i := range e {
		for j := h * d; j < (h+1)*d; j++ {
			if mean != nil {
				b[i] += w[i*e+j] * mean[j]
			}
			w[i*e+j] = 0
		}
	}
	if err := c.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRecord checks that a capture is the plain forward's, and that each ablation equals a
// model changed by hand: zero and mean ablation cut the head's columns of out_proj (mean adds
// W_o·mean to the bias), uniform ablation gives weights 1/(t+1).
func TestRecord(t *testing.T) {
	m, tk := testModel(t)
	bt, err := tk.Batch(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := m.Forward(bt.Tokens, 4, 8, &nn.RunOptions{KeepWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(plain.Data)
	w1 := slices.Clone(m.Weights(1).Data)
	c, err := Record(m, bt.Tokens, 4, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Logits.Data, want) || !slices.Equal(c.Weights[1].Data, w1) {
		t.Fatal("Record without ablation differs from Forward")
	}
	if !slices.Equal(c.HeadDims, []int{4, 4, 4}) || !slices.Equal(c.HeadOffsets, []int{0, 4, 8}) || len(c.Heads) != 2 || !slices.Equal(c.Heads[0].Shape, []int{4, 8, 12}) {
		t.Fatalf("capture layout: dims %v offsets %v heads %d %v", c.HeadDims, c.HeadOffsets, len(c.Heads), c.Heads[0].Shape)
	}

	mean := make([]float32, 12)
	addMeans(mean, c.Heads[0], 1)
	for _, tc := range []struct {
		mode AblationMode
		ref  *nn.Model
	}{
		{AblateZero, cutHead(t, m, 0, 1, 4, nil)},
		{AblateMean, cutHead(t, m, 0, 1, 4, mean)},
	} {
		got, err := Record(m, bt.Tokens, 4, 8, &RecordOptions{Ablate: []Ablation{{Layer: 0, Head: 1, Mode: tc.mode}}})
		if err != nil {
			t.Fatal(err)
		}
		ref, err := tc.ref.Forward(bt.Tokens, 4, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := tensor.RelError(got.Logits.Data, f64(ref.Data)); e > 1e-5 {
			t.Errorf("%s ablation differs from the cut model by %.3g", tc.mode, e)
		}
		if e := tensor.RelError(got.Logits.Data, f64(want)); e < 1e-4 {
			t.Errorf("%s ablation changed the logits by only %.3g", tc.mode, e)
		}
	}

	u, err := Record(m, bt.Tokens, 4, 8, &RecordOptions{Ablate: []Ablation{{Layer: 1, Head: 2, Mode: AblateUniform}}})
	if err != nil {
		t.Fatal(err)
	}
	for b := range 4 {
		for q := range 8 {
			for j := range 8 {
				want := 0.0
				if j <= q {
					want = 1 / float64(q+1)
				}
				if got := float64(u.Weights[1].Data[((b*3+2)*8+q)*8+j]); math.Abs(got-want) > 1e-6 {
					t.Fatalf("uniform head: α[%d,%d,%d] = %v, want %v", b, q, j, got, want)
				}
			}
		}
	}
	if !slices.Equal(u.Weights[0].Data, c.Weights[0].Data) {
		t.Error("uniform ablation in layer 1 changed layer 0's weights")
	}
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestImportance checks Michel et al.'s importance on one sequence against central differences
// of its loss in each head's gate, normalised per layer.
func TestImportance(t *testing.T) {
	m, tk := testModel(t)
	cfg := EvalConfig{Batches: 1, Batch: 1, Seed: 3}
	imp, err := Importance(m, tk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := tk.Batch(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	mc := m.Config()
	lossAt := func(l, h int, x float32) float64 {
		hos := make([]mha.HeadOptions, mc.Layers)
		for i := range hos {
			hos[i].Gate = ones(1, mc.Heads)
		}
		hos[l].Gate.Data[h] = x
		if _, err := m.Forward(bt.Tokens, 1, bt.T, &nn.RunOptions{Heads: hos}); err != nil {
			t.Fatal(err)
		}
		loss, _, _, err := m.Loss(bt.Targets, bt.Scored)
		if err != nil {
			t.Fatal(err)
		}
		return loss
	}
	for l := range mc.Layers {
		fd := make([]float64, mc.Heads)
		norm := 0.0
		for h := range fd {
			fd[h] = math.Abs(lossAt(l, h, 1.01)-lossAt(l, h, 0.99)) / 0.02
			norm += fd[h] * fd[h]
		}
		for h := range fd {
			if want := fd[h] / math.Sqrt(norm); math.Abs(imp[l][h]-want) > 5e-3 {
				t.Errorf("layer %d head %d: importance %.4f, central difference %.4f", l, h, imp[l][h], want)
			}
		}
	}
	for _, p := range m.Params() {
		if slices.ContainsFunc(p.Grad.Data, func(x float32) bool { return x != 0 }) {
			t.Fatalf("Importance left a gradient in %s", p.Name)
		}
	}
}

// TestAblateAndPrune checks that the pruning curve starts at the model's own score, removes the
// heads in order of importance, ends with every head gone, and agrees with Ablate.
func TestAblateAndPrune(t *testing.T) {
	m, tk := testModel(t)
	cfg := EvalConfig{Batches: 2, Batch: 8}
	imp := [][]float64{{0.5, 0.1, 0.9}, {0.3, 0.2, 0.7}}
	curve, err := Prune(m, tk, imp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(curve) != 7 || curve[6].Fraction != 1 {
		t.Fatalf("curve has %d points ending at fraction %v, want 7 ending at 1", len(curve), curve[len(curve)-1].Fraction)
	}
	order := []Ablation{{0, 1, AblateZero}, {1, 1, AblateZero}, {1, 0, AblateZero}, {0, 0, AblateZero}, {1, 2, AblateZero}, {0, 2, AblateZero}}
	for k, p := range curve[1:] {
		if *p.Last != order[k] {
			t.Errorf("point %d removed %+v, want %+v", k+1, *p.Last, order[k])
		}
	}
	r, err := Ablate(m, tk, order[:3], cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Base != curve[0].Score || r.Ablated != curve[3].Score {
		t.Errorf("Ablate gives %+v → %+v, the curve %+v → %+v", r.Base, r.Ablated, curve[0].Score, curve[3].Score)
	}
	for _, mode := range []AblationMode{AblateMean, AblateUniform} {
		r, err := Ablate(m, tk, []Ablation{{Layer: 1, Head: 0, Mode: mode}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Base != curve[0].Score || r.Ablated == r.Base {
			t.Errorf("%s: base %+v (curve %+v), ablated %+v", mode, r.Base, curve[0].Score, r.Ablated)
		}
	}
}

func TestAblationErrors(t *testing.T) {
	m, tk := testModel(t)
	for _, c := range []struct {
		abl  Ablation
		want string
	}{
		{Ablation{Layer: 2, Head: 0, Mode: AblateZero}, "layer 2 head 0, want layer in [0, 2)"},
		{Ablation{Layer: 0, Head: -1, Mode: AblateZero}, "head in [0, 3)"},
		{Ablation{Layer: 0, Head: 0, Mode: "half"}, `ablation mode "half", want zero, mean or uniform`},
	} {
		if _, err := Record(m, make([]int, 8), 1, 8, &RecordOptions{Ablate: []Ablation{c.abl}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Record %+v: %v, want %q", c.abl, err, c.want)
		}
		if _, err := Ablate(m, tk, []Ablation{c.abl}, EvalConfig{Batches: 1, Batch: 1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Ablate %+v: %v, want %q", c.abl, err, c.want)
		}
	}
	if _, err := Prune(m, tk, [][]float64{{1, 2, 3}}, EvalConfig{}); err == nil {
		t.Error("Prune accepted importance for 1 layer of a 2-layer model")
	}
}
