package mha

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// sdpaGolden is one file written by testdata/gen_sdpa.py.
type sdpaGolden struct {
	name    string
	q, k, v *tensor.Tensor
	opt     SDPAOptions
	out     []float64
	lse     []float64
	weights []float64 // nil for the long cases

	gradOut         *tensor.Tensor
	gq, gk, gv      []float64 // autograd's gradients of sum(out·gradOut)
	gSinks, gSlopes []float64 // nil without sinks or ALiBi
}

func loadSDPAGolden(t *testing.T, path string) *sdpaGolden {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := &sdpaGolden{name: strings.TrimSuffix(filepath.Base(path), ".safetensors")}
	f32, f64 := goldenReaders(t, f)
	g.q, g.k, g.v = f32("q"), f32("k"), f32("v")
	g.out, g.lse = f64("out"), f64("lse")
	if f.Has("weights") {
		g.weights = f64("weights")
	}
	g.gradOut = f32("grad_out")
	g.gq, g.gk, g.gv = f64("grad.q"), f64("grad.k"), f64("grad.v")
	if f.Has("grad.sinks") {
		g.gSinks = f64("grad.sinks")
	}
	if f.Has("grad.slopes") {
		g.gSlopes = f64("grad.slopes")
	}
	o := &g.opt
	switch f.Metadata["causal"] {
	case "top_left":
		o.Causal = CausalTopLeft
	case "bottom_right":
		o.Causal = CausalBottomRight
	}
	if w := f.Metadata["window"]; w != "none" {
		lr := strings.Split(w, ",")
		l, err1 := strconv.Atoi(lr[0])
		r, err2 := strconv.Atoi(lr[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("window %q", w)
		}
		o.Window = &Window{l, r}
	}
	var err1, err2 error
	o.Softcap, err1 = strconv.ParseFloat(f.Metadata["softcap"], 64)
	o.Scale, err2 = strconv.ParseFloat(f.Metadata["scale"], 64)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	o.ALiBi = f.Metadata["alibi"] != "none"
	if f.Has("slopes") {
		o.Slopes = f64("slopes")
	}
	if f.Has("sinks") {
		o.Sinks = f32("sinks").Data
	}
	if f.Has("key_padding_mask") {
		if o.KeyPaddingMask, err = f.Bool("key_padding_mask"); err != nil {
			t.Fatal(err)
		}
	}
	if f.Has("attn_mask") {
		if o.AttnMask, err = f.Bool("attn_mask"); err != nil {
			t.Fatal(err)
		}
	}
	if f.Has("attn_bias") {
		o.AttnBias = f32("attn_bias")
	}
	if r := f.Metadata["rope"]; r != "none" {
		o.Rotary = parseRotary(t, r, f.Metadata["rope_scaling"])
	}
	return g
}

// parseRotary reads the rotary options that testdata/gen_sdpa.py writes: "θ,dim,layout,offset"
// and "factor,low,high,original" or "none".
func parseRotary(t *testing.T, rope, scaling string) *Rotary {
	t.Helper()
	f := strings.Split(rope, ",")
	if len(f) != 4 {
		t.Fatalf("rope %q", rope)
	}
	r := new(Rotary)
	var err [3]error
	r.Theta, err[0] = strconv.ParseFloat(f[0], 64)
	r.Dim, err[1] = strconv.Atoi(f[1])
	r.Offset, err[2] = strconv.Atoi(f[3])
	if errors.Join(err[:]...) != nil {
		t.Fatalf("rope %q: %v", rope, errors.Join(err[:]...))
	}
	if f[2] == "interleaved" {
		r.Layout = RopeInterleaved
	}
	if strings.HasPrefix(scaling, "yarn,") {
		r.Scaling = parseYaRN(t, scaling)
	} else if scaling != "none" {
		s := strings.Split(scaling, ",")
		if len(s) != 4 {
			t.Fatalf("rope scaling %q", scaling)
		}
		r.Scaling = new(RopeScaling)
		var err [4]error
		r.Scaling.Factor, err[0] = strconv.ParseFloat(s[0], 64)
		r.Scaling.LowFreqFactor, err[1] = strconv.ParseFloat(s[1], 64)
		r.Scaling.HighFreqFactor, err[2] = strconv.ParseFloat(s[2], 64)
		r.Scaling.OriginalMaxPositions, err[3] = strconv.Atoi(s[3])
		if errors.Join(err[:]...) != nil {
			t.Fatalf("rope scaling %q: %v", scaling, errors.Join(err[:]...))
		}
	}
	return r
}

// parseYaRN parses gen_sdpa.py's YaRN scaling "yarn,factor,original,beta_fast,beta_slow,
// truncate,attention_factor".
func parseYaRN(t *testing.T, scaling string) *RopeScaling {
	t.Helper()
	s := strings.Split(scaling, ",")
	if len(s) != 7 {
		t.Fatalf("rope scaling %q: want 7 fields", scaling)
	}
	sc := &RopeScaling{Type: RopeYaRN, UnroundedRamp: s[5] == "False"}
	var err [5]error
	sc.Factor, err[0] = strconv.ParseFloat(s[1], 64)
	sc.OriginalMaxPositions, err[1] = strconv.Atoi(s[2])
	sc.BetaFast, err[2] = strconv.ParseFloat(s[3], 64)
	sc.BetaSlow, err[3] = strconv.ParseFloat(s[4], 64)
	sc.AttentionFactor, err[4] = strconv.ParseFloat(s[6], 64)
	if errors.Join(err[:]...) != nil {
		t.Fatalf("rope scaling %q: %v", scaling, errors.Join(err[:]...))
	}
	return sc
}

func sdpaGoldens(t *testing.T) []*sdpaGolden {
	t.Helper()
	paths, err := filepath.Glob("testdata/sdpa/*.safetensors")
	if err != nil || len(paths) < 10 {
		t.Fatalf("golden files: %v, %v", paths, err)
	}
	var gs []*sdpaGolden
	for _, p := range paths {
		gs = append(gs, loadSDPAGolden(t, p))
	}
	return gs
}

// checkLSE compares log-sum-exps: the same infinities, and finite values within tol of the
// reference, relative to the values or 1, whichever is larger: √(Σ (got − want)² / Σ max(1,
// want²)). An lse near 0 is a cancelling sum m + ln l (row maximum and log of the sum), whose
// float32 error scales with |m| + ln Tk, not with it: FuzzAttendCache met lse = 1.18e-4 off by
// 4.3e-8 (3.7e-4 relative to itself).
func checkLSE[F float32 | float64](t *testing.T, what string, got []F, want []float64, tol float64) {
	t.Helper()
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsInf(w, 0) || math.IsInf(g, 0) || math.IsNaN(g) {
			if g != w {
				t.Errorf("%s: lse[%d] = %v, want %v", what, i, g, w)
			}
			continue
		}
		num += (g - w) * (g - w)
		den += max(1, w*w)
	}
	if den > 0 {
		if e := math.Sqrt(num / den); e > tol {
			t.Errorf("%s: lse error %.3g > %.3g (relative to max(1, |lse|))", what, e, tol)
		}
	}
}

