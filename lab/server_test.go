package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mhalab/mha/experiment"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/train"
	"github.com/mhalab/mha/viz"
)

// testServer returns a Server shared by the tests of this file (loading the models once).
var testServer = sync.OnceValues(func() (*Server, error) { return New(Options{Workers: 2}) })

// call sends a request to the shared server and returns the status and body.
func call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	s, err := testServer()
	if err != nil {
		t.Fatal(err)
	}
	return serve(s, method, path, body)
}

// serve sends one request to s, with a POST's body declared as JSON, as the page sends it.
func serve(s http.Handler, method, path, body string) (int, []byte) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if method == "POST" {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// decodeOK checks a 200 answer and decodes it into v.
func decodeOK(t *testing.T, status int, body []byte, v any) {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}

// shipped opens a fresh copy of a shipped model and its task, for reference computations.
func shipped(t *testing.T, name string) (*nn.Model, tasks.Task) {
	t.Helper()
	m, meta, err := models.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	task, err := train.TaskOf(name, meta)
	if err != nil {
		t.Fatal(err)
	}
	return m, task
}

// runAnswer is /api/run's answer as a client decodes it.
type runAnswer struct {
	Model       string          `json:"model"`
	Tokens      []int           `json:"tokens"`
	Symbols     []string        `json:"symbols"`
	Weights     [][][][]float32 `json:"weights"`
	Predictions []struct {
		Top []struct {
			Token  int      `json:"token"`
			Symbol string   `json:"symbol"`
			P      *float64 `json:"p"`
		} `json:"top"`
		Target *struct {
			Token int     `json:"token"`
			P     float64 `json:"p"`
		} `json:"target"`
		Correct *bool `json:"correct"`
	} `json:"predictions"`
	Score *struct {
		Loss, Accuracy float64
		Scored         int
	} `json:"score"`
	Measures struct {
		Sequences int `json:"sequences"`
		Heads     []struct {
			Layer, Head         int
			Entropy, Confidence float64
			PrevToken           float64  `json:"prev_token"`
			PrefixMatching      *float64 `json:"prefix_matching"`
			GroundTruth         *float64 `json:"ground_truth"`
			Importance          *float64 `json:"importance"`
		} `json:"heads"`
		Layers []struct {
			Similarity [][]*float64 `json:"similarity"`
			JSDistance [][]*float64 `json:"js_distance"`
			ArgmaxNMI  [][]*float64 `json:"argmax_nmi"`
		} `json:"layers"`
	} `json:"measures"`
}

func TestModels(t *testing.T) {
	var got []modelInfo
	status, body := call(t, "GET", "/api/models", "")
	decodeOK(t, status, body, &got)
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, models.Names()) {
		t.Fatalf("models %v, want %v", names, models.Names())
	}
	for _, info := range got {
		m, task := shipped(t, info.Name)
		c := m.Config()
		if info.Layers != c.Layers || info.Heads != c.Heads || info.DModel != c.DModel || info.SeqLen != c.SeqLen || info.Params != m.NumParams() {
			t.Errorf("%s: %+v, want the config %+v with %d parameters", info.Name, info, c, m.NumParams())
		}
		for id, s := range info.Symbols {
			if s != task.Symbol(id) {
				t.Errorf("%s: symbol of %d is %q, want %q", info.Name, id, s, task.Symbol(id))
			}
		}
	}
}

