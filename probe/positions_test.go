package probe

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

func TestFirstToken(t *testing.T) {
	const b, T = 2, 5
	sink := func(_, _, _, j int) float64 {
		if j == 0 {
			return 1
		}
		return 0
	}
	w := weights(b, 3, T, byHead(sink, lookBack(1), uniform))
	got, err := FirstToken(w, b, 3, T)
	if err != nil {
		t.Fatal(err)
	}
	// lookBack(1) sends query 1 to key 0 only; uniform gives key 0 1/(q+1).
	want := []float64{1, 1.0 / (T - 1), (harmonic(T) - 1) / (T - 1)}
	checkScores(t, "first token", got, want)
	if _, err := FirstToken(make([]float32, 1), 1, 1, 1); err == nil {
		t.Error("T = 1: no error")
	}
}

func TestDuplicateToken(t *testing.T) {
	const n = 4
	tokens := []int{5, 1, 7, 2, 5, 1, 7, 2} // n tokens repeated once
	dup := func(_, _, q, j int) float64 {   // query q ≥ n attends to q − n
		if (q >= n && j == q-n) || (q < n && j == 0) {
			return 1
		}
		return 0
	}
	w := weights(1, 3, 2*n, byHead(dup, lookBack(1), uniform))
	got, queries, err := DuplicateToken(w, tokens, 1, 3, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	if queries != n {
		t.Fatalf("%d queries, want %d", queries, n)
	}
	u := 0.0 // uniform: 1/(q+1) on the one earlier copy
	for q := n; q < 2*n; q++ {
		u += 1 / float64(q+1)
	}
	checkScores(t, "duplicate token", got, []float64{1, 0, u / n})

	// Several earlier copies: all of them count, each query once.
	tokens = []int{3, 3, 3}
	w = weights(1, 1, 3, uniform)
	got, queries, err = DuplicateToken(w, tokens, 1, 1, 3)
	if err != nil || queries != 2 {
		t.Fatalf("queries %d, err %v; want 2", queries, err)
	}
	checkScores(t, "duplicate token, copies", got, []float64{(1.0/2 + 2.0/3) / 2})

	if _, q, _ := DuplicateToken(w, []int{1, 2, 3}, 1, 1, 3); q != 0 {
		t.Errorf("distinct tokens: %d queries, want 0", q)
	}
	if _, _, err := DuplicateToken(w, []int{1}, 1, 1, 3); err == nil {
		t.Error("short tokens: no error")
	}
}

// TestOffsetProfile checks the profile against a float64 hand sum and PrevToken.
func TestOffsetProfile(t *testing.T) {
	const b, h, T = 2, 3, 6
	full := func(bi, hi, q, j int) float64 { return float64(1+bi+hi+q*j%5) / 100 } // not causal
	w := weights(b, h, T, byHead(uniform, lookBack(2), full))
	got, err := OffsetProfile(w, b, h, T)
	if err != nil {
		t.Fatal(err)
	}
	for hi := range h {
		if len(got[hi]) != 2*T-1 {
			t.Fatalf("head %d: %d offsets, want %d", hi, len(got[hi]), 2*T-1)
		}
		for d := -(T - 1); d < T; d++ {
			sum, n := 0.0, 0
			for bi := range b {
				for q := range T {
					if j := q + d; j >= 0 && j < T {
						sum += float64(w[((bi*h+hi)*T+q)*T+j])
						n++
					}
				}
			}
			if g := got[hi][d+T-1]; math.Abs(g-sum/float64(n)) > 1e-9 {
				t.Errorf("head %d offset %d: %v, want %v", hi, d, g, sum/float64(n))
			}
		}
	}
	for k := range T {
		prev, err := PrevToken(w, b, h, T, k)
		if err != nil {
			t.Fatal(err)
		}
		for hi := range h {
			if math.Abs(prev[hi]-got[hi][T-1-k]) > 1e-9 {
				t.Errorf("head %d: offset −%d is %v, PrevToken %v", hi, k, got[hi][T-1-k], prev[hi])
			}
		}
	}
	if got[0][T] != 0 || got[1][T+2] != 0 {
		t.Errorf("causal heads have weight on later keys: %v, %v", got[0], got[1])
	}
}

// TestRollout checks the rollout of two layers against a hand computation in float64.
func TestRollout(t *testing.T) {
	const T = 3
	l0 := weights(1, 2, T, byHead(uniform, lookBack(1)))
	l1 := weights(1, 2, T, byHead(lookBack(0), uniform))
	w0, _ := tensor.FromData(l0, 1, 2, T, T)
	w1, _ := tensor.FromData(l1, 1, 2, T, T)
	got, err := Rollout([]*tensor.Tensor{w0, w1})
	if err != nil {
		t.Fatal(err)
	}
	// A'_l = 0.5·mean_h + 0.5·I, renormalised (the rows already sum to 1).
	layer := func(w []float32) [T][T]float64 {
		var a [T][T]float64
		for q := range T {
			for j := range T {
				a[q][j] = 0.25 * (float64(w[q*T+j]) + float64(w[(T+q)*T+j]))
			}
			a[q][q] += 0.5
		}
		return a
	}
	a0, a1 := layer(l0), layer(l1)
	for q := range T {
		sum := 0.0
		for j := range T {
			want := 0.0
			for k := range T {
				want += a1[q][k] * a0[k][j]
			}
			g := float64(got.Data[q*T+j])
			sum += g
			if math.Abs(g-want) > 1e-6 {
				t.Errorf("R[%d][%d] = %v, want %v", q, j, g, want)
			}
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Errorf("row %d sums to %v, want 1", q, sum)
		}
	}
	// Hand numbers for row 1: A'_0[1] = (0.25·(0.5+1), 0.25·0.5 + 0.5, 0) = (0.375, 0.625, 0).
	if a0[1][0] != 0.375 || a0[1][1] != 0.625 {
		t.Fatalf("hand layer: %v", a0[1])
	}
	// A row with no mass (a padded query) becomes the identity row.
	z, _ := tensor.FromData(make([]float32, T*T), 1, 1, T, T)
	r, err := Rollout([]*tensor.Tensor{z})
	if err != nil || !slices.Equal(r.Data, []float32{1, 0, 0, 0, 1, 0, 0, 0, 1}) {
		t.Errorf("rollout of zeros: %v, %v; want the identity", r, err)
	}
	if _, err := Rollout(nil); err == nil {
		t.Error("no layers: no error")
	}
	short, _ := tensor.FromData(make([]float32, 4), 1, 1, 2, 2)
	if _, err := Rollout([]*tensor.Tensor{w0, short}); err == nil {
		t.Error("layers of different T: no error")
	}
}

// TestDistinctRepeatedTokens checks the sequences, and that on them PrefixMatching and
// DuplicateToken are the positional scores α_{i, i−n+1} and α_{i, i−n} over the second half.
func TestDistinctRepeatedTokens(t *testing.T) {
	const b, n, vocab = 3, 5, 7
	got, err := DistinctRepeatedTokens(9, b, n, vocab)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != b*2*n {
		t.Fatalf("%d tokens, want %d", len(got), b*2*n)
	}
	for bi := range b {
		seq := got[bi*2*n : (bi+1)*2*n]
		half := slices.Clone(seq[:n])
		slices.Sort(half)
		if !slices.Equal(seq[:n], seq[n:]) || slices.ContainsFunc(seq, func(x int) bool { return x < 0 || x >= vocab }) || len(slices.Compact(half)) != n {
			t.Errorf("sequence %d: %v, want %d distinct tokens in [0, %d) repeated", bi, seq, n, vocab)
		}
	}
	if again, _ := DistinctRepeatedTokens(9, b, n, vocab); !slices.Equal(got, again) {
		t.Error("the same seed gave other tokens")
	}
	full := func(bi, hi, q, j int) float64 { return float64(1+(bi*7+hi*3+q*5+j)%11) / 50 }
	w := weights(b, 2, 2*n, full)
	prefix, _, _ := PrefixMatching(w, got, b, 2, 2*n)
	dup, _, _ := DuplicateToken(w, got, b, 2, 2*n)
	for hi := range 2 {
		ind, d := 0.0, 0.0
		for bi := range b {
			for i := n; i < 2*n; i++ {
				ind += full(bi, hi, i, i-n+1)
				d += full(bi, hi, i, i-n)
			}
		}
		if math.Abs(prefix[hi]-ind/(b*n)) > 1e-6 || math.Abs(dup[hi]-d/(b*n)) > 1e-6 {
			t.Errorf("head %d: prefix-matching %v duplicate %v, want %v and %v", hi, prefix[hi], dup[hi], ind/(b*n), d/(b*n))
		}
	}
	for _, bad := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 8, 7}, {1 << 31, 1 << 31, 1 << 31}, {1 << 29, 2, 10}, {1, 1, 1<<30 + 1}} {
		if _, err := DistinctRepeatedTokens(1, bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("b %d, n %d, vocab %d: no error", bad[0], bad[1], bad[2])
		}
	}
}

