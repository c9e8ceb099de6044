"""Checking an exported zoo model: ONNX's checker, then shape inference,
whose output shape must agree with the stored reference output.
"""

import os

import onnx
import onnx.shape_inference

from zoo_export import _dims, _op_histogram


def validate(entry, out_dir):
    path = os.path.join(out_dir, entry["file"])
    m = onnx.load(path)
    onnx.checker.check_model(m)
    inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=False)
    # The inferred output shape must agree with the stored reference output.
    out = inferred.graph.output[0]
    dims = _dims(out.type)
    ref = entry["outputs"][0]["shape"]
    ok = len(dims) == len(ref) and all(isinstance(d, str) or d == r for d, r in zip(dims, ref))
    hist = " ".join("%s:%d" % kv for kv in _op_histogram(m).items())
    print("[ok] %-34s opset %-2d %9.3f MB %4d nodes | %s%s" % (
        entry["file"], entry["opset"], os.path.getsize(path) / 1e6, len(m.graph.node), hist,
        "" if ok else "  (!! inferred output shape %s != reference %s)" % (dims, ref)))
    if not ok:
        raise RuntimeError("shape inference disagrees with reference output for " + entry["file"])
    return set(_op_histogram(m))
