package lab

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/viz"
)

// sparseAnswer is the sparsity of /api/run's answer as a client decodes it.
type sparseAnswer struct {
	Tokens   []int           `json:"tokens"`
	Weights  [][][][]float32 `json:"weights"`
	Sparsity struct {
		Patterns   []string    `json:"patterns"`
		Block      [2]int      `json:"block"`
		Normalizer string      `json:"normalizer"`
		Blocks     [][]string  `json:"blocks"`
		Visible    []string    `json:"visible"`
		Local      []string    `json:"local_visible"`
		Zeros      [][]float64 `json:"zeros"`
	} `json:"sparsity"`
}

// parsed parses patterns and a normalizer as the CLI reads them, into what nn runs with.
func parsed(t *testing.T, block [2]int, normalizer string, patterns ...string) *nn.Sparsity {
	t.Helper()
	sp := &nn.Sparsity{Block: block}
	for _, s := range patterns {
		p, err := mha.ParsePattern(s)
		if err != nil {
			t.Fatal(err)
		}
		sp.Patterns = append(sp.Patterns, p)
	}
	if normalizer != "" {
		n, err := mha.ParseNormalizer(normalizer)
		if err != nil {
			t.Fatal(err)
		}
		sp.Normalizer = n
	}
	return sp
}

