package nn_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// The inputs of testdata/gen_optim_golden.py, which wrote testdata/optim_golden.safetensors.
var (
	optimGoldenParams = []struct {
		name  string
		decay bool
	}{{"w", true}, {"b", false}, {"c", true}, {"s", false}}
	optimGoldenLRs     = []float64{0.05, 0.1, 0.02, 0, 0.07}
	optimGoldenConfigs = map[string]nn.AdamWConfig{
		"default": {},
		"custom":  {Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1},
	}
	optimGoldenMaxNorm = 1.5
)

func readOptimGolden(t *testing.T) *safetensors.File {
	t.Helper()
	f, err := safetensors.ReadFile("testdata/optim_golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func optimGoldenTensor(t *testing.T, f *safetensors.File, name string) *tensor.Tensor {
	t.Helper()
	x, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func optimFloat64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// checkOptimClose fails when got is further than tol from want in relative L2 norm.
func checkOptimClose(t *testing.T, what string, got []float32, want *tensor.Tensor, tol float64) float64 {
	t.Helper()
	if len(got) != len(want.Data) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want.Data))
	}
	e := tensor.RelError(got, optimFloat64s(want.Data))
	if e > tol {
		t.Errorf("%s: relative error %.3g, want ≤ %g", what, e, tol)
	}
	return e
}

func TestAdamWMatchesPyTorch(t *testing.T) {
	f := readOptimGolden(t)
	for cfgName, cfg := range optimGoldenConfigs {
		t.Run(cfgName, func(t *testing.T) {
			var ps []*nn.Param
			for _, gp := range optimGoldenParams {
				v := optimGoldenTensor(t, f, "init."+gp.name)
				ps = append(ps, &nn.Param{Name: gp.name, Value: v, Grad: tensor.New(v.Shape...), NoDecay: !gp.decay})
			}
			opt, err := nn.NewAdamW(ps, cfg)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for k, lr := range optimGoldenLRs {
				for _, p := range ps {
					copy(p.Grad.Data, optimGoldenTensor(t, f, fmt.Sprintf("grad.%d.%s", k, p.Name)).Data)
				}
				if err := opt.Step(lr); err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					want := optimGoldenTensor(t, f, fmt.Sprintf("%s.param.%d.%s", cfgName, k, p.Name))
					worst = max(worst, checkOptimClose(t, fmt.Sprintf("step %d %s", k, p.Name), p.Value.Data, want, 1e-6))
				}
			}
			state := opt.State()
			for _, p := range ps {
				checkOptimClose(t, "m "+p.Name, state["adam.m."+p.Name].Data, optimGoldenTensor(t, f, cfgName+".exp_avg."+p.Name), 1e-6)
				checkOptimClose(t, "v "+p.Name, state["adam.v."+p.Name].Data, optimGoldenTensor(t, f, cfgName+".exp_avg_sq."+p.Name), 1e-6)
			}
			if got := state["adam.step"].Data[0]; got != float32(len(optimGoldenLRs)) || opt.Steps() != len(optimGoldenLRs) {
				t.Errorf("step count %g (Steps %d), want %d", got, opt.Steps(), len(optimGoldenLRs))
			}
			t.Logf("worst relative error of a parameter against PyTorch: %.3g", worst)
		})
	}
}

// TestAdamWFirstStep checks the closed form of the first update, where m̂ = g and v̂ = g²:
// p₁ = p₀·(1 − lr·λ) − lr·g/(|g| + ε). Gradients of size ε make the default ε visible.
func TestAdamWFirstStep(t *testing.T) {
	const lr = 0.1
	for _, tc := range []struct {
		name    string
		cfg     nn.AdamWConfig
		noDecay bool
		lambda  float64
	}{
		{"defaults", nn.AdamWConfig{}, false, 0.01},
		{"NoDecay param", nn.AdamWConfig{}, true, 0},
		{"NoWeightDecay", nn.AdamWConfig{NoWeightDecay: true}, false, 0},
		{"explicit", nn.AdamWConfig{Beta1: 0.5, Beta2: 0.5, Eps: 1e-3, WeightDecay: 0.2}, false, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := &tensor.Tensor{Shape: []int{4}, Data: []float32{1, -2, 0.5, 3}}
			grad := &tensor.Tensor{Shape: []int{4}, Data: []float32{1e-8, -1e-8, 2, -0.25}}
			eps := tc.cfg.Eps
			if eps == 0 {
				eps = 1e-8
			}
			want := make([]float64, 4)
			for i, g := range grad.Data {
				g := float64(g)
				want[i] = float64(value.Data[i])*(1-lr*tc.lambda) - lr*g/(math.Abs(g)+eps)
			}
			opt, err := nn.NewAdamW([]*nn.Param{{Name: "p", Value: value, Grad: grad, NoDecay: tc.noDecay}}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := opt.Step(lr); err != nil {
				t.Fatal(err)
			}
			if e := tensor.RelError(value.Data, want); e > 1e-6 {
				t.Errorf("after one step %v, want %v (relative error %.3g)", value.Data, want, e)
			}
		})
	}
}

