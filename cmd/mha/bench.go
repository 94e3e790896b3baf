package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/atomicfile"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/tensor"
	"github.com/spf13/cobra"
)

// benchScripts are the PyTorch and ONNX Runtime helpers of --torch and --ort. They are written
// to a cache directory at run time, so mha bench works from any directory.
//
//go:embed benchscripts
var benchScripts embed.FS

// benchWorkerEnv is set to "1" in the environment of the child that times mha itself. The
// binary ignores it; a test binary, which cannot take mha's command line directly, looks for it
// in TestMain and runs execute instead of the tests.
const benchWorkerEnv = "MHA_BENCH_WORKER"

// Seeds of the benchmarked layer's parameters, of its input and, with --backward, of the
// gradient of its output.
const benchLayerSeed, benchInputSeed, benchGradSeed = 1, 2, 3

// defaultPython is the interpreter of --torch and --ort: Debian's, where apt-get's python3-torch
// is installed.
const defaultPython = "/usr/bin/python3"

// torchInstallHint is what to install for --torch and --ort on Debian.
const torchInstallHint = "apt-get install python3-torch libopenblas0-pthread"

// benchFlags are mha bench's flags as given.
type benchFlags struct {
	seq                           string
	embed, heads, batch, threads  int
	runs, warmup                  int
	causal, needWeights, backward bool
	json, torch, ort, worker      bool
	python                        string
	ggml                          string // --ggml: ggml's build directory or test-backend-ops
	gqa, window, decode           int
	cacheDType                    string // the worker's, with --decode
	sparse                        sparseFlags
	dense                         bool   // --dense: time dense attention beside --pattern/--normalizer
	seqSet                        bool   // --seq was given
	model                         string // --model: time a Hugging Face folder (bench_model.go)
	gguf, llamaBench              string // --gguf, --llama-bench: llama.cpp on the --model folder (bench_llamacpp.go)
	steps                         int    // decode steps with --model
	weights                       string // the worker's weights with --model: stored or f32
	compute                       string // --compute: float32, bfloat16 or a comma list of them
}

// benchConfig is one benchmark: the sequence lengths and everything every measurement shares.
type benchConfig struct {
	seqs                         []int
	embed, heads, batch, threads int
	runs, warmup                 int
	causal, needWeights          bool
	backward                     bool // time forward + backward instead of the forward alone

	// computes are mha's compute types, one "mha" row (or, with several, one "mha-<type>" row
	// each) per type; compute is the worker's (the first of them).
	computes []mha.Compute
	compute  mha.Compute
	peakBF16 float64 // GFLOP/s of VDPBF16PS, measured when a compute type is bfloat16; 0 otherwise

	// The attention core's modes (bench_sdpa.go): kvHeads > 0 times mha.SDPA with that many K/V
	// heads instead of the layer; window > 0 adds a causal sliding window; decode times one new
	// token against a cache of T, the worker's in cacheDType.
	kvHeads, window int
	decode          bool
	cacheDType      string
	sparse          sparseFlags     // patterns and normalizer, as given
	pairs           map[int]float64 // with patterns, the pairs they keep at each T, over all heads
	dense           bool            // also time dense attention of the same shape (mha-dense rows)
	readBW          float64         // bytes/s, measured with --decode
}

// flops is the work of one timed call at sequence length t. A forward is 8·T·E²·B for the four
// projections and 4·T²·E·B for Q·Kᵀ and weights·V. With backward, the conventional count of a
// training step, 3× the forward: the backward does twice the forward's products, dX and dW for
// each projection, and dV, dP, dQ and dK for each head. The recomputation of Q·Kᵀ in mha's
// FlashAttention-2 backward (2·T²·E·B more) is work the algorithm chooses and is not counted.
// Causal attention is counted in full, so that skipping the masked half shows as a higher rate.
func (c *benchConfig) flops(t int) float64 {
	if c.sdpa() {
		return c.sdpaFlops(t)
	}
	b, e, tt := float64(c.batch), float64(c.embed), float64(t)
	fwd := 8*tt*e*e*b + 4*tt*tt*e*b
	if c.backward {
		return 3 * fwd
	}
	return fwd
}

// pass names what is timed, as --json's "pass" field and the table's header say it.
func (c *benchConfig) pass() string {
	if c.backward {
		return "forward+backward"
	}
	return "forward"
}

