// The Circuits view: activation patching (Meng et al. 2022; Wang et al. 2022) of a clean and a
// corrupted prompt, the direct logit attribution of the clean prompt's logit difference, and the
// composition scores between heads (Elhage et al. 2021). Click a head to see its attention on
// both prompts, its scores and the heads it composes with.
import { api, pictureURL, circuitURL } from './api.js';
import { el, fmt as fmtRaw, signed as signedRaw, whileBusy, showError, clearError, downloads, label } from './ui.js';
import { diverging, css, ink } from './colors.js';

// The prompts each kind of model starts with. The shipped induction model: a repeated sequence
// whose last token, 7, comes before 22 in the clean prompt's first half, and is 11 there in the
// corrupted one, so that no earlier copy of 7 points at 22: the previous-token head of layer 0
// and the induction heads of layer 1 both matter.
const INDUCTION = { clean: 'BOS 4 9 13 7 22 4 9 13 7', corrupt: 'BOS 4 9 13 11 22 4 9 13 7', target: '22', foil: '11' };
// A model with a tokenizer: indirect-object identification (Wang et al. 2022) for a causal model
// of a real vocabulary; a guess at [MASK] for BERT (the model's own mask token: RoBERTa's <mask>);
// words of a small test vocabulary otherwise.
const TEXT = {
  next: { clean: 'When John and Mary went to the shops, John gave the bag to', corrupt: 'When John and Mary went to the shops, Mary gave the bag to', target: ' Mary', foil: ' John' },
  masked: { clean: 'paris is the capital of [MASK].', corrupt: 'rome is the capital of [MASK].', target: 'france', foil: 'italy' },
};
const SMALL = {
  next: { clean: 'the cat sat on the', corrupt: 'the dog sat on the', target: ' the', foil: ' a' },
  masked: { clean: 'the cat [MASK] on the mat.', corrupt: 'the dog [MASK] on the mat.', target: 'sat', foil: 'is' },
};
const IDS = { clean: '0 1 2 3 0 1 2', corrupt: '0 1 2 4 0 1 2', target: '#3', foil: '#4' };

const MODE_HELP = {
  q: 'Q-composition: the later head’s queries read what the earlier head wrote.',
  k: 'K-composition: the later head’s keys read it (an induction head reads a previous-token head this way).',
  v: 'V-composition: the later head’s values read it, and pass it on.',
};

/** Circuits is the Circuits tab. */
export class Circuits {
  constructor(root) {
    this.root = root;
    this.q = (sel) => root.querySelector(sel);
    this.models = [];
    this.model = null;
    this.req = null; // the request of the answer shown
    this.res = null; // the /api/circuits answer shown
    this.comp = new Map(); // model name → /api/composition answer
    this.mode = 'k';
    this.selected = null; // {layer, head}
    this.opened = false;
    this.runs = 0; // the number of /api/circuits requests sent: only the latest one's answer shows
    this.q('#circ-model').addEventListener('change', () => this.chooseModel(this.q('#circ-model').value));
    this.q('#circ-form').addEventListener('submit', (ev) => { ev.preventDefault(); this.run(); });
    this.q('.circ-modes').addEventListener('click', (ev) => {
      const b = ev.target.closest('.seg');
      if (!b) return;
      this.mode = b.dataset.mode;
      this.drawComposition();
    });
  }

  /** setModels fills the model list from /api/models. */
  setModels(models) {
    this.models = models;
    const option = (m) => el('option', { value: m.name }, `${m.name} — ${m.layers} layer${m.layers > 1 ? 's' : ''} × ${m.heads} heads${m.user ? ` · ${m.architecture}` : ''}`);
    const usable = models.filter((m) => m.predicts !== 'none');
    const shipped = usable.filter((m) => !m.user);
    const user = usable.filter((m) => m.user);
    this.q('#circ-model').replaceChildren(
      el('optgroup', { label: 'Shipped models (one per task)' }, shipped.map(option)),
      user.length ? el('optgroup', { label: 'Your models (--model)' }, user.map(option)) : null);
  }

  /** open shows the view; the first time, on model name (the Attention tab's) with its defaults. */
  async open(name) {
    if (this.opened || this.models.length === 0) return;
    this.opened = true;
    const m = this.models.find((x) => x.name === name && x.predicts !== 'none') || this.models.find((x) => x.name === 'induction') || this.models[0];
    if (!m) return;
    this.q('#circ-model').value = m.name;
    await this.chooseModel(m.name);
  }

