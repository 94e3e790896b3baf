// The model view: every layer × head as a small heatmap; click one to enlarge it with token
// labels and read each weight on hover.
import { el, tokenLabels } from './ui.js';
import { viridis, MASKED, css, EMPTY_FILL, HATCH, BLOCK_LINE, ZERO_MARK } from './colors.js';

const THUMB = 100; // css px of a thumbnail's side, at most
const MIN_THUMB = 40; // and at least: a model of many heads scrolls down rather than shrink further

// The overlay's sizes in css px, as package viz draws it: below MIN_BLOCK a block gets no lines
// or hatching, below MIN_DASHED a partial block no border, below MIN_DOT a zero a square.
const MIN_BLOCK = 4;
const MIN_DASHED = 20;
const HATCH_STEP = 5;
const MIN_DOT = 4;

/** paint draws the T × T weights w into ctx at (x0, y0), cell px per cell: grey where the query
 * cannot see the key (sparsity.visible), then the patterns' block map and a red mark on each
 * visible weight that is exactly 0 (for a normalizer other than softmax). */
function paint(ctx, w, x0, y0, cell, sparsity) {
  const T = w.length;
  const { visible } = sparsity;
  for (let q = 0; q < T; q++) {
    for (let k = 0; k < T; k++) {
      ctx.fillStyle = css(visible[q][k] === '1' ? viridis(w[q][k]) : MASKED);
      ctx.fillRect(x0 + k * cell, y0 + q * cell, Math.ceil(cell), Math.ceil(cell));
    }
  }
  if (sparsity.blocks) paintBlocks(ctx, x0, y0, cell, T, sparsity);
  if (!sparsity.zeros) return;
  ctx.fillStyle = css(ZERO_MARK);
  for (let q = 0; q < T; q++) {
    for (let k = 0; k < T; k++) {
      if (visible[q][k] !== '1' || w[q][k] !== 0) continue;
      const x = x0 + k * cell;
      const y = y0 + q * cell;
      if (cell < MIN_DOT) {
        ctx.fillRect(x + cell / 4, y + cell / 4, cell / 2, cell / 2);
      } else {
        ctx.beginPath();
        ctx.arc(x + cell / 2, y + cell / 2, cell / 5, 0, 2 * Math.PI);
        ctx.fill();
      }
    }
  }
}

/** paintBlocks draws sparsity's block map over T × T cells: empty blocks (never computed)
 * hatched on a pale fill, partial ones with a dashed border, white lines between blocks. */
function paintBlocks(ctx, x0, y0, cell, T, sparsity) {
  const [bq, bk] = sparsity.block;
  const big = bq * cell >= MIN_BLOCK && bk * cell >= MIN_BLOCK;
  ctx.save();
  ctx.lineWidth = 1;
  sparsity.blocks.forEach((row, qb) => row.forEach((kind, kb) => {
    const x = x0 + kb * bk * cell;
    const y = y0 + qb * bq * cell;
    const bw = Math.min(bk, T - kb * bk) * cell;
    const bh = Math.min(bq, T - qb * bq) * cell;
    if (kind === 'empty') {
      ctx.fillStyle = css(EMPTY_FILL);
      ctx.fillRect(x, y, bw, bh);
      if (!big) return;
      ctx.save();
      ctx.beginPath();
      ctx.rect(x, y, bw, bh);
      ctx.clip();
      ctx.strokeStyle = css(HATCH);
      ctx.beginPath();
      for (let d = HATCH_STEP; d < bw + bh; d += HATCH_STEP) {
        ctx.moveTo(x + d - bh, y + bh);
        ctx.lineTo(x + d, y);
      }
      ctx.stroke();
      ctx.restore();
    } else if (kind === 'partial' && bw >= MIN_DASHED && bh >= MIN_DASHED) {
      ctx.strokeStyle = css(BLOCK_LINE);
      ctx.setLineDash([3, 3]);
      ctx.strokeRect(x + 1.5, y + 1.5, bw - 3, bh - 3);
      ctx.setLineDash([]);
    }
  }));
  if (big) {
    ctx.strokeStyle = css(BLOCK_LINE);
    ctx.beginPath();
    for (let i = bq; i < T; i += bq) {
      ctx.moveTo(x0, y0 + i * cell);
      ctx.lineTo(x0 + T * cell, y0 + i * cell);
    }
    for (let j = bk; j < T; j += bk) {
      ctx.moveTo(x0 + j * cell, y0);
      ctx.lineTo(x0 + j * cell, y0 + T * cell);
    }
    ctx.stroke();
  }
  ctx.restore();
}

