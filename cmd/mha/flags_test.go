package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFlagsCheckedFirst gives train, eval and experiment flags that used to pass until the work
// was done (or never failed): each must fail at once, with one line saying what was wrong, and
// train must write no file.
func TestFlagsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.safetensors")
	trainWith := func(flags ...string) []string {
		return slices.Concat([]string{"train", "--task", "sort", "--out", out}, tiny, flags)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{trainWith("--lr", "1e30"), "lr is 1e+30, want a learning rate in (0, 10]"},
		{trainWith("--lr", "1e308"), "lr is 1e+308, want a learning rate in (0, 10]"},
		{trainWith("--lr", "NaN"), "lr is NaN"},
		{trainWith("--clip", "+Inf"), "clip is +Inf, want a finite norm"},
		{trainWith("--weight-decay", "5"), "weight decay is 5, want a value in [0, 1]"},
		{trainWith("--min-lr", "1"), "MinLR is 1, want a value in [0, LR = 0.001]"},
		{trainWith("--dropout", "1"), "dropout is 1, want a probability in [0, 1)"},
		{trainWith("--workers", "-1"), `invalid argument "-1" for "--workers" flag: want a goroutine count ≥ 0 (0: GOMAXPROCS)`},
		{[]string{"eval", "--task", "sort", "--workers", "-1"}, `invalid argument "-1" for "--workers" flag: want a goroutine count ≥ 0`},
		{[]string{"experiment", "params", "--workers", "-1"}, `invalid argument "-1" for "--workers" flag: want a goroutine count ≥ 0`},
		{[]string{"eval", "--task", "sort", "--workers", "100000000"}, `invalid argument "100000000" for "--workers" flag: want a goroutine count ≤ 1024 (0: GOMAXPROCS)`},
		{trainWith("--workers", "1025"), `invalid argument "1025" for "--workers" flag: want a goroutine count ≤ 1024 (0: GOMAXPROCS)`},
		{[]string{"eval", "--task", "sort", "--batch", "1048576"}, "a batch of 1048576 sequences of 16 tokens needs about"},
		{append([]string{"train", "--task", "sort", "--out", dir}, tiny...), "--out " + dir + " is a directory, want a file name"},
		{append([]string{"train", "--task", "sort", "--out", filepath.Join(dir, "new", "m.safetensors")}, tiny...), "its directory " + filepath.Join(dir, "new") + " does not exist"},
		{append([]string{"train", "--task", "sort", "--out", filepath.Join(out, "m.safetensors")}, tiny...), "its directory " + out + " does not exist"},
	} {
		if strings.HasPrefix(c.want, "its directory "+out) {
			if err := os.WriteFile(out, nil, 0o644); err != nil { // a file where the directory would go
				t.Fatal(err)
			}
		}
		code, stdout, stderr := runCLI(c.args...)
		if code != 1 || strings.Contains(stdout, "model:") || !strings.HasPrefix(stderr, "mha: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("mha %v:\n exit %d, stdout %q, stderr %q\n want exit 1 before any work and one line saying %q", c.args, code, stdout, stderr, c.want)
		}
		os.Remove(out)
	}
	if files, _ := os.ReadDir(dir); len(files) > 0 {
		t.Errorf("failed runs left %s", files[0].Name())
	}
}

// TestVizAblateRepeated gives --ablate twice: the heads of both add up, as one --ablate listing
// them all does, and the picture says so.
func TestVizAblateRepeated(t *testing.T) {
	dir := t.TempDir()
	draw := func(name string, ablate ...string) []byte {
		out := filepath.Join(dir, name)
		args := append([]string{"viz", "--model", "sort", "--text", "3 1 2 SEP 1 2", "--kind", "grid", "--out", out}, ablate...)
		if code, _, stderr := runCLI(args...); code != 0 {
			t.Fatalf("mha %v: exit %d: %s", args, code, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	twice := draw("twice.svg", "--ablate", "0.1.zero", "--ablate", "1.3.uniform,1.0.mean")
	once := draw("once.svg", "--ablate", "0.1.zero,1.3.uniform,1.0.mean")
	last := draw("last.svg", "--ablate", "1.3.uniform,1.0.mean")
	if !bytes.Equal(twice, once) || bytes.Equal(twice, last) || !bytes.Contains(twice, []byte("L0 H1 zero")) {
		t.Errorf("--ablate given twice drew %d bytes, one --ablate with every head %d, the last --ablate alone %d: want the first two equal, naming L0 H1", len(twice), len(once), len(last))
	}
}
