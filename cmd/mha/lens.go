package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/lab"
	"github.com/spf13/cobra"
)

func newLensCmd() *cobra.Command {
	var (
		model, text, target string
		top, workers        int
		asJSON              bool
	)
	cmd := &cobra.Command{
		Use:   "lens --model DIR --text STR [--top K] [--target TOK] [--json]",
		Short: "The logit lens: the tokens the residual stream predicts after every layer",
		Long: `Lens runs --text through the model and reads the residual stream at every layer as if it
were the last: for the stream entering each block (layer 0: the embeddings) and the last block's
output (layer L, the model's own prediction), at every position, it applies the model's final
norm and head and prints the --top K tokens with their probabilities. A post-norm model (BERT)
has no final norm: its stream is normalised by every block already, and the lens applies its
masked-LM head transform and head only. See 'go doc github.com/mhalab/mha/circuits LogitLens'.

--model is a shipped model's name (its text is space-separated symbols) or a Hugging Face folder
or checkpoint of mha train. With --target TOK ("#ID", a symbol, or a token as the tokenizer writes
it) it also prints the rank and probability of that token at every layer, at the last position
(a masked language model: the last [MASK]).

The table has a column per position, headed by its token, and K lines per layer: the top tokens,
quoted, each with its probability. With --json it prints one object:

  tokens     the ids of --text
  pieces     their spellings
  layers     [layer][position][rank] {"id", "piece", "logit", "prob"}, layer 0 … L
  target     with --target: {"id", "piece", "position", "rank": [layer], "prob": [layer],
             "logit": [layer]}; rank 0 is the top token`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("text") {
				return fmt.Errorf("--text is required: the text (a shipped model: its symbols)")
			}
			m, err := openCircuitModel(model)
			if err != nil {
				return err
			}
			tokens, err := m.Encode(text)
			if err != nil {
				return fmt.Errorf("--text: %w", err)
			}
			if v := m.Net().Config().Vocab; top < 1 || top > v {
				return fmt.Errorf("--top %d: want a number of tokens from 1 to the vocabulary's %d", top, v)
			}
			opt := &circuits.LensOptions{K: top, Workers: workers}
			pos, tgt := m.Position(tokens), -1
			if cmd.Flags().Changed("target") {
				if tgt, err = m.Token(target); err != nil {
					return fmt.Errorf("--target: %w", err)
				}
				opt.Targets = make([]int, len(tokens))
				for i := range opt.Targets {
					opt.Targets[i] = -1
				}
				opt.Targets[pos] = tgt
			}
			lens, err := circuits.LogitLens(m.Net(), tokens, opt)
			if err != nil {
				return err
			}
			if asJSON {
				return writeLensJSON(cmd.OutOrStdout(), m, lens, tokens, pos, tgt)
			}
			return writeLens(cmd.OutOrStdout(), m, lens, tokens, pos, tgt)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "a shipped model's name, or a Hugging Face folder or checkpoint of mha train")
	fl.StringVar(&text, "text", "", "the text to run (a shipped model: space-separated symbols); --clean is another name for it")
	cleanIsText(fl)
	fl.IntVar(&top, "top", 3, "the number of top tokens per layer and position")
	fl.StringVar(&target, "target", "", `a token to follow at the last position: "#ID", a symbol, or a token as the tokenizer writes it`)
	fl.BoolVar(&asJSON, "json", false, "print one JSON object (see above)")
	workersVar(fl, &workers, "goroutines (0: GOMAXPROCS)")
	return cmd
}

type lensTokenJSON struct {
	ID    int            `json:"id"`
	Piece string         `json:"piece"`
	Logit jsonnum.Number `json:"logit"`
	Prob  jsonnum.Number `json:"prob"`
}

type lensTargetJSON struct {
	ID       int              `json:"id"`
	Piece    string           `json:"piece"`
	Position int              `json:"position"`
	Rank     []int            `json:"rank"`
	Prob     []jsonnum.Number `json:"prob"`
	Logit    []jsonnum.Number `json:"logit"`
}

type lensJSON struct {
	Tokens []int               `json:"tokens"`
	Pieces []string            `json:"pieces"`
	Layers [][][]lensTokenJSON `json:"layers"`
	Target *lensTargetJSON     `json:"target,omitempty"`
}

func writeLensJSON(w io.Writer, m *lab.Model, lens *circuits.Lens, tokens []int, pos, tgt int) error {
	out := lensJSON{Tokens: tokens, Pieces: pieces(m, tokens), Layers: make([][][]lensTokenJSON, len(lens.Top))}
	for l, layer := range lens.Top {
		out.Layers[l] = make([][]lensTokenJSON, len(layer))
		for p, top := range layer {
			for _, pr := range top {
				out.Layers[l][p] = append(out.Layers[l][p], lensTokenJSON{ID: pr.Token, Piece: m.Piece(pr.Token), Logit: jsonnum.Number(pr.Logit), Prob: jsonnum.Number(pr.Prob)})
			}
		}
	}
	if tgt >= 0 {
		t := &lensTargetJSON{ID: tgt, Piece: m.Piece(tgt), Position: pos}
		for l := range lens.Targets {
			r := lens.Targets[l][pos]
			t.Rank = append(t.Rank, r.Rank)
			t.Prob = append(t.Prob, jsonnum.Number(r.Prob))
			t.Logit = append(t.Logit, jsonnum.Number(r.Logit))
		}
		out.Target = t
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// pieces returns how each token prints.
func pieces(m *lab.Model, tokens []int) []string {
	s := make([]string, len(tokens))
	for i, id := range tokens {
		s[i] = m.Piece(id)
	}
	return s
}

func writeLens(w io.Writer, m *lab.Model, lens *circuits.Lens, tokens []int, pos, tgt int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "layer\t")
	for _, p := range pieces(m, tokens) {
		fmt.Fprintf(tw, "%s\t", strconv.Quote(p))
	}
	fmt.Fprintln(tw)
	for l, layer := range lens.Top {
		for i := range layer[0] {
			if i == 0 {
				fmt.Fprintf(tw, "%d\t", l)
			} else {
				fmt.Fprint(tw, "\t")
			}
			for _, top := range layer {
				fmt.Fprintf(tw, "%s %.3f\t", strconv.Quote(m.Piece(top[i].Token)), top[i].Prob)
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if tgt < 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%q (#%d) at position %d:\n", m.Piece(tgt), tgt, pos)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "layer\trank\tprob\tlogit\t\n")
	for l := range lens.Targets {
		r := lens.Targets[l][pos]
		fmt.Fprintf(tw, "%d\t%d\t%.4f\t%.4f\t\n", l, r.Rank, r.Prob, r.Logit)
	}
	return tw.Flush()
}