/** zeroNote says which share of a head's visible weights is exactly 0, or '' for softmax. */
function zeroNote(run, layer, head) {
  const z = run.sparsity.zeros;
  return z ? `${Math.round(100 * z[layer][head])}% of the visible weights exactly 0` : '';
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
        paint(sized(c, thumb, thumb), run.weights[l][h], 0, 0, thumb / run.tokens.length, run.sparsity);
        const zeros = zeroNote(run, l, h);
        cells.push(el('button', {
          class: 'thumb', type: 'button', title: `layer ${l}, head ${h}${zeros ? ` · ${zeros}` : ''}`,
          'aria-label': `enlarge layer ${l} head ${h}`, dataset: { layer: l, head: h },
          onclick: () => this.onSelect(l, h),
        }, c));
      }
    }
    this.grid.replaceChildren(...cells);
    this.describe(run.sparsity);
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
    paint(ctx, w, label, label, cell, run.sparsity);
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
    const zeros = zeroNote(run, layer, head);
    this.title.textContent = `Layer ${layer} · head ${head}${zeros ? ` · ${zeros}` : ''}`;
    this.detail.dataset.layer = layer;
    this.detail.dataset.head = head;
  }

  /** describe says under which sparse attention the heads ran, and what the overlay marks. */
  describe(sp) {
    const p = this.root.querySelector('.mv-sparsity');
    const adaptive = sp.zeros !== undefined;
    // Queries whose patterns, causal mask and window leave them no key: mha gives them weights
    // 0 and head output 0 (PyTorch would give NaN).
    const blind = sp.visible.filter((row) => !row.includes('1')).length;
    p.hidden = !sp.blocks && !adaptive && !blind;
    if (p.hidden) return;
    const swatch = (c) => {
      const e = el('span', { class: 'swatch' });
      e.style.background = css(c); // a style attribute would break the page's CSP
      return e;
    };
    const parts = [];
    if (sp.blocks) {
      parts.push(`Sparse attention: ${sp.patterns.join(' ')} in blocks of ${sp.block[0]} × ${sp.block[1]}; white lines part the blocks,`,
        swatch(EMPTY_FILL), 'hatched blocks are empty (never computed), dashed ones partial (some pairs kept).');
    }
    if (adaptive) {
      parts.push(` Normalizer ${sp.normalizer}:`, swatch(ZERO_MARK), 'red dots mark the weights that are exactly 0.');
    }
    if (blind) {
      parts.push(blind === 1 ? ' 1 query sees no key: its weights and its heads\' outputs are 0.'
        : ` ${blind} queries see no key: their weights and their heads' outputs are 0.`);
    }
    p.replaceChildren(...parts);
  }

  /** point shows the weight of query q and key k in the tooltip, beside its cell. */
  point(q, k) {
    const T = this.run.tokens.length;
    if (q < 0 || k < 0 || q >= T || k >= T) { this.tip.hidden = true; return; }
    this.cursor = { q, k };
    const a = this.run.weights[this.layer][this.head][q][k];
    const s = this.labels;
    const sp = this.run.sparsity;
    let why = '';
    if (this.run.causal && k > q) why = 'causal';
    else if (sp.blocks) {
      const empty = sp.blocks[Math.floor(q / sp.block[0])][Math.floor(k / sp.block[1])] === 'empty';
      why = empty ? 'an empty block, never computed' : 'outside the patterns';
    } else why = 'outside the window';
    this.tip.textContent = sp.visible[q][k] !== '1'
      ? `query ${q} “${s[q]}” cannot see key ${k} “${s[k]}” (${why})`
      : `query ${q} “${s[q]}” → key ${k} “${s[k]}”: α = ${a === 0 && sp.zeros ? '0 exactly' : a.toFixed(4)}`;
    this.tip.hidden = false;
    const { x0, y0, cell } = this.geom;
    const flip = k > T / 2; // keep the tooltip over the matrix
    this.tip.style.left = `${x0 + (flip ? k * cell - 8 : (k + 1) * cell + 8)}px`;
    this.tip.style.top = `${y0 + (q + 1) * cell + 8}px`;
    this.tip.style.transform = flip ? 'translateX(-100%)' : '';
  }
}
