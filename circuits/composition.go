package circuits

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
)

// WeightOptions are the choices shared by Composition, OVCircuit, QKCircuit and TokenCircuits.
// The zero value (or nil) folds the normalisations as the package doc describes.
type WeightOptions struct {
	// NoFold reads the raw weights: no normalisation γ folded into the readers, no centring of
	// readers, writers or logits.
	NoFold bool
}

func (o *WeightOptions) fold() bool { return o == nil || !o.NoFold }

// Errors wrapped by this package's errors about composition, circuits and subspaces.
var (
	// ErrModel: the model is nil or lacks a parameter its config promises.
	ErrModel = errors.New("circuits: bad model")
	// ErrArgument: a layer, head, mode or size out of range.
	ErrArgument = errors.New("circuits: bad argument")
)

// The composition modes of CompositionScores.Score and Strongest.
const (
	QComposition = "Q" // the later head's queries read the earlier head's output: OV₁·QK₂
	KComposition = "K" // its keys read it: OV₁·QK₂ᵀ
	VComposition = "V" // its values read it: OV₁·OV₂
)

// LayerPair holds the composition scores between the heads of layer From and the heads of the
// later layer To. Q[i][j], K[i][j] and V[i][j] are the scores of head i of From (the writer) with
// head j of To (the reader), each in [0, 1]: [Heads][Heads].
type LayerPair struct {
	From int         `json:"from"`
	To   int         `json:"to"`
	Q    [][]float64 `json:"q"`
	K    [][]float64 `json:"k"`
	V    [][]float64 `json:"v"`
}

// CompositionScores are the Q-, K- and V-composition scores of every pair of heads (l1, h1),
// (l2, h2) with l1 < l2 (Elhage et al. 2021; TransformerLens's all_composition_scores):
//
//	score = ‖W_A·W_B‖_F / (‖W_A‖_F·‖W_B‖_F)
//
// with W_A the OV circuit W_V·W_O of the earlier head and W_B the later head's QK circuit W_Q·W_Kᵀ
// (Q-composition), its transpose W_K·W_Qᵀ (K-composition) or its OV circuit (V-composition). A
// score is 0 when either circuit is 0, and at most 1 (‖XY‖_F ≤ ‖X‖_2‖Y‖_F ≤ ‖X‖_F‖Y‖_F); 1 needs
// rank-1 circuits, and a head that reads exactly the subspace another writes, both with flat
// spectra over d_head directions, scores 1/√d_head. Compare scores with Baseline.
type CompositionScores struct {
	Layers int `json:"layers"`
	Heads  int `json:"heads"`
	DModel int `json:"d_model"`
	// Pairs lists every layer pair (From, To), From < To, ordered by From, then To.
	Pairs []LayerPair `json:"pairs"`
	// Baseline is the mean score of random matrices of the same shapes (Gaussian factors
	// [d_model, d_head] and [d_head, d_model], RandomCompositionBaseline), for the heads of the
	// first head's size: a score near it is what unrelated heads give.
	Baseline float64 `json:"baseline"`
	// Folded reports whether the normalisations were folded (WeightOptions.NoFold unset).
	Folded bool `json:"folded"`
}

// BaselineSamples is the number of random draws behind CompositionScores.Baseline.
const BaselineSamples = 100

