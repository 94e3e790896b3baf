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

func newAttributeCmd() *cobra.Command {
	var (
		model, text, target, foil string
		position, workers         int
		asJSON                    bool
	)
	cmd := &cobra.Command{
		Use:   "attribute --model DIR --text STR --target TOK --foil TOK [--position P] [--json]",
		Short: "Direct logit attribution: what each head and MLP writes into a logit difference",
		Long: `Attribute runs --text through the model and splits the logit difference
LD = logit(target) − logit(foil) at the last position (a masked language model: the last [MASK])
into what each component wrote into the residual stream there: the embeddings, every head (its
output z_h through its columns of W_O), every attention output bias and every MLP, plus the bias
terms (the final LayerNorm's β and the head's bias through the unembedding). The final
normalisation's scale is frozen at its value in this run, TransformerLens's convention, so the
parts sum to LD; see 'go doc github.com/mhalab/mha/circuits Attribute'.

Only pre-norm models (GPT-2, Llama, Mistral, Qwen2, the shipped models) decompose so: a post-norm
model (BERT) renormalises the stream after every sublayer and is refused (use 'mha lens').

--model is a shipped model's name (its text is space-separated symbols, such as
"BOS 5 9 2 14 7 5 9 2") or a Hugging Face folder or checkpoint of mha train. --target and --foil
are tokens: "#ID", a symbol of a shipped model's task, a token as the tokenizer writes it
("ĠParis"), or text that encodes as one token (" Paris").

It prints LD, a table of the heads (a row per layer, a column per head) with each layer's
attention bias and MLP, the embeddings, the bias terms and the sum. With --json it prints one
object:

  ld          LD from the model's logits
  sum         the sum of every part below (LD up to rounding)
  embed       the embeddings (token + position + token type)
  heads       [layer][head] each head's part
  attn_bias   [layer] each attention's output bias (0 without one)
  mlp         [layer] each MLP (0 in an attention-only model)
  bias        the bias terms: norm_bias + head_bias
  norm_bias   the final LayerNorm's β through the unembedding (0 for RMSNorm)
  head_bias   the head's bias b[target] − b[foil] (0 without one)
  scale       the frozen scale of the final norm: √(var + eps), or √(mean(x²) + eps) for RMSNorm
  tokens      the ids of --text; target, foil, position: the metric`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct{ name, what string }{{"text", "the text (a shipped model: its symbols)"}, {"target", "the token whose logit LD adds"}, {"foil", "the token whose logit LD subtracts"}} {
				if !cmd.Flags().Changed(f.name) {
					return fmt.Errorf("--%s is required: %s", f.name, f.what)
				}
			}
			m, err := openCircuitModel(model)
			if err != nil {
				return err
			}
			tokens, mt, err := circuitMetric(m, text, target, foil, position)
			if err != nil {
				return err
			}
			a, err := circuits.Attribute(m.Net(), tokens, mt, workers)
			if err != nil {
				return err
			}
			if asJSON {
				return writeAttributionJSON(cmd.OutOrStdout(), a, tokens, mt)
			}
			return writeAttribution(cmd.OutOrStdout(), m, a, tokens, mt)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "a shipped model's name, or a Hugging Face folder or checkpoint of mha train")
	fl.StringVar(&text, "text", "", "the text to run (a shipped model: space-separated symbols); --clean is another name for it")
	cleanIsText(fl)
	fl.StringVar(&target, "target", "", `the target token: "#ID", a symbol, or a token as the tokenizer writes it`)
	fl.StringVar(&foil, "foil", "", `the foil token: "#ID", a symbol, or a token as the tokenizer writes it`)
	fl.IntVar(&position, "position", -1, "the position LD reads; -1: the last (a masked language model: the last [MASK])")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object (see above)")
	workersVar(fl, &workers, "goroutines (0: GOMAXPROCS)")
	return cmd
}

