// The lab's JSON API (see the lab package documentation).

/** ApiError is a 4xx or 5xx answer; message is the server's explanation. */
export class ApiError extends Error {}

/**
 * api GETs path, or POSTs body as JSON when given, and returns the decoded answer. The server
 * takes a POST only as application/json and only from its own origin; the request's referrer
 * policy lets the browser name that origin, where the page's no-referrer policy would make some
 * browsers send "Origin: null".
 */
export async function api(path, body) {
  const init = body === undefined ? {} : {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    referrerPolicy: 'same-origin',
    body: JSON.stringify(body),
  };
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(`The lab server did not answer (${e.message}). Is \`mha lab\` still running?`);
  }
  const text = await res.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    throw new ApiError(`${path}: ${res.status} ${res.statusText}`);
  }
  if (!res.ok) throw new ApiError(data.error || `${path}: ${res.status}`);
  return data;
}

/**
 * pictureURL is the address of a picture, without its format: of a sequence when source is
 * {model, seed}, {model, text} or {model, tokens}, with its sparse attention when it has
 * patterns, block or normalizer; of the model's task when it is {model}.
 */
export function pictureURL(source, params) {
  const q = new URLSearchParams({ model: source.model });
  if (source.seed !== undefined) q.set('seed', String(source.seed));
  else if (source.text !== undefined) q.set('text', source.text);
  else if (source.tokens !== undefined) q.set('tokens', source.tokens.join(','));
  if (source.patterns !== undefined) q.set('patterns', source.patterns.join(' '));
  if (source.block !== undefined) q.set('block', source.block.join(','));
  if (source.normalizer !== undefined) q.set('normalizer', source.normalizer);
  for (const [k, v] of Object.entries(params)) q.set(k, String(v));
  return `/api/picture?${q}`;
}

/**
 * circuitURL is the address of a picture of /api/circuits's request req ({model, clean, corrupt,
 * target, foil, position?}), without its format: kind patching, patching-residual,
 * patching-patterns or attribution.
 */
export function circuitURL(req, kind) {
  const q = new URLSearchParams({ model: req.model, clean: req.clean, corrupt: req.corrupt, target: req.target, foil: req.foil });
  if (req.position !== undefined) q.set('position', String(req.position));
  q.set('kind', kind);
  return `/api/picture?${q}`;
}
