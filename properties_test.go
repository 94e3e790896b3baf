package mha

import (
	"errors"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mhalab/mha/tensor"
)

func randTensor(rng *tensor.RNG, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	rng.Normal(t, 1)
	return t
}

func newLayer(t *testing.T, cfg Config) *Layer {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Non-zero biases, so that tests see them (PyTorch initialises them to zero).
	rng := tensor.NewRNG(cfg.Seed + 100)
	for _, p := range l.Parameters() {
		switch {
		case strings.Contains(p.Name, "bias") || p.Name == "sinks":
			rng.Normal(p.T, 0.3)
		case strings.HasSuffix(p.Name, "norm.weight"): // gains about 1
			rng.Normal(p.T, 0.3)
			for i := range p.T.Data {
				p.T.Data[i]++
			}
		}
	}
	return l
}

func forward(t *testing.T, l *Layer, q, k, v *tensor.Tensor, opt *Options) *Result {
	t.Helper()
	r, err := l.Forward(q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestForwardMatchesReference checks the float32 path against the float64 one on random cases
// covering every option.
func TestForwardMatchesReference(t *testing.T) {
	cases := []struct {
		name      string
		cfg       Config
		b, tq, tk int
		cross     bool
		opt       Options
	}{
		{"self", Config{EmbedDim: 16, NumHeads: 4}, 2, 9, 9, false, Options{}},
		{"cross kdim vdim", Config{EmbedDim: 12, NumHeads: 3, KDim: 5, VDim: 7}, 2, 4, 11, true, Options{}},
		{"causal bias_kv zero_attn", Config{EmbedDim: 8, NumHeads: 2, AddBiasKV: true, AddZeroAttn: true}, 1, 6, 6, false, Options{Causal: true}},
		{"no bias", Config{EmbedDim: 10, NumHeads: 5, NoBias: true}, 3, 1, 7, true, Options{}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Seed = uint64(i)
			l := newLayer(t, c.cfg)
			rng := tensor.NewRNG(uint64(i))
			q := randTensor(rng, c.b, c.tq, c.cfg.EmbedDim)
			var k, v *tensor.Tensor
			if c.cross {
				k = randTensor(rng, c.b, c.tk, c.cfg.kdim())
				v = randTensor(rng, c.b, c.tk, c.cfg.vdim())
			}
			c.opt.NeedWeights, c.opt.PerHeadWeights = true, true
			r := forward(t, l, q, k, v, &c.opt)
			tr, err := l.Reference(q, k, v, &c.opt)
			if err != nil {
				t.Fatal(err)
			}
			if e := tensor.RelError(r.Output.Data, tr.Output); e > 1e-5 {
				t.Errorf("output relative error %.3g, want ≤ 1e-5", e)
			}
			if e := tensor.RelError(r.Weights.Data, tr.Weights); e > 1e-5 {
				t.Errorf("weights relative error %.3g, want ≤ 1e-5", e)
			}
		})
	}
}

// TestSingleHeadIsPlainAttention checks H = 1 against softmax(q·kᵀ/√E)·v written out by hand.
func TestSingleHeadIsPlainAttention(t *testing.T) {
	const e, tq, tk = 6, 3, 5
	l := newLayer(t, Config{EmbedDim: e, NumHeads: 1, Seed: 7})
	rng := tensor.NewRNG(1)
	x, y := randTensor(rng, 1, tq, e), randTensor(rng, 1, tk, e)
	tr, err := l.Reference(x, y, y, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, b := l.param("in_proj_weight"), l.param("in_proj_bias")
	proj := func(in []float32, rows, block int) [][]float64 {
		out := make([][]float64, rows)
		for r := range rows {
			out[r] = make([]float64, e)
			for o := range e {
				s := float64(b[block*e+o])
				for i := range e {
					s += float64(in[r*e+i]) * float64(w[(block*e+o)*e+i])
				}
				out[r][o] = s
			}
		}
		return out
	}
	q, k, v := proj(x.Data, tq, 0), proj(y.Data, tk, 1), proj(y.Data, tk, 2)
	wo, bo := l.param("out_proj.weight"), l.param("out_proj.bias")
	var want []float64
	for i := range tq {
		logits := make([]float64, tk)
		m := math.Inf(-1)
		for j := range tk {
			for c := range e {
				logits[j] += q[i][c] * k[j][c]
			}
			logits[j] /= math.Sqrt(e)
			m = max(m, logits[j])
		}
		sum := 0.0
		for j := range logits {
			logits[j] = math.Exp(logits[j] - m)
			sum += logits[j]
		}
		head := make([]float64, e)
		for j := range tk {
			for c := range e {
				head[c] += logits[j] / sum * v[j][c]
			}
		}
		for o := range e {
			s := float64(bo[o])
			for c := range e {
				s += head[c] * float64(wo[o*e+c])
			}
			want = append(want, s)
		}
	}
	for i := range want {
		if d := math.Abs(tr.Output[i] - want[i]); d > 1e-12 {
			t.Fatalf("output[%d] = %v, want %v", i, tr.Output[i], want[i])
		}
	}
}

// TestWeightRowsSumToOne checks that every row of weights is a distribution.
func TestWeightRowsSumToOne(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, AddBiasKV: true, Seed: 3})
	rng := tensor.NewRNG(2)
	q := randTensor(rng, 2, 7, 8)
	pad := tensor.NewBool(2, 7)
	pad.Data[3], pad.Data[12] = true, true
	r := forward(t, l, q, nil, nil, &Options{NeedWeights: true, PerHeadWeights: true, KeyPaddingMask: pad, Causal: true})
	tk := r.Weights.Shape[3]
	for row := 0; row < len(r.Weights.Data); row += tk {
		s := 0.0
		for _, w := range r.Weights.Data[row : row+tk] {
			if w < 0 {
				t.Fatalf("negative weight %v", w)
			}
			s += float64(w)
		}
		if math.Abs(s-1) > 1e-5 {
			t.Fatalf("row %d sums to %v", row/tk, s)
		}
	}
}

