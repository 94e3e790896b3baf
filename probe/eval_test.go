package probe

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/tasks"
)

// TestEvaluateMemoryBound checks that a batch the count limit allows but memory does not (2²⁰
// sequences of the sort task, tens of GiB) is refused before anything is allocated, with the
// estimate and the largest batch that fits, and that this batch is accepted.
func TestEvaluateMemoryBound(t *testing.T) {
	m, _, err := models.Open("sort")
	if err != nil {
		t.Fatal(err)
	}
	task, err := tasks.New("sort", tasks.Config{})
	if err != nil {
		t.Fatal(err)
	}
	huge := tasks.MaxBatchAttn / (task.SeqLen() * task.SeqLen()) // the most the task allows
	_, err = Evaluate(m, task, EvalConfig{Batch: huge})
	want := regexp.MustCompile(fmt.Sprintf(`^probe: a batch of %d sequences of 16 tokens needs about ([0-9.]+) GiB \(the activations, the attention weights \[B, 4, T, T\] of 2 layers, the logits \[B, T, \d+\]\), more than the limit of 2 GiB; use a batch of at most (\d+) \(and more batches\)$`, huge))
	match := want.FindStringSubmatch(fmt.Sprint(err))
	if match == nil {
		t.Fatalf("batch %d: %v, want it refused with the estimate", huge, err)
	}
	if gib, _ := strconv.ParseFloat(match[1], 64); gib < 10 {
		t.Errorf("estimate %s GiB for %d sequences, want ≥ 10", match[1], huge)
	}
	most, _ := strconv.Atoi(match[2])
	if _, err := (EvalConfig{Batch: most}).resolve(m, task); err != nil {
		t.Errorf("batch %d, the most that fits: %v", most, err)
	}
	if _, err := (EvalConfig{Batch: most + 1}).resolve(m, task); err == nil || !strings.Contains(err.Error(), "more than the limit") {
		t.Errorf("batch %d, one more than fits: %v", most+1, err)
	}
	if _, err := (EvalConfig{Batch: math.MaxInt}).resolve(m, task); err == nil || !strings.Contains(err.Error(), "more than the limit") {
		t.Errorf("batch MaxInt: %v", err)
	}
}

// TestRepeatedScoresMemoryBound checks that RepeatedScores refuses a batch that needs more than
// MaxBatchBytes before it draws a token, with the estimate and the largest batch that fits, as
// Evaluate does.
func TestRepeatedScoresMemoryBound(t *testing.T) {
	m, _, err := models.Open("induction")
	if err != nil {
		t.Fatal(err)
	}
	mc := m.Config()
	fit := int(MaxBatchBytes / mc.ForwardBytes(1, 8, true))
	for _, b := range []int{1_000_000_000, fit + 1, math.MaxInt} {
		_, err := RepeatedScores(m, mc.Vocab, EvalConfig{Batch: b, Repeat: 4})
		want := fmt.Sprintf(`^probe: a batch of %d sequences of 8 tokens needs about [0-9.]+ GiB \(the activations, the attention weights \[B, %d, T, T\] of %d layers, the logits \[B, T, %d\]\), more than the limit of 2 GiB; use a batch of at most %d \(and more batches\)$`,
			b, mc.Heads, mc.Layers, mc.Vocab, fit)
		if !regexp.MustCompile(want).MatchString(fmt.Sprint(err)) {
			t.Errorf("batch %d: %v, want it refused with the estimate and a batch of at most %d", b, err, fit)
		}
	}
}
