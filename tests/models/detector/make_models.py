#!/usr/bin/python3
"""A small single-stage detector built with onnx.helper (fixed-seed random
weights), for checking the dynamically quantized form of a detection graph
against ONNX Runtime.

    make_models.py [--out DIR]

Writes tiny_detector.onnx and tiny_detector.input_0.pb (1x3x96x96, N(0, 1)),
then, with bench/models/quantize_models.py, its dynamic int8 form with uint8
weights (asymmetric: non-zero weight zero points), tiny_detector_int8_dynamic.onnx,
and ONNX Runtime's three outputs for the input (onnxruntime-node,
optimizations off: bench/node_modules) as tiny_detector_int8_dynamic.output_<i>.pb.
Only the dynamic form and its input and outputs are committed (the float
model is 434 KB; this script rewrites it).

The graph has what a detector has and a classifier lacks:
  - a strided conv backbone with SiLU written as x * Sigmoid(x);
  - a cross-stage block: Split, parallel conv branches, Concat;
  - a feature pyramid neck: nearest x2 Resize, Concat with the lateral map;
  - per-scale heads: a box conv and a class conv read the same map (so in the
    quantized form several ConvIntegers read one DynamicQuantizeLinear), one
    of them grouped, whose outputs are reshaped and concatenated;
  - a box decode (Sigmoid, Mul/Add with grid constants, Exp) and the
    scores' ReduceMax and TopK.
"""

import argparse
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench", "models"))
import quantize_models as qm  # noqa: E402

SIZE = 96
CLASSES = 8
TOPK = 50


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, base):
        self.count += 1
        return "%s_%d" % (base, self.count)

    def const(self, base, array):
        n = self.name(base)
        self.inits.append(onnx.numpy_helper.from_array(np.asarray(array), n))
        return n

    def node(self, op, inputs, outputs=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs if outputs > 1 else outs[0]

    def conv(self, x, cin, cout, k=3, stride=1, group=1, act=True):
        # He-like init so activations keep their scale through the network.
        fan = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        p = k // 2
        y = self.node("Conv", [x, self.const("w", w), self.const("b", b)], kernel_shape=[k, k],
                      strides=[stride, stride], pads=[p, p, p, p], group=group)
        return self.silu(y) if act else y

    def silu(self, x):
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def upsample(self, x):
        scales = self.const("scales", np.array([1, 1, 2, 2], np.float32))
        return self.node("Resize", [x, "", scales], mode="nearest")


def build():
    b = Builder(seed=20261128)
    x = "images"
    s1 = b.conv(x, 3, 16, stride=2)            # 48x48
    s2 = b.conv(s1, 16, 32, stride=2)          # 24x24
    # Cross-stage block: 1x1, split in two, a chain of two 3x3 on one half, concat all.
    c = b.conv(s2, 32, 32, k=1)
    halves = b.node("Split", [c, b.const("split", np.array([16, 16], np.int64))], outputs=2, axis=1)
    m1 = b.conv(halves[1], 16, 16)
    m2 = b.conv(m1, 16, 16)
    p3 = b.conv(b.node("Concat", [halves[0], halves[1], m2], axis=1), 48, 32, k=1)   # 24x24
    s3 = b.conv(p3, 32, 64, stride=2)          # 12x12
    p4 = b.conv(s3, 64, 64, group=64)          # depthwise, 12x12
    p5 = b.conv(p4, 64, 64, stride=2)          # 6x6
    # Neck: top-down.
    n4 = b.conv(b.node("Concat", [b.upsample(p5), p4], axis=1), 128, 64, k=1)   # 12x12
    n3 = b.conv(b.node("Concat", [b.upsample(n4), p3], axis=1), 96, 32, k=1)    # 24x24
    # Heads: box and class convs on each scale.
    boxes, scores, grids, strides = [], [], [], []
    for feat, ch, hw, stride in ((n3, 32, 24, 8), (n4, 64, 12, 16), (p5, 64, 6, 32)):
        stem = b.conv(feat, ch, 32, group=2)
        box = b.conv(stem, 32, 4, k=1, act=False)
        cls = b.conv(feat, ch, CLASSES, k=1, act=False)
        shape4 = b.const("shape", np.array([1, 4, hw * hw], np.int64))
        shapec = b.const("shape", np.array([1, CLASSES, hw * hw], np.int64))
        boxes.append(b.node("Reshape", [box, shape4]))
        scores.append(b.node("Reshape", [cls, shapec]))
        gy, gx = np.meshgrid(np.arange(hw, dtype=np.float32), np.arange(hw, dtype=np.float32), indexing="ij")
        grids.append(np.stack([gx.ravel(), gy.ravel()]) - 0.5)
        strides.append(np.full((1, hw * hw), stride, np.float32))
    box = b.node("Concat", boxes, axis=2)      # 1x4xA
    cls = b.node("Concat", scores, axis=2)     # 1xCxA
    grid = b.const("grid", np.concatenate(grids, axis=1)[None].astype(np.float32))   # 1x2xA
    stride = b.const("stride", np.concatenate(strides, axis=1)[None].astype(np.float32))  # 1x1xA
    xy_raw, wh_raw = b.node("Split", [box, b.const("split", np.array([2, 2], np.int64))], outputs=2, axis=1)
    two = b.const("two", np.array(2.0, np.float32))
    xy = b.node("Mul", [b.node("Add", [b.node("Mul", [b.node("Sigmoid", [xy_raw]), two]), grid]), stride])
    wh = b.node("Mul", [b.node("Exp", [wh_raw]), stride])
    b.node("Concat", [xy, wh], axis=1)
    b.nodes[-1].output[0] = "boxes"
    prob = b.node("Sigmoid", [cls])
    best = b.node("ReduceMax", [prob], axes=[1], keepdims=0)   # 1xA
    k = b.const("k", np.array([TOPK], np.int64))
    b.node("TopK", [best, k], outputs=2, axis=1)
    b.nodes[-1].output[:] = ["scores", "indices"]
    anchors = len(np.concatenate(strides, axis=1)[0])
    graph = helper.make_graph(
        b.nodes, "tiny_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4, anchors]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, TOPK]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [1, TOPK])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_models.py")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    model = build()
    onnx.save(model, os.path.join(args.out, "tiny_detector.onnx"))
    x = np.random.default_rng(7).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)
    with open(os.path.join(args.out, "tiny_detector.input_0.pb"), "wb") as f:
        f.write(onnx.numpy_helper.from_array(x, "images").SerializeToString())
    q = qm.quantize_file(os.path.join(args.out, "tiny_detector.onnx"), args.out, ["dynamic"], force=True,
                         reference=False, weight_type="uint8")["dynamic"]
    base = q[:-len(".onnx")]
    with open(base + ".input_0.pb", "wb") as f:
        f.write(onnx.numpy_helper.from_array(x, "images").SerializeToString())
    for i, (name, arr) in enumerate(qm.run_ort(q, [{"images": x}], "dump", level="disabled")):
        with open("%s.output_%d.pb" % (base, i), "wb") as f:
            f.write(onnx.numpy_helper.from_array(arr, name).SerializeToString())


if __name__ == "__main__":
    main()
