package main

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhalab/mha/lab"
)

// TestViz draws every kind of picture as PNG and SVG with `mha viz` and checks that each file is
// a valid image holding exactly what the lab's /api/picture answers for the same choices.
func TestViz(t *testing.T) {
	srv, err := lab.New(lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--model", "modadd", "--seed", "3", "--kind", "head", "--layer", "0", "--head", "2"},
		{"--model", "sort", "--text", "3 1 2 SEP 1 2", "--ablate", "0.1.zero,1.3.uniform", "--kind", "grid"},
		{"--model", "sort", "--tokens", "3,1,2,10,1,2", "--kind", "similarity", "--layer", "0", "--metric", "rho"},
		{"--model", "modadd", "--kind", "pruning", "--metric", "loss"},
		{"--model", "modadd", "--kind", "importance"},
		{"--model", "induction", "--clean", "BOS 4 9 13 7 22 4 9 13 7", "--corrupt", "BOS 4 9 13 7 18 4 9 13 7", "--target", "22", "--foil", "#18", "--kind", "patching"},
		{"--model", "induction", "--clean", "BOS 4 9 13 7 22 4 9 13 7", "--corrupt", "BOS 4 9 13 7 18 4 9 13 7", "--target", "22", "--foil", "18", "--position", "9", "--kind", "patching-residual"},
		{"--model", "induction", "--kind", "composition", "--mode", "v"},
	} {
		query := url.Values{}
		for i := 0; i < len(args); i += 2 {
			query.Set(strings.TrimPrefix(args[i], "--"), args[i+1])
		}
		t.Run(query.Get("model")+"-"+query.Get("kind"), func(t *testing.T) {
			t.Parallel()
			for _, format := range []string{"png", "svg"} {
				out := filepath.Join(dir, query.Get("model")+"-"+query.Get("kind")+"."+format)
				code, stdout, stderr := runCLI(append([]string{"viz", "--out", out}, args...)...)
				if code != 0 || stdout != "wrote "+out+"\n" {
					t.Fatalf("mha viz %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
				}
				got, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if format == "png" {
					img, err := png.Decode(bytes.NewReader(got))
					if err != nil || img.Bounds().Dx() == 0 || img.Bounds().Dy() == 0 {
						t.Fatalf("%s: not a PNG with pixels (%v)", out, err)
					}
				} else if err := xml.Unmarshal(got, new(struct{})); err != nil || !bytes.Contains(got, []byte("<svg")) {
					t.Fatalf("%s: not an SVG document (%v)", out, err)
				}
				query.Set("format", format)
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest("GET", "/api/picture?"+query.Encode(), nil))
				if w.Code != http.StatusOK || !bytes.Equal(got, w.Body.Bytes()) {
					t.Fatalf("mha viz %v: the %s file (%d bytes) differs from /api/picture's answer (status %d, %d bytes)", args, format, len(got), w.Code, w.Body.Len())
				}
			}
		})
	}
}

// tinyGPT2 is the tiny GPT-2 folder of the pretrained package's tests.
var tinyGPT2 = filepath.Join("..", "..", "testdata", "pretrained", "gpt2")

