#!/usr/bin/python3
"""Exports decoder models with a KV cache in the forms exporters write
(torch.onnx / optimum for GPT-2 and LLaMA): separate
`past_key_values.N.key` / `.value` inputs `[batch, KV heads, past, D]` and
`present.N.key` / `.value` outputs, `input_ids`, `attention_mask`
`[batch, past + sequence]`, `position_ids`, and `logits`.

    /usr/bin/python3 bench/models/export_decoders.py PRESET [PRESET ...] [--out DIR]

Presets (random weights, seeded: no checkpoint is read, this machine is
offline and has no torch; the graphs are written with onnx's helper, node
for node in the forms torch's exporter writes for the two architectures):

  gpt2_style_small  GPT-2 small's architecture: 12 layers, 768 wide, 12
                    heads, vocabulary 50257, positions 8448 (GPT-2 has
                    1024; more so that the bench reaches 8k context)
  llama_style_bench a LLaMA-style decoder: 8 layers, 1024 wide, 16 query
                    heads on 4 KV heads, SwiGLU 2816, vocabulary 32000
  gpt2_style_tiny   GPT-2's graph at 2 layers, 64 wide, 4 heads, vocab 512
  llama_style_tiny  LLaMA's graph at 2 layers, 64 wide, 4 heads on 2 KV
                    heads, SwiGLU 176, vocabulary 512

The tiny ones (under 1 MB) are committed under tests/models/decoder
(make_llm_decoders.sh).

GPT-2's graph: wte[ids] + wpe[position_ids]; per layer LayerNormalization,
one c_attn MatMul + Add split in Q, K, V (Split), heads by a Reshape whose
shape is computed from Shape (as the exporter writes it), Concat with the
past, scores MatMul(Q, Transpose(K)) Div sqrt(D), the causal mask a Where
over a Slice of a constant lower-triangular bool buffer [1, 1, P, P]
(rows L - S .. L, columns 0 .. L), plus the padding mask (1 - mask) * min
as [B, 1, 1, L]; Softmax, MatMul V, heads merged, c_proj; gelu_new (the
tanh form with Pow); final LayerNormalization; the tied lm_head.

LLaMA's graph: embed[ids]; per layer RMSNorm (Pow, ReduceMean, Add, Sqrt,
Reciprocal, Mul, Mul weight), Q, K, V projections without bias, rotary
embeddings computed from position_ids (inv_freq MatMul, Concat(freqs,
freqs), Cos, Sin) and applied with rotate_half (Slice, Neg, Concat),
Concat with the past, the KV heads repeated for grouped-query attention
(Unsqueeze, Expand, Reshape), scores Div sqrt(D) plus one 4-D mask
[B, 1, S, L] built from the shapes and attention_mask (Where), Softmax,
MatMul V, o_proj, SwiGLU MLP (Sigmoid, Mul, Mul, down).

With --numpy N, also checks the exported graph's meaning: numpy's greedy
tokens for N new tokens after the prompt 1..8, recomputed without a cache,
are printed (ONNX Runtime's are written by ort_greedy.js).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_builder import GraphBuilder, decoder_inputs  # noqa: E402

F = TensorProto.FLOAT
FMIN = np.finfo(np.float32).min

PRESETS = {
    "gpt2_style_small": dict(arch="gpt2", layers=12, E=768, H=12, Hkv=12, vocab=50257, maxpos=8448, inter=3072, seed=1),
    "llama_style_bench": dict(arch="llama", layers=8, E=1024, H=16, Hkv=4, vocab=32000, maxpos=0, inter=2816, seed=3),
    "gpt2_style_tiny": dict(arch="gpt2", layers=2, E=64, H=4, Hkv=4, vocab=512, maxpos=256, inter=256, seed=2),
    "llama_style_tiny": dict(arch="llama", layers=2, E=64, H=4, Hkv=2, vocab=512, maxpos=0, inter=176, seed=4),
}
i64 = lambda *v: np.array(v, np.int64)


def weights(cfg, seed):
    rng = np.random.default_rng(seed)
    E, H, Hkv, V, I = cfg["E"], cfg["H"], cfg["Hkv"], cfg["vocab"], cfg["inter"]
    D = E // H
    r = lambda *s, scale: (rng.standard_normal(s) * scale).astype(np.float32)
    w = dict(embed=r(V, E, scale=0.5 if cfg["arch"] == "llama" else 0.1), layers=[])
    if cfg["arch"] == "gpt2":
        w["wpe"] = r(cfg["maxpos"], E, scale=0.1 if cfg["layers"] <= 2 else 0.01)
    for _ in range(cfg["layers"]):
        lw = dict(ln1=1 + r(E, scale=0.1), ln2=1 + r(E, scale=0.1))
        if cfg["arch"] == "gpt2":
            lw.update(b1=r(E, scale=0.1), b2=r(E, scale=0.1), c_attn=r(E, 3 * E, scale=E ** -0.5),
                      c_attn_b=r(3 * E, scale=0.1), c_proj=r(E, E, scale=E ** -0.5 * 2), c_proj_b=r(E, scale=0.1),
                      c_fc=r(E, I, scale=E ** -0.5), c_fc_b=r(I, scale=0.1), mlp_proj=r(I, E, scale=I ** -0.5 * 2),
                      mlp_proj_b=r(E, scale=0.1))
        else:
            lw.update(q=r(E, H * D, scale=E ** -0.5), k=r(E, Hkv * D, scale=E ** -0.5),
                      v=r(E, Hkv * D, scale=E ** -0.5), o=r(H * D, E, scale=E ** -0.5 / 2),
                      gate=r(E, I, scale=E ** -0.5), up=r(E, I, scale=E ** -0.5), down=r(I, E, scale=I ** -0.5 / 2))
        w["layers"].append(lw)
    w["lnf"], w["lnf_b"] = 1 + r(E, scale=0.1), r(E, scale=0.1)
    w["lm_head"] = r(E, V, scale=E ** -0.5 * 2) if cfg["arch"] == "llama" else None
    return w


def build(cfg, w, name, past=True):
    """The decoder graph; without `past`, the no-cache form exporters write
    for the prompt (decoder_model.onnx): no past inputs, each present is the
    new K or V alone."""
    g = GraphBuilder(torch_names=True)
    E, H, Hkv, V, L = cfg["E"], cfg["H"], cfg["Hkv"], cfg["vocab"], cfg["layers"]
    D = E // H
    gpt2 = cfg["arch"] == "gpt2"
    S = g.dim("input_ids", 1)     # new tokens
    B = g.dim("input_ids", 0)
    if gpt2:
        T = g.dim("attention_mask", 1)  # past + new
    elif past:  # past_key_values_length, as LLaMA's mask preparation reads it: a Shape of the first past
        T = g.op("Add", [g.dim("past_key_values.0.key", 2), S])
    else:
        T = S

    def heads(x, n):
        shape = g.op("Concat", [B, S, g.const("h", i64(n)), g.const("d", i64(D))], axis=0)
        return g.op("Transpose", [g.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def merge(x):
        shape = g.op("Concat", [B, S, g.const("e", i64(H * D))], axis=0)
        return g.op("Reshape", [g.op("Transpose", [x], perm=[0, 2, 1, 3]), shape])

    def rmsnorm(x, weight):
        var = g.op("ReduceMean", [g.op("Pow", [x, g.const("two", np.float32(2))])], axes=[-1], keepdims=1)
        inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [var, g.const("eps", np.float32(1e-6))])])])
        return g.op("Mul", [g.const("norm_weight", weight), g.op("Mul", [x, inv])])

    embed = g.const("embed_tokens.weight", w["embed"])
    h = g.op("Gather", [embed, "input_ids"])
    if gpt2:
        h = g.op("Add", [h, g.op("Gather", [g.const("wpe.weight", w["wpe"]), "position_ids"])])
        # The causal buffer sliced to rows T - S .. T, columns 0 .. T ([1, 1, S, T]).
        P = cfg["maxpos"]
        bias = g.const("attn.bias", np.tril(np.ones((P, P), bool)).reshape(1, 1, P, P))
        rows = g.op("Slice", [bias, g.op("Sub", [T, S]), T, g.const("axes", i64(2))])
        causal = g.op("Slice", [rows, g.const("zero", i64(0)), T, g.const("axes", i64(3))])
        pad = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], to=F), g.const("axes", i64(1, 2))])
        pad = g.op("Mul", [g.op("Sub", [g.const("one", np.float32(1)), pad]), g.const("min", np.float32(FMIN))])
    else:
        # Rotary angles from position_ids: [B, S, D/2] -> cos, sin [B, 1, S, D].
        inv_freq = (1.0 / (10000 ** (np.arange(0, D, 2, dtype=np.float32) / D))).astype(np.float32)
        pos = g.op("Unsqueeze", [g.op("Cast", ["position_ids"], to=F), g.const("axes", i64(1))])  # [B, 1, S]
        freqs = g.op("Transpose", [g.op("MatMul", [g.const("inv_freq", inv_freq.reshape(1, D // 2, 1)), pos])],
                     perm=[0, 2, 1])
        emb = g.op("Concat", [freqs, freqs], axis=-1)
        cos = g.op("Unsqueeze", [g.op("Cos", [emb]), g.const("axes", i64(1))])
        sin = g.op("Unsqueeze", [g.op("Sin", [emb]), g.const("axes", i64(1))])
        # One 4-D mask [B, 1, S, T]: min where the key is in the future or padded.
        Tsc = g.op("Squeeze", [T])
        Ssc = g.op("Squeeze", [S])
        qpos = g.op("Unsqueeze", [g.op("Range", [g.op("Sub", [Tsc, Ssc]), Tsc, g.const("one", np.int64(1))]),
                                  g.const("axes", i64(1))])
        kpos = g.op("Unsqueeze", [g.op("Range", [g.const("zero", np.int64(0)), Tsc, g.const("one", np.int64(1))]),
                                  g.const("axes", i64(0))])
        future = g.op("Greater", [kpos, qpos])  # [S, T]
        padded = g.op("Equal", [g.op("Unsqueeze", ["attention_mask", g.const("axes", i64(1, 2))]),
                                g.const("zero", np.int64(0))])  # [B, 1, 1, T]
        hidden = g.op("Or", [future, padded])
        mask4 = g.op("Where", [hidden, g.const("min", np.float32(FMIN)), g.const("zero", np.float32(0))])

    def rotate(x):
        half = D // 2
        x1 = g.op("Slice", [x, g.const("s", i64(0)), g.const("e", i64(half)), g.const("a", i64(3))])
        x2 = g.op("Slice", [x, g.const("s", i64(half)), g.const("e", i64(D)), g.const("a", i64(3))])
        rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rot, sin])])

    presents = []
    for n, lw in enumerate(w["layers"]):
        pk, pv = "present.%d.key" % n, "present.%d.value" % n
        if gpt2:
            x = g.op("LayerNormalization", [h, g.const("ln_1.weight", lw["ln1"]), g.const("ln_1.bias", lw["b1"])],
                     axis=-1, epsilon=1e-5)
            qkv = g.op("Add", [g.op("MatMul", [x, g.const("c_attn.weight", lw["c_attn"])]),
                               g.const("c_attn.bias", lw["c_attn_b"])])
            outs = ["/split_%d_%d" % (n, i) for i in range(3)]
            g.nodes.append(helper.make_node("Split", [qkv, g.const("split", i64(E, E, E))], outs,
                                            name="/attn/Split_%d" % n, axis=2))
            q, k, v = heads(outs[0], H), heads(outs[1], H), heads(outs[2], H)
        else:
            x = rmsnorm(h, lw["ln1"])
            q = rotate(heads(g.op("MatMul", [x, g.const("q_proj.weight", lw["q"])]), H))
            k = rotate(heads(g.op("MatMul", [x, g.const("k_proj.weight", lw["k"])]), Hkv))
            v = heads(g.op("MatMul", [x, g.const("v_proj.weight", lw["v"])]), Hkv)
        if past:
            g.op("Concat", ["past_key_values.%d.key" % n, k], output=pk, axis=-2)
            g.op("Concat", ["past_key_values.%d.value" % n, v], output=pv, axis=-2)
        else:
            g.op("Identity", [k], output=pk)
            g.op("Identity", [v], output=pv)
        K, Vv = pk, pv
        if Hkv != H:  # repeat_kv: [B, Hkv, T, D] -> [B, Hkv, r, T, D] -> [B, H, T, D]
            def repeat(t):
                shape5 = g.op("Concat", [B, g.const("hkv", i64(Hkv)), g.const("r", i64(H // Hkv)),
                                         g.dim(t, 2), g.const("d", i64(D))], axis=0)
                shape4 = g.op("Concat", [B, g.const("h", i64(H)), g.dim(t, 2), g.const("d", i64(D))], axis=0)
                x5 = g.op("Expand", [g.op("Unsqueeze", [t, g.const("axes", i64(2))]), shape5])
                return g.op("Reshape", [x5, shape4])
            K, Vv = repeat(pk), repeat(pv)
        scores = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [K], perm=[0, 1, 3, 2])]),
                              g.const("sqrt_d", np.float32(np.sqrt(D)))])
        if gpt2:
            scores = g.op("Where", [causal, scores, g.const("mask_value", np.float32(FMIN))])
            scores = g.op("Add", [scores, pad])
        else:
            scores = g.op("Add", [scores, mask4])
        ctx = merge(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), Vv]))
        if gpt2:
            h = g.op("Add", [h, g.op("Add", [g.op("MatMul", [ctx, g.const("c_proj.weight", lw["c_proj"])]),
                                             g.const("c_proj.bias", lw["c_proj_b"])])])
            x = g.op("LayerNormalization", [h, g.const("ln_2.weight", lw["ln2"]), g.const("ln_2.bias", lw["b2"])],
                     axis=-1, epsilon=1e-5)
            x = g.op("Add", [g.op("MatMul", [x, g.const("c_fc.weight", lw["c_fc"])]), g.const("c_fc.bias", lw["c_fc_b"])])
            inner = g.op("Mul", [g.op("Add", [x, g.op("Mul", [g.op("Pow", [x, g.const("three", np.float32(3))]),
                                                              g.const("c", np.float32(0.044715))])]),
                                 g.const("sqrt_2_pi", np.float32(np.sqrt(2 / np.pi)))])
            gelu = g.op("Mul", [g.op("Mul", [x, g.const("half", np.float32(0.5))]),
                                g.op("Add", [g.const("one", np.float32(1)), g.op("Tanh", [inner])])])
            h = g.op("Add", [h, g.op("Add", [g.op("MatMul", [gelu, g.const("mlp.c_proj.weight", lw["mlp_proj"])]),
                                             g.const("mlp.c_proj.bias", lw["mlp_proj_b"])])])
        else:
            h = g.op("Add", [h, g.op("MatMul", [ctx, g.const("o_proj.weight", lw["o"])])])
            x = rmsnorm(h, lw["ln2"])
            gate = g.op("MatMul", [x, g.const("gate_proj.weight", lw["gate"])])
            silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
            up = g.op("MatMul", [x, g.const("up_proj.weight", lw["up"])])
            h = g.op("Add", [h, g.op("MatMul", [g.op("Mul", [silu, up]), g.const("down_proj.weight", lw["down"])])])
        presents += [helper.make_tensor_value_info(t, F, ["batch_size", Hkv, "past_sequence_length + sequence_length", D])
                     for t in (pk, pv)]
    if gpt2:
        h = g.op("LayerNormalization", [h, g.const("ln_f.weight", w["lnf"]), g.const("ln_f.bias", w["lnf_b"])],
                 axis=-1, epsilon=1e-5)
        g.op("MatMul", [h, g.op("Transpose", [embed], perm=[1, 0])], output="logits")  # tied to wte
    else:
        h = rmsnorm(h, w["lnf"])
        g.op("MatMul", [h, g.const("lm_head.weight", w["lm_head"])], output="logits")

    inputs = decoder_inputs(L if past else 0, Hkv, D, "batch_size", "sequence_length",
                            "past_sequence_length + sequence_length" if past else "sequence_length",
                            "past_sequence_length")
    outputs = [helper.make_tensor_value_info("logits", F, ["batch_size", "sequence_length", V])] + presents
    model = g.model(name, inputs, outputs, "collage-bench")
    return model


def merged(cfg, w, name):
    """The merged form Hugging Face Optimum writes (decoder_model_merged.onnx):
    the inputs of the form with past plus a boolean `use_cache_branch` [1],
    one If on it whose then_branch is the decoder with past and whose
    else_branch is the no-cache one (the prompt's pass: the past inputs are
    not read); the weights, once each, are initializers of the main graph
    that both branches read."""
    with_past, no_past = build(cfg, w, name, past=True), build(cfg, w, name, past=False)
    shared, by_content = [], {}

    def branch(model, suffix):
        g = model.graph
        rename = {}
        for init in g.initializer:
            key = (init.data_type, tuple(init.dims), init.raw_data)
            if key not in by_content:
                by_content[key] = "shared_%d" % len(shared)
                copy = onnx.TensorProto()
                copy.CopyFrom(init)
                copy.name = by_content[key]
                shared.append(copy)
            rename[init.name] = by_content[key]
        for out in g.output:  # the If's outputs keep the names; the branch's are its own
            rename[out.name] = out.name + suffix
        nodes = []
        for node in g.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = [rename.get(i, i) for i in node.input]
            copy.output[:] = [rename.get(o, o) for o in node.output]
            nodes.append(copy)
        outputs = []
        for out in g.output:
            copy = onnx.ValueInfoProto()
            copy.CopyFrom(out)
            copy.name = rename[out.name]
            outputs.append(copy)
        return helper.make_graph(nodes, name + suffix, [], outputs)

    then_branch = branch(with_past, "_with_past")
    else_branch = branch(no_past, "_no_past")
    flag = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    node = helper.make_node("If", ["use_cache_branch"], [o.name for o in with_past.graph.output],
                            name="optimum::if", then_branch=then_branch, else_branch=else_branch)
    graph = helper.make_graph([node], name, list(with_past.graph.input) + [flag],
                              list(with_past.graph.output), shared)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="collage-bench")
    model.ir_version = 8
    return model


def numpy_logits(cfg, w, ids):
    """The whole sequence, no cache: the last token's logits."""
    E, H, Hkv = cfg["E"], cfg["H"], cfg["Hkv"]
    D, T = E // H, len(ids)
    x = w["embed"][ids]
    if cfg["arch"] == "gpt2":
        x = x + w["wpe"][np.arange(T)]
    mask = np.where(np.tril(np.ones((T, T), bool)), np.float32(0), FMIN)

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * g + b

    def rms(x, g):
        return g * (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6))

    def softmax(s):
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    inv_freq = 1.0 / (10000 ** (np.arange(0, D, 2, dtype=np.float32) / D))
    ang = np.arange(T, dtype=np.float32)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(t):
        rot = np.concatenate([-t[..., D // 2:], t[..., :D // 2]], -1)
        return t * cos + rot * sin

    split = lambda t, n: t.reshape(T, n, D).transpose(1, 0, 2)
    for lw in w["layers"]:
        if cfg["arch"] == "gpt2":
            a = ln(x, lw["ln1"], lw["b1"]) @ lw["c_attn"] + lw["c_attn_b"]
            q, k, v = split(a[:, :E], H), split(a[:, E:2 * E], H), split(a[:, 2 * E:], H)
        else:
            a = rms(x, lw["ln1"])
            q, k, v = rope(split(a @ lw["q"], H)), rope(split(a @ lw["k"], Hkv)), split(a @ lw["v"], Hkv)
            k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)
        ctx = (softmax(q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(D)) + mask) @ v).transpose(1, 0, 2).reshape(T, E)
        if cfg["arch"] == "gpt2":
            x = x + ctx @ lw["c_proj"] + lw["c_proj_b"]
            f = ln(x, lw["ln2"], lw["b2"]) @ lw["c_fc"] + lw["c_fc_b"]
            f = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
            x = x + f @ lw["mlp_proj"] + lw["mlp_proj_b"]
        else:
            x = x + ctx @ lw["o"]
            a = rms(x, lw["ln2"])
            gate = a @ lw["gate"]
            x = x + (gate / (1 + np.exp(-gate)) * (a @ lw["up"])) @ lw["down"]
    if cfg["arch"] == "gpt2":
        return (ln(x, w["lnf"], w["lnf_b"]) @ w["embed"].T)[-1]
    return (rms(x, w["lnf"]) @ w["lm_head"])[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("presets", nargs="+", choices=sorted(PRESETS))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "decoders"))
    ap.add_argument("--merged", action="store_true",
                    help="also write PRESET_merged.onnx, the merged form (an If on use_cache_branch)")
    ap.add_argument("--numpy", type=int, default=0, help="print numpy's greedy ids for N new tokens")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for preset in args.presets:
        cfg = PRESETS[preset]
        w = weights(cfg, seed=cfg["seed"])
        model = build(cfg, w, preset)
        onnx.checker.check_model(model)
        path = os.path.join(args.out, preset + ".onnx")
        onnx.save(model, path)
        print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))
        if args.merged:
            m = merged(cfg, weights(cfg, seed=cfg["seed"]), preset)
            onnx.checker.check_model(m)
            mpath = os.path.join(args.out, preset + "_merged.onnx")
            onnx.save(m, mpath)
            print("wrote %s (%.1f MB)" % (mpath, os.path.getsize(mpath) / 1e6))
        if args.numpy:
            ids, margins = list(range(1, 9)), []
            for _ in range(args.numpy):
                lg = numpy_logits(cfg, w, np.array(ids)).astype(np.float64)
                top = np.sort(lg)[-2:]
                margins.append(top[1] - top[0])
                ids.append(int(np.argmax(lg)))
            print("numpy greedy %s: %s (smallest top-2 margin %.3g)" % (preset, " ".join(map(str, ids[8:])),
                                                                         min(margins)))


if __name__ == "__main__":
    main()
