// Command mha runs, explains, measures and trains multi-head attention, and shows what every
// head does.
//
//	mha run      --weights W.safetensors --input IN.safetensors --heads N --out OUT.safetensors [--backward]
//	mha explain  [--weights W --input IN --heads N] [--format text|markdown|json]
//	mha bench    [--seq 512,1024,2048,4096] [--embed 768] [--heads 12] [--causal] [--need-weights]
//	             [--threads N] [--torch] [--ort] [--json]
//	mha train    --task NAME [--layers 2 --heads 4 --d-model 64 --steps 2000 --batch 32 --lr 1e-3]
//	             [--seed 1] [--out MODEL.safetensors]
//	mha eval     --task NAME [--checkpoint MODEL.safetensors] [--json]
//	mha lab      [--addr 127.0.0.1:8080]
//	mha experiment params|averaging|routing|scaling|heads-vs-dim|mi-penalty [--quick] [--out DIR]
//	mha patch    --model DIR --clean STR --corrupt STR --target TOK --foil TOK [--json]
//	             [--residual] [--patterns] [--position P]
//	mha viz      --model NAME --kind head|grid|similarity|pruning|importance [--out FILE.png|FILE.svg]
//	             [--text "…" | --tokens 1,2,3 | --seed N] [--ablate 1.0.zero,…]
//	             [--layer L --head H --metric rho|js|nmi|accuracy|loss --scope sequence|task] [--format png|svg]
//	mha attribute --model NAME|DIR --text STR --target TOK --foil TOK [--position P] [--json]
//	mha lens     --model NAME|DIR --text STR [--top K] [--target TOK] [--json]
//	mha composition --model NAME|DIR [--top N] [--raw] [--json]
//
// Without --out, train, viz and experiment write into the folder mha-out, which they create if
// missing: train to mha-out/TASK.safetensors, viz to mha-out/MODEL-KIND.png (.svg with --format
// svg), experiment NAME to mha-out/NAME-FIGURE.png and .svg. An output file replaces only a regular
// file, atomically and keeping its mode; a directory, device, named pipe or socket is refused and
// left as it is, and a symbolic link is followed, so that the file it points to is written and the
// link stays.
//
// Ctrl-C (SIGINT) or SIGTERM stops train (which saves the model trained so far), lab, viz and
// experiment within a second or so; a second signal ends them at once. The other commands end at
// once.
//
// Every error ends the program with exit status 1 and one line on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line args, writing results to stdout and errors to stderr, and
// returns the process's exit status.
func execute(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "mha",
		Short:         "Multi-head attention: run, explain and measure it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newSDPACmd(), newForwardCmd(), newGenerateCmd(), newExplainCmd(), newBenchCmd(), newTrainCmd(), newEvalCmd(), newLabCmd(), newVizCmd(), newTokenizeCmd(), newAttributeCmd(), newLensCmd(), newCompositionCmd(), newPatchCmd())
	for _, c := range root.Commands() {
		c.Args = noArgs
	}
	root.AddCommand(newExperimentCmd()) // takes the experiment's name as its argument
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx := context.Background()
	if c, _, err := root.Find(args); err == nil && stopsOnSignal[c.Name()] {
		// SIGINT (Ctrl-C) and SIGTERM cancel the command's context, and it stops soon; a
		// second signal, once the first is handled, has its default effect and ends the
		// process at once. The other commands leave the signals alone: they end at once.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		context.AfterFunc(ctx, stop)
	}
	if err := root.ExecuteContext(ctx); err != nil {
		if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() && errors.Is(err, context.Canceled) {
			err = fmt.Errorf("stopped: %w", cause) // "interrupt signal received", not "context canceled"
		}
		// The library's errors start with its package name, "mha: ", also inside an error
		// wrapped with a file name: say it once, in front.
		msg := strings.ReplaceAll(err.Error(), ": mha: ", ": ")
		fmt.Fprintln(stderr, "mha: "+strings.TrimPrefix(msg, "mha: "))
		return 1
	}
	return 0
}

// outDir is the folder that train, viz and experiment write into when --out is not given; they
// create it when it is missing.
const outDir = "mha-out"

// stopsOnSignal are the commands whose work watches cmd.Context() and so stops soon after it is
// cancelled: execute cancels it on SIGINT and SIGTERM. train then saves the model trained so far.
var stopsOnSignal = map[string]bool{"experiment": true, "generate": true, "lab": true, "train": true, "viz": true}

// noArgs rejects positional arguments: every input of mha's commands is a flag.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q; see 'mha %s --help' for its flags", cmd.Name(), args[0], cmd.Name())
	}
	return nil
}
