package main

import (
	"fmt"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
	"github.com/spf13/cobra"
)

func newRunCmd() *cobra.Command {
	var (
		f                       layerFlags
		out                     string
		needWeights, avgWeights bool
		backward                bool
	)
	cmd := &cobra.Command{
		Use:   "run --weights W.safetensors --input IN.safetensors --heads N --out OUT.safetensors",
		Short: "Run an nn.MultiheadAttention checkpoint on the inputs in a file",
		Long: `Run reads nn.MultiheadAttention's state dict from --weights (in_proj_weight, in_proj_bias,
out_proj.weight, out_proj.bias, or q/k/v_proj_weight when kdim/vdim differ, optional bias_k and
bias_v) and the inputs from --input: query [B,Tq,E] or [Tq,E]; optional key and value (both or
neither; without them it is self-attention); optional key_padding_mask [B,Tk] (BOOL or U8, true =
padding); optional attn_mask [Tq,Tk] or [B*H,Tq,Tk] (BOOL/U8: true = may not attend; float: added
to the scaled scores). It writes output [B,Tq,E] and, with --need-weights, attn_weights to --out.

With --backward the input file also holds grad_output [B,Tq,E], the gradient of a loss with
respect to the output, and --out also gets the gradients PyTorch's autograd would give:
grad.query (for self-attention the whole gradient of the input), grad.key and grad.value (for
cross-attention), and grad.<name> for every parameter (grad.in_proj_weight, grad.out_proj.bias, …,
with --prefix kept). With --need-weights the backward reads the saved weights; without, it
recomputes them tile by tile (FlashAttention-2).

Weights that hold NaN or ±Inf are refused, naming the tensor (--allow-nonfinite uses them, with a
warning); inputs that do are used, with a warning on stderr.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required: the .safetensors file to write")
			}
			if err := checkOutFile("--out", out); err != nil {
				return err
			}
			j, err := f.load()
			if err != nil {
				return err
			}
			switch {
			case backward && j.gradOutput == nil:
				return fmt.Errorf("--backward needs grad_output [B Tq E] in %s", f.input)
			case !backward && j.gradOutput != nil:
				return fmt.Errorf("%s holds grad_output; pass --backward to compute the gradients", f.input)
			}
			j.opt.NeedWeights, j.opt.PerHeadWeights = needWeights, !avgWeights
			r := new(mha.Result)
			var grads mha.Grads
			if backward {
				var saved mha.Saved
				if err := j.layer.ForwardTrain(r, &saved, j.query, j.key, j.val, &j.opt); err != nil {
					return err
				}
				if err := j.layer.Backward(&grads, &saved, j.gradOutput); err != nil {
					return err
				}
			} else if r, err = j.layer.Forward(j.query, j.key, j.val, &j.opt); err != nil {
				return err
			}
			tensors := map[string]safetensors.Tensor{"output": safetensors.FromFloat32(r.Output)}
			if r.Weights != nil {
				tensors["attn_weights"] = safetensors.FromFloat32(r.Weights)
			}
			addZeroFraction(tensors, r.ZeroFraction)
			grads0 := len(tensors)
			if backward {
				for name, g := range map[string]*tensor.Tensor{"query": grads.Query, "key": grads.Key, "value": grads.Value} {
					if g != nil {
						tensors["grad."+name] = safetensors.FromFloat32(g)
					}
				}
				for _, p := range grads.Params {
					tensors["grad."+j.prefix+p.Name] = safetensors.FromFloat32(p.T)
				}
			}
			meta := map[string]string{"fully_masked_rows": fmt.Sprint(r.FullyMasked)}
			if err := safetensors.WriteFile(out, tensors, meta); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: output %v", out, r.Output.Shape)
			if r.Weights != nil {
				fmt.Fprintf(cmd.OutOrStdout(), ", attn_weights %v", r.Weights.Shape)
			}
			if r.ZeroFraction != nil {
				fmt.Fprint(cmd.OutOrStdout(), ", zero_fraction")
			}
			if backward {
				fmt.Fprintf(cmd.OutOrStdout(), ", %d gradients", len(tensors)-grads0)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			printZeroFraction(cmd.OutOrStdout(), r.ZeroFraction)
			j.printWarnings(cmd.ErrOrStderr())
			if r.FullyMasked > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %d (batch, head, query) rows had no key to attend; those heads give weights 0 and output 0 there, so the output is out_proj.bias (PyTorch gives NaN where keys exist but are all masked)\n", r.FullyMasked)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	f.register(cmd)
	fl.StringVar(&out, "out", "", "write output (and attn_weights, gradients) to this .safetensors file")
	fl.BoolVar(&needWeights, "need-weights", false, "also write the attention weights as attn_weights")
	fl.BoolVar(&avgWeights, "average-weights", true, "average the weights over heads ([B,Tq,Tk]); false gives [B,H,Tq,Tk]")
	fl.BoolVar(&backward, "backward", false, "also compute the gradients of grad_output (from --input) and write them as grad.*")
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
	f.sparse.register(fl)
	fl.BoolVar(&f.allowNonFinite, "allow-nonfinite", false, allowNonFiniteUsage)
}
