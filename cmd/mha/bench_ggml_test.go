package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestParseGGMLPerf reads real output of test-backend-ops perf on --test-file cases
// (testdata/ggml_perf.txt, from ggml d99724f, colours and all): a decode step with a mask and
// f16 K/V, a 64-query prefill with a mask, and a prefill without one with f32 K/V.
func TestParseGGMLPerf(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "ggml_perf.txt"))
	if err != nil {
		t.Fatal(err)
	}
	perfs, err := parseGGMLPerf(string(b))
	if err != nil {
		t.Fatal(err)
	}
	want := []ggmlPerf{
		{ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 4096, NQ: 1, B: 1, KVType: "f16", Mask: true}, 16802.69},
		{ggmlShape{D: 128, Hq: 8, Hkv: 2, KV: 2048, NQ: 64, B: 1, KVType: "f16", Mask: true}, 21028.51},
		{ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 512, NQ: 512, B: 1, KVType: "f32"}, 190652.62},
	}
	if len(perfs) != len(want) {
		t.Fatalf("%d perf lines %+v, want %d", len(perfs), perfs, len(want))
	}
	for i := range want {
		if perfs[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, perfs[i], want[i])
		}
	}
}

// TestParseGGMLPerfErrors checks that a FLASH_ATTN_EXT line that cannot be read is an error
// quoting it, and that other lines are skipped.
func TestParseGGMLPerfErrors(t *testing.T) {
	const src = "sources=f32[64,1,4,1],f16[64,256,2,1],f16[64,256,2,1],f16[256,1,1,1]"
	if perfs, err := parseGGMLPerf("Testing 1 devices\n  Backend CPU: \x1b[1;32mOK\x1b[0m\n"); err != nil || len(perfs) != 0 {
		t.Errorf("output without perf lines: %v, %v; want none and no error", perfs, err)
	}
	for _, tc := range []struct{ line, want string }{
		{"  FLASH_ATTN_EXT(" + src + "):     12 runs -   bad us/run", "want FLASH_ATTN_EXT(params): N runs - X us/run"},
		{"  FLASH_ATTN_EXT(" + src + ")", "want FLASH_ATTN_EXT(params): N runs - X us/run"},
		{"  FLASH_ATTN_EXT(" + src + "):     0 runs -   12.5 us/run - 1 kB/run", "want a positive run count"},
		{"  FLASH_ATTN_EXT(" + src + "): not supported", "ggml's CPU backend does not support FLASH_ATTN_EXT(" + src + ")"},
		// A built-in perf case, which --ggml never runs: its parameters name no sources.
		{"  FLASH_ATTN_EXT(hsk=128,hsv=128,nh=8,nr23=[1,1],kv=4096,nb=1,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0):   477 runs -  7666.29 us/run -  16.78 MFLOP/run - \x1b[1;34m  2.19 GFLOPS\x1b[0m", "want q, k, v and perhaps a mask"},
		{"  FLASH_ATTN_EXT(sources=f32[64,1,4,1],f16[64,256,2,1],f32[64,256,2,1]):   5 runs -  1.0 us/run", "of one type"},
		{"  FLASH_ATTN_EXT(sources=f32[64,1,4,1],f16[64,256,3,1],f16[64,256,3,1]):   5 runs -  1.0 us/run", "Hkv dividing Hq"},
	} {
		_, err := parseGGMLPerf("Backend 1/1: CPU\n" + tc.line + "\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.line, err, tc.want)
		}
		if err != nil && !strings.Contains(tc.want, "not support") && !strings.Contains(err.Error(), strings.TrimSpace(ansiEscape.ReplaceAllString(tc.line, ""))) {
			t.Errorf("%q: error %q does not quote the line", tc.line, err)
		}
	}
}

