package viz

import (
	"math"
	"strconv"
	"strings"
)

// maxTicks bounds the ticks of any axis, whatever its range.
const maxTicks = 50

// frac returns where v lies between lo and hi (0 at lo, 1 at hi), halving first so that no range of
// finite numbers overflows.
func frac(v, lo, hi float64) float64 {
	return (v/2 - lo/2) / (hi/2 - lo/2)
}

// niceStep returns a step of 1, 2, 2.5 or 5 × 10^k that cuts lo…hi into at most about n pieces,
// or 0 when there is no usable step (an empty or denormal range).
func niceStep(lo, hi float64, n int) float64 {
	raw := (hi/2 - lo/2) / float64(n) * 2
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 0
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step := m * mag; step >= raw*(1-1e-9) && step > 0 && !math.IsInf(step, 0) {
			return step
		}
	}
	return 0
}

// linearTicks returns the multiples of a nice step within lo…hi, about n of them, and the number
// of decimals that writes the step exactly. A range without a usable step gets lo alone.
func linearTicks(lo, hi float64, n int) ([]float64, int) {
	step := niceStep(lo, hi, n)
	if step == 0 {
		return []float64{lo}, 0
	}
	first, last := math.Ceil(lo/step-1e-9), math.Floor(hi/step+1e-9)
	if !(last-first < maxTicks) || last < first || first+1 == first { // too many, none, or steps lost in rounding
		return []float64{lo}, 0
	}
	ticks := make([]float64, 0, int(last-first)+1)
	for k := range int(last-first) + 1 {
		v := (first + float64(k)) * step
		if v == 0 {
			v = 0 // not -0
		}
		ticks = append(ticks, v)
	}
	return ticks, decimals(step)
}

// decimals returns the fewest decimals (at most 12) that write step exactly.
func decimals(step float64) int {
	for d := 0; d < 12; d++ {
		x := step * math.Pow(10, float64(d))
		if math.Abs(x-math.Round(x)) < 1e-6*x {
			return d
		}
	}
	return 12
}

// logTicks returns tick values for a logarithmic axis over lo…hi (0 < lo < hi): the powers of 10
// inside, thinned to at most about n, with 2 and 5 times them when the range spans three decades
// or less; if that leaves fewer than two ticks, linear ticks instead.
func logTicks(lo, hi float64, n int) []float64 {
	a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	every := math.Max(1, math.Ceil((b-a)/float64(n)))
	mults := []float64{1}
	if b-a <= 3 {
		mults = []float64{1, 2, 5}
	}
	var ticks []float64
	for e := a; e <= b && len(ticks) < maxTicks; e++ {
		if math.Mod(e, every) != 0 { // every k-th decade, 10⁰ among them
			continue
		}
		for _, m := range mults {
			v := m * math.Pow(10, e)
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				ticks = append(ticks, v)
			}
		}
	}
	if len(ticks) < 2 {
		ticks, _ = linearTicks(lo, hi, n)
	}
	return ticks
}

// formatNumber writes v with the given decimals, or in short scientific notation (2.5e6, 1e−5)
// when it is 10⁶ or more, or under 10⁻⁴ with more than 4 decimals asked for; negative numbers get
// a true minus sign, and none is written for a value that rounds to 0.
func formatNumber(v float64, decimals int) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "∞"
	case math.IsInf(v, -1):
		return "−∞"
	case a >= 1e6 || a != 0 && a < 1e-4 && decimals > 4:
		return sci(v)
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Trim(s, "-0.") == "" {
		s = strings.TrimPrefix(s, "-") // no −0.00
	}
	return strings.ReplaceAll(s, "-", "−")
}

// sci writes v with 3 significant digits and a short exponent: 2.5e6, −1e−5.
func sci(v float64) string {
	mant, exp, _ := strings.Cut(strconv.FormatFloat(v, 'g', 3, 64), "e")
	e, _ := strconv.Atoi(exp) // as strconv wrote it: "+06"
	return strings.ReplaceAll(mant+"e"+strconv.Itoa(e), "-", "−")
}

