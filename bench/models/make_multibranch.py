#!/usr/bin/python3
"""Multi-branch models for the pipeline work (docs/pipeline.md, issue #41):
models whose branches a graph pipeline can run side by side and a chain
cannot. Built with onnx's helper and numpy weights (seeded), batch dimension
dynamic ("batch") on every input.

  two_tower      an image CNN and a text transformer (token ids, one
                 attention block) joined by a fusion head
  dlrm           a DLRM-style recommender: a bottom MLP on dense features,
                 embedding bags (Gather + ReduceSum) on sparse ones, their
                 pairwise dot products (the upper triangle), a top MLP
  uno            a CANDLE-Uno-style model: a feature tower per input
                 (cell expression, drug descriptors, fingerprints), with the
                 dose, concatenated into a shared head

  make_multibranch.py --size small -o tests/models/pipeline   (committed, for the tests)
  make_multibranch.py --size bench -o /tmp/models             (for bench/pipeline_bench.py)

Integer inputs (token ids, sparse features) index tables of at least 10 rows:
collage's random inputs draw integers in [0, 9].
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.count = 0

    def fresh(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem, array):
        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, stem, shape, fan_in):
        a = (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        return self.const(stem, a)

    def op(self, op_type, inputs, scope, **attrs):
        out = self.fresh(f"{scope}/{op_type.lower()}")
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{scope}/{op_type}_{self.count}", **attrs))
        return out

    def input(self, name, elem, dims):
        self.inputs.append(helper.make_tensor_value_info(name, elem, ["batch"] + list(dims)))
        return name

    def dense(self, x, n_in, n_out, scope, relu=True):
        w = self.weight(f"{scope}/w", (n_in, n_out), n_in)
        b = self.const(f"{scope}/b", np.zeros(n_out, np.float32))
        y = self.op("Gemm", [x, w, b], scope)
        return self.op("Relu", [y], scope) if relu else y

    def mlp(self, x, dims, scope, last_relu=True):
        for i in range(len(dims) - 1):
            x = self.dense(x, dims[i], dims[i + 1], f"{scope}{i}", relu=last_relu or i < len(dims) - 2)
        return x

    def save(self, out, path, out_dims):
        self.outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch"] + list(out_dims)))
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, path)


def two_tower(path, s):
    b = Builder("two_tower", 1)
    c1, c2, hw = s["channels"], 2 * s["channels"], s["image"]
    x = b.input("image", TensorProto.FLOAT, [3, hw, hw])
    x = b.op("Relu", [b.op("Conv", [x, b.weight("img/c1", (c1, 3, 3, 3), 27)], "img/c1", pads=[1, 1, 1, 1])], "img/c1")
    x = b.op("Relu", [b.op("Conv", [x, b.weight("img/c2", (c2, c1, 3, 3), 9 * c1)], "img/c2",
                           pads=[1, 1, 1, 1], strides=[2, 2])], "img/c2")
    x = b.op("Relu", [b.op("Conv", [x, b.weight("img/c3", (c2, c2, 3, 3), 9 * c2)], "img/c3", pads=[1, 1, 1, 1])], "img/c3")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x], "img/pool")], "img/pool")
    img = b.dense(x, c2, s["fused"], "img/fc")

    t, d, vocab = s["tokens"], s["width"], 32
    ids = b.input("tokens", TensorProto.INT64, [t])
    h = b.op("Gather", [b.weight("txt/embed", (vocab, d), 1), ids], "txt/embed")
    h = b.op("Add", [h, b.weight("txt/pos", (t, d), 1)], "txt/embed")
    q = b.op("MatMul", [h, b.weight("txt/q", (d, d), d)], "txt/attn_q")
    k = b.op("MatMul", [h, b.weight("txt/k", (d, d), d)], "txt/attn_k")
    v = b.op("MatMul", [h, b.weight("txt/v", (d, d), d)], "txt/attn_v")
    scores = b.op("MatMul", [q, b.op("Transpose", [k], "txt/attn", perm=[0, 2, 1])], "txt/attn")
    scores = b.op("Mul", [scores, b.const("txt/scale", np.array(1 / np.sqrt(d), np.float32))], "txt/attn")
    a = b.op("MatMul", [b.op("Softmax", [scores], "txt/attn", axis=-1), v], "txt/attn")
    h = b.op("Add", [h, b.op("MatMul", [a, b.weight("txt/o", (d, d), d)], "txt/attn_o")], "txt/attn_o")
    f = b.op("Relu", [b.op("MatMul", [h, b.weight("txt/ff1", (d, 2 * d), d)], "txt/ff1")], "txt/ff1")
    h = b.op("Add", [h, b.op("MatMul", [f, b.weight("txt/ff2", (2 * d, d), 2 * d)], "txt/ff2")], "txt/ff2")
    h = b.op("ReduceMean", [h], "txt/pool", axes=[1], keepdims=0)
    txt = b.dense(h, d, s["fused"], "txt/fc")

    z = b.op("Concat", [img, txt], "head", axis=1)
    z = b.mlp(z, [2 * s["fused"], s["fused"], 10], "head/fc", last_relu=False)
    b.save(b.op("Softmax", [z], "head", axis=-1), path, [10])


def dlrm(path, s):
    b = Builder("dlrm", 2)
    d, tables, bag = s["embed"], s["tables"], 3
    dense = b.input("dense", TensorProto.FLOAT, [13])
    bottom = b.mlp(dense, [13, s["hidden"], d], "bottom/fc")
    features = [b.op("Unsqueeze", [bottom, b.const("axes", np.array([1], np.int64))], "interact")]
    for i in range(tables):
        ids = b.input(f"sparse{i}", TensorProto.INT64, [bag])
        rows = b.op("Gather", [b.weight(f"emb{i}/table", (s["rows"], d), 1), ids], f"emb{i}")
        bag_sum = b.op("ReduceSum", [rows, b.const("axes", np.array([1], np.int64))], f"emb{i}", keepdims=1)
        features.append(bag_sum)  # [batch, 1, d]
    n = tables + 1
    t = b.op("Concat", features, "interact", axis=1)  # [batch, n, d]
    dots = b.op("Flatten", [b.op("MatMul", [t, b.op("Transpose", [t], "interact", perm=[0, 2, 1])], "interact")],
                "interact")  # [batch, n * n]
    upper = np.array([i * n + j for i in range(n) for j in range(i + 1, n)], np.int64)
    pairs = b.op("Gather", [dots, b.const("interact/upper", upper)], "interact", axis=1)
    z = b.op("Concat", [bottom, pairs], "top", axis=1)
    z = b.mlp(z, [d + len(upper), s["hidden"], s["hidden"] // 2, 1], "top/fc", last_relu=False)
    b.save(b.op("Sigmoid", [z], "top"), path, [1])


def uno(path, s):
    b = Builder("uno", 3)
    towers = []
    for name, width in (("cell_rnaseq", s["cell"]), ("drug_descriptors", s["descriptors"]),
                        ("drug_fingerprints", s["fingerprints"])):
        x = b.input(name, TensorProto.FLOAT, [width])
        towers.append(b.mlp(x, [width, s["tower"], s["tower"], s["tower"] // 2], f"{name}/fc"))
    towers.append(b.input("dose", TensorProto.FLOAT, [1]))
    z = b.op("Concat", towers, "head", axis=1)
    z = b.mlp(z, [3 * (s["tower"] // 2) + 1, s["head"], s["head"] // 2, 1], "head/fc", last_relu=False)
    b.save(z, path, [1])


SIZES = {
    "small": {
        "two_tower": {"channels": 8, "image": 16, "tokens": 8, "width": 16, "fused": 32},
        "dlrm": {"embed": 16, "tables": 4, "rows": 20, "hidden": 32},
        "uno": {"cell": 64, "descriptors": 96, "fingerprints": 32, "tower": 32, "head": 64},
    },
    "bench": {
        "two_tower": {"channels": 32, "image": 64, "tokens": 32, "width": 128, "fused": 128},
        "dlrm": {"embed": 64, "tables": 8, "rows": 10000, "hidden": 512},
        "uno": {"cell": 942, "descriptors": 3820, "fingerprints": 1024, "tower": 1000, "head": 1000},
    },
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, make in (("two_tower", two_tower), ("dlrm", dlrm), ("uno", uno)):
        path = os.path.join(a.out, f"{name}_{a.size}.onnx")
        make(path, SIZES[a.size][name])
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
