package experiment

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/viz"
)

// RoutingData is the Data of the routing experiment. Tokens have d_model = 4 features: 0 and 1
// are the routing keys that head 0 and head 1 read, 2 and 3 the payload that the value
// projections carry.
type RoutingData struct {
	Gain       float64     `json:"gain"`       // the query weight: head h's logit is Gain·q_h·k_h/√2
	Queries    []string    `json:"queries"`    // the query tokens' names
	QueryX     [][]float64 `json:"query_x"`    // [query][4]: their features
	Candidates []string    `json:"candidates"` // the key/value tokens' names
	CandX      [][]float64 `json:"cand_x"`     // [candidate][4]
	// Weights is [head][query][candidate]: the attention weights.
	Weights [][][]float64 `json:"weights"`
	// HeadOut is [query][4]: head 0's output in columns 0–1, head 1's in 2–3 (the payload each
	// routed); Output is the layer's output, which the identity output projection makes equal.
	HeadOut [][]float64 `json:"head_out"`
	Output  [][]float64 `json:"output"`
	// Routes is [query][head]: the candidate the head takes more than half its weight from, or
	// −1 when it spreads its weight.
	Routes [][]int `json:"routes"`
}

// routingGain is the query weight of the routing layer: with it a matching key gets the logit
// 8/√2 ≈ 5.7 and, against two keys at 0, weight e^5.7/(e^5.7 + 2) ≈ 0.99.
const routingGain = 8

// routingTokens are the experiment's tokens: queries asking for routing key a, b or both, and
// candidates A (key a, payload (1, 0)), B (key b, payload (0, 1)) and C (no key, payload
// (−1, −1)), so that spreading weight evenly over the three carries the payload (0, 0).
var routingTokens = struct {
	queries, candidates []string
	q, c                [][]float32
}{
	queries:    []string{"asks a", "asks b", "asks a+b"},
	q:          [][]float32{{1, 0, 0, 0}, {0, 1, 0, 0}, {1, 1, 0, 0}},
	candidates: []string{"A", "B", "C"},
	c:          [][]float32{{1, 0, 1, 0}, {0, 1, 0, 1}, {0, 0, -1, -1}},
}

// routingLayer returns chapter 002's routing layer, d_model = 4 with two heads of size 2, its
// weights set by hand: head h's query and key read only feature h (the query scaled by
// routingGain), both heads' values read the payload features 2 and 3, and the output
// projection is the identity, so the output is the two routed payloads side by side.
func routingLayer() (*mha.Layer, error) {
	const e = 4
	layer, err := mha.New(mha.Config{EmbedDim: e, NumHeads: 2})
	if err != nil {
		return nil, err
	}
	in := tensor.New(3*e, e) // rows: W_q (head 0: 0–1, head 1: 2–3); W_k; W_v
	set := func(row, col int, v float32) { in.Data[row*e+col] = v }
	for h := range 2 {
		set(2*h, h, routingGain) // W_q: the first query row of head h reads feature h
		set(e+2*h, h, 1)         // W_k: so does the first key row
		set(2*e+2*h, 2, 1)       // W_v: head h's value is the payload (features 2, 3)
		set(2*e+2*h+1, 3, 1)
	}
	out := tensor.New(e, e)
	for i := range e {
		out.Data[i*e+i] = 1
	}
	err = layer.LoadStateDict(map[string]*tensor.Tensor{
		"in_proj_weight": in, "in_proj_bias": tensor.New(3 * e),
		"out_proj.weight": out, "out_proj.bias": tensor.New(e),
	})
	return layer, err
}

// Routing shows chapter 002's soft routing: with d_model = 4 and two heads that each read one
// feature of the tokens, a query routes, per head, the payload of the candidate whose key
// matches, and both heads route at once, each from its own candidate. The layer (see
// routingLayer) runs the three queries over the three candidates; the table gives each head's
// weights, the candidate it routes from and what it outputs. Data is a *RoutingData; the
// pictures are "head0" and "head1", each head's weights with token labels, and "output", the
// layer's output per query. cfg is not used: nothing here is random.
func Routing(ctx context.Context, _ Config) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	layer, err := routingLayer()
	if err != nil {
		return nil, err
	}
	tok := routingTokens
	nq, nc := len(tok.q), len(tok.c)
	query, cand := tensor.New(1, nq, 4), tensor.New(1, nc, 4)
	for i, x := range tok.q {
		copy(query.Data[i*4:], x)
	}
	for i, x := range tok.c {
		copy(cand.Data[i*4:], x)
	}
	r, err := layer.Forward(query, cand, cand, &mha.Options{NeedWeights: true, PerHeadWeights: true, Heads: mha.HeadOptions{Keep: true}})
	if err != nil {
		return nil, err
	}
	data := &RoutingData{
		Gain:       routingGain,
		Queries:    tok.queries,
		QueryX:     rowsOf(query.Data, 4),
		Candidates: tok.candidates,
		CandX:      rowsOf(cand.Data, 4),
		HeadOut:    rowsOf(r.Heads.Data, 4),
		Output:     rowsOf(r.Output.Data, 4),
	}
	for h := range 2 {
		data.Weights = append(data.Weights, rowsOf(r.Weights.Data[h*nq*nc:(h+1)*nq*nc], nc))
	}
	for q := range nq {
		routes := make([]int, 2)
		for h := range routes {
			routes[h] = -1
			for c, a := range data.Weights[h][q] {
				if a > 0.5 {
					routes[h] = c
				}
			}
		}
		data.Routes = append(data.Routes, routes)
	}
	return routingResult(data), nil
}

