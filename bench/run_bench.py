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

# The harness in four files: bench_runners (the models, the collage CLI, the
# statistics), bench_peers (ONNX Runtime, PyTorch), bench_report (tables and
# charts) and this one: the rounds over one model, and the command line.

import argparse
import datetime
import json
import os
import re
import statistics
import sys

import numpy as np

from bench_peers import ort_node_count, start_peers
from bench_report import fmt, group_times, write_chart, write_graph_level_chart, write_reports
from bench_runners import (ATOL_REL, BASELINES, CONTENTION_RUNNERS, HERE, LOAD, PEERS, REPO, BusyProcess,
                           Collage, Model, compare, log, measure_peak, read_pb, summarize, zoo_dir)


FULL_MODELS = ["resnet50", "resnext50_32x4d", "mobilenet_v2", "inception_v3", "r3d_18", "dcgan",
               "bert_base", "resnext50_32x4d@8",
               # the widened zoo (issue 13): shapes nobody tuned the backends for
               "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0", "regnet_y_400mf",
               "convnext_tiny", "vit_b_16", "deeplabv3_mobilenet_v3_large", "gpt2",
               # issue 40: a detector whose dynamic int8 form has wide, parallel chains
               "yolo_style_detector", "yolo_style_detector:dynamic"]
QUICK_MODELS = ["resnet50", "bert_base"]


# --------------------------------------------------------------------------
# One model
# --------------------------------------------------------------------------

def bench_model(model, args, collage, outdir, peak_gflops):
    """One model: optimise it twice, check every plan's and peer's output, then
    time them all in interleaved rounds; returns the model's results."""
    mdir = os.path.join(outdir, model.label)
    os.makedirs(mdir, exist_ok=True)
    res = {"model": model.label, "runners": {}, "optimize": [], "notes": []}
    res["flops"] = collage.flops(model)
    ref = read_pb(model.output)
    first = optimize_twice(model, collage, mdir, res)
    if first is None:
        return res
    plans = plans_to_run(model, args, collage, mdir, res, first)
    check_plans(model, collage, plans, ref, res)
    live_peers = start_checked_peers(model, args, mdir, plans, ref, res)
    runners = [n for n in plans if "error" not in res["runners"][n]] + list(live_peers)
    run_rounds(model, args, collage, plans, live_peers, runners, res)
    summarize_runners(res, peak_gflops)
    res["predicted_ms"] = first.get("predicted_ms")

    # Per-group measured times of the plan (one traced run) for the loss analysis.
    tpath = os.path.join(mdir, "trace.json")
    collage.run_round(model, plans["collage"], args.trace_runs, ["--trace", tpath], "%s.trace.log" % model.label)
    res["groups"] = group_times(tpath, plans["collage"])
    return res


def optimize_twice(model, collage, mdir, res):
    """The first optimize's result, or None when it failed (said in res)."""
    # Issue 5: cold (or whatever the database holds) then warm optimisation.
    log("%s: collage optimize (1st run, database %s)" % (model.label, collage.db))
    first = collage.optimize(model, mdir, "first")
    res["optimize"].append(first)
    if first["rc"] != 0:
        res["notes"].append("collage optimize failed: %s" % first.get("error"))
        log("%s: optimize failed: %s" % (model.label, first.get("error")))
        return None
    log("%s: 1st optimize %.1f s (%s kernels measured, %s cached); predicted %.3f ms"
        % (model.label, first.get("total_s", first["wall_s"]), first.get("kernels"), first.get("cached"),
           first.get("predicted_ms", float("nan"))))
    second = collage.optimize(model, mdir, "second")
    res["optimize"].append(second)
    log("%s: 2nd optimize %.2f s (search %.3f s)%s" % (model.label, second.get("total_s", second["wall_s"]),
                                                       second.get("search_s", float("nan")),
                                                       ", warm database" if second.get("warm") else ""))
    return first


