package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/jsonnum"
	"github.com/spf13/cobra"
)

// patchFlags are mha patch's flags.
type patchFlags struct {
	model, clean, corrupt, target, foil string
	position                            int
	residual, patterns, asJSON          bool
	workers                             int
}

func newPatchCmd() *cobra.Command {
	f := patchFlags{position: -1}
	cmd := &cobra.Command{
		Use:   "patch --model DIR --clean STR --corrupt STR --target TOK --foil TOK [--json]",
		Short: "Activation patching: which heads carry the difference between a clean and a corrupted prompt",
		Long: `Patch runs --model on a clean and a corrupted prompt of the same token length and measures the
logit difference LD = logit(target) − logit(foil) at the last position (a masked language model's
last [MASK]; --position to choose). Then, for every layer and head, it runs the corrupted prompt
with that head's output z = A·V (before the output projection) replaced at every position by its
value in the clean run, and prints the normalised score

    (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt)

as a layer × head table: 1, the head restores the clean behaviour; 0, it changes nothing.
--residual adds the residual stream entering each layer (and the last layer's output), patched at
one position at a time (a layer × position table); --patterns adds each head patched with the
clean run's attention weights only (A_clean·V_corrupt).

--model is a shipped model's name (then the prompts are its task's symbols, separated by spaces),
a Hugging Face folder (the prompts are text, encoded with its tokenizer and special tokens) or a
checkpoint of mha train. --target and --foil are tokens as the tokenizer writes them ("ĠParis"),
text that encodes as one token (" Paris"), a task's symbol, or #ID.

--json prints {"ld_clean": x, "ld_corrupt": y, "heads": [[...], ...]}, heads[l][h] the normalised
score, and "residual" and "patterns" when asked for.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd.OutOrStdout()) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "a shipped model's name, a Hugging Face folder, or a checkpoint of mha train")
	fl.StringVar(&f.clean, "clean", "", "the clean prompt")
	fl.StringVar(&f.corrupt, "corrupt", "", "the corrupted prompt, of the same token length")
	fl.StringVar(&f.target, "target", "", "the token whose logit the metric adds (token, text of one token, or #ID)")
	fl.StringVar(&f.foil, "foil", "", "the token whose logit the metric subtracts")
	fl.IntVar(&f.position, "position", -1, "the position the metric reads (-1: the last, or a masked LM's last [MASK])")
	fl.BoolVar(&f.residual, "residual", false, "also patch the residual stream at each layer and position")
	fl.BoolVar(&f.patterns, "patterns", false, "also patch each head's attention pattern only")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	workersVar(fl, &f.workers, "goroutines (0: GOMAXPROCS)")
	return cmd
}

// patchReport is mha patch --json's output.
type patchReport struct {
	LDClean   jsonnum.Number     `json:"ld_clean"`
	LDCorrupt jsonnum.Number     `json:"ld_corrupt"`
	Heads     [][]jsonnum.Number `json:"heads"`
	Residual  [][]jsonnum.Number `json:"residual,omitempty"`
	Patterns  [][]jsonnum.Number `json:"patterns,omitempty"`
}

func (f *patchFlags) run(w io.Writer) error {
	for _, req := range []struct{ name, v string }{{"--clean", f.clean}, {"--corrupt", f.corrupt}, {"--target", f.target}, {"--foil", f.foil}} {
		if req.v == "" && f.model != "" {
			return fmt.Errorf("%s is required", req.name)
		}
	}
	m, err := openCircuitModel(f.model)
	if err != nil {
		return err
	}
	clean, err := m.Encode(f.clean)
	if err != nil {
		return fmt.Errorf("--clean: %w", err)
	}
	corrupt, err := m.Encode(f.corrupt)
	if err != nil {
		return fmt.Errorf("--corrupt: %w", err)
	}
	if len(clean) != len(corrupt) {
		return fmt.Errorf("the clean prompt has %d tokens (%s), the corrupted %d (%s); want the same length",
			len(clean), strings.Join(pieces(m, clean), " "), len(corrupt), strings.Join(pieces(m, corrupt), " "))
	}
	target, err := m.Token(f.target)
	if err != nil {
		return fmt.Errorf("--target: %w", err)
	}
	foil, err := m.Token(f.foil)
	if err != nil {
		return fmt.Errorf("--foil: %w", err)
	}
	pos := f.position
	switch {
	case pos == -1:
		pos = m.Position(clean)
		if p := m.Position(corrupt); p != pos {
			return fmt.Errorf("the metric's position is %d in the clean prompt and %d in the corrupted one (its last [MASK]); want the same, or give --position", pos, p)
		}
	case pos < 0 || pos >= len(clean):
		return fmt.Errorf("--position %d, want 0 to %d (the prompts have %d tokens), or -1 for the default", pos, len(clean)-1, len(clean))
	}
	mt := circuits.Metric{Target: target, Foil: foil, Position: pos}
	res, err := circuits.Patch(m.Net(), clean, corrupt, mt, circuits.PatchOptions{Workers: f.workers, Residual: f.residual, Patterns: f.patterns})
	if err != nil {
		return err
	}
	if f.asJSON {
		return json.NewEncoder(w).Encode(patchReport{LDClean: jsonnum.Number(res.LDClean), LDCorrupt: jsonnum.Number(res.LDCorrupt),
			Heads: numbers(res.Heads), Residual: numbers(res.Residual), Patterns: numbers(res.Patterns)})
	}
	fmt.Fprintf(w, "model %s, %d tokens; LD = logit(%s) − logit(%s) at position %d (%s)\n",
		m.Name(), len(clean), m.Piece(target), m.Piece(foil), pos, m.Piece(clean[pos]))
	fmt.Fprintf(w, "clean:     %s\ncorrupted: %s\n", strings.Join(pieces(m, clean), " "), strings.Join(pieces(m, corrupt), " "))
	fmt.Fprintf(w, "LD_clean   %.4f\nLD_corrupt %.4f\n", res.LDClean, res.LDCorrupt)
	fmt.Fprintln(w, "\nheads: (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt), the head's output patched at every position")
	printGrid(w, res.Heads, "layer", "h", nil)
	if res.Patterns != nil {
		fmt.Fprintln(w, "\npatterns: the head's attention weights patched (A_clean·V_corrupt)")
		printGrid(w, res.Patterns, "layer", "h", nil)
	}
	if res.Residual != nil {
		fmt.Fprintln(w, "\nresidual: the stream entering the layer (out: the last layer's output) patched at one position")
		cols := make([]string, len(clean))
		for i, id := range corrupt {
			cols[i] = fmt.Sprintf("%d:%s", i, m.Piece(id))
		}
		printGrid(w, res.Residual, "layer", "", cols)
	}
	return nil
}

// numbers returns g as JSON numbers (nil for nil).
func numbers(g [][]float64) [][]jsonnum.Number {
	if g == nil {
		return nil
	}
	out := make([][]jsonnum.Number, len(g))
	for i, row := range g {
		out[i] = make([]jsonnum.Number, len(row))
		for j, x := range row {
			out[i][j] = jsonnum.Number(x)
		}
	}
	return out
}

// printGrid prints g as a table: rows rowName 0, 1, …, columns prefix+index; with cols (the
// residual grid), columns cols and the last row "out", the last layer's output.
func printGrid(w io.Writer, g [][]float64, rowName, prefix string, cols []string) {
	if len(g) == 0 {
		return
	}
	width := 7
	for _, c := range cols {
		width = max(width, len([]rune(c))+1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%6s", rowName)
	for j := range g[0] {
		name := fmt.Sprintf("%s%d", prefix, j)
		if cols != nil {
			name = cols[j]
		}
		fmt.Fprintf(&b, " %*s", width, name)
	}
	b.WriteByte('\n')
	for i, row := range g {
		label := fmt.Sprint(i)
		if cols != nil && i == len(g)-1 {
			label = "out"
		}
		fmt.Fprintf(&b, "%6s", label)
		for _, x := range row {
			if math.Abs(x) < 5e-4 {
				x = 0 // not -0.000
			}
			fmt.Fprintf(&b, " %*.3f", width, x)
		}
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}
