// The lab page: wires the controls to the API and the views.
import { api, pictureURL } from './api.js';
import { el, whileBusy, showError, clearError, downloads } from './ui.js';
import { Flow } from './flow.js';
import { renderPredictions, showRouting } from './sequence.js';
import { HeadView } from './headview.js';
import { ModelView } from './modelview.js';
import { HeadsTable } from './heads.js';
import { Pruning } from './pruning.js';
import { Ablation } from './ablation.js';
import { Experiments } from './experiments.js';
import { Circuits } from './circuits.js';

const $ = (sel) => document.querySelector(sel);

const state = {
  models: [],
  model: null, // the chosen model's /api/models entry
  source: null, // the request that produced run: {model, seed}, {model, text} or {model, tokens}
  generated: null, // {seed, text} of the last generated sequence
  run: null, // the /api/run answer shown
  selected: { layer: 0, head: 0 },
  scope: 'sequence',
  task: new Map(), // model name → /api/heads answer
};

const headView = new HeadView($('#headview'), highlight);
const modelView = new ModelView($('#modelview'), select);
const headsTable = new HeadsTable($('#heads'), select, (l, h) => ablation.add(l, h));
const pruning = new Pruning($('#heads .pruning'), select);
const ablation = new Ablation($('#ablation'), runAblation);
const experiments = new Experiments($('#view-experiments'));
const circuits = new Circuits($('#view-circuits'));
const flow = new Flow($('#flow'));

// The text a model without a task starts with: BERT guesses a masked word (at the model's own mask
// token: RoBERTa's <mask>).
const FIRST_TEXT = { next: 'The cat sat on the mat', masked: 'the cat [MASK] on the mat.', none: 'The cat sat on the mat' };

/** highlight marks the token at position pos (or none, for null) in the text and on its tile. */
function highlight(pos) {
  document.querySelectorAll('#text-strip .hot, #predictions .tile.hot').forEach((e) => e.classList.remove('hot'));
  if (pos === null) return;
  document.querySelectorAll(`#text-strip [data-pos="${pos}"], #predictions .tile[data-pos="${pos}"]`).forEach((e) => e.classList.add('hot'));
}

function select(layer, head) {
  state.selected = { layer, head };
  if (state.run) showRouting(state.run, $('#predictions'), layer);
  modelView.select(layer, head);
  headsTable.select(layer, head);
  headView.select(layer, head);
  headDownloads();
  flow.select(state.source, layer, head);
}

function headDownloads() {
  const { layer, head } = state.selected;
  $('.head-downloads').replaceChildren(downloads(pictureURL(state.source, { kind: 'head', layer, head }), `${state.model.name}-L${layer}H${head}`));
}

async function loadModels() {
  state.models = await api('/api/models');
  circuits.setModels(state.models);
  const option = (m) => el('option', { value: m.name },
    `${m.name} — ${m.layers} layer${m.layers > 1 ? 's' : ''} × ${m.heads} heads${m.user ? ` · ${m.architecture}` : ''}`);
  const shipped = state.models.filter((m) => !m.user);
  const user = state.models.filter((m) => m.user);
  $('#model').replaceChildren(
    el('optgroup', { label: 'Shipped models (one per task)' }, shipped.map(option)),
    user.length ? el('optgroup', { label: 'Your models (--model)' }, user.map(option)) : null);
  const wanted = new URLSearchParams(location.search).get('model');
  const first = state.models.find((m) => m.name === wanted) || state.models.find((m) => m.name === 'induction') || state.models[0];
  $('#model').value = first.name;
  await chooseModel(first.name);
}

