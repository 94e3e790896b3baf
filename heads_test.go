package mha

import (
	"math"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// TestHeadsOfDifferentSizes checks each head of a layer with HeadDims and HeadScales against
// softmax(s_h·Q_h·K_hᵀ)·V_h written out by hand from the traced projections, and the fast path
// against the reference.
func TestHeadsOfDifferentSizes(t *testing.T) {
	cfg := Config{EmbedDim: 7, NumHeads: 3, HeadDims: []int{1, 4, 2}, HeadScales: []float64{2, 0.5, 1 / math.Sqrt(2)}, Seed: 3}
	l := newLayer(t, cfg)
	x := randTensor(tensor.NewRNG(4), 2, 5, 7)
	opt := &Options{Causal: true, Heads: HeadOptions{Keep: true}}
	tr, err := l.Reference(x, nil, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	if tr.D != 0 {
		t.Errorf("trace D = %d for heads of different sizes, want 0", tr.D)
	}
	e := cfg.EmbedDim
	for b := range 2 {
		for h, o := range []int{0, 1, 5} {
			d := cfg.HeadDims[h]
			if cfg.HeadOffset(h) != o || cfg.HeadDim(h) != d {
				t.Fatalf("head %d: offset %d size %d, want %d and %d", h, cfg.HeadOffset(h), cfg.HeadDim(h), o, d)
			}
			for i := range 5 {
				logits := make([]float64, i+1)
				for j := range logits {
					for c := range d {
						logits[j] += tr.Q[(b*5+i)*e+o+c] * tr.K[(b*5+j)*e+o+c]
					}
					logits[j] *= cfg.HeadScales[h]
				}
				softmax64(logits)
				for c := range d {
					want := 0.0
					for j, a := range logits {
						want += a * tr.V[(b*5+j)*e+o+c]
					}
					if got := tr.Concat[(b*5+i)*e+o+c]; math.Abs(got-want) > 1e-12 {
						t.Fatalf("batch %d head %d query %d column %d: %v, want %v", b, h, i, c, got, want)
					}
				}
			}
		}
	}
	r := forward(t, l, x, nil, nil, opt)
	if e := tensor.RelError(r.Output.Data, tr.Output); e > 1e-6 {
		t.Errorf("fast output differs from the reference by %.3g", e)
	}
	if e := tensor.RelError(r.Heads.Data, tr.Concat); e > 1e-6 {
		t.Errorf("Result.Heads differs from the traced concatenation by %.3g", e)
	}
}

func softmax64(x []float64) {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	s := 0.0
	for i, v := range x {
		x[i] = math.Exp(v - m)
		s += x[i]
	}
	for i := range x {
		x[i] /= s
	}
}

// TestHeadInterventions checks what each HeadOptions field means, against computations that do
// not use it: a zero gate is a head whose out_proj columns are zero, gates 0 with a shift make
// every output W_o·shift + b_o, and a uniform head outputs the mean of the values it may see.
func TestHeadInterventions(t *testing.T) {
	cfg := Config{EmbedDim: 8, NumHeads: 4, Seed: 5}
	l := newLayer(t, cfg)
	x := randTensor(tensor.NewRNG(6), 2, 6, 8)
	const b, tq, e, heads, d = 2, 6, 8, 4, 2

	// Gate 0 on head 2 of batch 1 only.
	gate := tensor.New(b, heads)
	for i := range gate.Data {
		gate.Data[i] = 1
	}
	gate.Data[1*heads+2] = 0
	gated := forward(t, l, x, nil, nil, &Options{Causal: true, Heads: HeadOptions{Gate: gate}})
	cut := newLayer(t, cfg)
	w := cut.StateDict()["out_proj.weight"].Data
	for row := range e {
		for c := 2 * d; c < 3*d; c++ {
			w[row*e+c] = 0
		}
	}
	plain := forward(t, l, x, nil, nil, &Options{Causal: true})
	want := forward(t, cut, x, nil, nil, &Options{Causal: true})
	half := tq * e
	if e0 := tensor.RelError(gated.Output.Data[:half], f64(plain.Output.Data[:half])); e0 > 1e-6 {
		t.Errorf("batch 0 (gates 1) differs from the plain layer by %.3g", e0)
	}
	if e1 := tensor.RelError(gated.Output.Data[half:], f64(want.Output.Data[half:])); e1 > 1e-6 {
		t.Errorf("batch 1 (head 2 gated off) differs from zeroed out_proj columns by %.3g", e1)
	}

	// Every gate 0 and a shift: the output is shift·W_oᵀ + b_o on every row.
	zero := tensor.New(b, heads)
	shift := []float32{1, -2, 0.5, 0, 3, 1, -1, 2}
	r := forward(t, l, x, nil, nil, &Options{Heads: HeadOptions{Gate: zero, Shift: shift}})
	wo, bo := l.param("out_proj.weight"), l.param("out_proj.bias")
	for row := range b * tq {
		for j := range e {
			want := float64(bo[j])
			for c := range e {
				want += float64(wo[j*e+c]) * float64(shift[c])
			}
			if got := float64(r.Output.Data[row*e+j]); math.Abs(got-want) > 1e-5 {
				t.Fatalf("row %d col %d: %v, want %v", row, j, got, want)
			}
		}
	}

	// Head 1 uniform under a causal mask: query i's output is the mean of V_1 over keys ≤ i,
	// with ALiBi's distances and whatever the normalizer (top-k would pick among equal scores).
	uniform := []bool{false, true, false, false}
	for _, o := range []Options{{}, {ALiBi: true}, {Normalizer: &Normalizer{Kind: TopK, K: 2}}, {Normalizer: &Normalizer{Kind: Sparsemax}}} {
		opt := &o
		opt.Causal, opt.Heads = true, HeadOptions{Keep: true, Uniform: uniform}
		tr, err := l.Reference(x, nil, nil, opt)
		if err != nil {
			t.Fatal(err)
		}
		r = forward(t, l, x, nil, nil, opt)
		for bi := range b {
			for i := range tq {
				for c := d; c < 2*d; c++ {
					want := 0.0
					for j := 0; j <= i; j++ {
						want += tr.V[(bi*tq+j)*e+c] / float64(i+1)
					}
					if got := float64(r.Heads.Data[(bi*tq+i)*e+c]); math.Abs(got-want) > 1e-5 {
						t.Fatalf("ALiBi %v, normalizer %v: batch %d query %d column %d: %v, want the mean %v", o.ALiBi, o.Normalizer, bi, i, c, got, want)
					}
				}
			}
		}
	}
}

// TestHeadOptionErrors checks that a gate, shift or uniform list of the wrong size, or a head
// config that does not add up, is an error, not a panic.
func TestHeadOptionErrors(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 4})
	x := randTensor(tensor.NewRNG(1), 2, 3, 8)
	nan := tensor.New(2, 4)
	nan.Data[3] = float32(math.NaN())
	for name, ho := range map[string]HeadOptions{
		"gate shape":  {Gate: tensor.New(4)},
		"gate NaN":    {Gate: nan},
		"shift size":  {Shift: make([]float32, 7)},
		"add shape":   {Add: tensor.New(2, 4, 8)},
		"add data":    {Add: &tensor.Tensor{Shape: []int{2, 3, 8}, Data: make([]float32, 5)}},
		"uniform len": {Uniform: make([]bool, 3)},
	} {
		if _, err := l.Forward(x, nil, nil, &Options{Heads: ho}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for name, c := range map[string]Config{
		"dims sum":                  {EmbedDim: 8, NumHeads: 2, HeadDims: []int{3, 4}},
		"dims count":                {EmbedDim: 8, NumHeads: 2, HeadDims: []int{8}},
		"dim zero":                  {EmbedDim: 8, NumHeads: 2, HeadDims: []int{8, 0}},
		"scales len":                {EmbedDim: 8, NumHeads: 2, HeadScales: []float64{1}},
		"scale inf":                 {EmbedDim: 8, NumHeads: 2, HeadScales: []float64{1, math.Inf(1)}},
		"scale overflowing float32": {EmbedDim: 8, NumHeads: 2, HeadScales: []float64{-1e39, 1}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
	if _, err := New(Config{EmbedDim: 7, NumHeads: 2, HeadDims: []int{3, 4}}); err != nil {
		t.Errorf("heads 3 + 4 = 7: %v", err)
	}
}