// TestMaskedKeysHaveNoInfluence changes padded keys and values and expects the same output.
func TestMaskedKeysHaveNoInfluence(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 4, Seed: 4})
	rng := tensor.NewRNG(3)
	q, k, v := randTensor(rng, 2, 3, 8), randTensor(rng, 2, 6, 8), randTensor(rng, 2, 6, 8)
	pad := tensor.NewBool(2, 6)
	pad.Data[1], pad.Data[5], pad.Data[6+2] = true, true, true
	mask := tensor.NewBool(3, 6)
	mask.Data[0*6+4] = true
	opt := &Options{KeyPaddingMask: pad, AttnMask: mask}
	before := forward(t, l, q, k, v, opt)
	for _, idx := range []int{1, 5, 6 + 2} {
		b, j := idx/6, idx%6
		for c := range 8 {
			k.Data[(b*6+j)*8+c] = 1e3
			v.Data[(b*6+j)*8+c] = -1e3
		}
	}
	after := forward(t, l, q, k, v, opt)
	if d := maxAbsDiff(before.Output.Data, after.Output.Data); d != 0 {
		t.Errorf("changing masked keys moved the output by %g", d)
	}
}

// TestPermutingKeysChangesNothing permutes keys, values and the masks' key axis together.
func TestPermutingKeysChangesNothing(t *testing.T) {
	const e, tq, tk = 8, 4, 5
	l := newLayer(t, Config{EmbedDim: e, NumHeads: 2, Seed: 5})
	rng := tensor.NewRNG(4)
	q, k, v := randTensor(rng, 1, tq, e), randTensor(rng, 1, tk, e), randTensor(rng, 1, tk, e)
	add := randTensor(rng, tq, tk)
	perm := []int{3, 0, 4, 2, 1}
	pk, pv, padd := k.Clone(), v.Clone(), add.Clone()
	for j, src := range perm {
		copy(pk.Data[j*e:(j+1)*e], k.Data[src*e:(src+1)*e])
		copy(pv.Data[j*e:(j+1)*e], v.Data[src*e:(src+1)*e])
		for i := range tq {
			padd.Data[i*tk+j] = add.Data[i*tk+src]
		}
	}
	a := forward(t, l, q, k, v, &Options{AttnBias: add})
	b := forward(t, l, q, pk, pv, &Options{AttnBias: padd})
	if d := maxAbsDiff(a.Output.Data, b.Output.Data); d > 1e-6 {
		t.Errorf("permuting keys moved the output by %g", d)
	}
}

