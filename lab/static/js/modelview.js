// The model view: every layer × head as a small heatmap; click one to enlarge it with token
// labels and read each weight on hover.
import { el, tokenLabels } from './ui.js';
import { viridis, MASKED } from './colors.js';

const THUMB = 100; // css px of a thumbnail's side, at most
const MIN_THUMB = 40; // and at least: a model of many heads scrolls down rather than shrink further

/** paint draws the T × T weights w into ctx at (x0, y0), cell px per cell; later keys are grey
 * for a causal model. */
function paint(ctx, w, x0, y0, cell, causal) {
  const T = w.length;
  for (let q = 0; q < T; q++) {
    for (let k = 0; k < T; k++) {
      const [r, g, b] = causal && k > q ? MASKED : viridis(w[q][k]);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(x0 + k * cell, y0 + q * cell, Math.ceil(cell), Math.ceil(cell));
    }
  }
}

/** sized returns a canvas of css size w × h drawn at the device's pixel ratio, and its context. */
function sized(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

/** ModelView draws all heads of a run and the enlarged one. */
export class ModelView {
  /** onSelect(layer, head) is called when the user picks a head. */
  constructor(root, onSelect) {
    this.root = root;
    this.grid = root.querySelector('.mv-grid');
    this.detail = root.querySelector('.mv-detail');
    this.canvas = this.detail.querySelector('canvas');
    this.tip = this.detail.querySelector('.tip');
    this.title = this.detail.querySelector('.mv-title');
    this.onSelect = onSelect;
    this.canvas.addEventListener('mousemove', (ev) => {
      const { x0, y0, cell } = this.geom;
      const r = this.canvas.getBoundingClientRect();
      this.point(Math.floor((ev.clientY - r.top - y0) / cell), Math.floor((ev.clientX - r.left - x0) / cell));
    });
    this.canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    // The keyboard reads the weights too: arrows move over the cells.
    this.canvas.tabIndex = 0;
    this.canvas.addEventListener('focus', () => this.point(this.cursor?.q ?? 0, this.cursor?.k ?? 0));
    this.canvas.addEventListener('blur', () => { this.tip.hidden = true; });
    this.canvas.addEventListener('keydown', (ev) => {
      const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[ev.key];
      if (!step) return;
      ev.preventDefault();
      const T = this.run.tokens.length;
      const clampT = (x) => Math.max(0, Math.min(T - 1, x));
      this.point(clampT(this.cursor.q + step[0]), clampT(this.cursor.k + step[1]));
    });
  }

  show(run, layer, head) {
    this.run = run;
    this.labels = tokenLabels(run);
    const L = run.weights.length;
    const H = run.weights[0].length;
    // The thumbnails share the card's width (less the row titles and the gaps), so that 12
    // heads fit without scrolling sideways; many layers scroll down.
    const room = (this.grid.parentElement.clientWidth || 600) - 64 - 12 * H; // row titles; per column a gap and the border
    const thumb = Math.max(MIN_THUMB, Math.min(THUMB, Math.floor(room / H)));
    this.grid.style.gridTemplateColumns = `auto repeat(${H}, ${thumb}px)`;
    this.root.dataset.thumb = thumb;
    const cells = [el('span', {})];
    for (let h = 0; h < H; h++) cells.push(el('span', { class: 'axis' }, `head ${h}`));
    for (let l = 0; l < L; l++) {
      cells.push(el('span', { class: 'axis row' }, `layer ${l}`));
      for (let h = 0; h < H; h++) {
        const c = el('canvas', { 'aria-hidden': 'true' });
        paint(sized(c, thumb, thumb), run.weights[l][h], 0, 0, thumb / run.tokens.length, run.causal);
        cells.push(el('button', {
          class: 'thumb', type: 'button', title: `layer ${l}, head ${h}`,
          'aria-label': `enlarge layer ${l} head ${h}`, dataset: { layer: l, head: h },
          onclick: () => this.onSelect(l, h),
        }, c));
      }
    }
    this.grid.replaceChildren(...cells);
    this.select(layer, head);
  }

  /** select enlarges head (layer, head). */
  select(layer, head) {
    this.layer = layer;
    this.head = head;
    this.grid.querySelectorAll('.thumb').forEach((b) => {
      const on = +b.dataset.layer === layer && +b.dataset.head === head;
      b.classList.toggle('selected', on);
      b.setAttribute('aria-pressed', on);
    });
    const { run } = this;
    const w = run.weights[layer][head];
    const T = run.tokens.length;
    // Cells as large as the card allows (less the labels), 6 to 22 px: a long text in a card of
    // the page's width keeps readable cells.
    const room = Math.max(460, (this.detail.clientWidth || 560) - 140);
    const cell = Math.max(6, Math.min(22, Math.floor(room / T)));
    const font = Math.min(12, cell - 1);
    const ctx0 = this.canvas.getContext('2d');
    ctx0.font = `${font}px system-ui, sans-serif`;
    const label = Math.ceil(Math.max(...this.labels.map((s) => ctx0.measureText(s).width))) + 8;
    this.geom = { x0: label, y0: label, cell };
    Object.assign(this.canvas.dataset, { x0: label, y0: label, cell });
    const size = label + T * cell + 4;
    const ctx = sized(this.canvas, size, size);
    ctx.clearRect(0, 0, size, size);
    paint(ctx, w, label, label, cell, run.causal);
    ctx.fillStyle = '#3b4252';
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    this.labels.forEach((s, i) => ctx.fillText(s, label - 4, label + (i + 0.5) * cell));
    ctx.save();
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'left';
    this.labels.forEach((s, i) => ctx.fillText(s, -(label - 4), label + (i + 0.5) * cell));
    ctx.restore();
    this.title.textContent = `Layer ${layer} · head ${head}`;
    this.detail.dataset.layer = layer;
    this.detail.dataset.head = head;
  }

  /** point shows the weight of query q and key k in the tooltip, beside its cell. */
  point(q, k) {
    const T = this.run.tokens.length;
    if (q < 0 || k < 0 || q >= T || k >= T) { this.tip.hidden = true; return; }
    this.cursor = { q, k };
    const a = this.run.weights[this.layer][this.head][q][k];
    const s = this.labels;
    this.tip.textContent = this.run.causal && k > q
      ? `query ${q} “${s[q]}” cannot see key ${k} “${s[k]}” (causal)`
      : `query ${q} “${s[q]}” → key ${k} “${s[k]}”: α = ${a.toFixed(4)}`;
    this.tip.hidden = false;
    const { x0, y0, cell } = this.geom;
    const flip = k > T / 2; // keep the tooltip over the matrix
    this.tip.style.left = `${x0 + (flip ? k * cell - 8 : (k + 1) * cell + 8)}px`;
    this.tip.style.top = `${y0 + (q + 1) * cell + 8}px`;
    this.tip.style.transform = flip ? 'translateX(-100%)' : '';
  }
}
