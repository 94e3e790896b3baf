package experiment

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// TestSparseTraining checks the quick sparse experiment's training comparison: one model per
// variant, the softmax first, each trained for the same steps with the variant's normalizer and
// patterns in its config; the accuracy in [0, 1] and the loss finite; weights exactly 0 on every
// head of the sparse normalizers and on none under the softmax; patterns that see fewer pairs
// than dense attention. Training again on one worker gives the same numbers, the times aside.
func TestSparseTraining(t *testing.T) {
	res := run(t, "sparse")
	d := res.Data.(*SparseData)
	if len(d.Trained) != len(sparseVariants) || d.Trained[0].Variant != "softmax" || d.TrainTask != "induction" {
		t.Fatalf("task %q, variants %v", d.TrainTask, d.Trained)
	}
	if !slices.ContainsFunc(res.Pictures, func(f Figure) bool { return f.Name == "trained-zeros" }) {
		t.Error("no trained-zeros figure")
	}
	steps := len(d.Trained[0].Curve.Loss)
	for i, st := range d.Trained {
		v, c := sparseVariants[i], st.Config
		if c.Normalizer != v.normalizer || !slices.Equal(c.Patterns, v.patterns) {
			t.Errorf("%s: the model's normalizer %q and patterns %v, want %q and %v", st.Variant, c.Normalizer, c.Patterns, v.normalizer, v.patterns)
		}
		if len(st.Curve.Loss) != steps || steps == 0 || len(st.Zeros) != c.Layers*c.Heads {
			t.Fatalf("%s: %d steps (the softmax's %d), %d zero fractions for %d×%d heads", st.Variant, len(st.Curve.Loss), steps, len(st.Zeros), c.Layers, c.Heads)
		}
		if !(st.Accuracy >= 0 && st.Accuracy <= 1) || math.IsNaN(float64(st.Loss)) || math.IsInf(float64(st.Loss), 0) || st.Loss < 0 {
			t.Errorf("%s: accuracy %v, loss %v", st.Variant, st.Accuracy, st.Loss)
		}
		if want := len(v.patterns) == 0; (st.Density == 1) != want || !(st.Density > 0 && st.Density <= 1) {
			t.Errorf("%s: density %v", st.Variant, st.Density)
		}
		for h, z := range st.Zeros {
			if sparse := v.normalizer != ""; sparse && !(z > 0 && z < 1) || !sparse && z != 0 {
				t.Errorf("%s, head %s: %v of the visible weights are 0", st.Variant, headName(c, h), z)
			}
		}
	}
	one := &SparseData{}
	if err := sparseTraining(context.Background(), Config{Seed: 1, Quick: true, Workers: 1}, one, &Result{}); err != nil {
		t.Fatal(err)
	}
	for i := range one.Trained {
		one.Trained[i].Seconds, d.Trained[i].Seconds = 0, 0
	}
	if !reflect.DeepEqual(one.Trained, d.Trained) {
		t.Error("one worker trained other models than GOMAXPROCS")
	}
}

// TestAttentionZeros checks the zeros and density of attentionZeros on models whose visible
// pairs are known: under top-k with a local window, query i sees min(i, W) + 1 keys and top-k
// drops all but k of them; the softmax drops none.
func TestAttentionZeros(t *testing.T) {
	const b, seqLen, w, k = 2, 16, 5, 3
	rng := tensor.NewRNG(3)
	tokens := make([]int, b*seqLen)
	for i := range tokens {
		tokens[i] = int(rng.Float64() * 16)
	}
	visible, zeros, causal := 0, 0, 0
	for i := range seqLen {
		n := min(i, w) + 1
		visible, zeros, causal = visible+n, zeros+max(0, n-k), causal+i+1
	}
	for _, norm := range []string{"topk:3", ""} {
		c := nn.Config{Vocab: 16, SeqLen: seqLen, DModel: 16, Heads: 2, Layers: 2, AttnOnly: true, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 1,
			Normalizer: norm, Patterns: []string{"local:5"}, Block: []int{4, 4}}
		m, err := nn.NewModel(c)
		if err != nil {
			t.Fatal(err)
		}
		got, density, err := attentionZeros(m, tokens, b, seqLen, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(zeros) / float64(visible)
		if norm == "" {
			want = 0
		}
		if len(got) != c.Layers*c.Heads || density != float64(visible)/float64(causal) {
			t.Errorf("%q: %d heads, density %v, want %d and %v", norm, len(got), density, c.Layers*c.Heads, float64(visible)/float64(causal))
		}
		for h, z := range got {
			if z != want {
				t.Errorf("%q, head %s: zeros %v, want %v", norm, headName(c, h), z, want)
			}
		}
	}
}
