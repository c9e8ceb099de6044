#!/usr/bin/python3
"""Benchmark harness: the Collage plan against its baselines and two peers.

For each zoo model it runs `collage optimize` (cold, then warm database), which
writes the op-level plan and the baseline plans (only_<backend>.json,
priority.json) from the same measurements; then it times, on the same input
and the same thread count, interleaved in rounds so that drift hits every
runner alike:

  collage        the op-level plan (`collage run --plan`)
  only_onednn, only_openblas, only_native, priority   the baseline plans
  onnxruntime    ONNX Runtime's CPU provider (npm onnxruntime-node, bench/peers/ort_runner.js)
  pytorch        PyTorch eager (Debian's python3-torch, bench/peers/torch_runner.py)

Every figure is a ratio to the Collage plan measured in the same run. Results
go to bench/results/<timestamp>/: results.md, results.csv, rounds.csv (raw
per-round timings), chart.png, logs/. See bench/README.md, "Placement and
peers", for how to read them.

Run with /usr/bin/python3 (it needs numpy, onnx, matplotlib; the PyTorch runner
needs torch and torchvision). Install the ONNX Runtime peer once with
`cd bench && npm install --ignore-scripts`.
"""

import argparse
import csv
import datetime
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
SMALL_DIR = os.path.join(REPO, "resources", "models")
BASELINES = ["only_onednn", "only_openblas", "only_native", "priority"]
PEERS = ["onnxruntime", "pytorch"]
# --contention: who also runs beside a competing busy process, and the suffix
# of those runs' runner names.
CONTENTION_RUNNERS = ["collage", "onnxruntime"]
LOAD = "+load"


class BusyProcess:
    """A competing process that keeps one core busy while the block runs."""

    def __enter__(self):
        self.p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)  # let it reach the scheduler before the timed runs
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()
FULL_MODELS = ["resnet50", "resnext50_32x4d", "mobilenet_v2", "inception_v3", "r3d_18", "dcgan",
               "bert_base", "resnext50_32x4d@8",
               # the widened zoo (issue 13): shapes nobody tuned the backends for
               "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0", "regnet_y_400mf",
               "convnext_tiny", "vit_b_16", "deeplabv3_mobilenet_v3_large", "gpt2"]
QUICK_MODELS = ["resnet50", "bert_base"]
RTOL, ATOL_REL = 1e-3, 1e-4  # output check: |a-b| <= ATOL_REL*max|ref| + RTOL*|ref|

T0 = time.time()


def log(msg):
    print("[%7.1f s] %s" % (time.time() - T0, msg), flush=True)


def zoo_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "collage-studio", "zoo")


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

