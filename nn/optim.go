package nn

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/mhalab/mha/tensor"
)

// AdamWConfig holds AdamW's hyperparameters. Its zero value gives torch.optim.AdamW's defaults:
// betas (0.9, 0.999), eps 1e-8, weight decay 0.01. The learning rate is not part of it: it is
// passed to every Step, so that a Schedule drives it.
type AdamWConfig struct {
	// Beta1 and Beta2 are the decay rates of the first and second moment estimates, in [0, 1);
	// 0 means the default (0.9 and 0.999), so a rate of exactly 0 cannot be asked for.
	Beta1, Beta2 float64
	// Eps is added to the root of the second moment; 0 means the default, 1e-8.
	Eps float64
	// WeightDecay is the decoupled weight decay λ (p ← p − lr·λ·p before the Adam update),
	// ≥ 0; 0 means the default, 0.01. Parameters marked NoDecay are never decayed.
	WeightDecay float64
	// NoWeightDecay turns weight decay off for every parameter; WeightDecay must then be 0.
	NoWeightDecay bool
}

// withDefaults returns c with its zero fields replaced by PyTorch's defaults, or an error when a
// field is out of range.
func (c AdamWConfig) withDefaults() (AdamWConfig, error) {
	if c.NoWeightDecay && c.WeightDecay != 0 {
		return c, fmt.Errorf("nn: AdamW weight decay is %g with NoWeightDecay set, want 0", c.WeightDecay)
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Beta1, 0.9)
	def(&c.Beta2, 0.999)
	def(&c.Eps, 1e-8)
	if !c.NoWeightDecay {
		def(&c.WeightDecay, 0.01)
	}
	if !(c.Beta1 >= 0 && c.Beta1 < 1) {
		return c, fmt.Errorf("nn: AdamW Beta1 is %g, want a value in [0, 1)", c.Beta1)
	}
	if !(c.Beta2 >= 0 && c.Beta2 < 1) {
		return c, fmt.Errorf("nn: AdamW Beta2 is %g, want a value in [0, 1)", c.Beta2)
	}
	if !(c.Eps > 0 && c.Eps < math.Inf(1)) {
		return c, fmt.Errorf("nn: AdamW Eps is %g, want a finite value > 0", c.Eps)
	}
	if !(c.WeightDecay >= 0 && c.WeightDecay < math.Inf(1)) {
		return c, fmt.Errorf("nn: AdamW WeightDecay is %g, want a finite value ≥ 0", c.WeightDecay)
	}
	return c, nil
}

// AdamW is torch.optim.AdamW (amsgrad off, maximize off) over a fixed list of parameters, computed
// in float32 in the order PyTorch 1.13's single-tensor implementation uses, so trajectories agree
// with PyTorch's to float32 rounding. It is not safe for concurrent use.
type AdamW struct {
	cfg    AdamWConfig
	params []*Param
	m, v   []*tensor.Tensor // first and second moments, one per parameter, shaped like it
	step   int
}

// NewAdamW returns an AdamW optimizer for ps with all moments zero and no step taken. It returns
// an error when cfg is out of range (see AdamWConfig), when a parameter is nil, lacks a Value or
// Grad, or has a Grad whose shape differs from its Value's, or when two parameters share a name
// (names key the optimizer state).
func NewAdamW(ps []*Param, cfg AdamWConfig) (*AdamW, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &AdamW{cfg: cfg, params: slices.Clone(ps)}
	seen := make(map[string]bool, len(ps))
	for i, p := range ps {
		if p != nil && p.Half != nil {
			return nil, fmt.Errorf("nn: AdamW parameter %q is held in %v, without a gradient; want float32 parameters (NewModel)", p.Name, p.Half.Format)
		}
		if p == nil || p.Value == nil || p.Grad == nil {
			return nil, fmt.Errorf("nn: AdamW parameter %d is nil or lacks a Value or Grad", i)
		}
		if !slices.Equal(p.Value.Shape, p.Grad.Shape) || len(p.Value.Data) != len(p.Grad.Data) {
			return nil, fmt.Errorf("nn: AdamW parameter %q has gradient %v (%d values), want %v (%d values)",
				p.Name, p.Grad.Shape, len(p.Grad.Data), p.Value.Shape, len(p.Value.Data))
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("nn: AdamW parameter name %q appears twice", p.Name)
		}
		seen[p.Name] = true
		o.m = append(o.m, tensor.New(p.Value.Shape...))
		o.v = append(o.v, tensor.New(p.Value.Shape...))
	}
	return o, nil
}

// Steps returns the number of steps taken, counting those of a loaded state.
func (o *AdamW) Steps() int { return o.step }

