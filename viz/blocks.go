package viz

import "fmt"

// BlockKind says what a block of a BlockMap holds, as sparse attention computes it.
type BlockKind uint8

// The kinds of block.
const (
	BlockEmpty   BlockKind = iota // no cell is computed: hatched over a pale fill
	BlockPartial                  // some cells are: a dashed border inside the block
	BlockFull                     // every cell is: drawn plain
)

// BlockMap is a block layout drawn over a heatmap's cells (a sparse attention pattern's, rows =
// queries, columns = keys): white lines between the blocks of Size[0] rows × Size[1] columns
// and each block marked after its kind. Lines, hatching and borders are left out where the
// blocks are too small on screen to hold them (under 4 pixels, 20 for a border); an empty
// block's fill stays.
type BlockMap struct {
	Size  [2]int      // rows and columns of a block, ≥ 1 each
	Kinds []BlockKind // [⌈Rows/Size[0]⌉, ⌈Cols/Size[1]⌉], row-major
}

// check validates b for a heatmap of rows × cols cells.
func (b *BlockMap) check(name string, rows, cols int) error {
	if b.Size[0] < 1 || b.Size[1] < 1 {
		return fmt.Errorf("viz: %s has blocks of %d×%d cells, want ≥ 1 each", name, b.Size[0], b.Size[1])
	}
	nr, nc := ceilDiv(rows, b.Size[0]), ceilDiv(cols, b.Size[1])
	if len(b.Kinds) != nr*nc {
		return fmt.Errorf("viz: %s has %d block kinds, want ⌈%d/%d⌉·⌈%d/%d⌉ = %d", name, len(b.Kinds), rows, b.Size[0], cols, b.Size[1], nr*nc)
	}
	for i, k := range b.Kinds {
		if k > BlockFull {
			return fmt.Errorf("viz: %s has block %d of kind %d, want BlockEmpty, BlockPartial or BlockFull", name, i, k)
		}
	}
	return nil
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0 and b > 0, without overflow when b is near math.MaxInt.
func ceilDiv(a, b int) int {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// The colours of a heatmap's overlay.
var (
	emptyFill  = rgb{0xf3, 0xee, 0xe3} // an empty block, paler and warmer than a masked cell
	hatchColor = rgb{0xa8, 0x9f, 0x8c} // its hatching
	blockLine  = white                 // lines between blocks, a partial block's dashes
	markColor  = rgb{0xff, 0x4f, 0x2e} // a marked cell's dot: no colour of viridis or RdBu is this red
)

// Sizes of the overlay, in pixels: below minBlockPx a block gets no lines or hatching, below
// minDashedPx a partial block no border; below minDotPx a marked cell gets a square of half its
// size instead of a dot.
const (
	minBlockPx  = 4
	minDashedPx = 20
	hatchStep   = 5
	dashPx      = 3
	minDotPx    = 4
)

// drawOverlay draws h's block map and marks over its cells, cw × ch each from (x, y).
func drawOverlay(s *scene, x, y, cw, ch float64, h *Heatmap) {
	if b := h.Blocks; b != nil {
		drawBlocks(s, x, y, cw, ch, h.Rows, h.Cols, b)
	}
	if h.Marks == nil {
		return
	}
	r := min(cw, ch) / 5
	for i := range h.Rows {
		for j := range h.Cols {
			if !h.Marks[i*h.Cols+j] {
				continue
			}
			cx, cy := x+float64(j)*cw, y+float64(i)*ch
			if min(cw, ch) < minDotPx {
				s.rect(cx+cw/4, cy+ch/4, cw/2, ch/2, markColor)
			} else {
				s.circle(cx+cw/2, cy+ch/2, r, markColor)
			}
		}
	}
}

// drawBlocks draws the block map b over rows × cols cells of cw × ch from (x, y).
func drawBlocks(s *scene, x, y, cw, ch float64, rows, cols int, b *BlockMap) {
	nr, nc := ceilDiv(rows, b.Size[0]), ceilDiv(cols, b.Size[1])
	big := float64(b.Size[0])*ch >= minBlockPx && float64(b.Size[1])*cw >= minBlockPx
	for bi := range nr {
		for bj := range nc {
			bx, by := x+float64(bj*b.Size[1])*cw, y+float64(bi*b.Size[0])*ch
			bw := float64(min(b.Size[1], cols-bj*b.Size[1])) * cw
			bh := float64(min(b.Size[0], rows-bi*b.Size[0])) * ch
			switch b.Kinds[bi*nc+bj] {
			case BlockEmpty:
				s.rect(bx, by, bw, bh, emptyFill)
				if big {
					hatch(s, bx, by, bw, bh)
				}
			case BlockPartial:
				if bw >= minDashedPx && bh >= minDashedPx {
					dashed(s, bx+1.5, by+1.5, bw-3, bh-3)
				}
			}
		}
	}
	if !big {
		return
	}
	pw, ph := float64(cols)*cw, float64(rows)*ch
	for bi := 1; bi < nr; bi++ {
		ly := y + float64(bi*b.Size[0])*ch
		s.segment(x, ly, x+pw, ly, 1, blockLine)
	}
	for bj := 1; bj < nc; bj++ {
		lx := x + float64(bj*b.Size[1])*cw
		s.segment(lx, y, lx, y+ph, 1, blockLine)
	}
}

// hatch draws lines rising to the right every hatchStep pixels across the rectangle x, y, w, h.
func hatch(s *scene, x, y, w, h float64) {
	for d := float64(hatchStep); d < w+h; d += hatchStep {
		// The line x' + y' = x + y + d, from where it enters the rectangle on the left or bottom
		// edge to where it leaves on the top or right.
		s.segment(x+max(0, d-h), y+min(d, h), x+min(d, w), y+max(0, d-w), 1, hatchColor)
	}
}

// dashed draws the outline of the rectangle x, y, w, h in dashes of dashPx.
func dashed(s *scene, x, y, w, h float64) {
	side := func(x0, y0, dx, dy, n float64) {
		for t := 0.0; t < n; t += 2 * dashPx {
			e := min(t+dashPx, n)
			s.segment(x0+dx*t, y0+dy*t, x0+dx*e, y0+dy*e, 1, blockLine)
		}
	}
	side(x, y, 1, 0, w)
	side(x, y+h, 1, 0, w)
	side(x, y, 0, 1, h)
	side(x+w, y, 0, 1, h)
}
