package tensor

import (
	"math"
	"strings"
	"testing"
)

func TestNumElements(t *testing.T) {
	for _, c := range []struct {
		shape []int
		want  int
		err   string
	}{
		{nil, 1, ""},
		{[]int{2, 3, 4}, 24, ""},
		{[]int{5, 0, 7}, 0, ""},
		{[]int{2, -1}, 0, "dimension 1 of shape [2 -1] is negative"},
		{[]int{1 << 30, 1 << 30, 1 << 30}, 0, "more than"},
	} {
		n, err := NumElements(c.shape)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("NumElements(%v) error %v, want %q", c.shape, err, c.err)
			}
			continue
		}
		if err != nil || n != c.want {
			t.Errorf("NumElements(%v) = %d, %v; want %d", c.shape, n, err, c.want)
		}
	}
}

func TestFromData(t *testing.T) {
	if _, err := FromData(make([]float32, 5), 2, 3); err == nil || !strings.Contains(err.Error(), "5 values for shape [2 3], want 6") {
		t.Errorf("FromData with 5 values for [2 3]: %v", err)
	}
	x, err := FromData([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	y, err := x.Reshape(3, 2)
	if err != nil || y.Data[5] != 6 || y.Shape[0] != 3 {
		t.Errorf("Reshape: %v %v", y, err)
	}
	if _, err := BoolFromData(make([]bool, 2), 3); err == nil {
		t.Error("BoolFromData accepted 2 values for [3]")
	}
}

func TestRelError(t *testing.T) {
	if e := RelError([]float32{3, 4}, []float64{3, 4}); e != 0 {
		t.Errorf("equal vectors: %v", e)
	}
	if e := RelError([]float64{3, 0}, []float64{0, 4}); math.Abs(e-1.25) > 1e-15 {
		t.Errorf("‖(3,-4)‖/‖(0,4)‖ = %v, want 1.25", e)
	}
	if e := RelError([]float32{3, 4}, []float64{0, 0}); e != 5 {
		t.Errorf("zero reference: %v, want the absolute norm 5", e)
	}
}

// TestInitStatistics checks the spread of each initialiser against its formula.
func TestInitStatistics(t *testing.T) {
	rng := NewRNG(1)
	w := New(300, 100) // fan_in 100, fan_out 300
	rng.XavierUniform(w)
	bound := math.Sqrt(6.0 / 400)
	checkStd(t, "xavier uniform", w, bound/math.Sqrt(3), bound)
	rng.XavierNormal(w)
	checkStd(t, "xavier normal", w, math.Sqrt(2.0/400), math.Inf(1))
	rng.LinearDefault(w)
	checkStd(t, "linear default", w, 1/math.Sqrt(100)/math.Sqrt(3), 1/math.Sqrt(100))
	a, b := New(10), New(10)
	NewRNG(7).Normal(a, 1)
	NewRNG(7).Normal(b, 1)
	for i := range a.Data {
		if a.Data[i] != b.Data[i] {
			t.Fatal("the same seed gave different values")
		}
	}
}

func checkStd(t *testing.T, name string, x *Tensor, std, bound float64) {
	t.Helper()
	var s, s2 float64
	for _, v := range x.Data {
		if math.Abs(float64(v)) > bound {
			t.Fatalf("%s: %v outside ±%v", name, v, bound)
		}
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	n := float64(len(x.Data))
	mean, got := s/n, math.Sqrt(s2/n-(s/n)*(s/n))
	if math.Abs(mean) > 4*std/math.Sqrt(n) || math.Abs(got/std-1) > 0.02 {
		t.Errorf("%s: mean %.4g, std %.4g, want 0 and %.4g", name, mean, got, std)
	}
}

// TestCheckFinite checks that CheckFinite finds the first NaN or ±Inf, counts them and says
// where the first is, and passes finite tensors, extreme values included.
func TestCheckFinite(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, c := range []struct {
		data  []float32
		shape []int
		want  string
		index int
		count int
	}{
		{[]float32{1, -2, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 0}, []int{2, 3}, "", 0, 0},
		{[]float32{1, 2, 3, nan, 5, 6}, []int{2, 3}, `tensor "w" [2 3]: 1 of 6 values is not finite: NaN at [1 0] (index 3)`, 3, 1},
		{[]float32{-inf, 2, nan, 4}, []int{4}, `tensor "w" [4]: 2 of 4 values are not finite: -Inf at [0] (index 0)`, 0, 2},
		{[]float32{inf}, []int{}, `tensor "w" []: 1 of 1 values is not finite: +Inf at [] (index 0)`, 0, 1},
		{nil, []int{0, 3}, "", 0, 0},
	} {
		x, err := FromData(c.data, c.shape...)
		if err != nil {
			t.Fatal(err)
		}
		err = x.CheckFinite("w")
		if c.want == "" {
			if err != nil {
				t.Errorf("%v: %v, want nil", c.data, err)
			}
			continue
		}
		e, ok := err.(*NonFiniteError)
		if !ok || e.Error() != c.want || e.Index != c.index || e.Count != c.count || e.Name != "w" {
			t.Errorf("%v: %#v (%v), want %q", c.data, err, err, c.want)
		}
	}
}
