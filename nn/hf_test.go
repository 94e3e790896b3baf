package nn

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// The model-level tests of the Config options that make Hugging Face's families configurations
// of nn (norm_kind, norm_eps, activation, no_mlp_bias, no_head_bias, tie_embeddings, type_vocab,
// emb_norm, positions "none"). The modules are tested in modules_test.go and the whole model
// against PyTorch in golden_test.go.

// hfConfigs returns small configs of the families, each with options mixed differently.
func hfConfigs() map[string]Config {
	base := Config{Vocab: 11, SeqLen: 8, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Seed: 5}
	with := func(edit func(*Config)) Config {
		c := base
		edit(&c)
		return c
	}
	return map[string]Config{
		"llama": with(func(c *Config) {
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias = SwiGLU, true, true
			c.KVHeads, c.Rope, c.NoAttnBias, c.Window = 1, &Rope{Theta: 100}, true, 3
		}),
		"qwen3": with(func(c *Config) {
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.TieEmbeddings = SwiGLU, true, true, true
			c.KVHeads, c.Rope, c.NoAttnBias, c.QKNorm = 1, &Rope{Theta: 1e6}, true, true
		}),
		"qwen3_wide": with(func(c *Config) { // heads wider than d_model/heads, as Qwen3-0.6B's
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.TieEmbeddings = SwiGLU, true, true, true
			c.KVHeads, c.Rope, c.NoAttnBias, c.QKNorm, c.HeadSize = 1, &Rope{Theta: 1e6}, true, true, 6
		}),
		"gemma": with(func(c *Config) { // GeGLU, embeddings scaled by √d_model, heads wider than d_model/heads
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.TieEmbeddings = GeGLU, true, true, true
			c.KVHeads, c.Rope, c.NoAttnBias, c.HeadSize, c.EmbScale = 1, &Rope{Theta: 10000}, true, 6, math.Sqrt(8)
		}),
		"gemma3": with(func(c *Config) { // sandwich norms, local blocks with their own rotary, qk-norm, one score scale
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.TieEmbeddings = GeGLU, true, true, true
			c.KVHeads, c.Rope, c.NoAttnBias, c.HeadSize, c.EmbScale = 1, &Rope{Theta: 1e6}, true, 6, math.Sqrt(8)
			c.QKNorm, c.SandwichNorm, c.HeadScales = true, true, []float64{0.25, 0.25}
			c.Local = &Local{Layers: []bool{true, false}, Window: 3, Rope: &Rope{Theta: 10}}
		}),
		"gemma2": with(func(c *Config) { // soft-capped scores and logits, sandwich norms, local blocks of the global rotary
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.TieEmbeddings = GeGLU, true, true, true
			c.KVHeads, c.Rope, c.NoAttnBias, c.EmbScale = 1, &Rope{Theta: 10000}, true, math.Sqrt(8)
			c.SandwichNorm, c.HeadScales, c.AttnSoftcap, c.LogitSoftcap = true, []float64{0.4, 0.4}, 0.5, 1.5
			c.Local = &Local{Layers: []bool{true, false}, Window: 3}
		}),
		"phi3_longrope": with(func(c *Config) { // LongRoPE on 2 of each head's 4 dimensions, its original length 4
			c.Norm, c.Positions, c.NormKind, c.Activation, c.NoMLPBias, c.NoHeadBias, c.NoAttnBias = PreNorm, NoPositions, RMSNorm, SwiGLU, true, true, true
			c.KVHeads, c.Rope = 1, &Rope{Theta: 500, Dim: 2, Scaling: &mha.RopeScaling{Type: mha.RopeLongRoPE, ShortFactor: []float64{1.5},
				LongFactor: []float64{6}, OriginalMaxPositions: 4, AttentionFactor: 1.2}}
		}),
		"smollm3": with(func(c *Config) { // a NoPE block that slides, YaRN on the other's rotary
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.TieEmbeddings, c.NoAttnBias = SwiGLU, true, true, true, true
			c.KVHeads, c.Rope = 1, &Rope{Theta: 500, Scaling: &mha.RopeScaling{Type: mha.RopeYaRN, Factor: 4, OriginalMaxPositions: 64}}
			c.NoRope, c.Local = []bool{false, true}, &Local{Layers: []bool{false, true}, Window: 3}
		}),
		"olmo2": with(func(c *Config) { // only the sublayers' outputs normalised, qk-norm across the heads
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-6
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.NoAttnBias = SwiGLU, true, true, true
			c.KVHeads, c.Rope, c.SandwichNorm, c.NoInputNorm, c.QKNorm, c.QKNormAcross = 1, &Rope{Theta: 500}, true, true, true, true
		}),
		"mixtral": with(func(c *Config) { // a mixture of 4 SwiGLU experts, 2 a token, their weights renormalised
			c.Norm, c.Positions, c.NormKind, c.NormEps = PreNorm, NoPositions, RMSNorm, 1e-5
			c.Activation, c.NoMLPBias, c.NoHeadBias, c.NoAttnBias = SwiGLU, true, true, true
			c.KVHeads, c.Rope, c.Window = 1, &Rope{Theta: 1e6}, 5
			c.Experts, c.ExpertsPerToken, c.NormTopK = 4, 2, true
		}),
		"qwen3_moe": with(func(c *Config) { // 3 GELU experts, 2 a token, weights as the softmax gives them
			c.Norm, c.Positions, c.Activation, c.NoHeadBias = PreNorm, NoPositions, GELU, true
			c.Rope, c.QKNorm = &Rope{Theta: 100}, true
			c.Experts, c.ExpertsPerToken = 3, 2
		}),
		"qwen2_moe": with(func(c *Config) { // 4 SwiGLU experts, 2 a token, and a gated shared expert of another width
			c.Norm, c.Positions, c.NormKind, c.Activation, c.NoMLPBias, c.NoHeadBias = PreNorm, NoPositions, RMSNorm, SwiGLU, true, true
			c.KVHeads, c.Rope = 1, &Rope{Theta: 1e6}
			c.Experts, c.ExpertsPerToken, c.SharedExpert = 4, 2, 20
		}),
		"pythia": with(func(c *Config) { // GPT-NeoX: parallel attention and MLP, LayerNorm, a quarter of each head rotated
			c.Norm, c.Positions, c.Activation, c.NoHeadBias, c.ParallelResidual = PreNorm, NoPositions, GELU, true, true
			c.Rope = &Rope{Theta: 10000, Dim: 2}
		}),
		"phi2": with(func(c *Config) { // Phi-2: parallel attention and MLP reading one LayerNorm, biases everywhere, the head's too
			c.Norm, c.Positions, c.Activation, c.ParallelResidual, c.SharedNorm = PreNorm, NoPositions, GELUNew, true, true
			c.Rope = &Rope{Theta: 10000, Dim: 2}
		}),
		"stablelm_parallel": with(func(c *Config) { // StableLM 2 12B's: LayerNorm, SwiGLU, one norm for the parallel attention and MLP
			c.Norm, c.Positions, c.Activation, c.NoMLPBias, c.NoHeadBias, c.ParallelResidual, c.SharedNorm = PreNorm, NoPositions, SwiGLU, true, true, true, true
			c.KVHeads, c.Rope = 1, &Rope{Theta: 100, Dim: 2}
		}),
		"llama_tied": with(func(c *Config) {
			c.Norm, c.Positions, c.NormKind, c.Activation, c.TieEmbeddings = PreNorm, NoPositions, RMSNorm, SwiGLU, true
			c.KVHeads, c.Rope = 2, &Rope{Theta: 10, Interleaved: true, Scaling: &mha.RopeScaling{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 2, OriginalMaxPositions: 4}}
		}),
		"gpt2": with(func(c *Config) {
			c.Norm, c.Positions, c.Activation, c.TieEmbeddings, c.NoHeadBias = PreNorm, Learned, GELUNew, true, true
		}),
		"bert": with(func(c *Config) {
			c.Norm, c.Positions, c.NormEps, c.TypeVocab, c.EmbNorm = PostNorm, Learned, 1e-12, 2, true
			c.Bidirectional, c.HeadTransform = true, true
		}),
		"mixed": with(func(c *Config) {
			c.Norm, c.Positions, c.NormKind, c.Activation, c.NoMLPBias = PostNorm, Sinusoidal, RMSNorm, GELUPyTorchTanh, true
			c.TypeVocab, c.EmbNorm, c.TieEmbeddings = 3, true, true
		}),
	}
}

