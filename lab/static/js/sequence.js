// The predictions strip: one tile per position with the token, the model's three most likely
// next tokens and, where the task scores the position, the target and whether it was right.
import { el, fmt, pct } from './ui.js';

/** renderPredictions fills the predictions card from a /api/run answer. */
export function renderPredictions(run, root, scoreBox) {
  root.replaceChildren(...run.symbols.map((sym, t) => tile(run, sym, t)));
  scoreBox.replaceChildren();
  if (run.score) {
    const s = run.score;
    scoreBox.append(
      stat('loss', fmt(s.loss, 4), 'mean cross-entropy over the scored positions, nats'),
      stat('accuracy', pct(s.accuracy), `${s.scored} scored positions`),
    );
  } else {
    scoreBox.append(el('span', { class: 'muted' }, 'typed sequence: no targets, predictions only'));
  }
}

function stat(label, value, title) {
  return el('span', { class: 'stat', title }, el('span', { class: 'stat-label' }, label), el('b', {}, value));
}

function tile(run, sym, t) {
  const p = run.predictions[t];
  let cls = 'tile';
  if (p.correct === true) cls += ' right';
  if (p.correct === false) cls += ' wrong';
  const tops = p.top.map((g, i) => el('li', { class: i === 0 ? 'top1' : '' },
    el('span', { class: 'sym' }, g.symbol),
    el('span', { class: 'p' }, fmt(g.p, 2))));
  const bar = el('div', { class: 'conf', title: `p = ${fmt(p.top[0].p, 4)}` }, el('span', {}));
  bar.firstChild.style.width = `${100 * p.top[0].p}%`;
  const e = el('div', { class: cls, dataset: { pos: t } },
    el('div', { class: 'pos' }, String(t)),
    el('div', { class: 'tok', title: `position ${t}: ${sym}` }, sym),
    el('ol', { class: 'tops', 'aria-label': `most likely next tokens at position ${t}` }, tops[0]),
    bar,
    el('ol', { class: 'tops rest', start: 2 }, tops.slice(1)),
    p.target ? el('div', { class: 'target', title: `target ${p.target.symbol}, p = ${fmt(p.target.p, 4)}` },
      p.correct ? '✓ ' : '✗ ', p.target.symbol) : null);
  return e;
}
