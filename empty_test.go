package mha

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// shapeCase is one call of a layer built from small sizes, possibly zero or mismatched: the cases
// of the empty-input tests and of FuzzForwardShapes.
type shapeCase struct {
	cfg                          Config
	b, tq, tk                    int  // tk is ignored for self-attention (Tk = Tq)
	cross, kvSame, unbatched     bool // kvSame: key and value are one tensor (when kdim = vdim)
	causal, needWeights, perHead bool
	pad, mask, bias, perHeadMask bool // key padding, bool attn mask, float attn mask; masks per head
	probe, training, backward    bool // probe: gate, shift, keep the heads, the last one uniform
	bf16                         bool // Forward also in ComputeBFloat16
	// Today's options: a window, soft-capping, ALiBi, sparse patterns (local and a global
	// token, in blocks of 2 × 3), a normalizer (1 sparsemax, 2 entmax-1.5, 3 top-2); and in the
	// Config one K/V head, sinks, rotary, qk-norm.
	window, softcap, alibi, sparse bool
	normalizer                     int
	mqa, sinks, rotary, qkNorm     bool
	mismatch                       int // which input gets a wrong size; see the mismatch constants
	seed                           uint64
}

// The wrong sizes a shapeCase can give one input.
const (
	mismatchNone       = iota
	mismatchQueryWidth // query [B Tq E+1]
	mismatchValueRows  // value [B Tk+1 vdim]
	mismatchKeyBatch   // key [B+1 Tk kdim] (batched when the query is not)
	mismatchKeyPadding // key_padding_mask [B Tk+1]
	mismatchAttnMask   // attn_mask [Tq+1 Tk]
	mismatchGradOutput // gradOutput [B Tq+1 E]: only Backward fails
	mismatchKeyWidth   // key [B Tk kdim+1]
	mismatchKinds      // how many kinds there are
)

// shape returns the shape of a [B, rows, cols] input of the case ([rows, cols] unbatched).
func (c *shapeCase) shape(rows, cols int) []int {
	if c.unbatched {
		return []int{rows, cols}
	}
	return []int{c.b, rows, cols}
}

// lead returns the leading dimensions of a [B, …] tensor of the case: none unbatched.
func (c *shapeCase) lead(dims ...int) []int {
	if c.unbatched {
		return dims
	}
	return append([]int{c.b}, dims...)
}

// normalize applies the rules that tie the fields together: one batch when unbatched, Tk = Tq for
// self-attention, cross-attention and masks for the mismatches that need them.
func (c *shapeCase) normalize() {
	if c.unbatched {
		c.b = 1
	}
	if c.mismatch == mismatchValueRows || c.mismatch == mismatchKeyBatch || c.mismatch == mismatchKeyWidth {
		c.cross = true
	}
	if !c.cross {
		c.tk, c.kvSame = c.tq, false
	}
	c.pad = c.pad || c.mismatch == mismatchKeyPadding
	c.mask = c.mask || (c.mismatch == mismatchAttnMask && !c.bias)
	if c.kvSame && (c.cfg.kdim() != c.cfg.vdim() || c.mismatch == mismatchValueRows || c.mismatch == mismatchKeyWidth) {
		c.kvSame = false
	}
	if c.training {
		c.cfg.Dropout = 0.3
	}
}

