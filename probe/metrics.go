package probe

import (
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha/tensor"
)

// This file holds the metrics of one batch's attention weights and head outputs: per head
// (Entropy, Confidence), between heads (JSDistance, ArgmaxNMI, Similarity), and the penalty of
// chapter 002 that training can add to its loss (MIPenalty). Every sum runs in float64.
//
// The attention metrics treat each (sequence, query) row of a head as a distribution over the
// keys: the row is divided by its sum first, which changes nothing for softmax rows beyond
// rounding and makes rows scaled by dropout distributions again. A row whose sum is 0 (a fully
// masked query) has no distribution and is skipped; a result that no row reaches is NaN.

// Entropy returns, per head, the mean over the query rows with mass of the row's entropy
//
//	−Σ_j α_j · ln α_j   (nats; 0·ln 0 = 0),
//
// 0 for a head that puts all of a row's weight on one key and ln n for one that spreads it
// evenly over n keys. w is [B, H, T, Tk]; a head with no row of mass gets NaN. It returns an
// error when w is not 4-D, its data does not match its shape, or it holds a negative or
// non-finite weight.
func Entropy(w *tensor.Tensor) ([]float64, error) {
	return perHead(w, func(row []float32, sum float64) float64 {
		e := 0.0
		for _, a := range row {
			if a > 0 {
				p := float64(a) / sum
				e -= p * math.Log(p)
			}
		}
		return e
	})
}

// Confidence returns, per head, the mean over the query rows with mass of the row's largest
// weight, max_j α_j: 1 for a head that attends to one key, 1/n for one spread evenly over n.
// Shapes and errors are as for Entropy.
func Confidence(w *tensor.Tensor) ([]float64, error) {
	return perHead(w, func(row []float32, sum float64) float64 {
		var top float32
		for _, a := range row {
			top = max(top, a)
		}
		return float64(top) / sum
	})
}

// perHead returns, per head of w [B, H, T, Tk], the mean of f over the rows with mass, f being
// given each row and its sum.
func perHead(w *tensor.Tensor, f func(row []float32, sum float64) float64) ([]float64, error) {
	s, err := checkAttention(w)
	if err != nil {
		return nil, err
	}
	out := make([]float64, s.h)
	for h := range s.h {
		total, n := 0.0, 0
		for b := range s.b {
			for q := range s.t {
				row := s.row(w.Data, b, h, q)
				if sum := rowSum(row); sum > 0 {
					total += f(row, sum)
					n++
				}
			}
		}
		out[h] = total / float64(n) // 0/0 = NaN when no row has mass
	}
	return out, nil
}

// JSDistance returns the [H][H] matrix of Jensen–Shannon distances between the heads' attention
// patterns: entry (i, j) is the mean, over the (sequence, query) rows where both heads have
// mass, of
//
//	√JSD(p, q),   JSD(p, q) = ½·KL(p ‖ m) + ½·KL(q ‖ m),   m = (p + q)/2,
//
// with p and q the rows of heads i and j and logarithms to base 2, so every distance lies in
// [0, 1]: 0 for identical rows, 1 for rows on disjoint keys. The square root makes it a metric
// (Endres and Schindelin 2003). The matrix is symmetric with a zero diagonal; a pair of heads
// with no common row of mass gets NaN. Shapes and errors are as for Entropy.
func JSDistance(w *tensor.Tensor) ([][]float64, error) {
	return pairwise(w, func(p, q []float32, sp, sq float64) float64 {
		jsd := 0.0
		for k := range p {
			a, b := float64(p[k])/sp, float64(q[k])/sq
			m := (a + b) / 2
			if a > 0 {
				jsd += a * math.Log2(a/m)
			}
			if b > 0 {
				jsd += b * math.Log2(b/m)
			}
		}
		return math.Sqrt(min(max(jsd/2, 0), 1))
	})
}