// newBenchCmd returns mha bench, which also serves, with the hidden --worker flag, as the child
// process that times mha itself.
func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--seq 512,1024,2048,4096] [--embed 768] [--heads 12] [--backward] [--torch] [--ort] [--json] | bench --gqa Hkv|--decode L [--ggml DIR] | bench --pattern P [--dense] | bench --model DIR [--steps 32] [--torch] [--json]",
		Short: "Time self-attention forward calls or training steps, against this machine's FMA peak, PyTorch and ONNX Runtime",
		Long: `Bench times mha's self-attention forward call (mha.Layer.ForwardInto on x [B, T, E]) for each
sequence length T in --seq and reports the median and the fastest of --runs calls after --warmup
calls, the rate in GFLOP/s, that rate as a percentage of this machine's float32 FMA peak, and
memory. The peak is measured at start with the same thread count by a register-only FMA loop
(each thread's rate while it runs, so other processes do not lower it).

FLOPs per forward = 8·T·E²·B (the four projections) + 4·T²·E·B (Q·Kᵀ and weights·V). Causal
attention is counted with the same FLOPs, so the work it skips shows as a higher rate (and the
percentage of peak may pass 100). The attention core's modes (--gqa, --window, --pattern,
--decode) time mha.SDPA or a KV cache step without projections and count 4·D·H·B FLOPs per
(query, key) pair the call lets through: a window's pairs, or those the sparse patterns keep
(under the causal mask or window when given), so that their rate is the kernels' efficiency.
--dense, with --pattern or --normalizer, times dense softmax attention of the same shape (the
same mask and window) in the same run, as rows mha-dense (mha-dense-<type> with several
--compute types), and prints the speed-up over it and, with patterns, each call's time against
dense's share of the pairs kept (1 where time falls in proportion to them).

--backward times one training step instead: mha.Layer.ForwardTrain and Layer.Backward with a
fixed random gradient of the output dY [B, T, E], giving the gradients of the input and of every
parameter; every implementation's gradients are set to zero before each call, outside the
timing, and the call adds into them (PyTorch's accumulation into .grad). FLOPs per step = 3× the
forward's = 24·T·E²·B + 12·T²·E·B, the conventional count: the backward does twice the
forward's products (dX and dW of each projection; dV, dP, dQ, dK of each head). mha's
FlashAttention-2 backward also recomputes Q·Kᵀ (2·T²·E·B more, without --need-weights); that
is not counted. PyTorch runs in train mode with dropout 0 and autograd (its fused fast path is
inference-only), calling out.backward(dY). --ort is forward only and is refused with --backward.

Every (implementation, T) runs in a fresh child process, and the implementations take turns at
each T, so they share the machine's state. peak_rss_mib is the child's peak resident memory;
extra_mib is how far it rose above the child's resident memory once the layer and the input
existed (the work space of the calls; -1 where the platform does not tell).

--torch adds PyTorch 1.13 through --python (Debian's python3-torch): "torch" is
nn.MultiheadAttention(E, H, batch_first=True) in eval mode under inference_mode (it takes its
fused fast path when there is no mask and H is even), or in train mode with --backward;
"torch-sdpa" the same computation around F._scaled_dot_product_attention (which has a backward
in 1.13); "torch-jemalloc" "torch" with libjemalloc preloaded (when Debian's libjemalloc2 is
installed) and told to keep freed pages, so that its temporaries do not fault in anew each
call. --ort adds ONNX Runtime (npm's onnxruntime-node, installed once into the user cache
directory) on a torch.onnx export of the same module, checked against PyTorch's output before
it is timed. Each prints the ratio of mha's speed to theirs per T.

--ggml DIR, with --gqa or --decode, adds ggml's FLASH_ATTN_EXT on its CPU backend ("ggml-f16",
"ggml-f32": the K/V type), timed by ggml's test-backend-ops perf on a --test-file case of the same
shape; DIR is ggml's build directory or that binary (benchscripts/build_ggml.sh builds it from a
ggml or llama.cpp source directory). Its time is the mean of the runs it chooses; it has no
causal flag (its mask is random) and no thread flag (OMP_THREAD_LIMIT caps an OpenMP build).

--model DIR times a whole Hugging Face folder instead (bench_model.go): prefill of each T of
--seq (default 128,512) into an empty KV cache, and --steps greedy decode steps of one token
after an 8-token prompt, as tokens/s, resident memory after loading and at the peak, and the
weight bytes a step reads per second against the measured read bandwidth. A bf16 or f16 folder
runs with its weights as stored ("mha") and converted to float32 ("mha-f32"); --compute bfloat16
(one type with --model) has mha compute the prompts' matrix products in bfloat16
(nn.RunOptions.Compute; a decode step's one-row products are float32 dot products either way),
and the rows' "compute" says which. --torch adds "torch-f32", benchscripts/torch_model.py (the
Llama family in plain PyTorch, float32); --gguf FILE adds "llama.cpp", its llama-bench (--llama-bench, default the one in PATH; built from a
llama.cpp checkout you fetched: cmake --build BUILD --target llama-bench) on FILE, the same
model converted to GGUF (llama.cpp's convert_hf_to_gguf.py, or benchscripts/hf_to_gguf.py for a
folder without a tokenizer), with the same threads, prompt lengths, steps and runs: its prefill
starts from an empty context, its decode is the mean time per token of each run of --steps
tokens from an empty context, and its read MB is the GGUF's tensor bytes. --json
then prints {"model":…} first and one object per implementation. The model's config gives its
shapes and attention, so the layer's and the core's flags (--embed, --pattern, --decode, …) are
refused with it, and --steps without it.

--json prints one JSON object per line: {"peak_gflops":…} first, then one per measurement, whose
"pass" is "forward" or "forward+backward".`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			f.seqSet = fl.Changed("seq")
			if f.model != "" {
				// The model's own shapes and attention are timed: the layer's and the core's
				// flags would be ignored.
				for _, name := range []string{"embed", "heads", "batch", "causal", "need-weights", "backward", "ort", "ggml",
					"gqa", "window", "decode", "pattern", "block", "normalizer", "dense"} {
					if fl.Changed(name) {
						return fmt.Errorf("--model times the model's own prefill and decode, its shapes and attention as its config gives them: --%s does not apply", name)
					}
				}
				return runModelBench(&f, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if fl.Changed("steps") {
				return errors.New("--steps counts the decode steps of --model: want it with --model")
			}
			if fl.Changed("gguf") || fl.Changed("llama-bench") {
				return errors.New("--gguf and --llama-bench time llama.cpp on a whole model: want them with --model")
			}
			cfg, err := f.config()
			if err != nil {
				return err
			}
			if f.worker {
				return benchWorker(cfg, cmd.OutOrStdout())
			}
			return runBench(&f, cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.seq, "seq", "512,1024,2048,4096", "sequence lengths T to time, comma-separated")
	fl.IntVar(&f.embed, "embed", 768, "embedding dimension E")
	fl.IntVar(&f.heads, "heads", 12, "number of heads H, a divisor of E")
	fl.IntVar(&f.batch, "batch", 1, "batch size B")
	fl.IntVar(&f.threads, "threads", min(runtime.GOMAXPROCS(0), maxThreads), fmt.Sprintf("threads for every implementation and for the FMA peak, at most %d", maxThreads))
	fl.BoolVar(&f.causal, "causal", false, "causal self-attention (query i sees keys ≤ i)")
	fl.BoolVar(&f.needWeights, "need-weights", false, "also return the attention weights, averaged over heads")
	fl.BoolVar(&f.backward, "backward", false, "time forward + backward (the gradients of the input and every parameter) instead of the forward alone")
	fl.IntVar(&f.runs, "runs", 7, "timed calls per measurement (the median and the fastest are reported)")
	fl.IntVar(&f.warmup, "warmup", 2, "untimed calls before the timed ones")
	fl.BoolVar(&f.json, "json", false, "print JSON lines instead of a table")
	fl.BoolVar(&f.torch, "torch", false, "also time PyTorch: torch, torch-sdpa, torch-jemalloc")
	fl.BoolVar(&f.ort, "ort", false, "also time ONNX Runtime (onnxruntime-node, through node and npm)")
	fl.StringVar(&f.python, "python", defaultPython, "Python with PyTorch, for --torch and --ort")
	fl.StringVar(&f.ggml, "ggml", "", "with --gqa or --decode, also time ggml's FLASH_ATTN_EXT (CPU) by its test-backend-ops: DIR is ggml's build directory or the binary (benchscripts/build_ggml.sh)")
	fl.BoolVar(&f.worker, "worker", false, "time mha at the one T of --seq in this process and print the raw result (used by mha bench itself)")
	fl.IntVar(&f.gqa, "gqa", 0, "time the attention core (mha.SDPA, no projections) with this many K/V heads shared by the --heads query heads")
	fl.IntVar(&f.window, "window", 0, "time the attention core with a causal sliding window of W keys before each query")
	f.sparse.register(fl)
	fl.BoolVar(&f.dense, "dense", false, "with --pattern or --normalizer, also time dense softmax attention of the same shape in the same run (rows mha-dense), with the speed-up and the sparse time against dense's share of the pairs kept")
	fl.IntVar(&f.decode, "decode", 0, "time one new token against a KV cache of L tokens, per cache type (f32, bf16, f16), against the read bandwidth")
	fl.StringVar(&f.cacheDType, "cache-dtype", "f32", "the worker's cache type with --decode (used by mha bench itself)")
	fl.StringVar(&f.model, "model", "", "time a whole model instead: the Hugging Face folder DIR's prefill (--seq, default 128,512) and decode tokens/s, memory, against the read bandwidth")
	fl.IntVar(&f.steps, "steps", 32, "timed decode steps with --model")
	fl.StringVar(&f.gguf, "gguf", "", "with --model, also time llama.cpp's llama-bench on FILE, the same model as GGUF")
	fl.StringVar(&f.llamaBench, "llama-bench", "llama-bench", "llama.cpp's llama-bench binary, for --gguf")
	fl.StringVar(&f.weights, "weights", "stored", "the worker's weights with --model: stored or f32 (used by mha bench itself)")
	fl.StringVar(&f.compute, "compute", "float32", "mha's compute type: float32 (PyTorch's results) or bfloat16 (bf16 products, float32 sums and softmax; inference only), or both comma-separated for one row each in the same run")
	_ = fl.MarkHidden("worker")
	_ = fl.MarkHidden("weights")
	return cmd
}

// maxRuns bounds --runs, --warmup and --steps: a million calls is more than any measurement
// needs, and their sums (the length of a KV cache, the tokens to generate) cannot overflow.
const maxRuns = 1_000_000

// checkBounds returns an error naming the first count above its bound: --threads above
// maxThreads, --runs, --warmup or --steps above maxRuns.
func (f *benchFlags) checkBounds() error {
	for _, p := range []struct {
		name    string
		v, most int
	}{{"threads", f.threads, maxThreads}, {"runs", f.runs, maxRuns}, {"warmup", f.warmup, maxRuns}, {"steps", f.steps, maxRuns}} {
		if p.v > p.most {
			return fmt.Errorf("--%s is %d, want at most %d", p.name, p.v, p.most)
		}
	}
	return nil
}

// config checks the flags and returns the benchmark they describe.
func (f *benchFlags) config() (*benchConfig, error) {
	seqs, err := parseSeq(f.seq)
	if err != nil {
		return nil, err
	}
	cfg := &benchConfig{seqs: seqs, embed: f.embed, heads: f.heads, batch: f.batch, threads: f.threads,
		runs: f.runs, warmup: f.warmup, causal: f.causal, needWeights: f.needWeights, backward: f.backward}
	for _, p := range []struct {
		name string
		v    int
	}{{"embed", f.embed}, {"heads", f.heads}, {"batch", f.batch}, {"threads", f.threads}, {"runs", f.runs}} {
		if p.v <= 0 {
			return nil, fmt.Errorf("--%s is %d, want a positive integer", p.name, p.v)
		}
	}
	if f.warmup < 0 {
		return nil, fmt.Errorf("--warmup is %d, want 0 or more untimed calls", f.warmup)
	}
	if err := f.checkBounds(); err != nil {
		return nil, err
	}
	if f.embed%f.heads != 0 {
		return nil, fmt.Errorf("--heads %d does not divide --embed %d, want a divisor of %d (each head gets E/H features)", f.heads, f.embed, f.embed)
	}
	if err := (mha.Config{EmbedDim: f.embed, NumHeads: f.heads}).Validate(); err != nil {
		return nil, fmt.Errorf("--embed %d --heads %d: %s", f.embed, f.heads, strings.TrimPrefix(err.Error(), "mha: "))
	}
	const maxInput = 1 << 31 // floats in x [B, T, E] or in a KV cache's keys [B, Hkv, T, E/H]: 8 GiB
	if f.decode > 0 {
		// The cache holds the --decode tokens and one more per call.
		if n := f.decode + f.warmup + f.runs; f.decode > maxInput || n > maxInput/f.embed/f.batch {
			return nil, fmt.Errorf("--decode %d with --warmup %d, --runs %d, --batch %d and --embed %d gives a KV cache of more than 2^31 floats, want a smaller size", f.decode, f.warmup, f.runs, f.batch, f.embed)
		}
	} else {
		for _, t := range seqs {
			if t > maxInput/f.embed/f.batch {
				return nil, fmt.Errorf("--seq %d with --batch %d and --embed %d gives an input of more than 2^31 floats, want a smaller size", t, f.batch, f.embed)
			}
		}
	}
	if f.worker && len(seqs) != 1 {
		return nil, fmt.Errorf("--worker times one sequence length, got --seq %s", f.seq)
	}
	for _, field := range strings.Split(f.compute, ",") {
		ct, err := mha.ParseCompute(strings.TrimSpace(field))
		if err != nil {
			return nil, fmt.Errorf("--compute %q: %v", f.compute, err)
		}
		if slices.Contains(cfg.computes, ct) {
			return nil, fmt.Errorf("--compute %q names %s twice", f.compute, ct)
		}
		cfg.computes = append(cfg.computes, ct)
	}
	cfg.compute = cfg.computes[0]
	if f.worker && len(cfg.computes) != 1 {
		return nil, fmt.Errorf("--worker times one compute type, got --compute %s", f.compute)
	}
	if bf16 := slices.Contains(cfg.computes, mha.ComputeBFloat16); bf16 && f.backward {
		return nil, errors.New("--compute bfloat16 is inference only (mha's Backward is float32), want --backward with --compute float32")
	} else if bf16 && f.decode != 0 {
		return nil, errors.New("--compute bfloat16 does not apply to --decode: the KV cache's attention computes in float32 (its storage type is what --decode compares), want --compute float32")
	}
	if f.backward && f.ort {
		return nil, errors.New("--ort times ONNX Runtime's forward only (its inference session has no backward), want --backward without --ort")
	}
	if f.dense && len(f.sparse.patterns) == 0 && f.sparse.normalizer == "softmax" {
		return nil, errors.New("--dense times dense attention beside --pattern or --normalizer: want it with one of them")
	}
	if f.gqa != 0 || f.window != 0 || f.decode != 0 || len(f.sparse.patterns) > 0 || f.sparse.block != "" || f.sparse.normalizer != "softmax" {
		if err := f.sdpaConfig(cfg); err != nil {
			return nil, err
		}
	}
	if f.ggml != "" && (!cfg.sdpa() || cfg.window > 0 || len(f.sparse.patterns) > 0 || f.sparse.normalizer != "softmax") {
		return nil, errors.New("--ggml times ggml's FLASH_ATTN_EXT, dense attention with grouped K/V heads: want it with --gqa Hkv (prefill, causal or not) or --decode L, without --window, --pattern and --normalizer")
	}
	if (f.torch || f.ort) && f.python == "" {
		return nil, fmt.Errorf("--python is empty, want the Python that has PyTorch (such as %s)", defaultPython)
	}
	return cfg, nil
}

// parseSeq reads a comma-separated list of positive sequence lengths.
func parseSeq(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--seq is empty, want a comma-separated list of sequence lengths such as 512,1024")
	}
	var seqs []int
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		t, err := strconv.Atoi(field)
		if err != nil || t <= 0 {
			return nil, fmt.Errorf("--seq %q: %q is not a positive integer, want a comma-separated list of sequence lengths such as 512,1024", s, field)
		}
		seqs = append(seqs, t)
	}
	return seqs, nil
}

