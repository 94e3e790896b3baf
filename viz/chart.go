package viz

import (
	"fmt"
	"io"
	"iter"
	"math"
	"strconv"
)

// Chart is a line chart of one or more series: a pruning curve, training curves, a sweep.
//
// The axes span the data with a 3% margin (YMin and YMax, when set, fix the y axis exactly; lines
// are clipped to it). Series are drawn in a colour-blind-safe palette, in order, with a legend of
// their names on the right.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series // 1…MaxSeries, MaxPoints points in all
	LogX, LogY            bool     // logarithmic axes: every finite value on them must be > 0
	YMin, YMax            *float64 // optional fixed ends of the y axis: finite, YMin < YMax, > 0 on a log axis
	Markers               bool     // draw a dot at every point (for sweeps with few points)
}

// Series is one line of a Chart: the points (X[i], Y[i]) joined in order. A point whose X or Y is
// NaN or ±Inf is left out and breaks the line.
type Series struct {
	Name string // in the legend; series without a name are left out of it
	X, Y []float64
}

// PNG writes c as a PNG. It returns an error when c has no series or more than MaxSeries, when a
// series has len(X) ≠ len(Y), when the series hold more than MaxPoints points together or not one
// finite point, when a log axis meets a value ≤ 0, for an invalid YMin or YMax, or from w.
func (c Chart) PNG(w io.Writer) error {
	return render(c.scene, w, false)
}

// SVG writes c as an SVG document, one <polyline> per unbroken run of a series; its errors are PNG's.
func (c Chart) SVG(w io.Writer) error {
	return render(c.scene, w, true)
}

// palette is Okabe and Ito's colour-blind-safe palette, without its yellow (too light on white).
var palette = [...]rgb{
	{0x00, 0x72, 0xb2}, // blue
	{0xd5, 0x5e, 0x00}, // vermilion
	{0x00, 0x9e, 0x73}, // bluish green
	{0xcc, 0x79, 0xa7}, // reddish purple
	{0xe6, 0x9f, 0x00}, // orange
	{0x56, 0xb4, 0xe9}, // sky blue
	{0x00, 0x00, 0x00}, // black
}

// Size of a chart's plot area, in pixels.
const (
	chartW = 460
	chartH = 300
)