// checkSparse checks a run's answer against net run directly under sp: the same weights, the
// block map of mha.SparseLayouts, the visible pairs of its layout, the causal mask and the
// window, and, for a normalizer, each head's fraction of exact zeros among them counted in the
// weights.
func checkSparse(t *testing.T, got *sparseAnswer, net *nn.Model, sp *nn.Sparsity) {
	t.Helper()
	cfg := net.Config()
	T := len(got.Tokens)
	if _, err := net.Forward(got.Tokens, 1, T, &nn.RunOptions{KeepWeights: true, Sparsity: sp}); err != nil {
		t.Fatal(err)
	}
	var layout *attend.Sparse
	if len(sp.Patterns) > 0 {
		layouts, err := mha.SparseLayouts(sp.Patterns, sp.Block, cfg.Heads, T, T)
		if err != nil {
			t.Fatal(err)
		}
		layout = &layouts[0]
		nbq := len(layout.Kinds) / layout.NBK
		if len(got.Sparsity.Blocks) != nbq {
			t.Fatalf("%d block rows, want %d", len(got.Sparsity.Blocks), nbq)
		}
		for qb, row := range got.Sparsity.Blocks {
			for kb, k := range row {
				if want := kindNames[layout.Kinds[qb*layout.NBK+kb]]; k != want || len(row) != layout.NBK {
					t.Fatalf("block (%d, %d) of %d is %s, want %s", qb, kb, len(row), k, want)
				}
			}
		}
	} else if got.Sparsity.Blocks != nil {
		t.Fatalf("blocks %v without patterns", got.Sparsity.Blocks)
	}
	if len(got.Sparsity.Visible) != T {
		t.Fatalf("%d visible rows, want %d", len(got.Sparsity.Visible), T)
	}
	for l, layer := range got.Weights {
		w := net.Weights(l).Data
		window, visible := cfg.Window, got.Sparsity.Visible
		if cfg.Local != nil && cfg.Local.Layers[l] {
			window, visible = cfg.Local.Window, got.Sparsity.Local
		}
		if len(visible) != T {
			t.Fatalf("layer %d: %d visible rows, want %d", l, len(visible), T)
		}
		for h := range layer {
			zeros, seen := 0, 0
			for q := range T {
				for k := range T {
					a := w[(h*T+q)*T+k]
					if layer[h][q][k] != a {
						t.Fatalf("layer %d head %d (%d, %d): weight %v, the model's %v", l, h, q, k, layer[h][q][k], a)
					}
					vis := (layout == nil || layout.Keep(q, k)) && (cfg.Bidirectional || k <= q) && (window == 0 || q-k < window)
					if visible[q][k] != "01"[btoi(vis)] {
						t.Fatalf("layer %d: visible[%d][%d] is %c, want %v", l, q, k, visible[q][k], vis)
					}
					if !vis && a != 0 {
						t.Fatalf("layer %d head %d (%d, %d): weight %v on a pair it cannot see", l, h, q, k, a)
					}
					if vis {
						seen++
						zeros += btoi(a == 0)
					}
				}
			}
			if sp.Normalizer == nil {
				continue
			}
			if want := float64(zeros) / float64(seen); math.Abs(got.Sparsity.Zeros[l][h]-want) > 1e-12 {
				t.Errorf("layer %d head %d: zeros %v, want %d/%d", l, h, got.Sparsity.Zeros[l][h], zeros, seen)
			}
		}
	}
	if sp.Normalizer == nil && got.Sparsity.Zeros != nil {
		t.Errorf("zeros %v for softmax", got.Sparsity.Zeros)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRunSparse runs shipped models under patterns and normalizers and checks the answer
// against the model run directly.
func TestRunSparse(t *testing.T) {
	for _, c := range []struct {
		model, body string
		sp          *nn.Sparsity
	}{
		{"induction", `"patterns": ["local:2", "global:0"], "block": [4, 4], "normalizer": "sparsemax"`, parsed(t, [2]int{4, 4}, "sparsemax", "local:2", "global:0")},
		{"induction", `"patterns": ["bigbird:1,1,1,3"], "block": [3, 5]`, parsed(t, [2]int{3, 5}, "", "bigbird:1,1,1,3")},
		{"sort", `"normalizer": "entmax15"`, parsed(t, [2]int{64, 64}, "entmax15")},
		{"sort", `"patterns": ["strided:3"], "normalizer": "topk:2"`, parsed(t, [2]int{64, 64}, "topk:2", "strided:3")},
		{"sort", `"patterns": [], "normalizer": "softmax"`, parsed(t, [2]int{64, 64}, "")},
	} {
		status, body := call(t, "POST", "/api/run", fmt.Sprintf(`{"model": %q, "seed": 3, %s}`, c.model, c.body))
		var got sparseAnswer
		decodeOK(t, status, body, &got)
		net, _ := shipped(t, c.model)
		checkSparse(t, &got, net, c.sp)
		if c.sp.Normalizer != nil && !slices.ContainsFunc(got.Sparsity.Zeros, func(z []float64) bool { return slices.ContainsFunc(z, func(f float64) bool { return f > 0 }) }) {
			t.Errorf("%s %s: no exact zero at all", c.model, c.body)
		}
	}
}

// TestSparseCheckpoint opens checkpoints: one trained sparse, with a sliding window, whose
// patterns and normalizer are the default and a request replaces them, dense softmax included;
// a bidirectional one viewed under patterns; and one whose first block is Local (a window of 3,
// Gemma's sliding layers), its visible pairs and zero fractions per layer.
func TestSparseCheckpoint(t *testing.T) {
	cfg := nn.Config{Vocab: 10, SeqLen: 12, DModel: 8, Heads: 2, Layers: 2, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 3, Window: 5,
		Patterns: []string{"local:1", "global:0"}, Block: []int{4, 4}, Normalizer: "sparsemax"}
	bidi := nn.Config{Vocab: 10, SeqLen: 12, DModel: 8, Heads: 2, Layers: 1, Norm: nn.PostNorm, Positions: nn.Learned, Seed: 4, Bidirectional: true}
	// Gemma's sliding layers: the first block local, with a window of 3, the second global.
	local := nn.Config{Vocab: 10, SeqLen: 12, DModel: 8, Heads: 2, Layers: 2, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 5,
		Normalizer: "sparsemax", Local: &nn.Local{Layers: []bool{true, false}, Window: 3}}
	dir := t.TempDir()
	nets := map[string]*nn.Model{}
	for name, c := range map[string]nn.Config{"sparse": cfg, "bidi": bidi, "local": local} {
		net, err := nn.NewModel(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := nn.Save(filepath.Join(dir, name+".safetensors"), net, nil, nil); err != nil {
			t.Fatal(err)
		}
		nets[name] = net
	}
	s, err := New(Options{Workers: 1, Models: []string{filepath.Join(dir, "sparse.safetensors"), filepath.Join(dir, "bidi.safetensors"),
		filepath.Join(dir, "local.safetensors")}})
	if err != nil {
		t.Fatal(err)
	}
	tokens := `"tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]`
	for _, c := range []struct {
		model, body string
		patterns    []string
		block       [2]int
		normalizer  string
		sp          *nn.Sparsity
	}{
		{"sparse", "", cfg.Patterns, [2]int{4, 4}, "sparsemax", parsed(t, [2]int{4, 4}, "sparsemax", cfg.Patterns...)},
		{"sparse", `, "patterns": ["local:3"]`, []string{"local:3"}, [2]int{4, 4}, "sparsemax", parsed(t, [2]int{4, 4}, "sparsemax", "local:3")},
		{"sparse", `, "patterns": [], "normalizer": "softmax"`, []string{}, [2]int{4, 4}, "softmax", parsed(t, [2]int{4, 4}, "")},
		{"bidi", `, "patterns": ["local:1", "global:3"], "block": [3, 2], "normalizer": "entmax:1.5"`, []string{"local:1", "global:3"}, [2]int{3, 2}, "entmax:1.5",
			parsed(t, [2]int{3, 2}, "entmax15", "local:1", "global:3")},
		{"bidi", "", []string{}, [2]int{64, 64}, "softmax", parsed(t, [2]int{}, "")},
		{"local", "", []string{}, [2]int{64, 64}, "sparsemax", parsed(t, [2]int{}, "sparsemax")},
		{"local", `, "patterns": ["strided:2"], "block": [2, 2]`, []string{"strided:2"}, [2]int{2, 2}, "sparsemax", parsed(t, [2]int{2, 2}, "sparsemax", "strided:2")},
	} {
		status, body := serve(s, "POST", "/api/run", `{"model": "`+c.model+`", `+tokens+c.body+`}`)
		var got sparseAnswer
		decodeOK(t, status, body, &got)
		if !slices.Equal(got.Sparsity.Patterns, c.patterns) || got.Sparsity.Normalizer != c.normalizer || got.Sparsity.Block != c.block {
			t.Errorf("%s%s: patterns %q, block %v, normalizer %q; want %q, %v, %q", c.model, c.body, got.Sparsity.Patterns, got.Sparsity.Block, got.Sparsity.Normalizer, c.patterns, c.block, c.normalizer)
		}
		checkSparse(t, &got, nets[c.model], c.sp)
	}
}

// TestSparsePicture checks a head's picture under a pattern and a normalizer against viz's
// drawing of the model's own weights with the library's block map, the masked pairs the head
// cannot see and a mark on each visible weight that is exactly 0.
func TestSparsePicture(t *testing.T) {
	net, task := shipped(t, "induction")
	b, _ := task.Batch(5, 1)
	T, H := b.T, net.Config().Heads
	sp := parsed(t, [2]int{4, 8}, "entmax15", "local:2", "global:0")
	if _, err := net.Forward(b.Tokens, 1, T, &nn.RunOptions{KeepWeights: true, Sparsity: sp}); err != nil {
		t.Fatal(err)
	}
	layouts, err := mha.SparseLayouts(sp.Patterns, sp.Block, H, T, T)
	if err != nil {
		t.Fatal(err)
	}
	symbols := make([]string, T)
	for i, id := range b.Tokens {
		symbols[i] = task.Symbol(id)
	}
	w := net.Weights(1).Data[2*T*T:][:T*T]
	want := attention("", w, symbols, true)
	want.Blocks = &viz.BlockMap{Size: [2]int{4, 8}}
	for _, k := range layouts[0].Kinds {
		want.Blocks.Kinds = append(want.Blocks.Kinds, viz.BlockKind(k)) // the same order of kinds
	}
	want.Marks = make([]bool, T*T)
	zeros, seen := 0, 0
	for q := range T {
		for k := range T {
			if !layouts[0].Keep(q, k) || k > q {
				want.Values[q*T+k] = math.NaN()
				continue
			}
			seen++
			if w[q*T+k] == 0 {
				want.Marks[q*T+k] = true
				zeros++
			}
		}
	}
	want.Title = fmt.Sprintf("induction · layer 1, head 2 · local:2 global:0 in 4×8 blocks, entmax15 · %.0f%% of the visible weights exactly 0 (red dots)", 100*float64(zeros)/float64(seen))
	var buf bytes.Buffer
	if err := want.SVG(&buf); err != nil {
		t.Fatal(err)
	}
	status, body := call(t, "GET", "/api/picture?model=induction&seed=5&kind=head&layer=1&head=2&format=svg&patterns=local:2+global:0&block=4,8&normalizer=entmax15", "")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if !bytes.Equal(body, buf.Bytes()) {
		t.Fatalf("the picture differs from viz's drawing of the sparse weights")
	}
	status, body = call(t, "GET", "/api/picture?model=induction&seed=5&kind=grid&format=png&patterns=&normalizer=sparsemax", "")
	if status != http.StatusOK || !bytes.HasPrefix(body, []byte("\x89PNG")) {
		t.Fatalf("grid: status %d: %.200s", status, body)
	}
}

// TestSparseBadRequests checks that bad patterns, blocks and normalizers are 400s that say what
// was expected and what came.
func TestSparseBadRequests(t *testing.T) {
	run := `{"model": "induction", "seed": 1, %s}`
	many := `"patterns": [` + strings.Repeat(`"local:1", `, maxPatterns) + `"local:1"]`
	for _, c := range []struct{ path, body, msg string }{
		{"/api/run", `"patterns": ["ring:4"]`, `patterns[0]: mha: bad shape: pattern "ring:4", want local:W, dilated:W,D`},
		{"/api/run", `"patterns": ["local:1", "strided:0"]`, `patterns[1]: mha: bad shape: strided pattern of stride 0, want ≥ 1, in pattern "strided:0"`},
		{"/api/run", `"patterns": ["local:-1"]`, `"-1" is not a whole number ≥ 0`},
		{"/api/run", `"patterns": "local:1"`, `field "patterns" is a JSON string; want an array`},
		{"/api/run", `"patterns": ["global:` + strings.Repeat("1,", 150) + `1"]`, "patterns[0] is 308 characters long, want at most 200"},
		{"/api/run", many, "patterns: 9 of them, want at most 8"},
		{"/api/run", `"block": [0, 4]`, "block is [0 4], want [BQ, BK], two sizes from 1 to 1024"},
		{"/api/run", `"block": [4]`, "block is [4], want [BQ, BK]"},
		{"/api/run", `"block": [` + strings.Repeat("4, ", 999) + `4]`, "block is an array of 1000, want [BQ, BK]"},
		{"/api/run", `"normalizer": ""`, "normalizer is empty; want softmax, sparsemax"},
		{"/api/run", `"normalizer": "` + strings.Repeat("x", 300) + `"`, "normalizer is 300 characters long, want at most 200"},
		{"/api/run", `"block": [4, 2000]`, "block is [4 2000]"},
		{"/api/run", `"normalizer": "max"`, `normalizer: mha: bad shape: normalizer "max", want softmax, sparsemax, entmax15, entmax:ALPHA (α > 1) or topk:K (K ≥ 1)`},
		{"/api/run", `"normalizer": "entmax:1"`, `normalizer "entmax:1", want`},
		{"/api/ablate", `"ablate": [{"layer": 0, "head": 0, "mode": "zero"}], "normalizer": "topk:0"`, `normalizer "topk:0", want`},
	} {
		status, body := call(t, "POST", c.path, fmt.Sprintf(run, c.body))
		if status != http.StatusBadRequest || !strings.Contains(string(body), jsonText(c.msg)) {
			t.Errorf("%s %s: %d %s, want 400 containing %q", c.path, c.body, status, body, c.msg)
		}
	}
	for _, c := range []struct{ query, msg string }{
		{"patterns=local:1+ring:2", `patterns[1]: mha: bad shape: pattern "ring:2"`},
		{"block=4", `block "4"; want BQ,BK, two whole numbers such as 4,4`},
		{"block=4,x", `block "4,x"; want BQ,BK`},
		{"block=4,4,4", `block "4,4,4"; want BQ,BK`},
		{"block=0,4", "block is [0 4], want [BQ, BK]"},
		{"normalizer=softmax&normalizer=sparsemax", `parameter "normalizer" is given 2 times`},
	} {
		status, body := call(t, "GET", "/api/picture?model=induction&seed=1&kind=grid&format=png&"+c.query, "")
		if status != http.StatusBadRequest || !strings.Contains(string(body), jsonText(c.msg)) {
			t.Errorf("%s: %d %.200s, want 400 containing %q", c.query, status, body, c.msg)
		}
	}
	status, body := call(t, "GET", "/api/picture?model=induction&kind=importance&format=png&normalizer=sparsemax", "")
	if status != http.StatusBadRequest || !strings.Contains(string(body), `parameter \"normalizer\" does not apply to kind=importance`) {
		t.Errorf("normalizer on kind=importance: %d %s", status, body)
	}
}

// jsonText returns s as encoding/json writes it inside a string (<, >, & and " escaped).
func jsonText(s string) string {
	return strings.NewReplacer(`"`, `\"`, "<", `\u003c`, ">", `\u003e`, "&", `\u0026`).Replace(s)
}
