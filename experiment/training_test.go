package experiment

import (
	"context"
	"math"
	"reflect"
	"testing"
)

// TestStepsTo checks the step at which the windowed training accuracy first reaches a level.
func TestStepsTo(t *testing.T) {
	acc := make([]float64, 50)
	for i := 30; i < 50; i++ {
		acc[i] = 1
	}
	// The mean of the last 20 reaches 0.5 when 10 of them are 1: after step 40.
	if n := stepsTo(acc, 0.5); n == nil || *n != 40 {
		t.Errorf("stepsTo(…, 0.5) = %v, want 40", n)
	}
	if n := stepsTo(acc, 1); n == nil || *n != 50 {
		t.Errorf("stepsTo(…, 1) = %v, want 50", n)
	}
	if n := stepsTo(acc[:45], 1); n != nil {
		t.Errorf("stepsTo of a run that never gets there = %d, want nil", *n)
	}
}

// TestScaling checks the quick scaling experiment: the logit variance at initialisation is
// s²·d_k within 4 standard errors for every scheme and head, and scales exactly by s² between
// schemes (the layers drawn are the same); without scaling the larger head's attention is the
// most peaked (lowest entropy) and its query–key gradient the largest.
func TestScaling(t *testing.T) {
	res := run(t, "scaling")
	d := res.Data.(*ScalingData)
	if len(d.Heads) != 6 || len(d.Arms) != 3 {
		t.Fatalf("%d heads and %d arms, want 6 and 3", len(d.Heads), len(d.Arms))
	}
	for _, h := range d.Heads {
		if !(h.LogitVarSE > 0 && float64(h.LogitVarSE) < 0.05*h.Predicted && math.Abs(float64(h.LogitVar)-h.Predicted) <= 4*float64(h.LogitVarSE)) {
			t.Errorf("%s, head %d: logit variance %.4g ± %.2g σ⁴, want s²·d_k = %.4g within 4 standard errors", h.Scheme, h.Head, h.LogitVar, h.LogitVarSE, h.Predicted)
		}
		none := d.Heads[h.Head]
		if want := float64(none.LogitVar) * h.Scale * h.Scale; math.Abs(float64(h.LogitVar)-want) > 1e-9*want {
			t.Errorf("%s, head %d: logit variance %v, want s² × the unscaled %v = %v", h.Scheme, h.Head, h.LogitVar, none.LogitVar, want)
		}
	}
	none, perHead := d.Heads[1], d.Heads[5]
	for l := range none.Entropy {
		if !(none.Entropy[l] < perHead.Entropy[l]-1 && none.GradNorm[l] > perHead.GradNorm[l]) {
			t.Errorf("layer %d, head d_k = 128: unscaled entropy %.3f and gradient %.3g, scaled %.3f and %.3g; want the unscaled head saturated and its gradient larger",
				l, none.Entropy[l], none.GradNorm[l], perHead.Entropy[l], perHead.GradNorm[l])
		}
	}
	for _, a := range d.Arms {
		if len(a.Curve.Loss) != 20 || len(a.Curve.Accuracy) != 20 || a.Accuracy < 0 || a.Accuracy > 1 {
			t.Errorf("%s: %d losses, %d accuracies, accuracy %v", a.Scheme, len(a.Curve.Loss), len(a.Curve.Accuracy), a.Accuracy)
		}
	}
}

// TestHeadsDim checks the quick heads-vs-dim experiment: the same parameter count for every h,
// and ρ matrices of the right size, symmetric with a unit diagonal.
func TestHeadsDim(t *testing.T) {
	res := run(t, "heads-vs-dim")
	d := res.Data.(*HeadsDimData)
	if len(d.Rows) != len(headsDimCounts) || len(res.Pictures) < 2 {
		t.Fatalf("%d rows and %d pictures", len(d.Rows), len(res.Pictures))
	}
	const e = headsDimWidth
	for _, r := range d.Rows {
		if r.AttnParams != 4*e*e+4*e || r.ModelParams != d.Rows[0].ModelParams || r.HeadDim*r.Heads != e {
			t.Errorf("h = %d: %d attention and %d model parameters, want %d and the same for every h", r.Heads, r.AttnParams, r.ModelParams, 4*e*e+4*e)
		}
		for l, rho := range r.Rho {
			if len(rho) != r.Heads || (r.Heads == 1) != (r.MeanAbsRho[l] == nil) {
				t.Fatalf("h = %d, layer %d: %d×%d ρ, mean |ρ| %v", r.Heads, l, len(rho), len(rho), r.MeanAbsRho[l])
			}
			for i := range rho {
				for j := range rho {
					if rho[i][j] != rho[j][i] || (i == j && rho[i][i] != 1) || math.Abs(float64(rho[i][j])) > 1 {
						t.Errorf("h = %d, layer %d: ρ(%d, %d) = %v, ρ(%d, %d) = %v", r.Heads, l, i, j, rho[i][j], j, i, rho[j][i])
					}
				}
			}
		}
	}
}

// TestMIPenalty checks the quick mi-penalty experiment: every run records the MI estimate at
// every step, and the penalised runs end with a lower estimate in every layer than the run
// without the penalty. It also runs the experiment on one worker and expects the same numbers.
func TestMIPenalty(t *testing.T) {
	res := run(t, "mi-penalty")
	d := res.Data.(*MIPenaltyData)
	if len(d.Arms) != len(miLambdas) || d.Arms[0].Lambda != 0 {
		t.Fatalf("arms %+v", d.Arms)
	}
	for _, a := range d.Arms {
		if len(a.Curve.Penalty) != len(a.Curve.Loss) || len(a.MI) != 2 || len(a.RhoTerms) != 2 {
			t.Fatalf("λ = %v: %d penalties for %d steps, %d layers", a.Lambda, len(a.Curve.Penalty), len(a.Curve.Loss), len(a.MI))
		}
		for l := range a.MI {
			if a.Lambda > 0 && !(a.MI[l] < d.Arms[0].MI[l]/2) {
				t.Errorf("λ = %v, layer %d: MI estimate %.4g, want below half the unpenalised %.4g", a.Lambda, l, a.MI[l], d.Arms[0].MI[l])
			}
		}
	}
	one, err := Run(context.Background(), "mi-penalty", Config{Seed: 1, Quick: true, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one.Data, res.Data) {
		t.Error("one worker gave other numbers than GOMAXPROCS")
	}
}
