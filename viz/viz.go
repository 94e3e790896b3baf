package viz

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mhalab/mha/internal/atomicfile"
)

// Picture is a picture viz can draw: Heatmap, Grid, Chart or Bars.
//
// PNG and SVG draw the same layout, computed once; the SVG is in CSS pixels and the PNG has
// PNGScale pixels per SVG pixel. Both are deterministic (the same picture gives the same bytes)
// and validate the picture first: invalid data gives an error that says what came and what is
// allowed, and nothing is written. Otherwise the only error is w's.
type Picture interface {
	PNG(w io.Writer) error
	SVG(w io.Writer) error
}

// Bounds on what a picture may hold, so that any input gives a picture of bounded size.
const (
	MaxCells  = 512     // rows, and columns, of a Heatmap
	MaxGrid   = 64      // rows, and columns, of panels in a Grid
	MaxSeries = 64      // series in a Chart
	MaxPoints = 1 << 20 // points in all the series of a Chart together
	MaxBars   = 1024    // bars in a Bars
	MaxSize   = 4096    // width and height of any picture, in SVG pixels
)

// WriteFile writes p to the file name, as PNG or SVG after the name's extension (.png or .svg, in
// any case). It returns an error for another extension, for invalid picture data (and then creates
// no file) or from writing the file.
//
// It writes atomically, through a temporary file in the same directory renamed over name, so that
// name never holds a partial picture. It replaces only a regular file, keeping its permission
// bits, or creates one with 0644 less the umask; a directory, device, named pipe (FIFO) or socket
// at name is an error and is left as it is. A symbolic link is followed and the file at its end
// written, so that the link stays.
func WriteFile(name string, p Picture) error {
	var b bytes.Buffer
	var err error
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".png":
		err = p.PNG(&b)
	case ".svg":
		err = p.SVG(&b)
	default:
		return fmt.Errorf("viz: %s: extension %q, want .png or .svg", name, ext)
	}
	if err != nil {
		return err
	}
	if err := atomicfile.Write(name, b.Bytes()); err != nil {
		return fmt.Errorf("viz: %w", err)
	}
	return nil
}

// render builds the scene of a picture and writes it with one back end.
func render(build func() (*scene, error), w io.Writer, svg bool) error {
	s, err := build()
	if err != nil {
		return err
	}
	s.w, s.h = math.Ceil(s.w), math.Ceil(s.h)
	if svg {
		return s.writeSVG(w)
	}
	return s.writePNG(w)
}

// checkSize returns an error if a picture of w × h SVG pixels is larger than MaxSize allows; what
// names the picture.
func checkSize(what string, w, h float64) error {
	if w > MaxSize || h > MaxSize {
		return fmt.Errorf("viz: %s would be %.0f×%.0f pixels, more than the %d×%d allowed", what, w, h, MaxSize, MaxSize)
	}
	return nil
}

// describe names a picture in an error message: its kind and, cut short, its title.
func describe(kind, title string) string {
	if title == "" {
		return kind
	}
	return kind + " " + strconv.Quote(cut(title))
}

// cut shortens a user's string for an error message.
func cut(s string) string {
	runes := 0
	for i := range s {
		if runes == 40 {
			return s[:i] + "…"
		}
		runes++
	}
	return s
}

// Text styles shared by every picture.
var (
	titleStyle = textStyle{size: 15, bold: true, color: ink, anchor: anchorMiddle}
	axisStyle  = textStyle{size: 12, color: ink}           // axis titles
	labelStyle = textStyle{size: 11, color: ink}           // token labels, legend entries
	tickStyle  = textStyle{size: 10.5, color: softInk}     // numbers on axes and colour bars
	smallStyle = textStyle{size: 10, color: softInk}       // panel titles in a grid
	valueStyle = textStyle{size: 11, anchor: anchorMiddle} // cell annotations; colour per cell
)

// upright returns st rotated to read from bottom to top, centred on its anchor.
func upright(st textStyle) textStyle {
	st.angle, st.anchor = -90, anchorMiddle
	return st
}

const (
	pad      = 12  // around the picture
	titleGap = 14  // between the title's baseline and the content
	maxTitle = 900 // a title may widen a picture up to this width
)

// titleHeight returns the space a title takes above the content: 0 without one.
func titleHeight(s *scene, title string) float64 {
	if title == "" {
		return 0
	}
	return s.capHeight(titleStyle) + titleGap
}

// drawTitle centres title over cx when it fits there, and otherwise keeps it inside the picture,
// cut short if it is wider than the picture. It returns the picture width, widened (up to
// maxTitle) for a long title.
func drawTitle(s *scene, title string, cx, width float64) float64 {
	if title == "" {
		return width
	}
	title = clean(title)
	tw := s.width(title, titleStyle)
	width = max(width, min(tw+2*pad, maxTitle))
	title = s.fonts.fit(title, titleStyle.size, true, width-2*pad)
	tw = s.width(title, titleStyle)
	cx = max(pad+tw/2, min(width-pad-tw/2, cx))
	s.text(cx, pad+s.capHeight(titleStyle), title, titleStyle)
	return width
}
