package attend

import (
	"math"
	"slices"
	"testing"
)

// TestApplyRange checks that applying the bias to a slice of a row's keys gives that slice of
// the whole row's result, for every mask kind and the unmasked appended keys.
func TestApplyRange(t *testing.T) {
	const tq, stride, tk = 5, 7, 9 // two appended keys
	b := &Bias{Causal: true, Stride: stride, KeyPad: make([]bool, stride), Mask: make([]bool, tq*stride), Add: make([]float32, tq*stride)}
	b.KeyPad[2] = true
	b.Mask[1*stride+0] = true
	for i := range b.Add {
		b.Add[i] = float32(i) / 10
	}
	for i := range tq {
		whole := make([]float64, tk)
		Apply(b, i, 0, whole)
		for j0 := range tk {
			for j1 := j0; j1 <= tk; j1++ {
				part := make([]float64, j1-j0)
				Apply(b, i, j0, part)
				if !slices.Equal(part, whole[j0:j1]) {
					t.Fatalf("query %d keys [%d, %d): %v, want %v", i, j0, j1, part, whole[j0:j1])
				}
			}
		}
		for j := stride; j < tk; j++ {
			if whole[j] != 0 {
				t.Errorf("query %d: appended key %d got %v, want it untouched", i, j, whole[j])
			}
		}
		if !math.IsInf(whole[2], -1) || (i < stride-1 && !math.IsInf(whole[i+1], -1)) {
			t.Errorf("query %d: padding or causal key not masked: %v", i, whole)
		}
	}
}

// TestDropoutKeep checks the counter-based mask: the same bits for the same (seed, i, j), and
// about P dropped.
func TestDropoutKeep(t *testing.T) {
	d, again := &Dropout{P: 0.3, Seed: 42}, &Dropout{P: 0.3, Seed: 42}
	dropped := 0
	for i := range 300 {
		for j := range 300 {
			if d.Keep(i, j) != again.Keep(i, j) {
				t.Fatal("Keep is not a function of (seed, i, j)")
			}
			if !d.Keep(i, j) {
				dropped++
			}
		}
	}
	if frac := float64(dropped) / (300 * 300); math.Abs(frac-0.3) > 0.01 {
		t.Errorf("dropped %.4f, want 0.3 ± 0.01", frac)
	}
	other := &Dropout{P: 0.3, Seed: 43}
	same := 0
	for j := range 1000 {
		if d.Keep(0, j) == other.Keep(0, j) {
			same++
		}
	}
	if same > 700 {
		t.Errorf("seeds 42 and 43 agree on %d of 1000 keys: not independent", same)
	}
}
