package kernel

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// sumWant is SumF64 (squares false) or SquaresF64 as their documentation defines them, written
// out apart from the kernels: 32 partial sums in order, then the fixed pairing.
func sumWant(x []float32, c float64, squares bool) float64 {
	var s [32]float64
	for i, v := range x {
		if squares {
			d := float64(v) - c
			s[i%32] = math.FMA(d, d, s[i%32])
		} else {
			s[i%32] = s[i%32] + float64(v)
		}
	}
	var t [8]float64
	for l := range t {
		t[l] = (s[l] + s[l+8]) + (s[l+16] + s[l+24])
	}
	u := [4]float64{t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]}
	return (u[0] + u[2]) + (u[1] + u[3])
}

// sumExact is Σ x[i] (or Σ (x[i] − c)²) in exact arithmetic, rounded to float64, and Σ of the
// terms' magnitudes.
func sumExact(x []float32, c float64, squares bool) (sum, abs float64) {
	var s big.Float
	s.SetPrec(2000)
	for _, v := range x {
		var d big.Float
		d.SetPrec(2000).SetFloat64(float64(v))
		if squares {
			var cc big.Float
			cc.SetPrec(2000).SetFloat64(c)
			d.Sub(&d, &cc)
			d.Mul(&d, &d)
		}
		s.Add(&s, &d)
		f, _ := d.Float64()
		abs += math.Abs(f)
	}
	sum, _ = s.Float64()
	return sum, abs
}

// TestSumF64 checks SumF64 and SquaresF64 on every path against their definition bit for bit
// at every length up to 200 (every masked tail), with values over 40 decades so that the order
// of the additions shows in the bits, with infinities and NaN; against the exact sum within
// float64 rounding; and that x is left as it was.
func TestSumF64(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) || (a != a && b != b) }
	for _, i := range available() {
		for _, squares := range []bool{false, true} {
			for n := range 201 {
				x := make([]float32, n)
				for j := range x {
					x[j] = float32(math.Pow(10, -20+40*r.Float64()) * float64(1-2*r.IntN(2)))
				}
				c := 0.0
				if squares {
					c = r.NormFloat64() * 1e10
				}
				in := slices.Clone(x)
				var got float64
				if squares {
					got = squaresF64(i, x, c)
				} else {
					got = sumF64(i, x)
				}
				if want := sumWant(x, c, squares); !same(got, want) {
					t.Fatalf("%v squares=%v n=%d: %v, want %v", i, squares, n, got, want)
				}
				exact, abs := sumExact(x, c, squares)
				if math.Abs(got-exact) > float64(n+2)*0x1p-52*abs {
					t.Errorf("%v squares=%v n=%d: %v, exact %v (Σ|terms| %v)", i, squares, n, got, exact, abs)
				}
				if !slices.Equal(math32bits(x), math32bits(in)) {
					t.Errorf("%v squares=%v n=%d: x changed", i, squares, n)
				}
				if n > 0 { // a NaN or an infinity anywhere
					k := r.IntN(n)
					for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
						x[k] = v
						if squares {
							got = squaresF64(i, x, c)
						} else {
							got = sumF64(i, x)
						}
						if want := sumWant(x, c, squares); !same(got, want) {
							t.Fatalf("%v squares=%v n=%d, x[%d] = %v: %v, want %v", i, squares, n, k, v, got, want)
						}
					}
				}
			}
		}
	}
	if got := SumF64(nil); got != 0 || math.Signbit(got) {
		t.Errorf("SumF64(nil) = %v, want +0", got)
	}
}

// TestNormRow checks NormRow on every path against its definition bit for bit at every length
// up to 150, with and without a bias, with y = x, with infinities and NaN; and that nothing is
// written outside y.
func TestNormRow(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3e38, -3e38, 1e-40}
	for _, i := range available() {
		for _, bias := range []bool{false, true} {
			for n := range 151 {
				x, xIntact := guarded(r, n, 1, -5, 5)
				w, _ := guarded(r, n, 2, -2, 2)
				var b []float32
				if bias {
					b, _ = guarded(r, n, 3, -1, 1)
				}
				for j := range x {
					if r.IntN(8) == 0 {
						x[j] = special[r.IntN(len(special))]
					}
				}
				mean, rstd := float32(r.NormFloat64()), float32(r.Float64()*3)
				want := make([]float32, n)
				for j, v := range x {
					want[j] = float32(float32(float32(v-mean)*rstd) * w[j])
					if bias {
						want[j] += b[j]
					}
				}
				y, yIntact := guarded(r, n, 4, 0, 1)
				in := slices.Clone(x)
				normRow(i, y, x, mean, rstd, w, b)
				if !slices.Equal(math32bits(y), math32bits(want)) {
					t.Fatalf("%v bias=%v n=%d: %v, want %v", i, bias, n, y, want)
				}
				if !xIntact() || !yIntact() || !slices.Equal(math32bits(x), math32bits(in)) {
					t.Errorf("%v bias=%v n=%d: wrote outside y", i, bias, n)
				}
				normRow(i, x, x, mean, rstd, w, b) // y = x
				if !slices.Equal(math32bits(x), math32bits(want)) {
					t.Fatalf("%v bias=%v n=%d, y = x: %v, want %v", i, bias, n, x, want)
				}
			}
		}
	}
}

