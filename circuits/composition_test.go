package circuits

import (
	"errors"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/safetensors"
)

// compositionGoldenModels are the tiny Hugging Face checkpoints that testdata/gen_circuits.py read.
var compositionGoldenModels = []string{"gpt2", "llama", "qwen3-wide", "gemma", "gemma2", "gemma3", "pythia", "phi2", "bert"}

var (
	compositionGoldens  sync.Map // name → *compositionGoldenCase
	compositionGoldenMu sync.Mutex
)

type compositionGoldenCase struct {
	m   *nn.Model
	exp *safetensors.File
}

// compositionGolden opens testdata/pretrained/name and its goldens testdata/circuits/composition_name.safetensors, once
// per test binary.
func compositionGolden(t *testing.T, name string) *compositionGoldenCase {
	t.Helper()
	compositionGoldenMu.Lock()
	defer compositionGoldenMu.Unlock()
	if c, ok := compositionGoldens.Load(name); ok {
		return c.(*compositionGoldenCase)
	}
	pm, err := pretrained.Open(filepath.Join("..", "testdata", "pretrained", name))
	if err != nil {
		t.Fatal(err)
	}
	exp, err := safetensors.ReadFile(filepath.Join("..", "testdata", "circuits", "composition_"+name+".safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	c := &compositionGoldenCase{m: pm.NN, exp: exp}
	compositionGoldens.Store(name, c)
	return c
}

func (c *compositionGoldenCase) f64(t *testing.T, name string) ([]float64, []int) {
	t.Helper()
	d, shape, err := c.exp.Float64(name)
	if err != nil {
		t.Fatal(err)
	}
	return d, shape
}

const compositionTol = 1e-4

func TestCompositionGolden(t *testing.T) {
	for _, name := range compositionGoldenModels {
		t.Run(name, func(t *testing.T) {
			c := compositionGolden(t, name)
			for _, fold := range []bool{true, false} {
				got, err := Composition(c.m, &WeightOptions{NoFold: !fold})
				if err != nil {
					t.Fatal(err)
				}
				prefix := "comp_"
				if !fold {
					prefix = "raw_"
				}
				for _, mode := range []string{QComposition, KComposition, VComposition} {
					want, shape := c.f64(t, prefix+string(mode[0]+'a'-'A'))
					nl, h := shape[0], shape[1]
					for l1 := range nl {
						for h1 := range h {
							for l2 := l1 + 1; l2 < nl; l2++ {
								for h2 := range h {
									g, err := got.Score(mode, l1, h1, l2, h2)
									if err != nil {
										t.Fatal(err)
									}
									w := want[((l1*h+h1)*nl+l2)*h+h2]
									if math.Abs(g-w) > compositionTol {
										t.Errorf("fold %v %s-composition L%dH%d→L%dH%d = %.8f, PyTorch %.8f", fold, mode, l1, h1, l2, h2, g, w)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}

func TestTokenCircuitsGolden(t *testing.T) {
	for _, name := range compositionGoldenModels {
		t.Run(name, func(t *testing.T) {
			c := compositionGolden(t, name)
			got, err := TokenCircuits(c.m, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"ov", "qk"} {
				vals, shape := c.f64(t, kind+"_vals")
				rows, _ := c.f64(t, kind+"_rows") // I64, read as float64
				cols, _ := c.f64(t, kind+"_cols")
				h, top := shape[1], shape[2]
				for _, hc := range got {
					pairs := hc.OV
					if kind == "qk" {
						pairs = hc.QK
					}
					for i, p := range pairs {
						k := (hc.Layer*h+hc.Head)*top + i
						scale := math.Max(1, math.Abs(vals[k]))
						if p.Row != int(rows[k]) || p.Col != int(cols[k]) || math.Abs(p.Value-vals[k]) > compositionTol*scale {
							t.Errorf("%s L%dH%d #%d = (%d, %d, %.6f), PyTorch (%v, %v, %.6f)", kind, hc.Layer, hc.Head, i, p.Row, p.Col, p.Value, rows[k], cols[k], vals[k])
						}
					}
				}
			}
		})
	}
}

func TestSubspacesGolden(t *testing.T) {
	for _, name := range compositionGoldenModels {
		t.Run(name, func(t *testing.T) {
			c := compositionGolden(t, name)
			for l := range c.m.Config().Layers {
				ss, err := Subspaces(c.m, l)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range ss {
					ov, shape := c.f64(t, "overlap_"+s.Kind)
					an, _ := c.f64(t, "angle_"+s.Kind)
					n := shape[1]
					if len(s.Overlap) != n {
						t.Fatalf("layer %d %s: %d subspaces, PyTorch %d", l, s.Kind, len(s.Overlap), n)
					}
					for i := range n {
						for j := range n {
							k := (l*n+i)*n + j
							if math.Abs(s.Overlap[i][j]-ov[k]) > compositionTol {
								t.Errorf("layer %d %s overlap[%d][%d] = %.8f, PyTorch %.8f", l, s.Kind, i, j, s.Overlap[i][j], ov[k])
							}
							// Angles near 0 are ill-conditioned (arccos at 1); compare their cosines there.
							if math.Abs(s.MinAngle[i][j]-an[k]) > compositionTol && math.Abs(cosDeg(s.MinAngle[i][j])-cosDeg(an[k])) > 1e-12 {
								t.Errorf("layer %d %s angle[%d][%d] = %.8f°, PyTorch %.8f°", l, s.Kind, i, j, s.MinAngle[i][j], an[k])
							}
						}
					}
				}
			}
		})
	}
}

func cosDeg(a float64) float64 { return math.Cos(a * math.Pi / 180) }

// newWeightTestModel returns an attention-only pre-norm LayerNorm model with the given sizes.
func newWeightTestModel(t testing.TB, dModel, heads, layers int, mutate func(*nn.Config)) *nn.Model {
	t.Helper()
	cfg := nn.Config{Vocab: 12, SeqLen: 8, DModel: dModel, Heads: heads, Layers: layers, Norm: nn.PreNorm,
		Positions: nn.Learned, AttnOnly: true, Seed: 7}
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := nn.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCompositionScoresInUnitInterval(t *testing.T) {
	for _, kv := range []int{0, 2, 1, -1} {
		m := newWeightTestModel(t, 16, 4, 3, func(c *nn.Config) {
			if kv < 0 { // heads of different sizes
				c.HeadDims = []int{2, 6, 4, 4}
				return
			}
			c.KVHeads = kv
		})
		for _, opt := range []*WeightOptions{nil, {NoFold: true}} {
			c, err := Composition(m, opt)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Pairs) != 3 {
				t.Fatalf("%d layer pairs, want 3", len(c.Pairs))
			}
			for _, p := range c.Pairs {
				for _, tab := range [][][]float64{p.Q, p.K, p.V} {
					for _, row := range tab {
						for _, s := range row {
							if !(s >= 0 && s <= 1) {
								t.Errorf("kv %d: score %v outside [0, 1]", kv, s)
							}
						}
					}
				}
			}
			if !(c.Baseline > 0 && c.Baseline < 1) {
				t.Errorf("baseline %v outside (0, 1)", c.Baseline)
			}
		}
	}
}

// setHeadWeights writes head h's query, key, value and output blocks of layer l of an attention-only
// model without grouped heads: wq, wk, wv [d_model, d] and wo [d, d_model] in the row-vector
// convention (nil leaves a block alone).
func setHeadWeights(t testing.TB, m *nn.Model, l, h int, wq, wk, wv, wo *mat.Dense) {
	t.Helper()
	cfg := m.Config()
	e, d := cfg.DModel, cfg.DModel/cfg.Heads
	in := m.Param("blocks." + strconv.Itoa(l) + ".attn.in_proj_weight").Value.Data
	out := m.Param("blocks." + strconv.Itoa(l) + ".attn.out_proj.weight").Value.Data
	for part, w := range []*mat.Dense{wq, wk, wv} {
		if w == nil {
			continue
		}
		for j := range d {
			for i := range e {
				in[(part*e+h*d+j)*e+i] = float32(w.At(i, j))
			}
		}
	}
	if wo != nil {
		for j := range d {
			for i := range e {
				out[i*e+h*d+j] = float32(wo.At(j, i))
			}
		}
	}
}

// basisBlock returns the [n, len(scales)] matrix whose column j is scales[j]·e_{first+j}.
func basisBlock(n, first int, scales []float64) *mat.Dense {
	b := mat.NewDense(n, len(scales), nil)
	for j, s := range scales {
		b.Set(first+j, j, s)
	}
	return b
}

func TestCompositionWriteReadIsHigh(t *testing.T) {
	// Head 0 of layer 0 reads e4…e7 and writes into e0…e3, and head 0 of layer 1 reads its
	// queries, keys and values from exactly e0…e3 and writes there too, all with the steep
	// spectrum 1, 0.1, 0.01, 0.001: the scores of that pair are near 1 (1 needs rank-1 circuits;
	// a flat spectrum gives 1/√d_head), far above every other pair's and the baseline. Raw
	// weights, since folding centres the blocks.
	m := newWeightTestModel(t, 16, 4, 2, nil)
	s := []float64{1, 0.1, 0.01, 0.001}
	one := []float64{1, 1, 1, 1}
	read := basisBlock(16, 0, s)
	write := mat.DenseCopyOf(basisBlock(16, 0, one).T())
	setHeadWeights(t, m, 0, 0, nil, nil, basisBlock(16, 4, s), write)
	setHeadWeights(t, m, 1, 0, read, read, read, write)
	c, err := Composition(m, &WeightOptions{NoFold: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{QComposition, KComposition, VComposition} {
		s, err := c.Score(mode, 0, 0, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s < 0.99 {
			t.Errorf("%s-composition of a head reading exactly what the other writes: %v, want ≥ 0.99", mode, s)
		}
		top, err := c.Strongest(mode, 1)
		if err != nil {
			t.Fatal(err)
		}
		if top[0].FromHead != 0 || top[0].ToHead != 0 {
			t.Errorf("%s: strongest pair %+v, want L0H0 → L1H0", mode, top[0])
		}
		if s <= 2*c.Baseline {
			t.Errorf("%s: score %v not above twice the baseline %v", mode, s, c.Baseline)
		}
	}
	// With a flat spectrum the perfect composition of rank-4 circuits scores 1/√4.
	setHeadWeights(t, m, 0, 0, nil, nil, basisBlock(16, 4, one), write)
	setHeadWeights(t, m, 1, 0, basisBlock(16, 0, one), basisBlock(16, 0, one), basisBlock(16, 0, one), write)
	c, _ = Composition(m, &WeightOptions{NoFold: true})
	if s, _ := c.Score(QComposition, 0, 0, 1, 0); math.Abs(s-0.5) > 1e-6 {
		t.Errorf("flat-spectrum perfect Q-composition %v, want 0.5", s)
	}
	// A later head that reads only directions the earlier one never writes: 0.
	other := basisBlock(16, 8, one)
	setHeadWeights(t, m, 1, 1, other, other, other, nil)
	c, err = Composition(m, &WeightOptions{NoFold: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{QComposition, KComposition, VComposition} {
		if s, _ := c.Score(mode, 0, 0, 1, 1); s > 1e-12 {
			t.Errorf("%s-composition of a head reading orthogonal to what the other writes: %v, want 0", mode, s)
		}
	}
}

func TestCompositionErrors(t *testing.T) {
	if _, err := Composition(nil, nil); !errors.Is(err, ErrModel) {
		t.Errorf("nil model: %v, want ErrModel", err)
	}
	m := newWeightTestModel(t, 16, 4, 2, nil)
	c, err := Composition(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range [][5]any{{"Q", 1, 0, 0, 0}, {"Q", 0, 0, 2, 0}, {"Q", 0, 4, 1, 0}, {"X", 0, 0, 1, 0}, {"K", 0, 0, 0, 0}} {
		if _, err := c.Score(a[0].(string), a[1].(int), a[2].(int), a[3].(int), a[4].(int)); !errors.Is(err, ErrArgument) {
			t.Errorf("Score%v: %v, want ErrArgument", a, err)
		}
	}
	if _, err := c.Strongest("Z", 3); !errors.Is(err, ErrArgument) {
		t.Errorf("Strongest(Z): %v, want ErrArgument", err)
	}
	if _, err := c.Strongest("Q", -1); !errors.Is(err, ErrArgument) {
		t.Errorf("Strongest(-1): %v, want ErrArgument", err)
	}
	for _, a := range [][4]int{{0, 1, 1, 1}, {4, 5, 1, 1}, {4, 2, 2, 0}, {1 << 30, 1, 1, 1}} {
		if _, err := RandomCompositionBaseline(a[0], a[1], a[2], a[3], 1); !errors.Is(err, ErrArgument) {
			t.Errorf("RandomCompositionBaseline%v: %v, want ErrArgument", a, err)
		}
	}
}

func TestRandomCompositionBaseline(t *testing.T) {
	// Deterministic, and smaller in wider residual streams.
	a, _ := RandomCompositionBaseline(64, 16, 16, 20, 3)
	b, _ := RandomCompositionBaseline(64, 16, 16, 20, 3)
	c, _ := RandomCompositionBaseline(128, 16, 16, 20, 3)
	if a != b {
		t.Errorf("same seed, %v and %v", a, b)
	}
	if !(c < a && a < 1 && c > 0) {
		t.Errorf("baseline at d_model 64: %v, at 128: %v; want 0 < b(128) < b(64) < 1", a, c)
	}
}

func TestScoreMatchesDenseProduct(t *testing.T) {
	// The factored score equals the one from the explicit d_model × d_model product.
	m := newWeightTestModel(t, 16, 4, 2, nil)
	w, err := readWeights(m, false, true)
	if err != nil {
		t.Fatal(err)
	}
	x, y := w.layers[0].ov[1], w.layers[1].qk[2]
	var g, ax, by, p mat.Dense
	g.Mul(x.b, y.a)
	ax.Mul(x.a, x.b)
	by.Mul(y.a, y.b)
	p.Mul(&ax, &by)
	want := mat.Norm(&p, 2) / (mat.Norm(&ax, 2) * mat.Norm(&by, 2))
	if got := compositionScore(x, &g, y); math.Abs(got-want) > 1e-12 {
		t.Errorf("factored score %v, dense %v", got, want)
	}
}
