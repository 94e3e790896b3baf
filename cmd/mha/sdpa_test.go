package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// sdpaArgs turns a golden file of testdata/gen_sdpa.py into the input file and flags a user of
// `mha sdpa` would give: its inputs (slopes renamed alibi_slopes) and its options' flags.
func sdpaArgs(t *testing.T, g *safetensors.File, backward bool) (input string, args []string) {
	t.Helper()
	in := map[string]safetensors.Tensor{}
	for _, name := range []string{"q", "k", "v", "sinks", "key_padding_mask", "attn_mask", "attn_bias", "slopes", "grad_out"} {
		if !g.Has(name) || name == "grad_out" && !backward {
			continue
		}
		raw, err := g.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "slopes" {
			name = "alibi_slopes"
		}
		in[name] = raw
	}
	m := g.Metadata
	args = append(args, "--causal", strings.ReplaceAll(m["causal"], "_", "-"), "--softcap", m["softcap"], "--scale", m["scale"])
	if m["window"] != "none" {
		args = append(args, "--window", m["window"])
	}
	if m["alibi"] == "default" {
		args = append(args, "--alibi")
	}
	if r := m["rope"]; r != "none" {
		if m["rope_scaling"] != "none" {
			return "", nil // Llama 3's scaling has no flags
		}
		f := strings.Split(r, ",")
		args = append(args, "--rope-theta", f[0], "--rope-dim", f[1], "--rope-layout", f[2], "--rope-offset", f[3])
	}
	if backward {
		args = append(args, "--backward")
	}
	return writeFile(t, in), args
}

// TestSDPAGoldens runs `mha sdpa` on every PyTorch golden of testdata/sdpa and compares out, lse
// and weights, and with --backward the gradients, with PyTorch's float64 values.
func TestSDPAGoldens(t *testing.T) {
	paths, err := filepath.Glob("../../testdata/sdpa/*.safetensors")
	if err != nil || len(paths) < 15 {
		t.Fatalf("golden files: %v, %v", paths, err)
	}
	ran := 0
	for _, path := range paths {
		for _, backward := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/backward=%v", strings.TrimSuffix(filepath.Base(path), ".safetensors"), backward), func(t *testing.T) {
				g, err := safetensors.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				in, args := sdpaArgs(t, g, backward)
				if in == "" {
					t.Skip("Llama 3 rope scaling has no flags")
				}
				ran++
				out := filepath.Join(t.TempDir(), "out.safetensors")
				if g.Has("weights") {
					args = append(args, "--need-weights")
				}
				code, stdout, stderr := runCLI(append([]string{"sdpa", "--input", in, "--out", out}, args...)...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				if !strings.HasPrefix(stdout, "wrote "+out+": out [") {
					t.Errorf("stdout %q", stdout)
				}
				o, err := safetensors.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				names := []string{"out", "lse"}
				if g.Has("weights") {
					names = append(names, "weights")
				}
				if backward {
					names = append(names, "grad.q", "grad.k", "grad.v")
					if g.Has("sinks") {
						names = append(names, "grad.sinks")
					}
				}
				if len(o.Names()) != len(names) {
					t.Errorf("wrote %v, want %v", o.Names(), names)
				}
				for _, name := range names {
					got, err := o.Float32(name)
					if err != nil {
						t.Fatal(err)
					}
					want, shape, err := g.Float64(name)
					if err != nil {
						t.Fatal(err)
					}
					if tensor.ShapeString(got.Shape) != tensor.ShapeString(shape) {
						t.Fatalf("%s is %v, want %v", name, got.Shape, shape)
					}
					var gf, wf []float64 // lse is +Inf in rows with nothing to attend
					for i, w := range want {
						g := float64(got.Data[i])
						if math.IsInf(w, 0) {
							if g != w {
								t.Fatalf("%s[%d] = %v, want %v", name, i, g, w)
							}
							continue
						}
						gf, wf = append(gf, g), append(wf, w)
					}
					if e := tensor.RelError(gf, wf); e > 1e-5 {
						t.Errorf("%s: relative error %.3g > 1e-5", name, e)
					}
				}
			})
		}
	}
	if ran < 30 {
		t.Errorf("ran %d goldens, want at least 30", ran)
	}
}