// TestRunGenerated checks every part of /api/run's answer for a sequence drawn from the task
// against the model run directly.
func TestRunGenerated(t *testing.T) {
	const seed = 7
	var got runAnswer
	status, body := call(t, "POST", "/api/run", `{"model": "induction", "seed": 7}`)
	decodeOK(t, status, body, &got)

	m, task := shipped(t, "induction")
	b, err := task.Batch(seed, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, b.Tokens) {
		t.Fatalf("tokens %v, want %v", got.Tokens, b.Tokens)
	}
	for i, id := range b.Tokens {
		if got.Symbols[i] != task.Symbol(id) {
			t.Fatalf("symbol %d is %q, want %q", i, got.Symbols[i], task.Symbol(id))
		}
	}
	logits, err := m.Forward(b.Tokens, 1, b.T, &nn.RunOptions{KeepWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	T := b.T
	for l := range c.Layers {
		w := m.Weights(l).Data
		for h := range c.Heads {
			for q := range T {
				sum := 0.0
				for k := range T {
					if a := got.Weights[l][h][q][k]; a != w[(h*T+q)*T+k] {
						t.Fatalf("weight L%d H%d (%d, %d) = %v, want %v", l, h, q, k, a, w[(h*T+q)*T+k])
					}
					sum += float64(got.Weights[l][h][q][k])
				}
				if math.Abs(sum-1) > 1e-5 {
					t.Fatalf("L%d H%d row %d sums to %v, want 1", l, h, q, sum)
				}
			}
		}
	}
	// Predictions: the three largest softmax probabilities, and the target where scored.
	v := c.Vocab
	for pos, p := range got.Predictions {
		probs := softmax(logits.Data[pos*v : (pos+1)*v])
		sorted := slices.Clone(probs)
		slices.Sort(sorted)
		for i, g := range p.Top {
			if want := sorted[v-1-i]; math.Abs(*g.P-want) > 1e-12 || probs[g.Token] != *g.P || g.Symbol != task.Symbol(g.Token) {
				t.Fatalf("position %d top %d: %+v (p %v), want p %v", pos, i, g, *g.P, want)
			}
		}
		if b.Scored[pos] != (p.Target != nil) {
			t.Fatalf("position %d: target %v, want one exactly where scored (%v)", pos, p.Target, b.Scored[pos])
		}
		if p.Target != nil && (p.Target.Token != b.Targets[pos] || *p.Correct != (p.Top[0].Token == b.Targets[pos])) {
			t.Fatalf("position %d: target %+v correct %v, want %d", pos, p.Target, *p.Correct, b.Targets[pos])
		}
	}
	loss, correct, counted, err := m.Loss(b.Targets, b.Scored)
	if err != nil {
		t.Fatal(err)
	}
	if got.Score == nil || math.Abs(got.Score.Loss-loss) > 1e-6*max(1, loss) || got.Score.Accuracy != float64(correct)/float64(counted) || got.Score.Scored != counted {
		t.Fatalf("score %+v, want loss %v, accuracy %d/%d", got.Score, loss, correct, counted)
	}
	// Measures: the probe functions on the same weights.
	for l := range c.Layers {
		w := m.Weights(l)
		prev, _ := probe.PrevToken(w.Data, 1, c.Heads, T, 1)
		truth, _ := probe.GroundTruth(w.Data, b.Attn, 1, c.Heads, T)
		entropy, _ := probe.Entropy(w)
		for h := range c.Heads {
			hm := got.Measures.Heads[l*c.Heads+h]
			if hm.Layer != l || hm.Head != h || hm.PrevToken != prev[h] || *hm.GroundTruth != truth[h] || hm.Entropy != entropy[h] || hm.Importance != nil {
				t.Fatalf("L%d H%d: %+v, want prev-token %v, ground truth %v, entropy %v, no importance", l, h, hm, prev[h], truth[h], entropy[h])
			}
		}
		rho := got.Measures.Layers[l].Similarity
		for i := range c.Heads {
			if *rho[i][i] != 1 || *got.Measures.Layers[l].JSDistance[i][i] != 0 {
				t.Fatalf("layer %d: ρ diagonal %v, JS diagonal %v, want 1 and 0", l, *rho[i][i], *got.Measures.Layers[l].JSDistance[i][i])
			}
		}
	}
}

// TestRunTyped runs a sequence given as text and as token ids: the same answer, without
// targets.
func TestRunTyped(t *testing.T) {
	var text, ids runAnswer
	status, body := call(t, "POST", "/api/run", `{"model": "sort", "text": " 3 1 2  SEP 1 2 "}`)
	decodeOK(t, status, body, &text)
	status, body = call(t, "POST", "/api/run", `{"model": "sort", "tokens": [3, 1, 2, 10, 1, 2]}`)
	decodeOK(t, status, body, &ids)
	if !slices.Equal(text.Tokens, []int{3, 1, 2, 10, 1, 2}) || !slices.Equal(text.Symbols, []string{"3", "1", "2", "SEP", "1", "2"}) {
		t.Fatalf("tokens %v symbols %v", text.Tokens, text.Symbols)
	}
	if text.Score != nil || text.Predictions[4].Target != nil || text.Measures.Heads[0].GroundTruth != nil {
		t.Fatalf("a typed sequence has targets or a ground truth: %s", body)
	}
	if len(text.Weights[0][0]) != 6 || !slices.EqualFunc(text.Weights, ids.Weights, func(a, b [][][]float32) bool {
		return slices.EqualFunc(a, b, func(a, b [][]float32) bool { return slices.EqualFunc(a, b, slices.Equal) })
	}) {
		t.Fatal("text and tokens give different weights")
	}
	// "1 2" repeats "1 2" at positions 1–2: the queries 4 and 5 have matching keys.
	if text.Measures.Heads[0].PrefixMatching == nil {
		t.Fatal("prefix-matching not measured on a sequence with repeated tokens")
	}
}

// TestHeads checks the task-wide measures against probe run directly on the same sequences.
func TestHeads(t *testing.T) {
	var got runAnswer
	status, body := call(t, "POST", "/api/heads", `{"model": "induction"}`)
	decodeOK(t, status, body, &got.Measures)
	m, task := shipped(t, "induction")
	imp, err := probe.Importance(m, task, probe.EvalConfig{Batches: 1, Batch: taskBatch, Seed: taskSeed})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := task.Batch(taskSeed, taskBatch)
	c, err := probe.Record(m, b.Tokens, b.B, b.T, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Measures.Sequences != taskBatch {
		t.Fatalf("%d sequences, want %d", got.Measures.Sequences, taskBatch)
	}
	cfg := m.Config()
	for l := range cfg.Layers {
		conf, _ := probe.Confidence(c.Weights[l])
		rho, _ := probe.Similarity(c.Heads[l], c.HeadDims)
		norm := 0.0
		for h := range cfg.Heads {
			hm := got.Measures.Heads[l*cfg.Heads+h]
			if hm.Importance == nil || *hm.Importance != imp[l][h] || hm.Confidence != conf[h] {
				t.Fatalf("L%d H%d: %+v, want importance %v confidence %v", l, h, hm, imp[l][h], conf[h])
			}
			norm += *hm.Importance * *hm.Importance
			for j := range cfg.Heads {
				if g := got.Measures.Layers[l].Similarity[h][j]; *g != rho[h][j] {
					t.Fatalf("L%d ρ[%d][%d] = %v, want %v", l, h, j, *g, rho[h][j])
				}
			}
		}
		if math.Abs(norm-1) > 1e-9 {
			t.Fatalf("layer %d: importances' squares sum to %v, want 1", l, norm)
		}
	}
	// The induction heads of layer 1 attend where the task says.
	best := 0.0
	for _, hm := range got.Measures.Heads[cfg.Heads:] {
		best = max(best, *hm.GroundTruth)
	}
	if best < 0.8 {
		t.Fatalf("best layer-1 ground truth %v, want ≥ 0.8", best)
	}
}

// TestAblate ablates the whole induction layer and checks the answer against probe.
func TestAblate(t *testing.T) {
	status, body := call(t, "POST", "/api/ablate", `{"model": "induction", "seed": 3, "ablate": [
		{"layer": 1, "head": 0, "mode": "zero"}, {"layer": 1, "head": 1, "mode": "mean"},
		{"layer": 1, "head": 2, "mode": "uniform"}, {"layer": 1, "head": 3, "mode": "zero"}]}`)
	var raw struct {
		Positions []struct {
			Before, After struct{ Token int }
			Target        *struct{ Token int }
			Changed       bool
			KL            float64
		}
		Sequence *struct {
			Before, After struct{ Loss, Accuracy float64 }
		}
		Task struct {
			Sequences     int
			Before, After probe.Score
		}
	}
	decodeOK(t, status, body, &raw)
	m, task := shipped(t, "induction")
	abl := []probe.Ablation{{Layer: 1, Head: 0, Mode: "zero"}, {Layer: 1, Head: 1, Mode: "mean"}, {Layer: 1, Head: 2, Mode: "uniform"}, {Layer: 1, Head: 3, Mode: "zero"}}
	want, err := probe.Ablate(m, task, abl, probe.EvalConfig{Batches: taskAblationBatches, Batch: taskBatch, Seed: taskSeed})
	if err != nil {
		t.Fatal(err)
	}
	if raw.Task.Before != want.Base || raw.Task.After != want.Ablated || raw.Task.Sequences != taskAblationBatches*taskBatch {
		t.Fatalf("task %+v, want %+v → %+v", raw.Task, want.Base, want.Ablated)
	}
	if want.Ablated.Accuracy > want.Base.Accuracy-0.5 {
		t.Fatalf("ablating the induction layer leaves accuracy %v (from %v)", want.Ablated.Accuracy, want.Base.Accuracy)
	}
	b, _ := task.Batch(3, 1)
	base, _ := probe.Record(m, b.Tokens, 1, b.T, nil)
	ablated, err := probe.Record(m, b.Tokens, 1, b.T, &probe.RecordOptions{Ablate: abl})
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config().Vocab
	changed := 0
	for pos, p := range raw.Positions {
		before, after := argmax(base.Logits.Data[pos*v:(pos+1)*v]), argmax(ablated.Logits.Data[pos*v:(pos+1)*v])
		if p.Before.Token != before || p.After.Token != after || p.Changed != (before != after) || !(p.KL >= 0) {
			t.Fatalf("position %d: %+v, want %d → %d", pos, p, before, after)
		}
		if (p.Target != nil) != b.Scored[pos] {
			t.Fatalf("position %d: target %v, want one exactly where scored", pos, p.Target)
		}
		if before != after {
			changed++
		}
	}
	if changed == 0 || raw.Sequence == nil || raw.Sequence.After.Loss <= raw.Sequence.Before.Loss {
		t.Fatalf("ablation changed %d predictions, sequence %+v; want changes and a higher loss", changed, raw.Sequence)
	}
}

// TestPicture checks that the pictures are package viz's drawings of the run's weights.
func TestPicture(t *testing.T) {
	m, task := shipped(t, "induction")
	b, _ := task.Batch(5, 1)
	if _, err := m.Forward(b.Tokens, 1, b.T, &nn.RunOptions{KeepWeights: true}); err != nil {
		t.Fatal(err)
	}
	symbols := make([]string, b.T)
	for i, id := range b.Tokens {
		symbols[i] = task.Symbol(id)
	}
	T := b.T
	want := attention("induction · layer 1, head 2", m.Weights(1).Data[2*T*T:][:T*T], symbols, true)
	for _, format := range []string{"png", "svg"} {
		status, body := call(t, "GET", "/api/picture?model=induction&seed=5&kind=head&layer=1&head=2&format="+format, "")
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", format, status, body)
		}
		var buf bytes.Buffer
		if format == "png" {
			want.PNG(&buf)
			if _, err := png.Decode(bytes.NewReader(body)); err != nil {
				t.Fatal(err)
			}
		} else {
			want.SVG(&buf)
			if err := xml.Unmarshal(body, new(struct{})); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(body, buf.Bytes()) {
			t.Fatalf("%s: the picture differs from viz's drawing of the weights", format)
		}
	}
	for _, q := range []string{
		"kind=grid&format=png",
		"kind=similarity&layer=0&metric=rho&format=svg",
		"kind=head&layer=0&head=1&ablate=1.0.zero,1.1.uniform&format=png",
	} {
		status, body := call(t, "GET", "/api/picture?model=induction&text=BOS+1+2+3+1+2+3&"+q, "")
		if status != http.StatusOK || !(bytes.HasPrefix(body, []byte("\x89PNG\r\n\x1a\n")) || bytes.HasPrefix(body, []byte("<svg")) || bytes.HasPrefix(body, []byte("<?xml"))) {
			t.Fatalf("%s: status %d: %.200s", q, status, body)
		}
	}
	// The task scope is measured on the task's sequences, unablated and as trained: it takes
	// no sequence, nor anything that would change one's run.
	status, whole := call(t, "GET", "/api/picture?model=induction&kind=similarity&layer=1&metric=nmi&scope=task&format=png", "")
	if status != http.StatusOK || !bytes.HasPrefix(whole, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("scope=task: status %d: %.200s", status, whole)
	}
	// A sequence may come with it, as the sequence scope needs one: the picture is the same.
	if status, body := call(t, "GET", "/api/picture?model=induction&text=BOS+1+2+3&kind=similarity&layer=1&metric=nmi&scope=task&format=png", ""); status != http.StatusOK || !bytes.Equal(body, whole) {
		t.Fatalf("scope=task with a sequence: status %d, %d bytes, want the %d of the picture without", status, len(body), len(whole))
	}
	for _, extra := range []string{"ablate=1.0.zero", "patterns=local:1", "normalizer=sparsemax", "block=2,2"} {
		status, body := call(t, "GET", "/api/picture?model=induction&kind=similarity&layer=1&metric=nmi&scope=task&format=png&"+extra, "")
		if status != http.StatusBadRequest || !bytes.Contains(body, []byte("does not apply to kind=similarity with scope=task")) {
			t.Errorf("scope=task with %s: status %d: %.200s", extra, status, body)
		}
	}
}

// TestPruning checks /api/heads' pruning curve and the pruning and importance pictures against
// probe.Importance and probe.Prune run directly on the same sequences.
func TestPruning(t *testing.T) {
	var got struct {
		Sequences int
		Heads     []struct {
			Layer, Head int
			Importance  float64
		}
		Pruning []probe.PrunePoint
	}
	status, body := call(t, "POST", "/api/heads", `{"model": "sort"}`)
	decodeOK(t, status, body, &got)
	m, task := shipped(t, "sort")
	cfg := probe.EvalConfig{Batches: 1, Batch: taskBatch, Seed: taskSeed}
	imp, err := probe.Importance(m, task, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := probe.Prune(m, task, imp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	if len(want) != c.Layers*c.Heads+1 || !slices.EqualFunc(got.Pruning, want, func(a, b probe.PrunePoint) bool {
		return a.Removed == b.Removed && a.Fraction == b.Fraction && a.Score == b.Score && (a.Last == nil) == (b.Last == nil) && (a.Last == nil || *a.Last == *b.Last)
	}) {
		t.Fatalf("pruning curve %+v, want probe.Prune's %+v", got.Pruning, want)
	}
	if first, last := want[0].Accuracy, want[len(want)-1].Accuracy; first < 0.99 || last > 0.6 {
		t.Fatalf("sort's accuracy goes from %v to %v as heads are pruned; want ≥ 0.99 to ≤ 0.6", first, last)
	}
	// The pictures draw these numbers: the curve as viz's chart, the importance as a heatmap
	// whose cells are probe.Importance's values.
	importance := make([]float64, 0, c.Layers*c.Heads)
	for _, row := range imp {
		importance = append(importance, row...)
	}
	for _, tc := range []struct {
		query string
		want  viz.Picture
	}{
		{"kind=pruning", pruningChart("sort", taskBatch, want, "accuracy")},
		{"kind=pruning&metric=accuracy", pruningChart("sort", taskBatch, want, "accuracy")},
		{"kind=pruning&metric=loss", pruningChart("sort", taskBatch, want, "loss")},
		{"kind=importance", viz.Heatmap{
			Title: "sort · head importance, normalised per layer (64 task sequences)", Rows: c.Layers, Cols: c.Heads, Values: importance,
			XLabel: "head", YLabel: "layer", ValueLabel: "importance E|∂L/∂ξ|", Scale: viz.Sequential{Min: 0, Max: 1}, Annotate: true,
		}},
	} {
		formats := []string{"svg"}
		if tc.query == "kind=pruning" {
			formats = append(formats, "png") // the same drawing: one PNG checks the encoding
		}
		for _, format := range formats {
			status, body := call(t, "GET", "/api/picture?model=sort&"+tc.query+"&format="+format, "")
			if status != http.StatusOK {
				t.Fatalf("%s %s: status %d: %s", tc.query, format, status, body)
			}
			var buf bytes.Buffer
			if format == "png" {
				tc.want.PNG(&buf)
				if _, err := png.Decode(bytes.NewReader(body)); err != nil {
					t.Fatal(err)
				}
			} else {
				tc.want.SVG(&buf)
				if err := xml.Unmarshal(body, new(struct{})); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(body, buf.Bytes()) {
				t.Fatalf("%s %s: the picture differs from viz's drawing of probe's numbers", tc.query, format)
			}
		}
	}
}

func TestExperiments(t *testing.T) {
	var list []experimentInfo
	status, body := call(t, "GET", "/api/experiments", "")
	decodeOK(t, status, body, &list)
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, experiment.Names()) {
		t.Fatalf("experiments %v, want %v", names, experiment.Names())
	}
	var got experimentResponse
	status, body = call(t, "GET", "/api/experiment/params", "")
	decodeOK(t, status, body, &got)
	want, err := experiment.Run(context.Background(), "params", experiment.Config{Seed: experimentSeed, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != want.Title || !slices.EqualFunc(got.Table.Rows, want.Table.Rows, slices.Equal) || len(got.Figures) != len(want.Pictures) {
		t.Fatalf("params: %+v, want the table of experiment.Run", got)
	}
	for _, f := range got.Figures {
		status, body := call(t, "GET", f.PNG, "")
		if status != http.StatusOK || !bytes.HasPrefix(body, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("%s: status %d: %.200s", f.PNG, status, body)
		}
	}
}

// TestBadRequests sends requests that are wrong in every way the API checks: each gets its
// 4xx status and a JSON error saying what was wrong.
func TestBadRequests(t *testing.T) {
	big := `{"model": "induction", "text": "` + strings.Repeat("1 ", MaxBody) + `"}`
	for _, c := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"POST", "/api/run", `{"model": "induction", "seed": 1`, 400, "ends in the middle"},
		{"POST", "/api/run", `{"model": "induction" "seed": 1}`, 400, "not valid JSON"},
		{"POST", "/api/run", ``, 400, "body is empty"},
		{"POST", "/api/run", `[]`, 400, "want an object"},
		{"POST", "/api/run", `{"model": "induction", "seed": 1} {}`, 400, "more than one JSON value"},
		{"POST", "/api/run", `{"model": "induction", "sede": 1}`, 400, `unknown field "sede"`},
		{"POST", "/api/run", `{"model": "chess", "seed": 1}`, 400, `unknown model "chess"; want one of brackets, induction, modadd, prev-token, sort`},
		{"POST", "/api/run", `{"model": "induction"}`, 400, "exactly one of text (symbols), tokens (ids) or seed"},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "text": "1"}`, 400, "got 2 of them"},
		{"POST", "/api/run", `{"model": "induction", "seed": -1}`, 400, `field "seed" is a JSON number -1; want a whole number ≥ 0`},
		{"POST", "/api/run", `{"model": "induction", "seed": "1"}`, 400, `field "seed" is a JSON string`},
		{"POST", "/api/run", `{"model": "induction", "text": "BOS 1 cat"}`, 400, `symbol "cat" at position 2 is not in the vocabulary of induction`},
		{"POST", "/api/run", `{"model": "induction", "text": "  "}`, 400, "the sequence has 0 tokens, want 1 to 32"},
		{"POST", "/api/run", `{"model": "modadd", "text": "1 2 = 3"}`, 400, "the sequence has 4 tokens, want 1 to 3 (the seq_len of modadd)"},
		{"POST", "/api/run", `{"model": "sort", "tokens": [1, 11]}`, 400, "id 11 at position 1 is outside the vocabulary of sort, want 0 to 10"},
		{"POST", "/api/run", `{"model": "sort", "tokens": []}`, 400, "the sequence has 0 tokens"},
		{"POST", "/api/run", `{"model": "sort", "tokens": [1.5]}`, 400, `field "tokens" is a JSON number 1.5; want a whole number`},
		{"POST", "/api/run", big, 413, "larger than 65536 bytes"},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "ablate": [{"layer": 2, "head": 0, "mode": "zero"}]}`, 400, "ablate[0]: layer 2, want 0 to 1"},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "ablate": [{"layer": 0, "head": -1, "mode": "zero"}]}`, 400, "ablate[0]: head -1, want 0 to 3"},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "ablate": [{"layer": 0, "head": 0, "mode": "half"}]}`, 400, `ablate[0]: mode "half", want zero, mean or uniform`},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "ablate": [{"layer": 0, "head": 0, "mode": "zero"}, {"layer": 0, "head": 0, "mode": "mean"}]}`, 400, "ablate[1]: layer 0 head 0 is listed twice"},
		{"POST", "/api/ablate", `{"model": "induction", "seed": 1}`, 400, "ablate is empty"},
		{"POST", "/api/heads", `{"model": "induction", "seed": 1}`, 400, `unknown field "seed"; want only model`},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "ablate": "L1H2"}`, 400, `field "ablate" is a JSON string; want an array`},
		{"POST", "/api/run", `{"model": "induction", "seed": 1, "ablate": [{"layer": 1, "head": 2, "mode": 0}]}`, 400, `field "ablate.mode" is a JSON number; want a string`},
		{"POST", "/api/run", `{"model": ["induction"], "seed": 1}`, 400, `field "model" is a JSON array; want a string`},
		{"GET", "/api/run", ``, 405, "method not allowed, want POST"},
		{"DELETE", "/api/models", ``, 405, "want GET"},
		{"GET", "/api/nothing", ``, 404, "no API endpoint /api/nothing"},
		{"GET", "/api/picture?model=induction&seed=1&kind=head&layer=0&head=0&format=gif", ``, 400, `format "gif"; want png or svg`},
		{"GET", "/api/picture?model=induction&seed=1&kind=pie&format=png", ``, 400, `kind "pie"; want head, grid, similarity, rollout, offsets, pruning, importance`},
		{"GET", "/api/picture?model=induction&kind=pruning&metric=rho&format=png", ``, 400, `metric "rho"; want accuracy or loss`},
		{"GET", "/api/picture?model=induction&seed=1&kind=pruning&format=png", ``, 400, `parameter "seed" does not apply to kind=pruning, which takes model, kind, format, metric`},
		{"GET", "/api/picture?model=induction&kind=importance&ablate=1.0.zero&format=svg", ``, 400, `parameter "ablate" does not apply to kind=importance`},
		{"GET", "/api/picture?model=induction&kind=importance&layer=1&format=svg", ``, 400, `parameter "layer" does not apply to kind=importance`},
		{"GET", "/api/picture?model=induction&seed=1&kind=grid&head=1&format=png", ``, 400, `parameter "head" does not apply to kind=grid`},
		{"GET", "/api/picture?model=chess&kind=pruning&format=png", ``, 400, `unknown model "chess"`},
		{"GET", "/api/picture?model=induction&kind=pruning", ``, 400, `format ""; want png or svg`},
		{"GET", "/api/picture?model=induction&kind=head&layer=0&head=0&format=png", ``, 400, "exactly one of text (symbols), tokens (ids) or seed"},
		{"GET", "/api/picture?model=induction&seed=1&kind=head&layer=0&head=4&format=png", ``, 400, `head "4"; want a whole number from 0 to 3`},
		{"GET", "/api/picture?model=induction&seed=1&kind=head&layer=x&head=0&format=png", ``, 400, `layer "x"; want a whole number from 0 to 1`},
		{"GET", "/api/picture?model=induction&seed=1&kind=head&head=0&format=png", ``, 400, `layer missing; want a whole number from 0 to 1`},
		{"GET", "/api/picture?model=induction&seed=1&kind=similarity&layer=0&metric=mse&format=png", ``, 400, `metric "mse"; want rho, js, nmi`},
		{"GET", "/api/picture?model=induction&seed=1&kind=similarity&layer=0&metric=rho&scope=all&format=png", ``, 400, `scope "all"; want sequence or task`},
		{"GET", "/api/picture?model=induction&seed=1&kind=grid&format=png&colour=red", ``, 400, `unknown parameter "colour"`},
		{"GET", "/api/picture?model=induction&seed=1&seed=2&kind=grid&format=png", ``, 400, `parameter "seed" is given 2 times`},
		{"GET", "/api/picture?model=induction&seed=-3&kind=grid&format=png", ``, 400, `seed "-3"; want a whole number`},
		{"GET", "/api/picture?model=sort&tokens=1,x&kind=grid&format=png", ``, 400, `tokens: item 1 is "x"`},
		{"GET", "/api/picture?model=sort&seed=1&ablate=1.2&kind=grid&format=png", ``, 400, `ablate: item 0 is "1.2"; want LAYER.HEAD.MODE`},
		{"GET", "/api/experiment/nope", ``, 404, `unknown experiment "nope"; want one of params`},
		{"GET", "/api/experiment/params/nope?format=png", ``, 404, `experiment params has no figure "nope"`},
		{"GET", "/api/experiment/params/x?format=bmp", ``, 400, `format "bmp"; want png or svg`},
		{"GET", "/api/picture?model=induction&seed=1&%zz=1&kind=grid&format=png", ``, 400, `query pair "%zz=1": invalid URL escape "%zz"; want NAME=VALUE pairs`},
		{"GET", "/api/picture?model=induction;seed=1&kind=grid&format=png", ``, 400, `query pair "model=induction;seed=1": invalid semicolon separator`},
		{"GET", "/api/experiment/params/heads?format=png&colour=%", ``, 400, `query pair "colour=%"`},
		{"POST", "/api/run?x=%zz", `{"model": "induction", "seed": 1}`, 400, `query pair "x=%zz"`},
		{"GET", "/api/picture?model=induction&seed=3&kind=grid&format=png" + strings.Repeat("&", 10000), ``, 400, "query has 10004 pairs, want at most 100"},
		// Field names exactly as documented, each once; UTF-8 text; an ablation names its head.
		{"POST", "/api/run", `{"model": "induction", "seed": 3, "Model": "modadd"}`, 400, `unknown field "Model"; want only ablate, block, model, normalizer, patterns, seed, text, tokens (spelled so)`},
		{"POST", "/api/run", `{"model": "induction", "seed": 3, "seed": 4}`, 400, `field "seed" is given twice`},
		{"POST", "/api/run", `{"model": "induction", "seed": 3, "ablate": [{"layer": 0, "head": 0, "mode": "zero", "Head": 1}]}`, 400, `unknown field "ablate[0].Head"`},
		{"POST", "/api/run", `{"model": "induction", "seed": 3, "ablate": [{"mode": "zero"}]}`, 400, `ablate[0] has no field "layer"; want layer, head, mode`},
		{"POST", "/api/run", `{"model": "induction", "seed": 3, "ablate": [{"layer": 1, "mode": "zero"}]}`, 400, `ablate[0] has no field "head"`},
		{"POST", "/api/run", "{\"model\": \"gpt\xff\", \"seed\": 1}", 400, "request body is not UTF-8 text"},
	} {
		status, body := call(t, c.method, c.path, c.body)
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || status != c.status || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s %s %.80s: %d %s, want %d and an error containing %q", c.method, c.path, c.body, status, body, c.status, c.msg)
		}
	}
}

