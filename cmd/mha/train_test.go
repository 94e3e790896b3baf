package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/train"
)

// tiny are the flags of a model small enough to train in a test.
var tiny = []string{"--layers", "1", "--heads", "2", "--d-model", "16", "--steps", "40", "--batch", "8", "--warmup", "5", "--quiet"}

// TestTrainIsReproducible trains the same small model twice, and once on a different worker
// count, and expects byte-identical checkpoints (the same values with other workers, whose count
// the metadata records) that eval reads.
func TestTrainIsReproducible(t *testing.T) {
	dir := t.TempDir()
	var files [][]byte
	for i, workers := range []string{"2", "2", "1"} {
		out := filepath.Join(dir, "m"+string(rune('a'+i))+".safetensors")
		args := append([]string{"train", "--task", "prev-token", "--workers", workers, "--out", out}, tiny...)
		code, stdout, stderr := runCLI(args...)
		if code != 0 || !strings.Contains(stdout, "wrote "+out) {
			t.Fatalf("exit %d: %s %s", code, stdout, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("two runs with the same seed and workers wrote different checkpoints")
	}
	m2, _, _, err := nn.Load(filepath.Join(dir, "ma.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	m1, _, _, err := nn.Load(filepath.Join(dir, "mc.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	want := m2.StateDict()
	for name, p := range m1.StateDict() {
		if !slices.Equal(p.Data, want[name].Data) {
			t.Errorf("%s: 1 and 2 workers trained different values", name)
		}
	}

	code, stdout, stderr := runCLI("eval", "--task", "prev-token", "--checkpoint", filepath.Join(dir, "ma.safetensors"), "--json", "--batches", "2", "--batch", "16")
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	var rep probe.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("eval --json printed %q: %v", stdout, err)
	}
	if rep.Task != "prev-token" || rep.Sequences != 32 || len(rep.Heads) != 2 || rep.Accuracy < 0 || rep.Accuracy > 1 {
		t.Errorf("report %+v", rep)
	}
	code, stdout, _ = runCLI("eval", "--task", "prev-token", "--checkpoint", filepath.Join(dir, "ma.safetensors"), "--batches", "1")
	if code != 0 || !strings.Contains(stdout, "prev-token  prefix-match  ground-truth") {
		t.Errorf("eval table: exit %d\n%s", code, stdout)
	}
}

// TestTrainInterrupted cancels a run and expects a checkpoint of the steps done and an error
// that says so.
func TestTrainInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "m.safetensors")
	tc := train.Recipe{Task: "sort", Config: train.Config{Steps: 10, Batch: 4, LR: 1e-3, MinLR: 1e-4, Warmup: 2, Clip: 1, Seed: 1}}
	mc := nn.Config{Layers: 1, Heads: 2, DModel: 8, Norm: nn.PreNorm, Positions: nn.Learned}
	err := runTrain(ctx, tc, mc, out, []string{"mha", "train"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "interrupted at step 0 of 10; saved the model so far to "+out) {
		t.Fatalf("error %v", err)
	}
	if _, meta, _, err := nn.Load(out); err != nil || meta["step"] != "0" {
		t.Errorf("checkpoint: meta %v, error %v", meta, err)
	}
}

// TestTrainEvalErrors checks the flag and file errors of train and eval.
func TestTrainEvalErrors(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.safetensors")
	if code, _, stderr := runCLI(append([]string{"train", "--task", "sort", "--steps", "1", "--warmup", "0", "--out", model}, tiny[:6]...)...); code != 0 {
		t.Fatal(stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train"}, "--task is required: one of brackets, induction, modadd, prev-token, sort"},
		{[]string{"train", "--task", "chess"}, `chess`},
		{[]string{"train", "--task", "sort", "--steps", "0"}, "steps is 0, want > 0"},
		{[]string{"train", "--task", "sort", "--batch", "-1"}, "batch is -1, want > 0"},
		{[]string{"train", "--task", "sort", "--heads", "3"}, "d_model 64 is not divisible by heads 3"},
		{[]string{"train", "--task", "sort", "--norm", "middle"}, `norm is "middle"`},
		{[]string{"eval"}, "--task is required"},
		{[]string{"eval", "--task", "sort", "--batches", "-1"}, "-1 batches"},
		{[]string{"eval", "--task", "induction", "--checkpoint", model}, "trained on task sort, not induction"},
		{[]string{"eval", "--task", "sort", "--checkpoint", filepath.Join(dir, "none")}, "no such file"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to contain %q", c.args, code, stderr, c.want)
		}
	}
}

// TestTrainInterruptedBar interrupts training when the progress bar first draws, in step 1: the
// bar must be erased rather than filled to the total, and the error say the real step.
func TestTrainInterruptedBar(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := &cancelWriter{cancel: cancel}
	out := filepath.Join(t.TempDir(), "m.safetensors")
	tc := train.Recipe{Task: "sort", Config: train.Config{Steps: 10, Batch: 4, LR: 1e-3, MinLR: 1e-4, Warmup: 2, Clip: 1, Seed: 1}}
	mc := nn.Config{Layers: 1, Heads: 2, DModel: 8, Norm: nn.PreNorm, Positions: nn.Learned}
	err := runTrain(ctx, tc, mc, out, []string{"mha", "train"}, new(bytes.Buffer), progress)
	if err == nil || !strings.HasPrefix(err.Error(), "interrupted at step 1 of 10;") {
		t.Fatalf("error %v, want interrupted at step 1 of 10", err)
	}
	bar := progress.String()
	if !strings.Contains(bar, "/10)") || strings.Contains(bar, "10/10") || strings.Contains(bar, "100%") || !strings.HasSuffix(bar, "\r") {
		t.Errorf("progress %q: want the bar drawn, never at 10/10, and erased at the end", bar)
	}
}

// cancelWriter collects what is written to it and calls cancel at the first write. It has only
// Write, so that io.WriteString goes through it.
type cancelWriter struct {
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.cancel()
	return w.buf.Write(p)
}

func (w *cancelWriter) String() string { return w.buf.String() }

// trainConfig runs mha train with args on a tiny model of prev-token, writing to out, and
// returns the config of the checkpoint it wrote.
func trainConfig(t *testing.T, out string, args ...string) nn.Config {
	t.Helper()
	base := []string{"train", "--task", "prev-token", "--steps", "8", "--warmup", "2", "--layers", "1", "--d-model", "16", "--quiet", "--out", out}
	code, _, stderr := runCLI(append(base, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d, %s", args, code, stderr)
	}
	m, _, _, err := nn.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	return m.Config()
}

// checkTrainRefuses checks that each of bad, added to a training's flags, is one line of error.
func checkTrainRefuses(t *testing.T, out string, bad ...[]string) {
	t.Helper()
	for _, flags := range bad {
		args := append([]string{"train", "--task", "prev-token", "--steps", "8", "--warmup", "2", "--quiet", "--out", out}, flags...)
		if code, _, stderr := runCLI(args...); code != 1 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q", flags, code, stderr)
		}
	}
}

// TestTrainSparse trains with --pattern, --block and --normalizer and checks that the
// checkpoint's config keeps them, so that eval and the lab run the model as it was trained.
func TestTrainSparse(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.safetensors")
	c := trainConfig(t, out, "--pattern", "local:2", "--pattern", "global:0", "--block", "4,4", "--normalizer", "sparsemax")
	if !slices.Equal(c.Patterns, []string{"local:2", "global:0"}) || !slices.Equal(c.Block, []int{4, 4}) || c.Normalizer != "sparsemax" {
		t.Errorf("config %+v, want the patterns, block and normalizer", c)
	}
	checkTrainRefuses(t, out, []string{"--normalizer", "gumbel"}, []string{"--pattern", "blocks:x"}, []string{"--block", "4,4"})
}

// TestTrainModernBlocks trains with the flags of today's blocks (RMSNorm, SwiGLU, grouped K/V
// heads, rotary, qk-norm, sandwich norms, a window, a head size; the parallel residual; a
// mixture of experts) and
// checks that the checkpoint's config has them; a value nn refuses is one line of error.
func TestTrainModernBlocks(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.safetensors")
	c := trainConfig(t, out, "--positions", "none", "--rope", "500", "--norm-kind", "rmsnorm", "--activation", "swiglu",
		"--kv-heads", "2", "--qk-norm", "--sandwich", "--window", "5", "--head-size", "8")
	if c.Positions != nn.NoPositions || c.Rope == nil || c.Rope.Theta != 500 || c.NormKind != nn.RMSNorm || c.Activation != nn.SwiGLU ||
		c.KVHeads != 2 || !c.QKNorm || !c.SandwichNorm || c.Window != 5 || c.HeadSize != 8 {
		t.Errorf("config %+v, want the flags' blocks", c)
	}
	if c := trainConfig(t, out, "--parallel", "--activation", "geglu"); !c.ParallelResidual || c.Activation != nn.GeGLU {
		t.Errorf("--parallel --activation geglu: config %+v", c)
	}
	if c := trainConfig(t, out, "--experts", "3", "--experts-per-token", "2", "--norm-topk"); c.Experts != 3 || c.ExpertsPerToken != 2 || !c.NormTopK {
		t.Errorf("--experts 3 --experts-per-token 2 --norm-topk: config %+v", c)
	}
	if c := trainConfig(t, out, "--norm-kind", "rmsnorm", "--sandwich", "--no-input-norm", "--qk-norm", "--qk-norm-across"); !c.NoInputNorm || !c.QKNormAcross {
		t.Errorf("OLMo 2's blocks: config %+v", c)
	}
	checkTrainRefuses(t, out, []string{"--kv-heads", "3"}, []string{"--activation", "relu"}, []string{"--norm-kind", "batchnorm"},
		[]string{"--parallel", "--norm", "post"}, []string{"--rope", "-1"}, []string{"--experts", "3"}, []string{"--experts-per-token", "2"}, []string{"--no-input-norm"}, []string{"--qk-norm-across"})
}
