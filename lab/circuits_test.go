package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/circuits"
)

// inductionCircuit is the Circuits tab's default request on the induction model: a repeated
// sequence whose copied token is 22 in the clean prompt and 18 in the corrupted one.
const inductionCircuit = `{"model": "induction", "clean": "BOS 4 9 13 7 22 4 9 13 7", "corrupt": "BOS 4 9 13 7 18 4 9 13 7", "target": "22", "foil": "18"}`

// near reports whether a and b agree within tol, relative to the larger of 1 and |b|.
func near(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*max(1, math.Abs(b))
}

// getRecorded sends a GET to the shared server and returns the response, headers included.
func getRecorded(t *testing.T, path string) *httptest.ResponseRecorder {
	t.Helper()
	s, err := testServer()
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w
}

// TestCircuits patches the induction model through /api/circuits and checks the answer against
// circuits.Patch and circuits.Attribute on a fresh copy of the model: the prompts' tokens, the
// metric's position, both LDs, every grid, the attribution and its sum.
func TestCircuits(t *testing.T) {
	status, body := call(t, "POST", "/api/circuits", inductionCircuit)
	var got circuitsAnswer
	decodeOK(t, status, body, &got)
	net, _ := shipped(t, "induction")
	clean := []int{30, 4, 9, 13, 7, 22, 4, 9, 13, 7}
	corrupt := slices.Clone(clean)
	corrupt[5] = 18
	if !slices.Equal(got.Clean.Tokens, clean) || !slices.Equal(got.Corrupt.Tokens, corrupt) || got.Clean.Symbols[0] != "BOS" || got.Position != 9 ||
		got.Target.Token != 22 || got.Target.Symbol != "22" || got.Model != "induction" {
		t.Fatalf("answer %+v, want the tokens %v and %v, position 9, target 22", got, clean, corrupt)
	}
	if len(got.Top.Clean) != 3 || got.Top.Clean[0].Token != 22 || got.Top.Corrupt[0].Token != 18 || got.Top.Clean[0].P < 0.5 {
		t.Errorf("top guesses %+v, want 22 first on the clean prompt and 18 on the corrupted one", got.Top)
	}
	mt := circuits.Metric{Target: 22, Foil: 18, Position: 9}
	want, err := circuits.Patch(net, clean, corrupt, mt, circuits.PatchOptions{Workers: 2, Residual: true, Patterns: true})
	if err != nil {
		t.Fatal(err)
	}
	if !near(got.LDClean, want.LDClean, 1e-9) || !near(got.LDCorrupt, want.LDCorrupt, 1e-9) || got.LDClean <= 0 || got.LDCorrupt >= 0 {
		t.Errorf("LD clean %g, corrupted %g; want %g and %g, of opposite signs", got.LDClean, got.LDCorrupt, want.LDClean, want.LDCorrupt)
	}
	for name, g := range map[string][2][][]float64{"heads": {got.Heads, want.Heads}, "residual": {got.Residual, want.Residual}, "patterns": {got.Patterns, want.Patterns}} {
		if len(g[0]) != len(g[1]) {
			t.Fatalf("%s has %d rows, want %d", name, len(g[0]), len(g[1]))
		}
		for i := range g[1] {
			for j := range g[1][i] {
				if !near(g[0][i][j], g[1][i][j], 1e-9) {
					t.Errorf("%s[%d][%d] = %g, want %g", name, i, j, g[0][i][j], g[1][i][j])
				}
			}
		}
	}
	// The residual stream: the clean token embedding at the corrupted position restores all of
	// it, as does the last block's output at the metric position.
	if r := got.Residual; len(r) != 3 || len(r[0]) != 10 || !near(r[0][5], 1, 1e-6) || !near(r[2][9], 1, 1e-6) {
		t.Errorf("residual %v, want 3 × 10 with 1 at [0][5] and [2][9]", r)
	}
	a, err := circuits.Attribute(net, clean, mt, 2)
	if err != nil {
		t.Fatal(err)
	}
	d := got.DLA
	if d == nil || got.DLAError != "" {
		t.Fatalf("no attribution: %q", got.DLAError)
	}
	sum := d.Embed + d.NormBias + d.HeadBias
	for l := range d.Heads {
		for h := range d.Heads[l] {
			sum += d.Heads[l][h]
			if !near(d.Heads[l][h], a.Heads[l][h], 1e-9) {
				t.Errorf("dla.heads[%d][%d] = %g, want %g", l, h, d.Heads[l][h], a.Heads[l][h])
			}
		}
		sum += d.AttnBias[l]
	}
	if d.MLP != nil || !near(sum, d.LD, 1e-4) || !near(d.LD, got.LDClean, 1e-4) {
		t.Errorf("attribution of an attention-only model: mlp %v (want null), parts sum to %g, LD %g, LD clean %g", d.MLP, sum, d.LD, got.LDClean)
	}

	// The same request again comes from the cache, byte for byte; another position is another
	// metric.
	if status2, body2 := call(t, "POST", "/api/circuits", inductionCircuit); status2 != 200 || !bytes.Equal(body, body2) {
		t.Errorf("the request again: status %d, and the answer differs", status2)
	}
	var at4 circuitsAnswer
	status, body = call(t, "POST", "/api/circuits", strings.Replace(inductionCircuit, `"foil": "18"`, `"foil": "#18", "position": 6`, 1))
	decodeOK(t, status, body, &at4)
	if at4.Position != 6 || at4.LDClean == got.LDClean {
		t.Errorf("position 6: position %d, LD clean %g (at 9: %g)", at4.Position, at4.LDClean, got.LDClean)
	}
}

