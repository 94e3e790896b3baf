package viz

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// element is an SVG element as the tests read it: its name, attributes and text.
type element struct {
	name  string
	attr  map[string]string
	text  string
	depth int
}

func (e element) num(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attr[name], 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", e.name, name, e.attr[name], err)
	}
	return v
}

// parseSVG parses an SVG document with encoding/xml, failing the test if it is not well-formed
// XML, and returns its elements in document order.
func parseSVG(t *testing.T, doc []byte) []element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var out []element
	var open []int // indexes into out of the elements not yet closed
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := element{name: tok.Name.Local, attr: map[string]string{}, depth: len(open)}
			for _, a := range tok.Attr {
				e.attr[a.Name.Local] = a.Value
			}
			out = append(out, e)
			open = append(open, len(out)-1)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				out[open[len(open)-1]].text += string(tok)
			}
		}
	}
	if len(out) == 0 || out[0].name != "svg" {
		t.Fatalf("SVG has no <svg> root element")
	}
	return out
}

func renderPNG(t *testing.T, p Picture) *image.RGBA {
	t.Helper()
	var b bytes.Buffer
	if err := p.PNG(&b); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("decoding the PNG: %v", err)
	}
	rgba, ok := img.(*image.RGBA) // how image/png decodes 8-bit RGB
	if !ok {
		t.Fatalf("the PNG decodes to a %T, want 8-bit RGB", img)
	}
	return rgba
}

func renderSVG(t *testing.T, p Picture) []element {
	t.Helper()
	var b bytes.Buffer
	if err := p.SVG(&b); err != nil {
		t.Fatal(err)
	}
	return parseSVG(t, b.Bytes())
}

// pixel returns the PNG's colour at the point (x, y) of the SVG's coordinates.
func pixel(img *image.RGBA, x, y float64) rgb {
	c := img.RGBAAt(int(x*PNGScale), int(y*PNGScale))
	return rgb{c.R, c.G, c.B}
}

func hexColor(t *testing.T, s string) rgb {
	t.Helper()
	var c rgb
	if _, err := fmt.Sscanf(s, "#%02x%02x%02x", &c.r, &c.g, &c.b); err != nil {
		t.Fatalf("colour %q: %v", s, err)
	}
	return c
}

// near reports whether two colours differ by at most tol in every channel.
func near(a, b rgb, tol int) bool {
	d := func(p, q uint8) int { return max(int(p)-int(q), int(q)-int(p)) }
	return d(a.r, b.r) <= tol && d(a.g, b.g) <= tol && d(a.b, b.b) <= tol
}

// cells returns the SVG rects of size w × h: the cells of a heatmap whose cells are that size.
func cells(t *testing.T, elems []element, w, h float64) []element {
	var out []element
	for _, e := range elems {
		if e.name == "rect" && e.attr["width"] == num(w) && e.attr["height"] == num(h) {
			out = append(out, e)
		}
	}
	return out
}

// matplotlib's viridis at 0, 0.5 and 1, and the masked grey.
var (
	viridis0   = rgb{0x44, 0x01, 0x54}
	viridisMid = rgb{0x21, 0x91, 0x8c}
	viridis1   = rgb{0xfd, 0xe7, 0x25}
)

func TestHeatmapColorsAtCellCentres(t *testing.T) {
	h := Heatmap{Rows: 2, Cols: 2, Values: []float64{0, 1, 0.5, math.NaN()}}
	img := renderPNG(t, h)
	cw, ch := cellSize(2, 2)
	rects := cells(t, renderSVG(t, h), cw, ch)
	if len(rects) != 4 {
		t.Fatalf("SVG has %d cell rects, want 4", len(rects))
	}
	want := []rgb{viridis0, viridis1, viridisMid, masked}
	if m := masked; m.r != m.g || m.g != m.b || m.r < 0xc0 || m.r > 0xe8 {
		t.Errorf("masked cells are %s, want a neutral light grey", m.hex())
	}
	x0, y0 := rects[0].num(t, "x"), rects[0].num(t, "y")
	for k, r := range rects {
		x, y := r.num(t, "x"), r.num(t, "y")
		if wx, wy := x0+float64(k%2)*cw, y0+float64(k/2)*ch; x != wx || y != wy {
			t.Errorf("cell %d at (%g, %g), want (%g, %g): row-major cells", k, x, y, wx, wy)
		}
		got := pixel(img, x+cw/2, y+ch/2)
		if !near(got, want[k], 1) {
			t.Errorf("cell %d: PNG pixel %s at its centre, want %s", k, got.hex(), want[k].hex())
		}
		if fill := hexColor(t, r.attr["fill"]); fill != got {
			t.Errorf("cell %d: SVG fill %s, PNG pixel %s", k, fill.hex(), got.hex())
		}
	}
}

