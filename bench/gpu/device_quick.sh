#!/bin/bash
# One device call after a change to the GPU backends: the GPU unit tests and
# the GPU backends' conformance (in the background), then device_models.sh
# (a mixed CPU+GPU plan verified; ResNet-50 and BERT planned on the GPU
# backends, verified, timed beside PyTorch). Logs in $OUT.
DEADLINE=${DEADLINE:-480}
source "$(dirname "$0")/device_env.sh"
(timeout 150 build/tests/unit_tests --gtest_filter='Cublas*:Cuda*:Cudnn*:CopyCost*:Device*:SessionDevices*' \
   > $OUT/gpu_tests.log 2>&1; echo "exit $?" >> $OUT/gpu_tests.log) &
for be in cudnn cublas cuda_fusion; do
  (timeout 200 build/tests/conformance_runner $L/testdata --backend $be --list-failures > $OUT/conf_$be.log 2>&1
   echo "exit $?" >> $OUT/conf_$be.log) &
done
wait
el "GPU unit tests"; grep -E "^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\]|^exit" $OUT/gpu_tests.log | head -20
for be in cudnn cublas cuda_fusion; do echo "== conformance $be"; tail -6 $OUT/conf_$be.log; done
DEADLINE=$(left) bash bench/gpu/device_models.sh
