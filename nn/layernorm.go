package nn

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// layerNormEps is nn.LayerNorm's default eps.
const layerNormEps = 1e-5

// normRows is the number of rows one LayerNorm task handles.
const normRows = 64

// layerNorm is nn.LayerNorm over the last dimension d: y = (x − mean)/√(var + eps)·w + b per
// row, with the biased variance.
type layerNorm struct {
	d            int
	weight, bias *Param

	x          []float32 // the last forward's input [n, d] (not owned)
	y          []float32 // its output [n, d]
	mean, rstd []float32 // per row: the mean and 1/√(var + eps)
	partial    []float32 // backward's per-task sums of dw and db, [tasks, 2d]
}

func newLayerNorm(ps params, name string) *layerNorm {
	w := ps.get(name + ".weight")
	return &layerNorm{d: w.Value.Shape[0], weight: w, bias: ps.get(name + ".bias")}
}

// forward normalises the n rows of x [n, d] and returns y, the module's buffer. x must stay
// unchanged until backward has run.
func (l *layerNorm) forward(r *runner, x []float32, n int) []float32 {
	d := l.d
	l.x = x
	l.y = kernel.Grow(l.y, n*d)
	l.mean = kernel.Grow(l.mean, n)
	l.rstd = kernel.Grow(l.rstd, n)
	w, b := l.weight.Value.Data, l.bias.Value.Data
	r.rows(n, normRows, func(_, _, i0, i1 int) {
		for i := i0; i < i1; i++ {
			row, out := x[i*d:(i+1)*d], l.y[i*d:(i+1)*d]
			var sum float64
			for _, v := range row {
				sum += float64(v)
			}
			mean := sum / float64(d)
			var ss float64
			for _, v := range row {
				ss += (float64(v) - mean) * (float64(v) - mean)
			}
			rstd := 1 / math.Sqrt(ss/float64(d)+layerNormEps)
			m, s := float32(mean), float32(rstd)
			for j, v := range row {
				out[j] = (v-m)*s*w[j] + b[j]
			}
			l.mean[i], l.rstd[i] = m, s
		}
	})
	return l.y
}

// backward adds dL/dx into dx [n, d] and dL/dw, dL/db into the gradients, given dy = dL/dy
// [n, d] of the last forward. Each task sums its rows' dw and db; the task sums are added in
// task order.
func (l *layerNorm) backward(r *runner, dy, dx []float32, n int) {
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
			var sumG, sumGN float64 // Σ dnorm and Σ dnorm·norm, with dnorm = w·dy
			for j, v := range x {
				norm := (v - m) * s
				dn := w[j] * g[j]
				sumG += float64(dn)
				sumGN += float64(dn * norm)
				dw[j] += g[j] * norm
				db[j] += g[j]
			}
			a, c := float32(sumG/float64(d)), float32(sumGN/float64(d))
			for j, v := range x {
				norm := (v - m) * s
				out[j] += s * (w[j]*g[j] - a - norm*c)
			}
		}
	})
	gw, gb := l.weight.Grad.Data, l.bias.Grad.Data
	for t := range tasks {
		kernel.Axpy(1, l.partial[t*2*d:t*2*d+d], gw)
		kernel.Axpy(1, l.partial[t*2*d+d:(t+1)*2*d], gb)
	}
}