// workerResult is what a child prints: its times and memory. ort_bench.js and torch_mha.py print
// the same fields.
type workerResult struct {
	MS      []float64 `json:"ms"`           // one per timed call
	BaseKiB int64     `json:"rss_base_kib"` // resident memory once the layer and input exist; -1 if unknown
	PeakKiB int64     `json:"rss_peak_kib"` // peak resident memory at the end; -1 if unknown
}

// benchWorker times mha at cfg's one sequence length in this process and prints a workerResult
// line.
func benchWorker(cfg *benchConfig, w io.Writer) error {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.threads))
	var call benchCall
	if cfg.sdpa() {
		var err error
		if call, err = newSDPABenchCall(cfg, cfg.seqs[0]); err != nil {
			return err
		}
	} else {
		l, err := mha.New(mha.Config{EmbedDim: cfg.embed, NumHeads: cfg.heads, Seed: benchLayerSeed})
		if err != nil {
			return err
		}
		x := tensor.New(cfg.batch, cfg.seqs[0], cfg.embed)
		tensor.NewRNG(benchInputSeed).Normal(x, 1)
		call = newBenchCall(cfg, l, x)
	}
	runtime.GC()
	res := workerResult{BaseKiB: procStatusKiB("VmRSS")}
	for range cfg.warmup {
		call.reset()
		if err := call.run(); err != nil {
			return err
		}
	}
	for range cfg.runs {
		call.reset()
		t0 := time.Now()
		if err := call.run(); err != nil {
			return err
		}
		res.MS = append(res.MS, float64(time.Since(t0).Nanoseconds())/1e6)
	}
	res.PeakKiB = procStatusKiB("VmHWM")
	return json.NewEncoder(w).Encode(res)
}