func checkRel[F float32 | float64](t *testing.T, what string, got []F, want []float64, tol float64) {
	t.Helper()
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			t.Fatalf("%s: value %d is %v", what, i, g)
		}
	}
	if e := tensor.RelError(got, want); e > tol {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// checkOut checks SDPA's output got against the float64 reference want, within 1e-4 of the larger
// of ‖want‖ and 0.1·√len·max|v|: an output that is a weighted sum of tk values (v) with
// cancelling signs can be far smaller than its terms, and float32 sums of tk terms are exact to
// about tk·2⁻²⁴ of the largest, so a relative error of the output alone is ill-conditioned there.
func checkOut(t *testing.T, got []float32, want []float64, v []float32, tk int) {
	t.Helper()
	var vmax, diff, norm float64
	for _, x := range v {
		vmax = max(vmax, math.Abs(float64(x)))
	}
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			t.Fatalf("out: value %d is %v", i, g)
		}
		diff += (float64(g) - want[i]) * (float64(g) - want[i])
		norm += want[i] * want[i]
	}
	scale := max(math.Sqrt(norm), 0.1*math.Sqrt(float64(len(got)))*vmax)
	if e := math.Sqrt(diff) / scale; scale > 0 && e > 1e-4 {
		t.Errorf("out: error %.3g of max(‖out‖, 0.1·√n·max|v|) > 1e-4 (%d keys)", e, tk)
	}
}

// TestSDPAGolden checks SDPA (float32, tiled) within 1e-5 and SDPAReference (float64) within
// 1e-12 of the PyTorch float64 goldens of testdata/gen_sdpa.py.
func TestSDPAGolden(t *testing.T) {
	for _, g := range sdpaGoldens(t) {
		t.Run(g.name, func(t *testing.T) {
			opt := g.opt
			opt.NeedLSE, opt.NeedWeights, opt.Workers = true, g.weights != nil, 3
			r, err := SDPA(g.q, g.k, g.v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "float32 out", r.Out.Data, g.out, 1e-5)
			checkLSE(t, "float32", r.LSE.Data, g.lse, 1e-5)
			ref, err := SDPAReference(g.q, g.k, g.v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "float64 out", ref.Out, g.out, 1e-12)
			checkLSE(t, "float64", ref.LSE, g.lse, 1e-12)
			if g.weights != nil {
				checkRel(t, "float32 weights", r.Weights.Data, g.weights, 1e-5)
				checkRel(t, "float64 weights", ref.Weights, g.weights, 1e-12)
			}
			if r.FullyMasked != ref.FullyMasked {
				t.Errorf("fully masked rows: %d, reference %d", r.FullyMasked, ref.FullyMasked)
			}
			if want := []int{ref.B, ref.Hq, ref.Tq, ref.Dv}; !slices.Equal(r.Out.Shape, want) {
				t.Errorf("out shape %v, want %v", r.Out.Shape, want)
			}
		})
	}
}

// TestSDPABackwardGolden checks SDPABackward, tiled and (where the golden has weights) dense,
// against PyTorch's autograd in float64 on every golden: dq, dk, dv, the sinks' and the slopes'
// gradients within 1e-5.
func TestSDPABackwardGolden(t *testing.T) {
	for _, g := range sdpaGoldens(t) {
		for _, dense := range []bool{false, true} {
			if dense && g.weights == nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/dense=%v", g.name, dense), func(t *testing.T) {
				opt := g.opt
				opt.NeedLSE, opt.NeedWeights, opt.SlopeGrad, opt.Workers = true, dense, opt.ALiBi, 3
				r, err := SDPA(g.q, g.k, g.v, &opt)
				if err != nil {
					t.Fatal(err)
				}
				gr, err := SDPABackward(g.q, g.k, g.v, r, g.gradOut, &opt)
				if err != nil {
					t.Fatal(err)
				}
				checkRel(t, "dq", gr.Q.Data, g.gq, 1e-5)
				checkRel(t, "dk", gr.K.Data, g.gk, 1e-5)
				checkRel(t, "dv", gr.V.Data, g.gv, 1e-5)
				if (gr.Sinks == nil) != (g.gSinks == nil) || (gr.Slopes == nil) != (g.gSlopes == nil) {
					t.Fatalf("sinks' gradient %v (want %v), slopes' %v (want %v)", gr.Sinks, g.gSinks, gr.Slopes, g.gSlopes)
				}
				if g.gSinks != nil {
					checkRel(t, "dsinks", gr.Sinks, g.gSinks, 1e-5)
				}
				if g.gSlopes != nil {
					checkRel(t, "dslopes", gr.Slopes, g.gSlopes, 1e-5)
				}
			})
		}
	}
}

