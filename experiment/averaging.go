package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/viz"
)

// AveragingRow is the variance of the mean of the first H heads of one source.
//
// The heads' outputs are vectors of d coordinates; "variance" is the variance per coordinate
// averaged over the d coordinates (the trace of the covariance over d), each coordinate centred
// on its own mean, and the correlation of two heads is Pearson's over all their coordinates
// (probe.MIPenalty's r). With C_ij the covariance of heads i and j in this sense, the mean of H
// heads has variance (1/H²)·Σ_{i,j<H} C_ij exactly, which MeanVar is.
type AveragingRow struct {
	Source   string         `json:"source"`
	Heads    int            `json:"heads"`     // H: the mean is over heads 0 … H−1
	Samples  int            `json:"samples"`   // output vectors the variances are taken over
	HeadVar  jsonnum.Number `json:"head_var"`  // σ²: one head's variance, averaged over the H heads
	MeanVar  jsonnum.Number `json:"mean_var"`  // the variance of the mean of the H heads
	Ratio    jsonnum.Number `json:"ratio"`     // MeanVar/(σ²/H): 1 where σ²/H holds
	RatioSE  jsonnum.Number `json:"ratio_se"`  // the standard error of Ratio, from the spread over independent groups
	MeanCorr jsonnum.Number `json:"mean_corr"` // ρ̄, the mean correlation of the H(H−1)/2 pairs (0 for H = 1)
	// Correlated is σ²/H·(1 + (H−1)·ρ̄), the variance of the mean of H variables of equal variance
	// σ² and pairwise correlation ρ̄; exact for such variables, an approximation otherwise.
	Correlated jsonnum.Number `json:"correlated"`
}

// AveragingData is the Data of the averaging experiment.
type AveragingData struct {
	Rows []AveragingRow `json:"rows"`
	// Mixing is c, the share of the variance of the value weights that the heads of the second
	// source have in common.
	Mixing float64 `json:"mixing"`
	// Groups is the number of independent groups the standard errors come from.
	Groups int `json:"groups"`
}

// Sizes of the averaging experiment's random layers: 16 heads of size 4, B·T output vectors per
// draw; and the mixing c of the shared source.
const (
	avgHeads, avgHeadDim = 16, 4
	avgB, avgT           = 2, 16
	avgMixing            = 0.5
	avgGroups            = 20
)

// avgSizes returns the number of random layers drawn and of the induction model's batches of
// 16 sequences.
func avgSizes(quick bool) (draws, batches int) {
	if quick {
		return 200, 20
	}
	return 2000, 80
}

// Averaging measures chapter 002's claim that the mean of H heads has variance σ²/H, σ² being
// one head's: true for independent heads, and what it becomes when they are not. It takes the
// mean of the first H heads, H ∈ {1, 2, 4, 8, 16}, of
//
//   - independent heads: freshly initialised layers (16 heads of size 4, each draw a new layer and
//     a new N(0, 1) input), whose heads have independent weights, so their outputs are
//     uncorrelated: the variance of the mean must be σ²/H within sampling error;
//   - value weights shared: the same layers with every head's value weights replaced by
//     √(1−c)·own + √c·shared, c = 0.5, one shared matrix per layer drawn like the others: the
//     heads are correlated and the variance falls more slowly, as σ²/H·(1 + (H−1)·ρ̄);
//   - the shipped induction model's layers 0 and 1 (4 heads of size 16) on its task's
//     sequences: trained heads, which are not independent. Each layer gives two sources: the
//     head outputs, and the heads' terms of the output projection, head_h·W_O,hᵀ, which are
//     what the heads add to the layer's output, all in one space.
//
// For each it reports σ², the variance of the mean, their ratio to σ²/H with its standard error
// (from avgGroups independent groups of draws or batches), the mean pairwise correlation ρ̄ and
// the correlated formula. Data is an *AveragingData; the picture "variance" charts
// var(mean)/σ² against H on log–log axes with the line 1/H.
func Averaging(ctx context.Context, cfg Config) (*Result, error) {
	draws, batches := avgSizes(cfg.Quick)
	data := &AveragingData{Mixing: avgMixing, Groups: avgGroups}
	independent, shared, err := randomHeads(ctx, cfg, draws)
	if err != nil {
		return nil, err
	}
	layers, err := inductionHeads(ctx, cfg, batches)
	if err != nil {
		return nil, err
	}
	sources := []headSample{independent, shared}
	sources = append(sources, layers...)
	for _, s := range sources {
		for h := 1; h <= s.heads; h *= 2 {
			data.Rows = append(data.Rows, s.averageOf(h))
		}
	}
	return averagingResult(data, sources), nil
}

