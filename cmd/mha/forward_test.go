package main

import (
	"cmp"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

func pretrainedDir(name string) string {
	return filepath.Join("..", "..", "testdata", "pretrained", name)
}

// TestForwardMatchesReference runs mha forward --ids on the first sequence of each tiny
// folder's reference input and checks the logits and attentions against the reference.
func TestForwardMatchesReference(t *testing.T) {
	for _, name := range []string{"gpt2", "llama", "llama3-bf16", "mistral", "qwen2", "qwen3-bf16", "qwen3-wide", "gemma", "phi3", "gemma2", "gemma3", "pythia", "phi2", "stablelm2", "phi3-longrope", "qwen3-yarn", "smollm3", "gptj", "mixtral", "qwen3-moe-bf16", "qwen2-moe", "starcoder2", "falcon", "falcon-new-arch", "olmo2", "olmoe-bf16", "olmo3", "gpt-bigcode"} {
		exp, err := safetensors.ReadFile(filepath.Join(pretrainedDir(name), "expected.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		ids, shape, err := exp.Float64("input_ids")
		if err != nil {
			t.Fatal(err)
		}
		n := shape[1]
		parts := make([]string, n)
		for i := range n {
			parts[i] = strconv.Itoa(int(ids[i]))
		}
		out := filepath.Join(t.TempDir(), "out.safetensors")
		if code, _, stderr := runCLI("forward", "--model", pretrainedDir(name), "--ids", strings.Join(parts, ","), "--out", out, "--attentions"); code != 0 {
			t.Fatalf("%s: exit %d, %s", name, code, stderr)
		}
		res, err := safetensors.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := res.Float32("logits")
		if err != nil {
			t.Fatal(err)
		}
		want, wshape, _ := exp.Float64("logits")
		v := wshape[2]
		if e := tensor.RelError(logits.Data, want[:n*v]); e > 1e-5 || logits.Shape[0] != n || logits.Shape[1] != v {
			t.Errorf("%s: logits %v, relative error %.3g", name, logits.Shape, e)
		}
		att, err := res.Float32("attentions")
		if err != nil {
			t.Fatal(err)
		}
		a0, ashape, _ := exp.Float64("attentions.0")
		heads := ashape[1]
		if e := tensor.RelError(att.Data[:heads*n*n], a0[:heads*n*n]); e > 1e-5 {
			t.Errorf("%s: attentions of layer 0: relative error %.3g", name, e)
		}
		for r := range len(att.Data) / n {
			sum := 0.0
			for _, x := range att.Data[r*n : (r+1)*n] {
				sum += float64(x)
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("%s: attention row %d sums to %v", name, r, sum)
			}
		}
	}
}

// TestForwardRouting checks the routing mha forward writes for a mixture of experts (Mixtral's:
// 4 experts, 2 a token, their weights renormalised): each token's probabilities sum to 1, its
// experts are its two most probable by decreasing probability, and their weights their share of
// the two; a dense model writes none.
func TestForwardRouting(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.safetensors")
	if code, _, stderr := runCLI("forward", "--model", pretrainedDir("mixtral"), "--ids", "3,1,4,1,5,9", "--out", out); code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	res, err := safetensors.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := res.Float32("router_probs")
	if err != nil {
		t.Fatal(err)
	}
	weights, err := res.Float32("expert_weights")
	if err != nil {
		t.Fatal(err)
	}
	experts, eshape, err := res.Float64("experts")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(probs.Shape, []int{2, 6, 4}) || !slices.Equal(weights.Shape, []int{2, 6, 2}) || !slices.Equal(eshape, []int{2, 6, 2}) {
		t.Fatalf("shapes %v, %v, %v; want [2 6 4] and [2 6 2]", probs.Shape, weights.Shape, eshape)
	}
	for i := range 12 {
		p, e, w := probs.Data[i*4:(i+1)*4], experts[i*2:(i+1)*2], weights.Data[i*2:(i+1)*2]
		order := []int{0, 1, 2, 3}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p[b], p[a]) })
		a, b := int(e[0]), int(e[1])
		sum := float64(p[0] + p[1] + p[2] + p[3])
		if a != order[0] || b != order[1] || math.Abs(sum-1) > 1e-6 ||
			math.Abs(float64(w[0])-float64(p[a]/(p[a]+p[b]))) > 1e-6 || math.Abs(float64(w[0]+w[1])-1) > 1e-6 {
			t.Errorf("token %d: probabilities %v, experts %v, weights %v", i, p, e, w)
		}
	}
	dense := filepath.Join(t.TempDir(), "dense.safetensors")
	if code, _, stderr := runCLI("forward", "--model", pretrainedDir("llama"), "--ids", "3,1,4", "--out", dense); code != 0 {
		t.Fatalf("llama: exit %d, %s", code, stderr)
	}
	if f, err := safetensors.ReadFile(dense); err != nil || f.Has("router_probs") || f.Has("experts") {
		t.Errorf("a dense model's outputs: %v, with routing", err)
	}
}

