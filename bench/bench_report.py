"""The report of bench/run_bench.py: results.md, results.csv, rounds.csv and
the charts, from the results of every model; per-group times from the
plan's trace and the alternatives `collage explain` gives. Every figure is a
ratio to the Collage plan measured in the same run.
"""

import csv
import json
import math
import os
import re
import statistics

from bench_runners import BASELINES, CONTENTION_RUNNERS, LOAD, PEERS, geomean, log


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
    """results.md (returned too), results.csv, rounds.csv and results.json."""
    runners = (["collage"] + (["graph-level"] if args.graph_level else []) +
               (["substitutions"] if getattr(args, "substitutions", False) else []) +
               ([args.allow_precision] if getattr(args, "allow_precision", None) else []) + BASELINES + PEERS)
    if args.contention:
        runners += [n + LOAD for n in CONTENTION_RUNNERS]
    write_data_files(results, runners, args, outdir, peak)
    L = runners_table(results, runners, args, outdir, peak)
    L += optimizer_table(results)
    if args.graph_level:
        L.extend(graph_level_table(results))
    if getattr(args, "substitutions", False):
        L.extend(substitutions_table(results))
    if args.contention:
        L.extend(contention_table(results))
    L += output_checks(results)
    L += where_the_plan_loses(results, args)
    L += notes_and_versions(results)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return "\n".join(L)


def write_data_files(results, runners, args, outdir, peak):
    """results.csv (model x runner), rounds.csv (every round) and results.json (everything)."""
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


def runners_table(results, runners, args, outdir, peak):
    """The title, and every runner's median and ratio to the Collage plan, per model."""
    L = []
    L.append("# Collage bench, %s" % os.path.basename(outdir))
    L.append("")
    L.append("%d thread(s); %d rounds x %d runs per runner, interleaved; practical peak (numpy/OpenBLAS sgemm "
             "2048^3, %d threads): %s GFLOP/s. Cells: median ms (spread %%) and ratio to the Collage plan "
             "(>1: slower than Collage); `%%pk`: achieved GFLOP/s as a fraction of that peak; "
             "**FAIL**: output differs from the saved reference output (PyTorch's; ONNX Runtime's for an int8 variant)."
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
    return L


def optimizer_table(results):
    """The plan against the best baseline, and the optimizer's own figures (issue 5)."""
    L = []
    L.append("## Optimizer (issue 5)")
    L.append("")
    L.append("| model | plan ms | best baseline | plan / best | predicted ms | measured / predicted | "
             "kernels (ORT nodes) | 1st optimize s (measuring, search) | 2nd optimize wall s (search) | "
             "op-level search s (CPU s) | search peak MiB (optimize RSS MiB) | verdict |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
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
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
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
            "%s (%s)" % (fmt(o1.get("search_s"), "%.3f"), fmt(o1.get("search_cpu_s"), "%.3f")),
            "%s (%s)" % (fmt(o1.get("search_peak_mib"), "%.2f"), fmt(o1.get("optimize_peak_rss_mib"), "%.0f")),
            verdict))
    L.append("")
    L.append("Op-level search: its wall and CPU time and the peak memory of its states (the DP's own "
             "accounting, which its 1 GiB budget bounds), from the 1st optimize; in parentheses the peak "
             "resident memory of that whole `collage optimize` process with its measurement workers "
             "(wait4, as `/usr/bin/time -v` reports it), an upper bound of the search's.")
    L.append("")
    return L


def output_checks(results):
    """Every runner's output against the saved reference output (PyTorch's; ONNX Runtime's for an int8 variant)."""
    L = []
    fails = [(r["model"], n, rr.get("check") or rr.get("error", ""))
             for r in results for n, rr in r["runners"].items() if not rr.get("check_ok")]
    L.append("## Output checks")
    L.append("")
    if fails:
        L.append("Against the saved reference output (PyTorch's; ONNX Runtime's for an int8 variant) (plans: `collage run --expect`, rtol 1e-3 / atol 1e-5; peers: "
                 "rtol 1e-3 / atol 1e-4 x output scale). A fast plan with a wrong output is a failure:")
        L.append("")
        for m, n, why in fails:
            L.append("- **%s / %s**: %s" % (m, n, why))
    else:
        L.append("Every runner's output matches the saved reference output (PyTorch's; ONNX Runtime's for an int8 variant).")
    L.append("")
    return L


def where_the_plan_loses(results, args):
    """A section per model where another runner is faster than the plan."""
    L = []
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
        L += loss_section(res, faster, cm, args)
    if not any_loss:
        L.append("Nowhere: the Collage plan is the fastest runner on every model of this run.")
        L.append("")
    return L


def loss_section(res, faster, cm, args):
    """Where one model's plan loses: the faster runners, the plan per backend, its biggest groups."""
    L = []
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
    return L


def notes_and_versions(results):
    L = []
    notes = [(r["model"], n) for r in results for n in r["notes"]]
    if notes:
        L.append("## Notes")
        L.append("")
        for m, n in notes:
            L.append("- %s: %s" % (m, n))
        L.append("")
    L.append("Versions: %s." % "; ".join(sorted({"%s %s" % (n, rr["version"]) for r in results
                                                  for n, rr in r["runners"].items() if rr.get("version")})))
    return L


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


def substitutions_table(results):
    """Placement alone against graph substitutions + placement (both op-level
    plans, same database), as the DP predicted them and as they ran here."""
    L = ["", "## Graph substitutions + placement against placement alone", "",
         "Both op-level plans from the same database: `optimize --op-level` and `optimize --op-level "
         "--substitutions`. *DP ms*: the op-level DP's cost (the search's cost function) of the model as "
         "exported and of the best rewritten graph; *kept*: the moves of the plan (rule x sites); *gain*: "
         "per-round median of placement-alone time over substitutions time, in this bench's interleaved rounds.", "",
         "| model | DP ms placement | DP ms with substitutions | kept | graphs costed | search s | "
         "bench placement ms | bench substitutions ms | gain (range) |",
         "|---|---|---|---|---|---|---|---|---|"]
    gains = []
    for res in results:
        sub = res.get("substitutions")
        if not sub:
            continue
        a = res["runners"].get("collage", {})
        b = res["runners"].get("substitutions", {})
        ratios = [x["median"] / y["median"] for x, y in zip(a.get("rounds", []), b.get("rounds", []))
                  if x.get("median") and y.get("median")]
        gain = "—"
        if ratios:
            g = statistics.median(ratios)
            gains.append(g)
            gain = "%.3fx (%.2f-%.2f)" % (g, min(ratios), max(ratios))
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            res["model"], fmt(sub.get("start_dp_ms"), "%.3f"), fmt(sub.get("best_dp_ms"), "%.3f"),
            ", ".join(sub.get("kept", [])) or "none", sub.get("graphs", "—"), fmt(sub.get("search_s"), "%.1f"),
            fmt(a.get("median_ms"), "%.3f"), fmt(b.get("median_ms"), "%.3f"), gain))
    if gains:
        L.append("| geomean | | | | | | | | %.3fx |" % geomean(gains))
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