// inputs builds the layer (nil with New's error) and the call's inputs and gradOutput.
func (c *shapeCase) inputs() (l *Layer, q, k, v *tensor.Tensor, opt *Options, dy *tensor.Tensor, err error) {
	cfg := c.cfg
	if c.mqa {
		cfg.NumKVHeads = 1
	}
	if c.rotary {
		cfg.Rotary = &Rotary{Theta: 10000}
	}
	cfg.Sinks = c.sinks
	if c.qkNorm {
		// An eps that bounds rstd by 1/√eps ≈ 4.5: with a tiny one, a short query of a head of
		// one or two values makes the loss too steep for finite differences to follow (the
		// layer tests check a small eps against the analytic reference).
		cfg.QKNorm = &QKNorm{Eps: 0.05, Across: c.seed%2 == 1} // per head or across the heads, by the seed
	}
	if l, err = New(cfg); err != nil {
		return nil, nil, nil, nil, nil, nil, err
	}
	rng := tensor.NewRNG(c.seed)
	for _, p := range l.Parameters() { // non-zero biases and gains other than 1, so that the checks see them
		if strings.Contains(p.Name, "bias") || strings.HasSuffix(p.Name, "norm.weight") {
			rng.Normal(p.T, 0.3)
		}
	}
	e, heads := cfg.EmbedDim, cfg.NumHeads
	qe, ke, tv := e, cfg.kdim(), c.tk
	switch c.mismatch {
	case mismatchQueryWidth:
		qe++
	case mismatchKeyWidth:
		ke++
	case mismatchValueRows:
		tv++
	}
	q = randTensor(rng, c.shape(c.tq, qe)...)
	if c.cross {
		ks := c.shape(c.tk, ke)
		if c.mismatch == mismatchKeyBatch {
			ks = []int{c.b + 1, c.tk, ke}
		}
		k, v = randTensor(rng, ks...), randTensor(rng, c.shape(tv, cfg.vdim())...)
		if c.kvSame {
			v = k
		}
	}
	opt = &Options{Causal: c.causal, NeedWeights: c.needWeights, PerHeadWeights: c.perHead, Training: c.training, DropoutSeed: c.seed, ALiBi: c.alibi}
	if c.window {
		opt.Window = &Window{Left: int(c.seed % 4), Right: int(c.seed/4%3) - 1}
	}
	if c.softcap {
		opt.Softcap = 2.5
	}
	if c.sparse {
		opt.Patterns = []Pattern{{Kind: PatternLocal, Width: 1}, {Kind: PatternGlobal, Positions: []int{0}}}
		opt.Block = [2]int{2, 3}
	}
	switch c.normalizer {
	case 1:
		opt.Normalizer = &Normalizer{Kind: Sparsemax}
	case 2:
		opt.Normalizer = &Normalizer{Kind: Entmax, Alpha: 1.5}
	case 3:
		opt.Normalizer = &Normalizer{Kind: TopK, K: 2}
	}
	if c.pad {
		tk := c.tk
		if c.mismatch == mismatchKeyPadding {
			tk++
		}
		m := tensor.NewBool(c.lead(tk)...)
		for i := range m.Data {
			m.Data[i] = rng.Float64() < 0.3
		}
		opt.KeyPaddingMask = m
	}
	maskShape := func() []int {
		tq := c.tq
		if c.mismatch == mismatchAttnMask {
			tq++
		}
		if c.perHeadMask {
			return []int{c.b * heads, tq, c.tk}
		}
		return []int{tq, c.tk}
	}
	if c.mask {
		m := tensor.NewBool(maskShape()...)
		for i := range m.Data {
			m.Data[i] = rng.Float64() < 0.3
		}
		opt.AttnMask = m
	}
	if c.bias {
		a := tensor.New(maskShape()...)
		for i := range a.Data {
			a.Data[i] = float32(4*rng.Float64() - 2)
			if rng.Float64() < 0.1 {
				a.Data[i] = float32(math.Inf(-1))
			}
		}
		opt.AttnBias = a
	}
	if c.probe {
		g := tensor.New(c.lead(heads)...)
		for i := range g.Data {
			g.Data[i] = float32(3*rng.Float64() - 1)
		}
		shift := make([]float32, e)
		for i := range shift {
			shift[i] = float32(rng.Float64() - 0.5)
		}
		uniform := make([]bool, heads)
		uniform[heads-1] = true
		opt.Heads = HeadOptions{Keep: true, Gate: g, Shift: shift, Uniform: uniform}
	}
	tq := c.tq
	if c.mismatch == mismatchGradOutput {
		tq++
	}
	dy = randTensor(rng, c.shape(tq, e)...)
	return l, q, k, v, opt, dy, nil
}

// wantsError reports whether the call must fail with ErrShape (a mismatch, or self-attention on
// a layer whose kdim or vdim is not E).
func (c *shapeCase) wantsError() bool {
	selfBad := !c.cross && !c.cfg.sameDims()
	return selfBad || (c.mismatch != mismatchNone && c.mismatch != mismatchGradOutput)
}

// excludable reports whether the case has options that other options or the layer's Config may
// exclude.
func (c *shapeCase) excludable() bool {
	return c.window || c.softcap || c.alibi || c.sparse || c.normalizer != 0 || c.mqa || c.sinks || c.rotary || c.qkNorm
}

// checkShapeError fails unless err wraps ErrShape.
func checkShapeError(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrShape) {
		t.Fatalf("%s: error %v, want ErrShape", what, err)
	}
}