// TestSDPAErrors feeds `mha sdpa` bad flags and files and expects exit status 1 with one line
// saying what was expected and what came.
func TestSDPAErrors(t *testing.T) {
	good := map[string]safetensors.Tensor{"q": f32(1, 4, 3, 8), "k": f32(1, 2, 5, 8), "v": f32(1, 2, 5, 6)}
	with := func(name string, x safetensors.Tensor) map[string]safetensors.Tensor {
		m := map[string]safetensors.Tensor{}
		for n, t := range good {
			m[n] = t
		}
		if x.DType == "" {
			delete(m, name)
		} else {
			m[name] = x
		}
		return m
	}
	ok := writeFile(t, good)
	boolT := func(shape ...int) safetensors.Tensor { return safetensors.FromBool(tensor.NewBool(shape...)) }
	garbage := filepath.Join(t.TempDir(), "garbage.safetensors")
	if err := os.WriteFile(garbage, []byte("not a safetensors file"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "o.safetensors")
	for _, c := range []struct {
		name  string
		input string
		flags []string
		want  string
	}{
		{"no input", "", nil, "--input is required"},
		{"no out", ok, []string{"--out", ""}, "--out is required"},
		{"garbage", garbage, nil, "garbage.safetensors"},
		{"missing k", writeFile(t, with("k", safetensors.Tensor{})), nil, `no tensor "k" ([B Hkv Tk D])`},
		{"3-d q", writeFile(t, with("q", f32(4, 3, 8))), nil, `tensor "q" is [4 3 8], want [B Hq Tq D]`},
		{"int q", writeFile(t, with("q", safetensors.FromBool(tensor.NewBool(1, 4, 3, 8)))), nil, `tensor "q" is BOOL, want a float dtype`},
		{"heads", writeFile(t, with("q", f32(1, 3, 3, 8))), nil, "q has 3 heads, want a multiple of k's 2 heads"},
		{"head size", writeFile(t, with("k", f32(1, 2, 5, 7))), nil, "k is [1 2 5 7], want [1 Hkv Tk 8]"},
		{"unknown tensor", writeFile(t, with("query", f32(1))), nil, `unexpected tensor "query"`},
		{"grad_out without --backward", writeFile(t, with("grad_out", f32(1, 4, 3, 6))), nil, "holds grad_out; pass --backward"},
		{"--backward without grad_out", ok, []string{"--backward"}, "--backward needs grad_out [B Hq Tq Dv]"},
		{"grad_out shape", writeFile(t, with("grad_out", f32(1, 4, 3, 5))), []string{"--backward"}, "dOut is [1 4 3 5], want [1 4 3 6]"},
		{"sinks", writeFile(t, with("sinks", f32(3))), nil, "3 sinks, want one per query head (4)"},
		{"slopes shape", writeFile(t, with("alibi_slopes", f32(2, 2))), nil, `tensor "alibi_slopes" is [2 2], want [Hq]`},
		{"slopes and --alibi", writeFile(t, with("alibi_slopes", f32(4))), []string{"--alibi"}, "give one"},
		{"float padding", writeFile(t, with("key_padding_mask", f32(1, 5))), nil, `tensor "key_padding_mask" is F32, want BOOL or U8`},
		{"padding shape", writeFile(t, with("key_padding_mask", boolT(5))), nil, "key_padding_mask is [5], want [1 5] (B Tk)"},
		{"mask shape", writeFile(t, with("attn_mask", boolT(3, 4))), nil, "attn_mask is [3 4], want [3 5] or [1 4 3 5]"},
		{"bias shape", writeFile(t, with("attn_bias", f32(1, 4, 3, 4))), nil, "attn_bias is [1 4 3 4], want [3 5] or [1 4 3 5]"},
		{"causal", ok, []string{"--causal", "yes"}, `--causal is "yes", want none, top-left or bottom-right`},
		{"window syntax", ok, []string{"--window", "3"}, `--window is "3", want L,R`},
		{"window size", ok, []string{"--window", "-2,0"}, `--window is "-2,0"`},
		{"softcap", ok, []string{"--softcap", "-1"}, "softcap is -1, want a finite number ≥ 0"},
		{"scale", ok, []string{"--scale", "NaN"}, "scale is NaN, want a number finite in float32"},
		{"scale overflow", ok, []string{"--scale", "1e308"}, "scale is 1e+308, want a number finite in float32"},
		{"rope without theta", ok, []string{"--rope-dim", "4"}, "--rope-dim needs --rope-theta"},
		{"rope layout", ok, []string{"--rope-theta", "10000", "--rope-layout", "neox"}, `--rope-layout is "neox", want half or interleaved`},
		{"rope dim", ok, []string{"--rope-theta", "10000", "--rope-dim", "5"}, "rotary dim is 5, want an even number"},
		{"rope offset", ok, []string{"--rope-theta", "10000", "--rope-offset", "-3"}, "rotary offset is -3"},
		{"argument", ok, []string{"extra"}, "sdpa takes no arguments"},
		{"pattern", ok, []string{"--pattern", "ring:3"}, `pattern "ring:3", want local:W`},
		{"pattern number", ok, []string{"--pattern", "local:x"}, `"x" is not a whole number`},
		{"block", ok, []string{"--pattern", "local:2", "--block", "4"}, `--block is "4", want BQ,BK`},
		{"block alone", ok, []string{"--block", "4,4"}, "--block sizes the blocks of --pattern"},
		{"blocks file", ok, []string{"--pattern", "blocks:" + garbage}, "garbage.safetensors"},
		{"blocks missing", ok, []string{"--pattern", "blocks:" + ok}, "has no tensor blocks"},
		{"normalizer", ok, []string{"--normalizer", "entmax:0.5"}, `normalizer "entmax:0.5", want softmax`},
		{"normalizer without sinks", writeFile(t, with("sinks", f32(4))), []string{"--normalizer", "sparsemax"}, "takes no sinks"},
		{"blocks shape", ok, []string{"--pattern", "blocks:" + writeFile(t, map[string]safetensors.Tensor{"blocks": boolT(2, 2)}), "--block", "2,2"}, "blocks is [2 2], want [2 3] or [4 2 3]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"sdpa", "--out", out}
			if c.input != "" {
				args = append(args, "--input", c.input)
			}
			code, _, stderr := runCLI(append(args, c.flags...)...)
			if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 and one line with %q", code, stderr, c.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a failed call wrote %s", out)
			}
		})
	}
}

