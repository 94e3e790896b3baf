package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/mhalab/mha/experiment"
	"github.com/mhalab/mha/viz"
	"github.com/spf13/cobra"
)

func newExperimentCmd() *cobra.Command {
	var (
		cfg    experiment.Config
		dir    string
		format string
	)
	cmd := &cobra.Command{
		Use:   "experiment NAME [--seed 0 --workers 0 --quick --steps N --out DIR --format text|json]",
		Short: "Run one of the chapters' experiments: " + strings.Join(experiment.Names(), ", "),
		Long: `Experiment runs one of the chapters' experiments on multi-head attention and prints its table
and what the numbers show; every number is measured by the run. Its pictures go to the folder
--out (mha-out by default, created if missing) as NAME-FIGURE.png and NAME-FIGURE.svg. The
experiments:

` + experimentList() + `
--quick runs smaller sizes (wider error bars, shorter training); --steps changes the training
steps of the experiments that train, which take 20 s to a minute on 2 cores. The same seed
gives the same result. Ctrl-C stops the run.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("experiment takes one argument, the experiment's name (one of %s), got %d", strings.Join(experiment.Names(), ", "), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format is %q, want text or json", format)
			}
			res, err := experiment.Run(cmd.Context(), args[0], cfg)
			if err != nil {
				return err
			}
			files, err := writeFigures(dir, res)
			if err != nil {
				return err
			}
			if format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			printResult(cmd.OutOrStdout(), res, files)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&cfg.Seed, "seed", 0, "seed of every random draw")
	workersVar(fl, &cfg.Workers, "goroutines (0: GOMAXPROCS); results depend only on the seed")
	fl.BoolVar(&cfg.Quick, "quick", false, "smaller sizes: faster, with wider error bars")
	fl.IntVar(&cfg.Steps, "steps", 0, "training steps of the experiments that train: heads-vs-dim, mi-penalty, scaling, sparse (0: their default)")
	fl.StringVar(&cfg.Model, "model", "", "a Hugging Face model folder or an mha train checkpoint to measure instead of the shipped models (sparse, specialisation)")
	fl.StringVar(&dir, "out", outDir, "the folder `DIR` for the pictures (created if missing)")
	fl.StringVar(&format, "format", "text", "text: table and summary; json: the result's numbers")
	return cmd
}

// experimentList describes the experiments, one per line.
func experimentList() string {
	var b strings.Builder
	for _, name := range experiment.Names() {
		fmt.Fprintf(&b, "  %-15s %s\n", name, experiment.About(name))
	}
	return b.String()
}

// writeFigures writes each of res's pictures to dir as NAME-FIGURE.png and .svg and returns the
// files written.
func writeFigures(dir string, res *experiment.Result) ([]string, error) {
	if len(res.Pictures) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: cannot create the directory for the pictures: %w", dir, err)
	}
	var files []string
	for _, f := range res.Pictures {
		for _, ext := range []string{".png", ".svg"} {
			name := filepath.Join(dir, res.Name+"-"+f.Name+ext)
			if err := viz.WriteFile(name, f.Picture); err != nil {
				return files, err
			}
			files = append(files, name)
		}
	}
	return files, nil
}

// printResult prints res's title, table and summary, and the files its pictures went to.
func printResult(w io.Writer, res *experiment.Result, files []string) {
	fmt.Fprintf(w, "%s\n\n", res.Title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(res.Table.Columns, "\t"))
	for _, row := range res.Table.Rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", wrap(res.Summary, 100))
	if len(files) > 0 {
		fmt.Fprintf(w, "\nwrote %s\n", strings.Join(files, ", "))
	}
}

// wrap breaks s into lines of at most width characters at spaces (longer words stay whole).
func wrap(s string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		n := len([]rune(word))
		if i > 0 && line+1+n > width {
			b.WriteByte('\n')
			line = 0
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += n
	}
	return b.String()
}