// TestVizUserModel draws pictures of a Hugging Face folder's model on a text with `mha viz
// --model DIR`: the files are the lab's /api/picture answers for the same model added with
// --model, byte for byte.
func TestVizUserModel(t *testing.T) {
	srv, err := lab.New(lab.Options{Models: []string{tinyGPT2}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--kind", "head", "--layer", "1", "--head", "0"},
		{"--kind", "rollout"},
		{"--kind", "offsets", "--layer", "0", "--head", "3", "--ablate", "1.1.zero"},
	} {
		query := url.Values{"model": {"gpt2"}, "text": {"The cat sat"}, "format": {"svg"}}
		for i := 0; i < len(args); i += 2 {
			query.Set(strings.TrimPrefix(args[i], "--"), args[i+1])
		}
		out := filepath.Join(dir, query.Get("kind")+".svg")
		code, stdout, stderr := runCLI(append([]string{"viz", "--model", tinyGPT2, "--text", "The cat sat", "--out", out}, args...)...)
		if code != 0 || stdout != "wrote "+out+"\n" {
			t.Fatalf("mha viz %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest("GET", "/api/picture?"+query.Encode(), nil))
		if w.Code != http.StatusOK || !bytes.Equal(got, w.Body.Bytes()) {
			t.Fatalf("mha viz %v: the file (%d bytes) differs from /api/picture's answer (status %d: %.200s)", args, len(got), w.Code, w.Body.String())
		}
	}
}

// TestVizErrors gives `mha viz` bad flags: each ends with exit status 1, one line on stderr
// saying what was wrong, and no file.
func TestVizErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.png")
	head := []string{"viz", "--model", "induction", "--kind", "head", "--layer", "1", "--head", "2", "--out", out}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"viz", "--kind", "grid", "--seed", "1", "--out", out}, `required flag(s) "model" not set`},
		{[]string{"viz", "--model", "induction", "--seed", "1", "--out", out}, `required flag(s) "kind" not set`},
		{[]string{"viz", "--model", "chess", "--kind", "grid", "--seed", "1", "--out", out}, `unknown model "chess"; want one of brackets, induction`},
		{[]string{"viz", "--model", "induction", "--kind", "pie", "--seed", "1", "--out", out}, `kind "pie"; want head, grid, similarity, rollout, offsets, pruning, importance`},
		{head, "give the sequence as exactly one of text (symbols), tokens (ids) or seed"},
		{append(head, "--seed", "1", "--text", "BOS 1"), "got 2 of them"},
		{append(head, "--seed", "-1"), `seed "-1"; want a whole number`},
		{append(head, "--text", "BOS 1 cat"), `symbol "cat" at position 2 is not in the vocabulary of induction`},
		{append(head, "--tokens", "1,x"), `tokens: item 1 is "x"`},
		{append(head, "--seed", "1", "--ablate", "1.2"), `ablate: item 0 is "1.2"; want LAYER.HEAD.MODE`},
		{append(head, "--seed", "1", "--ablate", "1.2.half"), `ablate[0]: mode "half", want zero, mean or uniform`},
		{[]string{"viz", "--model", "induction", "--kind", "head", "--seed", "1", "--layer", "2", "--head", "0", "--out", out}, `layer "2"; want a whole number from 0 to 1`},
		{[]string{"viz", "--model", "induction", "--kind", "head", "--seed", "1", "--layer", "0", "--out", out}, `head missing; want a whole number from 0 to 3`},
		{[]string{"viz", "--model", "induction", "--kind", "similarity", "--seed", "1", "--layer", "0", "--out", out}, `metric missing; want rho, js, nmi`},
		{[]string{"viz", "--model", "induction", "--kind", "similarity", "--seed", "1", "--layer", "0", "--metric", "mse", "--out", out}, `metric "mse"; want rho, js, nmi`},
		{[]string{"viz", "--model", "induction", "--kind", "similarity", "--seed", "1", "--layer", "0", "--metric", "js", "--scope", "all", "--out", out}, `scope "all"; want sequence or task`},
		{[]string{"viz", "--model", "induction", "--kind", "similarity", "--ablate", "0.0.zero", "--layer", "0", "--metric", "js", "--scope", "task", "--out", out}, `parameter "ablate" does not apply to kind=similarity with scope=task`},
		{[]string{"viz", "--model", "induction", "--kind", "pruning", "--metric", "rho", "--out", out}, `metric "rho"; want accuracy or loss`},
		{[]string{"viz", "--model", "induction", "--kind", "pruning", "--seed", "1", "--out", out}, `"seed" does not apply to kind=pruning`},
		{[]string{"viz", "--model", "induction", "--kind", "grid", "--seed", "1", "--layer", "0", "--out", out}, `"layer" does not apply to kind=grid`},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", filepath.Join(dir, "out.gif")}, `ends in ".gif", want a file name ending in .png or .svg`},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", filepath.Join(dir, "out")}, `ends in "", want a file name ending in .png or .svg`},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", out, "--format", "svg"}, `--format is svg but --out`},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", out, "--format", "jpeg"}, `--format is "jpeg", want png or svg`},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", filepath.Join(dir, "no", "such", "dir.png")}, "no such file or directory"},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", out, "--colour", "red"}, "unknown flag: --colour"},
		{[]string{"viz", "--model", "induction", "--kind", "importance", "--out", out, "extra"}, `viz takes no arguments, got "extra"`},
		{[]string{"viz", "--model", tinyGPT2, "--kind", "pruning", "--out", out}, "model gpt2 has no task; kind=pruning is measured on the task's sequences"},
		{[]string{"viz", "--model", tinyGPT2, "--kind", "grid", "--seed", "1", "--out", out}, "model gpt2 has no task, so no seed sequences"},
		{[]string{"viz", "--model", tinyGPT2, "--kind", "grid", "--text", strings.Repeat("cat ", 10), "--out", out}, "the sequence has 40 tokens, want 1 to 16 (the seq_len of gpt2)"},
		{[]string{"viz", "--model", "induction", "--kind", "patching", "--clean", "BOS 1 2 1", "--corrupt", "BOS 1 2", "--target", "2", "--foil", "3", "--out", out}, "the clean prompt has 4 tokens (BOS 1 2 1), the corrupted one 3 (BOS 1 2); want the same number"},
		{[]string{"viz", "--model", "induction", "--kind", "patching", "--clean", "BOS 1 2 1", "--corrupt", "BOS 3 2 1", "--target", "2", "--out", out}, "kind=patching needs clean, corrupt, target and foil; foil missing"},
		{[]string{"viz", "--model", "induction", "--kind", "attribution", "--clean", "BOS 1 2 1", "--corrupt", "BOS 3 2 1", "--target", "2", "--foil", "cat", "--out", out}, `foil: token "cat" is not a symbol of induction`},
		{[]string{"viz", "--model", "induction", "--kind", "composition", "--mode", "o", "--out", out}, `mode "o"; want q, k or v`},
		{[]string{"viz", "--model", "induction", "--kind", "composition", "--seed", "1", "--out", out}, `"seed" does not apply to kind=composition`},
	} {
		code, stdout, stderr := runCLI(c.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(stderr, "mha: ") || strings.Count(stderr, "mha:") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("mha %v:\n exit %d, stdout %q, stderr %q\n want exit 1 and one line saying %q", c.args[1:], code, stdout, stderr, c.want)
		}
	}
	if files, _ := os.ReadDir(dir); len(files) > 0 {
		t.Errorf("failed runs left %s", files[0].Name())
	}
}
