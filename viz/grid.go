package viz

import (
	"fmt"
	"io"
	"math"
	"strconv"
)

// Grid is a grid of small heatmaps sharing one colour scale and one colour bar: the model view of
// a transformer, layers down and heads across.
//
// Every panel is drawn with the same cell size, chosen so that the grid stays readable (panels of
// about 40 to 112 pixels, cells of 0.5 to 24 pixels); each panel's Title is written small above
// it. The panels' other fields (labels, axis titles, Scale, Annotate) are not drawn.
type Grid struct {
	Title      string
	Rows, Cols int       // panels down and across, 1…MaxGrid each
	Cells      []Heatmap // the panels, row-major: len Rows·Cols, each a valid Heatmap, its overlay drawn too
	RowTitles  []string  // nil or one per row, left of it ("layer 0")
	ColTitles  []string  // nil or one per column, above it ("head 3")
	ValueLabel string    // beside the colour bar
	Scale      Scale     // for every panel; nil: Sequential{} over all the panels' data
}

// MaxGridCells bounds the cells of all the panels of a Grid together.
const MaxGridCells = 1 << 20

// PNG writes g as a PNG. It returns an error when Rows or Cols is outside 1…MaxGrid, when
// len(Cells) ≠ Rows·Cols, for an invalid panel (see Heatmap.PNG), when the panels hold more than
// MaxGridCells cells together, when RowTitles or ColTitles is given with the wrong length, for an
// invalid Scale, when the picture would be larger than MaxSize, or from w.
func (g Grid) PNG(w io.Writer) error {
	return render(g.scene, w, false)
}

// SVG writes g as an SVG document, with one <rect> per cell; its errors are PNG's.
func (g Grid) SVG(w io.Writer) error {
	return render(g.scene, w, true)
}

func (g Grid) check() error {
	name := describe("grid", g.Title)
	if g.Rows < 1 || g.Rows > MaxGrid || g.Cols < 1 || g.Cols > MaxGrid {
		return fmt.Errorf("viz: %s is %d×%d panels, want 1…%d rows and columns", name, g.Rows, g.Cols, MaxGrid)
	}
	if len(g.Cells) != g.Rows*g.Cols {
		return fmt.Errorf("viz: %s has %d cells, want Rows·Cols = %d·%d = %d", name, len(g.Cells), g.Rows, g.Cols, g.Rows*g.Cols)
	}
	if g.RowTitles != nil && len(g.RowTitles) != g.Rows {
		return fmt.Errorf("viz: %s has %d row titles for %d rows", name, len(g.RowTitles), g.Rows)
	}
	if g.ColTitles != nil && len(g.ColTitles) != g.Cols {
		return fmt.Errorf("viz: %s has %d column titles for %d columns", name, len(g.ColTitles), g.Cols)
	}
	total := 0
	for i, c := range g.Cells {
		if err := c.check("grid cell " + strconv.Itoa(i)); err != nil {
			return err
		}
		total += c.Rows * c.Cols
	}
	if total > MaxGridCells {
		return fmt.Errorf("viz: %s has %d cells in all its panels, more than the %d allowed", name, total, MaxGridCells)
	}
	return nil
}

// Gaps between the panels of a grid, in pixels.
const (
	panelGapX = 10
	panelGapY = 12
)

// panelCell returns the cell size of a grid of rows × cols panels of at most n cells a side.
func panelCell(rows, cols, n int) float64 {
	target := max(40, min(112, 1400/max(rows, cols)))
	if target < n {
		return 0.5
	}
	return float64(min(24, target/n))
}

func (g Grid) scene() (*scene, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	data := make([][]float64, len(g.Cells))
	maxR, maxC, titled := 0, 0, false
	for i, c := range g.Cells {
		data[i] = c.Values
		maxR, maxC = max(maxR, c.Rows), max(maxC, c.Cols)
		titled = titled || c.Title != ""
	}
	cs, err := resolveScale(g.Scale, data...)
	if err != nil {
		return nil, err
	}
	s := newScene()
	cell := panelCell(g.Rows, g.Cols, max(maxR, maxC))
	pw, ph := cell*float64(maxC), cell*float64(maxR)
	slotW := pw + panelGapX

	headH := 0.0 // a panel's title, above it; whole pixels, so that cells meet without seams
	if titled {
		headH = math.Ceil(s.capHeight(smallStyle) + s.descent(smallStyle) + 3)
	}
	colTitleH := 0.0
	if g.ColTitles != nil {
		colTitleH = s.capHeight(labelStyle) + s.descent(labelStyle) + 6
	}
	rowTitles := make([]string, g.Rows)
	rowTitleW := 0.0
	for i := range rowTitles {
		if g.RowTitles != nil {
			rowTitles[i] = s.fonts.fit(clean(g.RowTitles[i]), labelStyle.size, false, maxLabelW)
			rowTitleW = max(rowTitleW, s.width(rowTitles[i], labelStyle)+8)
		}
	}
	x0 := math.Ceil(pad + rowTitleW) // whole pixels: cells meet without seams
	y0 := math.Ceil(pad + titleHeight(s, g.Title) + colTitleH)
	gridW := float64(g.Cols)*slotW - panelGapX
	gridH := float64(g.Rows)*(headH+ph+panelGapY) - panelGapY
	barH := max(minSide, min(gridH-headH, 360))
	bar := newColorBar(s, cs, barH, g.ValueLabel)
	width := x0 + gridW + bar.width(s) + pad
	height := max(y0+gridH, y0+headH+barH+s.capHeight(tickStyle)) + pad
	if err := checkSize(describe("grid", g.Title), width, height); err != nil {
		return nil, err
	}

	for k, c := range g.Cells {
		i, j := k/g.Cols, k%g.Cols
		x := x0 + float64(j)*slotW
		y := y0 + float64(i)*(headH+ph+panelGapY)
		if c.Title != "" {
			st := smallStyle
			st.anchor = anchorMiddle
			t := s.fonts.fit(clean(c.Title), st.size, false, slotW-2)
			s.text(x+pw/2, y+s.capHeight(st), t, st)
		}
		cw, ch := cell*float64(c.Cols), cell*float64(c.Rows)
		drawCells(s, x, y+headH, cell, cell, c.Rows, c.Cols, c.Values, cs)
		drawOverlay(s, x, y+headH, cell, cell, &c)
		s.frame(x, y+headH, cw, ch, axisColor)
	}
	capH := s.capHeight(labelStyle)
	for i, t := range rowTitles {
		st := labelStyle
		st.anchor = anchorEnd
		y := y0 + float64(i)*(headH+ph+panelGapY) + headH + ph/2
		s.text(x0-8, y+capH/2, t, st)
	}
	for j, t := range g.ColTitles {
		st := labelStyle
		st.anchor = anchorMiddle
		t = s.fonts.fit(clean(t), st.size, false, math.Max(slotW-2, 40))
		s.text(x0+float64(j)*slotW+pw/2, y0-6-s.descent(st), t, st)
	}
	bar.draw(s, x0+gridW, y0+headH, barH)
	s.w, s.h = drawTitle(s, g.Title, x0+gridW/2, width), height
	return s, nil
}
