package lab

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/viz"
)

// pruningPicture draws the model's pruning curve on its task: the accuracy or the loss (metric,
// accuracy when not given) against the fraction of heads removed.
func (s *Server) pruningPicture(ctx context.Context, m *model, q url.Values) (viz.Picture, string, error) {
	metric := q.Get("metric")
	if metric == "" {
		metric = "accuracy"
	}
	if !slices.Contains(pruneMetrics, metric) {
		return nil, "", badRequest("metric %q; want %s", clip(metric), strings.Join(pruneMetrics, " or "))
	}
	task, err := m.taskMeasurement(ctx, s.opt.Workers)
	if err != nil {
		return nil, "", err
	}
	return pruningChart(m.name, task.Sequences, task.Pruning, metric), fmt.Sprintf("%s-pruning-%s", m.name, metric), nil
}

// pruningChart draws curve, measured on n sequences of model's task, as a chart of metric
// (accuracy or loss) against the fraction of heads removed.
func pruningChart(model string, n int, curve []probe.PrunePoint, metric string) viz.Chart {
	x, y := make([]float64, len(curve)), make([]float64, len(curve))
	for i, p := range curve {
		x[i], y[i] = p.Fraction, p.Accuracy
		if metric == "loss" {
			y[i] = p.Loss
		}
	}
	c := viz.Chart{
		Title:   fmt.Sprintf("%s · %s as heads are pruned (%d task sequences)", model, metric, n),
		XLabel:  "fraction of heads removed, least important first",
		YLabel:  metric,
		Series:  []viz.Series{{X: x, Y: y}},
		YMin:    new(0.0),
		Markers: true,
	}
	if metric == "accuracy" {
		c.YMax = new(1.0)
	} else {
		c.YLabel = "loss (nats)"
	}
	return c
}

// importancePicture draws the importance of every head on the model's task, layers down and
// heads across.
func (s *Server) importancePicture(ctx context.Context, m *model) (viz.Picture, string, error) {
	task, err := m.taskMeasurement(ctx, s.opt.Workers)
	if err != nil {
		return nil, "", err
	}
	L, H := m.cfg.Layers, m.cfg.Heads
	pic := viz.Heatmap{
		Title:      fmt.Sprintf("%s · head importance, normalised per layer (%d task sequences)", m.name, task.Sequences),
		Rows:       L,
		Cols:       H,
		Values:     make([]float64, L*H),
		XLabel:     "head",
		YLabel:     "layer",
		ValueLabel: "importance E|∂L/∂ξ|",
		Scale:      viz.Sequential{Min: 0, Max: 1},
		Annotate:   true,
	}
	for _, h := range task.Heads {
		pic.Values[h.Layer*H+h.Head] = float64(h.Importance)
	}
	return pic, m.name + "-importance", nil
}