def plans_to_run(model, args, collage, mdir, res, first):
    """The plans this run times, by runner name: the op-level plan, the
    baselines unless --no-baselines, the graph-level plan with --graph-level."""
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
    if args.substitutions:
        log("%s: collage optimize --substitutions --op-level" % model.label)
        sub = collage.substitutions(model, mdir, args.substitution_budget)
        res["substitutions"] = sub
        if sub.get("plan"):
            plans["substitutions"] = sub["plan"]
            log("%s: substitutions: DP %s -> %s ms, kept %s, search %s s" % (
                model.label, sub.get("start_dp_ms"), sub.get("best_dp_ms"), ", ".join(sub["kept"]) or "none",
                sub.get("search_s")))
        else:
            res["notes"].append("substitution search failed: %s" % sub.get("error"))
    if args.allow_precision:
        prec = args.allow_precision
        log("%s: collage optimize --allow-precision %s --op-level" % (model.label, prec))
        rp = collage.reduced_precision(model, mdir, prec)
        res[prec] = rp
        if rp.get("plan"):
            plans[prec] = rp["plan"]
            log("%s: %s plan: %s of %s groups in %s" % (model.label, prec, rp.get("reduced_groups"),
                                                       rp.get("groups"), prec))
        else:
            res["notes"].append("optimize --allow-precision %s failed: %s" % (prec, rp.get("error")))
    res["uncovered"] = first["uncovered"]
    for b, why in first["uncovered"].items():
        res["notes"].append("%s cannot cover the model: %s" % (b, why))
    collage.call(["explain", plans["collage"], "--model", model.onnx, "--db", collage.db],
                 "%s.explain.txt" % model.label)
    return plans


def check_plans(model, collage, plans, ref, res):
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
        elif e:
            msg += "; " + reference_sensitivity(model, collage)
        res["runners"][name] = {"check_ok": ok, "check": msg, "rounds": []}
        if med is None:
            res["runners"][name]["error"] = last[:200]


def reference_sensitivity(model, collage):
    """How far float32 reordering alone can move this model's output: the
    reference executor's own output when half of the input's values move by
    one ulp (seeded), against the expected output. A plan that differs from
    the reference by less than that is as close as summation order allows;
    on deep quantized models (a dynamic quantizer's scale follows its input's
    range) it is far beyond any fixed tolerance. Said beside a failed check,
    never turned into a pass."""
    import onnx
    import onnx.numpy_helper
    t = onnx.TensorProto()
    with open(model.input, "rb") as f:
        t.ParseFromString(f.read())
    x = onnx.numpy_helper.to_array(t)
    if x.dtype != np.float32:
        return "(the input is not float32: no one-ulp sensitivity)"
    moved = np.random.default_rng(0).random(x.shape) < 0.5
    nudged = np.where(moved, np.nextafter(x, np.float32(np.inf)), x).astype(np.float32)
    path = os.path.join(collage.logdir, "%s.nudged_input.pb" % model.label)
    with open(path, "wb") as f:
        f.write(onnx.numpy_helper.from_array(nudged, t.name).SerializeToString())
    _, text, _ = collage.call(["run", model.onnx] + model.shape_args() +
                              ["--backend", "reference", "--input", path, "--expect", model.output],
                              "%s.sensitivity.log" % model.label)
    e = re.search(r"max abs error ([\d.eE+-]+)", text)
    moved_by = float(e.group(1)) if e else 0.0
    return "the reference itself moves by up to %.3g when its input moves one ulp" % moved_by


def start_checked_peers(model, args, mdir, plans, ref, res):
    """The peers that started and ran, by name, their output checked and warmed up."""
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
    return {n: p for n, p in peers.items() if not isinstance(p, str) and not p.error}


def run_rounds(model, args, collage, plans, live_peers, runners, res):
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


def summarize_runners(res, peak_gflops):
    """Each runner's median over the rounds, spread, GFLOP/s and ratio to the plan."""
    for name, rr in res["runners"].items():
        med, spread = summarize([x["median"] for x in rr["rounds"]])
        rr["median_ms"], rr["spread_pct"] = med, spread
        if med and res["flops"]:
            rr["gflops"] = res["flops"] / (med * 1e-3) / 1e9
            rr["peak_frac"] = rr["gflops"] / peak_gflops if peak_gflops else None
    cm = res["runners"].get("collage", {}).get("median_ms")
    for rr in res["runners"].values():
        rr["ratio"] = (rr["median_ms"] / cm) if (cm and rr.get("median_ms")) else None