// pairwise returns the symmetric [H][H] matrix whose entry (i, j), i ≤ j, is the mean of f over
// the rows where heads i and j both have mass (NaN where there are none).
func pairwise(w *tensor.Tensor, f func(p, q []float32, sp, sq float64) float64) ([][]float64, error) {
	s, err := checkAttention(w)
	if err != nil {
		return nil, err
	}
	sums := rowSums(w.Data, s)
	out := square(s.h)
	for i := range s.h {
		for j := i; j < s.h; j++ {
			total, n := 0.0, 0
			for b := range s.b {
				for q := range s.t {
					si, sj := sums[(b*s.h+i)*s.t+q], sums[(b*s.h+j)*s.t+q]
					if si > 0 && sj > 0 {
						total += f(s.row(w.Data, b, i, q), s.row(w.Data, b, j, q), si, sj)
						n++
					}
				}
			}
			out[i][j] = total / float64(n)
			out[j][i] = out[i][j]
		}
	}
	return out, nil
}

// ArgmaxNMI returns the [H][H] matrix of normalised mutual information between the heads' argmax
// positions. For each (sequence, query) row where heads i and j both have mass, X is the key
// head i attends most and Y the one head j attends most (the first on ties); over those rows
//
//	NMI(i, j) = 2·I(X; Y) / (H(X) + H(Y)),
//
// with the entropies and the mutual information of the empirical distributions. This is the
// arithmetic normalisation, scikit-learn's default (normalized_mutual_info_score), chosen over
// the geometric I/√(H(X)·H(Y)) because it stays defined when one head is constant: such a head
// shares no information with a varying one and scores 0 against it. NMI is 1 when each head's
// argmax determines the other's (in particular on the diagonal) and 0 when they are independent.
// The one case the formula leaves undefined, both heads constant (H(X) = H(Y) = 0), is set to 1,
// as scikit-learn does: each determines the other. A pair with no common row of mass gets NaN.
// Shapes and errors are as for Entropy.
func ArgmaxNMI(w *tensor.Tensor) ([][]float64, error) {
	s, err := checkAttention(w)
	if err != nil {
		return nil, err
	}
	sums := rowSums(w.Data, s)
	arg := make([]int, len(sums)) // [B, H, T]: the argmax key of each row
	for b := range s.b {
		for h := range s.h {
			for q := range s.t {
				arg[(b*s.h+h)*s.t+q] = argmax(s.row(w.Data, b, h, q))
			}
		}
	}
	out := square(s.h)
	joint := make([]float64, s.tk*s.tk)
	px, py := make([]float64, s.tk), make([]float64, s.tk)
	for i := range s.h {
		for j := i; j < s.h; j++ {
			clear(joint)
			clear(px)
			clear(py)
			n := 0.0
			for b := range s.b {
				for q := range s.t {
					ri, rj := (b*s.h+i)*s.t+q, (b*s.h+j)*s.t+q
					if sums[ri] > 0 && sums[rj] > 0 {
						x, y := arg[ri], arg[rj]
						joint[x*s.tk+y]++
						px[x]++
						py[y]++
						n++
					}
				}
			}
			out[i][j] = nmi(joint, px, py, n)
			out[j][i] = out[i][j]
		}
	}
	return out, nil
}

// nmi returns 2·I(X;Y)/(H(X)+H(Y)) from the counts of a joint table [len(px), len(py)], its
// marginals and their total n: NaN when n is 0, 1 when both entropies are 0.
func nmi(joint, px, py []float64, n float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	hx, hy := countEntropy(px, n), countEntropy(py, n)
	if hx+hy == 0 {
		return 1
	}
	mi := 0.0
	for x, cx := range px {
		for y, cy := range py {
			if c := joint[x*len(py)+y]; c > 0 {
				mi += c / n * math.Log(c*n/(cx*cy))
			}
		}
	}
	return min(max(2*mi/(hx+hy), 0), 1)
}

// countEntropy returns the entropy in nats of the distribution of counts c that sum to n.
func countEntropy(c []float64, n float64) float64 {
	e := 0.0
	for _, k := range c {
		if k > 0 {
			e -= k / n * math.Log(k/n)
		}
	}
	return e
}