// checkTensor fails unless x has the shape want and finite values.
func checkTensor(t *testing.T, name string, x *tensor.Tensor, want []int) {
	t.Helper()
	if x == nil {
		t.Fatalf("%s is nil, want %v", name, want)
	}
	if !slices.Equal(x.Shape, want) || len(x.Data) != numElements(want) {
		t.Fatalf("%s is %v with %d values, want %v", name, x.Shape, len(x.Data), want)
	}
	for i, v := range x.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("%s[%d] = %v", name, i, v)
		}
	}
}

func numElements(shape []int) int {
	n, err := tensor.NumElements(shape)
	if err != nil {
		panic(err)
	}
	return n
}

// checkClose fails unless got is within 1e-4 of want relative to want's norm, or within 1e-5
// root-mean-square: values that cancel to nearly 0 (the gradient of a key on which the weights
// do not depend, say) keep float32's absolute rounding error.
func checkClose[F float32 | float64](t *testing.T, name string, got []F, want []float64) {
	t.Helper()
	checkWithin(t, name, got, want, 1e-4, 1e-5)
}

// checkWithin fails unless got is within rel of want relative to want's norm, or within rms
// root-mean-square.
func checkWithin[F float32 | float64](t *testing.T, name string, got []F, want []float64, rel, rms float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s has %d values, the reference %d", name, len(got), len(want))
	}
	var d2, w2 float64
	for i, w := range want {
		d := float64(got[i]) - w
		d2 += d * d
		w2 += w * w
	}
	if d, n := math.Sqrt(d2), float64(len(want)); d > rel*math.Sqrt(w2) && d > rms*math.Sqrt(n) {
		t.Fatalf("%s differs from the reference by %.3g (norm %.3g, %d values), want ≤ %g relative or %g RMS", name, d, math.Sqrt(w2), len(want), rel, rms)
	}
}