def int8_vs_float(results, models):
    """Each int8 variant's plan against its float model's plan (same run): a
    note "int8 plan A ms, float plan B ms: B/A x", and res["vs_float"]."""
    by_label = {r["model"]: r for r in results}
    for m in models:
        fl = getattr(m, "float_label", None)
        r, f = by_label.get(m.label), by_label.get(fl)
        if not r or not f:
            continue
        a = r["runners"].get("collage", {}).get("median_ms")
        b = f["runners"].get("collage", {}).get("median_ms")
        ort = r["runners"].get("onnxruntime", {}).get("median_ms")
        if a and b:
            r["vs_float"] = b / a
            r["notes"].append("int8 (%s) plan %.3f ms, float plan %.3f ms: speed-up over the float plan %.2fx; "
                              "ONNX Runtime on the same int8 model %s ms: int8 plan / ONNX Runtime %s x "
                              "(>1: ONNX Runtime is faster)"
                              % (m.form, a, b, b / a, fmt(ort, "%.3f"), fmt(a / ort if ort else None)))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Collage plan vs baselines, ONNX Runtime and PyTorch.")
    ap.add_argument("--quick", action="store_true", help="resnet50 and bert_base, batch 1, few rounds")
    ap.add_argument("--small", action="store_true",
                    help="use the small models of resources/models/ (fast; for development)")
    ap.add_argument("--models", help="comma-separated zoo names, NAME@BATCH for another batch, NAME:FORM for "
                                     "its int8 variant alone (FORM dynamic, qdq or qop) "
                                     "(default: all, plus resnext50_32x4d@8 and yolo_style_detector:dynamic)")
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
    ap.add_argument("--substitutions", action="store_true",
                    help="also time the plan of `optimize --substitutions --op-level` (graph substitutions + "
                         "placement) against the placement alone")
    ap.add_argument("--substitution-budget", default="30s", help="its search budget (default 30s)")
    ap.add_argument("--allow-precision", metavar="PRECISION", default=None,
                    help="also time the plan of `optimize --allow-precision PRECISION --op-level` (e.g. bf16: "
                         "groups may run on onednn_bf16), side by side, as the runner named PRECISION")
    ap.add_argument("--quantized", metavar="FORMS",
                    help="also bench each model's int8 variants in these forms (dynamic,qdq,qop), written by "
                         "bench/models/quantize_models.py into the zoo cache (small models: its small/ folder); "
                         "each against ONNX Runtime on the same int8 model and against the float plan")
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
        s, _, only_form = s.partition(":")  # NAME:FORM: that model's int8 variant alone
        m = Model(s, args.small)
        if not m.ensure(args.small) and not args.small and args.quick:
            log("%s: zoo file missing, using the small variant" % m.label)
            m = Model(s, True)
        if not m.ensure(True):
            log("%s: model files missing, skipped" % m.label)
        elif only_form:
            log("%s: int8 %s variant (bench/models/quantize_models.py)" % (m.label, only_form))
            q = Model.quantized(m, only_form, os.path.join(zoo_dir(), "small") if args.small else zoo_dir())
            if q is not None and q.ensure(False):
                models.append(q)
        else:
            models.append(m)

    if args.quantized:
        forms = [f.strip() for f in args.quantized.split(",") if f.strip()]
        qdir = os.path.join(zoo_dir(), "small") if args.small else zoo_dir()
        with_variants = []
        for m in models:
            with_variants.append(m)
            for form in forms:
                log("%s: int8 %s variant (bench/models/quantize_models.py)" % (m.label, form))
                q = Model.quantized(m, form, qdir)
                if q is not None and q.ensure(False):
                    with_variants.append(q)
        models = with_variants

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
    int8_vs_float(results, models)
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
