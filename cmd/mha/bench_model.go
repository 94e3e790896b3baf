package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/generate"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
)

// benchModelPrompt is the number of tokens decoding starts after, prefilled untimed.
const benchModelPrompt = 8

// modelResult is what a child of mha bench --model prints, mha's worker and torch_model.py
// alike: one JSON line.
type modelResult struct {
	Weights     string          `json:"weights"`           // "bfloat16", "float16" or "float32": how the weight matrices are held
	Params      int64           `json:"params"`            // scalar parameters
	ReadBytes   int64           `json:"read_bytes"`        // bytes of weights one decode step reads
	LoadS       float64         `json:"load_s"`            // seconds to open the folder
	RSSKiB      int64           `json:"rss_load_kib"`      // resident memory after loading; -1 if unknown
	PeakLoadKiB int64           `json:"rss_load_peak_kib"` // peak resident memory while loading; -1 if unknown
	PeakKiB     int64           `json:"rss_peak_kib"`      // peak resident memory at the end; -1 if unknown
	Prefill     []prefillResult `json:"prefill"`
	DecodeMS    []float64       `json:"decode_ms"` // one per timed step
	Tokens      []int           `json:"tokens"`    // the greedy tokens after the prompt
	Arch        string          `json:"architecture,omitempty"`
	Compute     string          `json:"compute,omitempty"` // of mha's prompts' matrix products: float32 or bfloat16
}

// prefillResult are the times of prefilling T tokens into an empty cache.
type prefillResult struct {
	T  int       `json:"T"`
	MS []float64 `json:"ms"`
}

// modelRow is one implementation's line of --json.
type modelRow struct {
	Impl         string         `json:"impl"`
	Weights      string         `json:"weights"`
	Compute      string         `json:"compute,omitempty"` // of mha's prompts' matrix products: float32 or bfloat16
	Params       int64          `json:"params"`
	Threads      int            `json:"threads"`
	LoadS        jsonnum.Number `json:"load_s"`
	RSSMiB       float64        `json:"rss_load_mib"`      // after loading; -1 if unknown
	PeakLoadMiB  float64        `json:"peak_load_rss_mib"` // while loading; -1 if unknown
	PeakRSSMiB   float64        `json:"peak_rss_mib"`      // over the whole run
	Prefill      []prefillRow   `json:"prefill"`
	DecodeMS     jsonnum.Number `json:"decode_ms"`     // median step
	DecodeMSMin  jsonnum.Number `json:"decode_ms_min"` // fastest step
	DecodeTokS   jsonnum.Number `json:"decode_tok_s"`
	ReadBytes    int64          `json:"read_bytes"`
	ReadGBps     jsonnum.Number `json:"read_gbps"`   // read_bytes per median step
	ReadBWPct    jsonnum.Number `json:"read_bw_pct"` // of the measured read bandwidth
	DecodeSteps  int            `json:"decode_steps"`
	DecodePrompt int            `json:"decode_prompt"`
}

// prefillRow is one prefill length of a modelRow.
type prefillRow struct {
	T     int            `json:"T"`
	MS    jsonnum.Number `json:"ms"`     // median
	MSMin jsonnum.Number `json:"ms_min"` // fastest
	TokS  jsonnum.Number `json:"tok_s"`  // over the median
}

// modelHeader is --json's first line with --model.
type modelHeader struct {
	Model        string         `json:"model"`
	Architecture string         `json:"architecture"`
	Params       int64          `json:"params"`
	Threads      int            `json:"threads"`
	ReadBWGBps   jsonnum.Number `json:"read_bw_gbps"`
	Torch        string         `json:"torch,omitempty"`     // PyTorch's version and BLAS, with --torch
	LlamaCpp     string         `json:"llama_cpp,omitempty"` // llama-bench's binary, build and GGUF, with --gguf
}

// modelBenchArgs are the child's flags shared by mha's worker and torch_model.py.
func modelBenchArgs(f *benchFlags, seqs []int) []string {
	s := make([]string, len(seqs))
	for i, t := range seqs {
		s[i] = strconv.Itoa(t)
	}
	return []string{"--model", f.model, "--seq", strings.Join(s, ","), "--steps", strconv.Itoa(f.steps),
		"--threads", strconv.Itoa(f.threads), "--runs", strconv.Itoa(f.runs), "--warmup", strconv.Itoa(f.warmup)}
}

