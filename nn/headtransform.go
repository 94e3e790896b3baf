package nn

import "github.com/mhalab/mha/internal/kernel"

// headTransform is BERT's masked-LM head transform, between the last block and the output head:
// y = Norm(act(x·Wᵀ + b)) with W [d, d] (head_dense) and a normalisation layer head_ln of the
// model's kind; act is the feed-forward network's activation.
type headTransform struct {
	dense  *linear
	act    activation
	norm   *normLayer
	da, dh []float32 // backward's gradients of the activation's output and input
}

func newHeadTransform(ps params, c Config) *headTransform {
	return &headTransform{dense: newLinear(ps, "head_dense"), act: activation{kind: activationOf(c.Activation)}, norm: newNorm(ps, c, "head_ln")}
}

// forward returns the transform of x [n, d], in the norm's buffer. x must stay unchanged until
// backward has run.
func (h *headTransform) forward(r *runner, x []float32, n int) []float32 {
	return h.norm.forward(r, h.act.forward(r, h.dense.forward(r, x, n)), n)
}

// backward adds dL/dx into dx [n, d] and the parameters' gradients, given dy = dL/dy of the last
// forward.
func (h *headTransform) backward(r *runner, dy, dx []float32, n int) {
	d := h.dense.out
	h.da, h.dh = kernel.Grow(h.da, n*d), kernel.Grow(h.dh, n*d)
	clear(h.da)
	clear(h.dh)
	h.norm.backward(r, dy, h.da, n)
	h.act.backward(r, h.da, h.dh)
	h.dense.backward(r, h.dh, dx, n)
}
