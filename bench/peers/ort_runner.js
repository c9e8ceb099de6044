#!/usr/bin/env node
// ONNX Runtime (CPU provider, npm onnxruntime-node) runner for bench/run_bench.py.
//
// Usage: node ort_runner.js MODEL.onnx INPUT.pb THREADS [OPTIMIZED.onnx]
// With OPTIMIZED.onnx, ONNX Runtime also saves the graph it runs after its
// own optimisations (fusions, NCHWc layout), so the harness can count its nodes.
// Loads the model once, then reads commands from stdin, one per line:
//   run           -> runs one inference, prints "ms <elapsed>"
//   output PATH   -> writes the first output as raw little-endian float32 to
//                    PATH, prints "ok <dims joined by x>"
//   quit          -> exits
// It prints "ready" once the session is created and a first run is done.
// Long-lived so the harness can interleave it with the other runners.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-node'));

// Minimal onnx.TensorProto decoder: dims (1), data_type (2), name (8), raw_data (9),
// float_data (4, packed), int64_data (7, packed). Enough for the zoo's .pb files.
function readVarint(buf, pos) {
  let result = 0n, shift = 0n, b;
  do { b = buf[pos++]; result |= BigInt(b & 0x7f) << shift; shift += 7n; } while (b & 0x80);
  return [result, pos];
}
function parseTensorProto(buf) {
  let pos = 0; const dims = []; let dataType = 0, name = '', raw = null;
  const floats = [], int64s = [];
  while (pos < buf.length) {
    let key; [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) {
      let v; [v, pos] = readVarint(buf, pos);
      if (field === 1) dims.push(Number(v)); else if (field === 2) dataType = Number(v);
      else if (field === 7) int64s.push(BigInt.asIntN(64, v));
    } else if (wire === 2) {
      let len; [len, pos] = readVarint(buf, pos); len = Number(len);
      const body = buf.subarray(pos, pos + len); pos += len;
      if (field === 8) name = body.toString('utf8');
      else if (field === 9) raw = body;
      else if (field === 1) { let p = 0; while (p < body.length) { let v; [v, p] = readVarint(body, p); dims.push(Number(v)); } }
      else if (field === 4) { for (let p = 0; p + 4 <= body.length; p += 4) floats.push(body.readFloatLE(p)); }
      else if (field === 7) { let p = 0; while (p < body.length) { let v; [v, p] = readVarint(body, p); int64s.push(BigInt.asIntN(64, v)); } }
    } else if (wire === 5) { if (field === 4) floats.push(buf.readFloatLE(pos)); pos += 4; }
    else if (wire === 1) { pos += 8; }
    else throw new Error('TensorProto: unsupported wire type ' + wire);
  }
  let tensor;
  if (dataType === 1) {
    const data = raw ? new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length)) : Float32Array.from(floats);
    tensor = new ort.Tensor('float32', data, dims);
  } else if (dataType === 7) {
    const data = raw ? new BigInt64Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length)) : BigInt64Array.from(int64s);
    tensor = new ort.Tensor('int64', data, dims);
  } else {
    throw new Error('TensorProto ' + name + ': unsupported data_type ' + dataType);
  }
  return { name, tensor };
}

async function main() {
  const [modelPath, inputPath, threadsArg, optimizedPath] = process.argv.slice(2);
  const threads = parseInt(threadsArg || '1', 10);
  const options = {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  };
  if (optimizedPath) options.optimizedModelFilePath = optimizedPath;
  const session = await ort.InferenceSession.create(modelPath, options);
  const input = parseTensorProto(fs.readFileSync(inputPath));
  const feeds = {}; feeds[session.inputNames[0]] = input.tensor;
  let last = await session.run(feeds);
  process.stdout.write('ready ' + ort.env.versions.common + '\n');
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const cmd = line.trim();
    if (cmd === 'run') {
      const t0 = process.hrtime.bigint();
      last = await session.run(feeds);
      const t1 = process.hrtime.bigint();
      process.stdout.write('ms ' + (Number(t1 - t0) / 1e6).toFixed(4) + '\n');
    } else if (cmd.startsWith('output ')) {
      const out = last[session.outputNames[0]];
      const data = out.data;
      fs.writeFileSync(cmd.slice(7), Buffer.from(data.buffer, data.byteOffset, data.byteLength));
      process.stdout.write('ok ' + out.dims.join('x') + '\n');
    } else if (cmd === 'quit') {
      break;
    } else if (cmd) {
      process.stdout.write('error unknown command ' + cmd + '\n');
    }
  }
  process.exit(0);
}
main().catch((e) => { process.stdout.write('error ' + String(e && e.message || e).split('\n')[0] + '\n'); process.exit(1); });