// checkModelFlags checks mha bench --model's flags and returns the prefill lengths.
func checkModelFlags(f *benchFlags) ([]int, error) {
	if !f.seqSet {
		f.seq = "128,512"
	}
	seqs, err := parseSeq(f.seq)
	if err != nil {
		return nil, err
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"threads", f.threads}, {"runs", f.runs}, {"steps", f.steps}} {
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
	if f.weights != "stored" && f.weights != "f32" {
		return nil, fmt.Errorf("--weights %q, want stored or f32", f.weights)
	}
	if strings.Contains(f.compute, ",") {
		return nil, fmt.Errorf("--compute %q: --model takes one compute type, float32 or bfloat16", f.compute)
	}
	if _, err := mha.ParseCompute(f.compute); err != nil {
		return nil, fmt.Errorf("--compute: %v", err)
	}
	if f.gguf != "" && f.llamaBench == "" {
		return nil, errors.New("--llama-bench is empty, want llama.cpp's llama-bench binary for --gguf")
	}
	return seqs, nil
}

// runModelBench is mha bench --model: mha on the folder's weights as stored and, when they are
// half precision, converted to float32, and with --torch PyTorch on float32 weights, each in
// its own child process; then the read bandwidth, and the table or JSON lines.
func runModelBench(f *benchFlags, stdout, stderr io.Writer) error {
	seqs, err := checkModelFlags(f)
	if err != nil {
		return err
	}
	if f.worker {
		return modelWorker(f, seqs, stdout)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the mha binary to run the measurements in: %v", err)
	}
	worker := func(weights string) benchImpl {
		name := "mha"
		if weights == "f32" {
			name = "mha-f32"
		}
		return benchImpl{name: name, command: func(int) *exec.Cmd {
			c := exec.Command(exe, append([]string{"bench", "--worker", "--weights", weights, "--compute", f.compute}, modelBenchArgs(f, seqs)...)...)
			c.Env = append(os.Environ(), benchWorkerEnv+"=1")
			return c
		}}
	}
	var torch *benchImpl
	var torchInfo string // the human output's line about PyTorch
	if f.torch {
		if f.python == "" {
			return fmt.Errorf("--python is empty, want the Python that has PyTorch (such as %s)", defaultPython)
		}
		dir, err := writeBenchScripts()
		if err != nil {
			return err
		}
		probe, err := probeTorch(f.python, dir, f.threads)
		if err != nil {
			return err
		}
		probe.warnSlowBLAS(stderr)
		torchInfo = fmt.Sprintf("PyTorch %s, BLAS %s (torch.mm 512³ at %.0f GFLOP/s)", probe.Version, probe.blasName(), probe.MMGFLOPS)
		torch = &benchImpl{name: "torch-f32", command: func(int) *exec.Cmd {
			c := exec.Command(f.python, append([]string{filepath.Join(dir, "torch_model.py"), "run"}, modelBenchArgs(f, seqs)...)...)
			c.Env = torchEnv(f.threads)
			return c
		}}
	}
	if busy, ok := busyCPUs(200 * time.Millisecond); ok && busy >= 0.2 {
		fmt.Fprintf(stderr, "note: other processes kept %.1f of %d CPUs busy just before measuring, so timings will vary; compare implementations within one run\n", busy, runtime.NumCPU())
	}
	var names []string
	var results []*modelResult
	run := func(im benchImpl) error {
		r, err := measureModel(im)
		if err != nil {
			return err
		}
		names, results = append(names, im.name), append(results, r)
		return nil
	}
	if err := run(worker("stored")); err != nil {
		return err
	}
	if results[0].Weights != "float32" {
		if err := run(worker("f32")); err != nil {
			return err
		}
	}
	if torch != nil {
		if err := run(*torch); err != nil {
			return err
		}
	}
	var llamaInfo string // the human output's line about llama.cpp
	if f.gguf != "" {
		bin, err := exec.LookPath(f.llamaBench)
		if err != nil {
			return fmt.Errorf("--llama-bench: %v; build llama.cpp's llama-bench (cmake --build BUILD --target llama-bench) and give its path", err)
		}
		r, commit, err := measureLlamaBench(bin, f.gguf, f, seqs)
		if err != nil {
			return err
		}
		// A step reads what mha's step reads of weights of the same type (the GGUF's bytes
		// include the token embedding that an untied model's step does not read).
		for i, m := range results {
			if m.Weights == r.Weights && !strings.HasPrefix(names[i], "torch") {
				r.ReadBytes = m.ReadBytes
				break
			}
		}
		names, results = append(names, "llama.cpp"), append(results, r)
		llamaInfo = fmt.Sprintf("%s (build %s) on %s", bin, commit, f.gguf)
	}
	// Measured after the children, whose peak RSS would otherwise include its buffer.
	prev := runtime.GOMAXPROCS(max(f.threads, runtime.GOMAXPROCS(0)))
	bw := kernel.ReadBandwidth(f.threads, 0, 0)
	runtime.GOMAXPROCS(prev)
	rows := make([]modelRow, len(results))
	for i, r := range results {
		rows[i] = r.row(names[i], f, bw)
		if names[i] == "llama.cpp" {
			rows[i].DecodeSteps = f.steps // in each of its runs, timed as a whole
		}
	}
	for i, r := range results[1:] {
		if r.Tokens != nil && !slices.Equal(r.Tokens, results[0].Tokens) {
			fmt.Fprintf(stderr, "note: %s chose the greedy tokens %v, %s %v (float32 sums in another order can change a close argmax)\n", names[i+1], r.Tokens, names[0], results[0].Tokens)
		}
	}
	return printModelBench(stdout, f, modelHeader{Model: f.model, Architecture: results[0].Arch, Params: rows[0].Params,
		Threads: f.threads, ReadBWGBps: sig4(bw / 1e9), Torch: torchInfo, LlamaCpp: llamaInfo}, seqs, rows)
}