// benchCall is what a worker times: run, with reset called before each run, outside the timing.
type benchCall struct {
	run   func() error
	reset func()
}

// newBenchCall returns the call to time on x [B, T, E]: a forward, or with cfg.backward a
// training step, forward and backward of a fixed random dY [B, T, E] into gradients that reset
// sets to zero. Every call reuses one Result (and Saved and Grads): the steady state a server or
// a training loop runs, where the memory of the outputs is reused, so the garbage collector's
// headroom does not count as the layer's memory.
func newBenchCall(cfg *benchConfig, l *mha.Layer, x *tensor.Tensor) benchCall {
	opt := &mha.Options{Causal: cfg.causal, NeedWeights: cfg.needWeights, Workers: cfg.threads, Compute: cfg.compute}
	var r mha.Result
	if !cfg.backward {
		return benchCall{run: func() error { return l.ForwardInto(&r, x, nil, nil, opt) }, reset: func() {}}
	}
	dy := tensor.New(x.Shape...)
	tensor.NewRNG(benchGradSeed).Normal(dy, 1)
	var s mha.Saved
	var g mha.Grads
	return benchCall{
		run: func() error {
			if err := l.ForwardTrain(&r, &s, x, nil, nil, opt); err != nil {
				return err
			}
			return l.Backward(&g, &s, dy)
		},
		reset: g.Zero,
	}
}