// argmax returns the index of the first largest value of row.
func argmax(row []float32) int {
	best := 0
	for k, a := range row {
		if a > row[best] {
			best = k
		}
	}
	return best
}

// Similarity returns the [H][H] matrix ρ of chapter 000 (eq. 5.2.6), the cosine similarity of
// the heads' outputs
//
//	ρ_ij = head_i · head_j / (‖head_i‖ ‖head_j‖),
//
// where head_h is everything head h wrote for the batch, flattened: the columns
// off_h … off_h + dims[h] − 1 of every row of heads, off_h = Σ_{g<h} dims[g]. heads is [B, T, E]
// (any [..., E] works: the leading dimensions are rows) and dims, the heads' sizes, sums to E.
// A dot product pairs coordinate k of one head with coordinate k of the other, so heads of
// different sizes cannot be compared and their pairs are NaN; so are the pairs of a head whose
// output is all zero. The diagonal is 1 for every other head. It returns an error when heads is
// nil, has fewer than 2 dimensions or data that does not match its shape, holds a non-finite
// value, or when dims has a size below 1 or does not sum to E.
func Similarity(heads *tensor.Tensor, dims []int) ([][]float64, error) {
	x, err := headColumns(heads, dims)
	if err != nil {
		return nil, err
	}
	return x.correlations(), nil
}

// MIPenalty returns chapter 002's penalty on the mutual information between head outputs, in a
// form that can be differentiated: for every pair of heads i < j of the same size,
//
//	MI_ij = −½ · ln(1 − r_ij²)
//
// summed over the pairs (nats). −½·ln(1 − r²) is the mutual information of two jointly Gaussian
// variables with correlation r; here r_ij is Pearson's correlation of the two heads' outputs:
// each head's output is centred by subtracting its mean output vector over the batch's rows
// (B·T of them), and r_ij is the cosine (as in Similarity) of the two centred, flattened
// outputs. This is an estimate, not the mutual information itself: it sees only linear
// dependence between coordinate k of one head and coordinate k of the other, the relation ρ_ij
// measures; heads that encode the same information in rotated coordinates are not penalised.
// r² is clamped to at most 1 − 1e-6, which bounds each pair at ½·ln(1e6) ≈ 6.91 nats (and makes
// its gradient 0 there); pairs of different sizes, and pairs with a head whose centred output is
// all zero, add nothing.
//
// heads [B, T, E] and dims are as for Similarity. When grad is not nil it must have heads' shape,
// and dPenalty/dheads is added into it. Errors are as for Similarity, and when grad's shape
// differs from heads'.
func MIPenalty(heads *tensor.Tensor, dims []int, grad *tensor.Tensor) (float64, error) {
	x, err := headColumns(heads, dims)
	if err != nil {
		return 0, err
	}
	if grad == nil {
		x.centre()
		return x.miPenalty(nil), nil
	}
	if !slices.Equal(grad.Shape, heads.Shape) || len(grad.Data) != len(heads.Data) {
		return 0, fmt.Errorf("probe: gradient is %s with %d values, want the heads' shape %s",
			tensor.ShapeString(grad.Shape), len(grad.Data), tensor.ShapeString(heads.Shape))
	}
	x.centre()
	g := make([]float64, len(x.data))
	penalty := x.miPenalty(g)
	for i, d := range g {
		grad.Data[i] += float32(d)
	}
	return penalty, nil
}

// maxR2 bounds r² in MIPenalty, so that ln(1 − r²) stays finite for identical heads.
const maxR2 = 1 - 1e-6

// columns are the outputs of H heads side by side, in float64: rows of width e, head h in
// columns off[h] … off[h]+dims[h]−1.
type columns struct {
	data      []float64 // [rows, e]
	rows, e   int
	dims, off []int
}

