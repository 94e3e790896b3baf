package mha

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// gqaCase is a layer with grouped K/V heads or rotary and a call of it.
type gqaCase struct {
	name    string
	cfg     Config
	b, tq   int
	tk      int  // 0: self-attention
	kvSame  bool // cross-attention with key and value one tensor
	causal  bool
	padding bool
	softcap float64
	alibi   bool // top-left |i − j|, so only on self-attention, where SDPA's bottom-right agrees
	norm    *Normalizer
}

func gqaCases() []gqaCase {
	half := &Rotary{Theta: 100, Offset: 3}
	partial := &Rotary{Theta: 10000, Dim: 2, Layout: RopeInterleaved, Offset: 1,
		Scaling: &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8}}
	// LongRoPE: short factors when the call ends within 16 positions, long ones past 4.
	longrope := func(orig int) *Rotary {
		return &Rotary{Theta: 100, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1, 1.5}, LongFactor: []float64{2, 7},
			OriginalMaxPositions: orig, AttentionFactor: 1.2}}
	}
	return []gqaCase{
		{name: "longrope short", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Rotary: longrope(16), Seed: 17}, b: 2, tq: 7, causal: true},
		{name: "longrope long cross", cfg: Config{EmbedDim: 16, NumHeads: 4, Rotary: longrope(4), Seed: 18}, b: 1, tq: 5, tk: 7},
		{name: "gqa", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Seed: 1}, b: 2, tq: 7, causal: true},
		{name: "mqa rotary", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 1, Rotary: half, Seed: 2}, b: 2, tq: 9, causal: true, padding: true},
		{name: "mha rotary", cfg: Config{EmbedDim: 12, NumHeads: 3, Rotary: half, Seed: 3}, b: 1, tq: 6},
		{name: "cross kv-same partial rotary", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Rotary: partial, Seed: 4}, b: 2, tq: 5, tk: 8, kvSame: true, causal: true},
		{name: "cross kdim vdim", cfg: Config{EmbedDim: 8, NumHeads: 4, NumKVHeads: 2, KDim: 5, VDim: 3, NoBias: true, Rotary: half, Seed: 5}, b: 2, tq: 8, tk: 4, padding: true},
		{name: "gqa bias_kv zero_attn", cfg: Config{EmbedDim: 8, NumHeads: 2, NumKVHeads: 1, AddBiasKV: true, AddZeroAttn: true, Seed: 6}, b: 2, tq: 5, tk: 6},
		{name: "sinks softcap alibi", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Sinks: true, Rotary: half, Seed: 7}, b: 2, tq: 7, causal: true, padding: true, softcap: 2, alibi: true},
		{name: "cross sinks softcap", cfg: Config{EmbedDim: 12, NumHeads: 3, Sinks: true, Seed: 8}, b: 1, tq: 4, tk: 9, softcap: 0.7},
		{name: "sparsemax", cfg: Config{EmbedDim: 8, NumHeads: 2, NumKVHeads: 1, Rotary: half, Seed: 9}, b: 2, tq: 6, causal: true, norm: &Normalizer{Kind: Sparsemax}},
		{name: "entmax cross", cfg: Config{EmbedDim: 8, NumHeads: 2, Seed: 10}, b: 1, tq: 5, tk: 7, norm: &Normalizer{Kind: Entmax, Alpha: 1.5}},
		{name: "qk-norm gqa rotary", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Rotary: half, QKNorm: &QKNorm{Eps: 1e-6}, Seed: 11}, b: 2, tq: 7, causal: true, padding: true},
		{name: "qk-norm cross", cfg: Config{EmbedDim: 12, NumHeads: 3, QKNorm: &QKNorm{Eps: 0.25}, Seed: 12}, b: 1, tq: 4, tk: 6},
		{name: "qk-norm cross kdim", cfg: Config{EmbedDim: 8, NumHeads: 2, NumKVHeads: 1, KDim: 5, VDim: 3, Rotary: partial, QKNorm: &QKNorm{Eps: 1e-3}, Seed: 13}, b: 2, tq: 3, tk: 5, causal: true},
		{name: "wide heads gqa rotary qk-norm", cfg: Config{EmbedDim: 12, NumHeads: 4, NumKVHeads: 2, HeadSize: 6, Rotary: half, QKNorm: &QKNorm{Eps: 1e-6}, Seed: 14}, b: 2, tq: 6, causal: true, padding: true},
		{name: "qk-norm across gqa rotary", cfg: Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Rotary: half, QKNorm: &QKNorm{Eps: 1e-6, Across: true}, Seed: 19}, b: 2, tq: 7, causal: true, padding: true},
		{name: "qk-norm across cross kdim", cfg: Config{EmbedDim: 8, NumHeads: 2, NumKVHeads: 1, KDim: 5, VDim: 3, Rotary: partial, QKNorm: &QKNorm{Eps: 1e-3, Across: true}, Seed: 20}, b: 2, tq: 3, tk: 5, causal: true},
		{name: "wide heads cross kdim", cfg: Config{EmbedDim: 8, NumHeads: 2, HeadSize: 6, KDim: 5, VDim: 3, Seed: 15}, b: 1, tq: 4, tk: 5},
		{name: "narrow heads bias_kv", cfg: Config{EmbedDim: 16, NumHeads: 4, HeadSize: 2, AddBiasKV: true, Sinks: true, Seed: 16}, b: 2, tq: 5, tk: 6},
	}
}

// inputs returns the case's query, key, value (nil for self-attention) and options.
func (c gqaCase) inputs(seed uint64) (q, k, v *tensor.Tensor, opt *Options) {
	rng := tensor.NewRNG(seed)
	e := c.cfg.EmbedDim
	q = randTensor(rng, c.b, c.tq, e)
	tk := c.tq
	if c.tk > 0 {
		tk = c.tk
		k = randTensor(rng, c.b, tk, c.cfg.kdim())
		v = k
		if !c.kvSame {
			v = randTensor(rng, c.b, tk, c.cfg.vdim())
		}
	}
	opt = &Options{Causal: c.causal, Softcap: c.softcap, ALiBi: c.alibi, Normalizer: c.norm}
	if c.padding {
		m := tensor.NewBool(c.b, tk)
		m.Data[tk-1] = true    // batch 0: last key
		m.Data[tk+tk/2] = true // batch 1: a middle key
		opt.KeyPaddingMask = m
	}
	return q, k, v, opt
}