// procStatusKiB reads a memory line (VmRSS, VmHWM) of /proc/self/status in KiB; -1 where there is
// no such file (outside Linux).
func procStatusKiB(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return v
				}
			}
		}
	}
	return -1
}

// benchImpl is one implementation under test: a name and the child process that times it at
// sequence length t, and how to read what the child printed: parse, or where parse is nil a
// workerResult JSON line.
type benchImpl struct {
	name    string
	command func(t int) *exec.Cmd
	parse   func(t int, stdout []byte) (*measurement, error)
}

// benchRow is one measurement, as --json prints it.
type benchRow struct {
	Impl        string         `json:"impl"`
	Pass        string         `json:"pass"` // "forward" or "forward+backward"
	T           int            `json:"T"`
	B           int            `json:"B"`
	E           int            `json:"E"`
	H           int            `json:"H"`
	Causal      bool           `json:"causal"`
	NeedWeights bool           `json:"need_weights"`
	Threads     int            `json:"threads"`
	Compute     string         `json:"compute"`  // the row's compute type: float32, bfloat16 (mha --compute), float16 (ggml-f16)
	MS          jsonnum.Number `json:"ms"`       // median of the timed calls
	MSMin       jsonnum.Number `json:"ms_min"`   // fastest timed call
	GFLOPS      jsonnum.Number `json:"gflops"`   // flops(T) over the median; null when a child timed 0 ms
	PeakPct     jsonnum.Number `json:"peak_pct"` // of the FMA peak; of the VDPBF16PS peak for a bfloat16 row
	PeakRSSMiB  float64        `json:"peak_rss_mib"`
	ExtraMiB    float64        `json:"extra_mib"` // peak − resident memory after setup; -1 if unknown

	// The attention core's modes: K/V heads, window, and for a decode step the cache bytes read
	// per second and their share of the measured read bandwidth.
	KVHeads   int            `json:"kv_heads,omitempty"`
	Window    int            `json:"window,omitempty"`
	Decode    bool           `json:"decode,omitempty"`
	ReadGBps  jsonnum.Number `json:"read_gbps,omitempty"`
	ReadBWPct jsonnum.Number `json:"read_bw_pct,omitempty"`
}

