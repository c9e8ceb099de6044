#!/bin/bash
# One device call: GPU unit tests, conformance per GPU backend, mixed CPU+GPU
# plans verified on the small zoo, ResNet-50/BERT plans and PyTorch alongside.
DEADLINE=${DEADLINE:-400}
source "$(dirname "$0")/device_env.sh"
el "GPU unit tests"
timeout 120 build/tests/unit_tests --gtest_filter='Cublas*:Cuda*:Cudnn*:CopyCost*:Device*:SessionDevices*' > $OUT/gpu_tests.log 2>&1
echo "rc=$?"; grep -E "^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\]" $OUT/gpu_tests.log | head -40
el "conformance (background) and model export (background)"
for be in ${BACKENDS:-cudnn cublas cublas_tf32 cuda_fusion}; do
  (timeout ${CONF_T:-200} build/tests/conformance_runner $L/testdata --backend $be --list-failures > $OUT/conf_$be.log 2>&1; echo "exit $?" >> $OUT/conf_$be.log) &
done
(timeout 200 python3 bench/gpu/export_with_new_torch.py --models ${BIG:-resnet50,bert_base} --out /tmp/zoo --threads 8 > /tmp/export.log 2>&1; echo "export exit $?" >> /tmp/export.log) &
el "small zoo: mixed CPU+GPU plans, op-level, verified"
for m in ${SMALL:-resnet50_small bert_small mobilenet_v2_small gpt2_small efficientnet_b0_small vit_b_16_small}; do
  [ $(left) -lt 150 ] && { echo "skip $m: time"; continue; }
  f=resources/models/$m.onnx
  timeout 90 $C optimize $f --op-level --db /tmp/db.sqlite -o /tmp/p_$m.json > /tmp/o_$m.txt 2>&1; rc=$?
  echo "== $m optimize rc=$rc"; grep -E "^(plan|measured|copies|backend|total|end to end|error)|cuda|cudnn|cublas|rror" /tmp/o_$m.txt | head -25
  [ $rc = 0 ] && timeout 40 $C run $f --plan /tmp/p_$m.json --verify --repeat 20 2>&1 | tail -8
done > $OUT/zoo.log 2>&1
cat $OUT/zoo.log | head -150
wait
el "conformance summaries"
for be in ${BACKENDS:-cudnn cublas cublas_tf32 cuda_fusion}; do echo "== $be"; tail -25 $OUT/conf_$be.log; done
cat /tmp/export.log | tail -8
for m in ${BIG_RUN:-resnet50 bert_base}; do
  [ $(left) -lt 60 ] && { echo "skip $m: time"; continue; }
  f=/tmp/zoo/$m.onnx; [ -f $f ] || continue
  el "$m: GPU plan"
  timeout $(( $(left) / 2 )) $C optimize $f --op-level --backends native,onednn,cudnn,cublas,cuda_fusion --db /tmp/db.sqlite -o /tmp/p_$m.json > /tmp/o_$m.txt 2>&1; echo "optimize rc=$?"
  tail -30 /tmp/o_$m.txt
  timeout 60 $C run $f --plan /tmp/p_$m.json --verify --repeat 50 2>&1 | tail -10
done > $OUT/big.log 2>&1
cat $OUT/big.log
[ $(left) -gt 40 ] && timeout $(( $(left) - 5 )) python3 bench/gpu/torch_peers.py resnet50,bert_base 1 2>&1 | grep -v Warning | tail -12
el done
