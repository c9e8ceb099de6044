#!/usr/bin/env node
// ONNX Runtime's time for a model with random float inputs, the session
// options of bench/peers/ort_runner.js (all graph optimisations, sequential).
// Usage: node ort_time.js MODEL.onnx THREADS RUNS  -> prints "median_ms <t>"
'use strict';
const path = require('path');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-node'));

async function main() {
  const [modelPath, threadsArg, runsArg] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(modelPath, {
    graphOptimizationLevel: 'all', intraOpNumThreads: Number(threadsArg), interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const feeds = {};
  for (const name of session.inputNames) {
    // Shapes from the model's metadata are not exposed: the harness names them.
    const dims = JSON.parse(process.env['SHAPE_' + name]);
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; ++i) data[i] = Math.random() * 2 - 1;
    feeds[name] = new ort.Tensor('float32', data, dims);
  }
  for (let i = 0; i < 5; ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < Number(runsArg); ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  console.log('median_ms ' + times[Math.floor(times.length / 2)].toFixed(4));
}
main().catch((e) => { console.error(e); process.exit(1); });