// Step applies one AdamW update with learning rate lr to every parameter from its Grad, as
// torch.optim.AdamW.step does for t = Steps()+1:
//
//	p ← p·(1 − lr·λ)                        (λ = 0 for NoDecay parameters)
//	m ← β₁·m + (1 − β₁)·g
//	v ← β₂·v + (1 − β₂)·g²
//	p ← p − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
//
// It returns an error, and changes nothing, when lr is negative or not finite; lr = 0 still
// advances the moments and the step count, as in PyTorch. Step does not allocate.
func (o *AdamW) Step(lr float64) error {
	if !(lr >= 0 && lr < math.Inf(1)) {
		return fmt.Errorf("nn: AdamW learning rate is %g, want a finite value ≥ 0", lr)
	}
	o.step++
	t := float64(o.step)
	c := o.cfg
	b1, b2 := float32(c.Beta1), float32(c.Beta2)
	a1, a2 := float32(1-c.Beta1), float32(1-c.Beta2)
	eps := float32(c.Eps)
	bc2Sqrt := float32(math.Sqrt(1 - math.Pow(c.Beta2, t)))
	negStepSize := float32(-lr / (1 - math.Pow(c.Beta1, t)))
	for i, p := range o.params {
		decay := float32(1)
		if !p.NoDecay {
			decay = float32(1 - lr*c.WeightDecay)
		}
		value, grad := p.Value.Data, p.Grad.Data[:len(p.Value.Data)]
		m, v := o.m[i].Data[:len(value)], o.v[i].Data[:len(value)]
		for j, g := range grad {
			mj := float32(m[j]*b1) + a1*g
			vj := float32(v[j]*b2) + float32(a2*g)*g
			denom := float32(math.Sqrt(float64(vj)))/bc2Sqrt + eps
			m[j], v[j] = mj, vj
			value[j] = float32(value[j]*decay) + float32(negStepSize*mj)/denom
		}
	}
	return nil
}

// The keys under which State stores AdamW's state: adamKeyPrefix+"m."+name and
// adamKeyPrefix+"v."+name for the moments of the parameter called name, adamStepKey for the step
// count.
const (
	adamKeyPrefix = "adam."
	adamStepKey   = adamKeyPrefix + "step"
)

// State returns a copy of the optimizer's state for a checkpoint: "adam.m.<name>" and
// "adam.v.<name>", the first and second moments of each parameter (shaped like it), and
// "adam.step", a scalar (shape []) holding the number of steps taken, which is how PyTorch stores
// it too (a float32 count is exact up to 2²⁴ steps).
func (o *AdamW) State() map[string]*tensor.Tensor {
	state := make(map[string]*tensor.Tensor, 2*len(o.params)+1)
	for i, p := range o.params {
		state[adamKeyPrefix+"m."+p.Name] = o.m[i].Clone()
		state[adamKeyPrefix+"v."+p.Name] = o.v[i].Clone()
	}
	state[adamStepKey] = &tensor.Tensor{Shape: []int{}, Data: []float32{float32(o.step)}}
	return state
}

// LoadState replaces the optimizer's state with one that State wrote. Keys outside the "adam."
// namespace are ignored, so a whole checkpoint can be passed. It returns an error, and changes
// nothing, when a key of State's is missing, when an "adam." key names no parameter, when a
// moment's shape differs from its parameter's, when a first moment is not finite or a second
// moment is negative or not finite, or when the step count is not a whole number in [0, 2²⁴].
func (o *AdamW) LoadState(state map[string]*tensor.Tensor) error {
	step, err := adamStepFrom(state[adamStepKey])
	if err != nil {
		return err
	}
	known := map[string]bool{adamStepKey: true}
	m := make([]*tensor.Tensor, len(o.params))
	v := make([]*tensor.Tensor, len(o.params))
	for i, p := range o.params {
		mKey, vKey := adamKeyPrefix+"m."+p.Name, adamKeyPrefix+"v."+p.Name
		known[mKey], known[vKey] = true, true
		if m[i], err = adamMomentFrom(state, mKey, p, false); err != nil {
			return err
		}
		if v[i], err = adamMomentFrom(state, vKey, p, true); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(state)) {
		if strings.HasPrefix(k, adamKeyPrefix) && !known[k] {
			return fmt.Errorf("nn: AdamW state holds %q, which names no parameter of this optimizer", k)
		}
	}
	for i := range o.params {
		copy(o.m[i].Data, m[i].Data)
		copy(o.v[i].Data, v[i].Data)
	}
	o.step = step
	return nil
}

// adamStepFrom validates the step count tensor of a saved state.
func adamStepFrom(t *tensor.Tensor) (int, error) {
	if t == nil {
		return 0, fmt.Errorf("nn: AdamW state lacks %q", adamStepKey)
	}
	if len(t.Data) != 1 {
		return 0, fmt.Errorf("nn: AdamW state %q has %d values, want 1", adamStepKey, len(t.Data))
	}
	s := float64(t.Data[0])
	if !(s >= 0 && s <= 1<<24 && s == math.Trunc(s)) {
		return 0, fmt.Errorf("nn: AdamW state %q is %g, want a whole number in [0, 2^24]", adamStepKey, s)
	}
	return int(s), nil
}

