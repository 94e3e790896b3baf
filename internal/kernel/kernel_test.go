package kernel

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// naive is C = alpha·op(A)·op(B) + beta·C written from the definition, in float64.
func naive(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for i := range m {
		for j := range n {
			s := 0.0
			for p := range k {
				var av, bv float64
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
		}
	}
}

func randSlice(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	return x
}

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// TestGemm checks every transpose form, odd shapes and padded strides, in float32 and float64,
// against the definition.
func TestGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {7, 13, 5}, {1, 9, 4}, {9, 1, 4}, {5, 6, 0}, {64, 33, 17}, {130, 5, 65}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			ar, ac := m, k
			if tr[0] {
				ar, ac = k, m
			}
			br, bc := k, n
			if tr[1] {
				br, bc = n, k
			}
			lda, ldb, ldc := ac+3, bc+1, n+2 // padded rows: strides must be honoured
			a, b := randSlice(r, max(ar*lda, 1)), randSlice(r, max(br*ldb, 1))
			c := randSlice(r, m*ldc)
			for _, ab := range [][2]float64{{1, 0}, {0.5, 1}, {-2, 0.25}} {
				want := append([]float64(nil), c...)
				naive(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], want, ldc)

				got := append([]float64(nil), c...)
				Gemm(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], got, ldc)
				got32 := to32(c)
				Gemm(tr[0], tr[1], m, n, k, float32(ab[0]), to32(a), lda, to32(b), ldb, float32(ab[1]), got32, ldc)
				for i := range want {
					if d := math.Abs(got[i] - want[i]); d > 1e-12*(1+math.Abs(want[i]))*float64(k+1) {
						t.Fatalf("float64 %v trans %v alpha,beta %v: C[%d] = %v, want %v", s, tr, ab, i, got[i], want[i])
					}
					if d := math.Abs(float64(got32[i]) - want[i]); d > 1e-5*(1+math.Abs(want[i]))*math.Sqrt(float64(k+1)) {
						t.Fatalf("float32 %v trans %v alpha,beta %v: C[%d] = %v, want %v", s, tr, ab, i, got32[i], want[i])
					}
				}
			}
		}
	}
}

// TestGemmBetaZeroIgnoresC checks that NaN in C does not leak through when beta is 0.
func TestGemmBetaZeroIgnoresC(t *testing.T) {
	c := []float64{math.NaN(), math.Inf(1)}
	Gemm(false, false, 1, 2, 1, 1, []float64{2}, 1, []float64{3, 4}, 2, 0, c, 2)
	if c[0] != 6 || c[1] != 8 {
		t.Errorf("C = %v, want [6 8]", c)
	}
}

func TestGemmPanicsOnShortSlices(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Gemm accepted an A too short for its shape")
		}
	}()
	Gemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
}

func TestSoftmax(t *testing.T) {
	inf := math.Inf(-1)
	for _, c := range []struct {
		in, want []float64
		ok       bool
	}{
		{[]float64{0, 0}, []float64{0.5, 0.5}, true},
		{[]float64{1000, 1000 + math.Log(3)}, []float64{0.25, 0.75}, true}, // no overflow
		{[]float64{-1000, inf, -1000}, []float64{0.5, 0, 0.5}, true},
		{[]float64{inf, inf}, []float64{0, 0}, false},
		{[]float64{}, []float64{}, false},
	} {
		row := append([]float64(nil), c.in...)
		ok := Softmax(row)
		if ok != c.ok {
			t.Errorf("Softmax(%v) reported %v, want %v", c.in, ok, c.ok)
		}
		for i := range row {
			if math.Abs(row[i]-c.want[i]) > 1e-12 { // 1000+ln 3 is itself rounded by ~1e-13
				t.Errorf("Softmax(%v) = %v, want %v", c.in, row, c.want)
				break
			}
		}
	}
}

// TestSoftmaxSink checks the sink against its definition in float64: the weights are
// exp(x_j − lse) and the sink takes exp(sink − lse), which together sum to 1; a masked row
// gives zeros and lse = sink.
func TestSoftmaxSink(t *testing.T) {
	row := []float64{0.5, -1, math.Inf(-1), 2}
	sink := 1.25
	want := math.Log(math.Exp(0.5) + math.Exp(-1) + math.Exp(2) + math.Exp(sink))
	got := append([]float64(nil), row...)
	ok, lse := SoftmaxSink(got, sink)
	if !ok || math.Abs(lse-want) > 1e-15 {
		t.Fatalf("ok %v lse %v, want true and %v", ok, lse, want)
	}
	total := math.Exp(sink - lse)
	for j, x := range row {
		if w := math.Exp(x - want); math.Abs(got[j]-w) > 1e-15 {
			t.Errorf("weight %d = %v, want %v", j, got[j], w)
		}
		total += got[j]
	}
	if math.Abs(total-1) > 1e-15 {
		t.Errorf("weights and sink sum to %v, want 1", total)
	}
	masked := []float64{math.Inf(-1), math.Inf(-1)}
	if ok, lse := SoftmaxSink(masked, sink); ok || lse != sink || masked[0] != 0 || masked[1] != 0 {
		t.Errorf("masked row: ok %v lse %v weights %v, want false, %v, zeros", ok, lse, masked, sink)
	}
	masked = []float64{math.Inf(-1), math.Inf(-1)}
	if ok, lse := SoftmaxSink(masked, math.Inf(-1)); ok || !math.IsInf(lse, 1) {
		t.Errorf("masked row without a sink: ok %v lse %v, want false, +Inf", ok, lse)
	}
}

