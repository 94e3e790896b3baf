package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// run runs the named experiment in its quick form and checks what every Result must have: its
// name, a title and summary, a table whose rows fit its columns, pictures that render as PNG
// and SVG, and Data that encodes as JSON.
func run(t *testing.T, name string) *Result {
	t.Helper()
	res, err := Run(context.Background(), name, Config{Seed: 1, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != name || res.Title == "" || res.Summary == "" || len(res.Table.Rows) == 0 {
		t.Fatalf("result %q: title %q, summary %q, %d rows", res.Name, res.Title, res.Summary, len(res.Table.Rows))
	}
	for i, row := range res.Table.Rows {
		if len(row) != len(res.Table.Columns) {
			t.Errorf("row %d has %d cells for %d columns", i, len(row), len(res.Table.Columns))
		}
	}
	seen := map[string]bool{}
	for _, f := range res.Pictures {
		if f.Name == "" || seen[f.Name] {
			t.Errorf("figure name %q is empty or repeated", f.Name)
		}
		seen[f.Name] = true
		var png, svg bytes.Buffer
		if err := f.Picture.PNG(&png); err != nil {
			t.Errorf("figure %s: PNG: %v", f.Name, err)
		}
		if err := f.Picture.SVG(&svg); err != nil {
			t.Errorf("figure %s: SVG: %v", f.Name, err)
		}
	}
	b, err := json.Marshal(res)
	if err != nil || !bytes.Contains(b, []byte(`"data":{`)) {
		t.Errorf("JSON: %v\n%.200s", err, b)
	}
	return res
}

// TestRunErrors checks the errors of Run: an unknown name lists the experiments.
func TestRunErrors(t *testing.T) {
	_, err := Run(context.Background(), "nope", Config{})
	if err == nil || err.Error() != `experiment: unknown experiment "nope", want one of `+strings.Join(Names(), ", ") {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := Run(context.Background(), "params", Config{Workers: -1}); err == nil || !strings.Contains(err.Error(), "workers -1") {
		t.Errorf("negative workers: %v", err)
	}
	// Steps and Model go only to the experiments that use them, before anything runs.
	for _, name := range []string{"params", "averaging", "routing", "specialisation", "circuits"} {
		if _, err := Run(context.Background(), name, Config{Steps: 5}); err == nil || !strings.Contains(err.Error(), "takes no steps (those that train: heads-vs-dim, mi-penalty, scaling, sparse)") {
			t.Errorf("%s with steps: %v", name, err)
		}
	}
	for _, name := range []string{"params", "averaging", "heads-vs-dim", "mi-penalty", "routing", "scaling", "circuits"} {
		if _, err := Run(context.Background(), name, Config{Model: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "not a given one (those that take one: sparse, specialisation)") {
			t.Errorf("%s with a model: %v", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range Names() {
		if _, err := Run(ctx, name, Config{Quick: true}); err != context.Canceled {
			t.Errorf("%s with a cancelled context: error %v, want context.Canceled", name, err)
		}
	}
	if !slices.Contains(Names(), "routing") {
		t.Errorf("names %v lack routing", Names())
	}
	for _, name := range Names() {
		if About(name) == "" {
			t.Errorf("%s has no description", name)
		}
	}
	if About("nope") != "" {
		t.Errorf("About(nope) = %q, want \"\"", About("nope"))
	}
}

// TestSpecialisation checks the roles on the shipped models whose heads are known — the
// prev-token model's heads look at the previous token, the induction model has induction heads —
// and that the verdict follows the layers' mean |ρ_ij|; and that --model runs a Hugging Face
// folder.
func TestSpecialisation(t *testing.T) {
	res, err := Specialisation(context.Background(), Config{Quick: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	data := res.Data.(*SpecialisationData)
	count := func(m SpecialisedModel, role string) int {
		n := 0
		for _, h := range m.Heads {
			if h.Role == role {
				n++
			}
		}
		return n
	}
	seen := map[string]bool{}
	for _, m := range data.Models {
		seen[m.Name] = true
		low := true
		for _, l := range m.Layers {
			low = low && float64(l.MeanAbs) < lowRho
		}
		if low != m.LowCorrelation {
			t.Errorf("%s: low correlation %v, but the layers' mean |ρ| say %v", m.Name, m.LowCorrelation, low)
		}
		for _, h := range m.Heads {
			for name, s := range h.Scores {
				if v := float64(s); !(v >= 0 && v <= 1.000001) {
					t.Errorf("%s %d.%d: %s score %v outside [0, 1]", m.Name, h.Layer, h.Head, name, v)
				}
			}
		}
		switch m.Name {
		case "prev-token":
			if count(m, "previous-token") == 0 {
				t.Errorf("prev-token: no previous-token head: %+v", m.Heads)
			}
		case "induction":
			if count(m, "induction") == 0 {
				t.Errorf("induction: no induction head: %+v", m.Heads)
			}
		}
	}
	if !seen["prev-token"] || !seen["induction"] {
		t.Fatalf("models measured: %v", seen)
	}
	res, err = Specialisation(context.Background(), Config{Quick: true, Model: "../testdata/pretrained/gpt2"})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Data.(*SpecialisationData).Models; len(m) != 1 || len(m[0].Heads) != 2*4 {
		t.Errorf("gpt2 folder: %d models, want 1 with 8 heads", len(m))
	}
	if _, err := Specialisation(context.Background(), Config{Model: "../testdata/pretrained/none"}); err == nil {
		t.Error("a missing folder: no error")
	}
}
