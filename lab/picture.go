package lab

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/viz"
)

// pictureParams are the query parameters /api/picture accepts; sequenceParams name the sequence
// a picture is drawn from and the heads ablated on it.
var (
	pictureParams  = []string{"model", "text", "tokens", "seed", "ablate", "patterns", "block", "normalizer", "kind", "layer", "head", "metric", "scope", "clean", "corrupt", "target", "foil", "position", "mode", "format"}
	sequenceParams = []string{"text", "tokens", "seed", "ablate", "patterns", "block", "normalizer"}
	// circuitParams name the prompts and the metric of the circuits pictures, as /api/circuits
	// takes them.
	circuitParams = []string{"clean", "corrupt", "target", "foil", "position"}
)

// pictureKind is a kind of picture: its name, whether it is drawn from a sequence (then it takes
// sequenceParams), from a clean and a corrupted prompt (circuit: then it takes circuitParams) or
// from the model's task or weights, and the parameters it takes besides model, kind and format.
type pictureKind struct {
	name     string
	sequence bool
	circuit  bool
	params   []string
}

// pictureKinds are the kinds of /api/picture, in the order error messages list them.
var pictureKinds = []pictureKind{
	{name: "head", sequence: true, params: []string{"layer", "head"}},
	{name: "grid", sequence: true},
	{name: "similarity", sequence: true, params: []string{"layer", "metric", "scope"}},
	{name: "rollout", sequence: true},
	{name: "offsets", sequence: true, params: []string{"layer", "head"}},
	{name: "pruning", params: []string{"metric"}},
	{name: "importance"},
	{name: "patching", circuit: true},
	{name: "patching-residual", circuit: true},
	{name: "patching-patterns", circuit: true},
	{name: "attribution", circuit: true},
	{name: "composition", params: []string{"mode"}},
}

// Pair metrics of kind=similarity and score metrics of kind=pruning.
var (
	pairMetrics  = []string{"rho", "js", "nmi"}
	pruneMetrics = []string{"accuracy", "loss"}
)

// picture answers GET /api/picture: a PNG or SVG drawn by package viz, sent as a download.
func (s *Server) picture(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	pic, name, err := s.Picture(r.Context(), q)
	if err != nil {
		return err
	}
	return writePicture(w, pic, q.Get("format"), name)
}

// Picture draws the picture that query asks for, as GET /api/picture does (see the package
// documentation for the parameters, each given once), and returns it with the name it is
// downloaded as, without the extension. The query's format, png or svg, is checked, but writing
// the picture in it is the caller's part. The pictures of a sequence take it as text, as tokens
// (comma-separated ids) or as a seed, with ablate as comma-separated LAYER.HEAD.MODE items, and
// may run the model under sparse attention: patterns separated by spaces (empty for none), block
// as BQ,BK and a normalizer; those of the task (pruning, importance, and similarity with
// scope=task, for which a sequence is optional and not drawn) need none. ctx stops the work
// between model runs.
// An error's message says what is wrong with the query, in words fit to show the user.
func (s *Server) Picture(ctx context.Context, query url.Values) (pic viz.Picture, name string, err error) {
	kind, err := pictureKindOf(query)
	if err != nil {
		return nil, "", err
	}
	switch {
	case kind.circuit:
		return s.circuitPicture(ctx, kind.name, query)
	case kind.name == "composition":
		return s.compositionPicture(ctx, query)
	}
	if !kind.sequence {
		m, err := s.model(query.Get("model"))
		if err != nil {
			return nil, "", err
		}
		if m.task == nil {
			return nil, "", badRequest("model %s has no task; kind=%s is measured on the task's sequences, so it needs one (kinds of a sequence: head, grid, similarity, rollout, offsets)", m.name, kind.name)
		}
		if kind.name == "pruning" {
			return s.pruningPicture(ctx, m, query)
		}
		return s.importancePicture(ctx, m)
	}
	task := kind.name == "similarity" && query.Get("scope") == "task"
	if task {
		// Measured on the task's sequences (or repeated random tokens), unablated and as
		// trained: an ablation or sparse attention would not apply. A sequence is not needed;
		// one given is checked, as for the sequence scope, and not drawn.
		for _, k := range []string{"ablate", "patterns", "block", "normalizer"} {
			if query.Has(k) {
				return nil, "", badRequest("parameter %q does not apply to kind=similarity with scope=task, which is measured on the model's own task sequences, unablated and as trained", k)
			}
		}
		if !query.Has("text") && !query.Has("tokens") && !query.Has("seed") {
			m, err := s.model(query.Get("model"))
			if err != nil {
				return nil, "", err
			}
			return s.pairPicture(ctx, m, nil, query)
		}
	}
	req, err := queryRequest(query)
	if err != nil {
		return nil, "", err
	}
	in, err := s.input(req)
	if err != nil {
		return nil, "", err
	}
	if task {
		return s.pairPicture(ctx, in.m, nil, query)
	}
	switch kind.name {
	case "head":
		return s.headPicture(ctx, in, query)
	case "grid":
		return s.gridPicture(ctx, in)
	case "rollout":
		return s.rolloutPicture(ctx, in)
	case "offsets":
		return s.offsetsPicture(ctx, in, query)
	}
	return s.pairPicture(ctx, in.m, in, query)
}

