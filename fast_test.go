package mha

import (
	"fmt"
	"math"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// maskCase builds the options of one tiled-vs-dense case.
type maskCase struct {
	name                     string
	cfg                      Config
	b, tq, tk                int
	cross, kvSame            bool
	causal, pad, mask, bias  bool
	perHeadMask, perHeadBias bool
	training                 bool
	probe                    bool // gate, shift, add to and keep the heads, the last one uniform
}

func (c maskCase) options(rng *tensor.RNG) Options {
	opt := Options{Causal: c.causal, Training: c.training, DropoutSeed: 5}
	heads := c.cfg.NumHeads
	if c.pad {
		m := tensor.NewBool(c.b, c.tk)
		for i := range m.Data {
			m.Data[i] = rng.Float64() < 0.3
		}
		for j := range c.tk { // batch 0 pads every key: its rows are fully masked unless keys were appended
			m.Data[j] = true
		}
		opt.KeyPaddingMask = m
	}
	if c.mask {
		m := tensor.NewBool(c.tq, c.tk)
		if c.perHeadMask {
			m = tensor.NewBool(c.b*heads, c.tq, c.tk)
		}
		for i := range m.Data {
			m.Data[i] = rng.Float64() < 0.4
		}
		opt.AttnMask = m
	}
	if c.bias {
		a := tensor.New(c.tq, c.tk)
		if c.perHeadBias {
			a = tensor.New(c.b*heads, c.tq, c.tk)
		}
		for i := range a.Data {
			a.Data[i] = float32(4*rng.Float64() - 2)
			if rng.Float64() < 0.1 {
				a.Data[i] = float32(math.Inf(-1))
			}
		}
		opt.AttnBias = a
	}
	if c.probe {
		g := tensor.New(c.b, heads)
		for i := range g.Data {
			g.Data[i] = float32(3*rng.Float64() - 1)
		}
		shift := make([]float32, c.cfg.InnerDim())
		for i := range shift {
			shift[i] = float32(rng.Float64() - 0.5)
		}
		uniform := make([]bool, heads)
		uniform[heads-1] = true
		add := randTensor(rng, c.b, c.tq, c.cfg.InnerDim())
		opt.Heads = HeadOptions{Keep: true, Gate: g, Shift: shift, Add: add, Uniform: uniform}
	}
	return opt
}

// headsIn returns the extra gradient on the head outputs that the backward tests add when opt
// keeps the heads, [B, Tq, H·d] (H·d = InnerDim); nil otherwise.
func headsIn(opt *Options, b, tq, e int) *tensor.Tensor {
	if opt == nil || !opt.Heads.Keep {
		return nil
	}
	return randTensor(tensor.NewRNG(77), b, tq, e)
}

// maskCases are shapes that span several query blocks and key tiles, with every mask kind.
func maskCases() []maskCase {
	base := Config{EmbedDim: 16, NumHeads: 2}
	return []maskCase{
		{name: "self one tile", cfg: base, b: 2, tq: 9, tk: 9},
		{name: "self many tiles", cfg: base, b: 1, tq: 300, tk: 300},
		{name: "cross", cfg: Config{EmbedDim: 12, NumHeads: 3, KDim: 5, VDim: 7}, b: 2, tq: 70, tk: 520, cross: true},
		{name: "cross key is value", cfg: Config{EmbedDim: 16, NumHeads: 4, AddBiasKV: true}, b: 2, tq: 70, tk: 300, cross: true, kvSame: true},
		{name: "causal", cfg: base, b: 2, tq: 300, tk: 300, causal: true},
		{name: "causal Tq<Tk", cfg: base, b: 1, tq: 65, tk: 530, cross: true, causal: true},
		{name: "causal Tq>Tk", cfg: base, b: 1, tq: 300, tk: 40, cross: true, causal: true},
		{name: "causal bias_kv zero_attn", cfg: Config{EmbedDim: 16, NumHeads: 4, AddBiasKV: true, AddZeroAttn: true}, b: 2, tq: 270, tk: 270, causal: true},
		{name: "key padding", cfg: base, b: 3, tq: 100, tk: 300, cross: true, pad: true},
		{name: "bool mask", cfg: base, b: 2, tq: 130, tk: 260, cross: true, mask: true},
		{name: "bool mask per head", cfg: base, b: 2, tq: 80, tk: 90, cross: true, mask: true, perHeadMask: true},
		{name: "float bias", cfg: base, b: 2, tq: 70, tk: 300, cross: true, bias: true},
		{name: "everything", cfg: Config{EmbedDim: 16, NumHeads: 4, AddBiasKV: true, AddZeroAttn: true}, b: 2, tq: 90, tk: 280, cross: true,
			causal: true, pad: true, mask: true, bias: true, perHeadBias: true},
		{name: "dropout", cfg: Config{EmbedDim: 16, NumHeads: 2, Dropout: 0.3}, b: 2, tq: 70, tk: 300, cross: true, pad: true, training: true},
		{name: "heads of different sizes and scales", cfg: Config{EmbedDim: 20, NumHeads: 3, HeadDims: []int{4, 12, 4}, HeadScales: []float64{1, 0.125, 0}},
			b: 2, tq: 130, tk: 130, causal: true},
		{name: "gated shifted uniform heads", cfg: Config{EmbedDim: 20, NumHeads: 3, HeadDims: []int{8, 4, 8}, AddBiasKV: true}, b: 2, tq: 90, tk: 280, cross: true,
			causal: true, pad: true, probe: true},
		{name: "gated heads wider than E/H", cfg: Config{EmbedDim: 12, NumHeads: 2, HeadSize: 10}, b: 2, tq: 90, tk: 150, cross: true,
			causal: true, pad: true, probe: true},
		{name: "heads narrower than E/H", cfg: Config{EmbedDim: 24, NumHeads: 3, HeadSize: 4, Dropout: 0.2}, b: 2, tq: 130, tk: 130, training: true, mask: true},
	}
}

// inputs returns case i's layer and inputs (key and value nil for self-attention).
func (c maskCase) inputs(t *testing.T, i int) (l *Layer, q, k, v *tensor.Tensor, opt Options) {
	c.cfg.Seed = uint64(i + 1)
	l = newLayer(t, c.cfg)
	rng := tensor.NewRNG(uint64(i + 50))
	q = randTensor(rng, c.b, c.tq, c.cfg.EmbedDim)
	if c.cross {
		k = randTensor(rng, c.b, c.tk, c.cfg.kdim())
		v = randTensor(rng, c.b, c.tk, c.cfg.vdim())
		if c.kvSame {
			v = k
		}
	}
	return l, q, k, v, c.options(rng)
}

// TestTiledMatchesDense checks the tiled path (no weights) against the dense one (weights
// requested) and both against the float64 reference, on shapes that span several query blocks
// and key tiles, with every mask kind.
func TestTiledMatchesDense(t *testing.T) {
	for i, c := range maskCases() {
		t.Run(c.name, func(t *testing.T) {
			l, q, k, v, opt := c.inputs(t, i)
			tiled := forward(t, l, q, k, v, &opt)
			opt.NeedWeights = true
			dense := forward(t, l, q, k, v, &opt)
			tr, err := l.Reference(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			ref := make([]float64, len(dense.Output.Data))
			for j, x := range dense.Output.Data {
				ref[j] = float64(x)
			}
			if e := tensor.RelError(tiled.Output.Data, ref); e > 1e-5 {
				t.Errorf("tiled differs from dense by %.3g relative, want ≤ 1e-5", e)
			}
			if e := tensor.RelError(tiled.Output.Data, tr.Output); e > 1e-5 {
				t.Errorf("tiled differs from the float64 reference by %.3g relative", e)
			}
			if e := tensor.RelError(dense.Output.Data, tr.Output); e > 1e-5 {
				t.Errorf("dense differs from the float64 reference by %.3g relative", e)
			}
			if tiled.FullyMasked != dense.FullyMasked || dense.FullyMasked != tr.FullyMasked {
				t.Errorf("fully masked rows: tiled %d, dense %d, reference %d", tiled.FullyMasked, dense.FullyMasked, tr.FullyMasked)
			}
			if c.pad && !c.cfg.AddBiasKV && tiled.FullyMasked < c.tq*c.cfg.NumHeads {
				t.Errorf("batch 0 pads every key, yet only %d rows were fully masked", tiled.FullyMasked)
			}
		})
	}
}

// TestWorkersDoNotChangeResults runs the same call on 1, 2, 3 and 5 workers and expects the same
// bits.
func TestWorkersDoNotChangeResults(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 32, NumHeads: 4, Seed: 3})
	q := randTensor(tensor.NewRNG(4), 2, 200, 32)
	want := map[bool]*Result{} // by NeedWeights: the dense and tiled paths sum in different orders
	for _, workers := range []int{1, 2, 3, 5} {
		for _, weights := range []bool{false, true} {
			r := forward(t, l, q, nil, nil, &Options{Workers: workers, NeedWeights: weights, Causal: true})
			if want[weights] == nil {
				want[weights] = r
				continue
			}
			w := want[weights]
			for i := range w.Output.Data {
				if r.Output.Data[i] != w.Output.Data[i] {
					t.Fatalf("workers %d, weights %v: output[%d] = %v, want %v bit for bit", workers, weights, i, r.Output.Data[i], w.Output.Data[i])
				}
			}
			if !weights {
				continue
			}
			for i := range w.Weights.Data {
				if r.Weights.Data[i] != w.Weights.Data[i] {
					t.Fatalf("workers %d: weights[%d] = %v, want %v bit for bit", workers, i, r.Weights.Data[i], w.Weights.Data[i])
				}
			}
		}
	}
}

