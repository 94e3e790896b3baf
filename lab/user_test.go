package lab

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/train"
)

// tinyFolder is the path of one of the tiny Hugging Face folders of testdata/pretrained.
func tinyFolder(name string) string { return filepath.Join("..", "testdata", "pretrained", name) }

// userServer returns a Server with the tiny GPT-2, Llama and BERT folders added, shared by the
// tests of this file.
var userServer = sync.OnceValues(func() (*Server, error) {
	return New(Options{Workers: 2, Models: []string{tinyFolder("gpt2"), tinyFolder("llama"), tinyFolder("bert")}})
})

// callUser sends a request to the shared server with the user's models.
func callUser(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	s, err := userServer()
	if err != nil {
		t.Fatal(err)
	}
	return serve(s, method, path, body)
}

// userAnswer is /api/run's answer for a user's model, as a client decodes it.
type userAnswer struct {
	Model       string           `json:"model"`
	Tokens      []int            `json:"tokens"`
	Symbols     []string         `json:"symbols"`
	Pieces      []string         `json:"pieces"`
	Offsets     [][2]int         `json:"offsets"`
	Causal      bool             `json:"causal"`
	Predicts    string           `json:"predicts"`
	Weights     [][][][]float32  `json:"weights"`
	Rollout     [][]float32      `json:"rollout"`
	Predictions []userPrediction `json:"predictions"`
	Score       *struct {
		Loss, Accuracy float64
		Scored         int
	} `json:"score"`
	Measures struct {
		About string `json:"about"`
		Heads []struct {
			Layer, Head    int
			PrevToken      float64   `json:"prev_token"`
			FirstToken     *float64  `json:"first_token"`
			DuplicateToken *float64  `json:"duplicate_token"`
			PrefixMatching *float64  `json:"prefix_matching"`
			Importance     *float64  `json:"importance"`
			GroundTruth    *float64  `json:"ground_truth"`
			Offsets        []float64 `json:"offsets"`
		} `json:"heads"`
	} `json:"measures"`
}

// userPrediction is one position's prediction as a client decodes it.
type userPrediction struct {
	Top []struct {
		Token  int     `json:"token"`
		Symbol string  `json:"symbol"`
		Piece  string  `json:"piece"`
		P      float64 `json:"p"`
	} `json:"top"`
	Masked bool `json:"masked"`
	Target *struct {
		Token int `json:"token"`
	} `json:"target"`
	Correct *bool `json:"correct"`
}

func TestUserModels(t *testing.T) {
	var got []modelInfo
	status, body := callUser(t, "GET", "/api/models", "")
	decodeOK(t, status, body, &got)
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
	}
	if want := append(models.Names(), "gpt2", "llama", "bert"); !slices.Equal(names, want) {
		t.Fatalf("models %v, want %v", names, want)
	}
	for _, c := range []struct {
		name, arch, family, predicts string
		causal                       bool
	}{
		{"gpt2", "GPT2LMHeadModel", "gpt2", "next", true},
		{"llama", "LlamaForCausalLM", "llama", "next", true},
		{"bert", "BertForMaskedLM", "bert", "masked", false},
	} {
		info := got[slices.Index(names, c.name)]
		pm, err := pretrained.Open(tinyFolder(c.name))
		if err != nil {
			t.Fatal(err)
		}
		cfg := pm.NN.Config()
		if !info.User || info.Task || info.Symbols != nil || !info.Tokenizer || info.Architecture != c.arch || info.Family != c.family ||
			info.Causal != c.causal || info.Predicts != c.predicts || info.Layers != cfg.Layers || info.Heads != cfg.Heads ||
			info.Vocab != cfg.Vocab || info.SeqLen != cfg.SeqLen || info.MaxTokens != min(cfg.SeqLen, MaxUserTokens) || info.Params != pm.NN.NumParams() {
			t.Errorf("%s: %+v, want %+v with config %+v", c.name, info, c, cfg)
		}
	}
	if info := got[0]; info.User || !info.Task || !info.Causal || info.Predicts != "next" {
		t.Errorf("shipped %s: %+v, want a causal model with a task", info.Name, info)
	}
}