// check runs the case through Reference, Forward without and with weights, and (when c.backward)
// ForwardTrain and Backward on both the tiled and the dense path. It fails unless each either
// errs as it should or returns results of the right shapes, with finite values, that agree with
// the float64 Reference. It returns the layer, Forward's result with the case's options and the
// Reference trace, all nil when the case errs.
func (c shapeCase) check(t *testing.T) (*Layer, *Result, *Trace) {
	t.Helper()
	c.normalize()
	l, q, k, v, opt, dy, err := c.inputs()
	if err != nil {
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("New(%+v): %v, want nil or ErrConfig", c.cfg, err)
		}
		return nil, nil, nil
	}
	tr, err := l.Reference(q, k, v, opt)
	if err != nil && !c.wantsError() && errors.Is(err, ErrShape) && c.excludable() {
		// Options that exclude each other (a normalizer with dropout, say): every path must
		// refuse them as the reference does.
		for _, nw := range []bool{false, true} {
			o := *opt
			o.NeedWeights = nw
			_, ferr := l.Forward(q, k, v, &o)
			var r Result
			var s Saved
			terr := l.ForwardTrain(&r, &s, q, k, v, &o)
			o.Compute = ComputeBFloat16
			_, berr := l.Forward(q, k, v, &o)
			for _, e := range []error{ferr, terr, berr} {
				if e == nil || e.Error() != err.Error() {
					t.Fatalf("Reference: %v; Forward, ForwardTrain, Forward in bfloat16 (NeedWeights %v): %v, %v, %v", err, nw, ferr, terr, berr)
				}
			}
		}
		return nil, nil, nil
	}
	if c.wantsError() {
		checkShapeError(t, "Reference", err)
		for _, nw := range []bool{false, true} {
			o := *opt
			o.NeedWeights = nw
			_, err := l.Forward(q, k, v, &o)
			checkShapeError(t, fmt.Sprintf("Forward (NeedWeights %v)", nw), err)
			var r Result
			var s Saved
			checkShapeError(t, "ForwardTrain", l.ForwardTrain(&r, &s, q, k, v, &o))
			checkShapeError(t, "Backward after a failed ForwardTrain", l.Backward(&Grads{}, &s, dy))
			if c.bf16 {
				o.Compute = ComputeBFloat16
				_, err := l.Forward(q, k, v, &o)
				checkShapeError(t, fmt.Sprintf("Forward in bfloat16 (NeedWeights %v)", nw), err)
			}
		}
		return nil, nil, nil
	}
	if err != nil {
		t.Fatalf("Reference: %v", err)
	}
	e, heads, tkx := c.cfg.EmbedDim, c.cfg.NumHeads, tr.Tk
	wantTkx := c.tk
	if c.cfg.AddBiasKV {
		wantTkx++
	}
	if c.cfg.AddZeroAttn {
		wantTkx++
	}
	if tr.B != c.b || tr.Tq != c.tq || tkx != wantTkx {
		t.Fatalf("Reference sizes B %d Tq %d Tk %d, want %d %d %d", tr.B, tr.Tq, tr.Tk, c.b, c.tq, wantTkx)
	}
	if len(tr.Output) != c.b*c.tq*e || len(tr.Weights) != c.b*heads*c.tq*tkx || len(tr.Concat) != c.b*c.tq*e {
		t.Fatalf("Reference holds %d outputs, %d weights, %d head outputs; want %d, %d, %d", len(tr.Output), len(tr.Weights), len(tr.Concat), c.b*c.tq*e, c.b*heads*c.tq*tkx, c.b*c.tq*e)
	}
	avg := make([]float64, c.b*c.tq*tkx) // the reference's weights averaged over heads
	for b := range c.b {
		for h := range heads {
			for i := range c.tq * tkx {
				avg[b*c.tq*tkx+i] += tr.Weights[(b*heads+h)*c.tq*tkx+i] / float64(heads)
			}
		}
	}
	outShape := c.shape(c.tq, e)
	wShape := c.lead(c.tq, tkx)
	if c.perHead {
		wShape = c.lead(heads, c.tq, tkx)
	}
	checkResult := func(name string, r *Result, weights bool) {
		t.Helper()
		checkTensor(t, name+" output", r.Output, outShape)
		checkClose(t, name+" output", r.Output.Data, tr.Output)
		if r.FullyMasked != tr.FullyMasked {
			t.Fatalf("%s: %d fully masked rows, the reference %d", name, r.FullyMasked, tr.FullyMasked)
		}
		if !weights {
			if r.Weights != nil {
				t.Fatalf("%s returned weights %v without NeedWeights", name, r.Weights.Shape)
			}
		} else {
			checkTensor(t, name+" weights", r.Weights, wShape)
			want := avg
			if c.perHead {
				want = tr.Weights
			}
			checkClose(t, name+" weights", r.Weights.Data, want)
		}
		if c.probe {
			checkTensor(t, name+" heads", r.Heads, outShape)
			checkClose(t, name+" heads", r.Heads.Data, tr.Concat)
		} else if r.Heads != nil {
			t.Fatalf("%s kept the heads unasked", name)
		}
	}
	var res *Result
	for _, nw := range []bool{false, true} {
		o := *opt
		o.NeedWeights = nw
		r, err := l.Forward(q, k, v, &o)
		if err != nil {
			t.Fatalf("Forward (NeedWeights %v): %v", nw, err)
		}
		checkResult(fmt.Sprintf("Forward (NeedWeights %v)", nw), r, nw)
		if nw == c.needWeights {
			res = r
		}
	}
	if c.bf16 {
		// bfloat16 rounds the inputs, weights, Q, K, V and the attention weights to 8 bits
		// (2⁻⁹ relative each): a few 10⁻³ of the output's norm (BENCHMARKS.md), within 5·10⁻² on
		// these small random cases, or within 10⁻² RMS where the output is much smaller than
		// its terms (the output projection's sums cancel).
		for _, nw := range []bool{false, true} {
			o := *opt
			o.NeedWeights, o.Compute = nw, ComputeBFloat16
			r, err := l.Forward(q, k, v, &o)
			if err != nil {
				t.Fatalf("Forward in bfloat16 (NeedWeights %v): %v", nw, err)
			}
			name := fmt.Sprintf("Forward in bfloat16 (NeedWeights %v)", nw)
			checkTensor(t, name+" output", r.Output, outShape)
			checkWithin(t, name+" output", r.Output.Data, tr.Output, 5e-2, 1e-2)
			if r.FullyMasked != tr.FullyMasked {
				t.Fatalf("%s: %d fully masked rows, the reference %d", name, r.FullyMasked, tr.FullyMasked)
			}
			if nw {
				checkTensor(t, name+" weights", r.Weights, wShape)
			}
		}
	}
	if !c.backward {
		return l, res, tr
	}

	// The gradients: derived by refGrads, or by finite differences for the options it does not
	// derive, except with a normalizer, whose kinks (keys entering or leaving a row's support)
	// a step may cross; those cases check the gradients' shapes and finiteness only.
	var want map[string][]float64
	switch {
	case !c.excludable():
		want = refGrads(t, l, q, k, v, opt, dy.Data)
		if k != nil && k == v {
			want["key"] = slices.Clone(want["key"])
			for j, y := range want["value"] {
				want["key"][j] += y
			}
			delete(want, "value")
		}
	case c.normalizer == 0:
		want = fdGrads(t, l, q, k, v, opt, dy.Data, 1.0/1024)
	}
	for _, nw := range []bool{false, true} {
		o := *opt
		o.NeedWeights = nw
		name := fmt.Sprintf("ForwardTrain (NeedWeights %v)", nw)
		var r Result
		var s Saved
		if err := l.ForwardTrain(&r, &s, q, k, v, &o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkResult(name, &r, nw)
		g := Grads{}
		if hin := headsIn(opt, c.b, c.tq, e); hin != nil {
			g.HeadsIn = &tensor.Tensor{Shape: outShape, Data: hin.Data}
		}
		err := l.Backward(&g, &s, dy)
		if c.mismatch == mismatchGradOutput {
			checkShapeError(t, "Backward", err)
			continue
		}
		if err != nil {
			t.Fatalf("Backward after %s: %v", name, err)
		}
		got := map[string][]float32{}
		checkTensor(t, "Grads.Query", g.Query, q.Shape)
		got["query"] = g.Query.Data
		if c.cross {
			checkTensor(t, "Grads.Key", g.Key, k.Shape)
			checkTensor(t, "Grads.Value", g.Value, v.Shape)
			got["key"], got["value"] = g.Key.Data, g.Value.Data
			if k == v {
				sum := slices.Clone(g.Key.Data)
				for i, x := range g.Value.Data {
					sum[i] += x
				}
				got["key"] = sum
				delete(got, "value")
			}
		} else if g.Key != nil || g.Value != nil {
			t.Fatal("Backward of self-attention filled Grads.Key or Grads.Value")
		}
		if c.probe {
			checkTensor(t, "Grads.Gate", g.Gate, opt.Heads.Gate.Shape)
			got["gate"] = g.Gate.Data
		}
		for i, p := range l.Parameters() {
			gp := g.Params[i]
			checkTensor(t, "gradient of "+p.Name, gp.T, p.T.Shape)
			got[p.Name] = gp.T.Data
		}
		for name, w := range want {
			checkClose(t, "gradient of "+name, got[name], w)
		}
		if want != nil && len(got) != len(want) {
			t.Fatalf("gradients of %d tensors, the reference has %d", len(got), len(want))
		}
	}
	return l, res, tr
}

