package nn

import "github.com/mhalab/mha/internal/kernel"

// actBlock is the number of values one activation task handles.
const actBlock = 2048

// actKind is a gated activation y = x·s(x), s one of the gates below.
type actKind int

const (
	actGELU     actKind = iota // s = Φ(x), the standard normal CDF: the exact GELU, PyTorch's default
	actGELUTanh                // s = σ(2·√(2/π)·(x + 0.044715·x³)) = (1 + tanh(√(2/π)·(x + 0.044715·x³)))/2
	actSiLU                    // s = σ(x): SiLU (swish), SwiGLU's gate
)

// activationOf returns the activation of the feed-forward network of a config whose Activation
// is name (SiLU for SwiGLU, GELU's tanh form for GeGLU).
func activationOf(name string) actKind {
	switch name {
	case GELUNew, GELUPyTorchTanh, GeGLU:
		return actGELUTanh
	case SwiGLU:
		return actSiLU
	}
	return actGELU
}

// activation is an elementwise activation y = x·s(x) (see actKind), with its backward
// dy/dx = s(x) + x·s′(x).
type activation struct {
	kind actKind
	x    []float32 // the last forward's input (not owned)
	y    []float32 // its output
	gate []float32 // s(x), kept for backward
}

// forward returns y = x·s(x) for the n values of x, in the module's buffer. x must stay
// unchanged until backward has run. Φ is kernel.GELU's; σ(z) is 1/(1 + e^(−z)) as kernel.SiLU
// and kernel.GELUTanh compute it: 0 where e^(−z) overflows.
func (a *activation) forward(r *runner, x []float32) []float32 {
	n := len(x)
	a.x = x
	a.y = kernel.Grow(a.y, n)
	a.gate = kernel.Grow(a.gate, n)
	r.rows(n, actBlock, func(_, _, i0, i1 int) {
		y, s, x := a.y[i0:i1], a.gate[i0:i1], x[i0:i1]
		switch a.kind {
		case actGELU:
			kernel.GELU(y, s, x)
		case actGELUTanh:
			kernel.GELUTanh(y, s, x)
		case actSiLU:
			kernel.SiLU(y, s, x)
		}
	})
	return a.y
}

// backward adds dL/dx = dy·(s(x) + x·s′(x)) into dx, given dy = dL/dy of the last forward:
// s′ is φ, the standard normal density, for the exact GELU; σ(1 − σ)·2·√(2/π)·(1 + 3·0.044715·x²)
// for the tanh approximation; σ(1 − σ) for SiLU.
func (a *activation) backward(r *runner, dy, dx []float32) {
	r.rows(len(dy), actBlock, func(worker, _, i0, i1 int) {
		x, s, g, out := a.x[i0:i1], a.gate[i0:i1], dy[i0:i1], dx[i0:i1]
		switch a.kind {
		case actGELU:
			kernel.GELUGrad(out, g, x, s, r.scratch(worker, i1-i0))
		case actGELUTanh:
			kernel.GELUTanhGrad(out, g, x, s)
		case actSiLU:
			kernel.SiLUGrad(out, g, x, s)
		}
	})
}
