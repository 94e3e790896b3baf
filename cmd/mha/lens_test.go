package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/mhalab/mha/lab"
)

// TestLensJSON checks mha lens --json: a layer more than the model has, the last layer's top
// token at every position is the model's own prediction, probabilities fall with rank, and the
// target's rank at the last layer agrees with the top tokens; on GPT-2, Llama, BERT folders and
// the shipped induction model.
func TestLensJSON(t *testing.T) {
	for _, tc := range []struct{ model, text, target string }{
		{pretrainedDir("gpt2"), "the cat sat", "Ġthe"},
		{pretrainedDir("llama"), "the cat", "▁t"},
		{pretrainedDir("bert"), "the cat [MASK] on the mat", "sat"},
		{"induction", "BOS 5 9 2 14 7 5 9 2", "14"},
	} {
		code, stdout, stderr := runCLI("lens", "--model", tc.model, "--text", tc.text, "--top", "4", "--target", tc.target, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", tc.model, code, stderr)
		}
		var got struct {
			Tokens []int
			Pieces []string
			Layers [][][]struct {
				ID          int
				Piece       string
				Logit, Prob float64
			}
			Target struct {
				ID, Position int
				Rank         []int
				Prob         []float64
			}
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("%s: %v in %s", tc.model, err, stdout)
		}
		m, err := lab.Open(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Net().Config()
		if len(got.Layers) != c.Layers+1 || len(got.Layers[0]) != len(got.Tokens) || len(got.Pieces) != len(got.Tokens) || len(got.Layers[0][0]) != 4 {
			t.Fatalf("%s: %d layers × %d positions × %d tokens, want %d × %d × 4", tc.model, len(got.Layers), len(got.Layers[0]), len(got.Layers[0][0]), c.Layers+1, len(got.Tokens))
		}
		logits, err := m.Net().Forward(got.Tokens, 1, len(got.Tokens), nil)
		if err != nil {
			t.Fatal(err)
		}
		last := got.Layers[c.Layers]
		for p, top := range last {
			row := logits.Data[p*c.Vocab:][:c.Vocab]
			if d := math.Abs(float64(row[top[0].ID]) - top[0].Logit); d > 1e-4 {
				t.Errorf("%s, position %d: the lens's top logit %v, the model's %v", tc.model, p, top[0].Logit, row[top[0].ID])
			}
			for _, x := range row {
				if float64(x) > top[0].Logit+1e-4 {
					t.Errorf("%s, position %d: a logit %v beats the lens's top %v", tc.model, p, x, top[0].Logit)
				}
			}
			for i := 1; i < len(top); i++ {
				if top[i].Prob > top[i-1].Prob {
					t.Errorf("%s, position %d: probabilities rise with rank: %v", tc.model, p, top)
				}
			}
			if top[0].Piece != m.Piece(top[0].ID) {
				t.Errorf("%s: piece %q of %d, want %q", tc.model, top[0].Piece, top[0].ID, m.Piece(top[0].ID))
			}
		}
		tg := got.Target
		if len(tg.Rank) != c.Layers+1 || tg.Position != m.Position(got.Tokens) {
			t.Fatalf("%s: target %+v", tc.model, tg)
		}
		for i, pr := range last[tg.Position] {
			if (pr.ID == tg.ID) != (tg.Rank[c.Layers] == i) {
				t.Errorf("%s: target %d ranked %d, top tokens %v", tc.model, tg.ID, tg.Rank[c.Layers], last[tg.Position])
			}
		}
	}
}

// TestLensTable checks the table's header of quoted tokens and its layers.
func TestLensTable(t *testing.T) {
	code, stdout, stderr := runCLI("lens", "--model", "induction", "--text", "BOS 5 9 2 14 7 5 9 2", "--top", "2", "--target", "14")
	if code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	if !strings.HasPrefix(lines[0], `layer  "BOS"`) || !strings.HasPrefix(lines[5], "2 ") || !strings.Contains(lines[5], `"14" 1.000`) {
		t.Errorf("the table:\n%s", stdout)
	}
	if !strings.Contains(stdout, `"14" (#14) at position 8`) {
		t.Errorf("no target section:\n%s", stdout)
	}
}

// TestLensErrors checks that bad flags are errors that say so.
func TestLensErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lens", "--text", "BOS 1"}, "--model is required"},
		{[]string{"lens", "--model", "induction"}, "--text is required"},
		{[]string{"lens", "--model", "induction", "--text", "BOS 1", "--top", "0"}, "--top 0"},
		{[]string{"lens", "--model", "induction", "--text", "BOS 1", "--top", "33"}, "--top 33"},
		{[]string{"lens", "--model", "induction", "--text", "BOS 1", "--target", "zz"}, "--target"},
		{[]string{"lens", "--model", "induction", "--text", "BOS zz"}, "--text"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want an error mentioning %q", tc.args, code, stderr, tc.want)
		}
	}
}