// composed computes the case's output as the projections in float64, SDPAReference over them
// (grouped heads, rotary, top-left causal, padding) and the output projection: an independent
// composition of the layer from the functional API.
func composed(t *testing.T, l *Layer, c gqaCase, q, k, v *tensor.Tensor, opt *Options) []float64 {
	t.Helper()
	cfg := l.Config()
	e, qd, h, hkv, d := cfg.EmbedDim, cfg.InnerDim(), cfg.NumHeads, cfg.KVHeads(), cfg.HeadDim(0)
	if k == nil {
		k, v = q, q
	}
	wq, wk, wv, bq, bk, bv := l.projections()
	// project returns x·wᵀ + bias as [B, heads, T, d] float32 (SDPA's layout).
	project := func(x *tensor.Tensor, w, bias []float32, heads int) *tensor.Tensor {
		b, tt, in := x.Shape[0], x.Shape[1], x.Shape[2]
		out := tensor.New(b, heads, tt, d)
		for bb := range b {
			for i := range tt {
				for o := range heads * d {
					s := 0.0
					if bias != nil {
						s = float64(bias[o])
					}
					for f := range in {
						s += float64(x.Data[(bb*tt+i)*in+f]) * float64(w[o*in+f])
					}
					out.Data[((bb*heads+o/d)*tt+i)*d+o%d] = float32(s)
				}
			}
		}
		return out
	}
	so := &SDPAOptions{KeyPaddingMask: opt.KeyPaddingMask, Rotary: cfg.Rotary, Softcap: opt.Softcap, ALiBi: opt.ALiBi, Sinks: l.param("sinks"), Normalizer: opt.Normalizer}
	if opt.Causal {
		so.Causal = CausalTopLeft
	}
	kk, vv := project(k, wk.F, bk, hkv), project(v, wv.F, bv, hkv)
	qq := project(q, wq.F, bq, h)
	if n := cfg.QKNorm; n != nil { // RMSNorm in float64: each head's d values, or a position's every head's
		for _, x := range []struct {
			t     *tensor.Tensor
			w     []float32
			heads int
		}{{qq, l.param("q_norm.weight"), h}, {kk, l.param("k_norm.weight"), hkv}} {
			b, tt := x.t.Shape[0], x.t.Shape[2]
			group := 1 // heads normalised together
			if n.Across {
				group = x.heads
			}
			at := func(bb, hh, i, j int) *float32 { return &x.t.Data[((bb*x.heads+hh)*tt+i)*d+j] }
			for bb := range b {
				for i := range tt {
					for h0 := 0; h0 < x.heads; h0 += group {
						ss := 0.0
						for hh := h0; hh < h0+group; hh++ {
							for j := range d {
								ss += float64(*at(bb, hh, i, j)) * float64(*at(bb, hh, i, j))
							}
						}
						rstd := 1 / math.Sqrt(ss/float64(group*d)+n.Eps)
						for hh := h0; hh < h0+group; hh++ {
							for j := range d {
								*at(bb, hh, i, j) = float32(float64(*at(bb, hh, i, j)) * rstd * float64(x.w[(hh-h0)*d+j]))
							}
						}
					}
				}
			}
		}
	}
	if cfg.AddBiasKV || cfg.AddZeroAttn { // the appended key rows, after the projected ones
		bkv, bvv := l.param("bias_k"), l.param("bias_v")
		extra := 0
		if cfg.AddBiasKV {
			extra++
		}
		if cfg.AddZeroAttn {
			extra++
		}
		grow := func(x *tensor.Tensor, bias []float32) *tensor.Tensor {
			b, tt := x.Shape[0], x.Shape[2]
			y := tensor.New(b, hkv, tt+extra, d)
			for bh := range b * hkv {
				copy(y.Data[bh*(tt+extra)*d:], x.Data[bh*tt*d:(bh+1)*tt*d])
				if bias != nil {
					copy(y.Data[(bh*(tt+extra)+tt)*d:], bias[bh%hkv*d:][:d])
				}
			}
			return y
		}
		kk, vv = grow(kk, bkv), grow(vv, bvv)
		if m := opt.KeyPaddingMask; m != nil {
			t.Fatal("the composition does not pad appended keys")
		}
	}
	tr, err := SDPAReference(qq, kk, vv, so)
	if err != nil {
		t.Fatal(err)
	}
	b, tq := q.Shape[0], q.Shape[1]
	wo, bo := l.param("out_proj.weight"), l.param("out_proj.bias")
	out := make([]float64, b*tq*e)
	for bb := range b {
		for i := range tq {
			for o := range e {
				s := 0.0
				if bo != nil {
					s = float64(bo[o])
				}
				for f := range qd {
					s += tr.Out[((bb*h+f/d)*tq+i)*d+f%d] * float64(wo[o*qd+f])
				}
				out[(bb*tq+i)*e+o] = s
			}
		}
	}
	return out
}

// TestLayerGQARotary checks the layer with grouped K/V heads and rotary, in float32 and in its
// float64 Reference, against the same layer composed from its projections and SDPAReference.
func TestLayerGQARotary(t *testing.T) {
	for _, c := range gqaCases() {
		t.Run(c.name, func(t *testing.T) {
			l := newLayer(t, c.cfg)
			q, k, v, opt := c.inputs(7)
			want := composed(t, l, c, q, k, v, opt)
			r := forward(t, l, q, k, v, opt)
			checkRel(t, "Forward", r.Output.Data, want, 1e-5)
			tr, err := l.Reference(q, k, v, opt)
			if err != nil {
				t.Fatal(err)
			}
			// The composition rounds its projections to float32, so 1e-12 is out of reach.
			checkRel(t, "Reference", tr.Output, want, 1e-6)

			wopt := *opt
			wopt.NeedWeights, wopt.PerHeadWeights = true, true
			rw := forward(t, l, q, k, v, &wopt)
			checkRel(t, "Forward with weights", rw.Output.Data, want, 1e-5)
			checkRel(t, "weights", rw.Weights.Data, tr.Weights, 1e-5)
		})
	}
}

