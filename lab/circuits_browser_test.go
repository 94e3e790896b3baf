package lab

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestBrowserCircuits drives the Circuits tab in headless Chromium: open it on the induction
// model, see the patching heatmaps of its default prompts as the API computes them, click a
// head and read its scores, attention pictures and composition, move to another head with the
// keyboard, switch the composition kind, download a picture and type prompts of different
// lengths.
func TestBrowserCircuits(t *testing.T) {
	b := newBrowser(t, Options{})
	b.do("load the page", chromedp.Navigate(b.base+"/"))
	b.wait("the first model's predictions", `document.querySelectorAll('#predictions .tile').length > 0`)
	b.do("open the Circuits tab", chromedp.Click("#tab-circuits"))
	b.wait("the head patching map", `document.querySelectorAll('#circ-heads button.cell').length === 8 && document.querySelector('#view-circuits').dataset.shown === 'induction:9'`)

	var want circuitsAnswer
	b.apiCall("/api/circuits", `{"model": "induction", "clean": "BOS 4 9 13 7 22 4 9 13 7", "corrupt": "BOS 4 9 13 11 22 4 9 13 7", "target": "22", "foil": "11"}`, &want)
	var page struct {
		LDs      string
		Cells    []string
		Residual int
		DLA      int
		Diff     []string
	}
	b.eval("read the maps", `({
		lds: document.querySelector('#circ-summary .circ-lds').textContent,
		cells: [...document.querySelectorAll('#circ-heads button.cell')].map((b) => b.getAttribute('aria-label')),
		residual: document.querySelectorAll('#circ-residual .cell').length,
		dla: document.querySelectorAll('#circ-dla button.cell').length,
		diff: [...document.querySelectorAll('#circ-summary td.diff')].map((td) => td.textContent),
	})`, &page)
	if !strings.Contains(page.LDs, fmt.Sprintf("%.3f", want.LDClean)) || !strings.Contains(page.LDs, fmt.Sprintf("%.3f", want.LDCorrupt)) {
		t.Errorf("the page shows %q, want LD clean %.3f and corrupted %.3f", page.LDs, want.LDClean, want.LDCorrupt)
	}
	if len(page.Cells) != 8 || page.Cells[5] != fmt.Sprintf("layer 1 head 1: output patching %.3f", want.Heads[1][1]) {
		t.Errorf("head cells %q, want 8 with layer 1 head 1 at %.3f", page.Cells, want.Heads[1][1])
	}
	if page.Residual != 3*10 || page.DLA != 8 || strings.Join(page.Diff, " ") != "7 11" {
		t.Errorf("%d residual cells (want 30), %d attribution cells (want 8), differing tokens %q (want 7 and 11)", page.Residual, page.DLA, page.Diff)
	}
	top := fmt.Sprintf("clean %s %.1f%%", want.Top.Clean[0].Symbol, 100*want.Top.Clean[0].P)
	b.wait("the top guesses", fmt.Sprintf(`document.querySelector('#circ-summary .circ-top').textContent.includes(%q)`, top))
	b.screenshot("lab-circuits", wholePage)

	// Click layer 0 head 1: its scores, both attention pictures and the heads that read it.
	b.do("click L0 H1", chromedp.Click(`#circ-heads button.cell[data-r="0"][data-c="1"]`))
	b.wait("the head's details", `document.querySelector('#circ-head-h').textContent === 'Layer 0 · head 1' && document.querySelectorAll('#circ-head .circ-comp-table tbody tr').length === 4`)
	b.wait("both attention pictures", `[...document.querySelectorAll('#circ-head .circ-attn img')].every((i) => i.complete && i.naturalWidth > 0 && /layer=0&head=1/.test(i.src))`)
	var head struct{ Stats, Comp string }
	b.eval("read the head", `({stats: document.querySelector('#circ-head .circ-head-stats').textContent, comp: document.querySelector('#circ-head .circ-comp-body').textContent})`, &head)
	dla := fmt.Sprintf("%.3f", want.DLA.Heads[0][1])
	if !strings.Contains(head.Stats, fmt.Sprintf("%.3f", want.Heads[0][1])) || !strings.Contains(head.Stats, strings.TrimPrefix(dla, "-")) {
		t.Errorf("head stats %q, want output patching %.3f and attribution %s", head.Stats, want.Heads[0][1], dla)
	}
	if !strings.Contains(head.Comp, "Later heads that read L0 H1") || !strings.Contains(head.Comp, "K-composition") {
		t.Errorf("composition %q, want the later heads' K-composition", head.Comp)
	}
	b.screenshot("lab-circuits-head", "#circ-head")

	// The keyboard: from the selected cell, down to layer 1 head 1, and Enter.
	b.do("move down", chromedp.Focus(`#circ-heads button.cell[data-r="0"][data-c="1"]`), chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent(kb.Enter))
	b.wait("layer 1 head 1", `document.querySelector('#circ-head-h').textContent === 'Layer 1 · head 1' && document.activeElement.matches('#circ-heads button.cell[data-r="1"][data-c="1"]')`)
	b.do("V-composition", chromedp.Click(`#circ-head .circ-modes .seg[data-mode="v"]`))
	b.wait("the V scores of the heads it reads", `document.querySelector('#circ-head .circ-comp-table thead').textContent.includes('V-composition') && document.querySelector('#circ-head .circ-comp-body').textContent.includes('Earlier heads that L1 H1 reads') && /mode=v/.test(document.querySelector('#circ-head .circ-comp-fig img').src)`)

	// Every download link answers a picture.
	var bad []string
	b.eval("fetch the downloads", `Promise.all([...document.querySelectorAll('#view-circuits a.dl')].map(async (a) => {
		const r = await fetch(a.href);
		const type = r.headers.get('Content-Type');
		return r.ok && type === (a.dataset.format === 'png' ? 'image/png' : 'image/svg+xml') ? '' : a.href + ': ' + r.status + ' ' + type;
	})).then((xs) => xs.filter((x) => x))`, &bad)
	if len(bad) > 0 {
		t.Errorf("downloads that fail: %q", bad)
	}
	var links int
	b.eval("count the downloads", `document.querySelectorAll('#view-circuits a.dl').length`, &links)
	if links != 2*7 { // four maps, two attention pictures, the composition picture: PNG and SVG each
		t.Errorf("%d download links, want 14", links)
	}

	// A corrupted prompt one token short: the banner says so, and the maps stay.
	b.do("type a short prompt", chromedp.SetValue("#circ-corrupt", "BOS 4 9 13 11 22 4 9 13"), chromedp.Click("#circ-run"))
	b.wait("the error", `!document.querySelector('#banner').hidden && document.querySelector('#banner .msg').textContent.includes('the clean prompt has 10 tokens')`)
	b.fits("the Circuits tab")
	for _, width := range []int64{1024, 1920} {
		b.do("resize the window", chromedp.EmulateViewport(width, 900))
		b.fits(fmt.Sprintf("the Circuits tab at %d px", width))
		b.screenshot(fmt.Sprintf("lab-circuits-%d", width), wholePage)
	}
}

