package viz

import (
	"fmt"
	"io"
	"math"
)

// Heatmap is a matrix drawn as coloured cells with a colour bar: an attention pattern (rows =
// queries, columns = keys), a head-similarity matrix, any table of numbers.
//
// Cells are square, sized from the matrix (64 pixels for a few rows down to 1 pixel for
// MaxCells); a single row or column is drawn with taller or wider cells. Labels are thinned to
// every 2nd, 5th, 10th … when the cells are too small for all of them, column labels are turned to
// read upwards when they do not fit across, and long labels are cut short with "…".
// Control characters in labels are shown as Go escapes (\n) and invalid UTF-8 as U+FFFD; characters
// the Go fonts lack show as boxes in the PNG.
type Heatmap struct {
	Title      string
	Rows, Cols int       // 1…MaxCells each
	Values     []float64 // [Rows, Cols], row-major; NaN is a masked cell (light grey), ±Inf takes an end colour
	RowLabels  []string  // nil (the row indices) or one per row
	ColLabels  []string  // nil (the column indices) or one per column
	XLabel     string    // under the columns, e.g. "key"
	YLabel     string    // left of the rows, e.g. "query"
	ValueLabel string    // beside the colour bar, e.g. "attention weight"
	Scale      Scale     // nil: Sequential{}, viridis over the range of the data
	Annotate   bool      // write each cell's value in it (2 decimals below 10), where the cells hold the text at 7 pixels or more
	Blocks     *BlockMap // nil, or a block layout drawn over the cells
	Marks      []bool    // nil, or [Rows, Cols]: a red dot on each marked cell (a square under 4 pixels)
}

// PNG writes h as a PNG. It returns an error when Rows or Cols is outside 1…MaxCells, when
// len(Values) ≠ Rows·Cols, when RowLabels, ColLabels or Marks is given with the wrong length, for
// a block map whose sizes are not ≥ 1, whose Kinds do not cover the cells or hold an unknown kind,
// for an invalid Scale, or from w.
func (h Heatmap) PNG(w io.Writer) error {
	return render(h.scene, w, false)
}

// SVG writes h as an SVG document, with one <rect> per cell; its errors are PNG's.
func (h Heatmap) SVG(w io.Writer) error {
	return render(h.scene, w, true)
}

func (h Heatmap) check(kind string) error {
	name := describe(kind, h.Title)
	if h.Rows < 1 || h.Rows > MaxCells || h.Cols < 1 || h.Cols > MaxCells {
		return fmt.Errorf("viz: %s is %d×%d cells, want 1…%d rows and columns", name, h.Rows, h.Cols, MaxCells)
	}
	if len(h.Values) != h.Rows*h.Cols {
		return fmt.Errorf("viz: %s has %d values, want Rows·Cols = %d·%d = %d", name, len(h.Values), h.Rows, h.Cols, h.Rows*h.Cols)
	}
	if h.RowLabels != nil && len(h.RowLabels) != h.Rows {
		return fmt.Errorf("viz: %s has %d row labels for %d rows", name, len(h.RowLabels), h.Rows)
	}
	if h.ColLabels != nil && len(h.ColLabels) != h.Cols {
		return fmt.Errorf("viz: %s has %d column labels for %d columns", name, len(h.ColLabels), h.Cols)
	}
	if h.Marks != nil && len(h.Marks) != h.Rows*h.Cols {
		return fmt.Errorf("viz: %s has %d marks, want Rows·Cols = %d", name, len(h.Marks), h.Rows*h.Cols)
	}
	if h.Blocks != nil {
		return h.Blocks.check(name, h.Rows, h.Cols)
	}
	return nil
}

// Cell sizes of a heatmap, in pixels.
const (
	plotTarget = 480 // the larger side of a heatmap, when cells of 1…maxCell pixels allow it
	maxCell    = 64
	minSide    = 100 // the smaller side, when cells up to maxCell allow it
	minBar     = 60  // the colour bar, at least
)