// TestCircuitsErrors sends bad requests to /api/circuits and /api/composition: each is a 4xx
// whose message says what was expected and what came.
func TestCircuitsErrors(t *testing.T) {
	with := func(old, new string) string { return strings.Replace(inductionCircuit, old, new, 1) }
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/api/circuits", with(`"BOS 4 9 13 7 18 4 9 13 7"`, `"BOS 4 9 13 7 18 4 9 13"`), 400, "the clean prompt has 10 tokens (BOS 4 9 13 7 22 4 9 13 7), the corrupted one 9 (BOS 4 9 13 7 18 4 9 13); want the same number"},
		{"POST", "/api/circuits", with(`"BOS 4 9 13 7 22 4 9 13 7"`, `"BOS 4 9 cat 7 22 4 9 13 7"`), 400, `clean prompt: text: symbol "cat" at position 3 is not in the vocabulary of induction`},
		{"POST", "/api/circuits", with(`"BOS 4 9 13 7 22 4 9 13 7"`, `""`), 400, "clean prompt: the sequence has 0 tokens, want 1 to 32"},
		{"POST", "/api/circuits", with(`"target": "22"`, `"target": "cat"`), 400, `target: token "cat" is not a symbol of induction; want one of`},
		{"POST", "/api/circuits", with(`"foil": "18"`, `"foil": "#99"`), 400, `foil: token "#99": want #ID with an id from 0 to 31`},
		{"POST", "/api/circuits", with(`"foil": "18"`, `"foil": "#22"`), 400, `target and foil are the same token "22"`},
		{"POST", "/api/circuits", with(`"BOS 4 9 13 7 18 4 9 13 7"`, `"BOS 4 9 13 7 22 4 9 13 7"`), 400, "the clean and corrupted prompts are the same tokens"},
		{"POST", "/api/circuits", with(`"foil": "18"`, `"foil": "18", "position": 10`), 400, "position 10; want a position of the prompts, 0 to 9"},
		// The prompts differ after the metric's position, which a causal model cannot see.
		{"POST", "/api/circuits", with(`"foil": "18"`, `"foil": "18", "position": 3`), 400, "patching: the metric is"},
		{"POST", "/api/circuits", with(`"induction"`, `"chess"`), 400, `unknown model "chess"; want one of`},
		{"POST", "/api/circuits", with(`"foil": "18"`, `"foil": "18", "seed": 1`), 400, `unknown field "seed"; want only model, clean, corrupt, target, foil, position`},
		{"POST", "/api/circuits", `{"model": "induction", "clean": 3}`, 400, `field "clean" is a JSON number; want a string`},
		{"GET", "/api/circuits", "", 405, "GET /api/circuits: method not allowed, want POST"},
		{"GET", "/api/composition?model=prev-token", "", 400, "model prev-token has 1 layer; composition is between heads of different layers"},
		{"GET", "/api/composition?model=induction&mode=q", "", 400, `unknown parameter "mode"; /api/composition takes only model`},
		{"GET", "/api/composition?model=induction&model=sort", "", 400, `parameter "model" is given 2 times`},
		{"GET", "/api/composition", "", 400, `unknown model ""`},
		{"POST", "/api/composition", `{}`, 405, "want GET"},
	} {
		status, body := call(t, c.method, c.path, c.body)
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || status != c.status || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s %s %s:\n status %d, %s\n want %d and %q", c.method, c.path, c.body, status, body, c.status, c.want)
		}
	}
}

