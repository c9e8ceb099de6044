#!/usr/bin/python3
"""measured/predicted for each bundled small model, as `collage run` reports it.

For each model: `collage optimize` (the default: op-level, the end-to-end
check, a short graph-level search) into a database (warm or not), then
`collage run --plan --repeat N`, and the two ratios `collage run` prints:
against the plan's prediction (its whole-plan time where the optimizer
timed it whole) and against the sum of its kernels timed alone
(docs/measurement.md, "A plan's prediction"). Not a test: figures for
notes and bench/README.md. On a shared machine run it under `chrt -f 10`
(root) so that other processes cannot take a core in the middle of a run.

  bench/predicted_check.py [--db-dir DIR] [--budget 10s] [--repeat 50] [model ...]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "resources", "models")


def bundled_small_models():
    return sorted(f[:-5] for f in os.listdir(MODELS) if f.endswith(".onnx") and "_small" in f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="model names in resources/models (default: every *_small*)")
    ap.add_argument("--collage", default=os.path.join(REPO, "build", "app", "collage"))
    ap.add_argument("--db-dir", help="one database per model, MODEL.sqlite, kept (default: a temporary folder)")
    ap.add_argument("--budget", default="10s", help="graph-level search budget")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    db_dir = args.db_dir or tempfile.mkdtemp(prefix="collage-predicted-")
    os.makedirs(db_dir, exist_ok=True)
    print("| model | measured ms | predicted ms | measured/predicted | kernels alone ms | measured/kernels alone |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.models or bundled_small_models():
        model = os.path.join(MODELS, name + ".onnx")
        plan = os.path.join(db_dir, name + ".plan.json")
        db = os.path.join(db_dir, name + ".sqlite")
        opt = subprocess.run([args.collage, "optimize", model, "--db", db, "-o", plan, "--budget", args.budget],
                             capture_output=True, text=True)
        if opt.returncode != 0:
            print("| %s | optimize failed: %s |" % (name, (opt.stderr.strip().splitlines() or ["?"])[-1]))
            continue
        run = subprocess.run([args.collage, "run", model, "--plan", plan, "--repeat", str(args.repeat)],
                             capture_output=True, text=True)
        out = run.stdout
        latency = re.search(r"latency: median ([\d.]+) ms", out)
        predicted = re.search(r"predicted: ([\d.]+) ms, [^(]*\(measured/predicted ([\d.]+)\)", out)
        alone = re.search(r"kernels timed alone add up to ([\d.]+) ms \(measured/that ([\d.]+)", out)
        cells = [name, latency.group(1) if latency else "?"]
        cells += [predicted.group(1), predicted.group(2)] if predicted else ["-", "-"]
        cells += [alone.group(1), alone.group(2)] if alone else ["-", "-"]
        print("| " + " | ".join(cells) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
