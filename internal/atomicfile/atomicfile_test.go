package atomicfile

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// entries returns the names in dir, to check that no temporary file is left behind.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

// checkFile fails unless path is a regular file holding want with permission bits perm.
func checkFile(t *testing.T, path, want string, perm fs.FileMode) {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm() != perm {
		t.Errorf("%s: mode %v, want a regular file with %v", path, info.Mode(), perm)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != want {
		t.Errorf("%s holds %q (%v), want %q", path, got, err, want)
	}
}

// TestWriteNew creates a file, with 0644 less the umask, and replaces it.
func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.bin")
	for _, content := range []string{"first", "second, longer", ""} {
		if err := Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, content, 0o644&^umask(t))
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("the directory holds %q, want only out.bin", names)
	}
}

// TestWriteKeepsMode replaces files of several modes, read-only included, and expects the new
// content with the old mode, whatever the umask takes off.
func TestWriteKeepsMode(t *testing.T) {
	dir := t.TempDir()
	for _, perm := range []fs.FileMode{0o600, 0o640, 0o444, 0o755, 0o666} {
		path := filepath.Join(dir, "f"+perm.String())
		if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, perm); err != nil {
			t.Fatal(err)
		}
		if err := Write(path, []byte("new")); err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, "new", perm)
	}
	if names := entries(t, dir); len(names) != 5 {
		t.Errorf("the directory holds %q, want the 5 files", names)
	}
}

// TestWriteRefusesSpecialFiles writes to a FIFO, a directory, a socket and a character device:
// each is refused with an error that names the path and says what is there, is left as it was,
// and no temporary file remains. Write must not block on the FIFO, which has no reader.
func TestWriteRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		kind string
		mode fs.FileMode // the type bits of what must stay at path
	}{
		{fifo, "a named pipe (FIFO)", fs.ModeNamedPipe},
		{sub, "a directory", fs.ModeDir},
	}
	// A socket's name is limited to about 100 bytes: make it where the name is short enough.
	sock := filepath.Join(dir, "sock")
	if ln, err := net.Listen("unix", sock); err == nil {
		defer ln.Close()
		cases = append(cases, struct {
			path string
			kind string
			mode fs.FileMode
		}{sock, "a socket", fs.ModeSocket})
	} else {
		t.Logf("no socket case: %v", err)
	}
	for _, c := range cases {
		err := Write(c.path, []byte("data"))
		want := c.path + " is " + c.kind + ", want a file name"
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Write(%s): error %v, want one starting %q", c.path, err, want)
		}
		if err := Check(c.path); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Check(%s): error %v, want one starting %q", c.path, err, want)
		}
		if info, err := os.Lstat(c.path); err != nil || info.Mode().Type() != c.mode {
			t.Errorf("%s is now %v (%v), want it left as it was", c.path, info.Mode(), err)
		}
	}
	if names := entries(t, dir); len(names) != len(cases) {
		t.Errorf("the directory holds %q, want only %d entries", names, len(cases))
	}

	// /dev/null is a character device. Only Check, which changes nothing, is tried on it: a Write
	// that wrongly replaced it would break the machine for other tests.
	if info, err := os.Stat("/dev/null"); err == nil && info.Mode()&fs.ModeCharDevice != 0 {
		if err := Check("/dev/null"); err == nil || !strings.HasPrefix(err.Error(), "/dev/null is a character device, want a file name") {
			t.Errorf("Check(/dev/null): error %v", err)
		}
	}
}

// TestWriteSymlink writes through symbolic links: to a regular file, a dangling link, a chain of
// relative links and a link to a FIFO. The links stay links, the file at their end is written
// atomically with its mode kept, and the FIFO is refused.
func TestWriteSymlink(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(sub, "target")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("sub/target", link); err != nil {
		t.Fatal(err)
	}
	chain := filepath.Join(dir, "chain")
	if err := os.Symlink("link", chain); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{link, chain} {
		content := []string{"via link", "via chain"}[i]
		if err := Write(name, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if info, err := os.Lstat(name); err != nil || info.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link: %v, %v", name, info.Mode(), err)
		}
		checkFile(t, target, content, 0o600)
	}

	// A dangling link: the file is created at its target.
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(sub, "new"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := Write(dangling, []byte("created")); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(sub, "new"), "created", 0o644&^umask(t))

	// A link to a FIFO is refused, naming both.
	fifo := filepath.Join(sub, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	toFIFO := filepath.Join(dir, "to-fifo")
	if err := os.Symlink(fifo, toFIFO); err != nil {
		t.Fatal(err)
	}
	want := toFIFO + " (a link to " + fifo + ") is a named pipe (FIFO), want a file name"
	if err := Write(toFIFO, []byte("x")); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Write through a link to a FIFO: error %v, want one starting %q", err, want)
	}
	if info, err := os.Lstat(fifo); err != nil || info.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("the FIFO is now %v (%v)", info.Mode(), err)
	}

	// A loop of links is an error, not a hang.
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink("loop", loop); err != nil {
		t.Fatal(err)
	}
	if err := Write(loop, nil); err == nil || !strings.Contains(err.Error(), "more than 40 symbolic links") {
		t.Errorf("Write to a loop of links: error %v", err)
	}
	if names := entries(t, sub); len(names) != 3 {
		t.Errorf("%s holds %q, want target, new and fifo", sub, names)
	}
}

// umask returns the process's umask, read from a file created with mode 0777.
func umask(t *testing.T) fs.FileMode {
	t.Helper()
	path := filepath.Join(t.TempDir(), "probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o777)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return 0o777 &^ info.Mode().Perm()
}

// TestWriteErrors writes into a missing directory and below a regular file: both fail with an
// error naming the path, creating nothing.
func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "out.bin")
	err := Write(missing, []byte("x"))
	if err == nil || !strings.HasPrefix(err.Error(), missing+": cannot create a file in "+filepath.Join(dir, "no", "such")) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("Write into a missing directory: error %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	below := filepath.Join(file, "out.bin")
	if err := Write(below, []byte("x")); err == nil || !strings.HasPrefix(err.Error(), below+": ") || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Write below a regular file: error %v", err)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("the directory holds %q, want only file", names)
	}
}
