package probe

import (
	"fmt"
	"math"

	"github.com/mhalab/mha/tensor"
)

// PrevToken returns, for each of the h heads, the mean weight a query gives the key k positions
// before it:
//
//	score_h = 1/(B·(T − k)) · Σ_b Σ_{t=k}^{T−1} α_{t,t−k}
//
// k = 1 is the previous-token score (1 for a head that always attends to the token before, 0 for
// one that never does); k = 2 looks two tokens back, k = 0 measures attention to the query's own
// position. Uniform causal attention (α_{t,j} = 1/(t+1) for j ≤ t) scores (H_T − H_k)/(T − k),
// with H_n the n-th harmonic number.
//
// w is [B, H, T, T]. It returns an error when a size is < 1, when len(w) is not B·H·T·T, or when
// k is outside [0, T).
func PrevToken(w []float32, b, h, t, k int) ([]float64, error) {
	if err := checkWeights(w, b, h, t); err != nil {
		return nil, err
	}
	if k < 0 || k >= t {
		return nil, fmt.Errorf("probe: offset k is %d, want 0 ≤ k < T = %d", k, t)
	}
	scores := make([]float64, h)
	for bi := range b {
		for hi := range h {
			head := w[(bi*h+hi)*t*t:][:t*t]
			for q := k; q < t; q++ {
				scores[hi] += float64(head[q*t+q-k])
			}
		}
	}
	for hi := range scores {
		scores[hi] /= float64(b * (t - k))
	}
	return scores, nil
}

// PrefixMatching returns, for each of the h heads, the prefix-matching score of Olsson et al.,
// "In-context Learning and Induction Heads" (2022), which TransformerLens reports as the induction
// score on repeated random tokens. For query t of a sequence the matching keys are the ones right
// after an earlier occurrence of the query's token,
//
//	S_t = { j : 1 ≤ j < t, tokens[j−1] = tokens[t] },
//
// and the score is the weight on them, averaged over the queries that have any:
//
//	score_h = 1/N · Σ_b Σ_{t : S_t ≠ ∅} Σ_{j ∈ S_t} α_{t,j}.
//
// On a sequence of n distinct random tokens followed by the same n again, an induction head
// (query t attends to key t − n + 1) scores 1, and N = n per sequence.
//
// N, the number of (sequence, query) pairs counted, is the same for every head and depends only
// on tokens; it is returned as queries, so scores from several calls can be merged as a weighted
// mean. When no query has an earlier occurrence of its token, queries is 0 and every score is 0,
// which then means "not measured", not "no prefix matching".
//
// w is [B, H, T, T] and tokens is [B, T] (any integer ids, compared for equality). It returns an
// error when a size is < 1 or a length does not match the sizes.
func PrefixMatching(w []float32, tokens []int, b, h, t int) (scores []float64, queries int, err error) {
	if err := checkWeights(w, b, h, t); err != nil {
		return nil, 0, err
	}
	if len(tokens) != b*t {
		return nil, 0, fmt.Errorf("probe: tokens have %d values, want B·T = %d·%d = %d", len(tokens), b, t, b*t)
	}
	scores, queries = copyScores(w, tokens, b, h, t, 1)
	return scores, queries, nil
}

// copyScores is PrefixMatching (shift 1) and DuplicateToken (shift 0): each head's mean weight,
// over the queries q that have one, on the keys j whose token shift positions earlier,
// tokens[j − shift], equals tokens[q], among the earlier copies (j − shift < q); and the number
// of such queries. w and tokens are checked.
func copyScores(w []float32, tokens []int, b, h, t, shift int) (scores []float64, queries int) {
	scores = make([]float64, h)
	for bi := range b {
		seq := tokens[bi*t:][:t]
		for q := 1; q < t; q++ {
			matched := false
			for j := shift; j < q; j++ {
				if seq[j-shift] != seq[q] {
					continue
				}
				matched = true
				for hi := range h {
					scores[hi] += float64(w[((bi*h+hi)*t+q)*t+j])
				}
			}
			if matched {
				queries++
			}
		}
	}
	if queries > 0 {
		for hi := range scores {
			scores[hi] /= float64(queries)
		}
	}
	return scores, queries
}

// GroundTruth returns, for each of the h heads, how much of its attention falls where a known
// correct pattern d puts mass:
//
//	score_h = Σ_b Σ_{t ∈ R_b} Σ_j α_{t,j}·d_{t,j}  /  Σ_b Σ_{t ∈ R_b} Σ_j α_{t,j},
//
// where R_b holds the queries of sequence b whose row of d has any mass (some d_{t,j} > 0); the
// other queries do not count. With d a 0/1 indicator of the correct keys the score is the
// fraction of attention on them (1 for a head that attends only there); with rows of d that sum
// to 1 it is the mean overlap Σ_j α_{t,j}·d_{t,j}. Rows of w that are all zero (fully masked
// queries) add nothing to either sum; a head whose weights are zero on every row of R scores 0.
//
// w is [B, H, T, T]; d is [B, T, T], the same for every head. It returns an error when a size is
// < 1, when a length does not match the sizes, when d holds a negative or non-finite value, or
// when d has no mass at all.
func GroundTruth(w []float32, d []float32, b, h, t int) ([]float64, error) {
	if err := checkWeights(w, b, h, t); err != nil {
		return nil, err
	}
	if len(d) != b*t*t {
		return nil, fmt.Errorf("probe: ground truth has %d values, want B·T·T = %d·%d·%d = %d", len(d), b, t, t, b*t*t)
	}
	for i, x := range d {
		if !(x >= 0 && x <= math.MaxFloat32) {
			return nil, fmt.Errorf("probe: ground truth holds %g at index %d, want finite values ≥ 0", x, i)
		}
	}
	num, den := make([]float64, h), make([]float64, h)
	rows := 0
	for bi := range b {
		for q := range t {
			dRow := d[(bi*t+q)*t:][:t]
			if !hasMass(dRow) {
				continue
			}
			rows++
			for hi := range h {
				aRow := w[((bi*h+hi)*t+q)*t:][:t]
				for j, a := range aRow {
					num[hi] += float64(a) * float64(dRow[j])
					den[hi] += float64(a)
				}
			}
		}
	}
	if rows == 0 {
		return nil, fmt.Errorf("probe: ground truth is all zero, want some mass to compare with")
	}
	for hi := range num {
		if den[hi] != 0 {
			num[hi] /= den[hi]
		}
	}
	return num, nil
}

// hasMass reports whether some value of row is > 0.
func hasMass(row []float32) bool {
	for _, x := range row {
		if x > 0 {
			return true
		}
	}
	return false
}

// checkWeights returns an error unless the sizes are ≥ 1 and w holds B·H·T·T values.
func checkWeights(w []float32, b, h, t int) error {
	if b < 1 || h < 1 || t < 1 {
		return fmt.Errorf("probe: sizes B = %d, H = %d, T = %d, want each ≥ 1", b, h, t)
	}
	n, err := tensor.NumElements([]int{b, h, t, t})
	if err != nil {
		return fmt.Errorf("probe: sizes B = %d, H = %d, T = %d: %w", b, h, t, err)
	}
	if len(w) != n {
		return fmt.Errorf("probe: attention weights have %d values, want B·H·T·T = %d·%d·%d·%d = %d", len(w), b, h, t, t, n)
	}
	return nil
}