// peakRow is --json's first line.
type peakRow struct {
	PeakGFLOPS jsonnum.Number `json:"peak_gflops"`
	// PeakBF16 is the VDPBF16PS peak (GFLOP/s), the peak of bfloat16 rows, with --compute
	// bfloat16; 0 (left out) otherwise, or where the CPU lacks AVX512_BF16.
	PeakBF16 jsonnum.Number `json:"peak_bf16_gflops,omitempty"`
	ISA      string         `json:"isa"`
	Threads  int            `json:"threads"`
}

// runBench measures every implementation the flags ask for at every sequence length and prints
// the results.
func runBench(f *benchFlags, cfg *benchConfig, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the mha binary to run the measurements in: %v", err)
	}
	worker := func(args ...string) *exec.Cmd {
		c := exec.Command(exe, args...)
		c.Env = append(os.Environ(), benchWorkerEnv+"=1")
		return c
	}
	impls := mhaImpls(cfg, worker)
	if cfg.sdpa() {
		impls = sdpaImpls(cfg, worker)
	}
	var info []string // lines for the human output's header
	if f.torch || f.ort {
		dir, err := writeBenchScripts()
		if err != nil {
			return err
		}
		probe, err := probeTorch(f.python, dir, cfg.threads)
		if err != nil {
			return err
		}
		if f.torch {
			if cfg.sdpa() {
				line := fmt.Sprintf("PyTorch %s, BLAS %s; torch-eager = its plain eager equivalent (1.13 has no GQA, window or KV cache call): K/V repeated per head, q·kᵀ/√D + an explicit mask, softmax, ·v, float32", probe.Version, probe.blasName())
				if len(f.sparse.patterns) > 0 || f.sparse.normalizer != "softmax" {
					line += "; it has no sparse patterns or normalizers: it runs dense softmax attention, its FLOPs counted over every pair"
				}
				info = append(info, line)
			} else {
				info = append(info, probe.describe(cfg))
			}
			probe.warnSlowBLAS(stderr)
			if cfg.sdpa() {
				impls = append(impls, torchSDPAImpl(f.python, dir, cfg))
			} else {
				impls = append(impls, torchImpls(f.python, dir, cfg, stderr)...)
			}
		}
		if f.ort {
			im, line, err := prepareORT(f.python, dir, cfg, stderr)
			if err != nil {
				return err
			}
			info = append(info, line)
			impls = append(impls, im)
		}
	}
	if f.ggml != "" {
		im, line, cleanup, err := prepareGGML(f.ggml, cfg, stderr)
		if err != nil {
			return err
		}
		defer cleanup()
		info = append(info, line)
		impls = append(impls, im...)
	}

	if busy, ok := busyCPUs(200 * time.Millisecond); ok && busy >= 0.2 {
		fmt.Fprintf(stderr, "note: other processes kept %.1f of %d CPUs busy just before measuring, so timings will vary; compare implementations within one run\n", busy, runtime.NumCPU())
	}
	prev := runtime.GOMAXPROCS(max(cfg.threads, runtime.GOMAXPROCS(0)))
	peak := kernel.PeakGFLOPS(cfg.threads, kernel.DefaultPeakDuration)
	if slices.Contains(cfg.computes, mha.ComputeBFloat16) {
		cfg.peakBF16 = kernel.PeakBF16GFLOPS(cfg.threads, kernel.DefaultPeakDuration)
	}
	runtime.GOMAXPROCS(prev)

	// With --decode the read bandwidth is measured after the children have run: a child's peak
	// RSS would otherwise include the measurement's buffer, which the kernel counts from the
	// parent it was forked from.
	type result struct {
		impl string
		t    int
		m    *measurement
	}
	var results []result
	out := newBenchPrinter(stdout, f.json, cfg, impls)
	if !cfg.decode {
		if err := out.header(peak, info); err != nil {
			return err
		}
	}
	for _, t := range cfg.seqs {
		for _, im := range impls {
			m, err := measure(im, t)
			if err != nil {
				return err
			}
			if cfg.decode {
				results = append(results, result{im.name, t, m})
			} else if err := out.row(cfg.row(im.name, t, m, peak)); err != nil {
				return err
			}
		}
	}
	if cfg.decode {
		prev := runtime.GOMAXPROCS(max(cfg.threads, runtime.GOMAXPROCS(0)))
		cfg.readBW = kernel.ReadBandwidth(cfg.threads, 0, 0)
		runtime.GOMAXPROCS(prev)
		if err := out.header(peak, info); err != nil {
			return err
		}
		for _, r := range results {
			if err := out.row(cfg.row(r.impl, r.t, r.m, peak)); err != nil {
				return err
			}
		}
	}
	return out.ratios()
}

