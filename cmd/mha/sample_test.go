package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/mhalab/mha/safetensors"
)

// TestRunSample runs the README's example on the sample files of testdata/sample and compares
// the result with what PyTorch gave (testdata/sample/gen_sample.py).
func TestRunSample(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "sample")
	out := filepath.Join(t.TempDir(), "out.safetensors")
	code, _, stderr := runCLI("run", "--weights", filepath.Join(dir, "attn.safetensors"), "--input", filepath.Join(dir, "in.safetensors"),
		"--heads", "4", "--need-weights", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got, err := safetensors.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := safetensors.ReadFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"output", "attn_weights"} {
		g, err := got.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		w, err := want.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Data) != len(w.Data) || len(g.Data) == 0 {
			t.Fatalf("%s: shape %v, want %v", name, g.Shape, w.Shape)
		}
		for i := range w.Data {
			if d := math.Abs(float64(g.Data[i] - w.Data[i])); d > 1e-5*(1+math.Abs(float64(w.Data[i]))) {
				t.Fatalf("%s[%d] = %v, PyTorch %v", name, i, g.Data[i], w.Data[i])
			}
		}
	}
}
