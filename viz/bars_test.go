package viz

import (
	"math"
	"testing"
)

func TestBars(t *testing.T) {
	b := Bars{Labels: []string{"L0 H0", "L0 H1", "L0 H2"}, Values: []float64{0.5, -0.25, 1}}
	elems := renderSVG(t, b)
	img := renderPNG(t, b)
	_, ty := tickPositions(t, elems)
	capH := newFonts().metrics(false).capHeight * tickStyle.size
	zero, ok := ty[0]
	if !ok {
		t.Fatalf("no tick at 0: %v", ty)
	}
	zero -= capH / 2
	var bars []element
	for _, e := range elems {
		if e.name == "rect" && e.attr["fill"] == palette[0].hex() {
			bars = append(bars, e)
		}
	}
	if len(bars) != 3 {
		t.Fatalf("%d bars, want 3", len(bars))
	}
	// Heights are proportional to |value|; positive bars rise from 0, negative ones hang below it.
	unit := bars[2].num(t, "height") // value 1
	for k, v := range b.Values {
		e := bars[k]
		y, h := e.num(t, "y"), e.num(t, "height")
		if math.Abs(h-math.Abs(v)*unit) > 0.02 {
			t.Errorf("bar %d (%g) is %g high, want %g", k, v, h, math.Abs(v)*unit)
		}
		edge := y + h // the bottom of a positive bar
		if v < 0 {
			edge = y
		}
		if math.Abs(edge-zero) > 1 {
			t.Errorf("bar %d (%g) starts at y = %g, want the zero line at %g", k, v, edge, zero)
		}
		cx, cy := e.num(t, "x")+e.num(t, "width")/2, y+h/2
		if got := pixel(img, cx, cy); got != palette[0] {
			t.Errorf("PNG pixel in bar %d is %s, want %s", k, got.hex(), palette[0].hex())
		}
	}
}
