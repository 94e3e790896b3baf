// Colour maps shared by every view: viridis for values in [0, 1] (as package viz draws them),
// a blue–white–red map for signed values, and one colour per head.

// Viridis, sampled at 11 evenly spaced points (matplotlib's values).
const VIRIDIS = [
  [68, 1, 84], [72, 35, 116], [64, 67, 135], [52, 94, 141], [41, 120, 142], [32, 144, 140],
  [34, 167, 132], [68, 190, 112], [121, 209, 81], [189, 222, 38], [253, 231, 36],
];

// Blue – white – red, for −1 … 1.
const DIVERGING = [[33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [239, 138, 98], [178, 24, 43]];

// Tableau 10, one colour per head.
const HEADS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1',
  '#ff9da7', '#9c755f', '#bab0ac'];

/** The grey of a cell a query cannot attend (a later key) or an undefined value. */
export const MASKED = [226, 228, 232];

/** The overlay of a sparse attention map, as package viz draws it: an empty block's fill and
 * hatching, the lines between blocks and a partial block's dashes, a weight of exactly 0. */
export const EMPTY_FILL = [243, 238, 227];
export const HATCH = [168, 159, 140];
export const BLOCK_LINE = [255, 255, 255];
export const ZERO_MARK = [255, 79, 46];

function ramp(stops, t) {
  if (!Number.isFinite(t)) return MASKED;
  const x = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  return stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
}

/** viridis(t) is the [r, g, b] of t in [0, 1]; grey for NaN. */
export const viridis = (t) => ramp(VIRIDIS, t);

/** diverging(v) is the [r, g, b] of v in [−1, 1]; grey for NaN. */
export const diverging = (v) => ramp(DIVERGING, (v + 1) / 2);

/** css turns [r, g, b] into a CSS colour. */
export const css = ([r, g, b]) => `rgb(${r}, ${g}, ${b})`;

/** ink returns a text colour readable on the background [r, g, b]. */
export function ink([r, g, b]) {
  return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? '#1d2330' : '#ffffff';
}

/** headColor is head h's colour: Tableau 10's, then hues a golden angle apart. */
export const headColor = (h) => (h < HEADS.length ? HEADS[h] : `hsl(${Math.round((h * 137.5) % 360)}, 55%, 45%)`);

/** tint is a pale-to-saturated blue for t in [0, 1], for table cells that keep dark text. */
export function tint(t) {
  if (!Number.isFinite(t)) return 'transparent';
  const a = 0.06 + 0.5 * Math.min(1, Math.max(0, t));
  return `rgba(78, 121, 167, ${a.toFixed(3)})`;
}
