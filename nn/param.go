// Package nn is a small transformer around mha's attention layer, written as explicit forward and
// backward passes per module in the style of llm.c: no autograd engine, every gradient by hand.
package nn

import (
	"slices"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/proj"
	"github.com/mhalab/mha/tensor"
)

// Param is one trainable tensor and its gradient, under a dotted PyTorch-style name such as
// "blocks.0.attn.in_proj_weight". Value and Grad have the same shape; backward passes add into
// Grad, ZeroGrads clears it.
//
// A parameter held in half precision (a model of NewModelHalf) has Half set and Value and Grad
// nil: the passes read the halves as they are, and Backward computes no gradient for it (the
// gradients of the other parameters, of the inputs and of head gates it computes as usual).
type Param struct {
	Name  string
	Value *tensor.Tensor
	// Half, when not nil, holds the values in bfloat16 or float16, and Value and Grad are nil.
	Half *tensor.Half
	Grad *tensor.Tensor
	// NoDecay excludes the parameter from AdamW's weight decay: biases, LayerNorm gains and
	// shifts, and embeddings.
	NoDecay bool
}

// Shape returns the parameter's shape, Value's or Half's (the slice is the parameter's own).
func (p *Param) Shape() []int {
	if p.Half != nil {
		return p.Half.Shape
	}
	return p.Value.Shape
}

// Float32 returns the parameter's values as float32: Value itself, or for a parameter held in
// half precision a new tensor of Half's values (exact), which the model does not read.
func (p *Param) Float32() *tensor.Tensor {
	if p.Half == nil {
		return p.Value
	}
	return decodeHalf(p.Half)
}

// decodeHalf returns h's values as a new float32 tensor.
func decodeHalf(h *tensor.Half) *tensor.Tensor {
	t := &tensor.Tensor{Shape: slices.Clone(h.Shape), Data: make([]float32, len(h.Data))}
	kernel.DecodeHalf(t.Data, h.Data, h.Format == tensor.BFloat16)
	return t
}

// matrix returns the parameter's values as a product reads them, in the precision it is held.
func (p *Param) matrix() proj.Matrix {
	if h := p.Half; h != nil {
		return proj.Matrix{H: h.Data, BF16: h.Format == tensor.BFloat16}
	}
	return proj.Matrix{F: p.Value.Data}
}

// ZeroGrads sets the gradient of every parameter to zero; parameters without one (held in half
// precision) are skipped.
func ZeroGrads(ps []*Param) {
	for _, p := range ps {
		if p.Grad != nil {
			clear(p.Grad.Data)
		}
	}
}