// TestHFParams checks the parameter names, shapes and count of each family against what
// Hugging Face's modules hold, and which parameters are decayed.
func TestHFParams(t *testing.T) {
	for name, cfg := range hfConfigs() {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		shapes := map[string][]int{}
		for _, p := range m.Params() {
			shapes[p.Name] = p.Value.Shape
		}
		v, d, f := cfg.Vocab, cfg.DModel, cfg.FFN
		want := map[string][]int{"tok_emb.weight": {v, d}}
		norm := func(name string) {
			want[name+".weight"] = []int{d}
			if cfg.NormKind != RMSNorm {
				want[name+".bias"] = []int{d}
			}
		}
		lin := func(name string, in, out int, bias bool) {
			want[name+".weight"] = []int{out, in}
			if bias {
				want[name+".bias"] = []int{out}
			}
		}
		if cfg.Positions == Learned {
			want["pos_emb.weight"] = []int{cfg.SeqLen, d}
		}
		if cfg.TypeVocab > 0 {
			want["type_emb.weight"] = []int{cfg.TypeVocab, d}
		}
		if cfg.EmbNorm {
			norm("emb_ln")
		}
		for _, l := range []string{"blocks.0.", "blocks.1."} {
			if !cfg.NoInputNorm {
				norm(l + "ln1")
			}
			if !cfg.SharedNorm && !cfg.NoInputNorm {
				norm(l + "ln2")
			}
			if cfg.SandwichNorm {
				norm(l + "ln1_post")
				norm(l + "ln2_post")
			}
			hd := d / cfg.Heads
			if cfg.HeadSize > 0 {
				hd = cfg.HeadSize
			}
			qd, ekv := cfg.Heads*hd, cfg.Heads*hd
			if cfg.KVHeads > 0 {
				ekv = cfg.KVHeads * hd
			}
			lin(l+"attn.out_proj", qd, d, !cfg.NoAttnBias)
			want[l+"attn.in_proj_weight"] = []int{qd + 2*ekv, d}
			if !cfg.NoAttnBias {
				want[l+"attn.in_proj_bias"] = []int{qd + 2*ekv}
			}
			switch {
			case cfg.QKNormAcross:
				want[l+"attn.q_norm.weight"], want[l+"attn.k_norm.weight"] = []int{qd}, []int{ekv}
			case cfg.QKNorm:
				want[l+"attn.q_norm.weight"], want[l+"attn.k_norm.weight"] = []int{hd}, []int{hd}
			}
			experts := []string{l + "ffn."}
			widths := []int{f}
			if cfg.Experts > 0 {
				lin(l+"ffn.router", d, cfg.Experts, false)
				experts, widths = nil, nil
				for e := range cfg.Experts {
					experts, widths = append(experts, fmt.Sprintf("%sffn.experts.%d.", l, e)), append(widths, f)
				}
				if cfg.SharedExpert > 0 {
					experts, widths = append(experts, l+"ffn.shared."), append(widths, cfg.SharedExpert)
					lin(l+"ffn.shared_gate", d, 1, false)
				}
			}
			for i, p := range experts {
				w := widths[i]
				if cfg.gated() {
					lin(p+"gate_proj", d, w, !cfg.NoMLPBias)
					lin(p+"up_proj", d, w, !cfg.NoMLPBias)
					lin(p+"down_proj", w, d, !cfg.NoMLPBias)
				} else {
					lin(p+"fc1", d, w, !cfg.NoMLPBias)
					lin(p+"fc2", w, d, !cfg.NoMLPBias)
				}
			}
		}
		if cfg.Norm == PreNorm {
			norm("ln_f")
		}
		if cfg.HeadTransform {
			lin("head_dense", d, d, true)
			norm("head_ln")
		}
		lin("head", d, v, !cfg.NoHeadBias)
		if cfg.TieEmbeddings {
			delete(want, "head.weight")
		}
		if !reflect.DeepEqual(shapes, want) {
			t.Errorf("%s: parameters\n%v\nwant\n%v", name, shapes, want)
		}
		n := 0
		for _, s := range want {
			size := 1
			for _, e := range s {
				size *= e
			}
			n += size
		}
		if m.NumParams() != n {
			t.Errorf("%s: %d parameters, want %d", name, m.NumParams(), n)
		}
		for _, p := range m.Params() {
			decay := strings.HasSuffix(p.Name, "proj_weight") || strings.HasSuffix(p.Name, "proj.weight") ||
				strings.HasSuffix(p.Name, "fc1.weight") || strings.HasSuffix(p.Name, "fc2.weight") || strings.HasSuffix(p.Name, "router.weight") || strings.HasSuffix(p.Name, "shared_gate.weight") ||
				p.Name == "head.weight" || p.Name == "head_dense.weight"
			if p.NoDecay == decay {
				t.Errorf("%s: %s: NoDecay %v", name, p.Name, p.NoDecay)
			}
		}
	}
}