// span returns the range of the finite values vs with a 3% margin each side (in log space on a
// log axis, whose values are all > 0). It widens a single value to a range around it.
func span(log bool, vs iter.Seq[float64]) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for v := range vs {
		if log {
			v = math.Log10(v)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo == hi {
		d := math.Max(math.Abs(lo)*0.1, 0.5)
		lo, hi = lo-d, hi+d
	}
	m := (hi/2 - lo/2) * 0.06
	lo, hi = math.Max(lo-m, -math.MaxFloat64), math.Min(hi+m, math.MaxFloat64)
	if log { // within the positive floats, however wide the margin made the range
		lo = math.Min(math.Max(math.Pow(10, lo), math.SmallestNonzeroFloat64), math.MaxFloat64)
		hi = math.Max(math.Min(math.Pow(10, hi), math.MaxFloat64), lo)
	}
	return lo, hi
}

func (c Chart) check() error {
	name := describe("chart", c.Title)
	if len(c.Series) == 0 || len(c.Series) > MaxSeries {
		return fmt.Errorf("viz: %s has %d series, want 1…%d", name, len(c.Series), MaxSeries)
	}
	total, finitePoints := 0, 0
	for k, sr := range c.Series {
		if len(sr.X) != len(sr.Y) {
			return fmt.Errorf("viz: %s: %s has %d x values and %d y values, want as many", name, seriesName(k, sr.Name), len(sr.X), len(sr.Y))
		}
		total += len(sr.X)
		if total > MaxPoints {
			return fmt.Errorf("viz: %s has more than %d points in all its series", name, MaxPoints)
		}
		for i := range sr.X {
			if !finite(sr.X[i]) || !finite(sr.Y[i]) {
				continue
			}
			finitePoints++
			if c.LogX && sr.X[i] <= 0 || c.LogY && sr.Y[i] <= 0 {
				return fmt.Errorf("viz: %s: %s has the point (%g, %g) at %d; a log axis needs values > 0", name, seriesName(k, sr.Name), sr.X[i], sr.Y[i], i)
			}
		}
	}
	if finitePoints == 0 {
		return fmt.Errorf("viz: %s has no point with finite x and y in its %d series", name, len(c.Series))
	}
	for _, b := range []struct {
		name string
		v    *float64
	}{{"YMin", c.YMin}, {"YMax", c.YMax}} {
		if b.v != nil && (!finite(*b.v) || c.LogY && *b.v <= 0) {
			return fmt.Errorf("viz: %s: %s = %g, want a finite value (> 0 on a log axis)", name, b.name, *b.v)
		}
	}
	if c.YMin != nil && c.YMax != nil && *c.YMin >= *c.YMax {
		return fmt.Errorf("viz: %s: YMin = %g ≥ YMax = %g, want YMin < YMax", name, *c.YMin, *c.YMax)
	}
	return nil
}

// seriesName names series k in an error message.
func seriesName(k int, name string) string {
	if name == "" {
		return "series " + strconv.Itoa(k)
	}
	return fmt.Sprintf("series %d (%q)", k, cut(name))
}

// values yields one coordinate of the finite points of every series: x when wantX, else y.
func (c Chart) values(wantX bool) iter.Seq[float64] {
	return func(yield func(float64) bool) {
		for _, sr := range c.Series {
			for i := range sr.X {
				if !finite(sr.X[i]) || !finite(sr.Y[i]) {
					continue
				}
				v := sr.Y[i]
				if wantX {
					v = sr.X[i]
				}
				if !yield(v) {
					return
				}
			}
		}
	}
}

// axes returns the x and y axes of a valid chart, over a plot area of chartW × chartH at the
// origin.
func (c Chart) axes() (axis, axis) {
	xlo, xhi := span(c.LogX, c.values(true))
	ylo, yhi := span(c.LogY, c.values(false))
	switch {
	case c.YMin != nil && c.YMax != nil:
		ylo, yhi = *c.YMin, *c.YMax
	case c.YMin != nil:
		ylo = *c.YMin
		if yhi <= ylo {
			yhi = ylo + math.Max(1, math.Abs(ylo))
		}
	case c.YMax != nil:
		yhi = *c.YMax
		if ylo >= yhi {
			ylo = yhi - math.Max(1, math.Abs(yhi))
			if c.LogY {
				ylo = yhi / 10
			}
		}
	}
	return axis{lo: xlo, hi: xhi, log: c.LogX, from: 0, to: chartW},
		axis{lo: ylo, hi: yhi, log: c.LogY, from: chartH, to: 0}
}

func (c Chart) scene() (*scene, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	xa, ya := c.axes()
	s := newScene()
	xt, xlabels := xa.ticks(7)
	yt, ylabels := ya.ticks(6)
	yLabelW := 0.0
	for _, l := range ylabels {
		yLabelW = max(yLabelW, s.width(l, tickStyle))
	}
	lastXW := s.width(xlabels[len(xlabels)-1], tickStyle)
	yl, xl := newAxisTitle(s, c.YLabel, chartH), newAxisTitle(s, c.XLabel, chartW)
	leg := newLegend(s, c.Series)

	x0 := math.Ceil(pad + yl.depth + yLabelW + tickLen + 3)
	y0 := math.Ceil(pad + titleHeight(s, c.Title) + s.capHeight(tickStyle)/2)
	tickLabelY := y0 + chartH + tickLen + 3 + s.capHeight(tickStyle)
	width := x0 + chartW + max(lastXW/2, leg.width) + pad
	height := max(tickLabelY+s.descent(tickStyle)+xl.depth, y0+leg.height) + pad

	// Grid lines first, under the data; then the data, clipped to the plot; then axes and labels.
	xa.from, xa.to = x0, x0+chartW
	ya.from, ya.to = y0+chartH, y0
	for _, v := range xt {
		x := crisp(xa.at(v))
		s.segment(x, y0, x, y0+chartH, 1, gridColor)
	}
	for _, v := range yt {
		y := crisp(ya.at(v))
		s.segment(x0, y, x0+chartW, y, 1, gridColor)
	}
	inside := func(p point) bool {
		return p.x >= x0 && p.x <= x0+chartW && p.y >= y0 && p.y <= y0+chartH
	}
	for k, sr := range c.Series {
		col := palette[k%len(palette)]
		for _, run := range plotRuns(sr, xa, ya) {
			for _, part := range clipPolyline(run, x0, y0, x0+chartW, y0+chartH) {
				s.line(part, 1.75, col, true)
			}
			for _, p := range run {
				switch {
				case !inside(p):
				case c.Markers:
					s.circle(p.x, p.y, 3, col)
				case len(run) == 1:
					s.circle(p.x, p.y, 1.5, col) // a lone point still shows
				}
			}
		}
	}
	s.segment(x0-0.5, y0, x0-0.5, y0+chartH+1, 1, axisColor)
	s.segment(x0-1, y0+chartH+0.5, x0+chartW, y0+chartH+0.5, 1, axisColor)
	capH := s.capHeight(tickStyle)
	for i, v := range xt {
		x := crisp(xa.at(v))
		s.segment(x, y0+chartH+1, x, y0+chartH+1+tickLen, 1, axisColor)
		st := tickStyle
		st.anchor = anchorMiddle
		s.text(x, tickLabelY, xlabels[i], st)
	}
	for i, v := range yt {
		y := crisp(ya.at(v))
		s.segment(x0-1-tickLen, y, x0-1, y, 1, axisColor)
		st := tickStyle
		st.anchor = anchorEnd
		s.text(x0-1-tickLen-3, y+capH/2, ylabels[i], st)
	}
	yl.drawLeft(s, pad, y0+chartH/2)
	xl.drawBelow(s, x0+chartW/2, tickLabelY+s.descent(tickStyle))
	leg.draw(s, x0+chartW, y0, c.Markers)
	s.w, s.h = drawTitle(s, c.Title, x0+chartW/2, width), height
	return s, checkSize(describe("chart", c.Title), s.w, s.h)
}

// plotRuns maps a series to pixels, split into runs at points that are not finite, leaving out
// points within half a pixel of the previous one kept (the last point of a run is always kept).
func plotRuns(sr Series, xa, ya axis) [][]point {
	var runs [][]point
	var run []point
	last := -1
	flush := func() {
		if last >= 0 {
			p := point{xa.at(sr.X[last]), ya.at(sr.Y[last])}
			if n := len(run); n == 0 || run[n-1] != p {
				run = append(run, p)
			}
		}
		if len(run) > 0 {
			runs = append(runs, run)
		}
		run, last = nil, -1
	}
	for i := range sr.X {
		if !finite(sr.X[i]) || !finite(sr.Y[i]) {
			flush()
			continue
		}
		p := point{xa.at(sr.X[i]), ya.at(sr.Y[i])}
		if n := len(run); n == 0 || math.Hypot(p.x-run[n-1].x, p.y-run[n-1].y) >= 0.5 {
			run = append(run, p)
		}
		last = i
	}
	flush()
	return runs
}

// legend lists the named series of a chart right of the plot.
type legend struct {
	names  []string
	colors []rgb
	width  float64 // the space it takes right of the plot, gap included; 0 without names
	height float64
}

const (
	legendGap    = 18 // between the plot and the legend
	legendSample = 22 // length of the line shown for each series
	legendPitch  = 18 // between entries
)

func newLegend(s *scene, series []Series) legend {
	var l legend
	for k, sr := range series {
		if sr.Name == "" {
			continue
		}
		name := s.fonts.fit(clean(sr.Name), labelStyle.size, false, 200)
		l.names = append(l.names, name)
		l.colors = append(l.colors, palette[k%len(palette)])
		l.width = max(l.width, legendGap+legendSample+6+s.width(name, labelStyle))
	}
	l.height = float64(len(l.names)) * legendPitch
	return l
}

// draw draws the legend with its top-left corner right of (x, y).
func (l legend) draw(s *scene, x, y float64, markers bool) {
	capH := s.capHeight(labelStyle)
	for i, name := range l.names {
		cy := y + (float64(i)+0.5)*legendPitch
		x0 := x + legendGap
		s.line([]point{{x0, cy}, {x0 + legendSample, cy}}, 1.75, l.colors[i], true)
		if markers {
			s.circle(x0+legendSample/2, cy, 3, l.colors[i])
		}
		s.text(x0+legendSample+6, cy+capH/2, name, labelStyle)
	}
}