  /** chooseModel shows model name's hint and default prompts, and patches them. */
  async chooseModel(name) {
    const m = this.models.find((x) => x.name === name);
    this.model = m;
    this.selected = null;
    let hint;
    let help;
    if (m.task) {
      const shown = m.symbols.length > 14 ? `${m.symbols.slice(0, 6).join(' ')} … ${m.symbols.slice(-3).join(' ')}` : m.symbols.join(' ');
      hint = `(up to ${m.seq_len} of: ${shown})`;
      help = 'Symbols separated by spaces. Target and foil are symbols (or #id).';
    } else if (m.tokenizer) {
      hint = `(text, up to ${m.max_tokens} tokens)`;
      help = m.predicts === 'masked'
        ? `Text, encoded with the model’s tokenizer; write ${m.mask || '[MASK]'} where the target and the foil compete (the metric’s position). Target and foil: a token as the tokenizer writes it (“Ġword”), text of one token, or #id.`
        : 'Text, encoded with the model’s tokenizer. Target and foil: a token as the tokenizer writes it (“ĠParis”), text of one token (“ Paris”, with its space), or #id.';
    } else {
      hint = `(token ids 0 to ${m.vocab - 1})`;
      help = 'This model has no tokenizer: type token ids separated by spaces; target and foil as #id.';
    }
    this.q('.circ-hint').textContent = hint;
    this.q('#circ-help').textContent = `${help} Both prompts must have as many tokens. The metric is the logit difference LD = logit(target) − logit(foil) at the position (by default the last${m.predicts === 'masked' ? ` ${m.mask || '[MASK]'}` : ''}).`;
    this.q('#circ-model-desc').replaceChildren(el('span', {}, m.describe),
      el('span', { class: 'facts' }, `${m.layers} layers × ${m.heads} heads · ${m.attn_only ? 'attention only' : 'with MLP'} · ${m.norm}-norm · ${m.causal ? 'causal' : 'bidirectional'}`));
    const d = await this.defaults(m);
    this.q('#circ-clean').value = d.clean;
    this.q('#circ-corrupt').value = d.corrupt;
    this.q('#circ-target').value = d.target;
    this.q('#circ-foil').value = d.foil;
    this.q('#circ-position').value = '';
    this.q('#circ-position').placeholder = m.predicts === 'masked' ? m.mask || '[MASK]' : 'last';
    await this.run();
  }

  /**
   * defaults returns the prompts model m starts with: fixed ones for the induction model; for
   * another task, its sequence of seed 1 up to its last scored position, with the task's answer
   * there as the target, the model's best other guess as the foil, and the target's earlier
   * copies (or else the second token) turned into the foil in the corrupted prompt; for text, a
   * pair of sentences, with tokens that GPT-2's and BERT's vocabularies have as the target and
   * the foil, or else the model's own two best guesses on the clean prompt.
   */
  async defaults(m) {
    if (m.name === 'induction' && !m.user) return INDUCTION;
    if (!m.task) {
      if (!m.tokenizer) return IDS;
      const big = m.vocab >= 1000;
      const d = { ...(big ? TEXT : SMALL)[m.predicts] };
      if (m.mask) [d.clean, d.corrupt] = [d.clean.replace('[MASK]', m.mask), d.corrupt.replace('[MASK]', m.mask)];
      if (m.family === 'gpt2' || m.family === 'bert') return d;
      try {
        const r = await api('/api/run', { model: m.name, text: d.clean });
        const at = m.predicts === 'masked' ? r.predictions.findLastIndex((p) => p.masked) : r.predictions.length - 1;
        const top = r.predictions[at].top;
        d.target = top[0].symbol;
        d.foil = top[1].symbol;
      } catch {
        // The fixed tokens: the page says what is wrong with them.
      }
      return d;
    }
    try {
      const r = await api('/api/run', { model: m.name, seed: 1 });
      let p = r.tokens.length - 1;
      while (p > 0 && !r.predictions[p].target) p--;
      const pr = r.predictions[p];
      const target = pr.target ? pr.target.symbol : pr.top[0].symbol;
      const special = (s) => /^[A-Z]+$/.test(s);
      const foil = (pr.top.find((g) => g.symbol !== target && !special(g.symbol)) || pr.top.find((g) => g.symbol !== target)).symbol;
      const clean = r.symbols.slice(0, p + 1);
      const corrupt = clean.map((s, i) => (i < p && s === target ? foil : s));
      if (corrupt.every((s, i) => s === clean[i])) {
        const i = Math.min(1, p);
        corrupt[i] = m.symbols.find((s) => s !== clean[i] && !special(s)) || m.symbols[0];
      }
      return { clean: clean.join(' '), corrupt: corrupt.join(' '), target, foil };
    } catch {
      return { clean: m.symbols.slice(0, 4).join(' '), corrupt: m.symbols.slice(1, 5).join(' '), target: m.symbols[0], foil: m.symbols[1] };
    }
  }