// measureModel runs im's child and collects its result.
func measureModel(im benchImpl) (*modelResult, error) {
	c := im.command(0)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("%s failed: %s", im.name, childFailure(err, &stderr))
	}
	var r modelResult
	if err := lastJSONLine(stdout.Bytes(), &r); err != nil || len(r.Prefill) == 0 {
		return nil, fmt.Errorf("%s printed no result (want a JSON line with \"prefill\"), got %q", im.name, lastLine(stdout.String()))
	}
	if peak := rusageMaxRSSKiB(c.ProcessState); peak >= 0 {
		r.PeakKiB = peak
	}
	return &r, nil
}

// row turns a child's result into its line, with the read bandwidth bw in bytes/s.
func (r *modelResult) row(impl string, f *benchFlags, bw float64) modelRow {
	mib := func(kib int64) float64 {
		if kib < 0 {
			return -1
		}
		return round(float64(kib)/1024, 1)
	}
	step, fastest := math.NaN(), math.NaN() // a bidirectional model has no decode steps
	if len(r.DecodeMS) > 0 {
		step, fastest = median(r.DecodeMS), slices.Min(r.DecodeMS)
	}
	rate := float64(r.ReadBytes) / (step / 1e3)
	row := modelRow{Impl: impl, Weights: r.Weights, Compute: r.Compute, Params: r.Params, Threads: f.threads, LoadS: sig4(r.LoadS),
		RSSMiB: mib(r.RSSKiB), PeakLoadMiB: mib(r.PeakLoadKiB), PeakRSSMiB: mib(r.PeakKiB),
		DecodeMS: sig4(step), DecodeMSMin: sig4(fastest), DecodeTokS: sig4(1e3 / step), ReadBytes: r.ReadBytes,
		ReadGBps: sig4(rate / 1e9), ReadBWPct: sig4(100 * rate / bw), DecodeSteps: len(r.DecodeMS), DecodePrompt: benchModelPrompt}
	for _, p := range r.Prefill {
		ms := median(p.MS)
		row.Prefill = append(row.Prefill, prefillRow{T: p.T, MS: sig4(ms), MSMin: sig4(slices.Min(p.MS)), TokS: sig4(float64(p.T) / (ms / 1e3))})
	}
	return row
}