// adamMomentFrom returns the moment stored under key for parameter p after checking its shape and
// values; nonNegative asks for a second moment.
func adamMomentFrom(state map[string]*tensor.Tensor, key string, p *Param, nonNegative bool) (*tensor.Tensor, error) {
	t := state[key]
	if t == nil {
		return nil, fmt.Errorf("nn: AdamW state lacks %q", key)
	}
	if !slices.Equal(t.Shape, p.Value.Shape) || len(t.Data) != len(p.Value.Data) {
		return nil, fmt.Errorf("nn: AdamW state %q is %v (%d values), want %v",
			key, t.Shape, len(t.Data), p.Value.Shape)
	}
	for i, x := range t.Data {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || (nonNegative && x < 0) {
			want := "finite"
			if nonNegative {
				want = "finite and ≥ 0"
			}
			return nil, fmt.Errorf("nn: AdamW state %q holds %g at index %d, want %s values", key, x, i, want)
		}
	}
	return t, nil
}

// ClipGradNorm scales the gradients of ps together so that their joint L2 norm is at most
// maxNorm, as torch.nn.utils.clip_grad_norm_ does, and returns the norm they had before. The norm
// is summed in float64 over the parameters in order, so it does not depend on anything but ps.
// When total > maxNorm every gradient is multiplied by maxNorm/(total + 1e-6), rounded to
// float32; otherwise the gradients are left alone.
//
// A maxNorm that is ≤ 0 or NaN turns clipping off and only measures the norm (as Hugging Face's
// Trainer treats max_grad_norm ≤ 0). A total that is not finite (a gradient holds NaN or ±Inf)
// also leaves the gradients unchanged, where PyTorch would scale them by 0 or NaN: the caller
// sees it in the result and can skip the step. Every Param must be non-nil; those without a Grad
// (held in half precision) are skipped.
func ClipGradNorm(ps []*Param, maxNorm float64) (total float64) {
	var sum float64
	for _, p := range ps {
		if p.Grad == nil {
			continue
		}
		for _, g := range p.Grad.Data {
			sum += float64(g) * float64(g)
		}
	}
	total = math.Sqrt(sum)
	if !(maxNorm > 0 && total > maxNorm && total < math.Inf(1)) {
		return total
	}
	scale := float32(maxNorm / (total + 1e-6))
	for _, p := range ps {
		if p.Grad == nil {
			continue
		}
		for i := range p.Grad.Data {
			p.Grad.Data[i] *= scale
		}
	}
	return total
}

// Schedule is a learning-rate schedule: a linear warm-up from 0 to LR over the first WarmupSteps
// steps, then a cosine decay from LR to MinLR, reached at step TotalSteps and held after it.
// Check it with Validate before use.
type Schedule struct {
	LR          float64 // the peak rate, reached at step WarmupSteps; finite and > 0
	MinLR       float64 // the final rate, in [0, LR]
	WarmupSteps int     // ≥ 0; 0 starts the decay at once
	TotalSteps  int     // > WarmupSteps
}

// Validate returns an error saying which field is out of range, or nil.
func (s Schedule) Validate() error {
	switch {
	case !(s.LR > 0 && s.LR < math.Inf(1)):
		return fmt.Errorf("nn: schedule LR is %g, want a finite value > 0", s.LR)
	case !(s.MinLR >= 0 && s.MinLR <= s.LR):
		return fmt.Errorf("nn: schedule MinLR is %g, want a value in [0, LR = %g]", s.MinLR, s.LR)
	case s.WarmupSteps < 0:
		return fmt.Errorf("nn: schedule WarmupSteps is %d, want ≥ 0", s.WarmupSteps)
	case s.TotalSteps <= s.WarmupSteps:
		return fmt.Errorf("nn: schedule TotalSteps is %d, want more than WarmupSteps = %d", s.TotalSteps, s.WarmupSteps)
	}
	return nil
}

// At returns the learning rate for step, counted from 0 (the rate of the first update is At(0)),
// with W = WarmupSteps and T = TotalSteps:
//
//	step < W:       LR·step/W
//	W ≤ step < T:   MinLR + (LR − MinLR)·(1 + cos(π·(step − W)/(T − W)))/2
//	step ≥ T:       MinLR
//
// This is Hugging Face's get_cosine_schedule_with_warmup with a floor: At(0) = 0 when W > 0,
// At(W) = LR. A negative step counts as 0. The result is meaningful only for a valid Schedule.
func (s Schedule) At(step int) float64 {
	step = max(step, 0)
	switch {
	case step >= s.TotalSteps:
		return s.MinLR
	case step < s.WarmupSteps:
		return s.LR * float64(step) / float64(s.WarmupSteps)
	}
	progress := float64(step-s.WarmupSteps) / float64(s.TotalSteps-s.WarmupSteps)
	return s.MinLR + (s.LR-s.MinLR)*(1+math.Cos(math.Pi*progress))/2
}
