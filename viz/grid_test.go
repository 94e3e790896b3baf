package viz

import (
	"math"
	"testing"
)

func TestGridSharesOneScale(t *testing.T) {
	g := Grid{
		Title: "grid", Rows: 1, Cols: 2,
		Cells: []Heatmap{
			{Title: "A", Rows: 2, Cols: 2, Values: []float64{0, 0.25, 0.5, 0.5}},
			{Title: "B", Rows: 2, Cols: 2, Values: []float64{0.5, 0.75, 1, math.NaN()}},
		},
		ColTitles: []string{"head 0", "head 1"},
	}
	img := renderPNG(t, g)
	elems := renderSVG(t, g)
	c := panelCell(1, 2, 2)
	rects := cells(t, elems, c, c)
	if len(rects) != 8 {
		t.Fatalf("%d cell rects, want 8", len(rects))
	}
	cs := colorScale{lo: 0, hi: 1} // the range of both panels together
	for k, r := range rects {
		if x, y := r.num(t, "x")*PNGScale, r.num(t, "y")*PNGScale; x != math.Trunc(x) || y != math.Trunc(y) {
			t.Errorf("cell %d at (%g, %g) PNG pixels: cells off the pixel grid show seams", k, x, y)
		}
		v := g.Cells[k/4].Values[k%4]
		got := pixel(img, r.num(t, "x")+c/2, r.num(t, "y")+c/2)
		if want := cs.color(v); got != want || hexColor(t, r.attr["fill"]) != want {
			t.Errorf("cell %d (%g): PNG %s, SVG %s, want %s", k, v, got.hex(), r.attr["fill"], want.hex())
		}
	}
	texts := map[string]bool{}
	for _, e := range elems {
		texts[e.text] = texts[e.text] || e.name == "text"
	}
	for _, want := range []string{"grid", "A", "B", "head 0", "head 1", "0.0", "1.0"} {
		if !texts[want] {
			t.Errorf("no text %q in the grid", want)
		}
	}
}
