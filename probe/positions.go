package probe

import (
	"fmt"

	"github.com/mhalab/mha/tensor"
)

// This file holds the pattern scores that need no task, for any model on any text: attention to
// the first token (attention sinks), to earlier copies of the query's token, by relative offset,
// and the attention rollout of a whole model. Weights are [B, H, T, T] as in the rest of the
// package; every sum runs in float64.

// FirstToken returns, for each of the h heads, the mean weight a query gives the first key,
//
//	score_h = 1/(B·(T − 1)) · Σ_b Σ_{t=1}^{T−1} α_{t,0},
//
// the "attention sink" many language models' heads show (Xiao et al. 2023): 1 for a head that
// parks all its weight on position 0. Query 0 is left out, since a causal head's first row can
// only attend there. w is [B, H, T, T]; it returns an error when a size is < 1, T < 2, or len(w)
// is not B·H·T·T.
func FirstToken(w []float32, b, h, t int) ([]float64, error) {
	if err := checkWeights(w, b, h, t); err != nil {
		return nil, err
	}
	if t < 2 {
		return nil, fmt.Errorf("probe: T = %d, want T ≥ 2 for a query after the first token", t)
	}
	scores := make([]float64, h)
	for bi := range b {
		for hi := range h {
			head := w[(bi*h+hi)*t*t:][:t*t]
			for q := 1; q < t; q++ {
				scores[hi] += float64(head[q*t])
			}
		}
	}
	for hi := range scores {
		scores[hi] /= float64(b * (t - 1))
	}
	return scores, nil
}

// DuplicateToken returns, for each of the h heads, the duplicate-token score of Olsson et al.
// (2022) and Wang et al. (2022): the weight a query gives the earlier occurrences of its own
// token,
//
//	S_t = { j : j < t, tokens[j] = tokens[t] },   score_h = 1/N · Σ_b Σ_{t : S_t ≠ ∅} Σ_{j ∈ S_t} α_{t,j},
//
// averaged over the N queries that have an earlier occurrence. On n random tokens repeated once,
// a duplicate-token head (query t attends to key t − n) scores 1. queries is N, the same for every
// head; when it is 0 every score is 0, which then means "not measured". Shapes and errors are as
// for PrefixMatching.
func DuplicateToken(w []float32, tokens []int, b, h, t int) (scores []float64, queries int, err error) {
	if err := checkWeights(w, b, h, t); err != nil {
		return nil, 0, err
	}
	if len(tokens) != b*t {
		return nil, 0, fmt.Errorf("probe: tokens have %d values, want B·T = %d·%d = %d", len(tokens), b, t, b*t)
	}
	scores, queries = copyScores(w, tokens, b, h, t, 0)
	return scores, queries, nil
}

// OffsetProfile returns, for each of the h heads, the mean attention by relative offset d = j − t
// of the key j from the query t:
//
//	profile_h[d + T − 1] = 1/(B·(T − |d|)) · Σ_b Σ_{t : 0 ≤ t+d < T} α_{t,t+d},   d = −(T−1) … T−1,
//
// so profile_h[T−1] is the weight on the query's own position, profile_h[T−2] the previous-token
// score (PrevToken with k = 1), and the entries after T−1 are later keys, 0 for a causal head. w
// is [B, H, T, T]; it returns an error when a size is < 1 or len(w) is not B·H·T·T.
func OffsetProfile(w []float32, b, h, t int) ([][]float64, error) {
	if err := checkWeights(w, b, h, t); err != nil {
		return nil, err
	}
	out := make([][]float64, h)
	for hi := range out {
		out[hi] = make([]float64, 2*t-1)
		for bi := range b {
			head := w[(bi*h+hi)*t*t:][:t*t]
			for q := range t {
				for j := range t {
					out[hi][j-q+t-1] += float64(head[q*t+j])
				}
			}
		}
		for i := range out[hi] {
			d := i - (t - 1)
			out[hi][i] /= float64(b * (t - max(d, -d)))
		}
	}
	return out, nil
}

// Rollout returns the attention rollout of Abnar and Zuidema, "Quantifying Attention Flow in
// Transformers" (2020): with A_l the mean over heads of layer l's weights, each layer's
// attention with the residual connection is
//
//	A'_l = 0.5·A_l + 0.5·I,   each row then divided by its sum,
//
// and the rollout is R = A'_L · … · A'_1, [B, T, T]: R[t][j] is how much of position t's final
// representation flows from input token j, through every layer. Rows of R sum to 1. weights are
// the layers' [B, H, T, T] weights, in order; it returns an error when there is none, when one is
// not 4-D with square attention or its data does not match its shape, or when the layers' B or T
// differ.
func Rollout(weights []*tensor.Tensor) (*tensor.Tensor, error) {
	if len(weights) == 0 {
		return nil, fmt.Errorf("probe: rollout of no layers, want at least one layer's weights")
	}
	var b, t int
	var r []float64 // [B, T, T], the rollout so far
	for l, w := range weights {
		s, err := checkAttention(w)
		if err != nil {
			return nil, fmt.Errorf("probe: layer %d: %w", l, err)
		}
		if s.t != s.tk {
			return nil, fmt.Errorf("probe: layer %d has %d queries and %d keys, want self-attention (as many of each)", l, s.t, s.tk)
		}
		if l == 0 {
			b, t = s.b, s.t
		} else if s.b != b || s.t != t {
			return nil, fmt.Errorf("probe: layer %d has B = %d, T = %d, layer 0 B = %d, T = %d; want the same", l, s.b, s.t, b, t)
		}
		a := make([]float64, b*t*t) // A'_l
		for bi := range b {
			for q := range t {
				row := a[(bi*t+q)*t:][:t]
				for hi := range s.h {
					for j, x := range s.row(w.Data, bi, hi, q) {
						row[j] += 0.5 * float64(x) / float64(s.h)
					}
				}
				row[q] += 0.5
				sum := 0.0
				for _, x := range row {
					sum += x
				}
				for j := range row {
					row[j] /= sum
				}
			}
		}
		if r == nil {
			r = a
			continue
		}
		next := make([]float64, b*t*t) // A'_l · R
		for bi := range b {
			for q := range t {
				out := next[(bi*t+q)*t:][:t]
				for k, x := range a[(bi*t+q)*t:][:t] {
					if x == 0 {
						continue
					}
					for j, y := range r[(bi*t+k)*t:][:t] {
						out[j] += x * y
					}
				}
			}
		}
		r = next
	}
	out := tensor.New(b, t, t)
	for i, x := range r {
		out.Data[i] = float32(x)
	}
	return out, nil
}