// circuitMetric encodes text and returns its tokens and the metric of target and foil at
// position (−1: m.Position's), with errors naming the flag at fault.
func circuitMetric(m *lab.Model, text, target, foil string, position int) ([]int, circuits.Metric, error) {
	tokens, err := m.Encode(text)
	if err != nil {
		return nil, circuits.Metric{}, fmt.Errorf("--text: %w", err)
	}
	mt := circuits.Metric{Position: position}
	if mt.Target, err = m.Token(target); err != nil {
		return nil, mt, fmt.Errorf("--target: %w", err)
	}
	if mt.Foil, err = m.Token(foil); err != nil {
		return nil, mt, fmt.Errorf("--foil: %w", err)
	}
	switch {
	case position == -1:
		mt.Position = m.Position(tokens)
	case position < 0 || position >= len(tokens):
		return nil, mt, fmt.Errorf("--position %d: want a position from 0 to %d of the text's %d tokens, or -1 for the last", position, len(tokens)-1, len(tokens))
	}
	return tokens, mt, nil
}

// attributionJSON is the object of mha attribute --json.
type attributionJSON struct {
	LD       jsonnum.Number     `json:"ld"`
	Sum      jsonnum.Number     `json:"sum"`
	Embed    jsonnum.Number     `json:"embed"`
	Heads    [][]jsonnum.Number `json:"heads"`
	AttnBias []jsonnum.Number   `json:"attn_bias"`
	MLP      []jsonnum.Number   `json:"mlp"`
	Bias     jsonnum.Number     `json:"bias"`
	NormBias jsonnum.Number     `json:"norm_bias"`
	HeadBias jsonnum.Number     `json:"head_bias"`
	Scale    jsonnum.Number     `json:"scale"`
	Tokens   []int              `json:"tokens"`
	Target   int                `json:"target"`
	Foil     int                `json:"foil"`
	Position int                `json:"position"`
}

func writeAttributionJSON(w io.Writer, a *circuits.Attribution, tokens []int, mt circuits.Metric) error {
	return json.NewEncoder(w).Encode(attributionJSON{
		LD: jsonnum.Number(a.LD), Sum: jsonnum.Number(a.Sum()), Embed: jsonnum.Number(a.Embed),
		Heads: jsonnum.Matrix(a.Heads), AttnBias: jsonnum.Slice(a.AttnBias), MLP: jsonnum.Slice(a.MLP),
		Bias: jsonnum.Number(a.NormBias + a.HeadBias), NormBias: jsonnum.Number(a.NormBias), HeadBias: jsonnum.Number(a.HeadBias),
		Scale: jsonnum.Number(a.Scale), Tokens: tokens, Target: mt.Target, Foil: mt.Foil, Position: mt.Position,
	})
}

func writeAttribution(w io.Writer, m *lab.Model, a *circuits.Attribution, tokens []int, mt circuits.Metric) error {
	fmt.Fprintf(w, "%s, %d tokens; at position %d (%q): LD = logit(%q #%d) − logit(%q #%d) = %.4f\n\n",
		m.Name(), len(tokens), mt.Position, m.Piece(tokens[mt.Position]), m.Piece(mt.Target), mt.Target, m.Piece(mt.Foil), mt.Foil, a.LD)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "layer\t")
	for h := range a.Heads[0] {
		fmt.Fprintf(tw, "head %d\t", h)
	}
	fmt.Fprint(tw, "attn bias\tmlp\t\n")
	for l, heads := range a.Heads {
		fmt.Fprintf(tw, "%d\t", l)
		for _, v := range heads {
			fmt.Fprintf(tw, "%s\t", fmtContribution(v))
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", fmtContribution(a.AttnBias[l]), fmtContribution(a.MLP[l]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nembed %s\nbias  %s (final norm's β %s, head bias %s)\nsum   %s (LD %s)\n",
		fmtContribution(a.Embed), fmtContribution(a.NormBias+a.HeadBias), fmtContribution(a.NormBias), fmtContribution(a.HeadBias),
		fmtContribution(a.Sum()), fmtContribution(a.LD))
	return err
}

// fmtContribution formats a logit contribution with four decimals.
func fmtContribution(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
