package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
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
		mf               modelEvalFlags
	)
	cmd := &cobra.Command{
		Use:   "eval (--task NAME [--checkpoint MODEL.safetensors] | --model DIR [--text STR]) [--json]",
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
a warning naming the tensor: its loss and scores print as NaN, and as null in --json.

With --model it scores the heads of a model of one's own (a Hugging Face folder or an mha train
checkpoint) on repeated random tokens (--repeat), and with --text its next-token loss; these two
flags apply only there, and --allow-nonfinite only to --checkpoint.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if mf.model != "" {
				if task != "" || checkpoint != "" {
					return fmt.Errorf("give --model, or --task (with --checkpoint), not both")
				}
				if allowNonFinite {
					return fmt.Errorf("--allow-nonfinite applies to --checkpoint; --model opens only finite weights")
				}
				if !cmd.Flags().Changed("batch") {
					cfg.Batch = 8 // real models are large: the weights of every layer are kept
				}
				return mf.run(cmd, cfg, asJSON)
			}
			if task == "" {
				return fmt.Errorf("--task is required: one of %s (or give --model)", joinNames())
			}
			for _, name := range []string{"text", "repeat"} {
				if cmd.Flags().Changed(name) {
					return fmt.Errorf("--%s applies to --model; a task's sequences are its own", name)
				}
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
	fl.StringVar(&mf.model, "model", "", "a Hugging Face model folder or an mha train checkpoint, instead of --task: its heads' scores on random tokens (and its loss on --text)")
	fl.StringVar(&mf.text, "text", "", "with --model: a text to measure the next-token loss and perplexity on (needs the folder's tokenizer.json)")
	fl.IntVar(&cfg.Repeat, "repeat", 0, "with --model: the random sequences repeat n tokens (0: min(64, seq_len/2))")
	return cmd
}

// modelEvalFlags are mha eval's flags for a model without a task.
type modelEvalFlags struct{ model, text string }

// modelReport is mha eval --model's result.
type modelReport struct {
	Model        string          `json:"model"`
	Architecture string          `json:"architecture"`
	Sequences    int             `json:"sequences"` // random sequences of 2·Repeat tokens
	Repeat       int             `json:"repeat"`
	Tokens       int             `json:"tokens,omitempty"` // of --text
	Loss         *jsonnum.Number `json:"loss,omitempty"`   // mean next-token cross-entropy on --text, nats
	Perplexity   *jsonnum.Number `json:"perplexity,omitempty"`
	Heads        []headScores    `json:"heads"`
}

// headScores are probe.PatternScores for JSON (NaN as null).
type headScores struct {
	Layer      int            `json:"layer"`
	Head       int            `json:"head"`
	PrevToken  jsonnum.Number `json:"prev_token"`
	Induction  jsonnum.Number `json:"induction"`
	Duplicate  jsonnum.Number `json:"duplicate_token"`
	FirstToken jsonnum.Number `json:"first_token"`
	Position   jsonnum.Number `json:"position"`
	Offset     int            `json:"offset"`
	Broad      jsonnum.Number `json:"broad"`
}

func (f *modelEvalFlags) run(cmd *cobra.Command, cfg probe.EvalConfig, asJSON bool) error {
	m, err := pretrained.OpenPath(f.model)
	if err != nil {
		return err
	}
	c := m.NN.Config()
	if cfg.Repeat == 0 {
		cfg.Repeat = min(64, c.SeqLen/2)
	}
	if cfg.Seed == 0 {
		cfg.Seed = probe.EvalSeed
	}
	rep := modelReport{Model: f.model, Architecture: m.Architecture, Repeat: cfg.Repeat}
	if f.text != "" {
		if c.Bidirectional {
			return fmt.Errorf("--text measures the next-token loss, which a bidirectional model (%s) does not predict", m.Architecture)
		}
		ids, err := encode(m, f.model, f.text)
		if err != nil {
			return err
		}
		if len(ids) < 2 || len(ids) > c.SeqLen {
			return fmt.Errorf("--text gives %d tokens, want 2 to the model's %d", len(ids), c.SeqLen)
		}
		if _, err := m.NN.Forward(ids[:len(ids)-1], 1, len(ids)-1, &nn.RunOptions{Workers: cfg.Workers}); err != nil {
			return err
		}
		loss, _, n, err := m.NN.Loss(ids[1:], nil)
		if err != nil {
			return err
		}
		l, p := jsonnum.Number(loss), jsonnum.Number(math.Exp(loss))
		rep.Tokens, rep.Loss, rep.Perplexity = n, &l, &p
	}
	scores, err := probe.RepeatedScores(m.NN, c.Vocab, cfg)
	if err != nil {
		return err
	}
	if cfg.Batches == 0 {
		cfg.Batches = 8
	}
	rep.Sequences = cfg.Batches * cfg.Batch
	for _, s := range scores {
		rep.Heads = append(rep.Heads, headScores{s.Layer, s.Head, jsonnum.Number(s.PrevToken), jsonnum.Number(s.Induction),
			jsonnum.Number(s.Duplicate), jsonnum.Number(s.FirstToken), jsonnum.Number(s.Position), s.Offset, jsonnum.Number(s.Broad)})
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	fmt.Fprintf(w, "%s (%s): %d layers × %d heads\n", rep.Model, rep.Architecture, c.Layers, c.Heads)
	if rep.Loss != nil {
		fmt.Fprintf(w, "--text: %d next tokens, loss %.4f nats, perplexity %.2f\n", rep.Tokens, *rep.Loss, *rep.Perplexity)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\thead\tprev-token\tinduction\tduplicate\tfirst-token\tposition\t(offset)\tbroad\t")
	for _, h := range rep.Heads {
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%+d\t%.3f\t\n", h.Layer, h.Head, h.PrevToken, h.Induction, h.Duplicate, h.FirstToken, h.Position, h.Offset, h.Broad)
	}
	tw.Flush()
	fmt.Fprintf(w, "\non %d sequences of %d random tokens repeated once (Olsson et al.): prev-token α(t, t−1); induction, the\nweight on the token after the earlier copy; duplicate, on the earlier copy; first-token, on position 0;\nposition, at the strongest other fixed offset j − t; broad, row entropy over its maximum.\n", rep.Sequences, rep.Repeat)
	return nil
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
