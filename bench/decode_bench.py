#!/usr/bin/python3
"""Decode-step and prefill latency of `collage generate` against ONNX
Runtime's own past/present loop (bench/models/ort_greedy.js --bench), on
the decoders bench/models/export_decoders.py writes, at several contexts;
and the memory-traffic bound of a decode step (issue #42, docs/decoding.md).

For each model and context C:
  1. the step graph's bindings for a cache of C + steps rows
     (`generate --print-bindings`), and, unless --no-optimize, a plan for
     them (`collage optimize --budget B`, every available backend unless
     --backends), and one for the prompt's one-pass graph
     (`generate --print-prefill-bindings`, the same budget), which
     `generate --prefill-plan` runs the prompt on (its Session's first
     run). On a machine shared with other processes a
     pass with parallel regions can last scheduler slices (libgomp's
     threads spinning on one core: docs/decoding.md, "Timing on a shared
     machine"); `generate` then prints a `preempted:` line, and such a
     round's times are the machine's. Run the bench under `chrt -f 10` or
     on free cores;
  2. --rounds interleaved rounds, each running Collage (`generate` with a
     prompt of C ids and --steps new tokens, on the plan) then ONNX
     Runtime (the same prompt in one pass, then --steps steps, its
     presents fed back as pasts), both with --threads threads, so that load
     on a shared machine hits both alike;
  3. per round, ORT's time over Collage's, for the median decode step and
     for the prefill; the table gives their medians, the medians' absolute
     figures, and the bandwidth bound of a step: (weights + the cache's
     bytes at C, a table only Gathered from left out) over the copy
     bandwidth measured in this run (numpy copies of 256 MiB on --threads
     threads, read plus write bytes), with the share of that bound the
     step reaches (bound / step).

The prompt's plan: up to --prefill-op-level-below (8192) it is optimized as
the step's (the op-level DP, the end-to-end check, the graph-level search
within --budget); from there on with `--op-level --no-end-to-end`: a prompt
pass of 8k tokens takes seconds and one of 32k minutes, and each end-to-end
pairing runs both plans at least 13 times. Candidates whose tensors cannot
fit in this machine's memory (the [1,16,32768,32768] scores, 64 GiB) are
refused by name as they are measured (docs/decoding.md, "Long prompts"), so
the DP covers the attention with the kernel that never writes the scores.

ONNX Runtime keeps each node's output: where the prompt graph's largest
tensor (`collage inspect`'s "largest:" line, from the graph at the prompt's
shapes) is larger than MemAvailable, its prompt pass cannot run here, and
the row says so ("ORT: does not fit: ..."); its steps are then timed from a
seeded past of C rows (as without a prefill), and there are no ids to
compare. Where it runs, the greedy ids of both must be the same (the
"logits" column: "ids match"; exit status 1 when they differ).

Without a prefill (--no-prefill, and for every context above
--prefill-limit, 32768 by default):
the script writes one past K/V of C rows per past input (numpy, seeded,
uniform in [-1, 1)), and both runners start from it: Collage through
`generate --cache-in` (the rows copied straight into its cache), ONNX
Runtime through its past_key_values inputs (ort_greedy.js --past); each then
runs --steps steps, the first at row C. The steps' logits must match (the
largest difference over the step's largest |logit| within 1e-4, float32's
tolerance; the table's "logits" column, and the exit status is 1 when one
does not), and so must the greedy ids. The prefill columns are then "-". A
model whose learned position table is shorter than C + steps (GPT-2's:
gpt2_style_small has 8448 positions) is skipped at that context, said so.

  bench/decode_bench.py --size bench --contexts 128,2048,8192 --rounds 5
  bench/decode_bench.py --size bench --models llama_style_bench --contexts 32768 --rounds 5
  bench/decode_bench.py --size tiny --contexts 32 --rounds 1   # a quick check
  bench/decode_bench.py --size tiny --contexts 32 --rounds 1 --no-prefill

--size bench exports gpt2_style_small and llama_style_bench into
bench/models/decoders (once; about 0.5 and 0.6 GB); tiny uses the committed
tests/models/decoder models. ONNX Runtime: bench/node_modules
(`cd bench && npm install --ignore-scripts`) or $ORT_NODE_MODULES.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = {"bench": (os.path.join(HERE, "models", "decoders"), ["gpt2_style_small", "llama_style_bench"]),
          "tiny": (os.path.join(ROOT, "tests", "models", "decoder"), ["gpt2_style_tiny", "llama_style_tiny"])}


def log(msg):
    print(msg, flush=True)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s\n%s" % (p.returncode, " ".join(cmd), p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout + p.stderr


def number(pattern, text, what):
    m = re.search(pattern, text, re.M)
    if not m:
        sys.exit("no %s in:\n%s" % (what, text[-3000:]))
    return float(m.group(1))


def copy_bandwidth(threads, mib=256, repeats=5):
    """Bytes per second of a large copy (read + write, STREAM's count), best
    of `repeats`, on `threads` threads as the step runs: each copies its
    share (numpy's copy leaves the GIL), all started together. One thread
    alone reads slower than the step's threads do, and the bound it gave
    was beaten (the step ran at up to 104 % of it)."""
    src = np.ones(mib * 2 ** 18, np.float32)
    dst = np.empty_like(src)
    cuts = np.linspace(0, src.size, threads + 1).astype(int)
    best = float("inf")
    for _ in range(repeats):
        go = threading.Barrier(threads + 1)
        def part(i):
            go.wait()
            np.copyto(dst[cuts[i]:cuts[i + 1]], src[cuts[i]:cuts[i + 1]])
        workers = [threading.Thread(target=part, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        go.wait()
        t = time.perf_counter()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best


def model_bytes(path, context):
    """The weights' bytes, and the cache's at `context` rows (float32)."""
    m = onnx.load(path, load_external_data=False)
    # A table that only Gathers read (the token embedding) gives a step one
    # row, not its bytes: it is not part of the bound (a head tied to it is
    # read whole by its MatMul, so it stays in).
    readers = {}
    for n in m.graph.node:
        for k, i in enumerate(n.input):
            readers.setdefault(i, []).append((n.op_type, k))
    gathered = {t.name for t in m.graph.initializer
                if readers.get(t.name) and all(op == "Gather" and k == 0 for op, k in readers[t.name])}
    weights = sum(int(np.prod(t.dims)) * 4 for t in m.graph.initializer
                  if t.data_type == onnx.TensorProto.FLOAT and t.name not in gathered)
    cache = 0
    for i in m.graph.input:
        if i.name.startswith("past_key_values."):
            d = [x.dim_value for x in i.type.tensor_type.shape.dim]
            cache += d[1] * d[3] * context * 4  # [batch, KV heads, past, D]
    return weights, cache


def position_limit(path):
    """The rows of a learned position table (a Gather of an initializer by
    the position_ids input), or None: no position beyond it can run."""
    m = onnx.load(path, load_external_data=False)
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == "position_ids" and n.input[0] in dims:
            return dims[n.input[0]][0]
    return None


def write_pasts(path, context, seed, work):
    """One past per past_key_values.* input, [batch 1, KV heads, context, D]
    float32 uniform in [-1, 1) from `seed`: a raw file (ONNX Runtime's feed)
    and a TensorProto naming the input with that file as its external data
    (`collage generate --cache-in`). Returns the .pb paths and the
    ort_greedy.js --past manifest."""
    m = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(seed)
    pbs, pasts = [], {}
    for i in m.graph.input:
        if not i.name.startswith("past_key_values."):
            continue
        d = [x.dim_value for x in i.type.tensor_type.shape.dim]
        dims = [1, d[1], context, d[3]]
        base = os.path.join(work, "past_%d" % len(pbs))
        (rng.random(dims, dtype=np.float32) * 2 - 1).astype(np.float32).tofile(base + ".bin")
        t = onnx.TensorProto(name=i.name, data_type=onnx.TensorProto.FLOAT, dims=dims,
                             data_location=onnx.TensorProto.EXTERNAL)
        t.external_data.add(key="location", value=os.path.basename(base) + ".bin")
        with open(base + ".pb", "wb") as f:
            f.write(t.SerializeToString())
        pbs.append(base + ".pb")
        pasts[i.name] = {"file": base + ".bin", "dims": dims}
    return pbs, pasts


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--collage", default=os.path.join(ROOT, "build", "app", "collage"))
    a.add_argument("--size", default="bench", choices=sorted(MODELS))
    a.add_argument("--models", nargs="*", help="default: the size's two models")
    a.add_argument("--contexts", default="128,2048,8192")
    a.add_argument("--steps", type=int, default=16, help="decode steps per run (the median is taken)")
    a.add_argument("--rounds", type=int, default=5)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--budget", default="60s", help="collage optimize's --budget per model and context")
    a.add_argument("--backends", nargs="*", help="collage optimize's --backends (default: every available)")
    a.add_argument("--no-optimize", action="store_true", help="run Collage's reference executor (no plan)")
    a.add_argument("--no-prefill", action="store_true",
                   help="every context without a prefill: both runners start from the same seeded past")
    a.add_argument("--prefill-limit", type=int, default=32768,
                   help="contexts above this run without a prefill (default 32768)")
    a.add_argument("--prefill-op-level-below", type=int, default=8192,
                   help="prompt plans for contexts from this on are op-level plans, without the end-to-end "
                        "check (default 8192: a prompt pass there takes seconds to minutes)")
    a.add_argument("--seed", type=int, default=1, help="the seed of the past written without a prefill")
    o = a.parse_args()

    folder, names = MODELS[o.size]
    names = o.models or names
    if o.size == "bench":
        missing = [n for n in names if not os.path.exists(os.path.join(folder, n + ".onnx"))]
        if missing:
            log("exporting %s into %s" % (", ".join(missing), folder))
            run([sys.executable, os.path.join(HERE, "models", "export_decoders.py")] + missing + ["--out", folder])
    node = os.path.join(HERE, "models", "ort_greedy.js")
    bandwidth = copy_bandwidth(o.threads)
    log("copy bandwidth (%d thread(s), numpy, read + write): %.1f GB/s" % (o.threads, bandwidth / 1e9))
    contexts = [int(c) for c in o.contexts.split(",")]
    work = tempfile.mkdtemp(prefix="decode_bench_")
    try:
        rows = bench(o, folder, names, node, bandwidth, contexts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table(o, rows, bandwidth)
    bad = [r for r in rows if r.get("logits_ok") is False or r.get("ids_ok") is False]
    if bad:
        sys.exit("logits or ids differ from ONNX Runtime's: %s"
                 % ", ".join("%s at %d" % (r["model"], r["context"]) for r in bad))


def bench(o, folder, names, node, bandwidth, contexts, work):
    rows = []
    for name in names:
        path = os.path.join(folder, name + ".onnx")
        limit = position_limit(path)
        for context in contexts:
            filled = o.no_prefill or context > o.prefill_limit
            rows_in_cache = context + o.steps
            if limit is not None and rows_in_cache > limit:
                log("%s C=%d: skipped: its position table has %d rows, the steps need %d"
                    % (name, context, limit, rows_in_cache))
                continue
            if filled:
                row = bench_filled(o, name, path, node, context, work)
            else:
                row = bench_prefilled(o, name, path, node, context, work)
            weights, cache = model_bytes(path, context)
            bound_ms = (weights + cache) / bandwidth * 1e3
            row.update(model=name, context=context, weights_mb=weights / 1e6, cache_mb=cache / 1e6,
                       bound_ms=bound_ms, bound_share=bound_ms / row["collage_step_ms"])
            rows.append(row)
    return rows


def step_plan(o, name, path, context, rows_in_cache, prompt, work):
    """`collage optimize`'s plan for the step graph of a cache of
    `rows_in_cache` rows (and its arguments to generate), or none."""
    if o.no_optimize:
        return []
    bindings = run([o.collage, "generate", path, "--prompt-ids", prompt, "--max-length",
                    str(rows_in_cache), "--print-bindings"]).split()
    plan_path = os.path.join(work, "%s_%d.plan.json" % (name, context))
    run([o.collage, "--threads", str(o.threads), "optimize", path] + bindings +
        (["--backends"] + o.backends if o.backends else []) + ["--db", os.path.join(work, "measurements.sqlite"),
                                                               "-o", plan_path, "--budget", o.budget])
    return ["--plan", plan_path]


def available_memory():
    """MemAvailable in /proc/meminfo, bytes (what collage sets tensors
    against too: core/ir/memory_budget.h); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def ort_prefill_refusal(o, path, bindings):
    """Why ONNX Runtime's prompt pass cannot run here, or None: the prompt
    graph's largest tensor (`collage inspect` at the prompt's shapes), which
    ORT holds at least once as it keeps each node's output, against
    MemAvailable. Computed, not tried: a try that fits the heuristic
    overcommit but not the free memory wakes the out-of-memory killer."""
    out = run([o.collage, "inspect", path] + bindings)
    m = re.search(r"^largest: (\S+)  (\S+), (\d+) bytes \(([^)]*)\), the output of (\S+) '([^']*)'", out, re.M)
    available = available_memory()
    if not m or available is None or int(m.group(3)) <= available:
        return None
    return "ORT: does not fit: its %s output '%s' %s is %s, %.1f GiB available" % (
        m.group(5), m.group(1), m.group(2), m.group(4), available / 2 ** 30)


def bench_prefilled(o, name, path, node, context, work):
    prompt = ",".join(str(1 + i % 100) for i in range(context))  # as ort_greedy.js --bench
    rows_in_cache = context + o.steps
    plan = step_plan(o, name, path, context, rows_in_cache, prompt, work)
    prefill_bindings = run([o.collage, "generate", path, "--prompt-ids", prompt, "--max-length",
                            str(rows_in_cache), "--print-prefill-bindings"]).split()
    if plan:
        # The prompt's one pass runs 'context' rows at once: its own
        # plan, optimized for the prefill graph's shapes (same budget).
        prefill_path = os.path.join(work, "%s_%d.prefill.plan.json" % (name, context))
        long_prompt = ["--op-level", "--no-end-to-end"] if context >= o.prefill_op_level_below else []
        run([o.collage, "--threads", str(o.threads), "optimize", path] + prefill_bindings +
            (["--backends"] + o.backends if o.backends else []) + long_prompt +
            ["--db", os.path.join(work, "measurements.sqlite"), "-o", prefill_path, "--budget", o.budget])
        plan += ["--prefill-plan", prefill_path]
    ort_note = ort_prefill_refusal(o, path, prefill_bindings)
    manifest = None
    if ort_note:
        log("%s C=%d: %s; its steps are timed from a seeded past of %d rows" % (name, context, ort_note, context))
        pbs, pasts = write_pasts(path, context, o.seed, work)
        manifest = os.path.join(work, "past.json")
        with open(manifest, "w") as f:
            json.dump({"rows": context, "token": 1 + context % 100, "pasts": pasts}, f)
    step_ratio, prefill_ratio, ours, theirs, same_ids = [], [], [], [], True
    for r in range(o.rounds):
        out = run([o.collage, "--threads", str(o.threads), "generate", path, "--prompt-ids", prompt,
                   "--max-new-tokens", str(o.steps + 1), "--max-length", str(rows_in_cache)] + plan)
        c_step = number(r"^decode step: median ([\d.]+) ms", out, "decode step")
        c_prefill = number(r"^prefill: ([\d.]+) ms", out, "prefill")
        c_ids = re.search(r"^generated: (.*)$", out, re.M).group(1)
        if manifest:
            ort = json.loads(run(["node", node, path, "--bench", "--past", manifest, "--steps", str(o.steps),
                                  "--threads", str(o.threads)]).strip().splitlines()[-1])
        else:
            ort = json.loads(run(["node", node, path, "--bench", "--context", str(context), "--steps",
                                  str(o.steps + 1), "--threads", str(o.threads)]).strip().splitlines()[-1])
        o_step, o_prefill = statistics.median(ort["step_ms"]), ort["prefill_ms"]
        ids_match = manifest is not None or c_ids == ",".join(str(i) for i in ort["ids"])
        same_ids = same_ids and ids_match
        step_ratio.append(o_step / c_step)
        if o_prefill is not None:
            prefill_ratio.append(o_prefill / c_prefill)
        ours.append((c_step, c_prefill))
        theirs.append((o_step, o_prefill))
        preempted = re.search(r"^preempted: .*", out, re.M)
        log("%s C=%d round %d: step collage %.3f ms, ort %.3f ms; prefill collage %.1f ms, %s%s%s"
            % (name, context, r + 1, c_step, o_step, c_prefill,
               "ort %.1f ms" % o_prefill if o_prefill is not None else ort_note,
               "" if ids_match else "; ids differ: collage %s, ort %s" % (c_ids, ",".join(str(i) for i in ort["ids"])),
               " (collage %s)" % preempted.group(0).split(" (")[0] if preempted else ""))
    if manifest:
        for f in pbs + [p["file"] for p in pasts.values()]:
            os.remove(f)
    return dict(step_x=statistics.median(step_ratio),
                prefill_x=statistics.median(prefill_ratio) if prefill_ratio else None,
                collage_step_ms=statistics.median(x[0] for x in ours),
                ort_step_ms=statistics.median(x[0] for x in theirs),
                collage_prefill_ms=statistics.median(x[1] for x in ours),
                ort_prefill_ms=statistics.median(x[1] for x in theirs) if prefill_ratio else None,
                ort_note=ort_note, ids_ok=None if manifest else same_ids, logits_err=None, logits_ok=None)


def bench_filled(o, name, path, node, context, work):
    """No prefill: both runners start from the same past of `context` rows
    (write_pasts); the steps' logits and ids are compared every round."""
    token = 1 + context % 100
    rows_in_cache = context + o.steps
    plan = step_plan(o, name, path, context, rows_in_cache, str(token), work)
    pbs, pasts = write_pasts(path, context, o.seed, work)
    manifest = os.path.join(work, "past.json")
    with open(manifest, "w") as f:
        json.dump({"rows": context, "token": token, "pasts": pasts}, f)
    ours_logits, ort_logits = os.path.join(work, "collage.logits"), os.path.join(work, "ort.logits")
    step_ratio, ours, theirs, errors, same_ids = [], [], [], [], True
    for r in range(o.rounds):
        out = run([o.collage, "--threads", str(o.threads), "generate", path, "--cache-in"] + pbs +
                  ["--prompt-ids", str(token), "--max-new-tokens", str(o.steps), "--max-length",
                   str(rows_in_cache), "--logits-out", ours_logits] + plan)
        c_step = number(r"^decode step: median ([\d.]+) ms", out, "decode step")
        c_ids = re.search(r"^generated: (.*)$", out, re.M).group(1)
        ort = json.loads(run(["node", node, path, "--bench", "--past", manifest, "--steps", str(o.steps),
                              "--threads", str(o.threads), "--logits-out", ort_logits]).strip().splitlines()[-1])
        o_step = statistics.median(ort["step_ms"])
        a = np.loadtxt(ours_logits, dtype=np.float64, ndmin=2)
        b = np.fromfile(ort_logits, dtype=np.float32).astype(np.float64).reshape(a.shape[0], -1)
        # Per step: the largest difference over the step's largest |logit|.
        err = float(max(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30) for x, y in zip(a, b)))
        errors.append(err)
        ids_match = c_ids == ",".join(str(i) for i in ort["ids"])
        same_ids = same_ids and ids_match
        step_ratio.append(o_step / c_step)
        ours.append(c_step)
        theirs.append(o_step)
        preempted = re.search(r"^preempted: .*", out, re.M)
        log("%s C=%d round %d (no prefill): step collage %.3f ms, ort %.3f ms; logits max err %.2e%s%s"
            % (name, context, r + 1, c_step, o_step, err, "" if ids_match else
               "; ids differ: collage %s, ort %s" % (c_ids, ",".join(str(i) for i in ort["ids"])),
               " (collage %s)" % preempted.group(0).split(" (")[0] if preempted else ""))
    for f in pbs + [p["file"] for p in pasts.values()]:
        os.remove(f)
    return dict(step_x=statistics.median(step_ratio), prefill_x=None, collage_step_ms=statistics.median(ours),
                ort_step_ms=statistics.median(theirs), collage_prefill_ms=None, ort_prefill_ms=None,
                logits_err=max(errors), logits_ok=max(errors) <= 1e-4 and same_ids)


def table(o, rows, bandwidth):
    log("\n| model | context | step: ORT/Collage | prefill: ORT/Collage | step ms (Collage, ORT) | "
        "prefill ms (Collage, ORT) | weights + cache MB | bound ms | share of bound | logits |")
    log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        filled = r["collage_prefill_ms"] is None
        if r["logits_ok"] is not None:
            logits = "%s (%.1e)" % ("match" if r["logits_ok"] else "DIFFER", r["logits_err"])
        elif r.get("ids_ok") is not None:
            logits = "ids match" if r["ids_ok"] else "ids DIFFER"
        else:
            logits = "-"
        if filled:
            prefill_x, prefill_ms = "-", "-"
        elif r["prefill_x"] is None:
            prefill_x, prefill_ms = "-", "%.1f, %s (steps from a seeded past)" % (r["collage_prefill_ms"], r["ort_note"])
        else:
            prefill_x, prefill_ms = "%.2fx" % r["prefill_x"], "%.1f, %.1f" % (r["collage_prefill_ms"], r["ort_prefill_ms"])
        log("| %s | %d%s | %.2fx | %s | %.3f, %.3f | %s | %.1f + %.1f | %.3f | %.0f %% | %s |" % (
            r["model"], r["context"], " (no prefill)" if filled else "", r["step_x"], prefill_x,
            r["collage_step_ms"], r["ort_step_ms"], prefill_ms,
            r["weights_mb"], r["cache_mb"], r["bound_ms"], 100 * r["bound_share"], logits))
    log("(%d rounds, %d threads, %d decode steps per run, copy bandwidth %.1f GB/s; logits: the steps' "
        "largest difference from ORT's over the step's largest |logit|, within 1e-4, and the same ids)"
        % (o.rounds, o.threads, o.steps, bandwidth / 1e9))


if __name__ == "__main__":
    main()