// TestLayerGQAParams checks the parameter shapes of grouped K/V heads and that InferConfig
// reads them back.
func TestLayerGQAParams(t *testing.T) {
	for _, cfg := range []Config{
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2},
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 1, AddBiasKV: true},
		{EmbedDim: 16, NumHeads: 8, NumKVHeads: 2, KDim: 5, VDim: 7, NoBias: true},
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, QKNorm: &QKNorm{Eps: 1e-6}},
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, QKNorm: &QKNorm{Eps: 1e-6, Across: true}},
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, HeadSize: 8},
		{EmbedDim: 16, NumHeads: 8, NumKVHeads: 2, HeadSize: 3, KDim: 5, VDim: 7},
		{EmbedDim: 10, NumHeads: 4, HeadSize: 3, AddBiasKV: true},
	} {
		l := newLayer(t, cfg)
		e, d := cfg.EmbedDim, cfg.HeadDim(0)
		qd, ekv := cfg.NumHeads*d, orDefault(cfg.NumKVHeads, cfg.NumHeads)*d
		if got := l.Config().KVDim(); got != ekv {
			t.Errorf("%+v: KVDim %d, want %d", cfg, got, ekv)
		}
		if got := l.Config().InnerDim(); got != qd {
			t.Errorf("%+v: InnerDim %d, want %d", cfg, got, qd)
		}
		want := map[string][]int{"out_proj.weight": {e, qd}}
		if cfg.KDim == 0 {
			want["in_proj_weight"] = []int{qd + 2*ekv, e}
		} else {
			want["q_proj_weight"], want["k_proj_weight"], want["v_proj_weight"] = []int{qd, e}, []int{ekv, cfg.KDim}, []int{ekv, cfg.VDim}
		}
		if !cfg.NoBias {
			want["in_proj_bias"], want["out_proj.bias"] = []int{qd + 2*ekv}, []int{e}
		}
		if cfg.AddBiasKV {
			want["bias_k"], want["bias_v"] = []int{1, 1, ekv}, []int{1, 1, ekv}
		}
		if n := cfg.QKNorm; n != nil && n.Across {
			want["q_norm.weight"], want["k_norm.weight"] = []int{qd}, []int{ekv}
		} else if n != nil {
			want["q_norm.weight"], want["k_norm.weight"] = []int{d}, []int{d}
		}
		sd := l.StateDict()
		if len(sd) != len(want) {
			t.Errorf("%+v: %d parameters, want %d", cfg, len(sd), len(want))
		}
		for name, shape := range want {
			if p, ok := sd[name]; !ok || !slices.Equal(p.Shape, shape) {
				t.Errorf("%+v: %s is %v, want %v", cfg, name, sd[name], shape)
			}
		}
		got, err := InferConfig(sd, cfg.NumHeads)
		if err != nil {
			t.Fatal(err)
		}
		if got.NumKVHeads != cfg.NumKVHeads || got.KDim != cfg.KDim || got.VDim != cfg.VDim || got.NoBias != cfg.NoBias || got.AddBiasKV != cfg.AddBiasKV ||
			(got.QKNorm != nil) != (cfg.QKNorm != nil) || got.QKNorm != nil && got.QKNorm.Across != cfg.QKNorm.Across || got.HeadSize != cfg.HeadSize {
			t.Errorf("InferConfig gave %+v, want %+v", got, cfg)
		}
	}
}

// TestLayerGQAErrors checks that configurations grouped heads and rotary cannot serve are
// refused with ErrConfig.
func TestLayerGQAErrors(t *testing.T) {
	for _, cfg := range []Config{
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 3},
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 8},
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: -1},
		{EmbedDim: 16, NumHeads: 2, NumKVHeads: 1, HeadDims: []int{4, 12}},
		{EmbedDim: 16, NumHeads: 2, HeadDims: []int{4, 12}, Rotary: &Rotary{Theta: 10}},
		{EmbedDim: 16, NumHeads: 2, AddBiasKV: true, Rotary: &Rotary{Theta: 10}},
		{EmbedDim: 16, NumHeads: 2, Rotary: &Rotary{Theta: 0}},
		{EmbedDim: 16, NumHeads: 2, Rotary: &Rotary{Theta: 10, Dim: 3}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{EmbedDim: 16, NumHeads: 2, HeadDims: []int{4, 12}, QKNorm: &QKNorm{Eps: 1e-6}}, "qk-norm needs heads of one size, have head dims [4 12]"},
		{Config{EmbedDim: 16, NumHeads: 2, AddZeroAttn: true, QKNorm: &QKNorm{Eps: 1e-6}}, "qk-norm normalises projected keys"},
		{Config{EmbedDim: 16, NumHeads: 2, QKNorm: &QKNorm{}}, "qk-norm eps is 0, want a finite number > 0"},
		{Config{EmbedDim: 16, NumHeads: 2, QKNorm: &QKNorm{Eps: math.Inf(1)}}, "qk-norm eps is +Inf"},
		{Config{EmbedDim: 16, NumHeads: 2, QKNorm: &QKNorm{Eps: math.NaN()}}, "qk-norm eps is NaN"},
		{Config{EmbedDim: 16, NumHeads: 2, QKNorm: &QKNorm{Eps: 1e-80}}, "qk-norm eps is 1e-80, want a finite number > 0 in float32"},
		{Config{EmbedDim: 16, NumHeads: 2, HeadSize: -1}, "head size is -1, want 0 (E/H) or a size in [1, 65536]"},
		{Config{EmbedDim: 16, NumHeads: 2, HeadSize: 1 << 17}, "head size is 131072"},
		{Config{EmbedDim: 16, NumHeads: 2, HeadSize: 8, HeadDims: []int{8, 8}}, "head size 8 and head dims [8 8]; give one or the other"},
		{Config{EmbedDim: 16, NumHeads: 4096, HeadSize: 1 << 16}, "dimension 268435456 is larger than 65536"},
	} {
		if _, err := New(c.cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want ErrConfig with %q", c.cfg, err, c.want)
		}
	}
	// A valid config too large to allocate is refused before anything is allocated: 4·2³⁰
	// weights and 4·2¹⁵ biases, or 2·2³⁰ + 2·2³¹ with a kdim and vdim of 65536.
	for cfg, n := range map[*Config]int{
		{EmbedDim: 32768, NumHeads: 8}:                           4295098368,
		{EmbedDim: 32768, NumHeads: 8, KDim: 65536, VDim: 65536}: 6442582016,
	} {
		want := fmt.Sprintf("%d parameters, more than the 2147483648", n)
		if _, err := New(*cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v) = %v, want ErrConfig with %q", *cfg, err, want)
		}
	}
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, Rotary: &Rotary{Theta: 10, Offset: maxRopePosition - 4}})
	q := randTensor(tensor.NewRNG(1), 1, 5, 8)
	if _, err := l.Forward(q, nil, nil, nil); !errors.Is(err, ErrShape) {
		t.Errorf("positions past the rotary limit: %v, want ErrShape", err)
	}
}

