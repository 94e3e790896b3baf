package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// llamaBenchLine is the part of one line of llama.cpp's llama-bench -o jsonl that mha bench
// --model reads: one test, a prompt of n_prompt tokens or n_gen generated ones, timed runs times.
type llamaBenchLine struct {
	BuildCommit string    `json:"build_commit"`
	ModelType   string    `json:"model_type"` // "llama 1B BF16": architecture, size, weights' type
	ModelSize   int64     `json:"model_size"` // bytes of the GGUF's tensors
	Params      int64     `json:"model_n_params"`
	Threads     int       `json:"n_threads"`
	Prompt      int       `json:"n_prompt"`
	Gen         int       `json:"n_gen"`
	SamplesNS   []float64 `json:"samples_ns"` // one per timed run, the whole test's time
}

// llamaBenchArgs are llama-bench's arguments for mha bench --model's prefill lengths seqs and
// flags: the same threads, prompt lengths, decode steps and runs, JSON lines on stdout.
func llamaBenchArgs(gguf string, f *benchFlags, seqs []int) []string {
	s := make([]string, len(seqs))
	for i, t := range seqs {
		s[i] = strconv.Itoa(t)
	}
	args := []string{"-m", gguf, "-t", strconv.Itoa(f.threads), "-p", strings.Join(s, ","), "-n", strconv.Itoa(f.steps),
		"-r", strconv.Itoa(f.runs), "-o", "jsonl"}
	if f.warmup == 0 {
		args = append(args, "--no-warmup")
	}
	return args
}

// measureLlamaBench runs llama-bench (bin) on gguf, the --model folder converted to GGUF, and
// returns its times as a modelResult, with the build's commit.
func measureLlamaBench(bin, gguf string, f *benchFlags, seqs []int) (*modelResult, string, error) {
	c := exec.Command(bin, llamaBenchArgs(gguf, f, seqs)...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, "", fmt.Errorf("llama.cpp (%s) failed: %s", bin, childFailure(err, &stderr))
	}
	r, commit, err := parseLlamaBench(stdout.Bytes(), f, seqs)
	if err != nil {
		return nil, "", fmt.Errorf("llama.cpp (%s): %v", bin, err)
	}
	if peak := rusageMaxRSSKiB(c.ProcessState); peak >= 0 {
		r.PeakKiB = peak
	}
	return r, commit, nil
}

// parseLlamaBench reads llama-bench's JSON lines for the prefill lengths seqs and f's threads,
// steps and runs: one prompt test per length and one generation test of f.steps tokens, each
// with f.runs positive times. Prefill times are a test's runs; decode times are a run's time per
// generated token (llama-bench times generation as a whole). It fills neither the load time nor
// the memory after loading (-1), nor the tokens (llama-bench does not keep them).
func parseLlamaBench(out []byte, f *benchFlags, seqs []int) (*modelResult, string, error) {
	var lines []llamaBenchLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "{") {
			continue
		}
		var l llamaBenchLine
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			return nil, "", fmt.Errorf("cannot read its JSON line %q: %v", text, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if len(lines) == 0 {
		return nil, "", fmt.Errorf("printed no JSON line (want -o jsonl's one per test), got %q", lastLine(string(out)))
	}
	first := lines[0]
	r := &modelResult{Weights: ggufWeights(first.ModelType), Params: first.Params, ReadBytes: first.ModelSize,
		LoadS: math.NaN(), RSSKiB: -1, PeakLoadKiB: -1, PeakKiB: -1, Arch: "unknown"}
	if w := strings.Fields(first.ModelType); len(w) > 0 {
		r.Arch = w[0]
	}
	find := func(prompt, gen int) (*llamaBenchLine, error) {
		i := slices.IndexFunc(lines, func(l llamaBenchLine) bool { return l.Prompt == prompt && l.Gen == gen })
		if i < 0 {
			return nil, fmt.Errorf("printed no test of n_prompt %d, n_gen %d (its tests: %s)", prompt, gen, llamaBenchTests(lines))
		}
		l := &lines[i]
		switch {
		case l.Threads != f.threads:
			return nil, fmt.Errorf("ran %d threads, want --threads %d", l.Threads, f.threads)
		case len(l.SamplesNS) != f.runs:
			return nil, fmt.Errorf("test n_prompt %d, n_gen %d has %d runs, want --runs %d", prompt, gen, len(l.SamplesNS), f.runs)
		}
		for _, ns := range l.SamplesNS {
			if !(ns > 0) {
				return nil, fmt.Errorf("test n_prompt %d, n_gen %d has a run of %v ns, want positive times", prompt, gen, ns)
			}
		}
		return l, nil
	}
	for _, t := range seqs {
		l, err := find(t, 0)
		if err != nil {
			return nil, "", err
		}
		p := prefillResult{T: t}
		for _, ns := range l.SamplesNS {
			p.MS = append(p.MS, ns/1e6)
		}
		r.Prefill = append(r.Prefill, p)
	}
	l, err := find(0, f.steps)
	if err != nil {
		return nil, "", err
	}
	for _, ns := range l.SamplesNS {
		r.DecodeMS = append(r.DecodeMS, ns/1e6/float64(f.steps))
	}
	return r, first.BuildCommit, nil
}

// llamaBenchTests lists the tests of lines, for an error message.
func llamaBenchTests(lines []llamaBenchLine) string {
	s := make([]string, len(lines))
	for i, l := range lines {
		s[i] = fmt.Sprintf("n_prompt %d n_gen %d", l.Prompt, l.Gen)
	}
	return strings.Join(s, ", ")
}

// ggufWeights names the weights' type of a llama-bench model_type ("llama 1B BF16") as mha bench
// --model names its own: bfloat16, float16, float32, or the GGUF type's name in lower case (a
// quantized type, q4_0 say).
func ggufWeights(modelType string) string {
	f := strings.Fields(modelType)
	if len(f) == 0 {
		return "unknown"
	}
	switch t := f[len(f)-1]; t {
	case "BF16":
		return "bfloat16"
	case "F16":
		return "float16"
	case "F32":
		return "float32"
	default:
		return strings.ToLower(t)
	}
}