  /** request returns the form's request. */
  request() {
    const req = {
      model: this.model.name,
      clean: this.q('#circ-clean').value,
      corrupt: this.q('#circ-corrupt').value,
      target: this.q('#circ-target').value,
      foil: this.q('#circ-foil').value,
    };
    const pos = this.q('#circ-position').value.trim();
    if (pos !== '') req.position = Number(pos);
    return req;
  }

  /** run patches the form's prompts and shows the answer. */
  async run() {
    clearError();
    const req = this.request();
    if (req.position !== undefined && !Number.isInteger(req.position)) {
      showError(`Position must be a whole number ≥ 0, or empty for the default; got “${this.q('#circ-position').value}”.`);
      return;
    }
    const run = ++this.runs;
    let res;
    try {
      res = await whileBusy(api('/api/circuits', req), this.q('#circ-summary'), this.q('#circ-patching'), this.q('#circ-head'));
    } catch (e) {
      if (run === this.runs) showError(e.message);
      return;
    }
    if (run !== this.runs) return; // a later request shows its answer
    this.req = req;
    this.res = res;
    this.root.dataset.shown = `${res.model}:${res.position}`;
    this.showSummary();
    this.showMaps();
    const sel = this.selected;
    const L = res.heads.length;
    const H = res.heads[0].length;
    if (!sel || sel.layer >= L || sel.head >= H) this.selected = strongest(res.heads);
    await this.select(this.selected.layer, this.selected.head);
  }

