package mha

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// roundBF16 returns a copy of t with every value rounded to bfloat16 as the bf16 path rounds
// its operands.
func roundBF16(t *tensor.Tensor) *tensor.Tensor {
	out := &tensor.Tensor{Shape: t.Shape, Data: make([]float32, len(t.Data))}
	for i, x := range t.Data {
		out.Data[i] = kernel.BF16ToF32(kernel.RoundBF16(x))
	}
	return out
}

// relErr returns ‖got − want‖/‖want‖ (Frobenius).
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	return math.Sqrt(num / den)
}

// bf16Cases are SDPA options the bf16 path must compute as the float32 path does, on Q, K, V
// of propertyCase's shapes (GQA 4:2, Tq 67, Tk 261).
func bf16Cases() []struct {
	name string
	opt  SDPAOptions
} {
	pad := tensor.NewBool(2, 261)
	for j := 0; j < 261; j += 7 {
		pad.Data[j] = true
	}
	bias := sdpaRand(21, 1, 67, 261)
	return []struct {
		name string
		opt  SDPAOptions
	}{
		{"plain", SDPAOptions{}},
		{"causal", SDPAOptions{Causal: CausalBottomRight}},
		{"causal top-left", SDPAOptions{Causal: CausalTopLeft}},
		{"window", SDPAOptions{Window: &Window{40, 5}}},
		{"alibi softcap sinks", SDPAOptions{ALiBi: true, Softcap: 5, Sinks: []float32{0.5, -1, 2, 0}}},
		{"padding bias", SDPAOptions{KeyPaddingMask: pad, AttnBias: bias, Scale: 0.3}},
		{"sparse", SDPAOptions{Patterns: []Pattern{{Kind: PatternBigBird, Width: 8, Globals: 1, Random: 3, Seed: 5}}, Block: [2]int{16, 16}}},
		{"sparsemax", SDPAOptions{Normalizer: &Normalizer{Kind: Sparsemax}, Causal: CausalBottomRight}},
		{"dropout", SDPAOptions{Dropout: 0.2, DropoutSeed: 9}},
		{"rotary", SDPAOptions{Causal: CausalBottomRight, Rotary: &Rotary{Theta: 10000, Offset: 3}}},
	}
}