// busyCPUs returns how many CPUs' worth of time the machine spent busy during d, from
// /proc/stat, while this process sleeps; ok is false where there is no /proc/stat (outside
// Linux).
func busyCPUs(d time.Duration) (busy float64, ok bool) {
	read := func() (total, idle float64, ok bool) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, false
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			return 0, 0, false
		}
		for i, s := range f[1:] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return 0, 0, false
			}
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return total, idle, true
	}
	t0, i0, ok0 := read()
	time.Sleep(d)
	t1, i1, ok1 := read()
	if !ok0 || !ok1 || t1 <= t0 {
		return 0, false
	}
	return (1 - (i1-i0)/(t1-t0)) * float64(runtime.NumCPU()), true
}

// mhaImpls are mha's implementations: one per compute type, "mha" when there is one, else
// "mha-<type>" (mha-float32, mha-bfloat16) in --compute's order.
func mhaImpls(cfg *benchConfig, worker func(args ...string) *exec.Cmd) []benchImpl {
	var impls []benchImpl
	for _, ct := range cfg.computes {
		name := "mha"
		if len(cfg.computes) > 1 {
			name += "-" + ct.String()
		}
		impls = append(impls, benchImpl{name: name, command: func(t int) *exec.Cmd {
			return worker(append(cfg.workerArgs(t), "--compute", ct.String())...)
		}})
	}
	return impls
}

// implCompute is the compute type of implementation impl's row: mha's as --compute says (as
// mha.Compute.Effective runs it here: float32 for bfloat16 on a CPU without AVX512_BF16),
// float16 for ggml with F16 K/V (its K·Q products read f16 operands), float32 for the rest.
func (c *benchConfig) implCompute(impl string) string {
	switch {
	case (impl == "mha" || impl == "mha-dense") && len(c.computes) > 0:
		return c.computes[0].Effective().String()
	case strings.HasSuffix(impl, "float32"):
		return "float32"
	case strings.HasSuffix(impl, "bfloat16"):
		return mha.ComputeBFloat16.Effective().String()
	case impl == "ggml-f16":
		return "float16"
	}
	return "float32"
}

// workerArgs is the command line of the child that times mha at sequence length t.
func (c *benchConfig) workerArgs(t int) []string {
	args := []string{"bench", "--worker", "--seq", strconv.Itoa(t),
		"--embed", strconv.Itoa(c.embed), "--heads", strconv.Itoa(c.heads), "--batch", strconv.Itoa(c.batch),
		"--threads", strconv.Itoa(c.threads), "--runs", strconv.Itoa(c.runs), "--warmup", strconv.Itoa(c.warmup)}
	if c.sdpa() {
		args = append(args, c.sdpaArgs()...)
	}
	return append(args, c.modeArgs()...)
}

// modeArgs are the flags of what is computed that mha's worker and torch_mha.py share.
func (c *benchConfig) modeArgs() []string {
	var args []string
	if c.causal {
		args = append(args, "--causal")
	}
	if c.needWeights {
		args = append(args, "--need-weights")
	}
	if c.backward {
		args = append(args, "--backward")
	}
	return args
}

// scriptArgs are the shape and timing arguments torch_mha.py and ort_bench.js share.
func (c *benchConfig) scriptArgs(t int) []string {
	return []string{"--B", strconv.Itoa(c.batch), "--T", strconv.Itoa(t), "--E", strconv.Itoa(c.embed),
		"--threads", strconv.Itoa(c.threads), "--runs", strconv.Itoa(c.runs), "--warmup", strconv.Itoa(c.warmup)}
}

// measurement is one child's result: its times and memory in KiB.
type measurement struct {
	ms                []float64
	peakKiB, extraKiB int64 // -1 if unknown
	threads           int   // the child's threads where they are not --threads; 0: --threads
}

// measure runs im's child at sequence length t and collects its result.
func measure(im benchImpl, t int) (*measurement, error) {
	c := im.command(t)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("%s at T=%d failed: %s", im.name, t, childFailure(err, &stderr))
	}
	if im.parse != nil {
		m, err := im.parse(t, stdout.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s at T=%d: %v", im.name, t, err)
		}
		m.peakKiB = rusageMaxRSSKiB(c.ProcessState)
		return m, nil
	}
	var r workerResult
	if err := lastJSONLine(stdout.Bytes(), &r); err != nil || len(r.MS) == 0 {
		return nil, fmt.Errorf("%s at T=%d printed no result (want a JSON line with \"ms\"), got %q", im.name, t, lastLine(stdout.String()))
	}
	m := &measurement{ms: r.MS, peakKiB: rusageMaxRSSKiB(c.ProcessState), extraKiB: -1}
	if m.peakKiB < 0 {
		m.peakKiB = r.PeakKiB
	}
	if r.BaseKiB >= 0 && r.PeakKiB >= 0 {
		m.extraKiB = max(r.PeakKiB-r.BaseKiB, 0)
	}
	return m, nil
}

