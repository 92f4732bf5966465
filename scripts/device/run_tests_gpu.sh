#!/usr/bin/env bash
# On a GPU machine: every CUDA test binary (packed into .carry/gpu/bin by
# scripts/device/pack_gpu.sh), data from .carry. Exits non-zero when any test
# binary fails (or times out) or passes no test at all. This machine has the
# GPU and the data: a test that would skip for want of either fails instead
# (CORTIQ_REQUIRE_GPU, CORTIQ_REQUIRE_DATA), so that a driver the binaries
# cannot use shows as failures, not as a run of skips. CORTIQ_REQUIRE_DATA=0
# lets the tests of models left out of the carry (it holds 64 MiB with the
# tree) skip; each skip is listed.
set -u
source .carry/gpu/env.sh
export CORTIQ_SHARED_DATA=$PWD/.carry CORTIQ_SOURCE_DIR=$PWD CORTIQ_CLI=$PWD/.carry/gpu/bin/cortiq
export CORTIQ_REQUIRE_GPU=1 CORTIQ_REQUIRE_DATA=${CORTIQ_REQUIRE_DATA:-1}
export OMP_WAIT_POLICY=passive
failed=0
for t in ${TESTS:-test_cuda_encoder test_embedding_gpu test_cuda_knots test_forward_gpu test_kernels_gpu test_calib_gpu test_blr_linear_gpu test_tune_grad_gpu test_tune_delta_grad_gpu test_qwen35_gpu test_decode_gpu}; do
  # a later call replaces .carry (and drops the extracted binaries) under a
  # run left going in the background: extract them again
  [ -d .carry/gpu/bin ] || source .carry/gpu/env.sh
  timeout ${TEST_S:-400} .carry/gpu/bin/$t > $OUT/$t.log 2>&1
  rc=$?
  [ $rc -ne 0 ] && failed=1
  grep -qE '^\[  PASSED  \] [1-9]' $OUT/$t.log || { echo "$t: no test passed"; failed=1; }
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/$t.log | tr '\n' ' ')"
  grep -E "FAILED|Failure|error" $OUT/$t.log | head -10
  grep -E '^\[  SKIPPED \] [A-Za-z]' $OUT/$t.log | head -20
done
exit $failed