// headSample accumulates the outputs of one source's heads, each a vector of dim values, in
// avgGroups groups of units (draws or batches) that are independent of one another.
type headSample struct {
	name       string
	heads, dim int
	groups     []moments
}

// newHeadSample returns an empty sample of heads vectors of dim values each.
func newHeadSample(name string, heads, dim int) headSample {
	s := headSample{name: name, heads: heads, dim: dim, groups: make([]moments, avgGroups)}
	for g := range s.groups {
		s.groups[g] = newMoments(heads, dim)
	}
	return s
}

// moments are the sums from which the heads' covariance follows: over n rows, s1 [heads·dim]
// sums each column and s2 [heads, heads] sums head_i·head_j.
type moments struct {
	heads, dim int
	n          int
	s1, s2     []float64
}

// newMoments returns the moments of no rows.
func newMoments(heads, dim int) moments {
	return moments{heads: heads, dim: dim, s1: make([]float64, heads*dim), s2: make([]float64, heads*heads)}
}

// add adds the rows of x, each holding the heads side by side (head h in columns h·dim …), to
// unit u of units.
func (s headSample) add(u, units int, x []float64) {
	m := &s.groups[u*len(s.groups)/units]
	width := s.heads * s.dim
	for r := 0; r < len(x); r += width {
		row := x[r : r+width]
		for k, v := range row {
			m.s1[k] += v
		}
		for i := range s.heads {
			a := row[i*s.dim : (i+1)*s.dim]
			for j := i; j < s.heads; j++ {
				b := row[j*s.dim : (j+1)*s.dim]
				dot := 0.0
				for k := range a {
					dot += a[k] * b[k]
				}
				m.s2[i*s.heads+j] += dot
			}
		}
		m.n++
	}
}

// total returns the moments of all the groups together.
func (s headSample) total() moments {
	t := newMoments(s.heads, s.dim)
	for _, g := range s.groups {
		t.n += g.n
		for k, v := range g.s1 {
			t.s1[k] += v
		}
		for k, v := range g.s2 {
			t.s2[k] += v
		}
	}
	return t
}

// covariance returns the [heads, heads] matrix C_ij (see AveragingRow): the covariance of each
// coordinate of head i with the same coordinate of head j, averaged over the coordinates.
func (m moments) covariance() []float64 {
	c := make([]float64, m.heads*m.heads)
	n := float64(m.n)
	for i := range m.heads {
		for j := i; j < m.heads; j++ {
			cross := 0.0
			for k := range m.dim {
				cross += m.s1[i*m.dim+k] * m.s1[j*m.dim+k]
			}
			c[i*m.heads+j] = (m.s2[i*m.heads+j] - cross/n) / (n * float64(m.dim))
			c[j*m.heads+i] = c[i*m.heads+j]
		}
	}
	return c
}

// averageOf returns the row of the mean of the first h heads, with the standard error of its
// ratio from the spread of the groups' ratios.
func (s headSample) averageOf(h int) AveragingRow {
	t := s.total()
	row := rowOf(t.covariance(), s.heads, h)
	row.Source, row.Samples = s.name, t.n
	mean, sq := 0.0, 0.0
	ratios := make([]float64, len(s.groups))
	for g, m := range s.groups {
		ratios[g] = float64(rowOf(m.covariance(), s.heads, h).Ratio)
		mean += ratios[g] / float64(len(ratios))
	}
	for _, r := range ratios {
		sq += (r - mean) * (r - mean)
	}
	row.RatioSE = jsonnum.Number(math.Sqrt(sq / float64(len(ratios)-1) / float64(len(ratios))))
	return row
}