async function chooseModel(name) {
  const m = state.models.find((x) => x.name === name);
  state.model = m;
  state.generated = null;
  state.run = null;
  state.selected = { layer: m.layers - 1, head: 0 };
  $('#model-desc').replaceChildren(...[
    el('span', {}, m.describe),
    el('span', { class: 'facts' },
      `d_model ${m.d_model} · ${m.layers}×${m.heads} heads of ${m.head_dims.join('/')} · ${m.attn_only ? 'attention only' : m.experts ? `with ${m.experts} experts (${m.experts_per_token} a token)` : 'with MLP'} · ${m.norm}-norm · ${m.params.toLocaleString('en')} parameters · seq_len ${m.seq_len}${m.user ? ` · vocab ${m.vocab} · ${m.causal ? 'causal' : 'bidirectional'}` : ''}`),
    m.command ? el('code', { class: 'cmd', title: 'the command that trained it' }, m.command) : null].filter((x) => x));
  $('#predictions-help').textContent = {
    next: `Each tile is a position: its token, then the model’s three most likely next tokens. Green and red mark the positions ${m.task ? 'the task scores' : 'whose next token the first guess gets right or wrong'}.`,
    masked: `Each tile is a position: its token, then the model’s three most likely tokens there. The guesses that count are at the ${m.mask || '[MASK]'} positions, highlighted.`,
    none: 'This model has no language-model head (only its hidden states mean something): no predictions.',
  }[m.predicts] + (m.experts ? ' Under each, the experts its token went through in the selected layer, with their weights (every layer’s in the tooltip).' : '');
  // The sparse attention fields start empty: the model's own, which the placeholders show.
  $('#patterns').value = '';
  $('#block').value = '';
  $('#normalizer').value = '';
  $('#patterns').placeholder = m.patterns ? `${m.patterns.join(' ')} (the model’s own)` : 'none (the model’s own: dense)';
  $('#block').placeholder = (m.block || [64, 64]).join(',');
  $('#normalizer').placeholder = `${m.normalizer || 'softmax'} (the model’s own)`;
  $('#seed-field').hidden = !m.task;
  $('#generate').hidden = !m.task;
  $('#scope-task').textContent = m.task ? 'Task' : 'Repeated tokens';
  $('#scope-task').title = m.task ? 'measured on 64 sequences of the task' : 'measured on random tokens repeated once (induction, duplicate-token)';
  ablation.reset();
  if (m.task) {
    const shown = m.symbols.length > 14 ? `${m.symbols.slice(0, 6).join(' ')} … ${m.symbols.slice(-3).join(' ')}` : m.symbols.join(' ');
    $('#seq-hint').textContent = `(up to ${m.seq_len} of: ${shown})`;
    $('#seq-help').textContent = 'Space-separated symbols. A generated sequence carries the task’s targets, so the page can mark each prediction right or wrong; edit it and it becomes a typed sequence.';
    await generate();
    return;
  }
  if (!m.tokenizer) {
    $('#seq-hint').textContent = `(token ids 0 to ${m.vocab - 1}, up to ${m.max_tokens})`;
    $('#seq-help').textContent = 'This model has no tokenizer.json: type token ids separated by spaces.';
    $('#seq').value = '0 1 2 3 0 1 2 3';
    await runTyped();
    return;
  }
  $('#seq-hint').textContent = `(text, up to ${m.max_tokens} tokens)`;
  $('#seq-help').textContent = m.predicts === 'masked'
    ? `Text, encoded with the model’s tokenizer (with its special tokens). Write ${m.mask || '[MASK]'} where the model should guess: its guesses show on the masked tiles.`
    : 'Text, encoded with the model’s tokenizer (with its special tokens). Each tile shows a token as the tokenizer cut it, and the model’s three most likely next tokens; green and red compare the first with the token that comes next.';
  $('#seq').value = FIRST_TEXT[m.predicts].replace('[MASK]', m.mask || '[MASK]');
  await runTyped();
}

/**
 * sparsity returns the request's sparse attention fields from the form, each left empty the
 * model's own: patterns separated by spaces ("none" for dense attention), block as BQ,BK and a
 * normalizer. The server checks them.
 */
function sparsity() {
  const out = {};
  const patterns = $('#patterns').value.trim();
  if (patterns === 'none') out.patterns = [];
  else if (patterns !== '') out.patterns = patterns.split(/\s+/);
  const block = $('#block').value.trim();
  if (block !== '') out.block = block.split(/[\s,×x]+/).map(Number);
  const normalizer = $('#normalizer').value.trim();
  if (normalizer !== '') out.normalizer = normalizer;
  return out;
}

async function generate() {
  const seed = Number($('#seed').value);
  if (!Number.isInteger(seed) || seed < 0) {
    showError(`Seed must be a whole number ≥ 0, got “${$('#seed').value}”.`);
    return;
  }
  await run({ model: state.model.name, seed, ...sparsity() });
}

async function runTyped() {
  const m = state.model;
  if (!m.task) {
    const typed = $('#seq').value;
    if (m.tokenizer) {
      await run({ model: m.name, text: typed, ...sparsity() });
      return;
    }
    const ids = typed.trim().split(/[\s,]+/).filter((x) => x !== '').map(Number);
    if (ids.some((x) => !Number.isInteger(x))) {
      showError(`Model ${m.name} has no tokenizer: type token ids (whole numbers from 0 to ${m.vocab - 1}) separated by spaces, got “${typed}”.`);
      return;
    }
    await run({ model: m.name, tokens: ids, ...sparsity() });
    return;
  }
  const text = $('#seq').value.trim();
  if (state.generated && text === state.generated.text) {
    await run({ model: state.model.name, seed: state.generated.seed, ...sparsity() });
    return;
  }
  await run({ model: state.model.name, text, ...sparsity() });
}

