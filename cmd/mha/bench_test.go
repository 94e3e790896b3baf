package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// TestMain lets this test binary stand in for the mha binary in mha bench's children: bench
// re-executes os.Executable(), which under go test is this binary, with benchWorkerEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(benchWorkerEnv) == "1" {
		os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestBenchFlagErrors checks that every bad flag ends with exit status 1 and one line on stderr
// that names the flag, before anything is measured.
func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--seq", ""}, "--seq is empty"},
		{[]string{"--seq", "512,,1024"}, `"" is not a positive integer`},
		{[]string{"--seq", "512,abc"}, `"abc" is not a positive integer`},
		{[]string{"--seq", "-8"}, `"-8" is not a positive integer`},
		{[]string{"--seq", "0"}, `"0" is not a positive integer`},
		{[]string{"--embed", "0"}, "--embed is 0, want a positive integer"},
		{[]string{"--heads", "-2"}, "--heads is -2, want a positive integer"},
		{[]string{"--heads", "5"}, "--heads 5 does not divide --embed 768"},
		{[]string{"--batch", "0"}, "--batch is 0"},
		{[]string{"--threads", "0"}, "--threads is 0"},
		{[]string{"--runs", "0"}, "--runs is 0"},
		{[]string{"--warmup", "-1"}, "--warmup is -1"},
		{[]string{"--threads", "100000"}, "--threads is 100000, want at most 1024"},
		{[]string{"--threads", "100000000"}, "--threads is 100000000, want at most 1024"},
		{[]string{"--runs", "1000001"}, "--runs is 1000001, want at most 1000000"},
		{[]string{"--warmup", "9223372036854775807"}, "--warmup is 9223372036854775807, want at most 1000000"},
		{[]string{"--decode", "100", "--runs", "9223372036854775807"}, "--runs is 9223372036854775807, want at most 1000000"},
		{[]string{"--decode", "1000000000"}, "--decode 1000000000 with --warmup 2, --runs 7, --batch 1 and --embed 768 gives a KV cache of more than 2^31 floats, want a smaller size"},
		{[]string{"--decode", "9223372036854775807"}, "--decode 9223372036854775807 with --warmup 2"},
		{[]string{"--decode", "1000000", "--runs", "1000000", "--warmup", "1000000"}, "--decode 1000000 with --warmup 1000000, --runs 1000000, --batch 1 and --embed 768 gives a KV cache"},
		{[]string{"--embed", "131072", "--heads", "1"}, "--embed 131072 --heads 1: invalid config"},
		{[]string{"--seq", "4000000", "--embed", "1024", "--heads", "8"}, "more than 2^31 floats"},
		{[]string{"--runs", "x"}, `invalid argument "x" for "--runs"`},
		{[]string{"--torch", "--python", ""}, "--python is empty"},
		{[]string{"--backward", "--ort"}, "--ort times ONNX Runtime's forward only"},
		{[]string{"--worker", "--seq", "8,16"}, "--worker times one sequence length"},
		{[]string{"extra"}, "bench takes no arguments"},
		{[]string{"--gqa", "5"}, "--gqa 5 does not divide --heads 12"},
		{[]string{"--gqa", "-1"}, "want 0 (off) or a positive number"},
		{[]string{"--window", "8", "--backward"}, "want them without --backward, --need-weights and --ort"},
		{[]string{"--decode", "64", "--need-weights"}, "want them without --backward"},
		{[]string{"--decode", "64", "--seq", "8"}, "--decode 64 sets the cache length; want it without --seq"},
		{[]string{"--gqa", "4", "--cache-dtype", "f64"}, `--cache-dtype is "f64", want f32, bf16 or f16`},
		{[]string{"--compute", "fp8"}, `unknown compute type "fp8", want float32 or bfloat16`},
		{[]string{"--compute", "bf16,bfloat16"}, "names bfloat16 twice"},
		{[]string{"--compute", "bfloat16", "--backward"}, "--compute bfloat16 is inference only"},
		{[]string{"--compute", "float32,bfloat16", "--decode", "64"}, "--compute bfloat16 does not apply to --decode"},
		{[]string{"--compute", "bfloat16,float32", "--model", "x"}, "--model takes one compute type"},
	} {
		code, stdout, stderr := runCLI(append([]string{"bench"}, tc.args...)...)
		if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "mha: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench %q: exit %d, stdout %q, stderr %q; want exit 1, one line on stderr containing %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// benchLines runs mha bench with --json and returns its peak line and measurement rows.
func benchLines(t *testing.T, args ...string) (peakRow, []benchRow) {
	t.Helper()
	code, stdout, stderr := runCLI(append([]string{"bench", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("bench %q: exit %d, stderr %q", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	var peak peakRow
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&peak); err != nil || !(peak.PeakGFLOPS > 0) {
		t.Fatalf("first line %q: %v; want {\"peak_gflops\": > 0, …}", lines[0], err)
	}
	var rows []benchRow
	for _, line := range lines[1:] {
		var r benchRow
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if !(r.MS > 0 && r.MSMin > 0 && r.MSMin <= r.MS && r.GFLOPS > 0 && r.PeakPct > 0 && r.PeakRSSMiB > 0 && r.ExtraMiB >= 0) ||
			r.Decode && !(r.ReadGBps > 0 && r.ReadBWPct > 0) {
			t.Errorf("line %q: want positive ms ≥ ms_min, gflops, peak_pct and peak_rss_mib, extra_mib ≥ 0", line)
		}
		rows = append(rows, r)
	}
	return peak, rows
}

// TestBenchJSON runs a tiny real benchmark and checks every JSON line.
func TestBenchJSON(t *testing.T) {
	_, rows := benchLines(t, "--seq", "8,16", "--embed", "16", "--heads", "2", "--runs", "2", "--warmup", "1")
	if len(rows) != 2 {
		t.Fatalf("%d measurement lines, want 2", len(rows))
	}
	for i, want := range []int{8, 16} {
		r := rows[i]
		if r.Impl != "mha" || r.Pass != "forward" || r.T != want || r.B != 1 || r.E != 16 || r.H != 2 || r.Causal || r.NeedWeights || r.Threads < 1 {
			t.Errorf("row %d = %+v, want impl mha, pass forward, T %d, B 1, E 16, H 2", i, r, want)
		}
	}
}

// TestBenchCompute runs a tiny benchmark in both compute types, layer and attention core, and
// checks the rows' names and "compute", and that the peak line has the bfloat16 peak where the
// CPU has AVX512_BF16.
func TestBenchCompute(t *testing.T) {
	for _, mode := range [][]string{nil, {"--gqa", "1", "--heads", "2"}} {
		args := append([]string{"--compute", "bfloat16,float32", "--seq", "8", "--embed", "16", "--heads", "2", "--runs", "2", "--warmup", "1"}, mode...)
		peak, rows := benchLines(t, args...)
		if len(rows) != 2 {
			t.Fatalf("%q: %d measurement lines, want 2", args, len(rows))
		}
		for i, name := range []string{"bfloat16", "float32"} {
			want := name
			if !kernel.HasBF16() {
				want = "float32" // mha.Compute.Effective
			}
			if r := rows[i]; r.Impl != "mha-"+name || r.Compute != want {
				t.Errorf("%q: row %d is %s with compute %q, want mha-%s with compute %q", args, i, r.Impl, r.Compute, name, want)
			}
		}
		if (peak.PeakBF16 > 0) != kernel.HasBF16() {
			t.Errorf("peak_bf16_gflops %v where the CPU's AVX512_BF16 is %v", peak.PeakBF16, kernel.HasBF16())
		}
	}
	_, rows := benchLines(t, "--compute", "bf16", "--seq", "8", "--embed", "16", "--heads", "2", "--runs", "1", "--warmup", "0")
	if len(rows) != 1 || rows[0].Impl != "mha" || rows[0].Compute != mha.ComputeBFloat16.Effective().String() {
		t.Errorf("--compute bf16: rows %+v, want one mha row with compute bfloat16", rows)
	}
	_, rows = benchLines(t, "--seq", "8", "--embed", "16", "--heads", "2", "--runs", "1", "--warmup", "0")
	if len(rows) != 1 || rows[0].Compute != "float32" {
		t.Errorf("default: rows %+v, want compute float32", rows)
	}
}

// TestBenchBackward runs a tiny training-step benchmark and checks its JSON lines.
func TestBenchBackward(t *testing.T) {
	_, rows := benchLines(t, "--backward", "--seq", "8,24", "--embed", "16", "--heads", "2", "--batch", "2",
		"--runs", "2", "--warmup", "1")
	if len(rows) != 2 {
		t.Fatalf("%d measurement lines, want 2", len(rows))
	}
	for i, want := range []int{8, 24} {
		r := rows[i]
		if r.Impl != "mha" || r.Pass != "forward+backward" || r.T != want || r.B != 2 || r.E != 16 || r.H != 2 || r.Causal || r.NeedWeights {
			t.Errorf("row %d = %+v, want impl mha, pass forward+backward, T %d, B 2, E 16, H 2", i, r, want)
		}
	}
}

// TestBenchBackwardHeader checks that the table says what is timed and how its FLOPs are
// counted.
func TestBenchBackwardHeader(t *testing.T) {
	var b bytes.Buffer
	cfg := &benchConfig{seqs: []int{8}, embed: 8, heads: 2, batch: 1, threads: 2, runs: 1, backward: true}
	if err := newBenchPrinter(&b, false, cfg, []benchImpl{{name: "mha"}}).header(100, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"self-attention forward+backward: E=8 H=2 B=1", "FLOPs per forward+backward = 3× forward = 24·T·E²·B + 12·T²·E·B",
		"not counted: the 2·T²·E·B of Q·Kᵀ that mha's backward recomputes"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("header lacks %q:\n%s", want, b.String())
		}
	}
}

// TestBenchWorkerBackward runs the worker that times mha's training step in this process, with
// the tiled backward and, causal with weights, the dense one, and checks the line it prints for
// the parent.
func TestBenchWorkerBackward(t *testing.T) {
	for _, mode := range [][]string{nil, {"--causal", "--need-weights"}} {
		code, stdout, stderr := runCLI(append([]string{"bench", "--worker", "--backward", "--seq", "32", "--embed", "16",
			"--heads", "4", "--batch", "2", "--threads", "2", "--runs", "3", "--warmup", "1"}, mode...)...)
		if code != 0 || stderr != "" {
			t.Fatalf("%q: exit %d, stderr %q", mode, code, stderr)
		}
		var r workerResult
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil || strings.Count(stdout, "\n") != 1 {
			t.Fatalf("%q: worker printed %q (%v), want one JSON line", mode, stdout, err)
		}
		if len(r.MS) != 3 || slices.Min(r.MS) <= 0 {
			t.Errorf("%q: times %v, want 3 positive", mode, r.MS)
		}
		// The kernel updates VmHWM lazily, so in a busy test process peak can read a little below
		// base; both must be measured.
		if runtime.GOOS == "linux" && !(r.BaseKiB > 0 && r.PeakKiB > 0) {
			t.Errorf("%q: memory %d KiB after setup, %d KiB peak; want both measured", mode, r.BaseKiB, r.PeakKiB)
		}
	}
}

// TestBenchTable runs the human form with a causal layer that returns weights, on one thread.
func TestBenchTable(t *testing.T) {
	code, stdout, stderr := runCLI("bench", "--seq", "12", "--embed", "8", "--heads", "2", "--batch", "2",
		"--threads", "1", "--runs", "1", "--warmup", "0", "--causal", "--need-weights")
	if code != 0 || stderr != "" && !strings.HasPrefix(stderr, "note: other processes kept") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"E=8 H=2 B=2 causal=true need_weights=true, 1 threads", "FMA peak", "GFLOP/s", "peak RSS MiB", "\n    12  mha "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "speed of mha") {
		t.Errorf("ratio lines with mha alone:\n%s", stdout)
	}
}

// TestBenchChildFailure checks that a child's error comes back as one line that names the
// implementation and T.
func TestBenchChildFailure(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	im := benchImpl{name: "broken", command: func(int) *exec.Cmd {
		c := exec.Command(exe, "bench", "--worker", "--seq", "8,16")
		c.Env = append(os.Environ(), benchWorkerEnv+"=1")
		return c
	}}
	_, err = measure(im, 8)
	if err == nil || err.Error() != "broken at T=8 failed: --worker times one sequence length, got --seq 8,16" {
		t.Errorf("measure: %v", err)
	}
	im.command = func(int) *exec.Cmd { return exec.Command(exe, "-test.run=^$") }
	if _, err = measure(im, 8); err == nil || !strings.Contains(err.Error(), "printed no result") {
		t.Errorf("measure of a child that prints no JSON: %v", err)
	}
}

// TestChildFailureLine checks the line childFailure reports of a child's stderr: a Go crash's
// first line, not the last of its stack trace; else the last line (an mha error, a Python
// traceback's exception).
func TestChildFailureLine(t *testing.T) {
	for _, c := range []struct{ stderr, want string }{
		{`runtime: out of memory: cannot allocate 68803362816-byte block (8060928 in use)
fatal error: out of memory

goroutine 1 gp=0x7993eb561e0 m=3 mp=0x7993eba3008 [running]:
runtime.throw({0xa4ef5e?, 0x1?})
	/usr/local/go/src/runtime/panic.go:1229 +0x48 fp=0x7993ecb0700 sp=0x7993ecb06d0 pc=0x485fc8
runtime.goexit({})
	/usr/local/go/src/runtime/asm_amd64.s:1771 +0x1 fp=0x295893a88fe8 sp=0x295893a88fe0 pc=0x48d861
created by runtime.(*cleanupQueue).createGs in goroutine 1
	/usr/local/go/src/runtime/mcleanup.go:672 +0xa5
`, "runtime: out of memory: cannot allocate 68803362816-byte block (8060928 in use)"},
		{`fatal error: concurrent map writes

goroutine 7 [running]:
main.main.func1()
	/tmp/x.go:9 +0x45
`, "fatal error: concurrent map writes"},
		{`panic: runtime error: index out of range [3] with length 3

goroutine 1 [running]:
main.main()
	/tmp/x.go:5 +0x1d
`, "panic: runtime error: index out of range [3] with length 3"},
		{"mha: --worker times one sequence length, got --seq 8,16\n", "--worker times one sequence length, got --seq 8,16"},
		{`Traceback (most recent call last):
  File "torch_mha.py", line 3, in <module>
    import torch
ModuleNotFoundError: No module named 'torch'
`, "ModuleNotFoundError: No module named 'torch'"},
	} {
		if got := childFailure(errors.New("exit status 2"), bytes.NewBufferString(c.stderr)); got != c.want {
			t.Errorf("stderr %.40q…: %q, want %q", c.stderr, got, c.want)
		}
	}
}

// TestBenchRatios checks the ratio table: the other's median over mha's, per T.
func TestBenchRatios(t *testing.T) {
	var b bytes.Buffer
	cfg := &benchConfig{seqs: []int{64, 128}, embed: 8, heads: 2, batch: 1, threads: 2, runs: 1}
	p := newBenchPrinter(&b, false, cfg, []benchImpl{{name: "mha"}, {name: "torch"}, {name: "torch-jemalloc"}})
	for _, r := range []struct {
		impl string
		t    int
		ms   float64
	}{{"mha", 64, 2}, {"torch", 64, 3}, {"torch-jemalloc", 64, 1}, {"mha", 128, 4}, {"torch", 128, 2}, {"torch-jemalloc", 128, 4}} {
		if err := p.row(cfg.row(r.impl, r.t, &measurement{ms: []float64{r.ms}, peakKiB: 1024, extraKiB: -1}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.ratios(); err != nil {
		t.Fatal(err)
	}
	want := "     T   torch  torch-jemalloc\n    64   1.50×           0.50×\n   128   0.50×           1.00×\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("ratios:\n%s\nwant it to end with\n%s", b.String(), want)
	}
	if f := strings.Fields(strings.Split(b.String(), "\n")[0]); f[len(f)-1] != "-" {
		t.Errorf("unknown extra memory not shown as -:\n%s", b.String())
	}
}

// TestMedianAndFlops checks the statistics and the FLOP count.
func TestMedianAndFlops(t *testing.T) {
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median(5, 1, 3) = %g", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median(4, 1, 3, 2) = %g", m)
	}
	c := &benchConfig{embed: 768, batch: 2}
	if f, want := c.flops(512), 2*(8*512*768*768+4*512*512*768.0); f != want {
		t.Errorf("flops(512) = %g, want %g", f, want)
	}
	c.backward = true
	if f, want := c.flops(512), 2*(24*512*768*768+12*512*512*768.0); f != want {
		t.Errorf("flops(512) with backward = %g, want %g", f, want)
	}
}

// hasTorch reports whether the default Python imports torch; tests that need it skip otherwise.
func hasTorch(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Python: not in -short mode")
	}
	if err := exec.Command(defaultPython, "-c", "import torch").Run(); err != nil {
		t.Skipf("%s cannot import torch (%v): apt-get install python3-torch", defaultPython, err)
	}
}

// TestBenchTorch times the PyTorch variants at a tiny size, the forward with a causal mask and
// weights and the training step; torch_mha.py itself checks that torch-sdpa computes what
// nn.MultiheadAttention computes, and for the training step the same gradients.
func TestBenchTorch(t *testing.T) {
	hasTorch(t)
	for _, c := range []struct {
		flag, pass  string
		needWeights bool
	}{{"--need-weights", "forward", true}, {"--backward", "forward+backward", false}} {
		_, rows := benchLines(t, "--torch", "--seq", "16", "--embed", "16", "--heads", "2", "--runs", "1", "--warmup", "0",
			"--causal", c.flag)
		var impls []string
		for _, r := range rows {
			impls = append(impls, r.Impl)
			if r.T != 16 || !r.Causal || r.NeedWeights != c.needWeights || r.Pass != c.pass {
				t.Errorf("%s: row %+v, want T 16, causal, need_weights %v, pass %s", c.flag, r, c.needWeights, c.pass)
			}
		}
		want := []string{"mha", "torch", "torch-sdpa"}
		if findJemalloc() != "" {
			want = append(want, "torch-jemalloc")
		}
		if !slices.Equal(impls, want) {
			t.Errorf("%s: implementations %q, want %q", c.flag, impls, want)
		}
	}
}

// TestBenchORT exports the layer, checks ONNX Runtime against PyTorch and times it. It skips
// without torch, node or npm, and when npm cannot install onnxruntime-node (no network).
func TestBenchORT(t *testing.T) {
	hasTorch(t)
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	args := []string{"bench", "--json", "--ort", "--seq", "16", "--embed", "16", "--heads", "2", "--runs", "1", "--warmup", "0"}
	code, stdout, stderr := runCLI(args...)
	if code != 0 && strings.Contains(stderr, "npm ci") {
		t.Skipf("cannot install onnxruntime-node: %s", stderr)
	}
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"impl":"ort","pass":"forward","T":16`) {
		t.Errorf("output %q, want a peak line, an mha line and an ort line at T=16", stdout)
	}
}

// TestBenchSDPA runs tiny benchmarks of the attention core's modes and checks their JSON lines:
// GQA, a window, and a decode step per cache type.
func TestBenchSDPA(t *testing.T) {
	_, rows := benchLines(t, "--gqa", "1", "--heads", "2", "--embed", "16", "--seq", "16,40", "--runs", "2", "--warmup", "1")
	if len(rows) != 2 || rows[0].Impl != "mha" || rows[0].KVHeads != 1 || rows[1].T != 40 || rows[0].Window != 0 || rows[0].Decode {
		t.Errorf("--gqa rows %+v", rows)
	}
	_, rows = benchLines(t, "--window", "4", "--heads", "2", "--embed", "16", "--seq", "40", "--runs", "2", "--warmup", "1")
	if len(rows) != 1 || rows[0].KVHeads != 2 || rows[0].Window != 4 {
		t.Errorf("--window rows %+v", rows)
	}
	_, rows = benchLines(t, "--decode", "300", "--gqa", "1", "--heads", "2", "--embed", "16", "--runs", "2", "--warmup", "1")
	var impls []string
	for _, r := range rows {
		impls = append(impls, r.Impl)
		if r.T != 300 || !r.Decode || r.KVHeads != 1 {
			t.Errorf("--decode row %+v", r)
		}
	}
	if !slices.Equal(impls, []string{"mha-f32", "mha-bf16", "mha-f16"}) {
		t.Errorf("--decode implementations %v, want mha-f32, mha-bf16, mha-f16", impls)
	}
	_, rows = benchLines(t, "--pattern", "local:4", "--pattern", "global:0", "--block", "8,8", "--normalizer", "sparsemax", "--heads", "2", "--embed", "16", "--seq", "40", "--runs", "2", "--warmup", "1")
	if len(rows) != 1 || rows[0].KVHeads != 2 || rows[0].T != 40 {
		t.Errorf("--pattern rows %+v", rows)
	}
	// --dense: a dense row beside the sparse one, its FLOPs over every pair, the sparse row's over
	// the pairs kept (local:4 over 40 keys: Σ_i (min(i, 4) + min(39 − i, 4) + 1) per head).
	_, rows = benchLines(t, "--pattern", "local:4", "--block", "8,8", "--dense", "--heads", "2", "--embed", "16", "--seq", "40", "--runs", "2", "--warmup", "1")
	if len(rows) != 2 || rows[0].Impl != "mha" || rows[1].Impl != "mha-dense" {
		t.Fatalf("--dense rows %+v, want mha and mha-dense", rows)
	}
	kept := 0
	for i := range 40 {
		kept += min(i, 4) + min(39-i, 4) + 1
	}
	for i, pairs := range []int{2 * kept, 2 * 40 * 40} {
		flops := float64(rows[i].GFLOPS) * float64(rows[i].MS) * 1e6
		if want := float64(4 * 8 * pairs); math.Abs(flops-want) > 2e-3*want {
			t.Errorf("%s: %v FLOPs a call, want %v", rows[i].Impl, flops, want)
		}
	}
	code, stdout, stderr := runCLI("bench", "--pattern", "local:4", "--block", "8,8", "--dense", "--heads", "2", "--embed", "16", "--seq", "40", "--runs", "1", "--warmup", "0")
	if code != 0 || !strings.Contains(stdout, "mha-dense") || !strings.Contains(stdout, "time against dense attention's share") {
		t.Errorf("--dense table: exit %d, stderr %q:\n%s", code, stderr, stdout)
	}
	for _, bad := range [][]string{{"--pattern", "ring:1"}, {"--normalizer", "topk:0"}, {"--decode", "30", "--pattern", "local:2"}, {"--dense"}, {"--gqa", "2", "--dense"}, {"--block", "8,8"}, {"--steps", "4"}} {
		args := append([]string{"bench", "--heads", "2", "--embed", "16"}, bad...)
		if code, _, stderr := runCLI(args...); code != 1 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q", bad, code, stderr)
		}
	}
}

// TestSDPAFlops checks the core's FLOP and byte counts against sums written out.
func TestSDPAFlops(t *testing.T) {
	cfg := &benchConfig{embed: 16, heads: 4, batch: 2, kvHeads: 2, window: 3}
	pairs := 0
	for i := range 10 {
		pairs += min(i+1, 4)
	}
	if got, want := cfg.sdpaFlops(10), float64(4*4*4*2*pairs); got != want {
		t.Errorf("window flops %v, want %v", got, want)
	}
	cfg.window = 0
	if got, want := cfg.sdpaFlops(10), float64(4*4*4*2*100); got != want {
		t.Errorf("full flops %v, want %v", got, want)
	}
	// A window longer than the sequence lets every causal pair through: T(T+1)/2 of them, also
	// for W = MaxInt, where W + 1 overflows.
	for _, w := range []int{9, 10, math.MaxInt} {
		cfg.window = w
		if got, want := cfg.sdpaFlops(10), float64(4*4*4*2*55); got != want {
			t.Errorf("flops under a window of %d: %v, want %v", w, got, want)
		}
	}
	cfg.window = 0
	// With patterns (37 pairs kept over the 4 heads), mha's rows count the pairs kept; mha-dense
	// and torch-eager, which run dense attention, every pair.
	cfg.pairs = map[int]float64{10: 37}
	for impl, pairs := range map[string]int{"mha": 37, "mha-bfloat16": 37, "mha-dense": 400, "mha-dense-float32": 400, "torch-eager": 400} {
		if got, want := cfg.implFlops(impl, 10), float64(4*4*2*pairs); got != want {
			t.Errorf("%s flops %v, want %v", impl, got, want)
		}
	}
	cfg.pairs = nil
	cfg.decode = true
	if got, want := cfg.sdpaFlops(10), float64(4*4*4*2*10); got != want {
		t.Errorf("decode flops %v, want %v", got, want)
	}
	if got, want := cfg.cacheBytes(10, mha.CacheBFloat16), float64(10*2*2*4*2*2); got != want {
		t.Errorf("cache bytes %v, want %v", got, want)
	}
	// Under a window of 3 the step's query reads the 4 last keys, or all of a shorter cache, as
	// under a window of MaxInt.
	for _, c := range []struct{ window, cache, keys int }{{3, 10, 4}, {3, 3, 3}, {math.MaxInt, 10, 10}, {math.MaxInt, 1, 1}} {
		cfg.window = c.window
		if got, want := cfg.sdpaFlops(c.cache), float64(4*4*4*2*c.keys); got != want {
			t.Errorf("decode flops with a window of %d, cache %d: %v, want %v", c.window, c.cache, got, want)
		}
		if got, want := cfg.cacheBytes(c.cache, mha.CacheBFloat16), float64(c.keys*2*2*4*2*2); got != want {
			t.Errorf("cache bytes with a window of %d, cache %d: %v, want %v", c.window, c.cache, got, want)
		}
	}
}

// TestKeptPairs counts the pairs that sparse patterns keep against the patterns' definitions
// applied pair by pair: r = i − j, local:W keeps |r| ≤ W, strided:S keeps |r| < S or S | r,
// global:I keeps row and column I, a block map keeps the pairs of its true blocks; then the
// causal mask (j ≤ i) and a window of w keys back (i − w ≤ j ≤ i).
func TestKeptPairs(t *testing.T) {
	const n, heads = 37, 3
	rng := tensor.NewRNG(5)
	nb := (n + 7) / 8
	blocks := tensor.NewBool(heads, nb, nb)
	for i := range blocks.Data {
		blocks.Data[i] = rng.Float64() < 0.4
	}
	abs := func(x int) int { return max(x, -x) }
	for _, tc := range []struct {
		patterns []string
		keep     func(h, i, j int) bool
	}{
		{[]string{"local:4", "global:0", "global:30"}, func(_, i, j int) bool {
			return abs(i-j) <= 4 || i == 0 || j == 0 || i == 30 || j == 30
		}},
		{[]string{"strided:5"}, func(_, i, j int) bool { return abs(i-j) < 5 || (i-j)%5 == 0 }},
		{[]string{"blocks", "local:1"}, func(h, i, j int) bool {
			return blocks.Data[(h*nb+i/8)*nb+j/8] || abs(i-j) <= 1
		}},
	} {
		var ps []mha.Pattern
		for _, s := range tc.patterns {
			if s == "blocks" {
				ps = append(ps, mha.Pattern{Kind: mha.PatternBlocks, Blocks: blocks})
				continue
			}
			p, err := mha.ParsePattern(s)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for _, mask := range []struct {
			causal bool
			w      int
		}{{false, 0}, {true, 0}, {true, 6}} {
			want := 0
			for h := range heads {
				for i := range n {
					for j := range n {
						if tc.keep(h, i, j) && (!mask.causal || j <= i) && (mask.w == 0 || j >= i-mask.w) {
							want++
						}
					}
				}
			}
			got, err := keptPairs(ps, [2]int{8, 8}, heads, n, mask.causal, mask.w)
			if err != nil || got != float64(want) {
				t.Errorf("%v causal %v window %d: %v pairs (%v), want %d", tc.patterns, mask.causal, mask.w, got, err, want)
			}
		}
	}
	if _, err := keptPairs(nil, [2]int{}, heads, n, false, 0); err == nil {
		t.Error("no pattern: no error")
	}
}

// TestBenchTorchSDPA runs the attention core's modes against PyTorch's eager equivalent.
func TestBenchTorchSDPA(t *testing.T) {
	hasTorch(t)
	for _, args := range [][]string{
		{"--gqa", "1", "--window", "5", "--seq", "16"},
		{"--decode", "64", "--gqa", "1"},
	} {
		_, rows := benchLines(t, append([]string{"--torch", "--embed", "16", "--heads", "2", "--runs", "1", "--warmup", "0"}, args...)...)
		if len(rows) == 0 || rows[len(rows)-1].Impl != "torch-eager" || rows[len(rows)-1].KVHeads != 1 {
			t.Errorf("%q: rows %+v, want torch-eager last", args, rows)
		}
	}
}
