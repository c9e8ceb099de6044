"""Small landmark-regression nets in the form tf2onnx writes a TensorFlow
Lite model: an NHWC float input transposed to NCHW; a stem Conv 3x3 stride 2
and PRelu with a per-channel slope of shape [C, 1, 1]; residual blocks of
depthwise Conv 3x3 (group = C) -> Conv 1x1 -> Add with the skip path ->
PRelu, where a stride-2 block pools its skip path (MaxPool 2x2 stride 2)
and pads the depthwise conv's input with a Pad of its own, and a block that
grows the channels pads the skip path's channels (a constant Pad on the
channel axis, 16 -> 24); a head Conv -> Transpose -> Reshape to 1,404
values. Random weights from a fixed seed. Three variants:
  nhwc_prelu_residual          Pads with `pads` a constant input (opset 13)
  nhwc_prelu_residual_nhwc_pad the channel Pad in NHWC between two
                               Transposes, on axis 3 (opset 13)
  nhwc_prelu_residual_opset10  `pads` an attribute (opset 10), and the
                               stride-2 convs padded by TensorFlow's "SAME"
                               ([0, 0, 1, 1]) instead of a Pad
Usage: nhwc_prelu_residual_models.py OUT_DIR"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

SIZE = 32          # input 1 x SIZE x SIZE x 3
LANDMARKS = 1404   # 468 points x 3 coordinates

# (channels out, stride) per residual block; the first conv gives 16 channels.
# The last one pools its skip path without a Pad, so the Add reads the MaxPool.
BLOCKS = [(16, 1), (24, 2), (24, 1), (32, 2), (32, 2)]


def build(name, pad_form, opset):
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def const(n, a):
        inits.append(nh.from_array(a, n))
        return n

    def weight(n, shape, fan_in):
        return const(n, (rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)).astype(np.float32))

    def prelu(x, c, tag):
        # tf2onnx reshapes the NHWC slope [1, 1, C] to [C, 1, 1] for NCHW.
        s = const(f"{tag}_slope", (rng.random((c, 1, 1)) * 0.5).astype(np.float32))
        nodes.append(h.make_node("PRelu", [x, s], [f"{tag}_out"], name=f"{tag}_prelu"))
        return f"{tag}_out"

    def same_pads(stride):  # TensorFlow "SAME" for a 3x3 kernel on an even size
        return [1, 1, 1, 1] if stride == 1 else [0, 0, 1, 1]

    def channel_pad(x, extra, tag):
        out = f"{tag}_padded"
        if pad_form == "input":
            p = const(f"{tag}_pads", np.array([0, 0, 0, 0, 0, extra, 0, 0], np.int64))
            nodes.append(h.make_node("Pad", [x, p], [out], name=f"{tag}_pad", mode="constant"))
        elif pad_form == "attribute":
            nodes.append(h.make_node("Pad", [x], [out], name=f"{tag}_pad", mode="constant",
                                     pads=[0, 0, 0, 0, 0, extra, 0, 0], value=0.0))
        else:  # NHWC between Transposes, as tf2onnx leaves a TensorFlow pad it cannot push through
            p = const(f"{tag}_pads", np.array([0, 0, 0, 0, 0, 0, 0, extra], np.int64))
            nodes.extend([
                h.make_node("Transpose", [x], [f"{tag}_nhwc"], name=f"{tag}_to_nhwc", perm=[0, 2, 3, 1]),
                h.make_node("Pad", [f"{tag}_nhwc", p], [f"{tag}_nhwc_padded"], name=f"{tag}_pad", mode="constant"),
                h.make_node("Transpose", [f"{tag}_nhwc_padded"], [out], name=f"{tag}_to_nchw", perm=[0, 3, 1, 2])])
        return out

    nodes.append(h.make_node("Transpose", ["input"], ["x_nchw"], name="input_to_nchw", perm=[0, 3, 1, 2]))
    c = 16
    nodes.append(h.make_node("Conv", ["x_nchw", weight("stem_w", (c, 3, 3, 3), 27),
                                      const("stem_b", np.zeros(c, np.float32))], ["stem_conv"],
                             name="stem_conv", kernel_shape=[3, 3], strides=[2, 2], pads=same_pads(2)))
    x = prelu("stem_conv", c, "stem")
    for i, (cout, stride) in enumerate(BLOCKS):
        tag = f"block{i}"
        # The skip path first, and the Add reading it first (the order
        # decides which groups the priority placement takes first).
        skip = x
        if stride == 2:
            nodes.append(h.make_node("MaxPool", [skip], [f"{tag}_pool"], name=f"{tag}_pool",
                                     kernel_shape=[2, 2], strides=[2, 2]))
            skip = f"{tag}_pool"
        if cout > c:
            skip = channel_pad(skip, cout - c, tag)
        dw_in, dw_pads = x, same_pads(stride)
        if stride == 2 and pad_form != "attribute":
            # The stride-2 convs padded by a Pad of their own ("VALID" after
            # an explicit pad of 2 at the end of H and W, as the TFLite
            # graphs of these nets have it).
            dw_in, dw_pads = f"{tag}_spatial_padded", [0, 0, 0, 0]
            nodes.append(h.make_node("Pad", [x, const(f"{tag}_spatial_pads",
                                                      np.array([0, 0, 0, 0, 0, 0, 2, 2], np.int64))],
                                     [dw_in], name=f"{tag}_spatial_pad", mode="constant"))
        nodes.append(h.make_node("Conv", [dw_in, weight(f"{tag}_dw_w", (c, 1, 3, 3), 9),
                                          const(f"{tag}_dw_b", (rng.standard_normal(c) * 0.1).astype(np.float32))],
                                 [f"{tag}_dw"], name=f"{tag}_dw", kernel_shape=[3, 3], group=c,
                                 strides=[stride, stride], pads=dw_pads))
        nodes.append(h.make_node("Conv", [f"{tag}_dw", weight(f"{tag}_pw_w", (cout, c, 1, 1), c),
                                          const(f"{tag}_pw_b", (rng.standard_normal(cout) * 0.1).astype(np.float32))],
                                 [f"{tag}_pw"], name=f"{tag}_pw", kernel_shape=[1, 1]))
        nodes.append(h.make_node("Add", [skip, f"{tag}_pw"], [f"{tag}_sum"], name=f"{tag}_add"))
        x = prelu(f"{tag}_sum", cout, tag)
        c = cout
    spatial = SIZE // 2 // 2 ** sum(stride == 2 for _, stride in BLOCKS)
    nodes += [h.make_node("Conv", [x, weight("head_w", (LANDMARKS, c, spatial, spatial), c * spatial * spatial),
                                   const("head_b", (rng.standard_normal(LANDMARKS) * 0.1).astype(np.float32))],
                          ["head_conv"], name="head_conv", kernel_shape=[spatial, spatial]),
              h.make_node("Transpose", ["head_conv"], ["head_nhwc"], name="head_to_nhwc", perm=[0, 2, 3, 1]),
              h.make_node("Reshape", ["head_nhwc", const("landmarks_shape", np.array([1, LANDMARKS], np.int64))],
                          ["landmarks"], name="landmarks")]
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("input", T.FLOAT, [1, SIZE, SIZE, 3])],
                     [h.make_tensor_value_info("landmarks", T.FLOAT, [1, LANDMARKS])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="tf2onnx-like")
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, f"{out}/{name}.onnx")


out = sys.argv[1]
build("nhwc_prelu_residual", "input", 13)
build("nhwc_prelu_residual_nhwc_pad", "nhwc", 13)
build("nhwc_prelu_residual_opset10", "attribute", 10)
