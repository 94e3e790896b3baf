// Package viz draws the pictures of attention research as PNG and SVG: heatmaps of one head's
// attention or of a head-similarity matrix (Heatmap), the model view of every layer and head
// (Grid), curves such as pruning and training curves and sweeps (Chart), and per-head bars (Bars).
//
// Every picture is a plain struct of data that implements Picture:
//
//	h := viz.Heatmap{Rows: 3, Cols: 3, Values: weights, RowLabels: tokens, ColLabels: tokens,
//		XLabel: "key", YLabel: "query", Scale: viz.Sequential{Min: 0, Max: 1}}
//	err := h.PNG(w) // or h.SVG(w), or viz.WriteFile("head.svg", h)
//
// A picture is laid out once and drawn by two back ends, so its PNG and SVG show the same thing.
// The SVG is self-contained SVG 1.1 with a viewBox, in CSS pixels, with text in the Go fonts
// (font-family "Go, Helvetica, Arial, sans-serif"); the PNG is drawn at PNGScale pixels per SVG
// pixel, anti-aliased, with text in the Go fonts embedded in golang.org/x/image. Output depends
// only on the picture: the same picture gives the same bytes, on every machine.
//
// Colours: sequential values use matplotlib's viridis, perceptually uniform and readable in grey
// and by colour-blind readers; signed values (Diverging) use ColorBrewer's RdBu, blue for
// negative, white at 0, red for positive; masked cells (NaN) are light grey. A heatmap's optional
// overlay draws a sparse attention block map (BlockMap: white lines between blocks, empty blocks
// hatched on a pale fill, partial ones with a dashed border) and red dots on marked cells, such
// as weights that are exactly 0. Curves use Okabe and Ito's colour-blind-safe palette.
//
// Every input is checked before anything is written: a wrong length, an invalid scale or a size
// beyond the bounds (MaxCells, MaxGrid, MaxGridCells, MaxSeries, MaxPoints, MaxBars, MaxSize) is an
// error that says what came and what is allowed, and no input makes viz panic. Labels of any
// length and content are safe: they are cut short, control characters are shown escaped and XML
// is escaped.
package viz
