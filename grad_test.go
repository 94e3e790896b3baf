package mha

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// refGrads is the oracle of the backward tests: dL/d(every input and parameter) for
// L = Σ dy∘Output, in float64 from the Reference trace, written as the chapters' formulas with
// plain loops. It recomputes the weights before dropout from the traced scores and uses
// D_i = Σ_j P_ij·dP_ij, where the fast path uses dOut_i·Out_i. Inputs are named "query", "key"
// and "value" (self-attention: "query" only); parameters by their PyTorch names.
func refGrads(t *testing.T, l *Layer, q, k, v *tensor.Tensor, opt *Options, dy []float32) map[string][]float64 {
	t.Helper()
	tr, err := l.Reference(q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	p := new(plan)
	if err := l.plan(p, q, k, v, opt, true); err != nil {
		t.Fatal(err)
	}
	c := l.cfg
	// e: the output's width; qd: Q's, K's, V's and the heads' (InnerDim; no grouped K/V heads here)
	e, qd, heads, tq, tkx, nb := c.EmbedDim, c.InnerDim(), c.NumHeads, p.tq, p.tkx, p.b
	g := map[string][]float64{}

	// Output projection of the gated heads concat' = Gate·concat + Shift.
	gated := tr.Concat
	if p.gated() {
		gated = make([]float64, len(tr.Concat))
		applyGate(p, l.offs, tr.Concat, qd, tq, gated, qd, tq)
	}
	dY := as[float64](dy)
	wo := as[float64](l.param("out_proj.weight"))
	dC := make([]float64, nb*tq*qd)
	kernel.Gemm(false, false, nb*tq, qd, e, 1, dY, e, wo, qd, 0, dC, qd)
	g["out_proj.weight"] = make([]float64, e*qd)
	kernel.Gemm(true, false, e, qd, nb*tq, 1, dY, e, gated, qd, 0, g["out_proj.weight"], qd)
	g["out_proj.bias"] = colSums(dY, nb*tq, e)
	if gate := opt.Heads.Gate; gate != nil {
		g["gate"] = make([]float64, nb*heads)
		for b := range nb {
			for h := range heads {
				for i := range tq {
					for x := c.HeadOffset(h); x < c.HeadOffset(h)+c.HeadDim(h); x++ {
						r := (b*tq+i)*qd + x
						g["gate"][b*heads+h] += tr.Concat[r] * dC[r]
						dC[r] *= float64(gate.Data[b*heads+h])
					}
				}
			}
		}
	}
	if hin := headsIn(opt, nb, tq, qd); hin != nil {
		for i, x := range hin.Data {
			dC[i] += float64(x)
		}
	}

	// Attention, head by head.
	dQ, dK, dV := make([]float64, nb*tq*qd), make([]float64, nb*tkx*qd), make([]float64, nb*tkx*qd)
	for b := range nb {
		for h := range heads {
			o, d, scale := c.HeadOffset(h), c.HeadDim(h), p.scale(c, h)
			n := tq * tkx
			pr := append([]float64(nil), tr.Scaled[(b*heads+h)*n:(b*heads+h+1)*n]...)
			for i := range tq {
				kernel.Softmax(pr[i*tkx : (i+1)*tkx])
			}
			drop := p.dropout(b, h, heads, c.Dropout)
			z := func(i, j int) float64 {
				if drop == nil {
					return 1
				}
				if drop.Keep(i, j) {
					return 1 / (1 - drop.P)
				}
				return 0
			}
			qa := func(i, x int) float64 { return tr.Q[(b*tq+i)*qd+o+x] }
			ka := func(j, x int) float64 { return tr.K[(b*tkx+j)*qd+o+x] }
			va := func(j, x int) float64 { return tr.V[(b*tkx+j)*qd+o+x] }
			do := func(i, x int) float64 { return dC[(b*tq+i)*qd+o+x] }
			for i := range tq {
				dp := make([]float64, tkx)
				rowSum := 0.0
				for j := range tkx {
					for x := range d {
						dV[(b*tkx+j)*qd+o+x] += pr[i*tkx+j] * z(i, j) * do(i, x)
						dp[j] += do(i, x) * va(j, x)
					}
					dp[j] *= z(i, j)
					rowSum += pr[i*tkx+j] * dp[j]
				}
				for j := range tkx {
					ds := pr[i*tkx+j] * (dp[j] - rowSum) * scale
					for x := range d {
						dQ[(b*tq+i)*qd+o+x] += ds * ka(j, x)
						dK[(b*tkx+j)*qd+o+x] += ds * qa(i, x)
					}
				}
			}
		}
	}

	// The appended key rows, then the input projections of the first Tk rows.
	if c.AddBiasKV {
		g["bias_k"], g["bias_v"] = make([]float64, qd), make([]float64, qd)
		for b := range nb {
			r := (b*tkx + p.tk) * qd
			for x := range qd {
				g["bias_k"][x] += dK[r+x]
				g["bias_v"][x] += dV[r+x]
			}
		}
	}
	keep := func(y []float64) []float64 { // rows [0, Tk) of every batch of a [B, Tkx, H·d] gradient
		out := make([]float64, 0, nb*p.tk*qd)
		for b := range nb {
			out = append(out, y[b*tkx*qd:(b*tkx+p.tk)*qd]...)
		}
		return out
	}
	wq, wk, wv, _, _, _ := l.projections()
	type proj struct {
		name string
		dy   []float64
		x, w []float32
		rows int
		in   int
	}
	var dX [3][]float64
	var dW, dB [3][]float64
	for i, pj := range []proj{{"query", dQ, p.q, wq.F, tq, e}, {"key", keep(dK), p.k, wk.F, p.tk, c.kdim()}, {"value", keep(dV), p.v, wv.F, p.tk, c.vdim()}} {
		rows := nb * pj.rows
		dX[i] = make([]float64, rows*pj.in)
		kernel.Gemm(false, false, rows, pj.in, qd, 1, pj.dy, qd, as[float64](pj.w), pj.in, 0, dX[i], pj.in)
		dW[i] = make([]float64, qd*pj.in)
		kernel.Gemm(true, false, qd, pj.in, rows, 1, pj.dy, qd, as[float64](pj.x), pj.in, 0, dW[i], pj.in)
		dB[i] = colSums(pj.dy, rows, qd)
	}
	if l.param("in_proj_weight") != nil {
		g["in_proj_weight"] = append(append(dW[0], dW[1]...), dW[2]...)
	} else {
		g["q_proj_weight"], g["k_proj_weight"], g["v_proj_weight"] = dW[0], dW[1], dW[2]
	}
	if !c.NoBias {
		g["in_proj_bias"] = append(append(dB[0], dB[1]...), dB[2]...)
	} else {
		delete(g, "out_proj.bias")
	}
	if p.self {
		for i := range dX[0] {
			dX[0][i] += dX[1][i] + dX[2][i]
		}
		g["query"] = dX[0]
	} else {
		g["query"], g["key"], g["value"] = dX[0], dX[1], dX[2]
	}
	return g
}

func colSums(y []float64, rows, cols int) []float64 {
	s := make([]float64, cols)
	for r := range rows {
		for j := range cols {
			s[j] += y[r*cols+j]
		}
	}
	return s
}

// backward runs ForwardTrain and Backward with gradOutput dy and returns the gradients by name,
// as refGrads names them.
func backward(t *testing.T, l *Layer, q, k, v *tensor.Tensor, opt *Options, dy *tensor.Tensor) map[string][]float32 {
	t.Helper()
	var r Result
	var s Saved
	if err := l.ForwardTrain(&r, &s, q, k, v, opt); err != nil {
		t.Fatal(err)
	}
	g := Grads{HeadsIn: headsIn(opt, s.p.b, s.p.tq, l.cfg.InnerDim())}
	if err := l.Backward(&g, &s, dy); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{"query": g.Query.Data}
	if g.Gate != nil {
		out["gate"] = g.Gate.Data
	}
	if g.Key != nil {
		if v == k { // one tensor: its gradient is the sum
			for i, x := range g.Value.Data {
				g.Key.Data[i] += x
			}
			out["key"] = g.Key.Data
		} else {
			out["key"], out["value"] = g.Key.Data, g.Value.Data
		}
	}
	for _, p := range g.Params {
		out[p.Name] = p.T.Data
	}
	return out
}

// fdGrads returns the central finite differences, with steps of h, of the loss Σ dy·Output
// (plus Σ HeadsIn·Concat when opt keeps the heads, as backward adds headsIn) computed in float64
// by Layer.Reference, with respect to every value of the query, key and value inputs (key alone
// when key is value), of the gate when opt has one, and of every parameter, named as backward
// names them: the gradients Backward must give, for the options refGrads does not derive.
func fdGrads(t *testing.T, l *Layer, q, k, v *tensor.Tensor, opt *Options, dy []float32, h float32) map[string][]float64 {
	t.Helper()
	var hin *tensor.Tensor
	if opt.Heads.Keep {
		b, tq := 1, q.Shape[len(q.Shape)-2]
		if len(q.Shape) == 3 {
			b = q.Shape[0]
		}
		hin = headsIn(opt, b, tq, l.cfg.InnerDim())
	}
	loss := func() float64 {
		tr, err := l.Reference(q, k, v, opt)
		if err != nil {
			t.Fatal(err)
		}
		s := 0.0
		for i, y := range tr.Output {
			s += y * float64(dy[i])
		}
		if hin != nil {
			for i, c := range tr.Concat {
				s += c * float64(hin.Data[i])
			}
		}
		return s
	}
	// central returns the central difference of the loss in x[i] with steps of h (the float32
	// steps actually taken).
	central := func(x []float32, i int, h float32) float64 {
		old := x[i]
		x[i] = old + h
		up := loss()
		x[i] = old - h
		down := loss()
		x[i] = old
		return (up - down) / (float64(old+h) - float64(old-h))
	}
	// diff extrapolates from steps h and 2h (Richardson: error O(h⁴)), so that steep functions,
	// qk-norm of heads whose query is short among them, are differentiated as well as smooth ones.
	diff := func(x []float32) []float64 {
		g := make([]float64, len(x))
		for i := range x {
			g[i] = (4*central(x, i, h) - central(x, i, 2*h)) / 3
		}
		return g
	}
	want := map[string][]float64{"query": diff(q.Data)}
	if k != nil {
		want["key"] = diff(k.Data)
		if v != k {
			want["value"] = diff(v.Data)
		}
	}
	if opt.Heads.Gate != nil {
		want["gate"] = diff(opt.Heads.Gate.Data)
	}
	for _, p := range l.Parameters() {
		want[p.Name] = diff(p.T.Data)
	}
	return want
}

// compareGrads checks every gradient in want against got within tol relative error and returns
// the worst error.
func compareGrads(t *testing.T, got map[string][]float32, want map[string][]float64, tol float64) float64 {
	t.Helper()
	worst := 0.0
	for name, w := range want {
		gt, ok := got[name]
		if !ok {
			t.Errorf("no gradient for %s", name)
			continue
		}
		for i, x := range gt {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("%s[%d] = %v", name, i, x)
			}
		}
		e := tensor.RelError(gt, w)
		if e > tol {
			t.Errorf("%s: relative error %.3g, want ≤ %.0e", name, e, tol)
		}
		worst = max(worst, e)
	}
	if len(got) != len(want) {
		t.Errorf("got gradients for %d tensors, want %d", len(got), len(want))
	}
	return worst
}

