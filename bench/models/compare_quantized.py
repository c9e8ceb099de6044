#!/usr/bin/python3
"""Find where our reference executor and ONNX Runtime part on a model:
every tensor a node computes becomes a graph output, ONNX Runtime
(onnxruntime-node, optimizations off) writes them all for one input, and
`collage run --backend reference --expect` checks each; prints the
mismatching tensors in graph order with the node that computes them.

    compare_quantized.py MODEL.onnx INPUT.pb [--collage build/app/collage] [--types uint8,int8,int32,float]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize_models as qm  # noqa: E402

TYPES = {"float": TensorProto.FLOAT, "uint8": TensorProto.UINT8, "int8": TensorProto.INT8,
         "int32": TensorProto.INT32}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("--collage", default=os.path.join(qm.REPO_ROOT, "build", "app", "collage"))
    ap.add_argument("--types", default="uint8,int8,int32,float")
    args = ap.parse_args(argv)
    m = onnx.load(args.model)
    inferred = onnx.shape_inference.infer_shapes(m)
    infos = {vi.name: vi for vi in inferred.graph.value_info}
    types = {k: vi.type.tensor_type.elem_type for k, vi in infos.items()}
    want = {TYPES[t] for t in args.types.split(",")}
    producer = {}
    names = [o.name for o in m.graph.output]
    for n in m.graph.node:
        for o in n.output:
            producer[o] = n
            if o and n.op_type != "Constant" and o not in names and types.get(o) in want:
                m.graph.output.append(infos[o])
                names.append(o)
    _, x = qm.load_tensor(args.input)
    feed_name = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}][0]
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "all.onnx")
        onnx.save(m, p)
        outs = qm.run_ort(p, [{feed_name: x}], "dump")
        files = []
        for k, (name, arr) in enumerate(outs):
            f = os.path.join(d, "o%d.pb" % k)
            with open(f, "wb") as fh:
                fh.write(onnx.numpy_helper.from_array(arr, name).SerializeToString())
            files.append(f)
        r = subprocess.run([args.collage, "run", p, "--backend", "reference", "--input", args.input, "--expect"]
                           + files, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "check " not in r.stdout:
        print(r.stdout[-3000:])
        return 2
    bad = 0
    worst = (0.0, None)
    ints = sum(1 for n in names if types.get(n) != TensorProto.FLOAT)
    for line in r.stdout.splitlines():
        mt = re.match(r"check (.*?): matches \(max abs error ([\d.eE+-]+)\)", line)
        if mt and types.get(mt.group(1)) == TensorProto.FLOAT and float(mt.group(2)) > worst[0]:
            worst = (float(mt.group(2)), mt.group(1))
        mt = re.match(r"check (.*?): (MISMATCH.*)", line)
        if mt:
            n = producer.get(mt.group(1))
            print("%s (%s %s): %s" % (mt.group(1), n.op_type if n else "?", n.name if n else "?", mt.group(2)))
            bad += 1
    print("%d of %d tensors differ (integer tensors exactly, float ones beyond rtol 1e-3, atol 1e-5); "
          "%d integer tensors; worst float tensor that matches: %s max abs error %g"
          % (bad, len(names), ints, worst[1], worst[0]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
