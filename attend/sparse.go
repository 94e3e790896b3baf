package attend

import "math"

// BlockKind says what a block of a Sparse layout keeps.
type BlockKind uint8

// The kinds of block.
const (
	Empty   BlockKind = iota // no pair: the kernels never touch the block
	Partial                  // some pairs: Keep decides each
	Full                     // every pair: no test at all
)

// Sparse is a sparse attention layout of one head, FlexAttention's BlockMask idea: query i may
// attend key j < Stride only when the layout keeps the pair. The pairs are cut into blocks of BQ
// queries × BK keys, and Kinds [⌈Tq/BQ⌉, NBK] (row-major) says of each whether it keeps none of
// its pairs, all of them, or some, which Keep(i, j) then tells. Tiled and Backward skip the
// empty blocks, so that their cost falls with the blocks kept. Keys from Stride on (the appended
// ones) are kept.
type Sparse struct {
	BQ, BK int
	NBK    int
	Kinds  []BlockKind
	Keep   func(i, j int) bool
	// Masks, when not nil, holds the partial blocks' pairs, computed once (see Precompute):
	// block b's row r, column c is Masks[Offsets[b] + r·MaskStride + c], true for a kept pair.
	// A block's mask has min(BQ, Tq) rows of MaskStride = min(BK, Tk) columns, so that blocks
	// larger than the call cost no more than its pairs.
	Masks      []bool
	Offsets    []int
	MaskStride int
	// Cols, when not nil, lists the key blocks that are not empty, query block by query block,
	// in order: those of query block qb are Cols[ColStart[qb]:ColStart[qb+1]] (see Precompute),
	// so that Tiled walks them alone rather than every key block.
	Cols, ColStart []int32
}

// Precompute evaluates Keep on every pair of the partial blocks of a layout of tq queries and
// tk keys into Masks, so that the kernels test a bool instead of calling Keep, and lists each
// query block's blocks that are not empty in Cols: worth it when the layout serves several heads
// or batches.
func (s *Sparse) Precompute(tq, tk int) {
	s.Offsets = s.Offsets[:0]
	s.Masks = s.Masks[:0]
	rows, cols := min(s.BQ, tq), min(s.BK, tk)
	s.MaskStride = cols
	s.Cols, s.ColStart = s.Cols[:0], append(s.ColStart[:0], 0)
	for b, k := range s.Kinds {
		if k != Empty {
			s.Cols = append(s.Cols, int32(b%s.NBK))
		}
		if b%s.NBK == s.NBK-1 {
			s.ColStart = append(s.ColStart, int32(len(s.Cols)))
		}
		if k != Partial {
			s.Offsets = append(s.Offsets, -1)
			continue
		}
		s.Offsets = append(s.Offsets, len(s.Masks))
		i0, j0 := b/s.NBK*s.BQ, b%s.NBK*s.BK
		for r := range rows {
			for c := range cols {
				i, j := i0+r, j0+c
				s.Masks = append(s.Masks, i < tq && j < tk && s.Keep(i, j))
			}
		}
	}
	// Without keys (NBK = 0) Kinds is empty: each query block's list is empty.
	nbq := tq / s.BQ
	if tq%s.BQ != 0 {
		nbq++
	}
	for len(s.ColStart) <= nbq {
		s.ColStart = append(s.ColStart, 0)
	}
}

// kind returns the kind of the block holding query i and key j.
func (s *Sparse) kind(i, j int) BlockKind { return s.Kinds[i/s.BQ*s.NBK+j/s.BK] }

// applySparse sets to −Inf the entries of row, query i's scores for keys j0 … j0+len(row)−1
// (all below Stride), that s does not keep.
func applySparse[F Float](s *Sparse, i, j0 int, row []F) {
	negInf := F(math.Inf(-1))
	for j := 0; j < len(row); {
		key := j0 + j
		end := min(len(row), (key/s.BK+1)*s.BK-j0) // the end of key's block in row
		switch s.kind(i, key) {
		case Empty:
			for k := j; k < end; k++ {
				row[k] = negInf
			}
		case Partial:
			if s.Masks != nil {
				kb := key / s.BK
				// Key j0 + k of the block is mask column j0 + k − kb·BK of row i mod BQ.
				base := s.Offsets[i/s.BQ*s.NBK+kb] + i%s.BQ*s.MaskStride - kb*s.BK + j0
				for k := j; k < end; k++ {
					if !s.Masks[base+k] {
						row[k] = negInf
					}
				}
				break
			}
			for k := j; k < end; k++ {
				if !s.Keep(i, j0+k) {
					row[k] = negInf
				}
			}
		}
		j = end
	}
}

// empty reports whether every block that queries [i0, i1) and keys [j0, j1) touch is empty.
func (s *Sparse) empty(i0, i1, j0, j1 int) bool {
	for qb := i0 / s.BQ; qb <= (i1-1)/s.BQ; qb++ {
		for kb := j0 / s.BK; kb <= (j1-1)/s.BK; kb++ {
			if s.Kinds[qb*s.NBK+kb] != Empty {
				return false
			}
		}
	}
	return true
}

// cols returns the key blocks that are not empty for queries [i0, i1), in order, when they lie in
// one query block and Cols lists them; ok is false otherwise (the caller walks every key block).
func (s *Sparse) cols(i0, i1 int) (kbs []int32, ok bool) {
	qb := i0 / s.BQ
	if s.ColStart == nil || qb != (i1-1)/s.BQ {
		return nil, false
	}
	return s.Cols[s.ColStart[qb]:s.ColStart[qb+1]], true
}

// full reports whether the layout keeps every pair of queries [i0, i1) and key block kb.
func (s *Sparse) full(i0, i1, kb int) bool {
	for qb := i0 / s.BQ; qb <= (i1-1)/s.BQ; qb++ {
		if s.Kinds[qb*s.NBK+kb] != Full {
			return false
		}
	}
	return true
}

// rows returns the rows [r0, r1) of queries [i0, i1) whose blocks in key block kb are not empty
// (r0 = r1 when none is), relative to i0.
func (s *Sparse) rows(i0, i1, kb int) (r0, r1 int) {
	first, last := -1, -1
	for qb := i0 / s.BQ; qb <= (i1-1)/s.BQ; qb++ {
		if s.Kinds[qb*s.NBK+kb] != Empty {
			if first < 0 {
				first = qb
			}
			last = qb
		}
	}
	if first < 0 {
		return 0, 0
	}
	return max(first*s.BQ, i0) - i0, min((last+1)*s.BQ, i1) - i0
}
