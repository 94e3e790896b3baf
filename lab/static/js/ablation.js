// The ablation card: the heads chosen for ablation, each with its mode, and what ablating them
// changes: every position's prediction on this sequence, and loss and accuracy on this sequence
// and on the task.
import { el, fmt, pct, signed, label, guessLabel } from './ui.js';
import { headColor } from './colors.js';

const MODES = [
  ['zero', 'zero', 'the head’s output is replaced by 0'],
  ['mean', 'mean', 'the head’s output is replaced by its mean over the positions (over the task’s sequences for the task score)'],
  ['uniform', 'uniform', 'the head attends evenly to every key it may see'],
];

/** Ablation keeps the list of heads to ablate and shows a /api/ablate answer. */
export class Ablation {
  /** run(list) is called with the ablation list when the user asks for it. */
  constructor(root, run) {
    this.root = root;
    this.list = root.querySelector('.ab-list');
    this.result = root.querySelector('.ab-result');
    this.runButton = root.querySelector('.ab-run');
    this.heads = [];
    this.runButton.addEventListener('click', () => run(this.heads.map((a) => ({ ...a }))));
    root.querySelector('.ab-clear').addEventListener('click', () => { this.heads = []; this.draw(); });
    this.draw();
  }

  /** add puts a head on the list (once), with the zero mode. */
  add(layer, head) {
    if (!this.heads.some((a) => a.layer === layer && a.head === head)) this.heads.push({ layer, head, mode: 'zero' });
    this.draw();
    this.root.scrollIntoView({ block: 'nearest' }); // at once: a smooth scroll moves what the next click aims at
  }

  reset() {
    this.heads = [];
    this.result.replaceChildren();
    this.draw();
  }

  draw() {
    this.runButton.disabled = this.heads.length === 0;
    if (this.heads.length === 0) {
      this.list.replaceChildren(el('p', { class: 'muted' }, 'No head chosen. Pick one with “Ablate” in the table or under the enlarged head of the model view.'));
      return;
    }
    this.list.replaceChildren(...this.heads.map((a, i) => {
      const sel = el('select', { 'aria-label': `mode for layer ${a.layer} head ${a.head}`, class: 'ab-mode' },
        MODES.map(([m, label, title]) => el('option', { value: m, selected: m === a.mode, title }, label)));
      sel.addEventListener('change', () => { a.mode = sel.value; });
      const sw = el('span', { class: 'swatch' });
      sw.style.background = headColor(a.head);
      return el('span', { class: 'chip' }, sw, el('b', {}, `L${a.layer} H${a.head}`), sel,
        el('button', {
          type: 'button', class: 'icon', 'aria-label': `remove layer ${a.layer} head ${a.head}`,
          onclick: () => { this.heads.splice(i, 1); this.draw(); },
        }, '×'));
    }));
  }

  /** show renders a /api/ablate answer. */
  show(res) {
    const what = res.ablate.map((a) => `L${a.layer} H${a.head} (${a.mode})`).join(', ');
    const cards = [];
    if (res.sequence) cards.push(outcome('This sequence', `${res.sequence.before.scored} scored positions`, res.sequence.before, res.sequence.after));
    if (res.task) cards.push(outcome('Task', `${res.task.sequences} fresh sequences`, res.task.before, res.task.after));
    const tokens = res.pieces ? res.pieces.map(label) : res.symbols;
    const rows = res.positions.map((p, t) => {
      const ref = p.target || p.reference;
      const d = ref.after - ref.before;
      const bar = el('span', { class: `delta ${d < 0 ? 'neg' : 'pos'}` });
      bar.style.width = `${Math.min(50, 50 * Math.abs(d))}%`;
      bar.style.left = d < 0 ? `${50 - Math.min(50, 50 * Math.abs(d))}%` : '50%';
      return el('tr', { class: p.changed ? 'changed' : '' },
        el('td', { class: 'num' }, String(t)),
        el('td', { class: 'tokcell' }, tokens[t]),
        el('td', {}, guess(p.before)),
        el('td', {}, guess(p.after)),
        el('td', { class: 'tokcell' }, p.target ? `${guessLabel(p.target)} (target)` : guessLabel(p.reference)),
        el('td', { class: 'num' }, `${fmt(ref.before, 3)} → ${fmt(ref.after, 3)}`),
        el('td', { class: 'deltacell', title: signed(d) }, el('span', { class: 'axis0' }), bar),
        el('td', { class: 'num' }, fmt(p.kl, 3)));
    });
    const changed = res.positions.filter((p) => p.changed).length;
    this.result.replaceChildren(
      el('p', { class: 'ab-what' }, 'Ablated ', el('b', {}, what), `: the top prediction changes at ${changed} of ${res.positions.length} positions.`),
      el('div', { class: 'outcomes' }, cards),
      el('div', { class: 'scroll' }, el('table', { class: 'ab-table' },
        el('thead', {}, el('tr', {}, ['Pos', 'Token', 'Before', 'After', 'Token tracked', 'p before → after', 'Δp', 'KL'].map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, rows))));
    this.root.dataset.changed = changed;
  }
}

function guess(g) {
  return el('span', { class: 'guess' }, el('b', {}, guessLabel(g)), ' ', el('span', { class: 'muted' }, fmt(g.p, 2)));
}

function outcome(title, note, before, after) {
  const row = (label, b, a, f, better) => {
    const d = a - b;
    const worse = better === 'lower' ? d > 1e-9 : d < -1e-9;
    return el('div', { class: 'metric' }, el('span', { class: 'stat-label' }, label),
      el('span', { class: 'vals' }, f(b), ' → ', el('b', {}, f(a))),
      el('span', { class: `chg ${worse ? 'worse' : 'same'}` }, label === 'loss' ? signed(d, 4) : signed(100 * d, 1) + ' pt'));
  };
  return el('div', { class: 'outcome', dataset: { scope: title === 'Task' ? 'task' : 'sequence' } },
    el('h3', {}, title, el('span', { class: 'muted' }, ` · ${note}`)),
    row('loss', before.loss, after.loss, (x) => fmt(x, 4), 'lower'),
    row('accuracy', before.accuracy, after.accuracy, (x) => pct(x), 'higher'));
}
