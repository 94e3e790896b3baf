package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/train"
	"github.com/mhalab/mha/viz"
)

// CircuitsData is the numbers behind the circuits experiment.
type CircuitsData struct {
	Sequences int `json:"sequences"` // clean/corrupted pairs per corruption
	Repeat    int `json:"repeat"`    // n: BOS, n distinct tokens, the same n again
	// Corruptions are the two patching runs: "match" (the first occurrence of the current
	// token replaced, so no earlier token matches it) and "copy" (the first occurrence of the
	// token to predict replaced).
	Corruptions []CircuitPatching `json:"corruptions"`
	// Top are the heads ranked by their score under the match corruption, best first.
	Top []HeadRef `json:"top"`
	// Base is the model's score on the induction task with no head ablated.
	Base probe.Score `json:"base"`
	// Ablations are the scores with the top k heads and with k random heads mean-ablated.
	Ablations []CircuitAblation `json:"ablations"`
}

// HeadRef names one head.
type HeadRef struct {
	Layer int `json:"layer"`
	Head  int `json:"head"`
}

// CircuitPatching is one corruption's patching: the logit difference LD = logit(target) −
// logit(foil) averaged over the pairs, and each head's normalised score (mean LD_patched −
// mean LD_corrupt) / (mean LD_clean − mean LD_corrupt), [Layers][Heads].
type CircuitPatching struct {
	Name      string             `json:"name"`
	About     string             `json:"about"`
	LDClean   jsonnum.Number     `json:"ld_clean"`
	LDCorrupt jsonnum.Number     `json:"ld_corrupt"`
	Heads     [][]jsonnum.Number `json:"heads"`
}

// CircuitAblation is the task's score with K heads mean-ablated: the top K by patching, and K
// heads drawn at random (Draws draws; their mean, standard deviation and worst accuracy).
type CircuitAblation struct {
	K              int            `json:"k"`
	Top            probe.Score    `json:"top"`
	Draws          int            `json:"draws"`
	RandomAccuracy jsonnum.Number `json:"random_accuracy"` // mean over the draws
	RandomAccSD    jsonnum.Number `json:"random_accuracy_sd"`
	RandomAccMin   jsonnum.Number `json:"random_accuracy_min"`
	RandomLoss     jsonnum.Number `json:"random_loss"` // mean over the draws
}

