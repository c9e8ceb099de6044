#!/usr/bin/env node
// ONNX Runtime (onnxruntime-node, CPU provider) helper for quantize_models.py.
//
// Usage: node ort_tensors.js JOB.json
// JOB: {"model": PATH, "level": "disabled"|"basic"|"extended"|"all",
//       "mode": "minmax"|"dump", "out": DIR (dump),
//       "runs": [{"NAME": {"file": PATH, "dtype": "float32"|"int64"|..., "dims": [..]}}, ...]}
// Input files are raw little-endian arrays. "minmax" runs every feed set and
// prints one JSON object {output name: [min, max]} over all runs (float
// outputs only). "dump" runs the first feed set and writes each output as raw
// little-endian data to DIR/<index>.bin, printing [{name, dtype, dims, file}].
// One thread, sequential, so results do not depend on the machine's load.
// onnxruntime-node is looked up in $ORT_NODE_MODULES, then bench/node_modules.
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

const ARRAYS = {
  float32: Float32Array, int64: BigInt64Array, int32: Int32Array, uint8: Uint8Array,
  int8: Int8Array, float64: Float64Array, bool: Uint8Array,
};

function feedsOf(run) {
  const feeds = {};
  for (const [name, spec] of Object.entries(run)) {
    const buf = fs.readFileSync(spec.file);
    const Ctor = ARRAYS[spec.dtype];
    if (!Ctor) throw new Error('unsupported input dtype ' + spec.dtype);
    const data = new Ctor(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
    feeds[name] = new ort.Tensor(spec.dtype, data, spec.dims);
  }
  return feeds;
}

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const session = await ort.InferenceSession.create(job.model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: job.level || 'disabled',
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  if (job.mode === 'minmax') {
    const ranges = {};
    for (const run of job.runs) {
      const out = await session.run(feedsOf(run));
      for (const name of session.outputNames) {
        const t = out[name];
        if (t.type !== 'float32') continue;
        let lo = Infinity, hi = -Infinity;
        for (const v of t.data) { if (v < lo) lo = v; if (v > hi) hi = v; }
        if (t.data.length === 0) continue;
        const r = ranges[name];
        ranges[name] = r ? [Math.min(r[0], lo), Math.max(r[1], hi)] : [lo, hi];
      }
    }
    process.stdout.write(JSON.stringify(ranges) + '\n');
  } else if (job.mode === 'dump') {
    const out = await session.run(feedsOf(job.runs[0]));
    const info = [];
    session.outputNames.forEach((name, i) => {
      const t = out[name];
      const file = path.join(job.out, i + '.bin');
      fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      info.push({ name, dtype: t.type, dims: t.dims, file });
    });
    process.stdout.write(JSON.stringify(info) + '\n');
  } else {
    throw new Error('unknown mode ' + job.mode);
  }
  process.stdout.write('ort ' + ort.env.versions.common + '\n');
}
main().catch((e) => { process.stderr.write('error ' + String(e && e.stack || e) + '\n'); process.exit(1); });
