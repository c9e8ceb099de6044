#!/bin/bash
# One device call: GPU unit tests, conformance per GPU backend, mixed CPU+GPU
# plans verified on the small zoo, ResNet-50/BERT plans and PyTorch alongside.
set -u
DEADLINE=${DEADLINE:-400}
T0=$(date +%s); el(){ echo "[t=$(( $(date +%s)-T0 ))s] $*"; }
left(){ echo $(( DEADLINE - ($(date +%s)-T0) )); }
R=$(pwd); mkdir -p /work; [ -e /work/main ] || ln -s "$R" /work/main
cd /work/main
tar -xJf .devcarry/pack.tar.xz
L=/work/main/.devcarry/cs
mkdir -p /tmp/cudalibs /tmp/home /tmp/zoo
for n in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnvrtc.so.13 libcudnn.so.9; do
  f=$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name "$n" 2>/dev/null | head -1); echo "$n: $f"
  [ -n "$f" ] && for g in "$(dirname "$f")"/lib*.so*; do ln -sf "$g" /tmp/cudalibs/; done
done
export LD_LIBRARY_PATH=$L/lib:/tmp/cudalibs COLLAGE_CUDA_LIBRARY_DIR=/tmp/cudalibs HOME=/tmp/home
nvidia-smi -L; nproc
C=build/app/collage
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