// TestForwardIntoAllocatesNothing proves the steady state makes no heap allocation, with and
// without weights.
func TestForwardIntoAllocatesNothing(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 32, NumHeads: 4, Seed: 3, AddBiasKV: true, Dropout: 0.1})
	rng := tensor.NewRNG(4)
	q := randTensor(rng, 2, 70, 32)
	k, v := randTensor(rng, 2, 70, 32), randTensor(rng, 2, 70, 32)
	pad := tensor.NewBool(2, 70)
	pad.Data[3] = true
	for _, opt := range []*Options{
		{},
		{Causal: true, KeyPaddingMask: pad},
		{NeedWeights: true},
		{NeedWeights: true, PerHeadWeights: true},
		{Training: true, DropoutSeed: 3},
		{Compute: ComputeBFloat16},
		{Compute: ComputeBFloat16, Causal: true, KeyPaddingMask: pad, NeedWeights: true},
		{Compute: ComputeBFloat16, Training: true, DropoutSeed: 3, Heads: HeadOptions{Keep: true}},
	} {
		for _, cross := range []bool{false, true} {
			t.Run(fmt.Sprintf("%+v cross=%v", *opt, cross), func(t *testing.T) {
				kk, vv := k, v
				if !cross {
					kk, vv = nil, nil
				}
				var r Result
				call := func() {
					if err := l.ForwardInto(&r, q, kk, vv, opt); err != nil {
						t.Fatal(err)
					}
				}
				if n := steadyAllocs(call); n != 0 {
					t.Errorf("ForwardInto allocates %v times per call, want 0", n)
				}
			})
		}
	}
}
