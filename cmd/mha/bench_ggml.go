package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// mha bench --ggml: ggml's own FLASH_ATTN_EXT on the CPU backend, timed by its test-backend-ops
// (built by the user with benchscripts/build_ggml.sh), beside mha's attention core. Its built-in
// perf cases are few fixed shapes, so each measurement hands it a --test-file that describes the
// one FLASH_ATTN_EXT of mha's shape; test-backend-ops times it as a generic op and prints one
// perf line, parsed here.

// ggmlKVTypes are the K/V types timed, each as its own implementation ggml-<type>; ggml's
// FLASH_ATTN_EXT takes Q in float32 and K/V in either.
var ggmlKVTypes = []struct {
	name string
	id   int // ggml_type, whose values ggml keeps fixed (they are GGUF's)
}{{"f16", 1}, {"f32", 0}}

// ggmlPrecF32 is GGML_PREC_F32, FLASH_ATTN_EXT's fourth op parameter as llama.cpp sets it.
const ggmlPrecF32 = 10

// ggmlShape is one FLASH_ATTN_EXT call: head dimension D, query and K/V heads, the keys each
// query sees (kv), the queries (nq: T in prefill, 1 in a decode step), the batch, the K/V type,
// and whether it has a mask.
type ggmlShape struct {
	D, Hq, Hkv, KV, NQ, B int
	KVType                string
	Mask                  bool
}

// String names the shape as the errors about it say it.
func (s ggmlShape) String() string {
	mask := "no mask"
	if s.Mask {
		mask = "mask"
	}
	return fmt.Sprintf("D=%d Hq=%d Hkv=%d kv=%d queries=%d B=%d K/V %s, %s", s.D, s.Hq, s.Hkv, s.KV, s.NQ, s.B, s.KVType, mask)
}

// ggmlShapeFor is the FLASH_ATTN_EXT of cfg's core at sequence (or cache) length t. Causal
// prefill gets a mask, as in llama.cpp, but test-backend-ops fills it at random, not causally
// (values in [-1, 1] and random 64×128 blocks of -inf, about a tenth of it). Full attention and
// a decode step get none: ggml then reads every key, as mha does (a random mask would let it
// skip a tenth of the cache).
func ggmlShapeFor(cfg *benchConfig, t int, kvType string) ggmlShape {
	s := ggmlShape{D: cfg.headDim(), Hq: cfg.heads, Hkv: cfg.kvHeads, KV: t, NQ: t, B: cfg.batch, KVType: kvType, Mask: cfg.causal && !cfg.decode}
	if cfg.decode {
		s.NQ = 1
	}
	return s
}

