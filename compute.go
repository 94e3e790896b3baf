package mha

import (
	"errors"
	"fmt"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
)

// ErrUnsupported is wrapped by the errors of calls that combine options this package does not
// implement together, such as a training forward in bfloat16 (see Compute).
var ErrUnsupported = errors.New("mha: unsupported combination")

// Compute is the arithmetic a forward runs its matrix products in: Options.Compute for the
// layer, SDPAOptions.Compute for SDPA. The zero value is ComputeFloat32.
type Compute int

const (
	// ComputeFloat32 computes in float32 throughout, matching PyTorch's float32 results to
	// float32 rounding: the default.
	ComputeFloat32 Compute = iota
	// ComputeBFloat16 runs the matrix products with bfloat16 operands and float32 sums
	// (AVX512_BF16's VDPBF16PS, at twice the float32 FMA rate): the input and output
	// projections (x·Wᵀ with x and W rounded to bfloat16; weights that LoadHalfStateDict holds
	// in bfloat16 are used as they are, binary16 ones rounded) and, inside the tiled attention,
	// Q·Kᵀ and the weights times V, with Q, K and V converted to bfloat16 once per call (after
	// rotary) and the weights rounded to bfloat16 for the second product. The scores, masks,
	// biases, soft cap, the softmax or normalizer, dropout, sinks, the output accumulators, the
	// projections' biases and the outputs stay float32. On E = 768, H = 12, T = 256 the layer's
	// output is 2.1·10⁻³ (3.2·10⁻³ causal) from float64 in relative Frobenius norm, where
	// PyTorch's own bfloat16 gives 3.1·10⁻³ (3.9·10⁻³): TestBF16LayerAccuracy checks it is no
	// worse. At T = 1024…4096 the forward is about 1.6× the float32 one (BENCHMARKS.md, v9).
	//
	// Where the CPU lacks AVX512_BF16, or under the purego build tag, it runs as
	// ComputeFloat32 (see Effective). Not supported in bfloat16: training. ForwardTrain and
	// SDPABackward return an error wrapping ErrUnsupported (a backward in float32 would not
	// match a bfloat16 forward's log-sum-exps); train with ComputeFloat32. Reference and
	// SDPAReference ignore Compute (they are float64), and the KV cache's attention
	// (ForwardCache's, AttendCache) computes in float32 whatever Compute says (a decode step is
	// bound by reading the cache, which CacheBFloat16 halves, not by arithmetic), except for a
	// prompt into an empty cache, which AttendCache computes as SDPA does;
	// ForwardCache's projections follow Compute, but for calls of at most 4 rows (a decode
	// step's), which run as float32 dot products that read the weights in place whatever
	// Compute says: they are bound by reading the weights, which packing them for bfloat16
	// products would only add to.
	ComputeBFloat16
)

// String returns "float32" or "bfloat16" (the names ParseCompute reads), or "Compute(n)".
func (c Compute) String() string {
	switch c {
	case ComputeFloat32:
		return "float32"
	case ComputeBFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("Compute(%d)", int(c))
}

// ParseCompute returns the Compute called s: "float32" (or "f32", "fp32") or "bfloat16" (or
// "bf16"); anything else is an error.
func ParseCompute(s string) (Compute, error) {
	switch s {
	case "float32", "f32", "fp32":
		return ComputeFloat32, nil
	case "bfloat16", "bf16":
		return ComputeBFloat16, nil
	}
	return 0, fmt.Errorf("unknown compute type %q, want float32 or bfloat16", s)
}

// check returns an error wrapping ErrShape when c is not a Compute this package defines.
func (c Compute) check() error {
	if c != ComputeFloat32 && c != ComputeBFloat16 {
		return fmt.Errorf("%w: compute type is %d, want ComputeFloat32 or ComputeBFloat16", ErrShape, int(c))
	}
	return nil
}

// Effective returns the compute type a call asking for c runs in on this machine: c, except
// that ComputeBFloat16 runs as ComputeFloat32 where the CPU lacks AVX512_BF16 or the build has
// the purego tag. The bfloat16 GEMM's pure-Go path there gives the AVX512_BF16 results bit for
// bit, but slower than the float32 path (1.5× under purego at T = 512, and far behind the
// AVX2 float32 kernels on a CPU with AVX2 but no AVX512_BF16), so a call asking for speed gets
// float32's, and float32's accuracy with it. What ComputeBFloat16 refuses (training) it still
// refuses there.
func (c Compute) Effective() Compute {
	if c == ComputeBFloat16 && !kernel.HasBF16() && !emulateBF16 {
		return ComputeFloat32
	}
	return c
}

// emulateBF16, set by the tests, makes ComputeBFloat16 run its bfloat16 path on the pure-Go
// kernels where the CPU lacks AVX512_BF16, so that the path is tested everywhere.
var emulateBF16 = false

// bf16 reports whether a call asking for c computes in bfloat16 here (see Effective).
func (c Compute) bf16() bool { return c.Effective() == ComputeBFloat16 }

// bf16BlockQ is the query rows of one attention task in bfloat16 (a variable so benchmarks can
// vary it): twice float32's, so that each key tile's bfloat16 packing serves twice the rows.
// Measured (BenchmarkBF16BlockQ, E = 768, H = 12, T = 2048, 2 threads, 5 runs alternating,
// medians): 64 rows 66.1 ms, 128 rows 64.1 ms, 256 rows 62.7 ms; 128 keeps more tasks for
// machines with many cores.
var bf16BlockQ = 2 * attend.BlockQ

// blockQ returns the query rows of one attention task (one attend.Tiled call) in compute type c.
func (c Compute) blockQ() int {
	if c.bf16() {
		return bf16BlockQ
	}
	return attend.BlockQ
}