// pictureKindOf checks that query gives only known parameters, each once, a format and a kind
// that takes every parameter given, and returns the kind.
func pictureKindOf(query url.Values) (pictureKind, error) {
	given := slices.Sorted(maps.Keys(query))
	for _, k := range given {
		if !slices.Contains(pictureParams, k) {
			return pictureKind{}, badRequest("unknown parameter %q; want %s", clip(k), strings.Join(pictureParams, ", "))
		}
		if n := len(query[k]); n > 1 {
			return pictureKind{}, badRequest("parameter %q is given %d times; want it once", k, n)
		}
	}
	if format := query.Get("format"); format != "png" && format != "svg" {
		return pictureKind{}, badRequest("format %q; want png or svg", clip(format))
	}
	i := slices.IndexFunc(pictureKinds, func(k pictureKind) bool { return k.name == query.Get("kind") })
	if i < 0 {
		names := make([]string, len(pictureKinds))
		for j, k := range pictureKinds {
			names[j] = k.name
		}
		return pictureKind{}, badRequest("kind %q; want %s", clip(query.Get("kind")), strings.Join(names, ", "))
	}
	kind := pictureKinds[i]
	takes := append([]string{"model", "kind", "format"}, kind.params...)
	if kind.sequence {
		takes = append(takes, sequenceParams...)
	}
	if kind.circuit {
		takes = append(takes, circuitParams...)
	}
	for _, k := range given {
		if !slices.Contains(takes, k) {
			return pictureKind{}, badRequest("parameter %q does not apply to kind=%s, which takes %s", k, kind.name, strings.Join(takes, ", "))
		}
	}
	return kind, nil
}

// writePicture answers pic in format, png or svg, as a download named name.format.
func writePicture(w http.ResponseWriter, pic viz.Picture, format, name string) error {
	var (
		buf bytes.Buffer
		err error
	)
	if format == "png" {
		err = pic.PNG(&buf)
		w.Header().Set("Content-Type", "image/png")
	} else {
		err = pic.SVG(&buf)
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+"."+format))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, err = w.Write(buf.Bytes())
	return err
}

