package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/mhalab/mha/models"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startLab runs `mha lab` with args until the returned stop is called; it returns the URL the
// command printed, its stderr, and stop, which returns the rest of the command's stdout and its error.
func startLab(t *testing.T, args ...string) (url string, stderr *syncBuffer, stop func() (string, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, in := io.Pipe()
	stderr = new(syncBuffer)
	cmd := newLabCmd()
	cmd.SetArgs(append(args, "--open=false"))
	cmd.SetOut(in)
	cmd.SetErr(stderr)
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		in.Close()
		done <- err
	}()
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no URL printed: %v (stderr %q)", err, stderr.String())
	}
	m := regexp.MustCompile(`^mha lab: serving (http://\S+/) \(Ctrl-C to stop\)\n$`).FindStringSubmatch(line)
	if m == nil {
		cancel()
		t.Fatalf("first line %q, want the URL", line)
	}
	rest := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		rest <- string(b)
	}()
	return m[1], stderr, func() (string, error) {
		cancel()
		err := <-done
		return <-rest, err
	}
}

// TestLab serves the lab on a free loopback port, reads the API through the printed URL, and
// stops it by cancelling its context, as Ctrl-C does.
func TestLab(t *testing.T) {
	url, stderr, stop := startLab(t, "--addr", "127.0.0.1:0")
	if !strings.HasPrefix(url, "http://127.0.0.1:") || strings.HasSuffix(url, ":0/") {
		t.Errorf("URL %s, want the loopback address with the port chosen", url)
	}
	res, err := http.Get(url + "api/models")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ Name string }
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if err != nil || len(list) != len(models.Names()) {
		t.Errorf("/api/models: %v, %d models, want %d", err, len(list), len(models.Names()))
	}
	out, err := stop()
	if err != nil || out != "mha lab: stopped\n" {
		t.Errorf("after cancel: %v, output %q", err, out)
	}
	if stderr.String() != "" {
		t.Errorf("stderr %q, want nothing on loopback", stderr.String())
	}
}

// TestLabModels serves the lab with a Hugging Face folder added by --model: /api/models lists
// it after the shipped models.
func TestLabModels(t *testing.T) {
	url, _, stop := startLab(t, "--addr", "127.0.0.1:0", "--model", tinyGPT2)
	defer stop()
	res, err := http.Get(url + "api/models")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct {
		Name, Architecture string
		User, Tokenizer    bool
	}
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if err != nil || len(list) != len(models.Names())+1 {
		t.Fatalf("/api/models: %v, %d models, want %d", err, len(list), len(models.Names())+1)
	}
	if last := list[len(list)-1]; last.Name != "gpt2" || last.Architecture != "GPT2LMHeadModel" || !last.User || !last.Tokenizer {
		t.Errorf("the added model: %+v", last)
	}
}

// TestLabEverywhere listens on every interface, which the user must ask for: it works, and
// warns.
func TestLabEverywhere(t *testing.T) {
	url, stderr, stop := startLab(t, "--addr", ":0")
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("URL %s, want a loopback URL to open", url)
	}
	if _, err := stop(); err != nil {
		t.Error(err)
	}
	if !strings.Contains(stderr.String(), "mha lab: warning: listening on [::]:") && !strings.Contains(stderr.String(), "mha lab: warning: listening on 0.0.0.0:") ||
		!strings.Contains(stderr.String(), "which other machines can reach; the lab has no authentication") {
		t.Errorf("stderr %q, want a warning", stderr.String())
	}
}

func TestLabErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"lab", "--addr", "localhost"}, `mha: --addr "localhost": want HOST:PORT such as 127.0.0.1:8080`},
		{[]string{"lab", "--addr", "127.0.0.1:99999"}, "mha: --addr 127.0.0.1:99999: listen tcp: address 99999: invalid port"},
		{[]string{"lab", "now"}, `mha: lab takes no arguments, got "now"`},
		{[]string{"lab", "--model", "no/such/folder"}, "mha: --model no/such/folder: expected a Hugging Face model folder or a checkpoint of mha train: "},
		{[]string{"lab", "--model", tinyGPT2, "--model", "lab.go"}, "mha: --model lab.go: expected a Hugging Face model folder or a checkpoint of mha train: "},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, c.msg) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want 1 and %q", c.args, code, out, errOut, c.msg)
		}
	}
}
