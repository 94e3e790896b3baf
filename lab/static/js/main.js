// The lab page: wires the controls to the API and the views.
import { api, pictureURL } from './api.js';
import { el, whileBusy, showError, clearError, downloads } from './ui.js';
import { renderPredictions } from './sequence.js';
import { HeadView } from './headview.js';
import { ModelView } from './modelview.js';
import { HeadsTable } from './heads.js';
import { Pruning } from './pruning.js';
import { Ablation } from './ablation.js';
import { Experiments } from './experiments.js';

const $ = (sel) => document.querySelector(sel);

const state = {
  models: [],
  model: null, // the chosen model's /api/models entry
  source: null, // the request that produced run: {model, seed} or {model, text}
  generated: null, // {seed, text} of the last generated sequence
  run: null, // the /api/run answer shown
  selected: { layer: 0, head: 0 },
  scope: 'sequence',
  task: new Map(), // model name → /api/heads answer
};

const headView = new HeadView($('#headview'));
const modelView = new ModelView($('#modelview'), select);
const headsTable = new HeadsTable($('#heads'), select, (l, h) => ablation.add(l, h));
const pruning = new Pruning($('#heads .pruning'), select);
const ablation = new Ablation($('#ablation'), runAblation);
const experiments = new Experiments($('#view-experiments'));

function select(layer, head) {
  state.selected = { layer, head };
  modelView.select(layer, head);
  headsTable.select(layer, head);
  headView.select(layer, head);
  headDownloads();
}

function headDownloads() {
  const { layer, head } = state.selected;
  $('.head-downloads').replaceChildren(downloads(pictureURL(state.source, { kind: 'head', layer, head }), `${state.model.name}-L${layer}H${head}`));
}

async function loadModels() {
  state.models = await api('/api/models');
  $('#model').replaceChildren(...state.models.map((m) => el('option', { value: m.name },
    `${m.name} — ${m.layers} layer${m.layers > 1 ? 's' : ''} × ${m.heads} heads`)));
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
  $('#model-desc').replaceChildren(
    el('span', {}, m.describe),
    el('span', { class: 'facts' },
      `d_model ${m.d_model} · ${m.layers}×${m.heads} heads of ${m.head_dims.join('/')} · ${m.attn_only ? 'attention only' : 'with MLP'} · ${m.norm}-norm · ${m.params.toLocaleString('en')} parameters · seq_len ${m.seq_len}`),
    el('code', { class: 'cmd', title: 'the command that trained it' }, m.command));
  const shown = m.symbols.length > 14 ? `${m.symbols.slice(0, 6).join(' ')} … ${m.symbols.slice(-3).join(' ')}` : m.symbols.join(' ');
  $('#seq-hint').textContent = `(up to ${m.seq_len} of: ${shown})`;
  ablation.reset();
  await generate();
}

async function generate() {
  const seed = Number($('#seed').value);
  if (!Number.isInteger(seed) || seed < 0) {
    showError(`Seed must be a whole number ≥ 0, got “${$('#seed').value}”.`);
    return;
  }
  await run({ model: state.model.name, seed });
}

async function runTyped() {
  const text = $('#seq').value.trim();
  if (state.generated && text === state.generated.text) {
    await run({ model: state.model.name, seed: state.generated.seed });
    return;
  }
  await run({ model: state.model.name, text });
}

async function run(source) {
  clearError();
  let r;
  try {
    r = await whileBusy(api('/api/run', source), $('#predictions-card'), $('#headview'), $('#modelview'), $('#heads'));
  } catch (e) {
    showError(e.message);
    return;
  }
  state.source = source;
  state.run = r;
  $('#seq').value = r.symbols.join(' ');
  if (source.seed !== undefined) state.generated = { seed: source.seed, text: $('#seq').value };
  const sel = state.selected;
  if (sel.layer >= r.weights.length || sel.head >= r.weights[0].length) state.selected = { layer: 0, head: 0 };
  renderPredictions(r, $('#predictions'), $('#score'));
  headView.show(r);
  modelView.show(r, state.selected.layer, state.selected.head);
  $('.grid-downloads').replaceChildren(downloads(pictureURL(source, { kind: 'grid' }), `${state.model.name}-all-heads`));
  headDownloads();
  $('.ab-result').replaceChildren();
  await showHeads();
}

async function showHeads() {
  const url = (p) => pictureURL(state.source, { ...p, scope: state.scope });
  if (state.scope === 'sequence') {
    $('#heads-help').textContent = 'Click a column to sort, a row to select the head; cells are shaded from the column’s lowest to its highest value. Importance needs the task: switch to “Task”.';
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
  $('#heads-help').textContent = 'Measured on the task, from a fixed seed away from training’s. Click a column to sort, a row to select the head.';
  headsTable.show(meas, url, state.selected);
  pruning.show(name, meas);
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
  for (const v of ['attention', 'experiments']) {
    $(`#view-${v}`).hidden = v !== name;
    $(`#tab-${v}`).setAttribute('aria-selected', v === name);
  }
  if (name === 'experiments') experiments.open();
}

function wire() {
  $('#banner .icon').addEventListener('click', clearError);
  $('#tab-attention').addEventListener('click', () => showView('attention'));
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
