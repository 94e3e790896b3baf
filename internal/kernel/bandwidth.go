package kernel

import (
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// DefaultBandwidthBytes is the buffer ReadBandwidth reads when given no size: 1 GiB, far larger
// than any CPU's last-level cache, so every pass comes from memory.
const DefaultBandwidthBytes = 1 << 30

// PassBytes is the most bytes one pass of ReadBandwidth reads, all workers together: 64 MiB,
// larger than a CPU's last-level cache, and short enough (about a millisecond) that a few of
// the passes in DefaultPeakDuration find the cores free on a machine other processes share.
const PassBytes = 64 << 20

// ReadBandwidth measures this machine's memory read bandwidth in bytes per second: workers
// goroutines, each locked to its own OS thread, read their own part of a buffer of size bytes
// (rounded down to a multiple of 256 per worker) with the widest vector loads the CPU has, in
// passes of up to PassBytes, for about d. Each pass reads the next window of every part, in
// turn, so a window comes back only after the whole buffer has been read: from memory, not
// cache. The result is the fastest pass's total bytes over its wall time (other processes can
// only slow a pass down; a pass is as slow as its slowest worker, so the passes are short for
// some to run undisturbed on a busy machine), the ceiling a memory-bound kernel such as a
// decode step can approach. workers < 1 means runtime.GOMAXPROCS(0); size ≤ 0 means
// DefaultBandwidthBytes; d ≤ 0 means DefaultPeakDuration. It allocates the buffer, touches
// every page of it once, and leaves it to the garbage collector.
func ReadBandwidth(workers, size int, d time.Duration) float64 {
	return readBandwidth(best, workers, size, d)
}

// readBandwidth is ReadBandwidth on instruction set i.
func readBandwidth(i isa, workers, size int, d time.Duration) float64 {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	if size <= 0 {
		size = DefaultBandwidthBytes
	}
	if d <= 0 {
		d = DefaultPeakDuration
	}
	part := size / workers / 256 * 256
	if part == 0 {
		part = 256
	}
	window := min(part, max(256, PassBytes/workers/256*256)) // bytes a worker reads per pass
	windows := part / window
	buf := make([]uint64, part*workers/8)
	for j := range buf {
		buf[j] = uint64(j) // touch every page, so the passes time reads, not page faults
	}
	loop := readLoop(i)
	var ready, pass sync.WaitGroup
	start := make([]chan int, workers) // each pass sends the window's offset in the part
	ready.Add(workers)
	for w := range workers {
		start[w] = make(chan int)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p := buf[w*part/8 : (w+1)*part/8]
			ready.Done()
			for off := range start[w] {
				loop((*byte)(unsafe.Pointer(&p[off/8])), window/256)
				pass.Done()
			}
		}()
	}
	ready.Wait()
	best := 0.0
	for t0, n := time.Now(), 0; best == 0 || time.Since(t0) < d; n++ {
		pass.Add(workers)
		p0 := time.Now()
		for _, s := range start {
			s <- n % windows * window
		}
		pass.Wait()
		best = max(best, float64(window*workers)/time.Since(p0).Seconds())
	}
	for _, s := range start {
		close(s)
	}
	runtime.KeepAlive(buf)
	return best
}

// readGo is the portable read loop: n·256 bytes from p, ORed into 8 independent accumulators.
func readGo(p *byte, n int) {
	s := unsafe.Slice((*uint64)(unsafe.Pointer(p)), n*32)
	var a0, a1, a2, a3, a4, a5, a6, a7 uint64
	for j := 0; j < len(s); j += 8 {
		a0 |= s[j]
		a1 |= s[j+1]
		a2 |= s[j+2]
		a3 |= s[j+3]
		a4 |= s[j+4]
		a5 |= s[j+5]
		a6 |= s[j+6]
		a7 |= s[j+7]
	}
	runtime.KeepAlive(a0 | a1 | a2 | a3 | a4 | a5 | a6 | a7) // the loads must not be optimised away
}
