package tensor

import (
	"math"
	"math/rand/v2"
)

// RNG is a seeded source of random numbers for initialisation and dropout. The same seed gives
// the same sequence on every platform. An RNG is not safe for concurrent use.
type RNG struct {
	r *rand.Rand
}

// NewRNG returns an RNG seeded with seed.
func NewRNG(seed uint64) *RNG {
	return &RNG{r: rand.New(rand.NewPCG(seed, 0x6d68615f72616e64))}
}

// Float64 returns a uniform value in [0, 1).
func (g *RNG) Float64() float64 { return g.r.Float64() }

// Uniform fills t with values drawn uniformly from [-bound, bound).
func (g *RNG) Uniform(t *Tensor, bound float64) {
	for i := range t.Data {
		t.Data[i] = float32((2*g.r.Float64() - 1) * bound)
	}
}

// Normal fills t with values drawn from N(0, std²).
func (g *RNG) Normal(t *Tensor, std float64) {
	for i := range t.Data {
		t.Data[i] = float32(g.r.NormFloat64() * std)
	}
}

// Fans returns PyTorch's fan_in and fan_out for a weight of the given shape: for [out, in] they
// are in and out; for more dimensions the trailing ones form the receptive field, as in
// torch.nn.init._calculate_fan_in_and_fan_out. Shapes of fewer than two dimensions give (0, 0).
func Fans(shape []int) (fanIn, fanOut int) {
	if len(shape) < 2 {
		return 0, 0
	}
	receptive := 1
	for _, d := range shape[2:] {
		receptive *= d
	}
	return shape[1] * receptive, shape[0] * receptive
}

// XavierUniform fills t like torch.nn.init.xavier_uniform_ with gain 1: U(−a, a) with
// a = sqrt(6 / (fan_in + fan_out)). t must have at least two dimensions.
func (g *RNG) XavierUniform(t *Tensor) {
	in, out := Fans(t.Shape)
	g.Uniform(t, math.Sqrt(6/float64(in+out)))
}

// XavierNormal fills t like torch.nn.init.xavier_normal_ with gain 1: N(0, 2 / (fan_in +
// fan_out)). t must have at least two dimensions.
func (g *RNG) XavierNormal(t *Tensor) {
	in, out := Fans(t.Shape)
	g.Normal(t, math.Sqrt(2/float64(in+out)))
}

// LinearDefault fills a [out, in] weight like torch.nn.Linear's default initialisation
// (kaiming_uniform_ with a = sqrt(5)), which is U(−1/sqrt(in), 1/sqrt(in)).
func (g *RNG) LinearDefault(t *Tensor) {
	in, _ := Fans(t.Shape)
	g.Uniform(t, 1/math.Sqrt(float64(in)))
}