// TestLayerGQABackward checks the gradients of grouped K/V heads and rotary against central
// finite differences of the float64 Reference, for every parameter and input value.
func TestLayerGQABackward(t *testing.T) {
	for _, c := range gqaCases() {
		t.Run(c.name, func(t *testing.T) {
			l := newLayer(t, c.cfg)
			q, k, v, opt := c.inputs(11)
			rng := tensor.NewRNG(12)
			dy := randTensor(rng, c.b, c.tq, c.cfg.EmbedDim)
			got := backward(t, l, q, k, v, opt, dy)
			h := float32(1.0 / 256)
			if c.norm != nil && c.norm.Kind == Sparsemax {
				h = 1.0 / 65536 // sparsemax is piecewise linear: stay between its kinks
			}
			want := fdGrads(t, l, q, k, v, opt, dy.Data, h)
			compareGrads(t, got, want, 1e-4)
		})
	}
}

// TestLayerGQAWorkers checks that grouped heads with rotary, and qk-norm, give the same bits on
// any number of workers, forward and backward.
func TestLayerGQAWorkers(t *testing.T) {
	for _, norm := range []*QKNorm{nil, {Eps: 1e-6}} {
		l := newLayer(t, Config{EmbedDim: 32, NumHeads: 8, NumKVHeads: 2, Rotary: &Rotary{Theta: 500}, QKNorm: norm, Seed: 3, Dropout: 0.1})
		rng := tensor.NewRNG(4)
		sameGradsOnWorkers(t, l, randTensor(rng, 2, 150, 32), randTensor(rng, 2, 150, 32))
	}
}

// TestLayerGQAEqualsRepeatedKV checks that grouped K/V heads are the plain layer whose key and
// value projections repeat each K/V head's rows for every query head of its group.
func TestLayerGQAEqualsRepeatedKV(t *testing.T) {
	const e, heads, hkv = 16, 4, 2
	d := e / heads
	g := newLayer(t, Config{EmbedDim: e, NumHeads: heads, NumKVHeads: hkv, Seed: 8})
	m := newLayer(t, Config{EmbedDim: e, NumHeads: heads, Seed: 9})
	gw, gb := g.param("in_proj_weight"), g.param("in_proj_bias")
	mw, mb := m.param("in_proj_weight"), m.param("in_proj_bias")
	ekv := hkv * d
	copy(mw[:e*e], gw[:e*e])
	copy(mb[:e], gb[:e])
	for part := range 2 { // K, then V
		for o := range e { // row o of the plain layer's block: head o/d, K/V head (o/d)·hkv/heads
			src := e + part*ekv + (o/d)*hkv/heads*d + o%d
			dst := e + part*e + o
			copy(mw[dst*e:(dst+1)*e], gw[src*e:(src+1)*e])
			mb[dst] = gb[src]
		}
	}
	copy(m.param("out_proj.weight"), g.param("out_proj.weight"))
	copy(m.param("out_proj.bias"), g.param("out_proj.bias"))
	x := randTensor(tensor.NewRNG(10), 2, 11, e)
	for _, causal := range []bool{false, true} {
		opt := &Options{Causal: causal}
		a, b := forward(t, g, x, nil, nil, opt), forward(t, m, x, nil, nil, opt)
		if diff := maxAbsDiff(a.Output.Data, b.Output.Data); diff > 1e-5 {
			t.Errorf("causal %v: grouped and repeated differ by %g", causal, diff)
		}
	}
}