// testFileLine is s as a line of test-backend-ops's --test-file, op being FLASH_ATTN_EXT's
// number: the op and the result's type and shape, the op parameters (scale, max_bias,
// logit_softcap, precision), then each source's type, shape and strides (0: contiguous), then a
// name ("-": none). Shapes are ggml's, innermost first: q [D, nq, Hq, B], k and v
// [D, kv, Hkv, B], mask [kv, nq, 1, 1] (shared by the batch), result [D, Hq, nq, B].
func (s ggmlShape) testFileLine(op int) string {
	var kvType int
	for _, ty := range ggmlKVTypes {
		if ty.name == s.KVType {
			kvType = ty.id
		}
	}
	scale := int32(math.Float32bits(float32(1 / math.Sqrt(float64(s.D)))))
	srcs := [][5]int{{0, s.D, s.NQ, s.Hq, s.B}, {kvType, s.D, s.KV, s.Hkv, s.B}, {kvType, s.D, s.KV, s.Hkv, s.B}}
	if s.Mask {
		srcs = append(srcs, [5]int{1, s.KV, s.NQ, 1, 1})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d 0 %d %d %d %d 4 %d 0 0 %d %d", op, s.D, s.Hq, s.NQ, s.B, scale, ggmlPrecF32, len(srcs))
	for _, src := range srcs {
		fmt.Fprintf(&b, " %d %d %d %d %d 0 0 0 0", src[0], src[1], src[2], src[3], src[4])
	}
	b.WriteString(" -\n")
	return b.String()
}

// ggmlPerf is one perf line of test-backend-ops: the shape it ran, and the mean time of its runs.
type ggmlPerf struct {
	shape ggmlShape
	us    float64 // per run
}

var (
	ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	// perfTail is what follows "OP(params): " on a perf line (test-backend-ops's
	// print_perf_console): "   N runs -   X us/run - …".
	perfTail = regexp.MustCompile(`^\s*(\d+) runs\s*-\s*([0-9.]+) us/run\b`)
	// srcTensor is one source of a generic op's "sources=" parameter: type[ne0,ne1,ne2,ne3],
	// then nb[…] when it is not contiguous.
	srcTensor = regexp.MustCompile(`(\w+)\[(\d+),(\d+),(\d+),(\d+)\](?:nb\[[0-9,]+\])?`)
)

// parseGGMLPerf reads test-backend-ops perf's console output and returns its FLASH_ATTN_EXT
// lines, which a --test-file case prints as
//
//	FLASH_ATTN_EXT(type=f32,ne=[…],op_params=[…],sources=f32[D,nq,Hq,B],f16[D,kv,Hkv,B],…):   N runs -   X us/run - …
//
// (print_perf_console, its colours removed). A FLASH_ATTN_EXT line it cannot read is an error
// that quotes it, and so is a case the backend does not support.
func parseGGMLPerf(out string) ([]ggmlPerf, error) {
	var perfs []ggmlPerf
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(ansiEscape.ReplaceAllString(sc.Text(), ""))
		rest, ok := strings.CutPrefix(line, "FLASH_ATTN_EXT(")
		if !ok {
			continue
		}
		params, tail, ok := strings.Cut(rest, "):")
		if strings.TrimSpace(tail) == "not supported" {
			return nil, fmt.Errorf("ggml's CPU backend does not support FLASH_ATTN_EXT(%s)", params)
		}
		m := perfTail.FindStringSubmatch(tail)
		if !ok || m == nil {
			return nil, fmt.Errorf("test-backend-ops printed %q, want FLASH_ATTN_EXT(params): N runs - X us/run - …", line)
		}
		runs, errR := strconv.Atoi(m[1])
		us, errU := strconv.ParseFloat(m[2], 64)
		if errR != nil || errU != nil || runs <= 0 || !(us > 0) {
			return nil, fmt.Errorf("test-backend-ops printed %q, want a positive run count and time per run", line)
		}
		shape, err := parseGGMLSources(params)
		if err != nil {
			return nil, fmt.Errorf("test-backend-ops printed %q: %v", line, err)
		}
		perfs = append(perfs, ggmlPerf{shape: shape, us: us})
	}
	return perfs, sc.Err()
}

// parseGGMLSources reads the shape from a --test-file case's parameters: its sources q, k, v
// and, when there is one, the mask.
func parseGGMLSources(params string) (ggmlShape, error) {
	_, srcs, _ := strings.Cut(params, "sources=")
	m := srcTensor.FindAllStringSubmatch(srcs, -1)
	if len(m) < 3 || len(m) > 4 {
		return ggmlShape{}, fmt.Errorf("sources %q, want q, k, v and perhaps a mask, each as type[ne0,ne1,ne2,ne3]", srcs)
	}
	var ne [3][4]int
	for i := range ne {
		for j := range ne[i] {
			n, err := strconv.Atoi(m[i][2+j])
			if err != nil || n <= 0 {
				return ggmlShape{}, fmt.Errorf("sources %q, want positive sizes", srcs)
			}
			ne[i][j] = n
		}
	}
	q, k := ne[0], ne[1]
	if m[1][1] != m[2][1] || ne[1] != ne[2] || q[0] != k[0] || q[2]%k[2] != 0 || q[3] != k[3] {
		return ggmlShape{}, fmt.Errorf("sources %q, want q [D,nq,Hq,B], k and v [D,kv,Hkv,B] of one type, Hkv dividing Hq", srcs)
	}
	return ggmlShape{D: q[0], NQ: q[1], Hq: q[2], B: q[3], KV: k[1], Hkv: k[2], KVType: m[1][1], Mask: len(m) == 4}, nil
}

// ggmlBinaryName is the test program of ggml's build that --ggml runs.
const ggmlBinaryName = "test-backend-ops"

// ggmlBuildHint says how to make the binary.
const ggmlBuildHint = "build it with sh cmd/mha/benchscripts/build_ggml.sh SRC, SRC from git clone https://github.com/ggml-org/ggml"