// Composition computes the composition scores of every pair of heads of m in different layers,
// from the weights alone, through the [d_model, d_head] factors: each pair costs
// O(d_head²·d_model), and no [d_model, d_model] matrix is formed. Weights are folded as the
// package doc says unless opt.NoFold. It returns an error wrapping ErrModel when m is nil or
// lacks an attention parameter.
func Composition(m *nn.Model, opt *WeightOptions) (*CompositionScores, error) {
	w, err := readWeights(m, opt.fold(), false)
	if err != nil {
		return nil, err
	}
	cfg := m.Config()
	att := cfg.Attention()
	res := &CompositionScores{Layers: cfg.Layers, Heads: cfg.Heads, DModel: cfg.DModel, Folded: opt.fold()}
	for l1 := range cfg.Layers {
		for l2 := l1 + 1; l2 < cfg.Layers; l2++ {
			res.Pairs = append(res.Pairs, LayerPair{From: l1, To: l2})
		}
	}
	// The layer pairs on every core, each worker with its own SGEMM workspace; every pair's
	// numbers come out the same whatever the worker count.
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(res.Pairs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ws kernel.Workspace
			for i := range work {
				p := &res.Pairs[i]
				w.composeLayers(&ws, att, p)
			}
		}()
	}
	for i := range res.Pairs {
		work <- i
	}
	close(work)
	wg.Wait()
	res.Baseline, err = RandomCompositionBaseline(cfg.DModel, att.HeadDim(0), att.HeadDim(0), BaselineSamples, 1)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// composeLayers fills p's tables. The cross products of every writer's W_O^h with every
// reader's W_Q, W_K, W_V, [Σd, d_model]·[d_model, Σd] at once, are the bulk of the work (d_model³
// per layer pair and mode); they run in float32 SGEMM on the weights rounded to float32 (the
// weights are float32 or half precision to begin with), the rest in float64.
func (w *modelWeights) composeLayers(ws *kernel.Workspace, att mha.Config, p *LayerPair) {
	a, b := &w.layers[p.From], &w.layers[p.To]
	gq := crossF32(ws, a.o32, b.q32)
	gk := crossF32(ws, a.o32, b.k32)
	gv := crossF32(ws, a.o32, b.v32)
	heads := att.NumHeads
	p.Q, p.K, p.V = squareGrid(heads), squareGrid(heads), squareGrid(heads)
	for i := range heads {
		oi, di := att.HeadOffset(i), att.HeadDim(i)
		for j := range heads {
			oj, dj := att.HeadOffset(j), att.HeadDim(j)
			g := att.KVHead(j)
			ok, dk := b.kvOff[g], b.kvDim[g]
			ov := a.ov[i]
			p.Q[i][j] = compositionScore(ov, subBlock(gq, oi, di, oj, dj), b.qk[j])
			p.K[i][j] = compositionScore(ov, subBlock(gk, oi, di, ok, dk), b.kq[j])
			p.V[i][j] = compositionScore(ov, subBlock(gv, oi, di, ok, dk), b.ov[j])
		}
	}
}

// matrix32 is a row-major float32 matrix.
type matrix32 struct {
	rows, cols int
	data       []float32
}

func toMatrix32(m *mat.Dense) matrix32 {
	r, c := m.Dims()
	x := matrix32{rows: r, cols: c, data: make([]float32, r*c)}
	for i := range r {
		for j, v := range m.RawRowView(i) {
			x.data[i*c+j] = float32(v)
		}
	}
	return x
}

// crossF32 returns x·y in float64, computed in float32.
func crossF32(ws *kernel.Workspace, x, y matrix32) *mat.Dense {
	c := make([]float32, x.rows*y.cols)
	ws.Sgemm(false, false, x.rows, y.cols, x.cols, 1, x.data, x.cols, y.data, y.cols, 0, c, y.cols, nil)
	d := make([]float64, len(c))
	for i, v := range c {
		d[i] = float64(v)
	}
	return mat.NewDense(x.rows, y.cols, d)
}

// Score returns the score of mode (QComposition, KComposition or VComposition) between head h1
// of layer l1 and head h2 of layer l2. It returns an error wrapping ErrArgument when the mode is
// unknown, a layer or head is out of range, or l1 ≥ l2.
func (c *CompositionScores) Score(mode string, l1, h1, l2, h2 int) (float64, error) {
	switch {
	case l1 < 0 || l2 >= c.Layers || l1 >= l2:
		return 0, fmt.Errorf("%w: layers %d and %d, want 0 ≤ l1 < l2 < %d", ErrArgument, l1, l2, c.Layers)
	case h1 < 0 || h1 >= c.Heads || h2 < 0 || h2 >= c.Heads:
		return 0, fmt.Errorf("%w: heads %d and %d, want heads in [0, %d)", ErrArgument, h1, h2, c.Heads)
	}
	for _, p := range c.Pairs {
		if p.From == l1 && p.To == l2 {
			t, err := p.table(mode)
			if err != nil {
				return 0, err
			}
			return t[h1][h2], nil
		}
	}
	return 0, fmt.Errorf("%w: no layer pair (%d, %d)", ErrArgument, l1, l2)
}

