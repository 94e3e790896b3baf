package nn

import (
	"math"
	"slices"
	"testing"

	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/tensor"
)

// The modules' forward passes are checked against float64 formulas written here, and their
// backward passes against central differences of those formulas (and, where it is simpler,
// closed-form float64 derivatives). Backward passes add: the tests start every gradient from
// random values and check the increment. Sizes span several tasks of each loop, and every test
// runs with 1 and 3 workers, which must agree bit for bit.

func newTestRunner(t *testing.T, workers int) *runner {
	r := &runner{pool: new(parallel.Pool)}
	t.Cleanup(r.pool.Close)
	r.setWorkers(workers)
	return r
}

func randn(rng *tensor.RNG, n int, std float64) []float32 {
	x := tensor.New(n)
	rng.Normal(x, std)
	return x.Data
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// increment returns after − before in float64: what a backward pass added.
func increment(after, before []float32) []float64 {
	out := make([]float64, len(after))
	for i := range after {
		out[i] = float64(after[i]) - float64(before[i])
	}
	return out
}

// checkFD compares got, the gradient of loss with respect to x, with central differences of
// loss at up to samples evenly spread coordinates of x, in relative norm.
func checkFD(t *testing.T, name string, x, got []float64, loss func() float64, samples int, tol float64) {
	t.Helper()
	step := max(1, len(x)/samples)
	var fd, an []float64
	for i := step / 2; i < len(x); i += step {
		old := x[i]
		h := 1e-5 * max(1, math.Abs(old))
		x[i] = old + h
		up := loss()
		x[i] = old - h
		down := loss()
		x[i] = old
		fd = append(fd, (up-down)/(2*h))
		an = append(an, got[i])
	}
	if e := tensor.RelError(an, fd); e > tol {
		t.Errorf("%s: gradient relative error %.3g against finite differences (%d coordinates)", name, e, len(fd))
	}
}

// dot returns Σ c·y in float64.
func dot(c []float32, y []float64) float64 {
	s := 0.0
	for i, v := range y {
		s += float64(c[i]) * v
	}
	return s
}

func sameBits(t *testing.T, name string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s differs at %d between worker counts: %v and %v", name, i, a[i], b[i])
		}
	}
}

// moduleRun is what one run of a module test produced, for comparing worker counts.
type moduleRun [][]float32

func (a moduleRun) same(t *testing.T, name string, b moduleRun) {
	t.Helper()
	for i := range a {
		sameBits(t, name, a[i], b[i])
	}
}

func newParams(specs []paramSpec, seed uint64) params {
	rng := tensor.NewRNG(seed)
	ps := params{}
	for _, s := range specs {
		p := s.newParam(rng)
		rng.Normal(p.Value, 0.5) // away from the default init, so every value matters
		rng.Normal(p.Grad, 0.1)  // backward must add to what is there
		ps[s.name] = p
	}
	return ps
}

// TestLinear checks y = x·Wᵀ + b and its gradients on shapes with several row and column blocks
// and a weight gradient summed in chunks.
func TestLinear(t *testing.T) {
	const n, in, out = 1030, 5, 260
	var runs []moduleRun
	for _, workers := range []int{1, 3} {
		r := newTestRunner(t, workers)
		ps := newParams(linearSpecs("fc", in, out), 1)
		l := newLinear(ps, "fc")
		rng := tensor.NewRNG(2)
		x, c, dx := randn(rng, n*in, 1), randn(rng, n*out, 1), randn(rng, n*in, 1)
		x64, w64, b64 := f64(x), f64(l.weight.Value.Data), f64(l.bias.Value.Data)
		ref := func() []float64 {
			y := make([]float64, n*out)
			for i := range n {
				for j := range out {
					s := b64[j]
					for k := range in {
						s += x64[i*in+k] * w64[j*in+k]
					}
					y[i*out+j] = s
				}
			}
			return y
		}
		y := l.forward(r, x, n)
		if e := tensor.RelError(y, ref()); e > 1e-6 {
			t.Errorf("forward relative error %.3g", e)
		}
		gw0, gb0, dx0 := slices.Clone(l.weight.Grad.Data), slices.Clone(l.bias.Grad.Data), slices.Clone(dx)
		l.backward(r, c, dx, n)
		loss := func() float64 { return dot(c, ref()) }
		checkFD(t, "dW", w64, increment(l.weight.Grad.Data, gw0), loss, 12, 1e-5)
		checkFD(t, "db", b64, increment(l.bias.Grad.Data, gb0), loss, 12, 1e-5)
		checkFD(t, "dx", x64, increment(dx, dx0), loss, 12, 1e-5)
		runs = append(runs, moduleRun{slices.Clone(y), l.weight.Grad.Data, l.bias.Grad.Data, dx})
	}
	runs[0].same(t, "linear", runs[1])
}

