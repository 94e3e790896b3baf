package nn

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// embedding is the input of the model: x[b, t] = tok_emb[token[b, t]] + position t
// (+ type_emb[type[b, t]]), with positions learned (pos_emb [SeqLen, d], a parameter),
// sinusoidal (a fixed table) or none, then, with Config.EmbNorm, normalised by emb_ln. The token
// embedding is scaled by Config.EmbScale (Gemma's √d) when it is set.
type embedding struct {
	d      int
	scale  float32    // Config.EmbScale, or 1
	tok    *Param     // [Vocab, d], float32 or half precision
	pos    *Param     // [SeqLen, d] when learned, else nil
	typ    *Param     // [TypeVocab, d] with token types, else nil
	norm   *normLayer // emb_ln with EmbNorm, else nil
	sin    bool       // sinusoidal positions
	table  []float32  // [SeqLen, d]: pos's values, or the sinusoidal table for the longest T yet
	tokens []int      // the last forward's tokens (not owned)
	types  []int      // and token types (not owned; nil for all 0)
	y      []float32  // its output [B·T, d], before the normalisation
	dy     []float32  // backward's gradient of y, with a normalisation
}

func newEmbedding(ps params, c Config) *embedding {
	e := &embedding{d: c.DModel, scale: 1, tok: ps.get("tok_emb.weight"), sin: c.Positions == Sinusoidal}
	if c.EmbScale != 0 {
		e.scale = float32(c.EmbScale)
	}
	if c.Positions == Learned {
		e.pos = ps.get("pos_emb.weight")
		e.table = e.pos.Value.Data
	}
	if c.TypeVocab > 0 {
		e.typ = ps.get("type_emb.weight")
	}
	if c.EmbNorm {
		e.norm = newNorm(ps, c, "emb_ln")
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

// forward returns the embeddings [b·t, d] of tokens [b, t] at positions start … start+t−1, and
// of their token types [b, t] (nil for all 0; only with type embeddings), whose values the
// caller has checked to lie in [0, Vocab) and [0, TypeVocab), and the positions in [0, SeqLen).
// tokens and types must stay unchanged until backward has run (which needs start 0).
func (e *embedding) forward(r *runner, tokens, types []int, b, t, start int) []float32 {
	d := e.d
	if e.sin && len(e.table) < (start+t)*d {
		e.table = sinusoid(start+t, d)
	}
	e.tokens, e.types = tokens, types
	e.y = kernel.Grow(e.y, b*t*d)
	for i, tok := range tokens {
		out := e.y[i*d : (i+1)*d]
		if h := e.tok.Half; h != nil {
			kernel.DecodeHalf(out, h.Data[tok*d:(tok+1)*d], h.Format == tensor.BFloat16)
		} else {
			copy(out, e.tok.Value.Data[tok*d:(tok+1)*d])
		}
		if e.scale != 1 {
			kernel.Sscal(e.scale, out)
		}
		if e.table != nil {
			p := start + i%t
			kernel.Axpy(1, e.table[p*d:(p+1)*d], out)
		}
		if e.typ != nil {
			typ := 0
			if types != nil {
				typ = types[i]
			}
			kernel.Axpy(1, e.typ.Value.Data[typ*d:(typ+1)*d], out)
		}
	}
	if e.norm != nil {
		return e.norm.forward(r, e.y, b*t)
	}
	return e.y
}

// backward adds dy [b·t, d], the gradient of the last forward's output, through the
// normalisation if any, into the rows of the token embedding (unless it is held in half
// precision) (and of the learned positions and
// the token types) that forward read, row by row in order.
func (e *embedding) backward(r *runner, dy []float32, t int) {
	d := e.d
	if e.norm != nil {
		g := zeroed(&e.dy, len(dy))
		e.norm.backward(r, dy, g, len(dy)/d)
		dy = g
	}
	for i, tok := range e.tokens {
		g := dy[i*d : (i+1)*d]
		if e.tok.Grad != nil { // none when held in half precision
			kernel.Axpy(e.scale, g, e.tok.Grad.Data[tok*d:(tok+1)*d])
		}
		if e.pos != nil {
			kernel.Axpy(1, g, e.pos.Grad.Data[i%t*d:(i%t+1)*d])
		}
		if e.typ != nil {
			typ := 0
			if e.types != nil {
				typ = e.types[i]
			}
			kernel.Axpy(1, g, e.typ.Grad.Data[typ*d:(typ+1)*d])
		}
	}
}