// TestReferenceGradsMatchFiniteDifferences checks the float64 oracle against central finite
// differences of Reference, on small cases with every mask kind, appended keys and dropout.
func TestReferenceGradsMatchFiniteDifferences(t *testing.T) {
	cases := []maskCase{
		{name: "self causal", cfg: Config{EmbedDim: 6, NumHeads: 2}, b: 2, tq: 4, tk: 4, causal: true},
		{name: "cross kdim vdim masks", cfg: Config{EmbedDim: 4, NumHeads: 2, KDim: 3, VDim: 5}, b: 2, tq: 3, tk: 5, cross: true, pad: true, mask: true, perHeadMask: true, bias: true},
		{name: "self bias_kv zero_attn padded", cfg: Config{EmbedDim: 4, NumHeads: 2, AddBiasKV: true, AddZeroAttn: true}, b: 2, tq: 3, tk: 3, causal: true, pad: true},
		{name: "dropout key is value", cfg: Config{EmbedDim: 4, NumHeads: 2, Dropout: 0.4}, b: 2, tq: 3, tk: 4, cross: true, kvSame: true, training: true, bias: true},
		{name: "no bias", cfg: Config{EmbedDim: 4, NumHeads: 1, NoBias: true}, b: 1, tq: 3, tk: 3},
		{name: "heads of different sizes, gated", cfg: Config{EmbedDim: 6, NumHeads: 3, HeadDims: []int{1, 3, 2}, HeadScales: []float64{0.7, 1, -0.5}},
			b: 2, tq: 3, tk: 4, cross: true, causal: true, probe: true},
		{name: "heads wider than E/H, gated", cfg: Config{EmbedDim: 4, NumHeads: 2, HeadSize: 3},
			b: 2, tq: 3, tk: 4, cross: true, causal: true, probe: true, pad: true},
		{name: "heads narrower than E/H, bias_kv", cfg: Config{EmbedDim: 6, NumHeads: 3, HeadSize: 1, AddBiasKV: true}, b: 1, tq: 3, tk: 3, probe: true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, q, k, v, opt := c.inputs(t, i)
			dy := randTensor(tensor.NewRNG(uint64(i+9)), c.b, c.tq, c.cfg.EmbedDim)
			want := refGrads(t, l, q, k, v, &opt, dy.Data)
			loss := func() float64 {
				tr, err := l.Reference(q, k, v, &opt)
				if err != nil {
					t.Fatal(err)
				}
				s := 0.0
				for j, y := range tr.Output {
					s += y * float64(dy.Data[j])
				}
				if hin := headsIn(&opt, c.b, c.tq, c.cfg.InnerDim()); hin != nil {
					for j, y := range tr.Concat {
						s += y * float64(hin.Data[j])
					}
				}
				return s
			}
			tensors := map[string]*tensor.Tensor{"query": q}
			if opt.Heads.Gate != nil {
				tensors["gate"] = opt.Heads.Gate
			}
			if c.cross {
				tensors["key"], tensors["value"] = k, v
			}
			for _, p := range l.params {
				tensors[p.Name] = p.T
			}
			for name, x := range tensors {
				if name == "value" && c.kvSame {
					continue // the same tensor as key: its difference is the sum
				}
				fd := make([]float64, len(x.Data))
				for j := range x.Data {
					x0 := x.Data[j]
					const h = 1.0 / 1024
					x.Data[j] = x0 + h
					up, xp := loss(), float64(x.Data[j])
					x.Data[j] = x0 - h
					down, xm := loss(), float64(x.Data[j])
					x.Data[j] = x0
					fd[j] = (up - down) / (xp - xm)
				}
				w := want[name]
				if name == "key" && c.kvSame {
					w = append([]float64(nil), w...)
					for j, y := range want["value"] {
						w[j] += y
					}
				}
				if e := tensor.RelError(fd, w); e > 1e-5 || math.IsNaN(e) {
					t.Errorf("%s: finite differences differ from the oracle by %.3g relative", name, e)
				}
			}
		})
	}
}

