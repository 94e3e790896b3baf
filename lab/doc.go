// Package lab is mha's web lab: a page embedded in the binary, served with a JSON API, that
// shows and measures what every head of the shipped models (package models) does. `mha lab`
// serves it. The page is hand-written HTML, CSS and JavaScript modules in static/, with no
// framework, no build step and nothing fetched from another site: the lab works offline.
//
// # The page
//
// Pick a model (one per task of package tasks), type a sequence or generate one from a seed, and
// see the model's three most likely next tokens at each position (right or wrong where the task
// scores it); the head view (after BertViz: queries left, keys right, a line per head whose
// opacity is the weight; hover or focus a token to see only its lines); the model view (every
// layer × head as a heatmap; click one to enlarge it and read each weight); the head metrics
// on this sequence or on the task (as `mha eval` measures them), sortable, with the pruning curve on the task
// (accuracy and loss as heads are removed, least important first); ρ, Jensen–Shannon distance
// and argmax NMI between the heads of a layer; head ablation (zero, mean, uniform) with the change
// of every prediction and of loss and accuracy; every picture as PNG or SVG; and the chapters'
// experiments (package experiment) with their tables and pictures.
//
// # The API
//
// Every answer is JSON except pictures. Every error is a 4xx (5xx only for the server's own
// failures, busy or slow) with the body {"error": "what was expected and what came"}. Bodies are
// at most MaxBody bytes (413), sent within Options.BodyTimeout (408); POST bodies are JSON sent as
// Content-Type: application/json (415 otherwise) and their unknown fields are refused (400). A
// request with an Origin header other than the lab's own (scheme://Host) gets 403, so that a page
// of another site cannot make the lab work; a query pair that does not parse (a bad % escape, a
// ";") gets 400. A sequence is given as exactly one of
//
//	"text":   "BOS 3 17 3"   symbols as tasks.Task.Symbol prints them, separated by spaces
//	"tokens": [30, 3, 17, 3] token ids
//	"seed":   7              the first sequence of Task.Batch(seed, 1), with its targets and
//	                         ground-truth attention, so that predictions can be scored
//
// of 1 to seq_len tokens. Heads to ablate are "ablate": [{"layer": 1, "head": 2, "mode":
// "zero"|"mean"|"uniform"}] (probe.Ablation); mean ablation uses the head's mean output over
// the positions of the sequence it runs on (over the task's sequences for task scores).
//
//	GET  /api/models
//	     [{name, describe, vocab, seq_len, layers, heads, d_model, head_dims, attn_only, norm,
//	       params, symbols, command}]: the shipped models; symbols[id] prints token id.
//
//	POST /api/run  {model, text|tokens|seed, ablate?}
//	     {model, tokens, symbols, seed?,
//	      weights: [layer][head][query][key] α (after any ablation),
//	      predictions: [{top: [{token, symbol, p}] ×3, target?: {token, symbol, p}, correct?}],
//	      score?: {loss, accuracy, scored}   (sequences drawn from a seed only),
//	      measures: {sequences, about, heads, layers} (below) on this sequence,
//	      ablate}
//
//	POST /api/heads  {model}
//	     measures on 64 sequences of the model's task, with importance and the pruning curve;
//	     prev_token, prefix_matching and ground_truth are probe.Evaluate's, the numbers that
//	     `mha eval` prints (512 sequences of random tokens repeated once, and of the task):
//	     {sequences, about (which sequences each score is on),
//	      heads: [{layer, head, entropy, confidence, prev_token, prefix_matching, ground_truth,
//	               importance}],
//	      layers: [{layer, similarity: ρ [H][H], js_distance: [H][H], argmax_nmi: [H][H]}],
//	      pruning: [{removed, fraction, loss, accuracy, last?: {layer, head, mode}}]}
//	     null means not measured: prefix_matching where no token repeats, ground_truth for a
//	     typed sequence, importance on one sequence, a pair of heads of different sizes.
//	     pruning is probe.Prune on the same sequences: the score with 0, 1, … L·H heads
//	     zero-ablated in order of importance, least important first; last is the head removed
//	     last. The answer is computed once per model and kept.
//
//	POST /api/ablate  {model, text|tokens|seed, ablate}
//	     {model, tokens, symbols, ablate,
//	      positions: [{before, after: {token, symbol, p}, reference: {token, symbol, before,
//	                   after}, target?: {…}, changed, kl}],
//	      sequence?: {before, after: {loss, accuracy, scored}},
//	      task: {sequences, before, after: {loss, accuracy}}}
//	     reference follows the unablated model's top token; kl is KL(before ‖ after) in nats.
//
//	GET  /api/picture?model=M&(text=…|tokens=1,2,3|seed=N)[&ablate=L.H.MODE,…]&kind=K&format=png|svg
//	     kind=head&layer=L&head=H: one head's attention, tokens on both axes;
//	     kind=grid: every layer × head;
//	     kind=similarity&layer=L&metric=rho|js|nmi[&scope=sequence|task]: a layer's head pairs.
//	GET  /api/picture?model=M&kind=K&format=png|svg
//	     on the task, as /api/heads measures it, with no sequence and no ablate:
//	     kind=pruning[&metric=accuracy|loss]: the pruning curve (accuracy when no metric);
//	     kind=importance: every head's importance, layers × heads.
//	     Drawn by package viz, sent as a download (Content-Disposition). A parameter the kind
//	     does not take is refused. Server.Picture draws the same pictures for `mha viz`.
//
//	GET  /api/experiments
//	     [{name}]: experiment.Names().
//	GET  /api/experiment/NAME
//	     {name, title, summary, table: {columns, rows}, figures: [{name, png, svg}]}: the
//	     experiment run with Quick sizes and a fixed seed (once; later requests reuse it).
//	GET  /api/experiment/NAME/FIGURE?format=png|svg
//	     one of its pictures.
//
// # Limits
//
// Every API request is checked and its body read whole, within Options.BodyTimeout (then 408),
// before it does any work. Requests that run a model, draw a picture or run an experiment then
// take one of Options.Heavy slots, waiting up to Options.Queue for one (then 503), so that a
// client that sends its body slowly holds none; each runs under a deadline
// (Options.Timeout, Options.ExperimentTimeout for experiments; then 503). The models are loaded
// once and each is used by one request at a time. Serve sets read, write and idle timeouts and
// bounds headers, and on a loopback listener refuses requests whose Host is not a loopback name
// (a defence against DNS rebinding).
package lab