// TestAveragedWeightsAreTheMeanOfHeads compares the two weight forms.
func TestAveragedWeightsAreTheMeanOfHeads(t *testing.T) {
	const h = 3
	l := newLayer(t, Config{EmbedDim: 9, NumHeads: h, Seed: 6})
	q := randTensor(tensor.NewRNG(5), 2, 4, 9)
	per := forward(t, l, q, nil, nil, &Options{NeedWeights: true, PerHeadWeights: true}).Weights
	avg := forward(t, l, q, nil, nil, &Options{NeedWeights: true}).Weights
	if got, want := avg.Shape, []int{2, 4, 4}; !equalInts(got, want) {
		t.Fatalf("averaged weights are %v, want %v", got, want)
	}
	n := 16
	for b := range 2 {
		for i := range n {
			s := 0.0
			for hh := range h {
				s += float64(per.Data[(b*h+hh)*n+i])
			}
			if d := math.Abs(s/h - float64(avg.Data[b*n+i])); d > 1e-6 {
				t.Fatalf("batch %d entry %d: mean of heads %v, averaged %v", b, i, s/h, avg.Data[b*n+i])
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFullyMaskedRowsAreZero masks every key of some queries and expects zeros, not NaN.
func TestFullyMaskedRowsAreZero(t *testing.T) {
	const e, tq, tk, h = 4, 3, 4, 2
	l := newLayer(t, Config{EmbedDim: e, NumHeads: h, NoBias: true, Seed: 8})
	rng := tensor.NewRNG(6)
	q, k := randTensor(rng, 1, tq, e), randTensor(rng, 1, tk, e)
	mask := tensor.NewBool(tq, tk)
	for j := range tk {
		mask.Data[1*tk+j] = true // query 1 sees nothing
	}
	opt := &Options{AttnMask: mask, NeedWeights: true, PerHeadWeights: true}
	r := forward(t, l, q, k, k, opt)
	if r.FullyMasked != h {
		t.Errorf("FullyMasked = %d, want %d (one row in each head)", r.FullyMasked, h)
	}
	for c := range e {
		if got := r.Output.Data[1*e+c]; got != 0 {
			t.Errorf("output of the fully masked query [%d] = %v, want 0 (no bias)", c, got)
		}
	}
	for i, w := range r.Weights.Data {
		if math.IsNaN(float64(w)) {
			t.Fatalf("weight %d is NaN", i)
		}
		if (i/tk)%tq == 1 && w != 0 {
			t.Fatalf("weight %d of the fully masked row is %v, want 0", i, w)
		}
	}
	for _, v := range r.Output.Data {
		if math.IsNaN(float64(v)) {
			t.Fatal("output holds NaN")
		}
	}
	// All-padding keys, and a float mask of −Inf, are fully masked too.
	pad := tensor.NewBool(1, tk)
	for j := range pad.Data {
		pad.Data[j] = true
	}
	if r := forward(t, l, q, k, k, &Options{KeyPaddingMask: pad}); r.FullyMasked != h*tq {
		t.Errorf("all keys padded: FullyMasked = %d, want %d", r.FullyMasked, h*tq)
	}
	inf := tensor.New(tq, tk)
	for i := range inf.Data {
		inf.Data[i] = float32(math.Inf(-1))
	}
	if r := forward(t, l, q, k, k, &Options{AttnBias: inf}); r.FullyMasked != h*tq {
		t.Errorf("−Inf bias: FullyMasked = %d, want %d", r.FullyMasked, h*tq)
	}
}

// TestConcurrentForward runs one layer from many goroutines; run it with -race.
func TestConcurrentForward(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, Seed: 9})
	q := randTensor(tensor.NewRNG(7), 2, 5, 8)
	want := forward(t, l, q, nil, nil, nil).Output.Data
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			r, err := l.Forward(q, nil, nil, &Options{NeedWeights: true})
			if err != nil {
				errs <- err
				return
			}
			if d := maxAbsDiff(r.Output.Data, want); d != 0 {
				errs <- errors.New("concurrent result differs")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDropout checks that training drops about P of the weights, reproducibly from the seed,
// and that evaluation ignores dropout.
func TestDropout(t *testing.T) {
	const p = 0.25
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, Dropout: p, Seed: 10})
	q := randTensor(tensor.NewRNG(8), 4, 30, 8)
	opt := &Options{Training: true, DropoutSeed: 1, NeedWeights: true, PerHeadWeights: true}
	a, b := forward(t, l, q, nil, nil, opt), forward(t, l, q, nil, nil, opt)
	if maxAbsDiff(a.Output.Data, b.Output.Data) != 0 {
		t.Error("the same dropout seed gave different outputs")
	}
	zeros := 0
	for _, w := range a.Weights.Data {
		if w == 0 {
			zeros++
		}
	}
	if frac := float64(zeros) / float64(len(a.Weights.Data)); math.Abs(frac-p) > 0.03 {
		t.Errorf("dropped %.3f of the weights, want about %v", frac, p)
	}
	eval := forward(t, l, q, nil, nil, &Options{NeedWeights: true, PerHeadWeights: true})
	tr, _ := l.Reference(q, nil, nil, nil)
	if e := tensor.RelError(eval.Output.Data, tr.Output); e > 1e-5 {
		t.Errorf("evaluation output differs from the dropout-free reference by %.3g", e)
	}
}

func TestNumParams(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{EmbedDim: 512, NumHeads: 8}, 4*512*512 + 4*512},
		{Config{EmbedDim: 4, NumHeads: 2}, 4*16 + 16},
		{Config{EmbedDim: 4, NumHeads: 2, NoBias: true}, 4 * 16},
		{Config{EmbedDim: 8, NumHeads: 2, KDim: 3, VDim: 5, AddBiasKV: true}, 64 + 24 + 40 + 24 + 16 + 64 + 8},
	} {
		l, err := New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.NumParams(); got != c.want {
			t.Errorf("%+v: NumParams = %d, want %d", c.cfg, got, c.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{EmbedDim: 0, NumHeads: 1}, "embed dim is 0, want > 0"},
		{Config{EmbedDim: 8, NumHeads: 0}, "num heads is 0"},
		{Config{EmbedDim: 10, NumHeads: 4}, "embed dim 10 is not divisible by num heads 4"},
		{Config{EmbedDim: 8, NumHeads: 2, KDim: -1}, "kdim is -1"},
		{Config{EmbedDim: 8, NumHeads: 2, Dropout: 1}, "dropout is 1"},
		{Config{EmbedDim: 8, NumHeads: 2, Dropout: math.NaN()}, "dropout is NaN"},
		{Config{EmbedDim: 1 << 30, NumHeads: 2}, "larger than"},
	} {
		_, err := New(c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want ErrConfig saying %q", c.cfg, err, c.want)
		}
	}
}

func TestShapeErrors(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, Seed: 11})
	cross := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, KDim: 3, VDim: 5, Seed: 11})
	q := tensor.New(2, 5, 8)
	bad := &tensor.Tensor{Shape: []int{2, 5, 8}, Data: make([]float32, 7)}
	for _, c := range []struct {
		l       *Layer
		q, k, v *tensor.Tensor
		opt     *Options
		want    string
	}{
		{l, nil, nil, nil, nil, "query is nil"},
		{l, tensor.New(2, 5, 7), nil, nil, nil, "query is [2 5 7], want [B Tq 8]"},
		{l, tensor.New(5), nil, nil, nil, "query is [5], want [B Tq 8] or unbatched"},
		{l, bad, nil, nil, nil, "holds 7 values"},
		{l, q, tensor.New(2, 5, 8), nil, nil, "give key and value together"},
		{l, q, tensor.New(3, 5, 8), tensor.New(3, 5, 8), nil, "batch sizes differ: query 2, key 3"},
		{l, q, tensor.New(2, 4, 8), tensor.New(2, 5, 8), nil, "key has 4 rows and value 5"},
		{l, tensor.New(5, 8), tensor.New(2, 5, 8), tensor.New(2, 5, 8), nil, "want unbatched [Tk 8]"},
		{cross, q, nil, nil, nil, "self-attention needs kdim = vdim = E"},
		{cross, q, tensor.New(2, 5, 8), tensor.New(2, 5, 5), nil, "key is [2 5 8], want [B Tk 3]"},
		{l, q, nil, nil, &Options{KeyPaddingMask: tensor.NewBool(2, 4)}, "key_padding_mask is [2 4], want [2 5]"},
		{l, q, nil, nil, &Options{AttnMask: tensor.NewBool(5, 4)}, "attn_mask is [5 4], want [5 5] or [4 5 5]"},
		{l, q, nil, nil, &Options{AttnBias: tensor.New(3, 5, 5)}, "attn_bias is [3 5 5], want [5 5] or [4 5 5]"},
		{l, tensor.New(1, 40000, 8), nil, nil, &Options{NeedWeights: true}, "hold 3200000000 values, more than the 2147483648 (8 GiB) allowed"},
		{l, q, nil, nil, &Options{Workers: -1}, "-1 workers, want ≥ 0"},
	} {
		_, err := c.l.Forward(c.q, c.k, c.v, c.opt)
		if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want ErrShape saying %q", err, c.want)
		}
	}
}

