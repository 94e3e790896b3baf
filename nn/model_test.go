package nn

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

func testConfig() Config {
	return Config{Vocab: 11, SeqLen: 8, DModel: 8, Heads: 2, Layers: 2, Norm: PreNorm, Positions: Learned, Seed: 1}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Vocab = 0 }, "vocab is 0, want a value in [1, 524288]"},
		{func(c *Config) { c.SeqLen = MaxSeqLen + 1 }, "seq_len is 1048577, want a value in [1, 1048576]"},
		{func(c *Config) { c.DModel = -1 }, "d_model is -1"},
		{func(c *Config) { c.Heads = 3 }, "d_model 8 is not divisible by heads 3"},
		{func(c *Config) { c.Layers = 0 }, "layers is 0, want a value in [1, 1024]"},
		{func(c *Config) { c.AttnOnly, c.FFN = true, 16 }, "ffn is 16 with attn_only, want 0"},
		{func(c *Config) { c.FFN = -1 }, "ffn is -1, want a value in [1, 65536] (or 0 for 4·d_model)"},
		{func(c *Config) { c.Norm = "" }, `norm is "", want "post" or "pre"`},
		{func(c *Config) { c.Positions = "rope" }, `positions is "rope", want "sinusoidal", "learned" or "none"`},
		{func(c *Config) { c.NormKind = "batchnorm" }, `norm_kind is "batchnorm", want "layernorm" or "rmsnorm" (or empty for "layernorm")`},
		{func(c *Config) { c.NormEps = -1e-5 }, "norm_eps is -1e-05, want a value in (0, 1] (or 0 for 1e-05)"},
		{func(c *Config) { c.NormEps = 2 }, "norm_eps is 2, want a value in (0, 1]"},
		{func(c *Config) { c.NormEps = math.Inf(1) }, "norm_eps is +Inf"},
		{func(c *Config) { c.NormEps = math.NaN() }, "norm_eps is NaN"},
		{func(c *Config) { c.NormEps = 1e-300 }, "norm_eps is 1e-300, want a value in (0, 1] (or 0 for 1e-05) that float32 holds"},
		{func(c *Config) { c.Activation = "relu" }, `activation is "relu", want "gelu", "gelu_new", "gelu_pytorch_tanh" or "swiglu" (or empty for "gelu")`},
		{func(c *Config) { c.Activation = "silu" }, `activation is "silu"`},
		{func(c *Config) { c.AttnOnly, c.Activation = true, SwiGLU }, `activation is "swiglu" with attn_only, want none`},
		{func(c *Config) { c.AttnOnly, c.NoMLPBias = true, true }, "no_mlp_bias is set with attn_only, which has no feed-forward network"},
		{func(c *Config) { c.TypeVocab = -1 }, "type_vocab is -1, want a value in [1, 65536] (or 0 for no token types)"},
		{func(c *Config) { c.TypeVocab = MaxDim + 1 }, "type_vocab is 65537"},
		{func(c *Config) { c.Dropout = 1 }, "dropout is 1, want a probability in [0, 1)"},
		{func(c *Config) { c.Dropout = math.NaN() }, "dropout is NaN"},
		{func(c *Config) { c.DModel, c.Heads = 20000, 1 }, "the default ffn 4·d_model = 80000 is larger than 65536"},
		{func(c *Config) { c.HeadDims = []int{3, 4} }, "head dims [3 4] sum to 7, want embed dim 8"},
		{func(c *Config) { c.HeadScales = []float64{1} }, "1 head scales for 2 heads"},
		{func(c *Config) { c.Local = &Local{Layers: []bool{true}, Window: 2} }, "local lists 1 layers, want one flag per layer, 2"},
		{func(c *Config) { c.Local = &Local{Layers: []bool{true, false}} }, "local window is 0, want a value in [1, 1048576]"},
		{func(c *Config) { c.Local, c.Window = &Local{Layers: []bool{true, false}, Window: 2}, 3 }, "local blocks with bidirectional false and window 3"},
		{func(c *Config) { c.Local, c.Bidirectional = &Local{Layers: []bool{true, false}, Window: 2}, true }, "local blocks with bidirectional true and window 0, want causal attention"},
		{func(c *Config) { c.Local = &Local{Layers: []bool{false, true}, Window: 2, Rope: &Rope{Theta: -1}} }, "local attention: mha: invalid config: rotary theta is -1"},
		{func(c *Config) { c.Norm, c.SandwichNorm = PostNorm, true }, `sandwich_norm with norm "post", want "pre"`},
		{func(c *Config) { c.ParallelResidual, c.Norm = true, PostNorm }, `parallel_residual with norm "post", attn_only false and sandwich_norm false, want a pre-norm block with a feed-forward network and no sandwich`},
		{func(c *Config) { c.ParallelResidual, c.AttnOnly = true, true }, "parallel_residual with norm \"pre\", attn_only true"},
		{func(c *Config) { c.SharedNorm = true }, "shared_norm without parallel_residual, want both"},
		{func(c *Config) { c.AttnSoftcap = -1 }, "attn_softcap is -1, want a number > 0 finite in float32 (or 0 for none)"},
		{func(c *Config) { c.AttnSoftcap = math.NaN() }, "attn_softcap is NaN"},
		{func(c *Config) { c.LogitSoftcap = 1e-46 }, "logit_softcap is 1e-46, want a number > 0 finite in float32"},
		{func(c *Config) { c.Local = &Local{Layers: []bool{false, false}, Window: 2, Rope: &Rope{Theta: -1}} }, "local attention: mha: invalid config: rotary theta is -1"},
		{func(c *Config) { c.LogitSoftcap = 1e39 }, "logit_softcap is 1e+39, want a number > 0 finite in float32 (or 0 for none)"},
		{func(c *Config) { c.EmbScale = -2 }, "emb_scale is -2, want a number > 0 finite in float32 (or 0 for none)"},
		{func(c *Config) { c.EmbScale = math.NaN() }, "emb_scale is NaN"},
		{func(c *Config) { c.EmbScale = 1e39 }, "emb_scale is 1e+39"},
		{func(c *Config) { c.HeadSize = -1 }, "head size is -1, want 0 (E/H) or a size in [1, 65536]"},
		{func(c *Config) { c.HeadSize, c.HeadDims = 4, []int{4, 4} }, "head size 4 and head dims [4 4]; give one or the other"},
		{func(c *Config) { c.AttnOnly, c.Activation = true, GeGLU }, `activation is "geglu" with attn_only, want none`},
	} {
		cfg := testConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", cfg, err, c.want)
		}
		if _, err := NewModel(cfg); err == nil {
			t.Errorf("NewModel accepted %+v", cfg)
		}
	}
	if err := testConfig().Validate(); err != nil {
		t.Error(err)
	}
	wide := testConfig() // 3 heads of 4 in a d_model of 8, which 3 does not divide
	wide.Heads, wide.HeadSize = 3, 4
	if err := wide.Validate(); err != nil {
		t.Errorf("3 heads of 4 in a d_model of 8: %v", err)
	}
	// Valid, but too large to allocate in float32: refused before anything is allocated.
	for _, edit := range []func(*Config){
		func(c *Config) { c.DModel, c.Heads, c.FFN = MaxDim, 1, 1 },                            // 1.7·10¹⁰ in one layer
		func(c *Config) { c.DModel, c.Heads, c.Layers, c.AttnOnly = 2048, 1, MaxLayers, true }, // 1.7·10¹⁰ in 1024
	} {
		cfg := testConfig()
		edit(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if _, err := NewModel(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "parameters, more than the 2147483648") {
			t.Errorf("d_model %d, %d layers: %v, want ErrConfig for too many parameters", cfg.DModel, cfg.Layers, err)
		}
	}
}

