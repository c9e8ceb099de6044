#!/usr/bin/env python3
"""ONNX Runtime's com.microsoft QLinear* ops: Collage's reference against ONNX
Runtime itself, integer for integer.

Usage: check_qlinear_contrib.py [BUILD_DIR]   (default: build)

Writes one small model per op, layout, broadcast and type (u8, s8) with
random scales and zero points, runs it with onnxruntime-node
(ort_tensors.js: $ORT_NODE_MODULES, else bench/node_modules) and with
`collage run --backend reference --expect` (whose tolerance, rtol 1e-3,
admits no difference of one step below 1000, so a pass is an exact match).
Prints one line per model; exits 1 on a mismatch. A model ONNX Runtime
itself cannot load (it refuses an empty zero point in the middle of the
inputs, and crashes on a QLinearLeakyRelu without Y_zero_point) is reported
as such, not counted.
"""
import json, os, shutil, subprocess, sys, tempfile
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, 'build')
ORT_MODULES = os.environ.get('ORT_NODE_MODULES', os.path.join(ROOT, 'bench', 'node_modules'))
OUT = tempfile.mkdtemp(prefix='collage_qlinear_contrib_')
rng = np.random.default_rng(7)
COLLAGE = os.path.join(BUILD, 'app', 'collage')

def model(name, nodes, inputs, output, inits):
    g = helper.make_graph(nodes, name, inputs, [output], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13), helper.make_opsetid('com.microsoft', 1)])
    m.ir_version = 8
    p = os.path.join(OUT, name + '.onnx')
    onnx.save(m, p)
    return p

def cases():
    for dt, np_t, lo, hi in ((TensorProto.UINT8, np.uint8, 0, 255), (TensorProto.INT8, np.int8, -128, 127)):
        tag = 'u8' if dt == TensorProto.UINT8 else 's8'
        def zp(n): return numpy_helper.from_array(np.array(rng.integers(lo // 2, hi // 2 + 1), np_t), n)
        def sc(n): return numpy_helper.from_array(np.array(rng.uniform(0.002, 0.05), np.float32), n)
        for op in ('QLinearAdd', 'QLinearMul'):
            for sa, sb in (((1, 16, 8, 8), (1, 16, 8, 8)), ((1, 16, 8, 8), (1, 16, 1, 1)),
                           ((1, 16, 1, 1), (1, 16, 8, 8)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), ())):
                out_shape = np.broadcast_shapes(sa, sb)
                inits = [sc('as'), zp('az'), sc('bs'), zp('bz'), sc('cs'), zp('cz')]
                n = helper.make_node(op, ['a', 'as', 'az', 'b', 'bs', 'bz', 'cs', 'cz'], ['c'], domain='com.microsoft')
                name = f'{op}_{tag}_{"x".join(map(str, sa))}_{"x".join(map(str, sb)) or "scalar"}'
                yield name, [n], {'a': (np_t, sa), 'b': (np_t, sb)}, ('c', dt, out_shape), inits
            # missing zero points
            for k, names in enumerate((['a', 'as', 'az', 'b', 'bs', 'bz', 'cs'], ['a', 'as', '', 'b', 'bs', 'bz', 'cs', 'cz'])):
                inits = [sc('as'), zp('az'), sc('bs'), zp('bz'), sc('cs'), zp('cz')]
                n = helper.make_node(op, names, ['c'], domain='com.microsoft')
                yield f'{op}_{tag}_nozp{k}', [n], {'a': (np_t, (4, 64)), 'b': (np_t, (4, 64))}, ('c', dt, (4, 64)), inits
        for last in (0, 1):
            shape = (2, 7, 7, 16) if last else (2, 16, 7, 7)
            inits = [sc('xs'), zp('xz'), sc('ys'), zp('yz')]
            n = helper.make_node('QLinearGlobalAveragePool', ['x', 'xs', 'xz', 'ys', 'yz'], ['y'],
                                 domain='com.microsoft', channels_last=last)
            oshape = (2, 1, 1, 16) if last else (2, 16, 1, 1)
            yield f'QLinearGlobalAveragePool_{tag}_last{last}', [n], {'x': (np_t, shape)}, ('y', dt, oshape), inits
        for k, (shape, attrs, oshape) in enumerate((
                ((2, 8, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2]), (2, 8, 4, 4)),
                ((2, 8, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0), (2, 8, 9, 9)),
                ((2, 8, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), (2, 8, 9, 9)),
                ((2, 8, 9, 9), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), (2, 8, 5, 5)),
                ((2, 9, 9, 8), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], channels_last=1), (2, 9, 9, 8)),
                ((2, 8, 7, 7), dict(kernel_shape=[7, 7]), (2, 8, 1, 1)),
                ((2, 8, 12), dict(kernel_shape=[3], strides=[3]), (2, 8, 4)))):
            inits = [sc('xs'), zp('xz'), sc('ys'), zp('yz')]
            n = helper.make_node('QLinearAveragePool', ['x', 'xs', 'xz', 'ys', 'yz'], ['y'], domain='com.microsoft', **attrs)
            yield f'QLinearAveragePool_{tag}_{k}', [n], {'x': (np_t, shape)}, ('y', dt, oshape), inits
        for k, (trans_b, per_col, quant_out) in enumerate(((0, False, True), (1, True, True), (1, True, False))):
            N, K = 24, 40
            b_shape = (N, K) if trans_b else (K, N)
            bs = rng.uniform(0.002, 0.02, N if per_col else ()).astype(np.float32)
            bz = rng.integers(-20, 21, N if per_col else ()).astype(np.int8 if np_t == np.int8 else np.uint8) \
                if np_t == np.int8 else np.full(N if per_col else (), 128, np.uint8)
            b = rng.integers(np.iinfo(np_t).min, np.iinfo(np_t).max + 1, b_shape).astype(np_t)
            inits = [sc('as'), zp('az'), numpy_helper.from_array(b, 'b'), numpy_helper.from_array(bs, 'bs'),
                     numpy_helper.from_array(bz, 'bz'),
                     numpy_helper.from_array(rng.integers(-5000, 5000, N).astype(np.int32), 'c')]
            names = ['a', 'as', 'az', 'b', 'bs', 'bz', 'c']
            if quant_out:
                inits += [sc('ys'), zp('yz')]
                names += ['ys', 'yz']
            n = helper.make_node('QGemm', names, ['y'], domain='com.microsoft', transB=trans_b, alpha=0.75)
            yield f'QGemm_{tag}_{k}', [n], {'a': (np_t, (8, K))}, ('y', dt if quant_out else TensorProto.FLOAT, (8, N)), inits
        inits = [sc('xs'), zp('xz'), sc('ys'), zp('yz')]
        n = helper.make_node('QLinearLeakyRelu', ['x', 'xs', 'xz', 'ys', 'yz'], ['y'], domain='com.microsoft', alpha=0.1)
        yield f'QLinearLeakyRelu_{tag}', [n], {'x': (np_t, (4, 256))}, ('y', dt, (4, 256)), inits
        n = helper.make_node('QLinearLeakyRelu', ['x', 'xs', 'xz', 'ys'], ['y'], domain='com.microsoft', alpha=0.1)
        yield f'QLinearLeakyRelu_{tag}_noyzp', [n], {'x': (np_t, (4, 256))}, ('y', dt, (4, 256)), inits[:3]
        inits = [sc('ys'), zp('yz'), sc('s1'), zp('z1'), sc('s3'), zp('z3')]
        n = helper.make_node('QLinearConcat', ['ys', 'yz', 'x1', 's1', 'z1', 'x2', 'ys', 'yz', 'x3', 's3', 'z3'], ['y'],
                             domain='com.microsoft', axis=1)
        yield f'QLinearConcat_{tag}', [n], {'x1': (np_t, (2, 3, 5)), 'x2': (np_t, (2, 4, 5)), 'x3': (np_t, (2, 1, 5))}, \
            ('y', dt, (2, 8, 5)), inits
        for k in range(3):
            inits = [numpy_helper.from_array(np.array(rng.uniform(0.02, 0.1), np.float32), 'xs'), zp('xz'),
                     numpy_helper.from_array(np.array(1 / 256, np.float32), 'ys'),
                     numpy_helper.from_array(np.array(lo, np_t), 'yz')]
            n = helper.make_node('QLinearSigmoid', ['x', 'xs', 'xz', 'ys', 'yz'], ['y'], domain='com.microsoft')
            yield f'QLinearSigmoid_{tag}_{k}', [n], {'x': (np_t, (4, 256))}, ('y', dt, (4, 256)), inits