// printModelBench prints the rows as a table, or as JSON lines after a modelHeader.
func printModelBench(w io.Writer, f *benchFlags, head modelHeader, seqs []int, rows []modelRow) error {
	if f.json {
		enc := json.NewEncoder(w)
		if err := enc.Encode(head); err != nil {
			return err
		}
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(w, "model %s (%s): %.2fM parameters, %d threads; prefill: T tokens into an empty cache (the last one's logits), median of %d after %d warm-up; decode: greedy steps of one token after a %d-token prompt, median of %d steps after %d warm-up\n",
		f.model, head.Architecture, float64(rows[0].Params)/1e6, f.threads, f.runs, f.warmup, benchModelPrompt, f.steps, f.warmup)
	fmt.Fprintf(w, "memory read bandwidth %.1f GB/s (%d threads); a decode step reads every weight matrix once, of a mixture of experts the chosen experts' (read MB)\n", float64(head.ReadBWGBps), f.threads)
	if head.Torch != "" {
		fmt.Fprintf(w, "%s; torch-f32 = benchscripts/torch_model.py, the model written out in plain PyTorch on float32 weights\n", head.Torch)
	}
	if head.LlamaCpp != "" {
		fmt.Fprintf(w, "llama.cpp = llama-bench %s: prefill from an empty context; decode ms the mean per token of a run of %d tokens, median of %d runs; read MB: mha's for the same weights' type, else the GGUF's tensor bytes\n", head.LlamaCpp, f.steps, f.runs)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-10s  %-8s  %8s  %8s  %9s", "impl", "weights", "load s", "RSS MiB", "peak MiB")
	for _, t := range seqs {
		fmt.Fprintf(w, "  %13s", fmt.Sprintf("prefill %d", t))
	}
	fmt.Fprintf(w, "  %10s  %8s  %8s  %8s  %7s  %6s\n", "decode ms", "min ms", "tok/s", "read MB", "GB/s", "% read")
	for _, r := range rows {
		fmt.Fprintf(w, "%-10s  %-8s  %8s  %8s  %9s", r.Impl, r.Weights, fmtMS(float64(r.LoadS)), fmtMiB(r.RSSMiB), fmtMiB(r.PeakRSSMiB))
		for _, p := range r.Prefill {
			fmt.Fprintf(w, "  %13s", strconv.FormatFloat(float64(p.TokS), 'f', 0, 64)+" tok/s")
		}
		fmt.Fprintf(w, "  %10s  %8s  %8s  %8s  %7s  %5s%%\n", fmtMS(float64(r.DecodeMS)), fmtMS(float64(r.DecodeMSMin)), fmtRate(float64(r.DecodeTokS)),
			fmtRate(float64(r.ReadBytes)/1e6), fmtRate(float64(r.ReadGBps)), fmtRate(float64(r.ReadBWPct)))
	}
	if len(rows) < 2 {
		return nil
	}
	fmt.Fprintf(w, "\nspeed of %s / speed of the other (the other's median ms / %s's):\n", rows[0].Impl, rows[0].Impl)
	for _, r := range rows[1:] {
		fmt.Fprintf(w, "%-10s", r.Impl)
		for i, p := range r.Prefill {
			fmt.Fprintf(w, "  prefill %d %.2f×", p.T, float64(p.MS)/float64(rows[0].Prefill[i].MS))
		}
		decode := "–"
		if !math.IsNaN(float64(r.DecodeMS)) {
			decode = fmt.Sprintf("%.2f×", float64(r.DecodeMS)/float64(rows[0].DecodeMS))
		}
		if _, err := fmt.Fprintf(w, "  decode %s\n", decode); err != nil {
			return err
		}
	}
	return nil
}

// modelWorker loads the folder (its weights as stored, or with --weights f32 converted) and
// times prefill and decode in this process, printing a modelResult line.
func modelWorker(f *benchFlags, seqs []int, w io.Writer) error {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(f.threads))
	t0 := time.Now()
	pm, err := pretrained.Options{Float32: f.weights == "f32"}.Open(f.model)
	if err != nil {
		return err
	}
	res := modelResult{Arch: pm.Architecture, LoadS: time.Since(t0).Seconds(), RSSKiB: procStatusKiB("VmRSS"), PeakLoadKiB: procStatusKiB("VmHWM")}
	m := pm.NN
	cfg := m.Config()
	res.Params = int64(m.NumParams())
	res.Weights, res.ReadBytes = "float32", decodeReadBytes(m)
	for _, p := range m.Params() {
		if p.Half != nil {
			res.Weights = p.Half.Format.String()
			break
		}
	}
	steps := benchModelPrompt + 1 + f.warmup + f.steps
	if cfg.Bidirectional {
		steps = 0 // no decoding
	}
	capacity := max(slices.Max(seqs), steps)
	if capacity > cfg.SeqLen {
		return fmt.Errorf("--seq %s and %d decode steps need %d positions, more than the model's %d", f.seq, f.steps, capacity, cfg.SeqLen)
	}
	// The prompts' products in --compute's type; a bidirectional model's Forward computes in
	// float32.
	ct, err := mha.ParseCompute(f.compute)
	if err != nil {
		return err
	}
	if cfg.Bidirectional {
		ct = mha.ComputeFloat32
	}
	res.Compute = ct.Effective().String()
	opt := &nn.RunOptions{Workers: f.threads, Compute: ct}
	tokens := make([]int, capacity)
	for i := range tokens {
		tokens[i] = (7*i + 3) % cfg.Vocab
	}
	// A bidirectional model (BERT) has no cache and does not generate: its prefill is a Forward
	// of the T tokens, and it has no decode steps.
	var c *nn.Cache
	if !cfg.Bidirectional {
		if c, err = m.NewCache(1, capacity, mha.CacheFloat32); err != nil {
			return err
		}
		opt.LastLogits = true // a prompt's last logits only, as generation and llama.cpp compute them
	}
	for _, t := range seqs {
		p := prefillResult{T: t}
		for i := range f.warmup + f.runs {
			start := time.Now()
			if c == nil {
				if _, err := m.Forward(tokens[:t], 1, t, opt); err != nil {
					return err
				}
			} else {
				c.Reset()
				if _, err := m.ForwardCached(c, tokens[:t], 1, t, opt); err != nil {
					return err
				}
			}
			if i >= f.warmup {
				p.MS = append(p.MS, float64(time.Since(start).Nanoseconds())/1e6)
			}
		}
		res.Prefill = append(res.Prefill, p)
	}
	if c == nil {
		res.PeakKiB = procStatusKiB("VmHWM")
		return json.NewEncoder(w).Encode(res)
	}
	// Greedy decoding: the time between two tokens is one step, its forward and its choice.
	var last time.Time
	emitted := 0
	emit := func(tok int) error {
		res.Tokens = append(res.Tokens, tok)
		now := time.Now()
		if emitted > f.warmup { // the first token is the prompt's
			res.DecodeMS = append(res.DecodeMS, float64(now.Sub(last).Nanoseconds())/1e6)
		}
		last = now
		emitted++
		return nil
	}
	gen := generate.Options{MaxTokens: 1 + f.warmup + f.steps, Cache: mha.CacheFloat32, Workers: f.threads}
	if _, err := generate.Run(context.Background(), m, tokens[:benchModelPrompt], gen, emit); err != nil {
		return err
	}
	res.PeakKiB = procStatusKiB("VmHWM")
	return json.NewEncoder(w).Encode(res)
}

// decodeReadBytes is what one decode step reads of m's weights: every parameter but the token
// embedding, of which it reads one row, unless the embedding is also the (tied) head; in a
// mixture of experts, of the experts only the ExpertsPerToken its token goes through.
func decodeReadBytes(m *nn.Model) int64 {
	half, float := m.ParamBytes()
	n := int64(half + float)
	c := m.Config()
	var experts int64 // the bytes of every expert of every block
	for _, p := range m.Params() {
		size := 4
		if p.Half != nil {
			size = 2
		}
		shape := p.Shape()
		elems := 1
		for _, d := range shape {
			elems *= d
		}
		switch {
		case p.Name == "tok_emb.weight" && !c.TieEmbeddings:
			n -= int64(size * (shape[0] - 1) * shape[1])
		case strings.Contains(p.Name, ".ffn.experts."):
			experts += int64(size * elems)
		}
	}
	if c.Experts > 0 {
		n -= experts * int64(c.Experts-c.ExpertsPerToken) / int64(c.Experts)
	}
	return n
}