// TestBackwardMatchesReference checks the float32 backward, tiled (from the saved log-sum-exp)
// and dense (from the saved weights), against the float64 oracle on shapes that span several
// query blocks and key tiles, with every mask kind and dropout.
func TestBackwardMatchesReference(t *testing.T) {
	worst := 0.0
	for i, c := range maskCases() {
		t.Run(c.name, func(t *testing.T) {
			l, q, k, v, opt := c.inputs(t, i)
			dy := randTensor(tensor.NewRNG(uint64(i+9)), c.b, c.tq, c.cfg.EmbedDim)
			want := refGrads(t, l, q, k, v, &opt, dy.Data)
			for _, dense := range []bool{false, true} {
				opt.NeedWeights = dense
				got := backward(t, l, q, k, v, &opt, dy)
				if k != nil && k == v {
					want["key"] = append([]float64(nil), want["key"]...)
					for j, y := range want["value"] {
						want["key"][j] += y
					}
					delete(want, "value")
				}
				worst = max(worst, compareGrads(t, got, want, 1e-5))
			}
		})
	}
	t.Logf("worst relative error of the float32 backward: %.3g", worst)
}

// TestBackwardGolden compares Backward with PyTorch 1.13's autograd (float64) on every golden
// case, through both the tiled and the dense path.
func TestBackwardGolden(t *testing.T) {
	paths, _ := filepath.Glob("testdata/golden/*.safetensors")
	worst := 0.0
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".safetensors")
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, path)
			dy, err := g.file.Float32("grad_output")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]float64{}
			for _, n := range g.file.Names() {
				if rest, ok := strings.CutPrefix(n, "grad."); ok {
					want[rest] = g.want(t, n)
				}
			}
			for _, dense := range []bool{false, true} {
				opt := g.opt
				opt.NeedWeights = dense
				worst = max(worst, compareGrads(t, backward(t, g.layer, g.q, g.k, g.v, &opt, dy), want, 1e-4))
			}
		})
	}
	t.Logf("worst relative error against PyTorch autograd: %.3g", worst)
}