// TestGGMLShapes checks the FLASH_ATTN_EXT that each mode asks ggml for, its --test-file line
// (the one that made the first line of testdata/ggml_perf.txt), and that a perf line of another
// shape is refused.
func TestGGMLShapes(t *testing.T) {
	cfg := &benchConfig{embed: 4096, heads: 32, batch: 1, kvHeads: 8}
	for _, tc := range []struct {
		causal, decode bool
		want           ggmlShape
	}{
		{false, false, ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 512, NQ: 512, B: 1, KVType: "f32"}},
		{true, false, ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 512, NQ: 512, B: 1, KVType: "f32", Mask: true}},
		{false, true, ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 512, NQ: 1, B: 1, KVType: "f32"}},
		{true, true, ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 512, NQ: 1, B: 1, KVType: "f32"}},
	} {
		cfg.causal, cfg.decode = tc.causal, tc.decode
		if got := ggmlShapeFor(cfg, 512, "f32"); got != tc.want {
			t.Errorf("causal %t decode %t: %v, want %v", tc.causal, tc.decode, got, tc.want)
		}
	}
	decode := ggmlShape{D: 128, Hq: 32, Hkv: 8, KV: 4096, NQ: 1, B: 1, KVType: "f16", Mask: true}
	const line = "74 0 128 32 1 1 4 1035273459 0 0 10 4 0 128 1 32 1 0 0 0 0 1 128 4096 8 1 0 0 0 0 1 128 4096 8 1 0 0 0 0 1 4096 1 1 1 0 0 0 0 -\n"
	if got := decode.testFileLine(74); got != line {
		t.Errorf("test file line\n%q, want\n%q", got, line)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "ggml_perf.txt"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "  Backend CPU")
	m, err := ggmlMeasurement([]byte(first), decode, 2)
	if err != nil || len(m.ms) != 1 || m.ms[0] != 16.80269 || m.threads != 2 {
		t.Errorf("measurement %+v, %v; want 16.80269 ms on 2 threads", m, err)
	}
	other := decode
	other.KV = 8192
	if _, err := ggmlMeasurement([]byte(first), other, 2); err == nil || !strings.Contains(err.Error(), "want D=128 Hq=32 Hkv=8 kv=8192") {
		t.Errorf("a perf line of another shape: %v", err)
	}
	if _, err := ggmlMeasurement(b, decode, 2); err == nil || !strings.Contains(err.Error(), "3 FLASH_ATTN_EXT perf lines, want 1") {
		t.Errorf("three perf lines: %v", err)
	}
}

// TestGGMLOpNumber reads an op's number from enum ggml_op.
func TestGGMLOpNumber(t *testing.T) {
	const h = `enum ggml_type {
        GGML_TYPE_F32 = 0,
};
    enum ggml_op {
        GGML_OP_NONE = 0,

        GGML_OP_DUP,
        GGML_OP_ADD, // a comment, with a comma
        GGML_OP_FLASH_ATTN_EXT,
        GGML_OP_COUNT,
    };
`
	if n, err := ggmlOpNumber(strings.NewReader(h), "FLASH_ATTN_EXT"); err != nil || n != 3 {
		t.Errorf("FLASH_ATTN_EXT: %d, %v; want 3", n, err)
	}
	if _, err := ggmlOpNumber(strings.NewReader(h), "SOFT_MAX"); err == nil || err.Error() != "no GGML_OP_SOFT_MAX in enum ggml_op" {
		t.Errorf("SOFT_MAX: %v", err)
	}
	bad := strings.Replace(h, "GGML_OP_DUP,", "GGML_OP_DUP = 7,", 1)
	if _, err := ggmlOpNumber(strings.NewReader(bad), "FLASH_ATTN_EXT"); err == nil || !strings.Contains(err.Error(), "GGML_OP_DUP the value 7") {
		t.Errorf("an enum with its own values: %v", err)
	}
}

// fakeGGMLBuild writes a build directory that stands in for ggml's: CMakeCache.txt, the ggml.h
// it names, and a test-backend-ops script that prints its usage, or for a --test-file case the
// perf line test-backend-ops would print (its shape, 250 us/run), after checking the op number.
func fakeGGMLBuild(t *testing.T) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in for test-backend-ops is a shell script")
	}
	dir := t.TempDir()
	src, build := filepath.Join(dir, "ggml"), filepath.Join(dir, "ggml", "build")
	files := map[string]string{
		filepath.Join(src, "include", "ggml.h"): "enum ggml_op {\n GGML_OP_NONE = 0,\n GGML_OP_DUP,\n GGML_OP_FLASH_ATTN_EXT,\n GGML_OP_COUNT,\n};\n",
		filepath.Join(build, "CMakeCache.txt"):  "CMAKE_HOME_DIRECTORY:INTERNAL=" + src + "\nGGML_OPENMP_ENABLED:INTERNAL=ON\n",
		filepath.Join(build, "bin", ggmlBinaryName): `#!/bin/sh
if [ "$1" != perf ] || [ "$6" != --test-file ]; then
	echo "Usage: $0 [mode] [-o <op,..>] [-b <backend>] [-p <params regex>] [--test-file <path>]"
	exit 1
fi
[ -n "$OMP_THREAD_LIMIT" ] || { echo "no OMP_THREAD_LIMIT" >&2; exit 1; }
echo "Testing 1 devices"
awk 'function ty(n) { return n == 0 ? "f32" : "f16" }
$1 != 2 { print "op " $1 ", want 2" > "/dev/stderr"; exit 1 }
{ s = ""; for (i = 0; i < $12; i++) { o = 13 + 9*i; s = s (i ? "," : "") ty($o) "[" $(o+1) "," $(o+2) "," $(o+3) "," $(o+4) "]" }
  printf "  FLASH_ATTN_EXT(type=f32,ne=[%s,%s,%s,%s],op_params=[0:%s,3:%s],sources=%s):      120 runs -   250.00 us/run -     2816 kB/run - \033[1;34m   0.21 GB/s\033[0m\n", $3, $4, $5, $6, $8, $11, s }' "$7"
`,
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return build
}