// TestBF16SDPARounded checks SDPA in bfloat16 against the float64 reference of the same
// operands rounded to bfloat16. The scores are then exact but for float32 summation, so the
// weights (NeedWeights) agree to 10⁻⁵; the output differs also by the rounding of the weights
// to bfloat16 for the product with V, a relative error of at most 2⁻⁹ per term, so that
// |out − ref| ≤ 2⁻⁸·Σ_j w_j·|v_j| + 10⁻⁵ bounds it. With rotary the operands are rounded after
// the rotation, which the reference cannot reproduce: that case is checked against the float32
// path within 2·10⁻² relative. It also checks that the worker count changes no bit.
func TestBF16SDPARounded(t *testing.T) {
	q, k, v, _ := propertyCase(NotCausal)
	qr, kr, vr := roundBF16(q), roundBF16(k), roundBF16(v)
	for _, c := range bf16Cases() {
		t.Run(c.name, func(t *testing.T) {
			opt := c.opt
			opt.Compute, opt.NeedWeights, opt.Workers = ComputeBFloat16, c.opt.Normalizer == nil, 3
			got, err := SDPA(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			opt.Workers = 1
			one, err := SDPA(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(got.Out.Data, one.Out.Data) {
				t.Errorf("workers 3 and 1 give other bits")
			}
			if c.opt.Rotary != nil {
				f := c.opt
				want, err := SDPA(q, k, v, &f)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(got.Out.Data, f64(want.Out.Data)); e > 2e-2 {
					t.Errorf("relative error against float32 %.3g, want ≤ 2e-2", e)
				}
				return
			}
			ref, err := SDPAReference(qr, kr, vr, &opt)
			if err != nil {
				t.Fatal(err)
			}
			worst := checkBF16Out(t, got, ref, vr.Data)
			t.Logf("largest |out − ref| / Σ w|v|: %.3g (bound 2⁻⁸ = %.3g)", worst, 1.0/256)
		})
	}
}

// checkBF16Out checks a result of SDPA in bfloat16 against ref, the float64 reference of the same
// operands rounded to bfloat16 (vr: V's rounded values), as TestBF16SDPARounded explains: the
// weights, when r has them, within 10⁻⁵, and each output |out − ref| ≤ 2⁻⁸·Σ_j w_j·|v_j| + 10⁻⁵
// with w the reference's weights. It returns the largest |out − ref| / Σ_j w_j·|v_j|.
func checkBF16Out(t *testing.T, r *SDPAResult, ref *SDPATrace, vr []float32) (worst float64) {
	t.Helper()
	if r.Weights != nil {
		for i, w := range ref.Weights {
			if d := math.Abs(float64(r.Weights.Data[i]) - w); d > 1e-5 {
				t.Fatalf("weight %d: %v, reference %v", i, r.Weights.Data[i], w)
			}
		}
	}
	got := r.Out.Data
	hq, hkv, tq, tk, dv := ref.Hq, ref.Hkv, ref.Tq, ref.Tk, ref.Dv
	for bh := range ref.B * hq {
		kv := bh/hq*hkv + bh%hq/(hq/hkv)
		for i := range tq {
			w := ref.Weights[(bh*tq+i)*tk:][:tk]
			for c := range dv {
				var bound float64
				for j, p := range w {
					bound += math.Abs(p * float64(vr[(kv*tk+j)*dv+c]))
				}
				o := (bh*tq+i)*dv + c
				d := math.Abs(float64(got[o]) - ref.Out[o])
				worst = max(worst, d/(bound+1e-30))
				if d > bound/256+1e-5 {
					t.Fatalf("out[%d]: %v, reference %v, bound %.3g", o, got[o], ref.Out[o], bound/256+1e-5)
				}
			}
		}
	}
	return worst
}

// caseValues is value stream seed of testdata/gen_bf16_accuracy.py: n values uniform in
// (−bound, bound) from splitmix64, computed as the script computes them.
func caseValues(seed uint64, n int, bound float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		z := seed + uint64(i+1)*0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		u := (float64(z>>40) + 0.5) / 16777216
		out[i] = float32((2*u - 1) * bound)
	}
	return out
}

// accuracyCase is one case of testdata/bf16/accuracy.json.
type accuracyCase struct {
	Causal    bool    `json:"causal"`
	TorchF32  float64 `json:"torch_float32_rel_err"`
	TorchBF16 float64 `json:"torch_bfloat16_rel_err"`
	RefSum    float64 `json:"ref_sum"`
	RefSumSq  float64 `json:"ref_sumsq"`
}

// TestBF16LayerAccuracy measures the layer's error in bfloat16 against its float64 Reference at
// E = 768, H = 12, T = 256 (self-attention, plain and causal) and checks that it is no worse
// than PyTorch's own bfloat16 on the same case (testdata/gen_bf16_accuracy.py measured that,
// and the float64 outputs' sums, which must agree, say it was the same case).
func TestBF16LayerAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("E = 768, T = 256 float64 reference")
	}
	raw, err := os.ReadFile("testdata/bf16/accuracy.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases map[string]*accuracyCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	const e, h, tt = 768, 12, 256
	l, err := New(Config{EmbedDim: e, NumHeads: h})
	if err != nil {
		t.Fatal(err)
	}
	sd := map[string]*tensor.Tensor{
		"in_proj_weight":  {Shape: []int{3 * e, e}, Data: caseValues(2, 3*e*e, math.Sqrt(6.0/(e+3*e)))},
		"in_proj_bias":    {Shape: []int{3 * e}, Data: caseValues(3, 3*e, 0.1)},
		"out_proj.weight": {Shape: []int{e, e}, Data: caseValues(4, e*e, 1/math.Sqrt(e))},
		"out_proj.bias":   {Shape: []int{e}, Data: caseValues(5, e, 0.1)},
	}
	if err := l.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	x := &tensor.Tensor{Shape: []int{1, tt, e}, Data: caseValues(1, tt*e, math.Sqrt(3))}
	for _, name := range []string{"plain", "causal"} {
		c := doc.Cases[name]
		if c == nil {
			t.Fatalf("accuracy.json has no case %q", name)
		}
		opt := Options{Causal: c.Causal}
		ref, err := l.Reference(x, nil, nil, &opt)
		if err != nil {
			t.Fatal(err)
		}
		var sum, sq float64
		for _, y := range ref.Output {
			sum, sq = sum+y, sq+y*y
		}
		if math.Abs(sum-c.RefSum) > 1e-6*math.Sqrt(c.RefSumSq) || math.Abs(sq-c.RefSumSq) > 1e-9*c.RefSumSq {
			t.Fatalf("%s: the float64 output's sum and sum of squares are %v, %v; PyTorch's %v, %v: not the same case", name, sum, sq, c.RefSum, c.RefSumSq)
		}
		errs := map[Compute]float64{}
		for _, ct := range []Compute{ComputeFloat32, ComputeBFloat16} {
			opt.Compute = ct
			r, err := l.Forward(x, nil, nil, &opt)
			if err != nil {
				t.Fatal(err)
			}
			errs[ct] = relErr(r.Output.Data, ref.Output)
		}
		t.Logf("%s: relative error vs float64: mha float32 %.3g, mha bfloat16 %.3g; PyTorch float32 %.3g, bfloat16 %.3g",
			name, errs[ComputeFloat32], errs[ComputeBFloat16], c.TorchF32, c.TorchBF16)
		if errs[ComputeBFloat16] > c.TorchBF16 {
			t.Errorf("%s: mha bfloat16 error %.3g is worse than PyTorch bfloat16's %.3g", name, errs[ComputeBFloat16], c.TorchBF16)
		}
		if errs[ComputeFloat32] > 10*c.TorchF32+1e-6 {
			t.Errorf("%s: mha float32 error %.3g, PyTorch's %.3g", name, errs[ComputeFloat32], c.TorchF32)
		}
	}
}