// TestRequestChecks sends requests that a page of another site could make the browser send: a
// POST not declared as JSON gets 415, a foreign Origin 403, before any work.
func TestRequestChecks(t *testing.T) {
	s, err := testServer()
	if err != nil {
		t.Fatal(err)
	}
	const run = `{"model": "modadd", "seed": 1}`
	for _, c := range []struct {
		method, path, contentType, origin string
		status                            int
		msg                               string
	}{
		{"POST", "/api/run", "text/plain", "", 415, `POST /api/run with Content-Type "text/plain"; want application/json`},
		{"POST", "/api/run", "text/plain;charset=UTF-8", "", 415, `Content-Type "text/plain;charset=UTF-8"; want application/json`},
		{"POST", "/api/heads", "application/x-www-form-urlencoded", "", 415, `POST /api/heads with Content-Type "application/x-www-form-urlencoded"`},
		{"POST", "/api/run", "", "", 415, `Content-Type ""; want application/json`},
		{"POST", "/api/run", "application/json; charset=utf-8", "", 200, ""},
		{"POST", "/api/run", "Application/JSON", "http://example.com", 200, ""}, // httptest's Host is example.com
		{"POST", "/api/run", "application/json", "http://evil.example", 403, `request from origin "http://evil.example"; the lab answers only its own page, origin http://example.com`},
		{"POST", "/api/run", "text/plain", "http://evil.example", 403, `origin "http://evil.example"`},
		{"POST", "/api/run", "application/json", "null", 403, `origin "null"`},
		{"GET", "/api/models", "", "http://example.com:8080", 403, `origin "http://example.com:8080"`},
		{"GET", "/api/models", "", "https://example.com", 403, `origin "https://example.com"`},
		{"GET", "/api/models", "", "http://example.com", 200, ""},
	} {
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(run))
		if c.contentType != "" {
			r.Header.Set("Content-Type", c.contentType)
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		var e struct{ Error string }
		if w.Code != c.status || (c.status != 200 && (json.Unmarshal(w.Body.Bytes(), &e) != nil || !strings.Contains(e.Error, c.msg))) {
			t.Errorf("%s %s, Content-Type %q, Origin %q: %d %.200s, want %d and an error containing %q", c.method, c.path, c.contentType, c.origin, w.Code, w.Body.Bytes(), c.status, c.msg)
		}
	}
}