func TestSVGCellsMatchPNG(t *testing.T) {
	const rows, cols = 5, 7
	vals := make([]float64, rows*cols)
	for i := range vals {
		vals[i] = math.Sin(float64(i)) * 3
	}
	vals[3], vals[17] = math.NaN(), math.Inf(1)
	h := Heatmap{Title: "signed", Rows: rows, Cols: cols, Values: vals, Scale: Diverging{}, Annotate: true}
	img := renderPNG(t, h)
	cw, ch := cellSize(rows, cols)
	rects := cells(t, renderSVG(t, h), cw, ch)
	if len(rects) != rows*cols {
		t.Fatalf("SVG has %d cell rects, want %d", len(rects), rows*cols)
	}
	limit := 0.0 // Diverging{} takes the largest |finite value|
	for _, v := range vals {
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			limit = max(limit, math.Abs(v))
		}
	}
	cs := colorScale{lo: -limit, hi: limit, diverging: true}
	for k, r := range rects {
		if x, y := r.num(t, "x")*PNGScale, r.num(t, "y")*PNGScale; x != math.Trunc(x) || y != math.Trunc(y) {
			t.Errorf("cell %d at (%g, %g) PNG pixels: cells off the pixel grid show seams", k, x, y)
		}
		// The centre has the value's text on it; a quarter of the way in is the cell's colour.
		x, y := r.num(t, "x")+cw/4, r.num(t, "y")+ch/4
		got, fill := pixel(img, x, y), hexColor(t, r.attr["fill"])
		if got != fill {
			t.Errorf("cell %d: PNG pixel %s, SVG fill %s", k, got.hex(), fill.hex())
		}
		if want := cs.color(vals[k]); fill != want {
			t.Errorf("cell %d (%g): fill %s, want %s", k, vals[k], fill.hex(), want.hex())
		}
	}
}

func TestDivergingCentreIsWhite(t *testing.T) {
	h := Heatmap{Rows: 1, Cols: 3, Values: []float64{-2, 0, 2}, Scale: Diverging{Limit: 2}}
	img := renderPNG(t, h)
	cw, ch := cellSize(1, 3)
	rects := cells(t, renderSVG(t, h), cw, ch)
	if len(rects) != 3 {
		t.Fatalf("SVG has %d cell rects, want 3", len(rects))
	}
	want := []rgb{divergingKnots[0], white, divergingKnots[len(divergingKnots)-1]}
	for k, r := range rects {
		if got := pixel(img, r.num(t, "x")+cw/2, r.num(t, "y")+ch/2); got != want[k] {
			t.Errorf("cell %d: %s, want %s", k, got.hex(), want[k].hex())
		}
	}
	if b, r := want[0], want[2]; !(b.b > b.r && r.r > r.b) {
		t.Errorf("negative end %s should be blue and positive end %s red", b.hex(), r.hex())
	}
}

func TestColorBarRunsMinToMax(t *testing.T) {
	h := Heatmap{Rows: 3, Cols: 3, Values: []float64{-1, 0, 1, 2, 3, 4, 5, 6, 7}}
	img := renderPNG(t, h)
	var bar element
	var ticks []element
	for _, e := range renderSVG(t, h) {
		switch {
		case e.name == "rect" && strings.HasPrefix(e.attr["fill"], "url(#"):
			bar = e
		case e.name == "text":
			ticks = append(ticks, e)
		}
	}
	if bar.name == "" {
		t.Fatal("no gradient rect in the SVG")
	}
	x, y, w, ht := bar.num(t, "x"), bar.num(t, "y"), bar.num(t, "width"), bar.num(t, "height")
	bottom, top := pixel(img, x+w/2, y+ht-0.25), pixel(img, x+w/2, y+0.25)
	if !near(bottom, viridis0, 3) || !near(top, viridis1, 3) {
		t.Errorf("bar runs from %s (bottom) to %s (top), want %s to %s", bottom.hex(), top.hex(), viridis0.hex(), viridis1.hex())
	}
	// viridis brightens from start to end: so must the bar, from bottom to top.
	prev := -1.0
	for py := y + ht - 0.25; py > y; py -= 2 {
		l := pixel(img, x+w/2, py).luminance()
		if l < prev-1e-3 {
			t.Fatalf("bar luminance falls from %g to %g at y = %g going up", prev, l, py)
		}
		prev = l
	}
	// Tick labels −1 … 7 (steps of 2 or 1) rise with their value.
	lastY, seen := math.Inf(1), 0
	for _, e := range ticks {
		v, err := strconv.ParseFloat(strings.ReplaceAll(e.text, "−", "-"), 64)
		if err != nil || e.num(t, "x") < x+w {
			continue
		}
		seen++
		if ty := e.num(t, "y"); ty >= lastY {
			t.Errorf("tick %q at y = %g is not above the previous at %g", e.text, ty, lastY)
		} else {
			lastY = ty
		}
		if v < -1 || v > 7 {
			t.Errorf("tick %g outside the data range −1…7", v)
		}
	}
	if seen < 4 {
		t.Errorf("%d tick labels on the bar, want at least 4", seen)
	}
}

