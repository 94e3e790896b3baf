package models_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
)

// TestShippedModels evaluates every shipped model on fresh sequences of its task and checks the
// targets README.md promises: ≥ 99% sequence accuracy, a previous-token head with α(t, t−1) ≥
// 0.95, and an induction head (layer 1) with a prefix-matching score ≥ 0.8.
func TestShippedModels(t *testing.T) {
	if got := models.Names(); !slices.Equal(got, tasks.Names()) {
		t.Fatalf("shipped models for %v, want one per task %v", got, tasks.Names())
	}
	for _, name := range models.Names() {
		t.Run(name, func(t *testing.T) {
			m, meta, err := models.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			if want := "mha train --task " + name + " "; !strings.HasPrefix(meta["command"], want) {
				t.Errorf("command %q, want it to start with %q", meta["command"], want)
			}
			task, err := tasks.New(name, tasks.Config{})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := probe.Evaluate(m, task, probe.EvalConfig{Batches: 2, Batch: 64, Seed: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			if rep.SeqAccuracy < 0.99 {
				t.Errorf("sequence accuracy %.4f, want ≥ 0.99", rep.SeqAccuracy)
			}
			best := func(layer int, score func(probe.Head) float64) float64 {
				b := 0.0
				for _, h := range rep.Heads {
					if h.Layer == layer {
						b = max(b, score(h))
					}
				}
				return b
			}
			truth := func(h probe.Head) float64 { return float64(h.GroundTruth) }
			switch name {
			case "prev-token":
				if s := best(0, truth); s < 0.95 {
					t.Errorf("best α(t, t−1) %.3f, want ≥ 0.95", s)
				}
			case "induction":
				prefix := func(h probe.Head) float64 { return float64(*h.PrefixMatching) }
				if s := best(1, prefix); s < 0.8 {
					t.Errorf("best layer-1 prefix-matching score %.3f, want ≥ 0.8", s)
				}
			}
		})
	}
	if _, _, err := models.Open("chess"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("want one of %s", strings.Join(tasks.Names(), ", "))) {
		t.Errorf("Open(chess): %v", err)
	}
}
