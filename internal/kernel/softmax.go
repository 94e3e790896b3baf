package kernel

import (
	"cmp"
	"math"
)

// Softmax replaces row with softmax(row), subtracting the row's maximum first so that large
// logits do not overflow. Entries equal to −Inf get weight 0. A row whose entries are all −Inf
// (every key masked) is set to zeros and Softmax reports false; otherwise it reports true.
func Softmax[F Float](row []F) bool {
	ok, _ := SoftmaxSink(row, math.Inf(-1))
	return ok
}

// SoftmaxSink is Softmax with one more logit, sink, that joins the row's normalisation but has
// no entry in it (an attention sink: the row's weights then sum to less than 1), and it returns
// the log-sum-exp of the row and the sink. A sink of −Inf is none. A row whose entries are all
// −Inf is set to zeros, reports false, and has log-sum-exp sink, or +Inf when sink is −Inf.
func SoftmaxSink[F Float](row []F, sink float64) (ok bool, lse float64) {
	maxv := math.Inf(-1)
	for _, v := range row {
		maxv = max(maxv, float64(v))
	}
	if math.IsInf(maxv, -1) {
		clear(row)
		if math.IsInf(sink, -1) {
			return false, math.Inf(1)
		}
		return false, sink
	}
	m := F(max(maxv, sink))
	sum := F(math.Exp(sink - float64(m)))
	for i, v := range row {
		e := F(math.Exp(float64(v - m)))
		row[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range row {
		row[i] *= inv
	}
	return true, float64(m) + math.Log(float64(sum))
}

// TopK writes into dst[:0] the indices of the min(k, len(row)) largest values of row, largest
// first, the lower index first among equals, in one pass over row (a vocabulary can hold
// 100,000 values), and returns it; it never grows dst past k, so a dst of capacity k is filled
// in place. A NaN ranks below every number.
func TopK[F Float](row []F, k int, dst []int) []int {
	best := dst[:0]
	for i, x := range row {
		j := len(best)
		for j > 0 && cmp.Less(row[best[j-1]], x) {
			j--
		}
		if j >= k {
			continue
		}
		if len(best) < k {
			best = append(best, 0)
		}
		copy(best[j+1:], best[j:len(best)-1])
		best[j] = i
	}
	return best
}