// rowOf returns the statistics of the mean of the first h heads from the covariance c of all
// heads.
func rowOf(c []float64, heads, h int) AveragingRow {
	var headVar, meanVar, meanCorr float64
	pairs := 0
	for i := range h {
		headVar += c[i*heads+i] / float64(h)
		for j := range h {
			meanVar += c[i*heads+j] / float64(h*h)
			if j > i {
				meanCorr += c[i*heads+j] / math.Sqrt(c[i*heads+i]*c[j*heads+j])
				pairs++
			}
		}
	}
	if pairs > 0 {
		meanCorr /= float64(pairs)
	}
	independent := headVar / float64(h)
	return AveragingRow{
		Heads: h, HeadVar: jsonnum.Number(headVar), MeanVar: jsonnum.Number(meanVar), MeanCorr: jsonnum.Number(meanCorr),
		Ratio: jsonnum.Number(meanVar / independent), Correlated: jsonnum.Number(independent * (1 + float64(h-1)*meanCorr)),
	}
}

// randomHeads draws the two random-layer sources: for each draw, a fresh layer and input, the
// head outputs as initialised (independent heads), then with the value weights mixed.
func randomHeads(ctx context.Context, cfg Config, draws int) (independent, shared headSample, err error) {
	const e = avgHeads * avgHeadDim
	independent = newHeadSample("random layers, independent heads", avgHeads, avgHeadDim)
	shared = newHeadSample(fmt.Sprintf("random layers, value weights %g shared", avgMixing), avgHeads, avgHeadDim)
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0xa7e4a6e))
	opt := &mha.Options{Heads: mha.HeadOptions{Keep: true}, Workers: cfg.Workers}
	x, common := tensor.New(avgB, avgT, e), tensor.New(avgHeadDim, e)
	for u := range draws {
		if err := ctx.Err(); err != nil {
			return independent, shared, err
		}
		layer, err := mha.New(mha.Config{EmbedDim: e, NumHeads: avgHeads, Seed: seeds.Uint64()})
		if err != nil {
			return independent, shared, err
		}
		rng := tensor.NewRNG(seeds.Uint64())
		rng.Normal(x, 1)
		r, err := layer.Forward(x, nil, nil, opt)
		if err != nil {
			return independent, shared, err
		}
		independent.add(u, draws, appendFloat64(nil, r.Heads.Data))

		// Value rows of head h are in_proj_weight rows 2E + h·d … ; xavier_uniform over [3E, E]
		// draws them from U(±√(6/(E + 3E))).
		rng.Uniform(common, math.Sqrt(6.0/(4*e)))
		w := layer.StateDict()["in_proj_weight"].Data
		for h := range avgHeads {
			for i, s := range common.Data {
				v := &w[(2*e+h*avgHeadDim)*e+i]
				*v = float32(math.Sqrt(1-avgMixing)*float64(*v) + math.Sqrt(avgMixing)*float64(s))
			}
		}
		if r, err = layer.Forward(x, nil, nil, opt); err != nil {
			return independent, shared, err
		}
		shared.add(u, draws, appendFloat64(nil, r.Heads.Data))
	}
	return independent, shared, nil
}

// inductionHeads runs the shipped induction model on batches of 16 sequences of its task and
// returns, per layer, two sources, one unit per batch: the heads' outputs, and their terms of
// the output projection, head_h·W_O,hᵀ with W_O,h the columns of out_proj.weight that read
// head h: vectors in the one space where the layer adds them up.
func inductionHeads(ctx context.Context, cfg Config, batches int) ([]headSample, error) {
	m, _, err := models.Open("induction")
	if err != nil {
		return nil, err
	}
	task, err := tasks.New("induction", tasks.Config{})
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	e, d := mc.DModel, mc.DModel/mc.Heads
	var outs, terms []headSample
	for l := range mc.Layers {
		outs = append(outs, newHeadSample(fmt.Sprintf("induction layer %d, head outputs", l), mc.Heads, d))
		terms = append(terms, newHeadSample(fmt.Sprintf("induction layer %d, heads' W_O terms", l), mc.Heads, e))
	}
	sd := m.StateDict()
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0x1d0c7))
	for u := range batches {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		bt, err := task.Batch(seeds.Uint64(), 16)
		if err != nil {
			return nil, err
		}
		c, err := probe.Record(m, bt.Tokens, bt.B, bt.T, &probe.RecordOptions{Workers: cfg.Workers})
		if err != nil {
			return nil, err
		}
		for l := range mc.Layers {
			outs[l].add(u, batches, appendFloat64(nil, c.Heads[l].Data))
			wo := sd[fmt.Sprintf("blocks.%d.attn.out_proj.weight", l)].Data
			terms[l].add(u, batches, appendFloat64(nil, outputTerms(c.Heads[l].Data, wo, c.HeadDims)))
		}
	}
	return append(outs, terms...), nil
}

