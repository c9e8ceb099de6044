#!/usr/bin/env python3
"""Attention alone, as the zoo's exporters write it, at full size:

  vit_b_16   torch MultiheadAttention: [S, B, E] -> Reshape [S, B*H, D] -> Transpose,
             the scale a Div on Q, Kᵀ by Transpose (1,2,0); S=197, H=12, D=64
  bert_base  [B, S, E] -> Reshape/Transpose heads, Div on the scores; S=128, H=12, D=64
  gpt2       as bert_base plus Where(causal lower-triangular, scores, -1e4); S=128

Each model's inputs are Q, K and V as the projections write them; the output
is the merged heads. Writes MODEL.onnx and MODEL.input_{0,1,2}.pb into the
folder given (default bench/attention/models).
Usage: make_models.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, D = 12, 64
E = H * D


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(name, layout):
    nodes, inits = [], []
    if layout == "vit":
        S, B = 197, 1
        in_shape, head_shape, out_shape = [S, B, E], [S, B * H, D], [S * B, E]
        perm_q, perm_k, perm_o = [1, 0, 2], [1, 2, 0], [1, 0, 2]
    else:
        S, B = 128, 1
        in_shape, head_shape, out_shape = [B, S, E], [B, S, H, D], [B, S, E]
        perm_q, perm_k, perm_o = [0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]
    inits += [const("head_shape", np.array(head_shape, np.int64)), const("out_shape", np.array(out_shape, np.int64)),
              const("scale", np.array(np.sqrt(D), np.float32))]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, in_shape) for n in ("q", "k", "v")]
    for n, perm in (("q", perm_q), ("k", perm_k), ("v", perm_q)):
        nodes.append(helper.make_node("Reshape", [n, "head_shape"], [n + "_r"]))
        nodes.append(helper.make_node("Transpose", [n + "_r"], [n + "_t"], perm=perm))
    if layout == "vit":
        nodes.append(helper.make_node("Div", ["q_t", "scale"], ["q_s"]))
        nodes.append(helper.make_node("MatMul", ["q_s", "k_t"], ["scores"]))
        last = "scores"
    else:
        nodes.append(helper.make_node("MatMul", ["q_t", "k_t"], ["qk"]))
        nodes.append(helper.make_node("Div", ["qk", "scale"], ["scores"]))
        last = "scores"
    if layout == "gpt2":
        inits += [const("causal", np.tril(np.ones((S, S), bool)).reshape(1, 1, S, S)),
                  const("masked", np.array(-1e4, np.float32))]
        nodes.append(helper.make_node("Where", ["causal", last, "masked"], ["masked_scores"]))
        last = "masked_scores"
    nodes.append(helper.make_node("Softmax", [last], ["probs"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["probs", "v_t"], ["ctx"]))
    nodes.append(helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=perm_o))
    nodes.append(helper.make_node("Reshape", ["ctx_t", "out_shape"], ["y"]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    graph = helper.make_graph(nodes, name, inputs, [out], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, in_shape


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "models")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, layout in (("vit_b_16_attention", "vit"), ("bert_base_attention", "bert"),
                         ("gpt2_attention", "gpt2")):
        m, in_shape = model(name, layout)
        onnx.save(m, os.path.join(out_dir, name + ".onnx"))
        for i, n in enumerate(("q", "k", "v")):
            t = numpy_helper.from_array(rng.standard_normal(in_shape).astype(np.float32), n)
            with open(os.path.join(out_dir, f"{name}.input_{i}.pb"), "wb") as f:
                f.write(t.SerializeToString())
        print(os.path.join(out_dir, name + ".onnx"))


if __name__ == "__main__":
    main()