// TestSDPAOutput checks what `mha sdpa` says besides the file: a warning for non-finite inputs,
// a note on rows with nothing to attend, and that a special file is not replaced.
func TestSDPAOutput(t *testing.T) {
	q := tensor.New(1, 1, 2, 2)
	q.Data[0] = float32(math.Inf(1))
	pad := tensor.NewBool(1, 3)
	for j := range pad.Data {
		pad.Data[j] = true
	}
	in := writeFile(t, map[string]safetensors.Tensor{
		"q": safetensors.FromFloat32(q), "k": f32(1, 1, 3, 2), "v": f32(1, 1, 3, 2), "key_padding_mask": safetensors.FromBool(pad),
	})
	out := filepath.Join(t.TempDir(), "o.safetensors")
	code, _, stderr := runCLI("sdpa", "--input", in, "--out", out)
	if code != 0 || !strings.Contains(stderr, "warning") || !strings.Contains(stderr, "note: 2 (batch, head, query) rows had no key") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI("sdpa", "--input", in, "--out", os.DevNull); code != 1 || !strings.Contains(stderr, os.DevNull) {
		t.Errorf("--out %s: exit %d, stderr %q", os.DevNull, code, stderr)
	}
	// attn_bias: −Inf masks a pair, NaN makes its row NaN.
	bias := tensor.New(2, 3)
	bias.Data[0], bias.Data[4] = float32(math.Inf(-1)), float32(math.NaN())
	in = writeFile(t, map[string]safetensors.Tensor{"q": f32(1, 1, 2, 2), "k": f32(1, 1, 3, 2), "v": f32(1, 1, 3, 2), "attn_bias": safetensors.FromFloat32(bias)})
	code, _, stderr = runCLI("sdpa", "--input", in, "--out", out)
	if want := `tensor "attn_bias" [2 3]: 1 of 6 values is NaN or +Inf, the first NaN at index 4`; code != 0 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("attn_bias with NaN: exit %d, stderr %q; want one warning %q", code, stderr, want)
	}
	// Finite inputs whose scores overflow float32: NaN in the output, said once.
	big := tensor.New(1, 1, 2, 2)
	for i := range big.Data {
		big.Data[i] = 1e30
	}
	in = writeFile(t, map[string]safetensors.Tensor{"q": safetensors.FromFloat32(big), "k": safetensors.FromFloat32(big), "v": f32(1, 1, 2, 2)})
	code, _, stderr = runCLI("sdpa", "--input", in, "--out", out)
	if code != 0 || !strings.Contains(stderr, "every input is finite, but tensor \"out\"") || !strings.Contains(stderr, "the scores overflowed float32") {
		t.Errorf("overflowing scores: exit %d, stderr %q; want a warning", code, stderr)
	}
}

