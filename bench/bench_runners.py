"""The runners of bench/run_bench.py that are Collage's own: the zoo models
(found, or exported on demand), the collage CLI (optimize, the plans, timed
runs, the trace), a process that keeps one core busy for --contention, the
machine's practical sgemm peak, and the statistics every figure is made of.

Invariant: every timing a runner returns is a median of per-run times of
one plan on the model's reference input, after its outputs were checked
against the reference output (RTOL, ATOL_REL).
"""

import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import onnx.numpy_helper


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
SMALL_DIR = os.path.join(REPO, "resources", "models")
# Zoo models built with onnx's helper rather than exported from PyTorch: name ->
# the script in bench/models that writes them (no PyTorch twin for the peer).
GENERATED = {"yolo_style_detector": "make_detector.py"}
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
               "convnext_tiny", "vit_b_16", "deeplabv3_mobilenet_v3_large", "gpt2",
               # issue 40: a detector whose dynamic int8 form has wide, parallel chains
               "yolo_style_detector", "yolo_style_detector:dynamic"]
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
            self.torch_name = None if name in GENERATED else name
            self.stem = name + ("_b%d" % self.batch if self.batch != 1 else "")
            self.dir = zoo_dir()
        self.label = self.stem
        self.onnx = os.path.join(self.dir, self.stem + ".onnx")
        self.input = os.path.join(self.dir, self.stem + ".input_0.pb")
        self.output = os.path.join(self.dir, self.stem + ".output_0.pb")

    @classmethod
    def quantized(cls, float_model, form, out_dir, log_to=None):
        """The int8 variant of float_model in one of quantize_models.py's forms
        (dynamic, qdq, qop), written into out_dir on demand with ONNX Runtime's
        output for the float model's input; None if it could not be made."""
        sys.path.insert(0, os.path.join(HERE, "models"))
        import quantize_models  # noqa: E402 - bench/models is not a package
        os.makedirs(out_dir, exist_ok=True)
        try:
            quantize_models.quantize_file(float_model.onnx, out_dir, [form], log=log)
        except Exception as e:  # noqa: BLE001 - one model the exporter cannot quantize must not stop the bench
            log("%s: %s variant failed: %s" % (float_model.label, form, e))
            return None
        m = cls.__new__(cls)
        m.base, m.batch = float_model.base, float_model.batch
        m.torch_name = None  # PyTorch eager has no int8 twin of the ONNX model
        m.stem = float_model.stem + quantize_models.SUFFIX[form]
        m.dir = out_dir
        m.label = m.stem
        m.float_label = float_model.label
        m.form = form
        m.onnx = os.path.join(out_dir, m.stem + ".onnx")
        m.input = os.path.join(out_dir, m.stem + ".input_0.pb")
        m.output = os.path.join(out_dir, m.stem + ".output_0.pb")
        return m

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
        if getattr(self, "form", None):
            return all(os.path.exists(p) for p in (self.onnx, self.input, self.output))
        if all(os.path.exists(p) for p in (self.onnx, self.input, self.output)):
            return True
        if small:
            return False
        if self.base in GENERATED:
            if self.batch != 1:
                log("%s: %s writes batch 1 only" % (self.label, GENERATED[self.base]))
                return False
            log("%s: not in the zoo, writing it (bench/models/%s)" % (self.label, GENERATED[self.base]))
            cmd = ["/usr/bin/python3", os.path.join(HERE, "models", GENERATED[self.base]), "--out", self.dir]
        else:
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

