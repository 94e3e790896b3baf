package lab

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/viz"
)

// compositionModes are the modes of kind=composition: which input of the later head reads the
// earlier head's output.
var compositionModes = []string{"q", "k", "v"}

// circuitPicture draws a picture of /api/circuits's answer for the query's prompts and metric:
// kind patching, patching-residual, patching-patterns or attribution.
func (s *Server) circuitPicture(ctx context.Context, kind string, q url.Values) (viz.Picture, string, error) {
	var missing []string
	for _, k := range circuitParams[:4] {
		if !q.Has(k) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, "", badRequest("kind=%s needs clean, corrupt, target and foil; %s missing", kind, strings.Join(missing, ", "))
	}
	req := &circuitsRequest{Model: q.Get("model"), Clean: q.Get("clean"), Corrupt: q.Get("corrupt"), Target: q.Get("target"), Foil: q.Get("foil")}
	if q.Has("position") {
		p, err := strconv.Atoi(q.Get("position"))
		if err != nil {
			return nil, "", badRequest("position %q; want a whole number, a position of the prompts", clip(q.Get("position")))
		}
		req.Position = &p
	}
	in, err := s.circuitsInput(req)
	if err != nil {
		return nil, "", err
	}
	res, err := s.circuits(ctx, in)
	if err != nil {
		return nil, "", err
	}
	m, p := in.m, res.patch
	metric := fmt.Sprintf("LD(%s − %s)", m.tokenLabel(in.metric.Target), m.tokenLabel(in.metric.Foil))
	lds := fmt.Sprintf("%s clean %.3g, corrupted %.3g", metric, p.LDClean, p.LDCorrupt)
	switch kind {
	case "patching":
		h := layerHeadMap(p.Heads, nil)
		h.Title = fmt.Sprintf("%s · patching head outputs · %s", m.name, lds)
		return h, m.name + "-patching", nil
	case "patching-patterns":
		h := layerHeadMap(p.Patterns, nil)
		h.Title = fmt.Sprintf("%s · patching attention patterns · %s", m.name, lds)
		return h, m.name + "-patching-patterns", nil
	case "patching-residual":
		return residualMap(in, p.Residual, fmt.Sprintf("%s · patching the residual stream · %s", m.name, lds)), m.name + "-patching-residual", nil
	}
	if res.dla == nil {
		return nil, "", badRequest("kind=attribution: model %s has no direct logit attribution: %s", m.name, res.dlaError)
	}
	var mlp []float64
	if !m.cfg.AttnOnly {
		mlp = floats(res.dla.MLP)
	}
	rows := make([][]float64, len(res.dla.Heads))
	for l, r := range res.dla.Heads {
		rows[l] = floats(r)
	}
	h := layerHeadMap(rows, mlp)
	h.Scale = viz.Diverging{}
	h.ValueLabel = "direct effect on LD"
	h.Title = fmt.Sprintf("%s · direct logit attribution, clean · %s = %.3g, embeddings %.3g",
		m.name, metric, float64(res.dla.LD), float64(res.dla.Embed))
	return h, m.name + "-attribution", nil
}

// tokenLabel prints token id for a picture: its symbol, or what it reads as.
func (m *model) tokenLabel(id int) string {
	if m.task == nil {
		if s := m.pieceText(id); s != "" {
			return label(s)
		}
	}
	return m.symbol(id)
}

// floats converts JSON numbers back to float64.
func floats(xs []number) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// layerHeadMap returns the heatmap of scores [L][H], layers down and heads across, with a last
// column for each layer's MLP when mlp [L] is given, on a diverging scale around 0 that reaches
// at least ±1 (a normalised patching score of 1 restores the clean behaviour).
func layerHeadMap(scores [][]float64, mlp []float64) viz.Heatmap {
	L, H := len(scores), len(scores[0])
	cols := H
	if mlp != nil {
		cols++
	}
	h := viz.Heatmap{Rows: L, Cols: cols, XLabel: "head", YLabel: "layer", ValueLabel: "patching score", Annotate: true}
	limit := 1.0
	for l := range L {
		h.RowLabels = append(h.RowLabels, fmt.Sprintf("L%d", l))
		for _, v := range scores[l] {
			h.Values = append(h.Values, v)
			limit = max(limit, math.Abs(v))
		}
		if mlp != nil {
			h.Values = append(h.Values, mlp[l])
		}
	}
	for i := range H {
		h.ColLabels = append(h.ColLabels, fmt.Sprintf("H%d", i))
	}
	if mlp != nil {
		h.ColLabels = append(h.ColLabels, "MLP")
	}
	if math.IsInf(limit, 0) || math.IsNaN(limit) {
		limit = 1
	}
	h.Scale = viz.Diverging{Limit: limit}
	return h
}