// TestUnbatched checks that [T, E] inputs give the batched result without the batch dimension.
func TestUnbatched(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, Seed: 12})
	q := randTensor(tensor.NewRNG(9), 1, 5, 8)
	pad := tensor.NewBool(1, 5)
	pad.Data[4] = true
	opt := &Options{NeedWeights: true, PerHeadWeights: true, KeyPaddingMask: pad}
	a := forward(t, l, q, nil, nil, opt)
	q2, _ := q.Reshape(5, 8)
	pad2, _ := tensor.BoolFromData(pad.Data, 5)
	opt.KeyPaddingMask = pad2
	b := forward(t, l, q2, nil, nil, opt)
	if !equalInts(b.Output.Shape, []int{5, 8}) || !equalInts(b.Weights.Shape, []int{2, 5, 5}) {
		t.Fatalf("unbatched shapes %v and %v, want [5 8] and [2 5 5]", b.Output.Shape, b.Weights.Shape)
	}
	if maxAbsDiff(a.Output.Data, b.Output.Data) != 0 || maxAbsDiff(a.Weights.Data, b.Weights.Data) != 0 {
		t.Error("unbatched result differs from the batched one")
	}
}

func TestStateDict(t *testing.T) {
	cfg := Config{EmbedDim: 8, NumHeads: 2, KDim: 3, VDim: 5, AddBiasKV: true, Seed: 13}
	l := newLayer(t, cfg)
	sd := l.StateDict()
	got, err := InferConfig(sd, 2)
	if err != nil {
		t.Fatal(err)
	}
	got.Seed = cfg.Seed
	if !reflect.DeepEqual(got, cfg) {
		t.Fatalf("InferConfig = %+v, want %+v", got, cfg)
	}
	m, _ := New(got)
	if err := m.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parameters() {
		if maxAbsDiff(p.T.Data, sd[p.Name].Data) != 0 {
			t.Errorf("%s not loaded", p.Name)
		}
	}
	sd["extra"] = tensor.New(1)
	if err := m.LoadStateDict(sd); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), `unexpected "extra"`) {
		t.Errorf("extra name: %v", err)
	}
	delete(sd, "extra")
	sd["bias_k"] = tensor.New(1, 8)
	if err := m.LoadStateDict(sd); !strings.Contains(err.Error(), "bias_k is [1 8], want [1 1 8]") {
		t.Errorf("bad shape: %v", err)
	}
	sd["bias_k"] = &tensor.Tensor{Shape: []int{1, 1, 8}, Data: make([]float32, 3)}
	if err := m.LoadStateDict(sd); !strings.Contains(err.Error(), "bias_k has 3 values for its shape [1 1 8], want 8") {
		t.Errorf("values short of the shape: %v", err)
	}
	delete(sd, "bias_k")
	if err := m.LoadStateDict(sd); !strings.Contains(err.Error(), `missing "bias_k"`) {
		t.Errorf("missing: %v", err)
	}
	if _, err := InferConfig(map[string]*tensor.Tensor{}, 2); !errors.Is(err, ErrStateDict) {
		t.Errorf("empty state dict: %v", err)
	}
	sd["bias_k"] = nil
	if err := m.LoadStateDict(sd); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "bias_k is nil") {
		t.Errorf("nil tensor: %v", err)
	}
	if err := m.LoadHalfStateDict(map[string]*tensor.Half{"bias_k": nil}); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "bias_k is nil") {
		t.Errorf("nil half tensor: %v", err)
	}
	if _, err := InferConfig(sd, 2); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "bias_k is nil") {
		t.Errorf("InferConfig with a nil tensor: %v", err)
	}
	// A non-square out_proj.weight is [E, H·d] only where the rest agrees (HeadSize); else the
	// error says what out_proj.weight should be, and what contradicts it.
	for _, c := range []struct {
		out, in []int
		want    string
	}{
		{[]int{8, 7}, []int{24, 8}, "out_proj.weight is [8 7], want [E E] (or [E H·d] for 2 heads of d ≠ E/H)"},
		{[]int{7, 8}, []int{24, 8}, "out_proj.weight is [7 8], want [E E], or [E H·d] with 2 heads of d ≠ E/H, which the rest of the state dict contradicts: in_proj_weight is [24 8], want [H·d + 2·Ekv, E] with H·d = 8, E = 7"},
		{[]int{8, 4}, []int{24, 8}, "out_proj.weight is [8 4], want [E E], or [E H·d] with 2 heads of d ≠ E/H, which the rest of the state dict contradicts: 5 K/V heads for 2 query heads"},
	} {
		sd := map[string]*tensor.Tensor{"out_proj.weight": tensor.New(c.out...), "in_proj_weight": tensor.New(c.in...)}
		if _, err := InferConfig(sd, 2); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("out_proj.weight %v, in_proj_weight %v: %v, want ErrStateDict with %q", c.out, c.in, err, c.want)
		}
	}
}

