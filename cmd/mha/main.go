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
//	mha viz      --model NAME --kind head|grid|similarity|pruning|importance --out FILE.png|FILE.svg
//	             [--text "…" | --tokens 1,2,3 | --seed N] [--ablate 1.0.zero,…]
//	             [--layer L --head H --metric rho|js|nmi|accuracy|loss --scope sequence|task] [--format png|svg]
//
// Every error ends the program with exit status 1 and one line on stderr.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

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
	root.AddCommand(newRunCmd(), newExplainCmd(), newBenchCmd(), newTrainCmd(), newEvalCmd(), newLabCmd(), newVizCmd())
	for _, c := range root.Commands() {
		c.Args = noArgs
	}
	root.AddCommand(newExperimentCmd()) // takes the experiment's name as its argument
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "mha: ") {
			msg = "mha: " + msg
		}
		fmt.Fprintln(stderr, msg)
		return 1
	}
	return 0
}

// noArgs rejects positional arguments: every input of mha's commands is a flag.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q; see 'mha %s --help' for its flags", cmd.Name(), args[0], cmd.Name())
	}
	return nil
}