results = []
for name, nodes, ins, (oname, odt, oshape), inits in cases():
    vis = [helper.make_tensor_value_info(k, TensorProto.UINT8 if t == np.uint8 else TensorProto.INT8, s)
           for k, (t, s) in ins.items()]
    path = model(name, nodes, vis, helper.make_tensor_value_info(oname, odt, list(oshape)), inits)
    run, pbs = {}, []
    for k, (t, s) in ins.items():
        info = np.iinfo(t)
        arr = rng.integers(info.min, info.max + 1, size=s).astype(t)
        raw = os.path.join(OUT, f'{name}_{k}.bin'); arr.tofile(raw)
        run[k] = {'file': raw, 'dtype': 'uint8' if t == np.uint8 else 'int8', 'dims': list(s)}
        pb = os.path.join(OUT, f'{name}_{k}.pb')
        with open(pb, 'wb') as f: f.write(numpy_helper.from_array(arr, k).SerializeToString())
        pbs.append(pb)
    job = os.path.join(OUT, name + '.json'); dump = os.path.join(OUT, name + '_ort'); os.makedirs(dump, exist_ok=True)
    json.dump({'model': path, 'level': 'disabled', 'mode': 'dump', 'out': dump, 'runs': [run]}, open(job, 'w'))
    r = subprocess.run(['node', os.path.join(ROOT, 'bench/models/ort_tensors.js'), job], capture_output=True, text=True,
                       env=dict(os.environ, ORT_NODE_MODULES=ORT_MODULES))
    if r.returncode:
        first = next((l for l in r.stderr.splitlines() if l.strip()), '')
        results.append((name, 'ORT cannot run it: ' + first[-160:])); continue
    outs = json.loads(r.stdout.splitlines()[0])
    o = outs[0]
    want = np.fromfile(o['file'], dtype={'uint8': np.uint8, 'int8': np.int8, 'float32': np.float32}[o['dtype']])
    want = want.reshape(o['dims'])
    exp = os.path.join(OUT, name + '_expect.pb')
    with open(exp, 'wb') as f: f.write(numpy_helper.from_array(want, oname).SerializeToString())
    cmd = [COLLAGE, 'run', path, '--backend', 'reference'] + sum([['--input', p] for p in pbs], []) + ['--expect', exp]
    c = subprocess.run(cmd, capture_output=True, text=True)
    results.append((name, 'exact' if c.returncode == 0 else 'DIFFERS: ' + (c.stdout + c.stderr).strip()[-400:]))
for n, r in results: print(f'{n:45s} {r}')
exact = sum(r == 'exact' for _, r in results)
bad = [n for n, r in results if r.startswith('DIFFERS')]
print(f'{exact} exact, {len(bad)} differ, {len(results) - exact - len(bad)} that ONNX Runtime cannot run')
if bad:
    print('models and tensors kept in', OUT)
    sys.exit(1)
shutil.rmtree(OUT)