  /** showSummary shows the two prompts token by token, the metric's position and both LDs. */
  showSummary() {
    const r = this.res;
    const cl = tokens(r.clean);
    const co = tokens(r.corrupt);
    const cell = (i, s, row) => el('td', {
      class: [r.clean.tokens[i] !== r.corrupt.tokens[i] ? 'diff' : '', i === r.position ? 'metric' : ''].join(' ').trim() || null,
      title: `${row}, position ${i}: ${s}${i === r.position ? ' (the metric reads the logits here)' : ''}`,
    }, s);
    this.q('.circ-tokens').replaceChildren(
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'position'), cl.map((_, i) => el('th', { scope: 'col', class: i === r.position ? 'metric' : null }, String(i))))),
      el('tbody', {},
        el('tr', { class: 'clean' }, el('th', { scope: 'row' }, 'clean'), cl.map((s, i) => cell(i, s, 'clean'))),
        el('tr', { class: 'corrupt' }, el('th', { scope: 'row' }, 'corrupted'), co.map((s, i) => cell(i, s, 'corrupted')))));
    const tok = (t) => (t.piece !== undefined ? label(t.piece) : t.symbol);
    const guesses = (gs) => gs.map((g) => `${tok(g)} ${(100 * g.p).toFixed(1)}%`).join(', ');
    this.q('.circ-top').textContent = `The model’s three most likely tokens at position ${r.position}: clean ${guesses(r.top.clean)}; corrupted ${guesses(r.top.corrupt)}.`;
    this.q('.circ-lds').replaceChildren(
      stat('LD clean', fmt(r.ld_clean, 3), `logit(${tok(r.target)}) − logit(${tok(r.foil)}) at position ${r.position} of the clean prompt`),
      stat('LD corrupted', fmt(r.ld_corrupt, 3), 'the same on the corrupted prompt'),
      el('span', { class: 'muted circ-metric' }, `target “${tok(r.target)}” vs foil “${tok(r.foil)}” at position ${r.position}`));
  }

  /** showMaps draws the patching heatmaps and the attribution, with their downloads. */
  showMaps() {
    const r = this.res;
    const pick = (l, h) => this.select(l, h);
    const heads = (g) => g[0].map((_, h) => `H${h}`);
    const layers = (g) => g.map((_, l) => `L${l}`);
    const dl = (id, kind) => this.q(`${id} .dls`).replaceChildren(downloads(circuitURL(this.req, kind), `${r.model}-${kind}`));
    this.maps = {};
    this.maps.heads = matrix(this.q('#circ-heads .circ-map'), {
      name: 'head output patching', values: r.heads, rows: layers(r.heads), cols: heads(r.heads), limit: limitOf(r.heads, 1), pick,
      describe: (l, h, v) => `layer ${l} head ${h}: output patching ${fmt(v, 3)}`,
    });
    dl('#circ-heads', 'patching');
    this.maps.patterns = matrix(this.q('#circ-patterns .circ-map'), {
      name: 'attention pattern patching', values: r.patterns, rows: layers(r.patterns), cols: heads(r.patterns), limit: limitOf(r.patterns, 1), pick,
      describe: (l, h, v) => `layer ${l} head ${h}: pattern patching ${fmt(v, 3)}`,
    });
    dl('#circ-patterns', 'patching-patterns');
    const labels = tokens(r.clean).map((s, i) => (r.clean.tokens[i] !== r.corrupt.tokens[i] ? `${s}/${tokens(r.corrupt)[i]}` : s));
    const L = r.residual.length - 1;
    matrix(this.q('#circ-residual .circ-map'), {
      name: 'residual stream patching', values: r.residual, rows: r.residual.map((_, l) => (l === L ? 'output' : `into L${l}`)), cols: labels, limit: limitOf(r.residual, 1),
      describe: (l, p, v) => `residual stream ${l === L ? 'output' : `into layer ${l}`}, position ${p} “${labels[p]}”: ${fmt(v, 3)}`,
      compact: labels.length > 16,
    });
    dl('#circ-residual', 'patching-residual');
    const dla = this.q('#circ-dla');
    if (r.dla) {
      const values = r.dla.heads.map((row, l) => (r.dla.mlp ? [...row, r.dla.mlp[l]] : row));
      const cols = r.dla.mlp ? [...heads(r.dla.heads), 'MLP'] : heads(r.dla.heads);
      const H = r.dla.heads[0].length;
      this.maps.dla = matrix(this.q('#circ-dla .circ-map'), {
        name: 'direct logit attribution', values, rows: layers(values), cols, limit: limitOf(values, 0), pick: (l, h) => { if (h < H) this.select(l, h); },
        describe: (l, h, v) => `layer ${l} ${h < H ? `head ${h}` : 'MLP'}: direct effect ${signed(v, 3)} on LD`,
      });
      const bias = r.dla.attn_bias.reduce((a, b) => a + b, 0) + r.dla.norm_bias + r.dla.head_bias;
      const capped = r.dla.logit_softcap
        ? ` The model caps its logits to c·tanh(z/c) (c = ${fmt(r.dla.logit_softcap, 3)}): this LD is the uncapped logits’, the patching’s LDs the capped ones it outputs.`
        : '';
      this.q('#circ-dla .circ-note').textContent = `On the clean prompt, in logits (the colours run to ±${fmt(limitOf(values, 0), 2)}); with the embeddings (${signed(r.dla.embed, 2)}) and the biases (${signed(bias, 2)}) they sum to LD = ${fmt(r.dla.ld, 3)}. The final norm’s scale is frozen at the clean run’s (${fmt(r.dla.scale, 3)}), as TransformerLens does.${capped}`;
      dl('#circ-dla', 'attribution');
    } else {
      this.maps.dla = null;
      this.q('#circ-dla .circ-map').replaceChildren(el('p', { class: 'muted circ-none' }, `No direct logit attribution: ${r.dla_error}`));
      this.q('#circ-dla .circ-note').textContent = '';
      this.q('#circ-dla .dls').replaceChildren();
    }
    dla.dataset.available = r.dla ? 'true' : 'false';
  }

  /** select shows head (layer, head): its attention on both prompts, its scores, its composition. */
  async select(layer, head) {
    this.selected = { layer, head };
    for (const m of Object.values(this.maps || {})) if (m) m.select(layer, head);
    const r = this.res;
    const box = this.q('#circ-head');
    box.dataset.layer = layer;
    box.dataset.head = head;
    this.q('#circ-head-h').textContent = `Layer ${layer} · head ${head}`;
    const dla = r.dla ? signed(r.dla.heads[layer][head], 3) : '–';
    this.q('.circ-head-stats').replaceChildren(
      stat('output patching', fmt(r.heads[layer][head], 3), 'LD restored when this head’s output comes from the clean run (1 = all of it)'),
      stat('pattern patching', fmt(r.patterns[layer][head], 3), 'LD restored when this head attends as on the clean prompt'),
      stat('direct logit attribution', dla, r.dla ? `this head’s direct share of LD = ${fmt(r.dla.ld, 3)} on the clean prompt` : r.dla_error));
    for (const [which, p] of [['clean', r.clean], ['corrupt', r.corrupt]]) {
      const url = pictureURL({ model: r.model, tokens: p.tokens }, { kind: 'head', layer, head });
      const fig = this.q(`.circ-attn-${which}`);
      const img = fig.querySelector('img');
      img.src = `${url}&format=svg`;
      img.alt = `layer ${layer} head ${head}: attention on the ${which === 'clean' ? 'clean' : 'corrupted'} prompt`;
      fig.querySelector('.dls').replaceChildren(downloads(url, `${r.model}-L${layer}H${head}-${which}`));
    }
    await this.drawComposition();
  }

  /** drawComposition shows the selected head's composition scores of the chosen mode. */
  async drawComposition() {
    const r = this.res;
    if (!r || !this.selected) return;
    const { layer, head } = this.selected;
    this.root.querySelectorAll('.circ-modes .seg').forEach((b) => b.setAttribute('aria-pressed', b.dataset.mode === this.mode));
    const box = this.q('.circ-comp-body');
    const fig = this.q('.circ-comp-fig');
    if (this.model.layers < 2) {
      box.replaceChildren(el('p', { class: 'muted' }, 'One layer: no head composes with another.'));
      fig.hidden = true;
      return;
    }
    let c = this.comp.get(r.model);
    if (!c) {
      try {
        c = await whileBusy(api(`/api/composition?model=${encodeURIComponent(r.model)}`), this.q('.circ-comp'));
      } catch (e) {
        showError(e.message);
        return;
      }
      this.comp.set(r.model, c);
    }
    if (this.res !== r || !this.selected || this.selected.layer !== layer || this.selected.head !== head) return; // a newer selection draws
    const mode = this.mode;
    const reads = []; // earlier heads this head reads
    const readBy = []; // later heads that read it
    for (const p of c.pairs) {
      for (let i = 0; i < c.heads; i++) {
        for (let j = 0; j < c.heads; j++) {
          if (p.to === layer && j === head) reads.push({ layer: p.from, head: i, score: p[mode][i][j] });
          if (p.from === layer && i === head) readBy.push({ layer: p.to, head: j, score: p[mode][i][j] });
        }
      }
    }
    const top = Math.max(c.baseline, ...c.pairs.flatMap((p) => p[mode].flat()));
    const list = (title, items, none) => el('div', { class: 'circ-comp-list' }, el('h4', {}, title),
      items.length === 0 ? el('p', { class: 'muted' }, none) : el('table', { class: 'circ-comp-table' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'head'), el('th', { scope: 'col' }, `${mode.toUpperCase()}-composition`))),
        el('tbody', {}, items.sort((a, b) => b.score - a.score).slice(0, 8).map((x) => {
          const bar = el('span', { class: 'bar' });
          bar.style.width = `${Math.round(100 * Math.min(1, x.score / top))}%`;
          const over = x.score > c.baseline;
          return el('tr', {}, el('th', { scope: 'row' }, el('button', {
            type: 'button', class: 'linkish', title: `select layer ${x.layer} head ${x.head}`, onclick: () => this.select(x.layer, x.head),
          }, `L${x.layer} H${x.head}`)),
          el('td', { class: `num${over ? ' over' : ''}`, title: over ? 'above the random baseline' : 'at or below the random baseline' }, el('span', { class: 'barwrap' }, bar), fmt(x.score, 3)));
        }))));
    box.replaceChildren(
      el('p', { class: 'help' }, `${MODE_HELP[mode]} Random matrices of these shapes score ${fmt(c.baseline, 3)} on average; scores from the weights alone${c.folded ? ', with the norms folded in' : ''}.`),
      el('div', { class: 'circ-comp-lists' },
        list(`Earlier heads that L${layer} H${head} reads`, reads, `Layer ${layer} is the first: it reads no head.`),
        list(`Later heads that read L${layer} H${head}`, readBy, `Layer ${layer} is the last: no head reads it.`)));
    const url = pictureURL({ model: r.model }, { kind: 'composition', mode });
    fig.hidden = false;
    fig.querySelector('img').src = `${url}&format=svg`;
    fig.querySelector('img').alt = `${mode.toUpperCase()}-composition of every head with the heads of later layers`;
    fig.querySelector('.dls').replaceChildren(downloads(url, `${r.model}-composition-${mode.toUpperCase()}`));
  }
}

