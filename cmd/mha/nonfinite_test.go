package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
)

// withNaN returns t with a copy of its data whose F32 value i is NaN.
func withNaN(t safetensors.Tensor, i int) safetensors.Tensor {
	t.Data = slices.Clone(t.Data)
	binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(float32(math.NaN())))
	return t
}

// nanCheckpoint writes a small model for the sort task to dir, and the same with one NaN in
// blocks.0.attn.in_proj_weight, and returns the two paths.
func nanCheckpoint(t *testing.T, dir string) (good, bad string) {
	t.Helper()
	task, err := tasks.New("sort", tasks.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(nn.Config{Vocab: task.Vocab(), SeqLen: task.SeqLen(), DModel: 8, Heads: 2, Layers: 1, AttnOnly: true, Norm: nn.PreNorm, Positions: nn.Learned})
	if err != nil {
		t.Fatal(err)
	}
	good, bad = filepath.Join(dir, "good.safetensors"), filepath.Join(dir, "nan.safetensors")
	if err := nn.Save(good, m, nil, nil); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]safetensors.Tensor{}
	for _, name := range f.Names() {
		tensors[name], _ = f.Raw(name)
	}
	tensors["blocks.0.attn.in_proj_weight"] = withNaN(tensors["blocks.0.attn.in_proj_weight"], 13)
	if err := safetensors.WriteFile(bad, tensors, f.Metadata); err != nil {
		t.Fatal(err)
	}
	return good, bad
}

