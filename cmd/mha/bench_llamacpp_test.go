package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fakeLlamaBench writes a script that stands in for llama.cpp's llama-bench: it checks its
// arguments as mha bench passes them and prints one -o jsonl line per test, a prompt of T tokens
// taking T ms a run and a generation 2 ms a token, on the threads it was given (or on threads,
// when that is not empty, to test the check). It returns the script and a GGUF file to name.
func fakeLlamaBench(t *testing.T, threads string) (bin, gguf string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in for llama-bench is a shell script")
	}
	dir := t.TempDir()
	bin, gguf = filepath.Join(dir, "llama-bench"), filepath.Join(dir, "model.gguf")
	script := `#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in
	-m) m=$2; shift 2 ;;
	-t) t=$2; shift 2 ;;
	-p) p=$2; shift 2 ;;
	-n) n=$2; shift 2 ;;
	-r) r=$2; shift 2 ;;
	-o) o=$2; shift 2 ;;
	--no-warmup) shift ;;
	*) echo "error: invalid parameter for argument: $1" >&2; exit 1 ;;
	esac
done
[ -f "$m" ] || { echo "error: failed to load model '$m'" >&2; exit 1; }
[ "$o" = jsonl ] || { echo "want -o jsonl" >&2; exit 1; }
threads=THREADS
line() {
	s=""; i=0
	while [ $i -lt $r ]; do s="$s${s:+, }$3"; i=$((i+1)); done
	echo "{\"build_commit\": \"abc1234\", \"build_number\": 1, \"model_type\": \"llama ?B BF16\", \"model_size\": 2000, \"model_n_params\": 1000, \"n_threads\": $threads, \"n_prompt\": $1, \"n_gen\": $2, \"n_depth\": 0, \"samples_ns\": [ $s ], \"samples_ts\": [ 1 ]}"
}
echo "main: some log line" >&2
for x in $(echo "$p" | tr , ' '); do line "$x" 0 $((x*1000000)); done
line 0 "$n" $((n*2000000))
`
	if threads == "" {
		threads = "$t"
	}
	if err := os.WriteFile(bin, []byte(strings.Replace(script, "THREADS", threads, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gguf, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin, gguf
}

// TestBenchModelLlamaCpp runs mha bench --model --gguf against the stand-in for llama-bench: its
// row has the prompt times and the time per generated token it printed, the weights' type of
// its model_type, and mha's read bytes for the same type.
func TestBenchModelLlamaCpp(t *testing.T) {
	bin, gguf := fakeLlamaBench(t, "")
	code, stdout, stderr := runCLI("bench", "--json", "--model", modelDir("llama3-bf16"), "--gguf", gguf, "--llama-bench", bin,
		"--runs", "2", "--seq", "4,8", "--steps", "3", "--warmup", "0", "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var head modelHeader
	if err := json.Unmarshal([]byte(lines[0]), &head); err != nil || !strings.Contains(head.LlamaCpp, "build abc1234") || !strings.Contains(head.LlamaCpp, gguf) {
		t.Fatalf("header %q: %v; want llama_cpp naming the build and the GGUF", lines[0], err)
	}
	rows := map[string]modelRow{}
	for _, line := range lines[1:] {
		var r modelRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows[r.Impl] = r
	}
	l, ok := rows["llama.cpp"]
	if !ok || len(rows) != 3 {
		t.Fatalf("rows %v, want mha, mha-f32 and llama.cpp", lines[1:])
	}
	if l.Weights != "bfloat16" || l.Params != 1000 || l.Threads != 1 || float64(l.DecodeMS) != 2 || float64(l.DecodeMSMin) != 2 ||
		float64(l.DecodeTokS) != 500 || l.DecodeSteps != 3 || l.ReadBytes != rows["mha"].ReadBytes || l.RSSMiB != -1 || !(l.PeakRSSMiB > 0) {
		t.Errorf("llama.cpp row %+v: want bfloat16, 1000 parameters, 2 ms a token over 3 steps, mha's read bytes %d", l, rows["mha"].ReadBytes)
	}
	if len(l.Prefill) != 2 || l.Prefill[0].T != 4 || float64(l.Prefill[0].MS) != 4 || float64(l.Prefill[1].MS) != 8 || float64(l.Prefill[1].TokS) != 1000 {
		t.Errorf("llama.cpp prefill %+v, want 4 ms for 4 tokens and 8 for 8", l.Prefill)
	}

	code, stdout, stderr = runCLI("bench", "--model", modelDir("llama3-bf16"), "--gguf", gguf, "--llama-bench", bin,
		"--runs", "1", "--seq", "4", "--steps", "2", "--warmup", "1", "--threads", "1")
	if code != 0 || !strings.Contains(stdout, "\nllama.cpp   bfloat16") || !strings.Contains(stdout, "llama.cpp = llama-bench ") {
		t.Errorf("table: exit %d, stdout\n%s\nstderr %q; want a llama.cpp row and line", code, stdout, stderr)
	}
}

// TestBenchModelLlamaCppErrors checks the errors of --gguf and --llama-bench.
func TestBenchModelLlamaCppErrors(t *testing.T) {
	bin, gguf := fakeLlamaBench(t, "")
	wrong, _ := fakeLlamaBench(t, "7")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gguf", gguf, "--llama-bench", filepath.Join(t.TempDir(), "none")}, "--llama-bench: "},
		{[]string{"--gguf", gguf, "--llama-bench", ""}, "--llama-bench is empty"},
		{[]string{"--gguf", filepath.Join(t.TempDir(), "none.gguf"), "--llama-bench", bin}, "failed to load model"},
		{[]string{"--gguf", gguf, "--llama-bench", wrong}, "ran 7 threads, want --threads 1"},
	} {
		args := append([]string{"bench", "--model", modelDir("llama"), "--runs", "1", "--seq", "4", "--steps", "2", "--threads", "1"}, tc.args...)
		code, _, stderr := runCLI(args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want an error with %q", tc.args, code, stderr, tc.want)
		}
	}
	code, _, stderr := runCLI("bench", "--gguf", gguf, "--seq", "16")
	if code == 0 || !strings.Contains(stderr, "want them with --model") {
		t.Errorf("--gguf without --model: exit %d, stderr %q", code, stderr)
	}
}

// TestParseLlamaBench reads the lines a real llama-bench printed (llama.cpp's -o jsonl, shortened
// to the fields mha bench reads and a few more), and refuses output that lacks a test or a run.
func TestParseLlamaBench(t *testing.T) {
	f := &benchFlags{threads: 2, runs: 3, steps: 32}
	out := []byte(llamaBenchSample)
	r, commit, err := parseLlamaBench(out, f, []int{128})
	if err != nil {
		t.Fatal(err)
	}
	if commit == "" || r.Weights != "bfloat16" || r.Arch != "llama" || len(r.Prefill) != 1 || len(r.Prefill[0].MS) != 3 || len(r.DecodeMS) != 3 || r.ReadBytes <= 0 {
		t.Fatalf("parsed %+v, commit %q", r, commit)
	}
	for _, tc := range []struct {
		seqs  []int
		flags benchFlags
		want  string
	}{
		{[]int{512}, *f, "no test of n_prompt 512, n_gen 0"},
		{[]int{128}, benchFlags{threads: 2, runs: 3, steps: 16}, "no test of n_prompt 0, n_gen 16"},
		{[]int{128}, benchFlags{threads: 1, runs: 3, steps: 32}, "ran 2 threads, want --threads 1"},
		{[]int{128}, benchFlags{threads: 2, runs: 5, steps: 32}, "has 3 runs, want --runs 5"},
	} {
		if _, _, err := parseLlamaBench(out, &tc.flags, tc.seqs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: error %v, want %q", tc.seqs, tc.flags, err, tc.want)
		}
	}
	for _, bad := range []string{"", "error: no model\n", "{\"n_prompt\": 128, \"samples_ns\": [\"x\"]}\n"} {
		if _, _, err := parseLlamaBench([]byte(bad), f, []int{128}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	zero := strings.Replace(llamaBenchSample, `"samples_ns": [ `, `"samples_ns": [ 0, `, 1)
	if _, _, err := parseLlamaBench([]byte(zero), &benchFlags{threads: 2, runs: 4, steps: 32}, []int{128}); err == nil || !strings.Contains(err.Error(), "want positive times") {
		t.Errorf("a run of 0 ns: error %v", err)
	}
}

// llamaBenchSample is what llama-bench (llama.cpp b10573) printed with -o jsonl for a prompt of
// 128 tokens and 32 generated ones, three runs each, on two threads, for the 125M-parameter
// bf16 model of BENCHMARKS.md's v24.
const llamaBenchSample = `{"build_commit": "d775b89", "build_number": 10573, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU", "model_filename": "llama125-bf16.gguf", "model_type": "llama ?B BF16", "model_size": 249375744, "model_n_params": 124668672, "n_batch": 2048, "n_ubatch": 512, "n_threads": 2, "cpu_mask": "0x0", "cpu_strict": false, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": -1, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none", "load_mode": "auto", "embeddings": false, "no_op_offload": 0, "no_host": false, "fit_target": 0, "fit_min_ctx": 0, "n_prompt": 128, "n_gen": 0, "n_depth": 0, "test_time": "2026-11-26T22:16:40Z", "avg_ns": 63741339, "stddev_ns": 1096588, "avg_ts": 2008.512267, "stddev_ts": 34.557909, "samples_ns": [ 64838002, 63741132, 62644884 ],"samples_ts": [ 1974.15, 2008.12, 2043.26 ]}
{"build_commit": "d775b89", "build_number": 10573, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU", "model_filename": "llama125-bf16.gguf", "model_type": "llama ?B BF16", "model_size": 249375744, "model_n_params": 124668672, "n_batch": 2048, "n_ubatch": 512, "n_threads": 2, "cpu_mask": "0x0", "cpu_strict": false, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": -1, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none", "load_mode": "auto", "embeddings": false, "no_op_offload": 0, "no_host": false, "fit_target": 0, "fit_min_ctx": 0, "n_prompt": 0, "n_gen": 32, "n_depth": 0, "test_time": "2026-11-26T22:16:40Z", "avg_ns": 169838325, "stddev_ns": 9260593, "avg_ts": 188.794073, "stddev_ts": 10.446646, "samples_ns": [ 178218208, 171400900, 159895869 ],"samples_ts": [ 179.555, 186.697, 200.13 ]}
`

// FuzzLlamaBenchOutput feeds parseLlamaBench any output and flags: it returns an error or a
// result with one prefill of --runs positive times per length asked for and --runs positive
// decode times, never a panic.
func FuzzLlamaBenchOutput(f *testing.F) {
	f.Add(llamaBenchSample, 2, 3, 32, 128)
	f.Add(strings.Replace(llamaBenchSample, `"samples_ns": [ `, `"samples_ns": [ -1, `, 1), 2, 4, 32, 128)
	f.Add(`{"n_prompt": 4, "n_gen": 0, "n_threads": 1, "samples_ns": [1e400]}`+"\n", 1, 1, 1, 4)
	f.Add("{\"model_type\": \"\", \"n_prompt\": 0, \"n_gen\": 1, \"n_threads\": 1, \"samples_ns\": [ 5 ]}\n{}", 1, 1, 1, 0)
	f.Fuzz(func(t *testing.T, out string, threads, runs, steps, seq int) {
		fl := &benchFlags{threads: threads, runs: runs, steps: steps}
		r, _, err := parseLlamaBench([]byte(out), fl, []int{seq})
		if err != nil {
			return
		}
		if len(r.Prefill) != 1 || len(r.Prefill[0].MS) != runs || len(r.DecodeMS) != runs {
			t.Fatalf("parsed %+v for runs %d", r, runs)
		}
		for _, ms := range append(slices.Clone(r.Prefill[0].MS), r.DecodeMS...) {
			if !(ms > 0) {
				t.Fatalf("parsed a time of %v ms from %q", ms, out)
			}
		}
	})
}
