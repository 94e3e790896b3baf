package viz

import (
	"image"
	"image/draw"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/font/sfnt"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// PNGScale is the number of PNG pixels per SVG unit: PNGs are drawn at twice the SVG's size, sharp
// enough for print (192 dpi at 96 units per inch) and for high-density screens.
const PNGScale = 2

// pngRenderer draws shapes on an opaque RGBA image, anti-aliased.
type pngRenderer struct {
	img   *image.RGBA
	z     vector.Rasterizer
	fonts *fonts
}

// writePNG draws s and encodes it as an 8-bit RGB PNG.
func (s *scene) writePNG(w io.Writer) error {
	width, height := int(math.Ceil(s.w*PNGScale)), int(math.Ceil(s.h*PNGScale))
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(white.rgba()), image.Point{}, draw.Src)
	r := &pngRenderer{img: img, fonts: s.fonts}
	for _, sh := range s.shapes {
		sh.drawPNG(r)
	}
	return (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(w, img)
}

// fill rasterizes the path that build adds, in device pixels, and paints it in colour c. The path
// must lie within box (device pixels); build gets the offset to subtract from its coordinates.
// Overlapping sub-paths of the same orientation are painted once.
func (r *pngRenderer) fill(box image.Rectangle, c rgb, build func(z *vector.Rasterizer, ox, oy float64)) {
	box = box.Intersect(r.img.Bounds())
	if box.Empty() {
		return
	}
	r.z.Reset(box.Dx(), box.Dy())
	build(&r.z, float64(box.Min.X), float64(box.Min.Y))
	r.z.Draw(r.img, box, image.NewUniform(c.rgba()), image.Point{})
}

// deviceBox returns the device-pixel rectangle that covers the unit-space box [x0, x1] × [y0, y1].
func deviceBox(x0, y0, x1, y1 float64) image.Rectangle {
	return image.Rect(
		int(math.Floor(x0*PNGScale)), int(math.Floor(y0*PNGScale)),
		int(math.Ceil(x1*PNGScale)), int(math.Ceil(y1*PNGScale)))
}

// polygon adds a closed polygon (device pixels, less the offset) with positive orientation, so
// that polygons added to one path paint their union.
func polygon(z *vector.Rasterizer, pts []point, ox, oy float64) {
	area := 0.0
	for i, p := range pts {
		q := pts[(i+1)%len(pts)]
		area += p.x*q.y - q.x*p.y
	}
	at := func(i int) point {
		if area < 0 {
			i = len(pts) - 1 - i
		}
		return pts[i]
	}
	z.MoveTo(float32(at(0).x-ox), float32(at(0).y-oy))
	for i := 1; i < len(pts); i++ {
		z.LineTo(float32(at(i).x-ox), float32(at(i).y-oy))
	}
	z.ClosePath()
}

// disc adds a circle (device pixels, less the offset) as a polygon with sides of about 1.5 pixels,
// oriented like polygon's.
func disc(z *vector.Rasterizer, cx, cy, rad, ox, oy float64) {
	n := int(max(8, min(256, math.Ceil(2*math.Pi*rad/1.5))))
	pts := make([]point, n)
	for i := range pts {
		sin, cos := math.Sincos(2 * math.Pi * float64(i) / float64(n))
		pts[i] = point{cx + rad*cos, cy + rad*sin}
	}
	polygon(z, pts, ox, oy)
}

func (s rectShape) drawPNG(r *pngRenderer) {
	x0, y0, x1, y1 := s.x*PNGScale, s.y*PNGScale, (s.x+s.w)*PNGScale, (s.y+s.h)*PNGScale
	if x0 == math.Trunc(x0) && y0 == math.Trunc(y0) && x1 == math.Trunc(x1) && y1 == math.Trunc(y1) {
		box := image.Rect(int(x0), int(y0), int(x1), int(y1))
		draw.Draw(r.img, box, image.NewUniform(s.fill.rgba()), image.Point{}, draw.Src)
		return
	}
	r.fill(deviceBox(s.x, s.y, s.x+s.w, s.y+s.h), s.fill, func(z *vector.Rasterizer, ox, oy float64) {
		polygon(z, []point{{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}}, ox, oy)
	})
}

func (s gradientShape) drawPNG(r *pngRenderer) {
	box := deviceBox(s.x, s.y, s.x+s.w, s.y+s.h).Intersect(r.img.Bounds())
	top, height := s.y*PNGScale, s.h*PNGScale
	for y := box.Min.Y; y < box.Max.Y; y++ {
		t := 1 - (float64(y)+0.5-top)/height
		c := piecewise(s.stops, t)
		row := image.Rect(box.Min.X, y, box.Max.X, y+1)
		draw.Draw(r.img, row, image.NewUniform(c.rgba()), image.Point{}, draw.Src)
	}
}

func (s lineShape) drawPNG(r *pngRenderer) {
	hw := s.width * PNGScale / 2
	dev := make([]point, len(s.pts))
	x0, y0, x1, y1 := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for i, p := range s.pts {
		dev[i] = point{p.x * PNGScale, p.y * PNGScale}
		x0, y0, x1, y1 = min(x0, p.x), min(y0, p.y), max(x1, p.x), max(y1, p.y)
	}
	pad := s.width
	r.fill(deviceBox(x0-pad, y0-pad, x1+pad, y1+pad), s.color, func(z *vector.Rasterizer, ox, oy float64) {
		for i := 1; i < len(dev); i++ {
			a, b := dev[i-1], dev[i]
			d := math.Hypot(b.x-a.x, b.y-a.y)
			if d == 0 {
				continue
			}
			nx, ny := -(b.y-a.y)/d*hw, (b.x-a.x)/d*hw
			polygon(z, []point{{a.x + nx, a.y + ny}, {b.x + nx, b.y + ny}, {b.x - nx, b.y - ny}, {a.x - nx, a.y - ny}}, ox, oy)
		}
		if s.round {
			for _, p := range dev {
				disc(z, p.x, p.y, hw, ox, oy)
			}
		}
	})
}

func (s circleShape) drawPNG(r *pngRenderer) {
	r.fill(deviceBox(s.x-s.r, s.y-s.r, s.x+s.r, s.y+s.r), s.fill, func(z *vector.Rasterizer, ox, oy float64) {
		disc(z, s.x*PNGScale, s.y*PNGScale, s.r*PNGScale, ox, oy)
	})
}

func (s textShape) drawPNG(r *pngRenderer) {
	st := s.style
	f := r.fonts
	fnt := f.face(st.bold)
	glyphs, w := f.shape(s.s, st.bold)
	size := st.size * PNGScale
	start := -w * size * float64(st.anchor) / 2 // anchorStart 0, anchorMiddle ½, anchorEnd 1
	sin, cos := math.Sincos(st.angle * math.Pi / 180)
	ox, oy := s.x*PNGScale, s.y*PNGScale
	// dev maps a point of the unrotated line (u along the baseline from the anchor, v down) to
	// device pixels.
	dev := func(u, v float64) point {
		return point{ox + u*cos - v*sin, oy + u*sin + v*cos}
	}
	m := f.metrics(st.bold)
	u0, u1 := start-size, start+w*size+size // generous: glyphs may overhang their advance
	v0, v1 := -m.ascent*size*1.5, m.descent*size*1.5
	x0, y0, x1, y1 := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, c := range [4]point{dev(u0, v0), dev(u1, v0), dev(u0, v1), dev(u1, v1)} {
		x0, y0, x1, y1 = min(x0, c.x), min(y0, c.y), max(x1, c.x), max(y1, c.y)
	}
	box := image.Rect(int(math.Floor(x0)), int(math.Floor(y0)), int(math.Ceil(x1)), int(math.Ceil(y1)))
	ppem := fixed.Int26_6(math.Round(size * 64))
	r.fill(box, st.color, func(z *vector.Rasterizer, bx, by float64) {
		at := func(p fixed.Point26_6, pen float64) (float32, float32) {
			q := dev(pen+float64(p.X)/64, float64(p.Y)/64)
			return float32(q.x - bx), float32(q.y - by)
		}
		for _, g := range glyphs {
			segs, err := fnt.LoadGlyph(&f.buf, g.index, ppem, nil)
			if err != nil {
				continue // a glyph without outlines (none in the Go fonts) is left out
			}
			pen := start + g.x*size
			outline(z, segs, pen, at)
		}
	})
}

// outline adds a glyph's segments to the path, mapping each point with at.
func outline(z *vector.Rasterizer, segs sfnt.Segments, pen float64, at func(fixed.Point26_6, float64) (float32, float32)) {
	for _, seg := range segs {
		a := seg.Args
		switch seg.Op {
		case sfnt.SegmentOpMoveTo:
			z.MoveTo(at(a[0], pen))
		case sfnt.SegmentOpLineTo:
			z.LineTo(at(a[0], pen))
		case sfnt.SegmentOpQuadTo:
			bx, by := at(a[0], pen)
			cx, cy := at(a[1], pen)
			z.QuadTo(bx, by, cx, cy)
		case sfnt.SegmentOpCubeTo:
			bx, by := at(a[0], pen)
			cx, cy := at(a[1], pen)
			dx, dy := at(a[2], pen)
			z.CubeTo(bx, by, cx, cy, dx, dy)
		}
	}
}
