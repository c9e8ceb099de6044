#!/usr/bin/python3
"""Unit tests of bench/models/quantize_models.py on a tiny hand-built model
(Conv -> Relu -> Conv -> Flatten -> Gemm, and a MatMul): the quantization
parameters, and the node structure of the three forms. No ONNX Runtime: the
static forms get their activation ranges from the test."""

import os
import sys
import unittest

import numpy as np
import onnx
import onnx.checker
import onnx.numpy_helper
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "models"))
import quantize_models as qm  # noqa: E402


def tiny_model():
    rng = np.random.default_rng(0)
    init = lambda name, shape: onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["a2"], name="add"),
        helper.make_node("Flatten", ["a2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], name="gemm", transB=1),
        helper.make_node("MatMul", ["g", "wm"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [init("w1", [4, 2, 3, 3]), init("b1", [4]), init("w2", [4, 4, 1, 1]), init("b2", [4]),
         init("wg", [5, 64]), init("bg", [5]), init("wm", [5, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ranges_for(model):
    """Made-up calibration ranges for every tensor a node computes, and the input."""
    names = ["x"] + [o for n in qm.gemm_to_matmul(qm.prepared(model)).graph.node for o in n.output]
    return {n: (-1.0 - i * 0.25, 2.0 + i * 0.5) if not n.startswith("r") else (0.0, 3.0)
            for i, n in enumerate(names)}


def ops(model):
    return [n.op_type for n in model.graph.node]


class Params(unittest.TestCase):
    def test_uint8_range_holds_zero(self):
        s, zp = qm.uint8_params(-1.0, 3.0)
        self.assertAlmostEqual(float(s), 4.0 / 255, places=7)
        self.assertEqual(int(zp), 64)  # round(255/4 = 63.75)
        s, zp = qm.uint8_params(0.5, 2.0)  # widened to [0, 2]
        self.assertEqual(int(zp), 0)
        self.assertAlmostEqual(float(s), 2.0 / 255, places=7)
        self.assertEqual(qm.uint8_params(0.0, 0.0), (np.float32(1.0), np.uint8(0)))

    def test_int8_symmetric_per_tensor_and_per_channel(self):
        w = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)
        q, s, zp = qm.int8_symmetric(w)
        self.assertEqual(q.dtype, np.int8)
        self.assertEqual(int(zp), 0)
        self.assertEqual(int(q[0, 1]), -127)
        self.assertAlmostEqual(float(s), 2.0 / 127, places=7)
        q, s, zp = qm.int8_symmetric(w, axis=0)
        self.assertEqual(q[:, 1].tolist(), [-127, 64])  # 0.25 / (0.5/127) = 63.5 -> 64 (half to even)
        self.assertEqual(zp.tolist(), [0, 0])
        np.testing.assert_allclose(s, [2.0 / 127, 0.5 / 127], rtol=1e-6)

    def test_int32_bias(self):
        self.assertEqual(qm.int32_bias(np.array([1.0, -0.5]), np.array([0.25, 0.1], np.float32)).tolist(), [4, -5])


class Forms(unittest.TestCase):
    def test_dynamic_chain(self):
        q = qm.quantize_dynamic(tiny_model())
        onnx.checker.check_model(q)
        o = ops(q)
        self.assertEqual(o.count("ConvInteger"), 2)
        self.assertEqual(o.count("MatMulInteger"), 2)  # the Gemm became MatMul form, and the MatMul
        self.assertNotIn("Gemm", o)
        self.assertNotIn("Conv", o)
        i = o.index("ConvInteger")
        self.assertEqual(o[i - 1:i + 4], ["DynamicQuantizeLinear", "ConvInteger", "Cast", "Mul", "Mul"])
        self.assertEqual(o[i + 4:i + 6], ["Reshape", "Add"])  # the bias, reshaped to [1, C, 1, 1]
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
        conv = next(n for n in q.graph.node if n.op_type == "ConvInteger")
        self.assertEqual(inits[conv.input[1]].dtype, np.int8)
        self.assertEqual(inits[conv.input[3]].tolist(), 0)
        self.assertEqual([a.name for a in conv.attribute], ["pads"])
        # The Gemm's weight is transposed to [K, N].
        mm = next(n for n in q.graph.node if n.op_type == "MatMulInteger")
        self.assertEqual(list(inits[mm.input[1]].shape), [64, 5])
        # One DynamicQuantizeLinear per activation tensor.
        self.assertEqual(o.count("DynamicQuantizeLinear"), 4)

    def test_dynamic_per_channel(self):
        q = qm.quantize_dynamic(tiny_model(), per_channel=True)
        onnx.checker.check_model(q)
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
        conv = next(n for n in q.graph.node if n.op_type == "ConvInteger")
        self.assertEqual(inits[conv.input[3]].size, 1)  # ONNX Runtime's ConvInteger: per tensor only
        mm = next(n for n in q.graph.node if n.op_type == "MatMulInteger")
        self.assertEqual(list(inits[mm.input[3]].shape), [5])  # per column of the [64, 5] weight

    def test_dynamic_uint8_weights(self):
        q = qm.quantize_dynamic(tiny_model(), weight_type="uint8")
        onnx.checker.check_model(q)
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
        for n in q.graph.node:
            if n.op_type in ("ConvInteger", "MatMulInteger"):
                self.assertEqual(inits[n.input[1]].dtype, np.uint8)
                self.assertEqual(inits[n.input[3]].dtype, np.uint8)
        q, s, zp = qm.uint8_asymmetric(np.array([-1.0, 3.0], np.float32))
        self.assertEqual(q.tolist(), [0, 255])
        self.assertEqual(int(zp), 64)

    def test_qdq(self):
        model = tiny_model()
        q, qnodes = qm.quantize_qdq(model, ranges_for(model))
        onnx.checker.check_model(q)
        o = ops(q)
        self.assertNotIn("Relu", o)  # folded into conv1's output quantization
        self.assertEqual(sorted(qnodes), ["conv1", "conv2", "gemm", "matmul"])
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
        by_out = {n.output[0]: n for n in q.graph.node}
        conv1 = next(n for n in q.graph.node if n.name == "conv1")
        self.assertEqual(conv1.output[0], "r1")
        x_dq, w_dq, b_dq = (by_out[t] for t in conv1.input)
        self.assertEqual([x_dq.op_type, w_dq.op_type, b_dq.op_type], ["DequantizeLinear"] * 3)
        self.assertEqual(by_out[x_dq.input[0]].op_type, "QuantizeLinear")
        self.assertEqual(inits[w_dq.input[0]].dtype, np.int8)
        self.assertEqual(helper.get_attribute_value(w_dq.attribute[0]), 0)  # per output channel
        self.assertEqual(list(inits[w_dq.input[1]].shape), [4])
        self.assertEqual(inits[b_dq.input[0]].dtype, np.int32)
        np.testing.assert_allclose(inits[b_dq.input[1]], inits[x_dq.input[1]] * inits[w_dq.input[1]], rtol=1e-6)
        # r1's zero point is 0 (Relu's range), and the Add reads the dequantized r1 too.
        r1_q = next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "r1")
        self.assertEqual(int(inits[r1_q.input[2]]), 0)
        add = next(n for n in q.graph.node if n.op_type == "Add")
        self.assertNotIn("r1", add.input)
        # The graph output keeps its name, on the last DequantizeLinear.
        self.assertEqual(by_out["y"].op_type, "DequantizeLinear")
        self.assertEqual(o.count("Gemm"), 1)

    def test_qop(self):
        model = qm.gemm_to_matmul(qm.prepared(tiny_model()))
        qdq, qnodes = qm.quantize_qdq(model, ranges_for(tiny_model()))
        q = qm.qdq_to_qop(qdq, qnodes)
        onnx.checker.check_model(q)
        o = ops(q)
        self.assertEqual(o.count("QLinearConv"), 2)
        self.assertEqual(o.count("QLinearMatMul"), 2)
        for t in ("Conv", "MatMul", "Gemm"):
            self.assertNotIn(t, o)
        by_out = {n.output[0]: n for n in q.graph.node}
        conv2 = next(n for n in q.graph.node if n.op_type == "QLinearConv" and n.name.startswith("conv2"))
        # conv1 -> conv2 directly in uint8: the DequantizeLinear -> QuantizeLinear pair is gone.
        self.assertEqual(by_out[conv2.input[0]].op_type, "QLinearConv")
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
        self.assertEqual(inits[conv2.input[3]].dtype, np.int8)
        self.assertEqual(inits[conv2.input[8]].dtype, np.int32)
        # The residual Add still reads conv1's result, dequantized.
        add = next(n for n in q.graph.node if n.op_type == "Add" and n.name == "add")
        self.assertEqual(sorted(by_out[i].op_type for i in add.input), ["DequantizeLinear", "DequantizeLinear"])
        # The input, the flattened Add result (for the Gemm), the Gemm result after its float bias Add.
        self.assertEqual(sorted(n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"), ["f", "g", "x"])
        self.assertEqual(by_out["y"].op_type, "DequantizeLinear")

    def test_deterministic(self):
        model = tiny_model()
        a = qm.quantize_qdq(model, ranges_for(model))[0].SerializeToString()
        b = qm.quantize_qdq(tiny_model(), ranges_for(tiny_model()))[0].SerializeToString()
        self.assertEqual(a, b)
        self.assertEqual(qm.quantize_dynamic(model).SerializeToString(),
                         qm.quantize_dynamic(tiny_model()).SerializeToString())

    def test_calibration_feeds_index_bound(self):
        emb = onnx.numpy_helper.from_array(np.zeros((7, 2), np.float32), "emb")
        g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["e"])], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 5])],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)], [emb])
        runs = qm.calibration_feeds(helper.make_model(g), None, 3, seed=1)
        self.assertEqual(len(runs), 3)
        self.assertEqual(runs[0]["ids"].shape, (1, 5))
        self.assertTrue(all(0 <= r["ids"].min() and r["ids"].max() < 7 for r in runs))


if __name__ == "__main__":
    unittest.main()
