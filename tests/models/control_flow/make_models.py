#!/usr/bin/python3
"""Builds the small control-flow models of the tests (If, Loop, Scan and the
Sequence ops around loops) with onnx's helper, and their test data: inputs
and the outputs numpy computes for them (never Collage's own results).

    /usr/bin/python3 tests/models/control_flow/make_models.py [OUT_DIR]

The files are committed beside this script; run it again after editing a
model. Each model NAME gets NAME.onnx, NAME.input_K.pb, NAME.output_K.pb (data
set 0) and, for If with a data-dependent condition, NAME.set1.input_K.pb /
NAME.set1.output_K.pb (the other branch). Models named bad_*.onnx are invalid
on purpose (the importer's messages are tested on them): no data, and the
ONNX checker is not run on them.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name + "_const",
                            value=numpy_helper.from_array(np.asarray(array), name))


def save(name, graph, opset, data_sets=(), check=True):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="collage-tests")
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name + ".onnx"))
    for s, (inputs, outputs) in enumerate(data_sets):
        prefix = name if s == 0 else "%s.set%d" % (name, s)
        for k, (n, a) in enumerate(inputs):
            with open(os.path.join(OUT, "%s.input_%d.pb" % (prefix, k)), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())
        for k, (n, a) in enumerate(outputs):
            with open(os.path.join(OUT, "%s.output_%d.pb" % (prefix, k)), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())


rng = np.random.default_rng(7)


def rand(*shape):
    return rng.uniform(-1, 1, size=shape).astype(np.float32)


# ---- If whose condition is constant after shape folding: x's first dim (2)
# is > 1, so the then branch is the model; it reads x from the outer graph.
def if_const():
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t_relu"], name="then_relu"),
         const("two", np.float32(2)),
         helper.make_node("Mul", ["t_relu", "two"], ["then_out"], name="then_mul")],
        "then_body", [], [vi("then_out", F, [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"], name="else_neg")],
        "else_body", [], [vi("else_out", F, [2, 3])])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        const("zero", np.array([0], dtype=np.int64)),
        helper.make_node("Gather", ["shape", "zero"], ["dim0"], name="dim0"),
        const("one", np.array([1], dtype=np.int64)),
        helper.make_node("Greater", ["dim0", "one"], ["cond1"], name="greater"),
        helper.make_node("Squeeze", ["cond1"], ["cond"], name="squeeze"),
        helper.make_node("If", ["cond"], ["picked"], name="if_shape", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Sigmoid", ["picked"], ["y"], name="sigmoid"),
    ]
    g = helper.make_graph(nodes, "if_const", [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    x = rand(2, 3)
    y = 1 / (1 + np.exp(-(np.maximum(x, 0) * 2)))
    save("if_const", g, 13, [([("x", x)], [("y", y.astype(np.float32))])])


# ---- If with a data-dependent condition (sum of x > 0); both branches read
# the outer value h = Relu(x) + b, and the else branch has an outer constant.
def if_data():
    then_g = helper.make_graph(
        [helper.make_node("Sigmoid", ["h"], ["then_out"], name="then_sigmoid")],
        "then_body", [], [vi("then_out", F, [2, 4])])
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["h", "scale"], ["else_out"], name="else_mul")],
        "else_body", [], [vi("else_out", F, [2, 4])])
    b = rand(4)
    scale = np.float32(-3.0)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "b"], ["h"], name="add_b"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="sum", keepdims=0),
        const("zero", np.float32(0)),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["picked"], name="if_data", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Tanh", ["picked"], ["y"], name="tanh"),
    ]
    g = helper.make_graph(nodes, "if_data", [vi("x", F, [2, 4])], [vi("y", F, [2, 4])],
                          initializer=[numpy_helper.from_array(b, "b"),
                                       numpy_helper.from_array(scale, "scale")])
    sets = []
    for sign in (1, -1):
        x = (np.abs(rand(2, 4)) * sign).astype(np.float32)
        h = np.maximum(x, 0) + b
        picked = 1 / (1 + np.exp(-h)) if x.sum() > 0 else h * scale
        sets.append(([("x", x)], [("y", np.tanh(picked).astype(np.float32))]))
    save("if_data", g, 13, sets)


# ---- Loop with a constant trip count and no condition: a carried
# accumulator, an outer value read in the body, and two scan outputs.
def loop_trip():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["acc_out"], name="acc_add"),
         helper.make_node("Cast", ["i"], ["i_f"], name="cast_i", to=F),
         helper.make_node("Mul", ["acc_out", "i_f"], ["scaled"], name="scale_by_i"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass"),
         helper.make_node("Identity", ["acc_out"], ["acc_scan"], name="acc_scan")],
        "loop_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [3])],
        [vi("cond_out", B, []), vi("acc_out", F, [3]), vi("scaled", F, [3]),
         vi("acc_scan", F, [3])])
    nodes = [
        helper.make_node("Exp", ["x"], ["step"], name="exp"),
        const("trip", np.array(5, dtype=np.int64)),
        helper.make_node("Loop", ["trip", "", "acc0"], ["acc", "scaled_rows", "acc_rows"],
                         name="loop_trip", body=body),
        helper.make_node("Relu", ["scaled_rows"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "loop_trip", [vi("x", F, [3]), vi("acc0", F, [3])],
                          [vi("acc", F, [3]), vi("y", F, [5, 3]), vi("acc_rows", F, [5, 3])])
    x, acc0 = rand(3), rand(3)
    acc, rows, accs = acc0.copy(), [], []
    for i in range(5):
        acc = acc + np.exp(x)
        rows.append(acc * i)
        accs.append(acc.copy())
    save("loop_trip", g, 13, [([("x", x), ("acc0", acc0)],
                               [("acc", acc.astype(np.float32)),
                                ("y", np.maximum(np.stack(rows), 0).astype(np.float32)),
                                ("acc_rows", np.stack(accs).astype(np.float32))])])


# ---- Loop with a condition and no trip count (a while loop): doubles v
# until the sum of its magnitudes reaches 50 (for any v but zeros: the
# optimizer times the loop alone on random inputs).
def loop_cond():
    body = helper.make_graph(
        [const("two", np.float32(2)),
         helper.make_node("Mul", ["v_in", "two"], ["v_out"], name="double"),
         helper.make_node("Abs", ["v_out"], ["mag"], name="mag"),
         helper.make_node("ReduceSum", ["mag"], ["s"], name="sum", keepdims=0),
         const("limit", np.float32(50)),
         helper.make_node("Less", ["s", "limit"], ["cond_out"], name="below")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [4])],
        [vi("cond_out", B, []), vi("v_out", F, [4])])
    nodes = [
        helper.make_node("Abs", ["x"], ["v0"], name="abs"),
        const("go", np.array(True)),
        helper.make_node("Loop", ["", "go", "v0"], ["v"], name="loop_cond", body=body),
        helper.make_node("Sqrt", ["v"], ["y"], name="sqrt"),
    ]
    g = helper.make_graph(nodes, "loop_cond", [vi("x", F, [4])], [vi("y", F, [4])])
    x = (np.abs(rand(4)) + 0.5).astype(np.float32)
    v = np.abs(x)
    while True:
        v = v * 2
        if not np.abs(v).sum() < 50:
            break
    save("loop_cond", g, 13, [([("x", x)], [("y", np.sqrt(v).astype(np.float32))])])


# ---- Loop with both: at most 10 iterations, stops early when the running
# sum exceeds a threshold that is a model input (so the count is data's).
def loop_both():
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "x"], ["v_out"], name="add_x"),
         helper.make_node("ReduceSum", ["v_out"], ["s"], name="sum", keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["cond_out"], name="below"),
         const("one", np.array(1, dtype=np.int64)),
         helper.make_node("Add", ["n_in", "one"], ["n_out"], name="count")],
        "loop_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [2]), vi("n_in", I64, [])],
        [vi("cond_out", B, []), vi("v_out", F, [2]), vi("n_out", I64, [])])
    nodes = [
        const("trip", np.array(10, dtype=np.int64)),
        const("go", np.array(True)),
        const("n0", np.array(0, dtype=np.int64)),
        helper.make_node("Loop", ["trip", "go", "v0", "n0"], ["v", "n"], name="loop_both",
                         body=body),
        helper.make_node("Neg", ["v"], ["y"], name="neg"),
    ]
    g = helper.make_graph(nodes, "loop_both",
                          [vi("x", F, [2]), vi("v0", F, [2]), vi("limit", F, [])],
                          [vi("y", F, [2]), vi("n", I64, [])])
    x = np.array([0.5, 0.25], dtype=np.float32)
    v0 = np.zeros(2, dtype=np.float32)
    limit = np.float32(3.0)
    v, n = v0.copy(), 0
    for _ in range(10):
        v = v + x
        n += 1
        if not v.sum() < limit:
            break
    save("loop_both", g, 13, [([("x", x), ("v0", v0), ("limit", limit)],
                               [("y", (-v).astype(np.float32)), ("n", np.array(n, dtype=np.int64))])])


# ---- Scan (opset 11): a running sum over x's rows, a second scan input
# read backwards along axis 1, scan outputs stacked on axis 1 and reversed.
def scan():
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "row"], ["sum_out"], name="running_sum"),
         helper.make_node("Mul", ["sum_out", "col"], ["prod"], name="times_col"),
         helper.make_node("Identity", ["sum_out"], ["sum_scan"], name="sum_scan")],
        "scan_body", [vi("sum_in", F, [3]), vi("row", F, [3]), vi("col", F, [3])],
        [vi("sum_out", F, [3]), vi("prod", F, [3]), vi("sum_scan", F, [3])])
    nodes = [
        helper.make_node("Scan", ["init", "x", "z"], ["total", "prods", "sums"], name="scan",
                         body=body, num_scan_inputs=2, scan_input_axes=[0, 1],
                         scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                         scan_output_directions=[0, 1]),
        helper.make_node("Relu", ["prods"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "scan",
                          [vi("init", F, [3]), vi("x", F, [4, 3]), vi("z", F, [3, 4])],
                          [vi("total", F, [3]), vi("y", F, [3, 4]), vi("sums", F, [4, 3])])
    init, x, z = rand(3), rand(4, 3), rand(3, 4)
    s, prods, sums = init.copy(), [], []
    for t in range(4):
        s = s + x[t]
        prods.append(s * z[:, 3 - t])
        sums.append(s.copy())
    prods = np.stack(prods, axis=1)     # scan output axis 1
    sums = np.stack(sums[::-1], axis=0)  # reversed
    save("scan", g, 11, [([("init", init), ("x", x), ("z", z)],
                          [("total", s.astype(np.float32)),
                           ("y", np.maximum(prods, 0).astype(np.float32)),
                           ("sums", sums.astype(np.float32))])])


# ---- The Sequence ops around a loop, as exporters write a Python list
# built in a loop: the rows of x become a sequence; a loop over its length
# sums them and appends each running sum to a list; the result reads the
# list's last element and length and concatenates a constructed sequence.
def sequence_loop():
    body = helper.make_graph(
        [helper.make_node("SequenceAt", ["rows", "i"], ["row"], name="row_at"),
         helper.make_node("Add", ["acc_in", "row"], ["acc_out"], name="acc_add"),
         helper.make_node("SequenceInsert", ["list_in", "acc_out"], ["list_out"], name="append"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [3]),
         helper.make_tensor_sequence_value_info("list_in", F, None)],
        [vi("cond_out", B, []), vi("acc_out", F, [3]),
         helper.make_tensor_sequence_value_info("list_out", F, None)])
    nodes = [
        helper.make_node("Relu", ["x"], ["rx"], name="relu"),
        helper.make_node("SplitToSequence", ["rx"], ["rows"], name="split", axis=0, keepdims=0),
        helper.make_node("SequenceLength", ["rows"], ["count"], name="count"),
        helper.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=F),
        helper.make_node("Loop", ["count", "", "acc0", "empty"], ["acc", "list"],
                         name="loop_list", body=body),
        const("last_pos", np.array(-1, dtype=np.int64)),
        helper.make_node("SequenceAt", ["list", "last_pos"], ["last"], name="last"),
        helper.make_node("SequenceLength", ["list"], ["list_len"], name="list_len"),
        helper.make_node("Cast", ["list_len"], ["len_f"], name="len_f", to=F),
        helper.make_node("Mul", ["last", "len_f"], ["last_scaled"], name="scale"),
        helper.make_node("SequenceConstruct", ["acc", "last_scaled", "rx_row0"], ["parts"],
                         name="construct"),
        const("front", np.array(0, dtype=np.int64)),
        helper.make_node("SequenceErase", ["parts", "front"], ["parts2"], name="erase"),
        helper.make_node("SequenceInsert", ["parts2", "acc"], ["parts3"], name="insert"),
        helper.make_node("ConcatFromSequence", ["parts3"], ["joined"], name="join", axis=0,
                         new_axis=1),
        helper.make_node("Tanh", ["joined"], ["y"], name="tanh"),
    ]
    g = helper.make_graph(nodes, "sequence_loop",
                          [vi("x", F, [4, 3]), vi("acc0", F, [3]), vi("rx_row0", F, [3])],
                          [vi("y", F, [3, 3])])
    x, acc0, r0 = rand(4, 3), rand(3), rand(3)
    rx = np.maximum(x, 0)
    acc, lst = acc0.copy(), []
    for i in range(4):
        acc = acc + rx[i]
        lst.append(acc.copy())
    last_scaled = lst[-1] * len(lst)
    parts = [acc, last_scaled, r0][1:] + [acc]
    y = np.tanh(np.stack(parts, axis=0))
    save("sequence_loop", g, 13, [([("x", x), ("acc0", acc0), ("rx_row0", r0)],
                                   [("y", y.astype(np.float32))])])


# ---- What PyTorch's exporter writes for a scripted `for t in range(x.size(0)):
# h = f(x[t], h); ys.append(g(h)); zs.append(...)` then torch.stack(ys) and
# torch.cat(zs): the trip count comes from x's shape, the lists start empty
# and grow by one element per iteration, and ConcatFromSequence after the
# loop needs their lengths (4 and 4 here) at import.
def loop_append_stack():
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "t"], ["x_t"], name="x_at", axis=0),
         helper.make_node("MatMul", ["h_in", "w"], ["hw"], name="recur"),
         helper.make_node("Add", ["x_t", "hw"], ["pre"], name="pre"),
         helper.make_node("Tanh", ["pre"], ["h_out"], name="cell"),
         helper.make_node("SequenceInsert", ["ys_in", "h_out"], ["ys_out"], name="append_y"),
         helper.make_node("Relu", ["x_t"], ["z"], name="z"),
         helper.make_node("SequenceInsert", ["zs_in", "z"], ["zs_mid"], name="append_z"),
         helper.make_node("Identity", ["zs_mid"], ["zs_out"], name="zs_pass"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body",
        [vi("t", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, 3]),
         helper.make_tensor_sequence_value_info("ys_in", F, None),
         helper.make_tensor_sequence_value_info("zs_in", F, None)],
        [vi("cond_out", B, []), vi("h_out", F, [1, 3]),
         helper.make_tensor_sequence_value_info("ys_out", F, None),
         helper.make_tensor_sequence_value_info("zs_out", F, None)])
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="x_shape"),
        const("zero", np.array(0, dtype=np.int64)),
        helper.make_node("Gather", ["x_shape", "zero"], ["steps"], name="steps", axis=0),
        const("true", np.array(True)),
        helper.make_node("SequenceEmpty", [], ["ys0"], name="ys0", dtype=F),
        helper.make_node("SequenceEmpty", [], ["zs0"], name="zs0", dtype=F),
        helper.make_node("Loop", ["steps", "true", "h0", "ys0", "zs0"], ["h", "ys", "zs"],
                         name="steps_loop", body=body),
        helper.make_node("ConcatFromSequence", ["ys"], ["stacked"], name="stack", axis=0,
                         new_axis=1),
        helper.make_node("ConcatFromSequence", ["zs"], ["joined"], name="cat", axis=0),
        helper.make_node("Sigmoid", ["stacked"], ["y"], name="y"),
    ]
    w = rand(3, 3)
    g = helper.make_graph(nodes, "loop_append_stack",
                          [vi("x", F, [4, 1, 3]), vi("h0", F, [1, 3])],
                          [vi("y", F, [4, 1, 3]), vi("joined", F, [4, 3]), vi("h", F, [1, 3])],
                          initializer=[numpy_helper.from_array(w, "w")])
    x, h0 = rand(4, 1, 3), rand(1, 3)
    h, ys, zs = h0, [], []
    for t in range(4):
        h = np.tanh(x[t] + h @ w)
        ys.append(h)
        zs.append(np.maximum(x[t], 0))
    y = 1 / (1 + np.exp(-np.stack(ys, 0)))
    save("loop_append_stack", g, 13,
         [([("x", x), ("h0", h0)],
           [("y", y.astype(np.float32)), ("joined", np.concatenate(zs, 0).astype(np.float32)),
            ("h", h.astype(np.float32))])])


# ---- Nesting: a Loop whose body holds an If on the iteration number; both
# branches read x, a value of the model's graph two scopes out.
def loop_nested_if():
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "x"], ["then_out"], name="then_mul")],
        "then_body", [], [vi("then_out", F, [2])])
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["acc_in", "x"], ["else_out"], name="else_sub")],
        "else_body", [], [vi("else_out", F, [2])])
    body = helper.make_graph(
        [const("two", np.array(2, dtype=np.int64)),
         helper.make_node("Less", ["i", "two"], ["early"], name="early"),
         helper.make_node("If", ["early"], ["acc_out"], name="inner_if", then_branch=then_g,
                          else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [2])],
        [vi("cond_out", B, []), vi("acc_out", F, [2])])
    nodes = [
        const("trip", np.array(4, dtype=np.int64)),
        helper.make_node("Loop", ["trip", "", "acc0"], ["acc"], name="outer_loop", body=body),
        helper.make_node("Relu", ["acc"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "loop_nested_if", [vi("x", F, [2]), vi("acc0", F, [2])],
                          [vi("y", F, [2])])
    x, acc0 = rand(2), rand(2)
    acc = acc0.copy()
    for i in range(4):
        acc = acc * x if i < 2 else acc - x
    save("loop_nested_if", g, 13, [([("x", x), ("acc0", acc0)],
                                    [("y", np.maximum(acc, 0).astype(np.float32))])])


# ---- If on a scalar input (a sample rate, as speech models have) whose
# branches frame the signal with their own window: at the bound input size
# one branch yields 1 frame, the other 2. Inside each, nested Ifs as a
# scripted PyTorch export writes them: squeeze the frame axis if it is 1,
# then unsqueeze a batch axis if the result is not 2-D (an RNN cell's
# check), then the cell (a Gemm, 2-D only). The exporter's declared shapes
# hold for the 1-frame branch only; at this size the other branch computes
# other shapes than declared, and its cell cannot take them: ONNX Runtime
# runs the model as long as that branch is not taken. Both branches update
# a carried state by Unsqueeze/Concat. Data: the 1-frame rate only.
def if_nested_rate():
    n, channels = 8, 4

    def rate_branch(tag, window):
        # The names repeat in both branches, as an exporter writes them.
        squeeze_then = helper.make_graph(
            [const("/dec/sq_axes", np.array([-1], dtype=np.int64)),
             helper.make_node("Squeeze", ["/dec/frames", "/dec/sq_axes"], ["/dec/Squeeze_out"],
                              name="/dec/Squeeze")],
            "squeeze_then", [], [vi("/dec/Squeeze_out", F, [1, channels])])
        squeeze_else = helper.make_graph(
            [helper.make_node("Identity", ["/dec/frames"], ["/dec/Identity_out"], name="/dec/Identity")],
            "squeeze_else", [], [vi("/dec/Identity_out", F, [1, channels, 1])])
        batch_then = helper.make_graph(
            [const("/dec/rnn/axes", np.array([0], dtype=np.int64)),
             helper.make_node("Unsqueeze", ["/dec/feat", "/dec/rnn/axes"],
                              ["/dec/rnn/Unsqueeze_out"], name="/dec/rnn/Unsqueeze")],
            "batch_then", [], [vi("/dec/rnn/Unsqueeze_out", F, [1, "Unsqueeze_dim_1", channels])])
        batch_else = helper.make_graph(
            [helper.make_node("Identity", ["/dec/feat"], ["/dec/rnn/Identity_out"],
                              name="/dec/rnn/Identity")],
            "batch_else", [], [vi("/dec/rnn/Identity_out", F, [1, channels])])
        nodes = [
            const("/dec/unsq_axes", np.array([1], dtype=np.int64)),
            helper.make_node("Unsqueeze", ["x", "/dec/unsq_axes"], ["/dec/x3"], name="/dec/Unsqueeze_x"),
            helper.make_node("Conv", ["/dec/x3", "w_" + tag], ["/dec/frames"], name="/dec/Conv",
                             kernel_shape=[window], strides=[window]),
            helper.make_node("Shape", ["/dec/frames"], ["/dec/shape"], name="/dec/Shape"),
            const("/dec/last", np.array(-1, dtype=np.int64)),
            helper.make_node("Gather", ["/dec/shape", "/dec/last"], ["/dec/frames_n"], name="/dec/Gather"),
            const("/dec/one", np.array(1, dtype=np.int64)),
            helper.make_node("Equal", ["/dec/frames_n", "/dec/one"], ["/dec/single"], name="/dec/Equal"),
            helper.make_node("If", ["/dec/single"], ["/dec/feat"], name="/dec/If",
                             then_branch=squeeze_then, else_branch=squeeze_else),
            helper.make_node("Shape", ["/dec/feat"], ["/dec/rnn/shape"], name="/dec/rnn/Shape"),
            helper.make_node("Size", ["/dec/rnn/shape"], ["/dec/rnn/rank"], name="/dec/rnn/Size"),
            const("/dec/rnn/two", np.array(2, dtype=np.int64)),
            helper.make_node("Equal", ["/dec/rnn/rank", "/dec/rnn/two"], ["/dec/rnn/batched"],
                             name="/dec/rnn/Equal"),
            helper.make_node("Not", ["/dec/rnn/batched"], ["/dec/rnn/unbatched"], name="/dec/rnn/Not"),
            helper.make_node("If", ["/dec/rnn/unbatched"], ["/dec/rnn/in"], name="/dec/rnn/If",
                             then_branch=batch_then, else_branch=batch_else),
            helper.make_node("Gemm", ["/dec/rnn/in", "cell_" + tag], ["/dec/rnn/cell"],
                             name="/dec/rnn/Gemm"),
            helper.make_node("ReduceMean", ["/dec/rnn/cell"], ["/dec/mean"], name="/dec/ReduceMean",
                             keepdims=0),
            helper.make_node("Sigmoid", ["/dec/mean"], ["prob_" + tag], name="/dec/Sigmoid"),
            const("/dec/i0", np.array(0, dtype=np.int64)),
            const("/dec/i1", np.array(1, dtype=np.int64)),
            helper.make_node("Gather", ["state", "/dec/i0"], ["/dec/h0"], name="/dec/Gather_h", axis=0),
            helper.make_node("Gather", ["state", "/dec/i1"], ["/dec/c0"], name="/dec/Gather_c", axis=0),
            helper.make_node("Add", ["/dec/h0", "prob_" + tag], ["/dec/h"], name="/dec/Add"),
            helper.make_node("Mul", ["/dec/c0", "prob_" + tag], ["/dec/c"], name="/dec/Mul"),
            const("/dec/axis0", np.array([0], dtype=np.int64)),
            helper.make_node("Unsqueeze", ["/dec/h", "/dec/axis0"], ["/dec/hu"], name="/dec/Unsqueeze_h"),
            helper.make_node("Unsqueeze", ["/dec/c", "/dec/axis0"], ["/dec/cu"], name="/dec/Unsqueeze_c"),
            helper.make_node("Concat", ["/dec/hu", "/dec/cu"], ["state_" + tag], name="/dec/Concat", axis=0),
        ]
        return helper.make_graph(nodes, "rate_" + tag, [],
                                 [vi("prob_" + tag, F, []), vi("state_" + tag, F, [2, 1, channels])])

    # rate 2 frames the 8 samples with a window of 8 (1 frame): the model as
    # exported; rate 1 with a window of 4 (2 frames).
    w_one, w_two = rand(channels, 1, 8), rand(channels, 1, 4)
    cell_one, cell_two = rand(channels, channels), rand(channels, channels)
    nodes = [
        const("rate2", np.array(2, dtype=np.int64)),
        helper.make_node("Equal", ["rate", "rate2"], ["is_rate2"], name="/Equal"),
        helper.make_node("If", ["is_rate2"], ["prob", "state_next"], name="/If",
                         then_branch=rate_branch("one", 8), else_branch=rate_branch("two", 4)),
    ]
    g = helper.make_graph(nodes, "if_nested_rate",
                          [vi("x", F, [1, "samples"]), vi("rate", I64, []), vi("state", F, [2, 1, channels])],
                          [vi("prob", F, []), vi("state_next", F, [2, 1, channels])],
                          initializer=[numpy_helper.from_array(w_one, "w_one"),
                                       numpy_helper.from_array(w_two, "w_two"),
                                       numpy_helper.from_array(cell_one, "cell_one"),
                                       numpy_helper.from_array(cell_two, "cell_two")])

    def expected(x, state):
        frame = w_one[:, 0, :] @ x[0]  # the one frame of the window of 8
        prob = 1 / (1 + np.exp(-(frame @ cell_one).mean()))
        return [("prob", np.float32(prob)),
                ("state_next", np.stack([state[0] + prob, state[1] * prob]).astype(np.float32))]

    x, state = rand(1, n), rand(2, 1, channels)
    sets = [([("x", x), ("rate", np.array(2, dtype=np.int64)), ("state", state)], expected(x, state))]
    save("if_nested_rate", g, 13, sets)


# ---- Invalid models for the importer's messages.
def bad_models():
    # A branch that reads a value nothing defines.
    then_g = helper.make_graph([helper.make_node("Relu", ["missing_value"], ["t"], name="then_relu")],
                               "then_body", [], [vi("t", F, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")],
                               "else_body", [], [vi("e", F, [2])])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         const("zero", np.float32(0)),
         helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
         helper.make_node("If", ["cond"], ["y"], name="if_missing", then_branch=then_g,
                          else_branch=else_g)],
        "bad_if_missing_value", [vi("x", F, [2])], [vi("y", F, [2])])
    save("bad_if_missing_value", g, 13, check=False)
    # The same at opset 18, which the ONNX checker of Debian's libonnx (1.12)
    # does not know: the importer's own message, not the checker's.
    save("bad_if_missing_value_opset18", g, 18, check=False)

    # A loop-carried value whose shape the body changes.
    body = helper.make_graph(
        [helper.make_node("Concat", ["v_in", "v_in"], ["v_out"], name="grow", axis=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [2])],
        [vi("cond_out", B, []), vi("v_out", F, [4])])
    g = helper.make_graph(
        [const("trip", np.array(3, dtype=np.int64)),
         helper.make_node("Loop", ["trip", "", "v0"], ["v"], name="loop_grows", body=body)],
        "bad_loop_carried_shape", [vi("v0", F, [2])], [vi("v", F, [2])])
    save("bad_loop_carried_shape", g, 13, check=False)

    # A loop-carried value of the wrong element type.
    body = helper.make_graph(
        [helper.make_node("Cast", ["v_in"], ["v_out"], name="to_int", to=I64),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [2])],
        [vi("cond_out", B, []), vi("v_out", I64, [2])])
    g = helper.make_graph(
        [const("trip", np.array(3, dtype=np.int64)),
         helper.make_node("Loop", ["trip", "", "v0"], ["v"], name="loop_casts", body=body)],
        "bad_loop_carried_type", [vi("v0", F, [2])], [vi("v", F, [2])])
    save("bad_loop_carried_type", g, 13, check=False)

    # A body with fewer carried values than the node passes.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass"),
         helper.make_node("Identity", ["a_in"], ["a_out"], name="a_pass")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("a_in", F, [2])],
        [vi("cond_out", B, []), vi("a_out", F, [2])])
    g = helper.make_graph(
        [const("trip", np.array(3, dtype=np.int64)),
         helper.make_node("Loop", ["trip", "", "a0", "b0"], ["a", "b"], name="loop_count",
                          body=body)],
        "bad_loop_carried_count", [vi("a0", F, [2]), vi("b0", F, [2])],
        [vi("a", F, [2]), vi("b", F, [2])])
    save("bad_loop_carried_count", g, 13, check=False)

    # A while loop whose condition never turns false.
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "v_in"], ["v_out"], name="twice"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [2])],
        [vi("cond_out", B, []), vi("v_out", F, [2])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["", "go", "v0"], ["v"], name="loop_forever", body=body)],
        "loop_forever", [vi("go", B, []), vi("v0", F, [2])], [vi("v", F, [2])])
    save("loop_forever", g, 13)

    # Scan outputs of a loop whose iteration count is data's.
    body = helper.make_graph(
        [helper.make_node("Identity", ["v_in"], ["v_out"], name="v_pass"),
         helper.make_node("Identity", ["v_in"], ["row"], name="row"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond_pass")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [2])],
        [vi("cond_out", B, []), vi("v_out", F, [2]), vi("row", F, [2])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["trip", "", "v0"], ["v", "rows"], name="loop_rows", body=body)],
        "bad_loop_dynamic_rows", [vi("trip", I64, []), vi("v0", F, [2])],
        [vi("v", F, [2]), vi("rows", F, [None, 2])])
    save("bad_loop_dynamic_rows", g, 13, check=False)

    # A list appended to in a loop that may stop early (`break`), then
    # concatenated: its length, hence the result's shape, is the data's.
    body = helper.make_graph(
        [helper.make_node("SequenceInsert", ["seq_in", "v"], ["seq_out"], name="append"),
         helper.make_node("ReduceSum", ["v"], ["total"], name="total", keepdims=0),
         const("limit", np.array(1.0, dtype=np.float32)),
         helper.make_node("Less", ["total", "limit"], ["cond_out"], name="keep_going")],
        "loop_body", [vi("i", I64, []), vi("cond_in", B, []),
                      helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [vi("cond_out", B, []), helper.make_tensor_sequence_value_info("seq_out", F, None)])
    g = helper.make_graph(
        [const("trip", np.array(8, dtype=np.int64)),
         const("go", np.array(True)),
         helper.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=F),
         helper.make_node("Loop", ["trip", "go", "empty"], ["seq"], name="loop_break", body=body),
         helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="join", axis=0)],
        "bad_loop_grown_concat", [vi("v", F, [2])], [vi("y", F, [None])])
    save("bad_loop_grown_concat", g, 13, check=False)


if __name__ == "__main__":
    if_const()
    if_data()
    loop_trip()
    loop_cond()
    loop_both()
    scan()
    sequence_loop()
    loop_nested_if()
    loop_append_stack()
    if_nested_rate()
    bad_models()
