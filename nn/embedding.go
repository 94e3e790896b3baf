package nn

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// embedding is the input of the model: x[b, t] = tok_emb[token[b, t]] + position t, with
// positions either learned (pos_emb [SeqLen, d], a parameter) or sinusoidal (a fixed table).
// Embeddings are not scaled by √d.
type embedding struct {
	d      int
	tok    *Param    // [Vocab, d]
	pos    *Param    // [SeqLen, d] when learned, else nil
	table  []float32 // [SeqLen, d]: pos's values, or the sinusoidal table for the longest T yet
	tokens []int     // the last forward's tokens (not owned)
	y      []float32 // its output [B·T, d]
}

func newEmbedding(ps params, c Config) *embedding {
	e := &embedding{d: c.DModel, tok: ps.get("tok_emb.weight")}
	if c.Positions == Learned {
		e.pos = ps.get("pos_emb.weight")
		e.table = e.pos.Value.Data
	}
	return e
}

// sinusoid returns the positional encoding of Vaswani et al., [n, d]:
//
//	PE[p, 2i] = sin(p / 10000^(2i/d)),  PE[p, 2i+1] = cos(p / 10000^(2i/d))
//
// computed in float64 and rounded.
func sinusoid(n, d int) []float32 {
	pe := make([]float32, n*d)
	for p := range n {
		for j := range d {
			angle := float64(p) / math.Pow(10000, float64(j-j%2)/float64(d))
			if j%2 == 0 {
				pe[p*d+j] = float32(math.Sin(angle))
			} else {
				pe[p*d+j] = float32(math.Cos(angle))
			}
		}
	}
	return pe
}

// forward returns the embeddings [b·t, d] of tokens [b, t], whose values the caller has checked
// to lie in [0, Vocab). tokens must stay unchanged until backward has run.
func (e *embedding) forward(tokens []int, b, t int) []float32 {
	d := e.d
	if e.pos == nil && len(e.table) < t*d {
		e.table = sinusoid(t, d)
	}
	e.tokens = tokens
	e.y = kernel.Grow(e.y, b*t*d)
	for i, tok := range tokens {
		out := e.y[i*d : (i+1)*d]
		copy(out, e.tok.Value.Data[tok*d:(tok+1)*d])
		kernel.Axpy(1, e.table[i%t*d:(i%t+1)*d], out)
	}
	return e.y
}

// backward adds dy [b·t, d], the gradient of the last forward's output, into the rows of the
// token embedding (and of the learned positions) that forward read, row by row in order.
func (e *embedding) backward(dy []float32, t int) {
	d := e.d
	for i, tok := range e.tokens {
		g := dy[i*d : (i+1)*d]
		kernel.Axpy(1, g, e.tok.Grad.Data[tok*d:(tok+1)*d])
		if e.pos != nil {
			kernel.Axpy(1, g, e.pos.Grad.Data[i%t*d:(i%t+1)*d])
		}
	}
}