// Table returns the [Heads][Heads] scores of mode, or an error wrapping ErrArgument for a mode
// other than QComposition, KComposition and VComposition.
func (p LayerPair) Table(mode string) ([][]float64, error) { return p.table(mode) }

func (p LayerPair) table(mode string) ([][]float64, error) {
	switch mode {
	case QComposition:
		return p.Q, nil
	case KComposition:
		return p.K, nil
	case VComposition:
		return p.V, nil
	}
	return nil, fmt.Errorf("%w: composition mode %q, want %q, %q or %q", ErrArgument, mode, QComposition, KComposition, VComposition)
}

// HeadPairScore is one composition score: head (FromLayer, FromHead) writes, head (ToLayer,
// ToHead) reads.
type HeadPairScore struct {
	Mode      string  `json:"mode"`
	FromLayer int     `json:"from_layer"`
	FromHead  int     `json:"from_head"`
	ToLayer   int     `json:"to_layer"`
	ToHead    int     `json:"to_head"`
	Score     float64 `json:"score"`
}

// Strongest returns the n largest scores of mode over every pair of heads, largest first (all of
// them when n exceeds their number). It returns an error wrapping ErrArgument for an unknown mode
// or n < 0.
func (c *CompositionScores) Strongest(mode string, n int) ([]HeadPairScore, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: n is %d, want ≥ 0", ErrArgument, n)
	}
	var all []HeadPairScore
	for _, p := range c.Pairs {
		t, err := p.table(mode)
		if err != nil {
			return nil, err
		}
		for i, row := range t {
			for j, s := range row {
				all = append(all, HeadPairScore{Mode: mode, FromLayer: p.From, FromHead: i, ToLayer: p.To, ToHead: j, Score: s})
			}
		}
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Score > all[b].Score })
	return all[:min(n, len(all))], nil
}

// RandomCompositionBaseline returns the mean composition score of samples pairs of random
// circuits shaped as a model's: W_A = A₁·B₁ and W_B = A₂·B₂ with A₁ [dModel, dA], B₁ [dA,
// dModel], A₂ [dModel, dB], B₂ [dB, dModel] of independent standard normal entries, drawn from a
// generator seeded with seed (the same arguments give the same number). It is the baseline of
// Elhage et al. (2021): unrelated heads score about this much. (For full-rank square Gaussian
// matrices it is about 1/√dModel; low-rank circuits score more.) It returns an error wrapping
// ErrArgument when a size is < 1, dA or dB exceeds dModel, dModel exceeds nn.MaxDim (the
// widest model), or samples < 1.
func RandomCompositionBaseline(dModel, dA, dB, samples int, seed uint64) (float64, error) {
	if dModel < 1 || dA < 1 || dB < 1 || dA > dModel || dB > dModel || dModel > nn.MaxDim || samples < 1 {
		return 0, fmt.Errorf("%w: baseline of d_model %d, head sizes %d and %d, %d samples; want 1 ≤ head sizes ≤ d_model ≤ %d and samples ≥ 1", ErrArgument, dModel, dA, dB, samples, nn.MaxDim)
	}
	rng := rand.New(rand.NewPCG(seed, 0x636f6d70))
	gauss := func(r, c int) *mat.Dense {
		d := make([]float64, r*c)
		for i := range d {
			d[i] = rng.NormFloat64()
		}
		return mat.NewDense(r, c, d)
	}
	sum := 0.0
	for range samples {
		x := newFactored(gauss(dModel, dA), gauss(dA, dModel))
		y := newFactored(gauss(dModel, dB), gauss(dB, dModel))
		var g mat.Dense
		g.Mul(x.b, y.a)
		sum += compositionScore(x, &g, y)
	}
	return sum / float64(samples), nil
}

