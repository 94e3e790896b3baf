package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// gateWant returns the gate and the output SiLU (tanh false) or GELUTanh must give for x on path
// i: each step one float32 operation (the conversions keep Go from fusing them), e^z from Sexp on
// the same path.
func gateWant(i isa, tanh bool, x float32) (s, y float32) {
	z := -x
	if tanh {
		c := float32(TanhGELUCubic)
		z = float32(-2*TanhGELUScale) * float32(x+float32(float32(float32(c*x)*x)*x))
	}
	e := []float32{z}
	sexp(i, e, 0)
	s = float32(1 / float32(1+e[0]))
	return s, float32(x * s)
}

// TestGate checks SiLU and GELUTanh on every path against their definitions bit for bit at
// every length up to 150 (the masked tails included) and with y = x, with zeros, infinities,
// NaN, gates that saturate and cubes that overflow; against float64 σ within float32 rounding;
// and that nothing is written outside y and s.
func TestGate(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-40, -1e-40, 100, -100, 87.5, -87.5, 89, -89, 1e20, -1e20, 3e38, -3e38}
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	for _, i := range available() {
		for _, tanh := range []bool{false, true} {
			for n := range 150 {
				x, xIntact := guarded(r, n, 1, -12, 12)
				for j := range x {
					if r.IntN(6) == 0 {
						x[j] = special[r.IntN(len(special))]
					}
				}
				y, yIntact := guarded(r, n, 2, 0, 1)
				s, sIntact := guarded(r, n, 3, 0, 1)
				in := slices.Clone(x)
				gate(i, tanh, y, s, x)
				for j, v := range in {
					ws, wy := gateWant(i, tanh, v)
					if !same(s[j], ws) || !same(y[j], wy) {
						t.Fatalf("%v tanh=%v n=%d: x[%d] = %v: s, y = %v, %v, want %v, %v", i, tanh, n, j, v, s[j], y[j], ws, wy)
					}
				}
				if !xIntact() || !yIntact() || !sIntact() || !slices.Equal(math32bits(x), math32bits(in)) {
					t.Errorf("%v tanh=%v n=%d: wrote outside y and s", i, tanh, n)
				}
				gate(i, tanh, x, s, x) // y = x
				for j, v := range in {
					if _, wy := gateWant(i, tanh, v); !same(x[j], wy) {
						t.Fatalf("%v tanh=%v n=%d, y = x: y[%d] = %v, want %v", i, tanh, n, j, x[j], wy)
					}
				}
			}
		}
	}
}

// TestGateAccuracy holds SiLU's and GELUTanh's gates to float64 σ over x in [−30, 30]: within
// 4·10⁻⁷ relative for SiLU (Sexp's 1 ULP, the sum and the quotient) and within that plus
// |z|·2·10⁻⁷ for the tanh GELU, whose argument z is itself rounded; gates below 2⁻¹²⁶ may be 0.
func TestGateAccuracy(t *testing.T) {
	x := make([]float32, 60001)
	for j := range x {
		x[j] = float32(-30 + float64(j)/1000)
	}
	y, s := make([]float32, len(x)), make([]float32, len(x))
	for _, tanh := range []bool{false, true} {
		if tanh {
			GELUTanh(y, s, x)
		} else {
			SiLU(y, s, x)
		}
		for j, v := range x {
			z := -float64(v)
			if tanh {
				z = -2 * TanhGELUScale * (float64(v) + TanhGELUCubic*math.Pow(float64(v), 3))
			}
			want := 1 / (1 + math.Exp(z))
			tol := 4e-7*want + 0x1p-126 // a gate below 2⁻¹²⁸ is 0: e^z overflows
			if tanh {
				tol += math.Abs(z) * 2e-7 * want
			}
			if d := math.Abs(float64(s[j]) - want); d > tol {
				t.Fatalf("tanh=%v x=%v: gate %v, want %v (error %.3g, tolerance %.3g)", tanh, v, s[j], want, d, tol)
			}
			if d := math.Abs(float64(y[j]) - float64(v)*want); d > tol*math.Abs(float64(v))+6e-8*math.Abs(float64(y[j])) {
				t.Fatalf("tanh=%v x=%v: output %v, want %v", tanh, v, y[j], float64(v)*want)
			}
		}
	}
}

