// The head view, after BertViz: the tokens twice, queries on the left and keys on the right, and
// a line from query to key for each selected head whose opacity is the attention weight. Hover or
// focus a token to see only its lines; click (or Enter) to pin the focus.
import { el, svg, fmt, tokenLabels } from './ui.js';
import { headColor } from './colors.js';

const ROW = 21; // px per token
const WIDTH = 440;
const LEFT = 110; // right edge of the query column
const RIGHT = 330; // left edge of the key column
const MIN_WEIGHT = 0.01;
const TOKEN = 48; // px of a token's box // lighter lines would be invisible; they are not drawn

/** HeadView draws one layer of a run into a card. */
export class HeadView {
  /** onFocus(i) is called with the position of the token focused, or null. */
  constructor(root, onFocus) {
    this.root = root;
    this.onFocus = onFocus;
    this.svg = root.querySelector('svg');
    this.info = root.querySelector('.focus-info');
    this.toggles = root.querySelector('.head-toggles');
    this.layerSelect = root.querySelector('select');
    this.layer = 0;
    this.shown = new Set();
    this.pinned = null;
    this.layerSelect.addEventListener('change', () => { this.layer = +this.layerSelect.value; this.draw(); });
    this.svg.addEventListener('mouseleave', () => { if (!this.pinned) this.focus(null); });
  }

  /** show draws run, keeping the layer and head choices when the model's shape allows. */
  show(run) {
    const layers = run.weights.length;
    const heads = run.weights[0].length;
    if (this.run?.model !== run.model) {
      this.layer = layers - 1;
      // Up to four heads' lines read together; of more, one at a time (toggle the others on).
      this.shown = new Set(heads <= 4 ? [...Array(heads).keys()] : [0]);
    }
    this.run = run;
    this.labels = tokenLabels(run);
    this.layerSelect.replaceChildren(...run.weights.map((_, l) =>
      el('option', { value: l, selected: l === this.layer }, `Layer ${l}`)));
    this.toggles.replaceChildren(...[...Array(heads).keys()].map((h) => {
      const box = el('input', { type: 'checkbox', checked: this.shown.has(h), 'aria-label': `show head ${h}`, dataset: { head: h } });
      box.addEventListener('change', () => {
        if (box.checked) this.shown.add(h); else this.shown.delete(h);
        this.draw();
      });
      const sw = el('span', { class: 'swatch' });
      sw.style.background = headColor(h);
      return el('label', { class: 'toggle', title: `double-click: head ${h} only`, ondblclick: (ev) => { ev.preventDefault(); this.only(h); } }, box, sw, `H${h}`);
    }));
    this.draw();
  }

  /** setLayer switches to layer l and shows only head h (from a click elsewhere). */
  select(l, h) {
    this.layer = l;
    this.layerSelect.value = String(l);
    this.only(h);
  }

  only(h) {
    this.shown = new Set([h]);
    this.toggles.querySelectorAll('input').forEach((b) => { b.checked = +b.dataset.head === h; });
    this.draw();
  }

