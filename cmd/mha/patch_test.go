package main

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestPatchJSON checks mha patch --json on the tiny GPT-2 and BERT folders: exactly the keys
// ld_clean, ld_corrupt and heads (a layers × heads grid), residual and patterns only when asked
// for, and the text output's numbers.
func TestPatchJSON(t *testing.T) {
	for _, tc := range []struct {
		name, clean, corrupt, target, foil string
	}{
		{"gpt2", "the cat sat on the", "the dog sat on the", "Ġt", "#5"},
		{"bert", "the cat sat on the [MASK]", "the dog sat on the [MASK]", "mat", "dog"},
		{"llama", "the cat sat", "the dog sat", "#40", "#41"},
	} {
		args := []string{"patch", "--model", pretrainedDir(tc.name), "--clean", tc.clean, "--corrupt", tc.corrupt, "--target", tc.target, "--foil", tc.foil}
		code, stdout, stderr := runCLI(append(args, "--json")...)
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", tc.name, code, stderr)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
			t.Fatalf("%s: %v in %s", tc.name, err, stdout)
		}
		keys := make([]string, 0, len(raw))
		for k := range raw {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"heads", "ld_clean", "ld_corrupt"}) {
			t.Errorf("%s: keys %v, want heads, ld_clean, ld_corrupt", tc.name, keys)
		}
		var rep struct {
			LDClean   float64     `json:"ld_clean"`
			LDCorrupt float64     `json:"ld_corrupt"`
			Heads     [][]float64 `json:"heads"`
			Residual  [][]float64 `json:"residual"`
			Patterns  [][]float64 `json:"patterns"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Heads) != 2 || len(rep.Heads[0]) != 4 || rep.LDClean == rep.LDCorrupt {
			t.Errorf("%s: heads %d × %d, LD %v and %v", tc.name, len(rep.Heads), len(rep.Heads[0]), rep.LDClean, rep.LDCorrupt)
		}
		code, stdout, stderr = runCLI(append(args, "--json", "--residual", "--patterns")...)
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", tc.name, code, stderr)
		}
		heads := rep.Heads
		rep.Heads = nil
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Residual) != 3 || len(rep.Patterns) != 2 {
			t.Errorf("%s: residual %d rows, patterns %d, want 3 and 2", tc.name, len(rep.Residual), len(rep.Patterns))
		}
		last := rep.Residual[2]
		if pos := slices.IndexFunc(last, func(x float64) bool { return math.Abs(x-1) < 1e-4 }); pos < 0 {
			t.Errorf("%s: no position of the last layer's output scores 1: %v", tc.name, last)
		}
		for l := range heads {
			for h := range heads[l] {
				if math.Abs(heads[l][h]-rep.Heads[l][h]) > 1e-9 {
					t.Errorf("%s: head %d.%d scores %v alone, %v with the other grids", tc.name, l, h, heads[l][h], rep.Heads[l][h])
				}
			}
		}
		code, stdout, stderr = runCLI(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", tc.name, code, stderr)
		}
		for _, want := range []string{"LD_clean", "LD_corrupt", " layer      h0      h1      h2      h3\n     0 ", "\n     1 "} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: text output lacks %q:\n%s", tc.name, want, stdout)
			}
		}
	}
}

// TestPatchShipped checks mha patch on a shipped model, whose prompts are its task's symbols.
func TestPatchShipped(t *testing.T) {
	code, stdout, stderr := runCLI("patch", "--model", "induction", "--clean", "BOS 3 7 9 12 4 3 7 9", "--corrupt", "BOS 3 7 11 12 4 3 7 9",
		"--target", "12", "--foil", "11", "--residual")
	if code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	for _, want := range []string{"model induction, 9 tokens", "LD_clean", "residual:", "   out "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestPatchCLIErrors checks that mha patch's errors say what was expected and what came.
func TestPatchCLIErrors(t *testing.T) {
	gpt2 := pretrainedDir("gpt2")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clean", "a", "--corrupt", "b", "--target", "a", "--foil", "b"}, "--model is required"},
		{[]string{"--model", gpt2, "--corrupt", "b", "--target", "a", "--foil", "b"}, "--clean is required"},
		{[]string{"--model", gpt2, "--clean", "the cat", "--corrupt", "the", "--target", "a", "--foil", "b"}, "the clean prompt has 6 tokens (t he Ġ c a t), the corrupted 2 (t he); want the same length"},
		{[]string{"--model", gpt2, "--clean", "the cat", "--corrupt", "the dog", "--target", "#9999", "--foil", "b"}, "--target: token \"#9999\""},
		{[]string{"--model", gpt2, "--clean", "the cat", "--corrupt", "the dog", "--target", "a", "--foil", "nope"}, "--foil: token \"nope\""},
		{[]string{"--model", gpt2, "--clean", "the cat", "--corrupt", "the cat", "--target", "a", "--foil", "b"}, "do not differ"},
		{[]string{"--model", gpt2, "--clean", "the cat", "--corrupt", "the dog", "--target", "a", "--foil", "b", "--position", "9"}, "--position 9, want 0 to 5"},
		{[]string{"--model", "nope", "--clean", "x", "--corrupt", "y", "--target", "a", "--foil", "b"}, "induction"},
		{[]string{"--model", "induction", "--clean", "BOS 3", "--corrupt", "BOS x", "--target", "3", "--foil", "4"}, "--corrupt:"},
	} {
		code, _, stderr := runCLI(append([]string{"patch"}, tc.args...)...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want one containing %q", tc.args, code, stderr, tc.want)
		}
	}
}