// emptyCases are the calls with an empty batch, query sequence or key sequence, on layers with
// and without appended keys, in self- and cross-attention, with masks and head options.
func emptyCases() map[string]shapeCase {
	base := Config{EmbedDim: 8, NumHeads: 2, Seed: 3}
	cross := Config{EmbedDim: 8, NumHeads: 2, KDim: 3, VDim: 5, Seed: 4}
	kv := Config{EmbedDim: 8, NumHeads: 4, AddBiasKV: true, Seed: 5}
	zero := Config{EmbedDim: 6, NumHeads: 3, AddZeroAttn: true, Seed: 6}
	all := Config{EmbedDim: 8, NumHeads: 2, AddBiasKV: true, AddZeroAttn: true, Dropout: 0.2, Seed: 7}
	cases := map[string]shapeCase{}
	for name, c := range map[string]shapeCase{
		"B=0 self":                {cfg: base, b: 0, tq: 5},
		"Tq=0 self":               {cfg: base, b: 1, tq: 0},
		"Tq=0 unbatched":          {cfg: base, tq: 0, unbatched: true},
		"B=0 cross":               {cfg: cross, b: 0, tq: 3, tk: 4, cross: true},
		"Tq=0 cross":              {cfg: cross, b: 2, tq: 0, tk: 4, cross: true},
		"Tk=0 cross":              {cfg: cross, b: 2, tq: 3, tk: 0, cross: true},
		"Tk=0 key is value":       {cfg: base, b: 2, tq: 3, tk: 0, cross: true, kvSame: true},
		"Tk=0 unbatched":          {cfg: cross, tq: 3, tk: 0, cross: true, unbatched: true},
		"Tq=Tk=0 cross":           {cfg: cross, b: 2, tq: 0, tk: 0, cross: true},
		"Tk=0 add_bias_kv":        {cfg: kv, b: 2, tq: 3, tk: 0, cross: true},
		"Tk=0 add_zero_attn":      {cfg: zero, b: 2, tq: 3, tk: 0, cross: true},
		"Tk=0 bias_kv zero_attn":  {cfg: all, b: 2, tq: 3, tk: 0, cross: true, training: true},
		"B=0 bias_kv zero_attn":   {cfg: all, b: 0, tq: 3, training: true},
		"Tq=0 add_bias_kv":        {cfg: kv, b: 2, tq: 0, tk: 3, cross: true},
		"B=0 no bias":             {cfg: Config{EmbedDim: 4, NumHeads: 1, NoBias: true}, b: 0, tq: 2},
		"Tk=0 no bias":            {cfg: Config{EmbedDim: 4, NumHeads: 1, NoBias: true, KDim: 2, VDim: 2}, b: 1, tq: 2, tk: 0, cross: true},
		"B=0 wide":                {cfg: Config{EmbedDim: 264, NumHeads: 2}, b: 0, tq: 2},
		"Tq=0 wide":               {cfg: Config{EmbedDim: 264, NumHeads: 2}, b: 1, tq: 0},
		"Tk=0 wide keys":          {cfg: Config{EmbedDim: 8, NumHeads: 2, KDim: 300, VDim: 260}, b: 2, tq: 3, tk: 0, cross: true},
		"Tk=0 heads of own sizes": {cfg: Config{EmbedDim: 9, NumHeads: 3, HeadDims: []int{2, 3, 4}, HeadScales: []float64{1, 0.5, 0}}, b: 2, tq: 3, tk: 0, cross: true},
	} {
		c.backward = true
		for _, o := range []struct {
			name string
			set  func(*shapeCase)
		}{
			{"", func(*shapeCase) {}},
			{", weights", func(c *shapeCase) { c.needWeights = true }},
			{", per-head weights", func(c *shapeCase) { c.needWeights, c.perHead = true, true }},
			{", masks", func(c *shapeCase) { c.causal, c.pad, c.mask, c.bias = true, true, true, true }},
			{", per-head masks", func(c *shapeCase) { c.needWeights, c.pad, c.mask, c.bias, c.perHeadMask = true, true, true, true, true }},
			{", probe", func(c *shapeCase) { c.probe, c.needWeights = true, true }},
		} {
			v := c
			o.set(&v)
			v.seed = uint64(len(cases) + 1)
			cases[name+o.name] = v
		}
	}
	return cases
}

