package viz

import (
	"math"
	"strings"
	"testing"
)

// blockHeatmap is an 8 × 8 heatmap in blocks of 4 × 4: the upper right empty, the lower left
// partial, the diagonal full, with cells (5, 1) and (6, 6) marked.
func blockHeatmap() Heatmap {
	vals := make([]float64, 64)
	for i := range vals {
		vals[i] = float64(i%8) / 8
	}
	marks := make([]bool, 64)
	marks[5*8+1], marks[6*8+6] = true, true
	return Heatmap{Rows: 8, Cols: 8, Values: vals, Scale: Sequential{Min: 0, Max: 1}, Marks: marks,
		Blocks: &BlockMap{Size: [2]int{4, 4}, Kinds: []BlockKind{BlockFull, BlockEmpty, BlockPartial, BlockFull}}}
}

// TestBlockOverlay checks the overlay in both back ends: the empty block filled pale and
// hatched, the partial one's dashes, the lines between blocks, and a red dot on each marked cell.
func TestBlockOverlay(t *testing.T) {
	h := blockHeatmap()
	cw, ch := cellSize(8, 8)
	elems := renderSVG(t, h)
	rects := cells(t, elems, cw, ch)
	if len(rects) != 64 {
		t.Fatalf("%d cell rects, want 64", len(rects))
	}
	x0, y0 := rects[0].num(t, "x"), rects[0].num(t, "y")
	var fills, dots, hatches, whites int
	for _, e := range elems {
		switch {
		case e.name == "rect" && e.attr["fill"] == emptyFill.hex():
			fills++
			if e.num(t, "x") != x0+4*cw || e.num(t, "y") != y0 || e.num(t, "width") != 4*cw || e.num(t, "height") != 4*ch {
				t.Errorf("the empty block's fill is at %v, want block (0, 1)", e.attr)
			}
		case e.name == "circle" && e.attr["fill"] == markColor.hex():
			dots++
			cx, cy := e.num(t, "cx"), e.num(t, "cy")
			i, j := int((cy-y0)/ch), int((cx-x0)/cw)
			if !h.Marks[i*8+j] || cx != x0+(float64(j)+0.5)*cw || cy != y0+(float64(i)+0.5)*ch {
				t.Errorf("a dot at (%g, %g), cell (%d, %d), which is not marked or not its centre", cx, cy, i, j)
			}
		case e.name == "polyline" && e.attr["stroke"] == hatchColor.hex():
			hatches++
		case e.name == "polyline" && e.attr["stroke"] == blockLine.hex():
			whites++
		}
	}
	// Two lines between the blocks; the partial block's four sides of 4·cw − 3 in dashes of
	// dashPx every 2·dashPx.
	dashes := 4 * int(math.Ceil((4*cw-3)/(2*dashPx)))
	if fills != 1 || dots != 2 || hatches < int(8*cw/hatchStep)-1 || whites != 2+dashes {
		t.Errorf("%d empty fills, %d dots, %d hatch lines, %d white lines; want 1, 2, ≥ %d and %d",
			fills, dots, hatches, whites, int(8*cw/hatchStep)-1, 2+dashes)
	}

	img := renderPNG(t, h)
	for _, c := range []struct {
		i, j int
		want rgb
	}{{5, 1, markColor}, {6, 6, markColor}, {0, 0, viridis0}} {
		if got := pixel(img, x0+(float64(c.j)+0.5)*cw, y0+(float64(c.i)+0.5)*ch); !near(got, c.want, 2) {
			t.Errorf("cell (%d, %d): PNG centre %s, want %s", c.i, c.j, got.hex(), c.want.hex())
		}
	}
	// Inside the empty block, away from the hatching: the pale fill, not the cells' colours.
	if got := pixel(img, x0+4*cw+1, y0+1); !near(got, emptyFill, 2) && !near(got, hatchColor, 40) {
		t.Errorf("the empty block's corner is %s, want its fill %s or hatching", got.hex(), emptyFill.hex())
	}
}

