// Package nn is a small transformer around mha's attention layer, written as explicit forward and
// backward passes per module in the style of llm.c: no autograd engine, every gradient by hand.
package nn

import "github.com/mhalab/mha/tensor"

// Param is one trainable tensor and its gradient, under a dotted PyTorch-style name such as
// "blocks.0.attn.in_proj_weight". Value and Grad have the same shape; backward passes add into
// Grad, ZeroGrads clears it.
type Param struct {
	Name  string
	Value *tensor.Tensor
	Grad  *tensor.Tensor
	// NoDecay excludes the parameter from AdamW's weight decay: biases, LayerNorm gains and
	// shifts, and embeddings.
	NoDecay bool
}

// ZeroGrads sets the gradient of every parameter to zero.
func ZeroGrads(ps []*Param) {
	for _, p := range ps {
		clear(p.Grad.Data)
	}
}
