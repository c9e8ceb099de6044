#!/usr/bin/python3
"""Builds small decoder graphs for one decode step, in the forms exporters
write them, with onnx's helper, and their test data: inputs and the outputs
numpy computes for them (never Collage's own results).

    /usr/bin/python3 tests/models/decoder/make_models.py [OUT_DIR]

The files are committed beside this script; run it again after editing a
model. Each model NAME gets NAME.onnx, NAME.input_K.pb and NAME.output_K.pb.

Every layer N of a model reads `past_key_values.N.key` / `.value`
([B, Hkv, P, D]), concatenates the new tokens' K and V to them on the
sequence axis and returns the result as `present.N.key` / `.value`
([B, Hkv, P + S, D]); the attention reads the present K and V:

    Q·Kᵀ (Kᵀ a Transpose)  ->  scale  ->  mask  ->  Softmax  ->  ·V

The models differ in what exporters differ in:

  mha_where_two_layers   two layers, H = Hkv = 4, one new token; the scale
                         a Div of the scores; the causal mask a Where over a
                         constant bool buffer with a large negative fill,
                         then the padding mask (1 - attention_mask) * min
                         added, as [B, 1, 1, L].
  gqa_expand_padded      H = 8 query heads on Hkv = 2 (groups of 4), the KV
                         heads repeated by Unsqueeze -> Expand -> Reshape;
                         the scale a Mul of the scores; batch 2, the second
                         row left-padded; one [B, 1, 1, L] additive mask,
                         the minimum of the causal and padding masks.
  gqa_tile_two_tokens    H = 4 on Hkv = 2 (groups of 2), repeated by
                         Unsqueeze -> Tile -> Reshape; two new tokens (the
                         causal mask matters between them); the scale split
                         as D^-1/4 on Q and on Kᵀ (a fused attention's
                         decomposition); a [B, 1, S, L] additive mask.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "models"))
from graph_builder import GraphBuilder  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT
I64 = TensorProto.INT64
FMIN = np.finfo(np.float32).min

rng = np.random.default_rng(42)


def rand(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def softmax(x):
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def decoder(name, layers, B, S, P, H, Hkv, D, scale, mask, repeat, concat_axis, pad):
    """One decode step of `layers` attention layers (no MLP, no norm: the
    attention is what is under test). Returns nothing; writes the files."""
    E = H * D
    L = P + S
    r = H // Hkv
    g = GraphBuilder()
    x = rand(B, S, E)
    attention_mask = np.ones((B, L), np.int64)
    for b, n in enumerate(pad):
        attention_mask[b, :n] = 0
    pasts = [(rand(B, Hkv, P, D), rand(B, Hkv, P, D)) for _ in range(layers)]
    inputs = [("hidden_states", x), ("attention_mask", attention_mask)]
    for i, (pk, pv) in enumerate(pasts):
        inputs += [("past_key_values.%d.key" % i, pk), ("past_key_values.%d.value" % i, pv)]

    # The masks, built once, as exporters build them from attention_mask.
    causal = np.tril(np.ones((S, L), bool), k=P)  # new token i sees keys <= P + i
    pad_f = g.op("Cast", ["attention_mask"], to=F)
    pad_add = g.op("Mul", [g.op("Sub", [g.const("one", np.float32(1.0)), pad_f]), g.const("min", np.float32(FMIN))])
    pad_add = g.op("Reshape", [pad_add, g.const("shape", np.array([B, 1, 1, L], np.int64))])
    pad_np = ((1.0 - attention_mask.astype(np.float32)) * FMIN).reshape(B, 1, 1, L)
    if mask == "where_then_add":
        causal_cond = g.const("causal", causal.reshape(1, 1, S, L))
        fill = g.const("fill", np.float32(FMIN))
    else:
        causal_add = np.where(causal, np.float32(0), FMIN).astype(np.float32).reshape(1, 1, S, L)
        mask4 = g.op("Min", [g.const("causal", causal_add), pad_add])
        mask4_np = np.minimum(causal_add, pad_np)

    h, h_np = "hidden_states", x
    outputs, expected = [], []
    for i in range(layers):
        wq, wk, wv, wo = rand(E, E, scale=E ** -0.5), rand(E, Hkv * D, scale=E ** -0.5), \
            rand(E, Hkv * D, scale=E ** -0.5), rand(E, E, scale=E ** -0.5)

        def heads(y, n):
            y = g.op("Reshape", [y, g.const("shape", np.array([B, S, n, D], np.int64))])
            return g.op("Transpose", [y], perm=[0, 2, 1, 3])

        q = heads(g.op("MatMul", [h, g.const("wq", wq)]), H)
        k = heads(g.op("MatMul", [h, g.const("wk", wk)]), Hkv)
        v = heads(g.op("MatMul", [h, g.const("wv", wv)]), Hkv)
        pk, pv = "present.%d.key" % i, "present.%d.value" % i
        g.op("Concat", ["past_key_values.%d.key" % i, k], output=pk, axis=concat_axis)
        g.op("Concat", ["past_key_values.%d.value" % i, v], output=pv, axis=concat_axis)

        def repeated(t):
            if r == 1:
                return t
            u = g.op("Unsqueeze", [t, g.const("axes", np.array([2], np.int64))])
            if repeat == "expand":
                u = g.op("Expand", [u, g.const("shape", np.array([B, Hkv, r, L, D], np.int64))])
            else:
                u = g.op("Tile", [u, g.const("repeats", np.array([1, 1, r, 1, 1], np.int64))])
            return g.op("Reshape", [u, g.const("shape", np.array([B, H, L, D], np.int64))])

        kt = g.op("Transpose", [repeated(pk)], perm=[0, 1, 3, 2])
        if scale == "q_and_k":
            s4 = g.const("scale", np.float32(D ** -0.25))
            q, kt = g.op("Mul", [q, s4]), g.op("Mul", [kt, s4])
        scores = g.op("MatMul", [q, kt])
        if scale == "div":
            scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(np.sqrt(D)))])
        elif scale == "mul":
            scores = g.op("Mul", [scores, g.const("inv_sqrt_d", np.float32(1.0 / np.sqrt(D)))])
        if mask == "where_then_add":
            scores = g.op("Add", [g.op("Where", [causal_cond, scores, fill]), pad_add])
        else:
            scores = g.op("Add", [scores, mask4])
        p = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("MatMul", [p, repeated(pv)])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                               g.const("shape", np.array([B, S, E], np.int64))])
        out = g.op("MatMul", [ctx, g.const("wo", wo)], output="output" if i == layers - 1 else None)
        h = out

        # numpy, float32 throughout.
        qn = (h_np @ wq).reshape(B, S, H, D).transpose(0, 2, 1, 3)
        kn = (h_np @ wk).reshape(B, S, Hkv, D).transpose(0, 2, 1, 3)
        vn = (h_np @ wv).reshape(B, S, Hkv, D).transpose(0, 2, 1, 3)
        pkn = np.concatenate([pasts[i][0], kn], axis=2)
        pvn = np.concatenate([pasts[i][1], vn], axis=2)
        kr, vr = np.repeat(pkn, r, axis=1), np.repeat(pvn, r, axis=1)
        if scale == "q_and_k":
            s4n = np.float32(D ** -0.25)
            sc = (qn * s4n) @ (kr.transpose(0, 1, 3, 2) * s4n)
        else:
            sc = qn @ kr.transpose(0, 1, 3, 2)
            sc = sc / np.float32(np.sqrt(D)) if scale == "div" else sc * np.float32(1.0 / np.sqrt(D))
        if mask == "where_then_add":
            sc = np.where(causal.reshape(1, 1, S, L), sc, FMIN) + pad_np
        else:
            sc = sc + mask4_np
        ctxn = (softmax(sc.astype(np.float32)) @ vr).transpose(0, 2, 1, 3).reshape(B, S, E)
        h_np = (ctxn @ wo).astype(np.float32)
        outputs += [helper.make_tensor_value_info(pk, F, [B, Hkv, L, D]),
                    helper.make_tensor_value_info(pv, F, [B, Hkv, L, D])]
        expected += [(pk, pkn), (pv, pvn)]

    graph_inputs = [helper.make_tensor_value_info("hidden_states", F, [B, S, E]),
                    helper.make_tensor_value_info("attention_mask", I64, [B, L])]
    for i in range(layers):
        graph_inputs += [helper.make_tensor_value_info("past_key_values.%d.key" % i, F, [B, Hkv, P, D]),
                         helper.make_tensor_value_info("past_key_values.%d.value" % i, F, [B, Hkv, P, D])]
    outputs = [helper.make_tensor_value_info("output", F, [B, S, E])] + outputs
    expected = [("output", h_np)] + expected
    model = g.model(name, graph_inputs, outputs, "collage-tests")
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name + ".onnx"))
    for kind, data in (("input", inputs), ("output", expected)):
        for k, (n, a) in enumerate(data):
            with open(os.path.join(OUT, "%s.%s_%d.pb" % (name, kind, k)), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())


decoder("mha_where_two_layers", layers=2, B=1, S=1, P=40, H=4, Hkv=4, D=16, scale="div",
        mask="where_then_add", repeat=None, concat_axis=-2, pad=[0])
decoder("gqa_expand_padded", layers=1, B=2, S=1, P=45, H=8, Hkv=2, D=16, scale="mul",
        mask="min_add", repeat="expand", concat_axis=2, pad=[0, 7])
decoder("gqa_tile_two_tokens", layers=1, B=1, S=2, P=29, H=4, Hkv=2, D=8, scale="q_and_k",
        mask="min_add", repeat="tile", concat_axis=2, pad=[3])