// TestNewFloat32 checks that NewFloat32 holds the state dict's own tensors and runs as the layer
// they came from, and that it rejects what LoadStateDict rejects.
func TestNewFloat32(t *testing.T) {
	cfg := Config{EmbedDim: 8, NumHeads: 2, NumKVHeads: 1, AddBiasKV: true, Seed: 17}
	l := newLayer(t, cfg)
	sd := map[string]*tensor.Tensor{}
	for name, p := range l.StateDict() {
		sd[name] = &tensor.Tensor{Shape: slices.Clone(p.Shape), Data: slices.Clone(p.Data)}
	}
	m, err := NewFloat32(cfg, sd)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.HeldParameters() {
		if p.T != sd[p.Name] {
			t.Errorf("%s is not the state dict's tensor", p.Name)
		}
	}
	rng := tensor.NewRNG(18)
	x := randTensor(rng, 2, 5, 8)
	opt := &Options{Causal: true, NeedWeights: true}
	if a, b := forward(t, l, x, nil, nil, opt), forward(t, m, x, nil, nil, opt); !bitsEqual(a.Output.Data, b.Output.Data) || !bitsEqual(a.Weights.Data, b.Weights.Data) {
		t.Error("NewFloat32's layer differs from the one its state dict came from")
	}
	for name, edit := range map[string]func(map[string]*tensor.Tensor){
		`unexpected "extra"`:            func(sd map[string]*tensor.Tensor) { sd["extra"] = tensor.New(1) },
		"bias_v is [1 4], want [1 1 4]": func(sd map[string]*tensor.Tensor) { sd["bias_v"] = tensor.New(1, 4) },
		`missing "out_proj.bias"`:       func(sd map[string]*tensor.Tensor) { delete(sd, "out_proj.bias") },
		"in_proj_weight is nil":         func(sd map[string]*tensor.Tensor) { sd["in_proj_weight"] = nil },
	} {
		bad := maps.Clone(sd)
		edit(bad)
		if _, err := NewFloat32(cfg, bad); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), name) {
			t.Errorf("NewFloat32: %v, want ErrStateDict saying %q", err, name)
		}
	}
	if _, err := NewFloat32(Config{EmbedDim: 8, NumHeads: 3}, sd); !errors.Is(err, ErrConfig) {
		t.Errorf("NewFloat32 with a bad config: %v, want ErrConfig", err)
	}
}