// appendFloat64 appends src, widened to float64, to dst.
func appendFloat64(dst []float64, src []float32) []float64 {
	for _, v := range src {
		dst = append(dst, float64(v))
	}
	return dst
}

// averagingResult lays out the averaging experiment's table, summary and chart.
func averagingResult(data *AveragingData, sources []headSample) *Result {
	res := &Result{
		Name:  "averaging",
		Title: "The variance of the mean of H heads against σ²/H (chapter 002)",
		Table: Table{Columns: []string{"source", "H", "σ² (one head)", "var(mean)", "σ²/H", "var(mean)/(σ²/H)", "ρ̄", "σ²/H·(1+(H−1)ρ̄)"}},
		Data:  data,
	}
	chart := viz.Chart{
		Title:   "Variance of the mean of H heads, relative to one head's",
		XLabel:  "heads averaged H",
		YLabel:  "var(mean) / σ²",
		LogX:    true,
		LogY:    true,
		Markers: true,
	}
	line := viz.Series{Name: "σ²/H (independent heads)"}
	for h := 1; h <= avgHeads; h *= 2 {
		line.X = append(line.X, float64(h))
		line.Y = append(line.Y, 1/float64(h))
	}
	chart.Series = append(chart.Series, line)
	for _, s := range sources {
		se := viz.Series{Name: s.name}
		for _, r := range data.Rows {
			if r.Source == s.name {
				se.X = append(se.X, float64(r.Heads))
				se.Y = append(se.Y, float64(r.MeanVar/r.HeadVar))
			}
		}
		chart.Series = append(chart.Series, se)
	}
	for _, r := range data.Rows {
		res.Table.Rows = append(res.Table.Rows, []string{
			r.Source, strconv.Itoa(r.Heads), sig(r.HeadVar), sig(r.MeanVar), sig(r.HeadVar / jsonnum.Number(r.Heads)),
			fmt.Sprintf("%.3f ± %.3f", r.Ratio, r.RatioSE), fmt.Sprintf("%.3f", r.MeanCorr), sig(r.Correlated),
		})
	}
	res.Summary = averagingSummary(data)
	res.Pictures = []Figure{{Name: "variance", Picture: chart}}
	return res
}

// averagingSummary states what the averaging experiment found, from the rows with the most
// heads of each source.
func averagingSummary(data *AveragingData) string {
	last := map[string]AveragingRow{}
	var order []string
	for _, r := range data.Rows {
		if _, ok := last[r.Source]; !ok {
			order = append(order, r.Source)
		}
		last[r.Source] = r
	}
	s := "σ²/H assumes uncorrelated heads."
	for _, name := range order {
		r := last[name]
		verdict := "consistent with σ²/H"
		if off := math.Abs(float64(r.Ratio) - 1); off > 3*float64(r.RatioSE) {
			verdict = fmt.Sprintf("%.1f standard errors from σ²/H", off/float64(r.RatioSE))
		}
		s += fmt.Sprintf(" %s, H = %d: var(mean) = %.3f ± %.3f × σ²/H (%s); the heads' mean correlation ρ̄ = %.3f, with which σ²/H·(1+(H−1)ρ̄) predicts %.3f × σ²/H.",
			capitalise(name), r.Heads, r.Ratio, r.RatioSE, verdict, r.MeanCorr, r.Correlated/(r.HeadVar/jsonnum.Number(r.Heads)))
	}
	return s + " A head's outputs are in coordinates of its own, so comparing coordinate k of two heads can miss what they share; their W_O terms are what each adds to the layer's output, in the one space where the layer sums them."
}

// capitalise returns s with its first letter in upper case (ASCII).
func capitalise(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// sig prints x with 4 significant digits.
func sig[F ~float64](x F) string {
	return strconv.FormatFloat(float64(x), 'g', 4, 64)
}
