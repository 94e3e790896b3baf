package probe

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// weights builds [B, H, T, T] attention weights with α_{q,j} = f(b, h, q, j).
func weights(b, h, t int, f func(bi, hi, q, j int) float64) []float32 {
	w := make([]float32, b*h*t*t)
	for bi := range b {
		for hi := range h {
			for q := range t {
				for j := range t {
					w[((bi*h+hi)*t+q)*t+j] = float32(f(bi, hi, q, j))
				}
			}
		}
	}
	return w
}

// uniform is causal attention spread evenly: α_{q,j} = 1/(q+1) for j ≤ q.
func uniform(_, _, q, j int) float64 {
	if j > q {
		return 0
	}
	return 1 / float64(q+1)
}

// lookBack returns a head that puts all of query q's weight on key q − k (key 0 when q < k).
func lookBack(k int) func(bi, hi, q, j int) float64 {
	return func(_, _, q, j int) float64 {
		if j == max(q-k, 0) {
			return 1
		}
		return 0
	}
}

// byHead gives head i the pattern heads[i].
func byHead(heads ...func(bi, hi, q, j int) float64) func(bi, hi, q, j int) float64 {
	return func(bi, hi, q, j int) float64 { return heads[hi](bi, hi, q, j) }
}

func harmonic(n int) float64 {
	s := 0.0
	for i := 1; i <= n; i++ {
		s += 1 / float64(i)
	}
	return s
}

func checkScores(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d scores, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-6 {
			t.Errorf("%s: head %d scores %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestPrevToken(t *testing.T) {
	const b, T = 2, 7
	// lookBack(k) sends queries q < k to key 0, so it also scores 1/(T − k') at offset k' = q.
	w := weights(b, 4, T, byHead(lookBack(1), lookBack(2), lookBack(0), uniform))
	for k, want := range [][]float64{
		{1.0 / T, 1.0 / T, 1, (harmonic(T) - harmonic(0)) / T},
		{1, 1.0 / (T - 1), 0, (harmonic(T) - harmonic(1)) / (T - 1)},
		{0, 1, 0, (harmonic(T) - harmonic(2)) / (T - 2)},
		{0, 0, 0, (harmonic(T) - harmonic(3)) / (T - 3)},
	} {
		got, err := PrevToken(w, b, 4, T, k)
		if err != nil {
			t.Fatal(err)
		}
		checkScores(t, fmt.Sprintf("k = %d", k), got, want)
	}
}

// TestPrevTokenAveragesBatch gives sequence 0 a previous-token head and sequence 1 a self head.
func TestPrevTokenAveragesBatch(t *testing.T) {
	w := weights(2, 1, 5, func(bi, hi, q, j int) float64 { return lookBack(1-bi)(bi, hi, q, j) })
	got, err := PrevToken(w, 2, 1, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, "mixed batch", got, []float64{0.5})
}

func TestPrefixMatchingRepeatedTokens(t *testing.T) {
	const n, T = 5, 10
	// Two sequences, each n distinct tokens repeated once.
	tokens := []int{
		7, 3, 9, 1, 4, 7, 3, 9, 1, 4,
		2, 8, 6, 0, 5, 2, 8, 6, 0, 5,
	}
	induction := func(_, _, q, j int) float64 {
		if q >= n && j == q-n+1 || q < n && j == 0 {
			return 1
		}
		return 0
	}
	w := weights(2, 3, T, byHead(induction, uniform, lookBack(1)))
	got, queries, err := PrefixMatching(w, tokens, 2, 3, T)
	if err != nil {
		t.Fatal(err)
	}
	if queries != 2*n {
		t.Errorf("counted %d queries, want %d", queries, 2*n)
	}
	checkScores(t, "repeated tokens", got, []float64{1, (harmonic(2*n) - harmonic(n)) / n, 0})
}

// TestPrefixMatchingSets checks a sequence where one query has two matching keys and a repeat
// of the previous token, whose key would be the query itself, does not count.
func TestPrefixMatchingSets(t *testing.T) {
	tokens := []int{1, 2, 1, 2, 1, 1}
	// q=2 (1): S={1}; q=3 (2): S={2}; q=4 (1): S={1,3}; q=5 (1): S={1,3,5}∖{5} = {1,3}.
	want := (1.0/3 + 1.0/4 + 2.0/5 + 2.0/6) / 4
	got, queries, err := PrefixMatching(weights(1, 1, 6, uniform), tokens, 1, 1, 6)
	if err != nil {
		t.Fatal(err)
	}
	if queries != 4 {
		t.Errorf("counted %d queries, want 4", queries)
	}
	checkScores(t, "uniform", got, []float64{want})
}

func TestPrefixMatchingNothingToMeasure(t *testing.T) {
	got, queries, err := PrefixMatching(weights(1, 2, 4, uniform), []int{4, 3, 2, 1}, 1, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if queries != 0 {
		t.Errorf("counted %d queries in distinct tokens, want 0", queries)
	}
	checkScores(t, "distinct tokens", got, []float64{0, 0})
}

func TestGroundTruth(t *testing.T) {
	const b, h, T = 2, 3, 6
	w := weights(b, h, T, byHead(lookBack(1), uniform, lookBack(0)))
	// The previous-token pattern: rows 1 … T−1 have mass, row 0 has none and does not count.
	prev := make([]float32, b*T*T)
	for bi := range b {
		for q := 1; q < T; q++ {
			prev[(bi*T+q)*T+q-1] = 1
		}
	}
	got, err := GroundTruth(w, prev, b, h, T)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, "previous-token truth", got, []float64{1, (harmonic(T) - 1) / (T - 1), 0})
	want, err := PrevToken(w, b, h, T, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, "against PrevToken", got, want)

	// Truth weighing key 0 twice and the query's own key once, on rows q ≥ 1.
	weighted := weights(b, 1, T, func(_, _, q, j int) float64 {
		switch {
		case q == 0:
			return 0
		case j == 0:
			return 2
		case j == q:
			return 1
		}
		return 0
	})
	got, err = GroundTruth(w, weighted, b, h, T)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, "weighted truth", got, []float64{2.0 / (T - 1), 3 * (harmonic(T) - 1) / (T - 1), 1})
}

// TestGroundTruthMaskedRows checks that all-zero weight rows add nothing, and that a head with
// no weight on the counted rows scores 0, not NaN.
func TestGroundTruthMaskedRows(t *testing.T) {
	const T = 4
	w := weights(1, 2, T, func(_, hi, q, j int) float64 {
		if hi == 1 || q == 3 {
			return 0
		}
		return lookBack(0)(0, 0, q, j)
	})
	diag := weights(1, 1, T, lookBack(0))
	got, err := GroundTruth(w, diag, 1, 2, T)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, "masked rows", got, []float64{1, 0})
}

