// Package experiment runs the chapters' experiments on multi-head attention, each as a function
// that measures something the chapters claim and returns a Result: a table, a summary, pictures
// and the numbers behind them. Every number in a Result is computed by the run; none is typed in.
// `mha experiment NAME` prints them and the lab shows them.
package experiment

import (
	"context"
	"fmt"
	"strings"

	"github.com/mhalab/mha/viz"
)

// Config says how to run an experiment. The zero value is the full experiment from seed 0 on
// GOMAXPROCS goroutines.
type Config struct {
	// Seed seeds every random draw of the run (initialisations, inputs, batches); the same Seed
	// gives the same Result.
	Seed uint64
	// Workers bounds the goroutines of the passes; 0 means GOMAXPROCS. Results do not depend on it.
	Workers int
	// Quick shrinks the experiment (fewer draws, fewer steps) for tests and the lab: the same
	// measurements with wider error bars.
	Quick bool
	// Steps overrides the number of training steps of the experiments that train (0: the
	// experiment's default): heads-vs-dim, mi-penalty, scaling and sparse. Run refuses it for
	// the others.
	Steps int
	// Model, when not empty, is a model to measure instead of the shipped ones: a Hugging Face
	// folder or a checkpoint of mha train (pretrained.OpenPath), for the experiments that
	// measure models, sparse and specialisation. Run refuses it for the others.
	Model string
}

// Result is what an experiment found.
type Result struct {
	Name    string `json:"name"`    // the experiment's name, one of Names()
	Title   string `json:"title"`   // one line: what it measures and which chapter claims it
	Summary string `json:"summary"` // what the numbers show, in a few sentences with the key numbers
	Table   Table  `json:"table"`
	// Pictures are the experiment's heatmaps and charts; JSON leaves them out.
	Pictures []Figure `json:"-"`
	// Data holds the measurements behind the table as numbers (a struct of the experiment's own,
	// documented with it), for JSON and for programs. A measurement that can be NaN or ±Inf (a
	// correlation of constant outputs, an evaluation) is a jsonnum.Number, null in JSON.
	Data any `json:"data"`
}

// Table is a table of text cells: Rows[i] has one cell per column.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Figure is a picture with a short name, unique within its Result, that can name a file
// ("weights", "variance").
type Figure struct {
	Name    string
	Picture viz.Picture
}

// experiments lists the experiments by name, in the order Names returns them, each with one
// line on what it measures and whether it takes Config.Steps and Config.Model.
var experiments = []struct {
	name, about  string
	run          func(context.Context, Config) (*Result, error)
	steps, model bool
}{
	{"params", "chapter 000: the parameter count formula against the built layer", Params, false, false},
	{"averaging", "chapter 002: the variance of the mean of H heads against σ²/H", Averaging, false, false},
	{"heads-vs-dim", "chapter 000: h = 1 … 16 heads at fixed d_model, trained on one task", HeadsDim, true, false},
	{"mi-penalty", "chapter 002: training with a penalty on the heads' mutual information", MIPenalty, true, false},
	{"routing", "chapter 002: d_model = 4, two heads that each route one feature", Routing, false, false},
	{"scaling", "chapter 002: heads of d_k = 32 and 128 under three logit scales", Scaling, true, false},
	{"sparse", "chapters 002 and 004: sparse patterns' error, dropped mass and time against density; O(T·s·d); a model trained with each normalizer and pattern", Sparse, true, true},
	{"specialisation", "chapters 000 and 004: each head's role and the ρ_ij between heads, on the shipped models or --model", Specialisation, false, true},
	{"circuits", "issue 16: activation patching and ablation find the heads the shipped induction model needs", Circuits, false, false},
}

// Names returns the names of the experiments.
func Names() []string {
	names := make([]string, len(experiments))
	for i, e := range experiments {
		names[i] = e.name
	}
	return names
}

// About returns one line saying what the named experiment measures, or "" for an unknown name.
func About(name string) string {
	for _, e := range experiments {
		if e.name == name {
			return e.about
		}
	}
	return ""
}

// Run runs the named experiment. It returns an error when the name is unknown (listing the
// known ones), when cfg is out of range (a negative Workers or Steps) or gives Steps or Model
// to an experiment that does not take them, or when the experiment fails or ctx is done before
// it ends.
func Run(ctx context.Context, name string, cfg Config) (*Result, error) {
	if cfg.Workers < 0 || cfg.Steps < 0 {
		return nil, fmt.Errorf("experiment: workers %d and steps %d, want both ≥ 0 (0: the default)", cfg.Workers, cfg.Steps)
	}
	for _, e := range experiments {
		if e.name != name {
			continue
		}
		switch {
		case cfg.Steps != 0 && !e.steps:
			return nil, fmt.Errorf("experiment: %s trains nothing, so it takes no steps (those that train: %s)", name, strings.Join(takers(func(steps, _ bool) bool { return steps }), ", "))
		case cfg.Model != "" && !e.model:
			return nil, fmt.Errorf("experiment: %s measures its own models, not a given one (those that take one: %s)", name, strings.Join(takers(func(_, model bool) bool { return model }), ", "))
		}
		return e.run(ctx, cfg)
	}
	return nil, fmt.Errorf("experiment: unknown experiment %q, want one of %s", name, strings.Join(Names(), ", "))
}

// takers returns the names of the experiments for which takes(steps, model) is true.
func takers(takes func(steps, model bool) bool) []string {
	var names []string
	for _, e := range experiments {
		if takes(e.steps, e.model) {
			names = append(names, e.name)
		}
	}
	return names
}