// rowsOf splits x into rows of n values, widened to float64.
func rowsOf(x []float32, n int) [][]float64 {
	rows := make([][]float64, len(x)/n)
	for i := range rows {
		rows[i] = appendFloat64(nil, x[i*n:(i+1)*n])
	}
	return rows
}

// routingResult lays out the routing experiment's table, summary and pictures.
func routingResult(d *RoutingData) *Result {
	res := &Result{
		Name:  "routing",
		Title: "Attention as soft routing: d_model = 4, two heads that each read one feature (chapter 002)",
		Table: Table{Columns: []string{"query", "head", "reads", "α(" + d.Candidates[0] + ")", "α(" + d.Candidates[1] + ")", "α(" + d.Candidates[2] + ")", "routes from", "head output", "payload routed"}},
		Data:  d,
	}
	maxErr := 0.0
	for q, name := range d.Queries {
		for h := range 2 {
			from, payload := "nothing (weight spread)", "—"
			out := d.HeadOut[q][2*h : 2*h+2]
			if c := d.Routes[q][h]; c >= 0 {
				from = d.Candidates[c]
				want := d.CandX[c][2:4]
				payload = vec(want)
				maxErr = max(maxErr, math.Abs(out[0]-want[0]), math.Abs(out[1]-want[1]))
			}
			w := d.Weights[h][q]
			res.Table.Rows = append(res.Table.Rows, []string{
				name + " " + vec(d.QueryX[q]), fmt.Sprint(h), fmt.Sprintf("feature %d", h),
				fmt.Sprintf("%.3f", w[0]), fmt.Sprintf("%.3f", w[1]), fmt.Sprintf("%.3f", w[2]), from, vec(out), payload,
			})
		}
	}
	last := len(d.Queries) - 1
	cands := make([]string, len(d.Candidates))
	for c, name := range d.Candidates {
		cands[c] = fmt.Sprintf("%s = %s (%s, payload %s)", name, vec(d.CandX[c]), keyOf(d.CandX[c]), vec(d.CandX[c][2:4]))
	}
	res.Summary = "Candidates: " + strings.Join(cands, "; ") + ". " + fmt.Sprintf("Head 0 compares feature 0 of query and key, head 1 feature 1; each routes the payload of the candidate whose key matches its part of the query. "+
		"Query %q puts %.3f of head 0's weight on %s and %.3f of head 1's on %s, so the layer outputs %s: both payloads at once, each within %.3f of the routed token's. "+
		"Where a query has nothing for a head to match, the head spreads its weight (%.3f on each candidate for %q) and passes on their mean payload, %s.",
		d.Queries[last], d.Weights[0][last][0], d.Candidates[0], d.Weights[1][last][1], d.Candidates[1], vec(d.Output[last]), maxErr,
		d.Weights[1][0][0], d.Queries[0], vec(d.HeadOut[0][2:4]))

	res.Pictures = []Figure{
		{Name: "head0", Picture: routingWeights(d, 0)},
		{Name: "head1", Picture: routingWeights(d, 1)},
		{Name: "output", Picture: viz.Heatmap{
			Title: "Layer output: head 0's payload in features 0–1, head 1's in 2–3",
			Rows:  len(d.Queries), Cols: 4, Values: flatten(d.Output),
			RowLabels: d.Queries, ColLabels: []string{"0 (head 0)", "1 (head 0)", "2 (head 1)", "3 (head 1)"},
			XLabel: "output feature", YLabel: "query", ValueLabel: "value",
			Scale: viz.Diverging{Limit: 1}, Annotate: true,
		}},
	}
	return res
}

// routingWeights draws head h's weights, queries down and candidates across.
func routingWeights(d *RoutingData, h int) viz.Picture {
	return viz.Heatmap{
		Title: fmt.Sprintf("Head %d, which reads feature %d: attention weights", h, h),
		Rows:  len(d.Queries), Cols: len(d.Candidates), Values: flatten(d.Weights[h]),
		RowLabels: d.Queries, ColLabels: candLabels(d), XLabel: "candidate (key and value)", YLabel: "query",
		ValueLabel: "attention weight", Scale: viz.Sequential{Min: 0, Max: 1}, Annotate: true,
	}
}

// candLabels names the candidates with their keys: "A (key a)".
func candLabels(d *RoutingData) []string {
	labels := make([]string, len(d.Candidates))
	for c, name := range d.Candidates {
		labels[c] = fmt.Sprintf("%s (%s)", name, keyOf(d.CandX[c]))
	}
	return labels
}

// keyOf names the routing keys a token holds in features 0 and 1: "key a", "key b", "keys a+b"
// or "no key".
func keyOf(x []float64) string {
	switch a, b := x[0] != 0, x[1] != 0; {
	case a && b:
		return "keys a+b"
	case a:
		return "key a"
	case b:
		return "key b"
	}
	return "no key"
}

// flatten concatenates rows.
func flatten(rows [][]float64) []float64 {
	var out []float64
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

// vec prints a short vector with 2 decimals: (1.00, 0.00).
func vec(x []float64) string {
	s := "("
	for i, v := range x {
		if i > 0 {
			s += ", "
		}
		if math.Abs(v) < 0.005 {
			v = 0 // no "-0.00"
		}
		s += fmt.Sprintf("%.2f", v)
	}
	return s + ")"
}
