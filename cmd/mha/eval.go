package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/train"
	"github.com/spf13/cobra"
)

func newEvalCmd() *cobra.Command {
	var (
		task, checkpoint string
		cfg              probe.EvalConfig
		asJSON           bool
		allowNonFinite   bool
	)
	cmd := &cobra.Command{
		Use:   "eval --task NAME [--checkpoint MODEL.safetensors] [--json]",
		Short: "Measure a trained model's accuracy and what each of its heads attends to",
		Long: `Eval runs a checkpoint written by 'mha train' on fresh sequences of its task and prints the
accuracy (per scored position and per whole sequence) and, for every head, three scores:

  prev-token   mean α(t, t−1): 1 for a head that always looks at the previous token
  prefix-match Olsson et al. 2022: on random tokens repeated once, the weight on the token after
               the earlier copy of the current one (1 for an induction head)
  ground-truth S = Σ(A⊙D)/ΣA with D the task's correct attention (1 for a head that attends only
               where the task says it should)

Without --checkpoint it evaluates the model shipped for the task (see models/README.md). A
checkpoint whose weights hold NaN or ±Inf is refused; with --allow-nonfinite it is evaluated, with
a warning naming the tensor: its loss and scores print as NaN, and as null in --json.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if task == "" {
				return fmt.Errorf("--task is required: one of %s", joinNames())
			}
			var (
				m    *nn.Model
				meta map[string]string
				err  error
			)
			if checkpoint == "" {
				m, meta, err = models.Open(task)
			} else {
				m, meta, _, err = nn.LoadOptions{AllowNonFinite: allowNonFinite}.Load(checkpoint)
			}
			if err != nil {
				return withNonFiniteHint(err)
			}
			t, err := train.TaskOf(task, meta)
			if err != nil {
				return err
			}
			if cfg.Seed == 0 {
				cfg.Seed = probe.EvalSeed
			}
			rep, err := probe.Evaluate(m, t, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				if err := json.NewEncoder(cmd.OutOrStdout()).Encode(rep); err != nil {
					return err
				}
			} else {
				printReport(cmd.OutOrStdout(), rep)
			}
			if err := m.CheckFinite(); err != nil { // after the output, so that an error is one line
				fmt.Fprintln(cmd.ErrOrStderr(), nonFiniteWarning(checkpoint, err))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&task, "task", "", "the task: "+joinNames())
	fl.StringVar(&checkpoint, "checkpoint", "", "model written by 'mha train' (default: the shipped model of the task)")
	fl.IntVar(&cfg.Batches, "batches", 8, "batches to evaluate on")
	fl.IntVar(&cfg.Batch, "batch", 64, "sequences per batch")
	fl.Uint64Var(&cfg.Seed, "seed", 0, "seed of the evaluation sequences (0: a fixed seed far from training's)")
	workersVar(fl, &cfg.Workers, "goroutines (0: GOMAXPROCS)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object (NaN and ±Inf as null)")
	fl.BoolVar(&allowNonFinite, "allow-nonfinite", false, allowNonFiniteUsage)
	return cmd
}

func printReport(w io.Writer, rep *probe.Report) {
	fmt.Fprintf(w, "task %s: %d sequences, %d scored positions\n", rep.Task, rep.Sequences, rep.Positions)
	fmt.Fprintf(w, "loss %.4f  accuracy %.2f%%  sequence accuracy %.2f%%\n\n", rep.Loss, 100*rep.Accuracy, 100*rep.SeqAccuracy)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\thead\tprev-token\tprefix-match\tground-truth\t")
	for _, h := range rep.Heads {
		prefix := "–"
		if h.PrefixMatching != nil {
			prefix = fmt.Sprintf("%.3f", *h.PrefixMatching)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%s\t%.3f\t\n", h.Layer, h.Head, h.PrevToken, prefix, h.GroundTruth)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nprev-token and prefix-match: on %d sequences of random tokens repeated once (Olsson et al.);\nground-truth: on the %d sequences of the task, the share of attention on the keys the task needs.\n", rep.Sequences, rep.Sequences)
}

func joinNames() string {
	s := ""
	for i, n := range tasks.Names() {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}
