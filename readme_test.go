package mha_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeQuickStart builds and runs the README's quick start as a user would: a module of
// its own that requires this one through a replace directive. It checks what the program prints.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## Quick start\n\n```go\n")
	program, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.HasPrefix(program, "package main\n") {
		t.Fatal("the README has no quick start that is a whole Go program")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module quickstart\n\ngo 1.26.0\n\nrequire github.com/mhalab/mha v0.0.0\n\nreplace github.com/mhalab/mha => " + root + "\n"
	for name, data := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run of the quick start: %v\n%s", err, stderr.String())
	}
	if got, want := out.String(), "[2 3 8] [2 2 3 3]\n"; got != want {
		t.Errorf("the quick start printed %q, want %q (its comment says so)", got, want)
	}
}
