package attend

import (
	"math"
	"slices"
	"strconv"

	"github.com/mhalab/mha/internal/kernel"
)

// NormKind names what turns a row of scores into weights.
type NormKind int

// The normalizers.
const (
	Softmax   NormKind = iota // exp(z − lse): every kept key gets some weight
	Sparsemax                 // the Euclidean projection onto the simplex (Martins & Astudillo 2016)
	Entmax                    // α-entmax (Peters et al. 2019): [(α − 1)z − τ]₊^(1/(α−1))
	TopK                      // softmax over the K largest scores, 0 elsewhere
)

// Normalizer replaces the softmax of a row of scores; masked keys (−Inf) get weight 0, and a row
// that keeps no key gets weights 0. Sparsemax, Entmax and TopK give weights that are exactly 0
// on the keys they drop. Alpha is Entmax's α > 1 (1.5 is solved exactly by sorting, any other
// by bisection; 2 is sparsemax); K is TopK's K ≥ 1.
type Normalizer struct {
	Kind  NormKind
	Alpha float64
	K     int
}

// normScratch is normalize's memory for a row: the keys that may keep weight, and their values.
// The zero value is ready to use; it grows to the longest row and then stops allocating.
type normScratch struct {
	keys      []int
	z, sorted []float64
}

// normalize turns row, a query's scores (−Inf where masked), into n's weights in place and
// returns how many keys were visible (not −Inf) and how many of them kept a weight that is not
// exactly 0 (none when no key was visible). The weights are computed in float64 whatever F is.
func normalize[F Float](n *Normalizer, row []F, s *normScratch) (visible, kept int) {
	t := rowMax(row)
	if math.IsInf(t, -1) {
		clear(row)
		return 0, 0
	}
	// Room for every key at once, so that a row with more candidates than the last allocates
	// nothing.
	s.keys = slices.Grow(s.keys[:0], len(row))
	s.z = slices.Grow(s.z[:0], len(row))
	s.sorted = slices.Grow(s.sorted[:0], len(row))
	switch n.Kind {
	case Sparsemax, Entmax:
		// z = (α − 1)(s − max s) ≤ 0 (α − 1 = 1 for sparsemax), 0 at the top: scores shifted by
		// their maximum neither overflow for a large α nor lose the −1 below, and the weights
		// are the same for scores shifted by a constant. τ ≥ −1 (the top score alone takes
		// weight 1 at τ = −1), so only the keys with z > −1 can keep weight: the threshold is
		// found among these few, and every other key gets exactly 0. lo, below t − 1/a by more
		// than its rounding to F, rules out most keys in F before the exact test.
		a := 1.0
		if n.Kind == Entmax {
			a = n.Alpha - 1
		}
		s.keys, visible = atLeast(row, F(t-(1/a)*(1+1e-6)-math.Abs(t)*1e-6), s.keys)
		k := len(s.keys)
		s.z = s.z[:k]
		c := 0
		for _, j := range s.keys {
			z := a * (float64(row[j]) - t)
			s.keys[c], s.z[c] = j, z
			if z > -1 {
				c++
			}
		}
		s.keys, s.z = s.keys[:c], s.z[:c]
		s.sorted = append(s.sorted[:0], s.z...)
		var tau float64
		switch {
		case n.Kind == Sparsemax:
			tau = sparsemaxThreshold(s.sorted)
		case n.Alpha == 1.5:
			tau = entmax15Threshold(s.sorted)
		default:
			tau = entmaxBisect(s.sorted, n.Alpha)
		}
		sum := 0.0
		for i, z := range s.z {
			v := 0.0
			if d := z - tau; d > 0 {
				switch {
				case n.Kind == Sparsemax:
					v = d
				case n.Alpha == 1.5:
					v = d * d
				default:
					v = math.Pow(d, 1/a)
				}
			}
			s.z[i] = v
			sum += v
		}
		if n.Kind == Sparsemax {
			sum = 1 // exact by construction: the threshold makes them sum to 1
		}
		kept = scatter(row, s, sum) // for entmax, exact for 1.5 up to rounding; bisection's last error
	case TopK:
		// The K-th largest score is at least the least of the maxima of K disjoint chunks of
		// the row (K distinct scores), so the quickselect needs only the scores from there on,
		// or every kept one when a chunk is all masked.
		lo := math.Inf(-1)
		if c := len(row) / n.K; c > 0 {
			lo = math.Inf(1)
			for i := range n.K {
				lo = min(lo, rowMax(row[i*c:(i+1)*c]))
			}
		}
		s.keys, visible = atLeast(row, F(lo), s.keys)
		scores := s.sorted[:len(s.keys)]
		m := 0
		for _, j := range s.keys {
			x := float64(row[j])
			s.keys[m], scores[m] = j, x
			if !math.IsInf(x, -1) {
				m++
			}
		}
		keys, scores := s.keys[:m], scores[:m]
		s.sorted = scores
		k := min(n.K, m)
		cut := kthLargest(scores, k)
		// Ties at the cut: keep the first keys, so that exactly k are kept.
		room := k
		for _, x := range scores {
			if x > cut {
				room--
			}
		}
		// In the keys' order, which the candidates keep; the others are below the cut.
		sum, c := 0.0, 0
		for _, j := range keys {
			if x := float64(row[j]); x > cut || (x == cut && room > 0) {
				if x == cut {
					room--
				}
				v := math.Exp(x - t)
				s.keys[c] = j
				s.z = append(s.z, v)
				c++
				sum += v
			}
		}
		s.keys = s.keys[:c]
		kept = scatter(row, s, sum)
	default:
		sum := 0.0
		for j, x := range row {
			if !math.IsInf(float64(x), -1) {
				visible++
			}
			v := math.Exp(float64(x) - t)
			row[j] = F(v)
			sum += v
		}
		for j, x := range row {
			row[j] = F(float64(x) / sum)
			if row[j] != 0 {
				kept++
			}
		}
	}
	return visible, kept
}