/** fmt prints x with d decimals, as ui.js's fmt does, without the sign of a value that rounds to 0. */
function fmt(x, d = 3) {
  const s = fmtRaw(x, d);
  return /^-0\.0*$/.test(s) ? s.slice(1) : s;
}

/** signed prints x with its sign, as ui.js's signed does, and ±0 for a value that rounds to 0. */
function signed(x, d = 3) {
  const s = signedRaw(x, d);
  return /^[+−]0\.0*$/.test(s) ? `±${s.slice(1)}` : s;
}

/** tokens returns how the view prints a prompt's tokens: what they read as, or their symbols. */
function tokens(p) {
  return p.pieces ? p.pieces.map(label) : p.symbols;
}

/** strongest returns the head whose output patching restores most of the clean LD. */
function strongest(heads) {
  let best = { layer: 0, head: 0 };
  heads.forEach((row, l) => row.forEach((v, h) => {
    if (v !== null && v > (heads[best.layer][best.head] ?? -Infinity)) best = { layer: l, head: h };
  }));
  return best;
}

/** limitOf returns the largest |value| of a grid, at least floor (and 1 when that is 0). */
function limitOf(grid, floor) {
  const m = Math.max(floor, ...grid.flat().filter((v) => v !== null).map(Math.abs));
  return m > 0 ? m : 1;
}

