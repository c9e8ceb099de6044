#!/usr/bin/python3
"""GPP against SPP, data parallel and one device on the multi-branch models
(docs/pipeline.md; issue #41), measured for real in this process's cores.

For each model (bench/models/make_multibranch.py, at --size):
  1. `collage pipeline --strategy gpp` and `--strategy spp` on --devices
     (each prints its partitioner's search time, and the four strategies
     simulated on the topology from the same costs for --run-batch samples);
  2. --rounds interleaved rounds, each running, one after the other:
     GPP, SPP, one device and data parallel (`collage run --pipeline ...
     [--baseline ...]`), and with --mpi GPP again as MPI ranks (`mpirun -n
     STAGES --oversubscribe collage run --pipeline P --mpi`), so that load on
     a shared machine hits every strategy alike;
  3. one row per model and strategy, medians over rounds: throughput
     (samples/s), latency per sample (its micro-batch from the first stage
     starting it to the last finishing it; for data parallel the slowest
     replica's median), memory per device (the most loaded device's weights
     and activations: the Session's peak for one micro-batch plus its inputs
     in flight), measured/simulated throughput (the simulator given the
     planner's costs, from step 1, and given each run's own stage costs), and
     the search time (GPP, SPP);
  4. GPP's samples/s over each other strategy's, per round (medians), then the
     8/16/32-device projections (`collage pipeline --simulate`).

The table is printed and, with every round's figures, written as JSON to
--out (default bench/results/pipeline-<UTC time>.json).

  bench/pipeline_bench.py --collage build/app/collage --size small --rounds 5 [--mpi]
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STRATEGIES = ("gpp", "spp", "one-device", "data-parallel")
NAMES = {"gpp": "GPP", "spp": "SPP", "one-device": "one device", "data-parallel": "data parallel",
         "gpp-mpi": "GPP (MPI)"}


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def number(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"no {what} in:\n{text}")
    return float(m.group(1))


def simulated_block(out):
    """`collage pipeline`'s "simulated on this topology" lines, by strategy."""
    sims = {}
    for key, name in (("gpp", "GPP"), ("spp", "SPP"), ("data-parallel", "data parallel"),
                      ("one-device", "one device")):
        m = re.search(rf"(?m)^  {name}: ([0-9.]+) samples/s \(steady ([0-9.]+)\), latency per sample "
                      rf"median ([0-9.]+) ms; per device at most ([0-9.]+) B of weights, ([0-9.]+) B in all",
                      out)
        if m:
            sims[key] = {"samples_per_s": float(m.group(1)), "steady_samples_per_s": float(m.group(2)),
                         "latency_ms": float(m.group(3)), "weights_bytes": float(m.group(4)),
                         "memory_bytes": float(m.group(5))}
    return sims


def run_figures(out, baseline):
    """One `collage run --pipeline` report: throughput, latency, memory, simulated."""
    f = {"samples_per_s": number(r"([0-9.]+) samples/s", out, "throughput"),
         "latency_ms": number(r"latency per sample median ([0-9.]+) ms", out, "latency"),
         "weights_bytes": number(r"(?m)^weights: ([0-9.]+) B", out, "weights")}
    devices = re.findall(r"(\S+) weights ([0-9]+) B, activations ([0-9]+) B",
                         re.search(r"(?m)^memory per device: .*$", out).group(0)
                         if re.search(r"(?m)^memory per device: ", out) else "")
    if not devices:
        sys.exit(f"no memory per device in:\n{out}")
    f["memory"] = {d: {"weights_bytes": int(w), "activation_bytes": int(a)} for d, w, a in devices}
    f["activation_bytes"] = max(int(a) for _, _, a in devices)
    if baseline:
        f["simulated_run_samples_per_s"] = number(
            r"simulated from this run's costs: ([0-9.]+) samples/s", out, "simulated throughput (run)")
    else:
        f["simulated_plan_file_samples_per_s"] = number(
            r"([0-9.]+) samples/s from the plan's stage estimates", out, "simulated throughput (plan)")
        f["simulated_run_samples_per_s"] = number(
            r"([0-9.]+) samples/s from this run's stage costs", out, "simulated throughput (run)")
    return f