// residualMap returns the heatmap of the residual-stream patching scores [L+1][T]: the stream
// entering each block (the last row, the last block's output) across, the positions labelled
// with their tokens (clean/corrupted where they differ).
func residualMap(in *circuitsInput, scores [][]float64, title string) viz.Heatmap {
	m := in.m
	clean, corrupt := m.promptLabels(in.clean), m.promptLabels(in.corrupt)
	t := len(clean)
	cols := make([]string, t)
	for i := range t {
		cols[i] = clean[i]
		if in.clean.tokens[i] != in.corrupt.tokens[i] {
			cols[i] = clean[i] + "/" + corrupt[i]
		}
	}
	L := len(scores) - 1
	h := viz.Heatmap{Title: title, Rows: L + 1, Cols: t, ColLabels: cols, XLabel: "position (clean/corrupted token)", YLabel: "residual stream",
		ValueLabel: "patching score", Annotate: true}
	limit := 1.0
	for l, row := range scores {
		name := fmt.Sprintf("into L%d", l)
		if l == L {
			name = "output"
		}
		h.RowLabels = append(h.RowLabels, name)
		for _, v := range row {
			h.Values = append(h.Values, v)
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				limit = max(limit, math.Abs(v))
			}
		}
	}
	h.Scale = viz.Diverging{Limit: limit}
	return h
}

// promptLabels returns how a picture labels the tokens of p: their symbols, or what they read
// as.
func (m *model) promptLabels(p prompt) []string {
	pieces := m.readable(p.tokens, p.offsets, p.text)
	if pieces == nil {
		return m.symbolsOf(p.tokens)
	}
	for i, s := range pieces {
		pieces[i] = label(s)
	}
	return pieces
}

// compositionPicture draws the composition scores of one mode (q, k or v) between every head
// and every head of a later layer: the writers down, the readers across.
func (s *Server) compositionPicture(ctx context.Context, q url.Values) (viz.Picture, string, error) {
	mode := strings.ToLower(q.Get("mode"))
	if mode == "" {
		mode = "k"
	}
	if !slices.Contains(compositionModes, mode) {
		return nil, "", badRequest("mode %q; want q, k or v (which input of the later head reads the earlier head's output)", clip(q.Get("mode")))
	}
	m, err := s.compositionModel(url.Values{"model": {q.Get("model")}})
	if err != nil {
		return nil, "", err
	}
	c, err := m.composition(ctx)
	if err != nil {
		return nil, "", err
	}
	L, H := c.Layers, c.Heads
	n := (L - 1) * H
	h := viz.Heatmap{
		Title: fmt.Sprintf("%s · %s-composition · random baseline %.3f", m.name, strings.ToUpper(mode), c.Baseline),
		Rows:  n, Cols: n, Values: make([]float64, n*n),
		XLabel: "reading head (later layer)", YLabel: "writing head (earlier layer)", ValueLabel: strings.ToUpper(mode) + "-composition score",
		Scale: viz.Sequential{Min: 0, Max: compositionMax(c.Pairs, mode)}, Annotate: n <= 16,
	}
	for i := range h.Values {
		h.Values[i] = math.NaN()
	}
	for i := range n {
		h.RowLabels = append(h.RowLabels, fmt.Sprintf("L%dH%d", i/H, i%H))
		h.ColLabels = append(h.ColLabels, fmt.Sprintf("L%dH%d", i/H+1, i%H))
	}
	for _, p := range c.Pairs {
		t, err := p.Table(strings.ToUpper(mode))
		if err != nil {
			return nil, "", err
		}
		for i, row := range t {
			for j, v := range row {
				h.Values[(p.From*H+i)*n+(p.To-1)*H+j] = v
			}
		}
	}
	return h, fmt.Sprintf("%s-composition-%s", m.name, strings.ToUpper(mode)), nil
}

// compositionMax returns the largest score of mode, or 1 when there is none above 0: the top of
// the composition picture's scale.
func compositionMax(pairs []circuits.LayerPair, mode string) float64 {
	top := 0.0
	for _, p := range pairs {
		t, err := p.Table(strings.ToUpper(mode))
		if err != nil {
			continue
		}
		for _, row := range t {
			for _, v := range row {
				if !math.IsNaN(v) {
					top = max(top, v)
				}
			}
		}
	}
	if top <= 0 {
		return 1
	}
	return top
}
