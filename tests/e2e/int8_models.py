"""Small quantized models in the three forms exporters write, for
int8_roundtrip.sh: dynamic (DynamicQuantizeLinear -> ConvInteger /
MatMulInteger -> Cast -> Mul by the scales -> bias), static QDQ
(QuantizeLinear / DequantizeLinear around Conv, the weights an int8
initializer behind a DequantizeLinear) and QOperator (QLinearConv).
Usage: int8_models.py OUT_DIR"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

out = sys.argv[1]
rng = np.random.default_rng(0)


def save(name, nodes, inits, x_shape, y_name, y_shape):
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                     [h.make_tensor_value_info(y_name, T.FLOAT, y_shape)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, f"{out}/{name}.onnx")


def dynamic():
    nodes, inits = [], []
    c = lambda n, a: inits.append(nh.from_array(a, n)) or n
    x, cin = "x", 8
    for l, cout in enumerate([32, 32]):
        nodes.append(h.make_node("DynamicQuantizeLinear", [x], [f"q{l}", f"s{l}", f"z{l}"]))
        if l == 0:  # symmetric s8 weights
            c(f"w{l}", rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8))
            c(f"wz{l}", np.array(0, np.int8))
        else:  # asymmetric u8 weights (QUInt8): w - zero point spans more than int8
            c(f"w{l}", rng.integers(0, 256, (cout, cin, 3, 3)).astype(np.uint8))
            c(f"wz{l}", np.array(100, np.uint8))
        c(f"ws{l}", np.array(1.0 / (cin * 9 * 64), np.float32))
        nodes += [h.make_node("ConvInteger", [f"q{l}", f"w{l}", f"z{l}", f"wz{l}"], [f"a{l}"], pads=[1, 1, 1, 1]),
                  h.make_node("Cast", [f"a{l}"], [f"f{l}"], to=T.FLOAT),
                  h.make_node("Mul", [f"s{l}", f"ws{l}"], [f"sc{l}"]),
                  h.make_node("Mul", [f"f{l}", f"sc{l}"], [f"y{l}"])]
        # The bias reshaped to [1, C, 1, 1], as onnxruntime's quantize_dynamic writes it.
        c(f"b{l}", (rng.standard_normal(cout) * 0.1).astype(np.float32))
        c(f"bs{l}", np.array([1, -1, 1, 1], np.int64))
        nodes += [h.make_node("Reshape", [f"b{l}", f"bs{l}"], [f"br{l}"]),
                  h.make_node("Add", [f"y{l}", f"br{l}"], [f"yb{l}"]),
                  h.make_node("Relu", [f"yb{l}"], [f"r{l}"])]
        x, cin = f"r{l}", cout
    nodes += [h.make_node("GlobalAveragePool", [x], ["gap"]), h.make_node("Flatten", ["gap"], ["flat"]),
              h.make_node("DynamicQuantizeLinear", ["flat"], ["fq", "fs", "fz"])]
    c("fw", rng.integers(0, 256, (cin, 10)).astype(np.uint8))
    c("fwz", np.array(128, np.uint8))
    c("fws", np.array(0.01, np.float32))
    nodes += [h.make_node("MatMulInteger", ["fq", "fw", "fz", "fwz"], ["fa"]),
              h.make_node("Cast", ["fa"], ["ff"], to=T.FLOAT),
              h.make_node("Mul", ["fs", "fws"], ["fsc"]), h.make_node("Mul", ["ff", "fsc"], ["y"])]
    save("int8_dynamic", nodes, inits, [1, 8, 48, 48], "y", [1, 10])


def qdq():
    nodes, inits = [], []
    c = lambda n, a: inits.append(nh.from_array(a, n)) or n
    x, cin = "x", 8
    for l, cout in enumerate([32, 32]):
        c(f"xs{l}", np.array(0.05, np.float32))
        c(f"xz{l}", np.array(128 if l == 0 else 0, np.uint8))
        nodes += [h.make_node("QuantizeLinear", [x, f"xs{l}", f"xz{l}"], [f"xq{l}"]),
                  h.make_node("DequantizeLinear", [f"xq{l}", f"xs{l}", f"xz{l}"], [f"xd{l}"])]
        w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
        w[:, 0, 0, 0] = 127  # symmetric per-channel quantization: each channel's largest |w| is 127
        c(f"w{l}", w)
        c(f"ws{l}", (rng.random(cout) * 0.01 + 0.001).astype(np.float32))
        c(f"wz{l}", np.zeros(cout, np.int8))
        c(f"b{l}", (rng.standard_normal(cout) * 0.1).astype(np.float32))
        nodes += [h.make_node("DequantizeLinear", [f"w{l}", f"ws{l}", f"wz{l}"], [f"wd{l}"], axis=0),
                  h.make_node("Conv", [f"xd{l}", f"wd{l}", f"b{l}"], [f"y{l}"], pads=[1, 1, 1, 1]),
                  h.make_node("Relu", [f"y{l}"], [f"r{l}"])]
        x, cin = f"r{l}", cout
    save("int8_qdq", nodes, inits, [1, 8, 48, 48], x, [1, 32, 48, 48])


def qoperator():
    nodes, inits = [], []
    c = lambda n, a: inits.append(nh.from_array(a, n)) or n
    c("xs", np.array(0.02, np.float32)); c("xz", np.array(128, np.uint8))
    c("w", rng.integers(-127, 128, (32, 8, 3, 3)).astype(np.int8))
    c("ws", (rng.random(32) * 0.004 + 0.001).astype(np.float32)); c("wz", np.zeros(32, np.int8))
    c("ys", np.array(0.05, np.float32)); c("yz", np.array(100, np.uint8))
    c("b", rng.integers(-500, 500, 32).astype(np.int32))
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"], pads=[1, 1, 1, 1]),
             h.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    save("int8_qoperator", nodes, inits, [1, 8, 48, 48], "y", [1, 32, 48, 48])


dynamic()
qdq()
qoperator()