// TestBenchGGML runs mha bench --ggml against the stand-in for test-backend-ops: prefill with
// GQA and a decode step, in JSON, and the table with its ratios.
func TestBenchGGML(t *testing.T) {
	build := fakeGGMLBuild(t)
	for _, args := range [][]string{
		{"--gqa", "1", "--causal", "--seq", "16,32"},
		{"--decode", "64", "--gqa", "1"},
	} {
		args = append([]string{"bench", "--json", "--ggml", build, "--embed", "16", "--heads", "2", "--threads", "1", "--runs", "1", "--warmup", "0"}, args...)
		code, stdout, stderr := runCLI(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
		var ggml []benchRow
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
			var r benchRow
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if strings.HasPrefix(r.Impl, "ggml-") {
				ggml = append(ggml, r)
			}
		}
		n := 4 // two lengths, two K/V types
		if slices.Contains(args, "--decode") {
			n = 2
		}
		if len(ggml) != n {
			t.Fatalf("%q: ggml rows %+v, want %d", args, ggml, n)
		}
		for i, r := range ggml {
			want := ggmlKVTypes[i%2].name
			if r.Impl != "ggml-"+want || r.MS != 0.25 || r.MSMin != 0.25 || r.KVHeads != 1 || r.Threads != 1 || r.ExtraMiB != -1 || !(r.GFLOPS > 0) || r.Decode != (n == 2) {
				t.Errorf("%q: row %+v, want ggml-%s at 0.25 ms on 1 thread", args, r, want)
			}
		}
	}
	code, stdout, stderr := runCLI("bench", "--ggml", filepath.Join(build, "bin", ggmlBinaryName), "--gqa", "1", "--embed", "16", "--heads", "2", "--seq", "16", "--runs", "1", "--warmup", "0")
	if code != 0 || !strings.Contains(stdout, "\nggml: ") || !strings.Contains(stdout, "     T  ggml-f16  ggml-f32\n") {
		t.Errorf("table: exit %d, stdout\n%s\nstderr %q; want the ggml line and ratios", code, stdout, stderr)
	}
}

// TestBenchGGMLErrors checks the errors of a --ggml that is not a usable test-backend-ops.
func TestBenchGGMLErrors(t *testing.T) {
	build := fakeGGMLBuild(t)
	empty := t.TempDir()
	plain := filepath.Join(empty, "notes.txt")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	noCache := t.TempDir()
	bin, err := os.ReadFile(filepath.Join(build, "bin", ggmlBinaryName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noCache, ggmlBinaryName), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want string
	}{
		{filepath.Join(empty, "missing"), "missing: no such file or directory; want ggml's build directory or its test-backend-ops (build it with sh cmd/mha/benchscripts/build_ggml.sh"},
		{empty, "no test-backend-ops in it (looked for " + filepath.Join(empty, "bin", ggmlBinaryName)},
		{plain, "is not an executable file, want ggml's test-backend-ops"},
		{noCache, "no CMakeCache.txt in " + noCache},
	} {
		code, stdout, stderr := runCLI("bench", "--ggml", tc.dir, "--gqa", "1", "--embed", "16", "--heads", "2", "--seq", "16")
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("--ggml %s: exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", tc.dir, code, stdout, stderr, tc.want)
		}
	}
	for _, args := range [][]string{{"--seq", "16"}, {"--gqa", "1", "--window", "4"}} {
		code, _, stderr := runCLI(append([]string{"bench", "--ggml", build, "--embed", "16", "--heads", "2"}, args...)...)
		if code != 1 || !strings.Contains(stderr, "--ggml times ggml's FLASH_ATTN_EXT") {
			t.Errorf("--ggml %q: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// FuzzGGMLOutput feeds the readers of ggml's files any text: test-backend-ops's perf output and
// ggml.h's enum ggml_op. Each gives an error or values it checked, never a panic.
func FuzzGGMLOutput(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "ggml_perf.txt")); err == nil {
		f.Add(string(b))
	}
	f.Add("FLASH_ATTN_EXT(type=f32,ne=[128,32,1,1],sources=f32[128,1,32,1],f16[128,4096,8,1],f16[128,4096,8,1]):   64 runs -   16802.69 us/run")
	f.Add("enum ggml_op {\n GGML_OP_NONE = 0,\n GGML_OP_DUP,\n GGML_OP_FLASH_ATTN_EXT, // x\n};")
	f.Add("FLASH_ATTN_EXT(sources=f32[0,1,1,1]): not supported")
	f.Fuzz(func(t *testing.T, text string) {
		perfs, err := parseGGMLPerf(text)
		for _, p := range perfs {
			if err == nil && (!(p.us > 0) || p.shape.D <= 0 || p.shape.Hkv <= 0 || p.shape.Hq%p.shape.Hkv != 0) {
				t.Fatalf("parseGGMLPerf(%q) gave %+v", text, p)
			}
		}
		if n, err := ggmlOpNumber(strings.NewReader(text), "FLASH_ATTN_EXT"); err == nil && n < 0 {
			t.Fatalf("ggmlOpNumber(%q) = %d", text, n)
		}
	})
}
