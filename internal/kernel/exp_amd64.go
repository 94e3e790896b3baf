//go:build !purego

package kernel

func smax(i isa, x []float32) float32 {
	switch i {
	case avx512:
		return smaxAVX512(x)
	case avx2:
		return smaxAVX2(x)
	}
	return smaxGeneric(x)
}

func sexp(i isa, x []float32, shift float32) float32 {
	switch i {
	case avx512:
		return sexpAVX512(x, -shift)
	case avx2:
		return sexpAVX2(x, -shift)
	}
	return sexpGeneric(x, shift)
}

// sexpBF16 is SexpBF16 on path i: one pass of sexpBF16AVX512 where the CPU has AVX512_BF16.
func sexpBF16(i isa, dst []uint16, x []float32, shift float32) float32 {
	if i == avx512 && hasBF16 {
		return sexpBF16AVX512(dst, x, -shift)
	}
	return sexpBF16Generic(i, dst, x, shift)
}

func sscal(i isa, s float32, x []float32) {
	switch i {
	case avx512:
		sscalAVX512(s, x)
	case avx2:
		sscalAVX2(s, x)
	default:
		sscalGeneric(s, x)
	}
}

func saxpy(i isa, alpha float32, x, y []float32) {
	if i == avx512 {
		saxpyAVX512(alpha, x, y)
		return
	}
	saxpyGeneric(alpha, x, y)
}

func sgrad(i isa, ds, p []float32, delta float32) {
	switch i {
	case avx512:
		sgradAVX512(ds, p, delta)
	case avx2:
		sgradAVX2(ds, p, delta)
	default:
		sgradGeneric(ds, p, delta)
	}
}

func gate(i isa, tanh bool, y, s, x []float32) {
	switch {
	case i != avx512:
		gateGeneric(i, tanh, y, s, x)
	case tanh:
		geluTanhAVX512(y, s, x)
	default:
		siluAVX512(y, s, x)
	}
}

func smul(i isa, dst, a, b []float32) {
	if i == avx512 {
		smulAVX512(dst, a, b)
		return
	}
	smulGeneric(dst, a, b)
}

func sumF64(i isa, x []float32) float64 {
	if i == avx512 {
		return sumF64AVX512(x, 0)
	}
	return sumF64Generic(x, 0, false)
}

func squaresF64(i isa, x []float32, c float64) float64 {
	if i == avx512 {
		return squaresF64AVX512(x, c)
	}
	return sumF64Generic(x, c, true)
}

func normRow(i isa, y, x []float32, mean, rstd float32, w, b []float32) {
	switch {
	case i != avx512:
		normRowGeneric(y, x, mean, rstd, w, b)
	case b == nil:
		normRowAVX512(y, x, mean, rstd, w, nil)
	default:
		normRowBiasAVX512(y, x, mean, rstd, w, b)
	}
}

func gelu(i isa, y, s, x []float32) {
	if i == avx512 {
		geluAVX512(y, s, x, &cdfTable)
		return
	}
	geluGeneric(y, s, x)
}

func geluGradAcc(i isa, dx, dy, x, s, e []float32) {
	if i == avx512 {
		geluGradAVX512(dx, dy, x, s, e)
		return
	}
	geluGradGeneric(dx, dy, x, s, e)
}

func normGrad(i isa, dw, db, x, g, w []float32, mean, rstd float32) (float64, float64) {
	if i == avx512 {
		return normGradAVX512(dw, db, x, g, w, mean, rstd)
	}
	return normGradGeneric(dw, db, x, g, w, mean, rstd)
}

func normGradInput(i isa, dx, x, g, w []float32, mean, rstd, a, c float32) {
	if i == avx512 {
		normGradInputAVX512(dx, x, g, w, mean, rstd, a, c)
		return
	}
	normGradInputGeneric(dx, x, g, w, mean, rstd, a, c)
}

func gateGrad(i isa, tanh bool, dx, dy, x, s []float32) {
	switch {
	case i != avx512:
		gateGradGeneric(tanh, dx, dy, x, s)
	case tanh:
		geluTanhGradAVX512(dx, dy, x, s)
	default:
		siluGradAVX512(dx, dy, x, s)
	}
}