// TestLayerHalfWeights checks a layer holding bfloat16 or float16 weights against the float32
// layer whose weights are their values: the same bits from Forward (the half-precision GEMM
// decodes exactly and sums in the same order), the same Reference and gradients, and no float32
// copy of the matrices kept.
func TestLayerHalfWeights(t *testing.T) {
	for _, cfg := range []Config{
		{EmbedDim: 32, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 1000}, Seed: 1},
		{EmbedDim: 24, NumHeads: 3, KDim: 5, VDim: 7, AddBiasKV: true, Seed: 2},
	} {
		for _, format := range []tensor.HalfFormat{tensor.BFloat16, tensor.Float16} {
			t.Run(fmt.Sprintf("%v/kdim=%d", format, cfg.KDim), func(t *testing.T) {
				full, half := newLayer(t, cfg), newLayer(t, cfg)
				sd := map[string]*tensor.Half{}
				for _, p := range full.Parameters() {
					h := &tensor.Half{Shape: p.T.Shape, Data: make([]uint16, len(p.T.Data)), Format: format}
					if format == tensor.BFloat16 {
						kernel.EncodeBF16(h.Data, p.T.Data)
						kernel.DecodeBF16(p.T.Data, h.Data) // the float32 layer gets the rounded values
					} else {
						kernel.EncodeF16(h.Data, p.T.Data)
						kernel.DecodeF16(p.T.Data, h.Data)
					}
					sd[p.Name] = h
				}
				if err := half.LoadHalfStateDict(sd); err != nil {
					t.Fatal(err)
				}
				for name := range sd {
					if isMatrix(name) && half.param(name) != nil {
						t.Errorf("%s: the layer keeps a float32 copy", name)
					}
				}
				rng := tensor.NewRNG(3)
				q := randTensor(rng, 2, 70, cfg.EmbedDim)
				var k, v *tensor.Tensor
				if cfg.KDim != 0 {
					k, v = randTensor(rng, 2, 40, cfg.KDim), randTensor(rng, 2, 40, cfg.VDim)
				}
				opt := &Options{Causal: true, NeedWeights: true}
				a, b := forward(t, full, q, k, v, opt), forward(t, half, q, k, v, opt)
				if !bitsEqual(a.Output.Data, b.Output.Data) || !bitsEqual(a.Weights.Data, b.Weights.Data) {
					t.Errorf("half weights differ from their float32 values: %g", maxAbsDiff(a.Output.Data, b.Output.Data))
				}
				ra, err := full.Reference(q, k, v, opt)
				if err != nil {
					t.Fatal(err)
				}
				rb, err := half.Reference(q, k, v, opt)
				if err != nil {
					t.Fatal(err)
				}
				checkRel(t, "Reference", rb.Output, ra.Output, 0)
				for name, p := range half.StateDict() {
					if !bitsEqual(p.Data, full.StateDict()[name].Data) {
						t.Errorf("StateDict %s differs from the loaded values", name)
					}
				}
				dy := randTensor(rng, 2, 70, cfg.EmbedDim)
				ga, gb := backward(t, full, q, k, v, opt, dy), backward(t, half, q, k, v, opt, dy)
				for name, g := range ga {
					if !bitsEqual(g, gb[name]) {
						t.Errorf("gradient %s with half weights differs from float32's", name)
					}
				}
				fresh, err := NewHalf(cfg, sd)
				if err != nil {
					t.Fatal(err)
				}
				if c := forward(t, fresh, q, k, v, opt); !bitsEqual(c.Output.Data, b.Output.Data) {
					t.Error("NewHalf differs from LoadHalfStateDict")
				}
				for _, p := range fresh.HeldParameters() {
					if (p.T == nil) != isMatrix(p.Name) {
						t.Errorf("NewHalf: %s held in float32 %v", p.Name, p.T != nil)
					}
				}

				// Without the weights' gradients (nil T): every other gradient is the same.
				var r Result
				var s Saved
				gopt := *opt
				gopt.Heads.Gate = tensor.New(2, cfg.NumHeads)
				for i := range gopt.Heads.Gate.Data {
					gopt.Heads.Gate.Data[i] = 1 - 0.1*float32(i)
				}
				want := backward(t, full, q, k, v, &gopt, dy)
				if err := half.ForwardTrain(&r, &s, q, k, v, &gopt); err != nil {
					t.Fatal(err)
				}
				var g Grads
				for _, p := range half.HeldParameters() {
					gp := Param{Name: p.Name}
					if p.T != nil {
						gp.T = tensor.New(p.T.Shape...)
					}
					g.Params = append(g.Params, gp)
				}
				if err := half.Backward(&g, &s, dy); err != nil {
					t.Fatal(err)
				}
				g.Zero() // with nil tensors
				if err := half.Backward(&g, &s, dy); err != nil {
					t.Fatal(err)
				}
				got := map[string][]float32{"query": g.Query.Data, "gate": g.Gate.Data}
				if g.Key != nil {
					got["key"], got["value"] = g.Key.Data, g.Value.Data
				}
				for _, p := range g.Params {
					if p.T != nil {
						got[p.Name] = p.T.Data
					} else if !isMatrix(p.Name) {
						t.Errorf("HeldParameters: %s has no float32 tensor", p.Name)
					}
				}
				for name, w := range want {
					if gw, ok := got[name]; ok && !bitsEqual(gw, w) {
						t.Errorf("gradient %s without the weights' gradients differs", name)
					} else if !ok && !isMatrix(name) {
						t.Errorf("gradient %s missing without the weights' gradients", name)
					}
				}
				if err := half.LoadStateDict(full.StateDict()); err != nil || half.half != nil {
					t.Errorf("LoadStateDict after LoadHalfStateDict: %v, half weights %v", err, half.half != nil)
				}
			})
		}
	}
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2})
	sd := map[string]*tensor.Half{}
	for i, p := range l.Parameters() {
		f := tensor.BFloat16
		if i == 1 {
			f = tensor.Float16
		}
		sd[p.Name] = &tensor.Half{Shape: p.T.Shape, Data: make([]uint16, len(p.T.Data)), Format: f}
	}
	if err := l.LoadHalfStateDict(sd); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "want one format for all") {
		t.Errorf("mixed formats: %v, want ErrStateDict", err)
	}
	if _, err := NewHalf(Config{EmbedDim: 8, NumHeads: 2}, sd); !errors.Is(err, ErrStateDict) {
		t.Errorf("NewHalf with mixed formats: %v, want ErrStateDict", err)
	}
	if _, err := NewHalf(Config{EmbedDim: 8, NumHeads: 3}, sd); !errors.Is(err, ErrConfig) {
		t.Errorf("NewHalf with a bad config: %v, want ErrConfig", err)
	}
	for _, h := range sd {
		h.Format = 0
	}
	if err := l.LoadHalfStateDict(sd); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "in_proj_bias is in format HalfFormat(0), want bfloat16 or float16") {
		t.Errorf("no format: %v, want ErrStateDict naming in_proj_bias", err)
	}
}

// TestLayerWindow checks the layer's sliding window against the same window written as a
// boolean attention mask, in Forward, Reference and Backward, with grouped heads and rotary.
func TestLayerWindow(t *testing.T) {
	const tq, tk = 90, 90
	l := newLayer(t, Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100}, Seed: 5})
	rng := tensor.NewRNG(6)
	x, dy := randTensor(rng, 2, tq, 16), randTensor(rng, 2, tq, 16)
	for _, w := range []Window{{3, 0}, {0, 2}, {70, 5}, {-1, 4}, {10, -1}} {
		for _, causal := range []bool{false, true} {
			mask := tensor.NewBool(tq, tk)
			for i := range tq {
				for j := range tk {
					mask.Data[i*tk+j] = (w.Left >= 0 && j < i-w.Left) || (w.Right >= 0 && j > i+w.Right)
				}
			}
			win, masked := &Options{Window: &w, Causal: causal}, &Options{AttnMask: mask, Causal: causal}
			a, b := forward(t, l, x, nil, nil, win), forward(t, l, x, nil, nil, masked)
			if d := maxAbsDiff(a.Output.Data, b.Output.Data); d > 1e-6 {
				t.Errorf("window %v causal %v: Forward differs from the mask by %g", w, causal, d)
			}
			ra, err := l.Reference(x, nil, nil, win)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := l.Reference(x, nil, nil, masked)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "Reference", ra.Output, rb.Output, 1e-12)
			ga, gb := backward(t, l, x, nil, nil, win, dy), backward(t, l, x, nil, nil, masked, dy)
			for name, g := range ga {
				if d := maxAbsDiff(g, gb[name]); d > 1e-5 {
					t.Errorf("window %v causal %v: gradient %s differs from the mask's by %g", w, causal, name, d)
				}
			}
		}
	}
	if _, err := l.Forward(x, nil, nil, &Options{Window: &Window{-2, 0}}); !errors.Is(err, ErrShape) {
		t.Errorf("window (−2, 0): %v, want ErrShape", err)
	}
}