// TestBrowserCircuitsUser drives the Circuits tab on the user's tiny BERT and GPT-2 folders: BERT
// reads the metric at its [MASK] and has no attribution (post-norm), which the page says;
// GPT-2's attribution has a column of MLPs, and a click on a head's cell there selects it.
func TestBrowserCircuitsUser(t *testing.T) {
	b := newBrowser(t, Options{Models: []string{tinyFolder("gpt2"), tinyFolder("bert")}})
	b.do("load the page", chromedp.Navigate(b.base+"/?model=bert"))
	b.wait("BERT's predictions", `document.querySelectorAll('#predictions .tile').length > 0`)
	b.do("open the Circuits tab", chromedp.Click("#tab-circuits"))
	b.wait("BERT's maps, the metric at the [MASK]", `document.querySelector('#view-circuits').dataset.shown === 'bert:3' && document.querySelectorAll('#circ-heads button.cell').length === 8`)
	var bert struct {
		DLA, Metric string
		Cells       int
	}
	b.eval("read BERT's maps", `({dla: document.querySelector('#circ-dla .circ-map').textContent, cells: document.querySelectorAll('#circ-dla button.cell').length,
		metric: document.querySelector('#circ-summary thead th.metric').textContent})`, &bert)
	if !strings.Contains(bert.DLA, "No direct logit attribution") || !strings.Contains(bert.DLA, "post-norm") || bert.Cells != 0 || bert.Metric != "3" {
		t.Errorf("BERT: attribution %q with %d cells, metric at %q; want the reason, no cells, position 3", bert.DLA, bert.Cells, bert.Metric)
	}
	b.screenshot("lab-circuits-bert", "#circ-patching")

	b.choose("#circ-model", "gpt2")
	b.wait("GPT-2's maps", `document.querySelector('#view-circuits').dataset.shown === 'gpt2:11' && document.querySelectorAll('#circ-dla button.cell').length === 2 * 5`)
	b.do("click L1 H3 in the attribution", chromedp.Click(`#circ-dla button.cell[data-r="1"][data-c="3"]`))
	b.wait("layer 1 head 3", `document.querySelector('#circ-head-h').textContent === 'Layer 1 · head 3' && document.querySelector('#circ-heads button.cell[data-r="1"][data-c="3"]').getAttribute('aria-pressed') === 'true'`)
	b.wait("its attention on both prompts", `[...document.querySelectorAll('#circ-head .circ-attn img')].every((i) => i.complete && i.naturalWidth > 0 && /model=gpt2&tokens=/.test(i.src))`)
	b.fits("the Circuits tab on GPT-2")
}

// circuitsAnswer is /api/circuits's answer as a client decodes it.
type circuitsAnswer struct {
	Model   string `json:"model"`
	Clean   promptJSON
	Corrupt promptJSON
	Target  struct {
		Token  int    `json:"token"`
		Symbol string `json:"symbol"`
		Piece  string `json:"piece"`
	} `json:"target"`
	Position int `json:"position"`
	Top      struct {
		Clean, Corrupt []struct {
			Token  int     `json:"token"`
			Symbol string  `json:"symbol"`
			P      float64 `json:"p"`
		}
	} `json:"top"`
	LDClean   float64     `json:"ld_clean"`
	LDCorrupt float64     `json:"ld_corrupt"`
	Heads     [][]float64 `json:"heads"`
	Residual  [][]float64 `json:"residual"`
	Patterns  [][]float64 `json:"patterns"`
	DLA       *dlaAnswer  `json:"dla"`
	DLAError  string      `json:"dla_error"`
}

// dlaAnswer is the attribution of /api/circuits's answer as a client decodes it.
type dlaAnswer struct {
	Heads    [][]float64 `json:"heads"`
	MLP      []float64   `json:"mlp"`
	Embed    float64     `json:"embed"`
	AttnBias []float64   `json:"attn_bias"`
	NormBias float64     `json:"norm_bias"`
	HeadBias float64     `json:"head_bias"`
	LD       float64     `json:"ld"`
	Softcap  float64     `json:"logit_softcap"`
}
