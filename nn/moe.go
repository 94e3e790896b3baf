package nn

import (
	"strconv"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// ffn is a block's feed-forward network: a dense one (mlp) or a mixture of experts (moe).
type ffn interface {
	// forward returns the network's output [n, d] for x [n, d], a buffer of the network's,
	// overwritten by the next forward. x must stay unchanged until backward has run.
	forward(r *runner, x []float32, n int) []float32
	// backward adds dL/dx into dx [n, d] given dy = dL/dy [n, d] of the last forward, using s's
	// buffers.
	backward(r *runner, dy, dx []float32, n int, s *scratch)
}

// newFFN returns the feed-forward network of c's blocks whose parameters are under prefix
// ("blocks.0.ffn."): a mixture of experts when c.Experts > 0, else a dense one.
func newFFN(ps params, c Config, prefix string) ffn {
	if c.Experts > 0 {
		return newMoE(ps, c, prefix)
	}
	return newMLP(ps, c, prefix)
}

// moe is a sparse mixture of experts (Mixtral's block_sparse_moe, Qwen3-MoE's sparse MLP): a
// router Linear without bias scores each token against every expert, the softmax of the scores
// gives the experts' probabilities p, and the token's output is Σ_j w_j·E_j(x) over the k
// experts j of highest probability, each E_j a feed-forward network of the block's shape, with
// w_j = p_j, or p_j / Σ_top p when norm (Mixtral's; Qwen3-MoE's norm_topk_prob), plus, with a
// shared expert S and its gate g, σ(x·g)·S(x) (Qwen2-MoE's). Each expert runs on the tokens
// routed to it only; the outputs are summed expert by expert in index order, then the shared
// expert's, as Hugging Face's loop over experts adds them.
type moe struct {
	router     *linear
	experts    []*mlp
	k          int
	norm       bool
	shared     *mlp      // nil without a shared expert
	sharedGate *linear   // [1, d]
	sig        []float32 // [n] the last forward's σ(x·g)
	dsig       []float32 // backward's dL/d(x·g) [n]

	// The last forward's routing, read by backward.
	probs  []float32   // [n, E] the router's softmax
	sel    []int       // [n, k] each token's experts, by decreasing probability
	w      []float32   // [n, k] their weights
	tokens [][]int32   // per expert, the tokens routed to it, ascending
	slots  [][]int32   // per expert, where in its token's k choices it is
	xs     [][]float32 // per expert, its tokens' inputs [m, d], which its Linears keep
	out    []float32   // [n, d]

	dy, dx []float32 // backward's per-expert gradients [m, d]
	dw     []float32 // [n, k] dL/dw
	dl     []float32 // [n, E] dL/d(router scores)
}

// newMoE returns the mixture of c.Experts experts whose parameters are under prefix: the
// router, prefix+"router", and expert e's network under prefix+"experts.e.".
func newMoE(ps params, c Config, prefix string) *moe {
	m := &moe{router: newLinear(ps, prefix+"router"), k: c.ExpertsPerToken, norm: c.NormTopK}
	for e := range c.Experts {
		m.experts = append(m.experts, newMLP(ps, c, prefix+"experts."+strconv.Itoa(e)+"."))
	}
	if c.SharedExpert > 0 {
		m.shared, m.sharedGate = newMLP(ps, c, prefix+"shared."), newLinear(ps, prefix+"shared_gate")
	}
	return m
}

// forward routes each of the n tokens of x [n, d] to its k experts and returns the weighted sum
// of their outputs.
func (m *moe) forward(r *runner, x []float32, n int) []float32 {
	ne, k, d := len(m.experts), m.k, m.router.in
	scores := m.router.forward(r, x, n)
	m.probs = kernel.Grow(m.probs, n*ne)
	m.w = kernel.Grow(m.w, n*k)
	if cap(m.sel) < n*k {
		m.sel = make([]int, n*k)
	}
	m.sel = m.sel[:n*k]
	if m.tokens == nil {
		m.tokens, m.slots, m.xs = make([][]int32, ne), make([][]int32, ne), make([][]float32, ne)
	}
	for e := range ne {
		m.tokens[e], m.slots[e] = m.tokens[e][:0], m.slots[e][:0]
	}
	for t := range n {
		p := m.probs[t*ne : (t+1)*ne]
		copy(p, scores[t*ne:(t+1)*ne])
		kernel.Softmax(p)
		sel, w := kernel.TopK(p, k, m.sel[t*k:t*k:(t+1)*k]), m.w[t*k:(t+1)*k]
		var total float32
		for j, e := range sel {
			w[j] = p[e]
			total += w[j]
		}
		for j, e := range sel {
			if m.norm {
				w[j] /= total
			}
			m.tokens[e] = append(m.tokens[e], int32(t))
			m.slots[e] = append(m.slots[e], int32(j))
		}
	}
	m.out = kernel.Grow(m.out, n*d)
	clear(m.out)
	for e, ex := range m.experts {
		toks := m.tokens[e]
		if len(toks) == 0 {
			continue
		}
		m.xs[e] = kernel.Grow(m.xs[e], len(toks)*d)
		xe := m.xs[e]
		for i, t := range toks {
			copy(xe[i*d:(i+1)*d], x[int(t)*d:int(t+1)*d])
		}
		ye := ex.forward(r, xe, len(toks))
		for i, t := range toks {
			w := m.w[int(t)*k+int(m.slots[e][i])]
			out, y := m.out[int(t)*d:int(t+1)*d], ye[i*d:(i+1)*d]
			for c, v := range y {
				out[c] += w * v
			}
		}
	}
	if m.shared != nil {
		ys, g := m.shared.forward(r, x, n), m.sharedGate.forward(r, x, n)
		m.sig = kernel.Grow(m.sig, n)
		kernel.SiLU(g, m.sig, g) // σ(g) into sig; g, which backward does not read, becomes g·σ(g)
		for t := range n {
			s := m.sig[t]
			out, y := m.out[t*d:(t+1)*d], ys[t*d:(t+1)*d]
			for c, v := range y {
				out[c] += s * v
			}
		}
	}
	return m.out
}

// backward adds dL/dx into dx [n, d] given dy [n, d]: through each expert on its tokens, and
// through the weights w into the router's probabilities, its softmax and its Linear. The choice
// of experts is piecewise constant, so it passes no gradient.
func (m *moe) backward(r *runner, dy, dx []float32, n int, s *scratch) {
	ne, k, d := len(m.experts), m.k, m.router.in
	m.dw = kernel.Grow(m.dw, n*k)
	clear(m.dw)
	for e, ex := range m.experts {
		toks := m.tokens[e]
		if len(toks) == 0 {
			continue
		}
		ye := ex.out.y
		m.dy = kernel.Grow(m.dy, len(toks)*d)
		dye := m.dy
		for i, t := range toks {
			j := int(t)*k + int(m.slots[e][i])
			g := dy[int(t)*d : int(t+1)*d]
			m.dw[j] = kernel.Dot(g, ye[i*d:(i+1)*d])
			for c, v := range g {
				dye[i*d+c] = m.w[j] * v
			}
		}
		dxe := zeroed(&m.dx, len(toks)*d)
		ex.backward(r, dye, dxe, len(toks), s)
		for i, t := range toks {
			kernel.Axpy(1, dxe[i*d:(i+1)*d], dx[int(t)*d:int(t+1)*d])
		}
	}
	if m.shared != nil {
		// out += σ(g)·S(x): dS = σ·dy, dg = (dy·S)·σ(1 − σ).
		ys := m.shared.out.y
		m.dy = kernel.Grow(m.dy, n*d)
		m.dsig = kernel.Grow(m.dsig, n)
		for t := range n {
			g, sg := dy[t*d:(t+1)*d], m.sig[t]
			m.dsig[t] = kernel.Dot(g, ys[t*d:(t+1)*d]) * sg * (1 - sg)
			for c, v := range g {
				m.dy[t*d+c] = sg * v
			}
		}
		m.shared.backward(r, m.dy, dx, n, s)
		m.sharedGate.backward(r, m.dsig, dx, n)
	}
	// w_j = p_j (/ S with norm, S = Σ_top p): dp_j = dw_j (/ S − Σ_i dw_i·p_i / S²); then the
	// softmax's backward, dl = p ⊙ (dp − Σ p·dp), over every expert (dp is 0 off the top k).
	dl := zeroed(&m.dl, n*ne)
	for t := range n {
		p, sel, dw, g := m.probs[t*ne:(t+1)*ne], m.sel[t*k:(t+1)*k], m.dw[t*k:(t+1)*k], dl[t*ne:(t+1)*ne]
		var total, dot float32
		for j, e := range sel {
			total += p[e]
			dot += dw[j] * p[e]
		}
		var pdp float32
		for j, e := range sel {
			dp := dw[j]
			if m.norm {
				dp = dw[j]/total - dot/(total*total)
			}
			g[e] = dp
			pdp += p[e] * dp
		}
		kernel.SoftmaxGrad(g, p, pdp)
	}
	m.router.backward(r, dl, dx, n)
}

// Route is how a block's mixture of experts routed the B·T positions of a Forward
// (Model.Routing).
type Route struct {
	// Probs are the router's softmax over the experts, [B, T, Experts].
	Probs *tensor.Tensor
	// Experts are each position's ExpertsPerToken chosen experts, by decreasing probability
	// (the lower index first among equals), [B·T·k] row-major.
	Experts []int
	// Weights are their weights in the position's output, [B, T, k]: their probabilities,
	// divided by their sum with Config.NormTopK.
	Weights *tensor.Tensor
}

// Routing returns block layer's routing in the last Forward, or nil before a Forward, for a
// layer outside 0 … Layers−1, or in a model without Config.Experts. Probs and Weights are the
// model's storage, overwritten by the next Forward; Experts is the caller's.
func (m *Model) Routing(layer int) *Route {
	if m.state == stateFresh || layer < 0 || layer >= len(m.blocks) {
		return nil
	}
	f, ok := m.blocks[layer].ffn.(*moe)
	if !ok {
		return nil
	}
	n, k := m.b*m.t, f.k
	r := &Route{Probs: &tensor.Tensor{Shape: []int{m.b, m.t, len(f.experts)}, Data: f.probs[:n*len(f.experts)]},
		Experts: make([]int, n*k), Weights: &tensor.Tensor{Shape: []int{m.b, m.t, k}, Data: f.w[:n*k]}}
	copy(r.Experts, f.sel[:n*k])
	return r
}