async function run(source) {
  clearError();
  let r;
  try {
    r = await whileBusy(api('/api/run', source), $('#predictions-card'), $('#headview'), $('#modelview'), $('#heads'), $('#flow'));
  } catch (e) {
    showError(e.message);
    return;
  }
  state.source = source;
  state.run = r;
  if (state.model.task) $('#seq').value = r.symbols.join(' ');
  if (source.seed !== undefined) state.generated = { seed: source.seed, text: $('#seq').value };
  const sel = state.selected;
  if (sel.layer >= r.weights.length || sel.head >= r.weights[0].length) state.selected = { layer: 0, head: 0 };
  renderPredictions(r, $('#predictions'), $('#score'), source.text, $('#text-strip'));
  showRouting(r, $('#predictions'), state.selected.layer);
  // More than six heads or 32 tokens: the head view and the model view each get the page's width.
  $('.pair-cards').classList.toggle('wide', r.weights[0].length > 6 || r.tokens.length > 32);
  headView.show(r);
  modelView.show(r, state.selected.layer, state.selected.head);
  $('.grid-downloads').replaceChildren(downloads(pictureURL(source, { kind: 'grid' }), `${state.model.name}-all-heads`));
  headDownloads();
  flow.show(source, state.selected.layer, state.selected.head);
  $('.ab-result').replaceChildren();
  await showHeads();
}

async function showHeads() {
  // The task scope is measured on the model's own sequences: its pictures take no sequence.
  const url = (p) => state.scope === 'task'
    ? pictureURL({ model: state.source.model }, { ...p, scope: 'task' })
    : pictureURL(state.source, { ...p, scope: 'sequence' });
  if (state.scope === 'sequence') {
    $('#heads-help').textContent = state.model.task
      ? 'Click a column to sort, a row to select the head; cells are shaded from the column’s lowest to its highest value. Importance needs the task: switch to “Task”.'
      : 'Click a column to sort, a row to select the head; cells are shaded from the column’s lowest to its highest value. Importance is each head’s gate gradient on the model’s own next-token loss over this text.';
    headsTable.show(state.run.measures, url, state.selected);
    pruning.hide();
    return;
  }
  const name = state.model.name;
  let meas = state.task.get(name);
  if (!meas) {
    try {
      meas = await whileBusy(api('/api/heads', { model: name }), $('#heads'));
    } catch (e) {
      pruning.hide();
      showError(e.message);
      return;
    }
    state.task.set(name, meas);
  }
  $('#heads-help').textContent = state.model.task
    ? 'Measured on the task, from a fixed seed away from training’s. Click a column to sort, a row to select the head.'
    : 'Measured on random tokens repeated once: prefix-matching is the induction score, duplicate-token the attention to the earlier copy. Click a column to sort, a row to select the head.';
  headsTable.show(meas, url, state.selected);
  if (meas.pruning) pruning.show(name, meas);
  else pruning.hide();
}

async function runAblation(list) {
  clearError();
  try {
    const res = await whileBusy(api('/api/ablate', { ...state.source, ablate: list }), $('#ablation'));
    ablation.show(res);
  } catch (e) {
    showError(e.message);
  }
}

function showView(name) {
  for (const v of ['attention', 'circuits', 'experiments']) {
    $(`#view-${v}`).hidden = v !== name;
    $(`#tab-${v}`).setAttribute('aria-selected', v === name);
  }
  if (name === 'experiments') experiments.open();
  if (name === 'circuits') circuits.open(state.model ? state.model.name : null).catch((e) => showError(e.message));
}

function wire() {
  $('#banner .icon').addEventListener('click', clearError);
  $('#tab-attention').addEventListener('click', () => showView('attention'));
  $('#tab-circuits').addEventListener('click', () => showView('circuits'));
  $('#tab-experiments').addEventListener('click', () => showView('experiments'));
  $('#model').addEventListener('change', () => chooseModel($('#model').value));
  $('#seq-form').addEventListener('submit', (ev) => { ev.preventDefault(); runTyped(); });
  $('#generate').addEventListener('click', generate);
  $('#seed').addEventListener('keydown', (ev) => { if (ev.key === 'Enter') { ev.preventDefault(); generate(); } });
  $('#mv-ablate').addEventListener('click', () => ablation.add(state.selected.layer, state.selected.head));
  document.querySelectorAll('#heads .seg[data-scope]').forEach((b) => b.addEventListener('click', () => {
    state.scope = b.dataset.scope;
    document.querySelectorAll('#heads .seg[data-scope]').forEach((x) => x.setAttribute('aria-pressed', x === b));
    showHeads();
  }));
}

wire();
loadModels().catch((e) => showError(e.message));