// TestLayerForwardCache checks that a prefill and then steps through the layer's KV cache give
// Forward's output on the whole sequence, with grouped heads, rotary with an offset, qk-norm
// (per head and across the heads), heads of another size than E/H and a window.
func TestLayerForwardCache(t *testing.T) {
	const b, n, e = 2, 13, 16
	for _, c := range []struct {
		cfg    Config
		window *Window
	}{
		{Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100, Offset: 2}, Seed: 1}, nil},
		{Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 1, Rotary: &Rotary{Theta: 100, Layout: RopeInterleaved}, Seed: 2}, &Window{3, 0}},
		{Config{EmbedDim: e, NumHeads: 2, NoBias: true, Seed: 3}, nil},
		{Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Sinks: true, Seed: 9}, &Window{4, 0}},
		{Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100, Offset: 1}, QKNorm: &QKNorm{Eps: 1e-6}, Seed: 10}, nil},
		{Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100}, QKNorm: &QKNorm{Eps: 1e-6, Across: true}, Seed: 13}, &Window{4, 0}},
		{Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 1, HeadSize: 8, Rotary: &Rotary{Theta: 100}, Seed: 11}, &Window{5, 0}},
		{Config{EmbedDim: e, NumHeads: 2, HeadSize: 3, Seed: 12}, nil},
	} {
		l := newLayer(t, c.cfg)
		x := randTensor(tensor.NewRNG(4), b, n, e)
		opt := &Options{Causal: true, Window: c.window, Softcap: 3, ALiBi: c.cfg.Sinks}
		want := forward(t, l, x, nil, nil, opt).Output
		kv, err := l.NewKVCache(b, n, CacheFloat32)
		if err != nil {
			t.Fatal(err)
		}
		var parts []*tensor.Tensor
		for _, step := range []int{5, 1, 1, 2, 1, 3} {
			start := kv.Len()
			y, err := l.ForwardCache(kv, sliceT(x, start, start+step), opt)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, y)
		}
		checkRel(t, fmt.Sprintf("%+v", c.cfg), concatT(parts).Data, as[float64](want.Data), 1e-5)
		if _, err := l.ForwardCache(kv, tensor.New(b, 1, e), opt); !errors.Is(err, ErrShape) {
			t.Errorf("a full cache: %v, want ErrShape", err)
		}
	}
	l := newLayer(t, Config{EmbedDim: e, NumHeads: 2})
	kv, _ := l.NewKVCache(1, 4, CacheFloat32)
	for _, bad := range []*Options{{NeedWeights: true}, {Heads: HeadOptions{Keep: true}}, {AttnMask: tensor.NewBool(1, 1)},
		{Patterns: []Pattern{{Kind: PatternLocal, Width: 2}}}, {Normalizer: &Normalizer{Kind: Sparsemax}}} {
		if _, err := l.ForwardCache(kv, tensor.New(1, 1, e), bad); !errors.Is(err, ErrShape) {
			t.Errorf("options %+v: %v, want ErrShape", bad, err)
		}
	}
	if _, err := l.ForwardCache(kv, tensor.New(2, 1, e), nil); !errors.Is(err, ErrShape) {
		t.Errorf("batch 2 on a cache of 1: %v, want ErrShape", err)
	}
	if _, err := l.ForwardCache(kv, tensor.New(1, 1, e), &Options{Normalizer: &Normalizer{Kind: Softmax}}); err != nil {
		t.Errorf("the softmax normalizer, which is no normalizer: %v", err)
	}
	if _, err := l.ForwardCache(kv, tensor.New(1, 1, e+1), nil); !errors.Is(err, ErrShape) {
		t.Errorf("x [1 1 %d]: %v, want ErrShape", e+1, err)
	}
	// A cache made for a layer of other heads is refused in the layer's terms, unchanged.
	other := newLayer(t, Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 1})
	okv, err := other.NewKVCache(1, 4, CacheFloat32)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ForwardCache(okv, tensor.New(1, 1, e), nil); !errors.Is(err, ErrShape) || okv.Len() != 0 ||
		!strings.Contains(err.Error(), "the cache holds 1 K/V heads of 4 (values 4), the layer has 2 K/V heads of 8") {
		t.Errorf("a cache of another layer: %v (Len %d), want ErrShape naming both", err, okv.Len())
	}
}

// TestLayerForwardCacheLong checks ForwardCache against Forward on a prompt long enough that the
// copies into per-head layout and back run on the workers (relayout), then a few steps.
func TestLayerForwardCacheLong(t *testing.T) {
	const b, n, e = 2, 300, 32
	l := newLayer(t, Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100}, Seed: 7})
	x := randTensor(tensor.NewRNG(8), b, n, e)
	if b*(n-3)*e < parallelCopy {
		t.Fatalf("the prompt has %d values, fewer than parallelCopy", b*(n-3)*e)
	}
	opt := &Options{Causal: true, Workers: 3}
	want := forward(t, l, x, nil, nil, opt).Output
	kv, err := l.NewKVCache(b, n, CacheFloat32)
	if err != nil {
		t.Fatal(err)
	}
	var parts []*tensor.Tensor
	for _, step := range []int{n - 3, 1, 2} {
		start := kv.Len()
		y, err := l.ForwardCache(kv, sliceT(x, start, start+step), opt)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, y)
	}
	checkRel(t, "long prompt", concatT(parts).Data, as[float64](want.Data), 1e-5)
}

// TestLayerForwardCacheInto checks ForwardCacheInto: ForwardCache's output bits in r.Output, whose
// storage a second call reuses (while the Result's other fields are reset), r unchanged on an
// error, and no allocation in a decode step once it has seen the shape.
func TestLayerForwardCacheInto(t *testing.T) {
	const b, n, e = 2, 9, 16
	l := newLayer(t, Config{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100}, Seed: 5})
	x := randTensor(tensor.NewRNG(6), b, n, e)
	opt := &Options{Causal: true, Workers: 2}
	newCache := func() *KVCache {
		kv, err := l.NewKVCache(b, n+40, CacheFloat32)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	want, err := l.ForwardCache(newCache(), x, opt)
	if err != nil {
		t.Fatal(err)
	}
	r := Result{Weights: tensor.New(1), FullyMasked: 3}
	kv := newCache()
	if err := l.ForwardCacheInto(&r, kv, sliceT(x, 0, 5), opt); err != nil {
		t.Fatal(err)
	}
	first := &r.Output.Data[0]
	if err := l.ForwardCacheInto(&r, kv, sliceT(x, 5, n), opt); err != nil {
		t.Fatal(err)
	}
	if &r.Output.Data[0] != first || !slices.Equal(r.Output.Shape, []int{b, n - 5, e}) || r.Weights != nil || r.FullyMasked != 0 {
		t.Errorf("second call: output %v (storage reused: %v), weights %v, %d fully masked; want [%d %d %d] in the first call's storage and the rest reset",
			r.Output.Shape, &r.Output.Data[0] == first, r.Weights, r.FullyMasked, b, n-5, e)
	}
	checkRel(t, "ForwardCacheInto", r.Output.Data, as[float64](sliceT(want, 5, n).Data), 1e-6)
	before := r
	if err := l.ForwardCacheInto(&r, kv, tensor.New(b, 1, e+1), opt); !errors.Is(err, ErrShape) || r.Output != before.Output {
		t.Errorf("bad x: error %v, output %p (was %p); want ErrShape and r unchanged", err, r.Output, before.Output)
	}
	step := sliceT(x, 0, 1)
	if allocs := steadyAllocs(func() {
		if err := l.ForwardCacheInto(&r, kv, step, opt); err != nil {
			t.Fatal(err)
		}
		kv.n-- // take the token back
	}); allocs != 0 {
		t.Errorf("%v allocations per decode step, want 0", allocs)
	}
}