function stat(name, value, title) {
  return el('span', { class: 'stat', title }, el('span', { class: 'stat-label' }, name), el('b', {}, value));
}

/**
 * matrix draws grid values [rows][cols] as a table of coloured cells on a diverging scale
 * ±limit, rows and cols labelling them. With pick(r, c), each cell is a button: click it, or
 * move with the arrow keys and press Enter. It returns {select(r, c)}, which marks a cell.
 */
function matrix(root, { name, values, rows, cols, limit, pick, describe, compact }) {
  const buttons = [];
  const table = el('table', { class: `cmap${compact ? ' compact' : ''}`, 'aria-label': name },
    el('thead', {}, el('tr', {}, el('td', {}), cols.map((c) => el('th', { scope: 'col', title: c }, el('span', {}, c))))),
    el('tbody', {}, values.map((row, r) => el('tr', {}, el('th', { scope: 'row' }, rows[r]), row.map((v, c) => {
      const color = v === null ? [226, 228, 232] : diverging(v / limit);
      const text = v === null ? '–' : compact ? '' : fmt(v, 2);
      const what = describe(r, c, v);
      let inner;
      if (pick) {
        inner = el('button', { type: 'button', class: 'cell', tabindex: '-1', 'aria-label': what, title: what, dataset: { r, c }, onclick: () => pick(r, c) }, text);
        inner.style.background = css(color);
        inner.style.color = ink(color);
        (buttons[r] ||= [])[c] = inner;
        return el('td', {}, inner);
      }
      const cell = el('span', { class: 'cell', title: what }, text || el('span', { class: 'sr-only' }, what));
      cell.style.background = css(color);
      cell.style.color = ink(color);
      return el('td', {}, cell);
    })))));
  root.replaceChildren(table);
  if (!pick) return { select() {} };
  // One cell in the tab order (roving tabindex); the arrow keys move between cells.
  buttons[0][0].tabIndex = 0;
  table.addEventListener('keydown', (ev) => {
    const b = ev.target.closest('.cell');
    const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[ev.key];
    if (!b || !step) return;
    ev.preventDefault();
    const r = Math.max(0, Math.min(buttons.length - 1, +b.dataset.r + step[0]));
    const c = Math.max(0, Math.min(buttons[r].length - 1, +b.dataset.c + step[1]));
    b.tabIndex = -1;
    buttons[r][c].tabIndex = 0;
    buttons[r][c].focus();
  });
  return {
    select(r, c) {
      const all = buttons.flat();
      all.forEach((b) => {
        const on = +b.dataset.r === r && +b.dataset.c === c;
        b.classList.toggle('selected', on);
        b.setAttribute('aria-pressed', on);
        b.tabIndex = on ? 0 : -1;
      });
      if (!all.some((b) => b.tabIndex === 0)) buttons[0][0].tabIndex = 0;
    },
  };
}