// TestBlockOverlayInGrid checks that a grid draws its panels' overlays, and that blocks and
// cells too small for lines keep the empty fill and mark cells with a red square.
func TestBlockOverlayInGrid(t *testing.T) {
	h := blockHeatmap()
	elems := renderSVG(t, Grid{Rows: 1, Cols: 1, Cells: []Heatmap{h}})
	var fills, dots int
	for _, e := range elems {
		fills += btoi(e.name == "rect" && e.attr["fill"] == emptyFill.hex())
		dots += btoi(e.name == "circle" && e.attr["fill"] == markColor.hex())
	}
	if fills != 1 || dots != 2 {
		t.Errorf("grid panel: %d empty fills and %d dots, want 1 and 2", fills, dots)
	}

	const n = 160 // cells of 3 pixels
	big := Heatmap{Rows: n, Cols: n, Values: make([]float64, n*n), Marks: make([]bool, n*n),
		Blocks: &BlockMap{Size: [2]int{1, 1}, Kinds: make([]BlockKind, n*n)}}
	for i := range big.Blocks.Kinds[1:] {
		big.Blocks.Kinds[1+i] = BlockFull
	}
	big.Marks[n+1] = true
	var lines, red int
	fills = 0
	for _, e := range renderSVG(t, big) {
		lines += btoi(e.name == "polyline" && (e.attr["stroke"] == hatchColor.hex() || e.attr["stroke"] == blockLine.hex()))
		fills += btoi(e.name == "rect" && e.attr["fill"] == emptyFill.hex())
		if e.name == "rect" && e.attr["fill"] == markColor.hex() {
			red++
			if e.num(t, "width") != 1.5 || e.num(t, "height") != 1.5 {
				t.Errorf("the mark of a 3-pixel cell is %s × %s, want 1.5 × 1.5", e.attr["width"], e.attr["height"])
			}
		}
	}
	if lines != 0 || fills != 1 || red != 1 {
		t.Errorf("3-pixel cells in 1×1 blocks: %d lines, %d empty fills and %d red cells, want none, 1 and 1", lines, fills, red)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestBlockLargerThanHeatmap draws one block larger than the heatmap, up to math.MaxInt cells a
// side: a single full block, as a block of the heatmap's own size draws.
func TestBlockLargerThanHeatmap(t *testing.T) {
	want := blockHeatmap()
	want.Blocks = &BlockMap{Size: [2]int{8, 8}, Kinds: []BlockKind{BlockEmpty}}
	var ref strings.Builder
	if err := want.SVG(&ref); err != nil {
		t.Fatal(err)
	}
	for _, size := range [][2]int{{9, 8}, {8, 1 << 40}, {math.MaxInt, math.MaxInt}} {
		h := blockHeatmap()
		h.Blocks = &BlockMap{Size: size, Kinds: []BlockKind{BlockEmpty}}
		var got strings.Builder
		if err := h.SVG(&got); err != nil {
			t.Errorf("blocks of %v: %v", size, err)
		} else if got.String() != ref.String() {
			t.Errorf("blocks of %v draw otherwise than one block of 8 × 8", size)
		}
	}
}

// TestBlockOverlayErrors checks that a bad overlay is an error that says what is wrong.
func TestBlockOverlayErrors(t *testing.T) {
	for want, change := range map[string]func(*Heatmap){
		"has 3 marks, want Rows·Cols = 64":        func(h *Heatmap) { h.Marks = make([]bool, 3) },
		"blocks of 0×4 cells, want ≥ 1 each":      func(h *Heatmap) { h.Blocks.Size[0] = 0 },
		"3 block kinds, want ⌈8/4⌉·⌈8/4⌉ = 4":     func(h *Heatmap) { h.Blocks.Kinds = h.Blocks.Kinds[:3] },
		"block 2 of kind 7, want BlockEmpty":      func(h *Heatmap) { h.Blocks.Kinds[2] = 7 },
		"has 1 block kinds, want ⌈8/3⌉·⌈8/9⌉ = 3": func(h *Heatmap) { h.Blocks.Size, h.Blocks.Kinds = [2]int{3, 9}, []BlockKind{BlockFull} },
	} {
		h := blockHeatmap()
		change(&h)
		for _, p := range []Picture{h, Grid{Rows: 1, Cols: 1, Cells: []Heatmap{h}}} {
			if err := p.SVG(new(strings.Builder)); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%T: %v, want an error containing %q", p, err, want)
			}
		}
	}
}