// TestHFGradient checks each family's gradient against float32 finite differences of the loss
// (extrapolated from two steps), for coordinates of every parameter: the tied head's gradient reaches tok_emb.weight, the
// token types' reaches type_emb.weight.
func TestHFGradient(t *testing.T) {
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7}
	targets := []int{1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9}
	for name, cfg := range hfConfigs() {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		opt := &RunOptions{}
		if cfg.TypeVocab > 0 && name == "bert" {
			opt.TokenTypes = []int{0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1}
			opt.Padding = make([]bool, 14)
			opt.Padding[12], opt.Padding[13] = true, true
		}
		rng := tensor.NewRNG(3)
		for _, p := range m.Params() {
			if !strings.Contains(p.Name, "attn.") {
				rng.Normal(p.Value, 0.3) // norm gains, biases and type embeddings off their init
				if strings.HasSuffix(p.Name, "ln1.weight") || strings.HasSuffix(p.Name, "ln2.weight") || strings.HasSuffix(p.Name, "ln_f.weight") || strings.HasSuffix(p.Name, "emb_ln.weight") || strings.HasSuffix(p.Name, "head_ln.weight") {
					for i := range p.Value.Data {
						p.Value.Data[i]++
					}
				}
			}
		}
		loss := func() float64 {
			if _, err := m.Forward(tokens, 2, 7, opt); err != nil {
				t.Fatal(err)
			}
			l, _, _, err := m.Loss(targets, nil)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		loss()
		if err := m.Backward(); err != nil {
			t.Fatal(err)
		}
		// A mixture of experts' choice of experts is piecewise constant: a coordinate whose
		// steps move a token to other experts crosses a jump, and is left out.
		routing := func() []int {
			var sel []int
			for _, b := range m.blocks {
				if f, ok := b.ffn.(*moe); ok {
					sel = append(sel, f.sel...)
				}
			}
			return sel
		}
		base := routing()
		// The step of the finite differences: OLMo 2's blocks normalise only their outputs, so the
		// stream they read is not rescaled and the loss bends more sharply along the sublayers'
		// output gains; a quarter of the step keeps the differences' error below the tolerance.
		h := float32(1e-2)
		if cfg.NoInputNorm {
			h = 2.5e-3
		}
		var fd, an []float64
		jumps, routers := 0, 0
		for _, p := range m.Params() {
			step := max(1, len(p.Value.Data)/6)
			for i := step / 2; i < len(p.Value.Data); i += step {
				old := p.Value.Data[i]
				moved := false
				diff := func(step float32) float64 {
					p.Value.Data[i] = old + step
					up := loss()
					moved = moved || !slices.Equal(routing(), base)
					p.Value.Data[i] = old - step
					down := loss()
					moved = moved || !slices.Equal(routing(), base)
					p.Value.Data[i] = old
					return (up - down) / float64(2*step)
				}
				g := (4*diff(h) - diff(2*h)) / 3 // Richardson: error O(h⁴)
				if moved {
					jumps++
					continue
				}
				fd = append(fd, g)
				an = append(an, float64(p.Grad.Data[i]))
				if strings.HasSuffix(p.Name, "router.weight") {
					routers++
				}
			}
		}
		if cfg.Experts > 0 && routers == 0 {
			t.Errorf("%s: every router coordinate moves a token to other experts: the router's gradient is unchecked", name)
		}
		if jumps > len(fd) {
			t.Errorf("%s: %d coordinates move a token to other experts, %d do not: want at most half left out", name, jumps, len(fd))
		}
		e := tensor.RelError(an, fd)
		t.Logf("%s: gradient relative error %.3g against finite differences (%d coordinates, %d left out at a jump)", name, e, len(fd), jumps)
		if e > 3e-4 {
			t.Errorf("%s: gradient relative error %.3g against finite differences (%d coordinates)", name, e, len(fd))
		}
	}
}

