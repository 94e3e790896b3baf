package nn

import (
	"math"
	"slices"
	"strings"
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
// and a weight gradient summed in chunks, with and without a bias.
func TestLinear(t *testing.T) {
	const n, in, out = 1030, 5, 260
	for _, bias := range []bool{true, false} {
		var runs []moduleRun
		for _, workers := range []int{1, 3} {
			r := newTestRunner(t, workers)
			ps := newParams(linearSpecs("fc", in, out, bias), 1)
			l := newLinear(ps, "fc")
			if (l.bias != nil) != bias {
				t.Fatalf("bias %v: the Linear has bias %v", bias, l.bias)
			}
			rng := tensor.NewRNG(2)
			x, c, dx := randn(rng, n*in, 1), randn(rng, n*out, 1), randn(rng, n*in, 1)
			x64, w64 := f64(x), f64(l.weight.Value.Data)
			b64 := make([]float64, out)
			if bias {
				b64 = f64(l.bias.Value.Data)
			}
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
				t.Errorf("bias %v: forward relative error %.3g", bias, e)
			}
			gw0, dx0 := slices.Clone(l.weight.Grad.Data), slices.Clone(dx)
			var gb0 []float32
			if bias {
				gb0 = slices.Clone(l.bias.Grad.Data)
			}
			l.backward(r, c, dx, n)
			loss := func() float64 { return dot(c, ref()) }
			checkFD(t, "dW", w64, increment(l.weight.Grad.Data, gw0), loss, 12, 1e-5)
			checkFD(t, "dx", x64, increment(dx, dx0), loss, 12, 1e-5)
			run := moduleRun{slices.Clone(y), l.weight.Grad.Data, dx}
			if bias {
				checkFD(t, "db", b64, increment(l.bias.Grad.Data, gb0), loss, 12, 1e-5)
				run = append(run, l.bias.Grad.Data)
			}
			runs = append(runs, run)
		}
		runs[0].same(t, "linear", runs[1])
	}
}

// TestNorm checks LayerNorm and RMSNorm, at several eps, against their float64 formulas and
// their gradients with respect to the input, the gain and (LayerNorm's) shift.
func TestNorm(t *testing.T) {
	const n, d = 70, 13
	for _, c := range []Config{
		{DModel: d},                 // LayerNorm, eps 1e-5: the model before norm_eps
		{DModel: d, NormEps: 1e-12}, // BERT
		{DModel: d, NormKind: LayerNorm, NormEps: 0.5}, // an eps large enough to matter
		{DModel: d, NormKind: RMSNorm, NormEps: 1e-6},  // Llama
		{DModel: d, NormKind: RMSNorm, NormEps: 0.5},
	} {
		rms := c.NormKind == RMSNorm
		var runs []moduleRun
		for _, workers := range []int{1, 3} {
			r := newTestRunner(t, workers)
			ps := newParams(c.normSpecs("ln"), 3)
			l := newNorm(ps, c, "ln")
			if (l.bias == nil) != rms {
				t.Fatalf("%s: bias %v", c.NormKind, l.bias)
			}
			rng := tensor.NewRNG(4)
			x, g, dx := randn(rng, n*d, 2), randn(rng, n*d, 1), randn(rng, n*d, 1)
			for i := range x {
				x[i] += float32(i % 5) // rows with a mean far from 0
			}
			x64, w64 := f64(x), f64(l.weight.Value.Data)
			b64 := make([]float64, d)
			if !rms {
				b64 = f64(l.bias.Value.Data)
			}
			eps := c.normEps()
			ref := func() []float64 {
				y := make([]float64, n*d)
				for i := range n {
					row := x64[i*d : (i+1)*d]
					mean, v := 0.0, 0.0
					if !rms {
						for _, e := range row {
							mean += e / d
						}
					}
					for _, e := range row {
						v += (e - mean) * (e - mean) / d
					}
					for j, e := range row {
						y[i*d+j] = (e-mean)/math.Sqrt(v+eps)*w64[j] + b64[j]
					}
				}
				return y
			}
			y := l.forward(r, x, n)
			if e := tensor.RelError(y, ref()); e > 1e-6 {
				t.Errorf("%+v: forward relative error %.3g", c, e)
			}
			gw0, dx0 := slices.Clone(l.weight.Grad.Data), slices.Clone(dx)
			var gb0 []float32
			if !rms {
				gb0 = slices.Clone(l.bias.Grad.Data)
			}
			l.backward(r, g, dx, n)
			loss := func() float64 { return dot(g, ref()) }
			checkFD(t, c.NormKind+" dw", w64, increment(l.weight.Grad.Data, gw0), loss, d, 1e-5)
			checkFD(t, c.NormKind+" dx", x64, increment(dx, dx0), loss, 60, 1e-5)
			run := moduleRun{slices.Clone(y), l.weight.Grad.Data, dx}
			if !rms {
				checkFD(t, "db", b64, increment(l.bias.Grad.Data, gb0), loss, d, 1e-5)
				run = append(run, l.bias.Grad.Data)
			}
			runs = append(runs, run)
		}
		runs[0].same(t, "norm", runs[1])
	}
}

