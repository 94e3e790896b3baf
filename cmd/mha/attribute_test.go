package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestAttributeJSON checks mha attribute --json on a tiny GPT-2 and Llama folder and the shipped
// induction model: the parts sum to LD, the shapes are the model's, and the induction heads of
// layer 1 write the repeated token.
func TestAttributeJSON(t *testing.T) {
	for _, tc := range []struct {
		model, text, target, foil string
		layers, heads             int
	}{
		{pretrainedDir("gpt2"), "the cat sat", "Ġthe", "#7", 2, 4},
		{pretrainedDir("llama"), "the cat", "#40", "▁t", 2, 4},
		{"induction", "BOS 5 9 2 14 7 5 9 2", "14", "7", 2, 4},
	} {
		code, stdout, stderr := runCLI("attribute", "--model", tc.model, "--text", tc.text, "--target", tc.target, "--foil", tc.foil, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", tc.model, code, stderr)
		}
		var got struct {
			LD, Sum, Embed, Bias   float64
			NormBias               float64   `json:"norm_bias"`
			HeadBias               float64   `json:"head_bias"`
			AttnBias               []float64 `json:"attn_bias"`
			Heads                  [][]float64
			MLP                    []float64
			Tokens                 []int
			Target, Foil, Position int
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("%s: %v in %s", tc.model, err, stdout)
		}
		if len(got.Heads) != tc.layers || len(got.Heads[0]) != tc.heads || len(got.MLP) != tc.layers || len(got.AttnBias) != tc.layers {
			t.Fatalf("%s: heads %v, mlp %v, attn_bias %v, want %d×%d", tc.model, got.Heads, got.MLP, got.AttnBias, tc.layers, tc.heads)
		}
		sum := got.Embed + got.Bias
		for l := range got.Heads {
			for _, v := range got.Heads[l] {
				sum += v
			}
			sum += got.MLP[l] + got.AttnBias[l]
		}
		if math.Abs(sum-got.LD) > 1e-4*max(1, math.Abs(got.LD)) || math.Abs(got.Sum-sum) > 1e-9 || math.Abs(got.Bias-got.NormBias-got.HeadBias) > 1e-12 {
			t.Errorf("%s: parts sum to %v, sum %v, LD %v", tc.model, sum, got.Sum, got.LD)
		}
		if got.Position != len(got.Tokens)-1 {
			t.Errorf("%s: position %d, want the last of %d tokens", tc.model, got.Position, len(got.Tokens))
		}
		if tc.model == "induction" {
			for h, v := range got.Heads[1] {
				if v < 0.5 {
					t.Errorf("induction: head 1.%d writes %v for the repeated token, want > 0.5", h, v)
				}
			}
		}
	}
}

// TestAttributeTable checks the table's rows and the sum line.
func TestAttributeTable(t *testing.T) {
	code, stdout, stderr := runCLI("attribute", "--model", "induction", "--text", "BOS 5 9 2 14 7 5 9 2", "--target", "14", "--foil", "#7")
	if code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	for _, want := range []string{"LD = logit(\"14\" #14) − logit(\"7\" #7) = 11.38", "head 3", "attn bias", "embed ", "bias ", "sum   11.38"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output has no %q:\n%s", want, stdout)
		}
	}
}

// TestAttributeErrors checks that bad flags and a post-norm model are errors that say so.
func TestAttributeErrors(t *testing.T) {
	base := []string{"attribute", "--model", "induction", "--text", "BOS 5 9 2", "--target", "14", "--foil", "7"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attribute", "--text", "BOS 1", "--target", "1", "--foil", "2"}, "--model is required"},
		{[]string{"attribute", "--model", "induction", "--target", "1", "--foil", "2"}, "--text is required"},
		{[]string{"attribute", "--model", "induction", "--text", "BOS 1", "--foil", "2"}, "--target is required"},
		{[]string{"attribute", "--model", "induction", "--text", "BOS 1", "--target", "2"}, "--foil is required"},
		{append(base[:6:6], "zz", "--foil", "7"), "--target"},
		{append(base[:8:8], "#99"), "--foil"},
		{append(base, "--position", "4"), "--position 4"},
		{[]string{"attribute", "--model", "induction", "--text", "BOS 5 zz", "--target", "1", "--foil", "2"}, "--text"},
		{[]string{"attribute", "--model", "no-such-model", "--text", "x", "--target", "1", "--foil", "2"}, "induction"},
		{[]string{"attribute", "--model", pretrainedDir("bert"), "--text", "the cat [MASK]", "--target", "cat", "--foil", "dog"}, "post-norm"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want an error mentioning %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestCleanIsText checks that mha attribute and mha lens take mha patch's --clean for --text.
func TestCleanIsText(t *testing.T) {
	for _, args := range [][]string{
		{"attribute", "--model", "induction", "--target", "14", "--foil", "7", "--json"},
		{"lens", "--model", "induction", "--json"},
	} {
		_, text, _ := runCLI(append(args, "--text", "BOS 5 9 2 14 7 5 9 2")...)
		code, clean, stderr := runCLI(append(args, "--clean", "BOS 5 9 2 14 7 5 9 2")...)
		if code != 0 || clean != text || text == "" {
			t.Errorf("%s --clean: exit %d (%s), output %q, want --text's %q", args[0], code, stderr, clean, text)
		}
	}
}