// factored is a matrix A·B, A [m, d], B [d, n], with the Gram matrices AᵀA [d, d] and B·Bᵀ
// [d, d] and its squared Frobenius norm; a and b may be dropped (nil) once the Grams are made.
type factored struct {
	a, b       *mat.Dense
	gramA      *mat.Dense
	gramB      *mat.Dense
	frobenius2 float64
}

func newFactored(a, b *mat.Dense) *factored {
	f := &factored{a: a, b: b, gramA: &mat.Dense{}, gramB: &mat.Dense{}}
	f.gramA.Mul(a.T(), a)
	f.gramB.Mul(b, b.T())
	f.frobenius2 = traceProduct(f.gramA, f.gramB)
	return f
}

// traceProduct returns tr(X·Y) for square X, Y of one size, Σ_ij X_ij·Y_ji.
func traceProduct(x, y mat.Matrix) float64 {
	r, _ := x.Dims()
	s := 0.0
	for i := range r {
		for j := range r {
			s += x.At(i, j) * y.At(j, i)
		}
	}
	return s
}

// compositionScore returns ‖X·Y‖_F/(‖X‖_F‖Y‖_F) for X = A_X·B_X and Y = A_Y·B_Y given g = B_X·A_Y
// [d_X, d_Y]: ‖A_X·g·B_Y‖_F² = tr(gᵀ·(A_XᵀA_X)·g·(B_Y·B_Yᵀ)). It is 0 when a norm is 0.
func compositionScore(x *factored, g mat.Matrix, y *factored) float64 {
	if x.frobenius2 <= 0 || y.frobenius2 <= 0 {
		return 0
	}
	var left, right mat.Dense
	left.Mul(x.gramA, g)  // [d_X, d_Y]
	right.Mul(g, y.gramB) // [d_X, d_Y]
	num := mat.Sum(mulElem(&left, &right))
	s := math.Sqrt(math.Max(num, 0) / (x.frobenius2 * y.frobenius2))
	return math.Min(s, 1) // rounding may push an exact 1 over it
}

func mulElem(a, b *mat.Dense) *mat.Dense {
	var c mat.Dense
	c.MulElem(a, b)
	return &c
}

// subBlock returns rows r…r+nr and columns c…c+nc of m.
func subBlock(m *mat.Dense, r, nr, c, nc int) mat.Matrix { return m.Slice(r, r+nr, c, c+nc) }

func squareGrid(n int) [][]float64 {
	g := make([][]float64, n)
	for i := range g {
		g[i] = make([]float64, n)
	}
	return g
}

// layerWeights are one block's attention weights in the row-vector convention, folded or not.
type layerWeights struct {
	// qAll [d_model, H·d]: column block h is W_Q^h; kAll, vAll [d_model, KVDim]: column block g is
	// W_K^g, W_V^g of K/V head g; oAll [H·d, d_model]: row block h is W_O^h (nil once read).
	qAll, kAll, vAll, oAll *mat.Dense
	// The same in float32, for the cross products of Composition.
	q32, k32, v32, o32 matrix32
	kvOff, kvDim       []int
	// Per query head: its OV circuit W_V^g·W_O^h, its QK circuit W_Q^h·W_K^gᵀ and the
	// transpose W_K^g·W_Q^hᵀ.
	ov, qk, kq []*factored
}

// modelWeights are a model's attention weights and the factors of its token circuits.
type modelWeights struct {
	layers []layerWeights
}