class Model:
    def __init__(self, spec, small):
        name, _, batch = spec.partition("@")
        self.base = name
        self.batch = int(batch or 1)
        if small:
            self.torch_name = "bert_small" if name == "bert_base" else name + "_small"
            self.stem = self.torch_name
            self.dir = SMALL_DIR
        else:
            self.torch_name = name
            self.stem = name + ("_b%d" % self.batch if self.batch != 1 else "")
            self.dir = zoo_dir()
        self.label = self.stem
        self.onnx = os.path.join(self.dir, self.stem + ".onnx")
        self.input = os.path.join(self.dir, self.stem + ".input_0.pb")
        self.output = os.path.join(self.dir, self.stem + ".output_0.pb")

    def shape_args(self):
        """--input-shape for collage: the zoo's models declare a dynamic batch,
        which collage binds to 1 unless told (the batch-8 variant needs it)."""
        t = onnx.TensorProto()
        with open(self.input, "rb") as f:
            t.ParseFromString(f.read())
        if not t.name:
            return []
        return ["--input-shape", "%s=%s" % (t.name, "x".join(str(d) for d in t.dims))]

    def ensure(self, small):
        if all(os.path.exists(p) for p in (self.onnx, self.input, self.output)):
            return True
        if small:
            return False
        log("%s: not in the zoo, exporting it (bench/models/export_zoo.py)" % self.label)
        cmd = ["/usr/bin/python3", os.path.join(HERE, "models", "export_zoo.py"),
               "--models", self.base, "--batch", str(self.batch)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            log("%s: export failed: %s" % (self.label, r.stderr.strip().splitlines()[-1:]))
        return all(os.path.exists(p) for p in (self.onnx, self.input, self.output))


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return onnx.numpy_helper.to_array(t)


def compare(out, ref):
    """(ok, max abs error, max relative-to-scale error)."""
    if out is None:
        return False, float("nan"), "no output"
    if out.size != ref.size:
        return False, float("nan"), "shape %s != %s" % (out.shape, ref.shape)
    out = out.reshape(ref.shape).astype(np.float64)
    ref = ref.astype(np.float64)
    err = np.abs(out - ref)
    scale = float(np.max(np.abs(ref))) or 1.0
    ok = bool(np.all(err <= ATOL_REL * scale + RTOL * np.abs(ref)))
    return ok, float(err.max()), "max abs err %.3g (output scale %.3g)" % (err.max(), scale)


# --------------------------------------------------------------------------
# The collage CLI
# --------------------------------------------------------------------------

class Collage:
    def __init__(self, exe, threads, db, logdir):
        self.exe, self.threads, self.db, self.logdir = exe, threads, db, logdir

    def cmd(self, *args):
        return [self.exe, "--threads", str(self.threads)] + list(args)

    def call(self, args, logname=None, timeout=None):
        t = time.time()
        for attempt in range(30):
            try:
                r = subprocess.run(self.cmd(*args), capture_output=True, text=True, timeout=timeout)
                break
            except OSError as e:
                # build/ is shared: a relink of the binary makes it briefly
                # unexecutable (EACCES, ETXTBSY, ENOENT); wait for it.
                if attempt == 29:
                    raise
                log("%s unavailable (%s), retrying in 10 s" % (self.exe, e))
                time.sleep(10)
        wall = time.time() - t
        text = r.stdout + r.stderr
        if logname:
            with open(os.path.join(self.logdir, logname), "a") as f:
                f.write("$ %s\n%s\n[rc %d, %.2f s]\n\n" % (" ".join(self.cmd(*args)), text, r.returncode, wall))
        return r.returncode, text, wall

    def flops(self, model):
        rc, text, _ = self.call(["inspect", model.onnx] + model.shape_args(), "inspect.log")
        m = re.search(r"flops:\s+([\d.]+)\s*([KMGT]?)FLOP", text)
        if not m:
            return None
        return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]

    def optimize(self, model, outdir, tag):
        plan = os.path.join(outdir, "plan.json")
        base = os.path.join(outdir, "baselines")
        rc, text, wall = self.call(["optimize", model.onnx] + model.shape_args() + ["--db", self.db, "-o", plan,
                                    "--baseline-plans", base, "--op-level"], "%s.optimize.log" % model.label)
        info = {"rc": rc, "wall_s": wall, "tag": tag}
        m = re.search(r"predicted total ([\d.]+) ms; measuring ([\d.]+) s, search ([\d.]+) s.*?total ([\d.]+) s", text)
        if m:
            info.update(predicted_ms=float(m.group(1)), measuring_s=float(m.group(2)),
                        search_s=float(m.group(3)), total_s=float(m.group(4)))
        m = re.search(r"measured (\d+) kernels in [\d.]+ s \((\d+) from the database, (\d+) failed", text)
        if m:
            info.update(kernels=int(m.group(1)), cached=int(m.group(2)), failed=int(m.group(3)))
        info["warm"] = "warm database: nothing measured" in text or (
            info.get("kernels") is not None and info.get("kernels") == info.get("cached"))
        if rc != 0:
            info["error"] = text.strip().splitlines()[-1] if text.strip() else "rc %d" % rc
        plans = {"collage": plan}
        for b in BASELINES:
            p = os.path.join(base, b + ".json")
            if os.path.exists(p):
                plans[b] = p
        info["plans"] = plans
        # Baselines that cannot run: the optimizer's reason, first line.
        info["uncovered"] = {}
        for b in BASELINES:
            m = re.search(r"^\s*%s\s+cannot cover the model: (.*)$" % re.escape(b.replace("_", " ")), text, re.M)
            if m:
                info["uncovered"][b] = m.group(1)[:160]
        return info

    def graph_level(self, model, outdir, budget):
        """`optimize` with its graph-level search, from the same database: the plan, the
        search's generations (for the chart) and its summary line."""
        plan = os.path.join(outdir, "graph_level_plan.json")
        rc, text, wall = self.call(["optimize", model.onnx] + model.shape_args() +
                                   ["--db", self.db, "-o", plan, "--budget", budget],
                                   "%s.graph_level.log" % model.label)
        info = {"rc": rc, "wall_s": wall, "plan": plan if rc == 0 else None, "generations": []}
        budget_s = None
        m = re.search(r"budget ([\d.]+) s", text)
        if m:
            budget_s = float(m.group(1))
        for g in re.finditer(r"^generation +(\d+): best +([\d.]+) ms \(([\d.]+)x the start\), mean +([\d.]+) ms, +"
                             r"(\d+) plans run, +(\d+) cache hits, (\d+):(\d+) left", text, re.M):
            left = int(g.group(7)) * 60 + int(g.group(8))
            info["generations"].append({"generation": int(g.group(1)), "best_ms": float(g.group(2)),
                                        "best_relative": float(g.group(3)), "mean_ms": float(g.group(4)),
                                        "plans_run": int(g.group(5)), "cache_hits": int(g.group(6)),
                                        "elapsed_s": (budget_s - left) if budget_s else None})
        m = re.search(r"^graph-level: (.*?); (\d+) generations, (\d+) plans run, (\d+) cache hits, (\d+) could not "
                      r"run, stopped: (.*?) after ([\d.]+) s \(best found at ([\d.]+) s\)", text, re.M)
        if m:
            info.update(verdict=m.group(1), generations_n=int(m.group(2)), plans_run=int(m.group(3)),
                        cache_hits=int(m.group(4)), failed=int(m.group(5)), stop=m.group(6),
                        search_s=float(m.group(7)), best_at_s=float(m.group(8)))
        if rc == 0:
            with open(plan) as f:
                info["summary"] = json.load(f).get("graph_level", {})
        else:
            info["error"] = text.strip().splitlines()[-1] if text.strip() else "rc %d" % rc
        return info

    def run_round(self, model, plan, repeat, extra=(), logname=None):
        """One `collage run --plan` process: (median, min, max, text, rc)."""
        args = (["run", model.onnx] + model.shape_args() +
                ["--plan", plan, "--repeat", str(repeat), "--input", model.input] + list(extra))
        rc, text, _ = self.call(args, logname)
        m = re.search(r"latency: median ([\d.]+) ms, spread ([\d.]+)% over (\d+) run\(s\) \(min ([\d.]+), max ([\d.]+)\)",
                      text)
        if not m:
            return None, None, None, text, rc
        return float(m.group(1)), float(m.group(4)), float(m.group(5)), text, rc


