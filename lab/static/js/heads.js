// The heads card: a sortable table of every head's metrics, with cells shaded by value, and
// the pairwise comparisons (ρ, Jensen–Shannon distance, argmax NMI) of one layer's heads.
import { el, fmt, downloads } from './ui.js';
import { css, diverging, headColor, ink, tint, viridis } from './colors.js';

const COLUMNS = [
  { key: 'entropy', label: 'Entropy', unit: 'nats', title: 'mean −Σ α ln α of a query row; 0 = all weight on one key' },
  { key: 'confidence', label: 'Confidence', title: 'mean largest weight of a query row' },
  { key: 'prev_token', label: 'Prev-token', title: 'mean α(t, t−1): attention to the previous token' },
  { key: 'first_token', label: 'First token', title: 'mean α(t, 0) over the queries after the first: attention sinks' },
  { key: 'duplicate_token', label: 'Duplicate', title: 'weight on earlier copies of the query’s own token (duplicate-token heads)' },
  { key: 'prefix_matching', label: 'Prefix-match', title: 'Olsson et al. 2022: weight on the token after an earlier copy of the current one (induction)' },
  { key: 'ground_truth', label: 'Ground truth', title: 'share of attention where the task says the answer is' },
  { key: 'importance', label: 'Importance', title: 'Michel et al. 2019: E|∂L/∂ξ_h| for a gate ξ_h on the head, normalised per layer (on the task, or on a language model’s next-token loss over the text)' },
];

const PAIRS = [
  { key: 'similarity', metric: 'rho', label: 'ρ (output cosine)', signed: true, title: 'chapter 000 eq. 5.2.6: cosine similarity of the heads\u2019 outputs' },
  { key: 'js_distance', metric: 'js', label: 'JS distance', title: 'mean Jensen–Shannon distance of the attention rows (base 2, in [0, 1])' },
  { key: 'argmax_nmi', metric: 'nmi', label: 'Argmax NMI', title: 'normalised mutual information of the keys each head attends most' },
];

/** HeadsTable renders a measurement as the metric table and the pair matrices. */
export class HeadsTable {
  /** onSelect(layer, head) picks a head; onAblate(layer, head) adds it to the ablation. */
  constructor(root, onSelect, onAblate) {
    this.root = root;
    this.table = root.querySelector('table.metrics');
    this.pairs = root.querySelector('.pairs');
    this.layerSelect = root.querySelector('.pairs-layer');
    this.about = root.querySelector('.heads-about');
    this.onSelect = onSelect;
    this.onAblate = onAblate;
    this.sort = { key: null, dir: 1 };
    this.layerSelect.addEventListener('change', () => this.drawPairs());
  }

  /** show renders meas (from /api/run or /api/heads); urlOf(params) builds picture links. */
  show(meas, urlOf, selected) {
    this.meas = meas;
    this.about.textContent = meas.about;
    this.urlOf = urlOf;
    this.selected = selected;
    const layers = meas.layers.length;
    const keep = Math.min(+this.layerSelect.value || 0, layers - 1);
    this.layerSelect.replaceChildren(...meas.layers.map((_, l) =>
      el('option', { value: l, selected: l === (selected ? selected.layer : keep) }, `Layer ${l}`)));
    this.drawTable();
    this.drawPairs();
  }

  /** select highlights a head and shows its layer's pairs. */
  select(layer, head) {
    this.selected = { layer, head };
    this.table.querySelectorAll('tbody tr').forEach((tr) => {
      tr.classList.toggle('selected', +tr.dataset.layer === layer && +tr.dataset.head === head);
    });
    if (+this.layerSelect.value !== layer) {
      this.layerSelect.value = String(layer);
      this.drawPairs();
    }
  }