// TestComposition checks /api/composition against circuits.Composition on a fresh copy of the
// induction model.
func TestComposition(t *testing.T) {
	status, body := call(t, "GET", "/api/composition?model=induction", "")
	var got struct {
		Model         string
		Layers, Heads int
		Baseline      float64
		Folded        bool
		Pairs         []struct {
			From, To int
			Q, K, V  [][]float64
		}
	}
	decodeOK(t, status, body, &got)
	net, _ := shipped(t, "induction")
	want, err := circuits.Composition(net, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Model != "induction" || got.Layers != 2 || got.Heads != 4 || !got.Folded || len(got.Pairs) != 1 || got.Pairs[0].From != 0 || got.Pairs[0].To != 1 ||
		!near(got.Baseline, want.Baseline, 1e-9) {
		t.Fatalf("answer %+v, want layers 2, heads 4, folded, one pair 0 → 1, baseline %g", got, want.Baseline)
	}
	for mode, g := range map[string][][]float64{"Q": got.Pairs[0].Q, "K": got.Pairs[0].K, "V": got.Pairs[0].V} {
		w, err := want.Pairs[0].Table(mode)
		if err != nil {
			t.Fatal(err)
		}
		for i := range w {
			for j := range w[i] {
				if !near(g[i][j], w[i][j], 1e-9) {
					t.Errorf("%s[%d][%d] = %g, want %g", mode, i, j, g[i][j], w[i][j])
				}
			}
		}
	}
}

// TestCircuitsUserModels patches the tiny GPT-2 and BERT folders: text through the tokenizer,
// target and foil as text of one token or as the tokenizer writes them, the [MASK] as BERT's
// metric position, the attribution of GPT-2 (with its MLPs) and the reason BERT has none.
func TestCircuitsUserModels(t *testing.T) {
	var g circuitsAnswer
	status, body := callUser(t, "POST", "/api/circuits", `{"model": "gpt2", "clean": "the cat sat on the", "corrupt": "the dog sat on the", "target": " the", "foil": "Ġa"}`)
	decodeOK(t, status, body, &g)
	last := len(g.Clean.Tokens) - 1
	if g.Position != last || g.Target.Symbol != "Ġthe" || g.Target.Piece != " the" || len(g.Clean.Pieces) != len(g.Clean.Tokens) || g.Clean.Pieces[2] != " " ||
		len(g.Heads) != 2 || len(g.Heads[0]) != 4 || len(g.Residual) != 3 || len(g.Residual[0]) != len(g.Clean.Tokens) {
		t.Fatalf("gpt2: %+v", g)
	}
	if g.DLA == nil || len(g.DLA.MLP) != 2 || !near(g.DLA.LD, g.LDClean, 1e-4) || !near(g.Residual[2][last], 1, 1e-6) || g.DLA.Softcap != 0 {
		t.Errorf("gpt2: dla %+v (want two MLPs and LD %g), residual %v", g.DLA, g.LDClean, g.Residual)
	}

	var b circuitsAnswer
	status, body = callUser(t, "POST", "/api/circuits", `{"model": "bert", "clean": "the cat [MASK] on the mat.", "corrupt": "the dog [MASK] on the mat.", "target": "sat", "foil": "is"}`)
	decodeOK(t, status, body, &b)
	if b.Position != 3 || b.Clean.Symbols[3] != "[MASK]" || b.DLA != nil || !strings.Contains(b.DLAError, "post-norm") || len(b.Residual) != 3 {
		t.Fatalf("bert: position %d (%q), dla %+v, error %q", b.Position, b.Clean.Symbols, b.DLA, b.DLAError)
	}

	// Gemma 2 caps its logits: the attribution says so, and its LD is the uncapped one.
	s, err := New(Options{Workers: 1, Models: []string{tinyFolder("gemma2")}})
	if err != nil {
		t.Fatal(err)
	}
	var c2 circuitsAnswer
	status, body = serve(s, "POST", "/api/circuits", `{"model": "gemma2", "clean": "the cat sat", "corrupt": "the hat sat", "target": "#40", "foil": "#41"}`)
	decodeOK(t, status, body, &c2)
	if c2.DLA == nil || c2.DLA.Softcap != 3 || math.Abs(c2.LDClean) >= 6 || near(c2.DLA.LD, c2.LDClean, 1e-4) {
		t.Errorf("gemma2: dla %+v, LD %g; want the soft-cap 3 and the uncapped LD", c2.DLA, c2.LDClean)
	}

	for _, c := range []struct{ body, want string }{
		{`{"model": "bert", "clean": "the cat sat on the mat.", "corrupt": "the dog sat on the mat.", "target": "sat", "foil": "is"}`, "model bert is a masked language model: write [MASK] in the clean prompt"},
		{`{"model": "bert", "clean": "the cat [MASK] on the mat.", "corrupt": "the dog [MASK] on the mat.", "target": "zebra", "foil": "is"}`, `target: token "zebra" is not in the vocabulary of bert: its text encodes as the unknown token [UNK]`},
		{`{"model": "gpt2", "clean": "the cat sat on the", "corrupt": "the dog sat on the", "target": " zebra", "foil": " a"}`, `target: token " zebra" is not in the vocabulary of gpt2, and its text encodes as 6 tokens`},
		{`{"model": "gpt2", "clean": "the cat sat on the", "corrupt": "the cats sat on the", "target": " the", "foil": " a"}`, "the clean prompt has"},
	} {
		status, body := callUser(t, "POST", "/api/circuits", c.body)
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || status != 400 || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: status %d, %s; want 400 and %q", c.body, status, body, c.want)
		}
	}
}

