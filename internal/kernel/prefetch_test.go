package kernel

import (
	"slices"
	"testing"
)

// TestPrefetch checks that Prefetch, a hint, accepts every length and alignment, up to the last
// value of an allocation, and changes no value.
func TestPrefetch(t *testing.T) {
	x := make([]float32, 200)
	for i := range x {
		x[i] = float32(i)
	}
	want := slices.Clone(x)
	for a := range 20 {
		for b := a; b <= len(x); b++ {
			Prefetch(x[a:b])
		}
	}
	if !slices.Equal(x, want) {
		t.Fatal("Prefetch changed values")
	}
}
