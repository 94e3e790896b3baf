package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mhalab/mha/lab"
)

// TestEvalMatchesLab checks that `mha eval` and the lab's task view print the same
// previous-token, prefix-matching and ground-truth score for every head of a shipped model: one
// definition, measured on the same sequences by the same function.
func TestEvalMatchesLab(t *testing.T) {
	code, stdout, stderr := runCLI("eval", "--task", "induction", "--json")
	if code != 0 {
		t.Fatalf("mha eval: exit %d: %s", code, stderr)
	}
	type scores struct {
		Layer          int      `json:"layer"`
		Head           int      `json:"head"`
		PrevToken      *float64 `json:"prev_token"`
		PrefixMatching *float64 `json:"prefix_matching"`
		GroundTruth    *float64 `json:"ground_truth"`
	}
	var eval struct {
		Heads []scores `json:"heads"`
	}
	if err := json.Unmarshal([]byte(stdout), &eval); err != nil {
		t.Fatalf("mha eval --json: %v\n%s", err, stdout)
	}

	s, err := lab.New(lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/api/heads", strings.NewReader(`{"model": "induction"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/api/heads: %d %s", rec.Code, rec.Body)
	}
	var page struct {
		About string   `json:"about"`
		Heads []scores `json:"heads"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Heads) != len(eval.Heads) || len(eval.Heads) == 0 {
		t.Fatalf("the lab has %d heads, eval %d", len(page.Heads), len(eval.Heads))
	}
	if !strings.Contains(page.About, "random tokens repeated once") || !strings.Contains(page.About, "mha eval") {
		t.Errorf("the lab does not say which sequences its scores are on: %q", page.About)
	}
	for i, e := range eval.Heads {
		p := page.Heads[i]
		for _, c := range []struct {
			name   string
			ev, lb *float64
		}{{"prev-token", e.PrevToken, p.PrevToken}, {"prefix-matching", e.PrefixMatching, p.PrefixMatching}, {"ground truth", e.GroundTruth, p.GroundTruth}} {
			if c.ev == nil || c.lb == nil || *c.ev != *c.lb {
				t.Errorf("L%d H%d %s: eval %v, lab %v", e.Layer, e.Head, c.name, deref(c.ev), deref(c.lb))
			}
		}
	}
	// The shipped induction model's layer-1 heads are induction heads by this measure.
	best := 0.0
	for _, e := range eval.Heads {
		if e.Layer == 1 && *e.PrefixMatching > best {
			best = *e.PrefixMatching
		}
	}
	if best < 0.8 {
		t.Errorf("best layer-1 prefix-matching score %.3f, want ≥ 0.8", best)
	}
}

// deref returns *x, or nil, for messages.
func deref(x *float64) any {
	if x == nil {
		return nil
	}
	return *x
}
