package experiment

import (
	"math"
	"testing"

	"github.com/mhalab/mha/jsonnum"
)

// TestAveragingStatistics checks the statistics on two heads of one coordinate whose answers are
// known: head 1 a copy of head 0 (ρ̄ = 1, the mean varies as much as one head: ratio H = 2), its
// negative (ρ̄ = −1, the mean is constant), and an uncorrelated head of another variance (ratio 1
// exactly). Every head is offset, which centring must remove; every group holds the same rows,
// so the standard error is 0.
func TestAveragingStatistics(t *testing.T) {
	x0 := []float64{1, -1, 2, -2} // variance 2.5
	z := []float64{1, 1, -1, -1}  // variance 1, uncorrelated with x0
	for _, c := range []struct {
		name                         string
		x1                           []float64
		headVar, meanVar, corr, pred float64
	}{
		{"copy", x0, 2.5, 2.5, 1, 2.5},
		{"negative", []float64{-1, 1, -2, 2}, 2.5, 0, -1, 0},
		{"uncorrelated", z, 1.75, 0.875, 0, 0.875},
	} {
		s := newHeadSample(c.name, 2, 1)
		for u := range avgGroups {
			var rows []float64
			for i := range x0 {
				rows = append(rows, x0[i]+3, c.x1[i]-7)
			}
			s.add(u, avgGroups, rows)
		}
		r := s.averageOf(2)
		ratio := c.meanVar / (c.headVar / 2)
		near := func(x jsonnum.Number, want float64) bool { return math.Abs(float64(x)-want) <= 1e-12 }
		if !near(r.HeadVar, c.headVar) || !near(r.MeanVar, c.meanVar) || !near(r.MeanCorr, c.corr) ||
			!near(r.Correlated, c.pred) || !near(r.Ratio, ratio) || r.RatioSE > 1e-12 || r.Samples != 4*avgGroups {
			t.Errorf("%s: %+v, want σ² %v, var(mean) %v, ρ̄ %v, predicted %v, ratio %v ± 0 over %d samples",
				c.name, r, c.headVar, c.meanVar, c.corr, c.pred, ratio, 4*avgGroups)
		}
	}
}

// TestAveraging runs the quick experiment: independent heads must give var(mean) = σ²/H within
// 3 standard errors for every H; heads that share half their value weights, and the induction
// model's heads in the space where the layer adds them, must miss σ²/H by many standard errors;
// for the random layers, whose heads have equal variances, σ²/H·(1+(H−1)ρ̄) must match.
func TestAveraging(t *testing.T) {
	res := run(t, "averaging")
	d := res.Data.(*AveragingData)
	bySource := map[string][]AveragingRow{}
	for _, r := range d.Rows {
		bySource[r.Source] = append(bySource[r.Source], r)
	}
	for _, name := range []string{"random layers, independent heads", "random layers, value weights 0.5 shared"} {
		rows := bySource[name]
		if len(rows) != 5 || rows[4].Heads != avgHeads || rows[0].Ratio != 1 {
			t.Fatalf("%s: rows %+v, want H = 1 … 16 and ratio 1 at H = 1", name, rows)
		}
		for _, r := range rows {
			if math.Abs(float64(r.Correlated-r.MeanVar)) > 0.02*float64(r.MeanVar) {
				t.Errorf("%s, H = %d: var(mean) %v, σ²/H·(1+(H−1)ρ̄) %v: want them within 2%%", name, r.Heads, r.MeanVar, r.Correlated)
			}
		}
	}
	for _, r := range bySource["random layers, independent heads"][1:] {
		if !(r.RatioSE > 0 && math.Abs(float64(r.Ratio-1)) <= 3*float64(r.RatioSE)) {
			t.Errorf("independent heads, H = %d: ratio %.4f ± %.4f, want 1 within 3 standard errors", r.Heads, r.Ratio, r.RatioSE)
		}
	}
	for _, name := range []string{"random layers, value weights 0.5 shared", "induction layer 1, heads' W_O terms"} {
		rows := bySource[name]
		r := rows[len(rows)-1]
		if !(r.Ratio > 1+10*r.RatioSE && r.MeanCorr > 0.1) {
			t.Errorf("%s, H = %d: ratio %.4f ± %.4f, ρ̄ %.3f: want correlated heads, the ratio 10 standard errors above 1", name, r.Heads, r.Ratio, r.RatioSE, r.MeanCorr)
		}
	}
}