// TestForwardText checks that --text runs the ids mha tokenize gives (with special tokens), and
// that a BERT writes its hidden states and masked-LM logits.
func TestForwardText(t *testing.T) {
	for _, name := range []string{"gpt2", "llama", "bert"} {
		code, stdout, stderr := runCLI("tokenize", "--model", pretrainedDir(name), "--text", "the cat sat", "--special")
		if code != 0 {
			t.Fatalf("%s: tokenize: exit %d, %s", name, code, stderr)
		}
		ids := strings.Join(strings.Fields(strings.TrimPrefix(strings.Split(stdout, "\n")[0], "ids:")), ",")
		var outs [2]*safetensors.File
		for i, args := range [][]string{{"--text", "the cat sat"}, {"--ids", ids}} {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			if code, _, stderr := runCLI(append([]string{"forward", "--model", pretrainedDir(name), "--out", out}, args...)...); code != 0 {
				t.Fatalf("%s %v: exit %d, %s", name, args, code, stderr)
			}
			f, err := safetensors.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			outs[i] = f
		}
		for _, tensorName := range []string{"ids", "logits", "last_hidden_state"} {
			a, _ := outs[0].Raw(tensorName)
			b, err := outs[1].Raw(tensorName)
			if err != nil || string(a.Data) != string(b.Data) {
				t.Errorf("%s: %s differs between --text and --ids %s (%v)", name, tensorName, ids, err)
			}
		}
	}
}

// TestForwardErrors checks that bad flags and inputs give exit 1 and one line.
func TestForwardErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.safetensors")
	noTok := filepath.Join(t.TempDir(), "m")
	copyDir(t, pretrainedDir("llama"), noTok, "tokenizer.json")
	sparse := filepath.Join(t.TempDir(), "sparse.safetensors")
	sm, err := nn.NewModel(nn.Config{Vocab: 8, SeqLen: 8, DModel: 8, Heads: 2, Layers: 1, FFN: 8, Norm: nn.PreNorm, Positions: nn.Learned, Patterns: []string{"local:1"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := nn.Save(sparse, sm, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"forward", "--text", "a", "--out", out}, "--model is required"},
		{[]string{"forward", "--model", pretrainedDir("gpt2"), "--out", out}, "give --text or --ids"},
		{[]string{"forward", "--model", pretrainedDir("gpt2"), "--text", "a", "--ids", "1", "--out", out}, "give --text or --ids"},
		{[]string{"forward", "--model", pretrainedDir("gpt2"), "--ids", "1,x", "--out", out}, `--ids: item 2 is "x"`},
		{[]string{"forward", "--model", pretrainedDir("gpt2"), "--ids", "1,9999", "--out", out}, "outside [0, 265)"},
		{[]string{"forward", "--model", pretrainedDir("gpt2"), "--ids", "1"}, "--out is required"},
		{[]string{"forward", "--model", noTok, "--text", "a", "--out", out}, "has no tokenizer.json"},
		{[]string{"forward", "--model", filepath.Join(t.TempDir(), "none"), "--ids", "1", "--out", out}, "no such file"},
		{[]string{"generate", "--model", pretrainedDir("bert"), "--prompt", "the cat"}, "bidirectional"},
		{[]string{"generate", "--model", pretrainedDir("gpt2"), "--prompt", "a", "--cache", "f8"}, `--cache is "f8"`},
		{[]string{"generate", "--model", pretrainedDir("gpt2"), "--prompt", "a", "--temperature", "-1"}, "temperature is -1"},
		{[]string{"generate", "--model", pretrainedDir("gpt2"), "--prompt", "a", "--max-tokens", "100"}, "exceed the model's 16 positions"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q, want exit 1 and one line containing %q", c.args, code, stderr, c.want)
		}
	}
	// Flags that change nothing for this call: a warning, and the generation as without them.
	for _, c := range []struct {
		model string
		extra []string
		want  string
	}{
		{pretrainedDir("gpt2"), []string{"--top-k", "3", "--seed", "4"}, "--top-k, --top-p and --seed shape sampling"},
		{sparse, []string{"--cache", "bf16"}, "has no KV cache"},
	} {
		plain := []string{"generate", "--model", c.model, "--ids", "1,2", "--max-tokens", "3"}
		code, stdout, stderr := runCLI(append(plain, c.extra...)...)
		_, want, _ := runCLI(plain...)
		if code != 0 || !strings.Contains(stderr, "mha: warning: ") || !strings.Contains(stderr, c.want) || stdout != want {
			t.Errorf("%v: exit %d, stdout %q (%q without them), stderr %q, want a warning containing %q", c.extra, code, stdout, want, stderr, c.want)
		}
	}
}

