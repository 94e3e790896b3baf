package viz

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// tickPositions returns where the SVG puts the tick labels of each axis: value → x for the labels
// centred under the x axis, value → baseline y for those right-aligned left of the y axis.
func tickPositions(t *testing.T, elems []element) (xs, ys map[float64]float64) {
	xs, ys = map[float64]float64{}, map[float64]float64{}
	for _, e := range elems {
		if e.name != "text" || e.attr["fill"] != softInk.hex() {
			continue
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(e.text, "−", "-"), 64)
		if err != nil {
			continue
		}
		switch e.attr["text-anchor"] {
		case "middle":
			xs[v] = e.num(t, "x")
		case "end":
			ys[v] = e.num(t, "y")
		}
	}
	return xs, ys
}

func TestChartLineLiesOnTheData(t *testing.T) {
	var xs []float64
	for i := range 101 {
		xs = append(xs, float64(i)/100)
	}
	c := Chart{Series: []Series{{Name: "y = x", X: xs, Y: xs}}}
	img := renderPNG(t, c)
	tx, ty := tickPositions(t, renderSVG(t, c))
	x0, ok0 := tx[0]
	x1, ok1 := tx[1]
	if !ok0 || !ok1 {
		t.Fatalf("no x tick labels 0 and 1: %v", tx)
	}
	// A y label's baseline is half a cap height below its tick.
	capH := newFonts().metrics(false).capHeight * tickStyle.size
	y0, y1 := ty[0]-capH/2, ty[1]-capH/2
	if !(y1 < y0) {
		t.Fatalf("y tick 1 at %g is not above y tick 0 at %g", y1, y0)
	}
	blue := palette[0]
	for _, f := range []float64{0.1, 0.25, 0.5, 0.75, 0.9} {
		px, py := x0+f*(x1-x0), y0+f*(y1-y0)
		if got := pixel(img, px, py); !near(got, blue, 40) {
			t.Errorf("at data (%g, %g), pixel (%.1f, %.1f) is %s, want the line's %s", f, f, px, py, got.hex(), blue.hex())
		}
		// Off the diagonal, 10 pixels to the side, there is no line.
		if got := pixel(img, px+10, py+10); near(got, blue, 60) {
			t.Errorf("pixel (%.1f, %.1f), off the line y = x, is the line's colour %s", px+10, py+10, got.hex())
		}
	}
}

func TestChartClipsToFixedRange(t *testing.T) {
	lo, hi := 0.0, 0.5
	c := Chart{Series: []Series{{X: []float64{0, 1}, Y: []float64{-0.5, 1}}}, YMin: &lo, YMax: &hi}
	elems := renderSVG(t, c)
	_, ty := tickPositions(t, elems)
	capH := newFonts().metrics(false).capHeight * tickStyle.size
	top, bottom := ty[hi]-capH/2, ty[lo]-capH/2
	if top >= bottom {
		t.Fatalf("ticks at YMin = %g (%g) and YMax = %g (%g): want both, YMax on top: %v", lo, bottom, hi, top, ty)
	}
	lines := 0
	for _, e := range elems {
		if e.name != "polyline" || e.attr["stroke"] != palette[0].hex() {
			continue
		}
		lines++
		for _, p := range strings.Fields(e.attr["points"]) {
			_, ys, _ := strings.Cut(p, ",")
			y, _ := strconv.ParseFloat(ys, 64)
			if y < top-1 || y > bottom+1 {
				t.Errorf("line point %s lies outside the y range %g…%g", p, top, bottom)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d polylines for the series, want 1", lines)
	}
}

func TestChartBreaksAtNaN(t *testing.T) {
	nan := math.NaN()
	c := Chart{Series: []Series{{X: []float64{0, 1, 2, 3, 4, 5}, Y: []float64{1, 2, nan, 3, 4, math.Inf(1)}}}}
	lines := 0
	for _, e := range renderSVG(t, c) {
		if e.name == "polyline" && e.attr["stroke"] == palette[0].hex() {
			lines++
			if n := len(strings.Fields(e.attr["points"])); n != 2 {
				t.Errorf("a run of %d points, want 2", n)
			}
		}
	}
	if lines != 2 {
		t.Errorf("%d runs, want 2: (0,1)–(1,2) and (3,3)–(4,4)", lines)
	}
}

func TestLegendAndMarkers(t *testing.T) {
	c := Chart{
		Series: []Series{
			{Name: "a <1>", X: []float64{1, 2, 3}, Y: []float64{1, 4, 9}},
			{X: []float64{1, 2, 3}, Y: []float64{2, 3, 4}},
			{Name: "c", X: []float64{1, 2, 3}, Y: []float64{3, 2, 1}},
		},
		Markers: true, LogY: true,
	}
	texts, circles := map[string]bool{}, map[string]int{}
	for _, e := range renderSVG(t, c) {
		switch e.name {
		case "text":
			texts[e.text] = true
		case "circle":
			circles[e.attr["fill"]]++
		}
	}
	if !texts["a <1>"] || !texts["c"] {
		t.Errorf("legend lacks the names of the named series: %v", texts)
	}
	// Three markers per series, and one more in the legend for each named series.
	for k, want := range []int{4, 3, 4} {
		if got := circles[palette[k].hex()]; got != want {
			t.Errorf("series %d has %d discs, want %d", k, got, want)
		}
	}
	if !texts["1"] || !texts["2"] || !texts["5"] {
		t.Errorf("log y axis over 1…9 should have ticks 1, 2, 5: %v", texts)
	}
}

func TestPlotRunsThinsDensePoints(t *testing.T) {
	const n = 100_000
	x, y := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i], y[i] = float64(i), math.Sin(float64(i)/20000) // under one period: a path of about 1000 pixels
	}
	xa := axis{lo: 0, hi: n - 1, from: 0, to: chartW}
	ya := axis{lo: -1, hi: 1, from: chartH, to: 0}
	runs := plotRuns(Series{X: x, Y: y}, xa, ya)
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	run := runs[0]
	if len(run) > 3*chartW {
		t.Errorf("%d points kept for a plot %d pixels wide", len(run), chartW)
	}
	if last := run[len(run)-1]; last.x != chartW {
		t.Errorf("the last point is at x = %g, want %d: it must be kept", last.x, chartW)
	}
	for i := 1; i < len(run); i++ {
		if d := math.Hypot(run[i].x-run[i-1].x, run[i].y-run[i-1].y); d > 2 {
			t.Fatalf("kept points %d and %d are %g pixels apart: the curve lost detail", i-1, i, d)
		}
	}
}