// row turns a measurement into a benchRow.
func (c *benchConfig) row(impl string, t int, m *measurement, peak float64) benchRow {
	med, fastest := median(m.ms), slices.Min(m.ms)
	gflops := c.implFlops(impl, t) / (med / 1e3) / 1e9
	mib := func(kib int64) float64 {
		if kib < 0 {
			return -1
		}
		return round(float64(kib)/1024, 1)
	}
	r := benchRow{Impl: impl, Pass: c.pass(), T: t, B: c.batch, E: c.embed, H: c.heads, Causal: c.causal,
		NeedWeights: c.needWeights, Threads: c.threads, MS: sig4(med), MSMin: sig4(fastest),
		Compute: c.implCompute(impl), GFLOPS: sig4(gflops), PeakPct: sig4(100 * gflops / peak),
		PeakRSSMiB: mib(m.peakKiB), ExtraMiB: mib(m.extraKiB), KVHeads: c.kvHeads, Window: c.window, Decode: c.decode}
	if m.threads > 0 {
		r.Threads = m.threads
	}
	if r.Compute == "bfloat16" && c.peakBF16 > 0 {
		r.PeakPct = sig4(100 * gflops / c.peakBF16)
	}
	if c.decode {
		dtype := mha.CacheFloat32 // torch-eager's cache, and mha-f32's and ggml-f32's
		for _, d := range cacheDTypes {
			if impl == "mha-"+d.name || impl == "ggml-"+d.name {
				dtype = d.dtype
			}
		}
		rate := c.cacheBytes(t, dtype) / (med / 1e3)
		r.ReadGBps, r.ReadBWPct = sig4(rate/1e9), sig4(100*rate/c.readBW)
	}
	return r
}

// median returns the median of x (the mean of the middle two when len(x) is even).
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// round rounds x to the given number of decimal places.
func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}

// sig4 rounds x to four significant digits, for JSON that is short but never rounds a small
// positive rate to 0 (and writes NaN and ±Inf as null).
func sig4(x float64) jsonnum.Number {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return jsonnum.Number(v)
}

// rusageMaxRSSKiB is a finished child's peak resident memory in KiB from its rusage, or -1
// where the platform's rusage has none. It reads syscall.Rusage's Maxrss by reflection, because
// Windows's syscall.Rusage has no such field and a type assertion would not compile there.
func rusageMaxRSSKiB(ps *os.ProcessState) int64 {
	if ps == nil {
		return -1
	}
	v := reflect.ValueOf(ps.SysUsage())
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return -1
	}
	f := v.FieldByName("Maxrss")
	if !f.IsValid() || !f.CanInt() {
		return -1
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return f.Int() / 1024 // bytes there, KiB elsewhere
	}
	return f.Int()
}

// childFailure says why a child failed: the line of its stderr that says so (failureLine), or
// how it ended.
func childFailure(err error, stderr *bytes.Buffer) string {
	msg := strings.TrimPrefix(failureLine(stderr.String()), "mha: ")
	var ee *exec.ExitError
	if errors.As(err, &ee) && !ee.Exited() {
		if msg != "" {
			return fmt.Sprintf("%v (%s)", err, msg)
		}
		return fmt.Sprintf("%v (out of memory?)", err)
	}
	if msg == "" {
		return err.Error()
	}
	return msg
}

// failureLine returns the line of a failed child's stderr s that says why, trimmed: the first
// that starts a Go runtime's crash report ("fatal error: …", "panic: …", "runtime: out of
// memory…"), which a stack trace follows, else the last non-blank line (a Python traceback's
// last line is the exception, an mha child's only line its error).
func failureLine(s string) string {
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		for _, start := range []string{"fatal error: ", "panic: ", "runtime: out of memory"} {
			if strings.HasPrefix(line, start) {
				return line
			}
		}
	}
	return lastLine(s)
}

// lastLine returns the last non-blank line of s, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// lastJSONLine decodes the last line of out that starts with '{' into v.
func lastJSONLine(out []byte, v any) error {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 && line[0] == '{' {
			last = append(last[:0], line...)
		}
	}
	if last == nil {
		return errors.New("no JSON line")
	}
	return json.Unmarshal(last, v)
}

// writeBenchScripts writes the embedded scripts to a directory of the user's cache and returns
// it. The directory is named after the hash of package.json and package-lock.json, so the
// onnxruntime-node that npm installs there is reused until those change; the scripts themselves
// are rewritten whenever they differ from this binary's.
func writeBenchScripts() (string, error) {
	entries, err := fs.ReadDir(benchScripts, "benchscripts")
	if err != nil {
		return "", err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := benchScripts.ReadFile(path.Join("benchscripts", e.Name()))
		if err != nil {
			return "", err
		}
		files[e.Name()] = b
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "mha", "bench-"+shortHash(files["package.json"], files["package-lock.json"]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot make the directory for the benchmark scripts: %v", err)
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
			continue
		}
		// Atomically, so that a concurrent mha bench never sees half a file.
		if err := atomicfile.Write(p, b); err != nil {
			return "", fmt.Errorf("cannot write the benchmark script: %v", err)
		}
	}
	return dir, nil
}

// shortHash is the first 12 hex digits of the SHA-256 of the parts, each prefixed by its length.
func shortHash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d\n", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
