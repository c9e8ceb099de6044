#!/usr/bin/python3
"""GPP against SPP, data parallel and one device on the multi-branch models
(docs/pipeline.md; issue #41), measured for real in this process's cores.

For each model (bench/models/make_multibranch.py, at --size):
  1. `collage pipeline --strategy gpp` and `--strategy spp` on --devices
     (the partitioner's search time is printed by each);
  2. --rounds interleaved rounds, each running, one after the other:
     GPP, SPP, one device and data parallel (`collage run --pipeline ...
     [--baseline ...]`), so that load on a shared machine hits every
     strategy alike;
  3. per round, the ratios of GPP's samples/s to each other's; the table
     gives their medians (ratios only: absolute figures on a loaded machine
     mean little), the weights per device of each strategy, the search
     times;
  4. the simulator against the GPP runs: measured samples/s beside the
     simulated ones, from the plan's stage estimates and from each run's own
     stage costs (compute, hand-over, start), on the measured link (`collage
     link` stores it; `collage pipeline` measures it when the database has
     none), as medians over rounds; then the 8/16/32-device projections.

  bench/pipeline_bench.py --collage build/app/collage --size small --rounds 5
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def number(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"no {what} in:\n{text}")
    return float(m.group(1))


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--collage", default="build/app/collage")
    a.add_argument("--size", default="small", choices=["small", "bench"])
    a.add_argument("--models", nargs="*", default=["two_tower", "dlrm", "uno"])
    a.add_argument("--devices", default="cpu:2")
    a.add_argument("--batch", type=int, default=32)
    a.add_argument("--run-batch", type=int, default=64, help="samples per timed run")
    a.add_argument("--rounds", type=int, default=5)
    a.add_argument("--measure", default="in-process", choices=["in-process", "worker"])
    a.add_argument("--simulate", default="8,16,32")
    o = a.parse_args()
    work = tempfile.mkdtemp(prefix="pipeline_bench_")
    try:
        bench(o, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench(o, work):
    run(["/usr/bin/python3", os.path.join(HERE, "models", "make_multibranch.py"), "--size", o.size, "-o", work])
    rows = []
    for name in o.models:
        model = os.path.join(work, f"{name}_{o.size}.onnx")
        plans, search = {}, {}
        for strategy in ("gpp", "spp"):
            path = os.path.join(work, f"{name}.{strategy}.json")
            out = run([o.collage, "pipeline", model, "--devices", o.devices, "--batch", str(o.batch),
                       "--measure", o.measure, "--strategy", strategy, "-o", path]
                      + (["--simulate", o.simulate] if strategy == "gpp" and o.simulate else []))
            plans[strategy] = path
            search["gpp"] = number(r"GPP .* \(search ([0-9.e+-]+) s\), SPP", out, "GPP search time")
            search["spp"] = number(r"SPP .* \(search ([0-9.e+-]+) s\)\n", out, "SPP search time")
            if strategy == "gpp":
                projection = [l.strip() for l in out.splitlines() if re.match(r"\s+\d+ devices: GPP", l)]
        ratios = {"spp": [], "one-device": [], "data-parallel": []}
        sim, weights = {"measured": [], "plan": [], "run": []}, {}
        for _ in range(o.rounds):
            rate = {}
            for strategy, extra in (("gpp", []), ("spp", []), ("one-device", ["--baseline", "one-device"]),
                                    ("data-parallel", ["--baseline", "data-parallel"])):
                plan = plans["spp" if strategy == "spp" else "gpp"]
                out = run([o.collage, "run", model, "--pipeline", plan, "--batch", str(o.run_batch)] + extra)
                rate[strategy] = number(r"([0-9.]+) samples/s", out, "throughput")
                weights[strategy] = number(r"(?m)^weights: ([0-9.]+) B", out, "weights")
                if strategy == "gpp":
                    sim["measured"].append(rate["gpp"])
                    sim["plan"].append(number(r"([0-9.]+) samples/s from the plan's stage estimates", out,
                                              "simulated throughput (plan)"))
                    sim["run"].append(number(r"([0-9.]+) samples/s from this run's stage costs", out,
                                             "simulated throughput (run)"))
            for k in ratios:
                ratios[k].append(rate["gpp"] / rate[k])
        rows.append((name, {k: statistics.median(v) for k, v in ratios.items()}, weights, search,
                     {k: statistics.median(v) for k, v in sim.items()}, projection))
    print(f"\n{o.devices}, {o.size} models, batch {o.batch}, {o.rounds} interleaved rounds of {o.run_batch} samples\n")
    print("| model | GPP/SPP | GPP/data parallel | GPP/one device | weights per device GPP / SPP / DP / one (B) "
          "| search GPP / SPP (s) |")
    print("|---|---|---|---|---|---|")
    for name, r, w, s, _, _ in rows:
        print(f"| {name} | {r['spp']:.2f}x | {r['data-parallel']:.2f}x | {r['one-device']:.2f}x | "
              f"{w['gpp']:.0f} / {w['spp']:.0f} / {w['data-parallel']:.0f} / {w['one-device']:.0f} | "
              f"{s['gpp']:.3f} / {s['spp']:.3f} |")
    print("\nsimulator against the GPP runs (samples/s, medians over rounds):\n")
    print("| model | measured | simulated from the plan | measured/simulated | simulated from the run's "
          "stage costs | measured/simulated |")
    print("|---|---|---|---|---|---|")
    for name, *_, sm, _ in rows:
        print(f"| {name} | {sm['measured']:.1f} | {sm['plan']:.1f} | {sm['measured'] / sm['plan']:.2f} | "
              f"{sm['run']:.1f} | {sm['measured'] / sm['run']:.2f} |")
    print("\nprojection (simulated from the same costs):")
    for name, *_, projection in rows:
        for line in projection:
            print(f"  {name}: {line}")


if __name__ == "__main__":
    main()