// Circuits shows by activation patching which heads of the shipped induction model its
// behaviour needs, and checks it by ablation. On pairs of sequences BOS x_1 … x_n x_1 … x_n, the
// metric is LD = logit(x_{k+1}) − logit(foil) at the second copy of x_k; the "match" corruption
// replaces the first x_k (nothing earlier matches the current token: the previous-token head's
// output at the next position, and the induction heads' attention, change), the "copy"
// corruption replaces the first x_{k+1} (the foil: the token the induction heads copy changes).
// Each head's output is patched from the clean run into the corrupted one (circuits.Patch), and
// the LDs averaged over the pairs. Then the top k heads by the match patching, and k random heads,
// are mean-ablated (probe.Ablate) and the task's accuracy and loss compared with the intact
// model's.
func Circuits(ctx context.Context, cfg Config) (*Result, error) {
	m, meta, err := models.Open("induction")
	if err != nil {
		return nil, err
	}
	task, err := train.TaskOf("induction", meta)
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	pairs, draws, evalBatches := 64, 20, 8
	if cfg.Quick {
		pairs, draws, evalBatches = 16, 8, 2
	}
	n := min(10, (task.SeqLen()-1)/2)
	content := task.Vocab() - 2 // BOS and PAD are the last two ids
	bos := content
	data := &CircuitsData{Sequences: pairs, Repeat: n}
	res := &Result{Name: "circuits", Title: "issue 16, chapters 000 and 004: the heads the shipped induction model needs, by activation patching and ablation", Data: data}

	rng := rand.New(rand.NewPCG(cfg.Seed, 0xc1c))
	for _, corruption := range []struct{ name, about string }{
		{"match", "the first x_k replaced: the current token has no earlier match"},
		{"copy", "the first x_{k+1} replaced: the token to copy changes"},
	} {
		sum := make([][]float64, mc.Layers)
		for l := range sum {
			sum[l] = make([]float64, mc.Heads)
		}
		var clean, corrupt float64
		for range pairs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			perm := rng.Perm(content)
			xs, y, foil := perm[:n], perm[n], perm[n+1]
			k := 1 + rng.IntN(n-1) // x_k at positions k and n+k; predict x_{k+1}
			seq := append(append([]int{bos}, xs...), xs[:k]...)
			bad := slices.Clone(seq)
			mt := circuits.Metric{Target: xs[k], Foil: foil, Position: n + k}
			if corruption.name == "match" {
				bad[k] = y
			} else {
				bad[k+1], mt.Foil = y, y
			}
			pr, err := circuits.Patch(m, seq, bad, mt, circuits.PatchOptions{Workers: cfg.Workers, Context: ctx})
			if err != nil {
				return nil, fmt.Errorf("experiment: circuits: %w", err)
			}
			clean += pr.LDClean
			corrupt += pr.LDCorrupt
			for l := range sum {
				for h := range sum[l] {
					sum[l][h] += pr.HeadsLD[l][h]
				}
			}
		}
		cp := CircuitPatching{Name: corruption.name, About: corruption.about,
			LDClean: jsonnum.Number(clean / float64(pairs)), LDCorrupt: jsonnum.Number(corrupt / float64(pairs))}
		for l := range sum {
			row := make([]jsonnum.Number, mc.Heads)
			for h := range row {
				row[h] = jsonnum.Number((sum[l][h] - corrupt) / (clean - corrupt))
			}
			cp.Heads = append(cp.Heads, row)
		}
		data.Corruptions = append(data.Corruptions, cp)
	}

	// Rank the heads by the match corruption's scores.
	match := data.Corruptions[0].Heads
	for l := range mc.Layers {
		for h := range mc.Heads {
			data.Top = append(data.Top, HeadRef{l, h})
		}
	}
	slices.SortStableFunc(data.Top, func(a, b HeadRef) int {
		return -cmpFloat(float64(match[a.Layer][a.Head]), float64(match[b.Layer][b.Head]))
	})

	// Ablate the top k and k random heads.
	ec := probe.EvalConfig{Batches: evalBatches, Batch: 64, Seed: probe.EvalSeed, Workers: cfg.Workers}
	ablate := func(heads []HeadRef) (*probe.AblationResult, error) {
		abl := make([]probe.Ablation, len(heads))
		for i, h := range heads {
			abl[i] = probe.Ablation{Layer: h.Layer, Head: h.Head, Mode: probe.AblateMean}
		}
		return probe.Ablate(m, task, abl, ec)
	}
	base, err := ablate(nil)
	if err != nil {
		return nil, err
	}
	data.Base = base.Base
	total := mc.Layers * mc.Heads
	for k := 1; k <= total-1; k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		top, err := ablate(data.Top[:k])
		if err != nil {
			return nil, err
		}
		ca := CircuitAblation{K: k, Top: top.Ablated, Draws: draws}
		var accs []float64
		var loss float64
		for range draws {
			pick := rng.Perm(total)[:k]
			heads := make([]HeadRef, k)
			for i, p := range pick {
				heads[i] = HeadRef{p / mc.Heads, p % mc.Heads}
			}
			r, err := ablate(heads)
			if err != nil {
				return nil, err
			}
			accs = append(accs, r.Ablated.Accuracy)
			loss += r.Ablated.Loss
		}
		mean, sd := meanSD(accs)
		ca.RandomAccuracy, ca.RandomAccSD = jsonnum.Number(mean), jsonnum.Number(sd)
		ca.RandomAccMin, ca.RandomLoss = jsonnum.Number(slices.Min(accs)), jsonnum.Number(loss/float64(draws))
		data.Ablations = append(data.Ablations, ca)
	}

	// The table: the patching scores, then the ablations.
	res.Table.Columns = []string{"what", "heads", "score / accuracy", "loss", "note"}
	for _, cp := range data.Corruptions {
		for l, row := range cp.Heads {
			for h, s := range row {
				res.Table.Rows = append(res.Table.Rows, []string{"patch " + cp.Name, fmt.Sprintf("%d.%d", l, h), fmt.Sprintf("%.3f", float64(s)), "",
					fmt.Sprintf("LD clean %.2f, corrupted %.2f", float64(cp.LDClean), float64(cp.LDCorrupt))})
			}
		}
	}
	res.Table.Rows = append(res.Table.Rows, []string{"ablate none", "-", pct(data.Base.Accuracy), fmt.Sprintf("%.4f", data.Base.Loss), "the intact model"})
	for _, a := range data.Ablations {
		res.Table.Rows = append(res.Table.Rows,
			[]string{fmt.Sprintf("ablate top %d", a.K), headList(data.Top[:a.K]), pct(a.Top.Accuracy), fmt.Sprintf("%.4f", a.Top.Loss), "mean ablation"},
			[]string{fmt.Sprintf("ablate %d random", a.K), fmt.Sprintf("%d draws", a.Draws), fmt.Sprintf("%s ± %.1f (min %s)", pct(float64(a.RandomAccuracy)), 100*float64(a.RandomAccSD), pct(float64(a.RandomAccMin))),
				fmt.Sprintf("%.4f", float64(a.RandomLoss)), "mean over the draws"})
	}
	for _, cp := range data.Corruptions {
		res.Pictures = append(res.Pictures, patchPicture(cp))
	}

	// The summary.
	var b strings.Builder
	for _, cp := range data.Corruptions {
		best := bestHeads(cp.Heads, 3)
		fmt.Fprintf(&b, "Patching each head's output from the clean run into the %q corruption (%s; %d pairs, LD %.2f clean, %.2f corrupted): the largest scores are %s. ",
			cp.Name, cp.About, pairs, float64(cp.LDClean), float64(cp.LDCorrupt), best)
	}
	fmt.Fprintf(&b, "Accuracy on the induction task (intact %s) with the top k heads by the match patching mean-ablated, against k random heads (mean ± sd over %d draws):", pct(data.Base.Accuracy), draws)
	for i, a := range data.Ablations {
		sep := ";"
		if i == len(data.Ablations)-1 {
			sep = "."
		}
		fmt.Fprintf(&b, " k = %d (%s): %s against %s ± %.1f%s", a.K, headList(data.Top[:a.K]), pct(a.Top.Accuracy), pct(float64(a.RandomAccuracy)), 100*float64(a.RandomAccSD), sep)
	}
	res.Summary = strings.TrimSpace(b.String())
	return res, nil
}