// TestUserRun runs text on each tiny folder and checks the answer against the tokenizer and a
// fresh copy of the model run directly: tokens, offsets, weights, predictions, score, rollout
// and the metrics that need no task, the latter against float64 sums written out here.
func TestUserRun(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"gpt2", "The cat sat on"},
		{"llama", "the cat sat on the mat, the cat sat"},
		{"bert", "the cat [MASK] on the mat."},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"model": c.name, "text": c.text})
			var got userAnswer
			status, raw := callUser(t, "POST", "/api/run", string(body))
			decodeOK(t, status, raw, &got)

			pm, err := pretrained.Open(tinyFolder(c.name))
			if err != nil {
				t.Fatal(err)
			}
			enc, err := pm.Tokenizer.Encode(c.text, true)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Tokens, enc.IDs) || !slices.Equal(got.Symbols, enc.Tokens) || !slices.Equal(got.Offsets, enc.Offsets) {
				t.Fatalf("tokens %v %q %v, want the tokenizer's %v %q %v", got.Tokens, got.Symbols, got.Offsets, enc.IDs, enc.Tokens, enc.Offsets)
			}
			for i, p := range got.Pieces {
				if o := enc.Offsets[i]; o[1] > o[0] && !strings.Contains(p, strings.TrimSpace(c.text[o[0]:o[1]])) {
					t.Errorf("piece %d %q does not read as the text it covers, %q", i, p, c.text[o[0]:o[1]])
				}
			}
			cfg := pm.NN.Config()
			T := len(enc.IDs)
			logits, err := pm.NN.Forward(enc.IDs, 1, T, &nn.RunOptions{KeepWeights: true})
			if err != nil {
				t.Fatal(err)
			}
			if got.Causal == cfg.Bidirectional {
				t.Fatalf("causal %v for a model with Bidirectional %v", got.Causal, cfg.Bidirectional)
			}
			var layers []*tensor.Tensor
			for l := range cfg.Layers {
				w := pm.NN.Weights(l)
				layers = append(layers, w.Clone())
				for h := range cfg.Heads {
					for q := range T {
						sum := 0.0
						for k := range T {
							a := got.Weights[l][h][q][k]
							if a != w.Data[(h*T+q)*T+k] {
								t.Fatalf("weight L%d H%d (%d, %d) = %v, want %v", l, h, q, k, a, w.Data[(h*T+q)*T+k])
							}
							if got.Causal && k > q && a != 0 {
								t.Fatalf("L%d H%d: query %d attends to the later key %d", l, h, q, k)
							}
							sum += float64(a)
						}
						if math.Abs(sum-1) > 1e-5 {
							t.Fatalf("L%d H%d row %d sums to %v, want 1", l, h, q, sum)
						}
					}
				}
			}
			checkPredictions(t, &got, logits.Data, cfg.Vocab, enc.IDs, pm)
			checkTextMetrics(t, &got, layers, enc.IDs, cfg.Heads)
		})
	}
}

// checkPredictions checks that each position's first guess is the model's own argmax, the
// targets are the next tokens (causal) or the masks are marked (BERT), and the score is nn's loss.
func checkPredictions(t *testing.T, got *userAnswer, logits []float32, v int, ids []int, pm *pretrained.Model) {
	t.Helper()
	T := len(ids)
	if len(got.Predictions) != T {
		t.Fatalf("%d predictions for %d tokens", len(got.Predictions), T)
	}
	mask, _ := pm.Tokenizer.TokenToID("[MASK]")
	for pos, p := range got.Predictions {
		row := logits[pos*v : (pos+1)*v]
		piece, _ := pm.Tokenizer.IDToToken(argmax(row))
		if best := argmax(row); p.Top[0].Token != best || p.Top[0].Symbol != piece {
			t.Fatalf("position %d: first guess %+v, want the argmax %d", pos, p.Top[0], best)
		}
		if p.Top[0].P < p.Top[1].P || p.Top[1].P < p.Top[2].P {
			t.Fatalf("position %d: guesses %+v not in order", pos, p.Top)
		}
		if got.Predicts == "masked" {
			if p.Masked != (ids[pos] == mask) || p.Target != nil {
				t.Fatalf("position %d: masked %v target %v, want masked only at [MASK] and no target", pos, p.Masked, p.Target)
			}
			continue
		}
		if last := pos == T-1; last != (p.Target == nil) || (!last && p.Target.Token != ids[pos+1]) || (!last && *p.Correct != (p.Top[0].Token == ids[pos+1])) {
			t.Fatalf("position %d: target %+v, want the next token", pos, p.Target)
		}
	}
	if got.Predicts == "masked" {
		if got.Score != nil || !slices.ContainsFunc(got.Predictions, func(p userPrediction) bool { return p.Masked }) {
			t.Fatalf("masked LM: score %+v, want none, and a masked position", got.Score)
		}
		return
	}
	next := nextTokens(ids)
	loss, correct, counted, err := pm.NN.Loss(next.Targets, next.Scored)
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Score; s == nil || math.Abs(s.Loss-loss) > 1e-6*max(1, loss) || s.Accuracy != float64(correct)/float64(counted) || s.Scored != T-1 {
		t.Fatalf("score %+v, want loss %v accuracy %d/%d", s, loss, correct, counted)
	}
}

