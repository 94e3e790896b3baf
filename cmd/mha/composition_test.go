package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompositionJSON(t *testing.T) {
	code, out, errs := runCLI("composition", "--model", "induction", "--top", "3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Layers, Heads int
		Baseline      float64
		Pairs         []struct {
			From, To int
			Q, K, V  [][]float64
		}
		Strongest []struct {
			Mode  string
			Score float64
		}
		Subspaces []struct {
			Kind    string
			Overlap [][]float64
			Verdict struct{ Class, Text string }
		}
		Circuits []struct {
			Layer, Head int
			OV, QK      []struct {
				Row, Col int
				Value    float64
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Layers != 2 || rep.Heads != 4 || len(rep.Pairs) != 1 || len(rep.Pairs[0].K) != 4 || len(rep.Pairs[0].K[0]) != 4 {
		t.Fatalf("sizes: %+v", rep)
	}
	if !(rep.Baseline > 0 && rep.Baseline < 1) {
		t.Errorf("baseline %v", rep.Baseline)
	}
	for _, tab := range [][][]float64{rep.Pairs[0].Q, rep.Pairs[0].K, rep.Pairs[0].V} {
		for _, row := range tab {
			for _, s := range row {
				if !(s >= 0 && s <= 1) {
					t.Errorf("score %v outside [0, 1]", s)
				}
			}
		}
	}
	if len(rep.Strongest) != 9 || len(rep.Subspaces) != 8 || len(rep.Circuits) != 8 || len(rep.Circuits[0].OV) != 3 {
		t.Errorf("%d strongest, %d subspaces, %d circuits; want 9, 8, 8", len(rep.Strongest), len(rep.Subspaces), len(rep.Circuits))
	}
	// The previous-token head L0H1 K-composes most with layer 1 (the induction mechanism).
	var raw map[string]any
	_ = json.Unmarshal([]byte(out), &raw)
	first := raw["strongest"].([]any)[3].(map[string]any)
	if first["mode"] != "K" || first["from_layer"] != 0.0 || first["from_head"] != 1.0 {
		t.Errorf("strongest K-composition %v, want from L0H1", first)
	}
	if c := raw["circuits"].([]any)[0].(map[string]any)["ov"].([]any)[0].(map[string]any); c["row_token"] == "" || c["col_token"] == "" {
		t.Errorf("token pair without tokens: %v", c)
	}
}

func TestCompositionText(t *testing.T) {
	code, out, errs := runCLI("composition", "--model", filepath.Join("..", "..", "testdata", "pretrained", "llama"), "--top", "2", "--raw")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"raw weights (--raw)", "layer 0 → layer 1", "  K         H0", "strongest", "k read", "o write", "chapter 003", "L1H3 QK:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI("composition", "--model", "modadd")
	if code != 0 || !strings.Contains(out, "one layer, no pairs of layers") {
		t.Errorf("one-layer model: exit %d\n%s", code, out)
	}
}

func TestCompositionErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"composition"}, "--model is required"},
		{[]string{"composition", "--model", "induction", "--top", "0"}, "--top is 0"},
		{[]string{"composition", "--model", "no-such-model"}, "shipped models"},
	} {
		code, _, errs := runCLI(tc.args...)
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestCompositionHugeTop gives --top far above the 32² token pairs of a head's circuit: the
// output is that of --top 1024, every pair, and nothing is allocated for the pairs that do not
// exist.
func TestCompositionHugeTop(t *testing.T) {
	code, all, errs := runCLI("composition", "--model", "induction", "--top", "1024", "--json")
	if code != 0 {
		t.Fatalf("--top 1024: exit %d: %s", code, errs)
	}
	var rep struct {
		Circuits []struct{ OV, QK []json.RawMessage }
	}
	if err := json.Unmarshal([]byte(all), &rep); err != nil || len(rep.Circuits) != 8 || len(rep.Circuits[0].OV) != 1024 || len(rep.Circuits[0].QK) != 1024 {
		t.Fatalf("--top 1024: %v, %+v; want 8 heads of 1024 OV and QK pairs", err, rep)
	}
	code, huge, errs := runCLI("composition", "--model", "induction", "--top", "1000000000000", "--json")
	if code != 0 || huge != all {
		t.Errorf("--top 1000000000000: exit %d, stderr %q, output equal to --top 1024's: %t; want 0 and the same output", code, errs, huge == all)
	}
}
