package nn

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// normRows is the number of rows one normalisation task handles.
const normRows = 64

// normLayer is a normalisation over the last dimension d, per row, of one of two kinds:
//
//	LayerNorm (nn.LayerNorm):        y = (x − mean)/√(var + eps)·w + b, with the biased variance
//	RMSNorm (Hugging Face's Llama):  y = x/√(mean(x²) + eps)·w, no shift
//
// Both are the same computation with RMSNorm's mean taken as 0 and no bias.
type normLayer struct {
	d            int
	rms          bool
	eps          float64
	weight, bias *Param // bias is nil for RMSNorm

	x          []float32 // the last forward's input [n, d] (not owned)
	y          []float32 // its output [n, d]
	mean, rstd []float32 // per row: the mean (0 for RMSNorm) and 1/√(var + eps)
	partial    []float32 // backward's per-task sums of dw and db, [tasks, 2d]
}

// newNorm returns the normalisation layer called name, of c's kind and eps.
func newNorm(ps params, c Config, name string) *normLayer {
	w := ps.get(name + ".weight")
	l := &normLayer{d: w.Value.Shape[0], rms: c.NormKind == RMSNorm, eps: c.normEps(), weight: w}
	if !l.rms {
		l.bias = ps.get(name + ".bias")
	}
	return l
}

// forward normalises the n rows of x [n, d] and returns y, the module's buffer. x must stay
// unchanged until backward has run. The mean and the sum of squared deviations are float64 sums
// (kernel.SumF64, kernel.SquaresF64); y rounds (x − mean)·rstd·w (+ b) in float32
// (kernel.NormRow), in Hugging Face's order for RMSNorm: the normalised x first, then the gain.
func (l *normLayer) forward(r *runner, x []float32, n int) []float32 {
	d := l.d
	l.x = x
	l.y = kernel.Grow(l.y, n*d)
	l.mean = kernel.Grow(l.mean, n)
	l.rstd = kernel.Grow(l.rstd, n)
	w := l.weight.Value.Data
	var b []float32
	if l.bias != nil {
		b = l.bias.Value.Data
	}
	r.rows(n, normRows, func(_, _, i0, i1 int) {
		for i := i0; i < i1; i++ {
			row := x[i*d : (i+1)*d]
			var mean float64
			if !l.rms {
				mean = kernel.SumF64(row) / float64(d)
			}
			rstd := 1 / math.Sqrt(kernel.SquaresF64(row, mean)/float64(d)+l.eps)
			m, s := float32(mean), float32(rstd)
			kernel.NormRow(l.y[i*d:(i+1)*d], row, m, s, w, b)
			l.mean[i], l.rstd[i] = m, s
		}
	})
	return l.y
}

// backward adds dL/dx into dx [n, d] and dL/dw (and dL/db) into the gradients, given dy = dL/dy
// [n, d] of the last forward. With norm = (x − mean)·rstd and dnorm = w·dy,
//
//	dx = rstd·(dnorm − mean(dnorm) − norm·mean(dnorm·norm))
//
// where RMSNorm, which subtracts no mean, drops the mean(dnorm) term. Each task sums its rows'
// dw and db; the task sums are added in task order.
func (l *normLayer) backward(r *runner, dy, dx []float32, n int) {
	d := l.d
	tasks := ceilDiv(n, normRows)
	l.partial = kernel.Grow(l.partial, tasks*2*d)
	w := l.weight.Value.Data
	r.rows(n, normRows, func(_, task, i0, i1 int) {
		dw := l.partial[task*2*d : task*2*d+d]
		db := l.partial[task*2*d+d : (task+1)*2*d]
		clear(dw)
		clear(db)
		for i := i0; i < i1; i++ {
			x, g, out := l.x[i*d:(i+1)*d], dy[i*d:(i+1)*d], dx[i*d:(i+1)*d]
			m, s := l.mean[i], l.rstd[i]
			sumG, sumGN := kernel.NormGrad(dw, db, x, g, w, m, s) // Σ dnorm and Σ dnorm·norm
			if l.rms {
				sumG = 0
			}
			kernel.NormGradInput(out, x, g, w, m, s, float32(sumG/float64(d)), float32(sumGN/float64(d)))
		}
	})
	gw := l.weight.Grad.Data
	for t := range tasks {
		kernel.Axpy(1, l.partial[t*2*d:t*2*d+d], gw)
		if l.bias != nil {
			kernel.Axpy(1, l.partial[t*2*d+d:(t+1)*2*d], l.bias.Grad.Data)
		}
	}
}
