package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// runCLI runs the command line in-process and returns its exit status, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := execute(args, &out, &errb)
	return code, out.String(), errb.String()
}

// splitGolden writes a golden file's parameters and inputs as the two files a user would have,
// returning their paths.
func splitGolden(t *testing.T, f *safetensors.File) (weights, input string) {
	t.Helper()
	w, in := map[string]safetensors.Tensor{}, map[string]safetensors.Tensor{}
	for _, name := range f.Names() {
		raw, _ := f.Raw(name)
		switch {
		case slices.Contains(inputNames, name):
			in[name] = raw
		case name == "output" || strings.HasPrefix(name, "attn_weights") || strings.HasPrefix(name, "grad."):
		default:
			w[name] = raw
		}
	}
	dir := t.TempDir()
	weights, input = filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "in.safetensors")
	if err := safetensors.WriteFile(weights, w, nil); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(input, in, nil); err != nil {
		t.Fatal(err)
	}
	return weights, input
}

// TestRunAgreesWithPyTorch runs every golden case through `mha run --backward` and compares the
// written output, per-head weights and gradients with PyTorch's.
func TestRunAgreesWithPyTorch(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/golden/*.safetensors")
	if len(paths) == 0 {
		t.Fatal("no golden files")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			g, err := safetensors.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			weights, input := splitGolden(t, g)
			out := filepath.Join(t.TempDir(), "out.safetensors")
			args := []string{"run", "--weights", weights, "--input", input, "--heads", g.Metadata["num_heads"],
				"--out", out, "--need-weights", "--average-weights=false", "--backward"}
			if g.Metadata["causal"] == "true" {
				args = append(args, "--causal")
			}
			if g.Metadata["add_zero_attn"] == "true" {
				args = append(args, "--add-zero-attn")
			}
			if code, stdout, stderr := runCLI(args...); code != 0 || !strings.HasPrefix(stdout, "wrote ") {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			res, err := safetensors.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			pairs := map[string]string{"output": "output", "attn_weights": "attn_weights_per_head"}
			for _, name := range g.Names() {
				if strings.HasPrefix(name, "grad.") {
					pairs[name] = name
				}
			}
			if len(res.Names()) != len(pairs) {
				t.Errorf("wrote %s, want %d tensors", strings.Join(res.Names(), ", "), len(pairs))
			}
			for name, golden := range pairs {
				got, err := res.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				want, shape, _ := g.Float64(golden)
				if !slices.Equal(got.Shape, shape) {
					t.Errorf("%s is %v, want %v", name, got.Shape, shape)
				}
				if e := tensor.RelError(got.Data, want); e > 1e-5 {
					t.Errorf("%s: relative error %.3g against PyTorch", name, e)
				}
			}
		})
	}
}

func writeFile(t *testing.T, tensors map[string]safetensors.Tensor) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.safetensors")
	if err := safetensors.WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

func f32(shape ...int) safetensors.Tensor { return safetensors.FromFloat32(tensor.New(shape...)) }

// TestRunErrors feeds `mha run` bad flags and files and expects exit status 1 with one clear line.
func TestRunErrors(t *testing.T) {
	weights := writeFile(t, map[string]safetensors.Tensor{
		"in_proj_weight": f32(24, 8), "in_proj_bias": f32(24), "out_proj.weight": f32(8, 8), "out_proj.bias": f32(8),
	})
	input := writeFile(t, map[string]safetensors.Tensor{"query": f32(2, 5, 8)})
	garbage := filepath.Join(t.TempDir(), "garbage")
	os.WriteFile(garbage, []byte("this is not a safetensors file"), 0o644)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.safetensors")
	ok := []string{"run", "--weights", weights, "--input", input, "--heads", "2", "--out", out}
	with := func(name string, tensors map[string]safetensors.Tensor) []string {
		return []string{"run", "--weights", weights, "--input", writeFile(t, tensors), "--heads", "2", "--out", out, "--need-weights"}
	}
	mask := safetensors.FromBool(tensor.NewBool(2, 4))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--input", input, "--heads", "2", "--out", out}, "--weights is required"},
		{[]string{"run", "--weights", weights, "--heads", "2", "--out", out}, "--input is required"},
		{[]string{"run", "--weights", weights, "--input", input, "--out", out}, "--heads is required"},
		{[]string{"run", "--weights", weights, "--input", input, "--heads", "-2", "--out", out}, "--heads is -2, want"},
		{[]string{"run", "--weights", "/dev/zero", "--input", input, "--heads", "2", "--out", out}, "/dev/zero is not a regular file"},
		{[]string{"run", "--weights", weights, "--input", fifo, "--heads", "2", "--out", out}, "is not a regular file"},
		{[]string{"run", "--weights", weights, "--input", t.TempDir(), "--heads", "2", "--out", out}, "is not a regular file"},
		{[]string{"run", "--weights", weights, "--input", input, "--heads", "2", "--out", t.TempDir()}, "is a directory, want a file name"},
		{[]string{"run", "--weights", weights, "--input", input, "--heads", "2"}, "--out is required"},
		{[]string{"run", "--weights", weights, "--input", input, "--heads", "3", "--out", out}, "embed dim 8 is not divisible by num heads 3"},
		{[]string{"run", "--weights", weights, "--input", input, "--heads", "two", "--out", out}, `invalid argument "two" for "--heads"`},
		{append(slices.Clone(ok), "--average-weights=maybe"), `invalid argument "maybe"`},
		{append(slices.Clone(ok), "--bogus"), "unknown flag: --bogus"},
		{[]string{"run", "--weights", "/nonexistent.safetensors", "--input", input, "--heads", "2", "--out", out}, "no such file"},
		{[]string{"run", "--weights", garbage, "--input", input, "--heads", "2", "--out", out}, "safetensors:"},
		{[]string{"run", "--weights", input, "--input", input, "--heads", "2", "--out", out}, "no out_proj.weight"},
		{[]string{"run", "--weights", weights, "--input", input, "--heads", "2", "--out", "/nonexistent/dir/out.safetensors"}, "/nonexistent/dir"},
		{with("bad width", map[string]safetensors.Tensor{"query": f32(2, 5, 7)}), "query is [2 5 7], want [B Tq 8]"},
		{with("no query", map[string]safetensors.Tensor{"key": f32(2, 5, 8), "value": f32(2, 5, 8)}), `no tensor "query"`},
		{append(slices.Clone(ok), "--backward"), "--backward needs grad_output [B Tq E]"},
		{with("grad without --backward", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "grad_output": f32(2, 5, 8)}), "holds grad_output; pass --backward"},
		{append(with("bad grad", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "grad_output": f32(2, 4, 8)}), "--backward"), "gradOutput is [2 4 8], want [2 5 8]"},
		{with("key only", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "key": f32(2, 5, 8)}), "only one of key and value"},
		{with("typo", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "keys": f32(2, 5, 8)}), `unexpected tensor "keys"`},
		{with("bool query", map[string]safetensors.Tensor{"query": safetensors.FromBool(tensor.NewBool(2, 5, 8))}), `"query" is BOOL, want a float dtype`},
		{with("mask shape", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "key_padding_mask": mask}), "key_padding_mask is [2 4], want [2 5]"},
		{with("attn mask shape", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "attn_mask": f32(3, 5)}), "attn_bias is [3 5], want [5 5] or [4 5 5]"},
		{with("float padding", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "key_padding_mask": f32(2, 5)}), "key_padding_mask"},
		{with("int mask", map[string]safetensors.Tensor{"query": f32(2, 5, 8), "attn_mask": {DType: safetensors.I32, Shape: []int{5, 5}, Data: make([]byte, 100)}}), `"attn_mask" is I32, want BOOL or U8`},
		{[]string{"run", "extra-arg"}, `run takes no arguments, got "extra-arg"`},
		{[]string{"explain", "extra-arg"}, `explain takes no arguments`},
		{[]string{"explain", "--causal"}, `--causal applies to a case of your own`},
		{[]string{"explain", "--normalizer", "sparsemax"}, `--normalizer applies to a case of your own`},
	} {
		code, stdout, stderr := runCLI(c.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(stderr, "mha: ") || strings.Count(stderr, "mha:") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("mha %v:\n exit %d, stdout %q, stderr %q\n want exit 1 and one line saying %q", c.args[1:], code, stdout, stderr, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed run left an output file")
	}
}

// TestRunPrefix loads a layer stored inside a bigger checkpoint, with and without the prefix's
// final dot, ignoring the other layer's tensors.
func TestRunPrefix(t *testing.T) {
	g, err := safetensors.ReadFile("../../testdata/golden/self_basic.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	w, input := splitGolden(t, g)
	wf, err := safetensors.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	big := map[string]safetensors.Tensor{"layers.1.self_attn.out_proj.weight": f32(3, 3)}
	for _, name := range wf.Names() {
		big["layers.0.self_attn."+name], _ = wf.Raw(name)
		big["x"+name], _ = wf.Raw(name) // a prefix that is not a module path
	}
	weights := writeFile(t, big)
	for _, prefix := range []string{"layers.0.self_attn.", "layers.0.self_attn", "x"} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		if code, _, stderr := runCLI("run", "--weights", weights, "--prefix", prefix, "--input", input, "--heads", "2", "--out", out, "--backward"); code != 0 {
			t.Fatalf("--prefix %s: exit %d, %s", prefix, code, stderr)
		}
		res, _ := safetensors.ReadFile(out)
		full := strings.TrimSuffix(prefix, ".") + "."
		if prefix == "x" {
			full = prefix
		}
		for name, golden := range map[string]string{"output": "output", "grad." + full + "in_proj_weight": "grad.in_proj_weight"} {
			got, err := res.Float32(name)
			if err != nil {
				t.Fatalf("--prefix %s: %v", prefix, err)
			}
			want, _, _ := g.Float64(golden)
			if e := tensor.RelError(got.Data, want); e > 1e-5 {
				t.Errorf("--prefix %s: %s: relative error %.3g", prefix, name, e)
			}
		}
	}
}

// TestRunFullyMasked checks that fully masked rows are reported and written as zeros.
func TestRunFullyMasked(t *testing.T) {
	weights := writeFile(t, map[string]safetensors.Tensor{"in_proj_weight": f32(12, 4), "out_proj.weight": f32(4, 4)})
	pad := tensor.NewBool(1, 3)
	pad.Data[0], pad.Data[1], pad.Data[2] = true, true, true
	input := writeFile(t, map[string]safetensors.Tensor{"query": f32(1, 3, 4), "key_padding_mask": safetensors.FromBool(pad)})
	out := filepath.Join(t.TempDir(), "out.safetensors")
	code, _, stderr := runCLI("run", "--weights", weights, "--input", input, "--heads", "2", "--out", out)
	if code != 0 || !strings.Contains(stderr, "6 (batch, head, query) rows had no key to attend") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	f, err := safetensors.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["fully_masked_rows"] != "6" {
		t.Errorf("metadata %v, want fully_masked_rows 6", f.Metadata)
	}
}

// emptyQuery is a 70-byte input file holding only query [1 0 4], F32: a batch of one empty
// sequence, which once made `mha run` panic.
var emptyQuery, _ = hex.DecodeString("3e000000000000007b227175657279223a7b226474797065223a22463332222c227368617065223a5b312c302c345d2c22646174615f6f666673657473223a5b302c305d7d7d")

// TestRunEmpty runs empty batches, query sequences and key sequences through `mha run`: an empty
// batch or query gives an empty output and weights and zero-size gradients; no key at all gives
// every query out_proj.bias, as PyTorch does, reported as fully masked rows.
func TestRunEmpty(t *testing.T) {
	bias := tensor.New(4)
	for i := range bias.Data {
		bias.Data[i] = float32(i + 1)
	}
	weights := writeFile(t, map[string]safetensors.Tensor{
		"in_proj_weight": f32(12, 4), "in_proj_bias": f32(12), "out_proj.weight": f32(4, 4), "out_proj.bias": safetensors.FromFloat32(bias),
	})
	input := filepath.Join(t.TempDir(), "empty.safetensors")
	if err := os.WriteFile(input, emptyQuery, 0o644); err != nil || len(emptyQuery) != 70 {
		t.Fatalf("writing the 70-byte file: %v (%d bytes)", err, len(emptyQuery))
	}
	for _, c := range []struct {
		name  string
		input string
		flags []string
		want  map[string][]int // every tensor written, by shape
		note  string           // what stderr says; "" for nothing
	}{
		{"70-byte file", input, nil, map[string][]int{"output": {1, 0, 4}}, ""},
		{"70-byte file, weights", input, []string{"--need-weights"}, map[string][]int{"output": {1, 0, 4}, "attn_weights": {1, 0, 0}}, ""},
		{"70-byte file, per-head weights", input, []string{"--need-weights", "--average-weights=false"}, map[string][]int{"output": {1, 0, 4}, "attn_weights": {1, 2, 0, 0}}, ""},
		{"empty batch, backward", writeFile(t, map[string]safetensors.Tensor{"query": f32(0, 3, 4), "grad_output": f32(0, 3, 4)}), []string{"--backward", "--need-weights"},
			map[string][]int{"output": {0, 3, 4}, "attn_weights": {0, 3, 3}, "grad.query": {0, 3, 4}, "grad.in_proj_weight": {12, 4}, "grad.in_proj_bias": {12}, "grad.out_proj.weight": {4, 4}, "grad.out_proj.bias": {4}}, ""},
		{"unbatched empty query", writeFile(t, map[string]safetensors.Tensor{"query": f32(0, 4), "key_padding_mask": safetensors.FromBool(tensor.NewBool(0))}), nil, map[string][]int{"output": {0, 4}}, ""},
		{"no key", writeFile(t, map[string]safetensors.Tensor{"query": f32(1, 2, 4), "key": f32(1, 0, 4), "value": f32(1, 0, 4)}), []string{"--need-weights"},
			map[string][]int{"output": {1, 2, 4}, "attn_weights": {1, 2, 0}}, "4 (batch, head, query) rows had no key to attend"},
	} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		code, stdout, stderr := runCLI(append([]string{"run", "--weights", weights, "--input", c.input, "--heads", "2", "--out", out}, c.flags...)...)
		if code != 0 || !strings.HasPrefix(stdout, "wrote ") || (c.note == "") != (stderr == "") || !strings.Contains(stderr, c.note) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 and a note saying %q", c.name, code, stdout, stderr, c.note)
			continue
		}
		f, err := safetensors.ReadFile(out)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(f.Names()) != len(c.want) {
			t.Errorf("%s: wrote %v, want %d tensors", c.name, f.Names(), len(c.want))
		}
		for name, shape := range c.want {
			x, err := f.Float32(name)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if !slices.Equal(x.Shape, shape) {
				t.Errorf("%s: %s is %v, want %v", c.name, name, x.Shape, shape)
			}
			for i, v := range x.Data {
				if want := bias.Data[i%4]; (name == "output" && v != want) || (name != "output" && v != 0) {
					t.Errorf("%s: %s[%d] = %v, want out_proj.bias or 0", c.name, name, i, v)
					break
				}
			}
		}
	}
}

// TestExplainChapter checks the worked example's computed numbers and verdicts in every format.
func TestExplainChapter(t *testing.T) {
	code, text, stderr := runCLI("explain")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"Q_1 = X·W_1^Q: DISAGREES",
		"computed: [[0.00 1.45] [-0.95 -0.45]]",
		"computed: [[2.05 -0.50] [-0.27 0.94]]",
		"parameter count of multi-head attention (the comparison table): DISAGREES",
		"total            64",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("explain's text lacks %q", want)
		}
	}
	_, js, _ := runCLI("explain", "--format", "json")
	var ex struct {
		Steps []struct {
			Title    string
			Matrices []struct {
				Name   string
				Values [][]any
			}
		}
		Checks []struct{ Agrees bool }
	}
	if err := json.Unmarshal([]byte(js), &ex); err != nil {
		t.Fatal(err)
	}
	q := ex.Steps[2].Matrices[0]
	near := func(v any, want float64) bool { f, ok := v.(float64); return ok && math.Abs(f-want) < 1e-6 }
	if q.Name != "Q" || !near(q.Values[0][1], 1.45) || !near(q.Values[1][0], -0.95) {
		t.Errorf("JSON Q = %v %v, want Q = X·W^Q with Q[0][1] = 1.45, Q[1][0] = -0.95", q.Name, q.Values)
	}
	if len(ex.Checks) != 4 {
		t.Errorf("%d checks, want 4", len(ex.Checks))
	}
	_, md, _ := runCLI("explain", "--format", "markdown")
	if !strings.Contains(md, "## 7. Attention weights") || !strings.Contains(md, "| claim | chapter | computed | verdict |") {
		t.Error("markdown lacks its headings")
	}
}

// TestExplainOwnCase explains a golden case with masks and shows -inf for masked keys.
func TestExplainOwnCase(t *testing.T) {
	g, err := safetensors.ReadFile("../../testdata/golden/causal_key_padding.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	weights, input := splitGolden(t, g)
	code, out, stderr := runCLI("explain", "--weights", weights, "--input", input, "--heads", "2", "--causal")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"Q_2 (batch 1)", "-inf", "causal", "== 11. Parameter count =="} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q", want)
		}
	}
	if strings.Contains(out, "chapter's printed numbers") {
		t.Error("a user's case was checked against the chapter")
	}
	// With a pattern and a normalizer, the config and the weights' step say so, and the weights
	// are the normalizer's: sparsemax leaves some of them exactly 0 (a case without masks).
	g, err = safetensors.ReadFile("../../testdata/golden/self_basic.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	sw, sin := splitGolden(t, g)
	code, js, stderr := runCLI("explain", "--weights", sw, "--input", sin, "--heads", "2", "--pattern", "local:2", "--normalizer", "sparsemax", "--format", "json")
	if code != 0 {
		t.Fatalf("explain --pattern --normalizer: exit %d: %s", code, stderr)
	}
	var ex struct {
		Config config
		Steps  []struct {
			Title, Formula string
			Matrices       []struct {
				Name   string
				Values [][]any // numbers, or strings for ±inf and NaN
			}
		}
	}
	if err := json.Unmarshal([]byte(js), &ex); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ex.Config.Patterns, []string{"local:2"}) || ex.Config.Normalizer != "sparsemax" {
		t.Errorf("config %+v, want the pattern local:2 and the normalizer sparsemax", ex.Config)
	}
	zeros := 0
	for _, st := range ex.Steps {
		if st.Title != "Attention weights" {
			continue
		}
		if !strings.HasPrefix(st.Formula, "A_i = sparsemax(") {
			t.Errorf("weights' formula %q, want sparsemax's", st.Formula)
		}
		for _, m := range st.Matrices {
			for r, row := range m.Values {
				// local:2 keeps keys r−2 … r+2 of row r: the others get 0.
				for c, x := range row {
					v, ok := x.(float64)
					if !ok {
						t.Fatalf("%s[%d][%d] = %v, want a number", m.Name, r, c, x)
					}
					if v == 0 && c >= r-2 && c <= r+2 {
						zeros++
					} else if v != 0 && (c < r-2 || c > r+2) {
						t.Errorf("%s[%d][%d] = %v outside the pattern", m.Name, r, c, v)
					}
				}
			}
		}
	}
	if zeros == 0 {
		t.Error("sparsemax left no weight inside the pattern at exactly 0")
	}
	big := writeFile(t, map[string]safetensors.Tensor{"query": f32(1, 300, 8)})
	if code, _, stderr := runCLI("explain", "--weights", weights, "--input", big, "--heads", "2"); code != 1 || !strings.Contains(stderr, "use 'mha run'") {
		t.Errorf("a large case: exit %d, stderr %q", code, stderr)
	}
}

// TestExplainGroupedWideHeads explains a layer with one K/V head for two query heads of 3 in a
// model width of 4 (Q and the concatenation 6 wide, K and V 3): every head's Q, K and V block,
// the concatenation and the output equal the float64 reference's.
func TestExplainGroupedWideHeads(t *testing.T) {
	l, err := mha.New(mha.Config{EmbedDim: 4, NumHeads: 2, NumKVHeads: 1, HeadSize: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sd := map[string]safetensors.Tensor{}
	for name, p := range l.StateDict() {
		sd[name] = safetensors.FromFloat32(p)
	}
	q := tensor.New(1, 3, 4)
	tensor.NewRNG(2).Normal(q, 1)
	input := writeFile(t, map[string]safetensors.Tensor{"query": safetensors.FromFloat32(q)})
	code, js, stderr := runCLI("explain", "--weights", writeFile(t, sd), "--input", input, "--heads", "2", "--causal", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var ex struct {
		Steps []struct {
			Matrices []struct {
				Name       string
				Rows, Cols int
				Values     [][]any
			}
		}
	}
	if err := json.Unmarshal([]byte(js), &ex); err != nil {
		t.Fatal(err)
	}
	tr, err := l.Reference(q, nil, nil, &mha.Options{Causal: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		x           []float64
		off, ld, nc int
	}{
		"Q": {tr.Q, 0, 6, 6}, "K": {tr.K, 0, 3, 3}, "Concat": {tr.Concat, 0, 6, 6}, "Output": {tr.Output, 0, 4, 4},
		"Q_1": {tr.Q, 0, 6, 3}, "Q_2": {tr.Q, 3, 6, 3}, "K_1": {tr.K, 0, 3, 3}, "K_2": {tr.K, 0, 3, 3}, "V_2": {tr.V, 0, 3, 3},
		"head_2": {tr.Concat, 3, 6, 3},
	}
	seen := 0
	for _, st := range ex.Steps {
		for _, m := range st.Matrices {
			w, ok := want[m.Name]
			if !ok {
				continue
			}
			seen++
			if m.Rows != 3 || m.Cols != w.nc {
				t.Fatalf("%s is %d×%d, want 3×%d", m.Name, m.Rows, m.Cols, w.nc)
			}
			for r, row := range m.Values {
				for c, v := range row {
					if got, ok := v.(float64); !ok || math.Abs(got-w.x[r*w.ld+w.off+c]) > 1e-4 {
						t.Fatalf("%s[%d][%d] = %v, reference %.6g", m.Name, r, c, v, w.x[r*w.ld+w.off+c])
					}
				}
			}
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d matrices checked", seen, len(want))
	}
}

// TestExplainSizeFromShapes gives explain inputs too large to print, which it must refuse from
// their shapes at once (it used to compute first: a query [1, 20000, 16] ran out of memory and
// one of 10⁹ empty sequences did not end), and empty ones, which give empty matrices.
func TestExplainSizeFromShapes(t *testing.T) {
	weights := filepath.Join("..", "..", "testdata", "sample", "attn.safetensors") // d_model 16
	explainOf := func(query, key []int) (int, string, string) {
		t.Helper()
		tensors := map[string]safetensors.Tensor{"query": f32(query...)}
		if key != nil {
			tensors["key"], tensors["value"] = f32(key...), f32(key...)
		}
		in := writeFile(t, tensors)
		type result struct {
			code           int
			stdout, stderr string
		}
		done := make(chan result, 1)
		go func() {
			code, stdout, stderr := runCLI("explain", "--weights", weights, "--input", in, "--heads", "2", "--format", "json")
			done <- result{code, stdout, stderr}
		}()
		select {
		case r := <-done:
			return r.code, r.stdout, r.stderr
		case <-time.After(10 * time.Second):
			t.Fatalf("explain of query %v, key %v: no answer after 10 s", query, key)
			return 0, "", ""
		}
	}
	for _, c := range []struct {
		query []int
		want  string
	}{
		{[]int{1, 20000, 16}, "matrices of 400000000 values in 2 batch×head blocks"},
		{[]int{1000000000, 0, 16}, "matrices of 256 values in 2000000000 batch×head blocks"},
		{[]int{0, 1 << 40, 16}, "matrices of 1208925819614629174706176 values in 0 batch×head blocks"},
	} {
		code, stdout, stderr := explainOf(c.query, nil)
		want := "mha: explain prints every value, and this case has " + c.want + " (at most 20000 and 64); use 'mha run' for large inputs\n"
		if code != 1 || stdout != "" || stderr != want {
			t.Errorf("query %v: exit %d, stdout %q, stderr %q; want 1 and %q", c.query, code, stdout, stderr, want)
		}
	}
	for _, c := range []struct {
		query, key         []int
		b, tq, tk, outRows int
	}{
		{[]int{0, 5, 16}, nil, 0, 5, 5, 0},
		{[]int{1, 0, 16}, nil, 1, 0, 0, 0},
		{[]int{2, 0, 16}, []int{2, 3, 16}, 2, 0, 3, 0},
		{[]int{1, 3, 16}, []int{1, 0, 16}, 1, 3, 0, 3},
	} {
		code, stdout, stderr := explainOf(c.query, c.key)
		var ex struct {
			Config config
			Steps  []struct {
				Title    string
				Matrices []struct{ Rows, Cols int }
			}
		}
		if err := json.Unmarshal([]byte(stdout), &ex); code != 0 || err != nil {
			t.Fatalf("query %v, key %v: exit %d, %v, stderr %q", c.query, c.key, code, err, stderr)
		}
		if cf := ex.Config; cf.Batch != c.b || cf.Tq != c.tq || cf.Tk != c.tk {
			t.Errorf("query %v, key %v: config %+v, want batch %d, tq %d, tk %d", c.query, c.key, cf, c.b, c.tq, c.tk)
		}
		out := ex.Steps[len(ex.Steps)-2] // Output, one matrix per batch
		if out.Title != "Output" || len(out.Matrices) != c.b || c.b > 0 && (out.Matrices[0].Rows != c.outRows || out.Matrices[0].Cols != 16) {
			t.Errorf("query %v, key %v: step %q with %+v, want %d matrices [%d×16]", c.query, c.key, out.Title, out.Matrices, c.b, c.outRows)
		}
	}
}

// FuzzRunInput runs `mha run` on arbitrary input files: it must answer with exit 0 or with exit
// 1 and one line on stderr, never a panic.
func FuzzRunInput(f *testing.F) {
	dir := f.TempDir()
	weights := filepath.Join(dir, "w.safetensors")
	w := map[string]safetensors.Tensor{"in_proj_weight": f32(12, 4), "out_proj.weight": f32(4, 4)}
	if err := safetensors.WriteFile(weights, w, nil); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []map[string]safetensors.Tensor{
		{"query": f32(1, 3, 4)},
		{"query": f32(3, 4), "key": f32(2, 4), "value": f32(2, 4)},
		{"query": f32(2, 3, 4), "key_padding_mask": safetensors.FromBool(tensor.NewBool(2, 3)), "attn_mask": f32(3, 3)},
	} {
		b, err := safetensors.Encode(seed, nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(emptyQuery)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := filepath.Join(t.TempDir(), "in.safetensors")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI("run", "--weights", weights, "--input", in, "--heads", "2", "--out", filepath.Join(t.TempDir(), "o"))
		if code != 0 && (code != 1 || strings.Count(stderr, "\n") != 1) {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
}

// TestRunHalfWeights checks that mha run keeps bfloat16 and float16 weights as they are and
// gives the bits of the float32 weights holding the same values.
func TestRunHalfWeights(t *testing.T) {
	g, err := safetensors.ReadFile("../../testdata/golden/self_basic.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	w, input := splitGolden(t, g)
	wf, err := safetensors.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []tensor.HalfFormat{tensor.BFloat16, tensor.Float16} {
		half, rounded := map[string]safetensors.Tensor{}, map[string]safetensors.Tensor{}
		for _, name := range wf.Names() {
			x, err := wf.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			h := &tensor.Half{Shape: x.Shape, Data: make([]uint16, len(x.Data)), Format: format}
			if format == tensor.BFloat16 {
				kernel.EncodeBF16(h.Data, x.Data)
				kernel.DecodeBF16(x.Data, h.Data)
			} else {
				kernel.EncodeF16(h.Data, x.Data)
				kernel.DecodeF16(x.Data, h.Data)
			}
			half[name], rounded[name] = safetensors.FromHalf(h), safetensors.FromFloat32(x)
		}
		var outs [2]*tensor.Tensor
		for i, weights := range []string{writeFile(t, half), writeFile(t, rounded)} {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			if code, _, stderr := runCLI("run", "--weights", weights, "--input", input, "--heads", "2", "--out", out, "--backward"); code != 0 {
				t.Fatalf("%v: exit %d, %s", format, code, stderr)
			}
			res, err := safetensors.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if outs[i], err = res.Float32("output"); err != nil {
				t.Fatal(err)
			}
		}
		for i := range outs[0].Data {
			if outs[0].Data[i] != outs[1].Data[i] {
				t.Fatalf("%v weights: output[%d] = %v, want %v as with their float32 values", format, i, outs[0].Data[i], outs[1].Data[i])
			}
		}
	}
}

// TestRunSparse checks mha run --pattern and --normalizer against the layer run with the same
// options, and their errors.
func TestRunSparse(t *testing.T) {
	g, err := safetensors.ReadFile("../../testdata/golden/self_basic.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	weights, input := splitGolden(t, g)
	l, _, err := loadLayer(weights, "", 2, false, false, func(string, error) {})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := safetensors.ReadFile(input)
	q, _ := in.Float32("query")
	out := filepath.Join(t.TempDir(), "out.safetensors")
	if code, _, stderr := runCLI("run", "--weights", weights, "--input", input, "--heads", "2", "--out", out, "--backward",
		"--pattern", "local:1", "--pattern", "global:0", "--block", "2,2", "--normalizer", "sparsemax", "--causal"); code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	res, _ := safetensors.ReadFile(out)
	got, _ := res.Float32("output")
	want, err := l.Forward(q, nil, nil, &mha.Options{Causal: true, Block: [2]int{2, 2}, Normalizer: &mha.Normalizer{Kind: mha.Sparsemax},
		Patterns: []mha.Pattern{{Kind: mha.PatternLocal, Width: 1}, {Kind: mha.PatternGlobal, Positions: []int{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Data, want.Output.Data) {
		t.Error("mha run --pattern --normalizer differs from the layer's Forward")
	}
	zf, err := res.Float32("zero_fraction")
	if err != nil || len(zf.Data) != 2 || float64(zf.Data[0]) != float64(float32(want.ZeroFraction[0])) || float64(zf.Data[1]) != float64(float32(want.ZeroFraction[1])) {
		t.Errorf("zero_fraction %v (%v), want the layer's %v", zf, err, want.ZeroFraction)
	}
	if code, _, stderr := runCLI("run", "--weights", weights, "--input", input, "--heads", "2", "--out", out, "--backward", "--normalizer", "topk:0"); code != 1 || !strings.Contains(stderr, "topk:0") {
		t.Errorf("--normalizer topk:0: exit %d, %s", code, stderr)
	}
}
