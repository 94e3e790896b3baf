package kernel

// isa names the instruction set a float32 kernel runs on.
type isa int

const (
	generic isa = iota // pure Go: the purego build tag, or a CPU without AVX2, FMA and F16C
	avx2               // AVX2 + FMA + F16C (which every AVX2 CPU has), 256-bit
	avx512             // AVX-512 F (+ VL, DQ, BW, and F16C), 512-bit
)

func (i isa) String() string {
	return [...]string{"generic", "avx2", "avx512"}[i]
}

// best is the fastest instruction set this CPU and build support, fixed at start-up.
var best = detect()

// available lists every instruction set this CPU and build can run, slowest first, so tests can
// check each path against the reference.
func available() []isa {
	var out []isa
	for i := generic; i <= best; i++ {
		out = append(out, i)
	}
	return out
}
