package nn

import (
	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/proj"
)

// linear is nn.Linear: y = x·Wᵀ + b with W [out, in] and b [out] (or no b), over n rows of
// x [n, in]. Weights stored [in, out], as GPT-2's Conv1D, are transposed by whoever loads them.
type linear struct {
	in, out      int
	weight, bias *Param // bias is nil in a Linear without one

	x []float32 // the last forward's input [n, in], read by backward (not owned)
	y []float32 // the last forward's output [n, out]
}

// newLinear returns the Linear called name, with a bias when the layout has name.bias.
func newLinear(ps params, name string) *linear {
	return linearOf(ps.get(name+".weight"), ps[name+".bias"])
}

// linearOf returns the Linear of weight w [out, in] and bias b [out] (or nil); w may belong to
// another module too, as a tied output head's is the token embedding.
func linearOf(w, b *Param) *linear {
	shape := w.Shape()
	return &linear{out: shape[0], in: shape[1], weight: w, bias: b}
}

// forward returns y = x·Wᵀ + b for x [n, in]; y is the module's buffer, overwritten by the next
// forward. x must stay unchanged until backward has run.
func (l *linear) forward(r *runner, x []float32, n int) []float32 {
	l.x = x
	l.y = kernel.Grow(l.y, n*l.out)
	var b []float32
	if l.bias != nil {
		b = l.bias.Value.Data
	}
	r.project(proj.Gemm{X: x, LdX: l.in, XRows: n, K: l.in, W: l.weight.matrix(), LdW: l.in, Trans: true, Bias: b,
		C: l.y, LdC: l.out, CRows: n, Rows: n, N: l.out, Batches: 1, BF16: r.compute == mha.ComputeBFloat16})
	return l.y
}

// backward adds dL/dW = dyᵀ·x (unless W is held in half precision, without a gradient) and
// dL/db = Σ_rows dy into the gradients and, when dx is not nil, dL/dx = dy·W into dx [n, in],
// given dy = dL/dy [n, out] of the last forward.
func (l *linear) backward(r *runner, dy, dx []float32, n int) {
	if l.weight.Grad != nil {
		r.gemmAcc(l.out, l.in, n, dy, l.x, l.weight.Grad.Data)
	}
	if l.bias != nil {
		sumRows(r, dy, n, l.out, l.bias.Grad.Data)
	}
	if dx != nil {
		r.project(proj.Gemm{X: dy, LdX: l.out, XRows: n, K: l.out, W: l.weight.matrix(), LdW: l.in, Beta: 1,
			C: dx, LdC: l.in, CRows: n, Rows: n, N: l.in, Batches: 1})
	}
}

// sumRows adds the n rows of x [n, width] into dst [width], in tasks of gemmCols columns, each
// summing its rows in order.
func sumRows(r *runner, x []float32, n, width int, dst []float32) {
	r.rows(width, gemmCols, func(_, _, j0, j1 int) {
		for i := range n {
			kernel.Axpy(1, x[i*width+j0:i*width+j1], dst[j0:j1])
		}
	})
}
