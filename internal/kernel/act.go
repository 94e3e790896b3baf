package kernel

import (
	"fmt"
	"math"
)

// The constants of GELU's tanh approximation, GELU(x) ≈ x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))/2.
const (
	TanhGELUScale = 0.7978845608028654 // √(2/π)
	TanhGELUCubic = 0.044715
)

// SiLU sets s[i] = σ(x[i]) = 1/(1 + e^(−x[i])) and y[i] = x[i]·s[i], SiLU (swish) and its gate,
// for i < len(x), on the fastest instruction set the CPU has. e^(−x) is Sexp's exp; every other
// step is one float32 operation, so every path gives the bits of the Go expressions over
// Sexp's values: s is 0 where e^(−x) overflows, 1 where it underflows, and NaN stays NaN. y may
// be x; s must not share memory with either. It panics when y or s is shorter than x.
func SiLU(y, s, x []float32) {
	gate(best, false, y[:len(x)], s[:len(x)], x)
}

// GELUTanh sets s[i] = σ(2·√(2/π)·(x + 0.044715·x³)) = (1 + tanh(√(2/π)·(x + 0.044715·x³)))/2
// and y[i] = x[i]·s[i], GELU's tanh approximation (Hugging Face's gelu_new, PyTorch's
// approximate="tanh") and its gate, for x = x[i], i < len(x), on the fastest instruction set
// the CPU has. s is computed as 1/(1 + e^z), z = −2·√(2/π)·(x + ((0.044715·x)·x)·x), each step
// one float32 operation in that order and e^z Sexp's exp, so every path gives the same bits.
// y may be x; s must not share memory with either. It panics when y or s is shorter than x.
func GELUTanh(y, s, x []float32) {
	gate(best, true, y[:len(x)], s[:len(x)], x)
}

// GELU sets s[i] = Φ(x[i]), the standard normal CDF, and y[i] = x[i]·s[i], the exact GELU
// (PyTorch's default), for i < len(x), on the fastest instruction set the CPU has. Φ is
// interpolated by cubic Hermite polynomials between its exact values and those of its
// derivative φ at 640 nodes from −10 to 10, in float64 step by step as the Go code writes it,
// so every path gives the same bits: the error is below 5e-8 (float32 rounding), and below 1e-6
// relative for x ≥ −4; in the far left tail the error relative to the tiny Φ grows to 3e-5.
// Below −10 Φ is 0 (Φ(−10) < 1e-23), from 10 on 1, and NaN stays NaN. y may be x; s must not
// share memory with either. It panics when y or s is shorter than x.
func GELU(y, s, x []float32) {
	gelu(best, y[:len(x)], s[:len(x)], x)
}

// GELUGrad adds the exact GELU's gradient dy[i]·(Φ(x[i]) + x[i]·φ(x[i])) to dx[i] for i <
// len(dx), given s[i] = Φ(x[i]) as GELU set it, on the fastest instruction set the CPU has:
// φ(x) = e^(−x²/2)/√(2π), with x² one float32 product and e^ Sexp's, is written into tmp, then
// each step of dy·(s + (x·(1/√(2π)))·e) is one float32 operation in that order on every path. It
// panics when dy, x, s or tmp is shorter than dx.
func GELUGrad(dx, dy, x, s, tmp []float32) {
	n := len(dx)
	if len(dy) < n || len(x) < n || len(s) < n || len(tmp) < n {
		panic(fmt.Sprintf("kernel: GELUGrad of %d values with dy, x, s, tmp of %d, %d, %d, %d", n, len(dy), len(x), len(s), len(tmp)))
	}
	geluGrad(best, dx, dy[:n], x[:n], s[:n], tmp[:n])
}

// geluGrad is GELUGrad on path i, with dy, x, s and e as long as dx.
func geluGrad(i isa, dx, dy, x, s, e []float32) {
	smul(i, e, x, x)
	sscal(i, -0.5, e)
	sexp(i, e, 0)
	geluGradAcc(i, dx, dy, x, s, e)
}

// SiLUGrad adds SiLU's gradient dy[i]·(s + x·s·(1 − s)) to dx[i] for i < len(dx), with x = x[i]
// and s = s[i] = σ(x) as SiLU set it, each step one float32 operation in the order written, on
// every instruction set. It panics when dy, x or s is shorter than dx.
func SiLUGrad(dx, dy, x, s []float32) {
	checkGrad("SiLUGrad", dx, dy, x, s)
	gateGrad(best, false, dx, dy[:len(dx)], x[:len(dx)], s[:len(dx)])
}