// TestSmul checks Smul on every path bit for bit at every length up to 150, and that nothing
// is written outside dst.
func TestSmul(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, i := range available() {
		for n := range 150 {
			dst, intact := guarded(r, n, 1, 0, 1)
			a, _ := guarded(r, n, 2, -5, 5)
			b, _ := guarded(r, n, 3, -5, 5)
			if n > 0 {
				a[r.IntN(n)] = float32(math.Inf(1))
				b[r.IntN(n)] = float32(math.NaN())
			}
			smul(i, dst, a, b)
			for j := range dst {
				if want := a[j] * b[j]; math.Float32bits(dst[j]) != math.Float32bits(want) && !(want != want && dst[j] != dst[j]) {
					t.Fatalf("%v n=%d: dst[%d] = %v, want %v", i, n, j, dst[j], want)
				}
			}
			if !intact() {
				t.Errorf("%v n=%d: Smul wrote outside dst", i, n)
			}
		}
	}
}

// TestGatePanics checks that short outputs panic instead of being written past.
func TestGatePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"SiLU short y":     func() { SiLU(make([]float32, 2), make([]float32, 3), make([]float32, 3)) },
		"GELUTanh short s": func() { GELUTanh(make([]float32, 3), make([]float32, 2), make([]float32, 3)) },
		"GELU short y":     func() { GELU(make([]float32, 2), make([]float32, 3), make([]float32, 3)) },
		"Smul short b":     func() { Smul(make([]float32, 3), make([]float32, 3), make([]float32, 2)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// geluWant returns Φ(x) as GELU's documentation defines it, written out apart from the kernels.
func geluWant(x float32) float32 {
	u := (float64(x) + 10) * 32
	switch {
	case u != u:
		return x
	case u < 0:
		return 0
	case u >= 640:
		return 1
	}
	k := math.Floor(u)
	t, c := u-k, cdfTable[int(k)]
	p := float64(t * c[3])
	p = float64(t * float64(c[2]+p))
	p = float64(t * float64(c[1]+p))
	return float32(c[0] + p)
}

// TestGELU checks GELU on every path against its definition bit for bit at every length up to
// 150 (the masked tails included), with y = x, with the grid's ends and the values next to them,
// zeros, infinities and NaN (a signalling one keeps its bits); and that nothing is written
// outside y and s.
func TestGELU(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7fa00001), -10, 10, math.Nextafter32(-10, 0), math.Nextafter32(-10, -11), math.Nextafter32(10, 0),
		math.Nextafter32(10, 11), 1e-40, -1e-40, 3e38, -3e38, -0.03125, 0.5}
	for _, i := range available() {
		for n := range 150 {
			x, xIntact := guarded(r, n, 1, -12, 12)
			for j := range x {
				if r.IntN(5) == 0 {
					x[j] = special[r.IntN(len(special))]
				}
			}
			y, yIntact := guarded(r, n, 2, 0, 1)
			s, sIntact := guarded(r, n, 3, 0, 1)
			in := slices.Clone(x)
			gelu(i, y, s, x)
			for j, v := range in {
				ws := geluWant(v)
				if math.Float32bits(s[j]) != math.Float32bits(ws) || math.Float32bits(y[j]) != math.Float32bits(v*ws) {
					t.Fatalf("%v n=%d: x[%d] = %v (%#x): s, y = %v, %v, want %v, %v", i, n, j, v, math.Float32bits(v), s[j], y[j], ws, v*ws)
				}
			}
			if !xIntact() || !yIntact() || !sIntact() || !slices.Equal(math32bits(x), math32bits(in)) {
				t.Errorf("%v n=%d: wrote outside y and s", i, n)
			}
			gelu(i, x, s, x) // y = x
			for j, v := range in {
				if w := v * geluWant(v); math.Float32bits(x[j]) != math.Float32bits(w) {
					t.Fatalf("%v n=%d, y = x: y[%d] = %v, want %v", i, n, j, x[j], w)
				}
			}
		}
	}
}

// TestGELUAccuracy measures GELU's Φ against math.Erfc from −12 to 12: within 5e-8 absolute
// everywhere, 1e-6 relative for x ≥ −4, 5e-5 relative down to −10 (the interpolation's error
// relative to a tiny Φ), and 0 below, where Φ < 1e-23.
func TestGELUAccuracy(t *testing.T) {
	var xs []float32
	for x := -12.0; x <= 12; x += 0.0007 {
		xs = append(xs, float32(x))
	}
	y, s := make([]float32, len(xs)), make([]float32, len(xs))
	GELU(y, s, xs)
	for i, x := range xs {
		want := math.Erfc(-float64(x)/math.Sqrt2) / 2
		d := math.Abs(float64(s[i]) - want)
		rel := 5e-5
		if x >= -4 {
			rel = 1e-6
		}
		if d > 5e-8 || (x >= -10 && d > rel*want) || (x < -10 && s[i] != 0) {
			t.Fatalf("Φ(%v) = %v, want %v", x, s[i], want)
		}
	}
}

