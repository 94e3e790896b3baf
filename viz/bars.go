package viz

import (
	"fmt"
	"io"
	"math"
)

// Bars is a bar chart of one value per label: the importance of each head, a metric per layer.
// Bars rise from 0 (negative values hang below it); labels under the bars are thinned, turned and
// cut short as a Heatmap's column labels are.
type Bars struct {
	Title, XLabel, YLabel string
	Labels                []string  // nil (the indices) or one per value
	Values                []float64 // 1…MaxBars finite values
}

// PNG writes b as a PNG. It returns an error when there are no values or more than MaxBars, when a
// value is NaN or ±Inf, when Labels is given with the wrong length, or from w.
func (b Bars) PNG(w io.Writer) error {
	return render(b.scene, w, false)
}

// SVG writes b as an SVG document, one <rect> per bar; its errors are PNG's.
func (b Bars) SVG(w io.Writer) error {
	return render(b.scene, w, true)
}

func (b Bars) check() error {
	name := describe("bar chart", b.Title)
	if len(b.Values) == 0 || len(b.Values) > MaxBars {
		return fmt.Errorf("viz: %s has %d values, want 1…%d", name, len(b.Values), MaxBars)
	}
	if b.Labels != nil && len(b.Labels) != len(b.Values) {
		return fmt.Errorf("viz: %s has %d labels for %d values", name, len(b.Labels), len(b.Values))
	}
	for i, v := range b.Values {
		if !finite(v) {
			return fmt.Errorf("viz: %s: value %d is %g, want a finite number", name, i, v)
		}
	}
	return nil
}

// barsH is the height of the plot area of a bar chart, in pixels.
const barsH = 260

func (b Bars) scene() (*scene, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	n := len(b.Values)
	pitch := float64(max(2, min(40, 480/n)))
	bw := max(1, math.Round(pitch*0.75))
	pw := pitch * float64(n)

	lo, hi := 0.0, 0.0
	for _, v := range b.Values {
		lo, hi = min(lo, v), max(hi, v)
	}
	m := (hi/2 - lo/2) * 0.1
	if m == 0 {
		m = 0.5
	}
	if hi > 0 || lo == 0 {
		hi = math.Min(hi+m, math.MaxFloat64)
	}
	if lo < 0 {
		lo = math.Max(lo-m, -math.MaxFloat64)
	}
	ya := axis{lo: lo, hi: hi}
	s := newScene()
	yt, ylabels := ya.ticks(6)
	yLabelW := 0.0
	for _, l := range ylabels {
		yLabelW = max(yLabelW, s.width(l, tickStyle))
	}
	yl, xl := newAxisTitle(s, b.YLabel, barsH), newAxisTitle(s, b.XLabel, pw)
	cols := colLabels(s, b.Labels, n, pitch)

	x0 := math.Ceil(pad + yl.depth + yLabelW + tickLen + 3)
	y0 := math.Ceil(pad + titleHeight(s, b.Title) + s.capHeight(tickStyle)/2)
	ya.from, ya.to = y0+barsH, y0
	width := x0 + pw + pad
	height := y0 + barsH + cols.depth + xl.depth + pad
	if err := checkSize(describe("bar chart", b.Title), width, height); err != nil {
		return nil, err
	}

	for _, v := range yt {
		y := crisp(ya.at(v))
		s.segment(x0, y, x0+pw, y, 1, gridColor)
	}
	base := ya.at(0)
	for i, v := range b.Values {
		top, bottom := math.Min(base, ya.at(v)), math.Max(base, ya.at(v))
		s.rect(x0+float64(i)*pitch+(pitch-bw)/2, top, bw, bottom-top, palette[0])
	}
	zero := crisp(base)
	s.segment(x0, zero, x0+pw, zero, 1, axisColor)
	s.segment(x0-0.5, y0, x0-0.5, y0+barsH, 1, axisColor)
	capH := s.capHeight(tickStyle)
	for i, v := range yt {
		y := crisp(ya.at(v))
		s.segment(x0-1-tickLen, y, x0-1, y, 1, axisColor)
		st := tickStyle
		st.anchor = anchorEnd
		s.text(x0-1-tickLen-3, y+capH/2, ylabels[i], st)
	}
	cols.drawCols(s, x0, y0+barsH, pitch)
	yl.drawLeft(s, pad, y0+barsH/2)
	xl.drawBelow(s, x0+pw/2, y0+barsH+cols.depth)
	s.w, s.h = drawTitle(s, b.Title, x0+pw/2, width), height
	return s, nil
}
