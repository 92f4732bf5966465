#!/usr/bin/env bash
# On a GPU machine: every CUDA test binary (packed into .carry/gpu/bin by
# scripts/device/pack_gpu.sh), data from .carry. Exits non-zero when any test
# binary fails (or times out).
set -u
source .carry/gpu/env.sh
export CORTIQ_SHARED_DATA=$PWD/.carry CORTIQ_SOURCE_DIR=$PWD CORTIQ_CLI=$PWD/.carry/gpu/bin/cortiq
export OMP_WAIT_POLICY=passive
failed=0
for t in ${TESTS:-test_cuda_encoder test_forward_gpu test_kernels_gpu test_calib_gpu test_blr_linear_gpu test_tune_grad_gpu test_qwen35_gpu}; do
  timeout ${TEST_S:-400} .carry/gpu/bin/$t > $OUT/$t.log 2>&1
  rc=$?
  [ $rc -ne 0 ] && failed=1
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/$t.log | tr '\n' ' ')"
  grep -E "FAILED|Failure|error" $OUT/$t.log | head -10
done
exit $failed