// TestGenerate checks that a seed gives the same text and that --ids prints the ids of the
// same tokens the text decodes.
func TestGenerate(t *testing.T) {
	args := []string{"generate", "--model", pretrainedDir("llama"), "--prompt", "the cat", "--max-tokens", "6", "--temperature", "1", "--top-k", "20", "--seed", "5"}
	_, a, _ := runCLI(args...)
	code, b, stderr := runCLI(args...)
	if code != 0 || a != b {
		t.Fatalf("the same seed: %q then %q (exit %d, %s)", a, b, code, stderr)
	}
	if !strings.Contains(stderr, "tokens/s") {
		t.Errorf("no tokens/s on stderr: %q", stderr)
	}
	code, ids, stderr := runCLI("generate", "--model", pretrainedDir("llama"), "--ids", "1,259,278,264", "--max-tokens", "4")
	if code != 0 || len(strings.Fields(ids)) == 0 {
		t.Fatalf("--ids: exit %d, %q, %s", code, ids, stderr)
	}
	code, ids, stderr = runCLI("generate", "--model", pretrainedDir("llama"), "--ids", "1,259,278,264,200,201", "--max-tokens", "4", "--compute", "bfloat16")
	if code != 0 || len(strings.Fields(ids)) != 4 {
		t.Fatalf("--compute bfloat16: exit %d, %q, %s; want 4 ids", code, ids, stderr)
	}
	code, _, stderr = runCLI("generate", "--model", pretrainedDir("llama"), "--ids", "1,2", "--compute", "bf8")
	if code == 0 || !strings.Contains(stderr, `--compute: unknown compute type "bf8"`) {
		t.Errorf("--compute bf8: exit %d, stderr %q", code, stderr)
	}
}

// copyDir copies the files of src into a new folder dst, except those named in skip.
func copyDir(t *testing.T, src, dst string, skip ...string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if slices.Contains(skip, e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEvalModel checks mha eval --model: every head's scores in [0, 1] (or null), the loss on
// --text equal to the cross-entropy of mha forward's logits, and the errors.
func TestEvalModel(t *testing.T) {
	code, stdout, stderr := runCLI("eval", "--model", pretrainedDir("llama"), "--text", "the cat sat", "--json", "--batches", "2")
	if code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	var rep struct {
		Loss  float64
		Heads []map[string]any
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Heads) != 2*4 {
		t.Errorf("%d heads, want 8", len(rep.Heads))
	}
	for _, h := range rep.Heads {
		for _, k := range []string{"prev_token", "induction", "duplicate_token", "first_token", "position", "broad"} {
			if v, ok := h[k].(float64); !ok || v < 0 || v > 1.000001 {
				t.Errorf("head %v: %s = %v", h, k, h[k])
			}
		}
	}
	// The same loss from mha forward's logits.
	out := filepath.Join(t.TempDir(), "out.safetensors")
	if code, _, stderr := runCLI("forward", "--model", pretrainedDir("llama"), "--text", "the cat sat", "--out", out); code != 0 {
		t.Fatal(stderr)
	}
	f, _ := safetensors.ReadFile(out)
	ids, _, _ := f.Float64("ids")
	logits, _, _ := f.Float64("logits")
	v := len(logits) / len(ids)
	loss := 0.0
	for i := 0; i+1 < len(ids); i++ {
		row := logits[i*v : (i+1)*v]
		m := slices.Max(row)
		sum := 0.0
		for _, x := range row {
			sum += math.Exp(x - m)
		}
		loss += m + math.Log(sum) - row[int(ids[i+1])]
	}
	loss /= float64(len(ids) - 1)
	if math.Abs(loss-rep.Loss) > 1e-4*loss {
		t.Errorf("loss %v, want %v from the logits", rep.Loss, loss)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--model", pretrainedDir("llama"), "--task", "sort"}, "not both"},
		{[]string{"eval", "--model", pretrainedDir("bert"), "--text", "the cat"}, "bidirectional"},
		{[]string{"eval", "--model", pretrainedDir("gpt2"), "--repeat", "9"}, "more than the model's 16"},
		{[]string{"eval", "--model", pretrainedDir("gpt2"), "--batch", "1000000000", "--repeat", "4"}, "probe: a batch of 1000000000 sequences of 8 tokens needs about"},
		{[]string{"eval", "--model", pretrainedDir("gpt2"), "--allow-nonfinite"}, "--allow-nonfinite applies to --checkpoint"},
		{[]string{"eval", "--task", "sort", "--text", "the cat"}, "--text applies to --model"},
		{[]string{"eval", "--task", "sort", "--repeat", "4"}, "--repeat applies to --model"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q, want %q", c.args, code, stderr, c.want)
		}
	}
}
