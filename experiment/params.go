package experiment

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/viz"
)

// ParamsRow is one layer configuration of the params experiment and its three counts.
type ParamsRow struct {
	Config    mha.Config `json:"config"`
	Formula   int        `json:"formula"`    // ParamCount(Config)
	Built     int        `json:"built"`      // Layer.NumParams of the layer mha.New builds
	StateDict int        `json:"state_dict"` // the sizes of its state dict's tensors, summed
}

// ParamsData is the Data of the params experiment.
type ParamsData struct {
	Rows []ParamsRow `json:"rows"`
	// FixedWidth holds, per d_model of the chart, the count at H = 1, 2, 4, … up to d_model (those
	// layers are also in Rows): the chapter's claim is that they are all equal.
	FixedWidth []ParamsSweep `json:"fixed_width"`
}

// ParamsSweep is the parameter count of the default layer at one d_model for several H.
type ParamsSweep struct {
	EmbedDim int   `json:"embed_dim"`
	Heads    []int `json:"heads"`
	Params   []int `json:"params"`
}

// ParamCount is the number of parameters of an nn.MultiheadAttention layer as PyTorch defines
// it, with E = EmbedDim and kdim, vdim defaulting to E:
//
//	E·E + E·kdim + E·vdim      the query, key and value projections (in_proj_weight [3E, E] when
//	                           kdim = vdim = E, else q_proj_weight, k_proj_weight, v_proj_weight)
//	+ E·E                      out_proj.weight
//	+ 3E + E                   in_proj_bias and out_proj.bias, unless NoBias
//	+ 2E                       bias_k and bias_v [1, 1, E], with AddBiasKV
//
// The head count and the head sizes do not appear: the heads split the projections' rows among
// themselves. For the default layer it is 4E² + 4E, chapter 000's 4·d_model² plus the biases.
// AddZeroAttn adds no parameter. c must be valid.
func ParamCount(c mha.Config) int {
	e, kdim, vdim := c.EmbedDim, c.KDim, c.VDim
	if kdim == 0 {
		kdim = e
	}
	if vdim == 0 {
		vdim = e
	}
	n := e*e + e*kdim + e*vdim + e*e
	if !c.NoBias {
		n += 4 * e
	}
	if c.AddBiasKV {
		n += 2 * e
	}
	return n
}

// paramsConfigs are the layers the params experiment builds besides the head-count sweeps:
// chapter 003's worked example, the Transformer base layer, and each option of
// nn.MultiheadAttention alone and together, with heads of equal and of different sizes.
func paramsConfigs() []mha.Config {
	return []mha.Config{
		{EmbedDim: 4, NumHeads: 2},
		{EmbedDim: 512, NumHeads: 8},
		{EmbedDim: 64, NumHeads: 4, KDim: 32, VDim: 48},
		{EmbedDim: 64, NumHeads: 4, NoBias: true},
		{EmbedDim: 64, NumHeads: 4, AddBiasKV: true},
		{EmbedDim: 64, NumHeads: 4, AddZeroAttn: true},
		{EmbedDim: 64, NumHeads: 8, KDim: 16, VDim: 24, NoBias: true, AddBiasKV: true, AddZeroAttn: true},
		{EmbedDim: 160, NumHeads: 2, HeadDims: []int{32, 128}},
		{EmbedDim: 64, NumHeads: 3, HeadDims: []int{8, 24, 32}, KDim: 20, AddBiasKV: true},
	}
}

// sweepWidths are the widths d_model at which Params varies the head count over the powers of
// two up to d_model.
var sweepWidths = []int{16, 64, 256}

// countParams builds the layer c describes and returns its row.
func countParams(c mha.Config) (ParamsRow, error) {
	layer, err := mha.New(c)
	if err != nil {
		return ParamsRow{}, err
	}
	row := ParamsRow{Config: c, Formula: ParamCount(c), Built: layer.NumParams()}
	for _, t := range layer.StateDict() {
		row.StateDict += len(t.Data)
	}
	return row, nil
}

