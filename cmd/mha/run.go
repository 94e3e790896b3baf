package main

import (
	"fmt"
	"os"

	"github.com/mhalab/mha/safetensors"
	"github.com/spf13/cobra"
)

func newRunCmd() *cobra.Command {
	var (
		f                       layerFlags
		out                     string
		needWeights, avgWeights bool
	)
	cmd := &cobra.Command{
		Use:   "run --weights W.safetensors --input IN.safetensors --heads N --out OUT.safetensors",
		Short: "Run an nn.MultiheadAttention checkpoint on the inputs in a file",
		Long: `Run reads nn.MultiheadAttention's state dict from --weights (in_proj_weight, in_proj_bias,
out_proj.weight, out_proj.bias, or q/k/v_proj_weight when kdim/vdim differ, optional bias_k and
bias_v) and the inputs from --input: query [B,Tq,E] or [Tq,E]; optional key and value (both or
neither; without them it is self-attention); optional key_padding_mask [B,Tk] (BOOL or U8, true =
padding); optional attn_mask [Tq,Tk] or [B*H,Tq,Tk] (BOOL/U8: true = may not attend; float: added
to the scaled scores). It writes output [B,Tq,E] and, with --need-weights, attn_weights to --out.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required: the .safetensors file to write")
			}
			if info, err := os.Stat(out); err == nil && info.IsDir() {
				return fmt.Errorf("--out %s is a directory, want a file name", out)
			}
			j, err := f.load()
			if err != nil {
				return err
			}
			j.opt.NeedWeights, j.opt.PerHeadWeights = needWeights, !avgWeights
			r, err := j.layer.Forward(j.query, j.key, j.val, &j.opt)
			if err != nil {
				return err
			}
			tensors := map[string]safetensors.Tensor{"output": safetensors.FromFloat32(r.Output)}
			if r.Weights != nil {
				tensors["attn_weights"] = safetensors.FromFloat32(r.Weights)
			}
			meta := map[string]string{"fully_masked_rows": fmt.Sprint(r.FullyMasked)}
			if err := safetensors.WriteFile(out, tensors, meta); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: output %v", out, r.Output.Shape)
			if r.Weights != nil {
				fmt.Fprintf(cmd.OutOrStdout(), ", attn_weights %v", r.Weights.Shape)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if r.FullyMasked > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %d (batch, head, query) rows had no key to attend; those heads give weights 0 and output 0 there, so the output is out_proj.bias (PyTorch gives NaN)\n", r.FullyMasked)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	f.register(cmd)
	fl.StringVar(&out, "out", "", "write output (and attn_weights) to this .safetensors file")
	fl.BoolVar(&needWeights, "need-weights", false, "also write the attention weights as attn_weights")
	fl.BoolVar(&avgWeights, "average-weights", true, "average the weights over heads ([B,Tq,Tk]); false gives [B,H,Tq,Tk]")
	return cmd
}

// register adds the layer and input flags to cmd.
func (f *layerFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.weights, "weights", "", "nn.MultiheadAttention state dict (.safetensors)")
	fl.StringVar(&f.input, "input", "", "inputs (.safetensors): query, optional key, value, key_padding_mask, attn_mask")
	fl.StringVar(&f.prefix, "prefix", "", "use the weights whose names start with this prefix (e.g. layers.0.self_attn.)")
	fl.IntVar(&f.heads, "heads", 0, "number of heads (not stored in a state dict)")
	fl.BoolVar(&f.addZeroAttn, "add-zero-attn", false, "the layer was built with add_zero_attn=True")
	fl.BoolVar(&f.causal, "causal", false, "mask keys after each query (top-left aligned)")
}