// TestBF16LayerOptions runs the layer in bfloat16 with the options of its other paths (masks,
// windows, ALiBi, soft cap, rotary, GQA, heads of different sizes, sparse patterns, a
// normalizer, dropout, weights, head gates, cross-attention, appended keys) and checks each
// against the same call in float32, within 2·10⁻² relative, and that the worker count changes
// no bit.
func TestBF16LayerOptions(t *testing.T) {
	rng := tensor.NewRNG(5)
	pad := tensor.NewBool(2, 70)
	pad.Data[3], pad.Data[75] = true, true
	gate := randTensor(rng, 2, 4)
	for _, c := range []struct {
		name string
		cfg  Config
		opt  Options
		tk   int
	}{
		{"plain", Config{EmbedDim: 64, NumHeads: 4}, Options{}, 0},
		{"causal pad", Config{EmbedDim: 64, NumHeads: 4}, Options{Causal: true, KeyPaddingMask: pad}, 0},
		{"window alibi softcap", Config{EmbedDim: 64, NumHeads: 4}, Options{Window: &Window{20, 3}, ALiBi: true, Softcap: 8}, 0},
		{"rotary gqa", Config{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 10000}}, Options{Causal: true}, 0},
		{"qk-norm gqa", Config{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, QKNorm: &QKNorm{Eps: 1e-6}}, Options{Causal: true}, 0},
		{"qk-norm across gqa rotary", Config{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 10000}, QKNorm: &QKNorm{Eps: 1e-6, Across: true}}, Options{Causal: true}, 0},
		{"qk-norm rotary cross", Config{EmbedDim: 64, NumHeads: 4, Rotary: &Rotary{Theta: 10000}, QKNorm: &QKNorm{Eps: 1e-6}}, Options{}, 50},
		{"wide heads gqa", Config{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, HeadSize: 32, Rotary: &Rotary{Theta: 10000}}, Options{Causal: true}, 0},
		{"narrow heads cross", Config{EmbedDim: 64, NumHeads: 4, HeadSize: 8}, Options{}, 50},
		{"head dims", Config{EmbedDim: 64, NumHeads: 3, HeadDims: []int{16, 32, 16}}, Options{}, 0},
		{"sparse", Config{EmbedDim: 64, NumHeads: 4}, Options{Patterns: []Pattern{{Kind: PatternLocal, Width: 9}}, Block: [2]int{16, 16}}, 0},
		{"entmax", Config{EmbedDim: 64, NumHeads: 4}, Options{Normalizer: &Normalizer{Kind: Entmax, Alpha: 1.5}}, 0},
		{"dropout weights", Config{EmbedDim: 64, NumHeads: 4, Dropout: 0.1}, Options{Training: true, DropoutSeed: 4, NeedWeights: true, PerHeadWeights: true}, 0},
		{"gate keep", Config{EmbedDim: 64, NumHeads: 4}, Options{Heads: HeadOptions{Gate: gate, Keep: true}}, 0},
		{"self bias_kv zero_attn", Config{EmbedDim: 64, NumHeads: 4, AddBiasKV: true, AddZeroAttn: true}, Options{Causal: true}, 0},
		{"cross bias_kv zero_attn", Config{EmbedDim: 64, NumHeads: 4, AddBiasKV: true, AddZeroAttn: true}, Options{}, 90},
		{"cross kdim", Config{EmbedDim: 64, NumHeads: 4, KDim: 24, VDim: 40}, Options{NeedWeights: true}, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Seed = 7
			l := newLayer(t, c.cfg)
			x := randTensor(rng, 2, 70, 64)
			var k, v *tensor.Tensor
			if c.tk > 0 {
				k, v = randTensor(rng, 2, c.tk, orDefault(c.cfg.KDim, 64)), randTensor(rng, 2, c.tk, orDefault(c.cfg.VDim, 64))
			}
			opt := c.opt
			want, err := l.Forward(x, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			opt.Compute, opt.Workers = ComputeBFloat16, 3
			got, err := l.Forward(x, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			opt.Workers = 1
			one, err := l.Forward(x, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(got.Output.Data, one.Output.Data) {
				t.Errorf("workers 3 and 1 give other bits")
			}
			e := relErr(got.Output.Data, f64(want.Output.Data))
			t.Logf("relative error against float32: %.3g", e)
			if e > 2e-2 {
				t.Errorf("relative error against float32 %.3g, want ≤ 2e-2", e)
			}
			if want.Weights != nil {
				if e := relErr(got.Weights.Data, f64(want.Weights.Data)); e > 2e-2 {
					t.Errorf("weights: relative error %.3g", e)
				}
			}
			if want.Heads != nil {
				if e := relErr(got.Heads.Data, f64(want.Heads.Data)); e > 2e-2 {
					t.Errorf("heads: relative error %.3g", e)
				}
			}
			if got.FullyMasked != want.FullyMasked {
				t.Errorf("FullyMasked %d, float32 %d", got.FullyMasked, want.FullyMasked)
			}
		})
	}
}