// TestCausal checks that query i puts no weight on keys after i and is untouched when they change.
func TestCausal(t *testing.T) {
	const e, tq, tk = 8, 4, 6
	l := newLayer(t, Config{EmbedDim: e, NumHeads: 2, Seed: 14})
	rng := tensor.NewRNG(10)
	q, k, v := randTensor(rng, 1, tq, e), randTensor(rng, 1, tk, e), randTensor(rng, 1, tk, e)
	opt := &Options{Causal: true, NeedWeights: true, PerHeadWeights: true}
	r := forward(t, l, q, k, v, opt)
	for idx, w := range r.Weights.Data {
		i, j := (idx/tk)%tq, idx%tk
		if (j > i) != (w == 0) {
			t.Fatalf("weight of query %d on key %d is %v", i, j, w)
		}
	}
	// Changing key 2 may move queries ≥ 2 only.
	for c := range e {
		k.Data[2*e+c] += 5
		v.Data[2*e+c] -= 5
	}
	r2 := forward(t, l, q, k, v, opt)
	if d := maxAbsDiff(r.Output.Data[:2*e], r2.Output.Data[:2*e]); d != 0 {
		t.Errorf("a later key moved queries 0 and 1 by %g", d)
	}
	if maxAbsDiff(r.Output.Data[2*e:], r2.Output.Data[2*e:]) == 0 {
		t.Error("key 2 did not move queries 2 and 3")
	}
}

