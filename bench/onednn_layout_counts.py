#!/usr/bin/python3
"""Count what oneDNN executes in one run of a plan (issue 24, item 2).

Runs `collage run MODEL --plan PLAN` with ONEDNN_VERBOSE=1 and
COLLAGE_KERNEL_MARKS=1 (the Session prints a line before each kernel), takes
the last run, and reports:

  gemm_conv     convolutions oneDNN ran as im2col + GEMM (impl "x64:gemm:jit")
  conv          all convolutions
  reorders      all reorders
  inner         reorders inside a oneDNN run: a maximal sequence of oneDNN
                kernels that run one after another, counting the reorders after
                its first computing primitive and before its last one (the
                reorders at a run's two ends feed or leave other backends)
                that change the layout
  inner_copies  the same, between two memories of one layout (a residual
                copied into a sum post-op's destination)
  runs          such runs of oneDNN kernels

usage: onednn_layout_counts.py COLLAGE MODEL PLAN [--threads N]
"""
import os
import subprocess
import sys


def counts(collage, model, plan, threads=2):
    env = dict(os.environ, ONEDNN_VERBOSE="1", COLLAGE_KERNEL_MARKS="1")
    out = subprocess.run([collage, "--threads", str(threads), "run", model, "--plan", plan,
                          "--repeat", "1"], env=env, capture_output=True, text=True, check=True).stdout
    runs, kernels = [], None  # runs of the plan: [(group, backend, [(kind, impl)])]
    for line in out.splitlines():
        f = line.split(",")
        if f[0] == "collage_kernel":
            group = int(f[1])
            if kernels is None or (kernels and group == runs[-1][0][0]):
                runs.append([])
            kernels = runs[-1]
            kernels.append((group, f[2], []))
        elif f[0] == "onednn_verbose" and len(f) > 4 and f[1] == "exec" and kernels is not None:
            mds = f[6].split()
            same = (f[3] == "reorder" and len(mds) == 2 and
                    mds[0].split(":", 1)[1] == mds[1].split(":", 1)[1])
            kernels[-1][2].append(("copy" if same else f[3], f[4]))
    last = runs[-1]
    c = dict(gemm_conv=0, conv=0, reorders=0, inner=0, inner_copies=0, runs=0)
    seq = []  # the current run of oneDNN kernels, flattened primitives

    def close():
        if not seq:
            return
        c["runs"] += 1
        compute = [i for i, (k, _) in enumerate(seq) if k not in ("reorder", "copy")]
        if compute:
            for key, kind in (("inner", "reorder"), ("inner_copies", "copy")):
                c[key] += sum(1 for i, (k, _) in enumerate(seq)
                              if k == kind and compute[0] < i < compute[-1])
        seq.clear()

    for _, backend, prims in last:
        if backend != "onednn":
            close()
            continue
        for kind, impl in prims:
            c["conv"] += kind == "convolution"
            c["gemm_conv"] += kind == "convolution" and "gemm" in impl
            c["reorders"] += kind in ("reorder", "copy")
        seq.extend(prims)
    close()
    return c


if __name__ == "__main__":
    a = sys.argv[1:]
    threads = 2
    if "--threads" in a:
        i = a.index("--threads")
        threads = int(a[i + 1])
        del a[i:i + 2]
    print(counts(a[0], a[1], a[2], threads))
