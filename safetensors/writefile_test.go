package safetensors

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// TestWriteFileReplacesOnlyRegularFiles checks what WriteFile does to what is already at its
// path: a regular file gets the new content and keeps its mode; a symbolic link stays a link and
// the file it points to is written; a named pipe is refused with an error naming it, and stays a
// named pipe; no temporary file remains.
func TestWriteFileReplacesOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	in := map[string]Tensor{"w": FromFloat32(&tensor.Tensor{Shape: []int{2}, Data: []float32{1, 2}})}
	check := func(path string, perm fs.FileMode) {
		t.Helper()
		info, err := os.Lstat(path)
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm() != perm {
			t.Errorf("%s: mode %v (%v), want a regular file with %v", path, info.Mode(), err, perm)
		}
		if f, err := ReadFile(path); err != nil || !f.Has("w") {
			t.Errorf("%s: %v", path, err)
		}
	}

	private := filepath.Join(dir, "private.safetensors")
	if err := os.WriteFile(private, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(private, in, nil); err != nil {
		t.Fatal(err)
	}
	check(private, 0o600)

	link := filepath.Join(dir, "link.safetensors")
	if err := os.Symlink("private.safetensors", link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(private, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, in, nil); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symbolic link: %v (%v)", link, info.Mode(), err)
	}
	check(private, 0o600)

	fifo := filepath.Join(dir, "fifo.safetensors")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	want := "safetensors: " + fifo + " is a named pipe (FIFO), want a file name"
	if err := WriteFile(fifo, in, nil); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("WriteFile to a FIFO: error %v, want one starting %q", err, want)
	}
	if info, err := os.Lstat(fifo); err != nil || info.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("the FIFO is now %v (%v)", info.Mode(), err)
	}

	if list, _ := os.ReadDir(dir); len(list) != 3 {
		var names []string
		for _, e := range list {
			names = append(names, e.Name())
		}
		t.Errorf("the directory holds %q, want private, link and fifo", names)
	}
}
