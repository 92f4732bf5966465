#!/usr/bin/env bash
# Device call (issue 14): the second product's Σq term from the tile sums
# (CORTIQ_WIDE_SUM=tiles, default) against the signs' complement through the
# tensor cores (complement), and the four launches, side by side; the layer
# tests with the complement too.
set -u
TESTS="test_blr_linear_gpu" VARIANTS="CORTIQ_WIDE_SUM=complement CORTIQ_T_PLANES=launch" \
  bash scripts/device/decode_gpu.sh > $OUT/decode.log 2>&1
rc=$?
source .carry/gpu/env.sh
export CORTIQ_SHARED_DATA=$PWD/.carry CORTIQ_SOURCE_DIR=$PWD CORTIQ_CLI=$PWD/.carry/gpu/bin/cortiq
CORTIQ_WIDE_SUM=complement timeout 300 .carry/gpu/bin/test_blr_linear_gpu > $OUT/complement_tests.log 2>&1
r=$?; [ $r -ne 0 ] && rc=1
echo "complement: test_blr_linear_gpu rc=$r $(grep -E '^\[  (PASSED|FAILED)' $OUT/complement_tests.log | tr '\n' ' ')" >> $OUT/decode.log
grep -E "FAILED|Failure" $OUT/complement_tests.log | head >> $OUT/decode.log
cd $OUT && tar czf all_logs.tgz *.log && ls | grep -v -E '^(all_logs.tgz|bench_blr.log|decode.log|bench_CORTIQ.*log)$' | xargs rm -f
exit $rc