  draw() {
    const { run, layer } = this;
    const T = run.tokens.length;
    const height = T * ROW + 34;
    const s = this.svg;
    s.setAttribute('viewBox', `0 0 ${WIDTH} ${height}`);
    s.setAttribute('width', WIDTH);
    s.setAttribute('height', height);
    const y = (i) => 28 + i * ROW + ROW / 2;
    const edges = svg('g', { class: 'edges' });
    const shown = [...this.shown].sort((a, b) => a - b);
    for (const [n, h] of shown.entries()) {
      const w = run.weights[layer][h];
      const dy = (n - (shown.length - 1) / 2) * 1.6; // heads on the same pair stay apart
      for (let q = 0; q < T; q++) {
        for (let k = 0; k < (run.causal ? q + 1 : T); k++) {
          const a = w[q][k];
          if (a < MIN_WEIGHT) continue;
          edges.append(svg('line', {
            x1: LEFT + 6, y1: y(q) + dy, x2: RIGHT - 6, y2: y(k) + dy, stroke: headColor(h),
            'stroke-opacity': a.toFixed(3), 'stroke-width': 2, class: 'edge',
            dataset: { q, k, h, w: a },
          }));
        }
      }
    }
    const column = (side, x, anchor) => svg('g', { class: `col ${side}` }, this.labels.map((sym, i) => {
      const g = svg('g', {
        class: 'tok', tabindex: 0, role: 'button', dataset: { i, side },
        'aria-label': `${side === 'q' ? 'query' : 'key'} ${i}: ${sym}`,
      },
      svg('rect', { x: anchor === 'end' ? x - TOKEN : x, y: y(i) - ROW / 2 + 1, width: TOKEN, height: ROW - 2, rx: 3, class: 'hit' }),
      svg('g', { class: 'boxes' }),
      svg('text', { x: anchor === 'end' ? x - 4 : x + 4, y: y(i), 'text-anchor': anchor, 'dominant-baseline': 'central' }, sym));
      g.addEventListener('mouseenter', () => { if (!this.pinned) this.focus(side, i); });
      g.addEventListener('focus', () => { if (!this.pinned) this.focus(side, i); });
      g.addEventListener('click', () => this.pin(side, i));
      g.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); this.pin(side, i); }
        if (ev.key === 'Escape') { this.pinned = null; this.focus(null); }
      });
      return g;
    }));
    s.replaceChildren(
      svg('text', { x: LEFT - 4, y: 14, class: 'colhead', 'text-anchor': 'end' }, 'query'),
      svg('text', { x: RIGHT + 4, y: 14, class: 'colhead' }, 'key'),
      edges, column('q', LEFT, 'end'), column('k', RIGHT, 'start'));
    this.root.dataset.lines = edges.childElementCount;
    this.pinned = null;
    this.focus(null);
  }

  pin(side, i) {
    const same = this.pinned && this.pinned.side === side && this.pinned.i === i;
    this.pinned = same ? null : { side, i };
    this.focus(same ? null : side, i);
  }

  /** focus shows only the lines of token i on side ("q" or "k"), or all lines for null. */
  focus(side, i) {
    const s = this.svg;
    let visible = 0;
    let best = null;
    for (const e of s.querySelectorAll('.edge')) {
      const on = side === null || +e.dataset[side] === i;
      e.classList.toggle('off', !on);
      if (on) {
        visible++;
        if (side !== null && (!best || +e.dataset.w > +best.dataset.w)) best = e;
      }
    }
    for (const t of s.querySelectorAll('.tok')) {
      t.classList.toggle('focus', side !== null && t.dataset.side === side && +t.dataset.i === i);
      t.querySelector('.boxes').replaceChildren();
    }
    s.classList.toggle('focused', side !== null);
    this.root.dataset.focus = side === null ? '' : `${side}${i}`;
    this.onFocus(side === null ? null : i);
    this.root.dataset.visible = visible;
    if (side === null) {
      this.info.textContent = `${visible} lines (weights ≥ ${MIN_WEIGHT}) in layer ${this.layer}. Hover or focus a token to see only its lines; click to pin.`;
      return;
    }
    this.drawBoxes(side, i);
    const sym = this.labels[i];
    const other = (e) => (side === 'q' ? +e.dataset.k : +e.dataset.q);
    this.info.replaceChildren(
      el('b', {}, `${side === 'q' ? 'Query' : 'Key'} ${i} “${sym}”`),
      `: ${visible} lines`,
      best ? `; strongest ${side === 'q' ? 'to key' : 'from query'} ${other(best)} “${this.labels[other(best)]}”, head ${best.dataset.h}, α = ${fmt(+best.dataset.w, 3)}` : '',
      this.pinned ? ' (pinned: click again or Esc to release)' : '');
  }

  /** drawBoxes puts, beside each token of the other column, one box per head whose opacity
   * is the weight between it and the focused token, as BertViz does. */
  drawBoxes(side, i) {
    const w = this.run.weights[this.layer];
    const heads = [...this.shown].sort((a, b) => a - b);
    const otherSide = side === 'q' ? 'k' : 'q';
    for (const t of this.svg.querySelectorAll(`.col.${otherSide} .tok`)) {
      const j = +t.dataset.i;
      const rect = t.querySelector('.hit');
      const x0 = otherSide === 'k' ? +rect.getAttribute('x') + TOKEN + 2 : +rect.getAttribute('x') - 8 * heads.length - 2;
      const yy = +rect.getAttribute('y') + 3;
      t.querySelector('.boxes').replaceChildren(...heads.map((h, n) => {
        const a = side === 'q' ? w[h][i][j] : w[h][j][i];
        return svg('rect', { x: x0 + 8 * n, y: yy, width: 7, height: ROW - 8, fill: headColor(h), 'fill-opacity': Math.max(a, 0).toFixed(3), class: 'box' });
      }));
    }
  }
}