// TestActivation checks y = x·s(x) and dy/dx = s(x) + x·s′(x) for the exact GELU, its tanh
// approximation and SiLU against float64 formulas (GELU-tanh in the form PyTorch writes it,
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))) and their derivatives, on values spanning several
// tasks, the tails included.
func TestActivation(t *testing.T) {
	const n = 5000
	sigmoid := func(z float64) float64 { return 1 / (1 + math.Exp(-z)) }
	for _, c := range []struct {
		name string
		f    func(x float64) float64
	}{
		{GELU, func(x float64) float64 { return x * math.Erfc(-x/math.Sqrt2) / 2 }},
		{GELUNew, func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}},
		{SwiGLU, func(x float64) float64 { return x * sigmoid(x) }},
	} {
		var runs []moduleRun
		for _, workers := range []int{1, 3} {
			r := newTestRunner(t, workers)
			rng := tensor.NewRNG(5)
			x, dy, dx := randn(rng, n, 3), randn(rng, n, 1), randn(rng, n, 1)
			x[0], x[1], x[2] = -20, 20, 0
			a := activation{kind: activationOf(c.name)}
			y := a.forward(r, x)
			dx0 := slices.Clone(dx)
			a.backward(r, dy, dx)
			wantY, wantDx := make([]float64, n), make([]float64, n)
			for i, v := range f64(x) {
				wantY[i] = c.f(v)
				h := 1e-6 * max(1, math.Abs(v))
				wantDx[i] = float64(dy[i]) * (c.f(v+h) - c.f(v-h)) / (2 * h)
			}
			if e := tensor.RelError(y, wantY); e > 1e-6 {
				t.Errorf("%s: forward relative error %.3g", c.name, e)
			}
			if e := tensor.RelError(increment(dx, dx0), wantDx); e > 1e-6 {
				t.Errorf("%s: backward relative error %.3g", c.name, e)
			}
			runs = append(runs, moduleRun{slices.Clone(y), dx})
		}
		runs[0].same(t, c.name, runs[1])

		// Far tails, where x³ and x² overflow float32: y is ReLU(x), dy/dx its step.
		r := newTestRunner(t, 1)
		x := []float32{-1e20, 1e20, -math.MaxFloat32, math.MaxFloat32}
		dy := []float32{1, 1, 1, 1}
		dx := make([]float32, len(x))
		a := activation{kind: activationOf(c.name)}
		y := a.forward(r, x)
		a.backward(r, dy, dx)
		for i, v := range x {
			if want := max(v, 0); y[i] != want || dx[i] != float32(max(0, min(1, want))) {
				t.Errorf("%s(%g) = %g, derivative %g; want %g and the step", c.name, v, y[i], dx[i], want)
			}
		}
	}
}

