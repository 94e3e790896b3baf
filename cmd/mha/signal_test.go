package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mhalab/mha/nn"
)

// cpuTicks returns the CPU time process pid has used, in clock ticks (1/100 s on Linux), from
// /proc/PID/stat.
func cpuTicks(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses: state, ppid, …; utime and
	// stime are the 14th and 15th fields of the line, the 12th and 13th of these.
	_, rest, _ := bytes.Cut(b, []byte(") "))
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields after the name, want at least 13", pid, len(f))
	}
	utime, err1 := strconv.Atoi(f[11])
	stime, err2 := strconv.Atoi(f[12])
	return utime + stime, errors.Join(err1, err2)
}

// TestSignalStops starts mha on long work, sends it SIGINT or SIGTERM once the work has started,
// and expects it to end within 5 s: train saving the model trained so far, experiment saying it
// was stopped, lab stopping its server, and eval, which does not catch signals, killed by the
// signal. The child is this test binary, which TestMain turns into mha when benchWorkerEnv is
// set.
func TestSignalStops(t *testing.T) {
	if _, err := cpuTicks(os.Getpid()); err != nil {
		t.Skipf("cannot tell when the work has started: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "m.safetensors")
	for _, c := range []struct {
		args   []string
		ready  string // the start of a line on stdout once the work has started; "" for 0.3 s of CPU time
		sig    syscall.Signal
		code   int    // the exit status; -1 for killed by sig
		stdout string // a line of stdout
		stderr string // what stderr must start with, on one line
	}{
		{[]string{"train", "--task", "sort", "--steps", "1000000", "--quiet", "--out", model}, "model:", syscall.SIGINT, 1, "", "mha: interrupted at step "},
		{[]string{"experiment", "scaling", "--out", dir}, "", syscall.SIGINT, 1, "", "mha: stopped: interrupt signal received\n"},
		{[]string{"lab", "--addr", "127.0.0.1:0", "--open=false"}, "mha lab: serving", syscall.SIGTERM, 0, "mha lab: stopped", ""},
		{[]string{"eval", "--task", "sort", "--batches", "1000000"}, "", syscall.SIGTERM, -1, "", ""},
	} {
		cmd := exec.Command(exe, c.args...)
		cmd.Env = append(os.Environ(), benchWorkerEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kill := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var stdout []string
		if c.ready != "" {
			for line := range lines {
				stdout = append(stdout, line)
				if strings.HasPrefix(line, c.ready) {
					break
				}
			}
		} else {
			for {
				ticks, err := cpuTicks(cmd.Process.Pid)
				if err != nil || ticks >= 30 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		sent := time.Now()
		if err := cmd.Process.Signal(c.sig); err != nil {
			t.Fatalf("mha %v: %v", c.args, err)
		}
		for line := range lines {
			stdout = append(stdout, line)
		}
		err = cmd.Wait()
		took := time.Since(sent)
		kill.Stop()
		t.Logf("mha %v: %v %s after %v", c.args, err, took.Round(time.Millisecond), c.sig)

		code := cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() != c.sig {
				t.Errorf("mha %v: killed by %v, want %v", c.args, ws.Signal(), c.sig)
			}
			code = -1
		}
		if code != c.code || took > 5*time.Second {
			t.Errorf("mha %v: %v %s after the signal (%v), want exit status %d within 5 s", c.args, err, took.Round(time.Millisecond), c.sig, c.code)
		}
		if c.stdout != "" && !strings.Contains(strings.Join(stdout, "\n"), c.stdout) {
			t.Errorf("mha %v: stdout %q, want a line %q", c.args, stdout, c.stdout)
		}
		if !strings.HasPrefix(stderr.String(), c.stderr) || strings.Count(stderr.String(), "\n") != min(1, len(c.stderr)) {
			t.Errorf("mha %v: stderr %q, want one line starting %q", c.args, stderr.String(), c.stderr)
		}
	}
	if _, meta, _, err := nn.Load(model); err != nil || meta["step"] == "" || meta["step"] == "1000000" {
		t.Errorf("the interrupted train's checkpoint: %v, step %q", err, meta["step"])
	}
}
