// Package lab is mha's web lab: a page embedded in the binary, served with a JSON API, that
// shows and measures what every head of the shipped models (package models) does, and of the
// user's own models (Options.Models: Hugging Face folders and checkpoints of mha train, opened
// with pretrained.OpenPath). `mha lab [--model PATH]…` serves it. The page is hand-written HTML, CSS and JavaScript modules in static/, with no
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
// The Circuits tab asks which heads a behaviour needs (package circuits): type a clean and a
// corrupted prompt of the same token length and a target and a foil token, and see activation
// patching of every head's output, of every head's attention pattern (layers × heads) and of the
// residual stream (layers × positions), and the direct logit attribution of the clean prompt's
// logit difference; click a head (or move over the heads with the arrow keys and press Enter) to
// see its attention on both prompts, its scores and its Q-, K- or V-composition with the heads
// before and after it.
//
// Sparse attention: below the sequence, fields for patterns, a block size and a normalizer, each
// left empty the model's own (a model trained with `mha train --pattern … --normalizer …` shows
// its own). The model runs under them, and the model view draws each head's block map over its heatmap (white lines
// between blocks, empty blocks — never computed — hatched on a pale fill, partial ones dashed,
// the pairs a query cannot see grey) and, for a normalizer other than softmax, a red dot on each
// visible weight that is exactly 0, with the head's share of them in its title.
//
// A user's model without a task takes text, encoded with its tokenizer: the tiles show the
// tokenizer's pieces as they read, the predictions are the next token (the masked token at
// [MASK] for BERT), and the metrics are those that need no task, on the text and on repeated
// random tokens, with the attention rollout and each head's offset profile. It has no seeds,
// task scores or pruning curve; a checkpoint of mha train that records its task has them.
//
// # The API
//
// Every answer is JSON except pictures. Every error is a 4xx (5xx only for the server's own
// failures, busy or slow) with the body {"error": "what was expected and what came"}. Bodies are
// at most MaxBody bytes (413), sent within Options.BodyTimeout (408); POST bodies are JSON sent as
// Content-Type: application/json (415 otherwise) in UTF-8, whose fields are spelled exactly as
// below and given once: an unknown field, a field given twice or a body that is not UTF-8 is a
// 400. A request with an Origin header other than the lab's own (scheme://Host) gets 403, so that
// a page of another site cannot make the lab work; a query pair that does not parse (a bad %
// escape, a ";"), or a query of more than 100 pairs, gets 400. Each endpoint takes the method
// listed below (405 otherwise, with an Allow header), and HEAD wherever it takes GET. A sequence
// is given as exactly one of
//
//	"text":   "BOS 3 17 3"   symbols as tasks.Task.Symbol prints them, separated by spaces;
//	                         for a model without a task, natural text that its tokenizer
//	                         encodes with its special tokens (a model without tokenizer.json
//	                         takes tokens only)
//	"tokens": [30, 3, 17, 3] token ids
//	"seed":   7              the first sequence of Task.Batch(seed, 1), with its targets and
//	                         ground-truth attention, so that predictions can be scored (400 for
//	                         a model without a task)
//
// of 1 to seq_len tokens (to MaxUserTokens for a model without a task). Text whose tokenizer
// gives an id outside the model's vocabulary is a 400 that names the token. Heads to ablate are "ablate": [{"layer": 1, "head": 2, "mode":
// "zero"|"mean"|"uniform"}] (probe.Ablation, all three fields required); mean ablation uses the head's mean output over
// the positions of the sequence it runs on (over the task's sequences for task scores).
//
// The sequence may run under sparse attention (nn.RunOptions.Sparsity), each field left out
// being the model's own (nn.Config's: dense softmax in 64 × 64 blocks for most):
//
//	"patterns":   ["local:4", "global:0"]   at most 8, as mha.ParsePattern reads them (local:W,
//	                                        dilated:W,D, strided:S, global:I,J,…,
//	                                        bigbird:W,G,R,SEED); [] for dense attention
//	"block":      [4, 4]                    [BQ, BK], each 1 to 1024
//	"normalizer": "sparsemax"               as mha.ParseNormalizer reads it (softmax,
//	                                        sparsemax, entmax15, entmax:ALPHA, topk:K)
//
// A value that does not parse is a 400 with the parser's message. They apply to the runs on
// the sequence (weights, predictions, its score and measures, pictures); the task's measures
// and scores, and the importance on the text of a model without a task, are the model's own.
//
//	GET  /api/models
//	     [{name, describe, vocab, seq_len, layers, heads, d_model, head_dims, attn_only, norm,
//	       params, symbols, command, task, max_tokens, user, path?, architecture?, family?,
//	       tokenizer, causal, predicts, patterns?, block?, normalizer?, experts?,
//	       experts_per_token?}]: the shipped models, then the user's in the order
//	     given (named after the path's last element, -2, -3 … after a name taken);
//	     symbols[id] prints token id (null without a task); task says whether there are
//	     seeds, task scores and pruning; family is pretrained's (gpt2, bert, llama) or mha for a
//	     checkpoint; causal is false for a bidirectional model; predicts is next, masked (BERT)
//	     or none (a model without its language-model head); patterns, block and normalizer are
//	     the model's own sparse attention (nn.Config's), absent for dense softmax.
//
//	POST /api/run  {model, text|tokens|seed, ablate?, patterns?, block?, normalizer?}
//	     {model, tokens, symbols, pieces?, offsets?, seed?, causal,
//	      weights: [layer][head][query][key] α (after any ablation),
//	      predicts, predictions: [{top: [{token, symbol, piece?, p}] ×3, masked?,
//	                               target?: {token, symbol, piece?, p}, correct?}],
//	      score?: {loss, accuracy, scored}   (a sequence drawn from a seed, or the next tokens
//	                                          of a causal language model's text),
//	      rollout: [query][key] (probe.Rollout),
//	      measures: {sequences, about, heads, layers} (below) on this sequence,
//	      ablate,
//	      sparsity: {patterns, block: [BQ, BK], normalizer,
//	                 blocks?: [⌈T/BQ⌉][⌈T/BK⌉] "empty"|"partial"|"full",
//	                 visible: [T] strings of T "0"|"1",
//	                 zeros?: [layer][head] fraction},
//	      routing?: [layer]{experts: [position][K], weights: [position][K]}}
//	     symbols are the task's symbols, or the tokenizer's pieces (Ġ, ▁, ## as it spells them;
//	     "#id" without a tokenizer); pieces are what they read as (Ġ and ▁ as a space, byte
//	     tokens as their character) and offsets their byte offsets [start, end) into the text
//	     ([0, 0] for a special token the tokenizer added). For a causal language model each
//	     position's target is the next token; for a masked-LM model predictions are the tokens
//	     at each position and masked marks the [MASK] positions; predictions are absent when
//	     predicts is none. A model without a task gets the heads' importance against its own
//	     next-token loss on the text (probe.ImportanceOn, without the ablation).
//	     sparsity is the attention the model ran with: blocks the patterns' block map
//	     (mha.SparseLayouts; absent without patterns), visible[q][k] whether query q may see
//	     key k (kept by the patterns, not after q in a causal model, within a sliding window),
//	     and, for a normalizer other than softmax, zeros the share of each head's visible
//	     weights that are exactly 0. routing, for a mixture of experts, is each layer's choice
//	     of K experts per position by decreasing probability, with their weights
//	     (nn.Model.Routing).
//
//	POST /api/heads  {model}
//	     measures on 64 sequences of the model's task, with importance and the pruning curve
//	     (for a model without a task: on 4 sequences of up to 32 distinct random tokens
//	     repeated once (probe.DistinctRepeatedTokens), where prefix_matching is Olsson et al.'s
//	     induction score and duplicate_token the attention to the first copy,
//	     without importance and pruning);
//	     prev_token, prefix_matching and ground_truth are probe.Evaluate's, the numbers that
//	     `mha eval` prints (512 sequences of random tokens repeated once, and of the task):
//	     {sequences, about (which sequences each score is on),
//	      heads: [{layer, head, entropy, confidence, prev_token, prefix_matching, ground_truth,
//	               importance, first_token, duplicate_token, offsets}],
//	      layers: [{layer, similarity: ρ [H][H], js_distance: [H][H], argmax_nmi: [H][H]}],
//	      pruning: [{removed, fraction, loss, accuracy, last?: {layer, head, mode}}]}
//	     first_token is probe.FirstToken (attention sinks), duplicate_token probe.DuplicateToken,
//	     offsets probe.OffsetProfile: the mean weight at key − query = −(T−1) … T−1.
//	     null means not measured: prefix_matching and duplicate_token where no token repeats,
//	     first_token on one token, ground_truth for a typed sequence, importance on one
//	     sequence of a task, a pair of heads of different sizes.
//	     pruning is probe.Prune on the same sequences: the score with 0, 1, … L·H heads
//	     zero-ablated in order of importance, least important first; last is the head removed
//	     last. The answer is computed once per model and kept.
//
//	POST /api/ablate  {model, text|tokens|seed, ablate, patterns?, block?, normalizer?}
//	     {model, tokens, symbols, pieces?, ablate,
//	      positions: [{before, after: {token, symbol, piece?, p}, reference: {token, symbol,
//	                   piece?, before, after}, target?: {…}, changed, kl}],
//	      sequence?: {before, after: {loss, accuracy, scored}},
//	      task?: {sequences, before, after: {loss, accuracy}}}
//	     reference follows the unablated model's top token; kl is KL(before ‖ after) in nats.
//	     sequence is on a seed's targets or a causal language model's next tokens; task is
//	     absent for a model without a task; a model without a language-model head gets 400.
//
//	POST /api/circuits  {model, clean, corrupt, target, foil, position?}
//	     activation patching (circuits.Patch) of the clean prompt into the corrupted one, with the
//	     metric LD = logit(target) − logit(foil) at position:
//	     {model, clean: {tokens, symbols, pieces?}, corrupt: {tokens, symbols, pieces?},
//	      target: {token, symbol, piece?}, foil: {…}, position, causal, ld_clean, ld_corrupt,
//	      top: {clean: [{token, symbol, piece?, p}] ×3, corrupt: […]},
//	      heads: [layer][head], residual: [layer + 1][position], patterns: [layer][head],
//	      dla?: {heads: [layer][head], mlp: [layer] | null, embed, attn_bias: [layer],
//	             norm_bias, head_bias, ld, scale},
//	      dla_error?}
//	     clean and corrupt are read as /api/run's text is (symbols; text through the tokenizer;
//	     token ids separated by spaces for a model with neither) and must have as many tokens;
//	     target and foil are tokens as lab.Model.Token reads them: "#ID", a symbol, a token as
//	     the tokenizer writes it ("ĠParis"), or text that encodes as one token (" Paris"; not as
//	     the unknown token). position defaults to the last position, or, for a masked language
//	     model (BERT), the clean prompt's last [MASK], which it must then hold. The grids are the
//	     normalised scores (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt), 1 where the
//	     patch restores the clean LD and 0 where it changes nothing: heads patches each head's
//	     output z_h = A_h·V_h at every position; residual the stream entering each block (row
//	     L: the last block's output) at one position; patterns each head's attention weights;
//	     top the model's three most likely tokens at position on each prompt.
//	     dla is the direct logit attribution of LD on the clean prompt (circuits.Attribute, the
//	     final norm's scale frozen at the clean run's, as TransformerLens does), whose parts sum
//	     to ld; for a post-norm model (BERT) dla_error says why there is none. 400 for prompts
//	     of different lengths or the same tokens, an unknown token, target = foil, a position
//	     outside the prompts, a model without a language-model head, or prompts on which the
//	     metric is the same (LD_clean = LD_corrupt). A model keeps its last 4 answers, which its
//	     pictures reuse.
//
//	GET  /api/composition?model=M
//	     {model, layers, heads, baseline, folded,
//	      pairs: [{from, to, q: [H][H], k: [H][H], v: [H][H]}]}
//	     the Q-, K- and V-composition scores (circuits.Composition, Elhage et al. 2021) of head
//	     i of layer from (the writer) with head j of every later layer to (the reader), from the
//	     weights, with the norms folded; baseline is the mean score of random matrices of the
//	     same shapes. Computed once per model; 400 for a model of one layer.
//
//	GET  /api/picture?model=M&(text=…|tokens=1,2,3|seed=N)[&ablate=L.H.MODE,…]
//	     [&patterns=P+P…][&block=BQ,BK][&normalizer=N]&kind=K&format=png|svg
//	     kind=head&layer=L&head=H: one head's attention, tokens on both axes;
//	     kind=grid: every layer × head;
//	     kind=similarity&layer=L&metric=rho|js|nmi[&scope=sequence|task]: a layer's head pairs
//	     (scope=task is measured on the task's sequences, or on repeated random tokens for a
//	     model without a task: it needs no sequence, and takes no ablate, patterns, block or
//	     normalizer);
//	     kind=rollout: the attention rollout;
//	     kind=offsets&layer=L&head=H: one head's mean attention by key − query offset.
//	     The tokens are labelled with their symbols, or with what their pieces read as.
//	     patterns are separated by spaces (empty for dense attention); with them, head and grid
//	     draw the block map over each head, and with a normalizer other than softmax a red dot
//	     on each visible weight that is exactly 0 (the share in the title), e.g.
//	     /api/picture?model=induction&seed=3&kind=head&layer=1&head=2&patterns=local:2+global:0&block=4,4&normalizer=sparsemax&format=png
//	GET  /api/picture?model=M&kind=K&format=png|svg
//	     on the task, as /api/heads measures it, with no sequence and no ablate:
//	     kind=pruning[&metric=accuracy|loss]: the pruning curve (accuracy when no metric);
//	     kind=importance: every head's importance, layers × heads.
//	     Both are 400 for a model without a task.
//	GET  /api/picture?model=M&clean=…&corrupt=…&target=T&foil=F[&position=P]&kind=K&format=png|svg
//	     /api/circuits's answer for the same fields, drawn on a diverging scale around 0:
//	     kind=patching: head-output patching, layers × heads;
//	     kind=patching-residual: residual-stream patching, layers × positions, labelled with the
//	     tokens (clean/corrupted where they differ);
//	     kind=patching-patterns: attention-pattern patching, layers × heads;
//	     kind=attribution: direct logit attribution, layers × heads (and a column of MLPs);
//	     400 for a model without one (BERT).
//	GET  /api/picture?model=M&kind=composition[&mode=q|k|v]&format=png|svg
//	     the Q-, K- or V-composition scores (K when no mode) of every head (rows) with every
//	     head of a later layer (columns), from the weights.
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
