package kernel

import (
	"testing"
	"time"
)

// TestPeakGFLOPS runs every available peak loop briefly and checks that it reports a plausible
// rate: positive, finite, and below what any single core could do (speed itself is not tested).
func TestPeakGFLOPS(t *testing.T) {
	for _, i := range available() {
		for _, workers := range []int{1, 2} {
			g := peakGFLOPS(i, workers, 20*time.Millisecond)
			t.Logf("%s, %d workers: %.1f GFLOP/s", i, workers, g)
			if !(g > 0 && g < 5000*float64(workers)) {
				t.Errorf("%s, %d workers: %g GFLOP/s, want a positive rate below %d", i, workers, g, 5000*workers)
			}
		}
	}
	if g := PeakGFLOPS(0, 10*time.Millisecond); !(g > 0) {
		t.Errorf("PeakGFLOPS(0, 10ms) = %g, want > 0", g)
	}
	if PeakISA() != best.String() {
		t.Errorf("PeakISA() = %q, want %q", PeakISA(), best.String())
	}
}

// TestFmaGo checks the portable loop's arithmetic: with x = 0.5 and y = 1 each accumulator
// converges to 2.
func TestFmaGo(t *testing.T) {
	if got := fmaGo(64); got != 16 {
		t.Errorf("fmaGo(64) = %g, want 16", got)
	}
}
