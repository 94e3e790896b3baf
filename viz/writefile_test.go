package viz

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWriteFileRefusesFIFO writes a picture to a named pipe that has no reader: WriteFile must
// return an error naming it at once, rather than block until a reader comes, and leave it a named
// pipe. A regular file it replaces keeps its mode.
func TestWriteFileRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	h := Heatmap{Rows: 1, Cols: 1, Values: []float64{1}}
	fifo := filepath.Join(dir, "fifo.png")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- WriteFile(fifo, h) }()
	select {
	case err := <-done:
		want := "viz: " + fifo + " is a named pipe (FIFO), want a file name"
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("WriteFile to a FIFO: error %v, want one starting %q", err, want)
		}
	case <-time.After(10 * time.Second):
		go func() { // a reader, so that the blocked write can end
			if r, err := os.Open(fifo); err == nil {
				io.Copy(io.Discard, r)
				r.Close()
			}
		}()
		t.Fatal("WriteFile to a FIFO without a reader blocked for 10 s")
	}
	if info, err := os.Lstat(fifo); err != nil || info.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("the FIFO is now %v (%v)", info.Mode(), err)
	}

	private := filepath.Join(dir, "private.svg")
	if err := os.WriteFile(private, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(private, h); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(private); err != nil || info.Mode().Perm() != 0o600 || info.Size() < 100 {
		t.Errorf("%s: mode %v, %d bytes (%v); want the picture with mode 0600", private, info.Mode(), info.Size(), err)
	}
	if list, _ := os.ReadDir(dir); len(list) != 2 {
		t.Errorf("the directory holds %d entries, want the FIFO and private.svg", len(list))
	}
}
