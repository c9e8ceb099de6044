#!/usr/bin/python3
"""Run the zoo's ONNX models with a tiny NumPy interpreter and compare with
the stored PyTorch reference outputs.

    check_zoo.py [DIR] [--models a,b,...] [--rtol R] [--atol A]

DIR defaults to resources/models of this repository; it must hold a zoo.json
written by export_zoo.py. This checks that each exported graph (ONNX
semantics, not PyTorch's) reproduces <stem>.output_0.pb from <stem>.input_0.pb,
so the .pb files can serve as ground truth for the C++ executor. It supports
exactly the op types the zoo uses; slow but fine for the small models (the
full ones take a few minutes each).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
from numpy.lib.stride_tricks import sliding_window_view

REPO_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pad_spatial(x, pads, value=0.0):
    n = x.ndim - 2
    if not any(pads):
        return x
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
    return np.pad(x, width, constant_values=value)


def _windows(x, kernel, strides, dilations):
    """[N, C, *S] -> [N, C, *OUT, *K] strided (dilated) windows."""
    n = len(kernel)
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    w = sliding_window_view(x, ext, axis=tuple(range(2, 2 + n)))
    sl = [slice(None), slice(None)] + [slice(None, None, s) for s in strides] + \
         [slice(None, None, d) for d in dilations]
    return w[tuple(sl)]


def conv(x, w, b, a):
    n = x.ndim - 2
    kernel = list(w.shape[2:])
    strides = a.get("strides", [1] * n)
    dil = a.get("dilations", [1] * n)
    pads = a.get("pads", [0] * 2 * n)
    assert a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    g = a.get("group", 1)
    win = _windows(_pad_spatial(x, pads), kernel, strides, dil)  # N,C,*O,*K
    cin_g, cout_g = x.shape[1] // g, w.shape[0] // g
    outs = []
    kaxes = list(range(2 + n, 2 + 2 * n))
    for gi in range(g):
        wg = w[gi * cout_g:(gi + 1) * cout_g]  # Co,Ci,*K
        xg = win[:, gi * cin_g:(gi + 1) * cin_g]  # N,Ci,*O,*K
        y = np.tensordot(xg, wg, axes=([1] + kaxes, [1] + list(range(2, 2 + n))))  # N,*O,Co
        outs.append(np.moveaxis(y, -1, 1))
    y = np.concatenate(outs, axis=1)
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * n)
    return y.astype(np.float32)


def conv_transpose(x, w, b, a):
    n = x.ndim - 2
    assert a.get("group", 1) == 1 and not any(a.get("output_padding", [0] * n))
    kernel = list(w.shape[2:])
    strides = a.get("strides", [1] * n)
    pads = a.get("pads", [0] * 2 * n)
    assert all(d == 1 for d in a.get("dilations", [1] * n))
    # Zero-stuff the input, pad by k-1-p, convolve with the flipped, transposed kernel.
    shape = list(x.shape[:2]) + [(s - 1) * st + 1 for s, st in zip(x.shape[2:], strides)]
    z = np.zeros(shape, np.float32)
    z[(slice(None), slice(None)) + tuple(slice(None, None, st) for st in strides)] = x
    p = [k - 1 - pads[i] for i, k in enumerate(kernel)] + [k - 1 - pads[i + n] for i, k in enumerate(kernel)]
    wt = np.flip(w, axis=tuple(range(2, 2 + n))).swapaxes(0, 1)
    return conv(_pad_spatial(z, p), np.ascontiguousarray(wt), b, {"strides": [1] * n})


def pool(x, a, kind):
    n = x.ndim - 2
    assert not a.get("ceil_mode", 0)
    kernel = a["kernel_shape"]
    strides = a.get("strides", [1] * n)
    pads = a.get("pads", [0] * 2 * n)
    if kind == "max":
        win = _windows(_pad_spatial(x, pads, -np.inf), kernel, strides, a.get("dilations", [1] * n))
        return win.max(axis=tuple(range(-n, 0)))
    assert a.get("count_include_pad", 0) or not any(pads), "AveragePool with pads excluded"
    win = _windows(_pad_spatial(x, pads), kernel, strides, [1] * n)
    return win.mean(axis=tuple(range(-n, 0))).astype(np.float32)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def run_node(node, ins):
    a = _attrs(node)
    op = node.op_type
    x = ins[0] if ins else None
    if op == "Constant":
        return [onnx.numpy_helper.to_array(a["value"])]
    if op == "Conv":
        return [conv(x, ins[1], ins[2] if len(ins) > 2 else None, a)]
    if op == "ConvTranspose":
        return [conv_transpose(x, ins[1], ins[2] if len(ins) > 2 else None, a)]
    if op == "BatchNormalization":
        s, bias, mean, var = ins[1:5]
        sh = (1, -1) + (1,) * (x.ndim - 2)
        eps = a.get("epsilon", 1e-5)
        return [((x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps) * s.reshape(sh) + bias.reshape(sh))
                .astype(np.float32)]
    if op == "Relu":
        return [np.maximum(x, 0)]
    if op == "Tanh":
        return [np.tanh(x)]
    if op == "Clip":
        lo = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("min", -np.inf)
        hi = ins[2] if len(ins) > 2 and ins[2] is not None else a.get("max", np.inf)
        return [np.clip(x, lo, hi)]
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}[op]
        return [f(ins[0], ins[1]).astype(np.result_type(ins[0], ins[1]))]
    if op == "Sqrt":
        return [np.sqrt(x)]
    if op == "Erf":
        return [_erf(x).astype(x.dtype)]
    if op == "MaxPool":
        return [pool(x, a, "max")]
    if op == "AveragePool":
        return [pool(x, a, "avg")]
    if op == "GlobalAveragePool":
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)]
    if op == "Pad":
        mode = a.get("mode", b"constant")
        assert mode in (b"constant", "constant")
        pads = [int(p) for p in (ins[1] if len(ins) > 1 else a["pads"])]
        value = ins[2] if len(ins) > 2 and ins[2] is not None else a.get("value", 0.0)
        r = x.ndim
        return [np.pad(x, [(pads[i], pads[i + r]) for i in range(r)], constant_values=value)]
    if op == "Concat":
        return [np.concatenate(ins, axis=a["axis"])]
    if op == "Flatten":
        ax = a.get("axis", 1)
        return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
    if op == "Gemm":
        A = ins[0].T if a.get("transA", 0) else ins[0]
        B = ins[1].T if a.get("transB", 0) else ins[1]
        y = a.get("alpha", 1.0) * (A @ B)
        if len(ins) > 2:
            y = y + a.get("beta", 1.0) * ins[2]
        return [y.astype(np.float32)]
    if op == "MatMul":
        return [np.matmul(ins[0], ins[1])]
    if op == "Gather":
        return [np.take(ins[0], ins[1], axis=a.get("axis", 0))]
    if op == "Reshape":
        shape = [int(s) for s in ins[1]]
        shape = [x.shape[i] if s == 0 and not a.get("allowzero", 0) else s for i, s in enumerate(shape)]
        return [x.reshape(shape)]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    if op == "Softmax":
        ax = a.get("axis", -1)
        e = np.exp(x - x.max(axis=ax, keepdims=True))
        return [e / e.sum(axis=ax, keepdims=True)]
    if op == "ReduceMean":
        axes = a.get("axes") if len(ins) < 2 else [int(v) for v in ins[1]]
        return [x.mean(axis=tuple(axes) if axes is not None else None, keepdims=bool(a.get("keepdims", 1)))]
    if op == "LayerNormalization":
        ax = a.get("axis", -1)
        axes = tuple(range(ax % x.ndim, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5)) * ins[1]
        if len(ins) > 2:
            y = y + ins[2]
        return [y.astype(np.float32)]
    raise NotImplementedError(op)


def run_model(model, feeds):
    env = dict(feeds)
    for t in model.graph.initializer:
        env[t.name] = onnx.numpy_helper.to_array(t)
    for node in model.graph.node:
        ins = [env[i] if i else None for i in node.input]
        for name, val in zip(node.output, run_node(node, ins)):
            env[name] = np.asarray(val)
    return [env[o.name] for o in model.graph.output]


def _load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default=os.path.join(REPO_ROOT, "resources", "models"))
    ap.add_argument("--models", default="all", help="comma-separated model names or file stems")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args(argv)
    with open(os.path.join(args.dir, "zoo.json")) as f:
        manifest = json.load(f)
    wanted = None if args.models == "all" else set(args.models.split(","))
    failed = 0
    checked = 0
    for e in manifest["models"]:
        stem = e["file"][:-len(".onnx")]
        if wanted is not None and e["name"] not in wanted and stem not in wanted:
            continue
        t0 = time.time()
        model = onnx.load(os.path.join(args.dir, e["file"]))
        feeds = dict(_load_tensor(os.path.join(args.dir, p)) for p in e["input_data"])
        expected = [_load_tensor(os.path.join(args.dir, p)) for p in e["output_data"]]
        got = run_model(model, feeds)
        ok = True
        worst = 0.0
        for (name, ref), out in zip(expected, got):
            if out.shape != ref.shape:
                ok = False
                print("  %s: shape %s != %s" % (name, out.shape, ref.shape))
                continue
            err = np.abs(out.astype(np.float64) - ref)
            worst = max(worst, float(err.max()))
            # atol scales with the tensor's magnitude (summation order differs).
            scale = max(1.0, float(np.abs(ref).max()))
            ok &= bool(np.all(err <= args.atol * scale + args.rtol * np.abs(ref)))
        checked += 1
        failed += not ok
        print("%s %-34s max abs err %.3g  (%.1f s)" % ("PASS" if ok else "FAIL", e["file"], worst,
                                                      time.time() - t0))
    print("%d passed, %d failed" % (checked - failed, failed))
    return 1 if failed or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