# --------------------------------------------------------------------------
# Peers: long-lived subprocesses speaking "run" / "output PATH" / "quit"
# --------------------------------------------------------------------------

class Peer:
    def __init__(self, name, argv, env=None, ready_timeout=600):
        self.name = name
        self.error = None
        self.version = ""
        try:
            self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
            line = self._readline()
            if not line.startswith("ready"):
                raise RuntimeError(line or self.p.stderr.read()[-400:])
            self.version = line[len("ready"):].strip()
        except Exception as e:  # noqa: BLE001 - a peer that cannot start is reported, not fatal
            self.error = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
            self.close()

    def _readline(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("exited: " + self.p.stderr.read()[-400:].strip())
        return line.strip()

    def _ask(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self._readline()
        if line.startswith("error"):
            raise RuntimeError(line)
        return line

    def run(self):
        return float(self._ask("run").split()[1])

    def output(self, path):
        self._ask("output " + path)
        return np.fromfile(path, dtype=np.float32)

    def close(self):
        p = getattr(self, "p", None)
        if p and p.poll() is None:
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001
                p.kill()


def start_peers(model, threads, which, ort_optimized=None):
    peers = {}
    if "onnxruntime" in which:
        if not os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node")):
            peers["onnxruntime"] = "bench/node_modules/onnxruntime-node missing: cd bench && npm install --ignore-scripts"
        else:
            argv = ["node", os.path.join(HERE, "peers", "ort_runner.js"), model.onnx, model.input, str(threads)]
            peers["onnxruntime"] = Peer("onnxruntime", argv + ([ort_optimized] if ort_optimized else []))
    if "pytorch" in which:
        peers["pytorch"] = Peer("pytorch", ["/usr/bin/python3", os.path.join(HERE, "peers", "torch_runner.py"),
                                            model.torch_name, model.input, str(threads)])
    return peers


def ort_node_count(path):
    """Nodes of the graph ONNX Runtime runs after its optimisations (None if it
    saved none): the peer's kernel count, beside the plan's."""
    if not os.path.exists(path):
        return None
    try:
        return len(onnx.load(path, load_external_data=False).graph.node)
    except Exception:  # a graph with contrib ops still loads; anything else: unknown
        return None


# --------------------------------------------------------------------------
# Practical peak: a large OpenBLAS sgemm through numpy (Debian's numpy links
# libblas.so.3, which is OpenBLAS here), with the same thread count.
# --------------------------------------------------------------------------

PEAK_CODE = r"""
import time, numpy as np
n = %d
a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
a @ b
best = 1e9
for _ in range(%d):
    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
print(2.0 * n ** 3 / best / 1e9)
"""


def measure_peak(threads, n=2048, reps=5):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    try:
        r = subprocess.run(["/usr/bin/python3", "-c", PEAK_CODE % (n, reps)], capture_output=True, text=True,
                           env=env, timeout=300)
        return float(r.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        log("peak measurement failed: %s" % e)
        return None


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------

def summarize(round_medians):
    v = sorted(x for x in round_medians if x is not None)
    if not v:
        return None, None
    med = statistics.median(v)
    q1, q3 = np.percentile(v, [25, 75])
    return med, (100.0 * (q3 - q1) / med if med else None)


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# --------------------------------------------------------------------------
# One model
# --------------------------------------------------------------------------

def bench_model(model, args, collage, outdir, peak_gflops):
    mdir = os.path.join(outdir, model.label)
    os.makedirs(mdir, exist_ok=True)
    res = {"model": model.label, "runners": {}, "optimize": [], "notes": []}
    res["flops"] = collage.flops(model)
    ref = read_pb(model.output)

    # Issue 5: cold (or whatever the database holds) then warm optimisation.
    log("%s: collage optimize (1st run, database %s)" % (model.label, collage.db))
    first = collage.optimize(model, mdir, "first")
    res["optimize"].append(first)
    if first["rc"] != 0:
        res["notes"].append("collage optimize failed: %s" % first.get("error"))
        log("%s: optimize failed: %s" % (model.label, first.get("error")))
        return res
    log("%s: 1st optimize %.1f s (%s kernels measured, %s cached); predicted %.3f ms"
        % (model.label, first.get("total_s", first["wall_s"]), first.get("kernels"), first.get("cached"),
           first.get("predicted_ms", float("nan"))))
    second = collage.optimize(model, mdir, "second")
    res["optimize"].append(second)
    log("%s: 2nd optimize %.2f s (search %.3f s)%s" % (model.label, second.get("total_s", second["wall_s"]),
                                                       second.get("search_s", float("nan")),
                                                       ", warm database" if second.get("warm") else ""))
    plans = dict(first["plans"])
    if args.no_baselines:
        plans = {"collage": plans["collage"]}
    if args.graph_level:
        log("%s: collage optimize --graph-level --budget %s" % (model.label, args.graph_level))
        gl = collage.graph_level(model, mdir, args.graph_level)
        res["graph_level"] = gl
        if gl.get("plan"):
            plans["graph-level"] = gl["plan"]
            log("%s: graph-level: %s (%s generations, %s plans run, stopped: %s after %s s)"
                % (model.label, gl.get("verdict"), gl.get("generations_n"), gl.get("plans_run"), gl.get("stop"),
                   gl.get("search_s")))
        else:
            res["notes"].append("graph-level search failed: %s" % gl.get("error"))
    res["uncovered"] = first["uncovered"]
    for b, why in first["uncovered"].items():
        res["notes"].append("%s cannot cover the model: %s" % (b, why))
    collage.call(["explain", plans["collage"], "--model", model.onnx, "--db", collage.db],
                 "%s.explain.txt" % model.label)

    # Output checks for the plans: `collage run --expect` against PyTorch's output.
    for name, plan in plans.items():
        med, _, _, text, rc = collage.run_round(model, plan, 1, ["--expect", model.output],
                                                "%s.check.log" % model.label)
        m = re.search(r"^check \S+: (.*)$", text, re.M)
        last = text.strip().splitlines()[-1] if text.strip() else "rc %d" % rc
        ok = rc == 0 and med is not None
        msg = (m.group(1) if m else last)[:200]
        # `--expect` uses a fixed atol of 1e-5; the bench's tolerance is
        # relative to the output's scale (like the peers'), judged on the
        # reported max abs error (stricter than the elementwise rule).
        e = re.search(r"MISMATCH: \d+ of \d+ elements differ \(max abs error ([\d.eE+-]+)", msg)
        scale = float(np.max(np.abs(ref))) or 1.0
        if not ok and med is not None and e and float(e.group(1)) <= ATOL_REL * scale:
            ok = True
            msg = "ok within bench tolerance: max abs err %.3g (output scale %.3g)" % (float(e.group(1)), scale)
        elif ok:
            msg = "ok: " + msg
        res["runners"][name] = {"check_ok": ok, "check": msg, "rounds": []}
        if med is None:
            res["runners"][name]["error"] = last[:200]

    ort_optimized = os.path.join(mdir, "ort_optimized.onnx")
    peers = start_peers(model, args.threads, args.peers, ort_optimized)
    with open(plans["collage"]) as f:
        res["kernels"] = len(json.load(f)["groups"])
    res["ort_nodes"] = ort_node_count(ort_optimized)
    for name, p in peers.items():
        if isinstance(p, str) or p.error:
            res["runners"][name] = {"error": p if isinstance(p, str) else p.error, "rounds": [], "check_ok": False}
            log("%s: %s unavailable: %s" % (model.label, name, res["runners"][name]["error"]))
            continue
        out = p.output(os.path.join(mdir, name + ".out.bin"))
        ok, err, msg = compare(out, ref)
        res["runners"][name] = {"check_ok": ok, "check": msg, "rounds": [], "version": p.version}
        for _ in range(args.warmup):
            p.run()
    live_peers = {n: p for n, p in peers.items() if not isinstance(p, str) and not p.error}
    runners = [n for n in plans if "error" not in res["runners"][n]] + list(live_peers)

    # Under --contention, the plan and the peers also run beside a competing
    # busy process, in the same rounds, each right after its quiet turn.
    loaded = [n for n in runners if n in CONTENTION_RUNNERS] if args.contention else []
    for name in loaded:
        res["runners"][name + LOAD] = {"check_ok": res["runners"][name].get("check_ok"),
                                       "check": "as %s" % name, "rounds": []}

    runners_shown = runners + [n + LOAD for n in loaded]

    def one_turn(name, r, key):
        if name in live_peers:
            ts = [live_peers[name].run() for _ in range(args.runs)]
            res["runners"][key]["rounds"].append(
                {"round": r, "median": statistics.median(ts), "min": min(ts), "max": max(ts), "samples": ts})
        else:
            med, mn, mx, text, rc = collage.run_round(model, plans[name], args.runs)
            res["runners"][key]["rounds"].append({"round": r, "median": med, "min": mn, "max": mx})

    # Interleaved rounds: every runner does `runs` inferences, the order rotates.
    for r in range(args.rounds):
        order = runners[r % len(runners):] + runners[:r % len(runners)]
        for name in order:
            one_turn(name, r, name)
            if name in loaded:
                with BusyProcess():
                    one_turn(name, r, name + LOAD)
        line = ", ".join("%s %.2f" % (n, res["runners"][n]["rounds"][-1]["median"] or float("nan"))
                         for n in runners_shown)
        log("%s: round %d/%d (ms): %s" % (model.label, r + 1, args.rounds, line))
    for p in live_peers.values():
        p.close()

    for name, rr in res["runners"].items():
        med, spread = summarize([x["median"] for x in rr["rounds"]])
        rr["median_ms"], rr["spread_pct"] = med, spread
        if med and res["flops"]:
            rr["gflops"] = res["flops"] / (med * 1e-3) / 1e9
            rr["peak_frac"] = rr["gflops"] / peak_gflops if peak_gflops else None
    cm = res["runners"].get("collage", {}).get("median_ms")
    for rr in res["runners"].values():
        rr["ratio"] = (rr["median_ms"] / cm) if (cm and rr.get("median_ms")) else None
    res["predicted_ms"] = first.get("predicted_ms")

    # Per-group measured times of the plan (one traced run) for the loss analysis.
    tpath = os.path.join(mdir, "trace.json")
    collage.run_round(model, plans["collage"], args.trace_runs, ["--trace", tpath], "%s.trace.log" % model.label)
    res["groups"] = group_times(tpath, plans["collage"])
    return res


def group_times(trace_path, plan_path):
    """Per group of the plan: backend, pattern, nodes, predicted us, measured median us."""
    try:
        with open(plan_path) as f:
            plan = json.load(f)
    except Exception:  # noqa: BLE001
        return []
    groups = [{"group": i, "backend": g["backend"], "pattern": g.get("pattern", ""), "nodes": g.get("nodes", []),
               "predicted_us": g.get("cost_ns", 0) / 1e3, "measured": []} for i, g in enumerate(plan["groups"])]
    try:
        with open(trace_path) as f:
            t = json.load(f)
        for e in t["traceEvents"] if isinstance(t, dict) else t:
            a = e.get("args", {})
            if e.get("ph") == "X" and "group" in a and 0 <= a["group"] < len(groups):
                if a.get("run", 2) > 1:  # the first run is a cold start
                    groups[a["group"]]["measured"].append(e["dur"])
    except Exception:  # noqa: BLE001 - no trace: predicted costs only
        pass
    for g in groups:
        g["measured_us"] = statistics.median(g["measured"]) if g["measured"] else None
        del g["measured"]
    return groups


def explain_alternatives(logdir, label):
    """group index -> list of (backend, us) alternatives from `collage explain`."""
    alts, cur = {}, None
    try:
        text = open(os.path.join(logdir, "%s.explain.txt" % label)).read()
    except OSError:
        return alts
    for line in text.splitlines():
        m = re.match(r"group (\d+) ", line)
        if m:
            cur = int(m.group(1))
            alts[cur] = []
        m = re.match(r"\s+vs (\S+)\s+([\d.]+) (us|ms)", line)
        if m and cur is not None:
            alts[cur].append((m.group(1), float(m.group(2)) * (1e3 if m.group(3) == "ms" else 1)))
    return alts


# --------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------

def fmt(x, spec="%.2f", none="—"):
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else spec % x


def contention_table(results):
    """How much each runner slows beside a busy process: per round, its loaded
    median over its quiet one (taken right before), then the median of those."""
    L = ["## Under contention", "",
         "Each round runs every runner quietly, and the plan and ONNX Runtime again right after beside a "
         "process that keeps one core busy. Slowdown = loaded / quiet, per round; the cell is the median "
         "(min-max) over the rounds. Lower is more robust.", "",
         "| model | " + " | ".join("%s slowdown" % n for n in CONTENTION_RUNNERS) +
         " | plan slowdown / ONNX Runtime's |",
         "| --- |" + " --- |" * (len(CONTENTION_RUNNERS) + 1)]
    for res in results:
        cells, medians = [], {}
        for n in CONTENTION_RUNNERS:
            quiet = {x["round"]: x["median"] for x in res["runners"].get(n, {}).get("rounds", [])}
            load = {x["round"]: x["median"] for x in res["runners"].get(n + LOAD, {}).get("rounds", [])}
            ratios = [load[r] / quiet[r] for r in load if quiet.get(r) and load[r]]
            if ratios:
                medians[n] = statistics.median(ratios)
                cells.append("%.2fx (%.2f-%.2f)" % (medians[n], min(ratios), max(ratios)))
            else:
                cells.append("—")
        rel = (medians["collage"] / medians["onnxruntime"]
               if "collage" in medians and "onnxruntime" in medians else None)
        L.append("| %s | %s | %s |" % (res["model"], " | ".join(cells), fmt(rel, "%.2f")))
    L.append("")
    return L


def write_reports(results, args, outdir, peak):
    runners = ["collage"] + (["graph-level"] if args.graph_level else []) + BASELINES + PEERS
    if args.contention:
        runners += [n + LOAD for n in CONTENTION_RUNNERS]
    # CSV: model x runner.
    with open(os.path.join(outdir, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "runner", "median_ms", "spread_pct", "ratio_to_collage", "gflops", "peak_fraction",
                    "output_ok", "note"])
        for res in results:
            for n in runners:
                rr = res["runners"].get(n)
                if rr is None:
                    continue
                w.writerow([res["model"], n, fmt(rr.get("median_ms"), "%.4f", ""), fmt(rr.get("spread_pct"), "%.1f", ""),
                            fmt(rr.get("ratio"), "%.3f", ""), fmt(rr.get("gflops"), "%.2f", ""),
                            fmt(rr.get("peak_frac"), "%.3f", ""), int(bool(rr.get("check_ok"))),
                            rr.get("error", "") or ("" if rr.get("check_ok") else rr.get("check", ""))])
    with open(os.path.join(outdir, "rounds.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "runner", "round", "round_median_ms", "round_min_ms", "round_max_ms", "samples_ms"])
        for res in results:
            for n, rr in res["runners"].items():
                for x in rr["rounds"]:
                    w.writerow([res["model"], n, x["round"], x["median"], x["min"], x["max"],
                                " ".join("%.4f" % s for s in x.get("samples", []))])
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "peak_gflops": peak, "results": results}, f, indent=1, default=str)

    L = []
    L.append("# Collage bench, %s" % os.path.basename(outdir))
    L.append("")
    L.append("%d thread(s); %d rounds x %d runs per runner, interleaved; practical peak (numpy/OpenBLAS sgemm "
             "2048^3, %d threads): %s GFLOP/s. Cells: median ms (spread %%) and ratio to the Collage plan "
             "(>1: slower than Collage); `%%pk`: achieved GFLOP/s as a fraction of that peak; "
             "**FAIL**: output differs from PyTorch's saved output."
             % (args.threads, args.rounds, args.runs, args.threads, fmt(peak, "%.1f")))
    L.append("")
    L.append("| model | " + " | ".join(runners) + " |")
    L.append("| --- |" + " --- |" * len(runners))
    ratios = {n: [] for n in runners}
    for res in results:
        cells = []
        for n in runners:
            rr = res["runners"].get(n)
            if rr is None:
                cells.append("n/a" if n in res.get("uncovered", {}) else "—")
                continue
            if rr.get("median_ms") is None:
                why = rr.get("error") or res.get("uncovered", {}).get(n) or "not run"
                cells.append("n/a" if n in res.get("uncovered", {}) else "err: %s" % why[:40])
                continue
            c = "%s ms (%s%%)" % (fmt(rr["median_ms"], "%.3g"), fmt(rr.get("spread_pct"), "%.0f"))
            if n != "collage" and rr.get("ratio") is not None:  # none when the plan did not run
                c += " **%.2fx**" % rr["ratio"]
                ratios[n].append(rr["ratio"])
            if rr.get("peak_frac") is not None:
                c += " %.0f%%pk" % (100 * rr["peak_frac"])
            if not rr.get("check_ok"):
                c += " **FAIL**"
            cells.append(c)
        L.append("| %s | %s |" % (res["model"], " | ".join(cells)))
    L.append("| geomean ratio | 1 | " + " | ".join(fmt(geomean(ratios[n]), "%.2fx") for n in runners[1:]) + " |")
    L.append("")
    L.append("`n/a`: the backend cannot cover the model (the optimizer names the node). Ratios > 1 mean the "
             "runner is slower than the Collage plan.")
    L.append("")

    L.append("## Optimizer (issue 5)")
    L.append("")
    L.append("| model | plan ms | best baseline | plan / best | predicted ms | measured / predicted | "
             "kernels (ORT nodes) | 1st optimize s (measuring, search) | 2nd optimize wall s (search) | verdict |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for res in results:
        c = res["runners"].get("collage", {})
        base = [(n, res["runners"][n]) for n in BASELINES if res["runners"].get(n, {}).get("median_ms")]
        best = min(base, key=lambda kv: kv[1]["median_ms"]) if base else None
        o1 = res["optimize"][0] if res["optimize"] else {}
        o2 = res["optimize"][1] if len(res["optimize"]) > 1 else {}
        pm = res.get("predicted_ms")
        cm = c.get("median_ms")
        verdict = "—"
        if best and cm:
            r = cm / best[1]["median_ms"]
            noise = max(c.get("spread_pct") or 0, best[1].get("spread_pct") or 0) / 100
            verdict = "ok" if r <= 1.0 else ("within noise" if r <= 1 + noise else "LOSS: see below")
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            res["model"], fmt(cm, "%.3g"),
            ("%s %s" % (best[0], fmt(best[1]["median_ms"], "%.3g"))) if best else "—",
            fmt(cm / best[1]["median_ms"] if best and cm else None, "%.3f"),
            fmt(pm, "%.3g"), fmt(cm / pm if cm and pm else None, "%.2f"),
            "%s (%s)" % (fmt(res.get("kernels"), "%d"), fmt(res.get("ort_nodes"), "%d")),
            "%s (%s, %s)%s" % (fmt(o1.get("total_s"), "%.1f"), fmt(o1.get("measuring_s"), "%.1f"),
                               fmt(o1.get("search_s"), "%.3f"),
                               " cold" if o1.get("cached") == 0 and o1.get("kernels") else
                               (" warm" if o1.get("warm") else "")),
            "%s (%s)%s" % (fmt(o2.get("wall_s"), "%.1f"), fmt(o2.get("search_s"), "%.3f"),
                           " warm" if o2.get("warm") else ""),
            verdict))
    L.append("")

    if args.graph_level:
        L.extend(graph_level_table(results))
    if args.contention:
        L.extend(contention_table(results))
    fails = [(r["model"], n, rr.get("check") or rr.get("error", ""))
             for r in results for n, rr in r["runners"].items() if not rr.get("check_ok")]
    L.append("## Output checks")
    L.append("")
    if fails:
        L.append("Against PyTorch's saved output (plans: `collage run --expect`, rtol 1e-3 / atol 1e-5; peers: "
                 "rtol 1e-3 / atol 1e-4 x output scale). A fast plan with a wrong output is a failure:")
        L.append("")
        for m, n, why in fails:
            L.append("- **%s / %s**: %s" % (m, n, why))
    else:
        L.append("Every runner's output matches PyTorch's saved output.")
    L.append("")
    L.append("## Where the plan loses")
    L.append("")
    any_loss = False
    for res in results:
        c = res["runners"].get("collage", {})
        cm = c.get("median_ms")
        if not cm:
            continue
        faster = [(n, rr) for n, rr in res["runners"].items()
                  if n != "collage" and rr.get("median_ms") and rr["median_ms"] < cm]
        if not faster:
            continue
        any_loss = True
        L.append("### %s" % res["model"])
        L.append("")
        L.append("Collage plan %.3g ms (predicted %s ms, measured/predicted %s). Faster here: %s." % (
            cm, fmt(res.get("predicted_ms"), "%.3g"),
            fmt(cm / res["predicted_ms"] if res.get("predicted_ms") else None, "%.2f"),
            ", ".join("%s %.3g ms (%.2fx)" % (n, rr["median_ms"], rr["ratio"]) for n, rr in faster)))
        L.append("")
        groups = res.get("groups", [])
        per_backend = {}
        for g in groups:
            v = g["measured_us"] if g["measured_us"] is not None else g["predicted_us"]
            per_backend.setdefault(g["backend"], [0, 0.0, 0.0])
            per_backend[g["backend"]][0] += 1
            per_backend[g["backend"]][1] += g["predicted_us"]
            per_backend[g["backend"]][2] += v
        if per_backend:
            L.append("Per backend (traced run): " + "; ".join(
                "%s %d groups, predicted %.3g ms, measured %.3g ms" % (b, v[0], v[1] / 1e3, v[2] / 1e3)
                for b, v in sorted(per_backend.items())) + ".")
            L.append("")
        alts = explain_alternatives(os.path.join(args.outdir_logs), res["model"])
        top = sorted(groups, key=lambda g: -(g["measured_us"] or g["predicted_us"]))[:args.top_groups]
        if top:
            L.append("| group | backend / pattern | nodes | predicted us | measured us | meas/pred | other backends (us) |")
            L.append("| --- | --- | --- | --- | --- | --- | --- |")
            for g in top:
                nodes = g["nodes"][0] + (" +%d" % (len(g["nodes"]) - 1) if len(g["nodes"]) > 1 else "")
                L.append("| %d | %s %s | `%s` | %.1f | %s | %s | %s |" % (
                    g["group"], g["backend"], g["pattern"], nodes, g["predicted_us"], fmt(g["measured_us"], "%.1f"),
                    fmt(g["measured_us"] / g["predicted_us"] if g["measured_us"] and g["predicted_us"] else None,
                        "%.2f"),
                    ", ".join("%s %.1f" % a for a in alts.get(g["group"], [])) or "—"))
            L.append("")
        L.append("Full per-group reasons: `logs/%s.explain.txt`; per-kernel timeline: `%s/trace.json` "
                 "(Perfetto)." % (res["model"], res["model"]))
        L.append("")
    if not any_loss:
        L.append("Nowhere: the Collage plan is the fastest runner on every model of this run.")
        L.append("")
    notes = [(r["model"], n) for r in results for n in r["notes"]]
    if notes:
        L.append("## Notes")
        L.append("")
        for m, n in notes:
            L.append("- %s: %s" % (m, n))
        L.append("")
    L.append("Versions: %s." % "; ".join(sorted({"%s %s" % (n, rr["version"]) for r in results
                                                  for n, rr in r["runners"].items() if rr.get("version")})))
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return "\n".join(L)


def graph_level_table(results):
    """The graph-level search per model: its own final paired check, how it
    stopped, and the interleaved rounds of this bench (plan vs op-level plan
    vs ONNX Runtime, same minutes)."""
    L = ["## Graph-level search", "",
         "Search: `optimize --graph-level` from the op-level plan (same database). *op-level ms* and *graph-level "
         "ms*: the search's final paired check (medians); *gain*: per-round median of op-level over graph-level. "
         "*bench*: the two plans' medians in this bench's interleaved rounds, and the graph-level plan against "
         "ONNX Runtime in the same rounds (>1: Collage faster).", "",
         "| model | op-level ms | graph-level ms | gain | bench op-level / graph-level | bench ORT / graph-level | "
         "stopped | search s (best at) | generations | plans run (cache hits, failed) |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    vs_ort = []
    for res in results:
        gl = res.get("graph_level")
        if not gl:
            continue
        s = gl.get("summary", {})
        op = res["runners"].get("collage", {}).get("median_ms")
        g = res["runners"].get("graph-level", {}).get("median_ms")
        ort = res["runners"].get("onnxruntime", {}).get("median_ms")
        if g and ort:
            vs_ort.append(ort / g)
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s (%s, %s) |" % (
            res["model"], fmt(s.get("start_ms") or None, "%.3g"), fmt(s.get("ms") or None, "%.3g"),
            fmt(s.get("gain"), "%.2fx"), fmt(op / g if op and g else None, "%.2fx"),
            fmt(ort / g if ort and g else None, "%.2fx"), gl.get("stop", "—"), fmt(gl.get("search_s"), "%.0f"),
            fmt(gl.get("best_at_s"), "%.0f"), fmt(gl.get("generations_n"), "%d"), fmt(gl.get("plans_run"), "%d"),
            fmt(gl.get("cache_hits"), "%d"), fmt(gl.get("failed"), "%d")))
    L.append("| geomean ORT / graph-level | | | | | %s | | | | |" % fmt(geomean(vs_ort), "%.2fx"))
    L.append("")
    for res in results:
        for c in res.get("graph_level", {}).get("summary", {}).get("changes", [])[:6]:
            L.append("- %s: %s" % (res["model"], c))
    L.append("")
    L.append("Best plan found against search time: `graph_level.png`.")
    L.append("")
    return L


def write_graph_level_chart(results, outdir):
    """The best plan's time (relative to the op-level plan) against search
    time, per model: the Collage paper's Figure 10."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for res in results:
        gens = [g for g in res.get("graph_level", {}).get("generations", []) if g.get("elapsed_s") is not None]
        if not gens:
            continue
        # Every search starts from the op-level plan (1.0) at time 0.
        ax.step([0] + [g["elapsed_s"] for g in gens], [1.0] + [g["best_relative"] for g in gens], where="post",
                label=res["model"])
        drawn = True
    if not drawn:
        plt.close(fig)
        return
    ax.set_xlabel("search time (s)")
    ax.set_ylabel("best plan / starting (op-level) plan")
    ax.set_title("Graph-level search: best plan found over time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "graph_level.png"), dpi=120)
    plt.close(fig)


def write_chart(results, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no chart")
        return
    runners = ["collage"] + BASELINES + PEERS
    models = [r["model"] for r in results]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(models) + 2), 4.5))
    width = 0.8 / len(runners)
    for i, n in enumerate(runners):
        ys = []
        for r in results:
            rr = r["runners"].get(n, {})
            ys.append(rr.get("ratio") or float("nan"))  # missing: no bar
        ax.bar([j + i * width for j in range(len(models))], ys, width, label=n)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))])
    ax.set_xticklabels(models, rotation=15)
    ax.set_ylabel("latency / Collage plan (higher = slower)")
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.2gx"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2gx"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 1.3)  # room for the legend
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.set_title("Latency relative to the Collage plan, same run")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "chart.png"), dpi=120)


# --------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description="Collage plan vs baselines, ONNX Runtime and PyTorch.")
    ap.add_argument("--quick", action="store_true", help="resnet50 and bert_base, batch 1, few rounds")
    ap.add_argument("--small", action="store_true",
                    help="use the small models of resources/models/ (fast; for development)")
    ap.add_argument("--models", help="comma-separated zoo names, NAME@BATCH for another batch "
                                     "(default: all, plus resnext50_32x4d@8)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for every runner (default: cores)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 10, --quick 5)")
    ap.add_argument("--runs", type=int, help="inferences per runner per round (default 10, --quick 5)")
    ap.add_argument("--warmup", type=int, default=3, help="peer warm-up inferences (default 3)")
    ap.add_argument("--trace-runs", type=int, default=4, help="runs of the traced plan run (default 4)")
    ap.add_argument("--top-groups", type=int, default=8, help="slowest groups listed per losing model")
    ap.add_argument("--peers", default="onnxruntime,pytorch", help="peers to run (default onnxruntime,pytorch)")
    ap.add_argument("--no-baselines", action="store_true",
                    help="run only the plan and the peers (the baseline plans are still written)")
    ap.add_argument("--contention", action="store_true",
                    help="also run the plan and ONNX Runtime beside a busy process (one core), in the same rounds")
    ap.add_argument("--db", help="measurement database (default: a fresh one in the results folder: cold)")
    ap.add_argument("--graph-level", metavar="BUDGET", default="5m",
                    help="budget of the graph-level search (optimize's default, 5m), whose plan is benched "
                         "as `graph-level` beside the op-level plan; 'off' benches the op-level plan alone")
    ap.add_argument("--collage", default=os.path.join(REPO, "build", "app", "collage"), help="collage executable")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="parent of the results folder")
    args = ap.parse_args(argv)
    if args.graph_level == "off":
        args.graph_level = None

    if args.models:
        specs = [s.strip() for s in args.models.split(",") if s.strip()]
    else:
        specs = QUICK_MODELS if args.quick else FULL_MODELS
    args.rounds = args.rounds or (5 if args.quick else 10)
    args.runs = args.runs or (5 if args.quick else 10)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if not os.access(args.collage, os.X_OK):
        ap.error("%s not found: build it (ninja -C build collage) or pass --collage" % args.collage)

    stamp = datetime.datetime.utcnow().strftime("%Y%m%d-%H%M%S")
    outdir = os.path.join(args.out, stamp + ("-quick" if args.quick else "") + ("-small" if args.small else ""))
    logdir = os.path.join(outdir, "logs")
    os.makedirs(logdir, exist_ok=True)
    args.outdir_logs = logdir
    db = args.db or os.path.join(outdir, "measurements.sqlite")
    collage = Collage(args.collage, args.threads, db, logdir)
    log("results -> %s; %d thread(s); models %s; %d rounds x %d runs" % (
        outdir, args.threads, ",".join(specs), args.rounds, args.runs))

    models = []
    for s in specs:
        m = Model(s, args.small)
        if not m.ensure(args.small) and not args.small and args.quick:
            log("%s: zoo file missing, using the small variant" % m.label)
            m = Model(s, True)
        if m.ensure(True):
            models.append(m)
        else:
            log("%s: model files missing, skipped" % m.label)

    peak0 = measure_peak(args.threads)
    log("practical peak (OpenBLAS sgemm, %d threads): %s GFLOP/s" % (args.threads, fmt(peak0, "%.1f")))
    results = []
    for i, m in enumerate(models):
        log("== model %d/%d: %s" % (i + 1, len(models), m.label))
        try:
            results.append(bench_model(m, args, collage, outdir, peak0))
        except Exception as e:  # noqa: BLE001 - one broken model must not lose the others
            import traceback
            log("%s: failed: %r\n%s" % (m.label, e, traceback.format_exc()))
            results.append({"model": m.label, "runners": {}, "optimize": [], "notes": ["harness error: %r" % e]})
        # Reports after every model, so a long run shows partial results.
        write_reports(results, args, outdir, peak0)
    peak1 = measure_peak(args.threads)
    peak = max(p for p in (peak0, peak1) if p) if (peak0 or peak1) else None
    for res in results:  # peak fractions against the better of the two peak measurements
        for rr in res["runners"].values():
            if rr.get("gflops") and peak:
                rr["peak_frac"] = rr["gflops"] / peak
    text = write_reports(results, args, outdir, peak)
    write_chart(results, outdir)
    if args.graph_level:
        write_graph_level_chart(results, outdir)
    print()
    print(text)
    log("done: %s" % outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
