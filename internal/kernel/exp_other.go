//go:build !amd64 || purego

package kernel

func smax(_ isa, x []float32) float32 { return smaxGeneric(x) }

func sexp(_ isa, x []float32, shift float32) float32 { return sexpGeneric(x, shift) }

func sexpBF16(i isa, dst []uint16, x []float32, shift float32) float32 {
	return sexpBF16Generic(i, dst, x, shift)
}

func sscal(_ isa, s float32, x []float32) { sscalGeneric(s, x) }

func saxpy(_ isa, alpha float32, x, y []float32) { saxpyGeneric(alpha, x, y) }

func sgrad(_ isa, ds, p []float32, delta float32) { sgradGeneric(ds, p, delta) }

func gate(i isa, tanh bool, y, s, x []float32) { gateGeneric(i, tanh, y, s, x) }

func smul(_ isa, dst, a, b []float32) { smulGeneric(dst, a, b) }

func sumF64(_ isa, x []float32) float64 { return sumF64Generic(x, 0, false) }

func squaresF64(_ isa, x []float32, c float64) float64 { return sumF64Generic(x, c, true) }

func normRow(_ isa, y, x []float32, mean, rstd float32, w, b []float32) {
	normRowGeneric(y, x, mean, rstd, w, b)
}

func gelu(_ isa, y, s, x []float32) { geluGeneric(y, s, x) }

func geluGradAcc(_ isa, dx, dy, x, s, e []float32) { geluGradGeneric(dx, dy, x, s, e) }

func normGrad(_ isa, dw, db, x, g, w []float32, mean, rstd float32) (float64, float64) {
	return normGradGeneric(dw, db, x, g, w, mean, rstd)
}

func normGradInput(_ isa, dx, x, g, w []float32, mean, rstd, a, c float32) {
	normGradInputGeneric(dx, x, g, w, mean, rstd, a, c)
}

func gateGrad(_ isa, tanh bool, dx, dy, x, s []float32) { gateGradGeneric(tanh, dx, dy, x, s) }
