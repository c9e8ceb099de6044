"""A small convolutional net as tf2onnx writes a TensorFlow (NHWC) model:
the input is NHWC, every convolution block is wrapped in Transpose(0,3,1,2)
into NCHW and Transpose(0,2,3,1) back, and what lies between the blocks
stays in NHWC:
  - a Conv 3x3 + Relu block, its result added to the input (the skip path
    reads the NHWC input, which the block's Transpose also reads), Relu;
  - a depthwise Conv 3x3 + Relu, pointwise Conv 1x1 (8 -> 12 channels)
    block, added to the skip path padded from 8 to 12 channels by a Pad on
    the NHWC channel axis (3), Relu;
  - two parallel blocks (Conv 1x1, Conv 3x3 + Relu), each transposed back,
    concatenated on the NHWC channel axis and added to the skip path;
  - a spatial Pad in NHWC (1 on each side of H and W), then a block of a
    strided Conv 3x3 + Relu whose NHWC result is the graph's output.
Nine Transposes; seven of them cancel (docs/substitutions.md,
cancel-transposes), the input's and the output's remain: the graph's input
and output are NHWC. Random weights from a fixed seed.
Usage: nhwc_transposed_blocks_models.py OUT_DIR"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

SIZE, CHANNELS = 12, 8  # input 1 x SIZE x SIZE x CHANNELS
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def build():
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    count = [0]

    def fresh(base):
        count[0] += 1
        return f"{base}_{count[0]}"

    def node(op, inputs, **attrs):
        out = fresh(op.lower())
        nodes.append(h.make_node(op, inputs, [out], name=fresh(op), **attrs))
        return out

    def const(base, a):
        n = fresh(base)
        inits.append(nh.from_array(a, n))
        return n

    def conv(x, cin, cout, k, group=1, stride=1, pad=None, relu=True):
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k)))
        b = rng.standard_normal(cout) * 0.1
        p = k // 2 if pad is None else pad
        y = node("Conv", [x, const("w", w.astype(np.float32)), const("b", b.astype(np.float32))],
                 kernel_shape=[k, k], strides=[stride, stride], pads=[p] * 4, group=group)
        return node("Relu", [y]) if relu else y

    def block(x, *convs):  # NHWC in, NHWC out, as tf2onnx wraps a block
        y = node("Transpose", [x], perm=TO_NCHW)
        for args in convs:
            y = conv(y, **args)
        return node("Transpose", [y], perm=TO_NHWC)

    C = CHANNELS
    x = "image"
    s1 = node("Relu", [node("Add", [block(x, dict(cin=C, cout=C, k=3)), x])])
    dwpw = block(s1, dict(cin=C, cout=C, k=3, group=C), dict(cin=C, cout=12, k=1, relu=False))
    pads = const("pads", np.array([0, 0, 0, 0, 0, 0, 0, 12 - C], np.int64))
    skip = node("Pad", [s1, pads], mode="constant")
    s2 = node("Relu", [node("Add", [dwpw, skip])])
    left = block(s2, dict(cin=12, cout=6, k=1, relu=False))
    right = block(s2, dict(cin=12, cout=6, k=3))
    s3 = node("Add", [node("Concat", [left, right], axis=3), s2])
    spatial = const("pads", np.array([0, 1, 1, 0, 0, 1, 1, 0], np.int64))
    s4 = node("Pad", [s3, spatial], mode="constant")
    out = block(s4, dict(cin=12, cout=16, k=3, stride=2, pad=0))
    nodes.append(h.make_node("Identity", [out], ["features"], name="output"))
    size = (SIZE + 2 - 3) // 2 + 1
    graph = h.make_graph(nodes, "nhwc_transposed_blocks",
                         [h.make_tensor_value_info("image", T.FLOAT, [1, SIZE, SIZE, C])],
                         [h.make_tensor_value_info("features", T.FLOAT, [1, size, size, 16])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], producer_name="tf2onnx-like")
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(build(), f"{sys.argv[1]}/nhwc_transposed_blocks.onnx")
