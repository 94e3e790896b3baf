package models_test

import (
	"fmt"
	"log"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/train"
)

// ExampleOpen evaluates the shipped induction model on its task, rebuilt from the checkpoint's
// metadata, and names the heads that do the induction (prefix-matching above one half).
func ExampleOpen() {
	m, meta, err := models.Open("induction")
	if err != nil {
		log.Fatal(err)
	}
	task, err := train.TaskOf("induction", meta)
	if err != nil {
		log.Fatal(err)
	}
	r, err := probe.Evaluate(m, task, probe.EvalConfig{Batches: 1, Batch: 16, Seed: probe.EvalSeed})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Describe())
	fmt.Printf("accuracy %.2f on %d positions\n", r.Accuracy, r.Positions)
	for _, h := range r.Heads {
		if h.PrefixMatching != nil && *h.PrefixMatching > 0.5 {
			fmt.Printf("L%dH%d induction head\n", h.Layer, h.Head)
		}
	}
	// Output:
	// induction: BOS, 8 to 16 distinct tokens from 30, the same tokens again; predict the repeat
	// accuracy 1.00 on 180 positions
	// L1H0 induction head
	// L1H1 induction head
	// L1H2 induction head
	// L1H3 induction head
}
