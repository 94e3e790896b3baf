package kernel

import (
	"math"
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
