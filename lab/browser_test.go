package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/mhalab/mha/experiment"
	"github.com/mhalab/mha/nn"
)

// chromium returns the path of a Chromium or Chrome binary, or "" when there is none.
func chromium() string {
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// browser drives one headless Chromium tab against a lab server.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string // the server's URL, without a trailing slash
	shot string // the directory of screenshots, or ""

	mu     sync.Mutex
	errors []string // JavaScript exceptions and console errors
}

// do runs the actions with a time limit, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression (awaiting a promise) and decodes its value into v.
func (b *browser) eval(what, expr string, v any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("%s: %v in %s", what, err, raw)
	}
}

// wait polls a JavaScript condition until it holds.
func (b *browser) wait(what, cond string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		b.t.Fatalf("waiting for %s (%s): %v", what, cond, err)
	}
}

// hover moves the mouse to the centre of the element sel, scrolled into view.
func (b *browser) hover(sel string) {
	b.t.Helper()
	var at struct{ X, Y float64 }
	b.eval("locate "+sel, fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect();
		return {x: r.left + r.width / 2, y: r.top + r.height / 2};
	})()`, sel), &at)
	b.do("hover "+sel, chromedp.MouseEvent(chromedp.MouseMoved, at.X, at.Y))
}

// choose sets a <select> to value as a user would, firing its change event.
func (b *browser) choose(sel, value string) {
	b.t.Helper()
	var ok bool
	b.eval("choose "+value, fmt.Sprintf(`(() => {
		const s = document.querySelector(%q);
		s.value = %q;
		s.dispatchEvent(new Event('change', {bubbles: true}));
		return s.value === %q;
	})()`, sel, value, value), &ok)
	if !ok {
		b.t.Fatalf("%s has no option %q", sel, value)
	}
}

// fits checks that the page fits the window's width: that it does not scroll sideways, and that
// every control shown (button, input, select, link, focusable element) lies inside the window
// and is not cut off by a box that clips or scrolls it sideways.
func (b *browser) fits(what string) {
	b.t.Helper()
	var bad []string
	b.eval("fit "+what, `(() => {
		window.scrollTo(0, window.scrollY);
		const width = document.documentElement.clientWidth;
		const name = (e) => {
			const text = e.textContent.trim().slice(0, 24);
			return e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + [...e.classList].map((c) => '.' + c).join('') + (text ? ' “' + text + '”' : '');
		};
		const span = (r) => Math.round(r.left) + '–' + Math.round(r.right);
		const bad = [];
		if (document.documentElement.scrollWidth > width) {
			bad.push('the page is ' + document.documentElement.scrollWidth + ' px wide, the window ' + width);
		}
		for (const c of document.querySelectorAll('button, input, select, textarea, a[href], [tabindex]:not([tabindex="-1"])')) {
			const r = c.getBoundingClientRect();
			if (r.width === 0 && r.height === 0) continue; // not shown
			if (r.left < 0 || r.right > width) {
				bad.push(name(c) + ' spans x ' + span(r) + ', outside the window, 0–' + width);
				continue;
			}
			for (let a = c.parentElement; a; a = a.parentElement) {
				if (getComputedStyle(a).overflowX === 'visible') continue;
				const left = a.getBoundingClientRect().left + a.clientLeft, right = left + a.clientWidth;
				if (r.left < left - 0.5 || r.right > right + 0.5) {
					bad.push(name(c) + ' spans x ' + span(r) + ', cut off by ' + name(a).slice(0, 40) + ', which shows ' + span({left, right}));
					break;
				}
			}
		}
		return bad;
	})()`, &bad)
	if len(bad) > 0 {
		b.t.Errorf("%s: %d problems:\n%s", what, len(bad), strings.Join(bad, "\n"))
	}
}

// Screenshot subjects besides an element's selector.
const (
	wholePage = ""          // the whole page, scrolled through
	topOfPage = ":viewport" // the window, scrolled to the top
)

// screenshot saves the element sel, wholePage or topOfPage as NAME.png in the screenshot
// directory, when there is one.
func (b *browser) screenshot(name, sel string) {
	b.t.Helper()
	if b.shot == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	var (
		png []byte
		err error
	)
	switch sel {
	case wholePage:
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	case topOfPage:
		if err = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err == nil {
			png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		}
	default:
		png, err = chromedp.Run(ctx, chromedp.Screenshot(sel, chromedp.NodeVisible))
	}
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// newBrowser starts the lab with opt on a loopback port and a headless Chromium on its page. The
// test skips when there is no Chromium, unless MHA_REQUIRE_BROWSER=1 asks it to fail.
// Screenshots go to the directory MHA_SCREENSHOTS names, if any.
func newBrowser(t *testing.T, opt Options) *browser {
	path := chromium()
	if path == "" {
		if os.Getenv("MHA_REQUIRE_BROWSER") == "1" {
			t.Fatal("MHA_REQUIRE_BROWSER=1 but no Chromium binary was found (/usr/bin/chromium, chromium, chromium-browser, google-chrome)")
		}
		t.Skip("no Chromium binary found (install Debian's chromium); set MHA_REQUIRE_BROWSER=1 to make this a failure")
	}
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	b := &browser{t: t, ctx: tab, base: "http://" + ln.Addr().String(), shot: os.Getenv("MHA_SCREENSHOTS")}
	if b.shot != "" {
		if err := os.MkdirAll(b.shot, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(tab); err != nil { // starts the browser, with no time limit on the tab's context
		t.Fatalf("starting %s: %v", path, err)
	}
	if err := chromedp.Listen(tab, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.errors = append(b.errors, "console.error: "+strings.Join(args, " "))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Errorf("page error: %s", e)
		}
	})
	return b
}

// apiCall asks the server the test drives for an answer, as the page does, to know what the
// page must show.
func (b *browser) apiCall(path, body string, v any) {
	b.t.Helper()
	res, err := http.Post(b.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil || res.StatusCode != 200 {
		b.t.Fatalf("%s: status %d, %v", path, res.StatusCode, err)
	}
}

// TestBrowser drives the lab in headless Chromium as a researcher would: pick the induction
// model, generate a sequence, hover tokens in the head view, enlarge a head of the model view,
// ablate the induction heads, download a picture, type a bad sequence, run an experiment; and
// checks what the page shows against the API.
func TestBrowser(t *testing.T) {
	b := newBrowser(t, Options{})
	// Record what the Content-Security-Policy refuses (an inline style, a foreign script).
	if _, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.cspViolations = [];
			document.addEventListener('securitypolicyviolation', (e) => cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));`,
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		var refused []string
		b.eval("CSP violations", `window.cspViolations`, &refused)
		if len(refused) > 0 {
			t.Errorf("the Content-Security-Policy refused %q", refused)
		}
	}()
	b.do("load the page", chromedp.Navigate(b.base+"/"))
	b.wait("the first model's predictions", `document.querySelectorAll('#predictions .tile').length > 0`)

	// Pick another model, then the induction model, and generate the sequence of seed 3.
	b.choose("#model", "sort")
	b.wait("sort's 16 positions", `document.querySelectorAll('#predictions .tile').length === 16`)
	b.choose("#model", "induction")
	b.wait("induction's 32 positions", `document.querySelectorAll('#predictions .tile').length === 32`)
	var run runAnswer
	b.apiCall("/api/run", `{"model": "induction", "seed": 3}`, &run)
	b.do("generate seed 3", chromedp.SetValue("#seed", "3"), chromedp.Click("#generate"))
	want := strings.Join(run.Symbols, " ")
	b.wait("the generated sequence", fmt.Sprintf(`document.querySelector('#seq').value === %q`, want))

	// Every scored position is marked, right or wrong as the model's top guess says.
	var marks struct{ Right, Wrong int }
	b.eval("count marks", `({right: document.querySelectorAll('.tile.right').length, wrong: document.querySelectorAll('.tile.wrong').length})`, &marks)
	right, wrong := 0, 0
	for _, p := range run.Predictions {
		switch {
		case p.Correct == nil:
		case *p.Correct:
			right++
		default:
			wrong++
		}
	}
	if marks.Right != right || marks.Wrong != wrong || right == 0 {
		t.Fatalf("page marks %d right and %d wrong, want %d and %d", marks.Right, marks.Wrong, right, wrong)
	}
	b.screenshot("lab-page", wholePage)
	b.screenshot("lab-predictions", "#predictions-card")

	// Head view, layer 1, all heads: hover query q; only its lines stay, as many as its
	// weights ≥ 0.01.
	const q = 20
	b.wait("the head view of layer 1", `document.querySelector('#headview .hv-layer').value === '1'`)
	lines := func(layer, query, key int) int {
		n := 0
		for h := range run.Weights[layer] {
			for k, a := range run.Weights[layer][h][query] {
				if a >= 0.01 && (key < 0 || k == key) {
					n++
				}
			}
		}
		return n
	}
	b.hover(fmt.Sprintf(`#headview .col.q .tok[data-i="%d"] .hit`, q))
	b.wait("focus on the query", fmt.Sprintf(`document.querySelector('#headview').dataset.focus === 'q%d'`, q))
	var focus struct {
		Visible, Foreign int
		Info             string
	}
	countLines := func(side string, i int) {
		b.eval("count lines", fmt.Sprintf(`(() => {
			const on = [...document.querySelectorAll('#headview .edge:not(.off)')];
			return {visible: on.length, foreign: on.filter((e) => e.dataset[%q] !== '%d').length,
				info: document.querySelector('#headview .focus-info').textContent};
		})()`, side, i), &focus)
	}
	countLines("q", q)
	if want := lines(1, q, -1); focus.Visible != want || focus.Foreign != 0 || !strings.HasPrefix(focus.Info, fmt.Sprintf("Query %d “%s”: %d lines", q, run.Symbols[q], want)) {
		t.Fatalf("hovering query %d: %+v, want %d lines, all of it", q, focus, want)
	}
	b.screenshot("lab-headview-hover", "#headview")

	// The keyboard reaches the key side: focus key k and count the lines into it.
	n := slices.Index(run.Tokens[1:], run.Tokens[q]) + 1 // first copy of the query's token
	k := n + 1                                           // the key an induction head reads
	b.do("focus a key", chromedp.Focus(fmt.Sprintf(`#headview .col.k .tok[data-i="%d"]`, k)))
	b.wait("focus on the key", fmt.Sprintf(`document.querySelector('#headview').dataset.focus === 'k%d'`, k))
	countLines("k", k)
	wantKey := 0
	for qq := range run.Tokens {
		wantKey += lines(1, qq, k)
	}
	if focus.Visible != wantKey || focus.Foreign != 0 {
		t.Fatalf("focusing key %d: %+v, want %d lines into it", k, focus, wantKey)
	}

	// Model view: enlarge layer 1 head 2 and read the weight of (q, k) on hover.
	b.do("enlarge L1 H2", chromedp.Click(`#modelview .thumb[data-layer="1"][data-head="2"]`))
	b.wait("the enlarged head", `document.querySelector('#modelview .mv-title').textContent === 'Layer 1 · head 2'`)
	var at struct{ X, Y float64 }
	b.eval("locate a cell", fmt.Sprintf(`(() => {
		const c = document.querySelector('#modelview .mv-detail canvas');
		c.scrollIntoView({block: 'center'});
		const r = c.getBoundingClientRect(), d = c.dataset;
		return {x: r.left + +d.x0 + (%d + 0.5) * +d.cell, y: r.top + +d.y0 + (%d + 0.5) * +d.cell};
	})()`, k, q), &at)
	b.do("hover a cell", chromedp.MouseEvent(chromedp.MouseMoved, at.X, at.Y))
	tip := fmt.Sprintf("query %d “%s” → key %d “%s”: α = %.4f", q, run.Symbols[q], k, run.Symbols[k], run.Weights[1][2][q][k])
	b.wait("the weight's tooltip", fmt.Sprintf(`document.querySelector('#modelview .tip').textContent === %q`, tip))
	b.screenshot("lab-modelview", "#modelview")
	// The keyboard reads the weights too: focus the matrix, then one key to the left.
	b.do("read with the keyboard", chromedp.Focus(`#modelview .mv-detail canvas`), chromedp.KeyEvent(kb.ArrowLeft))
	tip = fmt.Sprintf("query %d “%s” → key %d “%s”: α = %.4f", q, run.Symbols[q], k-1, run.Symbols[k-1], run.Weights[1][2][q][k-1])
	b.wait("the weight left of it", fmt.Sprintf(`document.querySelector('#modelview .tip').textContent === %q`, tip))

	// Ablate the four heads of layer 1 from the metrics table; the page must show the
	// prediction changes and the loss and accuracy the API computes.
	for h := range 4 {
		b.do("add a head", chromedp.Click(fmt.Sprintf(`#heads table.metrics tbody tr[data-layer="1"][data-head="%d"] button`, h)))
	}
	b.wait("four chosen heads", `document.querySelectorAll('#ablation .chip').length === 4`)
	b.choose(`#ablation .chip:nth-child(2) select`, "uniform")
	var abl struct {
		Positions []struct{ Changed bool }
		Sequence  *struct {
			Before, After struct{ Loss, Accuracy float64 }
		}
		Task struct {
			Sequences     int
			Before, After struct{ Loss, Accuracy float64 }
		}
	}
	b.apiCall("/api/ablate", `{"model": "induction", "seed": 3, "ablate": [{"layer": 1, "head": 0, "mode": "zero"},
		{"layer": 1, "head": 1, "mode": "uniform"}, {"layer": 1, "head": 2, "mode": "zero"}, {"layer": 1, "head": 3, "mode": "zero"}]}`, &abl)
	b.do("ablate", chromedp.Click("#ablation .ab-run"))
	b.wait("the ablation's result", `document.querySelectorAll('#ablation .ab-table tbody tr').length === 32`)
	changed := 0
	for _, p := range abl.Positions {
		if p.Changed {
			changed++
		}
	}
	var shown struct {
		Changed, Rows int
		Seq, Task     string
	}
	b.eval("read the ablation", `({changed: +document.querySelector('#ablation').dataset.changed,
		rows: document.querySelectorAll('#ablation .ab-table tr.changed').length,
		seq: document.querySelector('#ablation .outcome[data-scope=sequence]').textContent,
		task: document.querySelector('#ablation .outcome[data-scope=task]').textContent})`, &shown)
	if changed == 0 || shown.Changed != changed || shown.Rows != changed {
		t.Fatalf("the page shows %d changed predictions (%d rows), want %d", shown.Changed, shown.Rows, changed)
	}
	checkOutcome(t, "sequence", shown.Seq, abl.Sequence.Before.Loss, abl.Sequence.After.Loss, abl.Sequence.Before.Accuracy, abl.Sequence.After.Accuracy)
	checkOutcome(t, "task", shown.Task, abl.Task.Before.Loss, abl.Task.After.Loss, abl.Task.Before.Accuracy, abl.Task.After.Accuracy)
	b.screenshot("lab-ablation", "#ablation")

	// Download the enlarged head as PNG from the page's link: a PNG, the server's picture.
	var dl struct {
		Status   int
		Type     string
		Head     []int
		Size     int
		Download string
	}
	b.eval("download", `(async () => {
		const a = document.querySelector('#modelview .head-downloads a[data-format=png]');
		const r = await fetch(a.href);
		const bytes = new Uint8Array(await r.arrayBuffer());
		return {status: r.status, type: r.headers.get('content-type'), head: [...bytes.slice(0, 8)], size: bytes.length, download: a.download};
	})()`, &dl)
	if dl.Status != 200 || dl.Type != "image/png" || !slices.Equal(dl.Head, []int{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}) || dl.Download != "induction-L1H2.png" {
		t.Fatalf("download: %+v, want a PNG named induction-L1H2.png", dl)
	}
	res, err := http.Get(b.base + "/api/picture?model=induction&seed=3&kind=head&layer=1&head=2&format=png")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ContentLength != int64(dl.Size) {
		t.Fatalf("the page downloaded %d bytes, the picture has %d", dl.Size, res.ContentLength)
	}

	// The task-wide measures, with importance.
	b.do("task scope", chromedp.Click(`#heads .seg[data-scope=task]`))
	b.wait("importance", `[...document.querySelectorAll('#heads td[data-key=importance]')].every((td) => td.textContent !== '–')`)
	// The head pairs' downloads now draw the task's measures: a picture of no sequence.
	var pair struct {
		Status int
		Href   string
	}
	b.eval("a head-pair download in task scope", `(async () => {
		const a = document.querySelector('#heads figure.pair a[data-format=png]');
		const r = await fetch(a.href);
		return {status: r.status, href: a.href};
	})()`, &pair)
	if pair.Status != 200 || !strings.Contains(pair.Href, "scope=task") || strings.Contains(pair.Href, "seed=") {
		t.Fatalf("head-pair download in task scope: %+v, want status 200 from an address with scope=task and no seed", pair)
	}
	// Sorting by importance puts the most important head first.
	b.do("sort by importance", chromedp.Click(`#heads button.sort[data-key=importance]`))
	var column []float64
	b.eval("the importance column", `[...document.querySelectorAll('#heads td[data-key=importance]')].map((td) => +td.textContent)`, &column)
	if len(column) != 8 || !slices.IsSortedFunc(column, func(a, b float64) int { return cmp.Compare(b, a) }) {
		t.Fatalf("importance column after sorting: %v, want 8 values, largest first", column)
	}
	b.screenshot("lab-heads", "#heads")

	// The pruning curve shows in task scope: the server's picture, a PNG behind its link, and
	// the order in which the heads were removed with the scores of /api/heads.
	b.wait("the pruning curve", `(() => {
		const i = document.querySelector('#heads .prune-img');
		return !document.querySelector('#heads .pruning').hidden && i.complete && i.naturalWidth > 0;
	})()`)
	var task struct {
		Pruning []struct {
			Removed  int
			Accuracy float64
			Last     *struct{ Layer, Head int }
		}
	}
	b.apiCall("/api/heads", `{"model": "induction"}`, &task)
	var steps []string
	b.eval("the pruning table", `[...document.querySelectorAll('#heads .prune-table tbody tr')].map((tr) =>
		[...tr.cells].map((td) => td.textContent).join(' | '))`, &steps)
	if len(steps) != 9 || len(task.Pruning) != 9 {
		t.Fatalf("pruning table %q, API %d points; want 9 (0 to 8 heads removed)", steps, len(task.Pruning))
	}
	for i, p := range task.Pruning {
		head := "none (the model as trained)"
		if p.Last != nil {
			head = fmt.Sprintf("L%d H%d", p.Last.Layer, p.Last.Head)
		}
		if want := fmt.Sprintf("%d · %.1f%% | %s | %.1f%% | ", p.Removed, 100*float64(p.Removed)/8, head, 100*p.Accuracy); !strings.HasPrefix(steps[i], want) {
			t.Fatalf("pruning step %d: %q, want it to start %q", i, steps[i], want)
		}
	}
	var curve struct {
		Status   int
		Type     string
		Head     []int
		Download string
	}
	b.eval("the curve's PNG", `(async () => {
		const a = document.querySelector('#heads .curve-downloads a[data-format=png]');
		const r = await fetch(a.href);
		const bytes = new Uint8Array(await r.arrayBuffer());
		return {status: r.status, type: r.headers.get('content-type'), head: [...bytes.slice(0, 8)], download: a.download};
	})()`, &curve)
	if curve.Status != 200 || curve.Type != "image/png" || !slices.Equal(curve.Head, []int{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}) || curve.Download != "induction-pruning-accuracy.png" {
		t.Fatalf("the pruning curve's PNG link: %+v, want a PNG named induction-pruning-accuracy.png", curve)
	}
	b.do("show the loss", chromedp.Click(`#heads .pruning .seg[data-metric=loss]`))
	b.wait("the loss curve", `(() => {
		const i = document.querySelector('#heads .prune-img');
		return new URL(i.src).searchParams.get('metric') === 'loss' && i.complete && i.naturalWidth > 0;
	})()`)
	b.screenshot("lab-pruning", "#heads .pruning")

	// Sparse attention: run the sequence under patterns and sparsemax. The enlarged head shows
	// its share of exact zeros, a red dot on each, and the empty blocks hatched on their fill;
	// its picture's link carries the same fields.
	b.do("sparse attention", chromedp.SetValue("#patterns", "local:2 global:0"), chromedp.SetValue("#block", "4,4"),
		chromedp.SetValue("#normalizer", "sparsemax"), chromedp.Click("#run"))
	b.wait("the sparse run", `!document.querySelector('#modelview .mv-sparsity').hidden`)
	var sparse sparseAnswer
	b.apiCall("/api/run", `{"model": "induction", "seed": 3, "patterns": ["local:2", "global:0"], "block": [4, 4], "normalizer": "sparsemax"}`, &sparse)
	var sel struct{ Layer, Head int }
	b.eval("the enlarged head", `({layer: +document.querySelector('#modelview .mv-detail').dataset.layer, head: +document.querySelector('#modelview .mv-detail').dataset.head})`, &sel)
	title := fmt.Sprintf("Layer %d · head %d · %.0f%% of the visible weights exactly 0", sel.Layer, sel.Head, 100*sparse.Sparsity.Zeros[sel.Layer][sel.Head])
	b.wait("its share of zeros", fmt.Sprintf(`document.querySelector('#modelview .mv-title').textContent === %q`, title))
	zq, zk, eq, ek := -1, -1, -1, -1
	for q, row := range sparse.Weights[sel.Layer][sel.Head] {
		for k, a := range row {
			if zq < 0 && a == 0 && sparse.Sparsity.Visible[q][k] == '1' {
				zq, zk = q, k
			}
			if eq < 0 && sparse.Sparsity.Blocks[q/4][k/4] == "empty" {
				eq, ek = q/4*4, k/4*4
			}
		}
	}
	if zq < 0 || eq < 0 {
		t.Fatalf("no visible zero (%d) or no empty block (%d) to look at", zq, eq)
	}
	var px struct {
		Zero       []int
		Fill, Size int
	}
	b.eval("the overlay's pixels", fmt.Sprintf(`(() => {
		const c = document.querySelector('#modelview .mv-detail canvas'), d = c.dataset;
		const r = c.width / c.getBoundingClientRect().width, ctx = c.getContext('2d');
		const at = (q, k, f) => [Math.round((+d.x0 + (k + f) * +d.cell) * r), Math.round((+d.y0 + (q + f) * +d.cell) * r)];
		const [zx, zy] = at(%d, %d, 0.5);
		const [x0, y0] = at(%d, %d, 0), [x1, y1] = at(%[3]d + 4, %[4]d + 4, 0);
		const img = ctx.getImageData(x0, y0, x1 - x0, y1 - y0).data;
		let fill = 0;
		for (let i = 0; i < img.length; i += 4) if (img[i] === 243 && img[i + 1] === 238 && img[i + 2] === 227) fill++;
		return {zero: [...ctx.getImageData(zx, zy, 1, 1).data.slice(0, 3)], fill, size: img.length / 4};
	})()`, zq, zk, eq, ek), &px)
	if !slices.Equal(px.Zero, []int{255, 79, 46}) || px.Fill < px.Size/3 {
		t.Fatalf("the zero at (%d, %d) is drawn %v, want the red mark; the empty block at (%d, %d) has %d of %d pixels in its fill, want a third or more",
			zq, zk, px.Zero, eq, ek, px.Fill, px.Size)
	}
	var href string
	b.eval("the head's picture", `document.querySelector('#modelview .head-downloads a[data-format=png]').href`, &href)
	if !strings.Contains(href, "patterns=local%3A2+global%3A0&block=4%2C4&normalizer=sparsemax") {
		t.Fatalf("the head's picture %s lacks the sparse attention", href)
	}
	b.screenshot("lab-modelview-sparse", "#modelview")

	// Under causal attention, global:5 leaves queries 0 to 4 no key (neither they nor the keys
	// they may see are global): the note says so.
	b.do("a pattern that leaves queries no key", chromedp.SetValue("#patterns", "global:5"), chromedp.SetValue("#block", "64,64"),
		chromedp.SetValue("#normalizer", "softmax"), chromedp.Click("#run"))
	b.wait("the note on queries without a key", `document.querySelector('#modelview .mv-sparsity').textContent.includes("5 queries see no key: their weights and their heads' outputs are 0.")`)
	b.do("back to the model's own attention", chromedp.SetValue("#patterns", "none"))

	// A typed sequence with an unknown symbol: the error banner says which.
	b.do("type a bad sequence", chromedp.SetValue("#seq", "BOS 1 cat"), chromedp.Click("#run"))
	b.wait("the error banner", `!document.querySelector('#banner').hidden`)
	var msg string
	b.eval("banner", `document.querySelector('#banner .msg').textContent`, &msg)
	if !strings.Contains(msg, `symbol "cat" at position 2 is not in the vocabulary of induction`) {
		t.Fatalf("banner %q", msg)
	}
	b.screenshot("lab-error", topOfPage)

	// Experiments: the list, and one run with its table and pictures.
	b.do("experiments", chromedp.Click("#tab-experiments"))
	b.wait("the list", fmt.Sprintf(`document.querySelectorAll('.ex-item').length === %d`, len(experiment.Names())))
	b.do("run params", chromedp.Click(`.ex-item[data-name=params]`))
	b.wait("its table and pictures", `document.querySelector('.ex-result table') !== null &&
		[...document.querySelectorAll('.ex-fig img')].every((i) => i.complete && i.naturalWidth > 0)`)
	b.screenshot("lab-experiments", wholePage)

	// From 1280 pixels wide up, the page fits the window, with the heads card in task scope,
	// the ablation's result and an experiment's result shown.
	for _, width := range []int64{1280, 1400, 1920} {
		b.do("resize the window", chromedp.EmulateViewport(width, 900), chromedp.Click("#tab-attention"))
		b.fits(fmt.Sprintf("the attention view at %d px", width))
		b.screenshot(fmt.Sprintf("lab-page-%d", width), wholePage)
		b.do("experiments", chromedp.Click("#tab-experiments"))
		b.fits(fmt.Sprintf("the experiments view at %d px", width))
		b.screenshot(fmt.Sprintf("lab-experiments-%d", width), wholePage)
	}

	// The page stays usable at 1024 pixels wide.
	b.do("narrow window", chromedp.EmulateViewport(1024, 800), chromedp.Click("#tab-attention"))
	b.fits("the attention view at 1024 px")
	b.screenshot("lab-narrow", wholePage)
}

