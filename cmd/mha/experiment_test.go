package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhalab/mha/experiment"
)

// TestExperiment runs the routing experiment as text and as JSON and checks the table, the
// summary and the pictures written.
func TestExperiment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pictures")
	code, stdout, stderr := runCLI("experiment", "routing", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"Attention as soft routing", "query", "α(A)", "routes from", "compares feature 0", "wrote " + filepath.Join(dir, "routing-head0.png")} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	for _, name := range []string{"routing-head0", "routing-head1", "routing-output"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(b)); err != nil {
			t.Errorf("%s.png: %v", name, err)
		}
		svg, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		if err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("%s.svg: %v %.80q", name, err, svg)
		}
	}

	code, stdout, stderr = runCLI("experiment", "params", "--format", "json", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		experiment.Result
		Data experiment.ParamsData `json:"data"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--format json printed %.200q: %v", stdout, err)
	}
	if res.Name != "params" || len(res.Table.Rows) != len(res.Data.Rows) || res.Data.Rows[0].Built != 80 {
		t.Errorf("JSON result: %s, %d table rows, data %+v", res.Name, len(res.Table.Rows), res.Data.Rows[:1])
	}
}

// TestExperimentErrors checks the command's errors: one per line, saying what was expected.
func TestExperimentErrors(t *testing.T) {
	names := strings.Join(experiment.Names(), ", ")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"experiment"}, "mha: experiment takes one argument, the experiment's name (one of " + names + "), got 0\n"},
		{[]string{"experiment", "params", "routing"}, "got 2"},
		{[]string{"experiment", "chess"}, `mha: experiment: unknown experiment "chess", want one of ` + names + "\n"},
		{[]string{"experiment", "params", "--format", "xml"}, `--format is "xml", want text or json`},
		{[]string{"experiment", "params", "--workers", "-2"}, `invalid argument "-2" for "--workers" flag: want a goroutine count ≥ 0`},
		{[]string{"experiment", "params", "--out", "/dev/null/x"}, "--out /dev/null/x: cannot create the directory for the pictures"},
		{[]string{"experiment", "circuits", "--quick", "--model", "/nonexistent"}, "circuits measures its own models, not a given one"},
		{[]string{"experiment", "routing", "--steps", "3"}, "routing trains nothing, so it takes no steps"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want one line containing %q", c.args, code, stderr, c.want)
		}
	}
}
