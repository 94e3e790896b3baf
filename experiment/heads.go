package experiment

import (
	"fmt"
	"math"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tensor"
)

// outputTerms returns each head's term of the output projection, side by side: for heads
// [rows, E], head h in the dims[h] columns from off_h = Σ_{g<h} dims[g], and out_proj.weight
// wo [E, E], row r of the result [rows, H·E] holds head_h(r)·W_O,hᵀ in columns h·E … (h+1)·E,
// where W_O,h are the columns of wo that read head h. The terms sum to the attention output less
// its bias, and, unlike the head outputs, they live in one space: a rotation of a head's value
// space that W_O undoes leaves them unchanged.
func outputTerms(heads, wo []float32, dims []int) []float32 {
	e := sumInts(dims)
	out := make([]float32, 0, len(heads)*len(dims))
	for r := 0; r < len(heads); r += e {
		off := 0
		for _, d := range dims {
			head := heads[r+off : r+off+d]
			for i := range e {
				v := 0.0
				for k, x := range head {
					v += float64(x) * float64(wo[i*e+off+k])
				}
				out = append(out, float32(v))
			}
			off += d
		}
	}
	return out
}

// termTensor returns outputTerms of layer l of m for heads [B, T, E] as a tensor [B·T, H·E],
// and the sizes of its H blocks (E each), as probe.Similarity takes them.
func termTensor(m *nn.Model, l int, heads *tensor.Tensor, dims []int) (*tensor.Tensor, []int, error) {
	p := m.Param(fmt.Sprintf("blocks.%d.attn.out_proj.weight", l))
	if p == nil {
		return nil, nil, fmt.Errorf("experiment: the model has no layer %d", l)
	}
	wo := p.Float32() // one matrix, decoded when the model holds it in half precision
	e := heads.Shape[len(heads.Shape)-1]
	blocks := make([]int, len(dims))
	for h := range blocks {
		blocks[h] = e
	}
	t, err := tensor.FromData(outputTerms(heads.Data, wo.Data, dims), len(heads.Data)/e, len(dims)*e)
	return t, blocks, err
}

// bestPrefixMatching returns the best prefix-matching score of layer l's heads in rep: how well
// the layer's best head does the induction head's job (0 when the report has none).
func bestPrefixMatching(rep *probe.Report, l int) jsonnum.Number {
	var best jsonnum.Number
	for _, h := range rep.Heads {
		if h.Layer == l && h.PrefixMatching != nil {
			best = max(best, *h.PrefixMatching)
		}
	}
	return best
}

// orNaN returns *p, or NaN when p is nil.
func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// sumInts returns the sum of xs.
func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