func TestAnnotationsContrast(t *testing.T) {
	h := Heatmap{Rows: 2, Cols: 2, Values: []float64{0, 1, 0.5, math.NaN()}, Scale: Sequential{Min: 0, Max: 1}, Annotate: true}
	got := map[string]string{}
	for _, e := range renderSVG(t, h) {
		if e.name == "text" {
			got[e.text] = e.attr["fill"]
		}
	}
	// White on viridis's dark purple, near-black on its yellow and on its teal middle (#21918c has
	// contrast 3.8 with white and 5.5 with black).
	for text, fill := range map[string]rgb{"0.00": white, "1.00": ink, "0.50": ink} {
		if got[text] != fill.hex() {
			t.Errorf("annotation %q has fill %q, want %s", text, got[text], fill.hex())
		}
	}
	if _, ok := got["NaN"]; ok {
		t.Error("a masked cell is annotated")
	}
}

func TestLabelsEscapedAndCleaned(t *testing.T) {
	h := Heatmap{
		Title: `<title & "quotes">`, Rows: 2, Cols: 2, Values: []float64{1, 2, 3, 4},
		RowLabels: []string{"<a&b>", "new\nline"}, ColLabels: []string{"\xff\xfe", "]]>"},
		XLabel: "key <k>", YLabel: "query & q",
	}
	var doc bytes.Buffer
	if err := h.SVG(&doc); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(doc.String(), "<a&b>") {
		t.Error("the label <a&b> is written unescaped")
	}
	texts := map[string]bool{}
	for _, e := range parseSVG(t, doc.Bytes()) {
		if e.name == "text" {
			texts[e.text] = true
		}
	}
	for _, want := range []string{"<a&b>", `new\nline`, "\uFFFD\uFFFD", "]]>", `<title & "quotes">`, "key <k>", "query & q"} {
		if !texts[want] {
			t.Errorf("no text %q in the SVG; texts: %v", want, texts)
		}
	}
}

func TestLongLabelsAreCut(t *testing.T) {
	long := strings.Repeat("abcdefghij", 100_000) // a megabyte
	h := Heatmap{Title: long, Rows: 1, Cols: 2, Values: []float64{1, 2}, RowLabels: []string{long}, ColLabels: []string{long, "b"}, XLabel: long}
	var doc bytes.Buffer
	if err := h.SVG(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Len() > 20_000 {
		t.Errorf("SVG is %d bytes: long labels were not cut", doc.Len())
	}
	for _, e := range parseSVG(t, doc.Bytes()) {
		if e.name == "text" && strings.HasPrefix(e.text, "abc") && !strings.HasSuffix(e.text, "…") {
			t.Errorf("label %q is not cut with an ellipsis", e.text)
		}
	}
	if w := parseSVG(t, doc.Bytes())[0].num(t, "width"); w > maxTitle {
		t.Errorf("picture is %g wide, want at most %d", w, maxTitle)
	}
}

func TestBigHeatmap(t *testing.T) {
	const n = 128
	vals := make([]float64, n*n)
	for i := range vals {
		vals[i] = float64(i%n) / n
	}
	img := renderPNG(t, Heatmap{Rows: n, Cols: n, Values: vals})
	cw, ch := cellSize(n, n)
	if cw != ch || cw*n > plotTarget || cw*n < plotTarget/2 {
		t.Errorf("cells of a %d×%d heatmap are %g×%g: want square cells filling about %d pixels", n, n, cw, ch, plotTarget)
	}
	if b := img.Bounds(); b.Dx() > 2*PNGScale*plotTarget || b.Dy() > 2*PNGScale*plotTarget {
		t.Errorf("PNG of a %d×%d heatmap is %v", n, n, b)
	}
}

func TestCellSize(t *testing.T) {
	for _, c := range []struct {
		rows, cols int
		cw, ch     float64
	}{
		{2, 2, maxCell, maxCell},
		{12, 12, 40, 40},
		{128, 128, 3, 3},
		{512, 512, 1, 1},
		{1, 512, 1, maxCell}, // one query over many keys: tall cells
		{200, 1, maxCell, 2},
	} {
		if cw, ch := cellSize(c.rows, c.cols); cw != c.cw || ch != c.ch {
			t.Errorf("cellSize(%d, %d) = %g, %g, want %g, %g", c.rows, c.cols, cw, ch, c.cw, c.ch)
		}
	}
}

// BenchmarkHeatmap128 draws the attention of one head over 128 tokens, with token labels.
func BenchmarkHeatmap128(b *testing.B) {
	const n = 128
	h := Heatmap{Title: "128 tokens", Rows: n, Cols: n, Values: make([]float64, n*n), XLabel: "key", YLabel: "query"}
	for i := range h.Values {
		h.Values[i] = math.Sin(float64(i))
	}
	for i := range n {
		h.RowLabels = append(h.RowLabels, "tok"+strconv.Itoa(i))
	}
	h.ColLabels = h.RowLabels
	for _, format := range []string{"PNG", "SVG"} {
		b.Run(format, func(b *testing.B) {
			for b.Loop() {
				var err error
				if format == "PNG" {
					err = h.PNG(io.Discard)
				} else {
					err = h.SVG(io.Discard)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
