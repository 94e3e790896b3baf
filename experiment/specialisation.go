package experiment

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/viz"
)

// The roles a head may play in the specialisation experiment, and the score each must reach.
var roles = []struct {
	name      string
	threshold float64
	about     string
}{
	{"previous-token", 0.4, "mean weight on the previous token"},
	{"induction", 0.4, "Olsson et al.'s prefix matching on repeated random tokens"},
	{"duplicate-token", 0.4, "weight on the earlier copy of the query's own token"},
	{"first-token", 0.4, "mean weight on position 0 (an attention sink)"},
	{"position", 0.4, "mean weight at its strongest fixed offset, other than −1 and the copies'"},
	{"broad", 0.8, "entropy over the log of the keys it may see: near 1 spreads evenly"},
}

// lowRho is the mean |ρ_ij| below which the experiment calls a layer's heads weakly correlated.
const lowRho = 0.3

// SpecialisationData is the numbers behind the specialisation experiment.
type SpecialisationData struct {
	Models []SpecialisedModel `json:"models"`
}

// SpecialisedModel is one model's heads and layers.
type SpecialisedModel struct {
	Name      string       `json:"name"`
	Sequences int          `json:"sequences"` // random sequences of Length tokens, the second half repeating the first
	Length    int          `json:"length"`
	Heads     []HeadRole   `json:"heads"`
	Layers    []LayerHeads `json:"layers"`
	// LowCorrelation says whether every layer's mean |ρ_ij| is below 0.3: chapter 000's "low
	// correlation between trained heads".
	LowCorrelation bool `json:"low_correlation"`
}

// HeadRole is one head's scores, each in [0, 1], and the role with the highest score over its
// threshold ("mixed" when none reaches it).
type HeadRole struct {
	Layer  int                       `json:"layer"`
	Head   int                       `json:"head"`
	Role   string                    `json:"role"`
	Scores map[string]jsonnum.Number `json:"scores"` // by role name
	Offset int                       `json:"offset"` // the position role's offset j − t
}

// LayerHeads is the distribution of ρ_ij between the heads of one layer: the cosine similarity of
// the heads' terms of the output projection over the same sequences (as probe.Similarity).
type LayerHeads struct {
	Layer   int            `json:"layer"`
	MeanAbs jsonnum.Number `json:"mean_abs_rho"`
	MaxAbs  jsonnum.Number `json:"max_abs_rho"`
	Pairs   int            `json:"pairs"`
}

// Specialisation measures, per head, which role it plays — previous-token, induction, duplicate
// token, first token (sink), a fixed position, or broad attention — on random tokens repeated
// once (where every role shows), and the distribution of ρ_ij between the heads of each layer,
// and says whether chapter 000's "low correlation between trained heads" holds. It runs on
// cfg.Model (a Hugging Face folder or an mha checkpoint) when given, else on every shipped model.
func Specialisation(ctx context.Context, cfg Config) (*Result, error) {
	type named struct {
		name string
		m    *nn.Model
	}
	var nets []named
	if cfg.Model != "" {
		pm, err := pretrained.OpenPath(cfg.Model)
		if err != nil {
			return nil, err
		}
		nets = append(nets, named{cfg.Model, pm.NN})
	} else {
		for _, name := range models.Names() {
			m, _, err := models.Open(name)
			if err != nil {
				return nil, err
			}
			nets = append(nets, named{name, m})
		}
	}
	data := &SpecialisationData{}
	res := &Result{Name: "specialisation", Title: "chapters 000 and 004: the roles heads take, and how correlated they are", Data: data}
	res.Table.Columns = []string{"model", "layer", "head", "role"}
	for _, r := range roles {
		res.Table.Columns = append(res.Table.Columns, r.name)
	}
	var verdicts []string
	for _, n := range nets {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s := n.m.Config().SeqLen; s < 4 && cfg.Model == "" {
			verdicts = append(verdicts, fmt.Sprintf("%s: left out, its %d positions cannot hold a repeated sequence.", n.name, s))
			continue
		}
		sm, err := specialise(n.name, n.m, cfg)
		if err != nil {
			return nil, fmt.Errorf("experiment: %s: %w", n.name, err)
		}
		data.Models = append(data.Models, *sm)
		for _, h := range sm.Heads {
			row := []string{sm.Name, fmt.Sprint(h.Layer), fmt.Sprint(h.Head), h.Role}
			for _, r := range roles {
				cell := fmt.Sprintf("%.2f", float64(h.Scores[r.name]))
				if r.name == "position" {
					cell += fmt.Sprintf(" (%+d)", h.Offset)
				}
				row = append(row, cell)
			}
			res.Table.Rows = append(res.Table.Rows, row)
		}
		if len(sm.Heads) <= viz.MaxCells {
			res.Pictures = append(res.Pictures, rolePicture(sm))
		}
		res.Pictures = append(res.Pictures, rhoPicture(sm))
		counts := map[string]int{}
		for _, h := range sm.Heads {
			counts[h.Role]++
		}
		var parts []string
		for _, r := range roles {
			if counts[r.name] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", counts[r.name], r.name))
			}
		}
		if counts["mixed"] > 0 {
			parts = append(parts, fmt.Sprintf("%d mixed", counts["mixed"]))
		}
		worst := 0.0
		for _, l := range sm.Layers {
			worst = max(worst, float64(l.MeanAbs))
		}
		verdict := "holds"
		if !sm.LowCorrelation {
			verdict = "does not hold"
		}
		verdicts = append(verdicts, fmt.Sprintf("%s: %s; the largest mean |ρ_ij| of a layer is %.2f, so \"low correlation between trained heads\" %s (threshold %.1f).",
			sm.Name, strings.Join(parts, ", "), worst, verdict, lowRho))
	}
	res.Summary = strings.Join(verdicts, "\n")
	if cfg.Model == "" {
		res.Summary += "\nNo --model was given, so this ran on the shipped toy models. To measure a real model, " +
			"download a Hugging Face folder (config.json, model.safetensors, tokenizer.json; for example with " +
			"`git clone https://huggingface.co/openai-community/gpt2`) and run `mha experiment specialisation --model DIR`."
	}
	return res, nil
}

