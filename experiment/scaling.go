package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// ScalingScheme is one choice of the heads' logit scales s_h (logits s_h·Q_h·K_hᵀ).
type ScalingScheme struct {
	Name   string    `json:"name"`
	Scales []float64 `json:"scales"` // per head
}

// ScalingHead is one head under one scheme, at initialisation.
type ScalingHead struct {
	Scheme string  `json:"scheme"`
	Head   int     `json:"head"`
	Dim    int     `json:"dim"`   // d_k
	Scale  float64 `json:"scale"` // s_h
	// LogitVar is the variance of the head's logits s_h·q·k over independent random queries and
	// keys, divided by σ⁴ = the mean over the head's d_k coordinates of Var(q_a)·Var(k_a), both
	// measured in each of several freshly drawn layers and the ratio averaged over them: the
	// chapter's derivation predicts s_h²·d_k (Predicted) for independent zero-mean coordinates.
	LogitVar   jsonnum.Number `json:"logit_var"`
	LogitVarSE jsonnum.Number `json:"logit_var_se"` // its standard error, from the spread over the layers drawn
	Predicted  float64        `json:"predicted"`
	// Entropy is the mean entropy of the head's attention rows in each layer of the model at
	// initialisation, nats; GradNorm the norm of the loss's gradient with respect to the head's
	// query and key weights (its rows of W_q and W_k) in each layer, on one batch.
	Entropy  []jsonnum.Number `json:"entropy"`
	GradNorm []jsonnum.Number `json:"grad_norm"`
}

// ScalingArm is the training run of one scheme.
type ScalingArm struct {
	Scheme      string         `json:"scheme"`
	Curve       Curve          `json:"curve"`
	Loss        jsonnum.Number `json:"loss"`         // evaluation loss after training
	Accuracy    jsonnum.Number `json:"accuracy"`     // evaluation accuracy after training
	SeqAccuracy jsonnum.Number `json:"seq_accuracy"` // fraction of sequences entirely right
	StepsTo99   *int           `json:"steps_to_99"`  // steps until the training accuracy (see stepsTo) reaches 99%; null if never
}

// ScalingData is the Data of the scaling experiment.
type ScalingData struct {
	HeadDims []int           `json:"head_dims"`
	Schemes  []ScalingScheme `json:"schemes"`
	Heads    []ScalingHead   `json:"heads"` // scheme by scheme, head by head
	Arms     []ScalingArm    `json:"arms"`  // one per scheme
	Task     string          `json:"task"`
	SeqLen   int             `json:"seq_len"` // the task's sequence length, also that of the random queries and keys
}

// scalingDims are chapter 002's two heads: d_k = 32 and 128 in one layer of d_model = 160.
var scalingDims = []int{32, 128}

// scalingSchemes are the chapter's three choices: no scaling, one global 1/√64 for both heads,
// and each head's own 1/√d_k.
func scalingSchemes() []ScalingScheme {
	perHead := make([]float64, len(scalingDims))
	for h, d := range scalingDims {
		perHead[h] = 1 / math.Sqrt(float64(d))
	}
	return []ScalingScheme{
		{"none", []float64{1, 1}},
		{"global 1/√64", []float64{1 / math.Sqrt(64), 1 / math.Sqrt(64)}},
		{"per head 1/√d_k", perHead},
	}
}

// Scaling runs chapter 002's scaling experiment on two heads of different sizes, d_k = 32 and
// 128, in layers of d_model = 160, under three logit scales: none, a global 1/√64, and each
// head's 1/√d_k. At initialisation it measures, per head, the variance of the logits on
// independent N(0, 1) queries and keys of freshly drawn layers (against the chapter's s²·d_k),
// and, in a 2-layer attention-only model on the induction task, the entropy of the attention
// and the gradient norm of the head's query and key weights. Then it trains that model under
// each scheme from the same initialisation on the same batches (600 steps by default) and
// compares the training curves and the final accuracy. Data is a *ScalingData; the pictures are
// "loss" and "accuracy", the training curves.
func Scaling(ctx context.Context, cfg Config) (*Result, error) {
	task, err := tasks.New("induction", tasks.Config{})
	if err != nil {
		return nil, err
	}
	data := &ScalingData{HeadDims: scalingDims, Schemes: scalingSchemes(), Task: task.Name(), SeqLen: task.SeqLen()}
	tc := trainSettings(cfg, 600, 20)
	for _, s := range data.Schemes {
		heads, err := logitVariance(ctx, cfg, s, data.SeqLen)
		if err != nil {
			return nil, err
		}
		mc := nn.Config{
			DModel: sumInts(scalingDims), Heads: len(scalingDims), HeadDims: scalingDims, HeadScales: s.Scales, Layers: 2, AttnOnly: true,
			Norm: nn.PreNorm, Positions: nn.Learned, Seed: cfg.Seed,
		}
		if err := initGradients(cfg, mc, task, heads); err != nil {
			return nil, err
		}
		data.Heads = append(data.Heads, heads...)
		t, err := trainModel(ctx, cfg, mc, task, tc, nil)
		if err != nil {
			return nil, err
		}
		data.Arms = append(data.Arms, ScalingArm{
			Scheme: s.Name, Curve: t.curve, Loss: t.report.Loss, Accuracy: t.report.Accuracy, SeqAccuracy: t.report.SeqAccuracy,
			StepsTo99: stepsTo(t.curve.Accuracy, 0.99),
		})
	}
	return scalingResult(data), nil
}