// TestGELUGrad checks GELUGrad on every path against its definition bit for bit at every length
// up to 150, with infinities and NaN among x, dy and dx, and that it writes nothing outside dx and
// tmp.
func TestGELUGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	special := []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 20, -20, 1e-30, 3e38}
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	for _, i := range available() {
		for n := range 150 {
			x, xIntact := guarded(r, n, 1, -6, 6)
			dy, dyIntact := guarded(r, n, 2, -1, 1)
			dx, dxIntact := guarded(r, n, 3, -1, 1)
			for _, v := range [][]float32{x, dy, dx} {
				for j := range v {
					if r.IntN(10) == 0 {
						v[j] = special[r.IntN(len(special))]
					}
				}
			}
			y, s := make([]float32, n), make([]float32, n)
			gelu(i, y, s, x)
			want := slices.Clone(dx)
			for j, v := range x {
				e := []float32{float32(-0.5 * float32(v*v))}
				sexp(i, e, 0)
				want[j] += float32(dy[j] * float32(s[j]+float32(float32(v*float32(0.3989422804014327))*e[0])))
			}
			tmp, tmpIntact := guarded(r, n, 4, 0, 1)
			in, gin := slices.Clone(x), slices.Clone(dy)
			geluGrad(i, dx, dy, x, s, tmp[:n:n])
			for j := range dx {
				if !same(dx[j], want[j]) {
					t.Fatalf("%v n=%d: x[%d] = %v: dx %v, want %v", i, n, j, x[j], dx[j], want[j])
				}
			}
			if !xIntact() || !dyIntact() || !dxIntact() || !tmpIntact() || !slices.Equal(math32bits(x), math32bits(in)) || !slices.Equal(math32bits(dy), math32bits(gin)) {
				t.Errorf("%v n=%d: wrote outside dx and tmp", i, n)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("GELUGrad with a short tmp did not panic")
		}
	}()
	GELUGrad(make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 2))
}

// gateGradWant is SiLUGrad's (tanh false) or GELUTanhGrad's gradient factor d for x and its gate
// s, as their documentation writes them, apart from the kernels.
func gateGradWant(tanh bool, x, s float32) float32 {
	ds := float32(s * float32(1-s))
	if !tanh {
		return float32(s + float32(float32(x*s)*float32(1-s)))
	}
	if ds == 0 {
		return s
	}
	t := float32(float32(float32(x*ds)*2) * float32(0.7978845608028654))
	p := float32(1 + float32(float32(float32(3*0.044715)*x)*x))
	return float32(s + float32(t*p))
}

// TestGateGrad checks SiLUGrad and GELUTanhGrad on every path against their definitions bit for
// bit at every length up to 150, with saturated gates (0 and 1, where the tanh GELU's x² may
// overflow), infinities and NaN; and that nothing is written outside dx.
func TestGateGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	specialX := []float32{0, 1e20, -1e20, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3e38}
	specialS := []float32{0, 1, float32(math.NaN()), 0.5}
	for _, i := range available() {
		for _, tanh := range []bool{false, true} {
			for n := range 150 {
				x, xIntact := guarded(r, n, 1, -12, 12)
				dy, dyIntact := guarded(r, n, 2, -1, 1)
				dx, dxIntact := guarded(r, n, 3, -1, 1)
				s := make([]float32, n)
				if tanh {
					GELUTanh(make([]float32, n), s, x)
				} else {
					SiLU(make([]float32, n), s, x)
				}
				for j := range x {
					if r.IntN(8) == 0 {
						x[j] = specialX[r.IntN(len(specialX))]
					}
					if r.IntN(8) == 0 {
						s[j] = specialS[r.IntN(len(specialS))]
					}
				}
				want := slices.Clone(dx)
				for j, v := range x {
					want[j] = float32(want[j] + float32(dy[j]*gateGradWant(tanh, v, s[j])))
				}
				gateGrad(i, tanh, dx, dy, x, s)
				for j := range dx {
					if !same(dx[j], want[j]) {
						t.Fatalf("%v tanh=%v n=%d: x, s = %v, %v: dx %v, want %v", i, tanh, n, x[j], s[j], dx[j], want[j])
					}
				}
				if !xIntact() || !dyIntact() || !dxIntact() {
					t.Errorf("%v tanh=%v n=%d: wrote outside dx", i, tanh, n)
				}
			}
		}
	}
	for name, f := range map[string]func(){
		"SiLUGrad short s":      func() { SiLUGrad(make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 2)) },
		"GELUTanhGrad short dy": func() { GELUTanhGrad(make([]float32, 3), make([]float32, 2), make([]float32, 3), make([]float32, 3)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}