// adamFixture returns two parameters with fixed gradients.
func adamFixture() []*nn.Param {
	rng := tensor.NewRNG(7)
	var ps []*nn.Param
	for i, shape := range [][]int{{3, 4}, {5}} {
		p := &nn.Param{Name: fmt.Sprintf("p%d", i), Value: tensor.New(shape...), Grad: tensor.New(shape...), NoDecay: i == 1}
		rng.Normal(p.Value, 1)
		rng.Normal(p.Grad, 1)
		ps = append(ps, p)
	}
	return ps
}

func cloneAdamParams(ps []*nn.Param) []*nn.Param {
	out := make([]*nn.Param, len(ps))
	for i, p := range ps {
		out[i] = &nn.Param{Name: p.Name, Value: p.Value.Clone(), Grad: p.Grad.Clone(), NoDecay: p.NoDecay}
	}
	return out
}

func mustAdamW(t *testing.T, ps []*nn.Param) *nn.AdamW {
	t.Helper()
	opt, err := nn.NewAdamW(ps, nn.AdamWConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

func mustStep(t *testing.T, opt *nn.AdamW, lrs ...float64) {
	t.Helper()
	for _, lr := range lrs {
		if err := opt.Step(lr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdamWStateRoundTrip checks that an optimizer restored from State continues exactly as the
// original, and that State is a copy.
func TestAdamWStateRoundTrip(t *testing.T) {
	ps := adamFixture()
	a := mustAdamW(t, ps)
	mustStep(t, a, 0.1, 0.05, 0.02)
	state := a.State()
	state["model.weight"] = tensor.New(2) // outside the "adam." namespace: ignored

	qs := cloneAdamParams(ps)
	b := mustAdamW(t, qs)
	if err := b.LoadState(state); err != nil {
		t.Fatal(err)
	}
	for _, x := range state {
		clear(x.Data) // must not reach b
	}
	if b.Steps() != 3 {
		t.Errorf("Steps after LoadState = %d, want 3", b.Steps())
	}
	mustStep(t, a, 0.01, 0.03)
	mustStep(t, b, 0.01, 0.03)
	for i := range ps {
		if !slices.Equal(ps[i].Value.Data, qs[i].Value.Data) {
			t.Errorf("%s after restore and two steps: %v, want %v", ps[i].Name, qs[i].Value.Data, ps[i].Value.Data)
		}
	}
}

func TestAdamWLoadStateErrors(t *testing.T) {
	ps := adamFixture()
	src := mustAdamW(t, cloneAdamParams(ps))
	mustStep(t, src, 0.1)
	for _, tc := range []struct {
		name   string
		change func(map[string]*tensor.Tensor)
		want   string
	}{
		{"no step", func(s map[string]*tensor.Tensor) { delete(s, "adam.step") }, `lacks "adam.step"`},
		{"step not whole", func(s map[string]*tensor.Tensor) { s["adam.step"].Data[0] = 1.5 }, "whole number"},
		{"step negative", func(s map[string]*tensor.Tensor) { s["adam.step"].Data[0] = -1 }, "whole number"},
		{"step two values", func(s map[string]*tensor.Tensor) { s["adam.step"] = tensor.New(2) }, "2 values, want 1"},
		{"no m", func(s map[string]*tensor.Tensor) { delete(s, "adam.m.p1") }, `lacks "adam.m.p1"`},
		{"v shape", func(s map[string]*tensor.Tensor) { s["adam.v.p0"] = tensor.New(4, 3) }, `"adam.v.p0" is [4 3]`},
		{"v negative", func(s map[string]*tensor.Tensor) { s["adam.v.p1"].Data[2] = -1 }, "≥ 0"},
		{"m NaN", func(s map[string]*tensor.Tensor) { s["adam.m.p0"].Data[0] = float32(math.NaN()) }, "want finite"},
		{"unknown", func(s map[string]*tensor.Tensor) { s["adam.m.p9"] = tensor.New(1) }, `"adam.m.p9", which names no parameter`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := mustAdamW(t, ps)
			before := opt.State()
			state := src.State()
			tc.change(state)
			err := opt.LoadState(state)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadState error %v, want one containing %q", err, tc.want)
			}
			after := opt.State()
			for k, x := range before {
				if !slices.Equal(x.Data, after[k].Data) {
					t.Errorf("failed LoadState changed %s", k)
				}
			}
		})
	}
}

func TestNewAdamWErrors(t *testing.T) {
	good := func() []*nn.Param { return adamFixture() }
	for _, tc := range []struct {
		name string
		ps   []*nn.Param
		cfg  nn.AdamWConfig
		want string
	}{
		{"Beta1 1", good(), nn.AdamWConfig{Beta1: 1}, "Beta1 is 1"},
		{"Beta2 negative", good(), nn.AdamWConfig{Beta2: -0.1}, "Beta2 is -0.1"},
		{"Eps negative", good(), nn.AdamWConfig{Eps: -1}, "Eps is -1"},
		{"Eps NaN", good(), nn.AdamWConfig{Eps: math.NaN()}, "Eps is NaN"},
		{"WeightDecay negative", good(), nn.AdamWConfig{WeightDecay: -0.5}, "WeightDecay is -0.5"},
		{"NoWeightDecay with decay", good(), nn.AdamWConfig{WeightDecay: 0.1, NoWeightDecay: true}, "NoWeightDecay set"},
		{"nil param", []*nn.Param{nil}, nn.AdamWConfig{}, "parameter 0 is nil"},
		{"no grad", []*nn.Param{{Name: "x", Value: tensor.New(2)}}, nn.AdamWConfig{}, "parameter 0 is nil or lacks"},
		{"grad shape", []*nn.Param{{Name: "x", Value: tensor.New(2, 3), Grad: tensor.New(3, 2)}}, nn.AdamWConfig{}, `"x" has gradient [3 2]`},
		{"same name", []*nn.Param{{Name: "x", Value: tensor.New(1), Grad: tensor.New(1)}, {Name: "x", Value: tensor.New(1), Grad: tensor.New(1)}},
			nn.AdamWConfig{}, `"x" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nn.NewAdamW(tc.ps, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewAdamW error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestAdamWStepBadLR(t *testing.T) {
	ps := adamFixture()
	opt := mustAdamW(t, ps)
	before := ps[0].Value.Clone()
	for _, lr := range []float64{-0.1, math.NaN(), math.Inf(1)} {
		if err := opt.Step(lr); err == nil || !strings.Contains(err.Error(), "want a finite value ≥ 0") {
			t.Errorf("Step(%g) error %v, want one about the learning rate", lr, err)
		}
	}
	if opt.Steps() != 0 || !slices.Equal(before.Data, ps[0].Value.Data) {
		t.Errorf("a rejected Step changed the state: Steps %d", opt.Steps())
	}
}

func TestAdamWStepDoesNotAllocate(t *testing.T) {
	opt := mustAdamW(t, adamFixture())
	if n := testing.AllocsPerRun(20, func() { mustStep(t, opt, 1e-3) }); n != 0 {
		t.Errorf("Step allocates %v times per call, want 0", n)
	}
}

func TestClipGradNormMatchesPyTorch(t *testing.T) {
	f := readOptimGolden(t)
	var ps []*nn.Param
	for _, gp := range optimGoldenParams {
		g := optimGoldenTensor(t, f, "clip.grad."+gp.name)
		ps = append(ps, &nn.Param{Name: gp.name, Value: tensor.New(g.Shape...), Grad: g})
	}
	total := nn.ClipGradNorm(ps, optimGoldenMaxNorm)
	want := float64(optimGoldenTensor(t, f, "clip.total").Data[0])
	if e := math.Abs(total-want) / want; e > 1e-6 {
		t.Errorf("total norm %v, PyTorch %v (relative error %.3g)", total, want, e)
	}
	for _, p := range ps {
		checkOptimClose(t, "clipped "+p.Name, p.Grad.Data, optimGoldenTensor(t, f, "clip.clipped."+p.Name), 1e-6)
	}
}

// TestClipGradNorm checks the closed form on gradients (3, 4) and (12), whose norm is 13.
func TestClipGradNorm(t *testing.T) {
	grads := func(extra float32) []*nn.Param {
		return []*nn.Param{
			{Name: "a", Grad: &tensor.Tensor{Shape: []int{2}, Data: []float32{3, 4}}},
			{Name: "b", Grad: &tensor.Tensor{Shape: []int{1, 1}, Data: []float32{12 + extra}}},
		}
	}
	flat := func(ps []*nn.Param) []float32 { return append(slices.Clone(ps[0].Grad.Data), ps[1].Grad.Data...) }
	for _, tc := range []struct {
		name      string
		maxNorm   float64
		wantTotal float64
		want      []float64
	}{
		{"clips", 6.5, 13, []float64{3 * 6.5 / (13 + 1e-6), 4 * 6.5 / (13 + 1e-6), 12 * 6.5 / (13 + 1e-6)}},
		{"below", 20, 13, []float64{3, 4, 12}},
		{"equal", 13, 13, []float64{3, 4, 12}},
		{"off", 0, 13, []float64{3, 4, 12}},
		{"off NaN", math.NaN(), 13, []float64{3, 4, 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := grads(0)
			if total := nn.ClipGradNorm(ps, tc.maxNorm); total != tc.wantTotal {
				t.Errorf("total %v, want %v", total, tc.wantTotal)
			}
			if e := tensor.RelError(flat(ps), tc.want); e > 1e-7 {
				t.Errorf("gradients %v, want %v", flat(ps), tc.want)
			}
		})
	}
	ps := grads(float32(math.Inf(1)))
	if total := nn.ClipGradNorm(ps, 1); !math.IsInf(total, 1) {
		t.Errorf("total with an infinite gradient %v, want +Inf", total)
	}
	if got := flat(ps); got[0] != 3 || got[1] != 4 {
		t.Errorf("an infinite total changed the gradients to %v", got)
	}
}

func TestScheduleAt(t *testing.T) {
	s := nn.Schedule{LR: 1e-3, MinLR: 1e-4, WarmupSteps: 10, TotalSteps: 110}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	cosine := func(progress float64) float64 { return 1e-4 + 0.9e-3*(1+math.Cos(math.Pi*progress))/2 }
	for _, tc := range []struct {
		step int
		want float64
	}{
		{-3, 0},
		{0, 0},
		{4, 4e-4},
		{10, 1e-3},
		{35, cosine(0.25)},
		{60, 5.5e-4},
		{109, cosine(0.99)},
		{110, 1e-4},
		{1000, 1e-4},
	} {
		if got := s.At(tc.step); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("At(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	noWarmup := nn.Schedule{LR: 2, TotalSteps: 4}
	for step, want := range []float64{2, 1 + math.Sqrt(0.5), 1, 1 - math.Sqrt(0.5), 0} {
		if got := noWarmup.At(step); math.Abs(got-want) > 1e-15 {
			t.Errorf("without warm-up At(%d) = %v, want %v", step, got, want)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, tc := range []struct {
		s    nn.Schedule
		want string
	}{
		{nn.Schedule{}, "LR is 0"},
		{nn.Schedule{LR: math.Inf(1), TotalSteps: 1}, "LR is +Inf"},
		{nn.Schedule{LR: 1, MinLR: 2, TotalSteps: 1}, "MinLR is 2"},
		{nn.Schedule{LR: 1, MinLR: -1, TotalSteps: 1}, "MinLR is -1"},
		{nn.Schedule{LR: 1, WarmupSteps: -1, TotalSteps: 1}, "WarmupSteps is -1"},
		{nn.Schedule{LR: 1, WarmupSteps: 5, TotalSteps: 5}, "TotalSteps is 5, want more than WarmupSteps = 5"},
	} {
		if err := tc.s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate error %v, want one containing %q", tc.s, err, tc.want)
		}
	}
}

func ExampleSchedule_At() {
	s := nn.Schedule{LR: 1e-3, MinLR: 1e-4, WarmupSteps: 100, TotalSteps: 1100}
	if err := s.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	for _, step := range []int{0, 50, 100, 600, 1100} {
		fmt.Printf("step %4d: %.2e\n", step, s.At(step))
	}
	// Output:
	// step    0: 0.00e+00
	// step   50: 5.00e-04
	// step  100: 1.00e-03
	// step  600: 5.50e-04
	// step 1100: 1.00e-04
}

// BenchmarkAdamWStep times one step over 1M parameters, the size of the models nn trains.
func BenchmarkAdamWStep(b *testing.B) {
	p := &nn.Param{Name: "w", Value: tensor.New(1024, 1024), Grad: tensor.New(1024, 1024)}
	rng := tensor.NewRNG(1)
	rng.Normal(p.Value, 1)
	rng.Normal(p.Grad, 1)
	opt, err := nn.NewAdamW([]*nn.Param{p}, nn.AdamWConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(5 * 4 * int64(len(p.Value.Data))) // read p, g, m, v; write p, m, v: about 5 passes
	for b.Loop() {
		if err := opt.Step(1e-3); err != nil {
			b.Fatal(err)
		}
	}
}