  drawTable() {
    // A column no head has a value in (ground truth without a task) is left out.
    const columns = COLUMNS.filter((c) => c.key !== 'ground_truth' || this.meas.heads.some((h) => h[c.key] !== null));
    const rows = [...this.meas.heads];
    const { key, dir } = this.sort;
    if (key) {
      rows.sort((a, b) => {
        const x = a[key];
        const y = b[key];
        if (x === null) return y === null ? 0 : 1;
        if (y === null) return -1;
        return dir * (x - y);
      });
    }
    const ranges = Object.fromEntries(columns.map((c) => {
      const v = this.meas.heads.map((h) => h[c.key]).filter((x) => x !== null);
      return [c.key, [Math.min(...v), Math.max(...v)]];
    }));
    const th = (c) => {
      const sorted = key === c.key;
      return el('th', { scope: 'col', 'aria-sort': sorted ? (dir > 0 ? 'ascending' : 'descending') : 'none', title: c.title },
        el('button', {
          type: 'button', class: 'sort', dataset: { key: c.key },
          onclick: () => {
            this.sort = { key: c.key, dir: sorted ? -dir : -1 };
            this.drawTable();
          },
        }, c.label, el('span', { class: 'arrow', 'aria-hidden': 'true' }, sorted ? (dir > 0 ? '▲' : '▼') : '↕')));
    };
    const head = el('tr', {}, el('th', { scope: 'col' }, 'Head'), columns.map(th), el('th', { scope: 'col' }, el('span', { class: 'sr-only' }, 'Actions')));
    const body = rows.map((r) => {
      const sel = this.selected && this.selected.layer === r.layer && this.selected.head === r.head;
      const tr = el('tr', {
        class: sel ? 'selected' : '', tabindex: 0, dataset: { layer: r.layer, head: r.head },
        onclick: () => this.onSelect(r.layer, r.head),
        onkeydown: (ev) => { if (ev.key === 'Enter') this.onSelect(r.layer, r.head); },
      },
      el('th', { scope: 'row' }, swatch(r.head), `L${r.layer} H${r.head}`),
      columns.map((c) => {
        const v = r[c.key];
        const [lo, hi] = ranges[c.key];
        const td = el('td', { class: 'num', dataset: { key: c.key } }, fmt(v));
        td.style.background = tint(v === null ? NaN : (hi > lo ? (v - lo) / (hi - lo) : 0.5));
        return td;
      }),
      el('td', {}, el('button', {
        type: 'button', class: 'small', title: `ablate layer ${r.layer} head ${r.head}`,
        onclick: (ev) => { ev.stopPropagation(); this.onAblate(r.layer, r.head); },
      }, 'Ablate')));
      return tr;
    });
    this.table.replaceChildren(el('thead', {}, head), el('tbody', {}, body));
  }

  drawPairs() {
    const l = +this.layerSelect.value;
    const pairs = this.meas.layers[l];
    this.pairs.replaceChildren(...PAIRS.map((p) => {
      const m = pairs[p.key];
      const H = m.length;
      const cells = [el('tr', {}, el('th', {}), [...Array(H).keys()].map((j) => el('th', { scope: 'col' }, `H${j}`)))];
      for (let i = 0; i < H; i++) {
        cells.push(el('tr', {}, el('th', { scope: 'row' }, `H${i}`), m[i].map((v) => {
          const rgb = v === null ? [226, 228, 232] : (p.signed ? diverging(v) : viridis(v));
          const td = el('td', { title: v === null ? 'undefined' : v.toFixed(4) }, v === null ? '–' : v.toFixed(2));
          td.style.background = css(rgb);
          td.style.color = ink(rgb);
          return td;
        })));
      }
      return el('figure', { class: 'pair', dataset: { metric: p.metric } },
        el('figcaption', { title: p.title }, p.label,
          downloads(this.urlOf({ kind: 'similarity', layer: l, metric: p.metric }), `layer${l}-${p.metric}`)),
        el('table', { class: 'matrix' }, el('tbody', {}, cells)));
    }));
  }
}

/** swatch is a small square of head h's colour. */
export function swatch(h) {
  const s = el('span', { class: 'swatch' });
  s.style.background = headColor(h);
  return s;
}
