#!/usr/bin/env node
// ONNX Runtime's own past/present loop on a decoder exported with
// past_key_values.N.* inputs and present.N.* outputs (export_decoders.py).
//
// Greedy ids:  node ort_greedy.js MODEL --prompt-ids 1,2,3 --max-new-tokens N [--out FILE]
//   prints (and writes to FILE) "prompt: 1 2 3\ngenerated: ..." : the
//   prompt in one pass against an empty past, then one token a step with
//   past = the previous step's present; the argmax, the lowest id on a tie.
// Timing:      node ort_greedy.js MODEL --bench --context C --steps K [--threads T]
//   prefill of C tokens (ids 1..), then K decode steps; prints one JSON
//   line {"prefill_ms", "step_ms": [..], "ids": [..]} (the K greedy ids).
// From a given past: node ort_greedy.js MODEL --bench --past PAST.json --steps K
//   [--threads T] [--logits-out FILE]
//   no prefill: PAST.json is {"rows": L, "token": T, "pasts": {NAME: {"file",
//   "dims"}}}, each file the raw little-endian float32 past of that input
//   (L rows, bench/decode_bench.py writes them); K steps, the first runs T at
//   position L against them. Prints {"prefill_ms": null, "step_ms": [..],
//   "ids": [..]}; FILE gets each step's logits, float32, one step after another.
// One thread unless --threads; onnxruntime-node is looked up in
// $ORT_NODE_MODULES, then bench/node_modules.
'use strict';
const fs = require('fs');
const path = require('path');

function loadOrt() {
  const dirs = [process.env.ORT_NODE_MODULES, path.join(__dirname, '..', 'node_modules')].filter(Boolean);
  for (const d of dirs) {
    const p = path.join(d, 'onnxruntime-node');
    if (fs.existsSync(p)) return require(p);
  }
  return require('onnxruntime-node');
}
const ort = loadOrt();

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i < 0 ? fallback : process.argv[i + 1];
}

function argmax(data, offset, n) {
  let best = 0;
  for (let i = 1; i < n; ++i)
    if (data[offset + i] > data[offset + best]) best = i;
  return best;
}

async function main() {
  const model = process.argv[2];
  const threads = Number(arg('--threads', '1'));
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  // The past inputs' heads and head size from the model's declared shapes.
  const pasts = [];
  for (const name of session.inputNames) {
    if (!name.startsWith('past_key_values.')) continue;
    const meta = session.inputMetadata ? session.inputMetadata.find((m) => m.name === name) : null;
    pasts.push({name, present: name.replace('past_key_values.', 'present.'), meta});
  }
  const kvShape = JSON.parse(arg('--kv-shape', 'null'));  // [heads, head size] when metadata is absent
  function emptyPast(p) {
    const shape = p.meta && p.meta.shape ? p.meta.shape : null;
    const heads = shape && typeof shape[1] === 'number' ? shape[1] : kvShape[0];
    const dim = shape && typeof shape[3] === 'number' ? shape[3] : kvShape[1];
    return new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, dim]);
  }
  const bench = process.argv.includes('--bench');
  const given = arg('--past') ? JSON.parse(fs.readFileSync(arg('--past'), 'utf8')) : null;
  const prompt = given ? [given.token] : bench ? Array.from({length: Number(arg('--context', '128'))}, (_, i) => 1 + (i % 100))
                       : arg('--prompt-ids').split(',').map(Number);
  const steps = bench ? Number(arg('--steps', '8')) : Number(arg('--max-new-tokens', '16'));

  let cache = {};
  for (const p of pasts) cache[p.name] = emptyPast(p);
  if (given) {
    cache = {};
    for (const p of pasts) {
      const spec = given.pasts[p.name];
      if (!spec) throw new Error(arg('--past') + ': no past for input ' + p.name);
      const buf = fs.readFileSync(spec.file);
      const data = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
      cache[p.name] = new ort.Tensor('float32', data, spec.dims);
    }
  }
  const logitsOut = [];
  const generated = [];
  const stepMs = [];
  let prefillMs = given ? null : 0;
  let ids = prompt;
  let pos = given ? given.rows : 0;
  for (let step = 0; step < steps; ++step) {
    const n = ids.length;
    const feeds = Object.assign({}, cache);
    feeds.input_ids = new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, n]);
    feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(pos + n).fill(1n), [1, pos + n]);
    if (session.inputNames.includes('position_ids'))
      feeds.position_ids = new ort.Tensor('int64', BigInt64Array.from(ids.map((_, i) => BigInt(pos + i))), [1, n]);
    const t0 = process.hrtime.bigint();
    const out = await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (step === 0 && !given) prefillMs = ms; else stepMs.push(ms);
    const logits = out.logits;
    const vocab = logits.dims[logits.dims.length - 1];
    const next = argmax(logits.data, (n - 1) * vocab, vocab);
    if (given) logitsOut.push(logits.data.slice((n - 1) * vocab, n * vocab));
    generated.push(next);
    cache = {};
    for (const p of pasts) cache[p.name] = out[p.present];
    pos += n;
    ids = [next];
  }
  if (given && arg('--logits-out')) {
    const all = new Float32Array(logitsOut.reduce((a, l) => a + l.length, 0));
    let at = 0;
    for (const l of logitsOut) { all.set(l, at); at += l.length; }
    fs.writeFileSync(arg('--logits-out'), Buffer.from(all.buffer));
  }
  if (given) {
    console.log(JSON.stringify({prefill_ms: null, step_ms: stepMs, context: given.rows, ids: generated}));
    return;
  }
  if (bench) {
    console.log(JSON.stringify({prefill_ms: prefillMs, step_ms: stepMs, context: prompt.length, ids: generated}));
    return;
  }
  const text = 'prompt: ' + prompt.join(' ') + '\ngenerated: ' + generated.join(' ') + '\n';
  process.stdout.write(text);
  if (arg('--out')) fs.writeFileSync(arg('--out'), text);
}

main().catch((e) => {
  console.error('ort_greedy.js: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