// TestTraceScores checks that the trace's raw and scaled scores are Q_h·K_hᵀ and that scaled over
// √d, including head dim 1, where the scale is 1.
func TestTraceScores(t *testing.T) {
	for _, cfg := range []Config{{EmbedDim: 3, NumHeads: 3, Seed: 15}, {EmbedDim: 8, NumHeads: 2, Seed: 16}} {
		l := newLayer(t, cfg)
		tr, err := l.Reference(randTensor(tensor.NewRNG(11), 1, 3, cfg.EmbedDim), nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := cfg.HeadDim(0)
		for h := range tr.H {
			for i := range tr.Tq {
				for j := range tr.Tk {
					s := 0.0
					for c := range d {
						s += tr.Q[i*tr.E+h*d+c] * tr.K[j*tr.E+h*d+c]
					}
					idx := (h*tr.Tq+i)*tr.Tk + j
					if math.Abs(tr.Scores[idx]-s) > 1e-12 || math.Abs(tr.Scaled[idx]-s/math.Sqrt(float64(d))) > 1e-12 {
						t.Fatalf("d=%d head %d [%d,%d]: scores %v, scaled %v, want %v and %v", d, h, i, j, tr.Scores[idx], tr.Scaled[idx], s, s/math.Sqrt(float64(d)))
					}
				}
			}
		}
	}
}

// FuzzInferConfig reads state dicts of fuzzed shapes: out_proj.weight, in_proj_weight or
// k_proj_weight and v_proj_weight, in_proj_bias, bias_k, q_norm.weight, each of up to three
// dimensions below 40, and a head count. InferConfig never panics; a config it returns builds a
// layer, which loads that same state dict or says, with ErrStateDict, which tensor does not fit
// (InferConfig reads the projections' shapes; LoadStateDict checks every tensor).
func FuzzInferConfig(f *testing.F) {
	f.Add([]byte{16, 16, 48, 16, 0, 0, 0, 0, 0, 0, 48, 0, 0, 0}, uint8(4), uint8(0))
	f.Add([]byte{8, 12, 24, 8, 0, 6, 8, 6, 8, 0, 0, 1, 1, 6}, uint8(2), uint8(1))
	f.Add([]byte{7, 8, 24, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(2), uint8(0))
	f.Add([]byte{16, 32, 48, 16, 0, 0, 0, 0, 0, 4, 48, 0, 0, 8}, uint8(4), uint8(0))
	f.Fuzz(func(t *testing.T, dims []byte, heads, layout uint8) {
		dim := func(i int) int {
			if i < len(dims) {
				return int(dims[i] % 40)
			}
			return 0
		}
		shape := func(ds ...int) []int { // the leading non-zero sizes
			var s []int
			for _, d := range ds {
				if d == 0 {
					break
				}
				s = append(s, d)
			}
			return s
		}
		sd := map[string]*tensor.Tensor{"out_proj.weight": tensor.New(shape(dim(0), dim(1))...)}
		if layout%2 == 0 {
			sd["in_proj_weight"] = tensor.New(shape(dim(2), dim(3), dim(4))...)
		} else {
			sd["q_proj_weight"] = tensor.New(shape(dim(1), dim(0))...)
			sd["k_proj_weight"] = tensor.New(shape(dim(5), dim(6))...)
			sd["v_proj_weight"] = tensor.New(shape(dim(7), dim(8))...)
		}
		if n := dim(10); n > 0 {
			sd["in_proj_bias"] = tensor.New(n)
			sd["out_proj.bias"] = tensor.New(shape(dim(0))...)
		}
		if dim(11) > 0 {
			sd["bias_k"] = tensor.New(shape(1, 1, dim(12))...)
			sd["bias_v"] = tensor.New(shape(1, 1, dim(12))...)
		}
		if n := dim(13); n > 0 {
			sd["q_norm.weight"], sd["k_norm.weight"] = tensor.New(n), tensor.New(n)
		}
		for name, x := range sd {
			if len(x.Shape) == 0 {
				delete(sd, name)
			}
		}
		cfg, err := InferConfig(sd, int(heads%9))
		if err != nil {
			if !errors.Is(err, ErrStateDict) && !errors.Is(err, ErrConfig) {
				t.Fatalf("InferConfig: %v, want ErrStateDict or ErrConfig", err)
			}
			return
		}
		l, err := New(cfg)
		if err != nil {
			t.Fatalf("InferConfig gave %+v, which New refuses: %v", cfg, err)
		}
		if err := l.LoadStateDict(sd); err != nil && !errors.Is(err, ErrStateDict) {
			t.Fatalf("InferConfig gave %+v, whose layer's LoadStateDict says %v, want nil or ErrStateDict", cfg, err)
		}
	})
}