// TestFMA32 checks fma32 against a·b + c computed exactly and rounded once (math/big), on random
// values over wide exponents and on sums built to fall exactly halfway between two float32 values
// once rounded to float64, where rounding twice goes wrong.
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	exact := func(a, b, c float32) float32 {
		x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
		f, _ := x.Float32()
		return f
	}
	check := func(a, b, c float32) {
		t.Helper()
		if got, want := fma32(a, b, c), exact(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
	for range 100000 { // sums in and near float32's subnormal range
		a := float32(r.NormFloat64() * math.Ldexp(1, -60-r.IntN(20)))
		b := float32(r.NormFloat64() * math.Ldexp(1, -60-r.IntN(20)))
		c := float32(r.NormFloat64() * math.Ldexp(1, -120-r.IntN(30)))
		check(a, b, c)
	}
	for range 200000 {
		a := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(60)-30)))
		b := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(60)-30)))
		c := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(120)-60)))
		check(a, b, c)
	}
	// a·b + c = 256 + 3·2⁻¹⁶ − 2⁻⁶⁰: just below the midpoint of 256 + 2⁻¹⁵ (odd) and 256 + 2⁻¹⁴
	// (even). Rounded to float64 it is the midpoint itself, which rounds to the even one; rounded
	// once, it is 256 + 2⁻¹⁵. The same negated, and random sums built near such midpoints.
	a, b, c := float32(math.Ldexp(1+math.Ldexp(1, -23), -16)), float32(4-math.Ldexp(1, -21)), float32(256-math.Ldexp(1, -16))
	if got, want := fma32(a, b, c), float32(256+math.Ldexp(1, -15)); got != want {
		t.Errorf("fma32 just below a midpoint = %.10g, want %.10g", got, want)
	}
	check(a, b, c)
	check(-a, b, -c)
	for range 200000 {
		x := float32(math.Ldexp(1+float64(r.IntN(1<<23))*math.Ldexp(1, -23), -r.IntN(24)))
		y := float32(1 + float64(r.IntN(1<<23))*math.Ldexp(1, -23))
		z := float32(math.Ldexp(float64(1+r.IntN(1<<23)), r.IntN(8)-23)) - float32(float64(x)*float64(y))
		check(x, y, z)
	}
	for _, v := range [][3]float32{{float32(math.Inf(1)), 0, 1}, {3e38, 3e38, -1}, {1e-30, 1e-30, 0}, {1e-23, 1e-23, 1e-45}, {float32(math.NaN()), 1, 1}} {
		got, want := fma32(v[0], v[1], v[2]), float32(math.FMA(float64(v[0]), float64(v[1]), float64(v[2])))
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Errorf("fma32%v = %g, want %g", v, got, want)
		}
	}
}

// TestGemmDot checks that GemmDot's sum of a row and a column has, on every instruction set, the
// bits that Sgemm gives the same element (alpha 1, beta 0, B not transposed), over full and edge
// tiles and k up to one block.
func TestGemmDot(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var w Workspace
	for _, s := range [][3]int{{1, 1, 7}, {5, 37, 64}, {14, 32, 128}, {3, 17, 256}, {20, 40, 1}, {16, 48, 200}} {
		m, n, k := s[0], s[1], s[2]
		a, b := make([]float32, m*k), make([]float32, k*n)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		for i := range b {
			b[i] = float32(r.NormFloat64())
		}
		col := make([]float32, k)
		for _, is := range available() {
			c := make([]float32, m*n)
			w.sgemm(is, false, false, m, n, k, 1, a, k, b, n, 0, c, n, nil)
			for i := range m {
				for j := range n {
					for p := range k {
						col[p] = b[p*n+j]
					}
					if got := gemmDot(is, a[i*k:(i+1)*k], col); math.Float32bits(got) != math.Float32bits(c[i*n+j]) {
						t.Fatalf("%v %v: element (%d, %d): gemmDot %g, Sgemm %g", is, s, i, j, got, c[i*n+j])
					}
				}
			}
		}
	}
}
