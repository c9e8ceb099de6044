#!/usr/bin/python3
"""Write int8 variants of float ONNX models in the three forms ONNX Runtime's
quantization tools write, with the same node structure.

    quantize_models.py [--models a,b] [--forms dynamic,qdq,qop] [--small] [--in DIR] [--out DIR]
                       [--per-channel] [--calibration N] [--no-reference] [--force]

For each model <stem>.onnx, writes <stem>_int8_dynamic.onnx,
<stem>_int8_qdq.onnx and <stem>_int8_qop.onnx (bench/models/README.md,
"Quantized variants"). Weights are int8 (symmetric, zero point 0),
activations uint8 (asymmetric). The static forms calibrate activation ranges
(min/max) on a few seeded random inputs with ONNX Runtime (onnxruntime-node,
bench/ort_tensors.js). Where <stem>.input_0.pb exists, the variant gets the
same input and ONNX Runtime's output for it (<variant>.output_0.pb).
Deterministic: the same inputs give the same bytes.

Requirements: onnx 1.12 and NumPy (/usr/bin/python3), node with
onnxruntime-node (bench/node_modules, or $ORT_NODE_MODULES).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import onnx.version_converter
from onnx import TensorProto, helper

REPO_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SMALL_DIR = os.path.join(REPO_ROOT, "resources", "models")
ZOO_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "collage-studio", "zoo")
ORT_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_tensors.js")
FORMS = ("dynamic", "qdq", "qop")
SUFFIX = {f: "_int8_" + f for f in FORMS}
NP_TO_ORT = {np.float32: "float32", np.int64: "int64", np.int32: "int32", np.uint8: "uint8",
             np.int8: "int8", np.float64: "float64", np.bool_: "bool"}


# ---------------------------------------------------------------------------
# Quantization parameters (as onnxruntime.quantization.quant_utils computes them)

def uint8_params(rmin, rmax):
    """Asymmetric uint8 scale and zero point for the range [rmin, rmax] (0 included)."""
    rmin = np.float32(min(float(rmin), 0.0))
    rmax = np.float32(max(float(rmax), 0.0))
    if rmax == rmin:
        return np.float32(1.0), np.uint8(0)
    scale = np.float32((rmax - rmin) / np.float32(255.0))
    zp = np.round(np.float32(0.0) - rmin / scale)
    return scale, np.uint8(np.clip(zp, 0, 255))


def int8_symmetric(w, axis=None):
    """Symmetric int8 weights in [-127, 127]: (q, scale, zero point); per tensor, or per
    slice along axis."""
    w = w.astype(np.float32)
    if axis is None:
        absmax = np.float32(np.abs(w).max()) if w.size else np.float32(0)
        scale = np.float32(absmax / np.float32(127.0)) if absmax > 0 else np.float32(1.0)
        q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        return q, np.array(scale, np.float32), np.array(0, np.int8)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    absmax = np.abs(moved).max(axis=1).astype(np.float32)
    scale = np.where(absmax > 0, absmax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale, np.zeros(scale.shape, np.int8)


def uint8_asymmetric(w, axis=None):
    """Asymmetric uint8 weights (ONNX Runtime's weight_type=QUInt8): (q, scale, zero point);
    per tensor, or per slice along axis."""
    w = w.astype(np.float32)
    if axis is None:
        s, zp = uint8_params(w.min() if w.size else 0, w.max() if w.size else 0)
        q = np.clip(np.round(w / s) + np.float32(zp), 0, 255).astype(np.uint8)
        return q, np.array(s, np.float32), np.array(zp, np.uint8)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    params = [uint8_params(r.min(), r.max()) for r in moved]
    scale = np.array([p[0] for p in params], np.float32)
    zp = np.array([p[1] for p in params], np.uint8)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)) + zp.reshape(shape).astype(np.float32), 0, 255).astype(np.uint8)
    return q, scale, zp


def int32_bias(b, scale):
    """Bias quantized with scale x_scale * w_scale (per tensor or per output channel)."""
    q = np.round(b.astype(np.float64) / scale.astype(np.float64))
    return np.clip(q, -2 ** 31, 2 ** 31 - 1).astype(np.int32)


# ---------------------------------------------------------------------------
# Graph helpers

class Graph:
    """The parts of a model's main graph that the rewrites need."""

    def __init__(self, model):
        self.model = model
        g = model.graph
        self.nodes = list(g.node)
        self.inits = {t.name: t for t in g.initializer}
        self.new_inits = []  # (name, array), kept in creation order
        self.graph_outputs = {o.name for o in g.output}
        self.graph_inputs = {i.name for i in g.input if i.name not in self.inits}
        self._names = set()
        for n in self.nodes:
            self._names.update(n.output)
            self._names.add(n.name)
        self._names.update(self.inits)
        self._names.update(self.graph_inputs)

    def const(self, name):
        """The constant value of a tensor (initializer or Constant node), or None."""
        if name in self.inits:
            return onnx.numpy_helper.to_array(self.inits[name])
        for n in self.nodes:
            if n.op_type == "Constant" and n.output[0] == name:
                for a in n.attribute:
                    if a.name == "value":
                        return onnx.numpy_helper.to_array(a.t)
        return None

    def unique(self, name):
        base, i = name, 0
        while name in self._names:
            i += 1
            name = "%s_%d" % (base, i)
        self._names.add(name)
        return name

    def add_init(self, name, array):
        name = self.unique(name)
        self.new_inits.append((name, np.asarray(array)))
        return name

    def consumers(self, tensor):
        return [n for n in self.nodes if tensor in n.input]

    def producer(self, tensor):
        for n in self.nodes:
            if tensor in n.output:
                return n
        return None

    def finish(self):
        """Write nodes and initializers back, dropping initializers no node reads."""
        g = self.model.graph
        used = set()
        for n in self.nodes:
            used.update(n.input)
            for a in n.attribute:  # subgraphs read outer tensors too
                if a.type == onnx.AttributeProto.GRAPH:
                    used.update(_subgraph_inputs(a.g))
        used.update(self.graph_outputs)
        del g.node[:]
        g.node.extend(self.nodes)
        inits = [t for t in self.inits.values() if t.name in used]
        inits += [onnx.numpy_helper.from_array(a, name) for name, a in self.new_inits if name in used]
        del g.initializer[:]
        g.initializer.extend(inits)
        # Inputs that were initializers (IR < 4 models) and are gone.
        keep = [i for i in g.input if i.name in self.graph_inputs or i.name in used]
        del g.input[:]
        g.input.extend(keep)
        del g.value_info[:]
        return self.model


def _subgraph_inputs(g):
    names = set()
    for n in g.node:
        names.update(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names.update(_subgraph_inputs(a.g))
    return names


def opset_of(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def prepared(model):
    """The float model the quantizers start from: opset >= 13 (per-axis
    DequantizeLinear), shapes inferred."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if opset_of(model) < 13:
        model = onnx.version_converter.convert_version(model, 13)
    return model


def quantizable(g, n):
    """Is node n one the quantizers rewrite (Conv/MatMul/Gemm with a constant weight)?
    Returns the weight's input index or None."""
    if n.op_type == "Conv" and len(n.input) >= 2 and g.const(n.input[1]) is not None:
        return 1
    if n.op_type == "MatMul" and g.const(n.input[1]) is not None and g.const(n.input[0]) is None \
            and g.const(n.input[1]).ndim == 2:
        return 1
    if n.op_type == "Gemm" and g.const(n.input[1]) is not None and g.const(n.input[0]) is None:
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        if not a.get("transA", 0):
            return 1
    return None


def gemm_to_matmul(model):
    """Gemm(x, B, C) with a constant B and no transA -> MatMul(x, alpha*B') + Add(beta*C),
    B' = B^T where transB (how ONNX Runtime's dynamic quantizer sees a fully connected
    layer, and how the QOperator form writes it)."""
    g = Graph(model)
    out = []
    for n in g.nodes:
        if n.op_type != "Gemm" or quantizable(g, n) is None:
            out.append(n)
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        w = g.const(n.input[1]).astype(np.float32)
        if a.get("transB", 0):
            w = w.T
        w = (w * np.float32(a.get("alpha", 1.0))).astype(np.float32)
        wname = g.add_init(n.input[1] + "_matmul", np.ascontiguousarray(w))
        has_bias = len(n.input) > 2 and n.input[2]
        mm_out = g.unique(n.output[0] + "_matmul") if has_bias else n.output[0]
        out.append(helper.make_node("MatMul", [n.input[0], wname], [mm_out], name=g.unique(n.name + "_MatMul")))
        if has_bias:
            c = g.const(n.input[2])
            beta = a.get("beta", 1.0)
            if c is not None and beta != 1.0:
                bname = g.add_init(n.input[2] + "_scaled", (c * np.float32(beta)).astype(np.float32))
            elif c is None and beta != 1.0:
                bname = g.unique(n.input[2] + "_scaled")
                bscale = g.add_init(n.input[2] + "_beta", np.array(beta, np.float32))
                out.append(helper.make_node("Mul", [n.input[2], bscale], [bname], name=g.unique(n.name + "_beta")))
            else:
                bname = n.input[2]
            out.append(helper.make_node("Add", [mm_out, bname], [n.output[0]], name=g.unique(n.name + "_Add")))
    g.nodes = out
    return g.finish()


def _copy_conv_attrs(n):
    return [a for a in n.attribute]


# ---------------------------------------------------------------------------
# Dynamic form

def quantize_dynamic(model, per_channel=False, weight_type="int8"):
    """weight_type int8: symmetric, zero point 0 (the default of ORT's quantize_dynamic);
    uint8: asymmetric (its QUInt8)."""
    model = gemm_to_matmul(prepared(model))
    g = Graph(model)
    out = []
    dql = {}  # activation tensor -> (q, scale, zp): one DynamicQuantizeLinear per tensor
    wq = {}  # (weight, per channel) -> (q, scale, zp)
    for n in g.nodes:
        if quantizable(g, n) is None:
            out.append(n)
            continue
        x, wname = n.input[0], n.input[1]
        if x not in dql:
            names = (g.unique(x + "_quantized"), g.unique(x + "_scale"), g.unique(x + "_zero_point"))
            out.append(helper.make_node("DynamicQuantizeLinear", [x], list(names),
                                        name=g.unique(x + "_QuantizeLinear")))
            dql[x] = names
        xq, xs, xzp = dql[x]
        w = g.const(wname)
        conv = n.op_type == "Conv"
        key = (wname, per_channel)
        if key not in wq:
            # ONNX Runtime's ConvInteger takes per-tensor weight zero points only: per channel
            # applies to MatMulInteger (per column).
            axis = 1 if per_channel and not conv else None
            q, s, zp = (uint8_asymmetric if weight_type == "uint8" else int8_symmetric)(w, axis)
            wq[key] = (g.add_init(wname + "_quantized", q), g.add_init(wname + "_scale", s),
                       g.add_init(wname + "_zero_point", zp))
        wqn, ws, wzp = wq[key]
        y = n.output[0]
        yi = g.unique(y + "_output_quantized")
        if conv:
            out.append(helper.make_node("ConvInteger", [xq, wqn, xzp, wzp], [yi], name=g.unique(n.name + "_quant"),
                                        **{}))
            out[-1].attribute.extend(_copy_conv_attrs(n))
        else:
            out.append(helper.make_node("MatMulInteger", [xq, wqn, xzp, wzp], [yi], name=g.unique(n.name + "_quant")))
        yc = g.unique(yi + "_cast_output")
        out.append(helper.make_node("Cast", [yi], [yc], to=TensorProto.FLOAT, name=g.unique(n.name + "_output_cast")))
        scale = g.unique(n.name + "_scales_mul_output" if n.name else y + "_scales_mul_output")
        out.append(helper.make_node("Mul", [xs, ws], [scale], name=g.unique(n.name + "_scales_mul")))
        bias = n.input[2] if conv and len(n.input) > 2 and n.input[2] else None
        ys = g.unique(y + "_scaled") if bias else y
        out.append(helper.make_node("Mul", [yc, scale], [ys], name=g.unique(n.name + "_output_scale_mul")))
        if bias:
            shape = g.add_init(y + "_bias_reshape_shape", np.array([1, -1] + [1] * (w.ndim - 2), np.int64))
            br = g.unique(y + "_bias_reshape_output")
            out.append(helper.make_node("Reshape", [bias, shape], [br], name=g.unique(n.name + "_bias_reshape")))
            out.append(helper.make_node("Add", [ys, br], [y], name=g.unique(n.name + "_bias_add")))
    g.nodes = out
    return g.finish()


# ---------------------------------------------------------------------------
# Static forms (QDQ, and QOperator converted from it)

def _fold_activations(g, ranges):
    """Relu, or Clip to [0, >= the calibrated maximum], right after a quantized op whose
    output nothing else reads: the uint8 quantization of the output (zero point 0)
    saturates the same way, so ONNX Runtime removes the activation and quantizes the op's
    output with the activation output's range. Returns the node list."""
    removed = set()
    for n in list(g.nodes):
        if n.op_type not in ("Relu", "Clip"):
            continue
        src = g.producer(n.input[0])
        if src is None or quantizable(g, src) is None or n.input[0] in g.graph_outputs:
            continue
        if n.output[0] in g.graph_outputs or len(g.consumers(n.input[0])) != 1:
            continue
        if n.op_type == "Clip":
            lo = g.const(n.input[1]) if len(n.input) > 1 and n.input[1] else None
            hi = g.const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            lo = a.get("min") if lo is None else lo
            hi = a.get("max") if hi is None else hi
            r = ranges.get(n.output[0])
            if lo is None or float(lo) != 0.0 or r is None or (hi is not None and float(hi) < r[1]):
                continue
        src.output[0] = n.output[0]
        removed.add(id(n))
    g.nodes = [n for n in g.nodes if id(n) not in removed]


def quantize_qdq(model, ranges, per_channel_conv=True, fold=True):
    """QuantizeLinear/DequantizeLinear around every quantized op's activation inputs and
    output; int8 weights -> DequantizeLinear (per channel for Conv); int32 bias ->
    DequantizeLinear with scale x_scale * w_scale. Returns (model, quantized node names)."""
    model = prepared(model)
    g = Graph(model)
    if fold:
        _fold_activations(g, ranges)
    qnodes = [n for n in g.nodes if quantizable(g, n) is not None]
    # Activation tensors to quantize, in graph order.
    acts = []
    for n in qnodes:
        for t in list(n.input[:1]) + ([n.input[1]] if g.const(n.input[1]) is None else []) + [n.output[0]]:
            if t not in acts:
                acts.append(t)
    params = {}
    for t in acts:
        if t not in ranges:
            raise RuntimeError("no calibrated range for tensor %r" % t)
        params[t] = uint8_params(*ranges[t])
    new_nodes = list(g.nodes)
    dq_of = {}
    for t in acts:
        s, zp = params[t]
        sname = g.add_init(t + "_scale", np.array(s, np.float32))
        zname = g.add_init(t + "_zero_point", np.array(zp, np.uint8))
        src = t
        if t in g.graph_outputs:  # the producer writes a new name; DequantizeLinear writes the output
            src = g.unique(t + "_QuantizeLinear_Input")
            for n in new_nodes:
                n.output[:] = [src if o == t else o for o in n.output]
        qout = g.unique(t + "_QuantizeLinear_Output")
        dqout = t if t in g.graph_outputs else g.unique(t + "_DequantizeLinear_Output")
        for n in new_nodes:
            n.input[:] = [dqout if i == t else i for i in n.input]
        qn = helper.make_node("QuantizeLinear", [src, sname, zname], [qout], name=g.unique(t + "_QuantizeLinear"))
        dqn = helper.make_node("DequantizeLinear", [qout, sname, zname], [dqout], name=g.unique(t + "_DequantizeLinear"))
        # Right after the producer (or first, for graph inputs).
        prod = next((i for i, n in enumerate(new_nodes) if src in n.output), -1)
        new_nodes[prod + 1:prod + 1] = [qn, dqn]
        dq_of[t] = dqout
    # Weights and biases.
    wdone = {}
    for n in qnodes:
        wname = n.input[1]
        conv = n.op_type == "Conv"
        axis = 0 if conv and per_channel_conv else None
        key = (wname, axis)
        w = g.const(wname)
        if key not in wdone:
            q, s, zp = int8_symmetric(w, axis)
            qn_, sn, zn = (g.add_init(wname + "_quantized", q), g.add_init(wname + "_scale", s),
                           g.add_init(wname + "_zero_point", zp))
            dqout = g.unique(wname + "_DequantizeLinear_Output")
            kw = {"axis": axis} if axis is not None else {}
            dqn = helper.make_node("DequantizeLinear", [qn_, sn, zn], [dqout],
                                   name=g.unique(wname + "_DequantizeLinear"), **kw)
            i = new_nodes.index(n)
            new_nodes.insert(i, dqn)
            wdone[key] = (dqout, s, qn_, sn, zn)
        n.input[1] = wdone[key][0]
        ws = wdone[key][1]
        if len(n.input) > 2 and n.input[2]:
            b = g.const(n.input[2])
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            if b is None or (n.op_type == "Gemm" and (a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0)):
                continue
            # The activation input's scale: n.input[0] now reads a DequantizeLinear.
            xdq = next(m for m in new_nodes if m.op_type == "DequantizeLinear" and m.output[0] == n.input[0])
            xs = np.float32(dict(g.new_inits)[xdq.input[1]])
            bscale = (xs * ws.astype(np.float32)).astype(np.float32)
            bq = int32_bias(b, bscale if bscale.ndim else np.full(b.shape, bscale, np.float32))
            bqn = g.add_init(n.input[2] + "_quantized", bq)
            bsn = g.add_init(n.input[2] + "_quantized_scale", bscale)
            bzn = g.add_init(n.input[2] + "_quantized_zero_point", np.zeros(bscale.shape, np.int32))
            bout = g.unique(n.input[2] + "_DequantizeLinear_Output")
            kw = {"axis": 0} if bscale.ndim else {}
            dqn = helper.make_node("DequantizeLinear", [bqn, bsn, bzn], [bout],
                                   name=g.unique(n.input[2] + "_DequantizeLinear"), **kw)
            new_nodes.insert(new_nodes.index(n), dqn)
            n.input[2] = bout
    g.nodes = new_nodes
    return g.finish(), [n.name for n in qnodes]


def qdq_to_qop(model, qnode_names):
    """QuantizeLinear -> QLinearConv / QLinearMatMul -> DequantizeLinear: each quantized
    op with its input DequantizeLinears and output QuantizeLinear becomes one QLinear op
    reading and writing uint8; a DequantizeLinear -> QuantizeLinear pair between two
    quantized ops disappears with it (they share the tensor's parameters)."""
    g = Graph(model)
    names = set(qnode_names)

    def producer(t):
        return next((m for m in g.nodes if t in m.output), None)

    out_nodes = list(g.nodes)
    for n in list(out_nodes):
        if n.name not in names or n.op_type not in ("Conv", "MatMul"):
            continue
        ins = []
        ok = True
        for t in n.input[:2]:
            p = producer(t)
            if p is None or p.op_type != "DequantizeLinear":
                ok = False
                break
            ins.append(p)
        cons = [m for m in out_nodes if n.output[0] in m.input]
        if not ok or len(cons) != 1 or cons[0].op_type != "QuantizeLinear" or n.output[0] in g.graph_outputs:
            continue
        qout = cons[0]
        xdq, wdq = ins
        if n.op_type == "Conv":
            inputs = list(xdq.input) + list(wdq.input) + list(qout.input[1:])
            if len(n.input) > 2 and n.input[2]:
                bdq = producer(n.input[2])
                if bdq is None or bdq.op_type != "DequantizeLinear":
                    continue
                inputs.append(bdq.input[0])
            new = helper.make_node("QLinearConv", inputs, [qout.output[0]], name=n.name + "_quant")
            new.attribute.extend(_copy_conv_attrs(n))
        else:
            new = helper.make_node("QLinearMatMul", list(xdq.input) + list(wdq.input) + list(qout.input[1:]),
                                   [qout.output[0]], name=n.name + "_quant")
        i = out_nodes.index(n)
        out_nodes[i] = new
        out_nodes.remove(qout)
    # DequantizeLinear nodes nothing reads any more.
    while True:
        read = set()
        for m in out_nodes:
            read.update(m.input)
        dead = [m for m in out_nodes if m.op_type in ("DequantizeLinear", "QuantizeLinear")
                and not any(o in read or o in g.graph_outputs for o in m.output)]
        if not dead:
            break
        out_nodes = [m for m in out_nodes if m not in dead]
    g.nodes = out_nodes
    return g.finish()


# ---------------------------------------------------------------------------
# Running ONNX Runtime

def _node():
    return shutil.which("node") or "node"


def run_ort(model_path, feed_runs, mode, level="disabled", tmp=None):
    """feed_runs: list of {name: array}. minmax -> {name: (lo, hi)}; dump -> [(name, array)]."""
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        runs = []
        for k, feeds in enumerate(feed_runs):
            run = {}
            for j, (name, arr) in enumerate(feeds.items()):
                f = os.path.join(d, "in_%d_%d.bin" % (k, j))
                arr = np.ascontiguousarray(arr)
                arr.tofile(f)
                run[name] = {"file": f, "dtype": NP_TO_ORT[arr.dtype.type], "dims": list(arr.shape)}
            runs.append(run)
        job = {"model": model_path, "level": level, "mode": mode, "out": d, "runs": runs}
        jf = os.path.join(d, "job.json")
        with open(jf, "w") as f:
            json.dump(job, f)
        r = subprocess.run([_node(), ORT_HELPER, jf], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("onnxruntime-node failed on %s: %s" % (model_path, r.stderr.strip()[-2000:]))
        res = json.loads(r.stdout.splitlines()[0])
        if mode == "minmax":
            return {k: (float(v[0]), float(v[1])) for k, v in res.items()}
        dt = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "uint8": np.uint8, "int8": np.int8,
              "float64": np.float64, "bool": np.bool_}
        return [(e["name"], np.fromfile(e["file"], dtype=dt[e["dtype"]]).reshape(e["dims"])) for e in res]


def _value_types(model):
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def calibrate(model, feed_runs, tmp=None):
    """min/max of every float tensor the main graph computes, over the feed sets."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    types = _value_types(m)
    have = {o.name for o in m.graph.output}
    inits = {t.name for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant":
            continue
        for o in n.output:
            if o and o not in have and o not in inits and types.get(o) == TensorProto.FLOAT:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
                have.add(o)
    for i in m.graph.input:
        if i.name not in have and i.name not in inits and types.get(i.name) == TensorProto.FLOAT:
            m.graph.output.append(helper.make_tensor_value_info(i.name, TensorProto.FLOAT, None))
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        p = os.path.join(d, "calibration.onnx")
        onnx.save(m, p)
        return run_ort(p, feed_runs, "minmax", tmp=tmp)


# ---------------------------------------------------------------------------
# Inputs

def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def calibration_feeds(model, template, count, seed):
    """count seeded random feed sets like the model's inputs: float ~ N(0, 1) (as the zoo's
    inputs), integer indices uniform below the size of the table a Gather reads them from."""
    g = Graph(model)
    rng = np.random.default_rng(seed)
    specs = []
    for i in model.graph.input:
        if i.name not in g.graph_inputs:
            continue
        tt = i.type.tensor_type
        if template and i.name in template:
            shape, dtype = template[i.name].shape, template[i.name].dtype
        else:
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
            dtype = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[tt.elem_type]
        bound = None
        if np.issubdtype(dtype, np.integer):
            for n in g.consumers(i.name):
                if n.op_type == "Gather" and n.input[1] == i.name and g.const(n.input[0]) is not None:
                    a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
                    size = g.const(n.input[0]).shape[a.get("axis", 0)]
                    bound = size if bound is None else min(bound, size)
            if bound is None:
                bound = int(template[i.name].max()) + 1 if template and i.name in template else 2
        specs.append((i.name, shape, dtype, bound))
    runs = []
    for _ in range(count):
        feeds = {}
        for name, shape, dtype, bound in specs:
            if bound is None:
                feeds[name] = rng.standard_normal(shape).astype(dtype)
            else:
                feeds[name] = rng.integers(0, bound, size=shape).astype(dtype)
        runs.append(feeds)
    return runs


# ---------------------------------------------------------------------------

def save(model, path):
    data = model.SerializeToString()
    with open(path, "wb") as f:
        f.write(data)


def quantize_file(src, out_dir, forms, per_channel=False, calibration=4, reference=True, force=False,
                  tmp=None, log=print, weight_type="int8"):
    stem = os.path.basename(src)[:-len(".onnx")]
    base = src[:-len(".onnx")]
    targets = {f: os.path.join(out_dir, stem + SUFFIX[f] + ".onnx") for f in forms}
    if not force and all(os.path.exists(p) for p in targets.values()):
        log("[quantize] %s: exists, kept" % stem)
        return targets
    model = onnx.load(src)
    inp = base + ".input_0.pb"
    template = dict([load_tensor(inp)]) if os.path.exists(inp) else None
    seed = zlib.crc32(stem.encode()) & 0x7FFFFFFF
    ranges = None
    for form in forms:
        if form == "dynamic":
            q = quantize_dynamic(model, per_channel=per_channel, weight_type=weight_type)
        else:
            float_model = gemm_to_matmul(prepared(model)) if form == "qop" else prepared(model)
            if ranges is None or form == "qop":
                ranges = calibrate(gemm_to_matmul(prepared(model)),
                                   calibration_feeds(model, template, calibration, seed), tmp=tmp)
            q, qnodes = quantize_qdq(float_model, ranges)
            if form == "qop":
                q = qdq_to_qop(q, qnodes)
        onnx.checker.check_model(q)
        save(q, targets[form])
        ops = {}
        for n in q.graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        log("[quantize] %s -> %s (%d bytes; %s)" % (stem, os.path.basename(targets[form]),
                                                  os.path.getsize(targets[form]),
                                                  ", ".join("%s %d" % kv for kv in sorted(ops.items()))))
        if reference and template is not None:
            vbase = targets[form][:-len(".onnx")]
            shutil.copyfile(inp, vbase + ".input_0.pb")
            outs = run_ort(targets[form], [template], "dump", level="disabled", tmp=tmp)
            name, arr = outs[0]
            t = onnx.numpy_helper.from_array(arr, name)
            with open(vbase + ".output_0.pb", "wb") as f:
                f.write(t.SerializeToString())
    return targets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None,
                    help="comma-separated model stems (default: every float model in --in)")
    ap.add_argument("--forms", default=",".join(FORMS), help="comma-separated: dynamic,qdq,qop")
    ap.add_argument("--small", action="store_true", help="the committed small models (resources/models)")
    ap.add_argument("--in", dest="src", default=None, help="folder of float models (default: the zoo cache, "
                    "or resources/models with --small)")
    ap.add_argument("--out", default=None, help="output folder (default: the input folder)")
    ap.add_argument("--per-channel", action="store_true",
                    help="dynamic form: per-column weight scales and zero points for MatMul (ONNX Runtime's "
                         "ConvInteger takes per-tensor ones only; the static forms are always per channel for Conv)")
    ap.add_argument("--weight-type", choices=("int8", "uint8"), default="int8",
                    help="dynamic form: int8 symmetric weights (default) or uint8 asymmetric ones")
    ap.add_argument("--calibration", type=int, default=4, help="calibration inputs (static forms)")
    ap.add_argument("--no-reference", action="store_true",
                    help="do not write .input_0.pb/.output_0.pb (ONNX Runtime's output)")
    ap.add_argument("--force", action="store_true", help="overwrite existing variants")
    args = ap.parse_args(argv)
    src = args.src or (SMALL_DIR if args.small else ZOO_DIR)
    out = args.out or src
    forms = [f for f in args.forms.split(",") if f]
    for f in forms:
        if f not in FORMS:
            ap.error("unknown form %r (forms: %s)" % (f, ", ".join(FORMS)))
    if args.models:
        stems = args.models.split(",")
    else:
        stems = sorted(f[:-5] for f in os.listdir(src)
                       if f.endswith(".onnx") and not any(s in f for s in SUFFIX.values()))
    os.makedirs(out, exist_ok=True)
    for stem in stems:
        path = os.path.join(src, stem + ".onnx")
        if not os.path.exists(path):
            print("no model %s" % path, file=sys.stderr)
            return 1
        quantize_file(path, out, forms, per_channel=args.per_channel, calibration=args.calibration,
                      reference=not args.no_reference, force=args.force, weight_type=args.weight_type)
    return 0


if __name__ == "__main__":
    sys.exit(main())
