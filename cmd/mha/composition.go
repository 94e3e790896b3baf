package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/jsonnum"
	"github.com/spf13/cobra"
)

// compositionFlags are mha composition's flags.
type compositionFlags struct {
	model  string
	top    int
	raw    bool
	asJSON bool
}

func newCompositionCmd() *cobra.Command {
	var f compositionFlags
	cmd := &cobra.Command{
		Use:   "composition --model NAME|DIR [--top N] [--raw] [--json]",
		Short: "Head composition, token circuits and head subspaces, from the weights alone",
		Long: `Composition reads a model's weights (a shipped model's name, a Hugging Face folder, or a
checkpoint of mha train) and prints, without running it:

  - for every pair of layers l1 < l2, the Q-, K- and V-composition scores (Elhage et al. 2021;
    TransformerLens's all_composition_scores) of every head of l1 (rows: the writer) with every
    head of l2 (columns: the reader), each in [0, 1], beside the score of random matrices of the
    same shapes (a score near it is what unrelated heads give), and the strongest pairs;
  - per layer, whether its heads' subspaces are orthogonal, intersecting or neither: the
    column spaces of W_i^Q, W_i^K, W_i^V and the row spaces of W_i^O, compared by principal
    angles, against random subspaces (chapter 000: "may intersect or be orthogonal"; chapter
    003: "h orthogonal subspaces");
  - when the vocabulary has at most 4096 tokens, each head's --top largest entries of its OV
    circuit W_E·W_V·W_O·W_U (attended token → output token whose logit it raises) and QK
    circuit W_E·W_Q·W_Kᵀ·W_Eᵀ (query token → key token).

The normalisations' weights are folded into the weights that read them, and LayerNorm models'
weights centred, as TransformerLens's from_pretrained does; --raw reads the weights as they are.
Subspaces are always those of the raw weights. 'go doc ./circuits' states every convention.

--json prints one object:

  model         the model's name; layers, heads, d_model: its sizes; folded: whether the
                normalisations were folded
  baseline      the random composition score
  pairs         [{from, to, q, k, v}], q[i][j] the score of head i of layer from with head j of
                layer to (likewise k, v)
  strongest     the --top largest scores of each mode: [{mode, from_layer, from_head,
                to_layer, to_head, score}]
  subspaces     per layer and kind (q, k, v, o): {layer, kind, d_model, dims, overlap [n][n]
                (mean cos² of the principal angles, 1 same, 0 orthogonal), min_angle_deg [n][n],
                baseline (d_head/d_model), verdict {class (orthogonal, intersecting, neither,
                single), mean_overlap, max_overlap, baseline, ratio, min_angle_deg, min_pair,
                max_min_angle_deg, forced, text}}; n is the number of heads, or of K/V heads for
                k and v
  circuits      per head {layer, head, ov, qk}, each a list of {row, col, value, row_token,
                col_token}, largest first; absent above 4096 tokens (circuits_skipped says why)

Non-finite numbers (from non-finite weights) print as null.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd.OutOrStdout()) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "a shipped model's name, a Hugging Face model folder, or a checkpoint of mha train")
	fl.IntVar(&f.top, "top", 5, "how many token pairs per head and composition pairs per mode to print")
	fl.BoolVar(&f.raw, "raw", false, "read the weights as they are: no normalisation folded, nothing centred")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object (fields in the help)")
	return cmd
}

// compositionReport is mha composition's --json object.
type compositionReport struct {
	Model           string                   `json:"model"`
	Layers          int                      `json:"layers"`
	Heads           int                      `json:"heads"`
	DModel          int                      `json:"d_model"`
	Folded          bool                     `json:"folded"`
	Baseline        jsonnum.Number           `json:"baseline"`
	Pairs           []compositionPairJSON    `json:"pairs"`
	Strongest       []strongestJSON          `json:"strongest"`
	Subspaces       []subspaceJSON           `json:"subspaces"`
	Circuits        []headCircuitsJSON       `json:"circuits,omitempty"`
	CircuitsSkipped string                   `json:"circuits_skipped,omitempty"`
	strongest       []circuits.HeadPairScore // for the text
	verdicts        []circuits.SubspaceVerdict
	pairs           []circuits.LayerPair
}

type compositionPairJSON struct {
	From int                `json:"from"`
	To   int                `json:"to"`
	Q    [][]jsonnum.Number `json:"q"`
	K    [][]jsonnum.Number `json:"k"`
	V    [][]jsonnum.Number `json:"v"`
}

type strongestJSON struct {
	Mode      string         `json:"mode"`
	FromLayer int            `json:"from_layer"`
	FromHead  int            `json:"from_head"`
	ToLayer   int            `json:"to_layer"`
	ToHead    int            `json:"to_head"`
	Score     jsonnum.Number `json:"score"`
}

type subspaceJSON struct {
	Layer    int                `json:"layer"`
	Kind     string             `json:"kind"`
	DModel   int                `json:"d_model"`
	Dims     []int              `json:"dims"`
	Overlap  [][]jsonnum.Number `json:"overlap"`
	MinAngle [][]jsonnum.Number `json:"min_angle_deg"`
	Baseline jsonnum.Number     `json:"baseline"`
	Verdict  verdictJSON        `json:"verdict"`
}

type verdictJSON struct {
	Class       string         `json:"class"`
	MeanOverlap jsonnum.Number `json:"mean_overlap"`
	MaxOverlap  jsonnum.Number `json:"max_overlap"`
	Baseline    jsonnum.Number `json:"baseline"`
	Ratio       jsonnum.Number `json:"ratio"`
	MinAngle    jsonnum.Number `json:"min_angle_deg"`
	MinPair     [2]int         `json:"min_pair"`
	MaxMinAngle jsonnum.Number `json:"max_min_angle_deg"`
	Forced      bool           `json:"forced"`
	Text        string         `json:"text"`
}

type headCircuitsJSON struct {
	Layer int             `json:"layer"`
	Head  int             `json:"head"`
	OV    []tokenPairJSON `json:"ov"`
	QK    []tokenPairJSON `json:"qk"`
}

type tokenPairJSON struct {
	Row      int            `json:"row"`
	Col      int            `json:"col"`
	Value    jsonnum.Number `json:"value"`
	RowToken string         `json:"row_token"`
	ColToken string         `json:"col_token"`
}

func (f *compositionFlags) run(w io.Writer) error {
	if f.top < 1 {
		return fmt.Errorf("--top is %d, want ≥ 1", f.top)
	}
	cm, err := openCircuitModel(f.model)
	if err != nil {
		return err
	}
	m := cm.Net()
	cfg := m.Config()
	opt := &circuits.WeightOptions{NoFold: f.raw}
	comp, err := circuits.Composition(m, opt)
	if err != nil {
		return err
	}
	rep := compositionReport{Model: cm.Name(), Layers: cfg.Layers, Heads: cfg.Heads, DModel: cfg.DModel, Folded: comp.Folded,
		Baseline: jsonnum.Number(comp.Baseline), Pairs: []compositionPairJSON{}, pairs: comp.Pairs}
	for _, p := range comp.Pairs {
		rep.Pairs = append(rep.Pairs, compositionPairJSON{From: p.From, To: p.To, Q: jsonnum.Matrix(p.Q), K: jsonnum.Matrix(p.K), V: jsonnum.Matrix(p.V)})
	}
	for _, mode := range []string{circuits.QComposition, circuits.KComposition, circuits.VComposition} {
		top, err := comp.Strongest(mode, f.top)
		if err != nil {
			return err
		}
		rep.strongest = append(rep.strongest, top...)
	}
	rep.Strongest = []strongestJSON{}
	for _, s := range rep.strongest {
		rep.Strongest = append(rep.Strongest, strongestJSON{Mode: s.Mode, FromLayer: s.FromLayer, FromHead: s.FromHead, ToLayer: s.ToLayer, ToHead: s.ToHead, Score: jsonnum.Number(s.Score)})
	}
	for l := range cfg.Layers {
		ss, err := circuits.Subspaces(m, l)
		if err != nil {
			return err
		}
		for _, s := range ss {
			v := s.Verdict()
			rep.verdicts = append(rep.verdicts, v)
			rep.Subspaces = append(rep.Subspaces, subspaceJSON{Layer: s.Layer, Kind: s.Kind, DModel: s.DModel, Dims: s.Dims,
				Overlap: jsonnum.Matrix(s.Overlap), MinAngle: jsonnum.Matrix(s.MinAngle), Baseline: jsonnum.Number(s.Baseline),
				Verdict: verdictJSON{Class: v.Class, MeanOverlap: jsonnum.Number(v.MeanOverlap), MaxOverlap: jsonnum.Number(v.MaxOverlap),
					Baseline: jsonnum.Number(v.Baseline), Ratio: jsonnum.Number(v.Ratio), MinAngle: jsonnum.Number(v.MinAngle),
					MinPair: v.MinPair, MaxMinAngle: jsonnum.Number(v.MaxMinAngle), Forced: v.Forced, Text: v.Text}})
		}
	}
	if cfg.Vocab > circuits.MaxCircuitVocab {
		rep.CircuitsSkipped = fmt.Sprintf("the vocabulary has %d tokens, token circuits take at most %d", cfg.Vocab, circuits.MaxCircuitVocab)
	} else {
		hcs, err := circuits.TokenCircuits(m, f.top, opt)
		if err != nil {
			return err
		}
		conv := func(ps []circuits.TokenPair) []tokenPairJSON {
			out := make([]tokenPairJSON, len(ps))
			for i, p := range ps {
				out[i] = tokenPairJSON{Row: p.Row, Col: p.Col, Value: jsonnum.Number(p.Value), RowToken: cm.Piece(p.Row), ColToken: cm.Piece(p.Col)}
			}
			return out
		}
		for _, hc := range hcs {
			rep.Circuits = append(rep.Circuits, headCircuitsJSON{Layer: hc.Layer, Head: hc.Head, OV: conv(hc.OV), QK: conv(hc.QK)})
		}
	}
	if f.asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	return rep.print(w)
}

// print writes the report as text.
func (r *compositionReport) print(w io.Writer) error {
	var b strings.Builder
	fold := "normalisations folded (TransformerLens's fold_ln, centred weights)"
	if !r.Folded {
		fold = "raw weights (--raw)"
	}
	fmt.Fprintf(&b, "model %s: %d layers × %d heads, d_model %d; %s\n", r.Model, r.Layers, r.Heads, r.DModel, fold)
	if len(r.pairs) == 0 {
		fmt.Fprintf(&b, "\ncomposition: one layer, no pairs of layers\n")
	} else {
		fmt.Fprintf(&b, "\ncomposition scores ‖W_A·W_B‖/(‖W_A‖‖W_B‖), random baseline %.3f; rows: heads of the earlier layer (writers), columns: heads of the later layer (readers)\n", float64(r.Baseline))
	}
	for _, p := range r.pairs {
		fmt.Fprintf(&b, "\nlayer %d → layer %d\n", p.From, p.To)
		for _, mode := range []string{circuits.QComposition, circuits.KComposition, circuits.VComposition} {
			t, _ := p.Table(mode)
			fmt.Fprintf(&b, "  %s    ", mode)
			for j := range t[0] {
				fmt.Fprintf(&b, " %6s", fmt.Sprintf("H%d", j))
			}
			b.WriteString("\n")
			for i, row := range t {
				fmt.Fprintf(&b, "  %-5s", fmt.Sprintf("H%d", i))
				for _, s := range row {
					fmt.Fprintf(&b, " %6.3f", s)
				}
				b.WriteString("\n")
			}
		}
	}
	if len(r.strongest) > 0 {
		fmt.Fprintf(&b, "\nstrongest (× the random %.3f):\n", float64(r.Baseline))
		for _, s := range r.strongest {
			fmt.Fprintf(&b, "  %s  L%dH%d → L%dH%d  %.3f (×%.1f)\n", s.Mode, s.FromLayer, s.FromHead, s.ToLayer, s.ToHead, s.Score, s.Score/float64(r.Baseline))
		}
	}
	fmt.Fprintf(&b, "\nhead subspaces, raw weights (overlap: mean cos² of the principal angles between two heads' subspaces, mean over pairs; random: d_head/d_model)\n")
	fmt.Fprintf(&b, "  %-5s  %-9s  %-12s  %7s  %6s  %5s  %s\n", "layer", "subspace", "verdict", "overlap", "random", "×", "smallest angle")
	orthogonal, compared := 0, 0
	for _, v := range r.verdicts {
		kind := map[string]string{circuits.ReadQ: "q read", circuits.ReadK: "k read", circuits.ReadV: "v read", circuits.WriteO: "o write"}[v.Kind]
		if v.Class == circuits.Single {
			fmt.Fprintf(&b, "  %-5d  %-9s  %-12s\n", v.Layer, kind, v.Class)
			continue
		}
		compared++
		if v.Class == circuits.Orthogonal {
			orthogonal++
		}
		forced := ""
		if v.Forced {
			forced = " (forced)"
		}
		fmt.Fprintf(&b, "  %-5d  %-9s  %-12s  %7.3f  %6.3f  %5.2f  %.1f° (H%d, H%d)%s\n", v.Layer, kind, v.Class, v.MeanOverlap, v.Baseline, v.Ratio, v.MinAngle, v.MinPair[0], v.MinPair[1], forced)
	}
	fmt.Fprintf(&b, "  orthogonal (every angle ≥ 84.3°) in %d of %d; chapter 003's \"h orthogonal subspaces\" %s; chapter 000's \"may intersect or be orthogonal\" allows every verdict\n",
		orthogonal, compared, map[bool]string{true: "holds", false: "does not hold in this model"}[orthogonal == compared && compared > 0])
	switch {
	case r.CircuitsSkipped != "":
		fmt.Fprintf(&b, "\ntoken circuits skipped: %s\n", r.CircuitsSkipped)
	default:
		fmt.Fprintf(&b, "\ntoken circuits, top pairs per head (OV: attended token → raised output token; QK: query token → key token):\n")
		for _, hc := range r.Circuits {
			fmt.Fprintf(&b, "  L%dH%d OV:", hc.Layer, hc.Head)
			writePairs(&b, hc.OV)
			fmt.Fprintf(&b, "\n  L%dH%d QK:", hc.Layer, hc.Head)
			writePairs(&b, hc.QK)
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writePairs(b *strings.Builder, ps []tokenPairJSON) {
	for i, p := range ps {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(b, " %s→%s %.3g", quotePiece(p.RowToken), quotePiece(p.ColToken), float64(p.Value))
	}
}

// quotePiece quotes a token that holds spaces or is empty, so that pairs stay readable.
func quotePiece(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n→,") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
