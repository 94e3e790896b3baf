package nn

import (
	"github.com/mhalab/mha/internal/kernel"
)

// mlp is a block's feed-forward network, of one of two shapes:
//
//	fc2(act(fc1(x)))                             act the exact GELU or its tanh form (GPT-2)
//	down_proj(act(gate_proj(x)) ⊙ up_proj(x))    gated: act SiLU (SwiGLU, Llama) or GELU's
//	                                             tanh form (GeGLU, Gemma)
//
// with or without biases.
type mlp struct {
	in, out *linear // fc1 and fc2, or gate_proj and down_proj
	up      *linear // a gated network's up_proj; nil otherwise
	act     activation
	h       []float32 // a gated network's product act(gate)·up, [n, ffn]
}

// newMLP returns the feed-forward network of c's blocks whose parameters are under prefix
// ("blocks.0.ffn.").
func newMLP(ps params, c Config, prefix string) *mlp {
	m := &mlp{act: activation{kind: activationOf(c.Activation)}}
	if c.gated() {
		m.in, m.up, m.out = newLinear(ps, prefix+"gate_proj"), newLinear(ps, prefix+"up_proj"), newLinear(ps, prefix+"down_proj")
	} else {
		m.in, m.out = newLinear(ps, prefix+"fc1"), newLinear(ps, prefix+"fc2")
	}
	return m
}

// hidden returns the width of the hidden layer.
func (m *mlp) hidden() int { return m.in.out }

// forward returns the network's output [n, d] for x [n, d], the output Linear's buffer. x must
// stay unchanged until backward has run.
func (m *mlp) forward(r *runner, x []float32, n int) []float32 {
	h := m.act.forward(r, m.in.forward(r, x, n))
	if m.up != nil {
		u := m.up.forward(r, x, n)
		m.h = kernel.Grow(m.h, len(h))
		mul(r, m.h, h, u)
		h = m.h
	}
	return m.out.forward(r, h, n)
}

// backward adds dL/dx into dx [n, d] given dy = dL/dy [n, d] of the last forward, using s's
// hidden-width buffers.
func (m *mlp) backward(r *runner, dy, dx []float32, n int, s *scratch) {
	f := m.hidden()
	dh, da := zeroed(&s.f1, n*f), zeroed(&s.f2, n*f)
	m.out.backward(r, dy, dh, n)
	if m.up != nil {
		// h = a ⊙ u with a = act(gate): du = dh ⊙ a, da = dh ⊙ u.
		a, u := m.act.y, m.up.y
		s.f3 = kernel.Grow(s.f3, n*f)
		du := s.f3
		r.rows(len(dh), addBlock, func(_, _, i0, i1 int) {
			for i := i0; i < i1; i++ {
				du[i] = dh[i] * a[i]
				da[i] = dh[i] * u[i]
			}
		})
		m.up.backward(r, du, dx, n)
		dh, da = da, zeroed(&s.f3, n*f)
	}
	m.act.backward(r, dh, da)
	m.in.backward(r, da, dx, n)
}

// mul sets dst = a ⊙ b elementwise.
func mul(r *runner, dst, a, b []float32) {
	r.rows(len(dst), addBlock, func(_, _, i0, i1 int) {
		kernel.Smul(dst[i0:i1], a[i0:i1], b[i0:i1])
	})
}