// headColumns checks heads [..., E] and dims and returns heads' values in float64.
func headColumns(heads *tensor.Tensor, dims []int) (*columns, error) {
	if heads == nil {
		return nil, fmt.Errorf("probe: head outputs are nil, want [B, T, E]")
	}
	if len(heads.Shape) < 2 {
		return nil, fmt.Errorf("probe: head outputs are %s, want [B, T, E]", tensor.ShapeString(heads.Shape))
	}
	n, err := tensor.NumElements(heads.Shape)
	if err != nil || n != len(heads.Data) {
		return nil, fmt.Errorf("probe: head outputs are %s with %d values, want a shape that matches the data", tensor.ShapeString(heads.Shape), len(heads.Data))
	}
	e := heads.Shape[len(heads.Shape)-1]
	if len(dims) == 0 {
		return nil, fmt.Errorf("probe: no head sizes, want one per head summing to E = %d", e)
	}
	x := &columns{e: e, dims: dims, off: make([]int, len(dims))}
	sum := 0
	for h, d := range dims {
		if d < 1 || d > e {
			return nil, fmt.Errorf("probe: head %d has size %d, want 1 to E = %d", h, d, e)
		}
		x.off[h] = sum
		sum += d
	}
	if sum != e {
		return nil, fmt.Errorf("probe: head sizes %v sum to %d, want E = %d", dims, sum, e)
	}
	if e > 0 {
		x.rows = n / e
	}
	x.data = make([]float64, n)
	for i, v := range heads.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("probe: head output %d (row %d, column %d) is %g, want a finite value", i, i/e, i%e, v)
		}
		x.data[i] = float64(v)
	}
	return x, nil
}

// centre subtracts from each column its mean over the rows.
func (x *columns) centre() {
	if x.rows == 0 {
		return
	}
	for c := range x.e {
		mean := 0.0
		for r := range x.rows {
			mean += x.data[r*x.e+c]
		}
		mean /= float64(x.rows)
		for r := range x.rows {
			x.data[r*x.e+c] -= mean
		}
	}
}

// dot returns Σ over rows and k < dims[i] of head i's column k times head j's column k; the
// heads must have the same size.
func (x *columns) dot(i, j int) float64 {
	s := 0.0
	for r := range x.rows {
		a, b := x.data[r*x.e+x.off[i]:][:x.dims[i]], x.data[r*x.e+x.off[j]:][:x.dims[j]]
		for k := range a {
			s += a[k] * b[k]
		}
	}
	return s
}

// norms returns the L2 norm of each head's columns.
func (x *columns) norms() []float64 {
	norm := make([]float64, len(x.dims))
	for i := range norm {
		norm[i] = math.Sqrt(x.dot(i, i))
	}
	return norm
}

// correlations returns the [H][H] cosines of the heads' flattened columns: NaN for heads of
// different sizes or of zero norm; the diagonal is 1 unless the norm is zero.
func (x *columns) correlations() [][]float64 {
	h, norm := len(x.dims), x.norms()
	out := square(h)
	for i := range h {
		for j := i; j < h; j++ {
			rho := math.NaN()
			switch {
			case x.dims[i] != x.dims[j] || norm[i] == 0 || norm[j] == 0:
			case i == j:
				rho = 1
			default:
				rho = min(max(x.dot(i, j)/(norm[i]*norm[j]), -1), 1)
			}
			out[i][j], out[j][i] = rho, rho
		}
	}
	return out
}

