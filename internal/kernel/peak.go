package kernel

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// DefaultPeakDuration is how long PeakGFLOPS runs when given no duration: long enough for the
// clocks to settle, short enough to run before every benchmark.
const DefaultPeakDuration = 250 * time.Millisecond

// peakChunk is the number of loop iterations per call into a peak loop: tens of microseconds,
// so a worker looks at the clock rarely, yet never holds its thread in assembly for long (Go
// cannot preempt a goroutine inside an assembly function).
const peakChunk = 1 << 14

// PeakGFLOPS measures this machine's float32 FMA ceiling in GFLOP/s: workers goroutines, each
// locked to its own OS thread, run a register-only loop of independent fused multiply-adds in
// chunks of tens of microseconds for about d. Each worker's rate is its median chunk's (2 FLOPs
// per lane per FMA), so time the operating system gives to other processes does not count, and
// the result is the sum over the workers: what the threads do while they run. The loop uses the
// widest vectors the CPU offers (zmm with AVX-512, ymm with AVX2 + FMA, plain Go otherwise or
// under the purego build tag), so the number is the ceiling the float32 kernels of this
// package can approach, not a datasheet figure. workers < 1 means runtime.GOMAXPROCS(0); d ≤ 0
// means DefaultPeakDuration. Workers that share a core (SMT siblings, or more workers than
// cores) share its FMA units, and the result says so.
func PeakGFLOPS(workers int, d time.Duration) float64 {
	return peakGFLOPS(best, workers, d)
}

// PeakISA names the instruction set PeakGFLOPS measures with: "avx512", "avx2" or "generic".
func PeakISA() string {
	return best.String()
}

// peakGFLOPS is PeakGFLOPS on instruction set i.
func peakGFLOPS(i isa, workers int, d time.Duration) float64 {
	loop, flopsPerIter := peakLoop(i)
	return runPeak(loop, flopsPerIter, workers, d)
}

// PeakBF16GFLOPS measures, as PeakGFLOPS does, the bfloat16 ceiling of GemmBF16's kernels: a
// register-only VDPBF16PS loop (AVX512_BF16), counting 4 FLOPs per float32 lane and
// instruction (two products, two sums), so that it compares with PeakGFLOPS's float32 FMA
// rate (2 per lane). It returns 0 where the CPU or the build (purego) lacks AVX512_BF16, where
// GemmBF16 runs its pure-Go path.
func PeakBF16GFLOPS(workers int, d time.Duration) float64 { return peakBF16GFLOPS(workers, d) }

// HasBF16 reports whether GemmBF16 runs its AVX512_BF16 kernels here (false under purego and
// on CPUs without AVX512_BF16, where it runs the bit-identical pure-Go path).
func HasBF16() bool { return hasBF16 }

// peakBF16GFLOPS is PeakGFLOPS for VDPBF16PS (AVX512_BF16), the instruction of GemmBF16's
// kernels, counting 4 FLOPs per lane (two products, two sums); 0 where the CPU or the build
// lacks it.
func peakBF16GFLOPS(workers int, d time.Duration) float64 {
	if !hasBF16 {
		return 0
	}
	return runPeak(dpbf16Loop, 4*16*peakAccumulators, workers, d)
}

// runPeak runs loop, whose iterations do flopsPerIter FLOPs, as peakGFLOPS says.
func runPeak(loop func(n int) float32, flopsPerIter, workers int, d time.Duration) float64 {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	if d <= 0 {
		d = DefaultPeakDuration
	}
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time
	rates := make([]float64, workers) // FLOP/s of each worker's median chunk
	ready.Add(workers)
	done.Add(workers)
	for w := range workers {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			loop(peakChunk) // wake the vector units and the clocks before timing
			chunks := make([]time.Duration, 0, 1024)
			ready.Done()
			<-start
			for t0 := time.Now(); len(chunks) == 0 || t0.Before(deadline); {
				loop(peakChunk)
				t1 := time.Now()
				chunks = append(chunks, t1.Sub(t0))
				t0 = t1
			}
			slices.Sort(chunks)
			rates[w] = float64(peakChunk*flopsPerIter) / chunks[len(chunks)/2].Seconds()
		}()
	}
	ready.Wait()
	deadline = time.Now().Add(d)
	close(start)
	done.Wait()
	var total float64
	for _, r := range rates {
		total += r
	}
	return total / 1e9
}

// fmaGo is the portable peak loop: n iterations of 8 independent float32 multiply-adds, which
// count as 16 FLOPs. It returns the accumulators' sum so the compiler cannot drop the work (its
// callers call it through a func value, which is not inlined, and may ignore the sum).
func fmaGo(n int) float32 {
	x, y := peakX, peakY
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	for range n {
		a0 = a0*x + y
		a1 = a1*x + y
		a2 = a2*x + y
		a3 = a3*x + y
		a4 = a4*x + y
		a5 = a5*x + y
		a6 = a6*x + y
		a7 = a7*x + y
	}
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}

// fmaGoFLOPs is the FLOPs of one fmaGo iteration.
const fmaGoFLOPs = 2 * 8

// peakX and peakY are variables, not constants, so the compiler cannot fold fmaGo's loop; with
// x = 0.5 the accumulators converge to 2y and stay normal numbers.
var peakX, peakY float32 = 0.5, 1
