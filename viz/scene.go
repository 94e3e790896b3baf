package viz

// A scene is a laid-out picture: shapes in drawing order, in SVG user units (CSS pixels) with y
// down, on a white w × h canvas. Each picture type builds one, and the PNG and SVG back ends draw
// it, so both show the same thing.
type scene struct {
	w, h   float64
	shapes []shape
	fonts  *fonts
}

// shape is one drawing primitive, with a method per back end (png.go, svg.go).
type shape interface {
	drawPNG(r *pngRenderer)
	writeSVG(w *svgWriter)
}

type point struct {
	x, y float64
}

// rectShape is a filled axis-aligned rectangle.
type rectShape struct {
	x, y, w, h float64
	fill       rgb
}

// gradientShape is a rectangle filled with a vertical gradient through equally spaced stops, the
// first at the bottom edge and the last at the top edge (a colour bar).
type gradientShape struct {
	x, y, w, h float64
	stops      []rgb
}

// lineShape is a polyline stroked width units wide; round gives it round joins and caps, otherwise
// it has butt caps (only two-point lines are drawn without round joins).
type lineShape struct {
	pts   []point
	width float64
	color rgb
	round bool
}

// circleShape is a filled disc.
type circleShape struct {
	x, y, r float64
	fill    rgb
}

// textShape is one line of text whose anchor point (x, y) lies on the baseline.
type textShape struct {
	x, y  float64
	s     string
	style textStyle
}

// textStyle says how a line of text looks: its size in units per em, weight, colour, which point
// of the line the anchor is (start, middle or end), and its rotation in degrees, clockwise as in
// SVG's rotate (−90 reads from bottom to top).
type textStyle struct {
	size   float64
	bold   bool
	color  rgb
	anchor anchor
	angle  float64
}

type anchor int

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

func newScene() *scene {
	return &scene{fonts: newFonts()}
}

func (s *scene) rect(x, y, w, h float64, fill rgb) {
	s.shapes = append(s.shapes, rectShape{x, y, w, h, fill})
}

// frame draws the outline of the rectangle x, y, w, h as four one-pixel bars just outside it
// (thinner bars vanish in a browser's crisp-edged rendering at 1×).
func (s *scene) frame(x, y, w, h float64, c rgb) {
	s.rect(x-1, y-1, w+2, 1, c)
	s.rect(x-1, y+h, w+2, 1, c)
	s.rect(x-1, y, 1, h, c)
	s.rect(x+w, y, 1, h, c)
}

func (s *scene) line(pts []point, width float64, c rgb, round bool) {
	if len(pts) < 2 {
		return
	}
	s.shapes = append(s.shapes, lineShape{pts, width, c, round})
}

func (s *scene) segment(x0, y0, x1, y1, width float64, c rgb) {
	s.line([]point{{x0, y0}, {x1, y1}}, width, c, false)
}

func (s *scene) circle(x, y, r float64, fill rgb) {
	s.shapes = append(s.shapes, circleShape{x, y, r, fill})
}

func (s *scene) gradient(x, y, w, h float64, stops []rgb) {
	s.shapes = append(s.shapes, gradientShape{x, y, w, h, stops})
}

func (s *scene) text(x, y float64, str string, st textStyle) {
	if str == "" {
		return
	}
	s.shapes = append(s.shapes, textShape{x, y, str, st})
}

// width returns the advance width of str in style st.
func (s *scene) width(str string, st textStyle) float64 {
	return s.fonts.width(str, st.size, st.bold)
}

// capHeight returns the height of capitals in style st: the baseline of text centred on y is at
// y + capHeight/2.
func (s *scene) capHeight(st textStyle) float64 {
	return s.fonts.metrics(st.bold).capHeight * st.size
}

// descent returns how far below the baseline the text of style st reaches.
func (s *scene) descent(st textStyle) float64 {
	return s.fonts.metrics(st.bold).descent * st.size
}

// clipSegment clips the segment a–b to the rectangle [x0, x1] × [y0, y1] (Liang–Barsky) and says
// whether any of it is left.
func clipSegment(a, b point, x0, y0, x1, y1 float64) (point, point, bool) {
	t0, t1 := 0.0, 1.0
	dx, dy := b.x-a.x, b.y-a.y
	for _, e := range [4][2]float64{{-dx, a.x - x0}, {dx, x1 - a.x}, {-dy, a.y - y0}, {dy, y1 - a.y}} {
		p, q := e[0], e[1]
		switch {
		case p == 0:
			if q < 0 {
				return a, b, false
			}
		case p < 0:
			t0 = max(t0, q/p)
		default:
			t1 = min(t1, q/p)
		}
		if t0 > t1 {
			return a, b, false
		}
	}
	return point{a.x + t0*dx, a.y + t0*dy}, point{a.x + t1*dx, a.y + t1*dy}, true
}

// clipPolyline clips a polyline to the rectangle [x0, x1] × [y0, y1], splitting it where it leaves.
func clipPolyline(pts []point, x0, y0, x1, y1 float64) [][]point {
	var out [][]point
	var cur []point
	for i := 1; i < len(pts); i++ {
		a, b, ok := clipSegment(pts[i-1], pts[i], x0, y0, x1, y1)
		if !ok {
			continue
		}
		if len(cur) > 0 && cur[len(cur)-1] == a {
			cur = append(cur, b)
			continue
		}
		if len(cur) > 1 {
			out = append(out, cur)
		}
		cur = []point{a, b}
	}
	if len(cur) > 1 {
		out = append(out, cur)
	}
	return out
}
