"""Exporting one zoo model: seeded random weights, BatchNorm statistics
calibrated on a random batch, torch.onnx.export with a dynamic batch
dimension named "batch", then the reference input and PyTorch's output for it,
and the manifest (zoo.json) that records every file of a directory.

Invariant: an exported file and its reference output come from the same
model object in eval mode, and the manifest lists only files that exist.
"""

import collections
import json
import os
import time
import zlib

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torchvision

DEFAULT_OPSET = 17
DEFAULT_SEED = 0
SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.normpath(os.path.join(SCRIPT_DIR, "..", ".."))
SMALL_OUT_DIR = os.path.join(REPO_ROOT, "resources", "models")
REGENERATE_SMALL_CMD = "/usr/bin/python3 bench/models/export_zoo.py --small --force"


def default_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "collage-studio", "zoo")


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------


def _randomize_norms(model, gen, calibration):
    """Make BatchNorm layers look trained: random (but tame) affine parameters,
    and running statistics equal to the statistics that each layer actually
    sees on a random calibration batch (as after training, so activations stay
    O(1) through deep residual stacks instead of growing without bound). The
    folded conv biases and BatchNormalization nodes are thus non-trivial.
    Dropout and stochastic depth stay in eval mode for the calibration batch
    (dropped residual branches would give statistics that eval mode never sees)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    with torch.no_grad():
        for m in norms:
            n = m.num_features
            m.weight.copy_(torch.empty(n).uniform_(0.5, 1.5, generator=gen))
            m.bias.copy_(torch.empty(n).uniform_(-0.2, 0.2, generator=gen))
            m.reset_running_stats()
            m.momentum = None  # cumulative average: one batch -> its statistics
        model.train()
        for m in model.modules():
            if isinstance(m, (nn.modules.dropout._DropoutNd, torchvision.ops.StochasticDepth)):
                m.eval()
        model(calibration)
        model.eval()
        for m in norms:
            m.momentum = 0.1
            m.num_batches_tracked.zero_()


def _make_input(spec, batch, gen):
    shape = (batch,) + tuple(spec.input_shape)
    if spec.input_kind == "float":
        return torch.randn(shape, generator=gen)
    _, vocab = spec.input_kind
    return torch.randint(0, vocab, shape, generator=gen, dtype=torch.int64)


def _model_seed(seed, name):
    base = name[:-len("_small")] if name.endswith("_small") else name
    return (seed * 1000003 + zlib.crc32(base.encode())) & 0x7FFFFFFF


def _stem(name, batch, opset):
    s = name
    if batch != 1:
        s += "_b%d" % batch
    if opset != DEFAULT_OPSET:
        s += "_opset%d" % opset
    return s


def _paths(out_dir, stem):
    return (os.path.join(out_dir, stem + ".onnx"),
            os.path.join(out_dir, stem + ".input_0.pb"),
            os.path.join(out_dir, stem + ".output_0.pb"))


def _write_tensor(path, array, name):
    t = onnx.numpy_helper.from_array(np.ascontiguousarray(array), name=name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def _try_export(model, example, path, spec, opset):
    torch.onnx.export(
        model, (example,), path,
        input_names=[spec.input_name], output_names=[spec.output_name],
        dynamic_axes={spec.input_name: {0: "batch"}, spec.output_name: {0: "batch"}},
        opset_version=opset, do_constant_folding=True,
        training=torch.onnx.TrainingMode.EVAL, verbose=False)


def export_model(spec, out_dir, batch, opset, seed, force, out_name=None, opset_fallback=False):
    """Export one model; returns a manifest entry (dict)."""
    name = out_name or spec.name
    onnx_path, in_path, out_path = _paths(out_dir, _stem(name, batch, opset))
    if not force and all(os.path.exists(p) for p in (onnx_path, in_path, out_path)):
        print("[skip] %s: %s exists (use --force to re-export)" % (name, os.path.basename(onnx_path)))
        return _manifest_entry(spec, name, onnx_path, in_path, out_path, None, None, batch)

    t0 = time.time()
    mseed = _model_seed(seed, spec.name)
    torch.manual_seed(mseed)
    model = spec.build()
    _randomize_norms(model, torch.Generator().manual_seed(mseed + 1),
                     _make_input(spec, spec.calibration_batch, torch.Generator().manual_seed(mseed + 3)))
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    example = _make_input(spec, batch, torch.Generator().manual_seed(mseed + 2))
    print("[export] %s: %s params, input %s %s, opset %d -> %s"
          % (name, format(params, ","), spec.input_name, list(example.shape), opset, onnx_path))
    with torch.no_grad():
        reference = model(example)

    # Export (if asked, falling back to the nearest opset that torch can export).
    tried, used, last_err = [], None, None
    candidates = [opset]
    if opset_fallback:
        for d in range(1, 9):
            candidates += [opset + d, opset - d]
        candidates = [o for o in candidates if 7 <= o <= DEFAULT_OPSET]
    for o in candidates:
        tried.append(o)
        p = onnx_path if o == opset else _paths(out_dir, _stem(name, batch, o))[0]
        try:
            with torch.no_grad():
                _try_export(model, example, p, spec, o)
            used = o
            onnx_path = p
            break
        except Exception as e:  # noqa: BLE001 - report and try the next opset
            last_err = e
            print("  ! export at opset %d failed: %s" % (o, str(e).splitlines()[0][:200]))
    if used is None:
        raise RuntimeError("export of %s failed at opsets %s: %s" % (name, tried, last_err))
    if used != opset:
        print("  ! %s exported at opset %d instead of %d" % (name, used, opset))
        _, in_path, out_path = _paths(out_dir, _stem(name, batch, used))

    m = onnx.load(onnx_path)
    graph_inputs = [i.name for i in m.graph.input]
    graph_outputs = [o.name for o in m.graph.output]
    assert graph_inputs == [spec.input_name], graph_inputs
    assert graph_outputs == [spec.output_name], graph_outputs
    # torch sometimes leaves made-up symbolic names on static output dims (e.g.
    # BERT's sequence dim); declare exactly "batch" x the static dims.
    if _fix_output_dims(m.graph.output[0], reference.shape):
        onnx.save(m, onnx_path)
    _write_tensor(in_path, example.numpy(), graph_inputs[0])
    _write_tensor(out_path, reference.numpy(), graph_outputs[0])
    print("  done in %.1f s" % (time.time() - t0))
    entry = _manifest_entry(spec, name, onnx_path, in_path, out_path, params, m, batch)
    if used != opset:
        entry["note"] = "requested opset %d could not be exported by torch %s; exported at opset %d" % (
            opset, torch.__version__, used)
    return entry


def _fix_output_dims(value_info, shape):
    dims = value_info.type.tensor_type.shape.dim
    assert len(dims) == len(shape), (list(dims), shape)
    changed = False
    for i, (d, n) in enumerate(zip(dims, shape)):
        want_param, want_value = ("batch", 0) if i == 0 else ("", int(n))
        if d.dim_param != want_param or d.dim_value != want_value:
            if want_param:
                d.dim_param = want_param
            else:
                d.dim_value = want_value
            changed = True
    return changed


def _dims(type_proto):
    out = []
    for d in type_proto.tensor_type.shape.dim:
        out.append(d.dim_param if d.dim_param else d.dim_value)
    return out


def _elem_type_name(type_proto):
    return onnx.TensorProto.DataType.Name(type_proto.tensor_type.elem_type).lower()


def _op_histogram(model):
    return dict(sorted(collections.Counter(n.op_type for n in model.graph.node).items(),
                       key=lambda kv: (-kv[1], kv[0])))


def _manifest_entry(spec, name, onnx_path, in_path, out_path, params, model, batch):
    if model is None:
        model = onnx.load(onnx_path)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    in_t = onnx.TensorProto()
    with open(in_path, "rb") as f:
        in_t.ParseFromString(f.read())
    out_t = onnx.TensorProto()
    with open(out_path, "rb") as f:
        out_t.ParseFromString(f.read())

    def io(values, tensor):
        res = []
        for v in values:
            res.append({"name": v.name, "dtype": _elem_type_name(v.type),
                        "symbolic_shape": _dims(v.type), "shape": list(tensor.dims)})
        return res

    entry = {
        "name": name,
        "description": spec.description,
        "file": os.path.basename(onnx_path),
        "size_bytes": os.path.getsize(onnx_path),
        "opset": opset,
        "batch": batch,
        "inputs": io(model.graph.input, in_t),
        "outputs": io(model.graph.output, out_t),
        "input_data": [os.path.basename(in_path)],
        "output_data": [os.path.basename(out_path)],
        "parameters": params,
        "initializer_elements": int(sum(int(np.prod(t.dims)) for t in model.graph.initializer)),
        "nodes": len(model.graph.node),
        "ops": _op_histogram(model),
    }
    return entry


def _load_manifest(path):
    if os.path.exists(path):
        with open(path) as f:
            try:
                return json.load(f)
            except ValueError:
                pass
    return {}


def write_manifest(out_dir, entries):
    path = os.path.join(out_dir, "zoo.json")
    old = _load_manifest(path)
    by_file = {e["file"]: e for e in old.get("models", [])}
    for e in entries:
        prev = by_file.get(e["file"])
        if e["parameters"] is None and prev is not None:
            e["parameters"] = prev.get("parameters")
        by_file[e["file"]] = e
    # Drop entries whose files vanished.
    models = [e for _, e in sorted(by_file.items()) if os.path.exists(os.path.join(out_dir, e["file"]))]
    manifest = {
        "generator": "bench/models/export_zoo.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "onnx": onnx.__version__,
        "models": models,
    }
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print("[manifest] %s (%d models)" % (path, len(models)))
    return manifest


def write_small_readme(out_dir, manifest):
    lines = [
        "# Small sample models",
        "",
        "Generated by `bench/models/export_zoo.py`; do not edit by hand. Regenerate from the",
        "repository root with:",
        "",
        "```",
        REGENERATE_SMALL_CMD,
        "```",
        "",
        "(`/usr/bin/python3` with Debian's python3-torch %s, python3-torchvision %s and"
        % (torch.__version__.split("a")[0].split("+")[0], torchvision.__version__.split("a")[0]),
        "python3-onnx %s; without `--force` files that already exist are kept)." % onnx.__version__,
        "",
        "Each model is a tiny variant of a model of the full zoo with the same op",
        "structure (same op types and fusion opportunities), random weights from a",
        "fixed seed, eval mode, constant folding (BatchNorm after Conv folded into the",
        "Conv), batch dimension dynamic (`batch`), everything else static. For each",
        "`<name>.onnx` there is `<name>.input_0.pb` (one random input, batch 1) and",
        "`<name>.output_0.pb` (PyTorch's output for it), both serialized",
        "`onnx.TensorProto`s named after the graph input/output. `zoo.json` lists all",
        "of them with shapes, parameter counts and op histograms.",
        "",
        "| file | opset | size | input | output | what |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in manifest["models"]:
        i, o = e["inputs"][0], e["outputs"][0]
        lines.append("| `%s` | %d | %.0f KB | `%s` %s %s | `%s` %s %s | %s |" % (
            e["file"], e["opset"], e["size_bytes"] / 1024.0,
            i["name"], i["dtype"], "x".join(map(str, i["symbolic_shape"])),
            o["name"], o["dtype"], "x".join(map(str, o["symbolic_shape"])), e["description"]))
    lines += ["", "Op types per model:", ""]
    for e in manifest["models"]:
        lines.append("- `%s`: %s" % (e["file"], ", ".join("%s %d" % kv for kv in e["ops"].items())))
    lines += [
        "",
        "Older-opset variants: `resnet50_small_opset9.onnx` is `resnet50_small` exported at",
        "opset 9 (same op types; exercises the importer's handling of old opset versions).",
        "`bert_small_opset13.onnx` is `bert_small` at opset 13, where LayerNormalization does not exist and torch",
        "decomposes it into ReduceMean/Sub/Pow/Add/Sqrt/Div/Mul. Same weights and the same",
        "input/output data as the opset-17 files.",
    ]
    notes = [e for e in manifest["models"] if e.get("note")]
    for e in notes:
        lines.append("- `%s`: %s" % (e["file"], e["note"]))
    lines += [
        '',
        '## int8 variants',
        '',
        '`<name>_int8_dynamic.onnx`, `<name>_int8_qdq.onnx` and `<name>_int8_qop.onnx` (for',
        '`resnet50_small`, `mobilenet_v3_large_small` and `bert_small`) are written by',
        "`bench/models/quantize_models.py` in the three forms ONNX Runtime's quantization tools",
        'write (dynamic: DynamicQuantizeLinear -> ConvInteger/MatMulInteger; static QDQ;',
        'QOperator: QLinearConv/QLinearMatMul), from the float files here:',
        '',
        '```',
        '/usr/bin/python3 bench/models/quantize_models.py --small --models resnet50_small,mobilenet_v3_large_small,bert_small --force',
        '```',
        '',
        "Their `.input_0.pb` is the float model's input; their `.output_0.pb` is ONNX Runtime's",
        'output for it (onnxruntime-node 1.30, CPU provider, graph optimizations off), an',
        'independent reference for our own executor (bench/models/README.md, "Quantized variants").',
    ]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("[readme] %s" % os.path.join(out_dir, "README.md"))
