#!/usr/bin/python3
"""Small models whose parameter inputs are run-time tensors, with numpy's
answers, for tests/e2e/runtime_inputs.sh.

Usage: runtime_inputs_models.py OUT_DIR

For each MODEL it writes MODEL.onnx, MODEL.input_K.pb (in graph-input order)
and MODEL.output_K.pb:

- clip_runtime: Conv -> Clip whose min is a graph input and whose max is
  computed from the data; any input values are valid.
- pad_slice_resize_computed: Pad (pads and constant_value), Slice
  (starts/ends) and two Resizes (scales, then sizes) whose parameters are
  computed from the data; the values differ with the data but always give
  the declared shapes, so random inputs (optimize's measurements, --verify)
  are valid too.
- pad_slice_resize_inputs: the same parameters straight from graph inputs,
  with declared output shapes; only values matching them are valid, so this
  one is run on the reference with the given inputs. It also writes
  MODEL.bad_pads.pb, pads that contradict the declared shape.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(out_dir, name, graph, inputs, outputs, opset=13):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out_dir, name + ".onnx"))
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for i, (tensor_name, value) in enumerate(tensors):
            proto = numpy_helper.from_array(value, tensor_name)
            with open(os.path.join(out_dir, f"{name}.{kind}_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())


def conv2d(x, w, b):
    """Stride 1, padding 1, NCHW."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, o, h, wd), np.float32)
    for i in range(h):
        for j in range(wd):
            patch = xp[:, :, i:i + kh, j:j + kw]
            y[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return y + b.reshape(1, o, 1, 1)


def nearest_resize(x, out_h, out_w):
    """Resize-13 nearest, half_pixel, round_prefer_floor, for integer ratios."""
    h, w = x.shape[2], x.shape[3]

    def index(o, n, out):
        src = (o + 0.5) * n / out - 0.5
        r = np.floor(src) if src - np.floor(src) <= 0.5 else np.ceil(src)  # ties go down
        return int(min(max(r, 0), n - 1))

    rows = [index(i, h, out_h) for i in range(out_h)]
    cols = [index(j, w, out_w) for j in range(out_w)]
    return x[:, :, rows][:, :, :, cols]


def clip_runtime(out_dir, rng):
    x = rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    lo = np.array(-0.25, np.float32)
    w = rng.uniform(-0.5, 0.5, (4, 3, 3, 3)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, (4,)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1]),
        # hi = |max(y)| * 0.5 + 1: computed, never folded, always above lo.
        helper.make_node("ReduceMax", ["y"], ["m"], name="max", keepdims=0),
        helper.make_node("Abs", ["m"], ["am"], name="abs"),
        helper.make_node("Mul", ["am", "half"], ["hm"], name="mul"),
        helper.make_node("Add", ["hm", "one"], ["hi"], name="add"),
        helper.make_node("Clip", ["y", "lo", "hi"], ["z"], name="clip"),
    ]
    graph = helper.make_graph(
        nodes, "clip_runtime",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("lo", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    y = conv2d(x, w, b)
    hi = np.abs(y.max()) * np.float32(0.5) + np.float32(1)
    z = np.clip(y, lo, hi).astype(np.float32)
    save(out_dir, "clip_runtime", graph, [("x", x), ("lo", lo)], [("z", z)])


def pad_slice_resize_computed(out_dir, rng):
    x = rng.uniform(-1, 1, (1, 4, 8, 8)).astype(np.float32)
    i64 = lambda *v: np.array(v, np.int64)
    f32 = lambda *v: np.array(v, np.float32)
    consts = {
        "axes12": i64(1, 2), "four": i64(4), "two": i64(2), "six": i64(6), "zeros2": i64(0, 0),
        "axis3": i64(3), "hundred": np.array(100.0, np.float32),
        "scales_big": f32(1, 1, 4, 4), "scales_2x": f32(1, 1, 2, 2),
        "sizes_big": i64(1, 4, 40, 24), "sizes_back": i64(1, 4, 10, 6),
    }
    nodes = [
        # a = argmax over the columns of the mean image: data-dependent, in [0, 8).
        helper.make_node("ReduceMean", ["x"], ["v"], name="mean", axes=[1, 2], keepdims=0),
        helper.make_node("ArgMax", ["v"], ["a"], name="argmax", axis=1, keepdims=0),
        # pads = [0, 0, k, k, 0, 0, 2-k, 2-k], k = a / 4: always 2 rows and columns added.
        helper.make_node("Div", ["a", "four"], ["k"], name="k"),
        helper.make_node("Sub", ["two", "k"], ["k2"], name="k2"),
        helper.make_node("Concat", ["zeros2", "k", "k", "zeros2", "k2", "k2"], ["pads"],
                         name="pads", axis=0),
        helper.make_node("ReduceMin", ["x"], ["fill"], name="fill", keepdims=0),
        helper.make_node("Pad", ["x", "pads", "fill"], ["p"], name="pad"),
        # a window of 6 columns starting at a / 2, in [0, 4).
        helper.make_node("Div", ["a", "two"], ["st"], name="starts"),
        helper.make_node("Add", ["st", "six"], ["en"], name="ends"),
        helper.make_node("Slice", ["p", "st", "en", "axis3"], ["s"], name="slice"),
        # scales and sizes chosen at run time by a guard that random data never trips.
        helper.make_node("ReduceMax", ["x"], ["mx"], name="mx", keepdims=0),
        helper.make_node("Greater", ["mx", "hundred"], ["huge"], name="huge"),
        helper.make_node("Where", ["huge", "scales_big", "scales_2x"], ["scales"], name="scales"),
        helper.make_node("Resize", ["s", "", "scales"], ["r"], name="up"),
        helper.make_node("Where", ["huge", "sizes_big", "sizes_back"], ["sizes"], name="sizes"),
        helper.make_node("Resize", ["r", "", "", "sizes"], ["d"], name="down"),
    ]
    graph = helper.make_graph(
        nodes, "pad_slice_resize_computed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4, 20, 12]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 4, 10, 6])],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
        value_info=[helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 4, 10, 10]),
                    helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 4, 10, 6])])
    a = int(np.argmax(x.mean(axis=(1, 2)), axis=1)[0])
    k = a // 4
    p = np.pad(x, ((0, 0), (0, 0), (k, 2 - k), (k, 2 - k)), constant_values=x.min())
    s = p[:, :, :, a // 2:a // 2 + 6]
    r = nearest_resize(s, 20, 12)
    d = nearest_resize(r, 10, 6)
    save(out_dir, "pad_slice_resize_computed", graph, [("x", x)], [("r", r), ("d", d)])


def pad_slice_resize_inputs(out_dir, rng):
    x = rng.uniform(-1, 1, (1, 2, 4, 4)).astype(np.float32)
    pads = np.array([0, 0, 1, 0, 0, 0, 1, 2], np.int64)  # 4x4 -> 6x6
    starts = np.array([2], np.int64)
    ends = np.array([5], np.int64)  # rows 2..4 of 6
    scales = np.array([1, 1, 2, 1], np.float32)
    nodes = [
        helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad"),
        helper.make_node("Slice", ["p", "starts", "ends", "axis2"], ["s"], name="slice"),
        helper.make_node("Resize", ["s", "", "scales"], ["r"], name="resize"),
    ]
    graph = helper.make_graph(
        nodes, "pad_slice_resize_inputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]),
         helper.make_tensor_value_info("pads", TensorProto.INT64, [8]),
         helper.make_tensor_value_info("value", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("starts", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("ends", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 2, 6, 6])],
        [numpy_helper.from_array(np.array([2], np.int64), "axis2")],
        value_info=[helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 2, 6, 6]),
                    helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 2, 3, 6])])
    value = np.array(0.75, np.float32)
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 2)), constant_values=value)
    s = p[:, :, 2:5, :]
    r = nearest_resize(s, 6, 6)
    save(out_dir, "pad_slice_resize_inputs", graph,
         [("x", x), ("pads", pads), ("value", value), ("starts", starts), ("ends", ends),
          ("scales", scales)],
         [("r", r)])
    bad = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 2], np.int64), "pads")
    with open(os.path.join(out_dir, "pad_slice_resize_inputs.bad_pads.pb"), "wb") as f:
        f.write(bad.SerializeToString())


def dynamic_conv(out_dir, rng):
    """A 1-D convolution over a dynamic length: the default binding (1) is too short."""
    w = rng.uniform(-1, 1, (2, 1, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["audio", "w"], ["y"], name="frames", strides=[4])],
        "dynamic_conv",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 1, "samples"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "frames"])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, os.path.join(out_dir, "dynamic_conv.onnx"))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(15)
    clip_runtime(out_dir, rng)
    pad_slice_resize_computed(out_dir, rng)
    pad_slice_resize_inputs(out_dir, rng)
    dynamic_conv(out_dir, rng)


if __name__ == "__main__":
    main()
