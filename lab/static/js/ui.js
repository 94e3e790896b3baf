// Small DOM helpers: element construction, number formatting, the error banner and the busy bar.

/**
 * el creates an element: el('td', {class: 'num', title: 'x'}, 'text', child…). Attributes
 * starting with "on" are listeners; "dataset" is an object of data-* values.
 */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  e.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return e;
}

/** svg creates an SVG element with attributes. */
export function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(e, attrs);
  e.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
}

/** fmt prints a number with d decimals, or an en dash when it is null. */
export function fmt(x, d = 3) {
  return x === null || x === undefined || Number.isNaN(x) ? '–' : x.toFixed(d);
}

/** pct prints a fraction as a percentage. */
export function pct(x, d = 1) {
  return x === null || x === undefined ? '–' : `${(100 * x).toFixed(d)}%`;
}

/** signed prints a change with its sign. */
export function signed(x, d = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  return (x > 0 ? '+' : x < 0 ? '−' : '±') + Math.abs(x).toFixed(d);
}

const banner = () => document.getElementById('banner');

/** showError puts a message in the error banner. */
export function showError(msg) {
  const b = banner();
  b.querySelector('.msg').textContent = msg;
  b.hidden = false;
}

/** clearError hides the error banner. */
export function clearError() {
  banner().hidden = true;
}

let busy = 0;

/** whileBusy shows the busy bar and marks the cards busy while the promise runs. */
export async function whileBusy(promise, ...cards) {
  busy++;
  document.body.classList.add('busy');
  cards.forEach((c) => c && c.setAttribute('aria-busy', 'true'));
  try {
    return await promise;
  } finally {
    cards.forEach((c) => c && c.removeAttribute('aria-busy'));
    if (--busy === 0) document.body.classList.remove('busy');
  }
}

/** download returns a small "PNG · SVG" pair of links to a picture URL without its format. */
export function downloads(url, name) {
  const link = (format) => el('a', {
    class: 'dl', href: `${url}&format=${format}`, download: `${name}.${format}`,
    title: `Download ${name}.${format}`, dataset: { format },
  }, format.toUpperCase());
  return el('span', { class: 'downloads' }, link('png'), link('svg'));
}

/**
 * label prints a token on one line: line breaks and tabs as arrows, a token of spaces as ␣ (a
 * leading space stays: it marks the start of a word).
 */
export function label(piece) {
  const s = piece.replace(/\r?\n/g, '↵').replace(/\t/g, '⇥');
  return s.trim() === '' ? '␣'.repeat(Math.max(1, s.length)) : s;
}

/** tokenLabels returns how the views print the tokens of a run: its pieces or its symbols. */
export function tokenLabels(run) {
  return run.pieces ? run.pieces.map(label) : run.symbols;
}

/** guessLabel prints a predicted token: what it reads as, or its symbol. */
export function guessLabel(g) {
  return g.piece !== undefined ? label(g.piece) : g.symbol;
}
