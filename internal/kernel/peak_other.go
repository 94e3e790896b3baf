//go:build !amd64 || purego

package kernel

// peakLoop returns the portable peak loop (fmaGo) and the FLOPs of one of its iterations: without
// the assembly every instruction set runs as generic.
func peakLoop(isa) (loop func(n int) float32, flopsPerIter int) {
	return fmaGo, fmaGoFLOPs
}

// readLoop returns the portable memory read loop: without the assembly every instruction set
// runs as generic.
func readLoop(isa) func(p *byte, n int) { return readGo }

// peakAccumulators is the count peakBF16GFLOPS would multiply by; it never runs in this build.
const peakAccumulators = 16

// dpbf16Loop stands in for the VDPBF16PS loop, which this build lacks (hasBF16 is false).
func dpbf16Loop(n int) float32 { return fmaGo(n) }
