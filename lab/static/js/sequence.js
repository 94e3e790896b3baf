// The predictions strip: one tile per position with the token, the model's three most likely
// next tokens (the token at the position, for a masked-LM model), where there is a target, the
// target and whether it was right, and for a mixture of experts the experts it went through.
import { el, fmt, pct, tokenLabels, guessLabel } from './ui.js';

/**
 * renderPredictions fills the predictions card from a /api/run answer; text is what was typed,
 * shown in strip cut into its tokens.
 */
export function renderPredictions(run, root, scoreBox, text, strip) {
  const labels = tokenLabels(run);
  const covered = coveredText(run, text);
  root.replaceChildren(...labels.map((sym, t) => tile(run, sym, t, covered[t])));
  strip.replaceChildren(...textStrip(run, text));
  strip.hidden = strip.childElementCount === 0;
  root.dataset.predicts = run.predicts;
  scoreBox.replaceChildren();
  if (run.score) {
    const s = run.score;
    const what = run.seed === undefined ? 'next tokens of the text' : 'scored positions';
    scoreBox.append(
      stat('loss', fmt(s.loss, 4), `mean cross-entropy over the ${s.scored} ${what}, nats`),
      stat('accuracy', pct(s.accuracy), `${s.scored} ${what}`),
    );
  } else if (run.predicts === 'masked') {
    const n = run.predictions.filter((p) => p.masked).length;
    scoreBox.append(el('span', { class: 'muted' }, n ? `${n} masked position${n > 1 ? 's' : ''}: the model’s guesses are on the highlighted tiles` : 'no mask token in the text: write one where the model should guess'));
  } else if (run.predicts === 'none') {
    scoreBox.append(el('span', { class: 'muted' }, 'this model has no language-model head: no predictions'));
  } else {
    scoreBox.append(el('span', { class: 'muted' }, 'typed sequence: no targets, predictions only'));
  }
}

/** coveredText returns, per token, the part of text it covers (from its byte offsets), or null. */
function coveredText(run, text) {
  if (!run.offsets || text === undefined) return run.tokens.map(() => null);
  const bytes = new TextEncoder().encode(text);
  const dec = new TextDecoder();
  return run.offsets.map(([a, b]) => (b > a ? dec.decode(bytes.slice(a, b)) : null));
}

/**
 * textStrip returns the typed text cut into the tokens that cover it (from their byte offsets),
 * shaded in turn, with the tokens the tokenizer added (no offsets) as badges; a token that holds
 * part of a character shares the first one's span. Empty without offsets.
 */
function textStrip(run, text) {
  if (!run.offsets || text === undefined) return [];
  const bytes = new TextEncoder().encode(text);
  const dec = new TextDecoder();
  const parts = [];
  let at = 0;
  run.offsets.forEach(([a, b], t) => {
    if (b <= a) {
      parts.push(el('span', { class: 'special', title: `position ${t}: ${run.symbols[t]}, added by the tokenizer`, dataset: { pos: t } }, run.symbols[t]));
      return;
    }
    if (a < at) return;
    if (a > at) parts.push(dec.decode(bytes.slice(at, a)));
    parts.push(el('span', { class: `piece p${t % 2}`, title: `position ${t}: ${run.symbols[t]} (id ${run.tokens[t]})`, dataset: { pos: t } }, dec.decode(bytes.slice(a, b))));
    at = b;
  });
  if (at < bytes.length) parts.push(dec.decode(bytes.slice(at)));
  return parts;
}

function stat(label, value, title) {
  return el('span', { class: 'stat', title }, el('span', { class: 'stat-label' }, label), el('b', {}, value));
}

/**
 * showRouting writes, for a mixture of experts, the experts each position went through in layer
 * (with their weights) on its tile, and every layer's in the tile's tooltip.
 */
export function showRouting(run, root, layer) {
  if (!run.routing) return;
  root.querySelectorAll('.tile').forEach((tileEl) => {
    const t = Number(tileEl.dataset.pos);
    const line = (l) => run.routing[l].experts[t].map((e, j) => `#${e} ${fmt(run.routing[l].weights[t][j], 2)}`).join(', ');
    const box = tileEl.querySelector('.experts');
    box.textContent = `L${layer} experts ${line(layer)}`;
    box.title = run.routing.map((_, l) => `layer ${l}: ${line(l)}`).join('\n');
  });
}

function tile(run, sym, t, covered) {
  const p = run.predictions ? run.predictions[t] : null;
  const experts = run.routing ? el('div', { class: 'experts' }) : null;
  let cls = 'tile';
  if (p && p.correct === true) cls += ' right';
  if (p && p.correct === false) cls += ' wrong';
  if (run.predicts === 'masked') cls += p && p.masked ? ' masked' : ' unmasked';
  const where = covered === null ? `position ${t}: ${run.symbols[t]}` : `position ${t}: ${run.symbols[t]} (“${covered}” in the text)`;
  const head = [el('div', { class: 'pos' }, String(t)), el('div', { class: 'tok', title: where }, sym)];
  if (!p) return el('div', { class: cls, dataset: { pos: t } }, head, experts);
  const tops = p.top.map((g, i) => el('li', { class: i === 0 ? 'top1' : '' },
    el('span', { class: 'sym' }, guessLabel(g)),
    el('span', { class: 'p' }, fmt(g.p, 2))));
  const bar = el('div', { class: 'conf', title: `p = ${fmt(p.top[0].p, 4)}` }, el('span', {}));
  bar.firstChild.style.width = `${100 * p.top[0].p}%`;
  const what = run.predicts === 'masked' ? `most likely tokens at position ${t}` : `most likely next tokens at position ${t}`;
  return el('div', { class: cls, dataset: { pos: t } },
    head,
    el('ol', { class: 'tops', 'aria-label': what }, tops[0]),
    bar,
    el('ol', { class: 'tops rest', start: 2 }, tops.slice(1)),
    p.target ? el('div', { class: 'target', title: `target ${p.target.symbol}, p = ${fmt(p.target.p, 4)}` },
      p.correct ? '✓ ' : '✗ ', guessLabel(p.target)) : null,
    experts);
}