// TestEmptyInputs runs every empty case through every path: an empty batch or query sequence
// gives an empty output and weights and adds nothing to the gradients; an empty key sequence
// gives every query no key, so that its heads output 0 and the layer out_proj.bias.
func TestEmptyInputs(t *testing.T) {
	for name, c := range emptyCases() {
		t.Run(name, func(t *testing.T) {
			l, r, tr := c.check(t)
			if l == nil {
				t.Fatal("the case failed to build")
			}
			c.normalize()
			e, heads := c.cfg.EmbedDim, c.cfg.NumHeads
			if c.b*c.tq == 0 {
				if len(r.Output.Data) != 0 || r.FullyMasked != 0 || (r.Weights != nil && len(r.Weights.Data) != 0) {
					t.Errorf("empty batch or query: %d outputs, %d fully masked rows", len(r.Output.Data), r.FullyMasked)
				}
				return
			}
			if tr.Tk != 0 { // appended keys: every query has a key, checked against the reference
				return
			}
			if r.FullyMasked != c.b*heads*c.tq {
				t.Errorf("Tk = 0: %d fully masked rows, want B·H·Tq = %d", r.FullyMasked, c.b*heads*c.tq)
			}
			if c.probe { // the output is out_proj(Gate·0 + Shift), checked against the reference
				return
			}
			bias := l.param("out_proj.bias")
			for i, x := range r.Output.Data {
				want := float32(0)
				if bias != nil {
					want = bias[i%e]
				}
				if x != want {
					t.Fatalf("Tk = 0: output[%d] = %v, want out_proj.bias %v", i, x, want)
				}
			}
		})
	}
}