func TestParseConfig(t *testing.T) {
	want := testConfig()
	want.Dropout, want.Seed = 0.125, math.MaxUint64
	want.HeadDims, want.HeadScales = []int{2, 6}, []float64{1, 0.25}
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseConfig(data); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConfig(%s) = %+v, %v", data, got, err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"vocab":11,"bogus":1}`, `unknown field "bogus"`},
		{string(data) + ` {}`, "data after its JSON object"},
		{`{"vocab":"11"}`, "cannot unmarshal string"},
		{`{"vocab":1e400}`, "cannot unmarshal number"},
		{``, "not a JSON object"},
		{`null`, "vocab is 0"},
		{`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"mid","positions":"learned"}`, `norm is "mid"`},
	} {
		if _, err := ParseConfig([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseConfig(%q): %v, want %q", c.in, err, c.want)
		}
	}
}

// FuzzParseConfig checks that ParseConfig never panics, that what it accepts is valid, and that
// an accepted config survives a JSON round trip unchanged.
func FuzzParseConfig(f *testing.F) {
	data, _ := json.Marshal(testConfig())
	f.Add(data)
	f.Add([]byte(`{"vocab":3,"seq_len":2,"d_model":4,"heads":4,"layers":1,"attn_only":true,"norm":"post","positions":"sinusoidal","dropout":0.5}`))
	f.Add([]byte(`{"vocab":1e3}`))
	f.Add([]byte(`{"vocab":5,"seq_len":4,"d_model":4,"heads":2,"layers":1,"norm":"pre","positions":"none","norm_kind":"rmsnorm","norm_eps":1e-6,"activation":"swiglu","no_mlp_bias":true,"no_head_bias":true,"tie_embeddings":true}`))
	f.Add([]byte(`{"vocab":5,"seq_len":4,"d_model":4,"heads":2,"layers":1,"norm":"post","positions":"learned","norm_eps":1e-12,"activation":"gelu_new","type_vocab":2,"emb_norm":true}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"kv_heads":1,"layers":2,"ffn":12,"norm":"pre","positions":"none","norm_kind":"rmsnorm","activation":"swiglu","rope":{"theta":100},"window":3}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"pre","positions":"learned","patterns":["local:1","global:0"],"block":[2,2],"normalizer":"sparsemax"}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"post","positions":"learned","bidirectional":true,"type_vocab":2}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"pre","positions":"learned","head_dims":[3,5]}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"pre","positions":"none","rope":{"theta":10,"scaling":{"type":"longrope","factor":0,"low_freq_factor":0,"high_freq_factor":0,"original_max_position_embeddings":4,"short_factor":[1,2],"long_factor":[3,4],"attention_factor":1.5}}}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"pre","positions":"none","rope":{"theta":10,"scaling":{"type":"linear","factor":2,"low_freq_factor":0,"high_freq_factor":0,"original_max_position_embeddings":0,"short_factor":[]}}}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":1,"norm":"pre","positions":"none","norm_kind":"rmsnorm","activation":"swiglu","parallel_residual":true,"shared_norm":true,"attn_softcap":2,"logit_softcap":5,"rope":{"theta":100,"dim":2}}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":2,"norm":"pre","positions":"none","qk_norm":true,"sandwich_norm":true,"rope":{"theta":1e6},"local":{"layers":[true,false],"window":3,"rope":{"theta":10}}}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":3,"head_size":4,"kv_heads":1,"layers":1,"norm":"pre","positions":"none","norm_kind":"rmsnorm","activation":"geglu","emb_scale":2.8284271247461903,"qk_norm":true,"rope":{"theta":100}}`))
	f.Add([]byte(`{"vocab":11,"seq_len":8,"d_model":8,"heads":2,"layers":2,"norm":"pre","positions":"none","norm_kind":"rmsnorm","activation":"swiglu","experts":4,"experts_per_token":2,"norm_topk":true,"shared_expert":6,"no_rope":[false,true],"rope":{"theta":500,"scaling":{"type":"yarn","factor":4,"original_max_position_embeddings":16,"beta_fast":8,"beta_slow":0.5,"unrounded_ramp":true}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted an invalid config: %v", err)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if c2, err := ParseConfig(again); err != nil || !reflect.DeepEqual(c2, c) {
			t.Fatalf("round trip of %+v gave %+v, %v", c, c2, err)
		}
		checkSmallModel(t, c)
	})
}

// checkSmallModel runs a config small enough for a fuzz run, leaving others alone: a Forward of
// two sequences, the Loss and the Backward, all finite; then, where a KV cache serves the
// model, a prefill and steps through it that give the Forward's logits, and where it does not
// (bidirectional or sparse attention, heads of different sizes), NewCache's refusal.
func checkSmallModel(t *testing.T, c Config) {
	c = c.withDefaults()
	if c.Vocab > 64 || c.SeqLen > 16 || c.DModel > 32 || c.Layers > 2 || c.FFN > 64 || c.Heads > 8 || c.TypeVocab > 4 {
		return
	}
	m, err := NewModel(c)
	if err != nil {
		t.Fatalf("NewModel of a valid config: %v", err)
	}
	const b = 2
	n := c.SeqLen
	tokens := make([]int, b*n)
	for i := range tokens {
		tokens[i] = (i*7 + 3) % c.Vocab
	}
	var types []int
	if c.TypeVocab > 0 {
		types = make([]int, b*n)
	}
	logits, err := m.Forward(tokens, b, n, &RunOptions{TokenTypes: types})
	if err != nil {
		t.Fatalf("Forward: %v", err)
	}
	if err := logits.CheckFinite("logits"); err != nil {
		t.Fatal(err)
	}
	targets := make([]int, b*n)
	for i := range targets {
		targets[i] = (i*5 + 1) % c.Vocab
	}
	if loss, _, _, err := m.Loss(targets, nil); err != nil || math.IsNaN(loss) || math.IsInf(loss, 0) {
		t.Fatalf("Loss: %v, %v", loss, err)
	}
	if err := m.Backward(); err != nil {
		t.Fatalf("Backward: %v", err)
	}
	for _, p := range m.Params() {
		if p.Grad != nil {
			if err := p.Grad.CheckFinite(p.Name + "'s gradient"); err != nil {
				t.Fatal(err)
			}
		}
	}
	cache, err := m.NewCache(b, n, mha.CacheFloat32)
	if !c.CanCache() {
		if err == nil {
			t.Fatal("NewCache served a bidirectional or sparse model, or heads of different sizes")
		}
		return
	}
	if err != nil {
		t.Fatalf("NewCache: %v", err)
	}
	var steps []int
	for start := 0; start < n; start += steps[len(steps)-1] {
		steps = append(steps, min(n-start, 1+start%3))
	}
	checkCachedSteps(t, m, cache, tokens, b, n, steps, 1e-4)
}

// TestParams checks the parameter count against its closed form, the names, and which
// parameters are excluded from weight decay.
func TestParams(t *testing.T) {
	for _, cfg := range []Config{
		testConfig(),
		{Vocab: 5, SeqLen: 4, DModel: 6, Heads: 3, Layers: 3, FFN: 10, Norm: PostNorm, Positions: Sinusoidal},
		{Vocab: 5, SeqLen: 4, DModel: 6, Heads: 3, Layers: 1, AttnOnly: true, Norm: PostNorm, Positions: Learned},
	} {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Config()
		if cfg.FFN == 0 && !cfg.AttnOnly && c.FFN != 4*cfg.DModel {
			t.Errorf("Config().FFN = %d, want 4·d_model = %d", c.FFN, 4*cfg.DModel)
		}
		v, d, f, s := c.Vocab, c.DModel, c.FFN, c.SeqLen
		block := 2*d + 4*d*d + 4*d // ln1, attention
		if !c.AttnOnly {
			block += 2*d + d*f + f + f*d + d // ln2, fc1, fc2
		}
		want := v*d + c.Layers*block + d*v + v
		if c.Positions == Learned {
			want += s * d
		}
		if c.Norm == PreNorm {
			want += 2 * d
		}
		if m.NumParams() != want {
			t.Errorf("%+v: %d parameters, want %d", c, m.NumParams(), want)
		}
		for _, p := range m.Params() {
			decay := strings.HasSuffix(p.Name, "proj_weight") || strings.HasSuffix(p.Name, "proj.weight") ||
				strings.HasSuffix(p.Name, "fc1.weight") || strings.HasSuffix(p.Name, "fc2.weight") || p.Name == "head.weight"
			if p.NoDecay == decay {
				t.Errorf("%s: NoDecay %v", p.Name, p.NoDecay)
			}
			if !slices.Equal(p.Value.Shape, p.Grad.Shape) {
				t.Errorf("%s: value %v, grad %v", p.Name, p.Value.Shape, p.Grad.Shape)
			}
		}
	}
}

func TestForwardErrors(t *testing.T) {
	m, err := NewModel(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := m.Loss(make([]int, 4), nil); err == nil || !strings.Contains(err.Error(), "needs a Forward") {
		t.Errorf("Loss before Forward: %v", err)
	}
	if err := m.Backward(); err == nil || !strings.Contains(err.Error(), "needs a Forward and a Loss") {
		t.Errorf("Backward before Loss: %v", err)
	}
	for _, c := range []struct {
		tokens []int
		b, t   int
		want   string
	}{
		{make([]int, 4), 0, 4, "batch 0 and length 4, want both > 0"},
		{make([]int, 9), 1, 9, "length 9 is more than the model's seq_len 8"},
		{make([]int, 5), 2, 3, "5 tokens for batch 2 × length 3, want 6"},
		{[]int{0, 1, 11, 2}, 2, 2, "token 11 at position 2 (batch 1, step 0) is outside [0, 11)"},
		{[]int{0, -1}, 1, 2, "token -1 at position 1"},
	} {
		if _, err := m.Forward(c.tokens, c.b, c.t, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Forward(%v, %d, %d): %v, want %q", c.tokens, c.b, c.t, err, c.want)
		}
	}
	if _, err := m.Forward(make([]int, 4), 2, 2, &RunOptions{Workers: -1}); err == nil || !strings.Contains(err.Error(), "-1 workers, want ≥ 0") {
		t.Errorf("Forward on -1 workers: %v", err)
	}
	if _, _, _, err := m.Loss(make([]int, 4), nil); err == nil {
		t.Error("Loss after a failed Forward succeeded")
	}
	if _, err := m.Forward([]int{1, 2, 3, 4}, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		targets []int
		scored  []bool
		want    string
	}{
		{[]int{1, 2, 3}, nil, "3 targets for the forward's 4 positions"},
		{[]int{1, 2, 3, 4}, []bool{true}, "scored mask of 1 values for the forward's 4 positions"},
		{[]int{1, 2, 11, 4}, nil, "target 11 at position 2 is outside [0, 11)"},
		{[]int{1, 2, 3, 4}, make([]bool, 4), "no position is scored"},
	} {
		if _, _, _, err := m.Loss(c.targets, c.scored); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Loss(%v, %v): %v, want %q", c.targets, c.scored, err, c.want)
		}
	}
	if _, _, _, err := m.Loss([]int{1, 2, -1, 4}, []bool{true, true, false, true}); err != nil {
		t.Errorf("an unscored target of -1: %v", err)
	}
	if err := m.Backward(); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(); err == nil {
		t.Error("a second Backward for one Loss succeeded")
	}
}

// TestWeights checks the kept attention weights: [B, H, T, T], causal, rows summing to 1; and
// that the backward through them (mha's dense path) gives the gradients of the tiled path.
func TestWeights(t *testing.T) {
	cfg := testConfig()
	tokens, targets := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 0}
	var grads [][]float32
	for _, keep := range []bool{false, true} {
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(tokens, 2, 5, &RunOptions{KeepWeights: keep}); err != nil {
			t.Fatal(err)
		}
		for l := range cfg.Layers {
			w := m.Weights(l)
			if !keep {
				if w != nil {
					t.Errorf("layer %d: weights without KeepWeights", l)
				}
				continue
			}
			if !slices.Equal(w.Shape, []int{2, cfg.Heads, 5, 5}) {
				t.Fatalf("layer %d: weights %v, want [2 %d 5 5]", l, w.Shape, cfg.Heads)
			}
			for row := range len(w.Data) / 5 {
				i, sum := row%5, 0.0
				for j, x := range w.Data[row*5 : row*5+5] {
					if j > i && x != 0 {
						t.Errorf("layer %d: query %d attends key %d", l, i, j)
					}
					sum += float64(x)
				}
				if math.Abs(sum-1) > 1e-6 {
					t.Errorf("layer %d: row %d sums to %v", l, row, sum)
				}
			}
		}
		if m.Weights(-1) != nil || m.Weights(cfg.Layers) != nil {
			t.Error("weights of a layer that does not exist")
		}
		if _, _, _, err := m.Loss(targets, nil); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(); err != nil {
			t.Fatal(err)
		}
		var all []float32
		for _, p := range m.Params() {
			all = append(all, p.Grad.Data...)
		}
		grads = append(grads, all)
	}
	if e := tensor.RelError(grads[1], f64(grads[0])); e > 1e-6 {
		t.Errorf("gradients with kept weights differ from the tiled path's by %.3g", e)
	}
}

// TestDropoutGradient checks the model's gradient in training mode with attention dropout
// against float32 finite differences of the loss under the same dropout seed, for coordinates
// of parameters below, inside and above the attention.
func TestDropoutGradient(t *testing.T) {
	cfg := testConfig()
	cfg.Dropout = 0.3
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7}
	targets := []int{1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9}
	opt := &RunOptions{Training: true, Seed: 7}
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
	trained := loss()
	if err := m.Backward(); err != nil {
		t.Fatal(err)
	}
	opt.Training = false
	if eval := loss(); eval == trained {
		t.Fatalf("dropout changed nothing: loss %v in training and in evaluation", eval)
	}
	opt.Training = true
	var fd, an []float64
	for _, p := range m.Params() {
		if !strings.Contains(p.Name, "blocks.0.attn.in_proj") && p.Name != "tok_emb.weight" && p.Name != "blocks.1.ffn.fc1.weight" {
			continue
		}
		for i := 0; i < len(p.Value.Data); i += 7 {
			old := p.Value.Data[i]
			const h = 1e-2
			p.Value.Data[i] = old + h
			up := loss()
			p.Value.Data[i] = old - h
			down := loss()
			p.Value.Data[i] = old
			fd = append(fd, (up-down)/(2*h))
			an = append(an, float64(p.Grad.Data[i]))
		}
	}
	e := tensor.RelError(an, fd)
	t.Logf("gradient relative error %.3g against finite differences (%d coordinates)", e, len(fd))
	if e > 1e-3 {
		t.Errorf("gradient relative error %.3g against finite differences (%d coordinates)", e, len(fd))
	}
}

// trainSteps trains a fresh model for cfg with AdamW for the given steps on a fixed stream of
// batches [8, 16] (640 rows per pass with B = 40: several tasks in every loop), in training
// mode with a new dropout seed per step.
func trainSteps(t *testing.T, cfg Config, workers, steps int) (*Model, *AdamW) {
	t.Helper()
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := NewAdamW(m.Params(), AdamWConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const b, n = 40, 16
	rng := tensor.NewRNG(99)
	tokens, targets := make([]int, b*n), make([]int, b*n)
	for step := range steps {
		for i := range tokens {
			tokens[i] = int(rng.Float64() * float64(cfg.Vocab))
		}
		for i := range targets {
			targets[i] = tokens[i-i%n] // the first token of the sequence
		}
		if _, err := m.Forward(tokens, b, n, &RunOptions{Training: true, Seed: uint64(step) + 1, Workers: workers}); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := m.Loss(targets, nil); err != nil {
			t.Fatal(err)
		}
		ZeroGrads(m.Params())
		if err := m.Backward(); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(1e-2); err != nil {
			t.Fatal(err)
		}
	}
	return m, opt
}

// TestTrainingIsDeterministic trains two fresh models with the same seed for 3 steps, with 1
// and with 2 workers, and wants the same parameters bit for bit, different from the initial ones.
func TestTrainingIsDeterministic(t *testing.T) {
	for _, norm := range []string{PreNorm, PostNorm} {
		cfg := Config{Vocab: 13, SeqLen: 16, DModel: 16, Heads: 2, Layers: 2, Norm: norm, Positions: Learned, Dropout: 0.1, Seed: 5}
		a, _ := trainSteps(t, cfg, 1, 3)
		b, _ := trainSteps(t, cfg, 2, 3)
		init, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range a.Params() {
			sameBits(t, p.Name, p.Value.Data, b.Params()[i].Value.Data)
			if slices.Equal(p.Value.Data, init.Params()[i].Value.Data) {
				t.Errorf("%s: %s did not change in training", norm, p.Name)
			}
		}
	}
}

// TestRunSparsity checks that RunOptions.Sparsity replaces the config's sparsity: a dense model
// run with a model's patterns and normalizer gives that model's logits and weights, bit for bit,
// and the sparse model run with the zero Sparsity gives the dense model's.
func TestRunSparsity(t *testing.T) {
	dense := testConfig()
	sparse := dense
	sparse.Patterns, sparse.Block, sparse.Normalizer = []string{"local:1", "global:0"}, []int{2, 4}, "sparsemax"
	tokens := []int{1, 2, 3, 4, 5, 6, 7, 8}
	run := func(cfg Config, s *Sparsity) ([]float32, []float32) {
		t.Helper()
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := m.Forward(tokens, 1, len(tokens), &RunOptions{KeepWeights: true, Sparsity: s})
		if err != nil {
			t.Fatal(err)
		}
		return logits.Data, m.Weights(1).Data
	}
	local, err := mha.ParsePattern("local:1")
	if err != nil {
		t.Fatal(err)
	}
	global, err := mha.ParsePattern("global:0")
	if err != nil {
		t.Fatal(err)
	}
	over := &Sparsity{Patterns: []mha.Pattern{local, global}, Block: [2]int{2, 4}, Normalizer: &mha.Normalizer{Kind: mha.Sparsemax}}
	for _, c := range []struct {
		name       string
		cfg, other Config
		s          *Sparsity
	}{
		{"dense as sparse", dense, sparse, over},
		{"sparse as dense", sparse, dense, &Sparsity{}},
	} {
		gl, gw := run(c.cfg, c.s)
		wl, ww := run(c.other, nil)
		if !slices.Equal(gl, wl) || !slices.Equal(gw, ww) {
			t.Errorf("%s: logits or weights differ from the model built so", c.name)
		}
	}
	_, dw := run(dense, nil)
	if _, sw := run(dense, over); slices.Equal(dw, sw) {
		t.Error("the sparse weights are the dense ones: the test tells nothing")
	}
	// ZeroFraction: each layer's, per head, under sparsemax; none under the softmax.
	for _, c := range []struct {
		cfg  Config
		want bool
	}{{sparse, true}, {dense, false}} {
		m, err := NewModel(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if m.ZeroFraction(0) != nil {
			t.Error("ZeroFraction before any Forward")
		}
		if _, err := m.Forward(tokens, 1, len(tokens), nil); err != nil {
			t.Fatal(err)
		}
		for l := range c.cfg.Layers {
			zf := m.ZeroFraction(l)
			if got := zf != nil; got != c.want || (c.want && len(zf) != c.cfg.Heads) {
				t.Errorf("normalizer %q, layer %d: ZeroFraction %v", c.cfg.Normalizer, l, zf)
			}
			for _, z := range zf {
				if !(z >= 0 && z < 1) {
					t.Errorf("layer %d: ZeroFraction %v, want fractions", l, zf)
				}
			}
		}
		if m.ZeroFraction(c.cfg.Layers) != nil || m.ZeroFraction(-1) != nil {
			t.Error("ZeroFraction of a layer the model lacks")
		}
	}
}

// TestVisibleKeys checks the keys each query may see against the masks written out: causal
// j ≤ i, a window of W positions i − W < j, local:1 |i − j| ≤ 1, and errors.
func TestVisibleKeys(t *testing.T) {
	const n = 9
	base := Config{Vocab: 5, SeqLen: 16, DModel: 8, Heads: 2, Layers: 1, FFN: 8, Norm: PreNorm, Positions: Learned}
	window, local, bidir, huge, blocks := base, base, base, base, base
	window.Window = 3
	blocks.Layers, blocks.Local = 2, &Local{Layers: []bool{false, true}, Window: 2}
	local.Patterns, local.Block = []string{"local:1"}, []int{4, 4}
	huge.Patterns, huge.Block = []string{"local:1"}, []int{1 << 40, 1 << 40} // one block, larger than any call
	bidir.Bidirectional, bidir.Patterns = true, []string{"local:1"}
	for name, c := range map[string]struct {
		cfg   Config
		layer int
		keep  func(i, j int) bool
	}{
		"causal":                    {base, -1, func(i, j int) bool { return j <= i }},
		"window":                    {window, 0, func(i, j int) bool { return j <= i && j > i-3 }},
		"local":                     {local, -1, func(i, j int) bool { return j <= i && j >= i-1 }},
		"local in a huge block":     {huge, -1, func(i, j int) bool { return j <= i && j >= i-1 }},
		"bidirectional local":       {bidir, -1, func(i, j int) bool { return j >= i-1 && j <= i+1 }},
		"global block":              {blocks, 0, func(i, j int) bool { return j <= i }},
		"local block":               {blocks, 1, func(i, j int) bool { return j <= i && j > i-2 }},
		"blocks that are not local": {blocks, -1, func(i, j int) bool { return j <= i }},
	} {
		got, err := c.cfg.VisibleKeys(n)
		if c.layer >= 0 {
			got, err = c.cfg.LayerVisibleKeys(c.layer, n)
		}
		if err != nil {
			t.Fatal(err)
		}
		for h := range c.cfg.Heads {
			for i := range n {
				want := 0
				for j := range n {
					if c.keep(i, j) {
						want++
					}
				}
				if got[h][i] != want {
					t.Errorf("%s: head %d query %d sees %d keys, want %d", name, h, i, got[h][i], want)
				}
			}
		}
	}
	for _, n := range []int{0, 17, 1 << 40} {
		if _, err := base.VisibleKeys(n); err == nil || !strings.Contains(err.Error(), "want 1 … 16") {
			t.Errorf("%d tokens: %v, want an error asking for 1 … 16", n, err)
		}
	}
	for _, l := range []int{-1, 2} {
		if _, err := blocks.LayerVisibleKeys(l, 4); err == nil || !strings.Contains(err.Error(), "want 0 … 1") {
			t.Errorf("layer %d: %v, want an error asking for 0 … 1", l, err)
		}
	}
	bad := base
	bad.Heads = -1
	if _, err := bad.VisibleKeys(4); err == nil {
		t.Error("-1 heads: no error")
	}
}

// TestConfigIsCopied checks that a model keeps a copy of its Config, whose slices and pointers
// (Local, the rotary's scaling factors, head dims, patterns) it shares with neither the caller's
// config nor the one Config returns: editing either changes neither the model's outputs nor the
// config it saves.
func TestConfigIsCopied(t *testing.T) {
	cfg := hfConfigs()["gemma3"]
	cfg.NoRope = []bool{false, false}
	cfg.Rope = &Rope{Theta: 100, Scaling: &mha.RopeScaling{Type: mha.RopeLongRoPE, ShortFactor: []float64{1, 2, 3}, LongFactor: []float64{2, 4, 9},
		OriginalMaxPositions: 4, AttentionFactor: 1.1}}
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := m.Config()
	tokens := []int{3, 1, 4, 1, 5, 9, 2}
	before, err := m.Forward(tokens, 1, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	before = before.Clone()
	for _, c := range []Config{cfg, m.Config()} {
		c.NoRope[1] = true
		c.Local.Window, c.Local.Layers[0], c.Local.Rope.Theta = 7, false, 3
		c.Rope.Scaling.LongFactor[0], c.Rope.Theta = 100, 5
		c.HeadScales[0] = 9
	}
	if got := m.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("the model's config changed with its caller's: %+v, want %+v", got, want)
	}
	after, err := m.Forward(tokens, 1, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after.Data, before.Data) {
		t.Error("the model's outputs changed with its caller's config")
	}
}

// TestNoRope checks that a NoRope block attends without any rotary: a model whose blocks are
// all NoRope gives the bits of the same model without a rotary, and one NoRope flag changes
// the outputs. A NoRope list of the wrong length is refused.
func TestNoRope(t *testing.T) {
	cfg := hfConfigs()["gemma3"]
	tokens := []int{3, 1, 4, 1, 5, 9, 2}
	run := func(c Config) []float32 {
		t.Helper()
		m, err := NewModel(c)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(tokens, 1, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out.Data
	}
	nope, bare, one := cfg, cfg, cfg
	nope.NoRope = []bool{true, true}
	bare.Rope, bare.Local = nil, &Local{Layers: cfg.Local.Layers, Window: cfg.Local.Window}
	one.NoRope = []bool{false, true}
	if !slices.Equal(run(nope), run(bare)) {
		t.Error("NoRope in every block differs from the model without a rotary")
	}
	if slices.Equal(run(one), run(cfg)) {
		t.Error("a NoRope block changed nothing")
	}
	bad := cfg
	bad.NoRope = []bool{true}
	if _, err := NewModel(bad); err == nil || !strings.Contains(err.Error(), "no_rope lists 1 layers, want one flag per layer, 2") {
		t.Errorf("NoRope of 1 flag: %v", err)
	}
}

// TestRouting checks Model.Routing after a Forward of a mixture of experts: each position's
// probabilities sum to 1, its experts are the k most probable in decreasing order, and their
// weights are those probabilities over their sum (NormTopK), or the probabilities themselves
// without it; a dense model, a layer out of range and a model before any Forward have none.
func TestRouting(t *testing.T) {
	for _, name := range []string{"mixtral", "qwen3_moe"} {
		cfg := hfConfigs()[name]
		m, err := NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if m.Routing(0) != nil {
			t.Errorf("%s: routing before any Forward", name)
		}
		if _, err := m.Forward([]int{3, 1, 4, 1, 5, 9, 2, 6}, 2, 4, nil); err != nil {
			t.Fatal(err)
		}
		k, ne := cfg.ExpertsPerToken, cfg.Experts
		for l := range cfg.Layers {
			r := m.Routing(l)
			if r == nil || !slices.Equal(r.Probs.Shape, []int{2, 4, ne}) || !slices.Equal(r.Weights.Shape, []int{2, 4, k}) || len(r.Experts) != 8*k {
				t.Fatalf("%s layer %d: routing %+v, want [2 4 %d] probabilities and [2 4 %d] experts and weights", name, l, r, ne, k)
			}
			for i := range 8 {
				p, sel, w := r.Probs.Data[i*ne:(i+1)*ne], r.Experts[i*k:(i+1)*k], r.Weights.Data[i*k:(i+1)*k]
				var sum, top float64
				for _, v := range p {
					sum += float64(v)
				}
				for j, e := range sel {
					top += float64(p[e])
					if j > 0 && p[e] > p[sel[j-1]] {
						t.Errorf("%s layer %d position %d: experts %v not by decreasing probability %v", name, l, i, sel, p)
					}
				}
				for e, v := range p {
					if !slices.Contains(sel, e) && v > p[sel[k-1]] {
						t.Errorf("%s layer %d position %d: expert %d (%v) left out for %v", name, l, i, e, v, sel)
					}
				}
				if math.Abs(sum-1) > 1e-6 {
					t.Errorf("%s layer %d position %d: probabilities sum to %v", name, l, i, sum)
				}
				for j, e := range sel {
					want := float64(p[e])
					if cfg.NormTopK {
						want /= top
					}
					if math.Abs(float64(w[j])-want) > 1e-6 {
						t.Errorf("%s layer %d position %d: weight %d is %v, want %v", name, l, i, j, w[j], want)
					}
				}
			}
		}
		if m.Routing(cfg.Layers) != nil || m.Routing(-1) != nil {
			t.Errorf("%s: routing of a layer out of range", name)
		}
	}
	dense, err := NewModel(hfConfigs()["llama"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dense.Forward([]int{3, 1, 4}, 1, 3, nil); err != nil {
		t.Fatal(err)
	}
	if dense.Routing(0) != nil {
		t.Error("a dense model has a routing")
	}
}
