package main

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
	"github.com/spf13/cobra"
)

// forwardFlags are mha forward's flags.
type forwardFlags struct {
	model, text, ids, out string
	attentions            bool
	workers               int
}

func newForwardCmd() *cobra.Command {
	var f forwardFlags
	cmd := &cobra.Command{
		Use:   "forward --model DIR (--text STR | --ids 1,2,3) --out OUT.safetensors [--attentions]",
		Short: "Run a Hugging Face model (or a checkpoint of mha train) on a text and save its outputs",
		Long: `Forward opens --model, a Hugging Face folder (config.json, model.safetensors or its shards, and
tokenizer.json for --text) of GPT-2, BERT or the Llama family, or a checkpoint that mha train wrote,
and runs it on one sequence: --text, encoded with the folder's tokenizer and its special tokens
(BOS, or CLS and SEP), or --ids, token ids given as they are (no tokenizer needed).

--out gets ids (I64 [T]), logits (F32 [T,V]) when the model has its language-model head, and
last_hidden_state (F32 [T,E], after the final norm where the model has one); with --attentions,
attentions (F32 [L,H,T,T]): every layer's every head, each row summing to 1. A mixture of experts
(Mixtral, Qwen2-MoE, Qwen3-MoE) also gets its routing: router_probs (F32 [L,T,N]), the router's
softmax over the N experts; experts (I64 [L,T,K]), each token's K chosen experts by decreasing
probability; and expert_weights (F32 [L,T,K]), their weights in the token's output.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "a Hugging Face model folder, or a checkpoint file of mha train")
	fl.StringVar(&f.text, "text", "", "the text to run (needs the folder's tokenizer.json)")
	fl.StringVar(&f.ids, "ids", "", "token ids to run, comma-separated (instead of --text)")
	fl.StringVar(&f.out, "out", "", "write ids, logits, last_hidden_state (and attentions) to this .safetensors file")
	fl.BoolVar(&f.attentions, "attentions", false, "also write every layer's attention weights as attentions [L,H,T,T]")
	workersVar(fl, &f.workers, "threads to run on (0: all cores)")
	return cmd
}

func (f *forwardFlags) run(cmd *cobra.Command) error {
	hasText, hasIDs := cmd.Flags().Changed("text"), cmd.Flags().Changed("ids")
	switch {
	case f.model == "":
		return fmt.Errorf("--model is required: a Hugging Face model folder or a checkpoint of mha train")
	case hasText == hasIDs:
		return fmt.Errorf("give --text or --ids, one of them")
	case f.out == "":
		return fmt.Errorf("--out is required: the .safetensors file to write")
	}
	if err := checkOutFile("--out", f.out); err != nil {
		return err
	}
	var ids []int
	if hasIDs {
		var err error
		if ids, err = parseIDs(f.ids); err != nil {
			return err
		}
	}
	m, err := pretrained.OpenPath(f.model)
	if err != nil {
		return err
	}
	if hasText {
		if ids, err = encode(m, f.model, f.text); err != nil {
			return err
		}
	}
	cfg := m.NN.Config()
	if len(ids) > cfg.SeqLen {
		return fmt.Errorf("%d tokens, more than the model's %d positions", len(ids), cfg.SeqLen)
	}
	logits, err := m.NN.Forward(ids, 1, len(ids), &nn.RunOptions{KeepWeights: f.attentions, Workers: f.workers})
	if err != nil {
		return err
	}
	t := len(ids)
	hidden := m.NN.Hidden()
	tensors := map[string]safetensors.Tensor{
		"ids":               int64Tensor(ids),
		"last_hidden_state": safetensors.FromFloat32(&tensor.Tensor{Shape: []int{t, cfg.DModel}, Data: hidden.Data}),
	}
	if m.LMHead {
		tensors["logits"] = safetensors.FromFloat32(&tensor.Tensor{Shape: []int{t, cfg.Vocab}, Data: logits.Data})
	}
	if f.attentions {
		all := tensor.New(cfg.Layers, cfg.Heads, t, t)
		for l := range cfg.Layers {
			copy(all.Data[l*cfg.Heads*t*t:], m.NN.Weights(l).Data)
		}
		tensors["attentions"] = safetensors.FromFloat32(all)
	}
	if n := cfg.Experts; n > 0 { // a mixture of experts: how each layer routed each token
		k := cfg.ExpertsPerToken
		probs, weights, experts := tensor.New(cfg.Layers, t, n), tensor.New(cfg.Layers, t, k), make([]int, 0, cfg.Layers*t*k)
		for l := range cfg.Layers {
			r := m.NN.Routing(l)
			copy(probs.Data[l*t*n:], r.Probs.Data)
			copy(weights.Data[l*t*k:], r.Weights.Data)
			experts = append(experts, r.Experts...)
		}
		e := int64Tensor(experts)
		e.Shape = []int{cfg.Layers, t, k}
		tensors["router_probs"], tensors["experts"], tensors["expert_weights"] = safetensors.FromFloat32(probs), e, safetensors.FromFloat32(weights)
	}
	return safetensors.WriteFile(f.out, tensors, map[string]string{"model": f.model, "architecture": m.Architecture})
}

// encode returns the ids of text under m's tokenizer, with the model's special tokens.
func encode(m *pretrained.Model, path, text string) ([]int, error) {
	if m.Tokenizer == nil {
		return nil, fmt.Errorf("%s has no tokenizer.json: give --ids, or put the model's tokenizer.json there", path)
	}
	enc, err := m.Tokenizer.Encode(text, true)
	if err != nil {
		return nil, err
	}
	if len(enc.IDs) == 0 {
		return nil, fmt.Errorf("the text encodes to no token")
	}
	if v := m.NN.Config().Vocab; v > 0 {
		for i, id := range enc.IDs {
			if id >= v {
				return nil, fmt.Errorf("the tokenizer gives token %d (%q) at %d, outside the model's vocabulary of %d", id, enc.Tokens[i], i, v)
			}
		}
	}
	return enc.IDs, nil
}

// parseIDs reads comma-separated token ids.
func parseIDs(s string) ([]int, error) {
	var ids []int
	for i, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--ids: item %d is %q, want a token id ≥ 0 (ids are comma-separated)", i+1, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// int64Tensor returns ids as an I64 tensor [len(ids)].
func int64Tensor(ids []int) safetensors.Tensor {
	data := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint64(data[8*i:], uint64(id))
	}
	return safetensors.Tensor{DType: safetensors.I64, Shape: []int{len(ids)}, Data: data}
}
