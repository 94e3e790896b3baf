package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mhalab/mha/internal/atomicfile"
	"github.com/mhalab/mha/lab"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/viz"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// pictureFlags are the flags of `mha viz` that are /api/picture's parameters of the same name.
var pictureFlags = []string{"model", "text", "tokens", "seed", "ablate", "patterns", "block", "normalizer", "kind", "layer", "head", "metric", "scope", "clean", "corrupt", "target", "foil", "position", "mode"}

func newVizCmd() *cobra.Command {
	var out, format string
	cmd := &cobra.Command{
		Use:   "viz --model NAME|DIR --kind KIND [--text \"…\" | --tokens 1,2,3 | --seed N] [--ablate L.H.MODE,…] [--patterns \"P …\" --block BQ,BK --normalizer N] [--layer L --head H --metric M --scope S] [--clean \"…\" --corrupt \"…\" --target TOK --foil TOK [--position P]] [--mode q|k|v] [--out FILE.png|FILE.svg] [--format png|svg]",
		Short: "Draw a picture of a model's heads as PNG or SVG, as the lab draws it",
		Long: `Viz draws one of the lab's pictures of a shipped model (see 'mha lab') and writes it to --out, as
PNG or SVG after the file's extension (--format, if given, must agree). Without --out it writes
mha-out/MODEL-KIND.png, or .svg with --format svg, creating mha-out if missing. The picture is
the one the lab's page downloads for the same choices, byte for byte.

--model may also be a Hugging Face folder or a checkpoint of mha train, as 'mha lab --model'
takes it: --text is then natural text, encoded with the model's tokenizer (at most 64 tokens),
and there is no --seed, no --scope task beyond repeated random tokens, no pruning or importance
unless the checkpoint records its task.

Pictures of a sequence, given by exactly one of --text (symbols separated by spaces), --tokens
(comma-separated ids) or --seed (the task's sequence drawn from the seed, with its targets), with
the heads of --ablate (LAYER.HEAD.MODE, MODE zero, mean or uniform) ablated, and the model run
under --patterns, --block and --normalizer (sparse attention; each left out is the model's own;
head and grid then draw the block map and mark the weights that are exactly 0):

  --kind head --layer L --head H               one head's attention, tokens on both axes
  --kind grid                                  every layer × head
  --kind similarity --layer L --metric M       a layer's head pairs: M is rho (cosine similarity
         [--scope sequence|task]               of outputs), js (Jensen–Shannon distance) or nmi
                                               (argmax NMI); on the sequence or, with --scope
                                               task, on 64 task sequences (no sequence needed,
                                               no --ablate or sparse attention)
  --kind rollout                               attention rollout through every layer (Abnar and
                                               Zuidema 2020)
  --kind offsets --layer L --head H            one head's mean attention by key − query offset

Pictures of the model's task (64 sequences; no sequence flags):

  --kind pruning [--metric accuracy|loss]      accuracy (or loss) as heads are zero-ablated, least
                                               important first (Michel et al. 2019)
  --kind importance                            every head's importance, normalised per layer

Pictures of activation patching (the lab's Circuits tab), from a clean and a corrupted prompt of
the same token length (--clean and --corrupt, read as --text is) and the logit difference
LD = logit(--target) − logit(--foil) at --position (default: the last position, or the clean
prompt's [MASK] for BERT); a token is a symbol, a token as the tokenizer writes it, text that
encodes as one token, or #ID. A score of 1 restores the clean LD, 0 changes nothing:

  --kind patching                              each head's output patched, layers × heads
  --kind patching-residual                     the residual stream patched, layers × positions
  --kind patching-patterns                     each head's attention pattern patched
  --kind attribution                           direct logit attribution of LD on the clean prompt,
                                               layers × heads (and MLPs); pre-norm models only

And of the weights alone:

  --kind composition [--mode q|k|v]            Q-, K- or V-composition scores (Elhage et al.
                                               2021) of each head with the heads of later layers`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			query := url.Values{}
			for _, name := range pictureFlags {
				f := cmd.Flags().Lookup(name)
				if !f.Changed {
					continue
				}
				value := f.Value.String()
				if list, ok := f.Value.(pflag.SliceValue); ok {
					value = strings.Join(list.GetSlice(), ",") // every item of every --ablate, in order
				}
				query.Set(name, value)
			}
			var user []string // a model of the user's: a folder or a checkpoint
			name := query.Get("model")
			if _, err := os.Stat(name); err == nil && !slices.Contains(models.Names(), name) {
				user = []string{name}
				base := filepath.Base(filepath.Clean(name)) // as the lab names it (Server.Added)
				name = strings.TrimSuffix(base, filepath.Ext(base))
			}
			makeDir := out == ""
			if makeDir {
				out = filepath.Join(outDir, name+"-"+query.Get("kind")+"."+cmp.Or(format, "png"))
			}
			return drawPicture(cmd.Context(), query, user, out, format, makeDir, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.String("model", "", "the shipped model `NAME`, one per task (see 'mha lab'), or a Hugging Face folder or checkpoint of mha train")
	fl.String("kind", "", "the picture's `KIND`: head, grid, similarity, rollout, offsets, pruning, importance, patching, patching-residual, patching-patterns, attribution or composition")
	fl.String("text", "", "the sequence as `SYMBOLS` separated by spaces, or text for a model with a tokenizer")
	fl.String("tokens", "", "the sequence as token `IDS`, comma-separated")
	fl.String("seed", "", "draw the sequence from the task with seed `N`")
	fl.StringSlice("ablate", nil, "heads to ablate, each `L.H.MODE` (MODE zero, mean or uniform), comma-separated; repeat the flag to add more")
	fl.String("patterns", "", "run the model under sparse attention `PATTERNS` separated by spaces (local:W, dilated:W,D, strided:S, global:I,J,…, bigbird:W,G,R,SEED; empty for dense); default the model's own")
	fl.String("block", "", "the patterns' blocks, `BQ,BK` (default the model's own, or 64,64)")
	fl.String("normalizer", "", "replace the softmax by `N`: sparsemax, entmax15, entmax:ALPHA or topk:K (softmax for none); default the model's own")
	fl.String("layer", "", "the layer `L` of kind head, offsets or similarity")
	fl.String("head", "", "the head `H` of kind head or offsets")
	fl.String("metric", "", "rho, js or nmi for kind similarity; accuracy (the default) or loss for kind pruning")
	fl.String("scope", "", "sequence (the default) or task, for kind similarity")
	fl.String("clean", "", "the clean `PROMPT` of the patching and attribution kinds, read as --text is")
	fl.String("corrupt", "", "the corrupted `PROMPT`, of the same token length as --clean")
	fl.String("target", "", "the `TOKEN` whose logit the metric adds: a symbol, a token of the tokenizer, text of one token, or #ID")
	fl.String("foil", "", "the `TOKEN` whose logit the metric subtracts")
	fl.String("position", "", "the `POSITION` whose logits the metric reads (default the last, or the clean prompt's [MASK])")
	fl.String("mode", "", "q, k (the default) or v, for kind composition")
	fl.StringVar(&out, "out", "", "the `FILE` to write, NAME.png or NAME.svg (default mha-out/MODEL-KIND.png, .svg with --format svg)")
	fl.StringVar(&format, "format", "", "png or svg; must agree with --out's extension")
	for _, name := range []string{"model", "kind"} {
		if err := cmd.MarkFlagRequired(name); err != nil {
			panic(err) // the flag is defined just above
		}
	}
	return cmd
}

// drawPicture draws the lab's picture that query asks for and writes it to out, as PNG or SVG
// after out's extension, which must agree with format unless format is empty; it reports the file
// written to stdout. With makeDir it creates out's directory if it is missing. user, when not
// empty, holds the path of the user's model that query's model names.
func drawPicture(ctx context.Context, query url.Values, user []string, out, format string, makeDir bool, stdout io.Writer) error {
	ext, err := pictureFormat(out, format)
	if err != nil {
		return err
	}
	if err := atomicfile.Check(out); err != nil {
		return fmt.Errorf("--out %w", err) // before drawing, which can take a second
	}
	query.Set("format", ext)
	srv, err := lab.New(lab.Options{Models: user})
	if err != nil {
		return err
	}
	if len(user) > 0 {
		query.Set("model", srv.Added()[0])
	}
	pic, _, err := srv.Picture(ctx, query)
	if err != nil {
		return fmt.Errorf("viz: %w", err)
	}
	if makeDir {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return fmt.Errorf("cannot create the folder for the picture: %w", err)
		}
	}
	if err := viz.WriteFile(out, pic); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", out)
	return nil
}

// pictureFormat returns the format, png or svg, that out's extension names, or an error when
// the extension is another or format is given and names another.
func pictureFormat(out, format string) (string, error) {
	if format != "" && format != "png" && format != "svg" {
		return "", fmt.Errorf("--format is %q, want png or svg", format)
	}
	ext := strings.ToLower(filepath.Ext(out))
	if ext != ".png" && ext != ".svg" {
		return "", fmt.Errorf("--out %q ends in %q, want a file name ending in .png or .svg", out, ext)
	}
	if format != "" && "."+format != ext {
		return "", fmt.Errorf("--format is %s but --out %q ends in %s; give a name ending in .%s, or leave --format out", format, out, ext, format)
	}
	return ext[1:], nil
}
