package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ortVersion is the onnxruntime-node version package.json pins.
func ortVersion() string {
	b, err := benchScripts.ReadFile("benchscripts/package.json")
	if err != nil {
		panic(err) // embedded at build time
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		panic(err)
	}
	return pkg.Dependencies["onnxruntime-node"]
}

// prepareORT installs onnxruntime-node into dir (once), exports the layer to ONNX (once per
// shape and options), checks ONNX Runtime's output against PyTorch's, and returns the "ort"
// implementation with the human output's line about it.
func prepareORT(python, dir string, cfg *benchConfig, stderr io.Writer) (benchImpl, string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return benchImpl{}, "", fmt.Errorf("--ort needs Node.js, but node was not found in PATH; install it with apt-get install nodejs npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return benchImpl{}, "", fmt.Errorf("--ort needs npm to install onnxruntime-node, but npm was not found in PATH; install it with apt-get install npm")
	}
	version := ortVersion()
	// The marker holds the version installed: another version in package.json installs anew.
	marker := filepath.Join(dir, "node_modules", ".mha-installed")
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != version {
		fmt.Fprintf(stderr, "note: installing onnxruntime-node %s into %s (once)\n", version, dir)
		// The CPU binaries ship in the package; its install script only fetches CUDA ones.
		c := exec.Command(npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund")
		c.Dir = dir
		c.Env = append(os.Environ(), "ONNXRUNTIME_NODE_INSTALL=skip")
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			return benchImpl{}, "", fmt.Errorf("npm ci of onnxruntime-node %s in %s failed: %s", version, dir, childFailure(err, &out))
		}
		if err := os.WriteFile(marker, []byte(version+"\n"), 0o644); err != nil {
			return benchImpl{}, "", err
		}
	}

	// The export script's hash is in the name: a changed script makes new models.
	script, err := benchScripts.ReadFile("benchscripts/ort_export.py")
	if err != nil {
		return benchImpl{}, "", err
	}
	name := fmt.Sprintf("mha_E%d_H%d_seed%d_%s", cfg.embed, cfg.heads, benchLayerSeed, shortHash(script)[:8])
	exportArgs := []string{filepath.Join(dir, "ort_export.py"), "--E", strconv.Itoa(cfg.embed), "--H", strconv.Itoa(cfg.heads),
		"--seed", strconv.Itoa(benchLayerSeed)}
	if cfg.causal {
		name += "_causal"
		exportArgs = append(exportArgs, "--causal")
	}
	if cfg.needWeights {
		name += "_weights"
		exportArgs = append(exportArgs, "--need-weights")
	}
	model, check := filepath.Join(dir, name+".onnx"), filepath.Join(dir, name+".check.json")
	_, errModel := os.Stat(model)
	_, errCheck := os.Stat(check)
	if errModel != nil || errCheck != nil {
		c := exec.Command(python, append(exportArgs, "--out", model, "--check", check)...)
		c.Env = torchEnv(cfg.threads)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			return benchImpl{}, "", fmt.Errorf("exporting the layer to ONNX with %s failed: %s", python, childFailure(err, &out))
		}
	}

	c := exec.Command(node, filepath.Join(dir, "ort_bench.js"), "check", "--model", model, "--check", check,
		"--threads", strconv.Itoa(cfg.threads))
	c.Dir = dir
	var stdout, errb bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &errb
	if err := c.Run(); err != nil {
		return benchImpl{}, "", fmt.Errorf("ONNX Runtime check of %s failed: %s", model, childFailure(err, &errb))
	}
	var res struct {
		RelErr float64 `json:"rel_err"`
	}
	if err := lastJSONLine(stdout.Bytes(), &res); err != nil {
		return benchImpl{}, "", fmt.Errorf("ONNX Runtime check of %s printed no result, got %q", model, lastLine(stdout.String()))
	}
	line := fmt.Sprintf("ONNX Runtime: onnxruntime-node %s, CPU, %d intra-op threads; its output matches PyTorch's (relative error %.1e)",
		version, cfg.threads, res.RelErr)
	im := benchImpl{name: "ort", command: func(t int) *exec.Cmd {
		c := exec.Command(node, append([]string{filepath.Join(dir, "ort_bench.js"), "run", "--model", model,
			"--seed", strconv.Itoa(benchInputSeed)}, cfg.scriptArgs(t)...)...)
		c.Dir = dir
		return c
	}}
	return im, line, nil
}
