// The experiments view: the chapters' experiments, each run on demand (small sizes) and shown
// as its summary, its table and its pictures.
import { api } from './api.js';
import { el, whileBusy, showError, clearError } from './ui.js';

/** Experiments lists the experiments and shows the one the user runs. */
export class Experiments {
  constructor(root) {
    this.root = root;
    this.nav = root.querySelector('.ex-list');
    this.out = root.querySelector('.ex-result');
    this.loaded = false;
  }

  /** open loads the list the first time the view is shown. */
  async open() {
    if (this.loaded) return;
    this.loaded = true;
    try {
      const list = await api('/api/experiments');
      this.nav.replaceChildren(...list.map((x) => el('li', {}, el('button', {
        type: 'button', class: 'ex-item', dataset: { name: x.name },
        onclick: () => this.run(x.name),
      }, el('b', {}, x.name), el('span', { class: 'muted' }, x.about)))));
    } catch (e) {
      this.loaded = false;
      showError(e.message);
    }
  }

  async run(name) {
    clearError();
    this.nav.querySelectorAll('.ex-item').forEach((b) => b.setAttribute('aria-current', b.dataset.name === name));
    this.out.replaceChildren(el('p', { class: 'muted loading' }, `Running ${name}… (small sizes; the first run of a training experiment takes a few seconds)`));
    try {
      const r = await whileBusy(api(`/api/experiment/${encodeURIComponent(name)}`), this.out);
      this.show(r);
    } catch (e) {
      this.out.replaceChildren();
      showError(e.message);
    }
  }

  show(r) {
    const table = r.table && r.table.columns.length ? el('div', { class: 'scroll' }, el('table', { class: 'ex-table' },
      el('thead', {}, el('tr', {}, r.table.columns.map((c) => el('th', { scope: 'col' }, c)))),
      el('tbody', {}, r.table.rows.map((row) => el('tr', {}, row.map((v) => el('td', {}, v))))))) : null;
    const figures = r.figures.map((f) => el('figure', { class: 'ex-fig' },
      el('img', { src: f.svg, alt: `${r.name}: ${f.name}`, loading: 'lazy' }),
      el('figcaption', {}, f.name, el('span', { class: 'downloads' },
        el('a', { class: 'dl', href: f.png, download: `${r.name}-${f.name}.png` }, 'PNG'),
        el('a', { class: 'dl', href: f.svg, download: `${r.name}-${f.name}.svg` }, 'SVG')))));
    this.out.replaceChildren(
      el('h2', {}, r.title || r.name),
      el('p', { class: 'summary' }, r.summary),
      table,
      el('div', { class: 'ex-figs' }, figures));
    this.out.dataset.name = r.name;
  }
}