// checkTextMetrics checks the metrics that need no task against float64 sums over the weights,
// and the importance against probe.ImportanceOn on the next-token loss.
func checkTextMetrics(t *testing.T, got *userAnswer, layers []*tensor.Tensor, ids []int, H int) {
	t.Helper()
	T := len(ids)
	near := func(what string, a, b float64) {
		t.Helper()
		if math.Abs(a-b) > 1e-9 {
			t.Fatalf("%s: %v, want %v", what, a, b)
		}
	}
	for l, w := range layers {
		for h := range H {
			m := got.Measures.Heads[l*H+h]
			a := func(q, k int) float64 { return float64(w.Data[(h*T+q)*T+k]) }
			first := 0.0
			for q := 1; q < T; q++ {
				first += a(q, 0)
			}
			near("first token", *m.FirstToken, first/float64(T-1))
			dup, n := 0.0, 0
			for q := range T {
				found := false
				for k := range q {
					if ids[k] == ids[q] {
						dup += a(q, k)
						found = true
					}
				}
				if found {
					n++
				}
			}
			if n == 0 {
				if m.DuplicateToken != nil {
					t.Fatalf("L%d H%d: duplicate-token %v with no repeated token", l, h, *m.DuplicateToken)
				}
			} else {
				near("duplicate token", *m.DuplicateToken, dup/float64(n))
			}
			for d := -(T - 1); d < T; d++ {
				sum, cnt := 0.0, 0
				for q := range T {
					if k := q + d; k >= 0 && k < T {
						sum += a(q, k)
						cnt++
					}
				}
				near("offset", m.Offsets[d+T-1], sum/float64(cnt))
			}
			near("prev token via offsets", m.PrevToken, m.Offsets[T-2])
		}
	}
	// Rollout: A' = 0.5·mean_h A + 0.5·I, rows renormalised, multiplied from the first layer up.
	r := identity(T)
	for _, w := range layers {
		a := make([][]float64, T)
		for q := range T {
			a[q] = make([]float64, T)
			for k := range T {
				for h := range H {
					a[q][k] += 0.5 * float64(w.Data[(h*T+q)*T+k]) / float64(H)
				}
			}
			a[q][q] += 0.5
			sum := 0.0
			for _, x := range a[q] {
				sum += x
			}
			for k := range a[q] {
				a[q][k] /= sum
			}
		}
		r = matmul(a, r)
	}
	for q := range T {
		for k := range T {
			if math.Abs(float64(got.Rollout[q][k])-r[q][k]) > 1e-6 {
				t.Fatalf("rollout (%d, %d) = %v, want %v", q, k, got.Rollout[q][k], r[q][k])
			}
		}
	}
	for _, m := range got.Measures.Heads {
		if m.GroundTruth != nil || (got.Predicts == "next") != (m.Importance != nil) {
			t.Fatalf("L%d H%d: ground truth %v importance %v; want no ground truth, and importance for a causal LM only", m.Layer, m.Head, m.GroundTruth, m.Importance)
		}
	}
}

func identity(n int) [][]float64 {
	m := make([][]float64, n)
	for i := range m {
		m[i] = make([]float64, n)
		m[i][i] = 1
	}
	return m
}

func matmul(a, b [][]float64) [][]float64 {
	out := make([][]float64, len(a))
	for i := range a {
		out[i] = make([]float64, len(b[0]))
		for k, x := range a[i] {
			for j, y := range b[k] {
				out[i][j] += x * y
			}
		}
	}
	return out
}

// TestUserImportance checks the importance /api/run reports on a causal LM's text against
// probe.ImportanceOn on a fresh copy of the model, with the next tokens as targets.
func TestUserImportance(t *testing.T) {
	var got userAnswer
	status, raw := callUser(t, "POST", "/api/run", `{"model": "llama", "text": "the cat sat on the mat"}`)
	decodeOK(t, status, raw, &got)
	pm, err := pretrained.Open(tinyFolder("llama"))
	if err != nil {
		t.Fatal(err)
	}
	next := nextTokens(got.Tokens)
	imp, err := probe.ImportanceOn(pm.NN, next.Tokens, next.Targets, next.Scored, 1, next.T, 1)
	if err != nil {
		t.Fatal(err)
	}
	H := pm.NN.Config().Heads
	for _, m := range got.Measures.Heads {
		if math.Abs(*m.Importance-imp[m.Layer][m.Head]) > 1e-6 {
			t.Errorf("L%d H%d: importance %v, want %v", m.Layer, m.Head, *m.Importance, imp[m.Layer][m.Head])
		}
	}
	for l := range imp {
		sq := 0.0
		for h := range H {
			sq += imp[l][h] * imp[l][h]
		}
		if math.Abs(sq-1) > 1e-9 {
			t.Errorf("layer %d: squares sum to %v, want 1", l, sq)
		}
	}
}

