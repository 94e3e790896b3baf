package main

import (
	"bytes"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/safetensors"
)

// runCLIWithin runs the command line in-process like runCLI, failing the test if it has not
// ended after 20 s. fifo, if not "", is a named pipe the command may block on: then a reader
// opens it, so that the command can end.
func runCLIWithin(t *testing.T, fifo string, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := runCLI(args...)
		done <- result{code, stdout, stderr}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(20 * time.Second):
		if fifo != "" {
			go func() {
				if r, err := os.Open(fifo); err == nil {
					io.Copy(io.Discard, r)
					r.Close()
				}
			}()
		}
		t.Fatalf("mha %v has not ended after 20 s", args)
		return 0, "", ""
	}
}

// TestOutRefusesFIFO gives run, viz, train and experiment a named pipe to write to: each exits
// with status 1 and one line naming it, at once rather than blocking on the pipe or after
// training, and the pipe stays a pipe.
func TestOutRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	mkfifo := func(name string) string {
		path := filepath.Join(dir, name)
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	weights := writeFile(t, map[string]safetensors.Tensor{
		"in_proj_weight": f32(24, 8), "in_proj_bias": f32(24), "out_proj.weight": f32(8, 8), "out_proj.bias": f32(8),
	})
	input := writeFile(t, map[string]safetensors.Tensor{"query": f32(2, 5, 8)})
	pictures := filepath.Join(dir, "pictures")
	if err := os.Mkdir(pictures, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fifo string
		args []string
	}{
		{mkfifo("out.safetensors"), []string{"run", "--weights", weights, "--input", input, "--heads", "2", "--out"}},
		{mkfifo("grid.png"), []string{"viz", "--model", "sort", "--kind", "grid", "--seed", "1", "--out"}},
		{mkfifo("model.safetensors"), append(append([]string{"train", "--task", "sort", "--steps", "100000", "--quiet"}, tiny[:6]...), "--out")},
		{filepath.Join(pictures, "params-heads.png"), []string{"experiment", "params", "--out", pictures}},
	} {
		args := c.args
		if args[len(args)-1] == "--out" {
			args = append(args, c.fifo)
		} else if err := syscall.Mkfifo(c.fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, stdout, stderr := runCLIWithin(t, c.fifo, args...)
		want := c.fifo + " is a named pipe (FIFO), want a file name"
		if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "mha: ") || !strings.Contains(stderr, want) {
			t.Errorf("mha %v:\n exit %d, stdout %q, stderr %q\n want exit 1 and one line saying %q", args, code, stdout, stderr, want)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("mha %v took %v to refuse the FIFO", args, d)
		}
		if info, err := os.Lstat(c.fifo); err != nil || info.Mode().Type() != fs.ModeNamedPipe {
			t.Errorf("mha %v: %s is now %v (%v), want it left a named pipe", args, c.fifo, info.Mode(), err)
		}
	}
}

// TestDefaultOutDir runs train, viz and experiment without --out in an empty directory: each
// creates mha-out and writes there.
func TestDefaultOutDir(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		args  []string
		files []string
	}{
		{[]string{"viz", "--model", "sort", "--kind", "grid", "--seed", "1"}, []string{"sort-grid.png"}},
		{[]string{"viz", "--model", "sort", "--kind", "importance", "--format", "svg"}, []string{"sort-importance.svg"}},
		{[]string{"experiment", "params"}, []string{"params-heads.png", "params-heads.svg"}},
		{append([]string{"train", "--task", "sort", "--steps", "1", "--warmup", "0", "--quiet"}, tiny[:6]...), []string{"sort.safetensors"}},
	} {
		if err := os.RemoveAll("mha-out"); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(c.args...)
		if code != 0 {
			t.Errorf("mha %v: exit %d, stderr %q", c.args, code, stderr)
			continue
		}
		for _, name := range c.files {
			path := filepath.Join("mha-out", name)
			if !strings.Contains(stdout, "wrote ") || !strings.Contains(stdout, path) {
				t.Errorf("mha %v: stdout %q does not say it wrote %s", c.args, stdout, path)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("mha %v: %v", c.args, err)
				continue
			}
			switch filepath.Ext(name) {
			case ".png":
				_, err = png.Decode(bytes.NewReader(b))
			case ".svg":
				if !bytes.Contains(b, []byte("<svg")) {
					err = io.ErrUnexpectedEOF
				}
			case ".safetensors":
				_, _, _, err = nn.Load(path)
			}
			if err != nil {
				t.Errorf("mha %v: %s: %v", c.args, path, err)
			}
		}
		if list, _ := os.ReadDir("."); len(list) != 1 {
			t.Errorf("mha %v: the working directory holds %d entries, want only mha-out", c.args, len(list))
		}
	}
}