// FuzzForwardShapes builds a layer and inputs from small sizes — each at most 9, zeros included
// — with any combination of options and, sometimes, one input of a wrong size. Every path must
// either fail with ErrConfig or ErrShape or agree with Reference (see shapeCase.check); none may
// panic. The bits of flags switch the options on in the order of the fields below.
func FuzzForwardShapes(f *testing.F) {
	add := func(b, tq, tk, e, h, kdim, vdim, mismatch uint8, flags uint32) {
		f.Add(b, tq, tk, e, h, kdim, vdim, mismatch, flags, uint64(flags)+1)
	}
	const cross, kvSame, unbatched, needWeights, backward, bf16 = 1 << 3, 1 << 4, 1 << 5, 1 << 7, 1 << 15, 1 << 19
	const window, softcap, alibi, sparse, mqa, sinks, rotary, qkNorm = 1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 26, 1 << 27, 1 << 28, 1 << 29
	add(1, 0, 0, 4, 2, 0, 0, 0xff, backward)                   // the 70-byte file of cmd/mha: query [1 0 4]
	add(0, 5, 0, 8, 2, 0, 0, 0xff, backward|needWeights)       // B = 0
	add(1, 0, 0, 4, 2, 0, 0, 0xff, unbatched|backward)         // query [0 4]
	add(2, 3, 0, 8, 2, 3, 5, 0xff, cross|backward)             // Tk = 0
	add(2, 3, 0, 8, 4, 0, 0, 0xff, cross|kvSame|backward|0x6)  // Tk = 0 with add_bias_kv and add_zero_attn
	add(2, 3, 4, 6, 3, 2, 7, 0xff, 0xffff)                     // everything on
	add(2, 3, 4, 6, 3, 2, 7, mismatchGradOutput, cross|0xbf00) // a wrong gradOutput
	add(2, 3, 4, 6, 3, 0, 0, mismatchAttnMask, 0x1e00)         // a wrong attn_mask
	add(2, 9, 9, 8, 2, 0, 0, 0xff, bf16|0x3fff)                // bfloat16 with everything on
	add(1, 7, 0, 6, 3, 0, 0, 0xff, bf16|cross|0x7)             // bfloat16, Tk = 0
	add(2, 3, 4, 6, 3, 0, 0, mismatchQueryWidth, bf16)         // bfloat16, a wrong query
	add(2, 9, 9, 8, 4, 0, 0, 0xff, window|softcap|alibi|mqa|rotary|backward|needWeights|bf16)
	add(2, 9, 9, 8, 2, 0, 0, 0xff, sparse|1<<24|sinks|cross|backward|0x600)    // sparsemax, sinks: an error
	add(1, 9, 7, 6, 3, 0, 0, 0xff, sparse|2<<24|cross|0x640|backward|bf16)     // entmax-1.5, causal, padding, mask
	add(2, 8, 0, 6, 2, 0, 0, 0xff, sparse|3<<24|window|backward|needWeights|4) // top-2, add_zero_attn
	add(2, 9, 9, 8, 4, 0, 0, 0xff, mqa|rotary|qkNorm|backward|needWeights|bf16|0x40)
	add(2, 5, 7, 6, 3, 0, 0, 0xff, qkNorm|cross|backward|1) // qk-norm without biases
	add(2, 5, 0, 6, 3, 0, 0, 0xff, qkNorm|2|backward)       // qk-norm with add_bias_kv: an error
	f.Fuzz(func(t *testing.T, b, tq, tk, e, h, kdim, vdim, mismatch uint8, flags uint32, seed uint64) {
		bit := func(i int) bool { return flags>>i&1 != 0 }
		c := shapeCase{
			cfg: Config{EmbedDim: int(e % 10), NumHeads: int(h % 5), KDim: int(kdim % 10), VDim: int(vdim % 10),
				NoBias: bit(0), AddBiasKV: bit(1), AddZeroAttn: bit(2), Seed: seed},
			b: int(b % 4), tq: int(tq % 10), tk: int(tk % 10),
			cross: bit(3), kvSame: bit(4), unbatched: bit(5), causal: bit(6), needWeights: bit(7), perHead: bit(8),
			pad: bit(9), mask: bit(10), bias: bit(11), perHeadMask: bit(12), probe: bit(13), training: bit(14), backward: bit(15),
			bf16: bit(19), window: bit(20), softcap: bit(21), alibi: bit(22), sparse: bit(23), normalizer: int(flags >> 24 & 3),
			mqa: bit(26), sinks: bit(27), rotary: bit(28), qkNorm: bit(29),
			seed: seed,
		}
		if heads := c.cfg.NumHeads; !bit(18) && heads > 0 && c.cfg.EmbedDim >= heads {
			c.cfg.EmbedDim -= c.cfg.EmbedDim % heads // a divisible size, unless bit 18 asks for any
		}
		if m := int(mismatch); m < mismatchKinds {
			c.mismatch = m
		}
		if heads, dim := c.cfg.NumHeads, c.cfg.EmbedDim; bit(16) && heads > 0 && dim >= heads {
			c.cfg.HeadDims = make([]int, heads) // heads of sizes 1, 1, …, the rest
			for i := range heads {
				c.cfg.HeadDims[i] = 1
			}
			c.cfg.HeadDims[heads-1] = dim - heads + 1
		}
		if heads := c.cfg.NumHeads; bit(17) && heads > 0 {
			c.cfg.HeadScales = make([]float64, heads)
			for i := range heads {
				c.cfg.HeadScales[i] = float64(i) / 2 // 0 for the first head: uniform
			}
		}
		c.check(t)
	})
}

