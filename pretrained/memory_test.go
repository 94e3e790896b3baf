package pretrained

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// llamaSize is the shape of a generated Llama.
type llamaSize struct {
	d, layers, heads, kv, ffn, vocab int
	tied                             bool
}

// The generated Llamas: about 125M parameters with an untied head, and Llama 3.2 1B's shape
// (1.24B parameters, tied).
var (
	llama125M = llamaSize{d: 768, layers: 12, heads: 12, kv: 4, ffn: 2048, vocab: 32000}
	llama1B   = llamaSize{d: 2048, layers: 16, heads: 32, kv: 8, ffn: 8192, vocab: 128256, tied: true}
)

// writeLlama writes a Llama folder of size s in bfloat16 to dir: config.json and
// model.safetensors, with small pseudo-random weights. It returns the file's size.
func writeLlama(t *testing.T, dir string, s llamaSize) int64 {
	t.Helper()
	d, layers, heads, kv, ffn, vocab := s.d, s.layers, s.heads, s.kv, s.ffn, s.vocab
	w := newFolderWriter(t, dir, map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": d,
		"intermediate_size": ffn, "num_attention_heads": heads, "num_key_value_heads": kv,
		"num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 2048,
		"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": s.tied, "hidden_act": "silu",
		"torch_dtype": "bfloat16",
	})
	w.add("model.embed_tokens.weight", false, vocab, d)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		w.add(p+"input_layernorm.weight", true, d)
		w.add(p+"post_attention_layernorm.weight", true, d)
		w.add(p+"self_attn.q_proj.weight", false, d, d)
		w.add(p+"self_attn.k_proj.weight", false, d/heads*kv, d)
		w.add(p+"self_attn.v_proj.weight", false, d/heads*kv, d)
		w.add(p+"self_attn.o_proj.weight", false, d, d)
		w.add(p+"mlp.gate_proj.weight", false, ffn, d)
		w.add(p+"mlp.up_proj.weight", false, ffn, d)
		w.add(p+"mlp.down_proj.weight", false, d, ffn)
	}
	w.add("model.norm.weight", true, d)
	if !s.tied {
		w.add("lm_head.weight", false, vocab, d)
	}
	return w.write()
}

// writeGPT2 writes GPT-2 small's shape (124M parameters, the head tied to wte) in bfloat16 to
// dir, laid out as the openai-community/gpt2 folder: names without a prefix, Conv1D weights
// [in, out], the attention's causal-mask buffers left out. It returns the file's size.
func writeGPT2(t *testing.T, dir string) int64 {
	t.Helper()
	const d, layers, heads, positions, vocab = 768, 12, 12, 1024, 50257
	w := newFolderWriter(t, dir, map[string]any{
		"architectures": []string{"GPT2LMHeadModel"}, "model_type": "gpt2", "n_embd": d,
		"n_head": heads, "n_layer": layers, "n_positions": positions, "n_ctx": positions,
		"vocab_size": vocab, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
		"tie_word_embeddings": true, "torch_dtype": "bfloat16",
	})
	w.add("wte.weight", false, vocab, d)
	w.add("wpe.weight", false, positions, d)
	for l := range layers {
		p := fmt.Sprintf("h.%d.", l)
		for _, ln := range []string{"ln_1.", "ln_2."} {
			w.add(p+ln+"weight", true, d)
			w.add(p+ln+"bias", false, d)
		}
		for _, c := range []struct {
			name    string
			in, out int
		}{{"attn.c_attn.", d, 3 * d}, {"attn.c_proj.", d, d}, {"mlp.c_fc.", d, 4 * d}, {"mlp.c_proj.", 4 * d, d}} {
			w.add(p+c.name+"weight", false, c.in, c.out)
			w.add(p+c.name+"bias", false, c.out)
		}
	}
	w.add("ln_f.weight", true, d)
	w.add("ln_f.bias", false, d)
	return w.write()
}

// folderWriter collects a generated folder's bfloat16 tensors and writes them with its
// config.json.
type folderWriter struct {
	t       *testing.T
	dir     string
	state   uint64
	tensors map[string]safetensors.Tensor
}

// newFolderWriter writes cfg to dir/config.json.
func newFolderWriter(t *testing.T, dir string, cfg map[string]any) *folderWriter {
	t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return &folderWriter{t: t, dir: dir, state: 1, tensors: map[string]safetensors.Tensor{}}
}

// add adds a tensor of the shape: ones, or pseudo-random values of magnitude in [2⁻⁷, 2⁻⁶).
func (w *folderWriter) add(name string, ones bool, shape ...int) {
	n, _ := tensor.NumElements(shape)
	h := &tensor.Half{Shape: shape, Data: make([]uint16, n), Format: tensor.BFloat16}
	for i := range h.Data {
		if ones {
			h.Data[i] = 0x3f80 // 1
			continue
		}
		w.state = w.state*6364136223846793005 + 1442695040888963407
		h.Data[i] = uint16(w.state>>48)&0x807f | 0x3c00 // ±[2⁻⁷, 2⁻⁶)
	}
	w.tensors[name] = safetensors.FromHalf(h)
}

// write writes model.safetensors and returns its size.
func (w *folderWriter) write() int64 {
	w.t.Helper()
	path := filepath.Join(w.dir, "model.safetensors")
	if err := safetensors.WriteFile(path, w.tensors, nil); err != nil {
		w.t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		w.t.Fatal(err)
	}
	return info.Size()
}

