package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// TestOpen checks that a mapped file reads as ReadFile's, that Release changes nothing but
// memory, and that Close ends reading.
func TestOpen(t *testing.T) {
	page := os.Getpagesize()
	big := &tensor.Half{Shape: []int{3 * page}, Data: make([]uint16, 3*page), Format: tensor.BFloat16}
	for i := range big.Data {
		big.Data[i] = uint16(i * 7)
	}
	small := tensor.New(2, 3)
	for i := range small.Data {
		small.Data[i] = float32(i) - 2.5
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(path, map[string]Tensor{"big": FromHalf(big), "small": FromFloat32(small)}, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	want, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["k"] != "v" || strings.Join(f.Names(), ",") != "big,small" {
		t.Errorf("Metadata %v, names %v", f.Metadata, f.Names())
	}
	for round := range 2 {
		for _, name := range want.Names() {
			a, _ := want.Raw(name)
			b, err := f.Raw(name)
			if err != nil || !bytes.Equal(a.Data, b.Data) || a.DType != b.DType {
				t.Errorf("round %d: %s differs from ReadFile's: %v", round, name, err)
			}
			if err := f.Release(name); err != nil { // the next round reads them back
				t.Error(err)
			}
		}
	}
	h, err := f.Half("big")
	if err != nil || !slices.Equal(h.Data, big.Data) {
		t.Errorf("Half after Release: %v", err)
	}
	if err := f.Release("nope"); err == nil {
		t.Error("Release of a missing tensor: no error")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Raw("big"); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("Raw after Close: %v", err)
	}
	if _, err := f.Float32("small"); err == nil {
		t.Error("Float32 after Close: no error")
	}
	if !f.Has("big") {
		t.Error("Has after Close: false")
	}

	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	for _, content := range []string{"", "short", "\xff\x00\x00\x00\x00\x00\x00\x00{}"} {
		if err := os.WriteFile(bad, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Open of %q: %v, want an error naming the file", content, err)
		}
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Open of a directory: %v", err)
	}
}