// TestUnbackedSizes checks calls in which a size of 0 leaves the others backed by no value: a
// few bytes of input asking for terabytes of outputs or hours of pairs must be refused at once,
// and empty calls whose sizes their values back must still run.
func TestUnbackedSizes(t *testing.T) {
	empty := func(shape ...int) *tensor.Tensor { return &tensor.Tensor{Shape: shape} }
	scale := &SDPAOptions{Scale: 1}
	for name, c := range map[string]struct {
		q, k, v *tensor.Tensor
		opt     *SDPAOptions
	}{
		"D = 0, Tq = Tk = 2²⁰":   {empty(1, 1, 1<<20, 0), empty(1, 1, 1<<20, 0), empty(1, 1, 1<<20, 0), scale},
		"Tk = 0, Dv = 2³⁵":       {sdpaRand(1, 1, 1, 1, 1, 4), empty(1, 1, 0, 4), empty(1, 1, 0, 1<<35), nil},
		"Tq = 0, B = 2³⁰":        {empty(1<<30, 1, 0, 4), empty(1<<30, 1, 0, 4), empty(1<<30, 1, 0, 4), nil},
		"D = 0, B = 10⁹":         {empty(1e9, 1, 1, 0), empty(1e9, 1, 1, 0), empty(1e9, 1, 1, 0), scale}, // 10⁹ pairs, but 1.7·10¹⁰ values of Kᵀ
		"B = 0, Hq = 2⁴⁰, ALiBi": {empty(0, 1<<40, 1, 1), empty(0, 1, 1, 1), empty(0, 1, 1, 1), &SDPAOptions{ALiBi: true}},
	} {
		if _, err := SDPA(c.q, c.k, c.v, c.opt); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "no value backs") {
			t.Errorf("SDPA, %s: %v, want ErrShape for sizes no value backs", name, err)
		}
	}
	for name, c := range map[string]struct{ q, k, v *tensor.Tensor }{
		"B = 0":  {empty(0, 4, 7, 8), empty(0, 2, 9, 8), empty(0, 2, 9, 8)},
		"Tq = 0": {empty(2, 4, 0, 8), sdpaRand(1, 1, 2, 2, 9, 8), sdpaRand(2, 1, 2, 2, 9, 8)},
		"Tk = 0": {sdpaRand(1, 1, 2, 4, 7, 8), empty(2, 2, 0, 8), empty(2, 2, 0, 8)},
	} {
		r, err := SDPA(c.q, c.k, c.v, &SDPAOptions{NeedLSE: true, NeedWeights: true})
		if err != nil {
			t.Errorf("SDPA, %s: %v", name, err)
			continue
		}
		if want := []int{c.q.Shape[0], c.q.Shape[1], c.q.Shape[2], c.v.Shape[3]}; !slices.Equal(r.Out.Shape, want) {
			t.Errorf("SDPA, %s: output %v, want %v", name, r.Out.Shape, want)
		}
	}

	l, err := New(Config{EmbedDim: 16, NumHeads: 2, AddBiasKV: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Forward(empty(1_000_000_000, 0, 16), nil, nil, nil); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "no value backs") {
		t.Errorf("Forward, query [10⁹ 0 16]: %v, want ErrShape for sizes no value backs", err)
	}
	r, err := l.Forward(empty(3, 0, 16), nil, nil, nil)
	if err != nil || !slices.Equal(r.Output.Shape, []int{3, 0, 16}) {
		t.Errorf("Forward, query [3 0 16]: %v, %v, want an output [3 0 16]", r, err)
	}
}