// Params checks chapter 000's parameter count (5.2.3): for many layer configurations it builds
// the layer with mha.New and compares ParamCount's formula with Layer.NumParams and with the sum
// of the state dict's tensor sizes; and it shows that at a fixed d_model the count does not
// depend on the number of heads. Data is a *ParamsData; the picture "heads" charts the count
// against H at three widths. cfg is not used: nothing here is random.
func Params(ctx context.Context, _ Config) (*Result, error) {
	data := &ParamsData{}
	for _, c := range paramsConfigs() {
		row, err := countParams(c)
		if err != nil {
			return nil, err
		}
		data.Rows = append(data.Rows, row)
	}
	for _, e := range sweepWidths {
		sweep := ParamsSweep{EmbedDim: e}
		for h := 1; h <= e; h *= 2 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			row, err := countParams(mha.Config{EmbedDim: e, NumHeads: h})
			if err != nil {
				return nil, err
			}
			data.Rows = append(data.Rows, row)
			sweep.Heads = append(sweep.Heads, h)
			sweep.Params = append(sweep.Params, row.Built)
		}
		data.FixedWidth = append(data.FixedWidth, sweep)
	}

	res := &Result{
		Name:  "params",
		Title: "Parameter count of multi-head attention: the formula against the built layer (chapter 000, 5.2.3)",
		Table: Table{Columns: []string{"E", "H", "head sizes", "kdim", "vdim", "bias", "bias_kv", "zero_attn", "formula", "built", "state dict", "match"}},
		Data:  data,
	}
	matched := 0
	for _, r := range data.Rows {
		c := r.Config
		ok := r.Formula == r.Built && r.Built == r.StateDict
		if ok {
			matched++
		}
		res.Table.Rows = append(res.Table.Rows, []string{
			strconv.Itoa(c.EmbedDim), strconv.Itoa(c.NumHeads), headSizes(c), orE(c.KDim, c.EmbedDim), orE(c.VDim, c.EmbedDim),
			yesNo(!c.NoBias), yesNo(c.AddBiasKV), yesNo(c.AddZeroAttn),
			strconv.Itoa(r.Formula), strconv.Itoa(r.Built), strconv.Itoa(r.StateDict), yesNo(ok),
		})
	}
	res.Summary = paramsSummary(data, matched)
	chart := viz.Chart{
		Title:   "Attention parameters against the number of heads, at fixed d_model",
		XLabel:  "heads H",
		YLabel:  "parameters",
		LogX:    true,
		LogY:    true,
		Markers: true,
	}
	for _, s := range data.FixedWidth {
		se := viz.Series{Name: fmt.Sprintf("d_model = %d", s.EmbedDim)}
		for i, h := range s.Heads {
			se.X = append(se.X, float64(h))
			se.Y = append(se.Y, float64(s.Params[i]))
		}
		chart.Series = append(chart.Series, se)
	}
	res.Pictures = []Figure{{Name: "heads", Picture: chart}}
	return res, nil
}

// paramsSummary states what the params experiment found.
func paramsSummary(data *ParamsData, matched int) string {
	s := fmt.Sprintf("The formula E² + E·kdim + E·vdim + E² (+ 4E biases, + 2E with add_bias_kv) matches the built layer and its state dict in %d of %d configurations.", matched, len(data.Rows))
	for _, sw := range data.FixedWidth {
		e, lo, hi := sw.EmbedDim, slices.Min(sw.Params), slices.Max(sw.Params)
		switch {
		case lo != hi:
			s += fmt.Sprintf(" At d_model = %d the count varies with H, from %d to %d, against the chapter's claim.", e, lo, hi)
		case lo == 4*e*e+4*e:
			s += fmt.Sprintf(" At d_model = %d every H from 1 to %d gives %d parameters: the chapter's 4·d_model² = %d plus %d biases.", e, sw.Heads[len(sw.Heads)-1], lo, 4*e*e, 4*e)
		default:
			s += fmt.Sprintf(" At d_model = %d every H from 1 to %d gives %d parameters, not 4·d_model² + 4·d_model = %d.", e, sw.Heads[len(sw.Heads)-1], lo, 4*e*e+4*e)
		}
	}
	return s
}

// headSizes prints a layer's head sizes: "E/H each" as one number, or the list.
func headSizes(c mha.Config) string {
	if c.HeadDims == nil {
		return strconv.Itoa(c.EmbedDim / c.NumHeads)
	}
	return fmt.Sprint(c.HeadDims)
}

// orE prints a kdim or vdim, which 0 makes E.
func orE(d, e int) string {
	if d == 0 {
		d = e
	}
	return strconv.Itoa(d)
}

// yesNo prints a flag.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
