package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// torchProbe is what torch_mha.py probe reports about the PyTorch installation.
type torchProbe struct {
	Version  string   `json:"torch"`
	BLAS     []string `json:"blas"`      // the libblas files mapped into the process
	MMGFLOPS float64  `json:"mm_gflops"` // torch.mm 512³ rate
}

// slowMM is the torch.mm 512³ rate below which PyTorch's matrix products are taken to run on the
// reference BLAS (about 8 GFLOP/s here; OpenBLAS does 70–230 on two cores, and more than 25 on
// one core of any AVX2 machine).
const slowMM = 25

// fastBLAS reports whether PyTorch's matrix products run on an optimised BLAS: the libblas it
// loaded is OpenBLAS, BLIS or MKL (Debian's alternatives), or, where that cannot be seen (no
// /proc, or a PyTorch with its BLAS built in), torch.mm is fast. A slow torch.mm counts as
// slow whatever the library.
func (p *torchProbe) fastBLAS() bool {
	if p.MMGFLOPS < slowMM {
		return false
	}
	if len(p.BLAS) == 0 {
		return true
	}
	for _, lib := range p.BLAS {
		if l := strings.ToLower(lib); strings.Contains(l, "openblas") || strings.Contains(l, "blis") || strings.Contains(l, "mkl") {
			return true
		}
	}
	return false
}

// blasName names the BLAS library PyTorch uses, as well as it can.
func (p *torchProbe) blasName() string {
	if len(p.BLAS) == 0 {
		return "its built-in or an unknown BLAS"
	}
	return strings.Join(p.BLAS, ", ")
}

// describe is the human output's line about PyTorch.
func (p *torchProbe) describe(cfg *benchConfig) string {
	path := "its unfused path (a causal attn_mask or an odd H rules the fast path out)"
	switch {
	case cfg.backward:
		path = "its unfused path in train mode with autograd (the fast path is inference-only)"
	case !cfg.causal && cfg.heads%2 == 0:
		path = "its fused fast path, torch._native_multi_head_attention"
	}
	return fmt.Sprintf("PyTorch %s, BLAS %s (torch.mm 512³ at %.0f GFLOP/s); torch = nn.MultiheadAttention on %s",
		p.Version, p.blasName(), p.MMGFLOPS, path)
}

// warnSlowBLAS warns on w when PyTorch's matrix products do not run on an optimised BLAS.
func (p *torchProbe) warnSlowBLAS(w io.Writer) {
	if !p.fastBLAS() {
		fmt.Fprintf(w, "warning: PyTorch's matrix products run on %s at %.0f GFLOP/s (torch.mm 512³), not on OpenBLAS: Debian's python3-torch is then about 20× slower; install OpenBLAS with apt-get install libopenblas0-pthread\n", p.blasName(), p.MMGFLOPS)
	}
}

// probeTorch checks that python runs and imports torch, and reports on its BLAS.
func probeTorch(python, dir string, threads int) (*torchProbe, error) {
	if _, err := exec.LookPath(python); err != nil {
		return nil, fmt.Errorf("--torch and --ort need Python with PyTorch, but %s was not found; install it with %s", python, torchInstallHint)
	}
	c := exec.Command(python, filepath.Join(dir, "torch_mha.py"), "probe", "--threads", strconv.Itoa(threads))
	c.Env = torchEnv(threads)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("--torch and --ort need PyTorch, but %s could not import it (%s); install it with %s", python, childFailure(err, &stderr), torchInstallHint)
	}
	var p torchProbe
	if err := lastJSONLine(stdout.Bytes(), &p); err != nil {
		return nil, fmt.Errorf("%s torch_mha.py probe printed no result, got %q", python, lastLine(stdout.String()))
	}
	return &p, nil
}

// torchEnv is the environment of the Python children: every thread pool PyTorch may use
// (OpenMP, and OpenBLAS's own, which torch.set_num_threads does not reach in Debian's build)
// sized to threads.
func torchEnv(threads int) []string {
	n := strconv.Itoa(threads)
	return append(os.Environ(), "OMP_NUM_THREADS="+n, "OPENBLAS_NUM_THREADS="+n, "MKL_NUM_THREADS="+n)
}

// torchImpls are the PyTorch variants: torch, torch-sdpa and, when libjemalloc is installed,
// torch-jemalloc.
func torchImpls(python, dir string, cfg *benchConfig, stderr io.Writer) []benchImpl {
	variant := func(name, v, preload string) benchImpl {
		return benchImpl{name: name, command: func(t int) *exec.Cmd {
			args := append([]string{filepath.Join(dir, "torch_mha.py"), "run", "--variant", v,
				"--H", strconv.Itoa(cfg.heads), "--seed", strconv.Itoa(benchLayerSeed)}, cfg.scriptArgs(t)...)
			c := exec.Command(python, append(args, cfg.modeArgs()...)...)
			c.Env = torchEnv(cfg.threads)
			if preload != "" {
				if old := os.Getenv("LD_PRELOAD"); old != "" {
					preload += ":" + old
				}
				c.Env = append(c.Env, "LD_PRELOAD="+preload, "MALLOC_CONF="+jemallocRetain)
			}
			return c
		}}
	}
	impls := []benchImpl{variant("torch", "torch", ""), variant("torch-sdpa", "torch-sdpa", "")}
	if lib := findJemalloc(); lib != "" {
		impls = append(impls, variant("torch-jemalloc", "torch", lib))
	} else {
		fmt.Fprintln(stderr, "note: skipping torch-jemalloc: libjemalloc.so.2 not found; install it with apt-get install libjemalloc2")
	}
	return impls
}

// jemallocRetain is torch-jemalloc's MALLOC_CONF: freed pages are kept, never handed back to the
// system, so that a call's large temporaries reuse the previous call's memory instead of faulting
// in fresh pages. mha allocates nothing in steady state; without this PyTorch pays a page fault
// per 4 KiB of every temporary on every call, which on a virtual machine can cost more than the
// arithmetic (BENCHMARKS.md, v14).
const jemallocRetain = "dirty_decay_ms:-1,muzzy_decay_ms:-1"

// findJemalloc returns the path of Debian's libjemalloc.so.2, or "" when it is not installed.
func findJemalloc() string {
	for _, pattern := range []string{"/usr/lib/*-linux-gnu/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2", "/usr/lib64/libjemalloc.so.2"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}
