package nn

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// halfPair returns a model of NewModelHalf holding cfg's initial parameters rounded to format,
// and the float32 model of NewModel holding the rounded values.
func halfPair(t *testing.T, cfg Config, format tensor.HalfFormat) (half, full *Model) {
	t.Helper()
	full, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sd := map[string]*tensor.Half{}
	for name, v := range full.StateDict() {
		h := &tensor.Half{Shape: slices.Clone(v.Shape), Data: make([]uint16, len(v.Data)), Format: format}
		if format == tensor.BFloat16 {
			kernel.EncodeBF16(h.Data, v.Data)
		} else {
			kernel.EncodeF16(h.Data, v.Data)
		}
		kernel.DecodeHalf(v.Data, h.Data, format == tensor.BFloat16) // the model's own tensors
		sd[name] = h
	}
	if half, err = NewModelHalf(cfg, sd); err != nil {
		t.Fatal(err)
	}
	return half, full
}

// halfConfigs are hfConfigs and a wider model whose matrix products span several GEMM blocks.
func halfConfigs() map[string]Config {
	cs := hfConfigs()
	cs["wide"] = Config{Vocab: 300, SeqLen: 40, DModel: 64, Heads: 4, Layers: 2, FFN: 280, Norm: PreNorm, Positions: NoPositions,
		NormKind: RMSNorm, Activation: SwiGLU, NoMLPBias: true, NoHeadBias: true, KVHeads: 2, Rope: &Rope{Theta: 1000}, NoAttnBias: true, Seed: 9}
	return cs
}

// TestModelHalf checks a model holding bfloat16 or float16 weights against the float32 model
// holding their values: the same bits from Forward, from ForwardCached at every step, from
// Backward's gradients of the gates and of the float32 parameters; no gradient and no float32
// copy for the half-precision ones.
func TestModelHalf(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(halfConfigs())) {
		cfg := halfConfigs()[name]
		for _, format := range []tensor.HalfFormat{tensor.BFloat16, tensor.Float16} {
			t.Run(fmt.Sprintf("%s/%v", name, format), func(t *testing.T) {
				half, full := halfPair(t, cfg, format)
				if half.NumParams() != full.NumParams() {
					t.Errorf("NumParams %d, float32 model's %d", half.NumParams(), full.NumParams())
				}
				hb, fb := half.ParamBytes()
				if _, ffull := full.ParamBytes(); hb == 0 || 2*hb+fb != ffull {
					t.Errorf("ParamBytes %d half + %d float, want halves of the float32 model's %d", hb, fb, ffull)
				}
				for _, p := range half.Params() {
					want := (p.Name == "tok_emb.weight" || strings.HasSuffix(p.Name, "_weight") || strings.HasSuffix(p.Name, "proj.weight") ||
						strings.HasPrefix(p.Name, "head") && strings.HasSuffix(p.Name, ".weight") && p.Name != "head_ln.weight" ||
						strings.Contains(p.Name, "ffn.") && strings.HasSuffix(p.Name, ".weight"))
					if (p.Half != nil) != want || (p.Half != nil) != (p.Value == nil) || (p.Half != nil) != (p.Grad == nil) {
						t.Errorf("%s: Half %v, Value %v, Grad %v", p.Name, p.Half != nil, p.Value != nil, p.Grad != nil)
					}
				}
				if p := half.Param("tok_emb.weight"); p == nil || p.Half == nil || half.Param("nope") != nil {
					t.Errorf("Param: tok_emb.weight %v, nope %v", p, half.Param("nope"))
				}
				if err := half.CheckFinite(); err != nil {
					t.Error(err)
				}
				for pname, v := range half.StateDict() {
					if !slices.Equal(v.Data, full.StateDict()[pname].Data) {
						t.Errorf("StateDict %s differs from the float32 model's", pname)
					}
				}

				b, n := 2, min(cfg.SeqLen, 13)
				tokens, targets := make([]int, b*n), make([]int, b*n)
				for i := range tokens {
					tokens[i], targets[i] = (7*i+3)%cfg.Vocab, (5*i+1)%cfg.Vocab
				}
				gates := make([]mha.HeadOptions, cfg.Layers)
				for l := range gates {
					gates[l].Gate = tensor.New(b, cfg.Heads)
					for i := range gates[l].Gate.Data {
						gates[l].Gate.Data[i] = 1 - 0.05*float32(i)
					}
				}
				opt := &RunOptions{Heads: gates, KeepWeights: true}
				if cfg.TypeVocab > 0 {
					opt.TokenTypes = make([]int, b*n)
					for i := range opt.TokenTypes {
						opt.TokenTypes[i] = i % cfg.TypeVocab
					}
				}
				for _, m := range []*Model{half, full} {
					if _, err := m.Forward(tokens, b, n, opt); err != nil {
						t.Fatal(err)
					}
				}
				if !bitsEqual(half.logits, full.logits) {
					t.Fatal("Forward: the logits differ from the float32 model's")
				}
				for _, m := range []*Model{half, full} {
					if _, _, _, err := m.Loss(targets, nil); err != nil {
						t.Fatal(err)
					}
					if err := m.Backward(); err != nil {
						t.Fatal(err)
					}
				}
				for l := range cfg.Layers {
					if !bitsEqual(half.GateGrad(l).Data, full.GateGrad(l).Data) {
						t.Errorf("GateGrad(%d) differs from the float32 model's", l)
					}
				}
				fullParams := full.Params()
				for i, p := range half.Params() {
					if p.Grad != nil && !bitsEqual(p.Grad.Data, fullParams[i].Grad.Data) {
						t.Errorf("gradient of %s differs from the float32 model's", p.Name)
					}
				}
				ZeroGrads(half.Params())
				ClipGradNorm(half.Params(), 1)

				if cfg.Bidirectional {
					return
				}
				var caches [2]*Cache
				for i, m := range []*Model{half, full} {
					c, err := m.NewCache(b, n, mha.CacheFloat32)
					if err != nil {
						t.Fatal(err)
					}
					caches[i] = c
				}
				for start, step := 0, 5; start < n; start, step = start+step, 1 {
					step = min(step, n-start)
					part := make([]int, 0, b*step)
					for bb := range b {
						part = append(part, tokens[bb*n+start:bb*n+start+step]...)
					}
					var logits [2][]float32
					for i, m := range []*Model{half, full} {
						y, err := m.ForwardCached(caches[i], part, b, step, nil)
						if err != nil {
							t.Fatal(err)
						}
						logits[i] = y.Data
					}
					if !bitsEqual(logits[0], logits[1]) {
						t.Fatalf("ForwardCached at %d: the logits differ from the float32 model's", start)
					}
				}
			})
		}
	}
}