// readWeights reads m's attention weights in float64, folded as the package doc says when fold.
// With factors (for the token circuits), every head's factored circuits keep their factors; else
// (for Composition) they keep only their Gram matrices, and the layers their float32 stacked
// blocks, so that a model's worth of [d_model, d_head] copies is never held.
func readWeights(m *nn.Model, fold, factors bool) (*modelWeights, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil model", ErrModel)
	}
	cfg := m.Config()
	att := cfg.Attention()
	e, qd, kvd := cfg.DModel, att.InnerDim(), att.KVDim()
	centre := fold && cfg.NormKind != nn.RMSNorm
	w := &modelWeights{}
	for l := range cfg.Layers {
		p := blockParam(l, "attn.")
		in, err := weightParam(m, p+"in_proj_weight", qd+2*kvd, e)
		if err != nil {
			return nil, err
		}
		out, err := weightParam(m, p+"out_proj.weight", e, qd)
		if err != nil {
			return nil, err
		}
		var gamma []float64
		if fold {
			if gamma, err = readerGamma(m, l); err != nil {
				return nil, err
			}
		}
		lw := layerWeights{
			qAll: readerBlock(in, 0, qd, gamma, centre),
			kAll: readerBlock(in, qd, kvd, gamma, centre),
			vAll: readerBlock(in, qd+kvd, kvd, gamma, centre),
			oAll: mat.DenseCopyOf(out.T()),
		}
		if centre {
			centreRows(lw.oAll)
		}
		if fold && cfg.SandwichNorm {
			// What the heads write is normalised by ln1_post before it joins the stream: its γ′
			// folds into W_O's columns (its per-token scale is dropped, as fold_ln drops a
			// reader's), after its own centring and before the readers' (LayerNorm).
			post, err := normWeight(m, blockParam(l, "ln1_post"))
			if err != nil {
				return nil, err
			}
			scaleColumns(lw.oAll, post)
			if centre {
				centreRows(lw.oAll)
			}
		}
		if !factors {
			lw.q32, lw.k32, lw.v32, lw.o32 = toMatrix32(lw.qAll), toMatrix32(lw.kAll), toMatrix32(lw.vAll), toMatrix32(lw.oAll)
		}
		for g := range att.KVHeads() {
			if att.KVHeads() == att.NumHeads {
				lw.kvOff, lw.kvDim = append(lw.kvOff, att.HeadOffset(g)), append(lw.kvDim, att.HeadDim(g))
			} else {
				lw.kvOff, lw.kvDim = append(lw.kvOff, g*att.HeadDim(0)), append(lw.kvDim, att.HeadDim(0))
			}
		}
		for h := range cfg.Heads {
			o, d := att.HeadOffset(h), att.HeadDim(h)
			g := att.KVHead(h)
			q := columnBlock(lw.qAll, o, d)
			k := columnBlock(lw.kAll, lw.kvOff[g], lw.kvDim[g])
			v := columnBlock(lw.vAll, lw.kvOff[g], lw.kvDim[g])
			wo := mat.DenseCopyOf(lw.oAll.Slice(o, o+d, 0, e))
			ov, qk, kq := newFactored(v, wo), newFactored(q, mat.DenseCopyOf(k.T())), newFactored(k, mat.DenseCopyOf(q.T()))
			if !factors {
				for _, f := range []*factored{ov, qk, kq} {
					f.a, f.b = nil, nil
				}
			}
			lw.ov, lw.qk, lw.kq = append(lw.ov, ov), append(lw.qk, qk), append(lw.kq, kq)
		}
		lw.qAll, lw.kAll, lw.vAll, lw.oAll = nil, nil, nil, nil
		w.layers = append(w.layers, lw)
	}
	return w, nil
}

// weightParam returns the parameter called name as a float64 [rows, cols] matrix (decoded from half
// precision if held so), or an error wrapping ErrModel when m has none of that shape.
func weightParam(m *nn.Model, name string, rows, cols int) (*mat.Dense, error) {
	p := m.Param(name)
	if p == nil {
		return nil, fmt.Errorf("%w: no parameter %s", ErrModel, name)
	}
	t := p.Float32()
	if len(t.Data) != rows*cols {
		return nil, fmt.Errorf("%w: %s is %v, want [%d %d]", ErrModel, name, t.Shape, rows, cols)
	}
	d := make([]float64, len(t.Data))
	for i, x := range t.Data {
		d[i] = float64(x)
	}
	return mat.NewDense(rows, cols, d), nil
}

