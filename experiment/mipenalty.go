package experiment

import (
	"context"
	"fmt"
	"strings"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// MIPenaltyArm is one training run of the mi-penalty experiment.
type MIPenaltyArm struct {
	Lambda      float64        `json:"lambda"` // the penalty's weight λ
	Curve       Curve          `json:"curve"`  // Penalty holds the unweighted estimate Σ_l Σ_{i<j} MI_ij, nats
	Loss        jsonnum.Number `json:"loss"`
	Accuracy    jsonnum.Number `json:"accuracy"`
	SeqAccuracy jsonnum.Number `json:"seq_accuracy"`
	StepsTo99   *int           `json:"steps_to_99"` // steps until the training accuracy (see stepsTo) reaches 99%; null if never
	// Per layer, on one evaluation batch after training: MI is probe.MIPenalty of the head
	// outputs (Σ over pairs, nats); RhoHeads the mean |ρ_ij| of the head outputs, the redundancy
	// the penalty acts on; RhoTerms the mean |ρ_ij| of the heads' terms of the output projection,
	// which no rotation of a head's coordinates can change; PrefixMatching the best
	// prefix-matching score of the layer's heads. NaN or ±Inf (null in JSON) where undefined:
	// MI is +Inf for two heads with |ρ| = 1, RhoHeads and RhoTerms NaN with one head.
	MI             []jsonnum.Number `json:"mi"`
	RhoHeads       []jsonnum.Number `json:"rho_heads"`
	RhoTerms       []jsonnum.Number `json:"rho_terms"`
	PrefixMatching []jsonnum.Number `json:"prefix_matching"`
}

// MIPenaltyData is the Data of the mi-penalty experiment.
type MIPenaltyData struct {
	Task string         `json:"task"`
	Arms []MIPenaltyArm `json:"arms"`
}

// miLambdas are the penalty's weights the experiment trains with: none, and two others.
var miLambdas = []float64{0, 0.1, 1}

// MIPenalty runs chapter 002's proposal to make heads specialise by penalising the
// mutual information between their outputs: the shipped induction model's architecture (2
// layers of 4 heads, d_model 64, attention only) trains on its task from the same seed and
// batches (1500 steps by default) with loss L + λ·Σ_l P_l, P_l = probe.MIPenalty of layer l's
// head outputs (the Gaussian estimate −½·ln(1 − r²) summed over pairs), for λ in miLambdas. It
// reports, per run, the accuracy and loss, and per layer the MI estimate, the redundancy mean
// |ρ_ij| of the head outputs, and the same redundancy measured on the heads' terms of the
// output projection (see outputTerms), which tells a real change of what the heads compute
// from a rotation of their coordinates. Data is a *MIPenaltyData; the pictures are "loss" and
// "mi", the training curves of the loss and of the MI estimate.
func MIPenalty(ctx context.Context, cfg Config) (*Result, error) {
	task, err := tasks.New("induction", tasks.Config{})
	if err != nil {
		return nil, err
	}
	data := &MIPenaltyData{Task: task.Name()}
	mc := nn.Config{DModel: 64, Heads: 4, Layers: 2, AttnOnly: true, Norm: nn.PreNorm, Positions: nn.Learned, Seed: cfg.Seed}
	tc := trainSettings(cfg, 1500, 20)
	for _, lambda := range miLambdas {
		t, err := trainModel(ctx, cfg, mc, task, tc, miPenalty(lambda))
		if err != nil {
			return nil, err
		}
		arm := MIPenaltyArm{
			Lambda: lambda, Curve: t.curve, Loss: t.report.Loss, Accuracy: t.report.Accuracy, SeqAccuracy: t.report.SeqAccuracy,
			StepsTo99: stepsTo(t.curve.Accuracy, 0.99),
		}
		if err := redundancy(cfg, t, task, &arm); err != nil {
			return nil, err
		}
		data.Arms = append(data.Arms, arm)
	}
	return miResult(data), nil
}

// miPenalty returns the training hook that adds λ·Σ_l probe.MIPenalty(layer l's heads) to the
// loss. It reports the unweighted sum, so that runs with different λ compare.
func miPenalty(lambda float64) penaltyFunc {
	return func(m *nn.Model) (float64, []*tensor.Tensor, error) {
		mc := m.Config()
		dims := make([]int, mc.Heads)
		for h := range dims {
			dims[h] = mc.DModel / mc.Heads
		}
		total := 0.0
		grads := make([]*tensor.Tensor, mc.Layers)
		for l := range grads {
			heads := m.Heads(l)
			grads[l] = tensor.New(heads.Shape...)
			p, err := probe.MIPenalty(heads, dims, grads[l])
			if err != nil {
				return 0, nil, err
			}
			for i := range grads[l].Data {
				grads[l].Data[i] *= float32(lambda)
			}
			total += p
		}
		return total, grads, nil
	}
}

// redundancy fills in arm's per-layer measurements on one evaluation batch.
func redundancy(cfg Config, t *trained, task tasks.Task, arm *MIPenaltyArm) error {
	bt, err := task.Batch(probe.EvalSeed, evalSettings(cfg).Batch)
	if err != nil {
		return err
	}
	c, err := probe.Record(t.model, bt.Tokens, bt.B, bt.T, &probe.RecordOptions{Workers: cfg.Workers})
	if err != nil {
		return err
	}
	for l, heads := range c.Heads {
		mi, err := probe.MIPenalty(heads, c.HeadDims, nil)
		if err != nil {
			return err
		}
		rho, err := probe.Similarity(heads, c.HeadDims)
		if err != nil {
			return err
		}
		terms, blocks, err := termTensor(t.model, l, heads, c.HeadDims)
		if err != nil {
			return err
		}
		rhoTerms, err := probe.Similarity(terms, blocks)
		if err != nil {
			return err
		}
		arm.MI = append(arm.MI, jsonnum.Number(mi))
		arm.RhoHeads = append(arm.RhoHeads, jsonnum.Number(orNaN(meanAbsOffDiagonal(rho))))
		arm.RhoTerms = append(arm.RhoTerms, jsonnum.Number(orNaN(meanAbsOffDiagonal(rhoTerms))))
		arm.PrefixMatching = append(arm.PrefixMatching, bestPrefixMatching(t.report, l))
	}
	return nil
}

// miResult lays out the mi-penalty experiment's table, summary and charts.
func miResult(d *MIPenaltyData) *Result {
	res := &Result{
		Name:  "mi-penalty",
		Title: "A penalty on the mutual information between head outputs (chapter 002)",
		Table: Table{Columns: []string{"λ", "layer", "MI estimate (nats)", "mean |ρ_ij| of head outputs", "mean |ρ_ij| of W_O terms", "best prefix-match", "steps to 99%", "loss", "accuracy", "sequences"}},
		Data:  d,
	}
	var names []string
	var loss, mi [][]float64
	for _, a := range d.Arms {
		for l := range a.MI {
			res.Table.Rows = append(res.Table.Rows, []string{
				fmt.Sprint(a.Lambda), fmt.Sprint(l), fmt.Sprintf("%.4f", a.MI[l]), fmt.Sprintf("%.3f", a.RhoHeads[l]),
				fmt.Sprintf("%.3f", a.RhoTerms[l]), fmt.Sprintf("%.2f", a.PrefixMatching[l]),
				countOrDash(a.StepsTo99), fmt.Sprintf("%.4f", a.Loss), pct(a.Accuracy), pct(a.SeqAccuracy),
			})
		}
		names = append(names, fmt.Sprintf("λ = %g", a.Lambda))
		loss = append(loss, a.Curve.Loss)
		mi = append(mi, a.Curve.Penalty)
	}
	res.Summary = miSummary(d)
	res.Pictures = []Figure{
		{Name: "loss", Picture: curveChart("Training loss with and without the MI penalty", "loss (nats)", names, loss, true)},
		{Name: "mi", Picture: curveChart("MI estimate between head outputs during training, Σ over layers and pairs", "Σ −½·ln(1 − r²) (nats)", names, mi, false)},
	}
	return res
}

// miSummary states what the mi-penalty experiment found, comparing each penalised run with the
// first (unpenalised) one.
func miSummary(d *MIPenaltyData) string {
	base := d.Arms[0]
	s := fmt.Sprintf("After %d steps on %s, without the penalty (λ = %g): accuracy %s, loss %.4f, MI estimate %s nats, mean |ρ| of head outputs %s, of W_O terms %s (layers 0, 1).",
		len(base.Curve.Loss), d.Task, base.Lambda, pct(base.Accuracy), base.Loss, pair(base.MI, "%.4f"), pair(base.RhoHeads, "%.3f"), pair(base.RhoTerms, "%.3f"))
	for _, a := range d.Arms[1:] {
		s += fmt.Sprintf(" With λ = %g: accuracy %s, loss %.4f; per layer the MI estimate changes by %s, mean |ρ| of head outputs by %s, of W_O terms by %s.",
			a.Lambda, pct(a.Accuracy), a.Loss, change(base.MI, a.MI), change(base.RhoHeads, a.RhoHeads), change(base.RhoTerms, a.RhoTerms))
	}
	return s + " The penalty sees only the head outputs' own coordinates: where it lowers their correlation but not that of the W_O terms, the heads have rotated their coordinates rather than changed what they compute."
}

// change prints the relative change from before to after, per layer: "−94%, −100%".
func change(before, after []jsonnum.Number) string {
	parts := make([]string, len(before))
	for i := range before {
		parts[i] = fmt.Sprintf("%+.0f%%", 100*(after[i]-before[i])/before[i])
	}
	return strings.Join(parts, ", ")
}