// TestHead checks that HEAD is GET without the body wherever GET is taken (RFC 9110 §9.3.2),
// and that a 405 lists it among the methods allowed.
func TestHead(t *testing.T) {
	s, err := testServer()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"HEAD", "/api/models", 200, ""},
		{"HEAD", "/api/picture?model=induction&seed=1&kind=head&layer=0&head=0&format=svg", 200, ""},
		{"HEAD", "/api/picture?model=induction&seed=1&kind=pie&format=png", 400, ""},
		{"HEAD", "/api/run", 405, "POST"},
		{"DELETE", "/api/models", 405, "GET, HEAD"},
		{"POST", "/api/picture", 405, "GET, HEAD"},
	} {
		req, err := http.NewRequest(c.method, ts.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.status, c.allow)
		}
		if c.method == "HEAD" && len(body) != 0 {
			t.Errorf("HEAD %s: a body of %d bytes", c.path, len(body))
		}
	}
}

// TestSlowBody sends two requests whose bodies dribble in over loopback, one byte at a time:
// they hold no heavy-work slot while they do, so a third request runs, and they get 408 when
// their time to send the body is up.
func TestSlowBody(t *testing.T) {
	const bodyTimeout = 300 * time.Millisecond
	s, err := New(Options{Heavy: 2, Queue: 50 * time.Millisecond, BodyTimeout: bodyTimeout, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 2) // a slow request's handler has begun
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			started <- struct{}{}
		}
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()

	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			conn, err := net.Dial("tcp", ts.Listener.Addr().String())
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer conn.Close()
			head := "POST /api/run HTTP/1.1\r\nHost: " + ts.Listener.Addr().String() +
				"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nX-Slow: 1\r\n\r\n{"
			if _, err := io.WriteString(conn, head); err != nil {
				answers <- answer{err: err}
				return
			}
			done := make(chan struct{})
			defer close(done)
			go func() { // a byte every 10 ms, until the answer comes
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						if _, err := io.WriteString(conn, " "); err != nil {
							return
						}
					}
				}
			}()
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			body, err := io.ReadAll(res.Body)
			answers <- answer{res.StatusCode, string(body), err}
		}()
	}
	<-started
	<-started
	res, err := http.Post(ts.URL+"/api/run", "application/json", strings.NewReader(`{"model": "modadd", "seed": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a request beside two slow ones: %d %.200s, want 200", res.StatusCode, body)
	}
	select {
	case a := <-answers:
		t.Fatalf("a slow request was answered (%d %s, %v) before the normal one; want it still sending its body", a.status, a.body, a.err)
	default:
	}
	for range 2 {
		a := <-answers
		if a.err != nil || a.status != http.StatusRequestTimeout || !strings.Contains(a.body, "the request body was still arriving after "+bodyTimeout.String()) {
			t.Errorf("slow request: %d %s (%v), want 408 saying the body was still arriving after %v", a.status, a.body, a.err, bodyTimeout)
		}
	}
}

// TestBodyTimeoutEnds checks that the deadline on reading a body ends with it: a request that
// has no body and works for longer than Options.BodyTimeout (the pruning curve, measured on the
// task at the first request) is not stopped.
func TestBodyTimeoutEnds(t *testing.T) {
	s, err := New(Options{BodyTimeout: 50 * time.Millisecond, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	start := time.Now()
	res, err := http.Get(ts.URL + "/api/picture?model=sort&kind=pruning&format=svg")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a picture that took %v, with a body timeout of 50ms: %d %.200s, want 200", time.Since(start), res.StatusCode, body)
	}
}

// TestBusy fills the heavy-work slots and checks that a request waits, then gets 503.
func TestBusy(t *testing.T) {
	s, err := New(Options{Heavy: 1, Queue: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.heavy <- struct{}{}
	status, body := serve(s, "POST", "/api/run", `{"model": "induction", "seed": 1}`)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "the lab is busy") {
		t.Fatalf("status %d: %s, want 503 busy", status, body)
	}
	if status, _ := serve(s, "GET", "/api/models", ""); status != http.StatusOK {
		t.Fatalf("light request: status %d, want 200 while heavy slots are full", status)
	}
	// A request refused for what it is gets its answer at once, not a wait for a slot.
	if status, body := serve(s, "GET", "/api/picture?model=induction&seed=1&kind=grid&format=png&%zz", ""); status != http.StatusBadRequest {
		t.Fatalf("malformed query: status %d: %s, want 400 while heavy slots are full", status, body)
	}
	<-s.heavy
	if status, body := serve(s, "POST", "/api/run", `{"model": "induction", "seed": 1}`); status != http.StatusOK {
		t.Fatalf("status %d: %s after the slot was freed", status, body)
	}
}

// TestConcurrent runs requests on the same model from many goroutines (run it with -race):
// each answer must be the one a lone request gets.
func TestConcurrent(t *testing.T) {
	s, err := New(Options{Heavy: 4, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Dense and sparse requests on one model: each request's attention is its own.
	bodies := []string{`{"model": "brackets", "seed": 11}`,
		`{"model": "brackets", "seed": 11, "patterns": ["local:1", "global:0"], "block": [2, 2], "normalizer": "sparsemax"}`}
	want := make([][]byte, len(bodies))
	for i, b := range bodies {
		_, want[i] = serve(s, "POST", "/api/run", b)
	}
	if bytes.Equal(want[0], want[1]) {
		t.Fatal("the sparse answer is the dense one")
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			status, body := serve(s, "POST", "/api/run", bodies[i%2])
			if status != http.StatusOK || !bytes.Equal(body, want[i%2]) {
				t.Errorf("%s: status %d, answer differs from a lone request's", bodies[i%2], status)
			}
		})
	}
	wg.Wait()
}

// TestServe serves on a loopback port: the page and the API answer, a foreign Host header is
// refused, and cancelling the context stops the server.
func TestServe(t *testing.T) {
	s, err := testServer()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	res, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(page), `<script type="module" src="js/main.js">`) || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("page: %d %.200s", res.StatusCode, page)
	}
	req, _ := http.NewRequest("GET", base+"/api/models", nil)
	req.Host = "attacker.example:80"
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "listens on loopback only") {
		t.Fatalf("foreign host: %d %s, want 421", res.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel, want nil", err)
	}
	if _, err := http.Get(base + "/"); err == nil {
		t.Fatal("the server still answers after Serve returned")
	}
}

// FuzzRunRequest sends arbitrary bodies to the endpoints that read one: never a 5xx, never a
// panic, always a JSON answer.
func FuzzRunRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model": "induction", "seed": 1}`,
		`{"model": "sort", "text": "1 2 SEP 1 2"}`,
		`{"model": "modadd", "tokens": [1, 2, 53]}`,
		`{"model": "induction", "seed": 2, "ablate": [{"layer": 1, "head": 3, "mode": "mean"}]}`,
		`{"model": "brackets", "text": "( [ ] )", "ablate": [{"layer": 0, "head": 0, "mode": "uniform"}]}`,
		`{"model": "prev-token", "tokens": [-1]}`,
		`{"model": "induction", "seed": 18446744073709551615}`,
		`{}`, `null`, `"x"`, `{"model": 1}`, `{"ablate": null, "model": "sort", "seed": 0}`,
		`{"model": "induction", "seed": 1, "patterns": ["local:2", "global:0"], "block": [4, 4], "normalizer": "sparsemax"}`,
		`{"model": "sort", "tokens": [1, 2], "patterns": ["bigbird:1,1,2,9", "dilated:2,2"], "block": [1, 3], "normalizer": "topk:1"}`,
		`{"model": "modadd", "seed": 3, "patterns": [], "normalizer": "entmax:1.2", "ablate": [{"layer": 0, "head": 0, "mode": "mean"}]}`,
		`{"model": "brackets", "seed": 3, "patterns": ["strided:0"], "block": [0, 9]}`,
		`{"model": "sort", "Seed": 1, "seed": 2, "seed": 3, "ablate": [{"mode": "zero", "LAYER": 0}]}`,
	} {
		f.Add(seed)
	}
	s, err := New(Options{Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/api/run", "/api/ablate", "/api/heads"} {
			status, out := serve(s, "POST", path, body)
			if status >= 500 || !json.Valid(out) {
				t.Fatalf("%s %q: %d %s", path, body, status, out)
			}
		}
	})
}

