#!/usr/bin/env bash
# Substitutions cannot fool verification (docs/substitutions.md, "Every
# rewrite is checked"), on two small models built here with onnx's helper:
#  - rules that hold on [-1, 1] and nowhere else (a bounded Clip as its input,
#    Relu6 as Relu) are refused from a rule file (spec --check loads them:
#    they are well-formed; optimize drops them at FILE:LINE:COLUMN with the
#    values that tell them apart), and a plan that carries them is refused
#    when run loads it on the model;
#  - run --verify compares a plan with the model as given, never with its
#    own rewritten graph: a rewrite within the check's tolerance at its site
#    (fp32 -> fp16 -> fp32 taken for the identity) whose error the model
#    amplifies is a MISMATCH.
# Usage: rewrite_verification.sh COLLAGE
set -euo pipefail
collage=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

/usr/bin/python3 - <<'PY'
import hashlib, json
import numpy as np
import onnx
from onnx import TensorProto, helper

def save(name, nodes, inits, n=64):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])
    g = helper.make_graph(nodes, name, [x], [y], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, name + ".onnx")

def scalar(name, v):
    return helper.make_tensor(name, TensorProto.FLOAT, [], [v])

# x -> Relu6 (Clip 0..6) -> Sigmoid
save("relu6", [helper.make_node("Clip", ["x", "lo", "hi"], ["c"], name="relu6"),
               helper.make_node("Sigmoid", ["c"], ["y"], name="sig")],
     [scalar("lo", 0.0), scalar("hi", 6.0)])
# y = (float(half(x)) - x) * 1e4: the model measures its own rounding.
save("half", [helper.make_node("Cast", ["x"], ["h"], name="to16", to=TensorProto.FLOAT16),
              helper.make_node("Cast", ["h"], ["f"], name="to32", to=TensorProto.FLOAT),
              helper.make_node("Sub", ["f", "x"], ["d"], name="sub"),
              helper.make_node("Mul", ["d", "k"], ["y"], name="scale")],
     [scalar("k", 1e4)])

def plan(model, rules, subs, groups):
    sha = hashlib.sha256(open(model + ".onnx", "rb").read()).hexdigest()
    p = {"format": "collage-plan", "version": 1,
         "model": {"path": model + ".onnx", "sha256": sha},
         "substitution_rules": rules, "substitutions": subs,
         "groups": [{"backend": "native", "nodes": g} for g in groups]}
    json.dump(p, open(model + ".plan.json", "w"), indent=1)

plan("relu6", [{"name": "relu6-is-relu", "source": "Clip[min == 0, max == 6](x)", "target": "Relu(x)"}],
     [{"rule": "relu6-is-relu", "nodes": ["relu6"]}], [["relu6/Relu"], ["sig"]])
plan("half", [{"name": "half-round-trip-is-identity", "source": "Cast(Cast(x))", "target": "x"}],
     [{"rule": "half-round-trip-is-identity", "nodes": ["to16", "to32"]}], [["sub"], ["scale"]])
PY

cat > narrow.toml <<'TOML'
# Both hold on [-1, 1] and nowhere else.
[rules.clip6-is-identity]
source = "Clip[min == -6, max == 6](x)"
target = "x"

[rules.relu6-is-relu]
source = "Clip[min == 0, max == 6](x)"
target = "Relu(x)"
TOML
"$collage" spec --check narrow.toml | tee check.txt
grep -q "ok, 2 substitution rule(s) loaded" check.txt

# From a rule file: forced, dropped at its FILE:LINE:COLUMN with a counterexample.
"$collage" optimize relu6.onnx --db db.sqlite -o relu6.opt.json --no-end-to-end --op-level \
  --substitution-rules narrow.toml --substitute relu6-is-relu --substitution-budget 5s | tee optimize.txt
grep -q "narrow.toml:6:8: relu6-is-relu at relu6: dropped, not equivalent: .*counterexample: 'x'" optimize.txt
if grep -q '"relu6-is-relu"' relu6.opt.json; then
  echo "a rule that holds on [-1, 1] only reached the plan"; exit 1
fi

# Carried by a plan: refused when run loads it on the model.
if "$collage" run relu6.onnx --plan relu6.plan.json > run6.txt 2>&1; then
  cat run6.txt; echo "a plan carrying Relu6 -> Relu was run"; exit 1
fi
cat run6.txt
grep -q "relu6.plan.json: substitution_rules\[0\]:1:1: relu6-is-relu at relu6: dropped, not equivalent" run6.txt
grep -q "counterexample: 'x'" run6.txt

# --verify against the model as given: the plan replays (the half round trip
# is within the check's tolerance at its site), its outputs are the
# rewritten graph's exactly, and they are not the model's.
status=0
"$collage" run half.onnx --plan half.plan.json --verify > verify.txt 2>&1 || status=$?
cat verify.txt
[ "$status" -eq 3 ] || { echo "run --verify exited $status, not 3"; exit 1; }
grep -q "verify: against the model as given (the plan's 1 substitution(s) replayed, each checked)" verify.txt
grep -q "verify: MISMATCH: output 'y'" verify.txt
grep -q "verify: MISMATCH: the plan's substitutions change output 'y'" verify.txt
echo "rewrite verification ok"
