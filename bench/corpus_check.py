#!/usr/bin/env python3
"""Runs every model of a corpus through the product as a new user would, and
prints a table of what passed and why the rest failed. Not a test: it is slow.

    bench/corpus_check.py [--collage build/app/collage] [--sets zoo,small,converted,operator,scripted]
                          [--only REGEX] [--skip-optimize] [--timeout 900] [--json out.json]

Sets:
  zoo        the widened zoo, full size (~/.cache/collage-studio/zoo, made by
             bench/models/export_zoo.py), with its PyTorch reference outputs;
  small      the committed small zoo (resources/models);
  converted  libonnx-testdata's pytorch-converted models (torch.nn modules);
  operator   libonnx-testdata's pytorch-operator models (torch functions);
  scripted   TorchScript models with control flow (If, Loop, Sequence ops as
             PyTorch's exporter writes them; ~/.cache/collage-studio/scripted,
             made by bench/models/export_scripted.py).

Each model goes through four steps, each only if the one before passed:
  import     collage inspect;
  reference  collage run --backend reference, against the expected outputs
             when the set has them;
  optimize   collage optimize (all backends, the shared measurement database);
  verify     collage run --plan ... --verify.
The first failing step and the first line of its message are the "why".
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = "/usr/share/libonnx-testdata/data"
STEPS = ["import", "reference", "optimize", "verify"]


def corpus(sets):
    """(set, name, model, inputs, expected outputs) for every model of the sets."""
    for s in sets:
        if s in ("zoo", "scripted"):
            folder = os.path.expanduser("~/.cache/collage-studio/" + s)
            if not glob.glob(os.path.join(folder, "*.onnx")):
                maker = "export_zoo.py" if s == "zoo" else "export_scripted.py"
                sys.exit(f"corpus_check: no models in {folder}: run /usr/bin/python3 "
                         f"bench/models/{maker} first")
            for m in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
                base = m[:-len(".onnx")]
                yield s, os.path.basename(base), m, sorted(glob.glob(base + ".input_*.pb")), \
                    sorted(glob.glob(base + ".output_*.pb"))
        elif s == "small":
            for m in sorted(glob.glob(os.path.join(ROOT, "resources/models/*.onnx"))):
                base = m[:-len(".onnx")]
                yield s, os.path.basename(base), m, sorted(glob.glob(base + ".input_*.pb")), \
                    sorted(glob.glob(base + ".output_*.pb"))
        elif s in ("converted", "operator"):
            folder = os.path.join(TESTDATA, "pytorch-" + s)
            for d in sorted(glob.glob(os.path.join(folder, "test_*"))):
                data = os.path.join(d, "test_data_set_0")
                yield s, os.path.basename(d)[len("test_"):], os.path.join(d, "model.onnx"), \
                    sorted(glob.glob(os.path.join(data, "input_*.pb"))), \
                    sorted(glob.glob(os.path.join(data, "output_*.pb")))
        else:
            sys.exit(f"corpus_check: unknown set '{s}'")


def first_error_line(text):
    """The line a user would read first: the error, not the progress."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if re.match(r"(error|Error|FAIL|terminate|.*Assertion)", l):
            return l
    return lines[-1] if lines else "(no output)"


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode == 0, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"


def check(collage, model, inputs, expected, work, args):
    """The steps' results: [(step, ok, why)] up to the first failure."""
    results = []
    ok, out = run([collage, "inspect", model], args.timeout)
    results.append(("import", ok, "" if ok else first_error_line(out)))
    if not ok:
        return results
    cmd = [collage, "run", model, "--backend", "reference"]
    if inputs:
        cmd += ["--input"] + inputs
    if inputs and expected:
        cmd += ["--expect"] + expected
    ok, out = run(cmd, args.timeout)
    results.append(("reference", ok, "" if ok else first_error_line(out)))
    if not ok or args.skip_optimize:
        return results
    plan = os.path.join(work, "plan.json")
    ok, out = run([collage, "optimize", model, "-o", plan, "--no-end-to-end", "--op-level"], args.timeout)
    results.append(("optimize", ok, "" if ok else first_error_line(out)))
    if not ok:
        return results
    cmd = [collage, "run", model, "--plan", plan, "--verify"]
    if inputs:
        cmd += ["--input"] + inputs
    ok, out = run(cmd, args.timeout)
    results.append(("verify", ok, "" if ok else first_error_line(out)))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collage", default=os.path.join(ROOT, "build/app/collage"))
    ap.add_argument("--sets", default="small,converted,operator")
    ap.add_argument("--only", help="only models whose name matches this regex")
    ap.add_argument("--skip-optimize", action="store_true", help="import and reference only")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per step")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    rows = []
    started = time.time()
    for s, name, model, inputs, expected in corpus(args.sets.split(",")):
        if args.only and not re.search(args.only, name):
            continue
        with tempfile.TemporaryDirectory() as work:
            results = check(args.collage, model, inputs, expected, work, args)
        failed = [r for r in results if not r[1]]
        row = {"set": s, "model": name, "passed": [r[0] for r in results if r[1]],
               "failed_step": failed[0][0] if failed else "", "why": failed[0][2] if failed else ""}
        rows.append(row)
        mark = "ok" if not failed else f"FAIL at {row['failed_step']}: {row['why'][:160]}"
        print(f"{s:10} {name:45} {mark}", flush=True)

    print(f"\n{len(rows)} models in {time.time() - started:.0f} s\n")
    wanted = STEPS[:2] if args.skip_optimize else STEPS
    print(f"| set | models | {' | '.join(wanted)} |")
    print("|---|---|" + "---|" * len(wanted))
    for s in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == s]
        cells = [str(sum(step in r["passed"] for r in mine)) for step in wanted]
        print(f"| {s} | {len(mine)} | {' | '.join(cells)} |")
    reasons = {}
    for r in rows:
        if r["failed_step"]:
            # Grouped by message, without the paths and names that differ.
            why = re.sub(r"\S*/\S+", "FILE", r["why"])
            key = (r["failed_step"], re.sub(r"'[^']*'", "'…'", why)[:200])
            reasons.setdefault(key, []).append(f"{r['set']}/{r['model']}")
    if reasons:
        print("\nwhy the rest failed:")
        for (step, why), models in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(models):3}  {step}: {why}\n       {', '.join(models[:6])}"
                  + (" ..." if len(models) > 6 else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
