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