// atLeast returns the indices of the values of row not below lo, in keys' storage, and how many
// values are not −Inf. It has no branch on the values, which random scores would mispredict,
// and takes four at a time (25% faster than one: the loop's own work is much of the cost).
func atLeast[F Float](row []F, lo F, keys []int) ([]int, int) {
	keys = slices.Grow(keys[:0], len(row))[:len(row)]
	negInf := F(math.Inf(-1))
	k, j, masked := 0, 0, 0
	for ; j+4 <= len(row); j += 4 {
		r := row[j : j+4 : j+4]
		keys[k] = j
		if r[0] >= lo {
			k++
		}
		keys[k] = j + 1
		if r[1] >= lo {
			k++
		}
		keys[k] = j + 2
		if r[2] >= lo {
			k++
		}
		keys[k] = j + 3
		if r[3] >= lo {
			k++
		}
		if r[0] == negInf || r[1] == negInf || r[2] == negInf || r[3] == negInf {
			masked += b2i(r[0] == negInf) + b2i(r[1] == negInf) + b2i(r[2] == negInf) + b2i(r[3] == negInf)
		}
	}
	for ; j < len(row); j++ {
		keys[k] = j
		if row[j] >= lo {
			k++
		}
		masked += b2i(row[j] == negInf)
	}
	return keys[:k], len(row) - masked
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rowMax returns the largest value of row, −Inf when it is empty or all −Inf: kernel.Smax's
// vector code for float32.
func rowMax[F Float](row []F) float64 {
	if r, ok := any(row).([]float32); ok {
		return float64(kernel.Smax(r))
	}
	m := F(math.Inf(-1))
	for _, x := range row {
		if x > m {
			m = x
		}
	}
	return float64(m)
}

// scatter writes the weights s.z / sum to the keys s.keys of row and 0 to the others, and
// returns how many of the weights written are not exactly 0.
func scatter[F Float](row []F, s *normScratch, sum float64) (kept int) {
	clear(row)
	for i, j := range s.keys {
		row[j] = F(s.z[i] / sum)
		kept += b2i(row[j] != 0)
	}
	return kept
}

// kthLargest returns the k-th largest value of z (1 ≤ k ≤ len(z)), reordering z: a
// quickselect, O(len(z)) on average, where sorting would cost O(len(z)·log len(z)) per row.
func kthLargest(z []float64, k int) float64 {
	lo, hi, want := 0, len(z)-1, k-1 // the index of the answer in descending order
	for lo < hi {
		pivot := z[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for z[i] > pivot {
				i++
			}
			for z[j] < pivot {
				j--
			}
			if i <= j {
				z[i], z[j] = z[j], z[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return z[want]
		}
	}
	return z[want]
}

// narrow returns the values of z, shifted to a maximum of 0, that the support of the threshold τ
// of Σ [z − τ]₊^q = 1 (q = 1/(α − 1) ≥ 1: 1 for sparsemax, 2 for 1.5-entmax) may hold, moved to
// its front. It takes Newton steps on that sum from τ = −1: the sum is convex and decreasing in τ,
// so each step stays at or below the root, and the values not above it (less a margin for
// rounding) cannot be in the support. Sorting or bisection then needs only the few left, where
// random scores of unit variance leave hundreds above −1 for 1.5-entmax.
func narrow(z []float64, q float64) []float64 {
	tau := -1.0
	for range 8 {
		var g, dg float64
		for _, x := range z {
			if d := x - tau; d > 0 {
				switch q {
				case 1:
					g, dg = g+d, dg+1
				case 2:
					g, dg = g+d*d, dg+2*d
				default:
					v := math.Pow(d, q)
					g, dg = g+v, dg+q*v/d
				}
			}
		}
		if !(g > 1 && dg > 0) {
			break // at the root, or no value above τ
		}
		tau += (g - 1) / dg
		n := len(z)
		z = above(z, tau-1e-9)
		if len(z) == n {
			break
		}
	}
	return z
}

// above keeps, in place at z's front, the values of z above lo.
func above(z []float64, lo float64) []float64 {
	n := 0
	for _, x := range z {
		z[n] = x
		if x > lo {
			n++
		}
	}
	return z[:n]
}

// sparsemaxThreshold returns τ such that Σ max(z − τ, 0) = 1 for z shifted to a maximum of 0, by
// sorting the values narrow leaves (z is reordered).
func sparsemaxThreshold(z []float64) float64 {
	z = narrow(z, 1)
	slices.Sort(z)
	slices.Reverse(z)
	sum, tau := 0.0, 0.0
	for k, x := range z {
		sum += x
		if t := (sum - 1) / float64(k+1); x > t {
			tau = t
		} else {
			break
		}
	}
	return tau
}

// entmax15Threshold returns τ such that Σ [z − τ]₊² = 1 for z already multiplied by α − 1 = ½,
// shifted to a maximum of 0, exactly by sorting the values narrow leaves (Peters et al. 2019,
// Algorithm 2; z is reordered).
func entmax15Threshold(z []float64) float64 {
	z = narrow(z, 2)
	slices.Sort(z)
	slices.Reverse(z)
	// τ_k solves Σ_{j≤k} (z_j − τ)² = 1; the support is the k with τ_k ≤ z_k, and τ that of
	// its size.
	sum, sq, support := 0.0, 0.0, 0
	for k, x := range z {
		sum += x
		sq += x * x
		if t := threshold15(sum, sq, k+1); t <= x {
			support++
		}
	}
	sum, sq = 0, 0
	for _, x := range z[:max(support, 1)] {
		sum += x
		sq += x * x
	}
	return threshold15(sum, sq, max(support, 1))
}

// threshold15 is τ_k of entmax15Threshold from the sum and the sum of squares of the k largest.
func threshold15(sum, sq float64, k int) float64 {
	n := float64(k)
	mean := sum / n
	return mean - math.Sqrt(max((1-(sq/n-mean*mean)*n)/n, 0))
}

// entmaxBisect returns τ such that Σ [z − τ]₊^(1/(α−1)) = 1 for z already multiplied by α − 1
// and shifted to a maximum of 0, by bisection between the bounds that maximum gives, on the
// values narrow leaves when α ≤ 2 (z is reordered), until the bounds are adjacent.
func entmaxBisect(z []float64, alpha float64) float64 {
	inv := 1 / (alpha - 1)
	if inv >= 1 {
		z = narrow(z, inv)
	}
	lo, hi := -1.0, -math.Pow(1/float64(len(z)), alpha-1)
	for range 100 {
		mid := (lo + hi) / 2
		if mid == lo || mid == hi {
			break // adjacent: more steps would change nothing
		}
		sum := 0.0
		for _, x := range z {
			if d := x - mid; d > 0 {
				sum += math.Pow(d, inv)
			}
		}
		if sum >= 1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// backward turns dp, the gradient with respect to a row's weights p, into the gradient with
// respect to its scores, in place.
func (n *Normalizer) backward(p, dp []float64) {
	switch n.Kind {
	case Sparsemax, Entmax:
		// With g = p^(2−α) on the support (1 for sparsemax), ds = g·dp − g·Σ g·dp / Σ g.
		var num, den float64
		for j, x := range p {
			if x > 0 {
				g := 1.0
				if n.Kind == Entmax {
					g = math.Pow(x, 2-n.Alpha)
				}
				num += g * dp[j]
				den += g
			}
		}
		q := 0.0
		if den > 0 {
			q = num / den
		}
		for j, x := range p {
			if x > 0 {
				g := 1.0
				if n.Kind == Entmax {
					g = math.Pow(x, 2-n.Alpha)
				}
				dp[j] = g * (dp[j] - q)
			} else {
				dp[j] = 0
			}
		}
	default: // softmax, and top-k's softmax on its keys
		d := 0.0
		for j, x := range p {
			d += x * dp[j]
		}
		for j, x := range p {
			dp[j] = x * (dp[j] - d)
		}
	}
}

// Valid reports whether n is a normalizer: a known kind, with a finite α > 1 for Entmax and
// K ≥ 1 for TopK.
func (n *Normalizer) Valid() bool {
	switch n.Kind {
	case Softmax, Sparsemax:
		return true
	case Entmax:
		return n.Alpha > 1 && !math.IsInf(n.Alpha, 1)
	case TopK:
		return n.K >= 1
	}
	return false
}

// String returns n as mha sdpa's --normalizer writes it.
func (n *Normalizer) String() string {
	switch n.Kind {
	case Softmax:
		return "softmax"
	case Sparsemax:
		return "sparsemax"
	case Entmax:
		if n.Alpha == 1.5 {
			return "entmax15"
		}
		return "entmax:" + strconv.FormatFloat(n.Alpha, 'g', -1, 64)
	case TopK:
		return "topk:" + strconv.Itoa(n.K)
	}
	return "normalizer(" + strconv.Itoa(int(n.Kind)) + ")"
}