// normWeight returns the weight γ [d_model] of the normalisation layer called name.
func normWeight(m *nn.Model, name string) ([]float64, error) {
	g, err := weightParam(m, name+".weight", 1, m.Config().DModel)
	if err != nil {
		return nil, err
	}
	return g.RawRowView(0), nil
}

// inputNorm returns the name of the normalisation layer whose output layer l reads (l =
// Layers for the unembedding), or "" when there is none (post-norm layer 0 without emb_ln, a
// block without input norms).
func inputNorm(cfg nn.Config, l int) string {
	last := func(l int) string {
		p := blockParam(l, "")
		if cfg.AttnOnly {
			return p + "ln1"
		}
		return p + "ln2"
	}
	switch {
	case l == cfg.Layers && cfg.HeadTransform:
		return "head_ln"
	case cfg.Norm == nn.PreNorm && l == cfg.Layers:
		return "ln_f"
	case cfg.Norm == nn.PreNorm && cfg.NoInputNorm: // OLMo 2's blocks read the stream itself
		return ""
	case cfg.Norm == nn.PreNorm:
		return blockParam(l, "ln1")
	case l > 0:
		return last(l - 1)
	case cfg.EmbNorm:
		return "emb_ln"
	}
	return ""
}

// readerGamma returns γ of the normalisation whose output layer l reads (Layers: the
// unembedding), or nil when there is none.
func readerGamma(m *nn.Model, l int) ([]float64, error) {
	name := inputNorm(m.Config(), l)
	if name == "" {
		return nil, nil
	}
	return normWeight(m, name)
}

// readerBlock returns rows r…r+n of w [*, d_model] transposed, [d_model, n]: the row-vector
// convention's reading matrix, with row i scaled by gamma[i] (when not nil) and, with centre,
// every column's mean removed.
func readerBlock(w *mat.Dense, r, n int, gamma []float64, centre bool) *mat.Dense {
	x := mat.DenseCopyOf(w.Slice(r, r+n, 0, w.RawMatrix().Cols).T())
	foldReader(x, gamma, centre)
	return x
}

// foldReader scales row i of x [d_model, n] by gamma[i] (when not nil) and, with centre, removes
// every column's mean.
func foldReader(x *mat.Dense, gamma []float64, centre bool) {
	rows, cols := x.Dims()
	if gamma != nil {
		for i := range rows {
			row := x.RawRowView(i)
			for j := range row {
				row[j] *= gamma[i]
			}
		}
	}
	if centre {
		for j := range cols {
			s := 0.0
			for i := range rows {
				s += x.At(i, j)
			}
			s /= float64(rows)
			for i := range rows {
				x.Set(i, j, x.At(i, j)-s)
			}
		}
	}
}

// centreRows removes every row's mean.
func centreRows(x *mat.Dense) {
	rows, _ := x.Dims()
	for i := range rows {
		row := x.RawRowView(i)
		s := 0.0
		for _, v := range row {
			s += v
		}
		s /= float64(len(row))
		for j := range row {
			row[j] -= s
		}
	}
}

// scaleColumns multiplies column j of x by g[j].
func scaleColumns(x *mat.Dense, g []float64) {
	rows, _ := x.Dims()
	for i := range rows {
		row := x.RawRowView(i)
		for j := range row {
			row[j] *= g[j]
		}
	}
}

// columnBlock returns a copy of columns c…c+n of x.
func columnBlock(x *mat.Dense, c, n int) *mat.Dense {
	r, _ := x.Dims()
	return mat.DenseCopyOf(x.Slice(0, r, c, c+n))
}