// TestHFCheckpoint saves each family and loads it back: the same config, parameters bit for bit
// and logits; a tied head is stored once, as tok_emb.weight.
func TestHFCheckpoint(t *testing.T) {
	for name, cfg := range hfConfigs() {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := tensor.NewRNG(4)
		for _, p := range m.Params() {
			rng.Normal(p.Value, 0.5)
		}
		path := filepath.Join(t.TempDir(), name+".safetensors")
		if err := Save(path, m, nil, nil); err != nil {
			t.Fatal(err)
		}
		got, _, _, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Config(), m.Config()) {
			t.Errorf("%s: loaded config %+v, want %+v", name, got.Config(), m.Config())
		}
		for i, p := range got.Params() {
			sameBits(t, name+" "+p.Name, p.Value.Data, m.Params()[i].Value.Data)
		}
		if _, ok := got.StateDict()["head.weight"]; ok == cfg.TieEmbeddings {
			t.Errorf("%s: head.weight in the state dict: %v, tied %v", name, ok, cfg.TieEmbeddings)
		}
		opt := &RunOptions{}
		if cfg.TypeVocab > 0 {
			opt.TokenTypes = []int{1, 0, 1, 0, 1, 0}
		}
		a, err := m.Forward([]int{1, 2, 3, 4, 5, 6}, 2, 3, opt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := got.Forward([]int{1, 2, 3, 4, 5, 6}, 2, 3, opt)
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, name+" logits", a.Data, b.Data)
	}
}