// miPenalty returns Σ_{i<j} −½·ln(1 − min(r_ij², maxR2)) over the pairs of equal size, with r the
// cosine of the (already centred) columns, and adds its gradient into g when g is not nil.
//
// With x, y the two centred heads, r = x·y/(‖x‖‖y‖) and
//
//	∂r/∂x = y/(‖x‖‖y‖) − r·x/‖x‖²,   ∂MI/∂r = r/(1 − r²).
//
// ∂r/∂x has zero column means (x and y have), so it is also the gradient with respect to the
// uncentred head: centring subtracts the column means, a projection that leaves it unchanged.
func (x *columns) miPenalty(g []float64) float64 {
	h, norm := len(x.dims), x.norms()
	total := 0.0
	for i := range h {
		for j := i + 1; j < h; j++ {
			if x.dims[i] != x.dims[j] || norm[i] == 0 || norm[j] == 0 {
				continue
			}
			r := x.dot(i, j) / (norm[i] * norm[j])
			r2 := r * r
			if r2 >= maxR2 {
				total -= math.Log(1-maxR2) / 2
				continue
			}
			total -= math.Log(1-r2) / 2
			if g != nil {
				x.addPairGrad(g, i, j, r/(1-r2), r, norm[i], norm[j])
			}
		}
	}
	return total
}

// addPairGrad adds scale·∂r/∂(head i, head j) into g, r being the pair's cosine and ni, nj
// their norms.
func (x *columns) addPairGrad(g []float64, i, j int, scale, r, ni, nj float64) {
	for row := range x.rows {
		a, b := x.data[row*x.e+x.off[i]:][:x.dims[i]], x.data[row*x.e+x.off[j]:][:x.dims[j]]
		ga, gb := g[row*x.e+x.off[i]:][:x.dims[i]], g[row*x.e+x.off[j]:][:x.dims[j]]
		for k := range a {
			ga[k] += scale * (b[k]/(ni*nj) - r*a[k]/(ni*ni))
			gb[k] += scale * (a[k]/(ni*nj) - r*b[k]/(nj*nj))
		}
	}
}

// attention holds the sizes of a [B, H, T, Tk] weights tensor.
type attention struct{ b, h, t, tk int }

// row returns the weights of query q of sequence b in head h.
func (s attention) row(w []float32, b, h, q int) []float32 {
	return w[((b*s.h+h)*s.t+q)*s.tk:][:s.tk]
}

// checkAttention returns w's sizes, or an error unless w is a 4-D tensor of sizes ≥ 1 whose data
// matches its shape and holds finite weights ≥ 0.
func checkAttention(w *tensor.Tensor) (attention, error) {
	if w == nil {
		return attention{}, fmt.Errorf("probe: attention weights are nil, want [B, H, T, Tk]")
	}
	if len(w.Shape) != 4 {
		return attention{}, fmt.Errorf("probe: attention weights are %s, want [B, H, T, Tk]", tensor.ShapeString(w.Shape))
	}
	s := attention{w.Shape[0], w.Shape[1], w.Shape[2], w.Shape[3]}
	if s.b < 1 || s.h < 1 || s.t < 1 || s.tk < 1 {
		return attention{}, fmt.Errorf("probe: attention weights are %s, want [B, H, T, Tk] with every size ≥ 1", tensor.ShapeString(w.Shape))
	}
	if n, err := tensor.NumElements(w.Shape); err != nil || n != len(w.Data) {
		return attention{}, fmt.Errorf("probe: attention weights are %s with %d values, want a shape that matches the data", tensor.ShapeString(w.Shape), len(w.Data))
	}
	for i, a := range w.Data {
		if !(a >= 0 && a <= math.MaxFloat32) {
			return attention{}, fmt.Errorf("probe: attention weight %d (row %d, key %d) is %g, want a finite value ≥ 0", i, i/s.tk, i%s.tk, a)
		}
	}
	return s, nil
}

// rowSum returns the sum of row in float64.
func rowSum(row []float32) float64 {
	s := 0.0
	for _, a := range row {
		s += float64(a)
	}
	return s
}

// rowSums returns the sum of every row of w, [B, H, T].
func rowSums(w []float32, s attention) []float64 {
	sums := make([]float64, s.b*s.h*s.t)
	for i := range sums {
		sums[i] = rowSum(w[i*s.tk:][:s.tk])
	}
	return sums
}

// square returns an n × n matrix of zeros.
func square(n int) [][]float64 {
	m := make([][]float64, n)
	for i := range m {
		m[i] = make([]float64, n)
	}
	return m
}