// FuzzCircuitsRequest sends arbitrary bodies to /api/circuits: never a 5xx, never a panic,
// always a JSON answer.
func FuzzCircuitsRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model": "induction", "clean": "BOS 4 9 13 7 22 4 9 13 7", "corrupt": "BOS 4 9 13 11 22 4 9 13 7", "target": "22", "foil": "11"}`,
		`{"model": "induction", "clean": "BOS 4 9", "corrupt": "BOS 4 8", "target": "#22", "foil": "#11", "position": 1}`,
		`{"model": "sort", "clean": "1 2 SEP", "corrupt": "2 1 SEP", "target": "1", "foil": "2"}`,
		`{"model": "induction", "clean": "BOS 4", "corrupt": "BOS 4 9", "target": "22", "foil": "11"}`,
		`{"model": "induction", "clean": "BOS 4", "corrupt": "BOS 5", "target": "#-1", "foil": "#99999999999999999999", "position": -3}`,
		`{"model": "modadd", "clean": "", "corrupt": "", "target": "", "foil": ""}`,
		`{}`, `null`, `[]`, `{"model": "induction", "extra": 1}`,
	} {
		f.Add(seed)
	}
	s, err := New(Options{Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		status, out := serve(s, "POST", "/api/circuits", body)
		if status >= 500 || !json.Valid(out) {
			t.Fatalf("%q: %d %s", body, status, out)
		}
	})
}