// queryRequest reads a runRequest from a picture's query.
func queryRequest(q url.Values) (*runRequest, error) {
	req := &runRequest{Model: q.Get("model")}
	if q.Has("text") {
		text := q.Get("text")
		req.Text = &text
	}
	if q.Has("tokens") {
		req.Tokens = []int{}
		for i, f := range strings.Split(q.Get("tokens"), ",") {
			id, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, badRequest("tokens: item %d is %q; want comma-separated token ids", i, clip(f))
			}
			req.Tokens = append(req.Tokens, id)
		}
	}
	if q.Has("seed") {
		seed, err := strconv.ParseUint(q.Get("seed"), 10, 64)
		if err != nil {
			return nil, badRequest("seed %q; want a whole number from 0 to 2⁶⁴−1", clip(q.Get("seed")))
		}
		req.Seed = &seed
	}
	if a := q.Get("ablate"); a != "" {
		for i, f := range strings.Split(a, ",") {
			var abl probe.Ablation
			parts := strings.Split(f, ".")
			if len(parts) != 3 {
				return nil, badRequest("ablate: item %d is %q; want LAYER.HEAD.MODE such as 1.2.zero", i, clip(f))
			}
			var err1, err2 error
			abl.Layer, err1 = strconv.Atoi(parts[0])
			abl.Head, err2 = strconv.Atoi(parts[1])
			if err1 != nil || err2 != nil {
				return nil, badRequest("ablate: item %d is %q; want LAYER.HEAD.MODE such as 1.2.zero", i, clip(f))
			}
			abl.Mode = probe.AblationMode(parts[2])
			req.Ablate = append(req.Ablate, abl)
		}
	}
	if q.Has("patterns") {
		req.Patterns = append([]string{}, strings.Fields(q.Get("patterns"))...)
	}
	if q.Has("block") {
		var err error
		if req.Block, err = queryBlock(q.Get("block")); err != nil {
			return nil, err
		}
	}
	if q.Has("normalizer") {
		n := q.Get("normalizer")
		req.Normalizer = &n
	}
	return req, nil
}

// intParam reads the whole-number parameter name, which must lie in [0, n).
func intParam(q url.Values, name string, n int) (int, error) {
	if q.Get(name) == "" {
		return 0, badRequest("%s missing; want a whole number from 0 to %d", name, n-1)
	}
	v, err := strconv.Atoi(q.Get(name))
	if err != nil || v < 0 || v >= n {
		return 0, badRequest("%s %q; want a whole number from 0 to %d", name, clip(q.Get(name)), n-1)
	}
	return v, nil
}

// attention returns the heatmap of one head's weights w [T, T] (row-major) with the tokens as
// labels; for a causal model, keys after the query, which it cannot see, are masked.
func attention(title string, w []float32, symbols []string, causal bool) viz.Heatmap {
	t := len(symbols)
	values := make([]float64, t*t)
	for q := range t {
		for k := range t {
			values[q*t+k] = float64(w[q*t+k])
			if causal && k > q {
				values[q*t+k] = math.NaN()
			}
		}
	}
	return viz.Heatmap{
		Title:      title,
		Rows:       t,
		Cols:       t,
		Values:     values,
		RowLabels:  symbols,
		ColLabels:  symbols,
		XLabel:     "key",
		YLabel:     "query",
		ValueLabel: "attention weight",
		Scale:      viz.Sequential{Min: 0, Max: 1},
	}
}

// headPicture draws one head's attention on the sequence.
func (s *Server) headPicture(ctx context.Context, in *input, q url.Values) (viz.Picture, string, error) {
	layer, err := intParam(q, "layer", in.m.cfg.Layers)
	if err != nil {
		return nil, "", err
	}
	head, err := intParam(q, "head", in.m.cfg.Heads)
	if err != nil {
		return nil, "", err
	}
	c, err := in.record(ctx, in.ablate, s.opt.Workers)
	if err != nil {
		return nil, "", err
	}
	t := len(in.tokens)
	w := c.Weights[layer].Data[head*t*t:][:t*t]
	visible := in.sparsity.visible(in.m.cfg, layer, t)
	title := fmt.Sprintf("%s · layer %d, head %d%s%s", in.m.name, layer, head, ablatedNote(in.ablate), in.sparsity.note())
	if in.sparsity.adaptive() {
		title += fmt.Sprintf(" · %s of the visible weights exactly 0 (red dots)", percent(zeroFraction(w, visible)))
	}
	return in.sparsity.overlay(attention(title, w, in.labels(), in.causal()), w, visible), fmt.Sprintf("%s-L%dH%d", in.m.name, layer, head), nil
}