// logitSamples returns how many layers logitVariance draws and how many sequences of queries
// and keys it runs through each.
func logitSamples(quick bool) (layers, batch int) {
	if quick {
		return 8, 2
	}
	return 16, 4
}

// logitVariance draws layers of scheme s and independent N(0, 1) queries and keys of length t,
// and returns each head's row with LogitVar, its standard error and Predicted filled in.
func logitVariance(ctx context.Context, cfg Config, s ScalingScheme, t int) ([]ScalingHead, error) {
	e := sumInts(scalingDims)
	layers, b := logitSamples(cfg.Quick)
	ratios := make([][]float64, len(scalingDims)) // per head, per layer
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0x5ca1e))
	q, k := tensor.New(b, t, e), tensor.New(b, t, e)
	for range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := mha.Config{EmbedDim: e, NumHeads: len(scalingDims), HeadDims: scalingDims, HeadScales: s.Scales, Seed: seeds.Uint64()}
		layer, err := mha.New(c)
		if err != nil {
			return nil, err
		}
		rng := tensor.NewRNG(seeds.Uint64())
		rng.Normal(q, 1)
		rng.Normal(k, 1)
		tr, err := layer.Reference(q, k, k, nil)
		if err != nil {
			return nil, err
		}
		for h := range ratios {
			var logits []float64
			for bi := range b {
				logits = append(logits, tr.Scaled[(bi*len(ratios)+h)*t*t:][:t*t]...)
			}
			sigma4 := coordinateVariances(tr.Q, tr.K, e, c.HeadOffset(h), c.HeadDim(h))
			ratios[h] = append(ratios[h], variance(logits)/sigma4)
		}
	}
	heads := make([]ScalingHead, len(scalingDims))
	for h, d := range scalingDims {
		mean, se := meanSE(ratios[h])
		heads[h] = ScalingHead{
			Scheme: s.Name, Head: h, Dim: d, Scale: s.Scales[h],
			LogitVar: jsonnum.Number(mean), LogitVarSE: jsonnum.Number(se), Predicted: s.Scales[h] * s.Scales[h] * float64(d),
		}
	}
	return heads, nil
}

// variance returns the unbiased sample variance of x, Σ(x − mean)²/(n − 1).
func variance(x []float64) float64 {
	n := float64(len(x))
	mean, sq := 0.0, 0.0
	for _, v := range x {
		mean += v / n
	}
	for _, v := range x {
		sq += (v - mean) * (v - mean)
	}
	return sq / (n - 1)
}

