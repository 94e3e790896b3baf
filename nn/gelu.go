package nn

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// geluBlock is the number of values one GELU task handles.
const geluBlock = 2048

// gelu is the exact GELU, PyTorch's default: y = x·Φ(x), with Φ the standard normal CDF.
type gelu struct {
	x   []float32 // the last forward's input (not owned)
	y   []float32 // its output
	cdf []float32 // Φ(x), kept for backward
}

// forward returns y = x·Φ(x) for the n values of x, in the module's buffer. x must stay
// unchanged until backward has run.
func (g *gelu) forward(r *runner, x []float32) []float32 {
	n := len(x)
	g.x = x
	g.y = kernel.Grow(g.y, n)
	g.cdf = kernel.Grow(g.cdf, n)
	r.rows(n, geluBlock, func(_, _, i0, i1 int) {
		normalCDF(x[i0:i1], g.cdf[i0:i1])
		for i := i0; i < i1; i++ {
			g.y[i] = x[i] * g.cdf[i]
		}
	})
	return g.y
}

// backward adds dL/dx = dy·(Φ(x) + x·φ(x)) into dx, given dy = dL/dy of the last forward, where
// φ is the standard normal density.
func (g *gelu) backward(r *runner, dy, dx []float32) {
	r.rows(len(dy), geluBlock, func(worker, _, i0, i1 int) {
		e := r.scratch(worker, i1-i0)
		for i := range e {
			x := g.x[i0+i]
			e[i] = -0.5 * x * x
		}
		kernel.Sexp(e, 0)
		const invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
		for i := range e {
			x := g.x[i0+i]
			dx[i0+i] += dy[i0+i] * (g.cdf[i0+i] + x*invSqrt2Pi*e[i])
		}
	})
}

// normalCDF sets cdf[i] = Φ(x[i]) by cubic Hermite interpolation between the exact values of Φ
// and of its derivative φ at the nodes of cdfTable; below cdfLo it gives 0 (Φ(−10) < 1e-23),
// above −cdfLo 1. The error is below 5e-8 (float32 rounding), and below 1e-6 relative for
// x ≥ −4; in the far left tail the interpolation's error relative to the tiny Φ grows to 3e-5.
func normalCDF(x, cdf []float32) {
	for i, v := range x {
		u := (float64(v) - cdfLo) * cdfScale
		switch {
		case u >= 0 && u < cdfIntervals:
			k := int(u)
			s, c := u-float64(k), &cdfTable[k]
			cdf[i] = float32(c[0] + s*(c[1]+s*(c[2]+s*c[3])))
		case u < 0:
			cdf[i] = 0
		case u >= cdfIntervals:
			cdf[i] = 1
		default:
			cdf[i] = v // NaN
		}
	}
}

// The interpolation grid of normalCDF: cdfIntervals intervals of width 1/cdfScale from cdfLo to
// −cdfLo.
const (
	cdfLo        = -10
	cdfScale     = 32
	cdfIntervals = -2 * cdfLo * cdfScale
)

// cdfTable holds, per interval, the coefficients in s ∈ [0, 1) of the cubic that matches Φ and
// φ at both ends. It is computed once and only read.
var cdfTable = func() (t [cdfIntervals][4]float64) {
	const h = 1.0 / cdfScale
	node := func(k int) (p, d float64) { // Φ and h·φ at node k
		x := cdfLo + float64(k)*h
		return math.Erfc(-x/math.Sqrt2) / 2, h * math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
	}
	for k := range t {
		p0, d0 := node(k)
		p1, d1 := node(k + 1)
		t[k] = [4]float64{p0, d0, 3*(p1-p0) - 2*d0 - d1, 2*(p0-p1) + d0 + d1}
	}
	return t
}()