func TestNormRowPanics(t *testing.T) {
	y := make([]float32, 4)
	for name, f := range map[string]func(){
		"x short": func() { NormRow(y, y[:3], 0, 1, y, nil) },
		"w short": func() { NormRow(y, y, 0, 1, y[:3], nil) },
		"b short": func() { NormRow(y, y, 0, 1, y, y[:3]) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestNormGrad checks NormGrad and NormGradInput on every path against their definitions bit
// for bit at every length up to 200 (every masked tail), with gradients over 30 decades, with
// infinities and NaN, and that nothing is written outside dw, db and dx.
func TestNormGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	special := []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3e38, -3e38, 1e-40}
	sameBits := func(a, b []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) && (a[i] == a[i] || b[i] == b[i]) {
				return false
			}
		}
		return true
	}
	same64 := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) || (a != a && b != b) }
	for _, i := range available() {
		for n := range 201 {
			x, xIntact := guarded(r, n, 1, -4, 4)
			g, gIntact := guarded(r, n, 2, -1e3, 1e3)
			w, wIntact := guarded(r, n, 3, -2, 2)
			dw, dwIntact := guarded(r, n, 4, -1, 1)
			db, dbIntact := guarded(r, n, 5, -1, 1)
			dx, dxIntact := guarded(r, n, 6, -1, 1)
			for j := range g { // over 30 decades, so that the order of the sums shows in their bits
				g[j] = float32(math.Pow(10, -15+30*r.Float64()) * float64(1-2*r.IntN(2)))
			}
			for _, v := range [][]float32{x, g} {
				for j := range v {
					if n%3 == 0 && r.IntN(12) == 0 { // not always: a NaN or an infinity hides the sums' order
						v[j] = special[r.IntN(len(special))]
					}
				}
			}
			mean, rstd := float32(r.NormFloat64()), float32(0.1+r.Float64()*3)
			a, c := float32(r.NormFloat64()), float32(r.NormFloat64())
			var sg, sgn [32]float64
			wantDw, wantDb, wantDx := slices.Clone(dw), slices.Clone(db), slices.Clone(dx)
			for j, v := range x {
				norm := float32(float32(v-mean) * rstd)
				dn := float32(w[j] * g[j])
				sg[j%32] = sg[j%32] + float64(dn)
				sgn[j%32] = sgn[j%32] + float64(float32(dn*norm))
				wantDw[j] = wantDw[j] + float32(g[j]*norm)
				wantDb[j] = wantDb[j] + g[j]
				wantDx[j] = wantDx[j] + float32(rstd*float32(float32(float32(w[j]*g[j])-a)-float32(norm*c)))
			}
			want := func(s [32]float64) float64 {
				var t [8]float64
				for l := range t {
					t[l] = (s[l] + s[l+8]) + (s[l+16] + s[l+24])
				}
				return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]))
			}
			gotG, gotGN := normGrad(i, dw, db, x, g, w, mean, rstd)
			if !same64(gotG, want(sg)) || !same64(gotGN, want(sgn)) {
				t.Fatalf("%v n=%d: sums %v, %v; want %v, %v", i, n, gotG, gotGN, want(sg), want(sgn))
			}
			if !sameBits(dw, wantDw) || !sameBits(db, wantDb) {
				t.Fatalf("%v n=%d: dw, db %v, %v; want %v, %v", i, n, dw, db, wantDw, wantDb)
			}
			normGradInput(i, dx, x, g, w, mean, rstd, a, c)
			if !sameBits(dx, wantDx) {
				t.Fatalf("%v n=%d: dx %v, want %v", i, n, dx, wantDx)
			}
			for name, ok := range map[string]bool{"x": xIntact(), "g": gIntact(), "w": wIntact(), "dw": dwIntact(), "db": dbIntact(), "dx": dxIntact()} {
				if !ok {
					t.Errorf("%v n=%d: wrote outside %s", i, n, name)
				}
			}
		}
	}
}