// TestBackwardWorkers expects the same gradient bits from 1, 2, 3 and 5 workers.
func TestBackwardWorkers(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 32, NumHeads: 4, Seed: 3, Dropout: 0.2})
	rng := tensor.NewRNG(4)
	sameGradsOnWorkers(t, l, randTensor(rng, 2, 200, 32), randTensor(rng, 2, 200, 32))
}

// sameGradsOnWorkers checks that l's causal training step with dropout on query q [B, T, E] and
// gradOutput dy gives the same gradient bits on 1, 2, 3 and 5 workers.
func sameGradsOnWorkers(t *testing.T, l *Layer, q, dy *tensor.Tensor) {
	t.Helper()
	var want map[string][]float32
	for _, workers := range []int{1, 2, 3, 5} {
		got := backward(t, l, q, nil, nil, &Options{Workers: workers, Causal: true, Training: true, DropoutSeed: 7}, dy)
		if want == nil {
			want = got
			continue
		}
		for name, w := range want {
			for i := range w {
				if got[name][i] != w[i] {
					t.Fatalf("workers %d: %s[%d] = %v, want %v bit for bit", workers, name, i, got[name][i], w[i])
				}
			}
		}
	}
}

// TestBackwardAccumulates checks that a second Backward adds to the gradients, as PyTorch's
// .grad does, and that Zero clears them.
func TestBackwardAccumulates(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2, Seed: 1})
	rng := tensor.NewRNG(2)
	q, dy := randTensor(rng, 2, 5, 8), randTensor(rng, 2, 5, 8)
	var r Result
	var s Saved
	var g Grads
	if err := l.ForwardTrain(&r, &s, q, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := l.Backward(&g, &s, dy); err != nil {
			t.Fatal(err)
		}
	}
	once := backward(t, l, q, nil, nil, nil, dy)
	for _, p := range g.Params {
		twice := make([]float64, len(p.T.Data))
		for i, x := range once[p.Name] {
			twice[i] = 2 * float64(x)
		}
		if e := tensor.RelError(p.T.Data, twice); e > 1e-6 {
			t.Errorf("%s after two backwards differs from twice one by %.3g relative", p.Name, e)
		}
	}
	g.Zero()
	for _, p := range g.Params {
		for _, x := range p.T.Data {
			if x != 0 {
				t.Fatalf("%s not zero after Zero", p.Name)
			}
		}
	}
}

