package kernel

import "math"

// Softmax replaces row with softmax(row), subtracting the row's maximum first so that large
// logits do not overflow. Entries equal to −Inf get weight 0. A row whose entries are all −Inf
// (every key masked) is set to zeros and Softmax reports false; otherwise it reports true.
func Softmax[F Float](row []F) bool {
	maxv := math.Inf(-1)
	for _, v := range row {
		maxv = max(maxv, float64(v))
	}
	if math.IsInf(maxv, -1) {
		clear(row)
		return false
	}
	m := F(maxv)
	var sum F
	for i, v := range row {
		e := F(math.Exp(float64(v - m)))
		row[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range row {
		row[i] *= inv
	}
	return true
}
