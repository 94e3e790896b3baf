package experiment

import (
	"testing"
)

// TestCircuits checks the circuits experiment on the shipped induction model: patching finds
// the previous-token head 0.1 under the match corruption and layer-1 heads under the copy
// corruption, and ablating the top heads hurts the task more than ablating as many random ones,
// down to near chance once the previous-token head and every induction head are gone.
func TestCircuits(t *testing.T) {
	res := run(t, "circuits")
	data := res.Data.(*CircuitsData)
	if len(data.Corruptions) != 2 {
		t.Fatalf("%d corruptions, want 2", len(data.Corruptions))
	}
	match, cp := data.Corruptions[0], data.Corruptions[1]
	if s := float64(match.Heads[0][1]); s < 0.8 {
		t.Errorf("match corruption: the previous-token head 0.1 scores %.3f, want ≥ 0.8", s)
	}
	if top := data.Top[0]; top != (HeadRef{0, 1}) {
		t.Errorf("top head %v, want 0.1", top)
	}
	for h, s := range cp.Heads[0] {
		if float64(s) > 0.1 {
			t.Errorf("copy corruption: layer-0 head %d scores %.3f, want < 0.1 (the induction heads copy)", h, s)
		}
	}
	var layer1 float64
	for _, s := range cp.Heads[1] {
		layer1 += float64(s)
	}
	if layer1 < 0.5 {
		t.Errorf("copy corruption: the layer-1 heads score %.3f in all, want ≥ 0.5", layer1)
	}
	if data.Base.Accuracy < 0.99 {
		t.Errorf("intact accuracy %.3f, want ≥ 0.99", data.Base.Accuracy)
	}
	for _, a := range data.Ablations {
		if a.K <= 5 && a.Top.Accuracy >= float64(a.RandomAccuracy) {
			t.Errorf("k = %d: top heads ablated %.3f, random %.3f; want the top lower", a.K, a.Top.Accuracy, float64(a.RandomAccuracy))
		}
		if a.K == 5 && (a.Top.Accuracy > 0.2 || float64(a.RandomAccuracy) < 0.25) {
			t.Errorf("k = 5: top heads ablated %.3f, want ≤ 0.2; random %.3f, want ≥ 0.25", a.Top.Accuracy, float64(a.RandomAccuracy))
		}
	}
}