// meanSE returns the mean of x and its standard error, sd/√n.
func meanSE(x []float64) (mean, se float64) {
	n := float64(len(x))
	for _, v := range x {
		mean += v / n
	}
	for _, v := range x {
		se += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(se / (n - 1) / n)
}

// coordinateVariances returns σ⁴, the mean over the d columns from off of Var(q_a)·Var(k_a), for
// q and k of rows of width e.
func coordinateVariances(q, k []float64, e, off, d int) float64 {
	column := func(x []float64, a int) []float64 {
		c := make([]float64, 0, len(x)/e)
		for r := a; r < len(x); r += e {
			c = append(c, x[r])
		}
		return c
	}
	s := 0.0
	for a := off; a < off+d; a++ {
		s += variance(column(q, a)) * variance(column(k, a)) / float64(d)
	}
	return s
}

// initGradients builds the model mc for task as initialised and fills in each head's attention
// entropy and query–key gradient norm, per layer, on one batch.
func initGradients(cfg Config, mc nn.Config, task tasks.Task, heads []ScalingHead) error {
	mc.Vocab, mc.SeqLen = task.Vocab(), task.SeqLen()
	m, err := nn.NewModel(mc)
	if err != nil {
		return err
	}
	ev := evalSettings(cfg)
	bt, err := task.Batch(probe.EvalSeed, ev.Batch)
	if err != nil {
		return err
	}
	if _, err := m.Forward(bt.Tokens, bt.B, bt.T, &nn.RunOptions{KeepWeights: true, Workers: cfg.Workers}); err != nil {
		return err
	}
	entropy := make([][]float64, mc.Layers)
	for l := range entropy {
		if entropy[l], err = probe.Entropy(m.Weights(l)); err != nil {
			return err
		}
	}
	if _, _, _, err := m.Loss(bt.Targets, bt.Scored); err != nil {
		return err
	}
	if err := m.Backward(); err != nil { // a new model's gradients start at zero
		return err
	}
	grads := map[string]*tensor.Tensor{}
	for _, p := range m.Params() {
		grads[p.Name] = p.Grad
	}
	e, off := mc.DModel, 0
	for h := range heads {
		d := heads[h].Dim
		for l := range mc.Layers {
			g := grads[fmt.Sprintf("blocks.%d.attn.in_proj_weight", l)].Data // [3E, E]: W_q; W_k; W_v
			sq := 0.0
			for _, block := range []int{0, e} {
				for _, v := range g[(block+off)*e : (block+off+d)*e] {
					sq += float64(v) * float64(v)
				}
			}
			heads[h].Entropy = append(heads[h].Entropy, jsonnum.Number(entropy[l][h]))
			heads[h].GradNorm = append(heads[h].GradNorm, jsonnum.Number(math.Sqrt(sq)))
		}
		off += d
	}
	return nil
}

// scalingResult lays out the scaling experiment's table, summary and charts.
func scalingResult(d *ScalingData) *Result {
	res := &Result{
		Name:  "scaling",
		Title: "Scaling the logits of heads of different sizes, d_k = 32 and 128 (chapter 002)",
		Table: Table{Columns: []string{"scheme", "head", "d_k", "s_h", "logit var / σ⁴", "s_h²·d_k", "entropy at init (L0, L1)", "‖∂L/∂W_qk‖ at init (L0, L1)", "steps to 99%", "loss after training", "accuracy"}},
		Data:  d,
	}
	arms := map[string]ScalingArm{}
	for _, a := range d.Arms {
		arms[a.Scheme] = a
	}
	for _, h := range d.Heads {
		a := arms[h.Scheme]
		res.Table.Rows = append(res.Table.Rows, []string{
			h.Scheme, strconv.Itoa(h.Head), strconv.Itoa(h.Dim), fmt.Sprintf("%.4f", h.Scale),
			fmt.Sprintf("%.3g ± %.2g", h.LogitVar, h.LogitVarSE), sig(h.Predicted), pair(h.Entropy, "%.3f"), pair(h.GradNorm, "%.3g"),
			countOrDash(a.StepsTo99), fmt.Sprintf("%.4f", a.Loss), pct(a.Accuracy),
		})
	}
	res.Summary = scalingSummary(d)
	var names []string
	var loss, acc [][]float64
	for _, a := range d.Arms {
		names = append(names, a.Scheme)
		loss = append(loss, a.Curve.Loss)
		acc = append(acc, a.Curve.Accuracy)
	}
	res.Pictures = []Figure{
		{Name: "loss", Picture: curveChart("Training loss under three logit scales (heads of d_k 32 and 128)", "loss (nats)", names, loss, true)},
		{Name: "accuracy", Picture: curveChart("Training accuracy under three logit scales (heads of d_k 32 and 128)", "accuracy", names, acc, false)},
	}
	return res
}

// scalingSummary states what the scaling experiment found.
func scalingSummary(d *ScalingData) string {
	s := "Logit variance at initialisation, in units of σ⁴, head d_k = 128 against head d_k = 32:"
	for i, sc := range d.Schemes {
		h0, h1 := d.Heads[2*i], d.Heads[2*i+1]
		s += fmt.Sprintf(" %s %.3g vs %.3g (ratio %.2f; s²·d_k predicts %.3g vs %.3g);", sc.Name, h1.LogitVar, h0.LogitVar, h1.LogitVar/h0.LogitVar, h1.Predicted, h0.Predicted)
	}
	s = s[:len(s)-1] + ". Entropy of the attention at initialisation (layer 0), head 0 and head 1:"
	for i, sc := range d.Schemes {
		s += fmt.Sprintf(" %s %.2f and %.2f nats;", sc.Name, d.Heads[2*i].Entropy[0], d.Heads[2*i+1].Entropy[0])
	}
	lnFact, _ := math.Lgamma(float64(d.SeqLen + 1))
	s = s[:len(s)-1] + fmt.Sprintf(" (uniform causal attention over %d positions: %.2f). After %d steps on %s:", d.SeqLen, lnFact/float64(d.SeqLen), len(d.Arms[0].Curve.Loss), d.Task)
	for _, a := range d.Arms {
		s += fmt.Sprintf(" %s loss %.4f, accuracy %s, %s;", a.Scheme, a.Loss, pct(a.Accuracy), reached(a.StepsTo99))
	}
	return s[:len(s)-1] + "."
}

// pair prints per-layer values separated by commas, each with format f.
func pair[F ~float64](x []F, f string) string {
	s := ""
	for i, v := range x {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf(f, v)
	}
	return s
}