def mpi_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI refuses root without consent
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # One machine: shared memory between the ranks, no network probed.
    env.setdefault("OMPI_MCA_btl", "self,vader")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    return env


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
    a.add_argument("--mpi", action="store_true",
                   help="also run GPP as MPI ranks (mpirun -n STAGES --oversubscribe ... --mpi)")
    a.add_argument("--mpirun", default="mpirun")
    a.add_argument("--out", help="the JSON results file (default bench/results/pipeline-<UTC time>.json)")
    o = a.parse_args()
    if o.mpi and not shutil.which(o.mpirun):
        sys.exit(f"--mpi: no {o.mpirun} here (Debian's openmpi-bin)")
    work = tempfile.mkdtemp(prefix="pipeline_bench_")
    try:
        bench(o, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench(o, work):
    started = datetime.datetime.now(datetime.timezone.utc)
    collage = os.path.abspath(o.collage)
    run(["/usr/bin/python3", os.path.join(HERE, "models", "make_multibranch.py"), "--size", o.size, "-o", work])
    strategies = STRATEGIES + (("gpp-mpi",) if o.mpi else ())
    models = []
    for name in o.models:
        model = os.path.join(work, f"{name}_{o.size}.onnx")
        plans, search, sims, stages, micro = {}, {}, {}, {}, {}
        projection = []
        for strategy in ("gpp", "spp"):
            path = os.path.join(work, f"{name}.{strategy}.json")
            out = run([collage, "pipeline", model, "--devices", o.devices, "--batch", str(o.batch),
                       "--measure", o.measure, "--strategy", strategy, "-o", path,
                       "--simulate-samples", str(o.run_batch)]
                      + (["--simulate", o.simulate] if strategy == "gpp" and o.simulate else []))
            plans[strategy] = path
            search[strategy] = number(r"GPP .* \(search ([0-9.e+-]+) s\), SPP" if strategy == "gpp"
                                      else r"SPP .* \(search ([0-9.e+-]+) s\)\n", out,
                                      f"{strategy} search time")
            block = simulated_block(out)
            if strategy == "gpp":
                sims.update({k: v for k, v in block.items() if k != "spp"})
                projection = [l.strip() for l in out.splitlines() if re.match(r"\s+\d+ devices: GPP", l)]
            else:
                sims["spp"] = block.get("spp")
            with open(path) as f:
                pipeline = json.load(f)
            stages[strategy] = len(pipeline["stages"])
            micro[strategy] = pipeline["micro_batch"]
        stages.update({"one-device": 1, "data-parallel": None, "gpp-mpi": stages["gpp"]})
        rounds = []
        for _ in range(o.rounds):
            figures = {}
            for strategy in strategies:
                plan = plans["spp" if strategy == "spp" else "gpp"]
                cmd = [collage, "run", model, "--pipeline", plan, "--batch", str(o.run_batch)]
                env = None
                if strategy in ("one-device", "data-parallel"):
                    cmd += ["--baseline", strategy]
                elif strategy == "gpp-mpi":
                    cmd = [o.mpirun, "-n", str(stages["gpp"]), "--oversubscribe"] + cmd + ["--mpi"]
                    env = mpi_env()
                figures[strategy] = run_figures(run(cmd, env), strategy in ("one-device", "data-parallel"))
            rounds.append(figures)
        rows = []
        for strategy in strategies:
            per = [r[strategy] for r in rounds]
            med = lambda k: statistics.median(f[k] for f in per)
            rate = med("samples_per_s")
            sim = sims.get(strategy) or {}
            if strategy == "gpp-mpi":  # the run's own simulation of the file under MPI's rules
                sim = {"samples_per_s": statistics.median(f["simulated_plan_file_samples_per_s"] for f in per)}
            rows.append({
                "model": name, "strategy": strategy, "stages": stages[strategy],
                "micro_batch": micro["spp" if strategy == "spp" else "gpp"],
                "samples_per_s": rate, "latency_ms": med("latency_ms"),
                "weights_bytes_per_device": max(f["weights_bytes"] for f in per),
                "activation_bytes_per_device": max(f["activation_bytes"] for f in per),
                "simulated_samples_per_s": sim.get("samples_per_s"),
                "simulated_latency_ms": sim.get("latency_ms"),
                "simulated_memory_bytes_per_device": sim.get("memory_bytes"),
                "measured_over_simulated": rate / sim["samples_per_s"] if sim.get("samples_per_s") else None,
                "measured_over_simulated_run_costs": statistics.median(
                    f["samples_per_s"] / f["simulated_run_samples_per_s"] for f in per
                    if f["simulated_run_samples_per_s"] > 0) if any(
                        f["simulated_run_samples_per_s"] > 0 for f in per) else None,
                "search_s": search.get(strategy.replace("-mpi", "")) if strategy.startswith(("gpp", "spp")) else None,
            })
        ratios = {k: statistics.median(r["gpp"]["samples_per_s"] / r[k]["samples_per_s"] for r in rounds)
                  for k in strategies if k != "gpp"}
        models.append({"model": name, "rows": rows, "gpp_over": ratios, "projection": projection,
                       "rounds": rounds, "simulated": sims})
    report(o, started, models)


def fmt(x, spec, unit=""):
    return "-" if x is None else f"{x:{spec}}{unit}"


def mb(x):
    return "-" if x is None else f"{x / 1e6:.3g} MB"


def report(o, started, models):
    title = (f"{o.devices}, {o.size} models, batch {o.batch}, {o.rounds} interleaved rounds of "
             f"{o.run_batch} samples, {started:%Y-%m-%d %H:%M} UTC")
    print(f"\n{title}\n")
    print("| model | strategy | stages | samples/s | latency per sample (ms) | weights per device "
          "| activations per device | measured/simulated (planner's costs) | measured/simulated "
          "(run's costs) | search (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in models:
        for r in m["rows"]:
            print(f"| {r['model']} | {NAMES[r['strategy']]} | {fmt(r['stages'], 'd')} | "
                  f"{r['samples_per_s']:.1f} | {r['latency_ms']:.3f} | {mb(r['weights_bytes_per_device'])} | "
                  f"{mb(r['activation_bytes_per_device'])} | {fmt(r['measured_over_simulated'], '.2f')} | "
                  f"{fmt(r['measured_over_simulated_run_costs'], '.2f')} | {fmt(r['search_s'], '.3f')} |")
    others = [k for k in models[0]["gpp_over"]] if models else []
    print("\nGPP's samples/s over each other's (medians over rounds):\n")
    print("| model | " + " | ".join(f"GPP/{NAMES[k]}" for k in others) + " |")
    print("|---|" + "---|" * len(others))
    for m in models:
        print(f"| {m['model']} | " + " | ".join(f"{m['gpp_over'][k]:.2f}x" for k in others) + " |")
    print("\nprojection (simulated from the same costs):")
    for m in models:
        for line in m["projection"]:
            print(f"  {m['model']}: {line}")
    path = o.out or os.path.join(HERE, "results", f"pipeline-{started:%Y%m%dT%H%M%SZ}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"title": title, "args": vars(o), "models": models}, f, indent=1)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
