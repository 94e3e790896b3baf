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
	if hasBF16 {
		g, f := peakBF16GFLOPS(1, 20*time.Millisecond), peakGFLOPS(avx512, 1, 20*time.Millisecond)
		t.Logf("VDPBF16PS, 1 worker: %.1f GFLOP/s, %.2f× the float32 FMA peak", g, g/f)
		if !(g > 0 && g < 10000) {
			t.Errorf("VDPBF16PS: %g GFLOP/s, want a positive rate below 10000", g)
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

// TestReadBandwidth runs every available read loop briefly over 64 MiB and checks that it
// reports a plausible rate: positive and below 1 TB/s per worker, which no DRAM reaches (a loop
// that skipped its loads would exceed it). Speed itself is not tested.
func TestReadBandwidth(t *testing.T) {
	for _, i := range available() {
		for _, workers := range []int{1, 2} {
			bw := readBandwidth(i, workers, 64<<20, 20*time.Millisecond)
			t.Logf("%s, %d workers: %.1f GB/s", i, workers, bw/1e9)
			if !(bw > 0 && bw < 1e12*float64(workers)) {
				t.Errorf("%s, %d workers: %g B/s, want a positive rate below %d TB/s", i, workers, bw, workers)
			}
		}
	}
	if bw := ReadBandwidth(0, 1<<20, time.Millisecond); !(bw > 0) {
		t.Errorf("ReadBandwidth(0, 1 MiB, 1ms) = %g, want > 0", bw)
	}
}
