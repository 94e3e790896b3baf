package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/train"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

func newTrainCmd() *cobra.Command {
	var (
		tc        train.Recipe
		mc        nn.Config
		out       string
		block     string
		quiet     bool
		ropeTheta float64
	)
	cmd := &cobra.Command{
		Use:   "train --task NAME [--layers 2 --heads 4 --d-model 64 --steps 2000 … --out MODEL.safetensors]",
		Short: "Train a small causal transformer on a synthetic task",
		Long: `Train builds a causal transformer (token embedding, positions, blocks of multi-head
self-attention with residual connections and LayerNorm, an output head; or today's blocks: RMSNorm,
SwiGLU or GeGLU, grouped K/V heads, rotary positions, qk-norm, sandwich norms, a parallel
attention and MLP, a sliding window, a mixture of experts, OLMo 2's output-only norms) and trains it with AdamW,
gradient clipping and a warm-up + cosine learning-rate schedule on one of the synthetic tasks:
` + taskList() + `
It prints a progress bar with the loss, accuracy and tokens/s, evaluates the model at the end,
and writes a checkpoint (.safetensors, config in the metadata) that 'mha eval' reads. Ctrl-C stops
the run after the current step and saves the checkpoint so far; a run whose loss or gradients stop
being finite stops there with an error and writes none. --out is checked before training starts.
The same flags (seed and workers included) give a bit-identical checkpoint.

The checkpoint goes to --out, or without it to mha-out/TASK.safetensors (mha-out is created if
missing).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tc.Task == "" {
				return fmt.Errorf("--task is required: one of %s", joinNames())
			}
			progress := cmd.ErrOrStderr()
			if quiet {
				progress = io.Discard
			}
			if block != "" {
				a, b, ok := strings.Cut(block, ",")
				bq, err1 := strconv.Atoi(strings.TrimSpace(a))
				bk, err2 := strconv.Atoi(strings.TrimSpace(b))
				if !ok || err1 != nil || err2 != nil || bq < 1 || bk < 1 || len(mc.Patterns) == 0 {
					return fmt.Errorf("--block is %q, want BQ,BK: two integers ≥ 1, with a --pattern", block)
				}
				mc.Block = []int{bq, bk}
			}
			if mc.Normalizer == "softmax" {
				mc.Normalizer = ""
			}
			if mc.NormKind == nn.LayerNorm {
				mc.NormKind = ""
			}
			if mc.Activation == nn.GELU {
				mc.Activation = ""
			}
			if ropeTheta != 0 {
				mc.Rope = &nn.Rope{Theta: ropeTheta}
			}
			return runTrain(cmd.Context(), tc, mc, out, os.Args, cmd.OutOrStdout(), progress)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tc.Task, "task", "", "the task: "+joinNames())
	fl.IntVar(&tc.TaskConfig.SeqLen, "seq-len", 0, "sequence length (0: the task's default)")
	fl.IntVar(&tc.TaskConfig.Vocab, "vocab", 0, "vocabulary size (0: the task's default)")
	fl.IntVar(&tc.TaskConfig.K, "k", 0, "prev-token: copy the token k back (0: 1)")
	fl.IntVar(&mc.Layers, "layers", 2, "transformer blocks")
	fl.IntVar(&mc.Heads, "heads", 4, "attention heads per block")
	fl.IntVar(&mc.DModel, "d-model", 64, "model width")
	fl.IntVar(&mc.FFN, "ffn", 0, "feed-forward hidden width (0: 4·d-model)")
	fl.BoolVar(&mc.AttnOnly, "attn-only", false, "blocks without a feed-forward network")
	fl.StringVar(&mc.Norm, "norm", nn.PreNorm, "pre: x + f(LN(x)); post: LN(x + f(x)) as chapter 003 writes it")
	fl.StringVar(&mc.Positions, "positions", nn.Learned, "learned, sinusoidal, or none (with --rope)")
	// Today's models' blocks (nn.Config's fields of the same names).
	fl.StringVar(&mc.NormKind, "norm-kind", nn.LayerNorm, "layernorm, or rmsnorm (Llama's)")
	fl.StringVar(&mc.Activation, "activation", nn.GELU, "the feed-forward network: gelu, gelu_new, swiglu (Llama's) or geglu (Gemma's)")
	fl.IntVar(&mc.KVHeads, "kv-heads", 0, "key/value heads, a divisor of --heads (0: one per head; fewer: grouped-query attention)")
	fl.IntVar(&mc.HeadSize, "head-size", 0, "each head's size (0: d-model/heads)")
	fl.Float64Var(&ropeTheta, "rope", 0, "rotary positions of base `THETA` in every block (0: none)")
	fl.BoolVar(&mc.QKNorm, "qk-norm", false, "RMS-normalise each head's query and key (Qwen3's, Gemma 3's)")
	fl.BoolVar(&mc.SandwichNorm, "sandwich", false, "with --norm pre, also normalise the attention's and the MLP's outputs (Gemma 2's and 3's)")
	fl.BoolVar(&mc.NoInputNorm, "no-input-norm", false, "with --sandwich, normalise only the attention's and the MLP's outputs, not their inputs (OLMo 2's)")
	fl.BoolVar(&mc.QKNormAcross, "qk-norm-across", false, "with --qk-norm, normalise each position's queries (keys) across all heads at once (OLMo 2's)")
	fl.BoolVar(&mc.ParallelResidual, "parallel", false, "with --norm pre, the attention and the MLP read the block's input side by side (GPT-NeoX's)")
	fl.IntVar(&mc.Window, "window", 0, "a causal sliding window of W positions in every block (0: none)")
	fl.IntVar(&mc.Experts, "experts", 0, "a mixture of N feed-forward experts in every block, behind a router (0: one dense network; Mixtral's)")
	fl.IntVar(&mc.ExpertsPerToken, "experts-per-token", 0, "with --experts, the experts each token goes through, its router's top K")
	fl.BoolVar(&mc.NormTopK, "norm-topk", false, "with --experts, renormalise each token's chosen experts' weights to sum to 1 (Mixtral's)")
	fl.Float64Var(&mc.Dropout, "dropout", 0, "attention dropout probability")
	fl.StringArrayVar(&mc.Patterns, "pattern", nil, "sparse attention pattern, repeatable (the union is kept): local:W, dilated:W,D, strided:S, global:I,J,… or bigbird:W,G,R,SEED")
	fl.StringVar(&block, "block", "", "the sparse patterns' blocks BQ,BK (default 64,64)")
	fl.StringVar(&mc.Normalizer, "normalizer", "softmax", "what turns each row's scores into weights: softmax, sparsemax, entmax15, entmax:ALPHA or topk:K")
	fl.IntVar(&tc.Steps, "steps", 2000, "optimizer steps")
	fl.IntVar(&tc.Batch, "batch", 32, "sequences per step")
	fl.Float64Var(&tc.LR, "lr", 1e-3, fmt.Sprintf("peak learning rate, in (0, %d]", train.MaxLR))
	fl.Float64Var(&tc.MinLR, "min-lr", 1e-4, "learning rate at the end of the cosine decay")
	fl.IntVar(&tc.Warmup, "warmup", 100, "steps of linear warm-up")
	fl.Float64Var(&tc.WeightDecay, "weight-decay", 0.01, fmt.Sprintf("AdamW's decoupled weight decay (not on biases, LayerNorm, embeddings), in [0, %d]", train.MaxWeightDecay))
	fl.Float64Var(&tc.Clip, "clip", 1, "clip the gradients' global L2 norm to this (0: no clipping)")
	fl.Uint64Var(&tc.Seed, "seed", 1, "seed of the initialisation, the batches and dropout")
	workersVar(fl, &tc.Workers, "goroutines (0: GOMAXPROCS); results depend only on the seed")
	fl.StringVar(&out, "out", "", "the checkpoint `FILE` to write (default mha-out/TASK.safetensors)")
	fl.BoolVar(&quiet, "quiet", false, "no progress bar")
	return cmd
}

// taskList describes the tasks, one per line.
func taskList() string {
	var b strings.Builder
	for _, name := range tasks.Names() {
		t, err := tasks.New(name, tasks.Config{})
		if err != nil {
			panic(err) // the defaults of every task are valid
		}
		fmt.Fprintf(&b, "  %-11s %s\n", name, t.Describe())
	}
	return b.String()
}

// runTrain runs the training that tc and mc describe and writes the checkpoint to out, or when
// out is "" to mha-out/TASK.safetensors, creating mha-out once the flags are checked. args is
// the command line (os.Args), stored in the checkpoint as "mha" and its arguments. Everything
// that can be checked before training is (the flags, that out can be written); when training
// stops early, the progress bar is erased rather than filled, so that the error runTrain returns,
// which says at which step it stopped, gets a line of its own. A run that diverges writes no
// checkpoint.
func runTrain(ctx context.Context, tc train.Recipe, mc nn.Config, out string, args []string, stdout, progress io.Writer) error {
	task, err := tasks.New(tc.Task, tc.TaskConfig)
	if err != nil {
		return err
	}
	if err := tc.Validate(); err != nil {
		return err
	}
	mc.Vocab, mc.SeqLen, mc.Seed = task.Vocab(), task.SeqLen(), tc.Seed
	m, err := nn.NewModel(mc)
	if err != nil {
		return err
	}
	if out == "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return fmt.Errorf("cannot create the folder for the checkpoint: %w", err)
		}
		out = filepath.Join(outDir, tc.Task+".safetensors")
	}
	if err := checkOutFile("--out", out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "task %s: %s\nmodel: %d layers × %d heads, d_model %d, %s-norm, %d parameters\n",
		task.Name(), task.Describe(), mc.Layers, mc.Heads, mc.DModel, mc.Norm, m.NumParams())

	bar := progressbar.NewOptions(tc.Steps, progressbar.OptionSetWriter(progress), progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionSetWidth(20))
	start := time.Now()
	res, err := train.Run(ctx, m, task, tc.Config, train.Hooks{OnStep: func(s train.StepInfo) {
		bar.Describe(fmt.Sprintf("loss %.4f acc %5.1f%% %6.0f tok/s", s.Loss, 100*float64(s.Correct)/float64(s.Counted), float64(s.Tokens)/time.Since(start).Seconds()))
		bar.Add(1)
	}})
	interrupted := err != nil && errors.Is(err, ctx.Err())
	if err != nil {
		// Stop the bar where training stopped, and erase it: the error says at which step.
		bar.Exit()
		bar.Clear()
		if errors.Is(err, train.ErrDiverged) {
			return fmt.Errorf("%w; wrote no checkpoint: lower --lr (now %g)", err, tc.LR)
		}
		if !interrupted {
			return err
		}
	} else {
		bar.Finish()
		fmt.Fprintln(progress)
	}
	elapsed := time.Since(start)

	meta := map[string]string{"command": strings.Join(append([]string{"mha"}, args[1:]...), " "), "step": fmt.Sprint(res.Steps)}
	tcJSON, err := json.Marshal(tc)
	if err != nil {
		return err
	}
	meta[train.MetaKey] = string(tcJSON)
	if !interrupted {
		rep, err := probe.Evaluate(m, task, probe.EvalConfig{Seed: probe.EvalSeed, Workers: tc.Workers})
		if err != nil {
			return err
		}
		meta["eval_accuracy"] = fmt.Sprintf("%.4f", rep.Accuracy)
		fmt.Fprintf(stdout, "trained %d steps in %s (%.0f tokens/s), last loss %.4f; eval: accuracy %.2f%%, sequences %.2f%%\n",
			res.Steps, elapsed.Round(time.Second), float64(res.Tokens)/elapsed.Seconds(), res.Loss, 100*rep.Accuracy, 100*rep.SeqAccuracy)
	}
	if err := nn.Save(out, m, meta, nil); err != nil {
		return err
	}
	if interrupted {
		return fmt.Errorf("interrupted at step %d of %d; saved the model so far to %s", res.Steps, tc.Steps, out)
	}
	fmt.Fprintf(stdout, "wrote %s\n", out)
	return nil
}