// cmpFloat orders a and b, NaN first.
func cmpFloat(a, b float64) int {
	switch {
	case a < b || (math.IsNaN(a) && !math.IsNaN(b)):
		return -1
	case a > b || (math.IsNaN(b) && !math.IsNaN(a)):
		return 1
	}
	return 0
}

// meanSD returns the mean and the (population) standard deviation of xs.
func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

// headList writes heads as "l.h, l.h".
func headList(heads []HeadRef) string {
	s := make([]string, len(heads))
	for i, h := range heads {
		s[i] = fmt.Sprintf("%d.%d", h.Layer, h.Head)
	}
	return strings.Join(s, ", ")
}

// bestHeads writes the k heads of g with the largest scores, with their scores.
func bestHeads(g [][]jsonnum.Number, k int) string {
	var all []HeadRef
	for l := range g {
		for h := range g[l] {
			all = append(all, HeadRef{l, h})
		}
	}
	slices.SortStableFunc(all, func(a, b HeadRef) int { return -cmpFloat(float64(g[a.Layer][a.Head]), float64(g[b.Layer][b.Head])) })
	s := make([]string, min(k, len(all)))
	for i := range s {
		h := all[i]
		s[i] = fmt.Sprintf("%d.%d (%.2f)", h.Layer, h.Head, float64(g[h.Layer][h.Head]))
	}
	return strings.Join(s, ", ")
}

// patchPicture is a layer × head heatmap of one corruption's patching scores.
func patchPicture(cp CircuitPatching) Figure {
	hm := viz.Heatmap{Title: "head patching, " + cp.Name + " corruption: (LD_patched − LD_corrupt)/(LD_clean − LD_corrupt)",
		Rows: len(cp.Heads), Cols: len(cp.Heads[0]), XLabel: "head", YLabel: "layer", ValueLabel: "score", Annotate: true}
	for h := range cp.Heads[0] {
		hm.ColLabels = append(hm.ColLabels, fmt.Sprint(h))
	}
	for l, row := range cp.Heads {
		hm.RowLabels = append(hm.RowLabels, fmt.Sprint(l))
		for _, s := range row {
			hm.Values = append(hm.Values, float64(s))
		}
	}
	return Figure{Name: "patch-" + cp.Name, Picture: hm}
}
