// Time an ONNX export of nn.MultiheadAttention with ONNX Runtime for `mha bench --ort`.
//
//   node ort_bench.js check --model model.onnx --check check.json --threads N
//   node ort_bench.js run --model model.onnx --B B --T T --E E --threads N --runs R --warmup W --seed S
//
// check runs the model on the small input ort_export.py saved and compares with PyTorch's outputs;
// it prints {"rel_err": e} and fails when e > 1e-4. run prints {"ms": [one time per run],
// "rss_base_kib": RSS once the session and input exist, "rss_peak_kib": peak RSS at the end}.
// The session uses the CPU execution provider with intraOpNumThreads = N, one inter-op thread and
// every graph optimisation, as a deployment would.
'use strict';

const fs = require('fs');
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const a = { mode: argv[0] };
  for (let i = 1; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) {
      throw new Error(`bad argument ${argv[i]}`);
    }
    a[argv[i].slice(2)] = argv[i + 1];
  }
  return a;
}

function int(a, name) {
  const v = Number.parseInt(a[name], 10);
  if (!(v >= 0)) {
    throw new Error(`--${name} is ${a[name]}, want a non-negative integer`);
  }
  return v;
}

function createSession(model, threads) {
  return ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
}

// relErr is ‖got − want‖ / ‖want‖.
function relErr(got, want) {
  if (got.length !== want.length) {
    return Infinity;
  }
  let d = 0;
  let n = 0;
  for (let i = 0; i < want.length; i++) {
    d += (got[i] - want[i]) ** 2;
    n += want[i] ** 2;
  }
  return Math.sqrt(d / n);
}

async function check(a) {
  const c = JSON.parse(fs.readFileSync(a.check, 'utf8'));
  const s = await createSession(a.model, int(a, 'threads'));
  const r = await s.run({ x: new ort.Tensor('float32', Float32Array.from(c.x), [c.B, c.T, c.E]) });
  let err = relErr(r.out.data, c.out);
  if (c.weights) {
    err = Math.max(err, r.weights ? relErr(r.weights.data, c.weights) : Infinity);
  }
  console.log(JSON.stringify({ rel_err: err }));
  if (!(err <= 1e-4)) {
    throw new Error(`ONNX Runtime's output differs from PyTorch's by ${err.toPrecision(2)} (relative), want ≤ 1e-4`);
  }
}

// normals returns n standard normal numbers from a small seeded generator (mulberry32 and
// Box–Muller): the values only need to be typical, not PyTorch's.
function normals(n, seed) {
  let s = seed >>> 0;
  const uniform = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  }
  return x;
}

async function run(a) {
  const [b, t, e] = [int(a, 'B'), int(a, 'T'), int(a, 'E')];
  const s = await createSession(a.model, int(a, 'threads'));
  const feeds = { x: new ort.Tensor('float32', normals(b * t * e, int(a, 'seed')), [b, t, e]) };
  const base = Math.round(process.memoryUsage().rss / 1024);
  for (let i = 0; i < int(a, 'warmup'); i++) {
    await s.run(feeds);
  }
  const ms = [];
  for (let i = 0; i < int(a, 'runs'); i++) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  console.log(JSON.stringify({ ms, rss_base_kib: base, rss_peak_kib: process.resourceUsage().maxRSS }));
}

const args = parseArgs(process.argv.slice(2));
const modes = { check, run };
if (!modes[args.mode]) {
  console.error(`usage: node ort_bench.js check|run --model FILE …, got mode ${args.mode}`);
  process.exit(2);
}
modes[args.mode](args).catch((err) => {
  console.error(err.message);
  process.exit(1);
});