// FuzzForwardCache checks the layer's cached decode against Forward on the whole sequence: a
// prefill and steps of random lengths (0 included), on random head counts and sizes, grouped
// K/V heads, rotary, sinks, biases or none, causal or not, windows, soft-capping, ALiBi, every
// cache type and compute type and worker count (checkCached). A step past the capacity must fail and leave the cache
// as it was; a layer or options the cache cannot serve must fail as they should.
func FuzzForwardCache(f *testing.F) {
	// cfg packs H−1 (2 bits), the Hkv choice (2: H, 1, H/2), d−1 (3), B−1 (1), NoBias, Sinks,
	// rotary and its layout, appended keys (bit 12), head scales of their own (13), KDim and VDim
	// other than E (14), heads of two sizes (15), qk-norm (16), heads of d + 2 with E = H·d
	// (17); opts packs
	// causal, a window (bit 1; Left in 3 bits, Right + 1 in 2), ALiBi (7), the cache type (2),
	// bfloat16 compute (10), workers (2), a capacity one short (13), soft-capping (14); steps
	// holds up to 8 step lengths of 4 bits.
	f.Add(uint32(0x003), uint32(0x001), uint64(0x1115), uint64(1))
	f.Add(uint32(0x1ff), uint32(0x3fb), uint64(0x21_3107), uint64(2))
	f.Add(uint32(0x0a7), uint32(0x0c5), uint64(0x1111_1119), uint64(3))
	f.Add(uint32(0x062), uint32(0x141), uint64(0x0f0), uint64(4))
	f.Add(uint32(0x1003), uint32(0x001), uint64(0x3), uint64(5))      // appended keys: an error
	f.Add(uint32(0x2003), uint32(0x001), uint64(0x3), uint64(6))      // head scales of their own: an error
	f.Add(uint32(0x4003), uint32(0x001), uint64(0x3), uint64(9))      // KDim, VDim other than E: an error
	f.Add(uint32(0x8013), uint32(0x001), uint64(0x3), uint64(10))     // heads of two sizes: an error
	f.Add(uint32(0x0003), uint32(0x2001), uint64(0x24), uint64(7))    // the last step one past the capacity
	f.Add(uint32(0x0403), uint32(0x4403), uint64(0x31), uint64(8))    // rotary, soft-capping, bfloat16
	f.Add(uint32(0x10407), uint32(0x003), uint64(0x131), uint64(11))  // rotary and qk-norm
	f.Add(uint32(0x20417), uint32(0x403), uint64(0x1213), uint64(12)) // heads wider than E/H, rotary, bfloat16
	f.Fuzz(func(t *testing.T, cfgBits, opts uint32, steps, seed uint64) {
		bit := func(x uint32, i int) bool { return x>>i&1 != 0 }
		heads := 1 + int(cfgBits&3)
		hkv := []int{heads, 1, max(1, heads/2), heads}[cfgBits>>2&3]
		if heads%hkv != 0 {
			hkv = heads
		}
		d := 1 + int(cfgBits>>4&7)
		b := 1 + int(cfgBits>>7&1)
		cfg := Config{EmbedDim: heads * d, NumHeads: heads, NumKVHeads: hkv, NoBias: bit(cfgBits, 8), Sinks: bit(cfgBits, 9), Seed: seed}
		if bit(cfgBits, 10) {
			cfg.Rotary = &Rotary{Theta: 100, Layout: RopeLayout(cfgBits >> 11 & 1), Offset: int(seed % 5)}
		}
		cfg.AddBiasKV = bit(cfgBits, 12)
		if bit(cfgBits, 13) {
			cfg.HeadScales = make([]float64, heads)
			for h := range heads {
				cfg.HeadScales[h] = 0.5 + float64(h)
			}
		}
		if bit(cfgBits, 14) {
			cfg.KDim, cfg.VDim = cfg.EmbedDim+1, cfg.EmbedDim+2
		}
		if bit(cfgBits, 16) {
			cfg.QKNorm = &QKNorm{Eps: 1e-6}
		}
		if bit(cfgBits, 17) {
			d += 2
			cfg.HeadSize = d
		}
		if bit(cfgBits, 15) && heads > 1 {
			cfg.HeadDims = make([]int, heads)
			for h := range heads {
				cfg.HeadDims[h] = d + h%2
			}
			cfg.EmbedDim = 0
			for _, hd := range cfg.HeadDims {
				cfg.EmbedDim += hd
			}
			if cfg.HeadScales == nil {
				cfg.HeadScales = slices.Repeat([]float64{0.5}, heads) // one scale: only the sizes differ
			}
		}
		l, err := New(cfg)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New(%+v): %v, want nil or ErrConfig", cfg, err)
			}
			return
		}
		rng := tensor.NewRNG(seed)
		for _, p := range l.Parameters() {
			if strings.Contains(p.Name, "bias") || p.Name == "sinks" || strings.HasSuffix(p.Name, "norm.weight") {
				rng.Normal(p.T, 0.3)
			}
		}
		// Appended keys, heads of different sizes or scales, and keys and values of another
		// size than the embedding are refused, by the layer's NewKVCache and by ForwardCache
		// with a cache from the package's.
		if cfg.AddBiasKV || bit(cfgBits, 13) && heads > 1 || cfg.KDim != 0 || cfg.HeadDims != nil {
			if _, err := l.NewKVCache(b, 4, CacheFloat32); !errors.Is(err, ErrConfig) {
				t.Fatalf("NewKVCache for %+v: %v, want ErrConfig", cfg, err)
			}
			kv, err := NewKVCache(b, cfg.KVHeads(), d, d, 4, CacheFloat32)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.ForwardCache(kv, randTensor(rng, b, 1, cfg.EmbedDim), nil); !errors.Is(err, ErrConfig) || kv.Len() != 0 {
				t.Fatalf("ForwardCache for %+v: %v (Len %d), want ErrConfig", cfg, err, kv.Len())
			}
			return
		}

		opt := &Options{Causal: bit(opts, 0), Softcap: 0, ALiBi: bit(opts, 7), Workers: int(opts >> 11 & 3)}
		if bit(opts, 1) {
			opt.Window = &Window{Left: int(opts >> 2 & 7), Right: int(opts>>5&3) - 1}
		}
		if bit(opts, 14) {
			opt.Softcap = 2.5
		}
		dtype := CacheDType(opts >> 8 & 3 % 3)
		if bit(opts, 10) {
			opt.Compute = ComputeBFloat16
		}
		var lens []int
		n := 0
		for s := steps; s != 0 && len(lens) < 8; s >>= 4 {
			lens = append(lens, int(s&15))
			n += int(s & 15)
		}
		capacity := n
		if bit(opts, 13) && n > 0 {
			capacity-- // the step that reaches past it must fail
		}
		x := randTensor(rng, b, n, cfg.EmbedDim)
		kv, err := l.NewKVCache(b, max(capacity, 1), dtype)
		if err != nil {
			t.Fatalf("NewKVCache: %v", err)
		}
		var parts []*tensor.Tensor
		for _, step := range lens {
			start := kv.Len()
			y, err := l.ForwardCache(kv, sliceT(x, start, start+step), opt)
			switch {
			case start+step > max(capacity, 1):
				if !errors.Is(err, ErrShape) || kv.Len() != start {
					t.Fatalf("%d positions after %d in a cache of %d: error %v, Len %d", step, start, capacity, err, kv.Len())
				}
				return
			case err != nil:
				t.Fatalf("step of %d after %d: %v", step, start, err)
			}
			checkTensor(t, "ForwardCache", y, []int{b, step, cfg.EmbedDim})
			if kv.Len() != start+step {
				t.Fatalf("Len %d after %d positions", kv.Len(), start+step)
			}
			parts = append(parts, y)
			if !opt.Causal && step > 0 {
				// Not causal, a step's queries see the positions so far, not the later ones a
				// Forward of the whole sequence would: the step's outputs are the last of a
				// Forward of the sequence so far.
				checkCached(t, fmt.Sprintf("positions %d to %d", start, start+step-1), l, y, sliceT(x, 0, start+step), start, opt, dtype)
			}
		}
		if !opt.Causal || len(parts) == 0 {
			return
		}
		checkCached(t, "the whole sequence", l, concatT(parts), x, 0, opt, dtype)
	})
}