// TestHFConfigJSON checks that a config without the options writes none of their JSON keys
// (a checkpoint of a model that does not use them is what it was before they existed), and that
// each family's JSON round trip is exact.
func TestHFConfigJSON(t *testing.T) {
	data, err := json.Marshal(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"norm_kind", "norm_eps", "activation", "no_mlp_bias", "no_head_bias", "tie_embeddings", "type_vocab", "emb_norm"} {
		if strings.Contains(string(data), key) {
			t.Errorf("%s in the JSON of a config without it: %s", key, data)
		}
	}
	for name, cfg := range hfConfigs() {
		data, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ParseConfig(data); err != nil || !reflect.DeepEqual(got, cfg) {
			t.Errorf("%s: ParseConfig(%s) = %+v, %v", name, data, got, err)
		}
	}
	llama := `{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"pre","positions":"none",` +
		`"norm_kind":"rmsnorm","norm_eps":1e-6,"activation":"swiglu","no_mlp_bias":true,"no_head_bias":true,"tie_embeddings":true}`
	cfg, err := ParseConfig([]byte(llama))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Config{Vocab: 11, SeqLen: 8, DModel: 8, Heads: 2, Layers: 1, Norm: PreNorm, Positions: NoPositions, NormKind: RMSNorm,
		NormEps: 1e-6, Activation: SwiGLU, NoMLPBias: true, NoHeadBias: true, TieEmbeddings: true}); !reflect.DeepEqual(cfg, want) {
		t.Errorf("ParseConfig(%s) = %+v, want %+v", llama, cfg, want)
	}
}

