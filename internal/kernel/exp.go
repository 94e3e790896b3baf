package kernel

import "math"

// Smax returns the largest value of x, −Inf when x is empty or all −Inf.
func Smax(x []float32) float32 {
	return smax(best, x)
}

// Sexp sets x[i] = exp(x[i] − shift) and returns the sum of the new values. shift must be finite;
// entries equal to −Inf become exactly 0.
func Sexp(x []float32, shift float32) float32 {
	return sexp(best, x, shift)
}

// Sscal multiplies every value of x by s.
func Sscal(s float32, x []float32) {
	for i := range x {
		x[i] *= s
	}
}

func smax(_ isa, x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

func sexp(_ isa, x []float32, shift float32) float32 {
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - shift)))
		x[i] = e
		sum += e
	}
	return sum
}
