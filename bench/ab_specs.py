#!/usr/bin/python3
"""A/B of two optimizer configurations on the same models, side by side.

A configuration is a `collage` binary and, optionally, a folder of backend
specs (COLLAGE_RESOURCES). For each model, each configuration gets a cold
optimize into a fresh database (its candidate count, kernels measured and
measuring seconds are recorded), then the two plans run in alternation,
`collage run --plan P --repeat N` per round, the order swapped every round
so that drift hits both alike. The figure is the per-round ratio B / A and
its median: > 1 means B's plan is slower.

    /usr/bin/python3 bench/ab_specs.py --models resnet50,mobilenet_v2 \\
        --a named=build-old/app/collage:old_resources --b rules=build/app/collage

Used to decide whether a spec change (a pattern family, a rule) earns its
place: see bench/README.md.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

ZOO = os.path.expanduser("~/.cache/collage-studio/zoo")


def parse_config(text):
    name, _, rest = text.partition("=")
    binary, _, resources = rest.partition(":")
    if not name or not binary:
        sys.exit("a configuration is NAME=BINARY[:RESOURCES], got %r" % text)
    return {"name": name, "binary": os.path.abspath(binary),
            "resources": os.path.abspath(resources) if resources else None}


def run(config, args, log):
    env = dict(os.environ)
    if config["resources"]:
        env["COLLAGE_RESOURCES"] = config["resources"]
    start = time.monotonic()
    p = subprocess.run([config["binary"]] + args, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    with open(log, "a") as f:
        f.write("$ %s\n%s%s\n" % (" ".join([config["binary"]] + args), p.stdout, p.stderr))
    if p.returncode != 0:
        raise RuntimeError("%s failed (rc %d), see %s" % (" ".join(args[:2]), p.returncode, log))
    return p.stdout, wall


def optimize(config, model, out, log):
    db = os.path.join(out, config["name"] + ".sqlite")
    plan = os.path.join(out, config["name"] + ".plan.json")
    for path in (db, plan):
        if os.path.exists(path):
            os.remove(path)
    text, wall = run(config, ["optimize", model, "--db", db, "-o", plan, "--op-level"], log)
    found = lambda pattern: re.search(pattern, text)
    cands = found(r"(\d+) nodes, (\d+) candidates")
    measured = found(r"measured (\d+) kernels in ([\d.]+) s")
    predicted = found(r"predicted total ([\d.]+) ms")
    with open(plan) as f:
        groups = json.load(f)["groups"]
    return {"plan": plan, "wall_s": wall,
            "nodes": int(cands.group(1)) if cands else None,
            "candidates": int(cands.group(2)) if cands else None,
            "kernels_measured": int(measured.group(1)) if measured else None,
            "measuring_s": float(measured.group(2)) if measured else None,
            "predicted_ms": float(predicted.group(1)) if predicted else None,
            "groups": len(groups)}


def latency(config, model, plan, repeat, log):
    text, _ = run(config, ["run", model, "--plan", plan, "--repeat", str(repeat)], log)
    m = re.search(r"latency: median ([\d.]+) ms", text)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="comma-separated zoo names or .onnx paths")
    ap.add_argument("--a", required=True, help="NAME=BINARY[:RESOURCES], the reference")
    ap.add_argument("--b", required=True, help="NAME=BINARY[:RESOURCES], the change")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=15, help="inferences per round and plan")
    ap.add_argument("--out", default=None, help="results folder (default bench/results/ab-<time>)")
    args = ap.parse_args()
    a, b = parse_config(args.a), parse_config(args.b)
    stamp = datetime.datetime.utcnow().strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "ab-" + stamp)
    os.makedirs(out, exist_ok=True)
    results = []
    for name in args.models.split(","):
        model = name if name.endswith(".onnx") else os.path.join(ZOO, name + ".onnx")
        short = os.path.splitext(os.path.basename(model))[0]
        folder = os.path.join(out, short)
        os.makedirs(folder, exist_ok=True)
        log = os.path.join(folder, "log.txt")
        res = {"model": short, "configs": {}}
        for c in (a, b):
            res["configs"][c["name"]] = optimize(c, model, folder, log)
            print("%s %s: %s" % (short, c["name"], json.dumps(res["configs"][c["name"]])), flush=True)
        ratios, times = [], {a["name"]: [], b["name"]: []}
        for r in range(args.rounds):
            order = (a, b) if r % 2 == 0 else (b, a)
            t = {c["name"]: latency(c, model, res["configs"][c["name"]]["plan"], args.repeat, log)
                 for c in order}
            for k, v in t.items():
                times[k].append(v)
            ratios.append(t[b["name"]] / t[a["name"]])
            print("%s round %d: %s %.3f ms, %s %.3f ms, ratio %.3f" % (
                short, r, a["name"], t[a["name"]], b["name"], t[b["name"]], ratios[-1]), flush=True)
        res["ratios"] = ratios
        res["median_ratio"] = statistics.median(ratios)
        res["median_ms"] = {k: statistics.median(v) for k, v in times.items()}
        results.append(res)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    print("\n| model | %s ms | %s ms | %s / %s per round | median | candidates | measuring s | groups |" % (
        a["name"], b["name"], b["name"], a["name"]))
    print("|---|---|---|---|---|---|---|---|")
    for res in results:
        ca, cb = res["configs"][a["name"]], res["configs"][b["name"]]
        print("| %s | %.2f | %.2f | %s | %.2f | %s / %s | %s / %s | %s / %s |" % (
            res["model"], res["median_ms"][a["name"]], res["median_ms"][b["name"]],
            " ".join("%.2f" % x for x in res["ratios"]), res["median_ratio"],
            ca["candidates"], cb["candidates"], ca["measuring_s"], cb["measuring_s"],
            ca["groups"], cb["groups"]))
    print("\nresults in %s" % out)


if __name__ == "__main__":
    main()