// TestUserHeads checks /api/heads on a model without a task: the metrics on repeated random
// tokens, with the induction (prefix-matching) and duplicate-token scores, no pruning.
func TestUserHeads(t *testing.T) {
	status, raw := callUser(t, "POST", "/api/heads", `{"model": "gpt2"}`)
	var got struct {
		Sequences int              `json:"sequences"`
		About     string           `json:"about"`
		Heads     []map[string]any `json:"heads"`
		Pruning   []any            `json:"pruning"`
	}
	decodeOK(t, status, raw, &got)
	pm, err := pretrained.Open(tinyFolder("gpt2"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := pm.NN.Config()
	n := min(cfg.SeqLen/2, repeatLen)
	tokens, err := probe.DistinctRepeatedTokens(taskSeed, repeatBatch, n, cfg.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pm.NN.Forward(tokens, repeatBatch, 2*n, &nn.RunOptions{KeepWeights: true}); err != nil {
		t.Fatal(err)
	}
	if got.Sequences != repeatBatch || got.Pruning != nil || !strings.Contains(got.About, "repeated once") {
		t.Fatalf("%d sequences, pruning %v, about %q", got.Sequences, got.Pruning, got.About)
	}
	for l := range cfg.Layers {
		w := pm.NN.Weights(l).Data
		prefix, _, _ := probe.PrefixMatching(w, tokens, repeatBatch, cfg.Heads, 2*n)
		dup, _, _ := probe.DuplicateToken(w, tokens, repeatBatch, cfg.Heads, 2*n)
		for h := range cfg.Heads {
			m := got.Heads[l*cfg.Heads+h]
			if m["prefix_matching"] != prefix[h] || m["duplicate_token"] != dup[h] || m["importance"] != nil {
				t.Errorf("L%d H%d: %v, want prefix-matching %v, duplicate %v, no importance", l, h, m, prefix[h], dup[h])
			}
		}
	}
}

// TestUserAblate ablates a head of GPT-2 on a text: the predictions compared, the next-token
// loss before and after, no task.
func TestUserAblate(t *testing.T) {
	status, raw := callUser(t, "POST", "/api/ablate", `{"model": "gpt2", "text": "The cat sat", "ablate": [{"layer": 1, "head": 0, "mode": "zero"}]}`)
	var got struct {
		Pieces    []string         `json:"pieces"`
		Positions []map[string]any `json:"positions"`
		Sequence  *struct {
			Before, After struct{ Loss float64 }
		} `json:"sequence"`
		Task *struct{} `json:"task"`
	}
	decodeOK(t, status, raw, &got)
	if got.Task != nil || got.Sequence == nil || got.Sequence.Before.Loss == got.Sequence.After.Loss || len(got.Positions) != len(got.Pieces) {
		t.Fatalf("%s", raw)
	}
	// The loss after is the model's own with the head's gate at 0.
	pm, err := pretrained.Open(tinyFolder("gpt2"))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := pm.Tokenizer.Encode("The cat sat", true)
	c, err := probe.Record(pm.NN, enc.IDs, 1, len(enc.IDs), &probe.RecordOptions{Ablate: []probe.Ablation{{Layer: 1, Head: 0, Mode: probe.AblateZero}}})
	if err != nil {
		t.Fatal(err)
	}
	next := nextTokens(enc.IDs)
	if s := scoreOf(c.Logits.Data, pm.NN.Config().Vocab, next); math.Abs(float64(s.Loss)-got.Sequence.After.Loss) > 1e-9 {
		t.Fatalf("loss after %v, want %v", got.Sequence.After.Loss, s.Loss)
	}
}

// TestUserPictures draws the pictures of a sequence of a user's model, and refuses those that
// need a task.
func TestUserPictures(t *testing.T) {
	for _, q := range []string{
		"model=gpt2&text=The+cat&kind=head&layer=1&head=2",
		"model=bert&text=the+cat+%5BMASK%5D&kind=grid",
		"model=llama&kind=similarity&layer=0&metric=js&scope=task",
		"model=llama&text=the+cat+sat&kind=similarity&layer=0&metric=js&scope=task",
		"model=gpt2&text=The+cat&kind=rollout",
		"model=bert&text=the+cat&kind=offsets&layer=0&head=1",
		"model=induction&seed=2&kind=rollout",
	} {
		for _, format := range []string{"png", "svg"} {
			status, body := callUser(t, "GET", "/api/picture?"+q+"&format="+format, "")
			if status != 200 {
				t.Fatalf("%s: %d %s", q, status, body)
			}
			if format == "png" {
				if _, err := png.Decode(bytes.NewReader(body)); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			} else if !bytes.Contains(body, []byte("<svg")) {
				t.Fatalf("%s: not an SVG", q)
			}
		}
	}
}

// TestUserErrors sends what a model without a task cannot take, and text it cannot read.
func TestUserErrors(t *testing.T) {
	long := strings.Repeat("cat ", 20)
	for _, c := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"POST", "/api/run", `{"model": "gpt2", "seed": 1}`, 400, "model gpt2 has no task, so no seed sequences; give text or tokens (ids) instead"},
		{"POST", "/api/ablate", `{"model": "llama", "seed": 1, "ablate": [{"layer": 0, "head": 0, "mode": "zero"}]}`, 400, "has no task, so no seed"},
		{"POST", "/api/run", `{"model": "gpt2", "text": "` + long + `"}`, 400, "the sequence has 80 tokens, want 1 to 16 (the seq_len of gpt2)"},
		{"POST", "/api/run", `{"model": "bert", "text": "  "}`, 400, "text is empty; want some words for bert"},
		{"POST", "/api/run", `{"model": "bert", "text": ""}`, 400, "text is empty; want some words for bert"},
		{"POST", "/api/run", `{"model": "bert", "text": "\u0001"}`, 400, `text "\x01" has no tokens of its own for bert (only the special ones)`},
		{"POST", "/api/run", `{"model": "gpt2", "tokens": [1, 265]}`, 400, "id 265 at position 1 is outside the vocabulary of gpt2, want 0 to 264"},
		{"GET", "/api/picture?model=gpt2&kind=pruning&format=png", ``, 400, "model gpt2 has no task; kind=pruning is measured on the task's sequences"},
		{"GET", "/api/picture?model=gpt2&kind=importance&format=svg", ``, 400, "model gpt2 has no task; kind=importance"},
		{"GET", "/api/picture?model=gpt2&seed=1&kind=grid&format=svg", ``, 400, "model gpt2 has no task, so no seed sequences"},
		{"POST", "/api/run", `{"model": "gpt3", "text": "hi"}`, 400, "unknown model \"gpt3\"; want one of brackets, induction, modadd, prev-token, sort, gpt2, llama, bert"},
	} {
		status, body := callUser(t, c.method, c.path, c.body)
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || status != c.status || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s %s %.80s: %d %s, want %d and an error containing %q", c.method, c.path, c.body, status, body, c.status, c.msg)
		}
	}
}

