package kernel

import (
	"fmt"
	"math"
)

// SumF64 returns the sum of x in float64, in a fixed order that every instruction set follows,
// so that its bits do not depend on the CPU: 32 partial sums, the ith value going to sum i mod
// 32 in order of i, then combined pairwise as (s[l] + s[l+8]) + (s[l+16] + s[l+24]) for l < 8,
// then in halves (4 + 4, 2 + 2, 1 + 1). Each addition rounds to float64, which holds every
// float32 exactly. A normalisation's mean is such a sum.
func SumF64(x []float32) float64 {
	return sumF64(best, x)
}

// SquaresF64 returns Σ (float64(x[i]) − c)², each term added with one fused multiply-add of the
// difference by itself, in SumF64's order: a normalisation's sum of squared deviations from
// its mean c (RMSNorm's sum of squares with c = 0).
func SquaresF64(x []float32, c float64) float64 {
	return squaresF64(best, x, c)
}

// NormRow sets y[i] = ((x[i] − mean)·rstd)·w[i] for i < len(y), then adds b[i] when b is not
// nil: the output of a LayerNorm or RMSNorm row (mean 0) with gain w and bias b. Each step is
// one float32 operation in that order, on every instruction set. y may be x. It panics when x,
// w or a non-nil b is shorter than y.
func NormRow(y, x []float32, mean, rstd float32, w, b []float32) {
	if len(x) < len(y) || len(w) < len(y) || b != nil && len(b) < len(y) {
		panic(fmt.Sprintf("kernel: NormRow of %d values with x, w, b of %d, %d, %d", len(y), len(x), len(w), len(b)))
	}
	normRow(best, y, x, mean, rstd, w, b)
}

// sumLanes is the partial sums of SumF64 and SquaresF64.
const sumLanes = 32

func sumF64Generic(x []float32, c float64, squares bool) float64 {
	var s [sumLanes]float64
	for i, v := range x {
		if squares {
			d := float64(v) - c
			s[i%sumLanes] = math.FMA(d, d, s[i%sumLanes])
		} else {
			s[i%sumLanes] += float64(v)
		}
	}
	return reduceLanes(&s)
}

// reduceLanes sums the partial sums of SumF64 in its order.
func reduceLanes(s *[sumLanes]float64) float64 {
	for l := range 8 {
		s[l] = (s[l] + s[l+8]) + (s[l+16] + s[l+24])
	}
	for h := 4; h >= 1; h /= 2 {
		for l := range h {
			s[l] += s[l+h]
		}
	}
	return s[0]
}

func normRowGeneric(y, x []float32, mean, rstd float32, w, b []float32) {
	for i, v := range x {
		y[i] = float32((v - mean) * rstd * w[i]) // the conversion keeps the product from fusing with b's addition
	}
	if b != nil {
		for i := range y {
			y[i] += b[i]
		}
	}
}

// NormGrad is the first pass of a normalisation row's backward, given its input x, the gradient
// g of its output, its gain w, and the mean and rstd its forward used: with norm = (x[i] −
// mean)·rstd and dn = w[i]·g[i], each one float32 operation at a time, it adds g[i]·norm to
// dw[i] and g[i] to db[i], and returns Σ dn and Σ dn·norm (the product rounded to float32) as
// float64 sums in SumF64's order, the same bits on every instruction set. It panics when dw,
// db, g or w is shorter than x.
func NormGrad(dw, db, x, g, w []float32, mean, rstd float32) (sumG, sumGN float64) {
	n := len(x)
	if len(dw) < n || len(db) < n || len(g) < n || len(w) < n {
		panic(fmt.Sprintf("kernel: NormGrad of %d values with dw, db, g, w of %d, %d, %d, %d", n, len(dw), len(db), len(g), len(w)))
	}
	return normGrad(best, dw[:n], db[:n], x, g[:n], w[:n], mean, rstd)
}

// NormGradInput is the second pass of a normalisation row's backward: it adds
// rstd·((w[i]·g[i] − a) − ((x[i] − mean)·rstd)·c) to dx[i] for i < len(dx), each step one
// float32 operation in that order on every instruction set, where a and c are the means of dn
// and of dn·norm (NormGrad's sums over the row's length; a = 0 for RMSNorm). It panics when x,
// g or w is shorter than dx.
func NormGradInput(dx, x, g, w []float32, mean, rstd, a, c float32) {
	n := len(dx)
	if len(x) < n || len(g) < n || len(w) < n {
		panic(fmt.Sprintf("kernel: NormGradInput of %d values with x, g, w of %d, %d, %d", n, len(x), len(g), len(w)))
	}
	normGradInput(best, dx, x[:n], g[:n], w[:n], mean, rstd, a, c)
}

func normGradGeneric(dw, db, x, g, w []float32, mean, rstd float32) (sumG, sumGN float64) {
	var sg, sgn [sumLanes]float64
	for i, v := range x {
		norm := float32((v - mean) * rstd)
		dn := float32(w[i] * g[i])
		sg[i%sumLanes] += float64(dn)
		sgn[i%sumLanes] += float64(float32(dn * norm))
		dw[i] += float32(g[i] * norm)
		db[i] += g[i]
	}
	return reduceLanes(&sg), reduceLanes(&sgn)
}

func normGradInputGeneric(dx, x, g, w []float32, mean, rstd, a, c float32) {
	for i, v := range x {
		norm := float32((v - mean) * rstd)
		dx[i] += float32(rstd * (float32(float32(w[i]*g[i])-a) - float32(norm*c)))
	}
}