// TestSDPAWorkers checks that the result has the same bits on 1, 2, 3 and absurdly many workers.
func TestSDPAWorkers(t *testing.T) {
	for _, g := range sdpaGoldens(t) {
		var first *SDPAResult
		for _, workers := range []int{1, 2, 3, 1 << 30} {
			opt := g.opt
			opt.NeedLSE, opt.NeedWeights, opt.Workers = true, g.weights != nil, workers
			r, err := SDPA(g.q, g.k, g.v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = r
				continue
			}
			if !bitsEqual(r.Out.Data, first.Out.Data) || !bitsEqual(r.LSE.Data, first.LSE.Data) ||
				(r.Weights != nil && !bitsEqual(r.Weights.Data, first.Weights.Data)) {
				t.Errorf("%s: %d workers give other bits than 1", g.name, workers)
			}
		}
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// sdpaRand returns a tensor of the shape with values from the seed.
func sdpaRand(seed uint64, scale float64, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	tensor.NewRNG(seed).Normal(t, scale)
	return t
}

// TestSDPAPlainHeads checks GQA against per-head attention written out in float64, and that
// GQA gives the same bits as MHA on K/V heads repeated by hand (repeat_interleave).
func TestSDPAPlainHeads(t *testing.T) {
	const b, hq, hkv, tq, tk, d, dv = 2, 6, 2, 70, 300, 5, 3
	q, k, v := sdpaRand(1, 1, b, hq, tq, d), sdpaRand(2, 1, b, hkv, tk, d), sdpaRand(3, 1, b, hkv, tk, dv)
	opt := &SDPAOptions{Workers: 2}
	r, err := SDPA(q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Written out: out[b,h,i] = Σ_j softmax_j(q·k_j/√d) v_j with K/V head h / (hq/hkv).
	want := make([]float64, b*hq*tq*dv)
	for bb := range b {
		for h := range hq {
			kv := bb*hkv + h/(hq/hkv)
			for i := range tq {
				qi := q.Data[((bb*hq+h)*tq+i)*d:][:d]
				s := make([]float64, tk)
				m := math.Inf(-1)
				for j := range tk {
					kj := k.Data[(kv*tk+j)*d:][:d]
					for c := range d {
						s[j] += float64(qi[c]) * float64(kj[c])
					}
					s[j] /= math.Sqrt(d)
					m = max(m, s[j])
				}
				sum := 0.0
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				out := want[((bb*hq+h)*tq+i)*dv:][:dv]
				for j := range tk {
					for c := range dv {
						out[c] += s[j] / sum * float64(v.Data[(kv*tk+j)*dv+c])
					}
				}
			}
		}
	}
	checkRel(t, "float32", r.Out.Data, want, 1e-5)
	ref, err := SDPAReference(q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	checkRel(t, "float64", ref.Out, want, 1e-12)

	kr, vr := tensor.New(b, hq, tk, d), tensor.New(b, hq, tk, dv)
	for bb := range b {
		for h := range hq {
			kv := bb*hkv + h/(hq/hkv)
			copy(kr.Data[(bb*hq+h)*tk*d:][:tk*d], k.Data[kv*tk*d:])
			copy(vr.Data[(bb*hq+h)*tk*dv:][:tk*dv], v.Data[kv*tk*dv:])
		}
	}
	full, err := SDPA(q, kr, vr, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(full.Out.Data, r.Out.Data) {
		t.Error("GQA and MHA on repeated K/V heads give other bits")
	}
}

// TestSDPALayerCore checks SDPA with Hkv = Hq against the layer's attention core on the same
// projections: the heads the layer keeps (Options.Heads.Keep).
func TestSDPALayerCore(t *testing.T) {
	const b, tq, e, heads = 2, 9, 12, 3
	d := e / heads
	l := newLayer(t, Config{EmbedDim: e, NumHeads: heads, Seed: 4})
	x := sdpaRand(5, 1, b, tq, e)
	r, err := l.Forward(x, nil, nil, &Options{Causal: true, Heads: HeadOptions{Keep: true}})
	if err != nil {
		t.Fatal(err)
	}
	w, bias := l.param("in_proj_weight"), l.param("in_proj_bias")
	proj := func(part int) *tensor.Tensor { // [B, H, T, d] from rows part·E … of in_proj
		out := tensor.New(b, heads, tq, d)
		for bb := range b {
			for i := range tq {
				for o := range e {
					s := float64(bias[part*e+o])
					for c := range e {
						s += float64(x.Data[(bb*tq+i)*e+c]) * float64(w[(part*e+o)*e+c])
					}
					out.Data[((bb*heads+o/d)*tq+i)*d+o%d] = float32(s)
				}
			}
		}
		return out
	}
	s, err := SDPA(proj(0), proj(1), proj(2), &SDPAOptions{Causal: CausalTopLeft})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float64, b*tq*e) // SDPA's heads, laid out as the layer's concatenation
	for bb := range b {
		for h := range heads {
			for i := range tq {
				for c := range d {
					got[(bb*tq+i)*e+h*d+c] = float64(s.Out.Data[((bb*heads+h)*tq+i)*d+c])
				}
			}
		}
	}
	want := make([]float64, len(r.Heads.Data))
	for i, v := range r.Heads.Data {
		want[i] = float64(v)
	}
	checkRel(t, "heads", got, want, 1e-5)
}

// propertyCase returns a GQA call with odd sizes, both causal and not.
func propertyCase(causal CausalMode) (q, k, v *tensor.Tensor, opt SDPAOptions) {
	const b, hq, hkv, tq, tk, d, dv = 2, 4, 2, 67, 261, 6, 5
	q, k, v = sdpaRand(11, 2, b, hq, tq, d), sdpaRand(12, 2, b, hkv, tk, d), sdpaRand(13, 1, b, hkv, tk, dv)
	return q, k, v, SDPAOptions{Causal: causal, NeedLSE: true, ALiBi: true, Workers: 2}
}

func run2(t *testing.T, q, k, v *tensor.Tensor, a, b SDPAOptions, tol float64, what string) {
	t.Helper()
	ra, err := SDPA(q, k, v, &a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := SDPA(q, k, v, &b)
	if err != nil {
		t.Fatal(err)
	}
	if tol == 0 {
		if !bitsEqual(ra.Out.Data, rb.Out.Data) || !bitsEqual(ra.LSE.Data, rb.LSE.Data) {
			t.Errorf("%s: other bits", what)
		}
		return
	}
	checkRel(t, what+" out", ra.Out.Data, f64(rb.Out.Data), tol)
	checkLSE(t, what, ra.LSE.Data, f64(rb.LSE.Data), tol)
}

// TestSDPALimits checks options that reduce to no option: a window wider than the sequences, a
// huge soft cap, a sink of −Inf.
func TestSDPALimits(t *testing.T) {
	for _, c := range []CausalMode{NotCausal, CausalTopLeft, CausalBottomRight} {
		q, k, v, none := propertyCase(c)
		wide := none
		wide.Window = &Window{400, 400}
		run2(t, q, k, v, wide, none, 0, "window ≥ T")
		open := none
		open.Window = &Window{-1, -1}
		run2(t, q, k, v, open, none, 0, "window (−1, −1)")
		huge := none
		huge.Window = &Window{math.MaxInt, math.MaxInt}
		run2(t, q, k, v, huge, none, 0, "window (MaxInt, MaxInt)")
		capped := none
		capped.Softcap = 1e30
		run2(t, q, k, v, capped, none, 1e-6, "softcap 1e30")
		sunk := none
		sunk.Sinks = []float32{float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))}
		run2(t, q, k, v, sunk, none, 0, "sink −Inf")
	}
}

// TestSDPAFullyMasked checks rows whose keys the window and the padding hide: output 0, no NaN,
// lse +Inf without a sink and the sink's logit with one.
func TestSDPAFullyMasked(t *testing.T) {
	const b, hq, hkv, tq, tk, d = 2, 2, 1, 70, 300, 4
	q, k, v := sdpaRand(21, 1, b, hq, tq, d), sdpaRand(22, 1, b, hkv, tk, d), sdpaRand(23, 1, b, hkv, tk, d)
	pad := tensor.NewBool(b, tk)
	for j := 0; j < tk; j += 3 {
		pad.Data[j] = true // also key 230 + 3n: the window of query i is key i + δ = i + 230
	}
	for _, sinks := range [][]float32{nil, {0.5, -2}} {
		opt := SDPAOptions{Window: &Window{0, 0}, KeyPaddingMask: pad, Sinks: sinks, NeedLSE: true, NeedWeights: true}
		for _, weights := range []bool{false, true} {
			opt.NeedWeights = weights
			r, err := SDPA(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := SDPAReference(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			masked := 0
			for bh := range b * hq {
				for i := range tq {
					row := bh*tq + i
					for _, x := range r.Out.Data[row*d : (row+1)*d] {
						if math.IsNaN(float64(x)) {
							t.Fatalf("NaN in row %d", row)
						}
					}
					if !pad.Data[(bh/hq)*tk+i+tk-tq] {
						continue
					}
					masked++
					if slices.ContainsFunc(r.Out.Data[row*d:(row+1)*d], func(x float32) bool { return x != 0 }) {
						t.Errorf("row %d: out %v, want 0", row, r.Out.Data[row*d:(row+1)*d])
					}
					want := math.Inf(1)
					if sinks != nil {
						want = float64(sinks[bh%hq])
					}
					if got := r.LSE.Data[row]; float64(got) != float64(float32(want)) || ref.LSE[row] != want {
						t.Errorf("row %d: lse %v and %v, want %v", row, got, ref.LSE[row], want)
					}
				}
			}
			if masked == 0 || r.FullyMasked != masked || ref.FullyMasked != masked {
				t.Errorf("fully masked rows %d, reference %d, want %d", r.FullyMasked, ref.FullyMasked, masked)
			}
			checkRel(t, "out", r.Out.Data, ref.Out, 1e-5)
		}
	}
}

// TestSDPAAllocs checks that SDPAInto makes no heap allocation in steady state.
func TestSDPAAllocs(t *testing.T) {
	q, k, v, opt := propertyCase(CausalBottomRight)
	opt.Window = &Window{50, 0}
	opt.Sinks = []float32{1, 2, 3, 4}
	opt.Workers = 3
	opt.KeyPaddingMask = tensor.NewBool(2, 261)
	opt.Rotary = &Rotary{Theta: 10000, Dim: 2, Offset: 7, Scaling: &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}}
	opt.Dropout = 0.1
	c := new(SDPAContext) // the zero value is ready
	for _, compute := range []Compute{ComputeFloat32, ComputeBFloat16} {
		for _, weights := range []bool{false, true} {
			opt.NeedWeights, opt.Compute = weights, compute
			var r SDPAResult
			call := func() {
				if err := c.SDPAInto(&r, q, k, v, &opt); err != nil {
					t.Fatal(err)
				}
			}
			if n := steadyAllocs(call); n != 0 {
				t.Errorf("%v, weights %v: %v allocations per call, want 0", compute, weights, n)
			}
		}
	}
	opt.Compute = ComputeFloat32
	// A sparse layout whose scattered random blocks Tiled gathers into tiles.
	opt.NeedWeights, opt.Patterns, opt.Block = false, []Pattern{{Kind: PatternBigBird, Width: 8, Globals: 1, Random: 3, Seed: 5}}, [2]int{16, 16}
	var r SDPAResult
	call := func() {
		if err := c.SDPAInto(&r, q, k, v, &opt); err != nil {
			t.Fatal(err)
		}
	}
	if n := steadyAllocs(call); n != 0 {
		t.Errorf("sparse: %v allocations per call, want 0", n)
	}
	// One of low density, read with K in place (rotated into the work's copy), in query
	// blocks of 64 walked by their lists of kept blocks.
	nbq, nbk := ceilDiv(q.Shape[2], 64), ceilDiv(k.Shape[2], 16)
	blocks := tensor.NewBool(nbq, nbk)
	for qb := range nbq {
		blocks.Data[qb*nbk+(qb*7)%nbk] = true
	}
	opt.Patterns, opt.Block = []Pattern{{Kind: PatternBlocks, Blocks: blocks}}, [2]int{64, 16}
	n := steadyAllocs(call)
	if !c.free[0].kInPlace {
		t.Fatal("the low-density layout did not read K in place")
	}
	if n != 0 {
		t.Errorf("sparse, K in place: %v allocations per call, want 0", n)
	}
	// On one worker, whose tasks run several query blocks, each prefetching the next's.
	opt.Workers = 1
	n = steadyAllocs(call)
	if c.free[0].run < 2 {
		t.Fatalf("one worker runs %d query blocks a task, want several", c.free[0].run)
	}
	if n != 0 {
		t.Errorf("sparse, runs of query blocks: %v allocations per call, want 0", n)
	}
}

// steadyAllocs returns the heap allocations per call of call in steady state: after eight
// calls, not one, because a worker that the scheduler happened not to run until the others had
// taken every task of a call (likelier with more workers than cores: several tests run 3 on CI's
// 2) grows its scratch on its first task, which may otherwise fall into the measurement. Every
// allocation test of a parallel call measures with it.
func steadyAllocs(call func()) float64 {
	for range 8 {
		call()
	}
	return testing.AllocsPerRun(20, call)
}

// TestSDPANormalizerAllocs checks that SDPAInto with a normalizer, with weights or without, and
// the backward that then recomputes the weights, make no heap allocation in steady state.
func TestSDPANormalizerAllocs(t *testing.T) {
	q, k, v, opt := propertyCase(CausalBottomRight)
	// One worker: with more, one that happened to get no task until a later call would grow its
	// scratch then, which is the first use of its memory, not a steady-state allocation.
	opt.Workers = 1
	c := new(SDPAContext)
	for _, norm := range []*Normalizer{{Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: Entmax, Alpha: 1.3}, {Kind: TopK, K: 5}} {
		opt.Normalizer = norm
		for _, weights := range []bool{false, true} {
			opt.NeedWeights = weights
			var r SDPAResult
			var g SDPAGrads
			var dOut *tensor.Tensor
			forward := func() {
				if err := c.SDPAInto(&r, q, k, v, &opt); err != nil {
					t.Fatal(err)
				}
			}
			backward := func() {
				if err := c.SDPABackwardInto(&g, q, k, v, &r, dOut, &opt); err != nil {
					t.Fatal(err)
				}
			}
			forward()
			dOut = sdpaRand(5, 1, r.Out.Shape...)
			backward()
			for name, call := range map[string]func(){"forward": forward, "backward": backward} {
				if n := steadyAllocs(call); n != 0 {
					t.Errorf("%s, weights %v: %v allocations per %s, want 0", norm, weights, n, name)
				}
			}
		}
	}
}

// TestSDPAErrors checks that every bad shape or option is an error wrapping ErrShape, from both
// SDPA and SDPAReference.
func TestSDPAErrors(t *testing.T) {
	q, k, v := tensor.New(2, 4, 3, 5), tensor.New(2, 2, 7, 5), tensor.New(2, 2, 7, 6)
	nan := math.NaN()
	cases := []struct {
		name    string
		q, k, v *tensor.Tensor
		opt     SDPAOptions
		want    string
	}{
		{"nil q", nil, k, v, SDPAOptions{}, "q is nil"},
		{"3-d q", tensor.New(4, 3, 5), k, v, SDPAOptions{}, "want 4 dimensions"},
		{"short data", &tensor.Tensor{Shape: []int{2, 4, 3, 5}, Data: make([]float32, 3)}, k, v, SDPAOptions{}, "holds 3 values"},
		{"batch", q, tensor.New(1, 2, 7, 5), tensor.New(1, 2, 7, 6), SDPAOptions{}, "k is [1 2 7 5]"},
		{"head size", q, tensor.New(2, 2, 7, 4), v, SDPAOptions{}, "k is [2 2 7 4]"},
		{"v keys", q, k, tensor.New(2, 2, 8, 6), SDPAOptions{}, "v is [2 2 8 6]"},
		{"v heads", q, k, tensor.New(2, 1, 7, 6), SDPAOptions{}, "v is [2 1 7 6]"},
		{"no kv head", q, tensor.New(2, 0, 7, 5), tensor.New(2, 0, 7, 6), SDPAOptions{}, "at least 1"},
		{"gqa", q, tensor.New(2, 3, 7, 5), tensor.New(2, 3, 7, 6), SDPAOptions{}, "multiple of k's 3"},
		{"scale", q, k, v, SDPAOptions{Scale: nan}, "scale"},
		{"scale D=0", tensor.New(2, 4, 3, 0), tensor.New(2, 2, 7, 0), v, SDPAOptions{}, "give a scale"},
		{"causal", q, k, v, SDPAOptions{Causal: 7}, "causal mode"},
		{"window", q, k, v, SDPAOptions{Window: &Window{-2, 0}}, "window"},
		{"softcap", q, k, v, SDPAOptions{Softcap: -1}, "softcap"},
		{"softcap inf", q, k, v, SDPAOptions{Softcap: math.Inf(1)}, "softcap"},
		{"slopes alone", q, k, v, SDPAOptions{Slopes: []float64{1, 2, 3, 4}}, "without ALiBi"},
		{"slopes", q, k, v, SDPAOptions{ALiBi: true, Slopes: []float64{1}}, "1 ALiBi slopes"},
		{"slope nan", q, k, v, SDPAOptions{ALiBi: true, Slopes: []float64{1, nan, 3, 4}}, "slope of head 1"},
		{"sinks", q, k, v, SDPAOptions{Sinks: []float32{1}}, "1 sinks"},
		{"sink inf", q, k, v, SDPAOptions{Sinks: []float32{1, 2, float32(math.Inf(1)), 4}}, "sink of head 2"},
		{"workers", q, k, v, SDPAOptions{Workers: -1}, "workers"},
		{"padding", q, k, v, SDPAOptions{KeyPaddingMask: tensor.NewBool(2, 6)}, "key_padding_mask is [2 6]"},
		{"padding data", q, k, v, SDPAOptions{KeyPaddingMask: &tensor.Bool{Shape: []int{2, 7}}}, "holds 0 values"},
		{"mask", q, k, v, SDPAOptions{AttnMask: tensor.NewBool(3, 6)}, "attn_mask is [3 6]"},
		{"mask 3-d", q, k, v, SDPAOptions{AttnMask: tensor.NewBool(8, 3, 7)}, "attn_mask is [8 3 7]"},
		{"bias", q, k, v, SDPAOptions{AttnBias: tensor.New(2, 4, 3, 6)}, "attn_bias is [2 4 3 6]"},
	}
	for _, c := range cases {
		_, err := SDPA(c.q, c.k, c.v, &c.opt)
		if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: SDPA error %v, want ErrShape saying %q", c.name, err, c.want)
		}
		_, err = SDPAReference(c.q, c.k, c.v, &c.opt)
		if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: SDPAReference error %v, want ErrShape saying %q", c.name, err, c.want)
		}
	}
}

// TestAlibiSlopes checks the standard slopes: 2^(−8(h+1)/n) for n a power of two, interleaved
// from the next power otherwise.
func TestAlibiSlopes(t *testing.T) {
	if got := AlibiSlopes(4); !slices.Equal(got, []float64{0.25, 0.0625, 0.015625, 0.00390625}) {
		t.Errorf("4 heads: %v", got)
	}
	got, want := AlibiSlopes(6), []float64{0.25, 0.0625, 0.015625, 0.00390625, math.Pow(2, -1), math.Pow(2, -3)}
	if !slices.Equal(got, want) {
		t.Errorf("6 heads: %v, want %v", got, want)
	}
	if len(AlibiSlopes(0)) != 0 {
		t.Error("0 heads")
	}
}

// FuzzSDPAShapes checks on small sizes, zeros included, that SDPA and SDPAReference agree: both
// fail with an ErrShape error, or both succeed with results within float32 accuracy and no NaN.
func FuzzSDPAShapes(f *testing.F) {
	f.Add(uint8(2), uint8(4), uint8(2), uint8(3), uint8(5), uint8(4), uint8(3), uint8(0), int8(-1), int8(-1), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(1), uint8(2), uint8(1), uint8(1), uint8(9), uint8(2), uint8(2), uint8(2), int8(2), int8(0), uint8(3), uint8(0xff), uint64(2))
	f.Add(uint8(0), uint8(0), uint8(1), uint8(0), uint8(0), uint8(0), uint8(0), uint8(1), int8(0), int8(0), uint8(0), uint8(0x0f), uint64(3))
	f.Add(uint8(1), uint8(3), uint8(3), uint8(4), uint8(0), uint8(1), uint8(0), uint8(0), int8(-1), int8(3), uint8(1), uint8(0xf0), uint64(4))
	f.Add(uint8(2), uint8(4), uint8(2), uint8(5), uint8(70), uint8(4), uint8(3), uint8(2), int8(-1), int8(-1), uint8(0), uint8(2), uint64(0x1_0230_1103))
	f.Fuzz(func(t *testing.T, b, hq, hkv, tq, tk, d, dv, causal uint8, left, right int8, softcap, flags uint8, seed uint64) {
		b, hq, hkv, tq, tk, d, dv = b%4, hq%7, hkv%4, tq%80, tk%80, d%6, dv%5
		if tq > 10 && tk > 10 {
			tq %= 10 // keep a call small, but allow long keys or queries
		}
		sizes := func(s ...uint8) []int {
			n := make([]int, len(s))
			for i, x := range s {
				n[i] = int(x)
			}
			return n
		}
		q := sdpaRand(seed, 1.5, sizes(b, hq, tq, d)...)
		k := sdpaRand(seed+1, 1.5, sizes(b, hkv, tk, d)...)
		v := sdpaRand(seed+2, 1, sizes(b, hkv, tk, dv)...)
		opt := SDPAOptions{Causal: CausalMode(causal % 4), Softcap: float64(softcap) / 4, NeedLSE: true, NeedWeights: flags&1 != 0, Workers: int(seed % 4)}
		if left != 0 || right != 0 {
			opt.Window = &Window{int(left) % 8, int(right) % 8}
		}
		if flags&2 != 0 {
			opt.ALiBi = true
		}
		if flags&4 != 0 {
			opt.Sinks = make([]float32, hq+flags>>7) // one too many now and then
			for h := range opt.Sinks {
				opt.Sinks[h] = float32(h) - 1
			}
		}
		if flags&8 != 0 {
			opt.KeyPaddingMask = tensor.NewBool(int(b), int(tk))
			for j := range opt.KeyPaddingMask.Data {
				opt.KeyPaddingMask.Data[j] = (uint64(j)*seed)%3 == 0
			}
		}
		if flags&16 != 0 {
			opt.AttnMask = tensor.NewBool(int(tq), int(tk)+int(flags>>6&1))
			for j := range opt.AttnMask.Data {
				opt.AttnMask.Data[j] = (uint64(j)*(seed+7))%5 == 0
			}
		}
		if flags&32 != 0 {
			opt.AttnBias = sdpaRand(seed+3, 1, int(b), int(hq), int(tq), int(tk))
		}
		if flags&64 != 0 {
			opt.Scale = float64(int(seed%5)) - 2
		}
		if seed&0x100 != 0 { // rotary, now and then with a zero theta, an odd or too large dim, a bad layout
			opt.Rotary = &Rotary{Theta: float64(seed >> 9 % 1000), Dim: int(seed >> 20 % 8), Layout: RopeLayout(seed >> 24 % 3), Offset: int(seed >> 26 % 50)}
		}
		r, err := SDPA(q, k, v, &opt)
		ref, rerr := SDPAReference(q, k, v, &opt)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("SDPA error %v, reference error %v", err, rerr)
		}
		if seed&0x200 != 0 { // the same call in bfloat16: the same errors, the same shapes, finite where float32 is
			bopt := opt
			bopt.Compute = ComputeBFloat16
			rb, berr := SDPA(q, k, v, &bopt)
			if (err == nil) != (berr == nil) {
				t.Fatalf("float32 error %v, bfloat16 error %v", err, berr)
			}
			if err == nil {
				if !slices.Equal(rb.Out.Shape, r.Out.Shape) {
					t.Fatalf("bfloat16 out %v, float32 %v", rb.Out.Shape, r.Out.Shape)
				}
				for i, x := range rb.Out.Data {
					if y := r.Out.Data[i]; !math.IsNaN(float64(y)) && !math.IsInf(float64(y), 0) && (math.IsNaN(float64(x)) || math.IsInf(float64(x), 0)) {
						t.Fatalf("bfloat16 out[%d] = %v where float32 gives %v", i, x, y)
					}
				}
			}
		}
		if err != nil {
			if !errors.Is(err, ErrShape) || err.Error() != rerr.Error() {
				t.Fatalf("errors %v and %v, want the same ErrShape", err, rerr)
			}
			return
		}
		checkOut(t, r.Out.Data, ref.Out, v.Data, int(tk))
		checkLSE(t, "lse", r.LSE.Data, ref.LSE, 1e-4)
		if opt.NeedWeights {
			checkRel(t, "weights", r.Weights.Data, ref.Weights, 1e-4)
		}
		if r.FullyMasked != ref.FullyMasked {
			t.Fatalf("fully masked %d, reference %d", r.FullyMasked, ref.FullyMasked)
		}
		// The backward of the same call: no error, and finite gradients of the right shapes.
		opt.SlopeGrad = opt.ALiBi
		dOut := sdpaRand(seed+4, 1, r.Out.Shape...)
		g, err := SDPABackward(q, k, v, r, dOut, &opt)
		if err != nil {
			t.Fatalf("backward: %v", err)
		}
		for _, x := range []struct {
			name string
			got  *tensor.Tensor
			like *tensor.Tensor
		}{{"dq", g.Q, q}, {"dk", g.K, k}, {"dv", g.V, v}} {
			if !slices.Equal(x.got.Shape, x.like.Shape) {
				t.Fatalf("%s is %v, want %v", x.name, x.got.Shape, x.like.Shape)
			}
			if err := x.got.CheckFinite(x.name); err != nil {
				t.Fatal(err)
			}
		}
		for h, s := range g.Sinks {
			if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
				t.Fatalf("sink %d's gradient is %v", h, s)
			}
		}
		checkDirectional(t, q, k, v, dOut, &opt, g, seed)
	})
}