// TestImportanceOn checks the importance on a sequence with its own targets against central
// differences of its loss in each head's gate, normalised per layer.
func TestImportanceOn(t *testing.T) {
	m, _ := testModel(t)
	mc := m.Config()
	tokens := []int{1, 4, 2, 8, 5, 7, 3}
	T := len(tokens)
	targets := append(slices.Clone(tokens[1:]), 0)
	scored := make([]bool, T)
	for i := range T - 1 {
		scored[i] = true
	}
	imp, err := ImportanceOn(m, tokens, targets, scored, 1, T, 1)
	if err != nil {
		t.Fatal(err)
	}
	lossAt := func(l, h int, x float32) float64 {
		hos := make([]mha.HeadOptions, mc.Layers)
		for i := range hos {
			hos[i].Gate = ones(1, mc.Heads)
		}
		hos[l].Gate.Data[h] = x
		if _, err := m.Forward(tokens, 1, T, &nn.RunOptions{Heads: hos}); err != nil {
			t.Fatal(err)
		}
		loss, _, _, err := m.Loss(targets, scored)
		if err != nil {
			t.Fatal(err)
		}
		return loss
	}
	for l := range mc.Layers {
		fd := make([]float64, mc.Heads)
		norm := 0.0
		for h := range fd {
			fd[h] = math.Abs(lossAt(l, h, 1.01)-lossAt(l, h, 0.99)) / 0.02
			norm += fd[h] * fd[h]
		}
		for h := range fd {
			if want := fd[h] / math.Sqrt(norm); math.Abs(imp[l][h]-want) > 5e-3 {
				t.Errorf("layer %d head %d: importance %.4f, central difference %.4f", l, h, imp[l][h], want)
			}
		}
	}
	for _, p := range m.Params() {
		if slices.ContainsFunc(p.Grad.Data, func(x float32) bool { return x != 0 }) {
			t.Fatalf("ImportanceOn left a gradient in %s", p.Name)
		}
	}
	if _, err := ImportanceOn(m, tokens, targets, make([]bool, T), 1, T, 1); err == nil {
		t.Error("nothing scored: no error")
	}
}

