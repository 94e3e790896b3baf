package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/nn"
)

// modelDir is a tiny Hugging Face folder of the pretrained tests.
func modelDir(name string) string { return filepath.Join("..", "..", "testdata", "pretrained", name) }

// benchModelLines runs mha bench --json --model and returns its header and rows, checking that
// every number is sensible.
func benchModelLines(t *testing.T, args ...string) (modelHeader, []modelRow) {
	t.Helper()
	code, stdout, stderr := runCLI(append([]string{"bench", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("bench %q: exit %d, stderr %q", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	var head modelHeader
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&head); err != nil || !(head.ReadBWGBps > 0) || head.Params <= 0 || head.Architecture == "" {
		t.Fatalf("first line %q: %v; want the model, its architecture, params > 0 and read_bw_gbps > 0", lines[0], err)
	}
	var rows []modelRow
	for _, line := range lines[1:] {
		var r modelRow
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if !(r.DecodeMS > 0 && r.DecodeTokS > 0 && r.ReadBytes > 0 && r.ReadGBps > 0 && r.ReadBWPct > 0 && r.RSSMiB > 0 &&
			r.PeakRSSMiB >= r.RSSMiB && r.LoadS > 0 && r.Params == head.Params && r.DecodeSteps > 0) {
			t.Errorf("line %q: want positive times, rates, bytes and memory", line)
		}
		for _, p := range r.Prefill {
			if !(p.MS > 0 && p.TokS > 0) {
				t.Errorf("line %q: prefill %d: want positive ms and tok_s", line, p.T)
			}
		}
		rows = append(rows, r)
	}
	return head, rows
}

// TestBenchModel runs mha bench --model on a bfloat16 folder, whose weights it times as stored
// and in float32 (reading twice the bytes per step), as JSON, and on a float32 folder, one row,
// as a table.
func TestBenchModel(t *testing.T) {
	head, rows := benchModelLines(t, "--model", modelDir("llama3-bf16"), "--runs", "1", "--seq", "4,8", "--steps", "3", "--warmup", "0")
	var impls []string
	for _, r := range rows {
		impls = append(impls, r.Impl+"/"+r.Weights)
		if len(r.Prefill) != 2 || r.Prefill[0].T != 4 || r.Prefill[1].T != 8 || r.DecodeSteps != 3 {
			t.Errorf("%s: prefill %+v and %d steps, want prefill 4 and 8, and 3 steps", r.Impl, r.Prefill, r.DecodeSteps)
		}
	}
	if want := []string{"mha/bfloat16", "mha-f32/float32"}; head.Architecture != "LlamaForCausalLM" || !slices.Equal(impls, want) {
		t.Fatalf("bfloat16 folder: %s %q, want LlamaForCausalLM %q", head.Architecture, impls, want)
	}
	for _, r := range rows {
		if r.Compute != "float32" {
			t.Errorf("%s: compute %q, want float32 by default", r.Impl, r.Compute)
		}
	}
	if rows[1].ReadBytes <= rows[0].ReadBytes*3/2 {
		t.Errorf("read bytes per step %d in bfloat16 and %d in float32, want about half", rows[0].ReadBytes, rows[1].ReadBytes)
	}

	code, stdout, stderr := runCLI("bench", "--model", modelDir("llama"), "--runs", "1", "--seq", "8", "--steps", "2")
	if code != 0 {
		t.Fatalf("table: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"LlamaForCausalLM", "prefill 8", "decode ms", "% read", "memory read bandwidth", "\nmha         float32"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "mha-f32") {
		t.Errorf("a float32 folder timed twice:\n%s", stdout)
	}
}

// TestBenchModelErrors checks the flags mha bench --model refuses, and a folder it cannot time.
func TestBenchModelErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "0"}, "--steps is 0"},
		{[]string{"--steps", "9223372036854775807"}, "--steps is 9223372036854775807, want at most 1000000"},
		{[]string{"--threads", "100000"}, "--threads is 100000, want at most 1024"},
		{[]string{"--warmup", "9223372036854775807"}, "--warmup is 9223372036854775807, want at most 1000000"},
		{[]string{"--seq", "4,x"}, `"x" is not a positive integer`},
		{[]string{"--backward"}, "--backward does not apply"},
		{[]string{"--heads", "3"}, "--heads does not apply"},
		{[]string{"--pattern", "local:2"}, "--pattern does not apply"},
		{[]string{"--batch", "4"}, "--batch does not apply"},
		{[]string{"--seq", "100000"}, "more than the model's"},
		{[]string{"--compute", "bfloat16,float32"}, "--model takes one compute type"},
		{[]string{"--compute", "f8"}, `unknown compute type "f8"`},
	} {
		code, _, stderr := runCLI(append([]string{"bench", "--model", modelDir("llama"), "--runs", "1"}, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want an error with %q", tc.args, code, stderr, tc.want)
		}
	}
	code, _, stderr := runCLI("bench", "--model", t.TempDir(), "--runs", "1")
	if code == 0 || !strings.Contains(stderr, "config.json") {
		t.Errorf("empty folder: exit %d, stderr %q, want an error naming config.json", code, stderr)
	}
}

// TestBenchModelCompute times a model's prompts in bfloat16: every mha row says so (or float32
// where the CPU has no AVX512_BF16), and a bidirectional model's Forward stays float32.
func TestBenchModelCompute(t *testing.T) {
	want := mha.ComputeBFloat16.Effective().String()
	_, rows := benchModelLines(t, "--model", modelDir("llama3-bf16"), "--runs", "1", "--seq", "8", "--steps", "2", "--warmup", "0", "--compute", "bfloat16")
	for _, r := range rows {
		if r.Compute != want {
			t.Errorf("%s: compute %q, want %s", r.Impl, r.Compute, want)
		}
	}
	code, stdout, stderr := runCLI("bench", "--json", "--model", modelDir("bert"), "--runs", "1", "--seq", "8", "--warmup", "0", "--compute", "bfloat16")
	if code != 0 || !strings.Contains(stdout, `"compute":"float32"`) {
		t.Errorf("bert in bfloat16: exit %d, stdout %s, stderr %q; want compute float32", code, stdout, stderr)
	}
}

// TestBenchModelTorch times the hand-written PyTorch Llama and GPT-2 beside mha on tiny
// folders (bfloat16 and float32); both decode the same greedy tokens.
func TestBenchModelTorch(t *testing.T) {
	hasTorch(t)
	for _, name := range []string{"llama3-bf16", "gpt2"} {
		code, stdout, stderr := runCLI("bench", "--json", "--torch", "--model", modelDir(name), "--runs", "1", "--seq", "8", "--steps", "3", "--warmup", "0")
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", name, code, stderr)
		}
		if strings.Contains(stderr, "greedy tokens") {
			t.Errorf("%s: PyTorch and mha chose different tokens: %s", name, stderr)
		}
		if !strings.Contains(stdout, `"impl":"torch-f32"`) || !strings.Contains(stdout, `"torch":"PyTorch `) {
			t.Errorf("%s: no torch-f32 row, or no PyTorch version and BLAS in the header:\n%s", name, stdout)
		}
	}
}

