#!/usr/bin/python3
"""run_plan.py model.onnx plan.json: examples/cpp/run_plan.cc in Python.

Runs a plan with the installed `collage` module and prints each output's sum,
the latency and where the time went; float inputs get the same values as in
the C++ example, so both print the same outputs.
"""
import sys

import numpy as np

import collage


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} model.onnx plan.json")
    try:
        model = collage.Model(sys.argv[1])
        session = collage.Session(model, sys.argv[2])
        inputs = {}
        for spec in model.inputs:
            n = int(np.prod(spec["shape"]))
            values = (np.arange(n) % 17).astype(np.float32) / 16 - 0.5
            inputs[spec["name"]] = values.reshape(spec["shape"])
        for name, out in sorted(session.run(inputs).items()):
            total = sum(out.astype(np.float64).ravel().tolist())  # in order, as the C++ loop
            print(f"output {name}: {out.size} values, sum {total:.6f}")
        print(f"latency {session.latency_ms:.3f} ms, peak memory {session.peak_bytes} bytes")
        for b in session.placement:
            print(f"  {b['backend']:<8} {b['groups']:3d} groups {b['nodes']:4d} nodes "
                  f"{100 * b['share']:5.1f}%")
    except collage.Error as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