// TestBF16Half checks the bfloat16 path with weights held in half precision (bfloat16 and
// binary16) against float32 on the same weights.
func TestBF16Half(t *testing.T) {
	for _, format := range []tensor.HalfFormat{tensor.BFloat16, tensor.Float16} {
		t.Run(fmt.Sprint(format), func(t *testing.T) {
			l := newLayer(t, Config{EmbedDim: 64, NumHeads: 4, Seed: 2})
			sd := map[string]*tensor.Half{}
			for name, p := range l.StateDict() {
				bits := make([]uint16, len(p.Data))
				if format == tensor.BFloat16 {
					kernel.EncodeBF16(bits, p.Data)
				} else {
					kernel.EncodeF16(bits, p.Data)
				}
				h, err := tensor.HalfFromData(bits, format, p.Shape...)
				if err != nil {
					t.Fatal(err)
				}
				sd[name] = h
			}
			if err := l.LoadHalfStateDict(sd); err != nil {
				t.Fatal(err)
			}
			x := randTensor(tensor.NewRNG(3), 2, 50, 64)
			want, err := l.Forward(x, nil, nil, &Options{Causal: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.Forward(x, nil, nil, &Options{Causal: true, Compute: ComputeBFloat16})
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(got.Output.Data, f64(want.Output.Data)); e > 2e-2 {
				t.Errorf("relative error against float32 %.3g", e)
			}
		})
	}
}

// TestBF16Cache checks ForwardCache in bfloat16 (projections in bfloat16, the cached attention
// in float32 but for a prompt into an empty cache): a prefill and three steps against Forward in
// bfloat16, within 2·10⁻²; a longer prompt against Forward bit for bit.
func TestBF16Cache(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 10000}, Seed: 4})
	x := randTensor(tensor.NewRNG(8), 1, 20, 64)
	opt := Options{Causal: true, Compute: ComputeBFloat16}
	want, err := l.Forward(x, nil, nil, &opt)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := l.NewKVCache(1, 20, CacheBFloat16)
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	for _, span := range [][2]int{{0, 17}, {17, 18}, {18, 19}, {19, 20}} {
		part := &tensor.Tensor{Shape: []int{1, span[1] - span[0], 64}, Data: x.Data[span[0]*64 : span[1]*64]}
		y, err := l.ForwardCache(kv, part, &opt)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, y.Data...)
	}
	if e := relErr(got, f64(want.Output.Data)); e > 2e-2 {
		t.Errorf("relative error against Forward %.3g", e)
	}

	// A prompt into an empty cache computes its attention as Forward does, in bfloat16 too:
	// the same bits (a float32 cache holds the keys and values as they are).
	long := randTensor(tensor.NewRNG(9), 1, 100, 64)
	for _, ct := range []Compute{ComputeFloat32, ComputeBFloat16} {
		o := Options{Causal: true, Compute: ct}
		want, err := l.Forward(long, nil, nil, &o)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := l.NewKVCache(1, 100, CacheFloat32)
		if err != nil {
			t.Fatal(err)
		}
		y, err := l.ForwardCache(kv, long, &o)
		if err != nil {
			t.Fatal(err)
		}
		if !bitsEqual(y.Data, want.Output.Data) {
			t.Errorf("%v: a prompt of 100 tokens differs from Forward's (relative error %.3g)", ct, relErr(y.Data, f64(want.Output.Data)))
		}
	}

	// AttendCache's other calls compute in float32 whatever Compute says.
	q, k, v := sdpaRand(1, 1, 1, 4, 3, 16), sdpaRand(2, 1, 1, 2, 3, 16), sdpaRand(3, 1, 1, 2, 3, 16)
	var outs [2][]float32
	for i, ct := range []Compute{ComputeFloat32, ComputeBFloat16} {
		kv, err := NewKVCache(1, 2, 16, 16, 8, CacheFloat32)
		if err != nil {
			t.Fatal(err)
		}
		var r SDPAResult
		if err := new(SDPAContext).AttendCache(&r, kv, q, k, v, &SDPAOptions{Causal: CausalBottomRight, Compute: ct}); err != nil {
			t.Fatal(err)
		}
		outs[i] = r.Out.Data
	}
	if !bitsEqual(outs[0], outs[1]) {
		t.Error("AttendCache with ComputeBFloat16 differs from float32")
	}
}