// TestUserTokenOutsideVocabulary adds a token to a copy of the GPT-2 folder's tokenizer with an
// id the model does not have: text holding it gets a 400 that names it.
func TestUserTokenOutsideVocabulary(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(tinyFolder("gpt2"), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(tinyFolder("gpt2"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tok map[string]any
	if err := json.Unmarshal(data, &tok); err != nil {
		t.Fatal(err)
	}
	tok["added_tokens"] = append(tok["added_tokens"].([]any), map[string]any{
		"id": 300, "content": "<|extra|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true,
	})
	data, _ = json.Marshal(tok)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Workers: 1, Models: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	name := s.Added()[0]
	status, body := serve(s, "POST", "/api/run", `{"model": "`+name+`", "text": "a <|extra|> b"}`)
	var e struct{ Error string }
	// The Rust library (and package tokenizer) give an added token outside the vocabulary the
	// next id after it, whatever id the file writes.
	want := `text: the tokenizer gives token "<|extra|>" (id 265) at position 2, outside the vocabulary of ` + name + ` (ids 0 to 264)`
	if err := json.Unmarshal(body, &e); err != nil || status != 400 || e.Error != want {
		t.Fatalf("%d %s, want 400 and %s", status, body, want)
	}
}

// TestUserCheckpoints adds checkpoints of mha train: one that records its task behaves as a
// shipped model (seeds, symbols, task scores); one that records none takes token ids only.
func TestUserCheckpoints(t *testing.T) {
	dir := t.TempDir()
	task, err := tasks.New("prev-token", tasks.Config{SeqLen: 8, Vocab: 10})
	if err != nil {
		t.Fatal(err)
	}
	net, err := nn.NewModel(nn.Config{Vocab: task.Vocab(), SeqLen: 8, DModel: 8, Heads: 2, Layers: 1, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	recipe, _ := json.Marshal(train.Recipe{Task: "prev-token", TaskConfig: tasks.Config{SeqLen: 8, Vocab: 10}})
	withTask, bare := filepath.Join(dir, "prev.ckpt"), filepath.Join(dir, "bare.safetensors")
	if err := nn.Save(withTask, net, map[string]string{train.MetaKey: string(recipe), "command": "mha train …"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := nn.Save(bare, net, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{Workers: 1, Models: []string{withTask, bare, tinyFolder("gpt2"), filepath.Join(dir, "gpt2")}})
	if err == nil {
		t.Fatal("a missing path: no error")
	} else if !strings.Contains(err.Error(), "--model "+filepath.Join(dir, "gpt2")+": expected a Hugging Face model folder or a checkpoint of mha train") {
		t.Fatalf("error %q, want it to name the path and what was expected", err)
	}
	s, err := New(Options{Workers: 1, Models: []string{withTask, bare, tinyFolder("gpt2"), tinyFolder("gpt2")}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Added(), []string{"prev", "bare", "gpt2", "gpt2-2"}) {
		t.Fatalf("names %v", s.Added())
	}
	status, body := serve(s, "POST", "/api/run", `{"model": "prev", "seed": 4}`)
	var run runAnswer
	decodeOK(t, status, body, &run)
	b, _ := task.Batch(4, 1)
	if !slices.Equal(run.Tokens, b.Tokens) || run.Score == nil || run.Symbols[0] != task.Symbol(b.Tokens[0]) {
		t.Fatalf("checkpoint with a task: %s", body)
	}
	status, body = serve(s, "POST", "/api/run", `{"model": "bare", "text": "1 2 3"}`)
	if status != 400 || !strings.Contains(string(body), "model bare has no tokenizer.json, so it cannot read text; give tokens (ids from 0 to 9)") {
		t.Fatalf("text on a checkpoint without a task: %d %s", status, body)
	}
	status, body = serve(s, "POST", "/api/run", `{"model": "bare", "tokens": [1, 2, 3, 1, 2, 3]}`)
	var bareRun userAnswer
	decodeOK(t, status, body, &bareRun)
	if bareRun.Symbols[0] != "#1" || bareRun.Pieces != nil || bareRun.Score == nil {
		t.Fatalf("tokens on a checkpoint without a task: %s", body)
	}
}

// FuzzUserRequest sends arbitrary bodies naming the user's models to the endpoints that read a
// sequence: never a 5xx, always JSON.
func FuzzUserRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model": "gpt2", "text": "The cat sat"}`,
		`{"model": "bert", "text": "the [MASK] [SEP] [CLS]", "ablate": [{"layer": 1, "head": 3, "mode": "mean"}]}`,
		`{"model": "llama", "text": "<s></s>\n\t ’é", "ablate": [{"layer": 0, "head": 0, "mode": "uniform"}]}`,
		`{"model": "gpt2", "text": "<|endoftext|><|endoftext|>"}`,
		`{"model": "llama", "tokens": [0, 294]}`,
		`{"model": "bert", "seed": 1}`,
		`{"model": "gpt2", "text": ""}`,
		`{"model": "bert", "text": "the [MASK] sat", "patterns": ["global:0", "local:1"], "block": [2, 2], "normalizer": "entmax15"}`,
		`{"model": "llama", "tokens": [1, 2, 3], "patterns": ["bigbird:1,1,1,2"], "normalizer": "topk:1"}`,
	} {
		f.Add(seed)
	}
	s, err := New(Options{Workers: 1, Models: []string{tinyFolder("gpt2"), tinyFolder("llama"), tinyFolder("bert")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/api/run", "/api/ablate"} {
			status, out := serve(s, "POST", path, body)
			if status >= 500 || !json.Valid(out) {
				t.Fatalf("%s %q: %d %s", path, body, status, out)
			}
		}
	})
}

// TestReadable checks what tokens read as on the page: spaces for Ġ and ▁, a byte token's
// character from the text it covers (or its spelling alone), WordPiece continuations with ##.
func TestReadable(t *testing.T) {
	s, err := userServer()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model, text string
		want        []string
	}{
		{"gpt2", "on the", []string{"on", " the"}},
		{"llama", "the mat’", []string{"<s>", " the", " ", "m", "a", "t", "’", "’", "’"}},
		{"bert", "playing", []string{"[CLS]", "play", "##ing", "[SEP]"}},
	} {
		m := s.models[c.model]
		ids, offsets, err := m.encode(c.text)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.readable(ids, offsets, c.text); !slices.Equal(got, c.want) {
			t.Errorf("%s %q: %q, want %q", c.model, c.text, got, c.want)
		}
	}
	llama := s.models["llama"]
	id, _ := llama.user.tok.TokenToID("<0xE2>")
	if got := llama.pieceText(id); got != "<0xE2>" {
		t.Errorf("<0xE2> alone reads %q, want its spelling", got)
	}
	if got := label("  "); got != "··" {
		t.Errorf("label of two spaces: %q, want two middle dots", got)
	}
	if got := label("a\tb\n"); got != `a\tb\n` {
		t.Errorf("label %q", got)
	}
}

// TestUserNoHead adds a copy of the GPT-2 folder as GPT2Model, the model without its
// language-model head: the run has no predictions and no score, and ablation, which compares
// predictions, is refused with a message.
func TestUserNoHead(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "tokenizer.json"} {
		data, err := os.ReadFile(filepath.Join(tinyFolder("gpt2"), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(tinyFolder("gpt2"), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`"GPT2LMHeadModel"`), []byte(`"GPT2Model"`), 1)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Workers: 1, Models: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	name := s.Added()[0]
	status, body := serve(s, "POST", "/api/run", `{"model": "`+name+`", "text": "The cat"}`)
	var got userAnswer
	decodeOK(t, status, body, &got)
	if got.Predicts != "none" || got.Predictions != nil || got.Score != nil || got.Measures.Heads[0].Importance != nil || len(got.Weights) != 2 {
		t.Fatalf("a model without its head: %.300s", body)
	}
	status, body = serve(s, "POST", "/api/ablate", `{"model": "`+name+`", "text": "The cat", "ablate": [{"layer": 0, "head": 0, "mode": "zero"}]}`)
	if status != 400 || !strings.Contains(string(body), "(GPT2Model) has no language-model head, so no predictions to compare") {
		t.Fatalf("ablate: %d %s", status, body)
	}
}

// TestUserConcurrent runs, ablates and measures a user's model from several requests at once:
// each answer is a lone request's (the model, its importance's backward pass included, takes
// turns).
func TestUserConcurrent(t *testing.T) {
	s, err := New(Options{Heavy: 4, Workers: 1, Models: []string{tinyFolder("llama")}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := [][2]string{
		{"/api/run", `{"model": "llama", "text": "the cat sat on the mat"}`},
		{"/api/ablate", `{"model": "llama", "text": "the cat sat", "ablate": [{"layer": 1, "head": 2, "mode": "mean"}]}`},
		{"/api/heads", `{"model": "llama"}`},
	}
	want := make([][]byte, len(reqs))
	for i, r := range reqs {
		_, want[i] = serve(s, "POST", r[0], r[1])
	}
	var wg sync.WaitGroup
	for i := range 9 {
		wg.Go(func() {
			r := reqs[i%len(reqs)]
			status, body := serve(s, "POST", r[0], r[1])
			if status != 200 || !bytes.Equal(body, want[i%len(reqs)]) {
				t.Errorf("%s: status %d, answer differs from a lone request's", r[0], status)
			}
		})
	}
	wg.Wait()
}

// TestUserRouting checks /api/models' experts and /api/run's routing for a mixture of experts
// (Mixtral's: 4 experts, 2 a token, renormalised): per layer and position, two distinct experts
// whose weights sum to 1, the first weighing at least the second; a dense model has neither.
func TestUserRouting(t *testing.T) {
	s, err := New(Options{Workers: 1, Models: []string{tinyFolder("mixtral"), tinyFolder("llama")}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tokens  []int `json:"tokens"`
		Routing []struct {
			Experts [][]int     `json:"experts"`
			Weights [][]float32 `json:"weights"`
		} `json:"routing"`
	}
	var models []struct {
		Name            string `json:"name"`
		User            bool   `json:"user"`
		Experts         int    `json:"experts"`
		ExpertsPerToken int    `json:"experts_per_token"`
	}
	status, body := serve(s, "GET", "/api/models", "")
	decodeOK(t, status, body, &models)
	for _, m := range models {
		if want := map[string][2]int{"mixtral": {4, 2}}[m.Name]; m.User && [2]int{m.Experts, m.ExpertsPerToken} != want {
			t.Errorf("%s: /api/models says %d experts, %d a token; want %v", m.Name, m.Experts, m.ExpertsPerToken, want)
		}
	}
	status, body = serve(s, "POST", "/api/run", `{"model": "mixtral", "text": "the cat sat"}`)
	decodeOK(t, status, body, &got)
	if len(got.Routing) != 2 {
		t.Fatalf("routing of %d layers, want 2", len(got.Routing))
	}
	for l, r := range got.Routing {
		if len(r.Experts) != len(got.Tokens) || len(r.Weights) != len(got.Tokens) {
			t.Fatalf("layer %d: %d and %d positions, want %d", l, len(r.Experts), len(r.Weights), len(got.Tokens))
		}
		for p, e := range r.Experts {
			w := r.Weights[p]
			if len(e) != 2 || e[0] == e[1] || e[0] < 0 || e[0] > 3 || e[1] < 0 || e[1] > 3 || w[0] < w[1] || math.Abs(float64(w[0]+w[1])-1) > 1e-6 {
				t.Errorf("layer %d position %d: experts %v, weights %v", l, p, e, w)
			}
		}
	}
	status, body = serve(s, "POST", "/api/run", `{"model": "llama", "text": "the cat sat"}`)
	if status != 200 || bytes.Contains(body, []byte(`"routing"`)) {
		t.Errorf("a dense model's answer: %d, routing in it: %s", status, body)
	}
}

// TestUserFamilies adds every tiny folder (Mistral's sliding window, Qwen2's biases, Qwen3's
// q_norm and k_norm and heads wider than d_model/heads, Gemma's GeGLU and scaled embeddings,
// Phi-3's fused projections and partial rotary, Gemma 2's soft-caps, Gemma 3's sandwich norms
// and local layers, Pythia's and Phi-2's parallel attention and MLP in F16, StableLM 2, Llama 3's BF16
// weights and rope scaling, a sharded F16 GPT-2, BERT's old gamma and beta names, RoBERTa,
// DistilBERT, SmolLM3's NoPE and sliding layer, GPT-J, Qwen3 with YaRN) and runs a text on each: the tokenizer's tokens, rows of weights that sum to 1, a
// prediction per position.
func TestUserFamilies(t *testing.T) {
	names := []string{"mistral", "qwen2", "qwen3-bf16", "qwen3-wide", "gemma", "phi3", "gemma2", "gemma3", "pythia", "phi2", "stablelm2", "llama3-bf16", "gpt2-prefixed-f16-sharded", "bert-gamma-beta", "roberta", "distilbert", "smollm3", "gptj", "qwen3-yarn", "mixtral", "qwen3-moe-bf16", "qwen2-moe", "starcoder2", "falcon", "falcon-new-arch", "olmo2", "olmoe-bf16", "olmo3", "gpt-bigcode"}
	var paths []string
	for _, n := range names {
		paths = append(paths, tinyFolder(n))
	}
	s, err := New(Options{Workers: 1, Models: paths})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range s.Added() {
		if name != names[i] {
			t.Fatalf("model %d is named %q, want %q", i, name, names[i])
		}
		status, body := serve(s, "POST", "/api/run", `{"model": "`+name+`", "text": "the cat sat"}`)
		var got userAnswer
		decodeOK(t, status, body, &got)
		tok := s.models[name].user.tok
		enc, err := tok.Encode("the cat sat", true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Tokens, enc.IDs) || len(got.Predictions) != len(enc.IDs) {
			t.Fatalf("%s: tokens %v and %d predictions, want %v", name, got.Tokens, len(got.Predictions), enc.IDs)
		}
		for l, layer := range got.Weights {
			for h, head := range layer {
				for q, row := range head {
					sum := 0.0
					for _, a := range row {
						sum += float64(a)
					}
					if math.Abs(sum-1) > 1e-5 {
						t.Fatalf("%s L%d H%d row %d sums to %v", name, l, h, q, sum)
					}
				}
			}
		}
		// Every mode of ablation, whose mean ablation shifts the heads' outputs, H·d wide.
		for _, mode := range []string{"zero", "mean", "uniform"} {
			status, body := serve(s, "POST", "/api/ablate", `{"model": "`+name+`", "text": "the cat sat", "ablate": [{"layer": 1, "head": 1, "mode": "`+mode+`"}]}`)
			if status != 200 {
				t.Fatalf("%s: ablation %s: %d %s", name, mode, status, body)
			}
		}
	}
}

// TestUserRoBERTaMask checks that a RoBERTa folder's mask token, <mask> (not BERT's [MASK]), marks
// the position whose guess counts, and that the model's description and its mask field tell the
// page to write it.
func TestUserRoBERTaMask(t *testing.T) {
	s, err := New(Options{Workers: 1, Models: []string{tinyFolder("roberta")}})
	if err != nil {
		t.Fatal(err)
	}
	pm, err := pretrained.Open(tinyFolder("roberta"))
	if err != nil {
		t.Fatal(err)
	}
	mask, ok := pm.Tokenizer.TokenToID("<mask>")
	if !ok {
		t.Fatal("the roberta folder's tokenizer has no <mask>")
	}
	var got userAnswer
	status, body := serve(s, "POST", "/api/run", `{"model": "roberta", "text": "the cat <mask> on"}`)
	decodeOK(t, status, body, &got)
	var masked []int
	for pos, p := range got.Predictions {
		if p.Masked {
			masked = append(masked, pos)
		}
	}
	if i := slices.Index(got.Tokens, mask); got.Predicts != "masked" || i < 0 || !slices.Equal(masked, []int{i}) {
		t.Errorf("tokens %v, predicts %q, masked positions %v; want the one <mask> (%d) masked", got.Tokens, got.Predicts, masked, mask)
	}
	var models []map[string]any
	status, body = serve(s, "GET", "/api/models", "")
	decodeOK(t, status, body, &models)
	if !slices.ContainsFunc(models, func(m map[string]any) bool {
		about, _ := m["describe"].(string)
		return strings.Contains(about, "write <mask> where the model should guess") && m["mask"] == "<mask>"
	}) {
		t.Errorf("models %s, want the page to ask for <mask>", body)
	}
}