// TestBenchModelBERT checks that a bidirectional model is timed on its prefill (a Forward) and
// has no decode steps: null in JSON.
func TestBenchModelBERT(t *testing.T) {
	code, stdout, stderr := runCLI("bench", "--json", "--model", modelDir("bert"), "--runs", "1", "--seq", "8", "--warmup", "0")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, `"decode_ms":null`) || !strings.Contains(stdout, `"T":8`) {
		t.Errorf("want a prefill of 8 and no decode:\n%s", stdout)
	}
}

// TestDecodeReadBytesExperts checks what a decode step of a mixture of experts reads: with 2 of
// 4 experts a token, half the experts' weights fewer than with all 4, and the rest alike.
func TestDecodeReadBytesExperts(t *testing.T) {
	cfg := nn.Config{Vocab: 11, SeqLen: 8, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Norm: nn.PreNorm, Positions: nn.NoPositions,
		NormKind: nn.RMSNorm, Activation: nn.SwiGLU, NoMLPBias: true, Experts: 4, ExpertsPerToken: 2}
	read := func(k int) int64 {
		c := cfg
		c.ExpertsPerToken = k
		m, err := nn.NewModel(c)
		if err != nil {
			t.Fatal(err)
		}
		return decodeReadBytes(m)
	}
	experts := int64(cfg.Layers * cfg.Experts * 3 * cfg.DModel * cfg.FFN * 4) // float32 gate, up and down of every expert
	if all, two := read(4), read(2); all-two != experts/2 {
		t.Errorf("2 of 4 experts read %d bytes, all 4 %d: want %d fewer", two, all, experts/2)
	}
}