// TestMLP checks the feed-forward networks — GELU and GELU-tanh fc2(act(fc1(x))), SwiGLU
// down_proj(SiLU(gate_proj(x)) ⊙ up_proj(x)), with and without biases — against float64
// formulas and every gradient against their finite differences.
func TestMLP(t *testing.T) {
	const n, d, f = 150, 6, 40
	sigmoid := func(z float64) float64 { return 1 / (1 + math.Exp(-z)) }
	acts := map[string]func(float64) float64{
		GELU:            func(x float64) float64 { return x * math.Erfc(-x/math.Sqrt2) / 2 },
		GELUPyTorchTanh: func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) },
		SwiGLU:          func(x float64) float64 { return x * sigmoid(x) },
	}
	for _, c := range []Config{
		{DModel: d, FFN: f, Layers: 1, Activation: GELUPyTorchTanh},
		{DModel: d, FFN: f, Layers: 1, Activation: GELU, NoMLPBias: true},
		{DModel: d, FFN: f, Layers: 1, Activation: SwiGLU, NoMLPBias: true}, // Llama
		{DModel: d, FFN: f, Layers: 1, Activation: SwiGLU},
	} {
		var specs []paramSpec
		for _, s := range c.layout() {
			if name, ok := strings.CutPrefix(s.name, "blocks.0.ffn."); ok {
				s.name = name
				specs = append(specs, s)
			}
		}
		if want := 2 + 2*btoi(!c.NoMLPBias) + (1+btoi(!c.NoMLPBias))*btoi(c.Activation == SwiGLU); len(specs) != want {
			t.Fatalf("%+v: %d parameters, want %d", c, len(specs), want)
		}
		act := acts[c.Activation]
		var runs []moduleRun
		for _, workers := range []int{1, 3} {
			r := newTestRunner(t, workers)
			ps := newParams(specs, 9)
			m := newMLP(ps, c, "")
			rng := tensor.NewRNG(10)
			x, g, dx := randn(rng, n*d, 1), randn(rng, n*d, 1), randn(rng, n*d, 1)
			x64 := f64(x)
			p64 := map[string][]float64{}
			for name, p := range ps {
				p64[name] = f64(p.Value.Data)
			}
			lin := func(name string, in []float64, nin, nout int) []float64 {
				w, b := p64[name+".weight"], p64[name+".bias"]
				y := make([]float64, n*nout)
				for i := range n {
					for j := range nout {
						s := 0.0
						if b != nil {
							s = b[j]
						}
						for k := range nin {
							s += in[i*nin+k] * w[j*nin+k]
						}
						y[i*nout+j] = s
					}
				}
				return y
			}
			ref := func() []float64 {
				if c.Activation == SwiGLU {
					gate, up := lin("gate_proj", x64, d, f), lin("up_proj", x64, d, f)
					for i := range gate {
						gate[i] = act(gate[i]) * up[i]
					}
					return lin("down_proj", gate, f, d)
				}
				h := lin("fc1", x64, d, f)
				for i := range h {
					h[i] = act(h[i])
				}
				return lin("fc2", h, f, d)
			}
			y := m.forward(r, x, n)
			if e := tensor.RelError(y, ref()); e > 1e-6 {
				t.Errorf("%+v: forward relative error %.3g", c, e)
			}
			before := map[string][]float32{}
			for name, p := range ps {
				before[name] = slices.Clone(p.Grad.Data)
			}
			dx0 := slices.Clone(dx)
			var s scratch
			m.backward(r, g, dx, n, &s)
			loss := func() float64 { return dot(g, ref()) }
			checkFD(t, c.Activation+" dx", x64, increment(dx, dx0), loss, 50, 1e-5)
			run := moduleRun{slices.Clone(y), dx}
			for _, sp := range specs {
				checkFD(t, c.Activation+" "+sp.name, p64[sp.name], increment(ps[sp.name].Grad.Data, before[sp.name]), loss, 50, 1e-5)
				run = append(run, ps[sp.name].Grad.Data)
			}
			runs = append(runs, run)
		}
		runs[0].same(t, c.Activation, runs[1])
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestEmbedding checks the embeddings — tokens plus learned, sinusoidal or no positions, plus
// token types (given, or nil for all 0), then a LayerNorm or RMSNorm — and their gradients, with
// tokens repeated across the batch.
func TestEmbedding(t *testing.T) {
	const b, tl = 3, 5
	tokens := []int{0, 1, 1, 3, 0, 2, 2, 2, 0, 1, 3, 3, 0, 1, 0}
	types := []int{0, 0, 1, 1, 2, 1, 0, 0, 2, 2, 1, 1, 1, 0, 0}
	base := Config{Vocab: 4, SeqLen: 6, DModel: 3}
	for _, c := range []struct {
		edit  func(*Config)
		types []int
	}{
		{func(c *Config) { c.Positions = Learned }, nil},
		{func(c *Config) { c.Positions = Sinusoidal }, nil},
		{func(c *Config) { c.Positions = NoPositions }, nil},
		{func(c *Config) { c.Positions, c.TypeVocab, c.EmbNorm, c.NormEps = Learned, 3, true, 1e-12 }, types}, // BERT
		{func(c *Config) { c.Positions, c.TypeVocab = Sinusoidal, 2 }, nil},
		{func(c *Config) { c.Positions, c.EmbNorm, c.NormKind = NoPositions, true, RMSNorm }, nil},
	} {
		cfg := base
		c.edit(&cfg)
		specs := cfg.layout()[:0]
		for _, s := range cfg.layout() {
			if !strings.HasPrefix(s.name, "blocks.") && !strings.HasPrefix(s.name, "head.") {
				specs = append(specs, s)
			}
		}
		ps := newParams(specs, 6)
		e := newEmbedding(ps, cfg)
		d := cfg.DModel
		p64 := map[string][]float64{}
		for name, p := range ps {
			p64[name] = f64(p.Value.Data)
		}
		table := f64(sinusoid(tl, d))
		ref := func() []float64 {
			y := make([]float64, b*tl*d)
			for i, tok := range tokens {
				row := y[i*d : (i+1)*d]
				for j := range d {
					row[j] = p64["tok_emb.weight"][tok*d+j]
					switch cfg.Positions {
					case Learned:
						row[j] += p64["pos_emb.weight"][i%tl*d+j]
					case Sinusoidal:
						row[j] += table[i%tl*d+j]
					}
					if cfg.TypeVocab > 0 {
						typ := 0
						if c.types != nil {
							typ = c.types[i]
						}
						row[j] += p64["type_emb.weight"][typ*d+j]
					}
				}
				if !cfg.EmbNorm {
					continue
				}
				mean, v := 0.0, 0.0
				for _, x := range row {
					if cfg.NormKind != RMSNorm {
						mean += x / float64(d)
					}
				}
				for _, x := range row {
					v += (x - mean) * (x - mean) / float64(d)
				}
				for j, x := range row {
					row[j] = (x - mean) / math.Sqrt(v+cfg.normEps()) * p64["emb_ln.weight"][j]
					if cfg.NormKind != RMSNorm {
						row[j] += p64["emb_ln.bias"][j]
					}
				}
			}
			return y
		}
		r := newTestRunner(t, 2)
		y := e.forward(r, tokens, c.types, b, tl, 0)
		if err := tensor.RelError(y, ref()); err > 1e-6 {
			t.Errorf("%+v: forward relative error %.3g", cfg, err)
		}
		dy := randn(tensor.NewRNG(7), b*tl*d, 1)
		before := map[string][]float32{}
		for name, p := range ps {
			before[name] = slices.Clone(p.Grad.Data)
		}
		e.backward(r, dy, tl)
		loss := func() float64 { return dot(dy, ref()) }
		for _, s := range specs {
			checkFD(t, s.name, p64[s.name], increment(ps[s.name].Grad.Data, before[s.name]), loss, 100, 1e-5)
		}
	}
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
