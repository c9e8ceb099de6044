#!/usr/bin/python3
"""PyTorch eager runner for bench/run_bench.py.

Usage: /usr/bin/python3 torch_runner.py MODEL_NAME INPUT.pb THREADS [--batch N]

Rebuilds MODEL_NAME exactly as bench/models/export_zoo.py does (same builder,
same seed, same BatchNorm calibration: hence the same weights as the exported
ONNX file), then serves commands on stdin, one per line:
    run           one inference under torch.inference_mode; prints "ms <elapsed>"
    output PATH   writes the last output as raw float32 to PATH; prints "ok <dims>"
    quit          exits
It prints "ready <torch version>" after the first (warm-up) inference.
"""

import os
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export_zoo  # noqa: E402  (the zoo's own builders)


def build(name):
    specs = {s.name: s for s in export_zoo._full_specs() + export_zoo._small_specs()}
    name = export_zoo.ALIASES.get(name, name)
    spec = specs[name]
    # Mirrors export_zoo.export_model: seed, build, calibrate norms, eval.
    mseed = export_zoo._model_seed(export_zoo.DEFAULT_SEED, spec.name)
    torch.manual_seed(mseed)
    model = spec.build()
    export_zoo._randomize_norms(model, torch.Generator().manual_seed(mseed + 1),
                                export_zoo._make_input(spec, spec.calibration_batch,
                                                       torch.Generator().manual_seed(mseed + 3)))
    model.eval()
    return model


def main():
    name, input_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(threads)
    t = onnx.TensorProto()
    with open(input_path, "rb") as f:
        t.ParseFromString(f.read())
    x = torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
    model = build(name)
    with torch.inference_mode():
        out = model(x)
        print("ready torch %s" % torch.__version__, flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "run":
                t0 = time.perf_counter()
                out = model(x)
                dt = (time.perf_counter() - t0) * 1e3
                print("ms %.4f" % dt, flush=True)
            elif cmd.startswith("output "):
                a = out.detach().numpy().astype(np.float32)
                a.tofile(cmd[7:])
                print("ok %s" % "x".join(map(str, a.shape)), flush=True)
            elif cmd == "quit":
                break
            elif cmd:
                print("error unknown command %s" % cmd, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