// formatLogTick writes a tick of a logarithmic axis: plainly from 0.0001 to 100000, else as 1e−5.
func formatLogTick(v float64) string {
	if v >= 1e-4 && v < 1e6 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return sci(v)
}

// An axis maps data values to pixels along one side of a plot.
type axis struct {
	lo, hi   float64 // the data range shown (positive on a log axis)
	log      bool
	from, to float64 // the pixels of lo and hi
}

func (a axis) at(v float64) float64 {
	if a.log {
		v, a.lo, a.hi = math.Log10(v), math.Log10(a.lo), math.Log10(a.hi)
	}
	return a.from + frac(v, a.lo, a.hi)*(a.to-a.from)
}

// ticks returns the tick values of the axis and their labels.
func (a axis) ticks(n int) ([]float64, []string) {
	var ticks []float64
	var labels []string
	if a.log {
		ticks = logTicks(a.lo, a.hi, n)
		for _, v := range ticks {
			labels = append(labels, formatLogTick(v))
		}
		return ticks, labels
	}
	ticks, dec := linearTicks(a.lo, a.hi, n)
	for _, v := range ticks {
		labels = append(labels, formatNumber(v, dec))
	}
	return ticks, labels
}

// crisp moves a one-pixel line's centre to the middle of the pixel v falls in, so that it is
// drawn sharp.
func crisp(v float64) float64 {
	return math.Floor(v) + 0.5
}

// colorBar is the legend of a colour scale: a vertical gradient, lo at the bottom, with ticks and
// their labels on its right and an optional title, rotated, beyond them.
type colorBar struct {
	cs     colorScale
	ticks  []float64
	labels []string
	labelW float64 // widest tick label
	title  string
}

const (
	barGap   = 16 // between the plot and the bar
	barWidth = 12
	tickLen  = 4
)

// newColorBar lays out the legend of cs for a bar h units high.
func newColorBar(s *scene, cs colorScale, h float64, title string) colorBar {
	ticks, dec := linearTicks(cs.lo, cs.hi, max(2, min(8, int(h/40))))
	cb := colorBar{cs: cs, ticks: ticks, title: s.fonts.fit(clean(title), axisStyle.size, false, h)}
	for _, v := range ticks {
		l := formatNumber(v, dec)
		cb.labels = append(cb.labels, l)
		cb.labelW = max(cb.labelW, s.width(l, tickStyle))
	}
	return cb
}

// width returns the horizontal space the bar takes, its gap from the plot included.
func (cb colorBar) width(s *scene) float64 {
	w := barGap + barWidth + tickLen + 3 + cb.labelW
	if cb.title != "" {
		w += 10 + s.fonts.metrics(false).ascent*axisStyle.size
	}
	return w
}

// draw draws the bar with its top-left corner of the gradient at x + barGap, y.
func (cb colorBar) draw(s *scene, x, y, h float64) {
	x += barGap
	s.gradient(x, y, barWidth, h, cb.cs.stops(65))
	s.frame(x, y, barWidth, h, axisColor)
	capH := s.capHeight(tickStyle)
	for i, v := range cb.ticks {
		ty := y + h - frac(v, cb.cs.lo, cb.cs.hi)*h
		ty = crisp(ty)
		s.segment(x+barWidth, ty, x+barWidth+tickLen, ty, 1, axisColor)
		s.text(x+barWidth+tickLen+3, ty+capH/2, cb.labels[i], tickStyle)
	}
	if cb.title != "" {
		// Rotated to read upwards, the text hangs left of its baseline by its ascent.
		tx := x + barWidth + tickLen + 3 + cb.labelW + 10 + s.fonts.metrics(false).ascent*axisStyle.size
		s.text(tx, y+h/2, cb.title, upright(axisStyle))
	}
}