// FuzzSDPAInput runs `mha sdpa` on arbitrary input files: it must answer with exit 0 or with
// exit 1 and one line on stderr, never a panic.
func FuzzSDPAInput(f *testing.F) {
	paths, err := filepath.Glob("../../testdata/sdpa/*.safetensors")
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range paths {
		g, err := safetensors.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		in := map[string]safetensors.Tensor{}
		for _, name := range []string{"q", "k", "v", "sinks", "key_padding_mask", "attn_mask", "attn_bias", "grad_out"} {
			if g.Has(name) {
				in[name], _ = g.Raw(name)
			}
		}
		b, err := safetensors.Encode(in, nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(64))
	}
	f.Fuzz(func(t *testing.T, data []byte, flags uint8) {
		in := filepath.Join(t.TempDir(), "in.safetensors")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"sdpa", "--input", in, "--out", filepath.Join(t.TempDir(), "o"), "--causal", []string{"none", "top-left", "bottom-right", "none"}[flags%4]}
		if flags&4 != 0 {
			args = append(args, "--window", "2,0")
		}
		if flags&8 != 0 {
			args = append(args, "--rope-theta", "100")
		}
		if flags&16 != 0 {
			args = append(args, "--need-weights")
		}
		if flags&32 != 0 {
			args = append(args, "--alibi", "--softcap", "3")
		}
		if flags&64 != 0 {
			args = append(args, "--backward")
		}
		code, _, stderr := runCLI(args...)
		if code != 0 && (code != 1 || strings.Count(stderr, "\n") != 1) {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
}

// TestSDPAPattern checks mha sdpa --pattern (repeated, and blocks:FILE) against the same pairs
// given as attn_mask in the input file.
func TestSDPAPattern(t *testing.T) {
	const hq, tq, tk = 2, 9, 9
	rng := tensor.NewRNG(5)
	randn := func(shape ...int) safetensors.Tensor {
		x := tensor.New(shape...)
		rng.Normal(x, 1)
		return safetensors.FromFloat32(x)
	}
	q, k, v := randn(1, hq, tq, 4), randn(1, 1, tk, 4), randn(1, 1, tk, 4)
	blocks := tensor.NewBool(3, 3) // blocks of 3 × 3
	blocks.Data[2] = true          // queries 0–2, keys 6–8
	// local:1 ∪ strided:4 (|r| < 4 or r a multiple of 4) ∪ the marked block.
	keep := func(i, j int) bool {
		r := i - j
		return (r >= -1 && r <= 1) || (r > -4 && r < 4) || r%4 == 0 || (i < 3 && j >= 6)
	}
	mask := tensor.NewBool(tq, tk)
	for i := range tq {
		for j := range tk {
			mask.Data[i*tk+j] = !keep(i, j)
		}
	}
	blocksFile := writeFile(t, map[string]safetensors.Tensor{"blocks": safetensors.FromBool(blocks)})
	run := func(input map[string]safetensors.Tensor, flags ...string) *safetensors.File {
		out := filepath.Join(t.TempDir(), "o.safetensors")
		args := append([]string{"sdpa", "--input", writeFile(t, input), "--out", out, "--backward"}, flags...)
		if code, _, stderr := runCLI(args...); code != 0 {
			t.Fatalf("%v: exit %d, %s", flags, code, stderr)
		}
		f, err := safetensors.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	g := randn(1, hq, tq, 4)
	got := run(map[string]safetensors.Tensor{"q": q, "k": k, "v": v, "grad_out": g}, "--pattern", "local:1", "--pattern", "strided:4", "--pattern", "blocks:"+blocksFile, "--block", "3,3")
	want := run(map[string]safetensors.Tensor{"q": q, "k": k, "v": v, "grad_out": g, "attn_mask": safetensors.FromBool(mask)})
	for _, name := range []string{"out", "lse", "grad.q", "grad.k", "grad.v"} {
		a, _ := got.Float32(name)
		b, _, _ := want.Float64(name)
		if e := tensor.RelError(a.Data, b); e > 1e-6 {
			t.Errorf("%s: relative error %.3g against the mask", name, e)
		}
	}
}

// TestSDPANormalizer checks that mha sdpa --normalizer --need-weights writes the library's output
// and weights, with their exact zeros, and NaN as lse.
func TestSDPANormalizer(t *testing.T) {
	rng := tensor.NewRNG(6)
	x := func(shape ...int) *tensor.Tensor {
		y := tensor.New(shape...)
		rng.Normal(y, 2)
		return y
	}
	q, k, v := x(1, 2, 5, 4), x(1, 1, 6, 4), x(1, 1, 6, 3)
	input := writeFile(t, map[string]safetensors.Tensor{"q": safetensors.FromFloat32(q), "k": safetensors.FromFloat32(k), "v": safetensors.FromFloat32(v)})
	for _, name := range []string{"sparsemax", "entmax15", "entmax:1.8", "topk:2"} {
		out := filepath.Join(t.TempDir(), "o.safetensors")
		code, stdout, stderr := runCLI("sdpa", "--input", input, "--out", out, "--normalizer", name, "--causal", "bottom-right", "--need-weights")
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", name, code, stderr)
		}
		f, err := safetensors.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := mha.ParseNormalizer(name)
		want, err := mha.SDPA(q, k, v, &mha.SDPAOptions{Normalizer: n, Causal: mha.CausalBottomRight, NeedWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		for tname, w := range map[string]*tensor.Tensor{"out": want.Out, "weights": want.Weights} {
			got, err := f.Float32(tname)
			if err != nil || !slices.Equal(got.Data, w.Data) {
				t.Errorf("%s: %s differs from mha.SDPA's (%v)", name, tname, err)
			}
		}
		lse, _ := f.Float32("lse")
		if !math.IsNaN(float64(lse.Data[0])) {
			t.Errorf("%s: lse %v, want NaN", name, lse.Data[0])
		}
		zf, err := f.Float32("zero_fraction")
		if err != nil || len(zf.Data) != 2 {
			t.Fatalf("%s: zero_fraction %v (%v), want [2]", name, zf, err)
		}
		for h, z := range want.ZeroFraction {
			if zf.Data[h] != float32(z) || !strings.Contains(stdout, fmt.Sprintf("%d: %.1f%%", h, 100*z)) {
				t.Errorf("%s: head %d: zero_fraction %v and %q, want %v", name, h, zf.Data[h], stdout, z)
			}
		}
	}
}