// checkOutcome checks an ablation outcome's text, "loss 0.0123 → 1.2345 … accuracy 100.0% →
// 25.0% …", against the numbers.
func checkOutcome(t *testing.T, scope, text string, loss0, loss1, acc0, acc1 float64) {
	t.Helper()
	m := regexp.MustCompile(`loss([\d.]+) → ([\d.]+).*accuracy([\d.]+)% → ([\d.]+)%`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s outcome %q: no loss and accuracy", scope, text)
	}
	for i, want := range []float64{loss0, loss1, 100 * acc0, 100 * acc1} {
		got, _ := strconv.ParseFloat(m[i+1], 64)
		tol := 0.00005 + 1e-9
		if i >= 2 {
			tol = 0.05 + 1e-9
		}
		if got < want-tol || got > want+tol {
			t.Fatalf("%s outcome %q: %v, want %v", scope, text, got, want)
		}
	}
}

// TestBrowserUserModels drives the lab on the tiny GPT-2 and BERT folders as `mha lab --model`
// serves them: choose the model, type text, read the tokenizer's pieces on the tiles, hover a
// token of the head view, enlarge a head, see the rollout, measure on repeated tokens, ablate a
// head; then BERT's guesses at a [MASK].
func TestBrowserUserModels(t *testing.T) {
	// And a checkpoint of 12 layers × 12 heads without a task or a tokenizer, the shape of
	// GPT-2 small, to see that the views stay readable.
	deep := filepath.Join(t.TempDir(), "deep.safetensors")
	net, err := nn.NewModel(nn.Config{Vocab: 50, SeqLen: 32, DModel: 24, Heads: 12, Layers: 12, Norm: nn.PreNorm, Positions: nn.Learned, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := nn.Save(deep, net, nil, nil); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, Options{Models: []string{tinyFolder("gpt2"), tinyFolder("bert"), deep}})
	b.do("load the page", chromedp.Navigate(b.base+"/"))
	b.wait("the first model's predictions", `document.querySelectorAll('#predictions .tile').length > 0`)
	var groups []string
	b.eval("the model list", `[...document.querySelectorAll('#model optgroup')].map((g) => g.label + ': ' + [...g.children].map((o) => o.value).join(' '))`, &groups)
	if len(groups) != 2 || groups[1] != "Your models (--model): gpt2 bert deep" {
		t.Fatalf("model list %q, want the shipped models, then gpt2 and bert", groups)
	}

	b.choose("#model", "gpt2")
	b.wait("gpt2's first text", `document.querySelector('#predictions').dataset.predicts === 'next' && !document.querySelector('#generate').checkVisibility()`)
	const text = "The cat sat on"
	var run userAnswer
	b.apiCall("/api/run", `{"model": "gpt2", "text": "`+text+`"}`, &run)
	b.do("type text", chromedp.SetValue("#seq", text), chromedp.Click("#run"))
	b.wait("the text's tiles", fmt.Sprintf(`document.querySelectorAll('#predictions .tile').length === %d`, len(run.Tokens)))
	var tiles []string
	b.eval("read the tiles", `[...document.querySelectorAll('#predictions .tile .tok')].map((e) => e.textContent)`, &tiles)
	for i, p := range run.Pieces {
		want := p
		if strings.TrimSpace(p) == "" {
			want = strings.Repeat("␣", len(p))
		}
		if tiles[i] != want {
			t.Fatalf("tile %d reads %q, want the piece %q (tokenizer: %q)", i, tiles[i], want, run.Symbols[i])
		}
	}
	// The text, cut into its tokens: the pieces' spans read as the text.
	var strip struct {
		Text   string
		Pieces int
	}
	b.eval("the text strip", `({text: document.querySelector('#text-strip').textContent, pieces: document.querySelectorAll('#text-strip .piece').length})`, &strip)
	if strip.Text != text || strip.Pieces != len(run.Tokens) {
		t.Fatalf("text strip %+v, want %q in %d pieces", strip, text, len(run.Tokens))
	}
	var marks struct{ Right, Wrong int }
	b.eval("count marks", `({right: document.querySelectorAll('.tile.right').length, wrong: document.querySelectorAll('.tile.wrong').length})`, &marks)
	if marks.Right+marks.Wrong != len(run.Tokens)-1 {
		t.Fatalf("%d tiles marked, want every position but the last (%d)", marks.Right+marks.Wrong, len(run.Tokens)-1)
	}

	// Hover query q in the head view of layer 1: its lines only, as many as its weights ≥ 0.01.
	q := len(run.Tokens) - 1
	b.hover(fmt.Sprintf(`#headview .col.q .tok[data-i="%d"] .hit`, q))
	b.wait("focus on the query", fmt.Sprintf(`document.querySelector('#headview').dataset.focus === 'q%d'`, q))
	want := 0
	for h := range run.Weights[1] {
		for _, a := range run.Weights[1][h][q] {
			if a >= 0.01 {
				want++
			}
		}
	}
	var visible int
	b.eval("count lines", `document.querySelectorAll('#headview .edge:not(.off)').length`, &visible)
	if visible != want {
		t.Fatalf("hovering query %d: %d lines, want %d", q, visible, want)
	}
	// The token's words light up in the text and its tile.
	var hot []string
	b.eval("the highlighted token", `[...document.querySelectorAll('#text-strip .hot, #predictions .tile.hot')].map((e) => e.dataset.pos)`, &hot)
	if len(hot) != 2 || hot[0] != strconv.Itoa(q) || hot[1] != strconv.Itoa(q) {
		t.Fatalf("hovering query %d highlights %v, want its span in the text and its tile", q, hot)
	}

	// Enlarge layer 0 head 2; the offsets picture follows the selection.
	b.do("enlarge L0 H2", chromedp.Click(`#modelview .thumb[data-layer="0"][data-head="2"]`))
	b.wait("the enlarged head", `document.querySelector('#modelview .mv-title').textContent === 'Layer 0 · head 2'`)
	b.wait("the offsets of L0 H2", `document.querySelector('#flow .offsets-img').src.includes('layer=0&head=2') && document.querySelector('#flow .offsets-img').naturalWidth > 0`)
	b.wait("the rollout picture", `document.querySelector('#flow .rollout-img').naturalWidth > 0`)
	b.screenshot("lab-user-gpt2", wholePage)
	b.fits("gpt2")

	// Measured on repeated random tokens: a row per head, no pruning curve.
	b.do("repeated tokens", chromedp.Click("#scope-task"))
	b.wait("the repeated-token measures", `document.querySelector('#heads-about').textContent.includes('repeated once') && document.querySelector('#heads .pruning').hidden`)

	// Ablate the selected head: the next-token loss before and after, no task card.
	b.do("ablate L0 H2", chromedp.Click("#mv-ablate"), chromedp.Click("#ablation .ab-run"))
	b.wait("the ablation's result", `document.querySelectorAll('#ablation .outcome').length === 1 && document.querySelector('#ablation .outcome').dataset.scope === 'sequence'`)

	// A text longer than the model takes: the API's message in the banner.
	b.do("type a long text", chromedp.SetValue("#seq", strings.Repeat("cat ", 10)), chromedp.Click("#run"))
	b.wait("the error", `!document.querySelector('#banner').hidden && document.querySelector('#banner .msg').textContent.includes('want 1 to 16 (the seq_len of gpt2)')`)

	// BERT: the guesses at the [MASK] position, on a tile of its own.
	b.choose("#model", "bert")
	b.wait("bert's first text", `document.querySelector('#predictions').dataset.predicts === 'masked' && document.querySelectorAll('#predictions .tile.masked').length === 1`)
	var masked userAnswer
	b.apiCall("/api/run", `{"model": "bert", "text": "the cat [MASK] on the mat."}`, &masked)
	i := slices.IndexFunc(masked.Predictions, func(p userPrediction) bool { return p.Masked })
	var guess struct{ Pos, Top string }
	b.eval("the masked tile", `(() => { const t = document.querySelector('#predictions .tile.masked');
		return {pos: t.dataset.pos, top: t.querySelector('.top1 .sym').textContent}; })()`, &guess)
	if guess.Pos != strconv.Itoa(i) || guess.Top != masked.Predictions[i].Top[0].Piece {
		t.Fatalf("masked tile %+v, want position %d guessing %q", guess, i, masked.Predictions[i].Top[0].Piece)
	}
	// A bidirectional head attends to later keys: the head view draws lines to them.
	var later int
	b.eval("lines to later keys", `[...document.querySelectorAll('#headview .edge')].filter((e) => +e.dataset.k > +e.dataset.q).length`, &later)
	if later == 0 {
		t.Fatal("BERT's head view draws no line from a query to a later key")
	}
	b.screenshot("lab-user-bert", topOfPage)

	// 12 × 12 heads: token ids typed, thumbnails that fit the card (no sideways scrolling), one
	// head's lines at a time in the head view, a metrics row per head.
	b.choose("#model", "deep")
	b.wait("deep's first sequence", `document.querySelectorAll('#predictions .tile').length === 8`)
	b.do("type ids", chromedp.SetValue("#seq", "3 14 15 9 26 5 3 14 15 9 26 5"), chromedp.Click("#run"))
	b.wait("the typed ids", `document.querySelectorAll('#predictions .tile').length === 12 && document.querySelectorAll('#heads table.metrics tbody tr').length === 144`)
	var view struct {
		Thumbs, Thumb, Shown int
		Scrolls              bool
	}
	b.eval("the views of 144 heads", `(() => {
		const g = document.querySelector('#modelview .mv-scroll');
		return {thumbs: document.querySelectorAll('#modelview .thumb').length, thumb: +document.querySelector('#modelview').dataset.thumb,
			shown: document.querySelectorAll('#headview .head-toggles input:checked').length, scrolls: g.scrollWidth > g.clientWidth};
	})()`, &view)
	if view.Thumbs != 144 || view.Thumb < 40 || view.Shown != 1 || view.Scrolls {
		t.Fatalf("12 × 12 heads: %+v, want 144 thumbnails of at least 40 px that fit across, one head in the head view", view)
	}
	b.do("enlarge L11 H11", chromedp.Click(`#modelview .thumb[data-layer="11"][data-head="11"]`))
	b.wait("the enlarged head", `document.querySelector('#modelview .mv-title').textContent === 'Layer 11 · head 11'`)
	b.fits("12 × 12 heads")
	b.screenshot("lab-user-deep", wholePage)
}
