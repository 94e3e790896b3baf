package nn

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// goldenCase is one file of testdata/golden, written by testdata/gen_nn_golden.py.
type goldenCase struct {
	name            string
	f               *safetensors.File
	cfg             Config
	b, t            int
	tokens, targets []int
	types           []int // token types, nil for the default
	scored          []bool
	logits          []float64
	loss, correct   float64
	sd              map[string]*tensor.Tensor
	wantGrad        map[string][]float64
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	paths, err := filepath.Glob("testdata/golden/*.safetensors")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	var cases []goldenCase
	for _, path := range paths {
		f, err := safetensors.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		c := goldenCase{name: strings.TrimSuffix(filepath.Base(path), ".safetensors"), f: f,
			sd: map[string]*tensor.Tensor{}, wantGrad: map[string][]float64{}}
		if c.cfg, err = ParseConfig([]byte(f.Metadata[ConfigKey])); err != nil {
			t.Fatal(err)
		}
		c.tokens, c.b, c.t = goldenInts(t, f, "tokens")
		c.targets, _, _ = goldenInts(t, f, "targets")
		if f.Has("token_types") {
			c.types, _, _ = goldenInts(t, f, "token_types")
		}
		scored, err := f.Bool("scored")
		if err != nil {
			t.Fatal(err)
		}
		c.scored = scored.Data
		c.logits = goldenFloats(t, f, "logits")
		c.loss = goldenFloats(t, f, "loss")[0]
		c.correct = goldenFloats(t, f, "correct")[0]
		for _, s := range c.cfg.withDefaults().layout() {
			if c.sd[s.name], err = f.Float32(s.name); err != nil {
				t.Fatal(err)
			}
			c.wantGrad[s.name] = goldenFloats(t, f, "grad."+s.name)
		}
		cases = append(cases, c)
	}
	return cases
}

func goldenFloats(t *testing.T, f *safetensors.File, name string) []float64 {
	t.Helper()
	v, _, err := f.Float64(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// goldenInts reads a [B, T] integer tensor.
func goldenInts(t *testing.T, f *safetensors.File, name string) (v []int, b, n int) {
	t.Helper()
	x, shape, err := f.Float64(name)
	if err != nil || len(shape) != 2 {
		t.Fatalf("%s: shape %v, %v", name, shape, err)
	}
	for _, e := range x {
		v = append(v, int(e))
	}
	return v, shape[0], shape[1]
}

// TestGolden loads PyTorch's parameters into the Go model and checks the logits, the loss, the
// accuracy and every parameter's gradient against PyTorch's float64 run of the same module, with
// 1 and 3 workers. The cases span the Hugging Face options (see gen_nn_golden.py's CASES):
// RMSNorm, eps, GELU-tanh, SwiGLU, Linears without bias, a tied head (whose gradient PyTorch's
// autograd adds into tok_emb.weight), token types given or left at 0, the embedding norm and
// no positions.
func TestGolden(t *testing.T) {
	for _, c := range loadGolden(t) {
		for _, workers := range []int{1, 3} {
			m, err := NewModel(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.LoadStateDict(c.sd); err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, p := range m.Params() {
				order = append(order, p.Name)
			}
			var want []string
			if err := json.Unmarshal([]byte(c.f.Metadata["names"]), &want); err != nil || !slices.Equal(order, want) {
				t.Errorf("%s: parameter order\n%v\nPyTorch's named_parameters (%v)\n%v", c.name, order, err, want)
			}
			logits, err := m.Forward(c.tokens, c.b, c.t, &RunOptions{Workers: workers, TokenTypes: c.types})
			if err != nil {
				t.Fatal(err)
			}
			if e := tensor.RelError(logits.Data, c.logits); e > 1e-5 {
				t.Errorf("%s: logits relative error %.3g", c.name, e)
			}
			loss, correct, counted, err := m.Loss(c.targets, c.scored)
			if err != nil {
				t.Fatal(err)
			}
			wantCounted := 0
			for _, s := range c.scored {
				if s {
					wantCounted++
				}
			}
			if math.Abs(loss-c.loss) > 1e-5*c.loss || float64(correct) != c.correct || counted != wantCounted {
				t.Errorf("%s: loss %.7f, %d of %d correct; PyTorch %.7f, %v of %d", c.name, loss, correct, counted, c.loss, c.correct, wantCounted)
			}
			if err := m.Backward(); err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for _, p := range m.Params() {
				e := tensor.RelError(p.Grad.Data, c.wantGrad[p.Name])
				worst = max(worst, e)
				if e > 1e-4 {
					t.Errorf("%s: grad of %s relative error %.3g", c.name, p.Name, e)
				}
			}
			t.Logf("%s, %d workers: worst gradient relative error %.3g", c.name, workers, worst)
		}
	}
}
