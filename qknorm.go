package mha

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// normHead normalises, in place, rows rows of one head's values in x (row i is x[i·ld :
// i·ld + d], d = len(w)) by Config.QKNorm's RMSNorm of eps and gains w, as nn's RMSNorm computes
// a row: the sum of squares in float64 (kernel.SquaresF64), then x·rstd·w rounded in float32 one
// product at a time (kernel.NormRow). When raw is not nil it keeps each row's input in raw [rows,
// d] and its rstd in rstd [rows], what normHeadGrad needs.
func normHead(x []float32, ld, rows int, w []float32, eps float64, raw, rstd []float32) {
	d := len(w)
	for i := range rows {
		row := x[i*ld : i*ld+d]
		r := float32(1 / math.Sqrt(kernel.SquaresF64(row, 0)/float64(d)+eps))
		if raw != nil {
			copy(raw[i*d:(i+1)*d], row)
			rstd[i] = r
		}
		kernel.NormRow(row, row, 0, r, w, nil)
	}
}

// normHeadGrad is normHead's backward: it turns dy, the gradient of the normalised rows (row i is
// dy[i·ld : i·ld + d]), into the gradient of their inputs, in place, and adds the gains' gradient
// Σ dy·x·rstd into dw [d]. raw and rstd are what normHead kept; scratch holds 2·d values.
func normHeadGrad(dy []float32, ld, rows int, w, raw, rstd, dw, scratch []float32) {
	d := len(w)
	db, dx := scratch[:d], scratch[d:2*d] // RMSNorm has no bias: db is thrown away
	for i := range rows {
		g, x := dy[i*ld:i*ld+d], raw[i*d:(i+1)*d]
		_, sumGN := kernel.NormGrad(dw, db, x, g, w, 0, rstd[i])
		clear(dx)
		kernel.NormGradInput(dx, x, g, w, 0, rstd[i], 0, float32(sumGN/float64(d)))
		copy(g, dx)
	}
}

// normRows is normHead in precision F for the reference computation (run): x [N, width] holds
// heads at offs (the last entry ends them), each normalised by gains w with sums in float64.
func normRows[F kernel.Float](x []F, width int, offs []int, w []float32, eps float64) {
	for r := range len(x) / max(width, 1) {
		for h := range len(offs) - 1 {
			seg := x[r*width+offs[h] : r*width+offs[h+1]]
			ss := 0.0
			for _, v := range seg {
				ss += float64(v) * float64(v)
			}
			rstd := F(1 / math.Sqrt(ss/float64(len(seg))+eps))
			for i, v := range seg {
				seg[i] = v * rstd * F(w[i])
			}
		}
	}
}
