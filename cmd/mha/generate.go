package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/generate"
	"github.com/mhalab/mha/pretrained"
	"github.com/spf13/cobra"
)

// generateFlags are mha generate's flags.
type generateFlags struct {
	model, prompt, ids, cache string
	compute                   string
	maxTokens, topK, workers  int
	temperature, topP         float64
	seed                      uint64
}

func newGenerateCmd() *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate --model DIR --prompt STR [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--compute bfloat16]",
		Short: "Continue a prompt with a causal model, through its KV cache",
		Long: `Generate opens --model (a Hugging Face folder of GPT-2 or the Llama family, with its tokenizer.json,
or a checkpoint of mha train with --ids), encodes --prompt with the model's special tokens, runs it
once (the prefill), and then adds one token at a time through each layer's KV cache, printing the
text as it comes. It stops after --max-tokens tokens or at the model's end-of-sequence token. A
model trained with sparse attention (mha train --pattern or --normalizer) has no cache (--cache
then warns that it changes nothing): each token runs the model on the whole sequence so far.

With --temperature 0 (the default) it takes the most likely token each step (greedy); above 0 it
samples from the softmax of logits/T, keeping the --top-k most likely tokens and then the smallest
set of them whose probability reaches --top-p, from a generator seeded by --seed: the same seed
gives the same text (at --temperature 0, --top-k, --top-p and --seed change nothing, and a
warning says so). --compute bfloat16 runs the prompt's matrix products with bfloat16 operands
and float32 sums, as llama.cpp runs a bf16 model's (each decode step's are float32 dot products
either way). At the end it prints the prefill's and the decoding's tokens per second to
standard error.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "a Hugging Face model folder, or a checkpoint file of mha train")
	fl.StringVar(&f.prompt, "prompt", "", "the text to continue (needs the folder's tokenizer.json)")
	fl.StringVar(&f.ids, "ids", "", "the prompt as token ids, comma-separated (instead of --prompt); prints ids")
	fl.IntVar(&f.maxTokens, "max-tokens", 32, "the most tokens to generate")
	fl.Float64Var(&f.temperature, "temperature", 0, "sampling temperature (0: greedy)")
	fl.IntVar(&f.topK, "top-k", 0, "sample among the K most likely tokens (0: all)")
	fl.Float64Var(&f.topP, "top-p", 1, "sample among the most likely tokens whose probability reaches P (1: all)")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the sampling")
	fl.StringVar(&f.cache, "cache", "f32", "storage of the KV cache: f32, f16 or bf16")
	fl.StringVar(&f.compute, "compute", "float32", "the prompt's matrix products: float32, or bfloat16 (bf16 operands, float32 sums: about twice as fast where the CPU has AVX512_BF16)")
	workersVar(fl, &f.workers, "threads to run on (0: all cores)")
	return cmd
}

func (f *generateFlags) run(cmd *cobra.Command) error {
	hasPrompt, hasIDs := cmd.Flags().Changed("prompt"), cmd.Flags().Changed("ids")
	switch {
	case f.model == "":
		return fmt.Errorf("--model is required: a Hugging Face model folder or a checkpoint of mha train")
	case hasPrompt == hasIDs:
		return fmt.Errorf("give --prompt or --ids, one of them")
	case f.maxTokens < 1:
		return fmt.Errorf("--max-tokens is %d, want ≥ 1", f.maxTokens)
	}
	// As Hugging Face's generate warns: greedy decoding samples nothing.
	if f.temperature == 0 && (cmd.Flags().Changed("top-k") || cmd.Flags().Changed("top-p") || cmd.Flags().Changed("seed")) {
		fmt.Fprintln(cmd.ErrOrStderr(), "mha: warning: --top-k, --top-p and --seed shape sampling, which --temperature 0 (greedy, the default) does not do: they change nothing")
	}
	dtypes := map[string]mha.CacheDType{"f32": mha.CacheFloat32, "f16": mha.CacheFloat16, "bf16": mha.CacheBFloat16}
	dtype, ok := dtypes[f.cache]
	if !ok {
		return fmt.Errorf("--cache is %q, want f32, f16 or bf16", f.cache)
	}
	compute, err := mha.ParseCompute(f.compute)
	if err != nil {
		return fmt.Errorf("--compute: %v", err)
	}
	var prompt []int
	if hasIDs {
		if prompt, err = parseIDs(f.ids); err != nil {
			return err
		}
	}
	m, err := pretrained.OpenPath(f.model)
	if err != nil {
		return err
	}
	if !m.LMHead {
		return fmt.Errorf("%s (%s) has no language-model head to generate with", f.model, m.Architecture)
	}
	if cmd.Flags().Changed("cache") && !m.NN.Config().CanCache() {
		fmt.Fprintf(cmd.ErrOrStderr(), "mha: warning: --cache %s changes nothing: %s has no KV cache (its attention is sparse, or its heads differ in size or scale), so each token runs the model on the whole sequence\n", f.cache, f.model)
	}
	if hasPrompt {
		if prompt, err = encode(m, f.model, f.prompt); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	var emit func(int) error
	var printed string
	var generated []int
	if hasIDs || m.Tokenizer == nil {
		emit = func(tok int) error {
			_, err := fmt.Fprintf(out, "%d ", tok)
			return err
		}
	} else {
		// Print the text the tokens decode to as it grows; a token may end inside a character
		// (byte-level BPE), which then waits for the next one.
		emit = func(tok int) error {
			generated = append(generated, tok)
			text, err := m.Tokenizer.Decode(generated, true)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(text, printed) || strings.HasSuffix(text, string(utf8.RuneError)) {
				return nil
			}
			_, err = fmt.Fprint(out, text[len(printed):])
			printed = text
			return err
		}
	}
	opt := generate.Options{MaxTokens: f.maxTokens, Temperature: f.temperature, TopK: f.topK, TopP: f.topP, Seed: f.seed,
		Stop: m.EOS, Cache: dtype, Workers: f.workers, Compute: compute}
	if f.topP == 1 {
		opt.TopP = 0
	}
	res, err := generate.Run(cmd.Context(), m.NN, prompt, opt, emit)
	fmt.Fprintln(out)
	if err != nil {
		return err
	}
	rate := func(n int, secs float64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "prefill: %d tokens, %.1f tokens/s; decode: %d tokens, %.1f tokens/s\n",
		len(prompt), rate(len(prompt), res.Prefill.Seconds()), len(res.Tokens)-1, rate(len(res.Tokens)-1, res.Decode.Seconds()))
	return nil
}