// FuzzPictureQuery sends arbitrary query strings to the picture endpoint, which `mha viz` also
// parses through: never a 5xx, never a panic, a picture or a JSON error.
func FuzzPictureQuery(f *testing.F) {
	for _, seed := range []string{
		"model=induction&seed=1&kind=grid&format=png",
		"model=sort&text=1+2+SEP+1+2&kind=head&layer=0&head=1&format=svg",
		"model=induction&tokens=1,2,3&ablate=1.2.zero,0.0.mean&kind=similarity&layer=1&metric=rho&format=svg",
		"model=modadd&kind=pruning&metric=loss&format=svg",
		"model=brackets&kind=importance&format=png",
		"model=induction&seed=1&kind=head&layer=9&head=-1&format=png",
		"ablate=1..zero&kind=grid", "%zz", "a=1&a=2", "",
		"model=induction&seed=1&%zz=1&kind=grid&format=png", "model=induction;seed=1&kind=grid&format=png",
		"model=induction&seed=1&kind=head&layer=1&head=0&patterns=local:2+global:0&block=4,4&normalizer=sparsemax&format=svg",
		"model=sort&seed=2&kind=grid&patterns=&normalizer=entmax15&format=png",
		"model=sort&seed=2&kind=rollout&patterns=strided:2&block=2,x&format=png",
		"model=induction&kind=patching&clean=BOS+4+9+13&corrupt=BOS+4+8+13&target=9&foil=8&format=svg",
		"model=induction&kind=patching-residual&clean=BOS+4+9&corrupt=BOS+5+9&target=%2322&foil=%2311&position=1&format=png",
		"model=induction&kind=composition&mode=v&format=svg",
		"model=induction&kind=similarity&layer=1&metric=js&scope=task&format=png",
		"model=induction&kind=similarity&layer=1&metric=js&scope=task&seed=2&format=png",
		"model=prev-token&kind=attribution&clean=BOS+1&corrupt=BOS+2&target=1&foil=2&format=svg",
	} {
		f.Add(seed)
	}
	s, err := New(Options{Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest("GET", "/api/picture", nil)
		r.URL.RawQuery = query // any bytes, as a raw request line could carry them
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code >= 500 || (w.Code != http.StatusOK && !json.Valid(w.Body.Bytes())) {
			t.Fatalf("%q: %d %.200s", query, w.Code, w.Body.Bytes())
		}
	})
}