// TestHFLoadErrors checks that a checkpoint whose tensors do not match the options of its config
// is an error naming the tensor.
func TestHFLoadErrors(t *testing.T) {
	cfgs := hfConfigs()
	for _, c := range []struct {
		family string
		edit   func(map[string]safetensors.Tensor, map[string]string)
		want   string
	}{
		{"llama", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts["blocks.0.ln1.bias"] = f32Tensor(8) },
			`unexpected tensor "blocks.0.ln1.bias" [8]: the model has no such parameter`},
		{"llama", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts["head.bias"] = f32Tensor(11) },
			`unexpected tensor "head.bias" [11]`},
		{"llama", func(ts map[string]safetensors.Tensor, _ map[string]string) { delete(ts, "blocks.1.ffn.up_proj.weight") },
			`missing parameter "blocks.1.ffn.up_proj.weight" [12 8]`},
		{"gpt2", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts["head.weight"] = f32Tensor(11, 8) },
			`unexpected tensor "head.weight" [11 8]: the model has no such parameter (its head is tied: the head's weight is tok_emb.weight)`},
		{"bert", func(ts map[string]safetensors.Tensor, _ map[string]string) { ts["type_emb.weight"] = f32Tensor(3, 8) },
			`parameter "type_emb.weight" is [3 8], want [2 8]`},
		{"bert", func(ts map[string]safetensors.Tensor, _ map[string]string) { delete(ts, "emb_ln.bias") },
			`missing parameter "emb_ln.bias" [8]`},
		{"bert", func(_ map[string]safetensors.Tensor, meta map[string]string) {
			meta[ConfigKey] = strings.Replace(meta[ConfigKey], `"norm_eps":1e-12`, `"norm_eps":-1`, 1)
		}, "norm_eps is -1, want a value in (0, 1]"},
	} {
		m, err := NewModel(cfgs[c.family])
		if err != nil {
			t.Fatal(err)
		}
		path := writeCheckpoint(t, m, c.edit)
		if _, _, _, err := Load(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.family, err, c.want)
		}
	}
}

func f32Tensor(shape ...int) safetensors.Tensor { return safetensors.FromFloat32(tensor.New(shape...)) }

// TestTokenTypeErrors checks Forward's errors about token types.
func TestTokenTypeErrors(t *testing.T) {
	bert, err := NewModel(hfConfigs()["bert"])
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewModel(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{1, 2, 3, 4}
	for _, c := range []struct {
		m     *Model
		types []int
		want  string
	}{
		{plain, []int{0, 0, 0, 0}, "token types given to a model without token type embeddings (type_vocab 0), want nil"},
		{bert, []int{0, 1, 0}, "3 token types for batch 2 × length 2, want 4"},
		{bert, []int{0, 1, 2, 0}, "token type 2 at position 2 (batch 1, step 0) is outside [0, 2)"},
		{bert, []int{0, -1, 1, 0}, "token type -1 at position 1"},
	} {
		if _, err := c.m.Forward(tokens, 2, 2, &RunOptions{TokenTypes: c.types}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("types %v: %v, want %q", c.types, err, c.want)
		}
	}
	// nil types are all 0: the same logits as explicit zeros, and different from ones.
	var logits [][]float32
	for _, types := range [][]int{nil, {0, 0, 0, 0}, {1, 1, 1, 1}} {
		y, err := bert.Forward(tokens, 2, 2, &RunOptions{TokenTypes: types})
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, slices.Clone(y.Data))
	}
	sameBits(t, "nil and zero token types", logits[0], logits[1])
	if slices.Equal(logits[0], logits[2]) {
		t.Error("token types 1 gave the logits of token types 0")
	}
}

// TestHFForwardBytes checks what the options add to the memory estimate: SwiGLU's two more
// hidden-width activations per block, and the embedding norm's output.
func TestHFForwardBytes(t *testing.T) {
	const b, tl = 3, 5
	base := Config{Vocab: 11, SeqLen: 8, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Norm: PreNorm, Positions: Learned}
	swiglu, embNorm := base, base
	swiglu.Activation, embNorm.EmbNorm = SwiGLU, true
	n := float64(b * tl)
	if got, want := swiglu.ForwardBytes(b, tl, false)-base.ForwardBytes(b, tl, false), 4*2*n*12*2; got != want {
		t.Errorf("SwiGLU adds %v bytes, want %v", got, want)
	}
	if got, want := embNorm.ForwardBytes(b, tl, true)-base.ForwardBytes(b, tl, true), 4*n*8; got != want {
		t.Errorf("the embedding norm adds %v bytes, want %v", got, want)
	}
}