// checkDirectional checks SDPABackward's gradients g of the loss Σ dOut·Out along one random
// direction of q, k, v, the sinks and the ALiBi slopes (when the options have them) against the
// central difference of the float64 reference's loss, with each value's step the one its float32
// (or float64) rounding actually takes: within 10⁻⁴ of the sum of the terms' magnitudes (a
// gradient that is itself a sum cancelling to far less than its terms keeps their float32
// error: 10⁻⁵ has been seen).
func checkDirectional(t *testing.T, q, k, v, dOut *tensor.Tensor, opt *SDPAOptions, g *SDPAGrads, seed uint64) {
	t.Helper()
	const h = 1.0 / 8192 // small: soft-capping's tanh bends fast; the steps are exact, so float32 costs nothing
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	o := *opt
	if o.ALiBi && o.Slopes == nil {
		o.Slopes = AlibiSlopes(len(g.Slopes)) // the default slopes, made explicit to be stepped
	}
	type operand struct {
		x    []float32
		grad []float32
		up   []float32
		down []float32
	}
	ops := []*operand{{x: q.Data, grad: g.Q.Data}, {x: k.Data, grad: g.K.Data}, {x: v.Data, grad: g.V.Data}}
	if o.Sinks != nil {
		o.Sinks = slices.Clone(o.Sinks)
		ops = append(ops, &operand{x: o.Sinks, grad: g.Sinks})
	}
	var want, terms float64
	for _, p := range ops {
		p.up, p.down = make([]float32, len(p.x)), make([]float32, len(p.x))
		for i, x := range p.x {
			u := 2*rng.Float64() - 1
			p.up[i], p.down[i] = float32(float64(x)+h*u), float32(float64(x)-h*u)
			d := float64(p.grad[i]) * (float64(p.up[i]) - float64(p.down[i]))
			want, terms = want+d, terms+math.Abs(d)
		}
	}
	var slopes, slopesUp, slopesDown []float64
	if g.Slopes != nil {
		slopes = slices.Clone(o.Slopes)
		for i, x := range slopes {
			u := 2*rng.Float64() - 1
			// A slope multiplies distances up to Tk: a far smaller step keeps the difference's
			// truncation error (its third derivative grows as Tk³) below float32's.
			slopesUp, slopesDown = append(slopesUp, x+h/256*u), append(slopesDown, x-h/256*u)
			d := g.Slopes[i] * (slopesUp[i] - slopesDown[i])
			want, terms = want+d, terms+math.Abs(d)
		}
	}
	loss := func(up bool) float64 {
		for _, p := range ops {
			if up {
				copy(p.x, p.up)
			} else {
				copy(p.x, p.down)
			}
		}
		if slopes != nil {
			o.Slopes = slopesDown
			if up {
				o.Slopes = slopesUp
			}
		}
		return referenceLoss(t, q, k, v, dOut, &o)
	}
	saved := make([][]float32, len(ops))
	for i, p := range ops {
		saved[i] = slices.Clone(p.x)
	}
	got := loss(true) - loss(false)
	for i, p := range ops {
		copy(p.x, saved[i])
	}
	if e := math.Abs(got - want); e > 1e-4*terms+1e-12 {
		t.Fatalf("along a random direction: the reference's loss moved by %.9g, the gradients say %.9g (terms' magnitudes %.3g)", got, want, terms)
	}
}

