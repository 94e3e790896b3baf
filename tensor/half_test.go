package tensor

import (
	"slices"
	"strings"
	"testing"
)

func TestHalfFromData(t *testing.T) {
	for _, c := range []struct {
		n     int
		f     HalfFormat
		shape []int
		err   string
	}{
		{5, BFloat16, []int{2, 3}, "5 halves for shape [2 3], want 6"},
		{6, 0, []int{2, 3}, "format HalfFormat(0), want bfloat16 or float16"},
		{6, 3, []int{2, 3}, "format HalfFormat(3)"},
		{0, Float16, []int{-1}, "negative"},
	} {
		if _, err := HalfFromData(make([]uint16, c.n), c.f, c.shape...); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("HalfFromData(%d values, %v, %v): error %v, want %q", c.n, c.f, c.shape, err, c.err)
		}
	}
	shape := []int{2, 3}
	data := []uint16{1, 2, 3, 4, 5, 6}
	for _, f := range []HalfFormat{BFloat16, Float16} {
		h, err := HalfFromData(data, f, shape...)
		if err != nil {
			t.Fatal(err)
		}
		if &h.Data[0] != &data[0] || h.Format != f || !slices.Equal(h.Shape, shape) {
			t.Fatalf("HalfFromData(%v) = %+v: want data shared, format and shape kept", f, h)
		}
		shape[0] = 9 // the shape is copied
		if h.Shape[0] != 2 {
			t.Fatal("HalfFromData shares the shape slice")
		}
		shape[0] = 2
		c := h.Clone()
		c.Data[0], c.Shape[0] = 100, 100
		if h.Data[0] != 1 || h.Shape[0] != 2 || c.Format != f {
			t.Fatalf("Clone shares data or shape, or lost the format: %+v", c)
		}
	}
	s, err := HalfFromData([]uint16{0x3f80}, BFloat16)
	if err != nil || len(s.Shape) != 0 {
		t.Fatalf("scalar: %+v, %v", s, err)
	}
	if BFloat16.String() != "bfloat16" || Float16.String() != "float16" {
		t.Errorf("String: %q, %q", BFloat16, Float16)
	}
}