// TestModelHalfErrors checks what NewModelHalf refuses and what a half-precision model cannot do.
func TestModelHalfErrors(t *testing.T) {
	cfg := hfConfigs()["gpt2"]
	half, _ := halfPair(t, cfg, tensor.BFloat16)
	sd := map[string]*tensor.Half{}
	for _, p := range half.Params() {
		h := p.Half
		if h == nil {
			h = &tensor.Half{Shape: p.Value.Shape, Data: make([]uint16, len(p.Value.Data)), Format: tensor.BFloat16}
		}
		sd[p.Name] = h
	}
	if _, err := NewModelHalf(cfg, sd); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(sd map[string]*tensor.Half)) map[string]*tensor.Half {
		c := maps.Clone(sd)
		f(c)
		return c
	}
	for _, tc := range []struct {
		name, want string
		sd         map[string]*tensor.Half
	}{
		{"missing", `missing parameter "ln_f.bias"`, edit(func(sd map[string]*tensor.Half) { delete(sd, "ln_f.bias") })},
		{"extra", `unexpected tensor "head.weight"`, edit(func(sd map[string]*tensor.Half) { sd["head.weight"] = sd["tok_emb.weight"] })},
		{"shape", `"ln_f.bias" is [4 2], want [8]`, edit(func(sd map[string]*tensor.Half) {
			sd["ln_f.bias"] = &tensor.Half{Shape: []int{4, 2}, Data: make([]uint16, 8), Format: tensor.BFloat16}
		})},
		{"count", `"ln_f.bias" has 3 values for shape [8]`, edit(func(sd map[string]*tensor.Half) {
			sd["ln_f.bias"] = &tensor.Half{Shape: []int{8}, Data: make([]uint16, 3), Format: tensor.BFloat16}
		})},
		{"mixed", "want all bfloat16 or all float16", edit(func(sd map[string]*tensor.Half) {
			sd["ln_f.bias"] = &tensor.Half{Shape: []int{8}, Data: make([]uint16, 8), Format: tensor.Float16}
		})},
		{"nil", `"ln_f.bias" is nil`, edit(func(sd map[string]*tensor.Half) { sd["ln_f.bias"] = nil })},
	} {
		if _, err := NewModelHalf(cfg, tc.sd); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewAdamW(half.Params(), AdamWConfig{}); err == nil || !strings.Contains(err.Error(), "held in bfloat16") {
		t.Errorf("NewAdamW on half weights: %v", err)
	}
	if err := half.LoadStateDict(half.StateDict()); err == nil || !strings.Contains(err.Error(), "want a float32 model") {
		t.Errorf("LoadStateDict on half weights: %v", err)
	}
	sd["blocks.1.ffn.fc2.weight"].Data[5] = 0x7fc0 // NaN
	if err := half.CheckFinite(); err == nil || !strings.Contains(err.Error(), "blocks.1.ffn.fc2.weight") {
		t.Errorf("CheckFinite with a NaN: %v", err)
	}
}

// bitsEqual reports whether a and b hold the same float32 bit patterns.
func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