// residentKiB returns VmHWM (the peak resident memory) and VmRSS from /proc/self/status, in KiB.
func residentKiB() (peak, now int64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && (fields[0] == "VmHWM:" || fields[0] == "VmRSS:") {
			v, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, 0, err
			}
			if fields[0] == "VmHWM:" {
				peak = v
			} else {
				now = v
			}
		}
	}
	return peak, now, sc.Err()
}

// memoryDirEnv names, in the child process of TestOpenMemory, the folder to open, and
// memoryFloat32Env, when set, has it opened with Options.Float32.
const (
	memoryDirEnv     = "MHA_TEST_OPEN_MEMORY_DIR"
	memoryFloat32Env = "MHA_TEST_OPEN_MEMORY_FLOAT32"
)

// TestOpenMemory opens generated bfloat16 models of about 125M parameters (250 MB: a Llama, and
// GPT-2 small, whose Conv1D weights are transposed as they load) in a child process each and
// checks its resident memory: the peak must stay well below the file plus a float32 model (what
// reading the whole file and converting would take), near the file's size, which is the model's.
// GPT-2 is opened in float32 too (Options.Float32), whose peak must stay near the float32
// model's size, not twice it. MHA_TEST_GPT2=1 runs GPT-2 alone, MHA_TEST_LLAMA_1B=1 Llama 3.2 1B's shape alone (a 2.5 GB
// file; writing it takes about 7 GB). MHA_KEEP_MODEL_DIR writes the first model's folder there
// and keeps it (for mha bench --model). Skipped with -short.
func TestOpenMemory(t *testing.T) {
	if dir := os.Getenv(memoryDirEnv); dir != "" {
		base, _, err := residentKiB()
		if err != nil {
			t.Fatal(err)
		}
		m, err := Options{Float32: os.Getenv(memoryFloat32Env) != ""}.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		peak, now, err := residentKiB()
		if err != nil {
			t.Fatal(err)
		}
		debug.FreeOSMemory() // the garbage of building the model (its attention layers' initial float32 weights)
		_, gc, err := residentKiB()
		if err != nil {
			t.Fatal(err)
		}
		hb, fb := m.NN.ParamBytes()
		fmt.Printf("memory: base %d peak %d rss %d gc %d KiB, weights %d half %d float bytes\n", base, peak, now, gc, hb, fb)
		return
	}
	if testing.Short() {
		t.Skip("writes and opens a 250 MB model")
	}
	if raceDetector {
		t.Skip("the race detector's shadow memory inflates the resident memory this test measures")
	}
	if _, _, err := residentKiB(); err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	shapes := []struct {
		name    string
		write   func(t *testing.T, dir string) int64
		float32 bool // open with Options.Float32
	}{
		{"llama-125M", func(t *testing.T, dir string) int64 { return writeLlama(t, dir, llama125M) }, false},
		{"gpt2-small", writeGPT2, false},
		{"gpt2-small-float32", writeGPT2, true},
	}
	switch {
	case os.Getenv("MHA_TEST_LLAMA_1B") != "":
		shapes = shapes[:1]
		shapes[0].name, shapes[0].write = "llama-1B", func(t *testing.T, dir string) int64 { return writeLlama(t, dir, llama1B) }
	case os.Getenv("MHA_TEST_GPT2") != "":
		shapes = shapes[1:]
	}
	keep := os.Getenv("MHA_KEEP_MODEL_DIR")
	if keep != "" {
		shapes = shapes[:1]
	}
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			dir := keep
			if dir == "" {
				dir = t.TempDir()
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			checkOpenMemory(t, dir, s.write(t, dir), s.float32)
		})
	}
}

// checkOpenMemory opens the folder dir, whose bfloat16 weights file has size bytes, in a child
// process, in float32 if asked, and checks the resident memory it reports.
func checkOpenMemory(t *testing.T, dir string, size int64, float32 bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenMemory$", "-test.count=1")
	cmd.Env = append(os.Environ(), memoryDirEnv+"="+dir)
	if float32 {
		cmd.Env = append(cmd.Env, memoryFloat32Env+"=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var base, peak, now, gc, hb, fb int64
	i := strings.Index(string(out), "memory:")
	if i < 0 {
		t.Fatalf("child printed no memory line:\n%s", out)
	}
	if _, err := fmt.Sscanf(string(out[i:]), "memory: base %d peak %d rss %d gc %d KiB, weights %d half %d float bytes", &base, &peak, &now, &gc, &hb, &fb); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	mib := func(kib int64) float64 { return float64(kib) / 1024 }
	t.Logf("file %.0f MiB; model %.0f MiB half + %.1f MiB float32; resident before Open %.0f MiB, peak %.0f MiB, after %.0f MiB, after a GC %.0f MiB",
		float64(size)/(1<<20), float64(hb)/(1<<20), float64(fb)/(1<<20), mib(base), mib(peak), mib(now), mib(gc))
	held, what := hb, "half precision"
	if float32 {
		held, what, size = fb, "float32", 2*size // the float32 model's size
	}
	if held < size*9/10 {
		t.Errorf("%d bytes held in %s, want about %d", held, what, size)
	}
	if limit := base + size*3/2/1024; peak > limit {
		t.Errorf("peak resident memory %.0f MiB, want at most 1.5 × the %s model (%.0f MiB) over the %.0f MiB before Open", mib(peak), what, float64(size)/(1<<20), mib(base))
	}
}