// TestCircuitsLongTargetError gives a target of 60,000 tokens: the error quotes it and its
// tokens clipped, so that the answer stays short (it used to list every token, 380 KB).
func TestCircuitsLongTargetError(t *testing.T) {
	body := fmt.Sprintf(`{"model": "gpt2", "clean": "the cat sat on the", "corrupt": "the dog sat on the", "target": %q, "foil": " a"}`, strings.Repeat(" zebra", 10000))
	status, answer := callUser(t, "POST", "/api/circuits", body)
	want := `{"error":"target: token \" zebra zebra zebra zebra zebra zebra zeb…\" is not in the vocabulary of gpt2, and its text encodes as 60000 tokens [\"Ġ\" \"z\" \"e\" \"b\" \"r\" \"a\" \"Ġ\" \"z\" \"e\" \"…, want 1; give a token as the tokenizer writes it, or #ID"}` + "\n"
	if status != 400 || string(answer) != want {
		t.Errorf("status %d, %d bytes: %.300s\nwant 400 and %s", status, len(answer), answer, want)
	}
}

// TestCircuitPictures draws every kind of picture of the Circuits tab as PNG and SVG, and checks
// the errors of their parameters.
func TestCircuitPictures(t *testing.T) {
	prompts := url.Values{"model": {"induction"}, "clean": {"BOS 4 9 13 7 22 4 9 13 7"}, "corrupt": {"BOS 4 9 13 7 18 4 9 13 7"}, "target": {"22"}, "foil": {"18"}}
	for _, kind := range []string{"patching", "patching-residual", "patching-patterns", "attribution", "composition"} {
		for _, format := range []string{"png", "svg"} {
			q := url.Values{"kind": {kind}, "format": {format}}
			if kind == "composition" {
				q.Set("model", "induction")
				q.Set("mode", "q")
			} else {
				for k, v := range prompts {
					q[k] = v
				}
			}
			r := getRecorded(t, "/api/picture?"+q.Encode())
			if r.Code != http.StatusOK {
				t.Fatalf("%s %s: status %d, %s", kind, format, r.Code, r.Body)
			}
			data := r.Body.Bytes()
			if format == "png" {
				if img, err := png.Decode(bytes.NewReader(data)); err != nil || img.Bounds().Dx() < 100 {
					t.Errorf("%s: not a PNG with pixels (%v)", kind, err)
				}
			} else if err := xml.Unmarshal(data, new(struct{})); err != nil || !bytes.Contains(data, []byte("<svg")) {
				t.Errorf("%s: not an SVG document (%v)", kind, err)
			}
			name := fmt.Sprintf(`attachment; filename="induction-%s.%s"`, kind, format)
			if kind == "composition" {
				name = fmt.Sprintf(`attachment; filename="induction-composition-Q.%s"`, format)
			}
			if got := r.Header().Get("Content-Disposition"); got != name {
				t.Errorf("%s: Content-Disposition %q, want %q", kind, got, name)
			}
		}
	}
	for _, c := range []struct{ query, want string }{
		{"kind=patching&model=induction&clean=BOS+1&corrupt=BOS+2&target=1&format=png", "kind=patching needs clean, corrupt, target and foil; foil missing"},
		{"kind=patching&model=induction&clean=BOS+1&corrupt=BOS+2&target=1&foil=2&seed=1&format=png", `parameter "seed" does not apply to kind=patching`},
		{"kind=patching&model=induction&clean=BOS+1&corrupt=BOS+2&target=1&foil=2&position=x&format=png", `position "x"; want a whole number`},
		{"kind=composition&model=induction&mode=o&format=svg", `mode "o"; want q, k or v`},
		{"kind=composition&model=induction&clean=BOS&format=svg", `parameter "clean" does not apply to kind=composition`},
	} {
		r := getRecorded(t, "/api/picture?"+c.query)
		var e struct{ Error string }
		if err := json.Unmarshal(r.Body.Bytes(), &e); err != nil || r.Code != 400 || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: status %d, %s; want 400 and %q", c.query, r.Code, r.Body, c.want)
		}
	}
	status, body := callUser(t, "GET", "/api/picture?"+url.Values{"model": {"bert"}, "clean": {"the cat [MASK] on the mat."}, "corrupt": {"the dog [MASK] on the mat."},
		"target": {"sat"}, "foil": {"is"}, "kind": {"attribution"}, "format": {"png"}}.Encode(), "")
	if status != 400 || !strings.Contains(string(body), "kind=attribution: model bert has no direct logit attribution") {
		t.Errorf("attribution of BERT: status %d, %s", status, body)
	}
}

// TestCircuitsDeadline checks that patching under a request that is over stops with the
// context's error, which the endpoint answers with a 503 (not a 400 about the prompts), and that
// nothing of it is kept for the next request.
func TestCircuitsDeadline(t *testing.T) {
	s, err := New(Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var req circuitsRequest
	if err := json.Unmarshal([]byte(inductionCircuit), &req); err != nil {
		t.Fatal(err)
	}
	in, err := s.circuitsInput(&req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.circuits(ctx, in); !errors.Is(err, context.Canceled) {
		t.Errorf("patching after the request is over: %v, want %v", err, context.Canceled)
	}
	if m := s.models["induction"]; len(m.circuits) != 0 {
		t.Errorf("the stopped run left %d results in the cache", len(m.circuits))
	}
}