// TestSDPAConcurrent runs one context from several goroutines at once (for the race detector)
// and checks every result against a lone call's bits.
func TestSDPAConcurrent(t *testing.T) {
	q, k, v, opt := propertyCase(CausalTopLeft)
	opt.Window = &Window{9, 3}
	want, err := SDPA(q, k, v, &opt)
	if err != nil {
		t.Fatal(err)
	}
	c := NewSDPAContext()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var r SDPAResult
			for range 5 {
				if err := c.SDPAInto(&r, q, k, v, &opt); err != nil {
					errs <- err
					return
				}
				if !bitsEqual(r.Out.Data, want.Out.Data) {
					errs <- errors.New("other bits")
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestSDPABackwardWorkers checks that the gradients have the same bits for any worker count.
func TestSDPABackwardWorkers(t *testing.T) {
	for _, g := range sdpaGoldens(t) {
		var first *SDPAGrads
		for _, workers := range []int{1, 2, 3, 1 << 30} {
			opt := g.opt
			opt.NeedLSE, opt.SlopeGrad, opt.Workers = true, opt.ALiBi, workers
			r, err := SDPA(g.q, g.k, g.v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := SDPABackward(g.q, g.k, g.v, r, g.gradOut, &opt)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = gr
				continue
			}
			if !bitsEqual(gr.Q.Data, first.Q.Data) || !bitsEqual(gr.K.Data, first.K.Data) || !bitsEqual(gr.V.Data, first.V.Data) ||
				!slices.Equal(gr.Sinks, first.Sinks) || !slices.Equal(gr.Slopes, first.Slopes) {
				t.Errorf("%s: %d workers give other bits than 1", g.name, workers)
			}
		}
	}
}

// TestSDPABackwardAllocs checks that SDPABackwardInto allocates nothing in steady state.
func TestSDPABackwardAllocs(t *testing.T) {
	q, k, v, opt := propertyCase(CausalBottomRight)
	opt.Window = &Window{50, 0}
	opt.Sinks = []float32{1, 2, 3, 4}
	opt.SlopeGrad, opt.Softcap, opt.Workers = true, 5, 3
	opt.Rotary = &Rotary{Theta: 10000, Dim: 4}
	opt.Dropout = 0.2
	c := new(SDPAContext)
	r := new(SDPAResult)
	if err := c.SDPAInto(r, q, k, v, &opt); err != nil {
		t.Fatal(err)
	}
	dOut := sdpaRand(5, 1, r.Out.Shape...)
	var g SDPAGrads
	call := func() {
		if err := c.SDPABackwardInto(&g, q, k, v, r, dOut, &opt); err != nil {
			t.Fatal(err)
		}
	}
	if n := steadyAllocs(call); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}

// TestSDPABackwardErrors checks the backward's own errors: a result without LSE or of another
// shape, and a dOut of the wrong shape.
func TestSDPABackwardErrors(t *testing.T) {
	q, k, v := sdpaRand(1, 1, 1, 2, 3, 4), sdpaRand(2, 1, 1, 1, 5, 4), sdpaRand(3, 1, 1, 1, 5, 6)
	r, err := SDPA(q, k, v, &SDPAOptions{NeedLSE: true})
	if err != nil {
		t.Fatal(err)
	}
	noLSE, err := SDPA(q, k, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	dOut := sdpaRand(4, 1, 1, 2, 3, 6)
	other := &SDPAResult{Out: r.Out, LSE: sdpaRand(5, 1, 1, 2, 4)}
	for _, c := range []struct {
		r    *SDPAResult
		dOut *tensor.Tensor
		want string
	}{
		{nil, dOut, "has no Out"},
		{noLSE, dOut, "run SDPA with NeedLSE"},
		{r, nil, "dOut is nil, want a tensor [1 2 3 6]"},
		{r, sdpaRand(4, 1, 1, 2, 3, 5), "dOut is [1 2 3 5], want [1 2 3 6]"},
		{other, dOut, "the forward's LSE is [1 2 4], want [1 2 3]"},
	} {
		if _, err := SDPABackward(q, k, v, c.r, c.dOut, nil); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want ErrShape with %q", err, c.want)
		}
	}
	ctx := NewSDPAContext()
	if err := ctx.SDPABackwardInto(nil, q, k, v, r, dOut, nil); !errors.Is(err, ErrShape) {
		t.Errorf("SDPABackwardInto into nil: %v, want ErrShape", err)
	}
	if err := ctx.SDPAInto(nil, q, k, v, nil); !errors.Is(err, ErrShape) {
		t.Errorf("SDPAInto into nil: %v, want ErrShape", err)
	}
}

// TestSDPABackwardFiniteDifferences checks SDPABackward against central differences of the
// float64 SDPAReference with every option at once: GQA, bottom-right causal, a window, a soft cap,
// sinks, ALiBi slopes, key padding and partial interleaved rotary. The inputs are multiples of
// 2⁻⁶, so that x ± 2⁻¹⁰ is exact in float32 and the differences see the step they were given.
func TestSDPABackwardFiniteDifferences(t *testing.T) {
	for _, dropout := range []float64{0, 0.25} {
		t.Run(fmt.Sprintf("dropout=%v", dropout), func(t *testing.T) { backwardFiniteDifferences(t, dropout) })
	}
}

func backwardFiniteDifferences(t *testing.T, dropout float64) {
	dyadic := func(x *tensor.Tensor) *tensor.Tensor {
		for i, v := range x.Data {
			x.Data[i] = float32(math.Round(float64(v)*64) / 64)
		}
		return x
	}
	q, k, v := dyadic(sdpaRand(1, 1, 2, 4, 5, 4)), dyadic(sdpaRand(2, 1, 2, 2, 7, 4)), dyadic(sdpaRand(3, 1, 2, 2, 7, 3))
	dOut := dyadic(sdpaRand(4, 1, 2, 4, 5, 3))
	pad := tensor.NewBool(2, 7)
	pad.Data[3], pad.Data[7+6] = true, true
	opt := SDPAOptions{
		Causal: CausalBottomRight, Window: &Window{3, 1}, Softcap: 2, Sinks: []float32{0.5, -1, 0.25, 1},
		ALiBi: true, Slopes: []float64{0.3, 0.1, 0.05, 0.2}, SlopeGrad: true, KeyPaddingMask: pad,
		Rotary: &Rotary{Theta: 100, Dim: 2, Layout: RopeInterleaved, Offset: 3}, NeedLSE: true,
		Dropout: dropout, DropoutSeed: 11,
	}
	_, g := sdpaForwardBackward(t, q, k, v, dOut, &opt)
	loss := func() float64 { return referenceLoss(t, q, k, v, dOut, &opt) }
	diff := func(x []float32) []float64 { return centralDiff(x, 1.0/1024, loss) }
	checkRel(t, "dq", g.Q.Data, diff(q.Data), 1e-4)
	checkRel(t, "dk", g.K.Data, diff(k.Data), 1e-4)
	checkRel(t, "dv", g.V.Data, diff(v.Data), 1e-4)
	checkRel(t, "dsinks", g.Sinks, diff(opt.Sinks), 1e-4)
	dslopes := make([]float64, len(opt.Slopes))
	for i := range opt.Slopes {
		s0 := opt.Slopes[i]
		opt.Slopes[i] = s0 + 1e-5
		up := loss()
		opt.Slopes[i] = s0 - 1e-5
		dslopes[i] = (up - loss()) / 2e-5
		opt.Slopes[i] = s0
	}
	checkRel(t, "dslopes", g.Slopes, dslopes, 1e-4)
}

// TestSDPADropout checks dropout against SDPAReference's (the same counter-based mask), on tiles
// and workers, with the weights returned after dropout; and that the dense and tiled backward
// agree under it (the dense one falls back to recomputing, since the weights are after dropout).
func TestSDPADropout(t *testing.T) {
	q, k, v, opt := propertyCase(CausalBottomRight)
	opt.Dropout, opt.DropoutSeed, opt.NeedWeights = 0.3, 5, true
	ref, err := SDPAReference(q, k, v, &opt)
	if err != nil {
		t.Fatal(err)
	}
	var first *SDPAResult
	for _, workers := range []int{1, 3} {
		opt.Workers = workers
		r, err := SDPA(q, k, v, &opt)
		if err != nil {
			t.Fatal(err)
		}
		checkRel(t, "out", r.Out.Data, ref.Out, 1e-5)
		checkLSE(t, "lse", r.LSE.Data, ref.LSE, 1e-5)
		checkRel(t, "weights", r.Weights.Data, ref.Weights, 1e-5)
		if first != nil && !bitsEqual(first.Out.Data, r.Out.Data) {
			t.Errorf("%d workers give other bits than 1", workers)
		}
		first = r
	}
	plain := opt
	plain.Dropout = 0
	none, err := SDPAReference(q, k, v, &plain)
	if err != nil {
		t.Fatal(err)
	}
	dropped, visible := 0, 0
	for i, w := range none.Weights {
		if w > 0 {
			visible++
			if first.Weights.Data[i] == 0 {
				dropped++
			}
		}
	}
	if frac := float64(dropped) / float64(visible); math.Abs(frac-0.3) > 0.01 {
		t.Errorf("%.3f of the visible weights dropped, want 0.3", frac)
	}
	dOut := sdpaRand(9, 1, first.Out.Shape...)
	dense, err := SDPABackward(q, k, v, first, dOut, &opt)
	if err != nil {
		t.Fatal(err)
	}
	tiled, err := SDPABackward(q, k, v, &SDPAResult{Out: first.Out, LSE: first.LSE}, dOut, &opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(dense.Q.Data, tiled.Q.Data) || !bitsEqual(dense.K.Data, tiled.K.Data) || !bitsEqual(dense.V.Data, tiled.V.Data) {
		t.Error("with dropout, the backward given the weights differs from the one without")
	}
	for _, p := range []float64{-0.1, 1, math.NaN()} {
		opt.Dropout = p
		if _, err := SDPA(q, k, v, &opt); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "want a probability in [0, 1)") {
			t.Errorf("dropout %v: error %v", p, err)
		}
	}
}

// TestSDPANormalizerDropout checks dropout on a normalizer's weights, as the layer applies it:
// against SDPAReference's output and weights, and the backward along a random direction against
// the reference's loss under the same mask.
func TestSDPANormalizerDropout(t *testing.T) {
	q, k, v := sdpaRand(21, 2, 1, 2, 9, 4), sdpaRand(22, 2, 1, 2, 13, 4), sdpaRand(23, 1, 1, 2, 13, 3)
	dOut := sdpaRand(24, 1, 1, 2, 9, 3)
	for _, n := range []*Normalizer{{Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: TopK, K: 3}} {
		opt := SDPAOptions{Causal: CausalBottomRight, Normalizer: n, Dropout: 0.3, DropoutSeed: 7, NeedWeights: true}
		ref, err := SDPAReference(q, k, v, &opt)
		if err != nil {
			t.Fatal(err)
		}
		r, err := SDPA(q, k, v, &opt)
		if err != nil {
			t.Fatalf("%s with dropout: %v", n, err)
		}
		checkRel(t, n.String()+" out", r.Out.Data, ref.Out, 1e-5)
		checkRel(t, n.String()+" weights", r.Weights.Data, ref.Weights, 1e-5)
		plain := opt
		plain.Dropout = 0
		if p, _ := SDPA(q, k, v, &plain); maxAbsDiff(p.Out.Data, r.Out.Data) == 0 {
			t.Errorf("%s: dropout changed nothing", n)
		}
		g, err := SDPABackward(q, k, v, &SDPAResult{Out: r.Out, LSE: r.LSE}, dOut, &opt)
		if err != nil {
			t.Fatal(err)
		}
		checkDirectional(t, q, k, v, dOut, &opt, g, 3)
	}
}

// referenceLoss returns Σ SDPAReference(q, k, v, opt).Out · dOut, the loss whose gradients
// SDPABackward gives for dOut.
func referenceLoss(t *testing.T, q, k, v, dOut *tensor.Tensor, opt *SDPAOptions) float64 {
	t.Helper()
	ref, err := SDPAReference(q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	s := 0.0
	for i, o := range ref.Out {
		s += o * float64(dOut.Data[i])
	}
	return s
}

// centralDiff returns the central differences of loss with respect to each value of x, with
// step h (exactly representable beside x's values, for dyadic inputs).
func centralDiff(x []float32, h float32, loss func() float64) []float64 {
	d := make([]float64, len(x))
	for i := range x {
		x0 := x[i]
		x[i] = x0 + h
		up := loss()
		x[i] = x0 - h
		d[i] = (up - loss()) / float64(2*h)
		x[i] = x0
	}
	return d
}

// goldenReaders returns readers of a golden file's tensors, as float32 tensors and as float64
// values, that fail the test when a tensor is missing or of another kind.
func goldenReaders(t *testing.T, f *safetensors.File) (f32 func(string) *tensor.Tensor, f64 func(string) []float64) {
	f32 = func(name string) *tensor.Tensor {
		x, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	f64 = func(name string) []float64 {
		x, _, err := f.Float64(name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	return f32, f64
}

// TestSDPABackwardSingleKeyRows checks that a row with one key to attend, whose weight is 1 and
// so whose scores have no gradient, gives exactly 0 to dQ and dK, as PyTorch's softmax backward
// does: the first row of causal attention, and every row of a window of one key. (The backward's
// D = dO·O is summed as the kernels sum dP = dO·Vᵀ, so that dP − D cancels.)
func TestSDPABackwardSingleKeyRows(t *testing.T) {
	const b, hq, hkv, tq, d = 2, 4, 2, 70, 64 // 70 rows: a block of 64 and one of 6
	q, k, v := sdpaRand(1, 2, b, hq, tq, d), sdpaRand(2, 2, b, hkv, tq, d), sdpaRand(3, 1, b, hkv, tq, d)
	dOut := sdpaRand(4, 1, b, hq, tq, d)
	for _, c := range []struct {
		name string
		opt  SDPAOptions
		rows func(i int) bool // the rows with one key
	}{
		{"causal", SDPAOptions{Causal: CausalTopLeft}, func(i int) bool { return i == 0 }},
		{"window of one", SDPAOptions{Window: &Window{Left: 0, Right: 0}}, func(int) bool { return true }},
	} {
		opt := c.opt
		opt.NeedLSE = true
		_, g := sdpaForwardBackward(t, q, k, v, dOut, &opt)
		for bh := range b * hq {
			for i := range tq {
				if !c.rows(i) {
					continue
				}
				for _, x := range g.Q.Data[(bh*tq+i)*d : (bh*tq+i+1)*d] {
					if x != 0 {
						t.Fatalf("%s: dQ of (batch·head %d, row %d) holds %g, want exactly 0", c.name, bh, i, x)
					}
				}
			}
		}
		if c.name == "window of one" && slices.ContainsFunc(g.K.Data, func(x float32) bool { return x != 0 }) {
			t.Errorf("%s: dK is not exactly 0", c.name)
		}
	}
}

// sdpaForwardBackward runs SDPA and SDPABackward with opt, failing t on an error.
func sdpaForwardBackward(t *testing.T, q, k, v, dOut *tensor.Tensor, opt *SDPAOptions) (*SDPAResult, *SDPAGrads) {
	t.Helper()
	r, err := SDPA(q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := SDPABackward(q, k, v, r, dOut, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r, g
}