func TestErrors(t *testing.T) {
	w := weights(1, 2, 3, uniform)
	d := weights(1, 1, 3, uniform)
	tokens := []int{1, 2, 1}
	prefix := func(w []float32, tokens []int, b, h, t int) error {
		_, _, err := PrefixMatching(w, tokens, b, h, t)
		return err
	}
	prev := func(k int) func(w []float32, b, h, t int) error {
		return func(w []float32, b, h, t int) error { _, err := PrevToken(w, b, h, t, k); return err }
	}
	truth := func(d []float32) error { _, err := GroundTruth(w, d, 1, 2, 3); return err }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"prev short", prev(1)(w[:17], 1, 2, 3), "have 17 values, want B·H·T·T = 1·2·3·3 = 18"},
		{"prev zero batch", prev(1)(w, 0, 2, 3), "B = 0, H = 2, T = 3, want each ≥ 1"},
		{"prev k too big", prev(3)(w, 1, 2, 3), "offset k is 3, want 0 ≤ k < T = 3"},
		{"prev k negative", prev(-1)(w, 1, 2, 3), "offset k is -1"},
		{"prev huge", prev(1)(w, 1<<20, 1<<20, 1<<20), "more than"},
		{"prefix weights", prefix(w, tokens, 1, 3, 3), "want B·H·T·T = 1·3·3·3 = 27"},
		{"prefix tokens", prefix(w, tokens[:2], 1, 2, 3), "tokens have 2 values, want B·T = 1·3 = 3"},
		{"truth length", truth(d[:8]), "ground truth has 8 values, want B·T·T = 1·3·3 = 9"},
		{"truth negative", truth([]float32{0, 0, 0, 0, -1, 0, 0, 0, 0}), "holds -1 at index 4"},
		{"truth NaN", truth([]float32{float32(math.NaN()), 0, 0, 0, 0, 0, 0, 0, 0}), "holds NaN at index 0"},
		{"truth empty", truth(make([]float32, 9)), "all zero"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}