// TestLayerNorm checks LayerNorm against its float64 formula and its gradients with respect to
// the input, the gain and the shift.
func TestLayerNorm(t *testing.T) {
	const n, d = 70, 13
	var runs []moduleRun
	for _, workers := range []int{1, 3} {
		r := newTestRunner(t, workers)
		ps := newParams(layerNormSpecs("ln", d), 3)
		l := newLayerNorm(ps, "ln")
		rng := tensor.NewRNG(4)
		x, c, dx := randn(rng, n*d, 2), randn(rng, n*d, 1), randn(rng, n*d, 1)
		for i := range x {
			x[i] += float32(i % 5) // rows with a mean far from 0
		}
		x64, w64, b64 := f64(x), f64(l.weight.Value.Data), f64(l.bias.Value.Data)
		ref := func() []float64 {
			y := make([]float64, n*d)
			for i := range n {
				row := x64[i*d : (i+1)*d]
				mean, v := 0.0, 0.0
				for _, e := range row {
					mean += e / d
				}
				for _, e := range row {
					v += (e - mean) * (e - mean) / d
				}
				for j, e := range row {
					y[i*d+j] = (e-mean)/math.Sqrt(v+1e-5)*w64[j] + b64[j]
				}
			}
			return y
		}
		y := l.forward(r, x, n)
		if e := tensor.RelError(y, ref()); e > 1e-6 {
			t.Errorf("forward relative error %.3g", e)
		}
		gw0, gb0, dx0 := slices.Clone(l.weight.Grad.Data), slices.Clone(l.bias.Grad.Data), slices.Clone(dx)
		l.backward(r, c, dx, n)
		loss := func() float64 { return dot(c, ref()) }
		checkFD(t, "dw", w64, increment(l.weight.Grad.Data, gw0), loss, d, 1e-5)
		checkFD(t, "db", b64, increment(l.bias.Grad.Data, gb0), loss, d, 1e-5)
		checkFD(t, "dx", x64, increment(dx, dx0), loss, 60, 1e-5)
		runs = append(runs, moduleRun{slices.Clone(y), l.weight.Grad.Data, l.bias.Grad.Data, dx})
	}
	runs[0].same(t, "layer norm", runs[1])
}

// TestNormalCDF measures Φ against math.Erfc from −12 to 12: within 5e-8 absolute everywhere,
// 1e-6 relative for x ≥ −4, 5e-5 relative down to −10 (the interpolation's error relative to a
// tiny Φ), and 0 below, where Φ < 1e-23.
func TestNormalCDF(t *testing.T) {
	var xs []float32
	for x := -12.0; x <= 12; x += 0.0007 {
		xs = append(xs, float32(x))
	}
	cdf := make([]float32, len(xs))
	normalCDF(xs, cdf)
	for i, x := range xs {
		want := math.Erfc(-float64(x)/math.Sqrt2) / 2
		d := math.Abs(float64(cdf[i]) - want)
		rel := 5e-5
		if x >= -4 {
			rel = 1e-6
		}
		if d > 5e-8 || (x >= -10 && d > rel*want) || (x < -10 && cdf[i] != 0) {
			t.Fatalf("Φ(%v) = %v, want %v", x, cdf[i], want)
		}
	}
}

// TestGELU checks y = x·Φ(x) and dy/dx = Φ(x) + x·φ(x) against float64 formulas on values
// spanning several tasks, the tails included.
func TestGELU(t *testing.T) {
	const n = 5000
	var runs []moduleRun
	for _, workers := range []int{1, 3} {
		r := newTestRunner(t, workers)
		rng := tensor.NewRNG(5)
		x, dy, dx := randn(rng, n, 3), randn(rng, n, 1), randn(rng, n, 1)
		x[0], x[1], x[2] = -20, 20, 0
		var g gelu
		y := g.forward(r, x)
		dx0 := slices.Clone(dx)
		g.backward(r, dy, dx)
		wantY, wantDx := make([]float64, n), make([]float64, n)
		for i, v := range f64(x) {
			cdf := math.Erfc(-v/math.Sqrt2) / 2
			wantY[i] = v * cdf
			wantDx[i] = float64(dy[i]) * (cdf + v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi))
		}
		if e := tensor.RelError(y, wantY); e > 1e-6 {
			t.Errorf("forward relative error %.3g", e)
		}
		if e := tensor.RelError(increment(dx, dx0), wantDx); e > 1e-6 {
			t.Errorf("backward relative error %.3g", e)
		}
		runs = append(runs, moduleRun{slices.Clone(y), dx})
	}
	runs[0].same(t, "gelu", runs[1])
}