// gridPicture draws every head's attention on the sequence, layers down and heads across.
func (s *Server) gridPicture(ctx context.Context, in *input) (viz.Picture, string, error) {
	c, err := in.record(ctx, in.ablate, s.opt.Workers)
	if err != nil {
		return nil, "", err
	}
	L, H, t := in.m.cfg.Layers, in.m.cfg.Heads, len(in.tokens)
	symbols, causal := in.labels(), in.causal()
	g := viz.Grid{
		Title: fmt.Sprintf("%s · attention of every head%s%s", in.m.name, ablatedNote(in.ablate), in.sparsity.note()),
		Rows:  L,
		Cols:  H,
		Scale: viz.Sequential{Min: 0, Max: 1},
	}
	for l := range L {
		g.RowTitles = append(g.RowTitles, fmt.Sprintf("layer %d", l))
		visible := in.sparsity.visible(in.m.cfg, l, t)
		for h := range H {
			w := c.Weights[l].Data[h*t*t:][:t*t]
			title := fmt.Sprintf("L%d H%d", l, h)
			if in.sparsity.adaptive() {
				title += fmt.Sprintf(" · %s 0", percent(zeroFraction(w, visible)))
			}
			g.Cells = append(g.Cells, in.sparsity.overlay(attention(title, w, symbols, causal), w, visible))
		}
	}
	for h := range H {
		g.ColTitles = append(g.ColTitles, fmt.Sprintf("head %d", h))
	}
	return g, in.m.name + "-heads", nil
}

// pairPicture draws one of a layer's head-pair matrices of mod, on the sequence in or, with
// scope=task (in nil), on the task.
func (s *Server) pairPicture(ctx context.Context, mod *model, in *input, q url.Values) (viz.Picture, string, error) {
	layer, err := intParam(q, "layer", mod.cfg.Layers)
	if err != nil {
		return nil, "", err
	}
	metric := q.Get("metric")
	switch {
	case metric == "":
		return nil, "", badRequest("metric missing; want %s", strings.Join(pairMetrics, ", "))
	case !slices.Contains(pairMetrics, metric):
		return nil, "", badRequest("metric %q; want %s", clip(metric), strings.Join(pairMetrics, ", "))
	}
	var meas *measurement
	where := "this sequence"
	switch scope := q.Get("scope"); scope {
	case "", "sequence":
		c, err := in.record(ctx, in.ablate, s.opt.Workers)
		if err != nil {
			return nil, "", err
		}
		if meas, err = measure(c, in.attn()); err != nil {
			return nil, "", err
		}
	case "task":
		task, err := mod.taskMeasurement(ctx, s.opt.Workers)
		if err != nil {
			return nil, "", err
		}
		meas = &task.measurement
		where = fmt.Sprintf("%d sequences of the task", meas.Sequences)
		if mod.task == nil {
			where = fmt.Sprintf("%d sequences of repeated random tokens", meas.Sequences)
		}
	default:
		return nil, "", badRequest("scope %q; want sequence or task", clip(scope))
	}
	pairs := meas.Layers[layer]
	m, title, scale := pairs.JSDistance, "Jensen–Shannon distance", viz.Scale(viz.Sequential{Min: 0, Max: 1})
	switch metric {
	case "rho":
		m, title, scale = pairs.Similarity, "ρ, cosine similarity of head outputs", viz.Diverging{Limit: 1}
	case "nmi":
		m, title, scale = pairs.ArgmaxNMI, "normalised mutual information of argmax keys", viz.Sequential{Min: 0, Max: 1}
	}
	h := len(m)
	labels := make([]string, h)
	values := make([]float64, 0, h*h)
	for i, row := range m {
		labels[i] = fmt.Sprintf("H%d", i)
		for _, v := range row {
			values = append(values, float64(v))
		}
	}
	pic := viz.Heatmap{
		Title:     fmt.Sprintf("%s · layer %d · %s (%s)", mod.name, layer, title, where),
		Rows:      h,
		Cols:      h,
		Values:    values,
		RowLabels: labels,
		ColLabels: labels,
		XLabel:    "head",
		YLabel:    "head",
		Scale:     scale,
		Annotate:  true,
	}
	return pic, fmt.Sprintf("%s-L%d-%s", mod.name, layer, metric), nil
}