// TestRepeatedScores checks RepeatedScores against the scores computed directly on a recording
// of the same sequences, and the average over batches.
func TestRepeatedScores(t *testing.T) {
	m, err := nn.NewModel(nn.Config{Vocab: 11, SeqLen: 12, DModel: 8, Heads: 2, Layers: 2, FFN: 8, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	const b, n = 3, 5
	got, err := RepeatedScores(m, 11, EvalConfig{Batches: 1, Batch: b, Seed: 4, Repeat: n})
	if err != nil {
		t.Fatal(err)
	}
	tokens := RepeatedTokens(4, b, n, 11)
	capt, err := Record(m, tokens, b, 2*n, nil)
	if err != nil {
		t.Fatal(err)
	}
	for l, w := range capt.Weights {
		dup, _, _ := DuplicateToken(w.Data, tokens, b, 2, 2*n)
		first, _ := FirstToken(w.Data, b, 2, 2*n)
		prev, _ := PrevToken(w.Data, b, 2, 2*n, 1)
		for h := range 2 {
			s := got[l*2+h]
			if s.Layer != l || s.Head != h || math.Abs(s.Duplicate-dup[h]) > 1e-12 || math.Abs(s.FirstToken-first[h]) > 1e-12 || math.Abs(s.PrevToken-prev[h]) > 1e-12 {
				t.Errorf("layer %d head %d: %+v, want duplicate %v, first %v, prev %v", l, h, s, dup[h], first[h], prev[h])
			}
			if !(s.Broad > 0 && s.Broad <= 1) || s.Offset == -1 || s.Offset == -n || s.Offset == 1-n {
				t.Errorf("layer %d head %d: broad %v, offset %d", l, h, s.Broad, s.Offset)
			}
		}
	}
	two, err := RepeatedScores(m, 11, EvalConfig{Batches: 2, Batch: b, Seed: 4, Repeat: n})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := RepeatedScores(m, 11, EvalConfig{Batches: 1, Batch: b, Seed: 5, Repeat: n})
	for i := range two {
		if want := (got[i].FirstToken + again[i].FirstToken) / 2; math.Abs(two[i].FirstToken-want) > 1e-12 {
			t.Errorf("head %d: first-token over two batches %v, want the mean %v", i, two[i].FirstToken, want)
		}
	}
	if _, err := RepeatedScores(m, 11, EvalConfig{Repeat: 7}); err == nil {
		t.Error("14 positions in a model of 12: no error")
	}
}

// TestBroadUnderMasks checks that a head whose scores are all equal (its query projection
// zeroed), which spreads its weight evenly over the keys it may see, scores Broad 1 under every
// mask: causal, a sliding window, a sparse pattern, and none.
func TestBroadUnderMasks(t *testing.T) {
	base := nn.Config{Vocab: 11, SeqLen: 12, DModel: 8, Heads: 2, Layers: 2, FFN: 8, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 3}
	window, local, both := base, base, base
	window.Window = 3
	local.Patterns, local.Block = []string{"local:1"}, []int{4, 4}
	both.Bidirectional, both.Patterns, both.Block = true, []string{"local:2"}, []int{4, 4}
	for name, cfg := range map[string]nn.Config{"causal": base, "window": window, "local": local, "bidirectional local": both} {
		m, err := nn.NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Params() {
			if strings.HasSuffix(p.Name, "attn.in_proj_weight") || strings.HasSuffix(p.Name, "attn.in_proj_bias") {
				clear(p.Value.Data[:len(p.Value.Data)/3]) // the query rows
			}
		}
		scores, err := RepeatedScores(m, 11, EvalConfig{Batches: 1, Batch: 2, Seed: 4, Repeat: 6})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scores {
			if math.Abs(s.Broad-1) > 1e-6 {
				t.Errorf("%s: layer %d head %d: broad %v, want 1", name, s.Layer, s.Head, s.Broad)
			}
		}
	}
}
