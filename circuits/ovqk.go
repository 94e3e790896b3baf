package circuits

import (
	"container/heap"
	"fmt"
	"sort"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha/nn"
)

// MaxCircuitVocab is the largest vocabulary OVCircuit, QKCircuit and TokenCircuits accept: their
// matrices are [Vocab, Vocab] per head.
const MaxCircuitVocab = 4096

// OVCircuit returns head's OV circuit over the vocabulary, [Vocab, Vocab]:
//
//	W_E·W_V^h·W_O^h·W_U
//
// with W_E the token embedding [Vocab, d_model] and W_U the unembedding [d_model, Vocab] (the
// output head's weight transposed; the token embedding's when tied). Entry [s, t] is how much
// token s, when the head attends to it, raises the logit of token t through the direct path
// (positions, biases, the other layers and, with a masked-LM head transform, its dense layer and
// activation left out). Folded (the default), W_V gets the layer's input normalisation and W_U
// the final one, and each row is centred (mean over t removed). It returns an error wrapping
// ErrArgument when layer or head is out of range or the vocabulary exceeds MaxCircuitVocab, and
// one wrapping ErrModel for a model without the parameters.
func OVCircuit(m *nn.Model, layer, head int, opt *WeightOptions) (*mat.Dense, error) {
	t, err := newTokenWeights(m, opt)
	if err != nil {
		return nil, err
	}
	return t.ov(layer, head)
}

// QKCircuit returns head's QK circuit over the vocabulary, [Vocab, Vocab]:
//
//	W_E·W_Q^h·W_K^hᵀ·W_Eᵀ
//
// Entry [q, k] is the attention logit (before the head's score scale, 1/√d_head by default, and
// without positions, rotary, biases or a qk-norm's normalisation) that a query on token q gives a
// key on token k. Folded
// (the default), W_Q and W_K get the layer's input normalisation. Errors as OVCircuit's.
func QKCircuit(m *nn.Model, layer, head int, opt *WeightOptions) (*mat.Dense, error) {
	t, err := newTokenWeights(m, opt)
	if err != nil {
		return nil, err
	}
	return t.qk(layer, head)
}

// TokenPair is one entry of a token circuit: in an OV circuit Row is the attended (source) token
// and Col the output token whose logit it raises; in a QK circuit Row is the query token and Col
// the key token.
type TokenPair struct {
	Row   int     `json:"row"`
	Col   int     `json:"col"`
	Value float64 `json:"value"`
}

// HeadCircuits are one head's largest OV and QK circuit entries, largest first.
type HeadCircuits struct {
	Layer int         `json:"layer"`
	Head  int         `json:"head"`
	OV    []TokenPair `json:"ov"`
	QK    []TokenPair `json:"qk"`
}

// TokenCircuits returns, for every head of m (layer-major), the top entries of its OV and QK
// circuits (OVCircuit, QKCircuit), largest first, ties broken by row then column. It returns an
// error wrapping ErrArgument when top < 1 or the vocabulary exceeds MaxCircuitVocab, and one
// wrapping ErrModel for a model without the parameters.
func TokenCircuits(m *nn.Model, top int, opt *WeightOptions) ([]HeadCircuits, error) {
	if top < 1 {
		return nil, fmt.Errorf("%w: top is %d, want ≥ 1", ErrArgument, top)
	}
	t, err := newTokenWeights(m, opt)
	if err != nil {
		return nil, err
	}
	cfg := m.Config()
	var res []HeadCircuits
	for l := range cfg.Layers {
		for h := range cfg.Heads {
			ov, err := t.ov(l, h)
			if err != nil {
				return nil, err
			}
			qk, err := t.qk(l, h)
			if err != nil {
				return nil, err
			}
			res = append(res, HeadCircuits{Layer: l, Head: h, OV: topPairs(ov, top), QK: topPairs(qk, top)})
		}
	}
	return res, nil
}

// tokenWeights are the factors of the token circuits.
type tokenWeights struct {
	cfg nn.Config
	w   *modelWeights
	emb *mat.Dense // W_E [Vocab, d_model], times Config.EmbScale when set
	un  *mat.Dense // W_U [d_model, Vocab], folded
	// fold: centre the OV circuit's rows
	fold bool
}