// specialise measures one model.
func specialise(name string, m *nn.Model, cfg Config) (*SpecialisedModel, error) {
	c := m.Config()
	n := min(c.SeqLen/2, 64)
	b := 8
	if cfg.Quick {
		n, b = min(n, 16), 2
	}
	if n < 2 {
		return nil, fmt.Errorf("seq_len %d is too short to repeat a sequence of 2 tokens", c.SeqLen)
	}
	ecfg := probe.EvalConfig{Batches: 1, Batch: b, Seed: cfg.Seed + 1, Workers: cfg.Workers, Repeat: n}
	scores, err := probe.RepeatedScores(m, c.Vocab, ecfg)
	if err != nil {
		return nil, err
	}
	// The same sequences again, for the heads' outputs.
	capt, err := probe.Record(m, probe.RepeatedTokens(ecfg.Seed, b, n, c.Vocab), b, 2*n, &probe.RecordOptions{Workers: cfg.Workers})
	if err != nil {
		return nil, err
	}
	sm := &SpecialisedModel{Name: name, Sequences: b, Length: 2 * n, LowCorrelation: true}
	for _, ps := range scores {
		scores := map[string]jsonnum.Number{
			"previous-token":  jsonnum.Number(ps.PrevToken),
			"induction":       jsonnum.Number(ps.Induction),
			"duplicate-token": jsonnum.Number(ps.Duplicate),
			"first-token":     jsonnum.Number(ps.FirstToken),
			"position":        jsonnum.Number(ps.Position),
			"broad":           jsonnum.Number(ps.Broad),
		}
		role, ratio := "mixed", 1.0
		for _, r := range roles {
			if q := float64(scores[r.name]) / r.threshold; q >= ratio {
				role, ratio = r.name, q
			}
		}
		sm.Heads = append(sm.Heads, HeadRole{Layer: ps.Layer, Head: ps.Head, Role: role, Scores: scores, Offset: ps.Offset})
	}
	for l := range capt.Weights {
		terms, blocks, err := termTensor(m, l, capt.Heads[l], capt.HeadDims)
		if err != nil {
			return nil, err
		}
		rho, err := probe.Similarity(terms, blocks)
		if err != nil {
			return nil, err
		}
		lh := LayerHeads{Layer: l}
		sum := 0.0
		for i := range rho {
			for j := i + 1; j < len(rho); j++ {
				if v := math.Abs(rho[i][j]); !math.IsNaN(v) {
					sum += v
					lh.MaxAbs = max(lh.MaxAbs, jsonnum.Number(v))
					lh.Pairs++
				}
			}
		}
		lh.MeanAbs = jsonnum.Number(math.NaN())
		if lh.Pairs > 0 {
			lh.MeanAbs = jsonnum.Number(sum / float64(lh.Pairs))
			sm.LowCorrelation = sm.LowCorrelation && sum/float64(lh.Pairs) < lowRho
		}
		sm.Layers = append(sm.Layers, lh)
	}
	return sm, nil
}

// rolePicture is a heatmap of every head's role scores.
func rolePicture(sm *SpecialisedModel) Figure {
	hm := viz.Heatmap{Title: "role scores of " + sm.Name, Rows: len(sm.Heads), Cols: len(roles),
		XLabel: "role", YLabel: "layer.head", ValueLabel: "score", Annotate: true}
	for _, r := range roles {
		hm.ColLabels = append(hm.ColLabels, r.name)
	}
	for _, h := range sm.Heads {
		hm.RowLabels = append(hm.RowLabels, fmt.Sprintf("%d.%d", h.Layer, h.Head))
		for _, r := range roles {
			hm.Values = append(hm.Values, float64(h.Scores[r.name]))
		}
	}
	return Figure{Name: "roles-" + fileName(sm.Name), Picture: hm}
}

// rhoPicture is a bar chart of each layer's mean |ρ_ij|.
func rhoPicture(sm *SpecialisedModel) Figure {
	bars := viz.Bars{Title: "mean |ρ_ij| between the heads of each layer, " + sm.Name, XLabel: "layer", YLabel: "mean |ρ_ij|"}
	for _, l := range sm.Layers {
		v := float64(l.MeanAbs)
		if math.IsNaN(v) {
			v = 0
		}
		bars.Labels = append(bars.Labels, fmt.Sprint(l.Layer))
		bars.Values = append(bars.Values, v)
	}
	return Figure{Name: "rho-" + fileName(sm.Name), Picture: bars}
}

// fileName turns a model's name (a task, or a path) into a word for a figure's name.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ' ' || r == '.' {
			return '-'
		}
		return r
	}, strings.Trim(name, "/."))
}
