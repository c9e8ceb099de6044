#!/usr/bin/python3
"""`collage generate --cache-in` (docs/decoding.md, "Without a prefill")
starts the decode steps from a past given in files, as ONNX Runtime is fed
one: its steps' logits and greedy ids are those of the model run as a plain
graph (`collage run`, reference executor, no Decoder: each past input bound
to the files' rows and fed them, each step's presents fed back as the next
step's pasts), within float32's tolerance.

The past is seeded, uniform in [-1, 1), written as bench/decode_bench.py
writes it (a TensorProto naming the past input, its data in an external raw
file: what ONNX Runtime reads). The cache has more rows than the steps use,
so the unused rows must stay masked.

Usage: generate_cache_in.py COLLAGE MODEL.onnx reference|plan
  plan: the steps run on a plan `collage optimize` made (native backend),
  the cache in place.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROWS, STEPS, SPARE, TOKEN, SEED = 6, 3, 4, 7, 5


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s\n%s" % (p.returncode, " ".join(cmd), p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout + p.stderr


def save(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def main():
    collage, model, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    m = onnx.load(model)
    inputs = [i.name for i in m.graph.input]
    outputs = [o.name for o in m.graph.output]
    past_names = [n for n in inputs if n.startswith("past_key_values.")]
    rng = np.random.default_rng(SEED)
    work = tempfile.mkdtemp(prefix="generate_cache_in_")
    try:
        check(collage, model, mode, m, inputs, outputs, past_names, rng, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(collage, model, mode, m, inputs, outputs, past_names, rng, work):
    pasts, pbs = {}, []
    for i in m.graph.input:
        if i.name not in past_names:
            continue
        d = [x.dim_value for x in i.type.tensor_type.shape.dim]
        a = (rng.random([1, d[1], ROWS, d[3]], dtype=np.float32) * 2 - 1).astype(np.float32)
        pasts[i.name] = a
        base = os.path.join(work, "past_%d" % len(pbs))
        a.tofile(base + ".bin")
        t = onnx.TensorProto(name=i.name, data_type=onnx.TensorProto.FLOAT, dims=a.shape,
                             data_location=onnx.TensorProto.EXTERNAL)
        t.external_data.add(key="location", value=os.path.basename(base) + ".bin")
        with open(base + ".pb", "wb") as f:
            f.write(t.SerializeToString())
        pbs.append(base + ".pb")

    # The model as a plain graph, one step at a time from the same past.
    want_logits, want_ids, token = [], [], TOKEN
    for s in range(STEPS):
        row = ROWS + s
        feeds = dict(pasts)
        feeds["input_ids"] = np.array([[token]], np.int64)
        feeds["attention_mask"] = np.ones([1, row + 1], np.int64)
        feeds["position_ids"] = np.array([[row]], np.int64)
        files = []
        for n in inputs:
            if n not in feeds:
                sys.exit("%s: input '%s' has no role in this test" % (model, n))
            files.append(os.path.join(work, "step%d_in_%d.pb" % (s, len(files))))
            save(files[-1], feeds[n], n)
        out_dir = os.path.join(work, "step%d" % s)
        os.mkdir(out_dir)
        run([collage, "run", model, "--input"] + files + ["--output-dir", out_dir])
        got = {n: numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "output_%d.pb" % k)))
               for k, n in enumerate(outputs)}
        logits = got["logits"].reshape(-1, got["logits"].shape[-1])[-1]
        want_logits.append(logits)
        token = int(np.argmax(logits))
        want_ids.append(token)
        pasts = {n: got[n.replace("past_key_values.", "present.")] for n in past_names}

    capacity = ROWS + STEPS + SPARE
    plan = []
    if mode == "plan":
        bindings = run([collage, "generate", model, "--prompt-ids", str(TOKEN), "--max-length", str(capacity),
                        "--print-bindings"]).split()
        run([collage, "optimize", model] + bindings + ["--backends", "native", "--db",
             os.path.join(work, "m.sqlite"), "-o", os.path.join(work, "plan.json"), "--budget", "10s"])
        plan = ["--plan", os.path.join(work, "plan.json")]
    logits_file = os.path.join(work, "logits.txt")
    out = run([collage, "generate", model, "--cache-in"] + pbs + ["--prompt-ids", str(TOKEN), "--max-new-tokens",
               str(STEPS), "--max-length", str(capacity), "--logits-out", logits_file] + plan)
    print(out)
    if mode == "plan" and "warning: the cache is copied" in out:
        sys.exit("FAIL: the plan's steps copy the cache")
    if "prefill: none: %d cache rows read from %d file(s)" % (ROWS, len(pbs)) not in out:
        sys.exit("FAIL: generate did not say it read %d rows from %d files" % (ROWS, len(pbs)))
    got_ids = [int(x) for x in re.search(r"^generated: (.*)$", out, re.M).group(1).split(",")]
    got_logits = np.loadtxt(logits_file, ndmin=2)
    failed = False
    for s in range(STEPS):
        err = np.abs(got_logits[s] - want_logits[s]).max() / np.abs(want_logits[s]).max()
        print("step %d at row %d: logits max err %.2e (over the largest |logit|)" % (s, ROWS + s, err))
        if not err <= 1e-4:
            failed = True
    if got_ids != want_ids:
        print("ids: generate %s, the plain graph %s" % (got_ids, want_ids))
        failed = True
    if failed:
        sys.exit("FAIL: %s (%s): generate --cache-in differs from the model run on the same past" % (model, mode))
    print("generate --cache-in matches the model run on the same past (%s, %d steps): %s" % (mode, STEPS, model))


if __name__ == "__main__":
    main()