// labels returns the tokens of in as a picture labels them: their symbols, or what they read as.
func (in *input) labels() []string {
	pieces := in.m.readable(in.tokens, in.offsets, in.text)
	if pieces == nil {
		return in.m.symbolsOf(in.tokens)
	}
	for i, p := range pieces {
		pieces[i] = label(p)
	}
	return pieces
}

// causal reports whether in's model masks later keys.
func (in *input) causal() bool { return !in.m.cfg.Bidirectional }

// rolloutPicture draws the attention rollout of the sequence (probe.Rollout).
func (s *Server) rolloutPicture(ctx context.Context, in *input) (viz.Picture, string, error) {
	c, err := in.record(ctx, in.ablate, s.opt.Workers)
	if err != nil {
		return nil, "", err
	}
	r, err := probe.Rollout(c.Weights)
	if err != nil {
		return nil, "", err
	}
	title := fmt.Sprintf("%s · attention rollout through %d layers%s%s", in.m.name, in.m.cfg.Layers, ablatedNote(in.ablate), in.sparsity.note())
	pic := attention(title, r.Data, in.labels(), in.causal())
	pic.XLabel, pic.ValueLabel = "input token", "share flowing from the input token"
	return pic, in.m.name + "-rollout", nil
}

// offsetsPicture draws one head's mean attention by the key's offset from the query
// (probe.OffsetProfile) on the sequence; the offsets of later keys only for a bidirectional
// model.
func (s *Server) offsetsPicture(ctx context.Context, in *input, q url.Values) (viz.Picture, string, error) {
	layer, err := intParam(q, "layer", in.m.cfg.Layers)
	if err != nil {
		return nil, "", err
	}
	head, err := intParam(q, "head", in.m.cfg.Heads)
	if err != nil {
		return nil, "", err
	}
	c, err := in.record(ctx, in.ablate, s.opt.Workers)
	if err != nil {
		return nil, "", err
	}
	t := len(in.tokens)
	prof, err := probe.OffsetProfile(c.Weights[layer].Data, 1, in.m.cfg.Heads, t)
	if err != nil {
		return nil, "", err
	}
	last := 2*t - 1
	if in.causal() {
		last = t // no weight on later keys
	}
	x, y := make([]float64, last), prof[head][:last]
	for i := range x {
		x[i] = float64(i - (t - 1))
	}
	chart := viz.Chart{
		Title:   fmt.Sprintf("%s · layer %d, head %d · attention by offset%s%s", in.m.name, layer, head, ablatedNote(in.ablate), in.sparsity.note()),
		XLabel:  "key position − query position",
		YLabel:  "mean attention weight",
		Series:  []viz.Series{{X: x, Y: y}},
		YMin:    new(0.0),
		YMax:    new(1.0),
		Markers: true,
	}
	return chart, fmt.Sprintf("%s-L%dH%d-offsets", in.m.name, layer, head), nil
}

// ablatedNote says which heads a picture's run ablated.
func ablatedNote(ablate []probe.Ablation) string {
	if len(ablate) == 0 {
		return ""
	}
	parts := make([]string, len(ablate))
	for i, a := range ablate {
		parts[i] = fmt.Sprintf("L%d H%d %s", a.Layer, a.Head, a.Mode)
	}
	return " (ablated: " + strings.Join(parts, ", ") + ")"
}
