// The pruning curve of the heads card (task scope): accuracy or loss as the heads are
// zero-ablated one at a time, least important first (Michel et al. 2019), drawn by the server,
// with the table of which head each step removes.
import { pictureURL } from './api.js';
import { el, fmt, pct, signed, downloads } from './ui.js';
import { tint } from './colors.js';
import { swatch } from './heads.js';

/** Pruning shows the pruning curve of a /api/heads answer. */
export class Pruning {
  /** onSelect(layer, head) picks a head. */
  constructor(root, onSelect) {
    this.root = root;
    this.img = root.querySelector('.prune-img');
    this.table = root.querySelector('.prune-table');
    this.onSelect = onSelect;
    this.metric = 'accuracy';
    root.querySelectorAll('.seg').forEach((b) => b.addEventListener('click', () => {
      this.metric = b.dataset.metric;
      this.drawCurve();
    }));
  }

  /** show renders the curve of meas (a /api/heads answer) of model name. */
  show(name, meas) {
    this.name = name;
    this.meas = meas;
    const heads = meas.pruning.length - 1;
    this.root.querySelector('.pruning-help').textContent =
      `The ${heads} heads are zero-ablated one at a time, least important first (Michel et al. 2019), and the model is scored on the same ${meas.sequences} sequences after each step. A flat start means the first heads removed did little.`;
    this.root.querySelector('.importance-downloads').replaceChildren(
      el('span', { class: 'muted dl-label' }, 'Importance map'),
      downloads(pictureURL({ model: name }, { kind: 'importance' }), `${name}-importance`));
    this.drawCurve();
    this.drawTable();
    this.root.hidden = false;
  }

  hide() {
    this.root.hidden = true;
  }

  drawCurve() {
    const { name, metric } = this;
    this.root.querySelectorAll('.seg').forEach((b) => b.setAttribute('aria-pressed', b.dataset.metric === metric));
    const url = pictureURL({ model: name }, { kind: 'pruning', metric });
    this.img.src = `${url}&format=svg`;
    this.img.alt = `${name}: ${metric} against the fraction of heads removed, least important first`;
    this.root.querySelector('.curve-downloads').replaceChildren(downloads(url, `${name}-pruning-${metric}`));
  }

  drawTable() {
    const points = this.meas.pruning;
    const losses = points.map((p) => p.loss);
    const [lo, hi] = [Math.min(...losses), Math.max(...losses)];
    const head = el('tr', {},
      el('th', { scope: 'col' }, 'Removed'),
      el('th', { scope: 'col' }, 'Last head removed'),
      el('th', { scope: 'col', class: 'num' }, 'Accuracy'),
      el('th', { scope: 'col', class: 'num', title: 'change of accuracy from the step before, in percentage points' }, 'Change'),
      el('th', { scope: 'col', class: 'num' }, 'Loss'));
    const rows = points.map((p, i) => {
      const last = p.last;
      const acc = el('td', { class: 'num' }, pct(p.accuracy));
      acc.style.background = tint(p.accuracy);
      const loss = el('td', { class: 'num' }, fmt(p.loss));
      loss.style.background = tint(hi > lo ? (p.loss - lo) / (hi - lo) : 0);
      const tr = el('tr', { dataset: { removed: p.removed } },
        el('td', { class: 'num' }, `${p.removed} · ${pct(p.fraction)}`),
        el('td', {}, last ? [swatch(last.head), `L${last.layer} H${last.head}`] : el('span', { class: 'muted' }, 'none (the model as trained)')),
        acc, el('td', { class: 'num' }, i === 0 ? '' : change(p.accuracy - points[i - 1].accuracy)), loss);
      if (last) {
        tr.tabIndex = 0;
        tr.classList.add('pick');
        tr.title = `select layer ${last.layer} head ${last.head}`;
        tr.addEventListener('click', () => this.onSelect(last.layer, last.head));
        tr.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') this.onSelect(last.layer, last.head); });
      }
      return tr;
    });
    this.table.replaceChildren(el('thead', {}, head), el('tbody', {}, rows));
  }
}

/** change shows a change of accuracy in percentage points, marked worse when it falls by more than 0.05. */
function change(d) {
  return el('span', { class: `chg ${d < -0.0005 ? 'worse' : 'same'}` }, `${signed(100 * d, 1)} pts`);
}