// TestBF16Errors checks the combinations that bfloat16 refuses and an unknown Compute.
func TestBF16Errors(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 16, NumHeads: 2, Seed: 1})
	x := randTensor(tensor.NewRNG(1), 1, 5, 16)
	var r Result
	var s Saved
	if err := l.ForwardTrain(&r, &s, x, nil, nil, &Options{Compute: ComputeBFloat16}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ForwardTrain in bfloat16: %v, want ErrUnsupported", err)
	}
	if _, err := l.Forward(x, nil, nil, &Options{Compute: 7}); !errors.Is(err, ErrShape) {
		t.Errorf("Compute 7: %v, want ErrShape", err)
	}
	q, k, v := sdpaRand(1, 1, 1, 2, 4, 8), sdpaRand(2, 1, 1, 2, 4, 8), sdpaRand(3, 1, 1, 2, 4, 8)
	opt := SDPAOptions{Compute: ComputeBFloat16}
	res, err := SDPA(q, k, v, &opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SDPABackward(q, k, v, res, res.Out, &opt); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SDPABackward in bfloat16: %v, want ErrUnsupported", err)
	}
	if _, err := SDPA(q, k, v, &SDPAOptions{Compute: -1}); !errors.Is(err, ErrShape) {
		t.Errorf("Compute −1: %v, want ErrShape", err)
	}
	for _, s := range []string{"float32", "bfloat16", "bf16"} {
		c, err := ParseCompute(s)
		if err != nil || (c.String() != s && s != "bf16") {
			t.Errorf("ParseCompute(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := ParseCompute("fp8"); err == nil {
		t.Error("ParseCompute(fp8) gave no error")
	}
}

// TestBF16Allocs checks that ForwardInto and SDPAInto in bfloat16 make no heap allocation in
// steady state.
func TestBF16Allocs(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 32, NumHeads: 4, Seed: 3, Rotary: &Rotary{Theta: 10000}})
	rng := tensor.NewRNG(4)
	x := randTensor(rng, 2, 70, 32)
	for _, opt := range []*Options{
		{Compute: ComputeBFloat16},
		{Compute: ComputeBFloat16, Causal: true, NeedWeights: true},
	} {
		var r Result
		call := func() {
			if err := l.ForwardInto(&r, x, nil, nil, opt); err != nil {
				t.Fatal(err)
			}
		}
		if n := steadyAllocs(call); n != 0 {
			t.Errorf("ForwardInto %+v: %v allocations per call, want 0", *opt, n)
		}
	}
	q, k, v, opt := propertyCase(CausalBottomRight)
	opt.Compute, opt.Workers = ComputeBFloat16, 3
	opt.Rotary = &Rotary{Theta: 10000}
	c := new(SDPAContext)
	for _, weights := range []bool{false, true} {
		opt.NeedWeights = weights
		var r SDPAResult
		call := func() {
			if err := c.SDPAInto(&r, q, k, v, &opt); err != nil {
				t.Fatal(err)
			}
		}
		if n := steadyAllocs(call); n != 0 {
			t.Errorf("SDPAInto weights %v: %v allocations per call, want 0", weights, n)
		}
	}
}

