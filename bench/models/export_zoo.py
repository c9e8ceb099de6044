#!/usr/bin/python3
"""Export the Collage Studio model zoo to ONNX.

Every model gets random weights from a fixed seed (nothing is downloaded), is
exported in eval mode with constant folding and a dynamic batch dimension
named "batch", and is written together with one reference input and
PyTorch's output for it:

    <stem>.onnx           the model
    <stem>.input_0.pb     onnx.TensorProto, named after the graph input
    <stem>.output_0.pb    onnx.TensorProto, named after the graph output
    zoo.json              manifest of everything in the directory

<stem> is the model name, plus "_b<N>" when --batch N is not 1 and
"_opset<N>" when the opset is not the default (17).

Full-size models (default) go to $XDG_CACHE_HOME/collage-studio/zoo (or
~/.cache/collage-studio/zoo).  With --small, tiny variants with the same op
structure are written to resources/models/ of this repository, together with
two older-opset test models and a generated README.md.

Needs PyTorch 1.13, torchvision 0.14 and onnx 1.12 (Debian: python3-torch,
python3-torchvision, python3-onnx).  Run it with the interpreter that has
them, e.g. /usr/bin/python3.
"""

# The zoo in three modules: zoo_models (the networks, as Specs), zoo_export
# (one model to .onnx with its reference data, and the manifest) and
# zoo_checks (checker and shape inference). This file is the command line.
# Names other scripts read from here (peers/torch_runner.py) stay importable.

import argparse
import os
import sys

import onnx
import torch
import torchvision

from zoo_checks import validate
from zoo_export import (DEFAULT_OPSET, DEFAULT_SEED, REGENERATE_SMALL_CMD, SMALL_OUT_DIR,  # noqa: F401
                        _make_input, _model_seed, _randomize_norms, default_cache_dir, export_model,
                        write_manifest, write_small_readme)
from zoo_models import ALIASES, SMALL_EXTRAS, SMALL_NAMES, Spec, _full_specs, _small_specs  # noqa: F401


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="all",
                    help="comma-separated model names or 'all' (names: %s; with --small the "
                         "same names, optionally with the _small suffix)"
                    % ", ".join(s.name for s in _full_specs()))
    ap.add_argument("--batch", type=int, default=1, help="batch size of the reference data (default 1)")
    ap.add_argument("--out", help="output directory (default: %s; with --small: resources/models)"
                    % default_cache_dir())
    ap.add_argument("--small", action="store_true",
                    help="export the tiny variants (and the older-opset test models)")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset (default 17)")
    ap.add_argument("--force", action="store_true", help="re-export even if the files exist")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default 0)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--no-extras", action="store_true",
                    help="with --small: skip resnet50_small_opset9 and bert_small_opset13")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args(argv)

    torch.set_num_threads(max(1, args.threads))
    specs = _small_specs() if args.small else _full_specs()
    if args.list:
        for s in specs:
            print("%-24s %s" % (s.name, s.description))
        return 0
    if args.batch < 1:
        ap.error("--batch must be >= 1")
    if not 7 <= args.opset <= DEFAULT_OPSET:
        ap.error("--opset must be in [7, %d] (torch %s)" % (DEFAULT_OPSET, torch.__version__))

    by_name = {s.name: s for s in specs}
    if args.models.strip() == "all":
        selected = specs
    else:
        selected = []
        for raw in args.models.split(","):
            n = raw.strip()
            if not n:
                continue
            n = ALIASES.get(n, n)
            if args.small and not n.endswith("_small"):
                n = SMALL_NAMES.get(n, n + "_small")
            if n not in by_name:
                ap.error("unknown model %r (known: %s)" % (raw, ", ".join(by_name)))
            if by_name[n] not in selected:
                selected.append(by_name[n])

    out_dir = args.out or (SMALL_OUT_DIR if args.small else default_cache_dir())
    os.makedirs(out_dir, exist_ok=True)
    print("torch %s, torchvision %s, onnx %s; %d thread(s); out dir %s"
          % (torch.__version__, torchvision.__version__, onnx.__version__, torch.get_num_threads(), out_dir))

    entries = []
    for spec in selected:
        entries.append(export_model(spec, out_dir, args.batch, args.opset, args.seed, args.force))
        if args.small and not args.no_extras and spec.name in SMALL_EXTRAS:
            extra_name, extra_opset = SMALL_EXTRAS[spec.name]
            extra_spec = spec._replace(description=spec.description + "; opset %d variant" % extra_opset)
            # The extra's name already carries its opset: write it without a second suffix.
            e = export_model(extra_spec, out_dir, args.batch, extra_opset, args.seed, args.force,
                             out_name=extra_name[: -len("_opset%d" % extra_opset)], opset_fallback=True)
            entries.append(e)

    manifest = write_manifest(out_dir, entries)
    print("\nvalidation (onnx.checker + shape inference):")
    all_ops = set()
    for e in entries:
        all_ops |= validate(e, out_dir)
    print("\ndistinct op types (%d): %s" % (len(all_ops), " ".join(sorted(all_ops))))
    if args.small and out_dir == SMALL_OUT_DIR:
        write_small_readme(out_dir, manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
