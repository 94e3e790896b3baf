package kernel

// lineFloats is the float32 values in a 64-byte cache line.
const lineFloats = 16

// Prefetch asks for the cache lines that hold x in the core's L2 cache and returns without waiting
// for them: a hint, which changes no value. It does nothing without the assembly (purego, or
// other architectures).
func Prefetch(x []float32) {
	if len(x) > 0 {
		prefetch(&x[0], (len(x)+lineFloats-1)/lineFloats)
	}
}