def run_with_usage(cmd, usage):
    """subprocess.run(cmd, capture_output=True, text=True), reaped with os.wait4
    so that `usage` gets the child's peak RSS (MiB) and user + system CPU time (s)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    readers = [threading.Thread(target=lambda k, f: out.__setitem__(k, f.read()), args=(k, f))
               for k, f in (("stdout", p.stdout), ("stderr", p.stderr))]
    for th in readers:
        th.start()
    for th in readers:
        th.join()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap it again
    usage["peak_rss_mib"] = ru.ru_maxrss / 1024.0  # KiB on Linux
    usage["cpu_s"] = ru.ru_utime + ru.ru_stime
    return subprocess.CompletedProcess(cmd, p.returncode, out["stdout"], out["stderr"])


class Collage:
    def __init__(self, exe, threads, db, logdir):
        self.exe, self.threads, self.db, self.logdir = exe, threads, db, logdir

    def cmd(self, *args):
        return [self.exe, "--threads", str(self.threads)] + list(args)

    def call(self, args, logname=None, timeout=None, usage=None):
        """(rc, output, wall s). With a dict `usage`, it receives the process's
        peak resident memory (MiB) and CPU time (s), its measurement workers
        included (wait4's figures, as /usr/bin/time -v reports them)."""
        t = time.time()
        for attempt in range(30):
            try:
                if usage is None:
                    r = subprocess.run(self.cmd(*args), capture_output=True, text=True, timeout=timeout)
                else:
                    r = run_with_usage(self.cmd(*args), usage)
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
        usage = {}
        rc, text, wall = self.call(["optimize", model.onnx] + model.shape_args() + ["--db", self.db, "-o", plan,
                                    "--baseline-plans", base, "--op-level"], "%s.optimize.log" % model.label,
                                   usage=usage)
        info = {"rc": rc, "wall_s": wall, "tag": tag}
        # The whole optimize process (with its workers): an upper bound of the search's memory.
        info.update(("optimize_" + k, v) for k, v in usage.items())
        m = re.search(r"predicted total ([\d.]+) ms; measuring ([\d.]+) s, search ([\d.]+) s.*?total ([\d.]+) s", text)
        if m:
            info.update(predicted_ms=float(m.group(1)), measuring_s=float(m.group(2)),
                        search_s=float(m.group(3)), total_s=float(m.group(4)))
        # The op-level search's own figures: its CPU time and the peak memory of its states.
        m = re.search(r"search [\d.]+ s \((\d+) states, ([\d.]+) s CPU, peak ([\d.]+) MiB\)", text)
        if m:
            info.update(search_states=int(m.group(1)), search_cpu_s=float(m.group(2)),
                        search_peak_mib=float(m.group(3)))
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

    def substitutions(self, model, outdir, budget):
        """`optimize --substitutions --op-level` from the same database: the plan of
        substitutions + placement, and the search's summary line."""
        plan = os.path.join(outdir, "substitutions_plan.json")
        rc, text, wall = self.call(["optimize", model.onnx] + model.shape_args() +
                                   ["--db", self.db, "-o", plan, "--op-level", "--substitutions",
                                    "--substitution-budget", budget], "%s.substitutions.log" % model.label)
        info = {"rc": rc, "wall_s": wall, "plan": plan if rc == 0 else None, "kept": []}
        m = re.search(r"^substitutions: (\d+) graph\(s\) costed, .*?, ([\d.]+) s(?: \(budget spent\))?; DP cost ([\d.]+) -> ([\d.]+) ms",
                      text, re.M)
        if m:
            info.update(graphs=int(m.group(1)), search_s=float(m.group(2)), start_dp_ms=float(m.group(3)),
                        best_dp_ms=float(m.group(4)))
        # The moves kept: "  merge-siblings        12 site(s): 110.719 -> 109.716 ms (-1.003 ms)".
        for k in re.finditer(r"^  (\S+) +(\d+) site\(s\): [\d.]+ -> [\d.]+ ms", text, re.M):
            info["kept"].append("%s x%s" % (k.group(1), k.group(2)))
        if rc != 0:
            info["error"] = text.strip().splitlines()[-1] if text.strip() else "rc %d" % rc
        return info

    def reduced_precision(self, model, outdir, precision):
        """`optimize --allow-precision PRECISION --op-level` from the same database: the
        plan that may place groups on the reduced-precision backend, and how many it did."""
        plan = os.path.join(outdir, "%s_plan.json" % precision)
        rc, text, wall = self.call(["optimize", model.onnx] + model.shape_args() +
                                   ["--db", self.db, "-o", plan, "--op-level", "--allow-precision", precision],
                                   "%s.%s.log" % (model.label, precision))
        info = {"rc": rc, "wall_s": wall, "plan": plan if rc == 0 else None}
        if rc == 0:
            with open(plan) as f:
                groups = json.load(f).get("groups", [])
            info["groups"] = len(groups)
            info["reduced_groups"] = sum(1 for g in groups if precision in g.get("backend", ""))
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