// TestEvalNonFinite evaluates a checkpoint with one NaN weight: refused, naming the tensor and
// the flag that loads it anyway; with --allow-nonfinite, evaluated with a warning, NaN in the
// table and null in valid JSON.
func TestEvalNonFinite(t *testing.T) {
	good, bad := nanCheckpoint(t, t.TempDir())
	eval := []string{"eval", "--task", "sort", "--batches", "1", "--batch", "4"}
	const named = `tensor "blocks.0.attn.in_proj_weight" [24 8]: 1 of 192 values is not finite: NaN at [1 5] (index 13)`

	code, stdout, stderr := runCLI(append(eval, "--checkpoint", bad)...)
	if code != 1 || stdout != "" || !strings.Contains(stderr, named) || !strings.Contains(stderr, "pass --allow-nonfinite") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("NaN checkpoint: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the tensor", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(append(eval, "--checkpoint", bad, "--allow-nonfinite")...)
	if code != 0 || !strings.Contains(stdout, "loss NaN") || !strings.HasPrefix(stderr, "mha: warning: "+bad+": "+named) {
		t.Errorf("--allow-nonfinite: exit %d, stdout %q, stderr %q; want loss NaN and a warning naming the tensor", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(append(eval, "--checkpoint", bad, "--allow-nonfinite", "--json")...)
	var rep map[string]any
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("--allow-nonfinite --json: exit %d, %v, stdout %q, stderr %q", code, err, stdout, stderr)
	}
	if loss, ok := rep["loss"]; !ok || loss != nil || !strings.Contains(stderr, named) {
		t.Errorf("--json: loss %v (present %v), stderr %q; want null and the warning", loss, ok, stderr)
	}

	if code, _, stderr := runCLI(append(eval, "--checkpoint", good, "--allow-nonfinite")...); code != 0 || stderr != "" {
		t.Errorf("finite checkpoint with --allow-nonfinite: exit %d, stderr %q", code, stderr)
	}
}

// TestRunNonFinite runs a layer on an input with a NaN (a warning on stderr naming the tensor,
// exit 0, and no warning when the run fails: an error is one line) and with a NaN in its weights
// (an error naming it, or with --allow-nonfinite a warning).
func TestRunNonFinite(t *testing.T) {
	g, err := safetensors.ReadFile("../../testdata/golden/self_basic.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// write writes the tensors names of g to dir/file, with a NaN in value 3 of tensor nan
	// unless nan is "", and returns the path.
	write := func(file string, names []string, nan string) string {
		tensors := map[string]safetensors.Tensor{}
		for _, n := range names {
			if tensors[n], err = g.Raw(n); err != nil {
				t.Fatal(err)
			}
		}
		if nan != "" {
			tensors[nan] = withNaN(tensors[nan], 3)
		}
		path := filepath.Join(dir, file)
		if err := safetensors.WriteFile(path, tensors, nil); err != nil {
			t.Fatal(err)
		}
		return path
	}
	params := []string{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}
	weights, badWeights := write("w.safetensors", params, ""), write("nan-w.safetensors", params, "out_proj.bias")
	input, badInput := write("in.safetensors", []string{"query"}, ""), write("nan-in.safetensors", []string{"query"}, "query")
	run := func(weights, input string, extra ...string) (int, string, string) {
		out := filepath.Join(dir, "out.safetensors")
		return runCLI(append([]string{"run", "--weights", weights, "--input", input, "--heads", g.Metadata["num_heads"], "--out", out}, extra...)...)
	}

	if code, stdout, stderr := run(weights, input); code != 0 || stderr != "" {
		t.Fatalf("finite files: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr := run(weights, badInput)
	if code != 0 || !strings.HasPrefix(stdout, "wrote ") || !strings.HasPrefix(stderr, "mha: warning: "+badInput+`: tensor "query" [`) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("NaN in the input: exit %d, stdout %q, stderr %q; want exit 0 and one warning naming query", code, stdout, stderr)
	}
	withGrad := write("nan-in-grad.safetensors", []string{"query", "grad_output"}, "query")
	if code, _, stderr := run(weights, withGrad); code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "pass --backward") {
		t.Errorf("NaN in the input of a failing run: exit %d, stderr %q; want exit 1 and only the error's line", code, stderr)
	}
	// A float attn_mask: −Inf masks a pair (no warning), NaN or +Inf makes its row NaN.
	q, _ := g.Float32("query")
	tq := q.Shape[len(q.Shape)-2]
	for _, c := range []struct {
		value float32
		warn  bool
	}{{float32(math.Inf(-1)), false}, {float32(math.NaN()), true}, {float32(math.Inf(1)), true}} {
		mask := make([]float32, tq*tq)
		mask[1] = c.value
		path := filepath.Join(dir, "mask.safetensors")
		tensors := map[string]safetensors.Tensor{"attn_mask": safetensors.FromFloat32(&tensor.Tensor{Shape: []int{tq, tq}, Data: mask})}
		tensors["query"], _ = g.Raw("query")
		if err := safetensors.WriteFile(path, tensors, nil); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := run(weights, path)
		want := fmt.Sprintf(`mha: warning: %s: tensor "attn_mask" [%d %d]: 1 of %d values is NaN or +Inf, the first %v at index 1`, path, tq, tq, tq*tq, c.value)
		if code != 0 || strings.HasPrefix(stderr, want) != c.warn || !c.warn && stderr != "" {
			t.Errorf("attn_mask with %v: exit %d, stderr %q; want exit 0 and a warning %v", c.value, code, stderr, c.warn)
		}
	}

	// A float64 weight beyond float32's range: the error says the file's value was finite.
	bias, _ := g.Float32("out_proj.bias")
	wide := make([]float64, len(bias.Data))
	wide[2] = 1e300
	f64, err := safetensors.FromFloat64(wide, bias.Shape)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]safetensors.Tensor{"out_proj.bias": f64}
	for _, n := range params[:3] {
		tensors[n], _ = g.Raw(n)
	}
	wideWeights := filepath.Join(dir, "f64-w.safetensors")
	if err := safetensors.WriteFile(wideWeights, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(wideWeights, input); code != 1 || !strings.Contains(stderr, "+Inf at [2] (index 2): the file holds 1e+300 there, beyond float32's range") {
		t.Errorf("a float64 weight of 1e300: exit %d, stderr %q; want exit 1 saying the file's value", code, stderr)
	}

	code, _, stderr = run(badWeights, input)
	if code != 1 || !strings.Contains(stderr, badWeights+`: tensor "out_proj.bias" [`) || !strings.Contains(stderr, "pass --allow-nonfinite") {
		t.Errorf("NaN in the weights: exit %d, stderr %q; want exit 1 naming out_proj.bias", code, stderr)
	}
	code, _, stderr = run(badWeights, input, "--allow-nonfinite")
	if code != 0 || !strings.HasPrefix(stderr, "mha: warning: "+badWeights+`: tensor "out_proj.bias"`) {
		t.Errorf("NaN in the weights with --allow-nonfinite: exit %d, stderr %q; want exit 0 and a warning", code, stderr)
	}
}
