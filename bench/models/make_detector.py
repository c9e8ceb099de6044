#!/usr/bin/python3
"""A YOLO-style single-stage detector for the zoo, built with onnx's helper
and seeded numpy weights (no PyTorch), with its reference input and output.

    make_detector.py [--out DIR] [--size 320] [--force]

Writes yolo_style_detector.onnx, .input_0.pb (1x3xSxS, N(0, 1)) and
.output_0.pb (the output computed here in numpy, float64 accumulation, as
the graph is built) into the zoo cache ($XDG_CACHE_HOME/collage-studio/zoo),
or --out. Its dynamic int8 form is quantize_models.py's:

    quantize_models.py --models yolo_style_detector --forms dynamic

The graph (opset 17, batch dynamic): image [B, 3, S, S] -> detections
[B, 4 + 80, anchors], boxes (x1, y1, x2, y2 in pixels) and class scores of
the anchors of three scales (strides 8, 16, 32).
  - backbone: strided 3x3 convs and cross-stage partial blocks with a split
    (1x1 conv, Split in halves, a chain of residual bottlenecks whose every
    output is kept, Concat of them all, 1x1 conv), then SPPF (three chained
    5x5 max pools, Concat of the four); every conv with SiLU as x * Sigmoid(x);
  - neck: top-down (nearest x2 Resize, Concat with the lateral map, a block)
    and bottom-up (strided conv, Concat, a block);
  - heads: per scale a box branch (two 3x3 convs, a 1x1 to 4 x 16 bins) and a
    class branch (two 3x3 convs, a 1x1 to 80 classes) reading the same map;
  - decode: the bins' Softmax and expectation (a fixed 1x1 conv), distances
    around constant anchor points, times the stride; Sigmoid class scores.
After dynamic quantization every conv is a DynamicQuantizeLinear ->
ConvInteger -> Cast -> Mul -> Add chain, and the blocks' Concats gather many
such chains side by side: the wide, parallel shape the op-level search must
handle (docs/optimizer.md).

Weights: He-normal, then BatchNorm folded with statistics measured on the
reference input itself (scale U(0.5, 1.5), shift U(-0.2, 0.2); the variance
floored at a tenth of the layer's mean), so the activations stay O(1)
through the deep stacks, as in a trained network; the box and class logits
small (a tenth of He), so that float rounding in a plan's kernels moves the
decoded boxes by hundredths of a pixel, not by one.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_zoo import conv as np_conv, pool as np_pool  # noqa: E402

NAME = "yolo_style_detector"
OPSET = 17
SEED = 20261129
WIDTHS = (16, 32, 64, 128, 256)
DEPTHS = (6, 12, 12, 6)  # bottlenecks per backbone block
NECK_DEPTH = 6
CLASSES = 80
REG_MAX = 16


def zoo_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "collage-studio", "zoo")


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


class Builder:
    """Adds nodes and computes each one's value on the reference input as it goes."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.values = [], [], {}
        self.count = 0

    def fresh(self, stem):
        self.count += 1
        return "%s_%d" % (stem, self.count)

    def const(self, stem, array):
        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        self.values[name] = np.asarray(array)
        return name

    def op(self, op_type, inputs, value, scope, outputs=1, **attrs):
        outs = [self.fresh("%s/%s" % (scope, op_type.lower())) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh("%s/%s" % (scope, op_type)),
                                           **attrs))
        for o, v in zip(outs, value if outputs > 1 else [value]):
            self.values[o] = np.asarray(v)
        return outs if outputs > 1 else outs[0]

    def v(self, name):
        return self.values[name]

    # -- layers --

    def conv(self, x, cout, k, s, scope, norm=True, act=True, gain=1.0):
        xv = self.v(x)
        cin = xv.shape[1]
        w = (self.rng.standard_normal((cout, cin, k, k)) * gain * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [k // 2] * 4}
        y = np_conv(xv.astype(np.float64), w.astype(np.float64), None, attrs)
        if norm:  # BatchNorm with the statistics of this input, folded into the conv
            mean = y.mean(axis=(0, 2, 3))
            var = y.var(axis=(0, 2, 3))
            # A floor at a tenth of the layer's mean variance: a near-constant
            # channel is not blown up to unit variance (which would amplify
            # float rounding through the deep stacks).
            std = np.sqrt(var + 0.1 * var.mean() + 1e-3)
            gamma = self.rng.uniform(0.5, 1.5, cout)
            beta = self.rng.uniform(-0.2, 0.2, cout)
            w = (w * (gamma / std).reshape(-1, 1, 1, 1)).astype(np.float32)
            b = (beta - mean * gamma / std).astype(np.float32)
        else:
            b = (self.rng.standard_normal(cout) * 0.1 * gain).astype(np.float32)
        yv = np_conv(xv.astype(np.float64), w.astype(np.float64), b.astype(np.float64), attrs).astype(np.float32)
        y = self.op("Conv", [x, self.const("w", w), self.const("b", b)], yv, scope, **attrs)
        return self.silu(y, scope) if act else y

    def silu(self, x, scope):
        s = self.op("Sigmoid", [x], _sigmoid(self.v(x)), scope)
        return self.op("Mul", [x, s], self.v(x) * self.v(s), scope)

    def binary(self, op, a, b, scope):
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
        return self.op(op, [a, b], f(self.v(a), self.v(b)).astype(np.float32), scope)

    def concat(self, xs, scope, axis=1):
        return self.op("Concat", xs, np.concatenate([self.v(x) for x in xs], axis), scope, axis=axis)

    def split(self, x, sizes, scope, axis=1):
        parts = np.split(self.v(x), np.cumsum(sizes)[:-1], axis)
        return self.op("Split", [x, self.const("split", np.array(sizes, np.int64))], parts, scope,
                       outputs=len(sizes), axis=axis)

    def reshape(self, x, shape, scope):
        return self.op("Reshape", [x, self.const("shape", np.array(shape, np.int64))],
                       self.v(x).reshape(shape), scope)

    def maxpool(self, x, scope):
        a = {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}
        return self.op("MaxPool", [x], np_pool(self.v(x), a, "max").astype(np.float32), scope, **a)

    def upsample(self, x, scope):
        y = self.v(x).repeat(2, axis=2).repeat(2, axis=3)
        return self.op("Resize", [x, "", self.const("scales", np.array([1, 1, 2, 2], np.float32))], y, scope,
                       mode="nearest")

    # -- blocks --

    def bottleneck(self, x, c, shortcut, scope):
        y = self.conv(self.conv(x, c, 3, 1, scope + "/cv1"), c, 3, 1, scope + "/cv2")
        return self.binary("Add", x, y, scope) if shortcut else y

    def csp(self, x, cout, n, shortcut, scope):
        c = cout // 2
        ys = list(self.split(self.conv(x, 2 * c, 1, 1, scope + "/cv1"), [c, c], scope))
        for i in range(n):
            ys.append(self.bottleneck(ys[-1], c, shortcut, "%s/m.%d" % (scope, i)))
        return self.conv(self.concat(ys, scope), cout, 1, 1, scope + "/cv2")

    def sppf(self, x, cout, scope):
        x = self.conv(x, self.v(x).shape[1] // 2, 1, 1, scope + "/cv1")
        y1 = self.maxpool(x, scope)
        y2 = self.maxpool(y1, scope)
        y3 = self.maxpool(y2, scope)
        return self.conv(self.concat([x, y1, y2, y3], scope), cout, 1, 1, scope + "/cv2")


def build(size, seed=SEED):
    """(model, input array, output array)."""
    if size % 32:
        raise ValueError("--size must be a multiple of 32, not %d" % size)
    b = Builder(seed)
    image = np.random.default_rng(seed + 1).standard_normal((1, 3, size, size)).astype(np.float32)
    b.values["images"] = image
    w, d = WIDTHS, DEPTHS
    x = b.conv("images", w[0], 3, 2, "stem")
    x = b.csp(b.conv(x, w[1], 3, 2, "stage1/down"), w[1], d[0], True, "stage1/csp")
    p3 = b.csp(b.conv(x, w[2], 3, 2, "stage2/down"), w[2], d[1], True, "stage2/csp")
    p4 = b.csp(b.conv(p3, w[3], 3, 2, "stage3/down"), w[3], d[2], True, "stage3/csp")
    p5 = b.csp(b.conv(p4, w[4], 3, 2, "stage4/down"), w[4], d[3], True, "stage4/csp")
    p5 = b.sppf(p5, w[4], "stage4/sppf")
    t4 = b.csp(b.concat([b.upsample(p5, "neck/up4"), p4], "neck/up4"), w[3], NECK_DEPTH, False, "neck/td4")
    n3 = b.csp(b.concat([b.upsample(t4, "neck/up3"), p3], "neck/up3"), w[2], NECK_DEPTH, False, "neck/td3")
    n4 = b.csp(b.concat([b.conv(n3, w[2], 3, 2, "neck/down3"), t4], "neck/bu4"), w[3], NECK_DEPTH, False,
               "neck/bu4")
    n5 = b.csp(b.concat([b.conv(n4, w[3], 3, 2, "neck/down4"), p5], "neck/bu5"), w[4], NECK_DEPTH, False,
               "neck/bu5")
    cb, cc = max(16, w[2] // 4, 4 * REG_MAX), max(w[2], min(CLASSES, 100))
    no = 4 * REG_MAX + CLASSES
    outs, points, strides = [], [], []
    for i, (f, stride) in enumerate(zip((n3, n4, n5), (8, 16, 32))):
        s = "head%d" % i
        # Small box and class logits, as after training: the decode multiplies
        # their errors by up to the stride, so large random ones would make
        # the output hang on float rounding.
        box = b.conv(b.conv(b.conv(f, cb, 3, 1, s + "/box0"), cb, 3, 1, s + "/box1"), 4 * REG_MAX, 1, 1,
                     s + "/box2", norm=False, act=False, gain=0.1)
        cls = b.conv(b.conv(b.conv(f, cc, 3, 1, s + "/cls0"), cc, 3, 1, s + "/cls1"), CLASSES, 1, 1,
                     s + "/cls2", norm=False, act=False, gain=0.1)
        n = size // stride
        outs.append(b.reshape(b.concat([box, cls], s), [-1, no, n * n], s))
        ys, xs = np.meshgrid(np.arange(n, dtype=np.float32) + 0.5, np.arange(n, dtype=np.float32) + 0.5,
                             indexing="ij")
        points.append(np.stack([xs.reshape(-1), ys.reshape(-1)], 0))
        strides.append(np.full((1, n * n), stride, np.float32))
    anchors = sum(p.shape[1] for p in points)
    y = b.concat(outs, "decode", axis=2)
    box, cls = b.split(y, [4 * REG_MAX, CLASSES], "decode")
    bins = b.reshape(box, [-1, 4, REG_MAX, anchors], "decode/dfl")
    bins = b.op("Transpose", [bins], b.v(bins).transpose(0, 2, 1, 3), "decode/dfl", perm=[0, 2, 1, 3])
    e = np.exp(b.v(bins).astype(np.float64) - b.v(bins).max(axis=1, keepdims=True))
    bins = b.op("Softmax", [bins], (e / e.sum(axis=1, keepdims=True)).astype(np.float32), "decode/dfl", axis=1)
    expect = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    dist = b.op("Conv", [bins, b.const("dfl_bins", expect)],
                np_conv(b.v(bins).astype(np.float64), expect.astype(np.float64), None, {}).astype(np.float32),
                "decode/dfl", kernel_shape=[1, 1])
    dist = b.reshape(dist, [-1, 4, anchors], "decode")
    lt, rb = b.split(dist, [2, 2], "decode")
    pts = b.const("anchor_points", np.concatenate(points, 1)[None])
    xy1 = b.binary("Sub", pts, lt, "decode")
    xy2 = b.binary("Add", pts, rb, "decode")
    boxes = b.binary("Mul", b.concat([xy1, xy2], "decode"), b.const("strides", np.concatenate(strides, 1)[None]),
                     "decode")
    scores = b.op("Sigmoid", [cls], _sigmoid(b.v(cls)), "decode")
    out = b.concat([boxes, scores], "decode")
    b.nodes[-1].output[0] = "detections"
    b.values["detections"] = b.values[out]

    graph = helper.make_graph(
        b.nodes, NAME, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["batch", 4 + CLASSES, anchors])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="collage-studio bench/models/make_detector.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, image, b.values["detections"].astype(np.float32)


def write(out_dir, size, force=False):
    """Writes the model and its reference data; returns the .onnx path."""
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, NAME)
    paths = [stem + ".onnx", stem + ".input_0.pb", stem + ".output_0.pb"]
    if not force and all(os.path.exists(p) for p in paths):
        print("[skip] %s exists (use --force to rewrite)" % paths[0])
        return paths[0]
    model, image, out = build(size)
    onnx.save(model, paths[0])
    for path, name, arr in ((paths[1], "images", image), (paths[2], "detections", out)):
        with open(path, "wb") as f:
            f.write(numpy_helper.from_array(arr, name).SerializeToString())
    print("%s: %d nodes, %d parameters, output %s" % (
        paths[0], len(model.graph.node), sum(int(np.prod(t.dims)) for t in model.graph.initializer),
        "x".join(str(s) for s in out.shape)))
    return paths[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=zoo_dir(), help="output folder (default: the zoo cache)")
    ap.add_argument("--size", type=int, default=320, help="image size, a multiple of 32 (default 320)")
    ap.add_argument("--force", action="store_true", help="rewrite existing files")
    args = ap.parse_args(argv)
    write(args.out, args.size, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
