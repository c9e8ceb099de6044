#!/bin/bash
# Second device call: a forced mixed CPU+GPU plan verified, ResNet-50 and BERT
# on the GPU backends (op-level plan, verified, timed) beside PyTorch.
DEADLINE=${DEADLINE:-300}
source "$(dirname "$0")/device_env.sh"
(timeout 120 python3 bench/gpu/export_with_new_torch.py --models resnet50,bert_base --out /tmp/zoo --threads 8 > /tmp/export.log 2>&1; echo "export exit $?" >> /tmp/export.log) &
el "mixed: every Conv pinned to cudnn, the rest on the CPU"
f=resources/models/resnet50_small.onnx
timeout 60 $C optimize $f --op-level --no-end-to-end --backends native,onednn,cudnn --pin op:Conv=cudnn --db /tmp/db.sqlite -o /tmp/p_mixed.json > $OUT/mixed.log 2>&1; echo "rc=$?"
timeout 30 $C run $f --plan /tmp/p_mixed.json --verify --repeat 20 >> $OUT/mixed.log 2>&1
grep -E "^ *(cudnn|native|onednn) |copies|latency|verify: every|verify: output|rror" $OUT/mixed.log | cut -c1-200
wait; tail -4 /tmp/export.log
for m in resnet50 bert_base; do
  [ $(left) -lt 70 ] && { echo "skip $m: time"; continue; }
  f=/tmp/zoo/$m.onnx; [ -f $f ] || { echo "no $f"; continue; }
  el "$m: GPU plan"
  timeout $(( $(left) - 60 )) $C optimize $f --op-level --no-end-to-end --backends native,cudnn,cublas,cuda_fusion --db /tmp/db.sqlite -o /tmp/p_$m.json > /tmp/o_$m.txt 2>&1; echo "optimize rc=$?"
  grep -v "^measuring" /tmp/o_$m.txt | tail -22 | cut -c1-200
  timeout 40 $C run $f --plan /tmp/p_$m.json --verify --repeat 50 2>&1 | tail -8 | cut -c1-250
done > $OUT/big.log 2>&1
cat $OUT/big.log
el "PyTorch"
timeout 70 python3 bench/gpu/torch_peers.py resnet50,bert_base 1 2>&1 | grep RESULT
el done
