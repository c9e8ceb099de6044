#!/usr/bin/python3
"""Builds a tiny decoder for multi-step generation (`collage generate`, the
runtime's Decoder), with dynamic sequence dims as exporters write them, and
the greedy tokens numpy computes for it *without a cache* (the whole
sequence recomputed each step): the cached loop must give the same tokens.

    /usr/bin/python3 tests/models/decoder/make_generate_model.py [OUT_DIR]

Writes tiny_decoder.onnx and tiny_decoder.greedy.txt ("prompt: 1 2 3" then
"generated: ..."), beside this script unless OUT_DIR is given, and
tiny_decoder_one_token.onnx: the same model with input_ids and position_ids
fixed at one token ([batch, 1]), as some exporters write a decode-only
graph (the decode loop must then run the prompt one token a step).

The model (two layers, H = 2 heads of D = 8, vocabulary 32):
  inputs   input_ids [batch, sequence] int64, attention_mask [batch,
           total_sequence] int64, position_ids [batch, sequence] int64,
           past_key_values.N.key / .value [batch, 2, past_sequence, 8]
  outputs  logits [batch, sequence, 32], present.N.key / .value
           [batch, 2, total_sequence, 8]
  h = wte[input_ids] + wpe[position_ids]; per layer:
    present_k = Concat(past_k, K(h), axis 2), likewise V;
    causal mask built from the shapes (query i sees key j <= L - S + i),
    padding mask (1 - attention_mask) * min, Softmax(Q·Kᵀ / sqrt(D) + mask)·V,
    h += ctx·Wo; h += tanh(h·W1)·W2
  logits = h·Wlm
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "models"))
from graph_builder import GraphBuilder, decoder_inputs  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT
FMIN = np.finfo(np.float32).min
V, E, H, D, LAYERS, MAXPOS, HIDDEN = 32, 16, 2, 8, 2, 64, 32
PROMPT, NEW = [1, 2, 3], 10

rng = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


wte, wpe = rand(V, E), rand(MAXPOS, E, scale=0.5)
layers = [dict(wq=rand(E, E, scale=E ** -0.5), wk=rand(E, E, scale=E ** -0.5),
               wv=rand(E, E, scale=E ** -0.5), wo=rand(E, E, scale=E ** -0.5),
               w1=rand(E, HIDDEN, scale=E ** -0.5), w2=rand(HIDDEN, E, scale=HIDDEN ** -0.5))
          for _ in range(LAYERS)]
wlm = rand(E, V, scale=2 * E ** -0.5)

g = GraphBuilder()
const, op = g.const, g.op
i64 = lambda *v: np.array(v, np.int64)
h = op("Add", [op("Gather", [const("wte", wte), "input_ids"]), op("Gather", [const("wpe", wpe), "position_ids"])])

# Masks from the shapes, as exporters build them: S new tokens, L keys.
S = op("Gather", [op("Shape", ["input_ids"]), const("one", i64(1))])
L = op("Gather", [op("Shape", ["attention_mask"]), const("one", i64(1))])
rows = op("Unsqueeze", [op("Range", [const("zero", np.int64(0)), op("Squeeze", [S]), const("step", np.int64(1))]),
                        const("axes", i64(1))])
cols = op("Unsqueeze", [op("Range", [const("zero", np.int64(0)), op("Squeeze", [L]), const("step", np.int64(1))]),
                        const("axes", i64(0))])
visible = op("LessOrEqual", [cols, op("Add", [rows, op("Squeeze", [op("Sub", [L, S])])])])  # [S, L]
causal = op("Where", [visible, const("zero_f", np.float32(0)), const("min_f", np.float32(FMIN))])
pad = op("Mul", [op("Sub", [const("one_f", np.float32(1)), op("Cast", ["attention_mask"], to=F)]),
                 const("min_f", np.float32(FMIN))])
pad = op("Unsqueeze", [pad, const("axes", i64(1, 2))])  # [B, 1, 1, L]
mask = op("Min", [causal, pad])  # [B, 1, S, L]

outputs = []
for n, w in enumerate(layers):
    def heads(y):
        y = op("Reshape", [y, const("shape", i64(0, 0, H, D))])
        return op("Transpose", [y], perm=[0, 2, 1, 3])

    q = heads(op("MatMul", [h, const("wq", w["wq"])]))
    k = heads(op("MatMul", [h, const("wk", w["wk"])]))
    v = heads(op("MatMul", [h, const("wv", w["wv"])]))
    pk, pv = "present.%d.key" % n, "present.%d.value" % n
    op("Concat", ["past_key_values.%d.key" % n, k], output=pk, axis=2)
    op("Concat", ["past_key_values.%d.value" % n, v], output=pv, axis=2)
    scores = op("Div", [op("MatMul", [q, op("Transpose", [pk], perm=[0, 1, 3, 2])]),
                        const("sqrt_d", np.float32(np.sqrt(D)))])
    p = op("Softmax", [op("Add", [scores, mask])], axis=-1)
    ctx = op("MatMul", [p, pv])
    ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), const("shape", i64(0, 0, E))])
    h = op("Add", [h, op("MatMul", [ctx, const("wo", w["wo"])])])
    h = op("Add", [h, op("MatMul", [op("Tanh", [op("MatMul", [h, const("w1", w["w1"])])]), const("w2", w["w2"])])])
    outputs += [helper.make_tensor_value_info(pk, F, ["batch", H, "total_sequence", D]),
                helper.make_tensor_value_info(pv, F, ["batch", H, "total_sequence", D])]
op("MatMul", [h, const("wlm", wlm)], output="logits")

graph_inputs = decoder_inputs(LAYERS, H, D, "batch", "sequence", "total_sequence", "past_sequence")
outputs = [helper.make_tensor_value_info("logits", F, ["batch", "sequence", V])] + outputs
model = g.model("tiny_decoder", graph_inputs, outputs, "collage-tests")
onnx.checker.check_model(model)
onnx.save(model, os.path.join(OUT, "tiny_decoder.onnx"))
one = onnx.ModelProto()
one.CopyFrom(model)
for i in one.graph.input:
    if i.name in ("input_ids", "position_ids"):
        i.type.tensor_type.shape.dim[1].ClearField("dim_param")
        i.type.tensor_type.shape.dim[1].dim_value = 1
onnx.checker.check_model(one)
onnx.save(one, os.path.join(OUT, "tiny_decoder_one_token.onnx"))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def logits_of(ids):
    """The whole sequence, no cache: logits of the last token."""
    T = len(ids)
    x = wte[ids] + wpe[np.arange(T)]
    mask = np.where(np.tril(np.ones((T, T), bool)), np.float32(0), FMIN)
    for w in layers:
        q, k, v = [(x @ w[m]).reshape(T, H, D).transpose(1, 0, 2) for m in ("wq", "wk", "wv")]
        p = softmax((q @ k.transpose(0, 2, 1)) / np.float32(np.sqrt(D)) + mask)
        x = x + (p @ v).transpose(1, 0, 2).reshape(T, E) @ w["wo"]
        x = x + np.tanh(x @ w["w1"]) @ w["w2"]
    return (x @ wlm)[-1]


ids = list(PROMPT)
for _ in range(NEW):
    ids.append(int(np.argmax(logits_of(np.array(ids)))))
with open(os.path.join(OUT, "tiny_decoder.greedy.txt"), "w") as f:
    f.write("prompt: %s\ngenerated: %s\n" % (" ".join(map(str, PROMPT)), " ".join(map(str, ids[len(PROMPT):]))))
print(open(os.path.join(OUT, "tiny_decoder.greedy.txt")).read())
