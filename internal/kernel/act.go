package kernel

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