// GELUTanhGrad adds the tanh GELU's gradient dy[i]·(s + ((x·s·(1 − s))·2·√(2/π))·(1 +
// 3·0.044715·x²)) to dx[i] for i < len(dx), with x = x[i] and s = s[i] as GELUTanh set it,
// each step one float32 operation in the order written (x·(s·(1 − s)) first, 3·0.044715 one
// constant), on every instruction set; where s·(1 − s) is 0 (the gate saturated, and x² may
// have overflowed) the gradient is dy[i]·s. It panics when dy, x or s is shorter than dx.
func GELUTanhGrad(dx, dy, x, s []float32) {
	checkGrad("GELUTanhGrad", dx, dy, x, s)
	gateGrad(best, true, dx, dy[:len(dx)], x[:len(dx)], s[:len(dx)])
}

// checkGrad panics when dy, x or s is shorter than dx.
func checkGrad(name string, dx, dy, x, s []float32) {
	if n := len(dx); len(dy) < n || len(x) < n || len(s) < n {
		panic(fmt.Sprintf("kernel: %s of %d values with dy, x, s of %d, %d, %d", name, n, len(dy), len(x), len(s)))
	}
}

// gateGradGeneric is SiLUGrad (tanh false) or GELUTanhGrad in Go.
func gateGradGeneric(tanh bool, dx, dy, x, s []float32) {
	for i, v := range x {
		ds := float32(s[i] * (1 - s[i]))
		var d float32
		switch {
		case !tanh:
			d = s[i] + float32(float32(v*s[i])*(1-s[i]))
		case ds != 0:
			d = s[i] + float32(float32(float32(v*ds)*2*TanhGELUScale)*(1+float32(float32(3*TanhGELUCubic*v)*v)))
		default:
			d = s[i]
		}
		dx[i] += float32(dy[i] * d)
	}
}

// invSqrt2Pi is 1/√(2π), the standard normal density's factor.
const invSqrt2Pi = 0.3989422804014327

func geluGradGeneric(dx, dy, x, s, e []float32) {
	for i, v := range x {
		dx[i] += dy[i] * float32(s[i]+float32(float32(v*invSqrt2Pi)*e[i]))
	}
}

// The interpolation grid of GELU's Φ: cdfIntervals intervals of width 1/cdfScale from cdfLo to
// −cdfLo. geluAVX512 holds −cdfLo, cdfScale and cdfIntervals as constants of its own.
const (
	cdfLo        = -10
	cdfScale     = 32
	cdfIntervals = -2 * cdfLo * cdfScale
)

// cdfTable holds, per interval, the coefficients in t ∈ [0, 1) of the cubic that matches Φ and
// φ at both ends. It is computed once and only read.
var cdfTable = func() (tab [cdfIntervals][4]float64) {
	const h = 1.0 / cdfScale
	node := func(k int) (p, d float64) { // Φ and h·φ at node k
		x := cdfLo + float64(k)*h
		return math.Erfc(-x/math.Sqrt2) / 2, h * math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
	}
	for k := range tab {
		p0, d0 := node(k)
		p1, d1 := node(k + 1)
		tab[k] = [4]float64{p0, d0, 3*(p1-p0) - 2*d0 - d1, 2*(p0-p1) + d0 + d1}
	}
	return tab
}()

// geluGeneric is GELU in Go.
func geluGeneric(y, s, x []float32) {
	for i, v := range x {
		u := (float64(v) - cdfLo) * cdfScale
		switch {
		case u >= 0 && u < cdfIntervals:
			k := int(u)
			t, c := u-float64(k), &cdfTable[k]
			s[i] = float32(c[0] + float64(t*float64(c[1]+float64(t*float64(c[2]+float64(t*c[3]))))))
		case u < 0:
			s[i] = 0
		case u >= cdfIntervals:
			s[i] = 1
		default:
			s[i] = v // NaN
		}
	}
	smulGeneric(y, x, s)
}

// Smul sets dst[i] = a[i]·b[i] for i < len(dst). It panics when a or b is shorter than dst.
func Smul(dst, a, b []float32) {
	smul(best, dst, a[:len(dst)], b[:len(dst)])
}

// gateGeneric is SiLU (tanh false) or GELUTanh in Go, with Sexp on path i.
func gateGeneric(i isa, tanh bool, y, s, x []float32) {
	for j, v := range x {
		if tanh {
			s[j] = -2 * TanhGELUScale * (v + TanhGELUCubic*v*v*v)
		} else {
			s[j] = -v
		}
	}
	sexp(i, s, 0)
	for j, e := range s {
		s[j] = 1 / (1 + e)
		y[j] = x[j] * s[j]
	}
}

func smulGeneric(dst, a, b []float32) {
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}
