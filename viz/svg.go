package viz

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strconv"
)

// fontFamily is the SVG's font list: the Go fonts the PNG is drawn with, then look-alikes.
const fontFamily = "Go, Helvetica, Arial, sans-serif"

// svgWriter accumulates an SVG document.
type svgWriter struct {
	b         bytes.Buffer
	gradients int // gradients defined so far, for unique ids
}

// writeSVG writes s as a self-contained SVG 1.1 document. Rectangles are drawn with crisp edges so
// that adjacent heatmap cells show no seams; lines, discs and text are anti-aliased.
func (s *scene) writeSVG(w io.Writer) error {
	sw := &svgWriter{}
	b := &sw.b
	wd, ht := num(s.w), num(s.h)
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="` + wd + `" height="` + ht +
		`" viewBox="0 0 ` + wd + " " + ht + `" font-family="` + fontFamily + `" shape-rendering="crispEdges">` + "\n")
	b.WriteString(`<rect width="` + wd + `" height="` + ht + `" fill="#ffffff"/>` + "\n")
	for _, sh := range s.shapes {
		sh.writeSVG(sw)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// num formats a coordinate to 1/100 of a unit, without trailing zeros.
func num(v float64) string {
	v = math.Round(v*100) / 100
	if v == 0 {
		return "0" // not -0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func (s rectShape) writeSVG(w *svgWriter) {
	w.b.WriteString(`<rect x="` + num(s.x) + `" y="` + num(s.y) + `" width="` + num(s.w) + `" height="` + num(s.h) +
		`" fill="` + s.fill.hex() + `"/>` + "\n")
}

func (s gradientShape) writeSVG(w *svgWriter) {
	id := "gradient" + strconv.Itoa(w.gradients)
	w.gradients++
	b := &w.b
	b.WriteString(`<defs><linearGradient id="` + id + `" x1="0" y1="1" x2="0" y2="0">`)
	for i, c := range s.stops {
		off := float64(i) / float64(len(s.stops)-1)
		b.WriteString(`<stop offset="` + strconv.FormatFloat(off, 'f', 4, 64) + `" stop-color="` + c.hex() + `"/>`)
	}
	b.WriteString("</linearGradient></defs>\n")
	b.WriteString(`<rect x="` + num(s.x) + `" y="` + num(s.y) + `" width="` + num(s.w) + `" height="` + num(s.h) +
		`" fill="url(#` + id + `)"/>` + "\n")
}

func (s lineShape) writeSVG(w *svgWriter) {
	b := &w.b
	b.WriteString(`<polyline points="`)
	for i, p := range s.pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(p.x) + "," + num(p.y))
	}
	b.WriteString(`" fill="none" stroke="` + s.color.hex() + `" stroke-width="` + num(s.width) + `"`)
	if s.round {
		b.WriteString(` stroke-linejoin="round" stroke-linecap="round" shape-rendering="geometricPrecision"`)
	}
	b.WriteString("/>\n")
}

func (s circleShape) writeSVG(w *svgWriter) {
	w.b.WriteString(`<circle cx="` + num(s.x) + `" cy="` + num(s.y) + `" r="` + num(s.r) + `" fill="` + s.fill.hex() +
		`" shape-rendering="geometricPrecision"/>` + "\n")
}

func (s textShape) writeSVG(w *svgWriter) {
	st := s.style
	b := &w.b
	x, y := num(s.x), num(s.y)
	b.WriteString(`<text x="` + x + `" y="` + y + `" font-size="` + num(st.size) + `" fill="` + st.color.hex() + `"`)
	if st.bold {
		b.WriteString(` font-weight="bold"`)
	}
	switch st.anchor {
	case anchorMiddle:
		b.WriteString(` text-anchor="middle"`)
	case anchorEnd:
		b.WriteString(` text-anchor="end"`)
	}
	if st.angle != 0 {
		b.WriteString(` transform="rotate(` + num(st.angle) + " " + x + " " + y + `)"`)
	}
	b.WriteString(` xml:space="preserve">`)
	xml.EscapeText(b, []byte(s.s)) // writes to a bytes.Buffer never fail
	b.WriteString("</text>\n")
}