// checkCached checks got, ForwardCache's outputs [B, T − from, E] for the positions from … T − 1
// of x [B, T, E], against those rows of a Forward of x in float32: with a float32 cache and
// compute within 10⁻⁵ relative or 10⁻⁶ RMS (outputs far smaller than their terms keep float32's
// absolute error), within their roundings otherwise.
func checkCached(t *testing.T, what string, l *Layer, got, x *tensor.Tensor, from int, opt *Options, dtype CacheDType) {
	t.Helper()
	full := *opt
	full.Compute = ComputeFloat32
	r, err := l.Forward(x, nil, nil, &full)
	if err != nil {
		t.Fatalf("%s: Forward: %v", what, err)
	}
	want := as[float64](sliceT(r.Output, from, x.Shape[1]).Data)
	if dtype == CacheFloat32 && opt.Compute == ComputeFloat32 {
		checkWithin(t, what+": cached decode against Forward", got.Data, want, 1e-5, 1e-6)
	} else {
		checkWithin(t, what+": cached decode against Forward", got.Data, want, 5e-2, 1e-2)
	}
}

// TestLayerShareScratch checks layers of different configurations computing in one scratch:
// Forward, ForwardCache and a training Forward with Backward, alternated between them and also
// run at once from two goroutines, give the bits of layers with scratch of their own.
func TestLayerShareScratch(t *testing.T) {
	cfgs := []Config{
		{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 100}, Seed: 1},
		{EmbedDim: 24, NumHeads: 3, Seed: 2},
	}
	run := func(l *Layer, e int) []float32 {
		x := randTensor(tensor.NewRNG(uint64(e)), 2, 70, e)
		var out []float32
		out = append(out, forward(t, l, x, nil, nil, &Options{Causal: true}).Output.Data...)
		kv, err := l.NewKVCache(2, 71, CacheFloat32)
		if err != nil {
			t.Error(err)
			return nil
		}
		y, err := l.ForwardCache(kv, x, &Options{Causal: true})
		if err != nil {
			t.Error(err)
			return nil
		}
		out = append(out, y.Data...)
		var r Result
		var s Saved
		if err := l.ForwardTrain(&r, &s, x, nil, nil, &Options{Causal: true}); err != nil {
			t.Error(err)
			return nil
		}
		g := Grads{Query: tensor.New(x.Shape...)}
		if err := l.Backward(&g, &s, r.Output); err != nil {
			t.Error(err)
			return nil
		}
		return append(out, g.Query.Data...)
	}
	var want [2][]float32
	for i, c := range cfgs {
		want[i] = run(newLayer(t, c), c.EmbedDim)
	}
	a, b := newLayer(t, cfgs[0]), newLayer(t, cfgs[1])
	b.ShareScratch(a)
	for round := range 2 {
		for i, l := range []*Layer{a, b} {
			if got := run(l, cfgs[i].EmbedDim); !bitsEqual(got, want[i]) {
				t.Errorf("round %d, layer %d: other bits than with its own scratch", round, i)
			}
		}
	}
	var wg sync.WaitGroup
	for i, l := range []*Layer{a, b} {
		wg.Go(func() {
			if got := run(l, cfgs[i].EmbedDim); !bitsEqual(got, want[i]) {
				t.Errorf("at once, layer %d: other bits than with its own scratch", i)
			}
		})
	}
	wg.Wait()
}