// TestEmbedding checks token plus learned position embeddings and their gradients, with tokens
// repeated across the batch.
func TestEmbedding(t *testing.T) {
	c := Config{Vocab: 4, SeqLen: 6, DModel: 3, Positions: Learned}
	const b, tl = 3, 5
	specs := []paramSpec{{name: "tok_emb.weight", shape: []int{c.Vocab, c.DModel}}, {name: "pos_emb.weight", shape: []int{c.SeqLen, c.DModel}}}
	ps := newParams(specs, 6)
	e := newEmbedding(ps, c)
	tokens := []int{0, 1, 1, 3, 0, 2, 2, 2, 0, 1, 3, 3, 0, 1, 0}
	tok64, pos64 := f64(e.tok.Value.Data), f64(e.pos.Value.Data)
	d := c.DModel
	ref := func() []float64 {
		y := make([]float64, b*tl*d)
		for i, tok := range tokens {
			for j := range d {
				y[i*d+j] = tok64[tok*d+j] + pos64[i%tl*d+j]
			}
		}
		return y
	}
	y := e.forward(tokens, b, tl)
	if err := tensor.RelError(y, ref()); err > 1e-7 {
		t.Errorf("forward relative error %.3g", err)
	}
	dy := randn(tensor.NewRNG(7), b*tl*d, 1)
	gt0, gp0 := slices.Clone(e.tok.Grad.Data), slices.Clone(e.pos.Grad.Data)
	e.backward(dy, tl)
	loss := func() float64 { return dot(dy, ref()) }
	checkFD(t, "dtok", tok64, increment(e.tok.Grad.Data, gt0), loss, 100, 1e-6)
	checkFD(t, "dpos", pos64, increment(e.pos.Grad.Data, gp0), loss, 100, 1e-6)
}

// TestSinusoid checks the positional table against sin(p/10000^(2i/d)) and cos at chosen
// entries, for an even and an odd width.
func TestSinusoid(t *testing.T) {
	for _, d := range []int{6, 7} {
		pe := sinusoid(50, d)
		for _, p := range []int{0, 1, 17, 49} {
			for i := 0; 2*i < d; i++ {
				angle := float64(p) / math.Pow(10000, float64(2*i)/float64(d))
				if got := pe[p*d+2*i]; math.Abs(float64(got)-math.Sin(angle)) > 1e-7 {
					t.Errorf("d %d: PE[%d, %d] = %v, want sin(%v)", d, p, 2*i, got, angle)
				}
				if 2*i+1 < d {
					if got := pe[p*d+2*i+1]; math.Abs(float64(got)-math.Cos(angle)) > 1e-7 {
						t.Errorf("d %d: PE[%d, %d] = %v, want cos(%v)", d, p, 2*i+1, got, angle)
					}
				}
			}
		}
	}
}

// TestCrossEntropy checks the mean loss over scored rows, the accuracy counts and dL/dlogits
// against a float64 formula and its finite differences; unscored rows have targets outside the
// vocabulary, which must not be read.
func TestCrossEntropy(t *testing.T) {
	const n, v = 150, 9
	var runs []moduleRun
	for _, workers := range []int{1, 3} {
		r := newTestRunner(t, workers)
		rng := tensor.NewRNG(8)
		logits := randn(rng, n*v, 3)
		targets, scored := make([]int, n), make([]bool, n)
		for i := range n {
			scored[i] = i%4 != 1
			targets[i] = (i * 7) % v
			if !scored[i] {
				targets[i] = -1
			}
		}
		copy(logits[2*v:3*v], []float32{0, 0, 5, 5, 0, 0, 0, 0, 0}) // a tie: the first largest counts
		targets[2] = 2
		l64 := f64(logits)
		wantCorrect, wantCounted := 0, 0
		ref := func() float64 {
			sum, counted := 0.0, 0
			for i := range n {
				if !scored[i] {
					continue
				}
				row := l64[i*v : (i+1)*v]
				m := slices.Max(row)
				se := 0.0
				for _, x := range row {
					se += math.Exp(x - m)
				}
				sum += math.Log(se) + m - row[targets[i]]
				counted++
			}
			return sum / float64(counted)
		}
		for i := range n {
			if scored[i] {
				wantCounted++
				row := l64[i*v : (i+1)*v]
				if slices.Index(row, slices.Max(row)) == targets[i] {
					wantCorrect++
				}
			}
		}
		grad := make([]float32, n*v)
		loss, correct, counted := crossEntropy(r, logits, v, targets, scored, grad)
		if want := ref(); math.Abs(loss-want) > 1e-6*want || correct != wantCorrect || counted != wantCounted {
			t.Errorf("loss %v, %d of %d correct; want %v, %d of %d", loss, correct, counted, want, wantCorrect, wantCounted)
		}
		checkFD(t, "dlogits", l64, f64(grad), ref, 200, 1e-5)
		runs = append(runs, moduleRun{grad})

		if loss, correct, counted := crossEntropy(r, logits, v, targets, make([]bool, n), grad); loss != 0 || correct != 0 || counted != 0 || slices.Max(grad) != 0 || slices.Min(grad) != 0 {
			t.Errorf("nothing scored: loss %v, %d of %d, gradient not all 0", loss, correct, counted)
		}
	}
	runs[0].same(t, "cross entropy", runs[1])
}