// cellSize returns the width and height of the cells of a rows × cols heatmap: square and whole
// pixels, except that a short side is stretched towards minSide.
func cellSize(rows, cols int) (cw, ch float64) {
	side := max(1, min(maxCell, plotTarget/max(rows, cols)))
	stretch := func(n int) float64 {
		return float64(max(side, min(maxCell, (minSide+n-1)/n)))
	}
	return stretch(cols), stretch(rows)
}

func (h Heatmap) scene() (*scene, error) {
	if err := h.check("heatmap"); err != nil {
		return nil, err
	}
	cs, err := resolveScale(h.Scale, h.Values)
	if err != nil {
		return nil, err
	}
	s := newScene()
	cw, ch := cellSize(h.Rows, h.Cols)
	pw, ph := cw*float64(h.Cols), ch*float64(h.Rows)
	rows := rowLabels(s, h.RowLabels, h.Rows, ch)
	cols := colLabels(s, h.ColLabels, h.Cols, cw)
	barH := max(ph, minBar)
	bar := newColorBar(s, cs, barH, h.ValueLabel)
	yl, xl := newAxisTitle(s, h.YLabel, ph), newAxisTitle(s, h.XLabel, pw)

	// Left to right: y label, row labels, cells, colour bar; top to bottom: title, cells, column
	// labels, x label.
	x0 := math.Ceil(pad + yl.depth + rows.depth) // whole pixels: cells meet without seams
	y0 := math.Ceil(pad + titleHeight(s, h.Title))
	colsBottom := y0 + ph + cols.depth
	width := x0 + pw + bar.width(s) + pad
	height := max(colsBottom+xl.depth, y0+barH+s.capHeight(tickStyle)) + pad
	if err := checkSize(describe("heatmap", h.Title), width, height); err != nil {
		return nil, err
	}

	colors := drawCells(s, x0, y0, cw, ch, h.Rows, h.Cols, h.Values, cs)
	drawOverlay(s, x0, y0, cw, ch, &h)
	if h.Annotate {
		annotate(s, x0, y0, cw, ch, h.Rows, h.Cols, h.Values, colors)
	}
	s.frame(x0, y0, pw, ph, axisColor)
	rows.drawRows(s, x0, y0, ch)
	cols.drawCols(s, x0, y0+ph, cw)
	yl.drawLeft(s, pad, y0+ph/2)
	xl.drawBelow(s, x0+pw/2, colsBottom)
	bar.draw(s, x0+pw, y0, barH)
	s.w, s.h = drawTitle(s, h.Title, x0+pw/2, width), height
	return s, nil
}

// drawCells draws a rows × cols matrix of cw × ch cells from (x, y) and returns their colours.
func drawCells(s *scene, x, y, cw, ch float64, rows, cols int, values []float64, cs colorScale) []rgb {
	colors := make([]rgb, len(values))
	for i := range rows {
		for j := range cols {
			c := cs.color(values[i*cols+j])
			colors[i*cols+j] = c
			s.rect(x+float64(j)*cw, y+float64(i)*ch, cw, ch, c)
		}
	}
	return colors
}

// annotate writes each cell's value in it, near-black or white after the cell's colour, in the
// largest size up to valueStyle's that fits every value in its cell; it writes nothing when that
// size would be under 7 pixels. Masked (NaN) cells stay empty.
func annotate(s *scene, x, y, cw, ch float64, rows, cols int, values []float64, colors []rgb) {
	big := 0.0
	for _, v := range values {
		if finite(v) {
			big = max(big, math.Abs(v))
		}
	}
	dec := 2
	switch {
	case big >= 100:
		dec = 0
	case big >= 10:
		dec = 1
	}
	texts := make([]string, len(values))
	widest := 0.0
	for i, v := range values {
		if !math.IsNaN(v) {
			texts[i] = formatNumber(v, dec)
			widest = max(widest, s.width(texts[i], valueStyle))
		}
	}
	st := valueStyle
	st.size = min(st.size, ch*0.45, st.size*(cw-4)/widest)
	if st.size < 7 {
		return
	}
	capH := s.capHeight(st)
	for i := range rows {
		for j := range cols {
			k := i*cols + j
			st.color = onColor(colors[k])
			s.text(x+(float64(j)+0.5)*cw, y+(float64(i)+0.5)*ch+capH/2, texts[k], st)
		}
	}
}