// TestBackwardErrors checks that bad calls get errors that say what was wrong.
func TestBackwardErrors(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 8, NumHeads: 2})
	other := newLayer(t, Config{EmbedDim: 8, NumHeads: 2})
	q := randTensor(tensor.NewRNG(1), 2, 5, 8)
	var r Result
	var s Saved
	if err := l.Backward(&Grads{}, &s, q); err == nil || !strings.Contains(err.Error(), "ForwardTrain") {
		t.Errorf("Backward before ForwardTrain: %v", err)
	}
	if err := l.ForwardTrain(&r, &s, q, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	defer func() { // a failed ForwardTrain leaves nothing for Backward
		if err := l.ForwardTrain(&r, &s, tensor.New(2, 5, 7), nil, nil, nil); err == nil {
			t.Error("ForwardTrain accepted a query of width 7")
		}
		if err := l.Backward(&Grads{}, &s, q); err == nil || !strings.Contains(err.Error(), "ForwardTrain") {
			t.Errorf("Backward after a failed ForwardTrain: %v", err)
		}
	}()
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"other layer", func() error { return other.Backward(&Grads{}, &s, q) }, "this layer"},
		{"gradOutput shape", func() error { return l.Backward(&Grads{}, &s, tensor.New(2, 4, 8)) }, "gradOutput is [2 4 8], want [2 5 8]"},
		{"gradOutput nil", func() error { return l.Backward(&Grads{}, &s, nil) }, "gradOutput is nil"},
		{"Grads nil", func() error { return l.Backward(nil, &s, q) }, "Backward into nil Grads"},
		{"Saved nil", func() error { return l.Backward(&Grads{}, nil, q) }, "needs the Saved of a ForwardTrain"},
		{"Result nil", func() error { return l.ForwardInto(nil, q, nil, nil, nil) }, "result is nil"},
		{"query grad shape", func() error { return l.Backward(&Grads{Query: tensor.New(5, 8)}, &s, q) }, "Grads.Query is [5 8], want [2 5 8]"},
		{"params count", func() error { return l.Backward(&Grads{Params: []Param{{"x", tensor.New(1)}}}, &s, q) }, "has 1 tensors, want 4"},
		{"param shape", func() error {
			g := Grads{}
			for _, p := range l.Parameters() {
				g.Params = append(g.Params, Param{p.Name, tensor.New(1)})
			}
			return l.Backward(&g, &s, q)
		}, fmt.Sprintf("want in_proj_weight %v", []int{24, 8})},
	} {
		err := l.Backward(&Grads{}, &s, q)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.call(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestTrainingStepAllocatesNothing proves that ForwardTrain and Backward make no heap allocation
// once the Saved, the Grads and the layer have seen the shapes.
func TestTrainingStepAllocatesNothing(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 32, NumHeads: 4, Seed: 3, AddBiasKV: true, Dropout: 0.1})
	rng := tensor.NewRNG(4)
	q, k, dy := randTensor(rng, 2, 70, 32), randTensor(rng, 2, 70, 32), randTensor(rng, 2, 70, 32)
	for _, opt := range []*Options{{Causal: true}, {NeedWeights: true, Training: true, DropoutSeed: 3}} {
		for _, cross := range []bool{false, true} {
			t.Run(fmt.Sprintf("%+v cross=%v", *opt, cross), func(t *testing.T) {
				kk := k
				if !cross {
					kk = nil
				}
				var r Result
				var s Saved
				var g Grads
				step := func() {
					if err := l.ForwardTrain(&r, &s, q, kk, kk, opt); err != nil {
						t.Fatal(err)
					}
					if err := l.Backward(&g, &s, dy); err != nil {
						t.Fatal(err)
					}
				}
				if n := steadyAllocs(step); n != 0 {
					t.Errorf("a training step allocates %v times, want 0", n)
				}
			})
		}
	}
}