// findGGMLBinary returns the test-backend-ops that --ggml DIR names: DIR itself, or the binary
// in the build directory DIR.
func findGGMLBinary(dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("--ggml %s: %v; want ggml's build directory or its %s (%s)", dir, unwrapPathError(err), ggmlBinaryName, ggmlBuildHint)
	}
	bin := dir
	if st.IsDir() {
		var tried []string
		bin = ""
		for _, p := range []string{"bin", filepath.Join("bin", "Release"), "."} {
			p = filepath.Join(dir, p, ggmlBinaryName)
			tried = append(tried, p)
			if st, err = os.Stat(p); err == nil {
				bin = p
				break
			}
		}
		if bin == "" {
			return "", fmt.Errorf("--ggml %s: no %s in it (looked for %s); want ggml's build directory or the binary (%s)", dir, ggmlBinaryName, strings.Join(tried, ", "), ggmlBuildHint)
		}
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("--ggml %s: %s is not an executable file, want ggml's %s (%s)", dir, bin, ggmlBinaryName, ggmlBuildHint)
	}
	return filepath.Abs(bin)
}

// unwrapPathError drops the path from a *fs.PathError, which the message names already.
func unwrapPathError(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// ggmlBuild is what the CMake cache of test-backend-ops's build says: the ggml.h of the sources
// it was built from, and whether ggml's CPU backend runs its threads through OpenMP.
type ggmlBuild struct {
	header string
	openMP bool
}

// readGGMLBuild reads the build directory's CMakeCache.txt, in bin's directory or up to two
// above it. Its CMAKE_HOME_DIRECTORY is the source directory, which holds include/ggml.h (ggml)
// or ggml/include/ggml.h (llama.cpp).
func readGGMLBuild(bin string) (ggmlBuild, error) {
	dir := filepath.Dir(bin)
	for range 3 {
		cache := filepath.Join(dir, "CMakeCache.txt")
		b, err := os.ReadFile(cache)
		if err != nil {
			dir = filepath.Dir(dir)
			continue
		}
		var build ggmlBuild
		src := ""
		for line := range strings.Lines(string(b)) {
			key, value, _ := strings.Cut(strings.TrimSpace(line), "=")
			switch key {
			case "CMAKE_HOME_DIRECTORY:INTERNAL":
				src = value
			case "GGML_OPENMP_ENABLED:INTERNAL":
				build.openMP = value == "ON"
			}
		}
		if src == "" {
			return ggmlBuild{}, fmt.Errorf("%s has no CMAKE_HOME_DIRECTORY, want CMake's cache of ggml's build", cache)
		}
		for _, h := range []string{filepath.Join(src, "include", "ggml.h"), filepath.Join(src, "ggml", "include", "ggml.h")} {
			if _, err := os.Stat(h); err == nil {
				build.header = h
				return build, nil
			}
		}
		return ggmlBuild{}, fmt.Errorf("the source directory %s that %s names has no include/ggml.h or ggml/include/ggml.h", src, cache)
	}
	return ggmlBuild{}, fmt.Errorf("no CMakeCache.txt in %s or the two directories above it, want %s inside ggml's CMake build directory", filepath.Dir(bin), ggmlBinaryName)
}

// ggmlOpNumber returns the value of GGML_OP_<name> in enum ggml_op of the header h: its
// position, as the enum starts at GGML_OP_NONE = 0 and gives no other values. --test-file names
// ops by number, and the numbers change between ggml's versions.
func ggmlOpNumber(h io.Reader, name string) (int, error) {
	sc := bufio.NewScanner(h)
	in, n := false, 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !in {
			in = strings.HasPrefix(line, "enum ggml_op {")
			continue
		}
		if strings.HasPrefix(line, "}") {
			break
		}
		entry, _, _ := strings.Cut(line, "//")
		entry, _, _ = strings.Cut(entry, ",")
		entry, value, hasValue := strings.Cut(entry, "=")
		entry = strings.TrimSpace(entry)
		if !strings.HasPrefix(entry, "GGML_OP_") {
			continue
		}
		if hasValue && strings.TrimSpace(value) != strconv.Itoa(n) {
			return 0, fmt.Errorf("enum ggml_op gives %s the value %s, want the values to be the positions", entry, strings.TrimSpace(value))
		}
		if entry == "GGML_OP_"+name {
			return n, nil
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no GGML_OP_%s in enum ggml_op", name)
}

// prepareGGML checks the binary of --ggml, finds FLASH_ATTN_EXT's op number in the sources it
// was built from, and returns an implementation per K/V type, with the human output's line about
// ggml. The test files, one per length and K/V type, are written into a new temporary directory
// that cleanup removes.
func prepareGGML(dir string, cfg *benchConfig, stderr io.Writer) (impls []benchImpl, info string, cleanup func(), err error) {
	bin, err := findGGMLBinary(dir)
	if err != nil {
		return nil, "", nil, err
	}
	var usage bytes.Buffer
	c := exec.Command(bin, "--help") // an unknown argument: it prints its usage and exits 1
	c.Stdout, c.Stderr = &usage, &usage
	if err := c.Run(); err != nil && !errors.As(err, new(*exec.ExitError)) {
		return nil, "", nil, fmt.Errorf("--ggml: cannot run %s: %v", bin, err)
	}
	if !strings.Contains(usage.String(), "--test-file") {
		return nil, "", nil, fmt.Errorf("--ggml: %s has no --test-file option (its usage: %q), want a newer test-backend-ops (ggml's master has it), which times any FLASH_ATTN_EXT shape; %s", bin, lastLine(usage.String()), ggmlBuildHint)
	}
	build, err := readGGMLBuild(bin)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--ggml: cannot find FLASH_ATTN_EXT's op number for --test-file: %v", err)
	}
	hf, err := os.Open(build.header)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--ggml: %v", err)
	}
	op, err := ggmlOpNumber(hf, "FLASH_ATTN_EXT")
	hf.Close()
	if err != nil {
		return nil, "", nil, fmt.Errorf("--ggml: %s: %v", build.header, err)
	}
	tmp, err := os.MkdirTemp("", "mha-ggml-")
	if err != nil {
		return nil, "", nil, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	file := func(t int, kvType string) string {
		return filepath.Join(tmp, fmt.Sprintf("flash_attn_ext_%s_%d.txt", kvType, t))
	}
	for _, t := range cfg.seqs {
		for _, ty := range ggmlKVTypes {
			if err := os.WriteFile(file(t, ty.name), []byte(ggmlShapeFor(cfg, t, ty.name).testFileLine(op)), 0o644); err != nil {
				cleanup()
				return nil, "", nil, fmt.Errorf("--ggml: cannot write the test file: %v", err)
			}
		}
	}
	// test-backend-ops takes no thread count: it asks for std::thread::hardware_concurrency().
	// With OpenMP, ggml runs on as many as OpenMP gives it, which OMP_THREAD_LIMIT caps.
	threads, how := cfg.threads, "OMP_THREAD_LIMIT"
	if !build.openMP {
		threads, how = runtime.NumCPU(), "hardware_concurrency: built without OpenMP, it takes no thread count"
		if threads != cfg.threads {
			fmt.Fprintf(stderr, "note: ggml built without OpenMP runs on std::thread::hardware_concurrency() threads (likely %d), not --threads %d\n", threads, cfg.threads)
		}
	}
	for _, ty := range ggmlKVTypes {
		impls = append(impls, benchImpl{name: "ggml-" + ty.name,
			command: func(t int) *exec.Cmd {
				c := exec.Command(bin, "perf", "-o", "FLASH_ATTN_EXT", "-b", "CPU", "--test-file", file(t, ty.name))
				c.Env = append(os.Environ(), "OMP_THREAD_LIMIT="+strconv.Itoa(cfg.threads))
				return c
			},
			parse: func(t int, stdout []byte) (*measurement, error) {
				return ggmlMeasurement(stdout, ggmlShapeFor(cfg, t, ty.name), threads)
			}})
	}
	info = fmt.Sprintf("ggml: %s perf -o FLASH_ATTN_EXT -b CPU, a --test-file case of the shape above per row (Q f32, K/V as named, precision f32); ms is the mean of the runs it chooses (until 8 GiB moved and at least 1 s), min ms the same; %d threads (%s)",
		bin, threads, how)
	if cfg.causal && !cfg.decode {
		info += "; ggml has no causal flag: its mask is test-backend-ops' random one, not causal, so it computes nearly all T² pairs where mha skips the masked half"
	}
	return impls, info, cleanup, nil
}

// ggmlMeasurement reads the one perf line of a test-backend-ops run that was given the case
// want, and checks that it ran that shape.
func ggmlMeasurement(stdout []byte, want ggmlShape, threads int) (*measurement, error) {
	perfs, err := parseGGMLPerf(string(stdout))
	if err != nil {
		return nil, err
	}
	if len(perfs) != 1 {
		return nil, fmt.Errorf("test-backend-ops printed %d FLASH_ATTN_EXT perf lines, want 1 (last line %q)", len(perfs), lastLine(string(stdout)))
	}
	if got := perfs[0].shape; got != want {
		return nil, fmt.Errorf("test-backend-ops ran FLASH_ATTN_EXT %v, want %v", got, want)
	}
	ms := perfs[0].us / 1e3
	return &measurement{ms: []float64{ms}, peakKiB: -1, extraKiB: -1, threads: threads}, nil
}