// The bfloat16 path is tested on every CPU: where AVX512_BF16 is missing it runs on the pure-Go
// kernels, which give the same bits.
func init() { emulateBF16 = true }

// TestBF16HeadsAsBits checks that the heads written as bfloat16 bits for the output projection
// (the bfloat16 forward without Heads.Keep) give the bits of the heads written in float32 and
// rounded by the projection (with Heads.Keep), with rotary or not, self- or cross-attention.
func TestBF16HeadsAsBits(t *testing.T) {
	for _, cfg := range []Config{
		{EmbedDim: 64, NumHeads: 4, Seed: 1},
		{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, Rotary: &Rotary{Theta: 10000}, Seed: 2},
		{EmbedDim: 64, NumHeads: 4, NumKVHeads: 2, QKNorm: &QKNorm{Eps: 1e-6}, Seed: 4},
		{EmbedDim: 62, NumHeads: 2, Seed: 3}, // an odd head size and E: the bits are packed, not read in place
	} {
		l := newLayer(t, cfg)
		rng := tensor.NewRNG(6)
		x, kv := randTensor(rng, 2, 40, cfg.EmbedDim), randTensor(rng, 2, 30, cfg.EmbedDim)
		for _, k := range []*tensor.Tensor{nil, kv} {
			opt := Options{Compute: ComputeBFloat16, Causal: k == nil}
			bits, err := l.Forward(x, k, k, &opt)
			if err != nil {
				t.Fatal(err)
			}
			opt.Heads.Keep = true
			kept, err := l.Forward(x, k, k, &opt)
			if err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(bits.Output.Data, kept.Output.Data) {
				t.Errorf("%+v cross %v: the output differs with Heads.Keep", cfg, k != nil)
			}
		}
	}
}

// TestBF16SDPAShapes runs SDPA in bfloat16 on empty and odd sizes (an odd D and Dv, whose pairs
// are padded, Tq and Tk of 0 and 1) against float32 SDPA.
func TestBF16SDPAShapes(t *testing.T) {
	for _, s := range [][6]int{{1, 2, 5, 7, 5, 3}, {2, 3, 1, 1, 1, 1}, {1, 2, 0, 4, 4, 4}, {1, 2, 3, 0, 4, 4}, {0, 2, 3, 3, 4, 4}, {1, 1, 130, 300, 64, 64}} {
		b, h, tq, tk, d, dv := s[0], s[1], s[2], s[3], s[4], s[5]
		q, k, v := sdpaRand(1, 1, b, h, tq, d), sdpaRand(2, 1, b, h, tk, d), sdpaRand(3, 1, b, h, tk, dv)
		for _, causal := range []CausalMode{NotCausal, CausalBottomRight} {
			want, err := SDPA(q, k, v, &SDPAOptions{Causal: causal, NeedLSE: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := SDPA(q, k, v, &SDPAOptions{Causal: causal, NeedLSE: true, Compute: ComputeBFloat16})
			if err != nil {
				t.Fatal(err)
			}
			if got.FullyMasked != want.FullyMasked || len(got.Out.Data) != len(want.Out.Data) {
				t.Fatalf("%v causal %v: fully masked %d, %d values; float32 %d, %d", s, causal, got.FullyMasked, len(got.Out.Data), want.FullyMasked, len(want.Out.Data))
			}
			if len(want.Out.Data) > 0 && want.FullyMasked < b*h*tq {
				if e := relErr(got.Out.Data, f64(want.Out.Data)); e > 2e-2 {
					t.Errorf("%v causal %v: relative error against float32 %.3g", s, causal, e)
				}
			}
		}
	}
}
