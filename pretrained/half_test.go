package pretrained

import (
	"math"
	"slices"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// TestOpenHalf checks that the folders stored in bfloat16 or float16 open as models holding
// their weight matrices as stored, and that these give the same bits as the same folder
// converted to float32 (Options.Float32): Forward, a gated Backward's gate gradients, and
// ForwardCached at every step.
func TestOpenHalf(t *testing.T) {
	for name, format := range map[string]tensor.HalfFormat{"llama3-bf16": tensor.BFloat16, "gpt2-prefixed-f16-sharded": tensor.Float16} {
		t.Run(name, func(t *testing.T) {
			half, err := Open(testdataDir(name))
			if err != nil {
				t.Fatal(err)
			}
			full, err := Options{Float32: true}.Open(testdataDir(name))
			if err != nil {
				t.Fatal(err)
			}
			halves := 0
			for _, p := range half.NN.Params() {
				if p.Half != nil {
					halves++
					if p.Half.Format != format {
						t.Errorf("%s is %v, want %v", p.Name, p.Half.Format, format)
					}
				}
			}
			if hb, _ := full.NN.ParamBytes(); halves == 0 || hb != 0 {
				t.Fatalf("%d half-precision parameters, and %d bytes of them with Float32", halves, hb)
			}
			cfg := half.NN.Config()
			b, n := 2, 7
			tokens := make([]int, b*n)
			for i := range tokens {
				tokens[i] = (11*i + 2) % cfg.Vocab
			}
			gates := make([]mha.HeadOptions, cfg.Layers)
			for l := range gates {
				gates[l].Gate = tensor.New(b, cfg.Heads)
				for i := range gates[l].Gate.Data {
					gates[l].Gate.Data[i] = 1
				}
			}
			var logits [2][]float32
			for i, m := range []*nn.Model{half.NN, full.NN} {
				y, err := m.Forward(tokens, b, n, &nn.RunOptions{Heads: gates})
				if err != nil {
					t.Fatal(err)
				}
				logits[i] = slices.Clone(y.Data)
				if _, _, _, err := m.Loss(tokens, nil); err != nil {
					t.Fatal(err)
				}
				if err := m.Backward(); err != nil {
					t.Fatal(err)
				}
			}
			if !bitsEqual(logits[0], logits[1]) {
				t.Fatal("Forward differs from the float32 model's")
			}
			for l := range cfg.Layers {
				if !bitsEqual(half.NN.GateGrad(l).Data, full.NN.GateGrad(l).Data) {
					t.Errorf("GateGrad(%d) differs from the float32 model's", l)
				}
			}
			var caches [2]*nn.Cache
			for i, m := range []*nn.Model{half.NN, full.NN} {
				if caches[i], err = m.NewCache(1, n, mha.CacheFloat32); err != nil {
					t.Fatal(err)
				}
			}
			for start, step := 0, 4; start < n; start, step = start+step, 1 {
				for i, m := range []*nn.Model{half.NN, full.NN} {
					y, err := m.ForwardCached(caches[i], tokens[start:start+step], 1, step, nil)
					if err != nil {
						t.Fatal(err)
					}
					logits[i] = slices.Clone(y.Data)
				}
				if !bitsEqual(logits[0], logits[1]) {
					t.Fatalf("ForwardCached at %d differs from the float32 model's", start)
				}
			}
		})
	}
	// A float32 folder stays float32.
	m, err := Open(testdataDir("llama"))
	if err != nil {
		t.Fatal(err)
	}
	if hb, _ := m.NN.ParamBytes(); hb != 0 {
		t.Errorf("float32 folder: %d bytes held in half precision", hb)
	}
}

// bitsEqual reports whether a and b hold the same float32 bit patterns.
func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