func newTokenWeights(m *nn.Model, opt *WeightOptions) (*tokenWeights, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil model", ErrModel)
	}
	cfg := m.Config()
	if cfg.Vocab > MaxCircuitVocab {
		return nil, fmt.Errorf("%w: vocabulary of %d tokens, token circuits take at most %d", ErrArgument, cfg.Vocab, MaxCircuitVocab)
	}
	w, err := readWeights(m, opt.fold(), true)
	if err != nil {
		return nil, err
	}
	emb, err := weightParam(m, "tok_emb.weight", cfg.Vocab, cfg.DModel)
	if err != nil {
		return nil, err
	}
	if cfg.EmbScale != 0 { // what a token writes into the stream (Gemma's √d_model)
		emb.Scale(float64(float32(cfg.EmbScale)), emb)
	}
	headName := "head.weight"
	if cfg.TieEmbeddings {
		headName = "tok_emb.weight"
	}
	hw, err := weightParam(m, headName, cfg.Vocab, cfg.DModel)
	if err != nil {
		return nil, err
	}
	un := mat.DenseCopyOf(hw.T())
	if opt.fold() {
		gamma, err := readerGamma(m, cfg.Layers)
		if err != nil {
			return nil, err
		}
		foldReader(un, gamma, cfg.NormKind != nn.RMSNorm)
	}
	return &tokenWeights{cfg: cfg, w: w, emb: emb, un: un, fold: opt.fold()}, nil
}

func (t *tokenWeights) check(layer, head int) error {
	if layer < 0 || layer >= t.cfg.Layers || head < 0 || head >= t.cfg.Heads {
		return fmt.Errorf("%w: head (%d, %d), want layer in [0, %d) and head in [0, %d)", ErrArgument, layer, head, t.cfg.Layers, t.cfg.Heads)
	}
	return nil
}

func (t *tokenWeights) ov(layer, head int) (*mat.Dense, error) {
	if err := t.check(layer, head); err != nil {
		return nil, err
	}
	f := t.w.layers[layer].ov[head]
	var left, right, c mat.Dense
	left.Mul(t.emb, f.a) // [V, d]
	right.Mul(f.b, t.un) // [d, V]
	c.Mul(&left, &right) // [V, V]
	if t.fold {
		centreRows(&c)
	}
	return &c, nil
}

func (t *tokenWeights) qk(layer, head int) (*mat.Dense, error) {
	if err := t.check(layer, head); err != nil {
		return nil, err
	}
	f := t.w.layers[layer].qk[head]
	var left, right, c mat.Dense
	left.Mul(t.emb, f.a)      // E·W_Q [V, d]
	right.Mul(t.emb, f.b.T()) // E·W_K [V, d]
	c.Mul(&left, right.T())
	return &c, nil
}

// pairHeap is a min-heap of the largest pairs seen so far.
type pairHeap []TokenPair

func (p pairHeap) Len() int { return len(p) }
func (p pairHeap) Less(i, j int) bool {
	return pairLess(p[i], p[j])
}
func (p pairHeap) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p *pairHeap) Push(x any)   { *p = append(*p, x.(TokenPair)) }
func (p *pairHeap) Pop() any {
	old := *p
	x := old[len(old)-1]
	*p = old[:len(old)-1]
	return x
}

// pairLess orders pairs from the one that ranks last to the one that ranks first: smaller
// values, then larger rows and columns.
func pairLess(a, b TokenPair) bool {
	if a.Value != b.Value {
		return a.Value < b.Value
	}
	if a.Row != b.Row {
		return a.Row > b.Row
	}
	return a.Col > b.Col
}

// topPairs returns the n largest entries of c, largest first; all of them when n exceeds
// their number.
func topPairs(c *mat.Dense, n int) []TokenPair {
	rows, cols := c.Dims()
	h := make(pairHeap, 0, min(n, rows*cols))
	for i := range rows {
		for j, v := range c.RawRowView(i) {
			p := TokenPair{Row: i, Col: j, Value: v}
			if len(h) < n {
				heap.Push(&h, p)
			} else if pairLess(h[0], p) {
				h[0] = p
				heap.Fix(&h, 0)
			}
		}
	}
	out := []TokenPair(h)
	sort.Slice(out, func(a, b int) bool { return pairLess(out[b], out[a]) })
	return out
}
